//! Identify (admin opcode 0x06): the command view and the data structures it returns: Identify Controller, Identify Namespace, Active Namespace ID list and the Namespace Identification Descriptor list.
//!
//! NVMe Base 2.0 §5.17 (Identify command, Figures 273–275), Figure 275 (Identify Controller data
//! structure), NVM Command Set 1.0 Figure 97 (Identify Namespace), Base 2.0 Figure 278 (Namespace
//! Identification Descriptor). Byte offsets were checked against Linux `include/linux/nvme.h`
//! (`struct nvme_identify`, `nvme_id_ctrl`, `nvme_id_ns`, `nvme_ns_id_desc`) and libnvme `types.h`.
//!
//! Every Identify data structure is 4096 bytes ([`IDENTIFY_DATA_SIZE`]). Parsers borrow from the input
//! and never allocate; encoders write the full 4096 bytes, zeroing everything they do not own.

use super::opcode;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{
    ascii_field, fixed, fixed_mut, high_half, le128, le16, le32, le64, low_byte, low_half, put128, put16, put32, put64,
    put_ascii_field, top_byte, WireError,
};

/// Size of every Identify data structure (Linux `NVME_IDENTIFY_DATA_SIZE`).
pub const IDENTIFY_DATA_SIZE: usize = 4096;

/// Number of NSIDs a 4096-byte namespace list holds (Identify CNS 02h, Changed Namespace List log).
pub const NSID_LIST_ENTRIES: usize = 1024;

/// The broadcast NSID (all namespaces); never a valid entry in a namespace list.
pub const NSID_BROADCAST: u32 = 0xFFFF_FFFF;

/// Controller or Namespace Structure (CNS) values (Base 2.0 Figure 274) this crate serves.
pub mod cns {
    /// Identify Namespace data structure for the NSID.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller data structure.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list: active NSIDs greater than the NSID in the command.
    pub const ACTIVE_NAMESPACE_ID_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list for the NSID.
    pub const NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Controller data structure for the CSI in the command (for the NVM
    /// command set: VSL, WZSL, WUSL, DMRL, DMRSL, DMSL; NVM Command Set 1.0 Figure 97).
    pub const IO_COMMAND_SET_CONTROLLER: u8 = 0x06;
}

/// Command Set Identifier values (Base 2.0 Figure 286) used in Identify and Get Log Page.
pub mod csi {
    /// NVM Command Set.
    pub const NVM: u8 = 0x00;
    /// Key Value Command Set.
    pub const KEY_VALUE: u8 = 0x01;
    /// Zoned Namespace Command Set.
    pub const ZONED: u8 = 0x02;
}

const IDENTIFY: &str = "Identify";

/// The Identify command (Base 2.0 §5.17, Figures 273–275): CNS in CDW10 bits 7:0, CNTID in CDW10
/// bits 31:16, CNS Specific Identifier in CDW11 bits 15:0 and CSI in CDW11 bits 31:24. The data
/// (always 4096 bytes) travels controller to host through SGL1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identify {
    /// Namespace Identifier; its meaning depends on `cns`.
    pub nsid: u32,
    /// Controller or Namespace Structure (see [`cns`]).
    pub cns: u8,
    /// Controller Identifier (CNTID), used by controller-list CNS values.
    pub cntid: u16,
    /// CNS Specific Identifier (CNSSID, CDW11 bits 15:0).
    pub cnssid: u16,
    /// Command Set Identifier (CSI, CDW11 bits 31:24), see [`csi`].
    pub csi: u8,
}

impl Identify {
    /// An Identify of structure `cns` for `nsid`, all else zero.
    pub fn new(cns: u8, nsid: u32) -> Self {
        Identify { nsid, cns, ..Default::default() }
    }

    /// The view of an Identify SQE. Errors if the opcode is not Identify.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::IDENTIFY, IDENTIFY, "0x06 (Identify)")?;
        Ok(Identify {
            nsid: sqe.nsid,
            cns: low_byte(sqe.cdw10),
            cntid: high_half(sqe.cdw10),
            cnssid: low_half(sqe.cdw11),
            csi: top_byte(sqe.cdw11),
        })
    }

    /// The SQE for this command (CID and SGL1 left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::IDENTIFY);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.cns) | (u32::from(self.cntid) << 16);
        sqe.cdw11 = u32::from(self.cnssid) | (u32::from(self.csi) << 24);
        sqe
    }
}

/// Copy `N` bytes at `off` into an array. The caller guarantees the range is in bounds.
fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

// ---------------------------------------------------------------------------------------------------
// Identify Controller
// ---------------------------------------------------------------------------------------------------

const ID_CTRL: &str = "IdentifyController";

/// Longest NQN the 256-byte SUBNQN field may hold (Linux `NVMF_NQN_SIZE`).
pub const NQN_MAX_LEN: usize = 223;

/// Identify Controller data structure (CNS 01h; Base 2.0 Figure 275, Linux `struct nvme_id_ctrl`),
/// 4096 bytes: the fields a fabrics target fills and a host reads. Fields not listed here encode as
/// zero (power state descriptors, thermal thresholds, vendor specific area, …).
///
/// `sn`, `mn` and `fr` are space-padded ASCII on the wire and held here without the trailing spaces;
/// `subnqn` is NUL-padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdentifyController<'a> {
    /// PCI Vendor ID (bytes 1:0).
    pub vid: u16,
    /// PCI Subsystem Vendor ID (bytes 3:2).
    pub ssvid: u16,
    /// Serial Number (bytes 23:4), at most 20 ASCII characters.
    pub sn: &'a str,
    /// Model Number (bytes 63:24), at most 40 ASCII characters.
    pub mn: &'a str,
    /// Firmware Revision (bytes 71:64), at most 8 ASCII characters.
    pub fr: &'a str,
    /// Recommended Arbitration Burst (byte 72).
    pub rab: u8,
    /// IEEE OUI Identifier (bytes 75:73), least significant byte first.
    pub ieee: [u8; 3],
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (byte 76), see `CMIC_*`.
    pub cmic: u8,
    /// Maximum Data Transfer Size (byte 77): a power of two in units of CAP.MPSMIN; 0 = no limit.
    pub mdts: u8,
    /// Controller ID (bytes 79:78).
    pub cntlid: u16,
    /// Version (bytes 83:80), same layout as the VS property.
    pub ver: u32,
    /// RTD3 Resume Latency in microseconds (bytes 87:84).
    pub rtd3r: u32,
    /// RTD3 Entry Latency in microseconds (bytes 91:88).
    pub rtd3e: u32,
    /// Optional Asynchronous Events Supported (bytes 95:92), see `OAES_*`.
    pub oaes: u32,
    /// Controller Attributes (bytes 99:96), see `CTRATT_*`.
    pub ctratt: u32,
    /// Controller Type (byte 111), see `CNTRLTYPE_*`.
    pub cntrltype: u8,
    /// FRU Globally Unique Identifier (bytes 127:112).
    pub fguid: [u8; 16],
    /// Optional Admin Command Support (bytes 257:256).
    pub oacs: u16,
    /// Abort Command Limit (byte 258), 0's based.
    pub acl: u8,
    /// Asynchronous Event Request Limit (byte 259), 0's based.
    pub aerl: u8,
    /// Firmware Updates (byte 260).
    pub frmw: u8,
    /// Log Page Attributes (byte 261), see `LPA_*`.
    pub lpa: u8,
    /// Error Log Page Entries (byte 262), 0's based.
    pub elpe: u8,
    /// Number of Power States Support (byte 263), 0's based.
    pub npss: u8,
    /// Keep Alive Support (bytes 321:320): granularity in units of 100 ms; 0 = not supported.
    pub kas: u16,
    /// Submission Queue Entry Size (byte 512): bits 3:0 required, 7:4 maximum, as powers of two.
    pub sqes: u8,
    /// Completion Queue Entry Size (byte 513): bits 3:0 required, 7:4 maximum, as powers of two.
    pub cqes: u8,
    /// Maximum Outstanding Commands (bytes 515:514); fabrics controllers set it.
    pub maxcmd: u16,
    /// Number of Namespaces (bytes 519:516): the largest NSID the controller may use.
    pub nn: u32,
    /// Optional NVM Command Support (bytes 521:520), see `ONCS_*`.
    pub oncs: u16,
    /// Fused Operation Support (bytes 523:522).
    pub fuses: u16,
    /// Format NVM Attributes (byte 524).
    pub fna: u8,
    /// Volatile Write Cache (byte 525), see `VWC_*`.
    pub vwc: u8,
    /// Atomic Write Unit Normal (bytes 527:526), 0's based, in logical blocks.
    pub awun: u16,
    /// Atomic Write Unit Power Fail (bytes 529:528), 0's based, in logical blocks.
    pub awupf: u16,
    /// SGL Support (bytes 539:536), see `SGLS_*`.
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces (bytes 543:540).
    pub mnan: u32,
    /// NVM Subsystem NVMe Qualified Name (bytes 1023:768), NUL-padded, at most 223 bytes.
    pub subnqn: &'a str,
    /// I/O Queue Command Capsule Supported Size (bytes 1795:1792), in 16-byte units, SQE included.
    pub ioccsz: u32,
    /// I/O Queue Response Capsule Supported Size (bytes 1799:1796), in 16-byte units, CQE included.
    pub iorcsz: u32,
    /// In Capsule Data Offset (bytes 1801:1800), in 16-byte units after the end of the SQE.
    pub icdoff: u16,
    /// Fabrics Controller Attributes (byte 1802), see `FCATT_*`.
    pub fcatt: u8,
    /// Maximum SGL Data Block Descriptors (byte 1803); 0 = no limit.
    pub msdbd: u8,
    /// Optional Fabric Commands Support (bytes 1805:1804), see `OFCS_*`.
    pub ofcs: u16,
}

impl IdentifyController<'_> {
    /// CMIC bit 0: the NVM subsystem may have more than one port.
    pub const CMIC_MULTI_PORT: u8 = 1 << 0;
    /// CMIC bit 1: the NVM subsystem may have more than one controller.
    pub const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;
    /// CMIC bit 2: the controller is associated with an SR-IOV virtual function.
    pub const CMIC_SRIOV: u8 = 1 << 2;
    /// CMIC bit 3: Asymmetric Namespace Access Reporting supported.
    pub const CMIC_ANA_REPORTING: u8 = 1 << 3;

    /// OAES bit 8: Namespace Attribute Notices supported.
    pub const OAES_NAMESPACE_ATTRIBUTE_NOTICES: u32 = 1 << 8;
    /// OAES bit 9: Firmware Activation Notices supported.
    pub const OAES_FIRMWARE_ACTIVATION_NOTICES: u32 = 1 << 9;
    /// OAES bit 11: Asymmetric Namespace Access Change Notices supported.
    pub const OAES_ANA_CHANGE_NOTICES: u32 = 1 << 11;
    /// OAES bit 31: Discovery Log Page Change Notification supported (discovery controllers).
    pub const OAES_DISCOVERY_LOG_PAGE_CHANGE: u32 = 1 << 31;

    /// CTRATT bit 0: 128-bit Host Identifier supported.
    pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
    /// CTRATT bit 6: Traffic Based Keep Alive supported.
    pub const CTRATT_TBKAS: u32 = 1 << 6;

    /// CNTRLTYPE 1: I/O controller.
    pub const CNTRLTYPE_IO: u8 = 1;
    /// CNTRLTYPE 2: Discovery controller.
    pub const CNTRLTYPE_DISCOVERY: u8 = 2;
    /// CNTRLTYPE 3: Administrative controller.
    pub const CNTRLTYPE_ADMIN: u8 = 3;

    /// LPA bit 0: SMART / Health log page per namespace.
    pub const LPA_SMART_PER_NAMESPACE: u8 = 1 << 0;
    /// LPA bit 1: Commands Supported and Effects log page supported.
    pub const LPA_COMMAND_EFFECTS: u8 = 1 << 1;
    /// LPA bit 2: extended data for Get Log Page (NUMDU, LPOL/LPOU) supported.
    pub const LPA_EXTENDED_DATA: u8 = 1 << 2;

    /// ONCS bit 0: Compare.
    pub const ONCS_COMPARE: u16 = 1 << 0;
    /// ONCS bit 1: Write Uncorrectable.
    pub const ONCS_WRITE_UNCORRECTABLE: u16 = 1 << 1;
    /// ONCS bit 2: Dataset Management.
    pub const ONCS_DATASET_MANAGEMENT: u16 = 1 << 2;
    /// ONCS bit 3: Write Zeroes.
    pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
    /// ONCS bit 4: Save field in Set Features and Select field in Get Features.
    pub const ONCS_SAVE_SELECT_FEATURES: u16 = 1 << 4;
    /// ONCS bit 5: Reservations.
    pub const ONCS_RESERVATIONS: u16 = 1 << 5;
    /// ONCS bit 6: Timestamp feature.
    pub const ONCS_TIMESTAMP: u16 = 1 << 6;
    /// ONCS bit 7: Verify.
    pub const ONCS_VERIFY: u16 = 1 << 7;

    /// VWC bit 0: a volatile write cache is present.
    pub const VWC_PRESENT: u8 = 1 << 0;
    /// VWC bits 2:1 = 11b: Flush with the broadcast NSID is supported.
    pub const VWC_FLUSH_BROADCAST_SUPPORTED: u8 = 0b11 << 1;

    /// SGLS bits 1:0 = 01b: SGLs supported, no alignment or granularity requirement.
    pub const SGLS_SUPPORTED_BYTE_ALIGNED: u32 = 0b01;
    /// SGLS bits 1:0 = 10b: SGLs supported with dword alignment and granularity.
    pub const SGLS_SUPPORTED_DWORD_ALIGNED: u32 = 0b10;
    /// SGLS bits 1:0: the SGL support field.
    pub const SGLS_SUPPORT_MASK: u32 = 0b11;
    /// SGLS bit 2: Keyed SGL Data Block descriptor supported.
    pub const SGLS_KEYED_DATA_BLOCK: u32 = 1 << 2;
    /// SGLS bit 16: SGL Bit Bucket descriptor supported.
    pub const SGLS_BIT_BUCKET: u32 = 1 << 16;
    /// SGLS bit 17: byte-aligned contiguous metadata buffer supported.
    pub const SGLS_METADATA_BYTE_ALIGNED: u32 = 1 << 17;
    /// SGLS bit 18: SGL longer than the data transferred supported.
    pub const SGLS_OVERSIZE: u32 = 1 << 18;
    /// SGLS bit 19: MPTR holding an SGL descriptor supported.
    pub const SGLS_METADATA_SGL: u32 = 1 << 19;
    /// SGLS bit 20: Address field as an offset (in-capsule data) supported.
    pub const SGLS_ADDRESS_AS_OFFSET: u32 = 1 << 20;
    /// SGLS bit 21: Transport SGL Data Block descriptor supported.
    pub const SGLS_TRANSPORT_DATA_BLOCK: u32 = 1 << 21;

    /// FCATT bit 0: static controller model (cleared: dynamic).
    pub const FCATT_STATIC_CONTROLLER_MODEL: u8 = 1 << 0;

    /// OFCS bit 0: Disconnect command (deleting individual I/O queues) supported.
    pub const OFCS_DISCONNECT: u16 = 1 << 0;
}

impl<'a> IdentifyController<'a> {
    /// ONCS has every bit of `bits`.
    pub fn oncs_has(&self, bits: u16) -> bool {
        self.oncs & bits == bits
    }

    /// A volatile write cache is present (VWC bit 0).
    pub fn vwc_present(&self) -> bool {
        self.vwc & Self::VWC_PRESENT != 0
    }

    /// The SGL support field (SGLS bits 1:0); 0 means SGLs are not supported.
    pub fn sgl_support(&self) -> u32 {
        self.sgls & Self::SGLS_SUPPORT_MASK
    }

    /// Namespace Attribute Notices are supported (OAES bit 8).
    pub fn namespace_attribute_notices(&self) -> bool {
        self.oaes & Self::OAES_NAMESPACE_ATTRIBUTE_NOTICES != 0
    }

    /// Encode into the first 4096 bytes of `buf`, zeroing every byte not covered by a field.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, ID_CTRL)?;
        b.fill(0);
        put16(b, 0, self.vid);
        put16(b, 2, self.ssvid);
        put_ascii_field(&mut b[4..24], self.sn, b' ', ID_CTRL, "sn")?;
        put_ascii_field(&mut b[24..64], self.mn, b' ', ID_CTRL, "mn")?;
        put_ascii_field(&mut b[64..72], self.fr, b' ', ID_CTRL, "fr")?;
        b[72] = self.rab;
        b[73..76].copy_from_slice(&self.ieee);
        b[76] = self.cmic;
        b[77] = self.mdts;
        put16(b, 78, self.cntlid);
        put32(b, 80, self.ver);
        put32(b, 84, self.rtd3r);
        put32(b, 88, self.rtd3e);
        put32(b, 92, self.oaes);
        put32(b, 96, self.ctratt);
        b[111] = self.cntrltype;
        b[112..128].copy_from_slice(&self.fguid);
        put16(b, 256, self.oacs);
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        b[263] = self.npss;
        put16(b, 320, self.kas);
        b[512] = self.sqes;
        b[513] = self.cqes;
        put16(b, 514, self.maxcmd);
        put32(b, 516, self.nn);
        put16(b, 520, self.oncs);
        put16(b, 522, self.fuses);
        b[524] = self.fna;
        b[525] = self.vwc;
        put16(b, 526, self.awun);
        put16(b, 528, self.awupf);
        put32(b, 536, self.sgls);
        put32(b, 540, self.mnan);
        if self.subnqn.len() > NQN_MAX_LEN {
            return Err(WireError::InvalidText {
                structure: ID_CTRL,
                field: "subnqn",
                reason: "longer than 223 bytes",
            });
        }
        put_ascii_field(&mut b[768..1024], self.subnqn, 0, ID_CTRL, "subnqn")?;
        put32(b, 1792, self.ioccsz);
        put32(b, 1796, self.iorcsz);
        put16(b, 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
        put16(b, 1804, self.ofcs);
        Ok(())
    }

    /// The structure as 4096 bytes.
    pub fn to_bytes(&self) -> Result<[u8; IDENTIFY_DATA_SIZE], WireError> {
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        self.encode(&mut b)?;
        Ok(b)
    }

    /// Parse the first 4096 bytes of `buf`, borrowing the text fields. Text must be printable ASCII;
    /// `sn`, `mn` and `fr` lose their trailing space padding.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let b = fixed::<IDENTIFY_DATA_SIZE>(buf, ID_CTRL)?;
        let subnqn = ascii_field(&b[768..1024], ID_CTRL, "subnqn")?;
        if subnqn.len() > NQN_MAX_LEN {
            return Err(WireError::InvalidText {
                structure: ID_CTRL,
                field: "subnqn",
                reason: "longer than 223 bytes",
            });
        }
        Ok(IdentifyController {
            vid: le16(b, 0),
            ssvid: le16(b, 2),
            sn: ascii_field(&b[4..24], ID_CTRL, "sn")?.trim_end_matches(' '),
            mn: ascii_field(&b[24..64], ID_CTRL, "mn")?.trim_end_matches(' '),
            fr: ascii_field(&b[64..72], ID_CTRL, "fr")?.trim_end_matches(' '),
            rab: b[72],
            ieee: array(b, 73),
            cmic: b[76],
            mdts: b[77],
            cntlid: le16(b, 78),
            ver: le32(b, 80),
            rtd3r: le32(b, 84),
            rtd3e: le32(b, 88),
            oaes: le32(b, 92),
            ctratt: le32(b, 96),
            cntrltype: b[111],
            fguid: array(b, 112),
            oacs: le16(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            npss: b[263],
            kas: le16(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: le16(b, 514),
            nn: le32(b, 516),
            oncs: le16(b, 520),
            fuses: le16(b, 522),
            fna: b[524],
            vwc: b[525],
            awun: le16(b, 526),
            awupf: le16(b, 528),
            sgls: le32(b, 536),
            mnan: le32(b, 540),
            subnqn,
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: le16(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
            ofcs: le16(b, 1804),
        })
    }
}

// ---------------------------------------------------------------------------------------------------
// Identify Namespace
// ---------------------------------------------------------------------------------------------------

const ID_NS: &str = "IdentifyNamespace";

/// Number of LBA formats this crate models (the NVMe 1.4 count; NVMe 2.0's formats 16..63 at bytes
/// 383:192 encode as zero and are ignored on parse).
pub const LBA_FORMATS: usize = 16;

/// One LBA Format entry (NVM Command Set 1.0 Figure 98, Linux `struct nvme_lbaf`), 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LbaFormat {
    /// Metadata Size in bytes per logical block (bytes 1:0).
    pub ms: u16,
    /// LBA Data Size as a power of two (byte 2); 0 = format not supported.
    pub lbads: u8,
    /// Relative Performance (byte 3 bits 1:0): 0 best … 3 degraded. Bits 7:2 are reserved and dropped.
    pub rp: u8,
}

impl LbaFormat {
    /// A format of `2^lbads` data bytes without metadata, best performance.
    pub fn new(lbads: u8) -> Self {
        LbaFormat { ms: 0, lbads, rp: 0 }
    }

    fn parse(b: &[u8], off: usize) -> Self {
        LbaFormat { ms: le16(b, off), lbads: b[off + 2], rp: b[off + 3] & 0b11 }
    }

    fn encode(&self, b: &mut [u8], off: usize) {
        put16(b, off, self.ms);
        b[off + 2] = self.lbads;
        b[off + 3] = self.rp & 0b11;
    }
}

/// Identify Namespace data structure (CNS 00h; NVM Command Set 1.0 Figure 97, Linux
/// `struct nvme_id_ns`), 4096 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdentifyNamespace {
    /// Namespace Size in logical blocks (bytes 7:0).
    pub nsze: u64,
    /// Namespace Capacity in logical blocks (bytes 15:8).
    pub ncap: u64,
    /// Namespace Utilization in logical blocks (bytes 23:16).
    pub nuse: u64,
    /// Namespace Features (byte 24), see `NSFEAT_*`.
    pub nsfeat: u8,
    /// Number of LBA Formats (byte 25), 0's based.
    pub nlbaf: u8,
    /// Formatted LBA Size (byte 26): format index in bits 3:0 (and 6:5 as its upper bits),
    /// extended-LBA metadata in bit 4.
    pub flbas: u8,
    /// Metadata Capabilities (byte 27).
    pub mc: u8,
    /// End-to-end Data Protection Capabilities (byte 28).
    pub dpc: u8,
    /// End-to-end Data Protection Type Settings (byte 29).
    pub dps: u8,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities (byte 30), see `NMIC_*`.
    pub nmic: u8,
    /// Reservation Capabilities (byte 31).
    pub rescap: u8,
    /// Format Progress Indicator (byte 32).
    pub fpi: u8,
    /// Deallocate Logical Block Features (byte 33).
    pub dlfeat: u8,
    /// Namespace Atomic Write Unit Normal (bytes 35:34), 0's based.
    pub nawun: u16,
    /// Namespace Atomic Write Unit Power Fail (bytes 37:36), 0's based.
    pub nawupf: u16,
    /// Namespace Atomic Compare & Write Unit (bytes 39:38), 0's based.
    pub nacwu: u16,
    /// Namespace Atomic Boundary Size Normal (bytes 41:40).
    pub nabsn: u16,
    /// Namespace Atomic Boundary Offset (bytes 43:42).
    pub nabo: u16,
    /// Namespace Atomic Boundary Size Power Fail (bytes 45:44).
    pub nabspf: u16,
    /// Namespace Optimal I/O Boundary in logical blocks (bytes 47:46).
    pub noiob: u16,
    /// NVM Capacity in bytes (bytes 63:48).
    pub nvmcap: u128,
    /// Namespace Preferred Write Granularity (bytes 65:64), 0's based.
    pub npwg: u16,
    /// Namespace Preferred Write Alignment (bytes 67:66), 0's based.
    pub npwa: u16,
    /// Namespace Preferred Deallocate Granularity (bytes 69:68), 0's based.
    pub npdg: u16,
    /// Namespace Preferred Deallocate Alignment (bytes 71:70), 0's based.
    pub npda: u16,
    /// Namespace Optimal Write Size (bytes 73:72), 0's based.
    pub nows: u16,
    /// ANA Group Identifier (bytes 95:92).
    pub anagrpid: u32,
    /// Namespace Attributes (byte 99), see `NSATTR_*`.
    pub nsattr: u8,
    /// NVM Set Identifier (bytes 101:100).
    pub nvmsetid: u16,
    /// Endurance Group Identifier (bytes 103:102).
    pub endgid: u16,
    /// Namespace Globally Unique Identifier (bytes 119:104).
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier (bytes 127:120).
    pub eui64: [u8; 8],
    /// LBA Format 0..15 support (bytes 191:128), 4 bytes each.
    pub lbaf: [LbaFormat; LBA_FORMATS],
}

impl IdentifyNamespace {
    /// NSFEAT bit 0: thin provisioning.
    pub const NSFEAT_THIN_PROVISIONING: u8 = 1 << 0;
    /// NSFEAT bit 1: NAWUN, NAWUPF and NACWU are defined.
    pub const NSFEAT_NAMESPACE_ATOMICS: u8 = 1 << 1;
    /// NSFEAT bit 2: Deallocated or Unwritten Logical Block error supported.
    pub const NSFEAT_DULBE: u8 = 1 << 2;
    /// NSFEAT bit 4: NPWG, NPWA, NPDG, NPDA and NOWS are defined.
    pub const NSFEAT_OPTIMAL_IO: u8 = 1 << 4;
    /// FLBAS bit 4: metadata transferred at the end of the data (extended LBA).
    pub const FLBAS_EXTENDED_METADATA: u8 = 1 << 4;
    /// NMIC bit 0: the namespace may be attached to more than one controller.
    pub const NMIC_SHARED: u8 = 1 << 0;
    /// NSATTR bit 0: the namespace is write protected.
    pub const NSATTR_WRITE_PROTECTED: u8 = 1 << 0;

    /// The index of the LBA format in use: FLBAS bits 3:0, with bits 6:5 as bits 5:4 (NVMe 2.0).
    pub fn format_index(&self) -> usize {
        usize::from((self.flbas & 0x0f) | ((self.flbas & 0x60) >> 1))
    }

    /// The LBA data size in bytes of the format in use. Errors if FLBAS names a format beyond NLBAF or
    /// beyond the 16 modelled, or if that format's LBADS is not in 9..=31 (512 B to 2 GiB).
    pub fn lba_data_size(&self) -> Result<u32, WireError> {
        let index = self.format_index();
        if index > usize::from(self.nlbaf) {
            return Err(WireError::invalid(ID_NS, "flbas", self.flbas, "a format index no greater than NLBAF"));
        }
        let format =
            self.lbaf.get(index).ok_or(WireError::invalid(ID_NS, "flbas", self.flbas, "a format index below 16"))?;
        if !(9..=31).contains(&format.lbads) {
            return Err(WireError::invalid(ID_NS, "lbads", format.lbads, "9..=31 (512 B and up)"));
        }
        Ok(1u32 << format.lbads)
    }

    /// Encode into the first 4096 bytes of `buf`, zeroing every byte not covered by a field.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, ID_NS)?;
        b.fill(0);
        put64(b, 0, self.nsze);
        put64(b, 8, self.ncap);
        put64(b, 16, self.nuse);
        b[24] = self.nsfeat;
        b[25] = self.nlbaf;
        b[26] = self.flbas;
        b[27] = self.mc;
        b[28] = self.dpc;
        b[29] = self.dps;
        b[30] = self.nmic;
        b[31] = self.rescap;
        b[32] = self.fpi;
        b[33] = self.dlfeat;
        put16(b, 34, self.nawun);
        put16(b, 36, self.nawupf);
        put16(b, 38, self.nacwu);
        put16(b, 40, self.nabsn);
        put16(b, 42, self.nabo);
        put16(b, 44, self.nabspf);
        put16(b, 46, self.noiob);
        put128(b, 48, self.nvmcap);
        put16(b, 64, self.npwg);
        put16(b, 66, self.npwa);
        put16(b, 68, self.npdg);
        put16(b, 70, self.npda);
        put16(b, 72, self.nows);
        put32(b, 92, self.anagrpid);
        b[99] = self.nsattr;
        put16(b, 100, self.nvmsetid);
        put16(b, 102, self.endgid);
        b[104..120].copy_from_slice(&self.nguid);
        b[120..128].copy_from_slice(&self.eui64);
        for (i, f) in self.lbaf.iter().enumerate() {
            f.encode(b, 128 + 4 * i);
        }
        Ok(())
    }

    /// The structure as 4096 bytes.
    pub fn to_bytes(&self) -> [u8; IDENTIFY_DATA_SIZE] {
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        // A 4096-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 4096 bytes of `buf`. Every field value is accepted; use
    /// [`lba_data_size`](Self::lba_data_size) to check the format in use.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<IDENTIFY_DATA_SIZE>(buf, ID_NS)?;
        let mut lbaf = [LbaFormat::default(); LBA_FORMATS];
        for (i, f) in lbaf.iter_mut().enumerate() {
            *f = LbaFormat::parse(b, 128 + 4 * i);
        }
        Ok(IdentifyNamespace {
            nsze: le64(b, 0),
            ncap: le64(b, 8),
            nuse: le64(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            mc: b[27],
            dpc: b[28],
            dps: b[29],
            nmic: b[30],
            rescap: b[31],
            fpi: b[32],
            dlfeat: b[33],
            nawun: le16(b, 34),
            nawupf: le16(b, 36),
            nacwu: le16(b, 38),
            nabsn: le16(b, 40),
            nabo: le16(b, 42),
            nabspf: le16(b, 44),
            noiob: le16(b, 46),
            nvmcap: le128(b, 48),
            npwg: le16(b, 64),
            npwa: le16(b, 66),
            npdg: le16(b, 68),
            npda: le16(b, 70),
            nows: le16(b, 72),
            anagrpid: le32(b, 92),
            nsattr: b[99],
            nvmsetid: le16(b, 100),
            endgid: le16(b, 102),
            nguid: array(b, 104),
            eui64: array(b, 120),
            lbaf,
        })
    }
}

// ---------------------------------------------------------------------------------------------------
// Namespace ID lists (Identify CNS 02h; also the Changed Namespace List log page)
// ---------------------------------------------------------------------------------------------------

/// A sorted, de-duplicated set of at most 1024 NSIDs built without allocating; it remembers whether
/// more distinct NSIDs were offered than it could keep (it keeps the smallest).
#[derive(Debug, Clone)]
pub(crate) struct NsidSet {
    ids: [u32; NSID_LIST_ENTRIES],
    len: usize,
    overflow: bool,
}

impl NsidSet {
    pub(crate) fn new() -> Self {
        NsidSet { ids: [0; NSID_LIST_ENTRIES], len: 0, overflow: false }
    }

    pub(crate) fn insert(&mut self, nsid: u32) {
        let Err(pos) = self.ids[..self.len].binary_search(&nsid) else { return };
        if self.len < NSID_LIST_ENTRIES {
            self.ids.copy_within(pos..self.len, pos + 1);
            self.ids[pos] = nsid;
            self.len += 1;
        } else {
            self.overflow = true;
            if pos < NSID_LIST_ENTRIES {
                self.ids.copy_within(pos..NSID_LIST_ENTRIES - 1, pos + 1);
                self.ids[pos] = nsid;
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len]
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.overflow
    }
}

/// Check an NSID offered to a list encoder: 0 and the broadcast value are never namespaces.
pub(crate) fn check_list_nsid(nsid: u32, structure: &'static str) -> Result<u32, WireError> {
    if nsid == 0 || nsid == NSID_BROADCAST {
        Err(WireError::invalid(structure, "nsid", nsid, "1..=0xFFFFFFFE"))
    } else {
        Ok(nsid)
    }
}

/// Write `ids` as little-endian dwords into the 4096 bytes of `b`, zero-filling the rest.
pub(crate) fn put_nsid_list(b: &mut [u8; IDENTIFY_DATA_SIZE], ids: &[u32]) {
    b.fill(0);
    for (chunk, id) in b.chunks_exact_mut(4).zip(ids) {
        chunk.copy_from_slice(&id.to_le_bytes());
    }
}

/// A parsed namespace ID list (Identify CNS 02h, Changed Namespace List): the non-zero entries before
/// the first zero, borrowed from the input. Iterate with [`iter`](Self::iter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIdList<'a> {
    /// The entries' bytes, a multiple of 4 long, ending before the zero terminator.
    entries: &'a [u8],
}

impl<'a> NamespaceIdList<'a> {
    /// Parse the first 4096 bytes of `buf`: entries up to the first zero. With `ascending`, entries must
    /// be strictly increasing. An entry of 0xFFFFFFFF is rejected.
    pub(crate) fn parse(buf: &'a [u8], structure: &'static str, ascending: bool) -> Result<Self, WireError> {
        let b = fixed::<IDENTIFY_DATA_SIZE>(buf, structure)?;
        let mut count = 0;
        let mut previous = 0u32;
        for chunk in b.chunks_exact(4) {
            let nsid = le32(chunk, 0);
            if nsid == 0 {
                break;
            }
            if nsid == NSID_BROADCAST {
                return Err(WireError::invalid(structure, "nsid", nsid, "1..=0xFFFFFFFE"));
            }
            if ascending && nsid <= previous {
                return Err(WireError::invalid(structure, "nsid", nsid, "NSIDs in strictly increasing order"));
            }
            previous = nsid;
            count += 1;
        }
        Ok(NamespaceIdList { entries: &b[..4 * count] })
    }

    /// The empty list.
    pub fn empty() -> Self {
        NamespaceIdList { entries: &[] }
    }

    /// Number of NSIDs.
    pub fn len(&self) -> usize {
        self.entries.len() / 4
    }

    /// True when the list holds no NSID.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The NSIDs in list order.
    pub fn iter(&self) -> NamespaceIdIter<'a> {
        NamespaceIdIter { chunks: self.entries.chunks_exact(4) }
    }
}

impl<'a> IntoIterator for NamespaceIdList<'a> {
    type Item = u32;
    type IntoIter = NamespaceIdIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the NSIDs of a [`NamespaceIdList`].
#[derive(Debug, Clone)]
pub struct NamespaceIdIter<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for NamespaceIdIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.chunks.next().map(|c| le32(c, 0))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for NamespaceIdIter<'_> {}

const ACTIVE_LIST: &str = "ActiveNamespaceIdList";

/// Active Namespace ID list (CNS 02h; Base 2.0 §5.17.2.2), 4096 bytes: up to 1024 active NSIDs
/// greater than the NSID in the command, in increasing order, zero-terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveNamespaceIdList;

impl ActiveNamespaceIdList {
    /// Encode the list answering an Identify whose NSID is `requested_nsid` into the first 4096 bytes
    /// of `buf`: the NSIDs of `active` greater than `requested_nsid`, sorted, de-duplicated and
    /// truncated to the smallest 1024 (the host continues from the last one). `active` may come in any
    /// order. Returns the number of entries written. Errors on an NSID of 0 or 0xFFFFFFFF in `active`.
    ///
    /// The target answers a request for NSID 0xFFFFFFFE or 0xFFFFFFFF with Invalid Namespace or Format
    /// before calling this.
    pub fn encode(
        requested_nsid: u32,
        active: impl IntoIterator<Item = u32>,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, ACTIVE_LIST)?;
        let mut set = NsidSet::new();
        for nsid in active {
            if check_list_nsid(nsid, ACTIVE_LIST)? > requested_nsid {
                set.insert(nsid);
            }
        }
        put_nsid_list(b, set.as_slice());
        Ok(set.as_slice().len())
    }

    /// Parse the first 4096 bytes of `buf`. Errors if the entries before the terminator are not strictly
    /// increasing or hold 0xFFFFFFFF.
    pub fn parse(buf: &[u8]) -> Result<NamespaceIdList<'_>, WireError> {
        NamespaceIdList::parse(buf, ACTIVE_LIST, true)
    }
}

// ---------------------------------------------------------------------------------------------------
// Namespace Identification Descriptor list (CNS 03h)
// ---------------------------------------------------------------------------------------------------

const DESC_LIST: &str = "NamespaceIdentificationDescriptor";

/// Namespace Identifier Type (NIDT) values (Base 2.0 Figure 279, Linux `NVME_NIDT_*`).
pub mod nidt {
    /// IEEE Extended Unique Identifier, 8 bytes.
    pub const EUI64: u8 = 0x01;
    /// Namespace Globally Unique Identifier, 16 bytes.
    pub const NGUID: u8 = 0x02;
    /// Namespace UUID, 16 bytes.
    pub const UUID: u8 = 0x03;
    /// Command Set Identifier, 1 byte.
    pub const CSI: u8 = 0x04;
}

/// One Namespace Identification Descriptor (Base 2.0 Figure 278, Linux `struct nvme_ns_id_desc`):
/// a 4-byte header (NIDT, NIDL, 2 reserved bytes) followed by NIDL bytes of identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceIdentificationDescriptor<'a> {
    /// NIDT 1: IEEE EUI-64 (NIDL 8).
    Eui64([u8; 8]),
    /// NIDT 2: NGUID (NIDL 16).
    Nguid([u8; 16]),
    /// NIDT 3: UUID (NIDL 16).
    Uuid([u8; 16]),
    /// NIDT 4: Command Set Identifier (NIDL 1).
    Csi(u8),
    /// A type this crate does not know (NIDT other than 0..=4), kept as read.
    Other {
        /// Namespace Identifier Type.
        nidt: u8,
        /// The identifier (NIDL bytes).
        nid: &'a [u8],
    },
}

impl<'a> NamespaceIdentificationDescriptor<'a> {
    /// Namespace Identifier Type.
    pub fn nidt(&self) -> u8 {
        match self {
            Self::Eui64(_) => nidt::EUI64,
            Self::Nguid(_) => nidt::NGUID,
            Self::Uuid(_) => nidt::UUID,
            Self::Csi(_) => nidt::CSI,
            Self::Other { nidt, .. } => *nidt,
        }
    }

    /// The identifier bytes (NIDL of them).
    pub fn nid(&self) -> &[u8] {
        match self {
            Self::Eui64(id) => id,
            Self::Nguid(id) | Self::Uuid(id) => id,
            Self::Csi(csi) => std::slice::from_ref(csi),
            Self::Other { nid, .. } => nid,
        }
    }

    /// Bytes this descriptor takes on the wire (header included).
    pub fn encoded_len(&self) -> usize {
        4 + self.nid().len()
    }

    /// The NIDL a known type must carry.
    fn expected_nidl(nidt: u8) -> Option<usize> {
        match nidt {
            nidt::EUI64 => Some(8),
            nidt::NGUID | nidt::UUID => Some(16),
            nidt::CSI => Some(1),
            _ => None,
        }
    }

    fn from_parts(nidt: u8, nid: &'a [u8]) -> Option<Self> {
        Some(match nidt {
            nidt::EUI64 => Self::Eui64(nid.try_into().ok()?),
            nidt::NGUID => Self::Nguid(nid.try_into().ok()?),
            nidt::UUID => Self::Uuid(nid.try_into().ok()?),
            nidt::CSI => Self::Csi(*nid.first()?),
            _ => Self::Other { nidt, nid },
        })
    }

    /// Encode the whole list (CNS 03h) into the first 4096 bytes of `buf`, zero-filled after the last
    /// descriptor (the zero NIDT that ends the list). Errors if the descriptors need more than 4096
    /// bytes, or an `Other` descriptor uses NIDT 0, a known NIDT, or more than 255 identifier bytes.
    pub fn encode_list(descriptors: &[NamespaceIdentificationDescriptor<'_>], buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, DESC_LIST)?;
        b.fill(0);
        let mut pos = 0usize;
        for d in descriptors {
            let nidt = d.nidt();
            if let NamespaceIdentificationDescriptor::Other { nid, .. } = d {
                if nidt == 0 || Self::expected_nidl(nidt).is_some() {
                    return Err(WireError::invalid(DESC_LIST, "nidt", nidt, "an unknown type other than 0"));
                }
                if nid.len() > usize::from(u8::MAX) {
                    return Err(WireError::invalid(
                        DESC_LIST,
                        "nidl",
                        u64::try_from(nid.len()).unwrap_or(u64::MAX),
                        "0..=255",
                    ));
                }
            }
            let nid = d.nid();
            let end = pos + d.encoded_len();
            let entry = b.get_mut(pos..end).ok_or(WireError::OutputTooSmall {
                structure: DESC_LIST,
                need: end,
                got: IDENTIFY_DATA_SIZE,
            })?;
            entry[0] = nidt;
            // Checked above: every identifier is at most 255 bytes.
            entry[1] = u8::try_from(nid.len()).unwrap_or(u8::MAX);
            entry[4..].copy_from_slice(nid);
            pos = end;
        }
        Ok(())
    }

    /// Parse a descriptor list (CNS 03h) from `buf` (normally 4096 bytes; any length is accepted). The
    /// list ends at the first zero NIDT or at the end of `buf`. Errors on a known type with the wrong
    /// NIDL and on a header or identifier running past the end of `buf`.
    pub fn parse_list(buf: &'a [u8]) -> Result<NamespaceIdentificationDescriptorList<'a>, WireError> {
        let mut pos = 0usize;
        while let Some(&nidt) = buf.get(pos) {
            if nidt == 0 {
                break;
            }
            let header = buf.get(pos..pos + 4).ok_or(WireError::Short {
                structure: DESC_LIST,
                need: pos + 4,
                got: buf.len(),
            })?;
            let nidl = usize::from(header[1]);
            if let Some(expected) = Self::expected_nidl(nidt) {
                if nidl != expected {
                    return Err(WireError::invalid(
                        DESC_LIST,
                        "nidl",
                        header[1],
                        "8 for EUI-64, 16 for NGUID/UUID, 1 for CSI",
                    ));
                }
            }
            let end = pos + 4 + nidl;
            if end > buf.len() {
                return Err(WireError::Short { structure: DESC_LIST, need: end, got: buf.len() });
            }
            pos = end;
        }
        Ok(NamespaceIdentificationDescriptorList { bytes: &buf[..pos] })
    }
}

/// A validated Namespace Identification Descriptor list, borrowed from the input. Iterate with
/// [`iter`](Self::iter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIdentificationDescriptorList<'a> {
    /// The descriptors' bytes, up to (not including) the terminator.
    bytes: &'a [u8],
}

impl<'a> NamespaceIdentificationDescriptorList<'a> {
    /// The descriptors in list order.
    pub fn iter(&self) -> NamespaceIdentificationDescriptorIter<'a> {
        NamespaceIdentificationDescriptorIter { rest: self.bytes }
    }
}

impl<'a> IntoIterator for NamespaceIdentificationDescriptorList<'a> {
    type Item = NamespaceIdentificationDescriptor<'a>;
    type IntoIter = NamespaceIdentificationDescriptorIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over a validated [`NamespaceIdentificationDescriptorList`]; it never allocates.
#[derive(Debug, Clone)]
pub struct NamespaceIdentificationDescriptorIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NamespaceIdentificationDescriptorIter<'a> {
    type Item = NamespaceIdentificationDescriptor<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // The list was validated by `parse_list`; `get` keeps this panic-free regardless.
        let nidt = *self.rest.first()?;
        let nidl = usize::from(*self.rest.get(1)?);
        let nid = self.rest.get(4..4 + nidl)?;
        self.rest = self.rest.get(4 + nidl..).unwrap_or(&[]);
        NamespaceIdentificationDescriptor::from_parts(nidt, nid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identify_command_fields() {
        let id = Identify { nsid: 0x0102_0304, cns: 0x03, cntid: 0xa1b2, cnssid: 0xc3d4, csi: 0x02 };
        let sqe = id.to_sqe();
        assert_eq!(sqe.opcode, 0x06);
        // Linux struct nvme_identify: cns byte 40, ctrlid bytes 42-43, cnssid 44-45, csi byte 47.
        let b = sqe.to_bytes();
        assert_eq!(b[40], 0x03);
        assert_eq!(b[41], 0);
        assert_eq!(&b[42..44], &[0xb2, 0xa1]);
        assert_eq!(&b[44..46], &[0xd4, 0xc3]);
        assert_eq!(b[46], 0);
        assert_eq!(b[47], 0x02);
        assert_eq!(Identify::from_sqe(&sqe).unwrap(), id);
        assert_eq!(cns::NAMESPACE, 0x00);
        assert_eq!(cns::CONTROLLER, 0x01);
        assert_eq!(cns::ACTIVE_NAMESPACE_ID_LIST, 0x02);
        assert_eq!(cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 0x03);
    }

    #[test]
    fn identify_rejects_other_opcodes() {
        let sqe = SubmissionQueueEntry::new(opcode::admin::GET_LOG_PAGE);
        assert!(matches!(
            Identify::from_sqe(&sqe),
            Err(WireError::InvalidField { structure: "Identify", field: "opcode", value: 0x02, .. })
        ));
    }

    fn sample_controller() -> IdentifyController<'static> {
        IdentifyController {
            vid: 0x0201,
            ssvid: 0x0403,
            sn: "SN-1",
            mn: "nvmf-rs model",
            fr: "0.1",
            rab: 0x05,
            ieee: [0x06, 0x07, 0x08],
            cmic: 0x09,
            mdts: 0x0a,
            cntlid: 0x0c0b,
            ver: 0x1013_1211,
            rtd3r: 0x1417_1615,
            rtd3e: 0x181b_1a19,
            oaes: 0x1c1f_1e1d,
            ctratt: 0x2023_2221,
            cntrltype: 0x24,
            fguid: [0x25; 16],
            oacs: 0x2726,
            acl: 0x28,
            aerl: 0x29,
            frmw: 0x2a,
            lpa: 0x2b,
            elpe: 0x2c,
            npss: 0x2d,
            kas: 0x2f2e,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 0x3130,
            nn: 0x3534_3332,
            oncs: 0x3736,
            fuses: 0x3938,
            fna: 0x3a,
            vwc: 0x3b,
            awun: 0x3d3c,
            awupf: 0x3f3e,
            sgls: 0x4342_4140,
            mnan: 0x4746_4544,
            subnqn: "nqn.2014-08.org.nvmexpress:uuid:1",
            ioccsz: 0x4b4a_4948,
            iorcsz: 0x4f4e_4d4c,
            icdoff: 0x5150,
            fcatt: 0x52,
            msdbd: 0x53,
            ofcs: 0x5554,
        }
    }

    #[test]
    fn identify_controller_layout() {
        // Offsets from Base 2.0 Figure 275 / Linux struct nvme_id_ctrl.
        let c = sample_controller();
        let mut b = [0xeeu8; IDENTIFY_DATA_SIZE];
        c.encode(&mut b).unwrap();
        assert_eq!(&b[0..4], &[0x01, 0x02, 0x03, 0x04]);
        assert_eq!(&b[4..24], b"SN-1                ");
        assert_eq!(&b[24..37], b"nvmf-rs model");
        assert!(b[37..64].iter().all(|&c| c == b' '));
        assert_eq!(&b[64..72], b"0.1     ");
        assert_eq!(&b[72..80], &[0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c]);
        assert_eq!(&b[80..84], &[0x11, 0x12, 0x13, 0x10]);
        assert_eq!(le32(&b, 84), 0x1417_1615);
        assert_eq!(le32(&b, 88), 0x181b_1a19);
        assert_eq!(le32(&b, 92), 0x1c1f_1e1d);
        assert_eq!(le32(&b, 96), 0x2023_2221);
        assert!(b[100..111].iter().all(|&c| c == 0));
        assert_eq!(b[111], 0x24);
        assert_eq!(&b[112..128], &[0x25; 16]);
        assert_eq!(le16(&b, 256), 0x2726);
        assert_eq!(&b[258..264], &[0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d]);
        assert_eq!(le16(&b, 320), 0x2f2e);
        assert_eq!(&b[512..514], &[0x66, 0x44]);
        assert_eq!(le16(&b, 514), 0x3130);
        assert_eq!(le32(&b, 516), 0x3534_3332);
        assert_eq!(le16(&b, 520), 0x3736);
        assert_eq!(le16(&b, 522), 0x3938);
        assert_eq!(&b[524..526], &[0x3a, 0x3b]);
        assert_eq!(le16(&b, 526), 0x3d3c);
        assert_eq!(le16(&b, 528), 0x3f3e);
        assert_eq!(le32(&b, 536), 0x4342_4140);
        assert_eq!(le32(&b, 540), 0x4746_4544);
        assert_eq!(&b[768..801], b"nqn.2014-08.org.nvmexpress:uuid:1");
        assert!(b[801..1024].iter().all(|&c| c == 0));
        assert_eq!(le32(&b, 1792), 0x4b4a_4948);
        assert_eq!(le32(&b, 1796), 0x4f4e_4d4c);
        assert_eq!(le16(&b, 1800), 0x5150);
        assert_eq!(&b[1802..1806], &[0x52, 0x53, 0x54, 0x55]);
        // Everything not owned by a field is zero (the 0xee fill is gone).
        assert!(b[1806..].iter().all(|&c| c == 0));
        assert!(b[544..768].iter().all(|&c| c == 0));
        assert_eq!(IdentifyController::parse(&b).unwrap(), c);
        assert_eq!(c.to_bytes().unwrap(), b);
    }

    #[test]
    fn identify_controller_bit_helpers() {
        let c = IdentifyController {
            oncs: IdentifyController::ONCS_WRITE_ZEROES | IdentifyController::ONCS_DATASET_MANAGEMENT,
            vwc: IdentifyController::VWC_PRESENT,
            sgls: IdentifyController::SGLS_SUPPORTED_BYTE_ALIGNED | IdentifyController::SGLS_KEYED_DATA_BLOCK,
            oaes: IdentifyController::OAES_NAMESPACE_ATTRIBUTE_NOTICES,
            ..Default::default()
        };
        assert!(c.oncs_has(IdentifyController::ONCS_WRITE_ZEROES));
        assert!(!c.oncs_has(IdentifyController::ONCS_COMPARE | IdentifyController::ONCS_WRITE_ZEROES));
        assert!(c.vwc_present());
        assert_eq!(c.sgl_support(), 1);
        assert!(c.namespace_attribute_notices());
        // Linux values: NVME_CTRL_ONCS_WRITE_ZEROES 1 << 3, NVME_CTRL_SGLS_KSDBDS 1 << 2, NVME_AEN_CFG_NS_ATTR 1 << 8.
        assert_eq!(IdentifyController::ONCS_WRITE_ZEROES, 8);
        assert_eq!(IdentifyController::ONCS_SAVE_SELECT_FEATURES, 16);
        assert_eq!(IdentifyController::ONCS_RESERVATIONS, 32);
        assert_eq!(IdentifyController::ONCS_TIMESTAMP, 64);
        assert_eq!(IdentifyController::SGLS_ADDRESS_AS_OFFSET, 0x10_0000);
        assert_eq!(IdentifyController::CMIC_ANA_REPORTING, 8);
    }

    #[test]
    fn identify_controller_rejections() {
        assert!(matches!(IdentifyController::parse(&[0u8; 4095]), Err(WireError::Short { need: 4096, .. })));
        let mut small = [0u8; 100];
        assert!(matches!(sample_controller().encode(&mut small), Err(WireError::OutputTooSmall { .. })));
        let long_sn = IdentifyController { sn: "123456789012345678901", ..Default::default() };
        assert!(matches!(long_sn.to_bytes(), Err(WireError::InvalidText { field: "sn", .. })));
        let long_nqn = "n".repeat(224);
        let c = IdentifyController { subnqn: &long_nqn, ..Default::default() };
        assert!(matches!(c.to_bytes(), Err(WireError::InvalidText { field: "subnqn", .. })));
        let mut b = sample_controller().to_bytes().unwrap();
        b[30] = 0x80;
        assert!(matches!(IdentifyController::parse(&b), Err(WireError::InvalidText { field: "mn", .. })));
        let mut b = sample_controller().to_bytes().unwrap();
        b[768..1024].fill(b'n');
        assert!(matches!(IdentifyController::parse(&b), Err(WireError::InvalidText { field: "subnqn", .. })));
    }

    #[test]
    fn identify_namespace_layout() {
        // Offsets from NVM Command Set 1.0 Figure 97 / Linux struct nvme_id_ns.
        let mut lbaf = [LbaFormat::default(); LBA_FORMATS];
        for (i, f) in lbaf.iter_mut().enumerate() {
            let i = u8::try_from(i).unwrap();
            *f = LbaFormat { ms: u16::from(i) << 8 | 0x80, lbads: 9 + i, rp: i & 3 };
        }
        let ns = IdentifyNamespace {
            nsze: 0x0807_0605_0403_0201,
            ncap: 0x100f_0e0d_0c0b_0a09,
            nuse: 0x1817_1615_1413_1211,
            nsfeat: 0x19,
            nlbaf: 0x0f,
            flbas: 0x1b,
            mc: 0x1c,
            dpc: 0x1d,
            dps: 0x1e,
            nmic: 0x1f,
            rescap: 0x20,
            fpi: 0x21,
            dlfeat: 0x22,
            nawun: 0x2423,
            nawupf: 0x2625,
            nacwu: 0x2827,
            nabsn: 0x2a29,
            nabo: 0x2c2b,
            nabspf: 0x2e2d,
            noiob: 0x302f,
            nvmcap: 0x4040_4040_4040_4040_4040_4040_4040_4031,
            npwg: 0x4241,
            npwa: 0x4443,
            npdg: 0x4645,
            npda: 0x4847,
            nows: 0x4a49,
            anagrpid: 0x5c5b_5a59,
            nsattr: 0x63,
            nvmsetid: 0x6564,
            endgid: 0x6766,
            nguid: [0x68; 16],
            eui64: [0x78; 8],
            lbaf,
        };
        let b = ns.to_bytes();
        for (off, v) in [(0usize, 0x01u8), (8, 0x09), (16, 0x11), (34, 0x23), (36, 0x25), (38, 0x27), (40, 0x29)] {
            assert_eq!(b[off], v, "byte {off}");
        }
        assert_eq!(&b[24..34], &[0x19, 0x0f, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22]);
        assert_eq!(le16(&b, 42), 0x2c2b);
        assert_eq!(le16(&b, 44), 0x2e2d);
        assert_eq!(le16(&b, 46), 0x302f);
        assert_eq!(b[48], 0x31);
        assert_eq!(&b[49..64], &[0x40; 15]);
        assert_eq!(le16(&b, 64), 0x4241);
        assert_eq!(le16(&b, 72), 0x4a49);
        assert!(b[74..92].iter().all(|&c| c == 0));
        assert_eq!(le32(&b, 92), 0x5c5b_5a59);
        assert_eq!(&b[96..100], &[0, 0, 0, 0x63]);
        assert_eq!(le16(&b, 100), 0x6564);
        assert_eq!(le16(&b, 102), 0x6766);
        assert_eq!(&b[104..120], &[0x68; 16]);
        assert_eq!(&b[120..128], &[0x78; 8]);
        assert_eq!(&b[128..132], &[0x80, 0x00, 9, 0]);
        assert_eq!(&b[188..192], &[0x80, 0x0f, 24, 3]);
        assert!(b[192..].iter().all(|&c| c == 0));
        assert_eq!(IdentifyNamespace::parse(&b).unwrap(), ns);
        // FLBAS 0x1b: format 11 (bits 3:0), extended metadata (bit 4) → 2^(9+11).
        assert_eq!(ns.format_index(), 11);
        assert_eq!(ns.lba_data_size().unwrap(), 1 << 20);
    }

    #[test]
    fn lba_data_size_checks() {
        let mut ns = IdentifyNamespace::default();
        ns.lbaf[0] = LbaFormat::new(9);
        assert_eq!(ns.lba_data_size().unwrap(), 512);
        ns.lbaf[1] = LbaFormat::new(12);
        ns.flbas = 1;
        // NLBAF is 0: format 1 is beyond the formats the namespace reports.
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "flbas", .. })));
        ns.nlbaf = 1;
        assert_eq!(ns.lba_data_size().unwrap(), 4096);
        // Bits 6:5 extend the index past the 16 formats modelled.
        ns.flbas = 0x20;
        ns.nlbaf = 63;
        assert_eq!(ns.format_index(), 16);
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "flbas", .. })));
        ns.flbas = 2;
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "lbads", value: 0, .. })));
        ns.lbaf[2] = LbaFormat::new(32);
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "lbads", value: 32, .. })));
        assert!(IdentifyNamespace::parse(&[0u8; 4095]).is_err());
        assert!(ns.encode(&mut [0u8; 10]).is_err());
    }

    #[test]
    fn active_namespace_list_is_greater_sorted_and_deduplicated() {
        let mut b = [0xffu8; IDENTIFY_DATA_SIZE];
        let n = ActiveNamespaceIdList::encode(2, [7, 1, 3, 2, 5, 3], &mut b).unwrap();
        assert_eq!(n, 3);
        assert_eq!(&b[..16], &[3, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[12..].iter().all(|&c| c == 0));
        let list = ActiveNamespaceIdList::parse(&b).unwrap();
        assert_eq!(list.len(), 3);
        assert!(list.iter().eq([3, 5, 7]));
        // More than 1024: the smallest 1024 are kept, whatever the order offered.
        let n = ActiveNamespaceIdList::encode(0, (1..=2000).rev(), &mut b).unwrap();
        assert_eq!(n, 1024);
        let list = ActiveNamespaceIdList::parse(&b).unwrap();
        assert!(list.iter().eq(1..=1024));
        assert_eq!(ActiveNamespaceIdList::encode(10, [1, 2], &mut b).unwrap(), 0);
        assert!(ActiveNamespaceIdList::parse(&b).unwrap().is_empty());
    }

    #[test]
    fn active_namespace_list_rejections() {
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        assert!(matches!(
            ActiveNamespaceIdList::encode(0, [1, 0], &mut b),
            Err(WireError::InvalidField { field: "nsid", value: 0, .. })
        ));
        assert!(ActiveNamespaceIdList::encode(0, [NSID_BROADCAST], &mut b).is_err());
        assert!(ActiveNamespaceIdList::encode(0, [1], &mut [0u8; 4095]).is_err());
        put32(&mut b, 0, 5);
        put32(&mut b, 4, 4);
        assert!(matches!(ActiveNamespaceIdList::parse(&b), Err(WireError::InvalidField { value: 4, .. })));
        put32(&mut b, 4, 5);
        assert!(ActiveNamespaceIdList::parse(&b).is_err());
        put32(&mut b, 4, NSID_BROADCAST);
        assert!(ActiveNamespaceIdList::parse(&b).is_err());
        assert!(ActiveNamespaceIdList::parse(&b[..4095]).is_err());
    }

    #[test]
    fn descriptor_list_layout() {
        // Linux struct nvme_ns_id_desc: nidt, nidl, reserved[2], then the id; NVME_NIDT_* lengths 8/16/16/1.
        let list = [
            NamespaceIdentificationDescriptor::Eui64([1; 8]),
            NamespaceIdentificationDescriptor::Nguid([2; 16]),
            NamespaceIdentificationDescriptor::Uuid([3; 16]),
            NamespaceIdentificationDescriptor::Csi(csi::NVM),
            NamespaceIdentificationDescriptor::Other { nidt: 0x7f, nid: &[9, 9] },
        ];
        let mut b = [0xaau8; IDENTIFY_DATA_SIZE];
        NamespaceIdentificationDescriptor::encode_list(&list, &mut b).unwrap();
        assert_eq!(&b[0..4], &[1, 8, 0, 0]);
        assert_eq!(&b[4..12], &[1; 8]);
        assert_eq!(&b[12..16], &[2, 16, 0, 0]);
        assert_eq!(&b[16..32], &[2; 16]);
        assert_eq!(&b[32..36], &[3, 16, 0, 0]);
        assert_eq!(&b[36..52], &[3; 16]);
        assert_eq!(&b[52..57], &[4, 1, 0, 0, 0]);
        assert_eq!(&b[57..63], &[0x7f, 2, 0, 0, 9, 9]);
        assert!(b[63..].iter().all(|&c| c == 0));
        let parsed = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
        assert!(parsed.iter().eq(list));
    }

    #[test]
    fn descriptor_list_rejections() {
        // Wrong NIDL for a known type.
        let mut b = [0u8; 64];
        b[..4].copy_from_slice(&[nidt::UUID, 8, 0, 0]);
        assert!(matches!(
            NamespaceIdentificationDescriptor::parse_list(&b),
            Err(WireError::InvalidField { field: "nidl", value: 8, .. })
        ));
        b[..4].copy_from_slice(&[nidt::CSI, 0, 0, 0]);
        assert!(NamespaceIdentificationDescriptor::parse_list(&b).is_err());
        // An identifier running past the buffer.
        b[..4].copy_from_slice(&[nidt::NGUID, 16, 0, 0]);
        assert!(matches!(
            NamespaceIdentificationDescriptor::parse_list(&b[..19]),
            Err(WireError::Short { need: 20, got: 19, .. })
        ));
        // A header cut short.
        assert!(matches!(NamespaceIdentificationDescriptor::parse_list(&b[..2]), Err(WireError::Short { .. })));
        // Unknown types of any length are skipped over but must fit.
        b[..4].copy_from_slice(&[0x80, 200, 0, 0]);
        assert!(NamespaceIdentificationDescriptor::parse_list(&b).is_err());
        // A list filling the buffer exactly needs no terminator.
        let full = [0x80u8, 60, 0, 0].iter().copied().chain([0u8; 60]).collect::<Vec<_>>();
        assert_eq!(NamespaceIdentificationDescriptor::parse_list(&full).unwrap().iter().count(), 1);

        let mut out = [0u8; IDENTIFY_DATA_SIZE];
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: nidt::EUI64, nid: &[0; 8] }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: 0, nid: &[] }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let big = [0u8; 256];
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: 0x80, nid: &big }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let many = [NamespaceIdentificationDescriptor::Uuid([1; 16]); 205];
        assert!(matches!(
            NamespaceIdentificationDescriptor::encode_list(&many, &mut out),
            Err(WireError::OutputTooSmall { .. })
        ));
        assert!(NamespaceIdentificationDescriptor::encode_list(&many[..204], &mut out).is_ok());
    }

    fn text(max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("([!-~][ -~]{{0,{}}}[!-~])?", max - 2)).unwrap()
    }

    proptest! {
        #[test]
        fn controller_round_trip(
            mut bytes in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_SIZE),
            sn in text(20), mn in text(40), fr in text(8),
            subnqn in "[a-z0-9.:-]{0,223}",
        ) {
            put_ascii_field(&mut bytes[4..24], &sn, b' ', "t", "sn").unwrap();
            put_ascii_field(&mut bytes[24..64], &mn, b' ', "t", "mn").unwrap();
            put_ascii_field(&mut bytes[64..72], &fr, b' ', "t", "fr").unwrap();
            put_ascii_field(&mut bytes[768..1024], &subnqn, 0, "t", "subnqn").unwrap();
            let c = IdentifyController::parse(&bytes).unwrap();
            prop_assert_eq!(c.sn, sn.as_str());
            prop_assert_eq!(c.subnqn, subnqn.as_str());
            let encoded = c.to_bytes().unwrap();
            prop_assert_eq!(IdentifyController::parse(&encoded).unwrap(), c);
        }

        #[test]
        fn controller_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            if let Ok(c) = IdentifyController::parse(&bytes) {
                let encoded = c.to_bytes().unwrap();
                prop_assert_eq!(IdentifyController::parse(&encoded).unwrap(), c);
            }
        }

        #[test]
        fn namespace_round_trip(bytes in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_SIZE)) {
            let ns = IdentifyNamespace::parse(&bytes).unwrap();
            prop_assert_eq!(IdentifyNamespace::parse(&ns.to_bytes()).unwrap(), ns);
            let _ = ns.lba_data_size();
        }

        #[test]
        fn active_list_round_trip(requested in any::<u32>(), ids in proptest::collection::vec(1u32..0xffff_fffe, 0..1500)) {
            let mut b = [0u8; IDENTIFY_DATA_SIZE];
            let n = ActiveNamespaceIdList::encode(requested, ids.iter().copied(), &mut b).unwrap();
            let mut want: Vec<u32> = ids.iter().copied().filter(|&i| i > requested).collect();
            want.sort_unstable();
            want.dedup();
            want.truncate(NSID_LIST_ENTRIES);
            prop_assert_eq!(n, want.len());
            let got: Vec<u32> = ActiveNamespaceIdList::parse(&b).unwrap().iter().collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn active_list_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            if let Ok(list) = ActiveNamespaceIdList::parse(&bytes) {
                let mut b = [0u8; IDENTIFY_DATA_SIZE];
                ActiveNamespaceIdList::encode(0, list.iter(), &mut b).unwrap();
                let again = ActiveNamespaceIdList::parse(&b).unwrap();
                prop_assert!(again.iter().eq(list.iter()));
            }
        }

        #[test]
        fn descriptor_round_trip(kinds in proptest::collection::vec((0u8..5, any::<[u8; 16]>()), 0..20)) {
            let other = [0xabu8; 5];
            let list: Vec<_> = kinds.iter().map(|(k, id)| match k {
                0 => NamespaceIdentificationDescriptor::Eui64(id[..8].try_into().unwrap()),
                1 => NamespaceIdentificationDescriptor::Nguid(*id),
                2 => NamespaceIdentificationDescriptor::Uuid(*id),
                3 => NamespaceIdentificationDescriptor::Csi(id[0]),
                _ => NamespaceIdentificationDescriptor::Other { nidt: 0x80 | id[0], nid: &other[..usize::from(id[1] % 6)] },
            }).collect();
            let mut b = [0u8; IDENTIFY_DATA_SIZE];
            NamespaceIdentificationDescriptor::encode_list(&list, &mut b).unwrap();
            let parsed = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
            prop_assert!(parsed.iter().eq(list.iter().copied()));
        }

        #[test]
        fn descriptor_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(list) = NamespaceIdentificationDescriptor::parse_list(&bytes) {
                let items: Vec<_> = list.iter().collect();
                let mut b = [0u8; IDENTIFY_DATA_SIZE];
                // Unknown types with NIDT 0 cannot occur (0 ends the list), so every item re-encodes.
                NamespaceIdentificationDescriptor::encode_list(&items, &mut b).unwrap();
                let again = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
                prop_assert!(again.iter().eq(items.iter().copied()));
            }
        }
    }
}
