//! Prometheus metrics of the target.
//!
//! What it owns: the per-queue counters every connected [`Queue`](crate::controller::Queue) writes as its
//! commands complete ([`QueueRecorder`]), the per-subsystem totals that keep the counts of ended queues
//! ([`SubsystemMetrics`], one per [`Subsystem`](crate::controller::Subsystem)), the scrape-time collector
//! ([`TargetCollector`]); the HTTP endpoint ([`MetricsServer`], `GET /metrics`, `GET /healthz`) is
//! `nvmf_service::metrics_http`, re-exported here.
//!
//! Exported families (Prometheus text 0.0.4 by default, OpenMetrics 1.0 when the scraper's `Accept` asks):
//! - `nvmf_target_build_info{version}` — 1.
//! - `nvmf_target_connections{transport}` — transport connections served now (gauge).
//! - `nvmf_target_controllers{subsystem}` — live controllers (gauge).
//! - `nvmf_target_commands_total{subsystem,namespace,opcode}` — commands completed, any status.
//! - `nvmf_target_bytes_total{subsystem,namespace,direction="read|write"}` — data of successful Reads/Writes.
//! - `nvmf_target_command_latency_seconds{subsystem,namespace,opcode}` — histogram, capsule arrival to response
//!   queued, buckets 10 µs .. 10 s (1-2.5-5 per decade); AERs are not observed (they wait for events).
//! - `nvmf_target_errors_total{subsystem,status}` — completions with an error status, by `Status::name()`.
//! - `nvmf_target_keep_alive_expiries_total{subsystem}` — associations ended by the Keep Alive Timer.
//! - `nvmf_target_blkdiscard_total`, `nvmf_target_blkdiscard_queue_full_total` — block discards run by the reactors'
//!   discard workers (kernels without io_uring discard), and the times one was handed back for want of room in a
//!   worker's queue (its command waits and retries; each retry counts).
//! - With RDMA listeners, the RDMA NICs' own counters ([`rnic`], read from sysfs at scrape time):
//!   `nvmf_target_rnic_counters_total{device,port,counter}` (the port's `counters/*`),
//!   `nvmf_target_rnic_hw_counters_total{device,port,counter}` (the driver's `hw_counters/*`: rxe's `sent_pkts`,
//!   `rcvd_rnr_err`, `retry_exceeded_err`, …), `nvmf_target_rnic_port_state_id{device,port}` (4: ACTIVE) and
//!   `nvmf_target_rnic_port_active_mtu_bytes{device,port}` (the RoCE MTU the netdev's MTU gives).
//!
//! `namespace="0"` holds commands that name no namespace of the subsystem: admin and fabrics commands, broadcast
//! or invalid NSIDs. Commands are counted from the queue's Connect on (a refused Connect belongs to no subsystem
//! and is not counted).
//!
//! Threads: a queue's counters are written by its reactor alone, with plain `Relaxed` load + store (no lock, no
//! allocation, no string lookup per command); the scrape runs on the metrics thread and only loads them. Never
//! blocks a reactor.

mod collector;
mod counters;
pub mod rnic;

#[cfg(test)]
mod tests;

pub use collector::{registry, ConnectionCounter, TargetCollector};
pub use counters::{
    latency_bucket, CommandKind, CommandSnapshot, Completed, KindSnapshot, QueueRecorder, SubsystemMetrics, Totals,
    ALL_KINDS, IO_KINDS, LATENCY_BOUNDS_NS, LATENCY_BUCKETS,
};
pub use rnic::{rnic_collector, RNIC_FAMILIES};
// The endpoint is shared with the host daemon.
pub use nvmf_service::metrics_http::{render, Format, MetricsError, MetricsServer, MAX_REQUEST, REQUEST_TIMEOUT};
