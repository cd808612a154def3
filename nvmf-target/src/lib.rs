//! nvmf-target: exports local storage as NVMe over Fabrics subsystems.
//!
//! Layers, top down: [`daemon`] starts everything from a validated configuration; the [`listener`] accepts TCP
//! connections (and, with the `rdma` feature, the RDMA CM thread of `rdma` validates NVMe/RDMA connect requests)
//! and hands them to [`reactor`]s (one thread per core, each owning its connections, its io_uring and
//! its buffers); [`tcp`] moves capsules and data over NVMe/TCP; [`controller`] is the transport-agnostic NVMe-oF
//! controller (subsystems, namespaces, queues, admin and I/O commands); [`backend`] does the storage I/O.
#![deny(missing_docs)]

pub mod backend;
pub mod control;
pub mod controller;
pub mod daemon;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod notify;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod reactor;
pub mod reload;
pub mod signals;
pub mod tcp;
