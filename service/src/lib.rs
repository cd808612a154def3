//! nvmf-service: the parts of a daemon that face its service manager, its operator and its scraper, shared by
//! `nvmf-target` and `nvmf-host` so each is written once.
//!
//! - [`notify`] — the `sd_notify` readiness protocol (READY, STATUS, STOPPING, WATCHDOG) and a status thread.
//! - [`signals`] — SIGTERM/SIGINT (stop) and SIGHUP (reload) as requests the main thread waits for.
//! - [`logging`] — `tracing` to stderr as text or JSON lines, from a `[logging]` section.
//! - [`metrics_http`] — the `/metrics` and `/healthz` HTTP endpoint over a `prometheus-client` registry.
//! - [`cpus`] — CPU lists and pinning a data-path thread to its CPU (once, when the thread starts).
//! - [`poll`] — when a data-path thread that found nothing to do polls again and when it sleeps (pure state).
//! - [`control`] — the control socket: JSON lines over a unix socket, server and client.
//! - [`unix_socket`] — owner-only unix sockets that never replace a path that is not a socket.
//! - [`error_line`] — a binary's error as one line for its user.
//! - [`rdma_sysfs`] — RDMA devices, ports, GIDs and counters as sysfs shows them (under a root folder).
//! - [`rnic_metrics`] — the RDMA NICs' counters, port state and MTU as Prometheus metrics, read at scrape time.
//! - [`doctor`] — checks of the machine against what a daemon's configuration needs (`nvmf-target doctor`).
//!
//! Everything here runs on control-plane threads, at a thread's start or in a one-shot command; nothing touches
//! a daemon's data path but [`poll`]'s arithmetic.
#![deny(missing_docs)]

pub mod control;
pub mod cpus;
pub mod doctor;
pub mod error_line;
pub mod logging;
pub mod metrics_http;
pub mod notify;
pub mod poll;
pub mod rdma_sysfs;
pub mod rnic_metrics;
pub mod signals;
pub mod unix_socket;
