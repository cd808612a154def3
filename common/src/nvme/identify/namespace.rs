//! The Identify Namespace data structure (CNS 00h; NVM Command Set 1.0 Figure 97, Linux `struct nvme_id_ns`)
//! and its LBA formats.

use super::{array, IDENTIFY_DATA_SIZE};
use crate::wire::{fixed, fixed_mut, le128, le16, le32, le64, put128, put16, put32, put64, WireError};

const ID_NS: &str = "IdentifyNamespace";

/// Number of LBA formats (NVMe 2.0: 64, at bytes 383:128; NVMe 1.4 had 16).
pub const LBA_FORMATS: usize = 64;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Maximum Single Source Range Length of Copy, in logical blocks (bytes 75:74).
    pub mssrl: u16,
    /// Maximum Copy Length in logical blocks (bytes 79:76).
    pub mcl: u32,
    /// Maximum Source Range Count of Copy (byte 80), 0's based.
    pub msrc: u8,
    /// Number of Unique Capability LBA Formats (byte 82).
    pub nulbaf: u8,
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
    /// LBA Format 0..63 support (bytes 383:128), 4 bytes each.
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

    /// The LBA data size in bytes of the format in use. Errors if FLBAS names a format beyond NLBAF, or if that
    /// format's LBADS is not in 9..=31 (512 B to 2 GiB).
    pub fn lba_data_size(&self) -> Result<u32, WireError> {
        let index = self.format_index();
        if index > usize::from(self.nlbaf) {
            return Err(WireError::invalid(ID_NS, "flbas", self.flbas, "a format index no greater than NLBAF"));
        }
        let format =
            self.lbaf.get(index).ok_or(WireError::invalid(ID_NS, "flbas", self.flbas, "a format index below 64"))?;
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
        put16(b, 74, self.mssrl);
        put32(b, 76, self.mcl);
        b[80] = self.msrc;
        b[82] = self.nulbaf;
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
        Ok(Self::from_block(fixed::<IDENTIFY_DATA_SIZE>(buf, ID_NS)?))
    }

    fn from_block(b: &[u8; IDENTIFY_DATA_SIZE]) -> Self {
        let mut lbaf = [LbaFormat::default(); LBA_FORMATS];
        for (i, f) in lbaf.iter_mut().enumerate() {
            *f = LbaFormat::parse(b, 128 + 4 * i);
        }
        IdentifyNamespace {
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
            mssrl: le16(b, 74),
            mcl: le32(b, 76),
            msrc: b[80],
            nulbaf: b[82],
            anagrpid: le32(b, 92),
            nsattr: b[99],
            nvmsetid: le16(b, 100),
            endgid: le16(b, 102),
            nguid: array(b, 104),
            eui64: array(b, 120),
            lbaf,
        }
    }
}

// Derived `Default` stops at arrays of 32: the all-zero structure is what a zeroed block parses to.
impl Default for IdentifyNamespace {
    fn default() -> Self {
        Self::from_block(&[0; IDENTIFY_DATA_SIZE])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            mssrl: 0x4c4b,
            mcl: 0x504f_4e4d,
            msrc: 0x51,
            nulbaf: 0x53,
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
        assert_eq!(le16(&b, 74), 0x4c4b);
        assert_eq!(le32(&b, 76), 0x504f_4e4d);
        assert_eq!(&b[80..84], &[0x51, 0, 0x53, 0]);
        assert!(b[84..92].iter().all(|&c| c == 0));
        assert_eq!(le32(&b, 92), 0x5c5b_5a59);
        assert_eq!(&b[96..100], &[0, 0, 0, 0x63]);
        assert_eq!(le16(&b, 100), 0x6564);
        assert_eq!(le16(&b, 102), 0x6766);
        assert_eq!(&b[104..120], &[0x68; 16]);
        assert_eq!(&b[120..128], &[0x78; 8]);
        assert_eq!(&b[128..132], &[0x80, 0x00, 9, 0]);
        assert_eq!(&b[188..192], &[0x80, 0x0f, 24, 3]);
        // NVMe 2.0's formats 16..63 follow at 192; format 63 ends at byte 383.
        assert_eq!(&b[192..196], &[0x80, 0x10, 25, 0]);
        assert_eq!(&b[380..384], &[0x80, 0x3f, 72, 3]);
        assert!(b[384..].iter().all(|&c| c == 0));
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
        // Bits 6:5 extend the index past NVMe 1.4's 16 formats.
        ns.flbas = 0x20;
        ns.nlbaf = 63;
        assert_eq!(ns.format_index(), 16);
        ns.lbaf[16] = LbaFormat::new(13);
        assert_eq!(ns.lba_data_size().unwrap(), 8192);
        ns.flbas = 0x6f;
        assert_eq!(ns.format_index(), 63);
        ns.nlbaf = 62;
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "flbas", .. })));
        ns.flbas = 2;
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "lbads", value: 0, .. })));
        ns.lbaf[2] = LbaFormat::new(32);
        assert!(matches!(ns.lba_data_size(), Err(WireError::InvalidField { field: "lbads", value: 32, .. })));
        assert!(IdentifyNamespace::parse(&[0u8; 4095]).is_err());
        assert!(ns.encode(&mut [0u8; 10]).is_err());
    }

    proptest! {
        #[test]
        fn namespace_round_trip(bytes in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_SIZE)) {
            let ns = IdentifyNamespace::parse(&bytes).unwrap();
            prop_assert_eq!(IdentifyNamespace::parse(&ns.to_bytes()).unwrap(), ns);
            let _ = ns.lba_data_size();
        }
    }
}
