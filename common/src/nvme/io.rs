//! NVM command set I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management (with its range list) and
//! Compare.
//!
//! Layouts follow the NVM Command Set Specification 1.0 (§3.2.3 Dataset Management, §3.2.4 Read, §3.2.6
//! Write, §3.2.8 Write Zeroes, §3.2.1 Compare) and NVMe Base 2.0 §7.1 Flush; the Linux mirror is
//! `struct nvme_rw_command`, `struct nvme_dsm_cmd`, `struct nvme_dsm_range` and
//! `struct nvme_write_zeroes_cmd` in `include/linux/nvme.h`. Read, Write and Compare share one layout:
//!
//! | dword | bits | field |
//! |---|---|---|
//! | cdw10-11 | 63:0 | SLBA |
//! | cdw12 | 15:0 | NLB (0's based) |
//! | cdw12 | 23:20 | DTYPE (Write only; reserved in Read and Compare) |
//! | cdw12 | 29:26 | PRINFO (PRACT 29, PRCHK 28:26) |
//! | cdw12 | 30 / 31 | FUA / LR |
//! | cdw13 | 7:0 | DSM |
//! | cdw13 | 31:16 | DSPEC (Write only) |
//!
//! Views parse from and encode to [`SubmissionQueueEntry`]; the data pointer is the transport's business
//! and is left to the caller ([`SubmissionQueueEntry::set_sgl1`]). [`IoCommand::from_sqe`] dispatches on
//! the opcode; an opcode outside this set yields a [`WireError::InvalidField`] naming the field
//! [`OPCODE_FIELD`], which the target answers with Invalid Command Opcode.

use super::opcode::io as op;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{fixed, fixed_mut, le32, le64, put32, put64, WireError};

/// The field name an unknown-opcode [`WireError::InvalidField`] carries (see [`is_invalid_opcode`]).
pub const OPCODE_FIELD: &str = "opcode";

/// NSID meaning "all namespaces" (Flush with this NSID flushes every attached namespace; Linux
/// `NVME_NSID_ALL`).
pub const NSID_ALL: u32 = 0xFFFF_FFFF;

/// True if `err` reports an opcode this command set does not define: the target answers
/// [`crate::nvme::Status::INVALID_OPCODE`] rather than Invalid Field.
pub fn is_invalid_opcode(err: &WireError) -> bool {
    matches!(err, WireError::InvalidField { field, .. } if *field == OPCODE_FIELD)
}

/// Number of logical blocks a 0's based NLB describes.
fn blocks_of(nlb: u16) -> u32 {
    u32::from(nlb) + 1
}

/// One past the last LBA, or `None` if the range would pass `u64::MAX`.
fn end_of(slba: u64, blocks: u32) -> Option<u64> {
    slba.checked_add(u64::from(blocks))
}

const CDW12_DTYPE_SHIFT: u32 = 20;
const CDW12_PRINFO_SHIFT: u32 = 26;
const CDW12_FUA: u32 = 1 << 30;
const CDW12_LR: u32 = 1 << 31;
const CDW12_DEAC: u32 = 1 << 25;

macro_rules! rw_command {
    ($(#[$doc:meta])* $name:ident, $opcode:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            /// Namespace Identifier.
            pub nsid: u32,
            /// Starting LBA (cdw10-11).
            pub slba: u64,
            /// Number of Logical Blocks, 0's based (cdw12 bits 15:0); see [`Self::blocks`].
            pub nlb: u16,
            /// Directive Type (cdw12 bits 23:20, 4 bits; defined for Write, reserved otherwise).
            pub dtype: u8,
            /// Protection Information field (cdw12 bits 29:26, 4 bits: PRACT bit 3, PRCHK bits 2:0).
            pub prinfo: u8,
            /// Force Unit Access (cdw12 bit 30).
            pub fua: bool,
            /// Limited Retry (cdw12 bit 31).
            pub lr: bool,
            /// Dataset Management hints (cdw13 bits 7:0).
            pub dsm: u8,
            /// Directive Specific (cdw13 bits 31:16; defined for Write, reserved otherwise).
            pub dspec: u16,
        }

        impl $name {
            /// The opcode of this command.
            pub const OPCODE: u8 = $opcode;

            /// Parse from an SQE whose opcode is [`Self::OPCODE`]. Reserved bits are ignored.
            pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
                sqe.expect_opcode(Self::OPCODE, stringify!($name), "the command's own opcode")?;
                let cdw12 = sqe.cdw12;
                Ok($name {
                    nsid: sqe.nsid,
                    slba: u64::from(sqe.cdw10) | (u64::from(sqe.cdw11) << 32),
                    nlb: (cdw12 & 0xffff) as u16,
                    dtype: ((cdw12 >> CDW12_DTYPE_SHIFT) & 0xf) as u8,
                    prinfo: ((cdw12 >> CDW12_PRINFO_SHIFT) & 0xf) as u8,
                    fua: cdw12 & CDW12_FUA != 0,
                    lr: cdw12 & CDW12_LR != 0,
                    dsm: (sqe.cdw13 & 0xff) as u8,
                    dspec: (sqe.cdw13 >> 16) as u16,
                })
            }

            /// Encode into an SQE (command identifier 0, no data pointer). `dtype` and `prinfo` are
            /// truncated to their 4-bit fields.
            pub fn to_sqe(&self) -> SubmissionQueueEntry {
                let mut sqe = SubmissionQueueEntry::new(Self::OPCODE);
                sqe.nsid = self.nsid;
                #[expect(clippy::cast_possible_truncation, reason = "splitting SLBA into its two dwords")]
                {
                    sqe.cdw10 = self.slba as u32;
                    sqe.cdw11 = (self.slba >> 32) as u32;
                }
                sqe.cdw12 = u32::from(self.nlb)
                    | (u32::from(self.dtype & 0xf) << CDW12_DTYPE_SHIFT)
                    | (u32::from(self.prinfo & 0xf) << CDW12_PRINFO_SHIFT)
                    | if self.fua { CDW12_FUA } else { 0 }
                    | if self.lr { CDW12_LR } else { 0 };
                sqe.cdw13 = u32::from(self.dsm) | (u32::from(self.dspec) << 16);
                sqe
            }

            /// Number of logical blocks (NLB + 1), 1..=65536.
            pub fn blocks(&self) -> u32 {
                blocks_of(self.nlb)
            }

            /// One past the last LBA the command touches, or `None` if SLBA + blocks passes
            /// `u64::MAX` (the target answers LBA Out of Range).
            pub fn end_lba(&self) -> Option<u64> {
                end_of(self.slba, self.blocks())
            }

            /// Bytes of data the command moves for logical blocks of `lba_size` bytes (metadata not
            /// included). Cannot overflow: at most 65536 × 2³² bytes.
            pub fn data_len(&self, lba_size: u32) -> u64 {
                u64::from(self.blocks()) * u64::from(lba_size)
            }
        }
    };
}

rw_command!(
    /// Read (opcode 0x02; NVM Command Set 1.0 §3.2.4, Linux `struct nvme_rw_command`).
    Read,
    op::READ
);
rw_command!(
    /// Write (opcode 0x01; NVM Command Set 1.0 §3.2.6, Linux `struct nvme_rw_command`).
    Write,
    op::WRITE
);
rw_command!(
    /// Compare (opcode 0x05; NVM Command Set 1.0 §3.2.1): same layout as Read; the controller compares
    /// the host's data with the media.
    Compare,
    op::COMPARE
);

/// Flush (opcode 0x00; NVMe Base 2.0 §7.1): commit volatile write cache contents of namespace `nsid`, or
/// of every namespace when `nsid` is [`NSID_ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flush {
    /// Namespace Identifier ([`NSID_ALL`] for all namespaces).
    pub nsid: u32,
}

impl Flush {
    /// The opcode of this command.
    pub const OPCODE: u8 = op::FLUSH;

    /// Parse from an SQE whose opcode is Flush.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(Self::OPCODE, "Flush", "the command's own opcode")?;
        Ok(Flush { nsid: sqe.nsid })
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(Self::OPCODE);
        sqe.nsid = self.nsid;
        sqe
    }

    /// True if the flush applies to all namespaces.
    pub fn all_namespaces(&self) -> bool {
        self.nsid == NSID_ALL
    }
}

/// Write Zeroes (opcode 0x08; NVM Command Set 1.0 §3.2.8, Linux `struct nvme_write_zeroes_cmd`): no data
/// transfer; cdw12 holds NLB 15:0, DEAC bit 25, FUA bit 30, LR bit 31.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteZeroes {
    /// Namespace Identifier.
    pub nsid: u32,
    /// Starting LBA (cdw10-11).
    pub slba: u64,
    /// Number of Logical Blocks, 0's based (cdw12 bits 15:0).
    pub nlb: u16,
    /// Deallocate (cdw12 bit 25): the host allows the blocks to be deallocated.
    pub deac: bool,
    /// Force Unit Access (cdw12 bit 30).
    pub fua: bool,
    /// Limited Retry (cdw12 bit 31).
    pub lr: bool,
}

impl WriteZeroes {
    /// The opcode of this command.
    pub const OPCODE: u8 = op::WRITE_ZEROES;

    /// Parse from an SQE whose opcode is Write Zeroes. Reserved bits (and PRINFO) are ignored.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(Self::OPCODE, "WriteZeroes", "the command's own opcode")?;
        Ok(WriteZeroes {
            nsid: sqe.nsid,
            slba: u64::from(sqe.cdw10) | (u64::from(sqe.cdw11) << 32),
            nlb: (sqe.cdw12 & 0xffff) as u16,
            deac: sqe.cdw12 & CDW12_DEAC != 0,
            fua: sqe.cdw12 & CDW12_FUA != 0,
            lr: sqe.cdw12 & CDW12_LR != 0,
        })
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(Self::OPCODE);
        sqe.nsid = self.nsid;
        #[expect(clippy::cast_possible_truncation, reason = "splitting SLBA into its two dwords")]
        {
            sqe.cdw10 = self.slba as u32;
            sqe.cdw11 = (self.slba >> 32) as u32;
        }
        sqe.cdw12 = u32::from(self.nlb)
            | if self.deac { CDW12_DEAC } else { 0 }
            | if self.fua { CDW12_FUA } else { 0 }
            | if self.lr { CDW12_LR } else { 0 };
        sqe
    }

    /// Number of logical blocks (NLB + 1).
    pub fn blocks(&self) -> u32 {
        blocks_of(self.nlb)
    }

    /// One past the last LBA, or `None` on overflow.
    pub fn end_lba(&self) -> Option<u64> {
        end_of(self.slba, self.blocks())
    }
}

/// Size of one Dataset Management range (NVM Command Set 1.0 Figure 39, Linux `struct nvme_dsm_range`).
pub const DSM_RANGE_SIZE: usize = 16;

/// Most ranges one Dataset Management command carries (NR is 8 bits, 0's based; Linux
/// `NVME_DSM_MAX_RANGES`).
pub const DSM_MAX_RANGES: usize = 256;

const DSM_IDR: u32 = 1 << 0;
const DSM_IDW: u32 = 1 << 1;
const DSM_AD: u32 = 1 << 2;

/// Dataset Management (opcode 0x09; NVM Command Set 1.0 §3.2.3, Linux `struct nvme_dsm_cmd`): NR in cdw10
/// bits 7:0 (0's based), attributes in cdw11 (IDR bit 0, IDW bit 1, AD bit 2). The range list
/// (`(nr + 1) × 16` bytes) is the command's data; read it with [`DatasetManagement::ranges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DatasetManagement {
    /// Namespace Identifier.
    pub nsid: u32,
    /// Number of Ranges, 0's based (cdw10 bits 7:0); see [`Self::range_count`].
    pub nr: u8,
    /// Integral Dataset for Read (cdw11 bit 0).
    pub idr: bool,
    /// Integral Dataset for Write (cdw11 bit 1).
    pub idw: bool,
    /// Attribute – Deallocate (cdw11 bit 2).
    pub ad: bool,
}

impl DatasetManagement {
    /// The opcode of this command.
    pub const OPCODE: u8 = op::DATASET_MANAGEMENT;

    /// Parse from an SQE whose opcode is Dataset Management. Reserved bits are ignored.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(Self::OPCODE, "DatasetManagement", "the command's own opcode")?;
        Ok(DatasetManagement {
            nsid: sqe.nsid,
            nr: (sqe.cdw10 & 0xff) as u8,
            idr: sqe.cdw11 & DSM_IDR != 0,
            idw: sqe.cdw11 & DSM_IDW != 0,
            ad: sqe.cdw11 & DSM_AD != 0,
        })
    }

    /// Encode into an SQE (command identifier 0, no data pointer).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(Self::OPCODE);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.nr);
        sqe.cdw11 =
            if self.idr { DSM_IDR } else { 0 } | if self.idw { DSM_IDW } else { 0 } | if self.ad { DSM_AD } else { 0 };
        sqe
    }

    /// Number of ranges (NR + 1), 1..=256.
    pub fn range_count(&self) -> usize {
        usize::from(self.nr) + 1
    }

    /// Bytes of range list the command carries.
    pub fn range_list_len(&self) -> usize {
        self.range_count() * DSM_RANGE_SIZE
    }

    /// Iterate over the range list in `buf`, which must hold at least NR + 1 ranges (extra bytes are
    /// ignored). Does not allocate.
    pub fn ranges<'a>(&self, buf: &'a [u8]) -> Result<DsmRanges<'a>, WireError> {
        let need = self.range_list_len();
        let list = buf.get(..need).ok_or(WireError::Short { structure: "DsmRangeList", need, got: buf.len() })?;
        Ok(DsmRanges { chunks: list.chunks_exact(DSM_RANGE_SIZE) })
    }
}

/// One Dataset Management range (NVM Command Set 1.0 Figure 39; Linux `struct nvme_dsm_range`: `cattr`
/// @0, `nlb` @4, `slba` @8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsmRange {
    /// Context Attributes (bytes 0-3).
    pub cattr: u32,
    /// Length in logical blocks (bytes 4-7). Unlike command NLB fields this is **not** 0's based.
    pub length: u32,
    /// Starting LBA (bytes 8-15).
    pub slba: u64,
}

impl DsmRange {
    /// Parse the 16-byte range at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<DSM_RANGE_SIZE>(buf, "DsmRange")?;
        Ok(Self::from_array(b))
    }

    fn from_array(b: &[u8; DSM_RANGE_SIZE]) -> Self {
        DsmRange { cattr: le32(b, 0), length: le32(b, 4), slba: le64(b, 8) }
    }

    /// Encode into the first 16 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<DSM_RANGE_SIZE>(buf, "DsmRange")?;
        put32(b, 0, self.cattr);
        put32(b, 4, self.length);
        put64(b, 8, self.slba);
        Ok(())
    }

    /// The range as 16 bytes.
    pub fn to_bytes(&self) -> [u8; DSM_RANGE_SIZE] {
        let mut b = [0u8; DSM_RANGE_SIZE];
        // A 16-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// One past the last LBA, or `None` on overflow.
    pub fn end_lba(&self) -> Option<u64> {
        end_of(self.slba, self.length)
    }
}

/// Iterator over a Dataset Management range list (see [`DatasetManagement::ranges`]).
#[derive(Debug, Clone)]
pub struct DsmRanges<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for DsmRanges<'_> {
    type Item = DsmRange;

    fn next(&mut self) -> Option<DsmRange> {
        let chunk = self.chunks.next()?;
        // chunks_exact yields exactly DSM_RANGE_SIZE bytes.
        chunk.try_into().ok().map(DsmRange::from_array)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for DsmRanges<'_> {}

/// An NVM command set I/O command, dispatched on the SQE opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoCommand {
    /// Flush.
    Flush(Flush),
    /// Write.
    Write(Write),
    /// Read.
    Read(Read),
    /// Compare.
    Compare(Compare),
    /// Write Zeroes.
    WriteZeroes(WriteZeroes),
    /// Dataset Management.
    DatasetManagement(DatasetManagement),
}

impl IoCommand {
    /// The view for `sqe`'s opcode, or a [`WireError::InvalidField`] on field [`OPCODE_FIELD`] for an
    /// opcode outside this set (answer with Invalid Command Opcode; see [`is_invalid_opcode`]).
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        Ok(match sqe.opcode {
            op::FLUSH => IoCommand::Flush(Flush::from_sqe(sqe)?),
            op::WRITE => IoCommand::Write(Write::from_sqe(sqe)?),
            op::READ => IoCommand::Read(Read::from_sqe(sqe)?),
            op::COMPARE => IoCommand::Compare(Compare::from_sqe(sqe)?),
            op::WRITE_ZEROES => IoCommand::WriteZeroes(WriteZeroes::from_sqe(sqe)?),
            op::DATASET_MANAGEMENT => IoCommand::DatasetManagement(DatasetManagement::from_sqe(sqe)?),
            other => {
                return Err(WireError::invalid(
                    "IoCommand",
                    OPCODE_FIELD,
                    other,
                    "0x00 Flush, 0x01 Write, 0x02 Read, 0x05 Compare, 0x08 Write Zeroes, 0x09 Dataset Management",
                ))
            }
        })
    }

    /// Encode into an SQE (command identifier 0, no data pointer).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        match self {
            IoCommand::Flush(c) => c.to_sqe(),
            IoCommand::Write(c) => c.to_sqe(),
            IoCommand::Read(c) => c.to_sqe(),
            IoCommand::Compare(c) => c.to_sqe(),
            IoCommand::WriteZeroes(c) => c.to_sqe(),
            IoCommand::DatasetManagement(c) => c.to_sqe(),
        }
    }

    /// The namespace the command addresses.
    pub fn nsid(&self) -> u32 {
        match self {
            IoCommand::Flush(c) => c.nsid,
            IoCommand::Write(c) => c.nsid,
            IoCommand::Read(c) => c.nsid,
            IoCommand::Compare(c) => c.nsid,
            IoCommand::WriteZeroes(c) => c.nsid,
            IoCommand::DatasetManagement(c) => c.nsid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rw_layout_matches_nvme_rw_command() {
        // struct nvme_rw_command: slba @40, length @48, control @50 (LR 1<<15, FUA 1<<14, PRINFO 13:10,
        // DTYPE 7:4), dsmgmt @52 (DSM 7:0, DSPEC 31:16).
        let w = Write {
            nsid: 0x0102_0304,
            slba: 0x1112_1314_1516_1718,
            nlb: 0x2122,
            dtype: 0x1,
            prinfo: 0b1001,
            fua: true,
            lr: false,
            dsm: 0x33,
            dspec: 0x4445,
        };
        let b = w.to_sqe().to_bytes();
        assert_eq!(b[0], 0x01);
        assert_eq!(&b[4..8], &[0x04, 0x03, 0x02, 0x01]);
        assert_eq!(&b[40..48], &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]);
        assert_eq!(&b[48..50], &[0x22, 0x21]);
        let control = u16::from_le_bytes([b[50], b[51]]);
        assert_eq!(control, (1 << 14) | (0b1001 << 10) | (0x1 << 4));
        assert_eq!(&b[52..56], &[0x33, 0x00, 0x45, 0x44]);
        let sqe = SubmissionQueueEntry::parse(&b).unwrap();
        assert_eq!(Write::from_sqe(&sqe).unwrap(), w);

        let r = Read { lr: true, ..Default::default() };
        assert_eq!(r.to_sqe().to_bytes()[51], 0x80, "LR is control bit 15");
        assert_eq!(r.to_sqe().opcode, 0x02);
        assert_eq!(Compare::default().to_sqe().opcode, 0x05);
    }

    #[test]
    fn write_zeroes_and_dsm_layout() {
        // struct nvme_write_zeroes_cmd: same slba/length/control placement; DEAC is control bit 9.
        let wz = WriteZeroes { nsid: 1, slba: 0x10, nlb: 7, deac: true, fua: false, lr: true };
        let b = wz.to_sqe().to_bytes();
        assert_eq!(b[0], 0x08);
        assert_eq!(&b[40..48], &[0x10, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(u16::from_le_bytes([b[48], b[49]]), 7);
        assert_eq!(u16::from_le_bytes([b[50], b[51]]), (1 << 9) | (1 << 15));
        assert_eq!(WriteZeroes::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap(), wz);

        // struct nvme_dsm_cmd: nr @40, attributes @44 (NVME_DSMGMT_IDR 1, IDW 2, AD 4).
        let dsm = DatasetManagement { nsid: 2, nr: 0xfe, idr: false, idw: true, ad: true };
        let b = dsm.to_sqe().to_bytes();
        assert_eq!(b[0], 0x09);
        assert_eq!(&b[40..44], &[0xfe, 0, 0, 0]);
        assert_eq!(&b[44..48], &[0b110, 0, 0, 0]);
        assert_eq!(dsm.range_count(), 255);

        // struct nvme_dsm_range: cattr @0, nlb @4, slba @8.
        let r = DsmRange { cattr: 0x0102_0304, length: 0x1112_1314, slba: 0x2122_2324_2526_2728 };
        let rb = r.to_bytes();
        assert_eq!(rb, [4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11, 0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21]);
        assert_eq!(DsmRange::parse(&rb).unwrap(), r);
    }

    #[test]
    fn flush_all_namespaces() {
        let f = Flush { nsid: NSID_ALL };
        assert!(f.all_namespaces());
        let sqe = f.to_sqe();
        assert_eq!(sqe.opcode, 0x00);
        assert_eq!(IoCommand::from_sqe(&sqe).unwrap(), IoCommand::Flush(f));
    }

    #[test]
    fn blocks_and_end_lba() {
        let r = Read { slba: 10, nlb: 0, ..Default::default() };
        assert_eq!(r.blocks(), 1);
        assert_eq!(r.end_lba(), Some(11));
        let r = Read { slba: u64::MAX - 65536, nlb: u16::MAX, ..Default::default() };
        assert_eq!(r.blocks(), 65536);
        assert_eq!(r.end_lba(), Some(u64::MAX));
        let r = Read { slba: u64::MAX - 65535, nlb: u16::MAX, ..Default::default() };
        assert_eq!(r.end_lba(), None);
        assert_eq!(r.data_len(4096), 65536 * 4096);
        assert_eq!(DsmRange { slba: u64::MAX, length: 1, cattr: 0 }.end_lba(), None);
        assert_eq!(WriteZeroes { slba: u64::MAX, ..Default::default() }.end_lba(), None);
    }

    #[test]
    fn dsm_range_list_must_hold_nr_plus_one_ranges() {
        let dsm = DatasetManagement { nr: 1, ..Default::default() };
        let mut buf = [0u8; 40];
        DsmRange { cattr: 0, length: 8, slba: 100 }.encode(&mut buf[..16]).unwrap();
        DsmRange { cattr: 1, length: 16, slba: 200 }.encode(&mut buf[16..32]).unwrap();
        let ranges: Vec<_> = dsm.ranges(&buf).unwrap().collect();
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[1], DsmRange { cattr: 1, length: 16, slba: 200 });
        assert_eq!(dsm.ranges(&buf).unwrap().len(), 2);
        assert_eq!(
            dsm.ranges(&buf[..31]).unwrap_err(),
            WireError::Short { structure: "DsmRangeList", need: 32, got: 31 }
        );
        assert!(DsmRange::parse(&[0u8; 15]).is_err());
        assert!(DsmRange::default().encode(&mut [0u8; 15]).is_err());
    }

    #[test]
    fn wrong_or_unknown_opcode_is_rejected() {
        let sqe = SubmissionQueueEntry::new(0x04); // Write Uncorrectable: not supported
        let e = IoCommand::from_sqe(&sqe).unwrap_err();
        assert!(is_invalid_opcode(&e), "{e}");
        assert!(matches!(e, WireError::InvalidField { field: "opcode", value: 0x04, .. }));
        let e = Read::from_sqe(&Write::default().to_sqe()).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { structure: "Read", field: "opcode", value: 0x01, .. }));
        assert!(Flush::from_sqe(&sqe).is_err());
        assert!(WriteZeroes::from_sqe(&sqe).is_err());
        assert!(DatasetManagement::from_sqe(&sqe).is_err());
        assert!(!is_invalid_opcode(&WireError::invalid("X", "nsid", 0u8, "")));
    }

    fn arb_rw() -> impl Strategy<Value = (u32, u64, u16, u8, u8, bool, bool, u8, u16)> {
        (
            any::<u32>(),
            any::<u64>(),
            any::<u16>(),
            0u8..16,
            0u8..16,
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
            any::<u16>(),
        )
    }

    proptest! {
        #[test]
        fn rw_round_trip((nsid, slba, nlb, dtype, prinfo, fua, lr, dsm, dspec) in arb_rw(), which in 0u8..3) {
            let fields = Read { nsid, slba, nlb, dtype, prinfo, fua, lr, dsm, dspec };
            let cmd = match which {
                0 => IoCommand::Read(fields),
                1 => IoCommand::Write(Write { nsid, slba, nlb, dtype, prinfo, fua, lr, dsm, dspec }),
                _ => IoCommand::Compare(Compare { nsid, slba, nlb, dtype, prinfo, fua, lr, dsm, dspec }),
            };
            let bytes = cmd.to_sqe().to_bytes();
            prop_assert_eq!(IoCommand::from_sqe(&SubmissionQueueEntry::parse(&bytes).unwrap()).unwrap(), cmd);
        }

        #[test]
        fn other_round_trips(nsid in any::<u32>(), slba in any::<u64>(), nlb in any::<u16>(), nr in any::<u8>(),
                             f in proptest::array::uniform3(any::<bool>())) {
            for cmd in [
                IoCommand::Flush(Flush { nsid }),
                IoCommand::WriteZeroes(WriteZeroes { nsid, slba, nlb, deac: f[0], fua: f[1], lr: f[2] }),
                IoCommand::DatasetManagement(DatasetManagement { nsid, nr, idr: f[0], idw: f[1], ad: f[2] }),
            ] {
                prop_assert_eq!(IoCommand::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
            }
        }

        #[test]
        fn arbitrary_sqe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            if let Ok(cmd) = IoCommand::from_sqe(&sqe) {
                prop_assert_eq!(IoCommand::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
                let _ = match cmd { IoCommand::Read(r) => r.end_lba(), _ => None };
            } else {
                prop_assert!(!matches!(sqe.opcode, 0 | 1 | 2 | 5 | 8 | 9));
            }
        }

        #[test]
        fn range_lists_never_panic(nr in any::<u8>(), bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let dsm = DatasetManagement { nr, ..Default::default() };
            match dsm.ranges(&bytes) {
                Ok(it) => {
                    prop_assert_eq!(it.len(), dsm.range_count());
                    for (i, r) in it.enumerate() {
                        prop_assert_eq!(&r.to_bytes()[..], &bytes[i * 16..i * 16 + 16]);
                    }
                }
                Err(_) => prop_assert!(bytes.len() < dsm.range_list_len()),
            }
        }
    }
}
