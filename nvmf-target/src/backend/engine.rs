//! The per-reactor I/O engine: one io_uring, one buffer pool, one in-flight table.
//!
//! Runs on its reactor thread only. `push` queues SQEs (null/memory ops are done at once and their completions
//! queued), `submit` hands everything pushed to the kernel in one `io_uring_enter`, `reap` drains completions
//! without blocking. The reactor sleeps on [`IoEngine::event_fd`] (readable when completions are ready).
//!
//! The in-flight table owns the tag ↔ buffer association of every op in the kernel: a buffer stays reserved until
//! its CQE has been reaped, even if the caller releases it first (the release is deferred). At most as many ops
//! as the completion queue holds are in the kernel, so the CQ cannot overflow.
//!
//! Short reads/writes are not resubmitted: they complete with an error (`UnexpectedEof`/`WriteZero`) that the
//! controller maps to an internal-error status. With O_DIRECT inside the checked capacity they do not happen; a
//! file truncated behind our back, or a buffered write hitting ENOSPC part-way, is an error either way.
//! Discard on a block device goes through io_uring (`BLOCK_URING_CMD_DISCARD`, Linux 6.12+); on older kernels it
//! falls back to the synchronous `BLKDISCARD` ioctl, which blocks the reactor while the device works.
//!
//! NVMe passthrough storages (`/dev/ngXnY`) get NVMe commands (`NVME_URING_CMD_IO`) on the same ring, whose
//! entries are big for that (see `ring.rs`). An op the drive must receive as several commands (a Read/Write above
//! the transfer limit, a Write Zeroes above 65536 LBAs) is pushed whole or not at all and completes once, when
//! its last command has: with the op's byte count, or the first failure (a drive status is a [`DriveStatus`]
//! inside the `io::Error`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};

use nvmf_common::nvme::SubmissionQueueEntry;

use super::nvme::{self, NvmeBacking, NvmeUringCmd};
use super::pool::{BufferPool, StartIoError};
use super::ring::{self, FileRef, Ring, RingOp};
use super::storage::{FileBacking, Kind, ZeroMode};
#[cfg(doc)]
use super::DriveStatus;
use super::{BackendError, BufferId, Storage};

/// A storage operation. Offsets and lengths are in bytes and must be multiples of the storage's block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Read `len` bytes at `offset` into the op's buffer.
    Read {
        /// Byte offset.
        offset: u64,
        /// Byte count (at most the buffer's allocated length).
        len: u32,
    },
    /// Write `len` bytes of the op's buffer at `offset`; with `fua` the data is durable at completion
    /// (`RWF_DSYNC`).
    Write {
        /// Byte offset.
        offset: u64,
        /// Byte count (at most the buffer's allocated length).
        len: u32,
        /// Force Unit Access.
        fua: bool,
    },
    /// Make every completed write durable (`fdatasync`).
    Flush,
    /// Make `[offset, offset + len)` read as zeros.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u64,
    },
    /// Deallocate `[offset, offset + len)` (files and memory then read zeros).
    Discard {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u64,
    },
}

/// The outcome of one pushed op.
#[derive(Debug)]
pub struct IoCompletion {
    /// The tag given to [`IoEngine::push`].
    pub tag: u64,
    /// Bytes transferred (Read/Write; 0 for the others), or the error: an errno from the kernel, `InvalidInput`
    /// for an op the engine refused (out of range, misaligned, bad buffer), `Unsupported` for a capability the
    /// storage lacks, `UnexpectedEof`/`WriteZero` for a short transfer, or (NVMe passthrough) the drive's NVMe
    /// status as a [`DriveStatus`] (kind `Other`; read it with [`drive_status`](super::drive_status)).
    pub result: Result<u32, io::Error>,
}

/// Sizes of an [`IoEngine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Submission queue entries (the CQ has twice as many). Default 256.
    pub ring_entries: u32,
    /// Size of a large buffer; the largest transfer one buffer holds (≥ MDTS). Default 1 MiB.
    pub buffer_size: usize,
    /// Number of large buffers. Default 32.
    pub buffer_count: usize,
    /// Size of a small buffer, for the many small transfers. Default 64 KiB; 0 count disables the class.
    pub small_buffer_size: usize,
    /// Number of small buffers. Default 512.
    pub small_buffer_count: usize,
    /// Fixed-file slots (distinct storages one engine serves at a time without falling back to plain
    /// descriptors). Default 64.
    pub max_files: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            ring_entries: 256,
            buffer_size: 1 << 20,
            buffer_count: 32,
            small_buffer_size: 64 << 10,
            small_buffer_count: 512,
            max_files: 64,
        }
    }
}

/// What a successful CQE must report.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Read(u32),
    Write(u32),
    Done,
    /// An async block discard; on EOPNOTSUPP (kernel without the command) it is redone with the ioctl.
    BlockDiscard {
        offset: u64,
        len: u64,
    },
    /// An NVMe command carrying a whole op: status 0 means this many bytes done.
    Nvme(u32),
    /// One of several NVMe commands of an op: the group (index into `Groups`) completes the op.
    NvmePart(u32),
}

/// An op sent to the drive as several NVMe commands.
#[derive(Debug)]
struct Group {
    tag: u64,
    /// Commands not completed yet.
    remaining: usize,
    /// The op's buffer, in flight until the last command completes.
    buffer: Option<BufferId>,
    /// Bytes the op moves (its result when every command succeeds).
    bytes: u32,
    /// The first failure.
    error: Option<io::Error>,
    /// Keeps a plain descriptor open until the last command completes.
    _storage: Option<Arc<Storage>>,
}

/// Fixed-capacity slab of [`Group`]s.
#[derive(Debug)]
struct Groups {
    entries: Vec<Option<Group>>,
    free: Vec<u32>,
    /// Sum of `remaining` over the groups: in-flight entries that are parts.
    parts: usize,
}

impl Groups {
    fn new(capacity: u32) -> Self {
        Groups { entries: (0..capacity).map(|_| None).collect(), free: (0..capacity).rev().collect(), parts: 0 }
    }

    fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    fn insert(&mut self, group: Group) -> Option<u32> {
        let index = self.free.pop()?;
        self.parts += group.remaining;
        self.entries[index as usize] = Some(group);
        Some(index)
    }

    /// `n` commands of group `index` will never complete (they could not be pushed): drop them, and the group if
    /// none is left. Returns the group when it is finished.
    fn forget(&mut self, index: u32, n: usize, error: io::Error) -> Option<Group> {
        let group = self.entries.get_mut(index as usize)?.as_mut()?;
        let n = n.min(group.remaining);
        group.remaining -= n;
        self.parts -= n;
        group.error.get_or_insert(error);
        if group.remaining == 0 {
            self.free.push(index);
            return self.entries[index as usize].take();
        }
        None
    }

    /// One command of group `index` completed with `result`; returns the group when it was the last one.
    fn part_done(&mut self, index: u32, result: Result<u32, io::Error>) -> Option<Group> {
        let group = self.entries.get_mut(index as usize)?.as_mut()?;
        group.remaining = group.remaining.saturating_sub(1);
        self.parts = self.parts.saturating_sub(1);
        if let Err(e) = result {
            group.error.get_or_insert(e);
        }
        if group.remaining == 0 {
            self.free.push(index);
            return self.entries[index as usize].take();
        }
        None
    }
}

/// One op in the kernel.
#[derive(Debug)]
struct InFlight {
    tag: u64,
    buffer: Option<BufferId>,
    expect: Expect,
    /// Keeps a plain descriptor open until completion (when no fixed-file slot was available, and for block
    /// discards, which may be redone synchronously).
    storage: Option<Arc<Storage>>,
}

/// Fixed-capacity slab keyed by the CQE user data.
#[derive(Debug)]
struct InFlightTable {
    entries: Vec<Option<InFlight>>,
    free: Vec<u32>,
}

impl InFlightTable {
    fn new(capacity: u32) -> Self {
        InFlightTable { entries: (0..capacity).map(|_| None).collect(), free: (0..capacity).rev().collect() }
    }

    fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    fn capacity(&self) -> usize {
        self.entries.len()
    }

    fn free_len(&self) -> usize {
        self.free.len()
    }

    fn insert(&mut self, entry: InFlight) -> Option<u32> {
        let key = self.free.pop()?;
        self.entries[key as usize] = Some(entry);
        Some(key)
    }

    fn remove(&mut self, key: u64) -> Option<InFlight> {
        let index = u32::try_from(key).ok()?;
        let entry = self.entries.get_mut(index as usize)?.take()?;
        self.free.push(index);
        Some(entry)
    }
}

/// Hashes a `u64` storage id to itself.
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
struct FileSlot {
    slot: u32,
    storage: Weak<Storage>,
}

/// Per-reactor I/O engine: one io_uring, a pool of aligned data buffers it owns, an in-flight table.
#[derive(Debug)]
pub struct IoEngine {
    // Field order matters: the ring (which has the pool registered) is dropped before the pool is unmapped.
    ring: Ring,
    pool: BufferPool,
    in_flight: InFlightTable,
    /// Ops split into several NVMe commands.
    groups: Groups,
    /// Completions that did not go through the kernel (null/memory, refused ops, synchronous ioctls).
    ready: VecDeque<IoCompletion>,
    /// The eventfd was written for the current `ready` entries.
    ready_signalled: bool,
    /// Storage id → fixed file slot (looked up per op: ids are unique counters, no need for SipHash).
    files: HashMap<u64, FileSlot, BuildHasherDefault<IdHasher>>,
    free_file_slots: Vec<u32>,
    /// Discard block devices through io_uring (until a kernel says it cannot).
    async_block_discard: bool,
}

fn refused(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

fn unsupported(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, message)
}

/// The result of an op that needs no kernel round trip on any storage kind: empty transfers succeed at once;
/// a read/write without a buffer, and discard or write zeroes the storage does not support, fail at once.
fn completes_without_kernel(
    op: IoOp,
    buf: Option<BufferId>,
    storage: &Storage,
    write_zeroes_supported: bool,
) -> Option<io::Result<u32>> {
    match op {
        IoOp::Read { len: 0, .. } | IoOp::Write { len: 0, .. } => Some(Ok(0)),
        IoOp::WriteZeroes { len: 0, .. } | IoOp::Discard { len: 0, .. } => Some(Ok(0)),
        IoOp::Read { .. } | IoOp::Write { .. } if buf.is_none() => Some(Err(refused("read/write without a buffer"))),
        IoOp::Discard { .. } if !storage.supports_discard() => Some(Err(unsupported("discard not supported"))),
        IoOp::WriteZeroes { .. } if !write_zeroes_supported => Some(Err(unsupported("write zeroes not supported"))),
        _ => None,
    }
}

/// The last line of defence: block-aligned and inside the capacity.
fn check_range(storage: &Storage, offset: u64, len: u64) -> Result<(), io::Error> {
    let block = u64::from(storage.block_size());
    if offset % block != 0 || len % block != 0 {
        return Err(refused("storage op not aligned to the block size"));
    }
    match offset.checked_add(len) {
        Some(end) if end <= storage.capacity() => Ok(()),
        _ => Err(refused("storage op beyond the capacity")),
    }
}

fn buffer_error(e: StartIoError) -> io::Error {
    match e {
        StartIoError::NotAllocated => refused("storage op on a buffer that is not allocated"),
        StartIoError::Busy => io::Error::from_raw_os_error(libc::EBUSY),
        StartIoError::TooShort => refused("storage op longer than its buffer"),
    }
}

impl IoEngine {
    /// Creates the ring, maps and registers the buffer pool, and registers the eventfd.
    pub fn new(config: &EngineConfig) -> Result<Self, BackendError> {
        if config.ring_entries == 0 {
            return Err(BackendError::InvalidEngineConfig("ring_entries must be > 0"));
        }
        if config.buffer_size == 0 || config.buffer_count == 0 {
            return Err(BackendError::InvalidEngineConfig("buffer_size and buffer_count must be > 0"));
        }
        if config.small_buffer_count > 0 && config.small_buffer_size == 0 {
            return Err(BackendError::InvalidEngineConfig("small_buffer_size must be > 0"));
        }
        let pool = BufferPool::new(&[
            (config.buffer_size, config.buffer_count),
            (config.small_buffer_size, config.small_buffer_count),
        ])?;
        let ring = Ring::new(config.ring_entries, &pool, config.max_files)?;
        let in_flight = InFlightTable::new(ring.cq_entries());
        // Every group has at least two commands in flight.
        let groups = Groups::new(ring.cq_entries() / 2 + 1);
        let free_file_slots = (0..ring.file_slots()).rev().collect();
        tracing::debug!(?ring, buffers = pool.capacity(), huge_pages = pool.huge_pages(), "I/O engine created");
        Ok(IoEngine {
            ring,
            pool,
            in_flight,
            groups,
            ready: VecDeque::with_capacity(1024),
            ready_signalled: false,
            files: HashMap::default(),
            free_file_slots,
            async_block_discard: true,
        })
    }

    /// Allocates a buffer of `len` bytes. `None` when the pool is exhausted (the caller waits for a release) or
    /// `len` exceeds [`IoEngine::buffer_size`].
    pub fn alloc(&mut self, len: usize) -> Option<BufferId> {
        self.pool.alloc(len)
    }

    /// The buffer's bytes, exactly the allocated length. Empty if `id` is not allocated or an op on it is in flight.
    pub fn buffer(&self, id: BufferId) -> &[u8] {
        self.pool.get(id)
    }

    /// The buffer's bytes, writable. Empty if `id` is not allocated or an op on it is in flight.
    pub fn buffer_mut(&mut self, id: BufferId) -> &mut [u8] {
        self.pool.get_mut(id)
    }

    /// Frees the buffer; deferred until completion while an op using it is in flight.
    pub fn release(&mut self, id: BufferId) {
        self.pool.release(id);
    }

    /// The largest buffer [`IoEngine::alloc`] hands out (bound MDTS by it).
    pub fn buffer_size(&self) -> usize {
        self.pool.buffer_size()
    }

    /// The buffer pool (sizes, free count; region layout for registering it with an RDMA NIC).
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Hand buffer `id` (its first `len` bytes) to a device outside io_uring (an RDMA NIC's READ or WRITE) until
    /// [`IoEngine::end_transfer`]: meanwhile `buffer`/`buffer_mut` return empty slices and a release is deferred.
    /// Returns the buffer's offset in the pool region; `None` if it is not allocated, busy or shorter than `len`.
    #[cfg_attr(not(feature = "rdma"), allow(dead_code))] // the RDMA transport's
    pub(crate) fn start_transfer(&mut self, id: BufferId, len: u32) -> Option<usize> {
        self.pool.start_io(id, len).ok()?;
        self.pool.buffer_offset(id)
    }

    /// The device is done with `id` (see [`IoEngine::start_transfer`]).
    #[cfg_attr(not(feature = "rdma"), allow(dead_code))] // the RDMA transport's
    pub(crate) fn end_transfer(&mut self, id: BufferId) {
        self.pool.finish_io(id);
    }

    /// Queues `op` on `storage` under `tag`. For Read/Write, `buf` is required and `len` ≤ its allocated length;
    /// it must not be in flight already. Nothing reaches the kernel until [`IoEngine::submit`]; null/memory ops (and
    /// ops the engine refuses, which complete with an error) complete at once and are delivered by the next
    /// [`IoEngine::reap`]. `Err(op)` when the ring or the in-flight table is full: submit, reap, and retry.
    /// Tags are opaque and need not be unique (several ops of one command may share one).
    pub fn push(&mut self, tag: u64, storage: &Arc<Storage>, op: IoOp, buf: Option<BufferId>) -> Result<(), IoOp> {
        let range = match op {
            IoOp::Read { offset, len } | IoOp::Write { offset, len, .. } => Some((offset, u64::from(len))),
            IoOp::WriteZeroes { offset, len } | IoOp::Discard { offset, len } => Some((offset, len)),
            IoOp::Flush => None,
        };
        if let Some((offset, len)) = range {
            if let Err(e) = check_range(storage, offset, len) {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        }
        match storage.kind() {
            Kind::Null => {
                let result = match (op, buf) {
                    (IoOp::Read { len, .. }, Some(id)) => match self.sync_buffer_mut(id, len) {
                        Ok(dst) => {
                            dst.fill(0);
                            Ok(len)
                        }
                        Err(e) => Err(e),
                    },
                    (IoOp::Write { len, .. }, Some(id)) => self.sync_buffer_mut(id, len).map(|_| len),
                    (IoOp::Read { .. } | IoOp::Write { .. }, None) => Err(refused("read/write without a buffer")),
                    _ => Ok(0),
                };
                self.complete_now(tag, result);
            }
            Kind::Memory(store) => {
                let result = match (op, buf) {
                    (IoOp::Read { offset, len }, Some(id)) => self.sync_buffer_mut(id, len).map(|dst| {
                        store.read(offset, dst);
                        len
                    }),
                    (IoOp::Write { offset, len, .. }, Some(id)) => self.sync_buffer_mut(id, len).map(|src| {
                        store.write(offset, src);
                        len
                    }),
                    (IoOp::Read { .. } | IoOp::Write { .. }, None) => Err(refused("read/write without a buffer")),
                    (IoOp::WriteZeroes { offset, len } | IoOp::Discard { offset, len }, _) => {
                        store.zero(offset, len);
                        Ok(0)
                    }
                    (IoOp::Flush, _) => Ok(0),
                };
                self.complete_now(tag, result);
            }
            Kind::File(backing) => return self.push_ring(tag, storage, backing, false, op, buf),
            Kind::BlockDevice(backing) => return self.push_ring(tag, storage, backing, true, op, buf),
            Kind::Nvme(backing) => return self.push_nvme(tag, storage, backing, op, buf),
        }
        Ok(())
    }

    /// An op on an NVMe passthrough storage: one or more NVMe commands (see the module docs).
    fn push_nvme(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        backing: &NvmeBacking,
        op: IoOp,
        buf: Option<BufferId>,
    ) -> Result<(), IoOp> {
        let immediate = completes_without_kernel(op, buf, storage, backing.write_zeroes);
        if let Some(result) = immediate {
            self.complete_now(tag, result);
            return Ok(());
        }
        let plan = nvme::Plan::new(backing, op);
        let most = self.ring.sq_capacity().min(self.in_flight.capacity());
        let Some(count) = usize::try_from(plan.count()).ok().filter(|&n| n <= most) else {
            self.complete_now(tag, Err(refused("storage op needs more NVMe commands than the ring holds")));
            return Ok(());
        };
        let grouped = count > 1;
        if self.ring.sq_space() < count || self.in_flight.free_len() < count || (grouped && self.groups.free.is_empty())
        {
            return Err(op);
        }
        let (file, keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let (io_buf, bytes) = match (op, buf) {
            (IoOp::Read { len, .. } | IoOp::Write { len, .. }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (Some((id, io_buf)), len),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            _ => (None, 0),
        };
        let group = if grouped {
            let group = Group {
                tag,
                remaining: count,
                buffer: io_buf.map(|(id, _)| id),
                bytes,
                error: None,
                _storage: keep.clone(),
            };
            self.groups.insert(group)
        } else {
            None
        };
        for index in 0..count {
            let chunk = plan.chunk(index as u64);
            let part_buf = match (chunk.data, io_buf) {
                (Some((offset, len)), Some((_, io_buf))) => io_buf.slice(offset, len),
                _ => None,
            };
            let entry = match group {
                Some(g) => InFlight { tag, buffer: None, expect: Expect::NvmePart(g), storage: None },
                None => InFlight {
                    tag,
                    buffer: io_buf.map(|(id, _)| id),
                    expect: Expect::Nvme(bytes),
                    storage: keep.clone(),
                },
            };
            let pushed = if chunk.data.is_some() && part_buf.is_none() {
                None // the plan cut past the buffer: never send a data command without its data
            } else {
                self.in_flight.insert(entry).and_then(|key| {
                    let op = RingOp::Nvme { cmd: chunk.cmd, buf: part_buf, range: chunk.range };
                    if self.ring.push(u64::from(key), file, op).is_ok() {
                        Some(())
                    } else {
                        self.in_flight.remove(u64::from(key));
                        None
                    }
                })
            };
            if pushed.is_some() {
                continue;
            }
            // Checked above, so not expected. Before anything was pushed, undo and hand the op back; after, the
            // commands in the SQ complete the op with an error.
            match group {
                Some(g) if index > 0 => {
                    let error = io::Error::from_raw_os_error(libc::EAGAIN);
                    if let Some(done) = self.groups.forget(g, count - index, error) {
                        debug_assert!(false, "a group with commands pushed cannot finish here: {done:?}");
                    }
                    return Ok(());
                }
                Some(g) => {
                    self.groups.forget(g, count, io::Error::from_raw_os_error(libc::EAGAIN));
                }
                None => {}
            }
            if let Some((id, _)) = io_buf {
                self.pool.finish_io(id);
            }
            return Err(op);
        }
        Ok(())
    }

    /// Sends `sqe` as is (but for the NSID, which is the namespace's) to an NVMe passthrough storage, moving
    /// `data` (a buffer and a length) if given; no range check. Completes like an op: the byte count or the
    /// drive's status. For tests (status pass-through of what the engine would refuse).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn push_nvme_command(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        sqe: &SubmissionQueueEntry,
        data: Option<(BufferId, u32)>,
    ) -> Result<(), ()> {
        let Kind::Nvme(backing) = storage.kind() else {
            self.complete_now(tag, Err(refused("not an NVMe passthrough storage")));
            return Ok(());
        };
        if self.ring.sq_full() || self.in_flight.is_full() {
            return Err(());
        }
        let (file, keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let (buf, len) = match data {
            Some((id, len)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (Some((id, io_buf)), len),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            None => (None, 0),
        };
        let cmd = NvmeUringCmd { nsid: backing.nsid, ..NvmeUringCmd::from_sqe(sqe) };
        let entry = InFlight { tag, buffer: buf.map(|(id, _)| id), expect: Expect::Nvme(len), storage: keep };
        let key = self.in_flight.insert(entry).ok_or(())?;
        let op = RingOp::Nvme { cmd, buf: buf.map(|(_, b)| b), range: None };
        if self.ring.push(u64::from(key), file, op).is_err() {
            self.in_flight.remove(u64::from(key));
            if let Some((id, _)) = buf {
                self.pool.finish_io(id);
            }
            return Err(());
        }
        Ok(())
    }

    /// The first `len` bytes of an owned buffer, for ops done synchronously.
    fn sync_buffer_mut(&mut self, id: BufferId, len: u32) -> Result<&mut [u8], io::Error> {
        let bytes = self.pool.get_mut(id);
        bytes.get_mut(..len as usize).ok_or_else(|| refused("storage op longer than its buffer (or buffer busy)"))
    }

    fn push_ring(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        backing: &FileBacking,
        block_device: bool,
        op: IoOp,
        buf: Option<BufferId>,
    ) -> Result<(), IoOp> {
        // Ops that need no kernel round trip.
        let immediate = completes_without_kernel(op, buf, storage, backing.zero_mode != ZeroMode::Unsupported).or_else(
            || match op {
                IoOp::Discard { offset, len } if block_device && !self.async_block_discard => {
                    Some(ring::block_device_discard(storage.raw_fd().unwrap_or(-1), offset, len).map(|()| 0))
                }
                _ => None,
            },
        );
        if let Some(result) = immediate {
            self.complete_now(tag, result);
            return Ok(());
        }
        if self.ring.sq_full() || self.in_flight.is_full() {
            return Err(op);
        }
        let (file, mut keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let keep_size = libc::FALLOC_FL_KEEP_SIZE;
        let (ring_op, buffer, expect) = match (op, buf) {
            (IoOp::Read { offset, len }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (RingOp::Read { buf: io_buf, offset }, Some(id), Expect::Read(len)),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Write { offset, len, fua }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (RingOp::Write { buf: io_buf, offset, fua }, Some(id), Expect::Write(len)),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Flush, _) => (RingOp::Fsync, None, Expect::Done),
            (IoOp::WriteZeroes { offset, len }, _) => {
                let mode = if backing.zero_mode == ZeroMode::PunchHole {
                    libc::FALLOC_FL_PUNCH_HOLE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE
                };
                (RingOp::Fallocate { mode: mode | keep_size, offset, len }, None, Expect::Done)
            }
            (IoOp::Discard { offset, len }, _) if block_device => {
                // The ioctl fallback at completion needs the descriptor still open.
                keep = Some(Arc::clone(storage));
                (RingOp::BlockDiscard { offset, len }, None, Expect::BlockDiscard { offset, len })
            }
            (IoOp::Discard { offset, len }, _) => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | keep_size;
                (RingOp::Fallocate { mode, offset, len }, None, Expect::Done)
            }
            (IoOp::Read { .. } | IoOp::Write { .. }, None) => unreachable!("handled as immediate above"),
        };
        let entry = InFlight { tag, buffer, expect, storage: keep };
        let Some(key) = self.in_flight.insert(entry) else {
            // Checked above; undo and hand the op back rather than lose it.
            if let Some(id) = buffer {
                self.pool.finish_io(id);
            }
            return Err(op);
        };
        if self.ring.push(u64::from(key), file, ring_op).is_err() {
            self.in_flight.remove(u64::from(key));
            if let Some(id) = buffer {
                self.pool.finish_io(id);
            }
            return Err(op);
        }
        Ok(())
    }

    /// How this ring names `storage`'s file: a fixed slot (registered on first use), or the plain descriptor plus
    /// an `Arc` that keeps it open while the op is in flight.
    fn file_ref(&mut self, storage: &Arc<Storage>) -> Result<(FileRef, Option<Arc<Storage>>), io::Error> {
        let fd: RawFd = storage.raw_fd().ok_or_else(|| refused("storage has no file"))?;
        if let Some(slot) = self.files.get(&storage.id()) {
            return Ok((FileRef::Fixed(slot.slot), None));
        }
        if self.ring.file_slots() > 0 {
            self.reclaim_file_slots();
            if let Some(slot) = self.free_file_slots.pop() {
                match self.ring.register_file(slot, fd) {
                    Ok(()) => {
                        self.files.insert(storage.id(), FileSlot { slot, storage: Arc::downgrade(storage) });
                        return Ok((FileRef::Fixed(slot), None));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, storage = %storage.describe(), "fixed file registration failed");
                        self.free_file_slots.push(slot);
                    }
                }
            }
        }
        Ok((FileRef::Raw(fd), Some(Arc::clone(storage))))
    }

    /// Frees the fixed slots of storages nobody holds any more (their files then close once in-flight ops end).
    fn reclaim_file_slots(&mut self) {
        let dead: Vec<u64> =
            self.files.iter().filter(|(_, f)| f.storage.strong_count() == 0).map(|(&k, _)| k).collect();
        for id in dead {
            if let Some(f) = self.files.remove(&id) {
                if let Err(e) = self.ring.unregister_file(f.slot) {
                    tracing::warn!(error = %e, slot = f.slot, "fixed file unregistration failed");
                } else {
                    self.free_file_slots.push(f.slot);
                }
            }
        }
    }

    fn complete_now(&mut self, tag: u64, result: Result<u32, io::Error>) {
        self.ready.push_back(IoCompletion { tag, result });
    }

    /// Hands every pushed op to the kernel with one `io_uring_enter` (none when nothing is queued) and returns how
    /// many SQEs were submitted. If completions are ready without the kernel (null/memory), the eventfd is made
    /// readable so a reactor about to sleep still reaps them.
    pub fn submit(&mut self) -> io::Result<usize> {
        if !self.ready.is_empty() && !self.ready_signalled {
            self.ring.signal_event_fd();
            self.ready_signalled = true;
        }
        self.ring.submit()
    }

    /// Delivers every available completion to `f`, without blocking. Buffers of completed ops become accessible
    /// again (or are freed if released meanwhile) before `f` sees the completion.
    pub fn reap(&mut self, mut f: impl FnMut(IoCompletion)) {
        while let Some(completion) = self.ready.pop_front() {
            f(completion);
        }
        self.ready_signalled = false;
        let (pool, in_flight, groups) = (&mut self.pool, &mut self.in_flight, &mut self.groups);
        let mut async_block_discard = self.async_block_discard;
        self.ring.drain_completions(|user_data, res, extra| {
            let Some(entry) = in_flight.remove(user_data) else {
                tracing::error!(user_data, "completion for no op in flight");
                return;
            };
            if let Some(id) = entry.buffer {
                pool.finish_io(id);
            }
            let result = match (entry.expect, &entry.storage) {
                (Expect::BlockDiscard { offset, len }, Some(storage)) if res == -libc::EOPNOTSUPP => {
                    // This kernel has no io_uring block discard: use the (synchronous) ioctl from now on.
                    if async_block_discard {
                        tracing::info!("io_uring block discard unsupported; using BLKDISCARD");
                        async_block_discard = false;
                    }
                    ring::block_device_discard(storage.raw_fd().unwrap_or(-1), offset, len).map(|()| 0)
                }
                (Expect::Nvme(len), _) => nvme::cqe_result(res, extra, len),
                (Expect::NvmePart(group), _) => {
                    let Some(done) = groups.part_done(group, nvme::cqe_result(res, extra, 0)) else { return };
                    if let Some(id) = done.buffer {
                        pool.finish_io(id);
                    }
                    let result = done.error.map_or(Ok(done.bytes), Err);
                    f(IoCompletion { tag: done.tag, result });
                    return;
                }
                (expect, _) => cqe_result(res, expect),
            };
            f(IoCompletion { tag: entry.tag, result });
        });
        self.async_block_discard = async_block_discard;
    }

    /// Ops pushed whose completion has not been delivered by `reap` yet.
    pub fn in_flight(&self) -> usize {
        // An op split into several NVMe commands counts once.
        self.in_flight.len().saturating_sub(self.groups.parts) + self.groups.len() + self.ready.len()
    }

    /// An eventfd registered with the ring: readable when completions are ready. Register it with mio
    /// (edge-triggered: no need to read it); a level-triggered poller calls [`IoEngine::clear_event_fd`].
    pub fn event_fd(&self) -> RawFd {
        self.ring.event_fd()
    }

    /// Resets the eventfd's counter (only needed with level-triggered polling).
    pub fn clear_event_fd(&self) {
        self.ring.drain_event_fd();
    }
}

fn cqe_result(res: i32, expect: Expect) -> Result<u32, io::Error> {
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    let done = res.unsigned_abs();
    match expect {
        Expect::Read(len) | Expect::Write(len) if done == len => Ok(done),
        Expect::Read(len) => {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read: {done} of {len} bytes")))
        }
        Expect::Write(len) => {
            Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write: {done} of {len} bytes")))
        }
        Expect::Done | Expect::BlockDiscard { .. } => Ok(0),
        Expect::Nvme(_) | Expect::NvmePart(_) => nvme::cqe_result(res, 0, 0),
    }
}

impl Drop for IoEngine {
    /// Waits for every op in the kernel, so no kernel worker touches the pool after it is unmapped.
    fn drop(&mut self) {
        while self.in_flight.len() > 0 {
            match self.ring.submit_and_wait_one() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(error = %e, in_flight = self.in_flight.len(), "cannot drain the ring at drop");
                    return;
                }
            }
            let (pool, in_flight) = (&mut self.pool, &mut self.in_flight);
            self.ring.drain_completions(|user_data, _, _| {
                if let Some(id) = in_flight.remove(user_data).and_then(|e| e.buffer) {
                    pool.finish_io(id);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StorageSpec;
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn small_engine(ring_entries: u32, large: usize, small: usize) -> IoEngine {
        IoEngine::new(&EngineConfig {
            ring_entries,
            buffer_size: 128 << 10,
            buffer_count: large,
            small_buffer_size: 4096,
            small_buffer_count: small,
            max_files: 4,
        })
        .unwrap()
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| u8::try_from((i * 31 + seed * 7) % 251).unwrap()).collect()
    }

    /// Waits (on the eventfd, as a reactor would) until `want` completions arrived; returns them in arrival order.
    fn wait_for(engine: &mut IoEngine, want: usize) -> Vec<IoCompletion> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            engine.reap(|c| got.push(c));
            if got.len() >= want {
                return got;
            }
            assert!(Instant::now() < deadline, "timed out with {} of {want} completions", got.len());
            ring::poll_readable(engine.event_fd(), 100);
            engine.clear_event_fd();
        }
    }

    /// Pushes one op, submits, waits for its completion.
    fn run(engine: &mut IoEngine, storage: &Arc<Storage>, op: IoOp, buf: Option<BufferId>) -> Result<u32, io::Error> {
        engine.push(7, storage, op, buf).unwrap();
        engine.submit().unwrap();
        let mut done = wait_for(engine, 1);
        assert_eq!(done.len(), 1);
        let c = done.pop().unwrap();
        assert_eq!(c.tag, 7);
        c.result
    }

    fn write_at(engine: &mut IoEngine, storage: &Arc<Storage>, offset: u64, data: &[u8], fua: bool) {
        let id = engine.alloc(data.len()).unwrap();
        engine.buffer_mut(id).copy_from_slice(data);
        let len = u32::try_from(data.len()).unwrap();
        assert_eq!(run(engine, storage, IoOp::Write { offset, len, fua }, Some(id)).unwrap(), len);
        engine.release(id);
    }

    fn read_at(engine: &mut IoEngine, storage: &Arc<Storage>, offset: u64, len: usize) -> Vec<u8> {
        let id = engine.alloc(len).unwrap();
        engine.buffer_mut(id).fill(0xee);
        let n = u32::try_from(len).unwrap();
        assert_eq!(run(engine, storage, IoOp::Read { offset, len: n }, Some(id)).unwrap(), n);
        let out = engine.buffer(id).to_vec();
        engine.release(id);
        out
    }

    fn file_storage(dir: &Path, size: usize, block_size: u32) -> (Arc<Storage>, std::path::PathBuf) {
        let path = dir.join("ns.img");
        std::fs::write(&path, vec![0u8; size]).unwrap();
        let storage = Storage::open(&StorageSpec::Path { path: path.clone(), block_size }).unwrap();
        (Arc::new(storage), path)
    }

    /// The full op set against one storage; `on_disk` reads the backing file behind the engine's back.
    fn exercise(storage: &Arc<Storage>, on_disk: Option<&Path>) {
        let mut engine = small_engine(32, 4, 16);
        let bs = u64::from(storage.block_size());
        assert_eq!(read_at(&mut engine, storage, 0, 8192), vec![0u8; 8192]);
        // Non-overlapping: 4 KiB at 0, 8 KiB at a block boundary that is not 4 KiB-aligned when bs = 512, 128 KiB, the
        // last 4 KiB.
        let writes = [(0u64, 4096usize), (16384 + bs, 8192), (bs * 64, 128 << 10), (storage.capacity() - 4096, 4096)];
        for (i, &(offset, len)) in writes.iter().enumerate() {
            write_at(&mut engine, storage, offset, &pattern(i as u64, len), i % 2 == 1);
        }
        for (i, &(offset, len)) in writes.iter().enumerate() {
            assert!(read_at(&mut engine, storage, offset, len) == pattern(i as u64, len), "write {i} read back");
        }
        assert_eq!(run(&mut engine, storage, IoOp::Flush, None).unwrap(), 0);
        if let Some(path) = on_disk {
            let file = std::fs::read(path).unwrap();
            let (offset, len) = writes[2];
            let offset = usize::try_from(offset).unwrap();
            assert!(file[offset..offset + len] == pattern(2, len)[..], "the data reached the file");
        }
        // Write Zeroes inside the 128 KiB pattern, Discard another part of it.
        let base = bs * 64;
        assert_eq!(run(&mut engine, storage, IoOp::WriteZeroes { offset: base + 4096, len: 8192 }, None).unwrap(), 0);
        assert!(storage.supports_discard());
        assert_eq!(run(&mut engine, storage, IoOp::Discard { offset: base + 65536, len: 65536 }, None).unwrap(), 0);
        let mut expected = pattern(2, 128 << 10);
        expected[4096..4096 + 8192].fill(0);
        expected[65536..].fill(0);
        assert!(read_at(&mut engine, storage, base, 128 << 10) == expected, "zeroed/discarded ranges read zeros");
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(engine.pool().available(), engine.pool().capacity());
    }

    #[test]
    fn memory_storage_round_trips() {
        let storage = Arc::new(Storage::open(&StorageSpec::Memory { size: 4 << 20, block_size: 512 }).unwrap());
        exercise(&storage, None);
    }

    #[test]
    fn file_storage_with_o_direct_round_trips() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, path) = file_storage(dir.path(), 4 << 20, 512);
        assert!(storage.is_direct(), "ext4 under /var/tmp takes O_DIRECT");
        assert!(storage.volatile_write_cache());
        exercise(&storage, Some(&path));
    }

    #[test]
    fn file_storage_4k_blocks_round_trips() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, path) = file_storage(dir.path(), 4 << 20, 4096);
        assert_eq!(storage.num_blocks(), 1024);
        exercise(&storage, Some(&path));
    }

    #[test]
    fn file_storage_buffered_round_trips() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("ns.img");
        std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
        let spec = StorageSpec::Path { path: path.clone(), block_size: 512 };
        let storage = Arc::new(Storage::open_buffered(&spec).unwrap());
        assert!(!storage.is_direct());
        exercise(&storage, Some(&path));
    }

    #[test]
    fn reactors_share_one_storage() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (file, _path) = file_storage(dir.path(), 1 << 20, 512);
        let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
        for storage in [file, memory] {
            let threads: Vec<_> = (0..2u64)
                .map(|t| {
                    let storage = Arc::clone(&storage);
                    std::thread::spawn(move || {
                        let mut engine = small_engine(16, 1, 8);
                        for i in 0..32u64 {
                            let offset = (i * 2 + t) * 8192;
                            write_at(&mut engine, &storage, offset, &pattern(offset, 8192), false);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let mut engine = small_engine(16, 1, 8);
            for block in 0..64u64 {
                let offset = block * 8192;
                assert!(read_at(&mut engine, &storage, offset, 8192) == pattern(offset, 8192), "block {block}");
            }
        }
    }

    #[test]
    fn engine_moves_to_its_reactor_thread() {
        fn send<T: Send>() {}
        send::<IoEngine>();
        let engine = small_engine(8, 1, 1);
        std::thread::spawn(move || drop(engine)).join().unwrap();
    }

    #[test]
    fn file_storage_on_tmpfs_round_trips() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (storage, path) = file_storage(dir.path(), 4 << 20, 512);
        // tmpfs may or may not take O_DIRECT depending on the kernel; data must round-trip either way.
        exercise(&storage, Some(&path));
    }

    #[test]
    fn null_storage_reads_zeros_and_discards_writes() {
        let storage = Arc::new(Storage::open(&StorageSpec::Null { size: 1 << 30, block_size: 512 }).unwrap());
        assert!(!storage.volatile_write_cache());
        let mut engine = small_engine(8, 1, 2);
        write_at(&mut engine, &storage, 4096, &[0xab; 4096], false);
        assert_eq!(read_at(&mut engine, &storage, 4096, 4096), vec![0u8; 4096]);
        assert_eq!(run(&mut engine, &storage, IoOp::Flush, None).unwrap(), 0);
        assert_eq!(run(&mut engine, &storage, IoOp::WriteZeroes { offset: 0, len: 1 << 20 }, None).unwrap(), 0);
        assert_eq!(run(&mut engine, &storage, IoOp::Discard { offset: 0, len: 1 << 20 }, None).unwrap(), 0);
    }

    #[test]
    fn many_ops_batched_in_one_submit() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
        let mut engine = small_engine(64, 1, 64);
        let ids: Vec<BufferId> = (0..64).map(|_| engine.alloc(4096).unwrap()).collect();
        for (i, &id) in ids.iter().enumerate() {
            engine.buffer_mut(id).copy_from_slice(&pattern(i as u64, 4096));
            let op = IoOp::Write { offset: i as u64 * 4096, len: 4096, fua: false };
            engine.push(i as u64, &storage, op, Some(id)).unwrap();
        }
        assert_eq!(engine.in_flight(), 64);
        assert_eq!(engine.submit().unwrap(), 64);
        let done = wait_for(&mut engine, 64);
        let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..64).collect::<Vec<_>>());
        assert!(done.iter().all(|c| matches!(c.result, Ok(4096))));
        // Read everything back in another single batch.
        for (i, &id) in ids.iter().enumerate() {
            engine.buffer_mut(id).fill(0);
            engine.push(i as u64, &storage, IoOp::Read { offset: i as u64 * 4096, len: 4096 }, Some(id)).unwrap();
        }
        assert_eq!(engine.submit().unwrap(), 64);
        assert_eq!(wait_for(&mut engine, 64).len(), 64);
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(engine.buffer(id), &pattern(i as u64, 4096)[..], "block {i}");
        }
    }

    #[test]
    fn full_ring_hands_the_op_back() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
        let mut engine = small_engine(4, 1, 8);
        let ids: Vec<BufferId> = (0..5).map(|_| engine.alloc(4096).unwrap()).collect();
        for (i, &id) in ids.iter().take(4).enumerate() {
            engine.push(i as u64, &storage, IoOp::Read { offset: 0, len: 4096 }, Some(id)).unwrap();
        }
        let op = IoOp::Read { offset: 4096, len: 4096 };
        assert_eq!(engine.push(4, &storage, op, Some(ids[4])), Err(op));
        // The refused op left its buffer usable.
        assert_eq!(engine.buffer(ids[4]).len(), 4096);
        assert_eq!(engine.submit().unwrap(), 4);
        engine.push(4, &storage, op, Some(ids[4])).unwrap();
        engine.submit().unwrap();
        assert_eq!(wait_for(&mut engine, 5).len(), 5);
    }

    #[test]
    fn release_while_in_flight_is_deferred_until_completion() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
        let mut engine = small_engine(8, 1, 0);
        let id = engine.alloc(65536).unwrap();
        assert_eq!(engine.alloc(4096), None, "pool of one buffer is exhausted");
        engine.push(1, &storage, IoOp::Read { offset: 0, len: 65536 }, Some(id)).unwrap();
        assert!(engine.buffer(id).is_empty(), "no access while the kernel owns it");
        assert!(engine.buffer_mut(id).is_empty());
        engine.release(id);
        assert_eq!(engine.alloc(4096), None, "still in flight");
        engine.submit().unwrap();
        let done = wait_for(&mut engine, 1);
        assert!(matches!(done[0].result, Ok(65536)));
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(engine.alloc(4096), Some(id), "freed once the completion was reaped");
    }

    #[test]
    fn invalid_ops_complete_with_errors_and_touch_nothing() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (file, _path) = file_storage(dir.path(), 1 << 20, 512);
        let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
        let mut engine = small_engine(8, 1, 4);
        let id = engine.alloc(4096).unwrap();
        for storage in [&file, &memory] {
            let cap = storage.capacity();
            let bad = [
                (IoOp::Read { offset: cap, len: 512 }, Some(id)),
                (IoOp::Write { offset: cap - 512, len: 1024, fua: false }, Some(id)),
                (IoOp::Read { offset: u64::MAX - 511, len: 1024 }, Some(id)),
                (IoOp::WriteZeroes { offset: 0, len: cap + 512 }, None),
                (IoOp::Discard { offset: u64::MAX - 511, len: 1024 }, None),
                (IoOp::Read { offset: 100, len: 512 }, Some(id)),
                (IoOp::Write { offset: 0, len: 100, fua: false }, Some(id)),
                (IoOp::Read { offset: 0, len: 8192 }, Some(id)),
                (IoOp::Read { offset: 0, len: 512 }, None),
                (IoOp::Write { offset: 0, len: 512, fua: false }, Some(BufferId::from_raw(999))),
            ];
            for (op, buf) in bad {
                let err = run(&mut engine, storage, op, buf).unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{op:?} on {}", storage.describe());
            }
        }
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(engine.buffer(id).len(), 4096, "buffer still owned by the caller");
    }

    #[test]
    fn second_op_on_a_busy_buffer_is_refused() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
        let mut engine = small_engine(8, 1, 4);
        let id = engine.alloc(4096).unwrap();
        engine.push(1, &storage, IoOp::Read { offset: 0, len: 4096 }, Some(id)).unwrap();
        engine.push(2, &storage, IoOp::Read { offset: 4096, len: 4096 }, Some(id)).unwrap();
        engine.submit().unwrap();
        let done = wait_for(&mut engine, 2);
        let second = done.iter().find(|c| c.tag == 2).unwrap();
        assert_eq!(second.result.as_ref().unwrap_err().raw_os_error(), Some(libc::EBUSY));
        assert!(matches!(done.iter().find(|c| c.tag == 1).unwrap().result, Ok(4096)));
    }

    #[test]
    fn memory_completions_wake_the_event_fd() {
        let storage = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
        let mut engine = small_engine(8, 1, 4);
        engine.push(3, &storage, IoOp::Flush, None).unwrap();
        assert_eq!(engine.submit().unwrap(), 0, "nothing for the kernel");
        assert!(ring::poll_readable(engine.event_fd(), 1000));
        let mut tags = Vec::new();
        engine.reap(|c| tags.push(c.tag));
        assert_eq!(tags, [3]);
    }

    /// The reactor never reads the eventfd (mio is edge-triggered): each later completion, from the engine itself
    /// (memory) or from the kernel's CQ (file), must still wake the poll although the counter stayed non-zero.
    #[test]
    fn unread_event_fd_wakes_an_edge_triggered_poll_for_every_completion() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("ns");
        std::fs::write(&path, vec![0u8; 65536]).unwrap();
        let file = Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap());
        let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
        let mut engine = small_engine(8, 1, 4);
        let mut poll = mio::Poll::new().unwrap();
        let fd = engine.event_fd();
        poll.registry().register(&mut mio::unix::SourceFd(&fd), mio::Token(1), mio::Interest::READABLE).unwrap();
        let mut events = mio::Events::with_capacity(4);
        for (tag, storage) in [(1, &memory), (2, &file), (3, &memory), (4, &file)] {
            let id = engine.alloc(4096).unwrap();
            engine.push(tag, storage, IoOp::Write { offset: 0, len: 4096, fua: false }, Some(id)).unwrap();
            engine.submit().unwrap();
            let mut done = Vec::new();
            // Generous bound: a hang, not a duration, is what fails here.
            let deadline = Instant::now() + Duration::from_secs(10);
            while done.is_empty() {
                assert!(Instant::now() < deadline, "completion {tag} never woke the poll");
                // Task work posting a CQE interrupts epoll_wait, as in the reactor.
                match poll.poll(&mut events, Some(Duration::from_secs(1))) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => other.unwrap(),
                }
                if events.iter().any(|e| e.token() == mio::Token(1)) {
                    engine.reap(|c| done.push(c.tag));
                }
            }
            assert_eq!(done, [tag]);
            engine.release(id);
        }
    }

    #[test]
    fn many_storages_share_fixed_slots_and_fall_back_to_plain_fds() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut engine = small_engine(8, 1, 4); // 4 fixed-file slots
        let open = |i: usize| {
            let path = dir.path().join(format!("ns{i}"));
            std::fs::write(&path, vec![0u8; 65536]).unwrap();
            Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap())
        };
        // Six live storages: four get slots, two use plain descriptors.
        let live: Vec<_> = (0..6).map(open).collect();
        for (i, s) in live.iter().enumerate() {
            write_at(&mut engine, s, 0, &pattern(i as u64, 4096), false);
        }
        for (i, s) in live.iter().enumerate() {
            assert_eq!(read_at(&mut engine, s, 0, 4096), pattern(i as u64, 4096));
        }
        // Dropping storages frees their slots for new ones.
        drop(live);
        for i in 6..12 {
            let s = open(i);
            write_at(&mut engine, &s, 512, &pattern(i as u64, 4096), true);
            assert_eq!(read_at(&mut engine, &s, 512, 4096), pattern(i as u64, 4096));
        }
        assert!(engine.free_file_slots.len() >= 3);
    }

    #[test]
    fn dropping_an_engine_with_ops_in_flight_waits_for_them() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (storage, _path) = file_storage(dir.path(), 4 << 20, 512);
        let mut engine = small_engine(32, 4, 0);
        for i in 0..4u64 {
            let id = engine.alloc(128 << 10).unwrap();
            engine.push(i, &storage, IoOp::Write { offset: i << 17, len: 128 << 10, fua: true }, Some(id)).unwrap();
            engine.release(id);
        }
        engine.submit().unwrap();
        drop(engine);
    }

    #[test]
    fn engine_config_is_validated() {
        let bad = [
            EngineConfig { ring_entries: 0, ..EngineConfig::default() },
            EngineConfig { buffer_count: 0, ..EngineConfig::default() },
            EngineConfig { buffer_size: 0, ..EngineConfig::default() },
            EngineConfig { small_buffer_size: 0, ..EngineConfig::default() },
            EngineConfig { buffer_size: 2 << 30, ..EngineConfig::default() },
        ];
        for config in bad {
            assert!(IoEngine::new(&config).is_err(), "{config:?}");
        }
        let engine = IoEngine::new(&EngineConfig::default()).unwrap();
        assert_eq!(engine.buffer_size(), 1 << 20);
        assert_eq!(engine.pool().capacity(), 32 + 512);
    }

    /// Needs root and a free loop device: `cargo test -- --ignored block_device`.
    #[test]
    #[ignore = "needs root and a loop device"]
    fn block_device_round_trips() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let image = dir.path().join("loop.img");
        std::fs::write(&image, vec![0u8; 8 << 20]).unwrap();
        let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(&image).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let result = std::panic::catch_unwind(|| {
            let spec = StorageSpec::Path { path: dev.clone().into(), block_size: 512 };
            let storage = Arc::new(Storage::open(&spec).unwrap());
            assert_eq!(storage.capacity(), 8 << 20);
            assert!(storage.is_direct());
            exercise(&storage, None);
            // Discard went through io_uring (this kernel is 6.12+), not the ioctl fallback.
            let mut engine = small_engine(8, 1, 2);
            write_at(&mut engine, &storage, 0, &[0x5a; 4096], false);
            assert_eq!(run(&mut engine, &storage, IoOp::Discard { offset: 0, len: 4096 }, None).unwrap(), 0);
            assert!(engine.async_block_discard);
            assert_eq!(read_at(&mut engine, &storage, 0, 4096), vec![0u8; 4096]);
        });
        let _ = std::process::Command::new("losetup").args(["-d", &dev]).status();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    /// Needs root and an NVMe drive whose namespace is blank and expendable (the test VM's emulated one):
    /// `VM_NVME=1G vm-run '<test binary> --ignored passthrough --nocapture'`. `NVMF_PASSTHROUGH_DEV` names the
    /// generic node (default `/dev/ng0n1`).
    #[test]
    #[ignore = "needs root and an expendable NVMe namespace"]
    fn passthrough_nvme_round_trips() {
        use nvmf_common::nvme::io::Read as ReadCommand;
        use nvmf_common::nvme::Status;

        let dev = std::env::var("NVMF_PASSTHROUGH_DEV").unwrap_or_else(|_| "/dev/ng0n1".to_owned());
        let storage =
            Arc::new(Storage::open(&StorageSpec::Path { path: dev.clone().into(), block_size: 512 }).unwrap());
        let Kind::Nvme(backing) = storage.kind() else { panic!("{dev} was not recognised as an NVMe generic node") };
        println!(
            "opened {}: block size {}, {} blocks, max transfer {} bytes, discard {}, write zeroes {}, VWC {}",
            storage.describe(),
            storage.block_size(),
            storage.num_blocks(),
            backing.max_transfer,
            storage.supports_discard(),
            storage.supports_write_zeroes(),
            storage.volatile_write_cache(),
        );
        assert!(storage.is_nvme_passthrough() && storage.is_direct());
        let max_transfer = backing.max_transfer;
        let nsid = backing.nsid;

        // The common op set (patterns read back, FUA, Flush, Write Zeroes, Discard) through 128 KiB buffers.
        let mut engine = small_engine(32, 4, 16);
        let bs = u64::from(storage.block_size());
        let writes = [(0u64, 4096usize), (16384 + bs, 8192), (bs * 64, 128 << 10), (storage.capacity() - 4096, 4096)];
        for (i, &(offset, len)) in writes.iter().enumerate() {
            write_at(&mut engine, &storage, offset, &pattern(i as u64 + 100, len), i % 2 == 1);
        }
        for (i, &(offset, len)) in writes.iter().enumerate() {
            assert!(read_at(&mut engine, &storage, offset, len) == pattern(i as u64 + 100, len), "write {i} read back");
        }
        assert_eq!(run(&mut engine, &storage, IoOp::Flush, None).unwrap(), 0);
        println!("patterns written at 4 places and read back; flush ok");
        let base = bs * 64;
        assert_eq!(run(&mut engine, &storage, IoOp::WriteZeroes { offset: base + 4096, len: 8192 }, None).unwrap(), 0);
        let mut expected = pattern(102, 128 << 10);
        expected[4096..4096 + 8192].fill(0);
        assert!(read_at(&mut engine, &storage, base, 128 << 10) == expected, "write zeroes");
        println!("write zeroes: 8 KiB inside the 128 KiB pattern read back as zeros, the rest intact");
        if storage.supports_discard() {
            assert_eq!(
                run(&mut engine, &storage, IoOp::Discard { offset: base + 65536, len: 65536 }, None).unwrap(),
                0
            );
            println!("dataset management (deallocate) of 64 KiB: ok");
        }

        // 1 MiB at 8 MiB: more than one command's worth (split), read back through the engine and the block device.
        let mut big = IoEngine::new(&EngineConfig {
            ring_entries: 32,
            buffer_size: 1 << 20,
            buffer_count: 2,
            small_buffer_size: 4096,
            small_buffer_count: 0,
            max_files: 4,
        })
        .unwrap();
        let offset = 8 << 20;
        let data = pattern(7, 1 << 20);
        write_at(&mut big, &storage, offset, &data, false);
        assert!(read_at(&mut big, &storage, offset, 1 << 20) == data, "1 MiB read back");
        assert_eq!(big.in_flight(), 0);
        println!("ring: {:?}", big.ring);
        println!("1 MiB write + read in {} commands each: ok", (1u32 << 20).div_ceil(max_transfer));
        let block_dev = dev.replacen("/dev/ng", "/dev/nvme", 1);
        let from_block_dev = std::fs::File::open(&block_dev).and_then(|f| {
            let mut bytes = vec![0u8; 1 << 20];
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut bytes, offset).map(|()| bytes)
        });
        if let Ok(bytes) = from_block_dev {
            assert!(bytes == data, "{block_dev} holds what passthrough wrote");
            println!("{block_dev} at 8 MiB holds the 1 MiB pattern");
        }

        // The engine refuses what lies beyond the capacity; the drive answers LBA Out of Range itself.
        let past = IoOp::Read { offset: storage.capacity(), len: 4096 };
        let id = engine.alloc(4096).unwrap();
        assert_eq!(run(&mut engine, &storage, past, Some(id)).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let read = ReadCommand { nsid, slba: storage.num_blocks(), nlb: 7, ..Default::default() };
        engine.push_nvme_command(9, &storage, &read.to_sqe(), Some((id, 4096))).unwrap();
        engine.submit().unwrap();
        let done = wait_for(&mut engine, 1);
        let err = done[0].result.as_ref().unwrap_err();
        let status = crate::backend::drive_status(err).expect("a drive status");
        println!("read at LBA {} (NSZE): drive status {status} ({err})", storage.num_blocks());
        assert!(status.same_code(Status::LBA_OUT_OF_RANGE), "{status}");
        engine.release(id);

        storage.flush_blocking().unwrap();
        println!("synchronous flush (shutdown path): ok");
    }
}
