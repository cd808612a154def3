//! The kernel interface of the backend: one io_uring per engine, its eventfd, and the few direct syscalls
//! (fallocate/statx probes, block device ioctls), with the NVMe passthrough ABI they use (`struct nvme_uring_cmd`,
//! the NVMe ioctl numbers).
//!
//! All `unsafe` of the I/O path is here. The ring only accepts buffers as [`IoBuffer`]s, which only the pool can
//! make (for a buffer it has marked in flight), so every address handed to the kernel points into the pool's live
//! mapping; the engine keeps the buffer in flight until the CQE for it has been reaped and never drops the pool
//! while ops are in flight.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use nvmf_common::nvme::io::DSM_RANGE_SIZE;

use super::pool::{BufferPool, IoBuffer};
use super::BackendError;

/// The ring's entry sizes: 128-byte SQEs and 32-byte CQEs (`IORING_SETUP_SQE128 | IORING_SETUP_CQE32`), which
/// NVMe passthrough requires; every other op uses the first 64 bytes. One ring serves all storages: the big
/// entries cost a negligible share of a real read or write, while a second ring would cost a second
/// `io_uring_enter` per turn, a second buffer registration and fixed-file table.
type BigRing = IoUring<squeue::Entry128, cqueue::Entry32>;

/// `_IOR(0x12, 114, size_t)`: device size in bytes (generic ioctl encoding: x86_64, aarch64, riscv64).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 0)`: the block layer's io_uring discard command.
const BLOCK_URING_CMD_DISCARD: u32 = 0x1200;
/// `_IO(0x12, 119)`: discard a byte range `[start, len]`.
const BLKDISCARD: libc::c_ulong = 0x1277;

// The NVMe passthrough ABI (include/uapi/linux/nvme_ioctl.h), next to the ioctls and the ring pushes that use it.

/// `_IO('N', 0x40)`: the namespace's NSID (the ioctl's return value).
pub(crate) const NVME_IOCTL_ID: libc::c_ulong = 0x4e40;
/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)`: a synchronous admin command (allowed on a namespace node).
pub(crate) const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xc048_4e41;
/// `_IOWR('N', 0x43, struct nvme_passthru_cmd)`: a synchronous I/O command on this namespace.
pub(crate) const NVME_IOCTL_IO_CMD: libc::c_ulong = 0xc048_4e43;
/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`: the io_uring command op of an NVMe I/O command.
pub(crate) const NVME_URING_CMD_IO: u32 = 0xc048_4e80;

/// Bytes of one Dataset Management range (the data of a one-range DSM command).
pub(crate) const DSM_RANGE_BYTES: usize = DSM_RANGE_SIZE;
/// [`DSM_RANGE_BYTES`] as a command's data length.
#[expect(clippy::cast_possible_truncation, reason = "DSM_RANGE_SIZE is 16")]
pub(crate) const DSM_RANGE_LEN: u32 = DSM_RANGE_SIZE as u32;
/// Bytes of the command area of a 128-byte SQE (`UringCmd80`).
pub(crate) const URING_CMD_BYTES: usize = 80;

/// Linux `struct nvme_uring_cmd` (and, with `rsvd2` as `result`, `struct nvme_passthru_cmd`): 72 bytes,
/// native endian, the command's fields the driver does not fill itself (CID, PSDT, data pointer and MPTR are the
/// driver's).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NvmeUringCmd {
    pub(crate) opcode: u8,
    /// Must be 0: the driver refuses fused commands and chooses PRP/SGL itself.
    pub(crate) flags: u8,
    pub(crate) rsvd1: u16,
    pub(crate) nsid: u32,
    pub(crate) cdw2: u32,
    pub(crate) cdw3: u32,
    /// User address of a separate metadata buffer (unused: namespaces with metadata are refused).
    pub(crate) metadata: u64,
    /// User address of the data.
    pub(crate) addr: u64,
    pub(crate) metadata_len: u32,
    pub(crate) data_len: u32,
    pub(crate) cdw10: u32,
    pub(crate) cdw11: u32,
    pub(crate) cdw12: u32,
    pub(crate) cdw13: u32,
    pub(crate) cdw14: u32,
    pub(crate) cdw15: u32,
    /// 0: the driver's default timeout.
    pub(crate) timeout_ms: u32,
    /// Reserved in `nvme_uring_cmd`; the ioctl's `result` (dword 0 of the CQE) in `nvme_passthru_cmd`.
    pub(crate) rsvd2: u32,
}

impl NvmeUringCmd {
    /// With `len` bytes of data at user address `addr`.
    pub(crate) fn with_data(self, addr: u64, len: u32) -> Self {
        NvmeUringCmd { addr, data_len: len, ..self }
    }

    /// The SQE command area (`UringCmd80::cmd`): the struct's 72 bytes, native endian, then zeros.
    pub(crate) fn to_bytes(self) -> [u8; URING_CMD_BYTES] {
        let mut b = [0u8; URING_CMD_BYTES];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.rsvd1.to_ne_bytes());
        let dwords = [(4, self.nsid), (8, self.cdw2), (12, self.cdw3)];
        for (at, v) in dwords {
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b[16..24].copy_from_slice(&self.metadata.to_ne_bytes());
        b[24..32].copy_from_slice(&self.addr.to_ne_bytes());
        let dwords = [
            (32, self.metadata_len),
            (36, self.data_len),
            (40, self.cdw10),
            (44, self.cdw11),
            (48, self.cdw12),
            (52, self.cdw13),
            (56, self.cdw14),
            (60, self.cdw15),
            (64, self.timeout_ms),
            (68, self.rsvd2),
        ];
        for (at, v) in dwords {
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }
}

/// A descriptor in either form, so one builder expression serves both.
#[derive(Clone, Copy)]
enum FdRef {
    Fixed(types::Fixed),
    Raw(types::Fd),
}

macro_rules! with_fd {
    ($fd:expr, |$f:ident| $body:expr) => {
        match $fd {
            FdRef::Fixed($f) => $body,
            FdRef::Raw($f) => $body,
        }
    };
}

fn build_entry(fd: FdRef, op: RingOp, fixed_buffers: bool, range_addr: u64) -> squeue::Entry128 {
    let entry: squeue::Entry = match op {
        RingOp::Read { buf, offset } => with_fd!(fd, |f| if fixed_buffers {
            opcode::ReadFixed::new(f, buf.ptr(), buf.len(), buf.fixed_index()).offset(offset).build()
        } else {
            opcode::Read::new(f, buf.ptr(), buf.len()).offset(offset).build()
        }),
        RingOp::Write { buf, offset, fua } => {
            let flags = if fua { libc::RWF_DSYNC } else { 0 };
            with_fd!(fd, |f| if fixed_buffers {
                opcode::WriteFixed::new(f, buf.ptr(), buf.len(), buf.fixed_index())
                    .offset(offset)
                    .rw_flags(flags)
                    .build()
            } else {
                opcode::Write::new(f, buf.ptr(), buf.len()).offset(offset).rw_flags(flags).build()
            })
        }
        RingOp::Fsync => with_fd!(fd, |f| opcode::Fsync::new(f).flags(types::FsyncFlags::DATASYNC).build()),
        RingOp::Fallocate { mode, offset, len } => {
            with_fd!(fd, |f| opcode::Fallocate::new(f, len).offset(offset).mode(mode).build())
        }
        RingOp::BlockDiscard { offset, len } => {
            // The kernel reads the start from `addr` and the length from `addr3`, where the command bytes begin.
            let mut cmd = [0u8; 16];
            cmd[..8].copy_from_slice(&len.to_ne_bytes());
            with_fd!(fd, |f| opcode::UringCmd16::new(f, BLOCK_URING_CMD_DISCARD).addr(Some(offset)).cmd(cmd).build())
        }
        RingOp::Nvme { cmd, buf, range } => {
            let (cmd, buf_index) = match (buf, range) {
                (Some(buf), _) => {
                    let cmd = cmd.with_data(buf.ptr() as u64, buf.len());
                    (cmd, fixed_buffers.then(|| buf.fixed_index()))
                }
                (None, Some(_)) => (cmd.with_data(range_addr, DSM_RANGE_LEN), None),
                (None, None) => (cmd, None),
            };
            let bytes = cmd.to_bytes();
            return with_fd!(fd, |f| opcode::UringCmd80::new(f, NVME_URING_CMD_IO)
                .cmd(bytes)
                .buf_index(buf_index)
                .build());
        }
    };
    entry.into()
}

/// How an SQE names the file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FileRef {
    /// A slot of the ring's registered file table.
    Fixed(u32),
    /// A plain descriptor (fallback when the kernel refuses a sparse file table); the caller keeps it open until
    /// the CQE arrives.
    Raw(RawFd),
}

/// One operation for the ring.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RingOp {
    Read {
        buf: IoBuffer,
        offset: u64,
    },
    Write {
        buf: IoBuffer,
        offset: u64,
        fua: bool,
    },
    /// fdatasync.
    Fsync,
    Fallocate {
        mode: i32,
        offset: u64,
        len: u64,
    },
    /// `BLOCK_URING_CMD_DISCARD` on a block device (Linux 6.12+; older kernels answer EOPNOTSUPP).
    BlockDiscard {
        offset: u64,
        len: u64,
    },
    /// An NVMe command on a generic node (`NVME_URING_CMD_IO`), moving `buf` (a registered buffer when the pool
    /// is registered: `IORING_URING_CMD_FIXED`) or the Dataset Management `range` (copied into the ring's range
    /// slot of this op), or nothing.
    Nvme {
        cmd: NvmeUringCmd,
        buf: Option<IoBuffer>,
        range: Option<[u8; DSM_RANGE_BYTES]>,
    },
}

/// One 16-byte Dataset Management range per in-flight op (indexed by its user data): the kernel reads it when it
/// issues the command, which may be after `io_uring_enter` returns (io-wq), so it lives as long as the ring.
struct RangeSlots {
    ptr: std::ptr::NonNull<[u8; DSM_RANGE_BYTES]>,
    len: usize,
}

// SAFETY: the slots are a heap allocation owned exclusively by this value (like a `Box`); nothing ties them to the
// creating thread. Not `Sync`: writes go through `&mut self`.
unsafe impl Send for RangeSlots {}

impl RangeSlots {
    fn new(len: usize) -> Self {
        let slots: Box<[[u8; DSM_RANGE_BYTES]]> = vec![[0u8; DSM_RANGE_BYTES]; len].into_boxed_slice();
        let ptr = std::ptr::NonNull::from(Box::leak(slots)).cast();
        RangeSlots { ptr, len }
    }

    /// Stores `range` in slot `index` and returns its address, or `None` if `index` is out of bounds.
    fn store(&mut self, index: u64, range: [u8; DSM_RANGE_BYTES]) -> Option<u64> {
        let index = usize::try_from(index).ok().filter(|&i| i < self.len)?;
        // SAFETY: `index < len`, so the slot is inside the allocation. The slot belongs to the op about to be
        // pushed under user data `index`; no op in flight uses it (user data are unique in-flight keys), so the
        // kernel is not reading it.
        unsafe {
            let slot = self.ptr.as_ptr().add(index);
            slot.write(range);
            Some(slot as u64)
        }
    }
}

impl Drop for RangeSlots {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` come from the leaked boxed slice in `new`; dropped after the ring (field order), and
        // the engine waits for every op before dropping the ring.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
    }
}

/// An io_uring with the pool registered as fixed buffers and an eventfd signalled on completions.
pub(crate) struct Ring {
    // Field order matters: the ring goes before the range slots it may read.
    ring: BigRing,
    ranges: RangeSlots,
    event_fd: File,
    fixed_buffers: bool,
    file_slots: u32,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("sq_entries", &self.ring.params().sq_entries())
            .field("cq_entries", &self.ring.params().cq_entries())
            .field("fixed_buffers", &self.fixed_buffers)
            .field("file_slots", &self.file_slots)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// Sets up a ring of `entries` SQEs (CQ twice that), registers `pool` as fixed buffers (plain Read/Write if the
    /// kernel refuses, e.g. RLIMIT_MEMLOCK), a sparse table of `file_slots` fixed files (0 if refused) and an
    /// eventfd. With `defer_task_work` the kernel runs completion work only when this thread enters the ring
    /// (`IORING_SETUP_DEFER_TASKRUN`, single issuer, the pending work flagged in the SQ ring), if it can.
    pub(crate) fn new(
        entries: u32,
        pool: &BufferPool,
        file_slots: u32,
        defer_task_work: bool,
    ) -> Result<Self, BackendError> {
        let ring_err = |action| move |source| BackendError::Ring { action, source };
        let mut plain = IoUring::builder();
        plain.setup_clamp();
        let deferred = defer_task_work.then(|| {
            let mut builder = plain.clone();
            builder.setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag();
            builder.build(entries)
        });
        let ring: BigRing = match deferred {
            Some(Ok(ring)) => ring,
            Some(Err(e)) => {
                tracing::info!(error = %e, "io_uring without deferred task work (Linux 6.1)");
                plain.build(entries).map_err(ring_err("setup"))?
            }
            None => plain.build(entries).map_err(ring_err("setup"))?,
        };
        // SAFETY: eventfd(2) with valid flags; the returned descriptor is owned by nobody else.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(BackendError::Ring { action: "eventfd", source: io::Error::last_os_error() });
        }
        // SAFETY: `fd` is a fresh descriptor we own exclusively.
        let event_fd = unsafe { File::from_raw_fd(fd) };
        ring.submitter().register_eventfd(event_fd.as_raw_fd()).map_err(ring_err("register eventfd"))?;

        let iovecs = pool.fixed_iovecs();
        // SAFETY: every iovec lies inside the pool's mapping, which outlives the ring: the engine drops the ring
        // first (field order) and the pool only after that. The kernel pins the pages while registered.
        let fixed_buffers = match unsafe { ring.submitter().register_buffers(&iovecs) } {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot register the buffer pool with io_uring; using unregistered buffers");
                false
            }
        };
        let file_slots = match ring.submitter().register_files_sparse(file_slots) {
            Ok(()) => file_slots,
            Err(e) => {
                tracing::warn!(error = %e, "cannot register a fixed file table; using plain descriptors");
                0
            }
        };
        let ranges = RangeSlots::new(ring.params().cq_entries() as usize);
        Ok(Ring { ring, ranges, event_fd, fixed_buffers, file_slots })
    }

    /// Number of fixed file slots (0: use [`FileRef::Raw`]).
    pub(crate) fn file_slots(&self) -> u32 {
        self.file_slots
    }

    /// Completion queue size: the engine keeps at most this many ops in the kernel so the CQ cannot overflow.
    pub(crate) fn cq_entries(&self) -> u32 {
        self.ring.params().cq_entries()
    }

    /// Points fixed file `slot` at `fd` (the ring takes its own reference to the file).
    pub(crate) fn register_file(&mut self, slot: u32, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_files_update(slot, &[fd]).map(drop)
    }

    /// Empties fixed file `slot`; ops already submitted keep their reference to the file.
    pub(crate) fn unregister_file(&mut self, slot: u32) -> io::Result<()> {
        self.ring.submitter().register_files_update(slot, &[-1]).map(drop)
    }

    /// Whether the SQ has no free entry.
    pub(crate) fn sq_full(&mut self) -> bool {
        self.ring.submission().is_full()
    }

    /// Free SQ entries.
    pub(crate) fn sq_space(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }

    /// SQ capacity.
    pub(crate) fn sq_capacity(&mut self) -> usize {
        self.ring.submission().capacity()
    }

    /// Number of SQEs pushed and not yet submitted.
    pub(crate) fn sq_pending(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Queues `op` on `file` with `user_data`. `Err(())` when the SQ is full.
    pub(crate) fn push(&mut self, user_data: u64, file: FileRef, op: RingOp) -> Result<(), ()> {
        let fd = match file {
            FileRef::Fixed(slot) => FdRef::Fixed(types::Fixed(slot)),
            FileRef::Raw(fd) => FdRef::Raw(types::Fd(fd)),
        };
        let range_addr = match op {
            RingOp::Nvme { range: Some(range), buf: None, .. } => self.ranges.store(user_data, range).ok_or(())?,
            _ => 0,
        };
        let entry = build_entry(fd, op, self.fixed_buffers, range_addr).user_data(user_data);
        // SAFETY: buffers in `op` are `IoBuffer`s, which point into the pool's mapping and stay reserved (in
        // flight) until the engine reaps this entry's CQE (see the module docs); a DSM range sits in this op's
        // range slot, owned by the ring until then too; a `Fixed` slot refers to a registered file the kernel
        // holds a reference to, and a `Raw` fd is kept open by the engine (it holds the `Arc<Storage>`) until
        // completion.
        unsafe { self.ring.submission().push(&entry) }.map_err(drop)
    }

    /// Queues a prepared 64-byte SQE (a socket op of `socket.rs`). `Err(())` when the SQ is full.
    ///
    /// # Safety
    /// Every address the entry names must stay valid (and, for a buffer the kernel writes, unused by anyone else)
    /// until its CQE has been reaped.
    pub(crate) unsafe fn push_entry(&mut self, entry: &squeue::Entry) -> Result<(), ()> {
        let entry: squeue::Entry128 = entry.clone().into();
        // SAFETY: the caller's contract above.
        unsafe { self.ring.submission().push(&entry) }.map_err(drop)
    }

    /// Queues a multishot poll for `fd` becoming readable, completing with `user_data` each time. `Err(())` when
    /// the SQ is full.
    pub(crate) fn poll_multishot(&mut self, fd: RawFd, user_data: u64) -> Result<(), ()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).multi(true).build().user_data(user_data);
        // SAFETY: a poll names no memory; a descriptor closed meanwhile only ends the poll.
        unsafe { self.push_entry(&entry) }
    }

    /// Fills `probe` with the ops the kernel supports.
    pub(crate) fn register_probe(&self, probe: &mut io_uring::Probe) -> io::Result<()> {
        self.ring.submitter().register_probe(probe)
    }

    /// Submits every pushed SQE with one `io_uring_enter` (none if nothing is pending and no deferred completion
    /// work waits to run). Retries on EINTR.
    pub(crate) fn submit(&mut self) -> io::Result<usize> {
        if self.sq_pending() == 0 && !self.ring.submission().taskrun() {
            return Ok(0);
        }
        loop {
            match self.ring.submit() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Submits and blocks until at least one completion is available (used when draining at drop).
    pub(crate) fn submit_and_wait_one(&mut self) -> io::Result<usize> {
        self.ring.submit_and_wait(1)
    }

    /// Submits what is pushed and waits until a completion is available or `timeout` passed (`None`: no bound);
    /// a timeout or a signal ends the wait without an error. Needs [`Ring::can_wait_with_timeout`] for a bound.
    pub(crate) fn submit_and_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let result = match timeout {
            None => self.ring.submit_and_wait(1),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel takes a timeout with a wait (`IORING_FEAT_EXT_ARG`, Linux 5.11).
    pub(crate) fn can_wait_with_timeout(&self) -> bool {
        self.ring.params().is_feature_ext_arg()
    }

    /// Stops signalling the eventfd at completions: a thread that waits in the ring itself needs no wake-up
    /// through it (external completions still write it).
    pub(crate) fn stop_signalling_event_fd(&self) -> io::Result<()> {
        self.ring.submitter().unregister_eventfd()
    }

    /// Registers a provided-buffer ring of `entries` at `ring_addr` as buffer group `group`.
    ///
    /// # Safety
    /// `ring_addr` must point at `entries` page-aligned `io_uring_buf`s that stay valid, with the buffers they name,
    /// until the ring is dropped (or the group unregistered).
    pub(crate) unsafe fn register_buf_ring(&self, ring_addr: u64, entries: u16, group: u16) -> io::Result<()> {
        // SAFETY: the caller's contract above.
        unsafe { self.ring.submitter().register_buf_ring_with_flags(ring_addr, entries, group, 0) }
    }

    /// Drains the CQ without blocking, calling `f(user_data, result, extra, flags)` for each CQE (`extra`: the big
    /// CQE's first extra word, an NVMe command's result; `flags`: the CQE's, which carry a provided buffer's id and
    /// whether a multishot op goes on).
    pub(crate) fn drain_completions(&mut self, mut f: impl FnMut(u64, i32, u64, u32)) {
        for cqe in self.ring.completion() {
            f(cqe.user_data(), cqe.result(), cqe.big_cqe()[0], cqe.flags());
        }
    }

    /// The eventfd registered with the ring.
    pub(crate) fn event_fd(&self) -> RawFd {
        self.event_fd.as_raw_fd()
    }

    /// A second descriptor of the eventfd, for a thread that posts completions from outside the ring.
    pub(crate) fn event_fd_handle(&self) -> io::Result<File> {
        self.event_fd.try_clone()
    }

    /// Makes the eventfd readable (completions that did not come from the kernel are ready).
    pub(crate) fn signal_event_fd(&self) {
        if let Err(e) = (&self.event_fd).write_all(&1u64.to_ne_bytes()) {
            tracing::warn!(error = %e, "eventfd write failed");
        }
    }

    /// Resets the eventfd counter (non-blocking; a no-op when it is zero).
    pub(crate) fn drain_event_fd(&self) {
        let mut counter = [0u8; 8];
        let _ = (&self.event_fd).read(&mut counter);
    }
}

/// `fallocate(2)`, synchronously (probes at open, the WriteZeroes fallback).
pub(crate) fn fallocate(fd: RawFd, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: fallocate reads no memory of ours; a bad fd only yields EBADF.
    if unsafe { libc::fallocate(fd, mode, offset, len) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Direct I/O alignment of a file from `statx(STATX_DIOALIGN)`: (memory alignment, offset alignment); zeros when
/// the filesystem does not support O_DIRECT; `None` when the kernel cannot say.
pub(crate) fn dio_alignment(path: &Path) -> Option<(u32, u32)> {
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `cpath` is a NUL-terminated string and `stx` a writable statx that outlive the call.
    let rc = unsafe { libc::statx(libc::AT_FDCWD, cpath.as_ptr(), 0, libc::STATX_DIOALIGN, &mut stx) };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// A block device's size in bytes (`BLKGETSIZE64`).
pub(crate) fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer, which points to a live u64.
    if unsafe { libc::ioctl(fd, BLKGETSIZE64, &mut size as *mut u64) } == 0 {
        Ok(size)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A block device's logical block size (`BLKSSZGET`).
pub(crate) fn block_device_logical_block_size(fd: RawFd) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int to the pointer, which points to a live c_int.
    if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut size as *mut libc::c_int) } == 0 {
        u32::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Discards `[offset, offset + len)` of a block device (`BLKDISCARD`). Synchronous: blocks the calling thread
/// (the engine's discard worker, never a reactor) until the device has processed the discard.
pub(crate) fn block_device_discard(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKDISCARD reads two u64 from the pointer, which points to a live [u64; 2].
    if unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The NSID of the namespace an NVMe generic node (or block device) stands for (`NVME_IOCTL_ID`).
pub(crate) fn nvme_namespace_id(fd: RawFd) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and touches no memory of ours.
    let rc = unsafe { libc::ioctl(fd, NVME_IOCTL_ID) };
    u32::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// Runs `cmd` synchronously through `request` (`NVME_IOCTL_ADMIN_CMD`/`NVME_IOCTL_IO_CMD`) with `data` as its
/// buffer; returns the NVMe status field (0 = success). `cmd.addr`/`data_len` are set here.
fn nvme_passthru(fd: RawFd, request: libc::c_ulong, cmd: &mut NvmeUringCmd, data: &mut [u8]) -> io::Result<u16> {
    cmd.addr = data.as_mut_ptr() as u64;
    cmd.data_len = u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `cmd` is a live `struct nvme_passthru_cmd` (same layout, 72 bytes; the kernel writes `result` into
    // `rsvd2`); its `addr`/`data_len` describe `data`, which is borrowed mutably for the whole synchronous call.
    let rc = unsafe { libc::ioctl(fd, request, std::ptr::from_mut(cmd)) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u16::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EPROTO))
}

/// An admin command (Identify at open) on `fd`, moving `len` bytes of `data`. Returns the status field.
pub(crate) fn nvme_admin_command(fd: RawFd, cmd: &mut NvmeUringCmd, data: &mut [u8], len: u32) -> io::Result<u16> {
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(data.len());
    nvme_passthru(fd, NVME_IOCTL_ADMIN_CMD, cmd, &mut data[..len])
}

/// An I/O command without data (Flush at shutdown) on `fd`. Returns the status field.
pub(crate) fn nvme_io_command(fd: RawFd, cmd: &mut NvmeUringCmd) -> io::Result<u16> {
    nvme_passthru(fd, NVME_IOCTL_IO_CMD, cmd, &mut [])
}

/// Waits up to `timeout_ms` for `fd` to become readable (tests stand in for the reactor's poller).
#[cfg(test)]
pub(crate) fn poll_readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd that outlives the call.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) == 1 }
}

/// The page-cache state of the whole file behind `fd` from `cachestat(2)` (Linux 6.5): (pages cached, pages dirty
/// or under writeback). Tests check with it that a buffered namespace's Flush and FUA writes leave nothing unwritten.
#[cfg(test)]
pub(crate) fn cached_and_unwritten_pages(fd: RawFd) -> io::Result<(u64, u64)> {
    /// The same number on every architecture (the syscall table is unified since 4.20).
    const SYS_CACHESTAT: libc::c_long = 451;
    // `struct cachestat_range { off, len }`, len 0 = to the end of the file; `struct cachestat { nr_cache, nr_dirty,
    // nr_writeback, nr_evicted, nr_recently_evicted }`, all u64.
    let range = [0u64; 2];
    let mut stat = [0u64; 5];
    // SAFETY: cachestat reads 16 bytes at the range pointer and writes 40 at the stat pointer: both are live local
    // u64 arrays of exactly those sizes; flags must be 0.
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, fd, range.as_ptr(), stat.as_mut_ptr(), 0 as libc::c_uint) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stat[0], stat[1] + stat[2]))
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn struct_layout_matches_the_uapi_header() {
        // include/uapi/linux/nvme_ioctl.h, struct nvme_uring_cmd.
        assert_eq!(size_of::<NvmeUringCmd>(), 72);
        let offsets = [
            (offset_of!(NvmeUringCmd, opcode), 0),
            (offset_of!(NvmeUringCmd, flags), 1),
            (offset_of!(NvmeUringCmd, rsvd1), 2),
            (offset_of!(NvmeUringCmd, nsid), 4),
            (offset_of!(NvmeUringCmd, cdw2), 8),
            (offset_of!(NvmeUringCmd, cdw3), 12),
            (offset_of!(NvmeUringCmd, metadata), 16),
            (offset_of!(NvmeUringCmd, addr), 24),
            (offset_of!(NvmeUringCmd, metadata_len), 32),
            (offset_of!(NvmeUringCmd, data_len), 36),
            (offset_of!(NvmeUringCmd, cdw10), 40),
            (offset_of!(NvmeUringCmd, cdw15), 60),
            (offset_of!(NvmeUringCmd, timeout_ms), 64),
            (offset_of!(NvmeUringCmd, rsvd2), 68),
        ];
        for (i, (got, want)) in offsets.into_iter().enumerate() {
            assert_eq!(got, want, "field {i}");
        }
        // _IOWR('N', nr, 72-byte struct): dir 3 << 30 | size << 16 | 'N' << 8 | nr.
        let iowr = |nr: u32| (3u32 << 30) | (72 << 16) | (u32::from(b'N') << 8) | nr;
        assert_eq!(NVME_URING_CMD_IO, iowr(0x80));
        assert_eq!(NVME_IOCTL_ADMIN_CMD, libc::c_ulong::from(iowr(0x41)));
        assert_eq!(NVME_IOCTL_IO_CMD, libc::c_ulong::from(iowr(0x43)));
        assert_eq!(NVME_IOCTL_ID, (libc::c_ulong::from(b'N') << 8) | 0x40);
    }
}
