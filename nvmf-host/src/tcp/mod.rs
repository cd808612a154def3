//! The host side of NVMe/TCP: a pipelined queue pair ([`TcpQueue`]) and its I/O-thread driver
//! ([`QueueHandle`]).
//!
//! Threading: a [`TcpQueue`] is single-owner and poll-driven — whoever owns it calls `submit`, `poll` and
//! `next_completion` from one thread, and nothing in it locks. [`QueueHandle`] gives each queue its own I/O
//! thread (mio) that owns the socket; other threads submit through a bounded channel plus a waker and
//! receive each completion on a one-shot reply ([`Pending`]). Every PDU is built and parsed with
//! `nvmf_common::transport::tcp`.

pub mod handle;
pub mod queue;

pub use handle::{Pending, QueueHandle, Reply, Submitter};
pub use queue::{
    CommandState, Completion, DataDirection, QueueStats, Rejected, Request, TcpQueue, TcpQueueOptions, MAX_QUEUE_DEPTH,
};
