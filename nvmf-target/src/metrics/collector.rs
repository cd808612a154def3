//! [`TargetCollector`]: a `prometheus-client` [`Collector`] that reads the target's counters at scrape time and
//! assembles the metric families (rendered by `nvmf_service::metrics_http`) from the parts beside it, one file per
//! area: `transport.rs`, `controller.rs`, `reactors.rs`, `storage.rs`, `subsystems.rs`, `rdma.rs`. It only orders
//! them (as scrapes have always listed them) and hands each the counters it reads. Runs on the metrics thread; takes
//! each subsystem's counters lock briefly, never a reactor's.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nvmf_service::rnic_metrics::RnicCollector;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{controller, reactors, storage, subsystems, transport};
use crate::controller::Target;
use crate::reactor::WaitCounters;
use crate::tcp::placement::IncomingCpuPlacement;
use crate::tcp::TcpSocketPath;
use crate::tcp::TlsCounters;
use crate::transport::{Admission, BufferGauge, TransportCounters, TransportListeners};

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
    /// What the TLS gate did, once listeners serve.
    tls: Option<Arc<TlsCounters>>,
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

impl TargetCollector {
    /// The collector of a running target: `target`, its `listeners` (refusals; the RDMA families where RDMA is
    /// served) and the reactors' `counters` (connections by transport, buffers, socket paths).
    pub fn of_listeners(target: Arc<Target>, listeners: &TransportListeners, counters: &[TransportCounters]) -> Self {
        let connections = counters
            .iter()
            .map(|c| ConnectionCounter { transport: "tcp", count: Arc::clone(&c.tcp_connections) })
            .collect();
        let collector = TargetCollector::new(target, connections)
            .with_admission(Arc::clone(listeners.admission()))
            .with_tls(Arc::clone(listeners.tls_counters()))
            .with_buffers(counters.iter().map(|c| Arc::clone(&c.buffers)).collect())
            .with_socket_paths(counters.iter().map(|c| Arc::clone(&c.tcp_socket_path)).collect());
        #[cfg(feature = "rdma")]
        let collector = match listeners.serves_rdma() {
            true => collector.with_rdma(counters.iter().map(|c| Arc::clone(&c.rdma)).collect()),
            false => collector,
        };
        collector
    }

    /// A collector over `target`'s subsystems (and the discovery subsystem when enabled) and the given
    /// connection counters (summed per transport).
    pub fn new(target: Arc<Target>, connections: Vec<ConnectionCounter>) -> Self {
        TargetCollector {
            target,
            connections,
            admission: None,
            tls: None,
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

    /// Also export what the TLS gate did to connections.
    pub fn with_tls(mut self, tls: Arc<TlsCounters>) -> Self {
        self.tls = Some(tls);
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

impl Collector for TargetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let e = &mut encoder;
        let target = &self.target;
        build_info(e)?;
        transport::connections(e, &self.connections_by_transport())?;
        transport::timeouts(e, target)?;
        controller::refused_connects(e, target)?;
        controller::auth(e, target)?;
        controller::auth_pool(e, target)?;
        storage::blkdiscard(e, target)?;
        transport::rejected_connections(e, self.admission.as_deref())?;
        transport::tls_connections(e, self.tls.as_deref())?;
        reactors::data_buffers(e, &self.buffers)?;
        reactors::waits(e, &self.waits)?;
        transport::tcp_socket_io(e, &self.socket_paths)?;
        transport::tcp_zero_copy_sends(e, &self.socket_paths)?;
        transport::tcp_connections_moved(e, self.placement.as_deref())?;
        reactors::buffer_budget_waits(e, target)?;
        transport::tcp_send_backlog_pauses(e, target)?;
        controller::keep_alive_minimum(e, target)?;
        controller::reservations(e, target)?;
        storage::rbd(e, target)?;
        subsystems::encode(e, &subsystems::views(target))?;
        #[cfg(feature = "rdma")]
        if !self.rdma.is_empty() {
            super::rdma::encode(e, &self.rdma)?;
        }
        Ok(())
    }
}

/// `nvmf_target_build_info{version}`.
fn build_info(encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_build",
        "Build information of the running nvmf-target.",
        None,
        MetricType::Info,
    )?;
    m.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])
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
