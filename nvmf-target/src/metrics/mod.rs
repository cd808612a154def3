//! Prometheus metrics of the target.
//!
//! What it owns: the scrape-time collector ([`TargetCollector`]); the HTTP endpoint ([`MetricsServer`], `GET
//! /metrics`, `GET /healthz`) is `nvmf_service::metrics_http`, re-exported here. The counters it reads live below
//! it: a queue's in [`crate::counters`] (summed per subsystem), the others beside what they count.
//!
//! Layering: this module is the top of the metrics and nothing below the daemon imports it; it reads the
//! controller, the transports, the reactors and the backend, never the reverse, so the family list can grow here
//! without a module cycle. [`TargetCollector`] only orders the families; each area's encoding is a file of its own:
//! `transport.rs` (connections, accept refusals, stalls, NVMe/TCP sockets), `controller.rs` (Connect refusals,
//! authentication, KATO minimum, reservations), `reactors.rs` (buffers, waits, budgets), `storage.rs` (block
//! discards, RBD images), `subsystems.rs` (controllers, commands, bytes, latencies, errors, keep-alive expiries),
//! `rdma.rs`, and [`rnic`] (the RDMA NICs' sysfs counters); `encode.rs` holds what they share.
//!
//! Exported families (Prometheus text 0.0.4 by default, OpenMetrics 1.0 when the scraper's `Accept` asks; a test
//! checks this list against a scrape):
//! - `nvmf_target_build_info{version}` — 1.
//! - `nvmf_target_connections{transport}` — transport connections served now (gauge).
//! - `nvmf_target_controllers{subsystem}` — live controllers (gauge).
//! - `nvmf_target_commands_total{subsystem,namespace,opcode}` — commands completed, any status.
//! - `nvmf_target_bytes_total{subsystem,namespace,direction="read|write"}` — data of successful Reads/Writes.
//! - `nvmf_target_command_latency_seconds{subsystem,namespace,opcode}` — histogram, capsule arrival to response
//!   queued, buckets 10 µs .. 10 s (1-2.5-5 per decade); AERs are not observed (they wait for events).
//! - `nvmf_target_errors_total{subsystem,status}` — completions with an error status, by `Status::name()`.
//! - `nvmf_target_keep_alive_expiries_total{subsystem}` — associations ended by the Keep Alive Timer.
//! - `nvmf_target_keep_alive_minimum_total{outcome="raised|refused"}` — host KATOs below `[target]
//!   keep_alive_min_ms`.
//! - `nvmf_target_timeouts_total{state="connect|transfer"}` — queue pairs ended because their peer stalled.
//! - `nvmf_target_rejected_connections_total{reason="listener_limit|address_limit"}` — connections refused at accept.
//! - `nvmf_target_tls_connections_total{result}` — what the TLS gate did to connections of `tls` listeners.
//! - `nvmf_target_refused_connects_total{reason="controllers_per_host|discovery_kato|host_id"}` — Connects refused
//!   by a limit or a host ID binding.
//! - `nvmf_target_buffer_budget_waits_total{budget="queue|anonymous"}` — commands that waited for a buffer a budget
//!   refused.
//! - `nvmf_target_tcp_send_backlog_pauses_total` — NVMe/TCP connections that stopped reading past
//!   `tcp_send_backlog`.
//! - `nvmf_target_tcp_connections_moved_total` — NVMe/TCP connections moved to the reactor of their CPU at Connect.
//! - `nvmf_target_tcp_socket_io{reactor,path}` — 1 for how each reactor drives its sockets (`io_uring`, `epoll`).
//! - `nvmf_target_tcp_zero_copy_sends_total{reactor}` — sends that went zero copy (`send_zero_copy_bytes`).
//! - `nvmf_target_data_buffers{reactor,state="free|total"}` — each reactor's buffer pool at its last turn.
//! - `nvmf_target_reactor_waits_total{reactor,wait="poll|sleep"}` — how each reactor waited after a turn.
//! - `nvmf_target_auth_total{result,hash,dhgroup}` — DH-HMAC-CHAP transactions.
//! - `nvmf_target_auth_dh_steps_total`, `nvmf_target_auth_queue_full_total`, `nvmf_target_auth_rate_limited_total` —
//!   DH steps run by the authentication pool, the times one waited for room in its queue (each retry counts), and
//!   AUTH_Negotiates refused by `[target] auth_attempts_per_second`.
//! - `nvmf_target_reservation_conflicts_total` — commands failed with Reservation Conflict.
//! - `nvmf_target_reservation_registrant_limit_total` — Registers refused by `[target] max_registrants`.
//! - `nvmf_target_reservation_writes_total`, `nvmf_target_reservation_write_queue_full_total` — reservation state
//!   files written off the reactors (PTPL), and commands that waited for room in that queue.
//! - With NVMe/RDMA: `nvmf_target_rdma_work_requests_total{opcode}`, `nvmf_target_rdma_completions_total{opcode}`,
//!   `nvmf_target_rdma_completion_errors_total{status}`, `nvmf_target_rdma_stale_completions_total`,
//!   `nvmf_target_rdma_queue_pairs`.
//! - With RBD namespaces, by subsystem, namespace and image: `nvmf_target_rbd_ops_in_flight`,
//!   `nvmf_target_rbd_errors_total`, `nvmf_target_rbd_reopened_total` (new Ceph clients after a fence or a timeout).
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
mod controller;
mod encode;
#[cfg(feature = "rdma")]
mod rdma;
mod reactors;
pub mod rnic;
mod storage;
mod subsystems;
mod transport;

#[cfg(test)]
mod tests;

pub use collector::{registry, ConnectionCounter, TargetCollector};
pub use rnic::{rnic_collector, RNIC_FAMILIES};
// The endpoint is shared with the host daemon.
pub use nvmf_service::metrics_http::{render, Format, MetricsError, MetricsServer, MAX_REQUEST, REQUEST_TIMEOUT};
