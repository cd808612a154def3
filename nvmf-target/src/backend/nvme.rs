//! NVMe passthrough storage: a namespace's NVMe generic character device (`/dev/ngXnY`) driven with NVMe
//! commands through io_uring (`IORING_OP_URING_CMD`, `NVME_URING_CMD_IO`).
//!
//! This file is the safe half: recognising a generic device, identifying the namespace at open (synchronous
//! ioctls, done once by the control plane), building `struct nvme_uring_cmd` from `nvmf-common` SQE views,
//! splitting an [`IoOp`] into the drive commands that carry it, and mapping a drive's completion status. The
//! kernel's ABI (the struct, the ioctl numbers), the ioctls and the ring pushes are in `ring.rs`.
//!
//! Recognition: a character device whose major is the one `/proc/devices` lists for `nvme-generic` (the class
//! the kernel's NVMe driver allocates dynamically for its `ngXnY` nodes). Any path naming such a node (a
//! symlink, a `/dev/disk/...` alias) is a passthrough namespace; nothing has to be configured.
//!
//! Limits: a passthrough command cannot be split by the block layer, so a Read/Write is cut into commands of at
//! most the namespace's `max_hw_sectors_kb` (and `max_segments` pages, so that fixed buffers map without a bounce
//! copy) as sysfs reports them for the matching `nvmeXnY` block device; Write Zeroes into commands of at most
//! 65536 LBAs; a deallocation into Dataset Management commands of one range of at most 2³²−1 LBAs.
//!
//! Statuses: the CQE's `res` is the drive's 15-bit status field (or a negative errno from the kernel), the big
//! CQE's first extra word is the command's result. A failing status reaches the controller as an `io::Error`
//! carrying a [`DriveStatus`], which it passes to the host unchanged (see [`drive_status`]).

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use nvmf_common::nvme::identify::{cns, Identify, IdentifyController, IdentifyNamespace, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes, DSM_RANGE_SIZE};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::ring::{self, NvmeUringCmd};
use super::{BackendError, IoOp};

/// Most LBAs one Read/Write/Write Zeroes carries (NLB is 16 bits, 0's based).
const MAX_NLB_BLOCKS: u64 = 1 << 16;
/// Most LBAs one Dataset Management range carries (its length is 32 bits, not 0's based).
const MAX_DSM_RANGE_BLOCKS: u64 = u32::MAX as u64;
/// Transfer limit when sysfs cannot tell (every NVMe controller Linux drives takes 128 KiB in 32 pages).
const FALLBACK_MAX_TRANSFER: u32 = 128 << 10;
/// CRD (bits 12:11) refers to the drive's Command Retry Delay Times, which mean nothing to a fabrics host.
const STATUS_CRD_MASK: u16 = 0b11 << 11;

// The struct is the kernel's ABI, in `ring.rs` beside the ioctls; building one from an SQE view is this file's.
impl NvmeUringCmd {
    /// The command `sqe` encodes, without data. Only what the kernel passes on is taken: opcode, NSID, CDW2/3
    /// and CDW10..15; the flags (fuse, PSDT) are left 0 as the driver requires.
    pub(crate) fn from_sqe(sqe: &SubmissionQueueEntry) -> Self {
        NvmeUringCmd {
            opcode: sqe.opcode,
            nsid: sqe.nsid,
            cdw2: sqe.cdw2,
            cdw3: sqe.cdw3,
            cdw10: sqe.cdw10,
            cdw11: sqe.cdw11,
            cdw12: sqe.cdw12,
            cdw13: sqe.cdw13,
            cdw14: sqe.cdw14,
            cdw15: sqe.cdw15,
            ..Default::default()
        }
    }
}

/// An NVMe status a drive completed a passthrough command with, carried inside the `io::Error` of an
/// [`IoCompletion`](super::IoCompletion) (kind `Other`). Get it back with [`drive_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriveStatus {
    /// The drive's status (CRD cleared: it refers to the drive's retry delays, not ours).
    pub status: Status,
    /// Dword 0 (and 1) of the drive's completion (the big CQE's first extra word).
    pub result: u64,
}

impl fmt::Display for DriveStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the drive completed the command with status {}", self.status)
    }
}

impl std::error::Error for DriveStatus {}

impl DriveStatus {
    /// From the CQE's `res` (the status field, > 0) and extra word.
    pub(crate) fn from_cqe(field: u16, result: u64) -> Self {
        DriveStatus { status: Status::from_field(field & !STATUS_CRD_MASK), result }
    }

    /// As the error of a completion.
    pub(crate) fn into_io_error(self) -> io::Error {
        io::Error::other(self)
    }
}

/// The NVMe status a passthrough drive answered, if `err` carries one (the controller passes it to the host).
pub fn drive_status(err: &io::Error) -> Option<Status> {
    err.get_ref()?.downcast_ref::<DriveStatus>().map(|d| d.status)
}

/// The outcome of a passthrough CQE: `res` < 0 is an errno, > 0 a drive status, 0 success (`ok` bytes done).
pub(crate) fn cqe_result(res: i32, extra: u64, ok: u32) -> Result<u32, io::Error> {
    match res {
        0 => Ok(ok),
        r if r < 0 => Err(io::Error::from_raw_os_error(-r)),
        r => Err(DriveStatus::from_cqe(u16::try_from(r).unwrap_or(u16::MAX), extra).into_io_error()),
    }
}

/// An opened NVMe generic character device and what Identify said about its namespace.
#[derive(Debug)]
pub(crate) struct NvmeBacking {
    pub(crate) file: std::fs::File,
    pub(crate) path: PathBuf,
    /// The namespace's NSID (`NVME_IOCTL_ID`): commands must carry it.
    pub(crate) nsid: u32,
    /// log2 of the namespace's LBA data size.
    pub(crate) lba_shift: u32,
    /// Most bytes one Read/Write command moves (a multiple of the LBA size, at most 65536 LBAs).
    pub(crate) max_transfer: u32,
    /// ONCS says Write Zeroes is supported.
    pub(crate) write_zeroes: bool,
}

/// What opening a passthrough namespace found: the backing and the storage's geometry and capabilities.
#[derive(Debug)]
pub(crate) struct NvmeOpened {
    pub(crate) backing: NvmeBacking,
    pub(crate) capacity: u64,
    pub(crate) discard: bool,
    pub(crate) volatile_write_cache: bool,
}

/// The char major `/proc/devices` lists for `nvme-generic`.
pub(crate) fn nvme_generic_major() -> Option<u32> {
    parse_char_major(&std::fs::read_to_string("/proc/devices").ok()?, "nvme-generic")
}

/// The major of character device class `name` in `/proc/devices` text.
fn parse_char_major(devices: &str, name: &str) -> Option<u32> {
    let mut in_char = false;
    for line in devices.lines() {
        let line = line.trim();
        if line.ends_with(':') {
            in_char = line == "Character devices:";
            continue;
        }
        if !in_char {
            continue;
        }
        let mut fields = line.split_whitespace();
        if let (Some(major), Some(class)) = (fields.next(), fields.next()) {
            if class == name {
                return major.parse().ok();
            }
        }
    }
    None
}

/// Whether a character device number belongs to the NVMe generic class.
pub(crate) fn is_nvme_generic(rdev: u64) -> bool {
    nvme_generic_major().is_some_and(|major| major == libc::major(rdev))
}

/// Most bytes per command from the block queue limits: `max_hw_sectors_kb`, and `max_segments` pages (minus one
/// for an unaligned start) so a registered buffer maps without bouncing; a multiple of the LBA size, at most
/// 65536 LBAs, at least one LBA.
fn max_transfer(max_hw_sectors_kb: Option<u32>, max_segments: Option<u32>, lba_shift: u32) -> u32 {
    let lba = 1u32 << lba_shift;
    let mut limit = max_hw_sectors_kb.map_or(FALLBACK_MAX_TRANSFER, |kb| kb.saturating_mul(1024));
    if let Some(segments) = max_segments.filter(|&s| s > 1) {
        limit = limit.min((segments - 1).saturating_mul(4096));
    }
    let most = u32::try_from(MAX_NLB_BLOCKS << lba_shift).unwrap_or(u32::MAX);
    let limit = limit.min(most);
    (limit - limit % lba).max(lba)
}

/// The queue limits sysfs gives the block device of generic node `rdev` (`ngXnY` → `nvmeXnY`).
fn queue_limits(rdev: u64) -> (Option<u32>, Option<u32>) {
    let link = format!("/sys/dev/char/{}:{}", libc::major(rdev), libc::minor(rdev));
    let Some(block) = std::fs::read_link(&link)
        .ok()
        .and_then(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
        .and_then(|name| name.strip_prefix("ng").map(|rest| format!("nvme{rest}")))
    else {
        return (None, None);
    };
    let attr = |name: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/sys/block/{block}/queue/{name}")).ok()?.trim().parse().ok()
    };
    (attr("max_hw_sectors_kb"), attr("max_segments"))
}

/// Sends Identify `cns` for `nsid` through `NVME_IOCTL_ADMIN_CMD`; returns the 4096 bytes.
fn identify(fd: RawFd, path: &Path, cns: u8, nsid: u32, what: &'static str) -> Result<Vec<u8>, BackendError> {
    let mut data = vec![0u8; IDENTIFY_DATA_SIZE];
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut cmd = NvmeUringCmd::from_sqe(&Identify::new(cns, nsid).to_sqe());
    let status = ring::nvme_admin_command(fd, &mut cmd, &mut data, len).map_err(|source| BackendError::Io {
        action: what,
        path: path.to_owned(),
        source,
    })?;
    if status != 0 {
        return Err(BackendError::NvmeCommand {
            path: path.to_owned(),
            command: what,
            status: DriveStatus::from_cqe(status, 0).status,
        });
    }
    Ok(data)
}

/// Opens `path` (an NVMe generic node, device number `rdev`): NSID, Identify Namespace (LBA size, NSZE, no
/// metadata), Identify Controller (ONCS Dataset Management / Write Zeroes, VWC), queue limits.
pub(crate) fn open(path: &Path, rdev: u64, block_size: u32) -> Result<NvmeOpened, BackendError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    let io_err = |action| move |source| BackendError::Io { action, path: path.to_owned(), source };
    // No O_DIRECT: the node has no page cache, and the driver maps user memory itself.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err("open"))?;
    let fd = file.as_raw_fd();
    let nsid = ring::nvme_namespace_id(fd).map_err(io_err("NVME_IOCTL_ID"))?;
    let unsupported = |reason| BackendError::PassthroughUnsupported { path: path.to_owned(), reason };

    let id_ns = IdentifyNamespace::parse(&identify(fd, path, cns::NAMESPACE, nsid, "Identify Namespace")?)
        .map_err(|_| unsupported("Identify Namespace data is malformed"))?;
    let lba_size = id_ns.lba_data_size().map_err(|_| unsupported("the namespace's LBA format is invalid"))?;
    if id_ns.lbaf.get(id_ns.format_index()).is_some_and(|f| f.ms != 0) {
        return Err(unsupported("the namespace's LBA format has metadata"));
    }
    if lba_size > 4096 {
        return Err(unsupported("the namespace's LBA size exceeds 4096"));
    }
    if block_size < lba_size {
        return Err(BackendError::BlockSizeBelowDevice { path: path.to_owned(), block_size, logical: lba_size });
    }
    let lba_shift = lba_size.trailing_zeros();
    let size = id_ns.nsze.checked_mul(u64::from(lba_size)).ok_or(unsupported("NSZE overflows"))?;
    let capacity = size - size % u64::from(block_size);
    if capacity == 0 {
        return Err(BackendError::InvalidSize { what: path.display().to_string(), size, block_size });
    }

    let id_ctrl = identify(fd, path, cns::CONTROLLER, 0, "Identify Controller")?;
    let (discard, write_zeroes, volatile_write_cache) = match IdentifyController::parse(&id_ctrl) {
        Ok(c) => (
            c.oncs_has(IdentifyController::ONCS_DATASET_MANAGEMENT),
            c.oncs_has(IdentifyController::ONCS_WRITE_ZEROES),
            c.vwc_present(),
        ),
        Err(e) => {
            // Text fields we do not need are malformed: assume the least.
            tracing::warn!(path = %path.display(), error = %e, "Identify Controller unreadable; no DSM/Write Zeroes");
            (false, false, true)
        }
    };
    let (hw_kb, segments) = queue_limits(rdev);
    let max_transfer = max_transfer(hw_kb, segments, lba_shift);
    tracing::debug!(path = %path.display(), nsid, lba_size, nsze = id_ns.nsze, max_transfer, "NVMe namespace identified");
    let backing = NvmeBacking { file, path: path.to_owned(), nsid, lba_shift, max_transfer, write_zeroes };
    Ok(NvmeOpened { backing, capacity, discard, volatile_write_cache })
}

/// A synchronous Flush (shutdown path).
pub(crate) fn flush_blocking(backing: &NvmeBacking) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut cmd = NvmeUringCmd::from_sqe(&Flush { nsid: backing.nsid }.to_sqe());
    match ring::nvme_io_command(backing.file.as_raw_fd(), &mut cmd)? {
        0 => Ok(()),
        status => Err(DriveStatus::from_cqe(status, 0).into_io_error()),
    }
}

/// One drive command of an op: the command, the slice of the op's buffer it moves, or its DSM range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) cmd: NvmeUringCmd,
    /// (offset into the op's buffer, length) for Read/Write.
    pub(crate) data: Option<(u32, u32)>,
    /// The range list (one range) of a Dataset Management command.
    pub(crate) range: Option<[u8; DSM_RANGE_SIZE]>,
}

/// How `op` (bytes, checked against the capacity and block-aligned) becomes drive commands: their number and
/// the `index`th one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    op: IoOp,
    nsid: u32,
    lba_shift: u32,
    /// LBAs per command.
    step: u64,
    count: u64,
}

impl Plan {
    pub(crate) fn new(backing: &NvmeBacking, op: IoOp) -> Self {
        let shift = backing.lba_shift;
        let (blocks, step) = match op {
            IoOp::Read { len, .. } | IoOp::Write { len, .. } => {
                (u64::from(len) >> shift, u64::from(backing.max_transfer) >> shift)
            }
            IoOp::WriteZeroes { len, .. } => (len >> shift, MAX_NLB_BLOCKS),
            IoOp::Discard { len, .. } => (len >> shift, MAX_DSM_RANGE_BLOCKS),
            IoOp::Flush => (1, 1),
        };
        let step = step.max(1);
        Plan { op, nsid: backing.nsid, lba_shift: shift, step, count: blocks.div_ceil(step) }
    }

    /// Number of drive commands (0 for an empty range).
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The `index`th command (`index < count()`).
    #[expect(clippy::cast_possible_truncation, reason = "every block count below is capped at `step` (≤ 2^32 - 1)")]
    pub(crate) fn chunk(&self, index: u64) -> Chunk {
        let nsid = self.nsid;
        let (offset, len) = match self.op {
            IoOp::Read { offset, len } | IoOp::Write { offset, len, .. } => (offset, u64::from(len)),
            IoOp::WriteZeroes { offset, len } | IoOp::Discard { offset, len } => (offset, len),
            IoOp::Flush => (0, 0),
        };
        let first = index * self.step;
        let slba = (offset >> self.lba_shift) + first;
        let blocks = ((len >> self.lba_shift) - first).min(self.step);
        // In bytes, within the op's buffer (Read/Write only, where the total fits u32).
        let data = || Some(((first << self.lba_shift) as u32, (blocks << self.lba_shift) as u32));
        let nlb = (blocks.saturating_sub(1)) as u16;
        let rw = |cmd: SubmissionQueueEntry| NvmeUringCmd::from_sqe(&cmd);
        match self.op {
            IoOp::Read { .. } => {
                Chunk { cmd: rw(Read { nsid, slba, nlb, ..Default::default() }.to_sqe()), data: data(), range: None }
            }
            IoOp::Write { fua, .. } => Chunk {
                cmd: rw(Write { nsid, slba, nlb, fua, ..Default::default() }.to_sqe()),
                data: data(),
                range: None,
            },
            IoOp::WriteZeroes { .. } => Chunk {
                cmd: rw(WriteZeroes { nsid, slba, nlb, ..Default::default() }.to_sqe()),
                data: None,
                range: None,
            },
            IoOp::Discard { .. } => Chunk {
                cmd: rw(DatasetManagement { nsid, nr: 0, ad: true, ..Default::default() }.to_sqe()),
                data: None,
                range: Some(DsmRange { cattr: 0, length: blocks as u32, slba }.to_bytes()),
            },
            IoOp::Flush => Chunk { cmd: rw(Flush { nsid }.to_sqe()), data: None, range: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_bytes_follow_the_struct() {
        let write = Write { nsid: 3, slba: 0x1_2345_6789, nlb: 7, fua: true, ..Default::default() };
        let cmd = NvmeUringCmd::from_sqe(&write.to_sqe()).with_data(0x7f00_dead_b000, 4096);
        assert_eq!(cmd.flags, 0, "PSDT/FUSE are the driver's");
        let b = cmd.to_bytes();
        assert_eq!(b[0], 0x01);
        assert_eq!(b[1], 0);
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 0, "no metadata");
        assert_eq!(u64::from_ne_bytes(b[24..32].try_into().unwrap()), 0x7f00_dead_b000);
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 4096);
        assert_eq!(u32::from_ne_bytes(b[40..44].try_into().unwrap()), 0x2345_6789, "SLBA low");
        assert_eq!(u32::from_ne_bytes(b[44..48].try_into().unwrap()), 1, "SLBA high");
        assert_eq!(u32::from_ne_bytes(b[48..52].try_into().unwrap()), 7 | 1 << 30, "NLB and FUA");
        assert!(b[52..].iter().all(|&x| x == 0));
        // Every field lands where the struct says (the ioctl path passes the struct itself).
        let full = NvmeUringCmd {
            opcode: 1,
            flags: 2,
            rsvd1: 0x0403,
            nsid: 5,
            cdw2: 6,
            cdw3: 7,
            metadata: 8,
            addr: 9,
            metadata_len: 10,
            data_len: 11,
            cdw10: 12,
            cdw11: 13,
            cdw12: 14,
            cdw13: 15,
            cdw14: 16,
            cdw15: 17,
            timeout_ms: 18,
            rsvd2: 19,
        };
        let b = full.to_bytes();
        let dword = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!((b[0], b[1], u16::from_ne_bytes([b[2], b[3]])), (1, 2, 0x0403));
        let want = [(4, 5), (8, 6), (12, 7), (32, 10), (36, 11), (40, 12), (44, 13), (48, 14), (52, 15)];
        for (at, v) in want.into_iter().chain([(56, 16), (60, 17), (64, 18), (68, 19)]) {
            assert_eq!(dword(at), v, "dword at {at}");
        }
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 8);
        assert_eq!(u64::from_ne_bytes(b[24..32].try_into().unwrap()), 9);
        assert_eq!(&b[72..], &[0u8; 8]);
    }

    fn backing(lba_shift: u32, max_transfer: u32) -> NvmeBacking {
        let file = std::fs::File::open("/dev/null").unwrap();
        NvmeBacking { file, path: "/dev/null".into(), nsid: 1, lba_shift, max_transfer, write_zeroes: true }
    }

    #[test]
    fn large_reads_and_writes_split_at_the_transfer_limit() {
        let b = backing(9, 128 << 10);
        let plan = Plan::new(&b, IoOp::Write { offset: 4096, len: 300 << 10, fua: true });
        assert_eq!(plan.count(), 3);
        let chunks: Vec<Chunk> = (0..3).map(|i| plan.chunk(i)).collect();
        let got: Vec<_> = chunks.iter().map(|c| (c.cmd.cdw10, c.cmd.cdw12 & 0xffff, c.data.unwrap())).collect();
        assert_eq!(
            got,
            [(8, 255, (0, 128 << 10)), (8 + 256, 255, (128 << 10, 128 << 10)), (8 + 512, 87, (256 << 10, 44 << 10))]
        );
        assert!(chunks.iter().all(|c| c.cmd.opcode == 0x01 && c.cmd.cdw12 & (1 << 30) != 0 && c.cmd.nsid == 1));
        let read = Plan::new(&b, IoOp::Read { offset: 0, len: 512 });
        assert_eq!(read.count(), 1);
        assert_eq!((read.chunk(0).cmd.opcode, read.chunk(0).cmd.cdw12), (0x02, 0));
    }

    #[test]
    fn write_zeroes_and_discard_split_at_their_field_limits() {
        let b = backing(12, 512 << 10);
        let wz = Plan::new(&b, IoOp::WriteZeroes { offset: 0, len: (1 << 16) * 4096 + 8192 });
        assert_eq!(wz.count(), 2);
        assert_eq!((wz.chunk(0).cmd.cdw12, wz.chunk(1).cmd.cdw10, wz.chunk(1).cmd.cdw12), (0xffff, 1 << 16, 1));
        assert_eq!(wz.chunk(0).cmd.opcode, 0x08);
        let dsm = Plan::new(&b, IoOp::Discard { offset: 8192, len: 3 << 12 });
        assert_eq!(dsm.count(), 1);
        let c = dsm.chunk(0);
        assert_eq!((c.cmd.opcode, c.cmd.cdw10, c.cmd.cdw11), (0x09, 0, 1 << 2), "one range, deallocate");
        assert_eq!(DsmRange::parse(&c.range.unwrap()).unwrap(), DsmRange { cattr: 0, length: 3, slba: 2 });
        let huge = Plan::new(&b, IoOp::Discard { offset: 0, len: (u64::from(u32::MAX) + 5) << 12 });
        assert_eq!(huge.count(), 2);
        assert_eq!(DsmRange::parse(&huge.chunk(1).range.unwrap()).unwrap().length, 5);
        assert_eq!(Plan::new(&b, IoOp::Flush).count(), 1);
        assert_eq!(Plan::new(&b, IoOp::Flush).chunk(0).cmd, NvmeUringCmd { nsid: 1, ..Default::default() });
        assert_eq!(Plan::new(&b, IoOp::Read { offset: 0, len: 0 }).count(), 0);
    }

    #[test]
    fn transfer_limit_from_queue_limits() {
        assert_eq!(max_transfer(Some(512), Some(127), 9), 126 * 4096);
        assert_eq!(max_transfer(Some(128), Some(33), 12), 128 << 10);
        assert_eq!(max_transfer(None, None, 9), 128 << 10);
        assert_eq!(max_transfer(Some(65536), None, 9), 32 << 20, "at most 65536 LBAs");
        assert_eq!(max_transfer(Some(0), None, 12), 4096, "at least one LBA");
        assert_eq!(max_transfer(Some(10), None, 12), 8192);
    }

    #[test]
    fn generic_major_from_proc_devices() {
        let text =
            "Character devices:\n  1 mem\n242 nvme-generic\n243 nvme\n\nBlock devices:\n259 blkext\n  7 nvme-generic\n";
        assert_eq!(parse_char_major(text, "nvme-generic"), Some(242));
        assert_eq!(parse_char_major(text, "nvme"), Some(243));
        assert_eq!(parse_char_major(text, "blkext"), None, "block majors are not char majors");
    }

    #[test]
    fn drive_statuses_travel_in_io_errors() {
        // LBA Out of Range (SCT 0, SC 0x80) with DNR and CRD 1 set by the drive.
        let field = 0x80 | (1 << 11) | (1 << 14);
        let err = cqe_result(field, 0, 4096).unwrap_err();
        assert_eq!(drive_status(&err), Some(Status::LBA_OUT_OF_RANGE.with_dnr()));
        assert_eq!(cqe_result(0, 0, 4096).unwrap(), 4096);
        let errno = cqe_result(-libc::EINVAL, 0, 4096).unwrap_err();
        assert_eq!((errno.raw_os_error(), drive_status(&errno)), (Some(libc::EINVAL), None));
        assert_eq!(drive_status(&io::Error::other("x")), None);
    }
}
