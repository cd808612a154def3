//! Prometheus metrics of the host daemon: [`HostCollector`] reads the controller table at scrape time (through
//! a sampling function the daemon gives it) and encodes these families:
//!
//! - `nvmf_host_build_info{version}` — 1.
//! - `nvmf_host_controller_state{controller,subnqn,traddr,state}` — 1 for the current state, 0 for the others
//!   (`connecting`, `live`, `reconnecting`, `deleting`, `failed`).
//! - `nvmf_host_controller_reconnects_total{controller,subnqn}` — associations re-established after a loss.
//! - `nvmf_host_exports{controller}` — NBD exports running.
//! - `nvmf_host_path_ana_state{controller,nsid,state}` — for each export the controller is a path of, 1 for the
//!   namespace's ANA state through it, 0 for the others ([`ANA_STATES`]).
//! - `nvmf_host_nbd_limits_total{export,limit}` — times an NBD export's limits fired: `clients` (a client refused
//!   over the export's client limit), `handshake_timeout` and `stop_write_timeout` (a client cut off in the
//!   handshake, or at stop for not reading its replies), `in_flight` (a client's requests held back by its
//!   in-flight limits).
//! - `nvmf_host_path_failovers_total{controller,nsid}` — commands that failed on this path (lost connection, path
//!   status) and were sent to a path again (multipath: another one when there is one).
//! - `nvmf_host_path_retries_exhausted_total{controller,nsid}` — commands that failed on this path with no retry
//!   left (`[[controller]] path_retries`), and failed.
//! - `nvmf_host_queue_commands_total{controller,qid}` — commands completed (any status); qid 0 is the admin queue.
//! - `nvmf_host_queue_submitted_total{controller,qid}` — commands submitted.
//! - `nvmf_host_queue_r2ts_total{controller,qid}` — R2Ts served (NVMe/TCP writes beyond in-capsule data).
//! - `nvmf_host_queue_bytes_total{controller,qid,direction}` — data bytes of successful commands, `read`
//!   (controller to host) or `write` (host to controller).
//! - `nvmf_host_queue_errors_total{controller,qid}` — commands that completed with an error status or failed
//!   in the transport.
//! - `nvmf_host_queue_sleeps_total{controller,qid}` — waits of the queue's I/O thread that could block (the
//!   others polled and returned at once: the `[host]` `poll` mode at work).
//! - `nvmf_host_queue_command_latency_seconds{controller,qid}` — histogram of submission (the queue's thread taking
//!   the command: its link's I/O thread, or the export thread hosting the link) to completion, buckets
//!   at 1, 2, 4, … µs up to about 4.2 s (Asynchronous Event Requests are not counted).
//!
//! - `nvmf_host_rnic_counters_total{device,port,counter}`, `nvmf_host_rnic_hw_counters_total{device,port,counter}`,
//!   `nvmf_host_rnic_port_state_id{device,port}`, `nvmf_host_rnic_port_active_mtu_bytes{device,port}` — the RDMA
//!   NICs' own counters, read from sysfs at scrape time (`nvmf_service::rnic_metrics`), for every RDMA device of
//!   the machine: which device a controller's queues use is RDMA CM's choice per connection, by route; none
//!   without RDMA.
//!
//! The queues publish these through atomics their I/O threads write ([`QueueMetrics`]); a scrape only loads
//! them (no lock on any I/O path). Runs on the metrics thread. [`HostCollector`]'s `encode` only orders the parts,
//! one function per area: the controllers, the paths and exports, the queues (the RNIC families are
//! `nvmf_service`'s collector).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use nvmf_service::rdma_sysfs::RdmaSysfs;
use nvmf_service::rnic_metrics::{Devices, RnicCollector, RnicFamilies};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::nbd::NbdLimitCounts;
use crate::queue::handle::{latency_bucket_bound, QueueMetrics, LATENCY_BUCKETS};

/// The states `nvmf_host_controller_state` enumerates.
pub const STATES: [&str; 5] = ["connecting", "live", "reconnecting", "deleting", "failed"];

/// One controller as a scrape sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSample {
    /// The daemon's name (`nvmf0`).
    pub name: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// `traddr:trsvcid`.
    pub traddr: String,
    /// One of [`STATES`].
    pub state: String,
    /// Reconnects since connected.
    pub reconnects: u64,
    /// Exports running.
    pub exports: usize,
    /// `(qid, counters and metrics)` of each queue, admin first.
    pub queues: Vec<(u16, QueueMetrics)>,
    /// The controller as a path of each export it serves.
    pub paths: Vec<PathSample>,
    /// The NBD exports it is a path of (an export reached through several controllers appears under each).
    pub nbd_limits: Vec<NbdLimitSample>,
}

/// An NBD export's limit counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdLimitSample {
    /// The export's name (`nvmf0n1`).
    pub export: String,
    /// How often each limit fired.
    pub counts: NbdLimitCounts,
}

/// A controller as a path of one export's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSample {
    /// The namespace.
    pub nsid: u32,
    /// Its ANA state through this controller (one of [`ANA_STATES`]).
    pub ana_state: &'static str,
    /// Commands that failed on this path and were sent to a path again.
    pub failovers: u64,
    /// Commands that failed on this path with no retry left.
    pub retries_exhausted: u64,
}

/// The states `nvmf_host_path_ana_state` enumerates (`none`: the controller does not report ANA).
pub const ANA_STATES: [&str; 6] = ["optimized", "non-optimized", "inaccessible", "persistent-loss", "change", "none"];

type Sampler = Arc<dyn Fn() -> Vec<ControllerSample> + Send + Sync>;

/// A `prometheus-client` collector over the daemon's controllers.
#[derive(Clone)]
pub struct HostCollector {
    sample: Sampler,
}

impl fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCollector").finish_non_exhaustive()
    }
}

impl HostCollector {
    /// A collector that calls `sample` at each scrape.
    pub fn new(sample: impl Fn() -> Vec<ControllerSample> + Send + Sync + 'static) -> Self {
        HostCollector { sample: Arc::new(sample) }
    }
}

/// The host's names of the RNIC families.
pub const RNIC_FAMILIES: RnicFamilies = RnicFamilies {
    counter: "nvmf_host_rnic_counters",
    hw_counter: "nvmf_host_rnic_hw_counters",
    port_state: "nvmf_host_rnic_port_state_id",
    active_mtu: "nvmf_host_rnic_port_active_mtu_bytes",
};

/// A registry holding `collector` and the RNIC counters of every RDMA device under `sysfs`.
pub fn registry(collector: HostCollector, sysfs: RdmaSysfs) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    registry.register_collector(Box::new(RnicCollector::new(sysfs, RNIC_FAMILIES, Devices::All)));
    registry
}

fn counter(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_gauge(&value)
}

impl Collector for HostCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let samples = (self.sample)();
        let e = &mut encoder;
        build_info(e)?;
        controllers(e, &samples)?;
        paths_and_exports(e, &samples)?;
        queues(e, &samples)
    }
}

/// `nvmf_host_build_info{version}`.
fn build_info(encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_host_build",
        "Build information of the running nvmf-host daemon.",
        None,
        MetricType::Info,
    )?;
    m.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])
}

/// The controllers' families: state, reconnects, exports running.
fn controllers(encoder: &mut DescriptorEncoder<'_>, samples: &[ControllerSample]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_host_controller_state",
        "1 for the controller's current state, 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for s in samples {
        for state in STATES {
            let labels =
                [("controller", s.name.as_str()), ("subnqn", &s.subnqn), ("traddr", &s.traddr), ("state", state)];
            gauge(&mut m, &labels, u64::from(s.state == state))?;
        }
    }
    let mut m = encoder.encode_descriptor(
        "nvmf_host_controller_reconnects",
        "Associations re-established after a loss.",
        None,
        MetricType::Counter,
    )?;
    for s in samples {
        counter(&mut m, &[("controller", s.name.as_str()), ("subnqn", &s.subnqn)], s.reconnects)?;
    }
    let mut m = encoder.encode_descriptor("nvmf_host_exports", "NBD exports running.", None, MetricType::Gauge)?;
    for s in samples {
        gauge(&mut m, &[("controller", s.name.as_str())], u64::try_from(s.exports).unwrap_or(u64::MAX))?;
    }
    Ok(())
}

/// The exports' families: each path's ANA state, the NBD exports' limits, each path's failovers.
fn paths_and_exports(encoder: &mut DescriptorEncoder<'_>, samples: &[ControllerSample]) -> fmt::Result {
    let help = "1 for the namespace's ANA state through this controller (a path of its export), 0 for the others.";
    let mut m = encoder.encode_descriptor("nvmf_host_path_ana_state", help, None, MetricType::Gauge)?;
    for s in samples {
        for p in &s.paths {
            let nsid = p.nsid.to_string();
            for state in ANA_STATES {
                let labels = [("controller", s.name.as_str()), ("nsid", &nsid), ("state", state)];
                gauge(&mut m, &labels, u64::from(p.ana_state == state))?;
            }
        }
    }
    let help =
        "Times an NBD export's limits fired (clients refused, cut off at handshake or stop, requests held back).";
    let mut m = encoder.encode_descriptor("nvmf_host_nbd_limits", help, None, MetricType::Counter)?;
    // Once per export, however many of its paths report it.
    let exports: BTreeMap<&str, &NbdLimitCounts> =
        samples.iter().flat_map(|s| &s.nbd_limits).map(|x| (x.export.as_str(), &x.counts)).collect();
    for (export, counts) in exports {
        for (limit, n) in counts.by_name() {
            counter(&mut m, &[("export", export), ("limit", limit)], n)?;
        }
    }
    let help = "Commands that failed on this path and were sent to a path again.";
    let mut m = encoder.encode_descriptor("nvmf_host_path_failovers", help, None, MetricType::Counter)?;
    for s in samples {
        for p in &s.paths {
            counter(&mut m, &[("controller", s.name.as_str()), ("nsid", &p.nsid.to_string())], p.failovers)?;
        }
    }
    let help = "Commands that failed on this path with no retry left ([[controller]] path_retries), and failed.";
    let mut m = encoder.encode_descriptor("nvmf_host_path_retries_exhausted", help, None, MetricType::Counter)?;
    for s in samples {
        for p in &s.paths {
            let labels = [("controller", s.name.as_str()), ("nsid", &p.nsid.to_string())];
            counter(&mut m, &labels, p.retries_exhausted)?;
        }
    }
    Ok(())
}

/// The queues' families ([`QueueMetrics`] by controller and qid): counts, bytes, latency.
fn queues(encoder: &mut DescriptorEncoder<'_>, samples: &[ControllerSample]) -> fmt::Result {
    type Field = fn(&QueueMetrics) -> u64;
    let per_queue: [(&str, &str, Field); 5] = [
        ("nvmf_host_queue_commands", "Commands completed (any status); qid 0 is the admin queue.", |q| q.completed),
        ("nvmf_host_queue_submitted", "Commands submitted; qid 0 is the admin queue.", |q| q.submitted),
        ("nvmf_host_queue_r2ts", "R2Ts served (NVMe/TCP writes beyond in-capsule data).", |q| q.r2ts),
        ("nvmf_host_queue_errors", "Commands with an error status or a transport failure.", |q| q.errors),
        ("nvmf_host_queue_sleeps", "Waits of the queue's I/O thread that could block (not polls).", |q| q.sleeps),
    ];
    for (name, help, field) in per_queue {
        let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for s in samples {
            for (qid, stats) in &s.queues {
                let qid = qid.to_string();
                counter(&mut m, &[("controller", s.name.as_str()), ("qid", &qid)], field(stats))?;
            }
        }
    }
    let help = "Data bytes of successful commands by direction (read: controller to host).";
    let mut m = encoder.encode_descriptor("nvmf_host_queue_bytes", help, None, MetricType::Counter)?;
    for s in samples {
        for (qid, q) in &s.queues {
            let qid = qid.to_string();
            for (direction, v) in [("read", q.read_bytes), ("write", q.written_bytes)] {
                let labels = [("controller", s.name.as_str()), ("qid", &qid), ("direction", direction)];
                counter(&mut m, &labels, v)?;
            }
        }
    }
    let mut m = encoder.encode_descriptor(
        "nvmf_host_queue_command_latency_seconds",
        "Command latency from submission to completion (not Asynchronous Event Requests).",
        None,
        MetricType::Histogram,
    )?;
    for s in samples {
        for (qid, q) in &s.queues {
            let qid = qid.to_string();
            let buckets: Vec<(f64, u64)> =
                (0..LATENCY_BUCKETS).map(|b| (latency_bucket_bound(b), q.latency[b])).collect();
            // Seconds as a float, as Prometheus has them.
            let sum = q.latency_sum_ns as f64 * 1e-9;
            m.encode_family(&[("controller", s.name.as_str()), ("qid", &qid)])?.encode_histogram::<NoLabelSet>(
                sum,
                q.latency_count(),
                &buckets,
                None,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_service::metrics_http::{render, Format};

    #[test]
    fn encodes_every_family_with_its_labels() {
        let mut io = QueueMetrics {
            submitted: 5,
            completed: 5,
            max_outstanding: 4,
            r2ts: 3,
            read_bytes: 8192,
            written_bytes: 4096,
            errors: 1,
            sleeps: 6,
            latency_sum_ns: 30_000,
            ..QueueMetrics::default()
        };
        // 3 commands of at most 8 µs, 2 slower than the last finite bound.
        io.latency[3] = 3;
        io.latency[LATENCY_BUCKETS - 1] = 2;
        let collector = HostCollector::new(move || {
            vec![ControllerSample {
                name: "nvmf0".into(),
                subnqn: "nqn.2024-01.io.example:a".into(),
                traddr: "127.0.0.1:4420".into(),
                state: "live".into(),
                reconnects: 2,
                exports: 1,
                queues: vec![
                    (0, QueueMetrics { submitted: 9, completed: 8, max_outstanding: 1, ..QueueMetrics::default() }),
                    (1, io),
                ],
                paths: vec![PathSample { nsid: 1, ana_state: "non-optimized", failovers: 4, retries_exhausted: 1 }],
                nbd_limits: vec![NbdLimitSample {
                    export: "nvmf0n1".into(),
                    counts: NbdLimitCounts { clients: 2, in_flight: 5, ..NbdLimitCounts::default() },
                }],
            }]
        });
        // Every RDMA device of the machine: a fake sysfs with one.
        let sysfs = tempfile::tempdir().unwrap();
        let port = sysfs.path().join("sys/class/infiniband/rxe0/ports/1");
        std::fs::create_dir_all(port.join("hw_counters")).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("hw_counters/sent_pkts"), "7\n").unwrap();
        let text = render(&registry(collector, RdmaSysfs::new(sysfs.path())), Format::Prometheus).unwrap();
        for line in [
            "nvmf_host_controller_state{controller=\"nvmf0\",subnqn=\"nqn.2024-01.io.example:a\",traddr=\"127.0.0.1:4420\",state=\"live\"} 1",
            "nvmf_host_controller_state{controller=\"nvmf0\",subnqn=\"nqn.2024-01.io.example:a\",traddr=\"127.0.0.1:4420\",state=\"failed\"} 0",
            "nvmf_host_controller_reconnects_total{controller=\"nvmf0\",subnqn=\"nqn.2024-01.io.example:a\"} 2",
            "nvmf_host_exports{controller=\"nvmf0\"} 1",
            "nvmf_host_path_ana_state{controller=\"nvmf0\",nsid=\"1\",state=\"non-optimized\"} 1",
            "nvmf_host_path_ana_state{controller=\"nvmf0\",nsid=\"1\",state=\"optimized\"} 0",
            "nvmf_host_path_failovers_total{controller=\"nvmf0\",nsid=\"1\"} 4",
            "nvmf_host_path_retries_exhausted_total{controller=\"nvmf0\",nsid=\"1\"} 1",
            "nvmf_host_nbd_limits_total{export=\"nvmf0n1\",limit=\"clients\"} 2",
            "nvmf_host_nbd_limits_total{export=\"nvmf0n1\",limit=\"handshake_timeout\"} 0",
            "nvmf_host_nbd_limits_total{export=\"nvmf0n1\",limit=\"in_flight\"} 5",
            "nvmf_host_queue_commands_total{controller=\"nvmf0\",qid=\"0\"} 8",
            "nvmf_host_queue_submitted_total{controller=\"nvmf0\",qid=\"1\"} 5",
            "nvmf_host_queue_r2ts_total{controller=\"nvmf0\",qid=\"1\"} 3",
            "nvmf_host_queue_errors_total{controller=\"nvmf0\",qid=\"1\"} 1",
            "nvmf_host_queue_sleeps_total{controller=\"nvmf0\",qid=\"1\"} 6",
            "nvmf_host_queue_bytes_total{controller=\"nvmf0\",qid=\"1\",direction=\"read\"} 8192",
            "nvmf_host_queue_bytes_total{controller=\"nvmf0\",qid=\"1\",direction=\"write\"} 4096",
            "nvmf_host_queue_command_latency_seconds_bucket{controller=\"nvmf0\",qid=\"1\",le=\"4e-06\"} 0",
            "nvmf_host_queue_command_latency_seconds_bucket{controller=\"nvmf0\",qid=\"1\",le=\"8e-06\"} 3",
            "nvmf_host_queue_command_latency_seconds_bucket{controller=\"nvmf0\",qid=\"1\",le=\"+Inf\"} 5",
            "nvmf_host_queue_command_latency_seconds_count{controller=\"nvmf0\",qid=\"1\"} 5",
            "nvmf_host_queue_command_latency_seconds_sum{controller=\"nvmf0\",qid=\"1\"} 0.00003",
            "nvmf_host_rnic_hw_counters_total{device=\"rxe0\",port=\"1\",counter=\"sent_pkts\"} 7",
            "nvmf_host_rnic_port_state_id{device=\"rxe0\",port=\"1\"} 4",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(text.contains("nvmf_host_build_info{version="), "{text}");
    }
}
