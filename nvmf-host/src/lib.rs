//! nvmf-host: the NVMe over Fabrics host library.
//!
//! - [`tcp`] — the NVMe/TCP queue pair (pipelined, poll-driven).
//! - `rdma` (feature `rdma`, on by default) — the NVMe/RDMA queue pair, same shape as the TCP one.
//! - [`queue_handle`] — a queue of either transport on its own I/O thread, shared by any number of threads,
//!   with held I/O across reconnects and per-queue metrics.
//! - [`controller`] — an association with one controller — bring-up (Connect, CC.EN/CSTS.RDY, Identify,
//!   Number of Queues, I/O queue Connects), keep-alive, namespaces, blocking I/O wrappers, shutdown.
//! - [`identity`] — the host NQN and host ID (`/etc/nvme/hostnqn`, `/etc/nvme/hostid`, or generated).
//! - [`discovery`] — reading a discovery controller's Discovery Log Page.
//! - [`nbd`] — an NBD server exporting one namespace (unix socket or TCP) for qemu, fio and nbd-client.
//! - `ublk` (feature `ublk`, on by default) — one namespace as a `/dev/ublkbN` block device through ublk_drv.
//! - [`perf`] — an SPDK-perf-like load generator on bare pipelined queues, with a latency histogram.
//! - [`daemon`] — `nvmf-host run`: configured and CLI-requested controllers kept connected, their exports, the
//!   control socket the CLI talks to, sd_notify; [`metrics`] — its Prometheus collector.
//! - [`cli`] — the `nvmf-host` command line (`perf`, `discover`, `nbd`, `run`, `connect`, `connect-all`,
//!   `disconnect`, `disconnect-all`, `list`).
//! - [`error`] — the error type, [`HostError`].
//!
//! See `shared/design/ARCHITECTURE.md` for where this sits.
#![deny(missing_docs)]

pub mod cli;
pub mod controller;
pub mod daemon;
pub mod discovery;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod nbd;
pub mod perf;
pub mod queue_handle;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tcp;
#[cfg(feature = "ublk")]
pub mod ublk;

pub use controller::{ConnectOptions, Controller, ControllerInfo, ControllerState, NamespaceInfo, Transport};
pub use error::HostError;
pub use identity::HostIdentity;
