//! Completion Queue Entry (NVMe Base 2.0 §4.6, Figure 90 "Common Completion Queue Entry Layout"), 16 bytes.

use super::status::Status;
use crate::wire::{fixed, fixed_mut, le16, le32, put16, put32, WireError};

const STRUCTURE: &str = "CompletionQueueEntry";

/// CQE size in bytes.
pub const CQE_SIZE: usize = 16;

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompletionQueueEntry {
    /// Dword 0: command specific result (cntlid for Connect, value for Property Get, …).
    pub dw0: u32,
    /// Dword 1: command specific (upper half of an 8-byte Property Get value).
    pub dw1: u32,
    /// SQ Head Pointer (bytes 8-9).
    pub sqhd: u16,
    /// SQ Identifier (bytes 10-11).
    pub sqid: u16,
    /// Command Identifier (bytes 12-13).
    pub cid: u16,
    /// Phase Tag (bit 0 of bytes 14-15); unused over fabrics.
    pub phase: bool,
    /// Status Field (bits 15:1 of bytes 14-15).
    pub status: Status,
}

impl CompletionQueueEntry {
    /// A completion of command `cid` with `status` and all else zero.
    pub fn new(cid: u16, status: Status) -> Self {
        CompletionQueueEntry { cid, status, ..Default::default() }
    }

    /// Parse the first 16 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<CQE_SIZE>(buf, STRUCTURE)?;
        let sf = le16(b, 14);
        Ok(CompletionQueueEntry {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            phase: sf & 1 != 0,
            status: Status::from_field(sf >> 1),
        })
    }

    /// Encode into the first 16 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<CQE_SIZE>(buf, STRUCTURE)?;
        put32(b, 0, self.dw0);
        put32(b, 4, self.dw1);
        put16(b, 8, self.sqhd);
        put16(b, 10, self.sqid);
        put16(b, 12, self.cid);
        put16(b, 14, (self.status.field() << 1) | u16::from(self.phase));
        Ok(())
    }

    /// The CQE as 16 bytes.
    pub fn to_bytes(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        // A 16-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Dwords 0 and 1 as one 64-bit result (Property Get of an 8-byte property).
    pub fn result64(&self) -> u64 {
        u64::from(self.dw0) | (u64::from(self.dw1) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let cqe = CompletionQueueEntry {
            dw0: 0x0403_0201,
            dw1: 0x0807_0605,
            sqhd: 0x0a09,
            sqid: 0x0c0b,
            cid: 0x0e0d,
            phase: true,
            status: Status::INVALID_FIELD.with_dnr(),
        };
        let b = cqe.to_bytes();
        assert_eq!(&b[..14], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        // Linux: status word = (NVME_SC_INVALID_FIELD | NVME_SC_DNR) << 1 | phase = 0x8005.
        assert_eq!(&b[14..16], &0x8005u16.to_le_bytes());
        assert_eq!(CompletionQueueEntry::parse(&b).unwrap(), cqe);
        assert_eq!(cqe.result64(), 0x0807_0605_0403_0201);
    }

    proptest! {
        #[test]
        fn round_trip(bytes in proptest::collection::vec(any::<u8>(), 16)) {
            let cqe = CompletionQueueEntry::parse(&bytes).unwrap();
            prop_assert_eq!(&cqe.to_bytes()[..], &bytes[..]);
        }
    }
}
