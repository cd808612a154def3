//! Validation shared by the command handlers: the command flags, the data pointer (SGL1) against the transport
//! and the in-capsule data present, LBA ranges, Dataset Management range lists, and the mapping of storage
//! errors to NVMe statuses.
//!
//! Pure functions over wire views and the namespace; they run on the data path and never allocate.

use std::io;

use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::nvme::io::DatasetManagement;
use nvmf_common::nvme::{DataPointerKind, SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};

use super::subsystem::Namespace;

/// Which way a command moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Host to controller (Write, Compare, Dataset Management, Connect).
    ToController,
    /// Controller to host (Read, Identify, Get Log Page).
    ToHost,
}

/// Where a command's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataSource {
    /// In the command capsule, starting `offset` bytes into the in-capsule data.
    InCapsule {
        /// Offset into the in-capsule data.
        offset: usize,
    },
    /// Moved by the transport (TCP R2T/H2CData/C2HData, RDMA READ/WRITE).
    Transport,
}

/// FUSE: a command outside a fused operation.
pub(crate) const FUSE_NONE: u8 = 0;
/// FUSE: the first command of a fused operation.
pub(crate) const FUSE_FIRST: u8 = 1;
/// FUSE: the second command of a fused operation.
pub(crate) const FUSE_SECOND: u8 = 2;

/// Commands outside the NVM command set's fused operation (Compare and Write) must not be fused, and fabrics
/// commands must use SGLs with a contiguous metadata buffer (PSDT 01b), as Linux nvmet requires: anything else is
/// Invalid Field in Command.
pub(crate) fn check_flags(sqe: &SubmissionQueueEntry) -> Result<(), Status> {
    if sqe.fuse() != FUSE_NONE {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    check_data_pointer(sqe)
}

/// The data pointer must be SGLs (PSDT 01b): Invalid Field in Command otherwise.
pub(crate) fn check_data_pointer(sqe: &SubmissionQueueEntry) -> Result<(), Status> {
    if sqe.psdt() != DataPointerKind::SglContiguousMetadata {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    Ok(())
}

/// Check SGL1 of a command that moves data in `direction` over a `trtype` transport with `in_capsule_len`
/// bytes of in-capsule data, and return where the data is and the length the SGL describes.
///
/// - an offset data block (in-capsule data) is only valid host to controller, with its offset within and its
///   end no further than the in-capsule data present (SGL Offset Invalid / Data SGL Length Invalid);
/// - TCP takes Transport SGL Data Blocks (subtype 0xA), RDMA Keyed SGL Data Blocks (address or invalidate);
/// - anything else (memory addresses, segments, bit buckets, a reserved type) is SGL Descriptor Type Invalid.
pub(crate) fn data_source(
    sqe: &SubmissionQueueEntry,
    trtype: TransportType,
    direction: Direction,
    in_capsule_len: usize,
) -> Result<(DataSource, u32), Status> {
    let type_invalid = Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr();
    let sgl = sqe.sgl1().map_err(|_| type_invalid)?;
    match (sgl, trtype) {
        (SglDescriptor::DataBlock { address, length, subtype: SglSubtype::Offset }, _) => {
            if direction == Direction::ToHost {
                // Linux nvmet: in-capsule data for a command that returns data is Invalid Field.
                return Err(Status::INVALID_FIELD.with_dnr());
            }
            let offset = usize::try_from(address)
                .ok()
                .filter(|&o| o <= in_capsule_len)
                .ok_or(Status::SGL_OFFSET_INVALID.with_dnr())?;
            let end = usize::try_from(length).ok().and_then(|l| offset.checked_add(l));
            if end.is_none_or(|e| e > in_capsule_len) {
                return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
            }
            Ok((DataSource::InCapsule { offset }, length))
        }
        (SglDescriptor::TransportDataBlock { length, subtype: SglSubtype::TransportSpecific }, TransportType::Tcp)
        | (SglDescriptor::KeyedDataBlock { length, .. }, TransportType::Rdma) => Ok((DataSource::Transport, length)),
        _ => Err(type_invalid),
    }
}

/// Byte offset of LBA `slba` for `blocks` blocks on `ns`, or LBA Out of Range (checked without overflow).
pub(crate) fn lba_offset(ns: &Namespace, slba: u64, blocks: u64) -> Result<u64, Status> {
    match slba.checked_add(blocks) {
        Some(end) if end <= ns.num_blocks() => Ok(slba << ns.block_shift()),
        _ => Err(Status::LBA_OUT_OF_RANGE.with_dnr()),
    }
}

/// Every range of a Dataset Management range list must lie within the namespace.
pub(crate) fn check_dsm_ranges(ns: &Namespace, dsm: &DatasetManagement, list: &[u8]) -> Result<(), Status> {
    let ranges = dsm.ranges(list).map_err(|_| Status::DATA_SGL_LENGTH_INVALID.with_dnr())?;
    for range in ranges {
        lba_offset(ns, range.slba, u64::from(range.length))?;
    }
    Ok(())
}

/// What a storage op was doing when it failed, for the status it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StorageOp {
    /// Reading (Read, Compare).
    Read,
    /// Writing (Write, Write Zeroes, Flush, Discard).
    Write,
    /// A fused Compare and Write: `EILSEQ` is the compare finding other data (Compare Failure), not a media error.
    CompareAndWrite,
}

/// The NVMe status for a failed storage op (close to Linux nvmet's `errno_to_nvme_status` /
/// `blk_to_nvme_status`): the drive's own status for NVMe passthrough storage (passed through as nvmet's
/// passthru does), media errors for EIO and short transfers, Capacity Exceeded for ENOSPC, Namespace Write
/// Protected for EROFS, a retryable Internal Error for transient conditions, Internal Error otherwise. Storage
/// this node cannot reach (librbd: the cluster did not answer within its OSD timeout, `ETIMEDOUT`, or blocklisted
/// this client after another gateway broke its lock, `ESHUTDOWN`) is a retryable Internal Path Error: a multipath
/// host retries the command on another path, where the storage may be reachable, instead of failing it.
pub(crate) fn storage_status(err: &io::Error, op: StorageOp) -> Status {
    if let Some(status) = crate::backend::drive_status(err) {
        return status;
    }
    let media = match op {
        StorageOp::Read => Status::UNRECOVERED_READ_ERROR.with_dnr(),
        StorageOp::Write | StorageOp::CompareAndWrite => Status::WRITE_FAULT.with_dnr(),
    };
    match err.raw_os_error() {
        Some(libc::EILSEQ) if op == StorageOp::CompareAndWrite => return Status::COMPARE_FAILURE.with_dnr(),
        Some(libc::EIO | libc::ENODATA | libc::EILSEQ) => return media,
        Some(libc::ENOSPC | libc::EDQUOT) => return Status::CAPACITY_EXCEEDED.with_dnr(),
        Some(libc::EROFS) => return Status::NAMESPACE_WRITE_PROTECTED.with_dnr(),
        Some(libc::EACCES | libc::EPERM) => return Status::ACCESS_DENIED.with_dnr(),
        Some(libc::EAGAIN | libc::EINTR | libc::ENOMEM | libc::EBUSY) => return Status::INTERNAL_ERROR,
        Some(libc::EOPNOTSUPP) => return Status::INVALID_OPCODE.with_dnr(),
        Some(libc::ETIMEDOUT | libc::ESHUTDOWN) => return Status::INTERNAL_PATH_ERROR,
        _ => {}
    }
    match err.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::WriteZero => media,
        io::ErrorKind::Unsupported => Status::INVALID_OPCODE.with_dnr(),
        _ => Status::INTERNAL_ERROR.with_dnr(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqe_with(sgl: SglDescriptor) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(0x01);
        sqe.set_sgl1(&sgl).unwrap();
        sqe
    }

    #[test]
    fn in_capsule_bounds() {
        let sqe = sqe_with(SglDescriptor::DataBlock { address: 0, length: 512, subtype: SglSubtype::Offset });
        let to = Direction::ToController;
        assert_eq!(data_source(&sqe, TransportType::Tcp, to, 512), Ok((DataSource::InCapsule { offset: 0 }, 512)));
        assert_eq!(data_source(&sqe, TransportType::Tcp, to, 511), Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr()));
        assert_eq!(
            data_source(&sqe, TransportType::Tcp, Direction::ToHost, 512),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        let sqe = sqe_with(SglDescriptor::DataBlock { address: 4097, length: 0, subtype: SglSubtype::Offset });
        assert_eq!(data_source(&sqe, TransportType::Tcp, to, 4096), Err(Status::SGL_OFFSET_INVALID.with_dnr()));
        let sqe = sqe_with(SglDescriptor::DataBlock { address: 16, length: u32::MAX, subtype: SglSubtype::Offset });
        assert_eq!(data_source(&sqe, TransportType::Tcp, to, 4096), Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr()));
    }

    #[test]
    fn descriptor_types_per_transport() {
        let tcp = sqe_with(SglDescriptor::TransportDataBlock { length: 4096, subtype: SglSubtype::TransportSpecific });
        let keyed = sqe_with(SglDescriptor::KeyedDataBlock {
            address: 0x1000,
            length: 4096,
            key: 7,
            subtype: SglSubtype::Invalidate,
        });
        let memory = sqe_with(SglDescriptor::DataBlock { address: 0x1000, length: 4096, subtype: SglSubtype::Address });
        let invalid = Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr());
        let d = Direction::ToHost;
        assert_eq!(data_source(&tcp, TransportType::Tcp, d, 0), Ok((DataSource::Transport, 4096)));
        assert_eq!(data_source(&tcp, TransportType::Rdma, d, 0), invalid);
        assert_eq!(data_source(&keyed, TransportType::Rdma, d, 0), Ok((DataSource::Transport, 4096)));
        assert_eq!(data_source(&keyed, TransportType::Tcp, d, 0), invalid);
        assert_eq!(data_source(&memory, TransportType::Tcp, d, 0), invalid);
        let mut garbage = SubmissionQueueEntry::new(0x02);
        garbage.dptr[15] = 0x73; // type 7: reserved
        assert_eq!(data_source(&garbage, TransportType::Tcp, d, 0), invalid);
    }

    #[test]
    fn flags() {
        let mut sqe = SubmissionQueueEntry::new(0x02);
        assert_eq!(check_flags(&sqe), Ok(()));
        sqe.flags = 0; // PRP
        assert_eq!(check_flags(&sqe), Err(Status::INVALID_FIELD.with_dnr()));
        sqe.flags = 0x41; // fused, first
        assert_eq!(check_flags(&sqe), Err(Status::INVALID_FIELD.with_dnr()));
    }

    #[test]
    fn storage_errors() {
        let eio = io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(storage_status(&eio, StorageOp::Read), Status::UNRECOVERED_READ_ERROR.with_dnr());
        assert_eq!(storage_status(&eio, StorageOp::Write), Status::WRITE_FAULT.with_dnr());
        let miscompare = io::Error::from_raw_os_error(libc::EILSEQ);
        assert_eq!(storage_status(&miscompare, StorageOp::CompareAndWrite), Status::COMPARE_FAILURE.with_dnr());
        assert_eq!(storage_status(&miscompare, StorageOp::Write), Status::WRITE_FAULT.with_dnr());
        let nospc = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(storage_status(&nospc, StorageOp::Write), Status::CAPACITY_EXCEEDED.with_dnr());
        let again = io::Error::from_raw_os_error(libc::EAGAIN);
        assert!(!storage_status(&again, StorageOp::Write).dnr());
        for unreachable in [libc::ETIMEDOUT, libc::ESHUTDOWN] {
            let e = io::Error::from_raw_os_error(unreachable);
            assert_eq!(storage_status(&e, StorageOp::Write), Status::INTERNAL_PATH_ERROR, "retried on another path");
        }
        let refused = io::Error::new(io::ErrorKind::InvalidInput, "x");
        assert_eq!(storage_status(&refused, StorageOp::Read), Status::INTERNAL_ERROR.with_dnr());
        let drive =
            io::Error::other(crate::backend::DriveStatus { status: Status::LBA_OUT_OF_RANGE.with_dnr(), result: 0 });
        assert_eq!(storage_status(&drive, StorageOp::Read), Status::LBA_OUT_OF_RANGE.with_dnr());
    }
}
