//! The NVMe/RDMA transport (NVMe over Fabrics RDMA Transport Specification) over RDMA CM and verbs.
//!
//! What runs where:
//! - [`listener`]: one `nvmf-rdma-cm` thread binds and listens on every RDMA listener with one RDMA CM event
//!   channel, validates each connect request's private data (rejecting with the NVMe/RDMA reject codes) and hands
//!   the new id over (to the reactors, round robin). It sleeps in `epoll_wait` and blocks nowhere else.
//! - `poll_group`: [`RdmaPollGroup`], per reactor, the transport's [`crate::transport::PollGroup`]: its RDMA CM
//!   event channel, its device contexts and its queue pairs.
//! - [`counters`]: [`RdmaCounters`], per reactor, read by the metrics.
//! - `device`: per reactor, per RDMA device (created at the first connection on that device): the protection
//!   domain (one per device per process), one completion queue with its completion channel (polled by the
//!   reactor, armed to sleep when idle) and the reactor's engine buffer pool registered as one memory region, so
//!   storage I/O and RDMA READ/WRITE use the same buffers (NIC → buffer → disk with no copy).
//! - `connection`: one queue pair ↔ one controller [`Queue`](crate::controller::Queue): receive buffers (SQE +
//!   in-capsule data) pre-posted and reposted in batches, keyed SGL data fetched by RDMA READ (at most the
//!   negotiated initiator depth outstanding, the rest in a FIFO), read data RDMA WRITTEN chained with the response
//!   SEND in one post, teardown that waits for every posted work request to flush.
//! - `routing`: how a work or storage completion finds its connection (slot and generation: a stale one finds
//!   nothing).
//! - `memory`: the transport's only `unsafe`: registering the pool region and posting work requests.
//!
//! Everything but the listener runs on the reactor thread that owns the connection; the data path takes no lock,
//! allocates nothing per I/O and never blocks.

pub mod config;
pub(crate) mod connection;
pub mod counters;
pub(crate) mod device;
pub mod listener;
pub(crate) mod memory;
mod poll_group;
pub(crate) mod routing;

pub use config::RdmaTransportConfig;
pub use counters::RdmaCounters;
pub use listener::{BoundRdmaListeners, RdmaAccepted, RdmaCmThread, RdmaListenerError, RdmaListenerSpec};
pub use poll_group::RdmaPollGroup;
