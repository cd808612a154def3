//! The host side of NVMe/TCP: a pipelined queue pair ([`TcpQueue`]); its I/O-thread driver ([`QueueHandle`],
//! shared with NVMe/RDMA) is re-exported here from [`crate::queue_handle`].
//!
//! Threading: a [`TcpQueue`] is single-owner and poll-driven — whoever owns it calls `submit`, `poll` and
//! `next_completion` from one thread, and nothing in it locks. [`QueueHandle`] gives each queue its own I/O
//! thread (mio) that owns the socket; other threads submit through a bounded channel plus a waker and
//! receive each completion on a one-shot reply ([`Pending`]). Every PDU is built and parsed with
//! `nvmf_common::transport::tcp`.

pub use crate::queue_handle as handle;
pub mod queue;

pub use handle::{Pending, QueueHandle, Reply, Submitter};
pub use queue::{
    CommandState, Completion, DataDirection, QueueStats, Rejected, Request, TcpQueue, TcpQueueOptions, MAX_QUEUE_DEPTH,
};
