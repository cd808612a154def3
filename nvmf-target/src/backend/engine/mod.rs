//! The per-reactor I/O engine: one io_uring, one buffer pool, one in-flight table, and the reactor's [`TurnClock`].
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
//! falls back to the synchronous `BLKDISCARD` ioctl, run by the engine's discard worker thread so that it never
//! blocks the reactor (`discard`).
//!
//! NVMe passthrough storages (`/dev/ngXnY`) get NVMe commands (`NVME_URING_CMD_IO`) on the same ring, whose
//! entries are big for that (see `ring.rs`). An op the drive must receive as several commands (a Read/Write above
//! the transfer limit, a Write Zeroes above 65536 LBAs) is pushed whole or not at all and completes once, when
//! its last command has: with the op's byte count, or the first failure (a drive status is a [`DriveStatus`]
//! inside the `io::Error`).
//!
//! This module holds the engine's types, its buffer calls, [`IoEngine::push`] (which does null and memory ops
//! at once and hands the others on), `submit` and `reap`; the children hold the rest:
//! - `in_flight`: the in-flight table, the NVMe command groups, and what a CQE must report.
//! - `file_ops`: ops on regular files and block devices.
//! - `discard`: the `BLKDISCARD` fallback's worker thread and its bounded queue.
//! - `offload`: CPU-bound work (DH-HMAC-CHAP's exponentiations) on a pool's threads, completing like an op.
//! - `passthrough`: ops on NVMe passthrough storages.
//! - `fixed_files`: the ring's fixed-file slots.
//! - `clock`: the reactor's [`TurnClock`], which the queues go by.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use clock::TurnClock;
pub use compare_and_write::EngineFull;
pub use discard::DiscardCounters;
pub use offload::{Payload, Work, WorkCounters, WorkPool};

use super::nvme;
use super::pool::{BufferPool, StartIoError};
use super::ring::Ring;
use super::socket::{NetCompletion, NetOpId, NetOps, ReceivedChunk, SendPiece, SocketOps, NET_USER_DATA};
use super::storage::Kind;
#[cfg(doc)]
use super::DriveStatus;
use super::{AllocRefusal, BackendError, BufferBudget, BufferId, Storage};
use discard::DiscardWorker;
use fixed_files::{FileSlot, IdHasher};
use in_flight::{cqe_result, Expect, Groups, InFlightTable};
use offload::Offloads;

mod clock;
mod compare_and_write;
mod discard;
mod file_ops;
mod fixed_files;
mod in_flight;
mod offload;
mod passthrough;
#[cfg(feature = "rbd")]
mod rbd_ops;

#[cfg(test)]
mod tests;

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
    /// Block discards the `BLKDISCARD` fallback's worker may have queued (kernels without io_uring discard); a
    /// discard beyond them waits like one on a full ring. Default 64.
    pub discard_queue_depth: usize,
    /// Run the kernel's completion work only when the reactor enters the ring (`IORING_SETUP_DEFER_TASKRUN`,
    /// Linux 6.1; without it the ring is set up as usual): a socket completion then costs no interrupt of a reactor
    /// that is polling. For reactors whose sockets are on the ring (`[reactors] socket_io = "io_uring"`). Default
    /// false.
    pub defer_task_work: bool,
    /// A socket send carrying at least this many bytes of pool data goes zero copy when its caller allows it and
    /// the kernel can (`IORING_OP_SENDMSG_ZC`); 0 never (`[reactors] send_zero_copy_bytes`). Default 32 KiB.
    pub send_zero_copy_bytes: u32,
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
            discard_queue_depth: 64,
            defer_task_work: false,
            send_zero_copy_bytes: 32 << 10,
        }
    }
}

impl EngineConfig {
    /// The pool's size classes: (buffer size, count), large then small.
    fn buffer_classes(&self) -> [(usize, usize); 2] {
        [(self.buffer_size, self.buffer_count), (self.small_buffer_size, self.small_buffer_count)]
    }

    /// The bytes of data buffers one engine's pool maps and registers (with io_uring, and with each RDMA device):
    /// memory the reactor pins (`None`: too large for a pool).
    pub fn pool_bytes(&self) -> Option<usize> {
        super::pool::region_bytes(&self.buffer_classes())
    }
}

/// Per-reactor I/O engine: one io_uring, a pool of aligned data buffers it owns, an in-flight table.
#[derive(Debug)]
pub struct IoEngine {
    // Field order matters: the ring (which has the pool registered) is dropped before the socket ops' memory and
    // the pool.
    ring: Ring,
    net: NetOps,
    /// The reactor's epoll descriptor polled through the ring, when it waits there.
    epoll: EpollPoll,
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
    /// Runs the `BLKDISCARD` fallback once `async_block_discard` is off (started at the first one).
    discard: Option<DiscardWorker>,
    discard_queue_depth: usize,
    discard_counters: Arc<DiscardCounters>,
    /// Where offloaded work completes (set up at the first op).
    offloads: Option<Offloads>,
    /// Ops on RBD images (set up at the first).
    #[cfg(feature = "rbd")]
    rbd: Option<rbd_ops::RbdOps>,
    /// The reactor's turn and completion times (set by whoever drives the queues).
    clock: TurnClock,
}

/// User data of the multishot poll of the reactor's epoll descriptor.
const EPOLL_USER_DATA: u64 = NET_USER_DATA | (1 << 61);

/// The poll of the reactor's epoll descriptor through the ring ([`IoEngine::wait_in_ring`]).
#[derive(Debug, Default)]
struct EpollPoll {
    fd: Option<RawFd>,
    /// The multishot poll is in the kernel.
    armed: bool,
    /// It fired since [`IoEngine::take_epoll_ready`] last looked.
    ready: bool,
}

impl EpollPoll {
    fn completed(&mut self, res: i32, flags: u32) {
        // An error (or the poll's end) also makes the reactor look at epoll itself, and re-arm.
        self.ready = true;
        if res < 0 || !io_uring::cqueue::more(flags) {
            self.armed = false;
        }
    }
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
        Self::with_discard_counters(config, Arc::default())
    }

    /// [`IoEngine::new`], counting its discard worker's ioctls and full queue in `counters` (shared by engines).
    pub fn with_discard_counters(config: &EngineConfig, counters: Arc<DiscardCounters>) -> Result<Self, BackendError> {
        if config.ring_entries == 0 {
            return Err(BackendError::InvalidEngineConfig("ring_entries must be > 0"));
        }
        if config.buffer_size == 0 || config.buffer_count == 0 {
            return Err(BackendError::InvalidEngineConfig("buffer_size and buffer_count must be > 0"));
        }
        if config.small_buffer_count > 0 && config.small_buffer_size == 0 {
            return Err(BackendError::InvalidEngineConfig("small_buffer_size must be > 0"));
        }
        if config.discard_queue_depth == 0 {
            return Err(BackendError::InvalidEngineConfig("discard_queue_depth must be > 0"));
        }
        let pool = BufferPool::new(&config.buffer_classes())?;
        let ring = Ring::new(config.ring_entries, &pool, config.max_files, config.defer_task_work)?;
        let in_flight = InFlightTable::new(ring.cq_entries());
        // Every group has at least two commands in flight.
        let groups = Groups::new(ring.cq_entries() / 2 + 1);
        let free_file_slots = (0..ring.file_slots()).rev().collect();
        tracing::debug!(?ring, buffers = pool.capacity(), huge_pages = pool.huge_pages(), "I/O engine created");
        Ok(IoEngine {
            ring,
            net: NetOps::new(config.send_zero_copy_bytes),
            epoll: EpollPoll::default(),
            pool,
            in_flight,
            groups,
            ready: VecDeque::with_capacity(1024),
            ready_signalled: false,
            files: HashMap::default(),
            free_file_slots,
            async_block_discard: true,
            discard: None,
            discard_queue_depth: config.discard_queue_depth,
            discard_counters: counters,
            offloads: None,
            #[cfg(feature = "rbd")]
            rbd: None,
            clock: TurnClock::new(Instant::now()),
        })
    }

    /// The clock the queues go by (its turn starts at the engine's creation until the first
    /// [`TurnClock::start_turn`]).
    pub fn clock(&self) -> &TurnClock {
        &self.clock
    }

    /// The clock, to start a turn or a completion batch, or to read a batch's completion time.
    pub fn clock_mut(&mut self) -> &mut TurnClock {
        &mut self.clock
    }

    /// Allocates a buffer of `len` bytes. `None` when the pool is exhausted (the caller waits for a release) or
    /// `len` exceeds [`IoEngine::buffer_size`].
    pub fn alloc(&mut self, len: usize) -> Option<BufferId> {
        self.pool.alloc(len)
    }

    /// Allocates a buffer of `len` bytes within `budget` (see [`BufferBudget`]); release it with
    /// [`IoEngine::release_within`].
    pub fn alloc_within(&mut self, len: usize, budget: &mut BufferBudget) -> Result<BufferId, AllocRefusal> {
        self.pool.alloc_within(len, budget)
    }

    /// Frees a buffer [`IoEngine::alloc_within`] gave `budget` (deferred as in [`IoEngine::release`]).
    pub fn release_within(&mut self, id: BufferId, budget: &mut BufferBudget) {
        self.pool.release_within(id, budget);
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
    #[cfg_attr(not(feature = "rdma"), expect(dead_code, reason = "only the RDMA transport calls it"))]
    pub(crate) fn start_transfer(&mut self, id: BufferId, len: u32) -> Option<usize> {
        self.pool.start_io(id, len).ok()?;
        self.pool.buffer_offset(id)
    }

    /// The device is done with `id` (see [`IoEngine::start_transfer`]).
    #[cfg_attr(not(feature = "rdma"), expect(dead_code, reason = "only the RDMA transport calls it"))]
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
            #[cfg(feature = "rbd")]
            Kind::Rbd(image) => return self.push_rbd(tag, storage, image, op, buf),
        }
        Ok(())
    }

    /// The first `len` bytes of an owned buffer, for ops done synchronously.
    fn sync_buffer_mut(&mut self, id: BufferId, len: u32) -> Result<&mut [u8], io::Error> {
        let bytes = self.pool.get_mut(id);
        bytes.get_mut(..len as usize).ok_or_else(|| refused("storage op longer than its buffer (or buffer busy)"))
    }

    fn complete_now(&mut self, tag: u64, result: Result<u32, io::Error>) {
        self.ready.push_back(IoCompletion { tag, result });
    }

    /// Hands every pushed op to the kernel with one `io_uring_enter` (none when nothing is queued) and returns how many
    /// SQEs were submitted. If completions are ready without the kernel (null/memory), the eventfd is made readable so
    /// a reactor about to sleep still reaps them (one waiting in the ring does not block then: [`IoEngine::wait`]).
    pub fn submit(&mut self) -> io::Result<usize> {
        // A reactor waiting in the ring looks at `ready` before it waits instead.
        if !self.ready.is_empty() && !self.ready_signalled && self.epoll.fd.is_none() {
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
        if let Some(worker) = &mut self.discard {
            worker.drain(&mut f);
        }
        if let Some(offloads) = &mut self.offloads {
            offloads.drain(&mut f);
        }
        #[cfg(feature = "rbd")]
        if let Some(rbd) = &mut self.rbd {
            rbd.drain(&mut self.pool, &mut f);
        }
        let (pool, in_flight, groups, net) = (&mut self.pool, &mut self.in_flight, &mut self.groups, &mut self.net);
        let mut async_block_discard = self.async_block_discard;
        // Discards the kernel refused (no io_uring block discard), for the worker; allocates only then.
        let mut to_worker = Vec::new();
        let epoll = &mut self.epoll;
        self.ring.drain_completions(|user_data, res, extra, flags| {
            if user_data == EPOLL_USER_DATA {
                epoll.completed(res, flags);
                return;
            }
            if user_data & NET_USER_DATA != 0 {
                net.complete(pool, user_data, res, flags);
                return;
            }
            let Some(entry) = in_flight.remove(user_data) else {
                tracing::error!(user_data, "completion for no op in flight");
                return;
            };
            if let Some(id) = entry.buffer {
                pool.finish_io(id);
            }
            let result = match (entry.expect, &entry.storage) {
                (Expect::BlockDiscard { offset, len }, Some(storage)) if res == -libc::EOPNOTSUPP => {
                    // This kernel has no io_uring block discard: the worker's BLKDISCARD from now on.
                    if async_block_discard {
                        tracing::info!("io_uring block discard unsupported; using BLKDISCARD on a worker thread");
                        async_block_discard = false;
                    }
                    to_worker.push((entry.tag, Arc::clone(storage), offset, len));
                    return;
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
        if !to_worker.is_empty() {
            self.move_discards_to_worker(to_worker, &mut f);
        }
    }

    /// Set up socket I/O on the ring ([`IoEngine::recv_multishot`], [`IoEngine::send`]): `Supported`, or what
    /// this kernel lacks. Registers the receive buffers the first time.
    pub fn start_socket_io(&mut self) -> SocketOps {
        self.net.start(&self.ring)
    }

    /// Arm a multishot receive on socket `fd` (after [`IoEngine::start_socket_io`]): each chunk that arrives
    /// completes it again ([`NetCompletion`] with tag `tag`, the bytes in a receive buffer) until a completion comes
    /// without `more`. Nothing reaches the kernel until [`IoEngine::submit`]. `Err` of kind `WouldBlock` when the
    /// ring is full.
    pub fn recv_multishot(&mut self, tag: u64, fd: RawFd) -> io::Result<NetOpId> {
        self.net.recv_multishot(&mut self.ring, tag, fd)
    }

    /// Ask the kernel to end socket op `id`; its last completion still comes. `Err` of kind `WouldBlock` when the
    /// ring is full.
    pub fn cancel_net_op(&mut self, id: NetOpId) -> io::Result<()> {
        self.net.cancel(&mut self.ring, id)
    }

    /// Give a receive's buffer ([`NetCompletion::received`]) back to the kernel once its bytes were taken.
    pub fn recycle_received(&mut self, chunk: ReceivedChunk) {
        self.net.recycle(chunk);
    }

    /// Wait in the ring instead of on an eventfd: the ring stops signalling its eventfd, and `epoll_fd` (the
    /// reactor's epoll, where the eventfd stays for completions posted from outside the ring) is polled through
    /// the ring, so one `io_uring_enter` ([`IoEngine::wait`]) submits and waits for completions, sockets and epoll
    /// events together. `Err` when the kernel cannot bound such a wait (Linux 5.11) or refused.
    pub fn wait_in_ring(&mut self, epoll_fd: RawFd) -> io::Result<()> {
        if !self.ring.can_wait_with_timeout() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring waits without a timeout (IORING_FEAT_EXT_ARG)",
            ));
        }
        self.ring.stop_signalling_event_fd()?;
        self.epoll = EpollPoll { fd: Some(epoll_fd), armed: false, ready: true };
        Ok(())
    }

    /// Whether the engine waits in the ring ([`IoEngine::wait_in_ring`]).
    pub fn waits_in_ring(&self) -> bool {
        self.epoll.fd.is_some()
    }

    /// Submit what is queued and wait (after [`IoEngine::wait_in_ring`]) until a completion or an epoll event
    /// arrives or `timeout` passed (`None`: no bound); does not wait when completions are ready already, or when
    /// the epoll poll fired since [`IoEngine::take_epoll_ready`] last looked (a reap between that look and this
    /// wait took its completion: no other will announce those events).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if let (Some(fd), false) = (self.epoll.fd, self.epoll.armed) {
            self.epoll.armed = self.ring.poll_multishot(fd, EPOLL_USER_DATA).is_ok();
        }
        if !self.ready.is_empty() || self.epoll.ready || timeout == Some(Duration::ZERO) {
            return self.ring.submit().map(drop);
        }
        self.ring.submit_and_wait(timeout)
    }

    /// Whether the epoll descriptor polled through the ring has had events since the last call (true at first).
    pub fn take_epoll_ready(&mut self) -> bool {
        std::mem::take(&mut self.epoll.ready)
    }

    /// Have the next [`IoEngine::take_epoll_ready`] say yes (epoll may hold events no poll completion announces).
    pub fn mark_epoll_ready(&mut self) {
        self.epoll.ready = true;
    }

    /// Whether the kernel's io_uring sends zero copy (known once [`IoEngine::start_socket_io`] succeeded).
    pub fn zero_copy_supported(&self) -> bool {
        self.net.zero_copy_supported()
    }

    /// Sends that went zero copy since the start ([`IoEngine::send`]).
    pub fn zero_copy_sends(&self) -> u64 {
        self.net.zero_copy_sends()
    }

    /// The socket ops, for their tests.
    #[cfg(test)]
    pub(crate) fn net_ops(&self) -> &NetOps {
        &self.net
    }

    /// Whether [`IoEngine::start_socket_io`] succeeded: socket ops run on the ring.
    pub fn socket_io_started(&self) -> bool {
        self.net.is_started()
    }

    /// Queue one send of `pieces` (at most [`MAX_SEND_PIECES`](super::MAX_SEND_PIECES)) on socket `fd`: bytes are
    /// copied, data pieces are sent from their pool buffers, which stay in flight (a release is deferred) until
    /// its [`NetCompletion`] (tag `tag`). `Err` of kind `WouldBlock` when the ring is full; another error for a
    /// piece outside its buffer or a buffer already in flight.
    pub fn send<'a>(
        &mut self,
        tag: u64,
        fd: RawFd,
        pieces: impl IntoIterator<Item = SendPiece<'a>>,
        zero_copy: bool,
    ) -> io::Result<()> {
        self.net.send(&mut self.ring, &mut self.pool, tag, fd, pieces, zero_copy)
    }

    /// Move the socket ops finished by [`IoEngine::reap`] into `into`.
    pub fn take_net_completions(&mut self, into: &mut Vec<NetCompletion>) {
        self.net.take_completions(into);
    }

    /// Ops pushed whose completion has not been delivered by `reap` yet.
    pub fn in_flight(&self) -> usize {
        // An op split into several NVMe commands counts once.
        let at_worker = self.discard.as_ref().map_or(0, DiscardWorker::outstanding)
            + self.offloads.as_ref().map_or(0, Offloads::outstanding);
        #[cfg(feature = "rbd")]
        let at_worker = at_worker + self.rbd.as_ref().map_or(0, rbd_ops::RbdOps::in_flight);
        self.in_flight.len().saturating_sub(self.groups.parts) + self.groups.len() + self.ready.len() + at_worker
    }

    /// How soon the reactor must reap even without an event: while RBD ops of a fenced client may never end,
    /// `reap` looks for them (they end no other way; see `rbd_ops`). `None`: only events matter.
    pub fn turn_within(&self) -> Option<Duration> {
        #[cfg(feature = "rbd")]
        if self.rbd.as_ref().is_some_and(rbd_ops::RbdOps::watches_fence) {
            return Some(Duration::from_millis(100));
        }
        None
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

impl IoEngine {
    /// At drop: wait for the ops in librbd (each ends within the cluster's OSD timeout, 30 s); if some never end
    /// (or ran on a fenced client's handle), leak the pool and the completion slots they still name rather than
    /// free memory librbd may write.
    #[cfg(feature = "rbd")]
    fn wait_for_rbd(&mut self) {
        let Some(mut rbd) = self.rbd.take() else { return };
        if rbd.wait_all(&mut self.pool, Duration::from_secs(35)) {
            return;
        }
        tracing::error!(in_flight = rbd.in_flight(), "RBD ops still in librbd at exit: leaking their buffers");
        rbd.leak();
        self.pool.leak();
    }
}

impl Drop for IoEngine {
    /// Waits for every op in the kernel, so no kernel worker touches the pool after it is unmapped.
    fn drop(&mut self) {
        #[cfg(feature = "rbd")]
        self.wait_for_rbd();
        // Socket ops wait for their peers: cancel them; their CQEs come back like any other.
        self.net.cancel_all(&mut self.ring);
        while self.in_flight.len() > 0 || self.net.in_flight() > self.net.awaiting_notification() {
            match self.ring.submit_and_wait_one() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(error = %e, in_flight = self.in_flight.len(), "cannot drain the ring at drop");
                    return;
                }
            }
            let (pool, in_flight, net) = (&mut self.pool, &mut self.in_flight, &mut self.net);
            self.ring.drain_completions(|user_data, res, _, flags| {
                if user_data == EPOLL_USER_DATA {
                    return;
                }
                if user_data & NET_USER_DATA != 0 {
                    net.complete(pool, user_data, res, flags);
                    return;
                }
                if let Some(id) = in_flight.remove(user_data).and_then(|e| e.buffer) {
                    pool.finish_io(id);
                }
            });
        }
    }
}
