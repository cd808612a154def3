//! The host side of NVMe/RDMA: a pipelined, poll-driven queue pair ([`RdmaQueue`]) over RDMA CM and verbs
//! (`nvmf_common::transport::rdma::verbs`).
//!
//! Threading: an [`RdmaQueue`] is single-owner — whoever owns it calls `submit`, `poll` and `next_completion`
//! from one thread, and nothing in it locks. Its registered memory and every work request post live in
//! `memory` (the host's only `unsafe` for RDMA). [`crate::Controller`] drives RDMA queues through
//! [`crate::queue::handle::QueueHandle`] like TCP ones (`ConnectOptions::transport`).

mod memory;
pub mod queue;
mod slot;
pub mod teardown;

pub use queue::{RdmaCommandState, RdmaQueue, RdmaQueueOptions};
pub use teardown::DetachedTeardown;
