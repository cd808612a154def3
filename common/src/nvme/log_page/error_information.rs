//! The Error Information log page (LID 01h; Base 2.0 Figure 205, libnvme `struct nvme_error_log_page`): one
//! 64-byte entry per recorded error.

use super::super::status::Status;
use crate::wire::{fixed, fixed_mut, le16, le32, le64, put16, put32, put64, WireError};

const ERROR_ENTRY: &str = "ErrorInformationEntry";

/// Size of one Error Information log entry.
pub const ERROR_INFORMATION_ENTRY_SIZE: usize = 64;

/// One Error Information log entry (Base 2.0 Figure 205, libnvme `struct nvme_error_log_page`),
/// 64 bytes. The log is an array of these, newest first, `ELPE + 1` entries long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorInformationEntry {
    /// Error Count (bytes 7:0): unique, incrementing; 0 marks an invalid entry.
    pub error_count: u64,
    /// Submission Queue ID (bytes 9:8); 0xFFFF if not tied to a command.
    pub sqid: u16,
    /// Command ID (bytes 11:10); 0xFFFF if not tied to a command.
    pub cid: u16,
    /// Phase Tag (bit 0 of bytes 13:12).
    pub phase: bool,
    /// Status Field (bits 15:1 of bytes 13:12) of the command that failed.
    pub status: Status,
    /// Parameter Error Location (bytes 15:14): byte in bits 7:0, bit in bits 10:8; 0xFFFF if none.
    pub parameter_error_location: u16,
    /// LBA (bytes 23:16): first LBA that saw the error, if applicable.
    pub lba: u64,
    /// Namespace (bytes 27:24), if applicable.
    pub nsid: u32,
    /// Vendor Specific Information Available (byte 28): a vendor log page ID (0x80..=0xFF) or 0.
    pub vs: u8,
    /// Transport Type (byte 29), as in the discovery log; 0 if not transport related.
    pub trtype: u8,
    /// Command Set Indicator (byte 30) of the failed command.
    pub csi: u8,
    /// Opcode (byte 31) of the failed command (NVMe 2.1; reserved before).
    pub opcode: u8,
    /// Command Specific Information (bytes 39:32).
    pub command_specific: u64,
    /// Transport Type Specific Information (bytes 41:40).
    pub transport_specific: u16,
}

impl ErrorInformationEntry {
    /// A Parameter Error Location pointing at `bit` (0..=7) of `byte` (0..=63) of the command.
    pub fn parameter_location(byte: u8, bit: u8) -> u16 {
        u16::from(byte) | (u16::from(bit & 0x7) << 8)
    }

    /// Byte of the command the Parameter Error Location points at (bits 7:0).
    pub fn parameter_error_byte(&self) -> u8 {
        self.parameter_error_location.to_le_bytes()[0]
    }

    /// Bit of that byte (bits 10:8).
    pub fn parameter_error_bit(&self) -> u8 {
        self.parameter_error_location.to_le_bytes()[1] & 0x7
    }

    /// Encode into the first 64 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<ERROR_INFORMATION_ENTRY_SIZE>(buf, ERROR_ENTRY)?;
        b.fill(0);
        put64(b, 0, self.error_count);
        put16(b, 8, self.sqid);
        put16(b, 10, self.cid);
        put16(b, 12, (self.status.field() << 1) | u16::from(self.phase));
        put16(b, 14, self.parameter_error_location);
        put64(b, 16, self.lba);
        put32(b, 24, self.nsid);
        b[28] = self.vs;
        b[29] = self.trtype;
        b[30] = self.csi;
        b[31] = self.opcode;
        put64(b, 32, self.command_specific);
        put16(b, 40, self.transport_specific);
        Ok(())
    }

    /// The entry as 64 bytes.
    pub fn to_bytes(&self) -> [u8; ERROR_INFORMATION_ENTRY_SIZE] {
        let mut b = [0u8; ERROR_INFORMATION_ENTRY_SIZE];
        // A 64-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 64 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<ERROR_INFORMATION_ENTRY_SIZE>(buf, ERROR_ENTRY)?;
        let sf = le16(b, 12);
        Ok(ErrorInformationEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cid: le16(b, 10),
            phase: sf & 1 != 0,
            status: Status::from_field(sf >> 1),
            parameter_error_location: le16(b, 14),
            lba: le64(b, 16),
            nsid: le32(b, 24),
            vs: b[28],
            trtype: b[29],
            csi: b[30],
            opcode: b[31],
            command_specific: le64(b, 32),
            transport_specific: le16(b, 40),
        })
    }

    /// Encode `entries` back to back as the Error Information log into `buf`. Returns the bytes
    /// written (64 per entry).
    pub fn encode_log(entries: &[ErrorInformationEntry], buf: &mut [u8]) -> Result<usize, WireError> {
        let need = entries.len().saturating_mul(ERROR_INFORMATION_ENTRY_SIZE);
        let got = buf.len();
        let out = buf.get_mut(..need).ok_or(WireError::OutputTooSmall { structure: ERROR_ENTRY, need, got })?;
        for (chunk, e) in out.chunks_exact_mut(ERROR_INFORMATION_ENTRY_SIZE).zip(entries) {
            e.encode(chunk)?;
        }
        Ok(need)
    }

    /// The entries of an Error Information log in `buf` (a trailing partial entry is ignored).
    pub fn parse_log(buf: &[u8]) -> impl Iterator<Item = ErrorInformationEntry> + '_ {
        buf.chunks_exact(ERROR_INFORMATION_ENTRY_SIZE).filter_map(|c| Self::parse(c).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::status::StatusCodeType;
    use proptest::prelude::*;

    #[test]
    fn error_information_entry_layout() {
        // libnvme struct nvme_error_log_page: vs @28, trtype @29, csi @30, opcode @31, cs @32, trtype_spec_info @40.
        let e = ErrorInformationEntry {
            error_count: 0x0807_0605_0403_0201,
            sqid: 0x0a09,
            cid: 0x0c0b,
            phase: true,
            status: Status::INVALID_FIELD.with_dnr(),
            parameter_error_location: ErrorInformationEntry::parameter_location(44, 3),
            lba: 0x1817_1615_1413_1211,
            nsid: 0x1c1b_1a19,
            vs: 0x1d,
            trtype: 0x1e,
            csi: 0x1f,
            opcode: 0x20,
            command_specific: 0x2827_2625_2423_2221,
            transport_specific: 0x2a29,
        };
        let b = e.to_bytes();
        assert_eq!(&b[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(le16(&b, 12), 0x8005);
        assert_eq!(&b[14..16], &[44, 3]);
        assert_eq!(&b[16..42], &(0x11..=0x2a).collect::<Vec<u8>>()[..]);
        assert!(b[42..].iter().all(|&c| c == 0));
        let back = ErrorInformationEntry::parse(&b).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.status.sct(), StatusCodeType::Generic);
        assert_eq!((back.parameter_error_byte(), back.parameter_error_bit()), (44, 3));
        assert!(ErrorInformationEntry::parse(&b[..63]).is_err());

        let mut log = [0u8; 200];
        assert_eq!(
            ErrorInformationEntry::encode_log(&[e, ErrorInformationEntry::default(), e], &mut log).unwrap(),
            192
        );
        let entries: Vec<_> = ErrorInformationEntry::parse_log(&log).collect();
        assert_eq!(entries, [e, ErrorInformationEntry::default(), e]);
        assert!(ErrorInformationEntry::encode_log(&[e; 4], &mut log).is_err());
    }

    proptest! {
        #[test]
        fn error_entry_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(e) = ErrorInformationEntry::parse(&bytes) {
                prop_assert_eq!(ErrorInformationEntry::parse(&e.to_bytes()).unwrap(), e);
                prop_assert_eq!(&e.to_bytes()[..42], &bytes[..42]);
            }
        }
    }
}
