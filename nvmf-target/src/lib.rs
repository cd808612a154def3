//! nvmf-target: exports local storage as NVMe over Fabrics subsystems.
//!
//! Layers, top down (`docs/architecture.md` has the whole map): [`serve`] is the daemon's main thread (signals,
//! control requests, service notifications), [`daemon`] starts everything from a validated configuration, [`reload`]
//! changes it live and [`control`] serves the control socket; [`transport`] is the
//! boundary between the [`reactor`]s (one thread per core, each owning its io_uring engine, its buffers and one poll
//! group) and the transports: [`tcp`] (NVMe/TCP: its acceptor thread and its poll group) and, with the `rdma`
//! feature, `rdma` (NVMe/RDMA: its RDMA CM thread and its poll group); [`controller`] is the transport-agnostic
//! NVMe-oF controller (subsystems, namespaces, queues, admin and I/O commands); [`backend`] does the storage I/O;
//! [`counters`] holds what a queue counts per command (below the controller, which writes them), and [`metrics`]
//! reads them and the other modules' counters at scrape time; [`systemd_devices`] prints the service's device drop-in;
//! [`doctor`] says what a configuration needs of the machine, for `nvmf-target doctor`.
#![deny(missing_docs)]

pub mod backend;
pub mod control;
pub mod controller;
pub mod counters;
pub mod daemon;
pub mod doctor;
#[doc(hidden)]
pub mod fuzzing;
pub mod logging;
pub mod metrics;
pub mod notify;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod reactor;
pub mod reload;
pub mod serve;
pub mod signals;
pub mod systemd_devices;
pub mod tcp;
pub mod transport;
