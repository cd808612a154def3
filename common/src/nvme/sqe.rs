//! Submission Queue Entry (NVMe Base 2.0 §4.2, Figure 88 "Common Command Format"), 64 bytes. Over fabrics
//! the SQE travels in a command capsule; fabrics commands (opcode 0x7F) put `fctype` in byte 4 (NVMe-oF
//! 1.1 Figure 8). Typed views of individual commands live beside the command set they belong to and
//! convert from and to this struct.

use super::sgl::SglDescriptor;
use crate::wire::{fixed, fixed_mut, le16, le32, le64, put16, put32, put64, WireError};

const STRUCTURE: &str = "SubmissionQueueEntry";

/// SQE size in bytes.
pub const SQE_SIZE: usize = 64;

/// How the data pointer is to be read (PSDT, CDW0 bits 15:14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPointerKind {
    /// PRPs (PSDT 00b); never valid over fabrics.
    Prp,
    /// SGL with a contiguous metadata buffer (PSDT 01b); what fabrics hosts send.
    SglContiguousMetadata,
    /// SGL with a metadata SGL segment (PSDT 10b).
    SglMetadataSegment,
    /// Reserved (PSDT 11b).
    Reserved,
}

/// PSDT value fabrics hosts set: SGLs, metadata pointer contiguous (Linux `NVME_CMD_SGL_METABUF`).
pub const FLAGS_PSDT_SGL: u8 = 0b01 << 6;

/// A submission queue entry, held as its dwords so that every command's view can be derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubmissionQueueEntry {
    /// Opcode (byte 0).
    pub opcode: u8,
    /// Byte 1: FUSE in bits 1:0, PSDT in bits 7:6.
    pub flags: u8,
    /// Command Identifier (bytes 2-3).
    pub cid: u16,
    /// Namespace Identifier (bytes 4-7); for fabrics commands byte 4 is `fctype`.
    pub nsid: u32,
    /// Command Dword 2 (bytes 8-11).
    pub cdw2: u32,
    /// Command Dword 3 (bytes 12-15).
    pub cdw3: u32,
    /// Metadata Pointer (bytes 16-23).
    pub mptr: u64,
    /// Data Pointer (bytes 24-39): over fabrics, SGL Descriptor 1.
    pub dptr: [u8; 16],
    /// Command Dword 10 (bytes 40-43).
    pub cdw10: u32,
    /// Command Dword 11 (bytes 44-47).
    pub cdw11: u32,
    /// Command Dword 12 (bytes 48-51).
    pub cdw12: u32,
    /// Command Dword 13 (bytes 52-55).
    pub cdw13: u32,
    /// Command Dword 14 (bytes 56-59).
    pub cdw14: u32,
    /// Command Dword 15 (bytes 60-63).
    pub cdw15: u32,
}

impl SubmissionQueueEntry {
    /// A command with `opcode`, SGL data pointer kind and all other fields zero.
    pub fn new(opcode: u8) -> Self {
        SubmissionQueueEntry { opcode, flags: FLAGS_PSDT_SGL, ..Default::default() }
    }

    /// Parse the first 64 bytes of `buf`. Every bit pattern is a syntactically valid SQE; the command's
    /// view checks the fields it uses.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<SQE_SIZE>(buf, STRUCTURE)?;
        let mut dptr = [0u8; 16];
        dptr.copy_from_slice(&b[24..40]);
        Ok(SubmissionQueueEntry {
            opcode: b[0],
            flags: b[1],
            cid: le16(b, 2),
            nsid: le32(b, 4),
            cdw2: le32(b, 8),
            cdw3: le32(b, 12),
            mptr: le64(b, 16),
            dptr,
            cdw10: le32(b, 40),
            cdw11: le32(b, 44),
            cdw12: le32(b, 48),
            cdw13: le32(b, 52),
            cdw14: le32(b, 56),
            cdw15: le32(b, 60),
        })
    }

    /// Encode into the first 64 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<SQE_SIZE>(buf, STRUCTURE)?;
        b[0] = self.opcode;
        b[1] = self.flags;
        put16(b, 2, self.cid);
        put32(b, 4, self.nsid);
        put32(b, 8, self.cdw2);
        put32(b, 12, self.cdw3);
        put64(b, 16, self.mptr);
        b[24..40].copy_from_slice(&self.dptr);
        put32(b, 40, self.cdw10);
        put32(b, 44, self.cdw11);
        put32(b, 48, self.cdw12);
        put32(b, 52, self.cdw13);
        put32(b, 56, self.cdw14);
        put32(b, 60, self.cdw15);
        Ok(())
    }

    /// The SQE as 64 bytes.
    pub fn to_bytes(&self) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        // A 64-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Fused operation (FUSE, bits 1:0 of byte 1): 0 normal, 1 first, 2 second.
    pub fn fuse(&self) -> u8 {
        self.flags & 0b11
    }

    /// PRP or SGL Data Transfer (PSDT, bits 7:6 of byte 1).
    pub fn psdt(&self) -> DataPointerKind {
        match self.flags >> 6 {
            0b00 => DataPointerKind::Prp,
            0b01 => DataPointerKind::SglContiguousMetadata,
            0b10 => DataPointerKind::SglMetadataSegment,
            _ => DataPointerKind::Reserved,
        }
    }

    /// SGL Descriptor 1 from the data pointer.
    pub fn sgl1(&self) -> Result<SglDescriptor, WireError> {
        SglDescriptor::parse(&self.dptr)
    }

    /// Set SGL Descriptor 1 (and PSDT to SGL).
    pub fn set_sgl1(&mut self, sgl: &SglDescriptor) -> Result<(), WireError> {
        self.dptr = sgl.to_bytes()?;
        self.flags = (self.flags & 0x3f) | FLAGS_PSDT_SGL;
        Ok(())
    }

    /// Fabrics command type (byte 4), meaningful when `opcode` is 0x7F.
    pub fn fctype(&self) -> u8 {
        (self.nsid & 0xff) as u8
    }

    /// Errors naming `structure.opcode` unless the opcode is `want`; `allowed` says what was expected. Every
    /// command view starts its parse with this (or [`Self::expect_fabrics`]).
    pub fn expect_opcode(&self, want: u8, structure: &'static str, allowed: &'static str) -> Result<(), WireError> {
        if self.opcode == want {
            Ok(())
        } else {
            Err(WireError::invalid(structure, "opcode", self.opcode, allowed))
        }
    }

    /// Errors naming `structure.opcode` or `structure.fctype` unless this is the fabrics command `fctype`.
    pub fn expect_fabrics(&self, fctype: u8, structure: &'static str, allowed: &'static str) -> Result<(), WireError> {
        self.expect_opcode(super::opcode::FABRICS, structure, "0x7f (fabrics)")?;
        if self.fctype() == fctype {
            Ok(())
        } else {
            Err(WireError::invalid(structure, "fctype", self.fctype(), allowed))
        }
    }

    /// Data transfer length SGL1 describes, or 0 for a command without data.
    pub fn data_length(&self) -> Result<u32, WireError> {
        Ok(self.sgl1()?.length())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::sgl::SglSubtype;
    use proptest::prelude::*;

    #[test]
    fn field_offsets_match_the_common_command_format() {
        let sqe = SubmissionQueueEntry {
            opcode: 0x02,
            flags: 0x40,
            cid: 0x1234,
            nsid: 0x0a0b_0c0d,
            cdw2: 0x1111_1111,
            cdw3: 0x2222_2222,
            mptr: 0x3333_3333_3333_3333,
            dptr: [0x44; 16],
            cdw10: 0xa0a0_a0a0,
            cdw11: 0xb1b1_b1b1,
            cdw12: 0xc2c2_c2c2,
            cdw13: 0xd3d3_d3d3,
            cdw14: 0xe4e4_e4e4,
            cdw15: 0xf5f5_f5f5,
        };
        let b = sqe.to_bytes();
        assert_eq!(b[0], 0x02);
        assert_eq!(b[1], 0x40);
        assert_eq!(&b[2..4], &[0x34, 0x12]);
        assert_eq!(&b[4..8], &[0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(&b[8..12], &[0x11; 4]);
        assert_eq!(&b[12..16], &[0x22; 4]);
        assert_eq!(&b[16..24], &[0x33; 8]);
        assert_eq!(&b[24..40], &[0x44; 16]);
        for (i, byte) in [0xa0u8, 0xb1, 0xc2, 0xd3, 0xe4, 0xf5].into_iter().enumerate() {
            assert_eq!(&b[40 + 4 * i..44 + 4 * i], &[byte; 4], "cdw{}", 10 + i);
        }
        assert_eq!(SubmissionQueueEntry::parse(&b).unwrap(), sqe);
        assert_eq!(sqe.psdt(), DataPointerKind::SglContiguousMetadata);
    }

    #[test]
    fn short_buffers_are_errors() {
        assert!(matches!(SubmissionQueueEntry::parse(&[0u8; 63]), Err(WireError::Short { need: 64, got: 63, .. })));
        assert!(SubmissionQueueEntry::default().encode(&mut [0u8; 10]).is_err());
    }

    #[test]
    fn sgl1_and_fctype() {
        let mut sqe = SubmissionQueueEntry::new(0x7f);
        sqe.nsid = 0x01;
        let sgl = SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset };
        sqe.set_sgl1(&sgl).unwrap();
        assert_eq!(sqe.fctype(), 0x01);
        assert_eq!(sqe.sgl1().unwrap(), sgl);
        assert_eq!(sqe.data_length().unwrap(), 1024);
    }

    proptest! {
        #[test]
        fn round_trip(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            prop_assert_eq!(&sqe.to_bytes()[..], &bytes[..]);
        }
    }
}
