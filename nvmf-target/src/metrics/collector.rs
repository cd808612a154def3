//! [`TargetCollector`]: a `prometheus-client` [`Collector`] that reads the target's counters at scrape time
//! (subsystem totals, live controllers, connections per transport) and encodes the metric families (rendered by
//! `nvmf_service::metrics_http`). Runs on the metrics thread; takes each subsystem's metrics lock briefly, never
//! a reactor's.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nvmf_service::rnic_metrics::RnicCollector;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::backend::BudgetLimit;
use crate::controller::{ConnectLimit, KatoMinimum, Stalled, Target};
use crate::counters::{code_status, CommandKind, CommandSnapshot, Totals, LATENCY_BOUNDS_NS, OVERFLOW_CODE};
use crate::reactor::WaitCounters;
use crate::tcp::placement::IncomingCpuPlacement;
use crate::tcp::TcpSocketPath;
use crate::transport::{Admission, BufferGauge, Refusal};

/// Live connections of one transport, as a reactor counts them.
#[derive(Debug, Clone)]
pub struct ConnectionCounter {
    /// `transport` label value (`tcp`, `rdma`).
    pub transport: &'static str,
    /// Connections served now.
    pub count: Arc<AtomicUsize>,
}

/// Reads the target's counters on each scrape.
#[derive(Debug)]
pub struct TargetCollector {
    target: Arc<Target>,
    connections: Vec<ConnectionCounter>,
    /// The listeners' connection caps (refusals), once listeners serve.
    admission: Option<Arc<Admission>>,
    /// Every reactor's data buffers, by reactor index.
    buffers: Vec<Arc<BufferGauge>>,
    /// Every reactor's waits, by reactor index.
    waits: Vec<Arc<WaitCounters>>,
    /// How each reactor drives its NVMe/TCP sockets, by reactor index.
    socket_paths: Vec<Arc<TcpSocketPath>>,
    /// Where NVMe/TCP connections are placed at Connect (`[reactors] placement = "incoming_cpu"` only).
    placement: Option<Arc<IncomingCpuPlacement>>,
    /// Every reactor's NVMe/RDMA counters (summed at scrape).
    #[cfg(feature = "rdma")]
    rdma: Vec<Arc<crate::rdma::RdmaCounters>>,
}

/// One subsystem as a scrape sees it.
#[derive(Debug)]
struct SubsystemView {
    nqn: String,
    controllers: usize,
    keep_alive_expiries: u64,
    active: Vec<u32>,
    totals: Totals,
}

/// The `namespace` label value of commands that named no namespace.
const NO_NAMESPACE: &str = "0";

impl TargetCollector {
    /// A collector over `target`'s subsystems (and the discovery subsystem when enabled) and the given
    /// connection counters (summed per transport).
    pub fn new(target: Arc<Target>, connections: Vec<ConnectionCounter>) -> Self {
        TargetCollector {
            target,
            connections,
            admission: None,
            buffers: Vec::new(),
            waits: Vec::new(),
            socket_paths: Vec::new(),
            placement: None,
            #[cfg(feature = "rdma")]
            rdma: Vec::new(),
        }
    }

    /// Also export every reactor's data buffers (by reactor index).
    pub fn with_buffers(mut self, buffers: Vec<Arc<BufferGauge>>) -> Self {
        self.buffers = buffers;
        self
    }

    /// Also export every reactor's waits (by reactor index).
    pub fn with_reactor_waits(mut self, waits: Vec<Arc<WaitCounters>>) -> Self {
        self.waits = waits;
        self
    }

    /// Also export how every reactor drives its NVMe/TCP sockets (by reactor index).
    pub fn with_socket_paths(mut self, paths: Vec<Arc<TcpSocketPath>>) -> Self {
        self.socket_paths = paths;
        self
    }

    /// Also export the NVMe/TCP connections `placement` moved to another reactor.
    pub fn with_placement(mut self, placement: Option<Arc<IncomingCpuPlacement>>) -> Self {
        self.placement = placement;
        self
    }

    /// Also export the connections `admission` refused.
    pub fn with_admission(mut self, admission: Arc<Admission>) -> Self {
        self.admission = Some(admission);
        self
    }

    /// Also export the NVMe/RDMA counters of these reactors (`nvmf_target_rdma_*`; none without any).
    #[cfg(feature = "rdma")]
    pub fn with_rdma(mut self, rdma: Vec<Arc<crate::rdma::RdmaCounters>>) -> Self {
        self.rdma = rdma;
        self
    }

    /// The RDMA families: work requests posted and completions by opcode, error completions by status, stale
    /// completions, live QPs.
    #[cfg(feature = "rdma")]
    fn encode_rdma(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        fn sum(into: &mut Vec<(&'static str, u64)>, items: impl IntoIterator<Item = (&'static str, u64)>) {
            for (name, n) in items {
                match into.iter_mut().find(|(k, _)| *k == name) {
                    Some((_, total)) => *total += n,
                    None => into.push((name, n)),
                }
            }
        }
        let (mut posted, mut completed, mut errors, mut stale, mut qps) = (Vec::new(), Vec::new(), Vec::new(), 0, 0);
        for r in &self.rdma {
            sum(&mut posted, r.work_requests());
            sum(&mut completed, r.completions());
            sum(&mut errors, r.completion_errors());
            stale += r.stale_completions();
            qps += r.queue_pairs();
        }
        let families = [
            ("nvmf_target_rdma_work_requests", "RDMA work requests posted, by opcode.", "opcode", &posted),
            ("nvmf_target_rdma_completions", "Successful RDMA work completions, by opcode.", "opcode", &completed),
            (
                "nvmf_target_rdma_completion_errors",
                "RDMA work completions with an error, by status.",
                "status",
                &errors,
            ),
        ];
        for (name, help, label, values) in families {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (value, n) in values {
                counter(&mut m, &[(label, value)], *n)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "nvmf_target_rdma_stale_completions",
            "RDMA work completions for a queue pair already destroyed (dropped, never delivered).",
            None,
            MetricType::Counter,
        )?;
        counter(&mut m, &[], stale)?;
        let mut m = encoder.encode_descriptor(
            "nvmf_target_rdma_queue_pairs",
            "NVMe/RDMA queue pairs alive now (connected or draining).",
            None,
            MetricType::Gauge,
        )?;
        gauge(&mut m, &[], qps)
    }

    fn subsystems(&self) -> Vec<SubsystemView> {
        let mut subsystems = self.target.subsystems();
        if self.target.params().discovery_enabled {
            subsystems.push(Arc::clone(self.target.discovery_subsystem()));
        }
        subsystems
            .iter()
            .map(|s| SubsystemView {
                nqn: s.nqn().to_owned(),
                controllers: s.controllers().len(),
                keep_alive_expiries: s.metrics().keep_alive_expiries(),
                active: s.namespaces().iter().map(|ns| ns.nsid()).collect(),
                totals: s.metrics().totals(),
            })
            .collect()
    }

    fn connections_by_transport(&self) -> Vec<(&'static str, usize)> {
        let mut by: Vec<(&'static str, usize)> = Vec::new();
        let counted = self.connections.iter().map(|c| (c.transport, c.count.load(Ordering::Relaxed)));
        // An NVMe/RDMA connection is a queue pair (counted by the reactors that serve them).
        #[cfg(feature = "rdma")]
        let counted =
            counted.chain(self.rdma.iter().map(|r| ("rdma", usize::try_from(r.queue_pairs()).unwrap_or(usize::MAX))));
        for (transport, n) in counted {
            match by.iter_mut().find(|(t, _)| *t == transport) {
                Some((_, total)) => *total += n,
                None => by.push((transport, n)),
            }
        }
        by
    }
}

/// The series of one subsystem's command counters: (namespace label, snapshot, namespace is active).
fn command_series(view: &SubsystemView) -> Vec<(String, &CommandSnapshot, bool)> {
    let mut series = vec![(NO_NAMESPACE.to_owned(), &view.totals.unattributed, false)];
    for (nsid, snapshot) in &view.totals.namespaces {
        series.push((nsid.to_string(), snapshot, view.active.contains(nsid)));
    }
    series
}

/// Whether to export the `(namespace, kind)` series: it has counts, or it is an NVM command of an active
/// namespace (exported at 0 so that rates work from the first scrape).
fn exported(snapshot: &CommandSnapshot, kind: CommandKind, active: bool) -> bool {
    snapshot.kind(kind).commands > 0 || (active && kind.is_io() && kind != CommandKind::Other)
}

fn counter(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_gauge(&value)
}

/// Nanoseconds as seconds.
#[expect(clippy::cast_precision_loss, reason = "beyond 2^53 ns, about 104 days of summed latency, is acceptable")]
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Collector for TargetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let subsystems = self.subsystems();
        // Active namespaces with no counts yet still get their zero series.
        let zero = CommandSnapshot::default();
        let series: Vec<Vec<(String, &CommandSnapshot, bool)>> = subsystems
            .iter()
            .map(|v| {
                let mut s = command_series(v);
                for nsid in &v.active {
                    if !v.totals.namespaces.contains_key(nsid) {
                        s.push((nsid.to_string(), &zero, true));
                    }
                }
                s
            })
            .collect();

        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_build",
                "Build information of the running nvmf-target.",
                None,
                MetricType::Info,
            )?;
            m.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_connections",
                "Transport connections served now (one per queue, before and after Connect).",
                None,
                MetricType::Gauge,
            )?;
            for (transport, n) in self.connections_by_transport() {
                gauge(&mut m, &[("transport", transport)], u64::try_from(n).unwrap_or(u64::MAX))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_timeouts",
                "Transport connections (queue pairs) ended because a peer stalled, by the state it stalled in.",
                None,
                MetricType::Counter,
            )?;
            for state in Stalled::ALL {
                counter(&mut m, &[("state", state.label())], self.target.timeouts(state))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_refused_connects",
                "Fabrics Connects refused by a limit: max_controllers_per_host, [discovery] keep_alive_max_ms, a host ID \
                 bound to another host.",
                None,
                MetricType::Counter,
            )?;
            for limit in ConnectLimit::ALL {
                counter(&mut m, &[("reason", limit.label())], self.target.connect_limit_refusals(limit))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_auth",
                "DH-HMAC-CHAP transactions (in-band authentication of a queue) by result (success, failure), hash and \
                 DH group (\"none\" for a failure before they were chosen).",
                None,
                MetricType::Counter,
            )?;
            for (success, hash, group, n) in self.target.auth_counters().snapshot() {
                let result = if success { "success" } else { "failure" };
                let hash = hash.map_or("none", |h| h.name());
                let group = group.map_or("none", |g| g.name());
                counter(&mut m, &[("result", result), ("hash", hash), ("dhgroup", group)], n)?;
            }
        }
        {
            let pool = self.target.auth_pool().counters();
            let families = [
                (
                    "nvmf_target_auth_dh_steps",
                    "DH-HMAC-CHAP steps with Diffie-Hellman work (a key pair, a shared secret) run by the \
                     authentication pool ([target] auth_threads), off the reactors.",
                    pool.ran(),
                ),
                (
                    "nvmf_target_auth_queue_full",
                    "Times a DH-HMAC-CHAP step waited (its command retries) because the authentication pool had \
                     [target] auth_queue_depth steps queued.",
                    pool.queue_full(),
                ),
                (
                    "nvmf_target_auth_rate_limited",
                    "AUTH_Negotiates failed (AUTH_Failure1) because their peer address prefix was over [target] \
                     auth_attempts_per_second.",
                    self.target.auth_attempts().refused(),
                ),
            ];
            for (name, help, n) in families {
                let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
                m.encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        {
            let discards = self.target.discard_counters();
            let families = [
                (
                    "nvmf_target_blkdiscard",
                    "Block discards run as a BLKDISCARD ioctl on a reactor's discard worker thread (kernels without \
                     io_uring block discard).",
                    discards.ran(),
                ),
                (
                    "nvmf_target_blkdiscard_queue_full",
                    "Times a block discard was handed back (the command waits and retries) because its reactor's \
                     discard worker had [reactors] discard_queue_depth queued.",
                    discards.queue_full(),
                ),
            ];
            for (name, help, n) in families {
                let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
                m.encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_rejected_connections",
                "Transport connections (queue pairs) refused at accept, by the cap that refused them.",
                None,
                MetricType::Counter,
            )?;
            for reason in Refusal::ALL {
                let n = self.admission.as_ref().map_or(0, |a| a.rejected(reason));
                counter(&mut m, &[("reason", reason.label())], n)?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_data_buffers",
                "Data buffers of each reactor's pool, free and in all, at the end of the reactor's last turn.",
                None,
                MetricType::Gauge,
            )?;
            for (reactor, gauge_of) in self.buffers.iter().enumerate() {
                let reactor = reactor.to_string();
                for (state, n) in [("free", &gauge_of.free), ("total", &gauge_of.total)] {
                    let n = u64::try_from(n.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
                    gauge(&mut m, &[("reactor", &reactor), ("state", state)], n)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_reactor_waits",
                "How each reactor waited after a turn: polled again at once having found nothing (adaptive or busy \
                 [reactors] poll), or slept until an event.",
                None,
                MetricType::Counter,
            )?;
            for (reactor, waits) in self.waits.iter().enumerate() {
                let reactor = reactor.to_string();
                for (wait, n) in [("poll", &waits.empty_polls), ("sleep", &waits.sleeps)] {
                    counter(&mut m, &[("reactor", &reactor), ("wait", wait)], n.load(Ordering::Relaxed))?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_tcp_socket_io",
                "How each reactor reads and writes its NVMe/TCP sockets: 1 for the path it runs ([reactors] socket_io, \
                 and whether the kernel's io_uring has the ops).",
                None,
                MetricType::Gauge,
            )?;
            for (reactor, path) in self.socket_paths.iter().enumerate() {
                if let Some(name) = path.name() {
                    gauge(&mut m, &[("reactor", &reactor.to_string()), ("path", name)], 1)?;
                }
            }
        }
        if let Some(placement) = &self.placement {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_tcp_connections_moved",
                "NVMe/TCP connections handed, at their queue's Connect, to the reactor pinned to the CPU their packets \
                 arrive on.",
                None,
                MetricType::Counter,
            )?;
            counter(&mut m, &[], placement.moved())?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_buffer_budget_waits",
                "Commands that waited for a data buffer the pool had because a budget refused it: the queue's own \
                 share, or the share of peers not admitted to an NVM subsystem.",
                None,
                MetricType::Counter,
            )?;
            for limit in BudgetLimit::ALL {
                counter(&mut m, &[("budget", limit.label())], self.target.budget_waits(limit))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_tcp_send_backlog_pauses",
                "NVMe/TCP connections that stopped reading new PDUs because more than [target] tcp_send_backlog \
                 waited for their host to read (once per pause; reading resumes as the host catches up).",
                None,
                MetricType::Counter,
            )?;
            counter(&mut m, &[], self.target.send_backlog_pauses())?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_keep_alive_minimum",
                "Host KATOs (Connect or Set Features) below [target] keep_alive_min_ms: raised to it, or refused (KATO 0).",
                None,
                MetricType::Counter,
            )?;
            for outcome in KatoMinimum::ALL {
                counter(&mut m, &[("outcome", outcome.label())], self.target.kato_minimum(outcome))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_reservation_conflicts",
                "Commands failed with Reservation Conflict: I/O commands against a namespace's reservation, and \
                 reservation commands the reservation state refused.",
                None,
                MetricType::Counter,
            )?;
            counter(&mut m, &[], self.target.reservation_conflicts())?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_reservation_registrant_limit",
                "Reservation Registers refused with Insufficient Capacity: the namespace had max_registrants registrants.",
                None,
                MetricType::Counter,
            )?;
            counter(&mut m, &[], self.target.registrant_limit_refusals())?;
        }
        {
            // RBD images: (subsystem, namespace, counters).
            let mut images = Vec::new();
            for s in self.target.subsystems() {
                for ns in s.namespaces().iter() {
                    if let Some(stats) = ns.storage().rbd_stats() {
                        images.push((s.nqn().to_owned(), ns.nsid().to_string(), stats));
                    }
                }
            }
            if !images.is_empty() {
                let mut m = encoder.encode_descriptor(
                    "nvmf_target_rbd_ops_in_flight",
                    "Operations in librbd now, by subsystem, namespace and RBD image (pool/image).",
                    None,
                    MetricType::Gauge,
                )?;
                for (nqn, ns, st) in &images {
                    gauge(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.in_flight)?;
                }
                let mut m = encoder.encode_descriptor(
                    "nvmf_target_rbd_errors",
                    "Operations librbd failed (a negative return: timeout, blocklisted, I/O error) or refused, by \
                     subsystem, namespace and RBD image, since the image was opened.",
                    None,
                    MetricType::Counter,
                )?;
                for (nqn, ns, st) in &images {
                    counter(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.errors)?;
                }
                let mut m = encoder.encode_descriptor(
                    "nvmf_target_rbd_reopened",
                    "Times an RBD image was reopened through a new Ceph client after the cluster fenced (blocklisted) \
                     the old one or an op on it timed out, by subsystem, namespace and image.",
                    None,
                    MetricType::Counter,
                )?;
                for (nqn, ns, st) in &images {
                    counter(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.reopened)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_controllers",
                "Live controllers (associations) of each subsystem.",
                None,
                MetricType::Gauge,
            )?;
            for v in &subsystems {
                gauge(&mut m, &[("subsystem", &v.nqn)], u64::try_from(v.controllers).unwrap_or(u64::MAX))?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_commands",
                "Commands completed, by subsystem, namespace (0: none named) and opcode.",
                None,
                MetricType::Counter,
            )?;
            for (v, series) in subsystems.iter().zip(&series) {
                for (ns, snapshot, active) in series {
                    for kind in CommandKind::ALL {
                        if exported(snapshot, kind, *active) {
                            let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("opcode", kind.label())];
                            counter(&mut m, &labels, snapshot.kind(kind).commands)?;
                        }
                    }
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_bytes",
                "Bytes transferred by successful Reads (direction=read) and Writes (direction=write).",
                None,
                MetricType::Counter,
            )?;
            for (v, series) in subsystems.iter().zip(&series) {
                for (ns, snapshot, active) in series {
                    if !active && snapshot.bytes_read == 0 && snapshot.bytes_written == 0 {
                        continue;
                    }
                    for (direction, value) in [("read", snapshot.bytes_read), ("write", snapshot.bytes_written)] {
                        let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("direction", direction)];
                        counter(&mut m, &labels, value)?;
                    }
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_command_latency_seconds",
                "Time from a command capsule's arrival to its response being queued (AERs excluded).",
                None,
                MetricType::Histogram,
            )?;
            let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(LATENCY_BOUNDS_NS.len() + 1);
            for (v, series) in subsystems.iter().zip(&series) {
                for (ns, snapshot, active) in series {
                    for kind in CommandKind::ALL {
                        if !kind.has_latency() || !exported(snapshot, kind, *active) {
                            continue;
                        }
                        let k = snapshot.kind(kind);
                        buckets.clear();
                        buckets.extend(
                            LATENCY_BOUNDS_NS.iter().map(|&b| seconds(b)).chain([f64::INFINITY]).zip(k.buckets),
                        );
                        let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("opcode", kind.label())];
                        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                            seconds(k.latency_sum_ns),
                            k.latency_count(),
                            &buckets,
                            None,
                        )?;
                    }
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_errors",
                "Commands completed with an error status, by subsystem and status name.",
                None,
                MetricType::Counter,
            )?;
            for v in &subsystems {
                for (&code, &n) in &v.totals.errors {
                    let name = status_label(code);
                    counter(&mut m, &[("subsystem", v.nqn.as_str()), ("status", &name)], n)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "nvmf_target_keep_alive_expiries",
                "Associations ended because the host sent no command within the Keep Alive Timeout.",
                None,
                MetricType::Counter,
            )?;
            for v in &subsystems {
                counter(&mut m, &[("subsystem", &v.nqn)], v.keep_alive_expiries)?;
            }
        }
        #[cfg(feature = "rdma")]
        if !self.rdma.is_empty() {
            self.encode_rdma(&mut encoder)?;
        }
        Ok(())
    }
}

/// The `status` label of an error code: the spec's name (`Status::name`), else `SCT_x_SC_yy`.
fn status_label(code: u16) -> String {
    if code == OVERFLOW_CODE {
        return "OTHER".to_owned();
    }
    let status = code_status(code);
    match status.name() {
        Some(name) => name.to_owned(),
        None => format!("SCT_{:X}_SC_{:02X}", status.sct() as u8, status.sc()),
    }
}

/// A registry holding `collector`, and `rnic` (the RDMA NICs' counters) when given.
pub fn registry(collector: TargetCollector, rnic: Option<RnicCollector>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    if let Some(rnic) = rnic {
        registry.register_collector(Box::new(rnic));
    }
    registry
}
