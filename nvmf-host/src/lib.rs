//! nvmf-host: the NVMe over Fabrics host library.
//!
//! Layers, each depending only on the ones above it:
//! - [`queue`] — transport-neutral: what a queue pair takes and gives back ([`queue::Request`],
//!   [`queue::Completion`]), how its owner drives it ([`queue::BareQueue`], [`queue::execute`]), command
//!   identifiers, and [`queue::handle`]: a queue on its own I/O thread, shared by any number of threads, with held
//!   I/O across reconnects, completion sinks and per-queue metrics.
//! - [`tcp`] — the NVMe/TCP queue pair (pipelined, poll-driven); `rdma` (feature `rdma`, on by default) — the
//!   NVMe/RDMA queue pair, same shape. Both implement [`queue::BareQueue`]; neither uses the other.
//! - [`controller`] — an association with one controller: bring-up (Connect, CC.EN/CSTS.RDY, Identify, Number of
//!   Queues, I/O queue Connects), supervision (keep-alive, reconnect, held I/O), events (AER, namespace rescan),
//!   blocking and async I/O with scatter-gather buffers, shutdown. [`identity`] — the host NQN and host ID
//!   (`/etc/nvme/hostnqn`, `/etc/nvme/hostid`, or generated); [`discovery`] — a discovery controller's Discovery
//!   Log Page; [`endpoint`] — where a controller is reached (`-t -a -s`).
//! - [`block`] — block requests as NVMe commands, shared by the exports: [`nbd`] — an NBD server exporting one
//!   namespace (unix socket or TCP) for qemu, fio and nbd-client; `ublk` (feature `ublk`, on by default) — one
//!   namespace as a `/dev/ublkbN` block device through ublk_drv. [`perf`] — an SPDK-perf-like load generator on
//!   bare pipelined queues, with a latency histogram.
//! - [`daemon`] — `nvmf-host run`: configured and CLI-requested controllers kept connected, their exports, the
//!   control socket the CLI talks to, sd_notify; [`metrics`] — its Prometheus collector.
//! - [`cli`] — the `nvmf-host` command line (`perf`, `discover`, `nbd`, `ublk`, `run`, `connect`, `connect-all`,
//!   `disconnect`, `disconnect-all`, `list`, `reload`); it calls the daemon, never the reverse.
//!
//! [`error`] — the error type, [`HostError`], used by all of them. See `docs/architecture.md` in the repository
//! for where this sits.
//!
//! Async I/O runs on any executor (the queues' I/O threads wake the awaiting task); while the controller
//! reconnects, awaited commands are held without blocking the executor's thread:
//!
//! ```no_run
//! use std::io::{IoSlice, IoSliceMut};
//! use nvmf_host::{ConnectOptions, Controller, HostError};
//!
//! async fn copy_header(ctrl: &Controller) -> Result<(), HostError> {
//!     let (mut header, mut body) = ([0u8; 512], vec![0u8; 3584]);
//!     // One 4 KiB read from LBA 0 of namespace 1, scattered over two buffers.
//!     ctrl.read_async(1, 0, &mut [IoSliceMut::new(&mut header), IoSliceMut::new(&mut body)]).await?;
//!     // Written back at LBA 8, gathered from the same two.
//!     ctrl.write_async(1, 8, &[IoSlice::new(&header), IoSlice::new(&body)]).await?;
//!     ctrl.flush_async(1).await
//! }
//!
//! let addr = "127.0.0.1:4420".parse().unwrap();
//! let ctrl = Controller::connect(addr, "nqn.2024-01.io.nvmf-rs:example", ConnectOptions::default())?;
//! # let _ = copy_header(&ctrl);
//! # Ok::<(), HostError>(())
//! ```
#![deny(missing_docs)]

pub mod block;
pub mod cli;
pub mod controller;
pub mod daemon;
pub mod discovery;
pub mod endpoint;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod multipath;
pub mod nbd;
pub mod perf;
pub mod queue;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tcp;
#[cfg(feature = "ublk")]
pub mod ublk;

pub use controller::{
    ConnectOptions, Controller, ControllerInfo, ControllerState, IoTraffic, NamespaceInfo, Transport,
};
pub use error::HostError;
pub use identity::HostIdentity;
