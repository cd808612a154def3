//! The host side of NVMe/TCP: a pipelined queue pair ([`TcpQueue`]), poll-driven by its owner, with every PDU
//! built and parsed by `nvmf_common::transport::tcp`. What it takes and gives back is the transport-neutral
//! [`crate::queue`]'s; [`crate::queue::handle::QueueHandle`] puts it on its own I/O thread.
//!
//! Threading: a [`TcpQueue`] is single-owner and poll-driven — whoever owns it calls `submit`, `poll` and
//! `next_completion` from one thread, and nothing in it locks.

mod commands;
pub mod queue;

pub use commands::CommandState;
pub use queue::{TcpQueue, TcpQueueOptions};
