//! Storage backends and the per-reactor io_uring I/O engine.
//!
//! This module owns everything that touches namespace storage:
//! - [`Storage`]: one namespace's storage (null, memory, regular file, block device, or an NVMe namespace driven
//!   with NVMe commands through its generic character device `/dev/ngXnY`), opened once at start and shared by
//!   every reactor through an `Arc`. It knows its block size, capacity and capabilities. A passthrough drive's
//!   failing NVMe status comes back inside the completion's `io::Error` ([`DriveStatus`], [`drive_status`]).
//! - [`IoEngine`]: one per reactor thread. It owns one io_uring, a [`BufferPool`] of aligned data buffers registered
//!   with that ring as fixed buffers, and an in-flight table that owns the association between a command's tag and
//!   the buffer the kernel is using, so the kernel never holds memory we might free.
//!
//! Typical reactor turn: for each command needing storage, `alloc` a buffer (None = pool exhausted: hold the
//! command), fill it for a Write, `push(tag, &storage, op, Some(buf))` (`Err(op)` = ring full: `submit`, `reap`,
//! retry); once per turn `submit()` (one syscall) and `reap(|c| ...)`; route `c.tag` back to the queue; `release`
//! the buffer once its data has been sent. Sleep on [`IoEngine::event_fd`] with the sockets.
//!
//! RDMA: the pool is one contiguous region, which the RDMA transport registers with the NIC as one memory
//! region. [`BufferPool::region_len`] and [`BufferPool::buffer_offset`] are public; the base address
//! (`BufferPool::region_ptr`) is crate-internal so only the transport code in this crate can register the
//! region, and it must only let the NIC touch buffers it owns ([`IoEngine`]'s `start_transfer`/`end_transfer`
//! hand a buffer to the device and take it back).
//!
//! Threading: an `IoEngine` is used by the reactor thread that created it only (it is `!Sync`); `Storage` is
//! `Send + Sync`. Nothing here blocks on the data path except the one-time probes done by [`Storage::open`]: when
//! the kernel lacks io_uring block discard (before 6.12), `BLKDISCARD` runs on the engine's discard worker thread.
//!
//! Sockets: a transport may run its sockets on the same ring ([`IoEngine::recv_multishot`] into the engine's
//! provided receive buffers, [`IoEngine::send`]; `socket.rs` holds the memory they lend the kernel), and the
//! reactor may then wait in the ring ([`IoEngine::wait`]), so one `io_uring_enter` per turn serves storage and
//! network together.
//!
//! `unsafe` lives in four files: `pool.rs` (the mmap'd buffer region), `ring.rs` (io_uring pushes and
//! registrations, eventfd, ioctls/fallocate probes, NVMe passthrough ioctls and DSM range slots), `socket.rs`
//! (socket ops' SQEs and the memory they name) and `socket/provided.rs` (the receive buffers and their ring).
//! Everything else is safe code (`nvme.rs` builds the passthrough commands).

mod budget;
mod engine;
mod error;
mod memory;
mod nvme;
mod pool;
mod rbd;
mod ring;
mod socket;
mod storage;

pub use budget::{AllocRefusal, BudgetLimit, BufferBudget};
pub use engine::{
    DiscardCounters, EngineConfig, EngineFull, IoCompletion, IoEngine, IoOp, Payload, TurnClock, Work, WorkCounters,
    WorkPool,
};
pub use error::BackendError;
pub use nvme::{drive_status, DriveStatus};
pub use pool::{BufferId, BufferPool};
pub use rbd::{ClusterTimeouts, RbdError, RbdSpec};
pub use socket::{NetCompletion, NetKind, NetOpId, ReceivedChunk, SendPiece, SocketOps, MAX_SEND_PIECES};
pub use storage::{RbdStats, Storage, StorageSpec};

#[cfg(test)]
pub(crate) use ring::cached_and_unwritten_pages;
