//! The Identify Controller data structure (CNS 01h; Base 2.0 Figure 275, Linux `struct nvme_id_ctrl`): the
//! fields a fabrics target fills and a host reads, with its parser and encoder.

use super::power_state::{PowerStateDescriptor, POWER_STATE_DESCRIPTORS, POWER_STATE_DESCRIPTOR_SIZE};
use super::{array, IDENTIFY_DATA_SIZE};
use crate::wire::{ascii_field, fixed, fixed_mut, le128, le16, le32, put128, put16, put32, put_ascii_field, WireError};

/// Where the power state descriptors start.
const PSD_OFFSET: usize = 2048;

const ID_CTRL: &str = "IdentifyController";

/// Longest NQN the 256-byte SUBNQN field may hold (Linux `NVMF_NQN_SIZE`).
pub const NQN_MAX_LEN: usize = 223;

/// Identify Controller data structure (CNS 01h; Base 2.0 Figure 275, Linux `struct nvme_id_ctrl`),
/// 4096 bytes: every field NVMe 2.0 defines up to the power state descriptors (what `nvme id-ctrl` shows).
/// The vendor specific area (bytes 4095:3072) is not modelled and encodes as zero.
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
    /// Read Recovery Levels Supported (bytes 101:100).
    pub rrls: u16,
    /// Controller Type (byte 111), see `CNTRLTYPE_*`.
    pub cntrltype: u8,
    /// FRU Globally Unique Identifier (bytes 127:112).
    pub fguid: [u8; 16],
    /// Command Retry Delay Times 1-3 in units of 100 ms (bytes 129:128, 131:130, 133:132).
    pub crdt: [u16; 3],
    /// NVM Subsystem Report (byte 253; NVMe-MI).
    pub nvmsr: u8,
    /// VPD Write Cycle Information (byte 254; NVMe-MI).
    pub vwci: u8,
    /// Management Endpoint Capabilities (byte 255; NVMe-MI).
    pub mec: u8,
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
    /// Admin Vendor Specific Command Configuration (byte 264).
    pub avscc: u8,
    /// Autonomous Power State Transition Attributes (byte 265).
    pub apsta: u8,
    /// Warning Composite Temperature Threshold in Kelvin (bytes 267:266).
    pub wctemp: u16,
    /// Critical Composite Temperature Threshold in Kelvin (bytes 269:268).
    pub cctemp: u16,
    /// Maximum Time for Firmware Activation in units of 100 ms (bytes 271:270).
    pub mtfa: u16,
    /// Host Memory Buffer Preferred Size in 4 KiB units (bytes 275:272).
    pub hmpre: u32,
    /// Host Memory Buffer Minimum Size in 4 KiB units (bytes 279:276).
    pub hmmin: u32,
    /// Total NVM Capacity in bytes (bytes 295:280).
    pub tnvmcap: u128,
    /// Unallocated NVM Capacity in bytes (bytes 311:296).
    pub unvmcap: u128,
    /// Replay Protected Memory Block Support (bytes 315:312).
    pub rpmbs: u32,
    /// Extended Device Self-test Time in minutes (bytes 317:316).
    pub edstt: u16,
    /// Device Self-test Options (byte 318).
    pub dsto: u8,
    /// Firmware Update Granularity in 4 KiB units (byte 319).
    pub fwug: u8,
    /// Keep Alive Support (bytes 321:320): granularity in units of 100 ms; 0 = not supported.
    pub kas: u16,
    /// Host Controlled Thermal Management Attributes (bytes 323:322).
    pub hctma: u16,
    /// Minimum Thermal Management Temperature in Kelvin (bytes 325:324).
    pub mntmt: u16,
    /// Maximum Thermal Management Temperature in Kelvin (bytes 327:326).
    pub mxtmt: u16,
    /// Sanitize Capabilities (bytes 331:328).
    pub sanicap: u32,
    /// Host Memory Buffer Minimum Descriptor Entry Size in 4 KiB units (bytes 335:332).
    pub hmminds: u32,
    /// Host Memory Maximum Descriptors Entries (bytes 337:336).
    pub hmmaxd: u16,
    /// NVM Set Identifier Maximum (bytes 339:338).
    pub nsetidmax: u16,
    /// Endurance Group Identifier Maximum (bytes 341:340).
    pub endgidmax: u16,
    /// ANA Transition Time in seconds (byte 342).
    pub anatt: u8,
    /// Asymmetric Namespace Access Capabilities (byte 343).
    pub anacap: u8,
    /// ANA Group Identifier Maximum (bytes 347:344).
    pub anagrpmax: u32,
    /// Number of ANA Group Identifiers (bytes 351:348).
    pub nanagrpid: u32,
    /// Persistent Event Log Size in 64 KiB units (bytes 355:352).
    pub pels: u32,
    /// Domain Identifier (bytes 357:356).
    pub domainid: u16,
    /// Max Endurance Group Capacity in bytes (bytes 383:368).
    pub megcap: u128,
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
    /// I/O Command Set Vendor Specific Command Configuration (byte 530).
    pub icsvscc: u8,
    /// Namespace Write Protection Capabilities (byte 531).
    pub nwpc: u8,
    /// Atomic Compare & Write Unit (bytes 533:532), 0's based, in logical blocks.
    pub acwu: u16,
    /// Optional Copy Formats Supported (bytes 535:534).
    pub ocfs: u16,
    /// SGL Support (bytes 539:536), see `SGLS_*`.
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces (bytes 543:540).
    pub mnan: u32,
    /// Maximum Domain Namespace Attachments (bytes 559:544).
    pub maxdna: u128,
    /// Maximum I/O Controller Namespace Attachments (bytes 563:560).
    pub maxcna: u32,
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
    /// Discovery Controller Type (byte 1806).
    pub dctype: u8,
    /// Power State Descriptors 0..31 (bytes 3071:2048); NPSS + 1 of them are valid.
    pub psd: [PowerStateDescriptor; POWER_STATE_DESCRIPTORS],
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

    /// FUSES bit 0: the Compare and Write fused operation.
    pub const FUSES_COMPARE_AND_WRITE: u16 = 1 << 0;

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
        put16(b, 100, self.rrls);
        b[111] = self.cntrltype;
        b[112..128].copy_from_slice(&self.fguid);
        for (i, t) in self.crdt.iter().enumerate() {
            put16(b, 128 + 2 * i, *t);
        }
        b[253] = self.nvmsr;
        b[254] = self.vwci;
        b[255] = self.mec;
        put16(b, 256, self.oacs);
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        b[263] = self.npss;
        b[264] = self.avscc;
        b[265] = self.apsta;
        put16(b, 266, self.wctemp);
        put16(b, 268, self.cctemp);
        put16(b, 270, self.mtfa);
        put32(b, 272, self.hmpre);
        put32(b, 276, self.hmmin);
        put128(b, 280, self.tnvmcap);
        put128(b, 296, self.unvmcap);
        put32(b, 312, self.rpmbs);
        put16(b, 316, self.edstt);
        b[318] = self.dsto;
        b[319] = self.fwug;
        put16(b, 320, self.kas);
        put16(b, 322, self.hctma);
        put16(b, 324, self.mntmt);
        put16(b, 326, self.mxtmt);
        put32(b, 328, self.sanicap);
        put32(b, 332, self.hmminds);
        put16(b, 336, self.hmmaxd);
        put16(b, 338, self.nsetidmax);
        put16(b, 340, self.endgidmax);
        b[342] = self.anatt;
        b[343] = self.anacap;
        put32(b, 344, self.anagrpmax);
        put32(b, 348, self.nanagrpid);
        put32(b, 352, self.pels);
        put16(b, 356, self.domainid);
        put128(b, 368, self.megcap);
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
        b[530] = self.icsvscc;
        b[531] = self.nwpc;
        put16(b, 532, self.acwu);
        put16(b, 534, self.ocfs);
        put32(b, 536, self.sgls);
        put32(b, 540, self.mnan);
        put128(b, 544, self.maxdna);
        put32(b, 560, self.maxcna);
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
        b[1806] = self.dctype;
        for (i, p) in self.psd.iter().enumerate() {
            p.encode(b, PSD_OFFSET + POWER_STATE_DESCRIPTOR_SIZE * i);
        }
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
            rrls: le16(b, 100),
            cntrltype: b[111],
            fguid: array(b, 112),
            crdt: [le16(b, 128), le16(b, 130), le16(b, 132)],
            nvmsr: b[253],
            vwci: b[254],
            mec: b[255],
            oacs: le16(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            npss: b[263],
            avscc: b[264],
            apsta: b[265],
            wctemp: le16(b, 266),
            cctemp: le16(b, 268),
            mtfa: le16(b, 270),
            hmpre: le32(b, 272),
            hmmin: le32(b, 276),
            tnvmcap: le128(b, 280),
            unvmcap: le128(b, 296),
            rpmbs: le32(b, 312),
            edstt: le16(b, 316),
            dsto: b[318],
            fwug: b[319],
            kas: le16(b, 320),
            hctma: le16(b, 322),
            mntmt: le16(b, 324),
            mxtmt: le16(b, 326),
            sanicap: le32(b, 328),
            hmminds: le32(b, 332),
            hmmaxd: le16(b, 336),
            nsetidmax: le16(b, 338),
            endgidmax: le16(b, 340),
            anatt: b[342],
            anacap: b[343],
            anagrpmax: le32(b, 344),
            nanagrpid: le32(b, 348),
            pels: le32(b, 352),
            domainid: le16(b, 356),
            megcap: le128(b, 368),
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
            icsvscc: b[530],
            nwpc: b[531],
            acwu: le16(b, 532),
            ocfs: le16(b, 534),
            sgls: le32(b, 536),
            mnan: le32(b, 540),
            maxdna: le128(b, 544),
            maxcna: le32(b, 560),
            subnqn,
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: le16(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
            ofcs: le16(b, 1804),
            dctype: b[1806],
            psd: core::array::from_fn(|i| PowerStateDescriptor::parse(b, PSD_OFFSET + POWER_STATE_DESCRIPTOR_SIZE * i)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            rrls: 0x6160,
            crdt: [0x6362, 0x6564, 0x6766],
            nvmsr: 0x68,
            vwci: 0x69,
            mec: 0x6a,
            avscc: 0x6b,
            apsta: 0x6c,
            wctemp: 0x6e6d,
            cctemp: 0x706f,
            mtfa: 0x7271,
            hmpre: 0x7675_7473,
            hmmin: 0x7a79_7877,
            tnvmcap: 0x7b00_0000_0000_0000_0000_0000_0000_007c,
            unvmcap: 0x7d00_0000_0000_0000_0000_0000_0000_007e,
            rpmbs: 0x8281_807f,
            edstt: 0x8483,
            dsto: 0x85,
            fwug: 0x86,
            hctma: 0x8887,
            mntmt: 0x8a89,
            mxtmt: 0x8c8b,
            sanicap: 0x908f_8e8d,
            hmminds: 0x9493_9291,
            hmmaxd: 0x9695,
            nsetidmax: 0x9897,
            endgidmax: 0x9a99,
            anatt: 0x9b,
            anacap: 0x9c,
            anagrpmax: 0xa09f_9e9d,
            nanagrpid: 0xa4a3_a2a1,
            pels: 0xa8a7_a6a5,
            domainid: 0xaaa9,
            megcap: 0xab00_0000_0000_0000_0000_0000_0000_00ac,
            icsvscc: 0xad,
            nwpc: 0xae,
            acwu: 0xb0af,
            ocfs: 0xb2b1,
            maxdna: 0xb300_0000_0000_0000_0000_0000_0000_00b4,
            maxcna: 0xb8b7_b6b5,
            dctype: 0xb9,
            psd: core::array::from_fn(|i| PowerStateDescriptor {
                mp: 0xc000 | u16::try_from(i).unwrap(),
                flags: 0x02,
                enlat: 0xc1,
                apws: 0xc2,
                ..Default::default()
            }),
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
        assert_eq!(le16(&b, 100), 0x6160);
        assert!(b[102..111].iter().all(|&c| c == 0));
        assert_eq!(b[111], 0x24);
        assert_eq!(&b[112..128], &[0x25; 16]);
        assert_eq!(&b[128..134], &[0x62, 0x63, 0x64, 0x65, 0x66, 0x67]);
        assert!(b[134..253].iter().all(|&c| c == 0));
        assert_eq!(&b[253..256], &[0x68, 0x69, 0x6a]);
        assert_eq!(le16(&b, 256), 0x2726);
        assert_eq!(&b[258..264], &[0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d]);
        assert_eq!(&b[264..272], &[0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72]);
        assert_eq!(le32(&b, 272), 0x7675_7473);
        assert_eq!(le32(&b, 276), 0x7a79_7877);
        assert_eq!((b[280], b[295], b[296], b[311]), (0x7c, 0x7b, 0x7e, 0x7d));
        assert_eq!(le32(&b, 312), 0x8281_807f);
        assert_eq!(&b[316..320], &[0x83, 0x84, 0x85, 0x86]);
        assert_eq!(le16(&b, 320), 0x2f2e);
        assert_eq!(&b[322..328], &[0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c]);
        assert_eq!(le32(&b, 328), 0x908f_8e8d);
        assert_eq!(le32(&b, 332), 0x9493_9291);
        assert_eq!(&b[336..344], &[0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c]);
        assert_eq!(le32(&b, 344), 0xa09f_9e9d);
        assert_eq!(le32(&b, 348), 0xa4a3_a2a1);
        assert_eq!(le32(&b, 352), 0xa8a7_a6a5);
        assert_eq!(le16(&b, 356), 0xaaa9);
        assert!(b[358..368].iter().all(|&c| c == 0));
        assert_eq!((b[368], b[383]), (0xac, 0xab));
        assert!(b[384..512].iter().all(|&c| c == 0));
        assert_eq!(&b[512..514], &[0x66, 0x44]);
        assert_eq!(le16(&b, 514), 0x3130);
        assert_eq!(le32(&b, 516), 0x3534_3332);
        assert_eq!(le16(&b, 520), 0x3736);
        assert_eq!(le16(&b, 522), 0x3938);
        assert_eq!(&b[524..526], &[0x3a, 0x3b]);
        assert_eq!(le16(&b, 526), 0x3d3c);
        assert_eq!(le16(&b, 528), 0x3f3e);
        assert_eq!(&b[530..536], &[0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2]);
        assert_eq!(le32(&b, 536), 0x4342_4140);
        assert_eq!(le32(&b, 540), 0x4746_4544);
        assert_eq!((b[544], b[559]), (0xb4, 0xb3));
        assert_eq!(le32(&b, 560), 0xb8b7_b6b5);
        assert!(b[564..768].iter().all(|&c| c == 0));
        assert_eq!(&b[768..801], b"nqn.2014-08.org.nvmexpress:uuid:1");
        assert!(b[801..1024].iter().all(|&c| c == 0));
        assert_eq!(le32(&b, 1792), 0x4b4a_4948);
        assert_eq!(le32(&b, 1796), 0x4f4e_4d4c);
        assert_eq!(le16(&b, 1800), 0x5150);
        assert_eq!(&b[1802..1807], &[0x52, 0x53, 0x54, 0x55, 0xb9]);
        // Everything not owned by a field is zero (the 0xee fill is gone).
        assert!(b[1807..2048].iter().all(|&c| c == 0));
        // PSD i at 2048 + 32 i: MP, flags (byte 3), ENLAT (bytes 7:4), APWS (byte 22).
        assert_eq!(&b[2048..2056], &[0x00, 0xc0, 0, 0x02, 0xc1, 0, 0, 0]);
        assert_eq!(&b[2048 + 31 * 32..2048 + 31 * 32 + 2], &[0x1f, 0xc0]);
        assert_eq!(b[2048 + 22], 0xc2);
        assert!(b[3072..].iter().all(|&c| c == 0));
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
    }
}
