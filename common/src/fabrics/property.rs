//! Fabrics Property Get / Property Set and the controller properties they reach: CAP, VS, CC, CSTS.
//!
//! NVMe-oF 1.1 §3.4-3.5 (Figures 23-26) / NVMe Base 2.0 §6.5-6.6; Linux `struct
//! nvmf_property_get_command` / `nvmf_property_set_command` in `include/linux/nvme.h`:
//!
//! | SQE byte | field |
//! |---|---|
//! | 4 | fctype (0x04 Get, 0x00 Set) |
//! | 40 | attrib: bits 2:0 size (0 = 4 bytes, 1 = 8 bytes) |
//! | 44 | offset (u32) |
//! | 48 | value (u64, Set only) |
//!
//! A Property Get returns the value in completion dwords 0 (and 1 for 8-byte properties).
//!
//! Properties are the memory-mapped registers of PCIe controllers (NVMe Base 2.0 §3.1.3, Figure 35);
//! over fabrics only CAP (0x00, 8 bytes), VS (0x08), CC (0x14), CSTS (0x1C) and NSSR (0x20) exist
//! (Linux `NVME_REG_*`). The typed registers here decode the bit fields the target sets and the host
//! reads; bit positions follow `NVME_CAP_*`, `NVME_CC_*` and `NVME_CSTS_*` in `include/linux/nvme.h`.

use crate::nvme::opcode::{fctype, FABRICS};
use crate::nvme::SubmissionQueueEntry;
use crate::wire::WireError;

/// Width of a property access (attrib bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PropertySize {
    /// 4 bytes (attrib size 0).
    Four,
    /// 8 bytes (attrib size 1).
    Eight,
}

impl PropertySize {
    fn from_attrib(structure: &'static str, attrib: u8) -> Result<Self, WireError> {
        match attrib & 0x7 {
            0 => Ok(PropertySize::Four),
            1 => Ok(PropertySize::Eight),
            v => Err(WireError::invalid(structure, "attrib.size", v, "0 (4 bytes) or 1 (8 bytes)")),
        }
    }

    fn attrib(self) -> u32 {
        match self {
            PropertySize::Four => 0,
            PropertySize::Eight => 1,
        }
    }

    /// Bytes accessed.
    pub fn bytes(self) -> u32 {
        match self {
            PropertySize::Four => 4,
            PropertySize::Eight => 8,
        }
    }
}

/// The controller properties defined over fabrics (NVMe Base 2.0 Figure 35; Linux `NVME_REG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Property {
    /// Controller Capabilities (0x00, 8 bytes, read-only).
    Cap,
    /// Version (0x08, 4 bytes, read-only).
    Vs,
    /// Controller Configuration (0x14, 4 bytes, read/write).
    Cc,
    /// Controller Status (0x1C, 4 bytes, read-only).
    Csts,
    /// NVM Subsystem Reset (0x20, 4 bytes, write [`NSSR_RESET`] to reset; optional).
    Nssr,
}

/// Value a host writes to NSSR to reset the NVM subsystem ("NVMe" in ASCII).
pub const NSSR_RESET: u32 = 0x4E56_4D65;

impl Property {
    /// Every property, by offset.
    pub const ALL: [Property; 5] = [Property::Cap, Property::Vs, Property::Cc, Property::Csts, Property::Nssr];

    /// Offset of the property.
    pub fn offset(self) -> u32 {
        match self {
            Property::Cap => 0x00,
            Property::Vs => 0x08,
            Property::Cc => 0x14,
            Property::Csts => 0x1C,
            Property::Nssr => 0x20,
        }
    }

    /// Width of the property.
    pub fn size(self) -> PropertySize {
        match self {
            Property::Cap => PropertySize::Eight,
            _ => PropertySize::Four,
        }
    }

    /// True if a host may set the property (CC and NSSR).
    pub fn is_writable(self) -> bool {
        matches!(self, Property::Cc | Property::Nssr)
    }

    /// The property at `offset`, which must be accessed with its own width. Errors name `offset` (no
    /// property there) or `attrib.size` (wrong width); the target answers Invalid Field in Command.
    pub fn lookup(offset: u32, size: PropertySize) -> Result<Self, WireError> {
        let p = Property::ALL.into_iter().find(|p| p.offset() == offset).ok_or(WireError::invalid(
            "Property",
            "offset",
            offset,
            "0x00 CAP, 0x08 VS, 0x14 CC, 0x1C CSTS, 0x20 NSSR",
        ))?;
        if p.size() != size {
            let allowed = if p.size() == PropertySize::Eight { "1 (8 bytes) for CAP" } else { "0 (4 bytes)" };
            return Err(WireError::invalid("Property", "attrib.size", size.attrib(), allowed));
        }
        Ok(p)
    }
}

fn attrib_byte(sqe: &SubmissionQueueEntry) -> u8 {
    sqe.cdw10.to_le_bytes()[0]
}

/// Property Get (fctype 0x04; NVMe-oF 1.1 Figure 23, Linux `struct nvmf_property_get_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyGet {
    /// Access width (attrib bits 2:0 at byte 40).
    pub size: PropertySize,
    /// Property offset (byte 44).
    pub offset: u32,
}

impl PropertyGet {
    /// Parse a Property Get SQE. A reserved attrib size is an error naming `attrib.size`; the offset is
    /// checked separately by [`Self::property`].
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_fabrics(fctype::PROPERTY_GET, "PropertyGet", "0x04 (Property Get)")?;
        Ok(PropertyGet { size: PropertySize::from_attrib("PropertyGet", attrib_byte(sqe))?, offset: sqe.cdw11 })
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(FABRICS);
        sqe.nsid = u32::from(fctype::PROPERTY_GET);
        sqe.cdw10 = self.size.attrib();
        sqe.cdw11 = self.offset;
        sqe
    }

    /// The property addressed, checked for width ([`Property::lookup`]).
    pub fn property(&self) -> Result<Property, WireError> {
        Property::lookup(self.offset, self.size)
    }

    /// Completion dwords 0 and 1 carrying `value` (dword 1 is 0 for a 4-byte property).
    pub fn result_dwords(&self, value: u64) -> (u32, u32) {
        let [a, b, c, d, e, f, g, h] = value.to_le_bytes();
        match self.size {
            PropertySize::Four => (u32::from_le_bytes([a, b, c, d]), 0),
            PropertySize::Eight => (u32::from_le_bytes([a, b, c, d]), u32::from_le_bytes([e, f, g, h])),
        }
    }
}

/// Property Set (fctype 0x00; NVMe-oF 1.1 Figure 25, Linux `struct nvmf_property_set_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertySet {
    /// Access width (attrib bits 2:0 at byte 40).
    pub size: PropertySize,
    /// Property offset (byte 44).
    pub offset: u32,
    /// Value (bytes 48-55); for a 4-byte property only the low 32 bits are meaningful.
    pub value: u64,
}

impl PropertySet {
    /// Parse a Property Set SQE. A reserved attrib size is an error naming `attrib.size`; the offset is
    /// checked separately by [`Self::property`].
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_fabrics(fctype::PROPERTY_SET, "PropertySet", "0x00 (Property Set)")?;
        Ok(PropertySet {
            size: PropertySize::from_attrib("PropertySet", attrib_byte(sqe))?,
            offset: sqe.cdw11,
            value: u64::from(sqe.cdw12) | (u64::from(sqe.cdw13) << 32),
        })
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(FABRICS);
        sqe.nsid = u32::from(fctype::PROPERTY_SET);
        sqe.cdw10 = self.size.attrib();
        sqe.cdw11 = self.offset;
        let [a, b, c, d, e, f, g, h] = self.value.to_le_bytes();
        sqe.cdw12 = u32::from_le_bytes([a, b, c, d]);
        sqe.cdw13 = u32::from_le_bytes([e, f, g, h]);
        sqe
    }

    /// The property addressed, checked for width and writability: setting CAP, VS or CSTS is an error
    /// naming `offset`.
    pub fn property(&self) -> Result<Property, WireError> {
        let p = Property::lookup(self.offset, self.size)?;
        if !p.is_writable() {
            return Err(WireError::invalid("PropertySet", "offset", self.offset, "0x14 CC or 0x20 NSSR (writable)"));
        }
        Ok(p)
    }

    /// The low 32 bits of the value (what a 4-byte property receives).
    pub fn value32(&self) -> u32 {
        let [a, b, c, d, ..] = self.value.to_le_bytes();
        u32::from_le_bytes([a, b, c, d])
    }
}

/// Bits `shift .. shift + width` of `v`, as a u8 (`width` ≤ 8).
fn bits8(v: u64, shift: u32, width: u32) -> u8 {
    let masked = (v >> shift) & ((1u64 << width) - 1);
    masked.to_le_bytes()[0]
}

fn bit(v: u64, shift: u32) -> bool {
    (v >> shift) & 1 != 0
}

fn put(value: u8, width: u32, shift: u32) -> u64 {
    (u64::from(value) & ((1u64 << width) - 1)) << shift
}

/// Controller Capabilities, CAP (offset 0x00, 8 bytes; NVMe Base 2.0 Figure 36, Linux `NVME_CAP_*`).
/// Encoding truncates each field to its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Maximum Queue Entries Supported, 0's based (bits 15:0; at least 1).
    pub mqes: u16,
    /// Contiguous Queues Required (bit 16; fabrics controllers set it).
    pub cqr: bool,
    /// Arbitration Mechanism Supported (bits 18:17).
    pub ams: u8,
    /// Timeout, in 500 ms units, for CSTS.RDY to follow CC.EN (bits 31:24).
    pub to: u8,
    /// Doorbell Stride (bits 35:32; 0 over fabrics).
    pub dstrd: u8,
    /// NVM Subsystem Reset Supported (bit 36).
    pub nssrs: bool,
    /// Command Sets Supported (bits 44:37; see [`Capabilities::CSS_NVM`]).
    pub css: u8,
    /// Boot Partition Support (bit 45).
    pub bps: bool,
    /// Controller Power Scope (bits 47:46).
    pub cps: u8,
    /// Memory Page Size Minimum, 2^(12 + MPSMIN) bytes (bits 51:48).
    pub mpsmin: u8,
    /// Memory Page Size Maximum, 2^(12 + MPSMAX) bytes (bits 55:52).
    pub mpsmax: u8,
    /// Persistent Memory Region Supported (bit 56).
    pub pmrs: bool,
    /// Controller Memory Buffer Supported (bit 57).
    pub cmbs: bool,
    /// Controller Ready Modes Supported (bits 60:59: CRWMS bit 59, CRIMS bit 60).
    pub crms: u8,
}

impl Capabilities {
    /// CSS bit 0: NVM Command Set.
    pub const CSS_NVM: u8 = 1 << 0;
    /// CSS bit 6: one or more I/O Command Sets (CC.CSS 110b).
    pub const CSS_IO_COMMAND_SETS: u8 = 1 << 6;
    /// CSS bit 7: no I/O Command Set (admin only; discovery controllers).
    pub const CSS_NO_IO: u8 = 1 << 7;

    /// Decode the 64-bit register (reserved bits ignored).
    pub fn from_u64(v: u64) -> Self {
        let [mqes0, mqes1, ..] = v.to_le_bytes();
        Capabilities {
            mqes: u16::from_le_bytes([mqes0, mqes1]),
            cqr: bit(v, 16),
            ams: bits8(v, 17, 2),
            to: bits8(v, 24, 8),
            dstrd: bits8(v, 32, 4),
            nssrs: bit(v, 36),
            css: bits8(v, 37, 8),
            bps: bit(v, 45),
            cps: bits8(v, 46, 2),
            mpsmin: bits8(v, 48, 4),
            mpsmax: bits8(v, 52, 4),
            pmrs: bit(v, 56),
            cmbs: bit(v, 57),
            crms: bits8(v, 59, 2),
        }
    }

    /// Encode the 64-bit register.
    pub fn to_u64(&self) -> u64 {
        u64::from(self.mqes)
            | u64::from(self.cqr) << 16
            | put(self.ams, 2, 17)
            | put(self.to, 8, 24)
            | put(self.dstrd, 4, 32)
            | u64::from(self.nssrs) << 36
            | put(self.css, 8, 37)
            | u64::from(self.bps) << 45
            | put(self.cps, 2, 46)
            | put(self.mpsmin, 4, 48)
            | put(self.mpsmax, 4, 52)
            | u64::from(self.pmrs) << 56
            | u64::from(self.cmbs) << 57
            | put(self.crms, 2, 59)
    }

    /// Maximum entries per queue (MQES + 1).
    pub fn max_queue_entries(&self) -> u32 {
        u32::from(self.mqes) + 1
    }

    /// The ready timeout in milliseconds (TO × 500).
    pub fn timeout_ms(&self) -> u32 {
        u32::from(self.to) * 500
    }
}

/// Version, VS (offset 0x08; NVMe Base 2.0 Figure 37, Linux `NVME_VS()`): MJR bits 31:16, MNR 15:8, TER 7:0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// Major Version Number.
    pub mjr: u16,
    /// Minor Version Number.
    pub mnr: u8,
    /// Tertiary Version Number.
    pub ter: u8,
}

impl Version {
    /// NVMe 1.3.
    pub const V1_3: Version = Version { mjr: 1, mnr: 3, ter: 0 };
    /// NVMe 1.4.
    pub const V1_4: Version = Version { mjr: 1, mnr: 4, ter: 0 };
    /// NVMe 2.0.
    pub const V2_0: Version = Version { mjr: 2, mnr: 0, ter: 0 };

    /// Decode the register.
    pub fn from_u32(v: u32) -> Self {
        let [ter, mnr, mjr0, mjr1] = v.to_le_bytes();
        Version { mjr: u16::from_le_bytes([mjr0, mjr1]), mnr, ter }
    }

    /// Encode the register.
    pub fn to_u32(&self) -> u32 {
        u32::from(self.mjr) << 16 | u32::from(self.mnr) << 8 | u32::from(self.ter)
    }
}

/// CC.SHN, Shutdown Notification (bits 15:14; Linux `NVME_CC_SHN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShutdownNotification {
    /// No notification, no effect (00b).
    #[default]
    None,
    /// Normal shutdown notification (01b).
    Normal,
    /// Abrupt shutdown notification (10b).
    Abrupt,
}

/// CSTS.SHST, Shutdown Status (bits 3:2; Linux `NVME_CSTS_SHST_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShutdownStatus {
    /// Normal operation, no shutdown requested (00b).
    #[default]
    Normal,
    /// Shutdown processing occurring (01b).
    Occurring,
    /// Shutdown processing complete (10b).
    Complete,
}

/// Controller Configuration, CC (offset 0x14; NVMe Base 2.0 Figure 41, Linux `NVME_CC_*`). Encoding
/// truncates each field to its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControllerConfiguration {
    /// Enable (bit 0).
    pub en: bool,
    /// I/O Command Set Selected (bits 6:4; 000b NVM, 110b all supported sets, 111b admin only).
    pub css: u8,
    /// Memory Page Size, 2^(12 + MPS) bytes (bits 10:7).
    pub mps: u8,
    /// Arbitration Mechanism Selected (bits 13:11).
    pub ams: u8,
    /// Shutdown Notification (bits 15:14).
    pub shn: ShutdownNotification,
    /// I/O Submission Queue Entry Size, 2^n bytes (bits 19:16; 6 for 64-byte SQEs).
    pub iosqes: u8,
    /// I/O Completion Queue Entry Size, 2^n bytes (bits 23:20; 4 for 16-byte CQEs).
    pub iocqes: u8,
    /// Controller Ready Independent of Media Enable (bit 24).
    pub crime: bool,
}

impl ControllerConfiguration {
    /// Decode the register. SHN 11b is reserved and rejected (field `shn`); reserved bits are ignored.
    pub fn from_u32(v: u32) -> Result<Self, WireError> {
        let w = u64::from(v);
        let shn = match bits8(w, 14, 2) {
            0 => ShutdownNotification::None,
            1 => ShutdownNotification::Normal,
            2 => ShutdownNotification::Abrupt,
            r => return Err(WireError::invalid("ControllerConfiguration", "shn", r, "00b, 01b or 10b")),
        };
        Ok(ControllerConfiguration {
            en: bit(w, 0),
            css: bits8(w, 4, 3),
            mps: bits8(w, 7, 4),
            ams: bits8(w, 11, 3),
            shn,
            iosqes: bits8(w, 16, 4),
            iocqes: bits8(w, 20, 4),
            crime: bit(w, 24),
        })
    }

    /// Encode the register.
    pub fn to_u32(&self) -> u32 {
        let shn = match self.shn {
            ShutdownNotification::None => 0,
            ShutdownNotification::Normal => 1,
            ShutdownNotification::Abrupt => 2,
        };
        let v = u64::from(self.en)
            | put(self.css, 3, 4)
            | put(self.mps, 4, 7)
            | put(self.ams, 3, 11)
            | put(shn, 2, 14)
            | put(self.iosqes, 4, 16)
            | put(self.iocqes, 4, 20)
            | u64::from(self.crime) << 24;
        let [a, b, c, d, ..] = v.to_le_bytes();
        u32::from_le_bytes([a, b, c, d])
    }
}

/// Controller Status, CSTS (offset 0x1C; NVMe Base 2.0 Figure 42, Linux `NVME_CSTS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControllerStatus {
    /// Ready (bit 0).
    pub rdy: bool,
    /// Controller Fatal Status (bit 1).
    pub cfs: bool,
    /// Shutdown Status (bits 3:2).
    pub shst: ShutdownStatus,
    /// NVM Subsystem Reset Occurred (bit 4).
    pub nssro: bool,
    /// Processing Paused (bit 5).
    pub pp: bool,
    /// Shutdown Type (bit 6): set when the shutdown reported is an NVM subsystem shutdown.
    pub st: bool,
}

impl ControllerStatus {
    /// Decode the register. SHST 11b is reserved and rejected (field `shst`); reserved bits are ignored.
    pub fn from_u32(v: u32) -> Result<Self, WireError> {
        let w = u64::from(v);
        let shst = match bits8(w, 2, 2) {
            0 => ShutdownStatus::Normal,
            1 => ShutdownStatus::Occurring,
            2 => ShutdownStatus::Complete,
            r => return Err(WireError::invalid("ControllerStatus", "shst", r, "00b, 01b or 10b")),
        };
        Ok(ControllerStatus { rdy: bit(w, 0), cfs: bit(w, 1), shst, nssro: bit(w, 4), pp: bit(w, 5), st: bit(w, 6) })
    }

    /// Encode the register.
    pub fn to_u32(&self) -> u32 {
        let shst = match self.shst {
            ShutdownStatus::Normal => 0,
            ShutdownStatus::Occurring => 1,
            ShutdownStatus::Complete => 2,
        };
        u32::from(self.rdy)
            | u32::from(self.cfs) << 1
            | shst << 2
            | u32::from(self.nssro) << 4
            | u32::from(self.pp) << 5
            | u32::from(self.st) << 6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn get_and_set_layout() {
        // struct nvmf_property_get_command / _set_command: fctype @4, attrib @40, offset @44, value @48.
        let g = PropertyGet { size: PropertySize::Eight, offset: 0x0102_0304 };
        let b = g.to_sqe().to_bytes();
        assert_eq!((b[0], b[4], b[40]), (0x7f, 0x04, 1));
        assert_eq!(&b[44..48], &[4, 3, 2, 1]);
        assert_eq!(PropertyGet::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap(), g);

        let s = PropertySet { size: PropertySize::Four, offset: 0x14, value: 0x1112_1314_1516_1718 };
        let b = s.to_sqe().to_bytes();
        assert_eq!((b[0], b[4], b[40]), (0x7f, 0x00, 0));
        assert_eq!(&b[44..48], &[0x14, 0, 0, 0]);
        assert_eq!(&b[48..56], &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]);
        assert_eq!(PropertySet::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap(), s);
        assert_eq!(s.value32(), 0x1516_1718);
        assert_eq!(g.result_dwords(0x1122_3344_5566_7788), (0x5566_7788, 0x1122_3344));
        let g4 = PropertyGet { size: PropertySize::Four, offset: 0x1c };
        assert_eq!(g4.result_dwords(0x1122_3344_5566_7788), (0x5566_7788, 0));
    }

    #[test]
    fn property_offsets_match_nvme_reg() {
        // NVME_REG_CAP 0x00, NVME_REG_VS 0x08, NVME_REG_CC 0x14, NVME_REG_CSTS 0x1c, NVME_REG_NSSR 0x20.
        let offsets: Vec<u32> = Property::ALL.iter().map(|p| p.offset()).collect();
        assert_eq!(offsets, [0x00, 0x08, 0x14, 0x1c, 0x20]);
        assert_eq!(Property::lookup(0, PropertySize::Eight), Ok(Property::Cap));
        assert_eq!(Property::lookup(0x1c, PropertySize::Four), Ok(Property::Csts));
        assert!(matches!(
            Property::lookup(0, PropertySize::Four),
            Err(WireError::InvalidField { field: "attrib.size", .. })
        ));
        assert!(matches!(
            Property::lookup(0x14, PropertySize::Eight),
            Err(WireError::InvalidField { field: "attrib.size", .. })
        ));
        for bad in [0x04, 0x0c, 0x24, 0x28, 0xffff_ffff] {
            assert!(matches!(
                Property::lookup(bad, PropertySize::Four),
                Err(WireError::InvalidField { field: "offset", .. })
            ));
        }
        let set = |offset| PropertySet { size: PropertySize::Four, offset, value: 0 };
        assert_eq!(set(0x14).property(), Ok(Property::Cc));
        assert_eq!(set(0x20).property(), Ok(Property::Nssr));
        assert!(matches!(set(0x1c).property(), Err(WireError::InvalidField { field: "offset", .. })));
        assert_eq!(PropertyGet { size: PropertySize::Four, offset: 0x08 }.property(), Ok(Property::Vs));
    }

    #[test]
    fn command_rejections() {
        let mut sqe = PropertyGet { size: PropertySize::Four, offset: 0 }.to_sqe();
        sqe.cdw10 = 2;
        assert!(matches!(
            PropertyGet::from_sqe(&sqe),
            Err(WireError::InvalidField { field: "attrib.size", value: 2, .. })
        ));
        sqe.cdw10 = 0;
        sqe.nsid = 0;
        assert!(matches!(PropertyGet::from_sqe(&sqe), Err(WireError::InvalidField { field: "fctype", .. })));
        assert!(PropertySet::from_sqe(&sqe).is_ok());
        sqe.opcode = 0x02;
        assert!(matches!(PropertySet::from_sqe(&sqe), Err(WireError::InvalidField { field: "opcode", .. })));
    }

    #[test]
    fn register_bits_match_linux() {
        // NVME_CAP_MQES 15:0, TIMEOUT 31:24, STRIDE 35:32, NSSRC 36, CSS 44:37, MPSMIN 51:48,
        // MPSMAX 55:52, CMBS 57, CRWMS 59, CRIMS 60.
        let cap = Capabilities {
            mqes: 127,
            cqr: true,
            to: 30,
            css: Capabilities::CSS_NVM,
            mpsmin: 0,
            mpsmax: 4,
            ..Default::default()
        };
        assert_eq!(cap.to_u64(), 127 | 1 << 16 | 30 << 24 | 1 << 37 | 4 << 52);
        assert_eq!(cap.max_queue_entries(), 128);
        assert_eq!(cap.timeout_ms(), 15_000);
        let all = Capabilities {
            mqes: 0xffff,
            cqr: true,
            ams: 3,
            to: 0xff,
            dstrd: 0xf,
            nssrs: true,
            css: 0xff,
            bps: true,
            cps: 3,
            mpsmin: 0xf,
            mpsmax: 0xf,
            pmrs: true,
            cmbs: true,
            crms: 3,
        };
        assert_eq!(all.to_u64(), 0x1BFF_FFFF_FF07_FFFF);
        assert_eq!(Capabilities::from_u64(u64::MAX), all);

        // NVME_VS(1, 4, 0) = 0x10400.
        assert_eq!(Version::V1_4.to_u32(), 0x0001_0400);
        assert_eq!(Version::from_u32(0x0002_0100), Version { mjr: 2, mnr: 1, ter: 0 });

        // NVME_CC_ENABLE, CSS 6:4, MPS 10:7, AMS 13:11, SHN 15:14, IOSQES 19:16, IOCQES 23:20, CRIME 24.
        let cc = ControllerConfiguration {
            en: true,
            iosqes: 6,
            iocqes: 4,
            shn: ShutdownNotification::Normal,
            ..Default::default()
        };
        assert_eq!(cc.to_u32(), 1 | 6 << 16 | 4 << 20 | 1 << 14);
        let cc = ControllerConfiguration { css: 7, mps: 0xf, ams: 7, crime: true, ..Default::default() };
        assert_eq!(cc.to_u32(), 7 << 4 | 0xf << 7 | 7 << 11 | 1 << 24);
        assert_eq!(ControllerConfiguration::from_u32(2 << 14).unwrap().shn, ShutdownNotification::Abrupt);
        assert!(matches!(
            ControllerConfiguration::from_u32(3 << 14),
            Err(WireError::InvalidField { field: "shn", value: 3, .. })
        ));

        // NVME_CSTS_RDY 0, CFS 1, SHST 3:2, NSSRO 4, PP 5; ST 6.
        let csts = ControllerStatus { rdy: true, shst: ShutdownStatus::Complete, pp: true, ..Default::default() };
        assert_eq!(csts.to_u32(), 1 | 2 << 2 | 1 << 5);
        let csts = ControllerStatus {
            cfs: true,
            nssro: true,
            st: true,
            shst: ShutdownStatus::Occurring,
            ..Default::default()
        };
        assert_eq!(csts.to_u32(), 1 << 1 | 1 << 2 | 1 << 4 | 1 << 6);
        assert!(matches!(ControllerStatus::from_u32(3 << 2), Err(WireError::InvalidField { field: "shst", .. })));
    }

    proptest! {
        #[test]
        fn cap_round_trip(v in any::<u64>()) {
            let cap = Capabilities::from_u64(v);
            prop_assert_eq!(Capabilities::from_u64(cap.to_u64()), cap);
            // Only reserved bits (23:19, 58, 63:61) are lost.
            prop_assert_eq!(cap.to_u64(), v & 0x1BFF_FFFF_FF07_FFFF);
        }

        #[test]
        fn registers_round_trip(v in any::<u32>()) {
            prop_assert_eq!(Version::from_u32(v).to_u32(), v);
            match ControllerConfiguration::from_u32(v) {
                Ok(cc) => {
                    prop_assert_eq!(cc.to_u32(), v & 0x01FF_FFF1);
                    prop_assert_eq!(ControllerConfiguration::from_u32(cc.to_u32()).unwrap(), cc);
                }
                Err(_) => prop_assert_eq!((v >> 14) & 3, 3),
            }
            match ControllerStatus::from_u32(v) {
                Ok(cs) => prop_assert_eq!(cs.to_u32(), v & 0x7f),
                Err(_) => prop_assert_eq!((v >> 2) & 3, 3),
            }
        }

        #[test]
        fn arbitrary_sqe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            if let Ok(g) = PropertyGet::from_sqe(&sqe) {
                prop_assert_eq!(PropertyGet::from_sqe(&g.to_sqe()).unwrap(), g);
                let _ = g.property();
            }
            if let Ok(s) = PropertySet::from_sqe(&sqe) {
                prop_assert_eq!(PropertySet::from_sqe(&s.to_sqe()).unwrap(), s);
                let _ = s.property();
            }
        }

        #[test]
        fn set_round_trip(offset in any::<u32>(), value in any::<u64>(), eight in any::<bool>()) {
            let size = if eight { PropertySize::Eight } else { PropertySize::Four };
            let s = PropertySet { size, offset, value };
            prop_assert_eq!(PropertySet::from_sqe(&s.to_sqe()).unwrap(), s);
            let g = PropertyGet { size, offset };
            prop_assert_eq!(PropertyGet::from_sqe(&g.to_sqe()).unwrap(), g);
        }
    }
}
