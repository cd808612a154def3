//! Starting and stopping a whole target from its validated configuration: open every namespace's storage, build
//! the controller model, start the reactors, then the acceptor. Runs on the control thread (main); nothing here is
//! on the data path.

use std::net::SocketAddr;
use std::sync::Arc;

use nvmf_common::fabrics::discovery::{AddressFamily, TcpSecurityType, TransportType, Tsas};
#[cfg(feature = "rdma")]
use nvmf_common::fabrics::discovery::{RdmaCms, RdmaProviderType, RdmaQpType};
use nvmf_config::size::format_size;
use nvmf_config::target::{ListenerConfig, ListenerTransport, NamespaceBackend, NamespaceConfig, SubsystemConfig};
use nvmf_config::TargetConfig;

use crate::backend::{BackendError, EngineConfig, Storage, StorageSpec};
use crate::controller::{ListenerParams, NamespaceParams, SubsystemParams, Target, TargetError, TargetParams};
use crate::listener::{Acceptor, BoundListeners, ListenerError, TcpListenerSpec};
use crate::metrics::{ConnectionCounter, MetricsError, MetricsServer, TargetCollector};
#[cfg(feature = "rdma")]
use crate::rdma::{BoundRdmaListeners, RdmaCmThread, RdmaListenerError, RdmaListenerSpec, RdmaTransportConfig};
use crate::reactor::{ReactorConfig, ReactorError, ReactorHandle};
use crate::tcp::TcpTransportConfig;

/// Why the target could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A namespace's storage could not be opened.
    #[error("subsystem {subsystem} namespace {nsid}: {source}")]
    Storage {
        /// Subsystem NQN.
        subsystem: String,
        /// Namespace ID.
        nsid: u32,
        /// Cause.
        #[source]
        source: BackendError,
    },
    /// The controller model rejected the configuration.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A reactor could not start.
    #[error(transparent)]
    Reactor(#[from] ReactorError),
    /// A listener could not be opened.
    #[error(transparent)]
    Listener(#[from] ListenerError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// An RDMA listener could not be opened (no rdma_cm, no RDMA device on the address…).
    #[cfg(feature = "rdma")]
    #[error(transparent)]
    RdmaListener(#[from] RdmaListenerError),
    /// A transport this build does not serve.
    #[error("listener {0}: this build has no RDMA transport (cargo feature `rdma`); use tcp://")]
    UnsupportedTransport(String),
}

/// A running target.
#[derive(Debug)]
pub struct RunningTarget {
    target: Arc<Target>,
    reactors: Arc<Vec<ReactorHandle>>,
    acceptor: Acceptor,
    #[cfg(feature = "rdma")]
    rdma_cm: Option<RdmaCmThread>,
    storages: Vec<Arc<Storage>>,
    metrics: Option<MetricsServer>,
}

/// The controller model's parameters for subsystem `s`, opening every namespace's storage (each is also pushed
/// onto `storages`, to be flushed at shutdown).
pub fn subsystem_params(s: &SubsystemConfig, storages: &mut Vec<Arc<Storage>>) -> Result<SubsystemParams, StartError> {
    let mut params = SubsystemParams::new(s.nqn.clone());
    params.serial = s.serial.clone();
    params.model = s.model.clone();
    params.allow_any_host = s.allow_any_host;
    params.hosts = s.hosts.clone();
    params.cntlid_range = s.cntlid_min..=s.cntlid_max;
    params.max_namespaces = s.max_namespaces;
    for ns in &s.namespaces {
        let namespace = namespace_params(&s.nqn, ns)?;
        storages.push(Arc::clone(&namespace.storage));
        params.namespaces.push(namespace);
    }
    Ok(params)
}

/// The controller model's parameters for namespace `ns` of subsystem `subsystem`, with its storage opened.
pub fn namespace_params(subsystem: &str, ns: &NamespaceConfig) -> Result<NamespaceParams, StartError> {
    let spec = match &ns.backend {
        NamespaceBackend::Path(path) => StorageSpec::Path { path: path.clone(), block_size: ns.block_size },
        NamespaceBackend::Memory { size } => StorageSpec::Memory { size: *size, block_size: ns.block_size },
        NamespaceBackend::Null { size } => StorageSpec::Null { size: *size, block_size: ns.block_size },
    };
    let open = if ns.buffered_io { Storage::open_buffered } else { Storage::open };
    let storage = Arc::new(open(&spec).map_err(|source| StartError::Storage {
        subsystem: subsystem.to_owned(),
        nsid: ns.nsid,
        source,
    })?);
    tracing::info!(subsystem, nsid = ns.nsid, storage = %storage.describe(), "namespace");
    let mut namespace = NamespaceParams::new(ns.nsid, storage);
    namespace.uuid = Some(*ns.uuid.as_bytes());
    namespace.nguid = Some(*ns.nguid.as_bytes());
    namespace.eui64 = Some(*ns.eui64.as_bytes());
    Ok(namespace)
}

/// The acceptor's spec for TCP listener `l` with discovery port ID `port_id` (`None` for another transport).
pub fn tcp_listener_spec(l: &ListenerConfig, port_id: u16) -> Option<TcpListenerSpec> {
    let ListenerTransport::Tcp(options) = l.transport else { return None };
    let tcp = TcpTransportConfig {
        in_capsule_data_size: l.in_capsule_data_size,
        header_digest: options.header_digest,
        data_digest: options.data_digest,
        ..TcpTransportConfig::default()
    };
    Some(TcpListenerSpec { address: l.address, port_id, tcp: Arc::new(tcp) })
}

/// The discovery log's entry for TCP listener `spec`, bound at `local`.
pub fn tcp_listener_params(spec: &TcpListenerSpec, local: SocketAddr) -> ListenerParams {
    ListenerParams {
        port_id: spec.port_id,
        trtype: TransportType::Tcp,
        adrfam: if local.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
        traddr: local.ip().to_string(),
        trsvcid: local.port().to_string(),
        tsas: Tsas::Tcp { sectype: TcpSecurityType::None },
    }
}

/// The RDMA CM thread's spec for RDMA listener `l` with discovery port ID `port_id` (`None` for another transport).
#[cfg(feature = "rdma")]
pub fn rdma_listener_spec(l: &ListenerConfig, port_id: u16, max_io_queues: u16) -> Option<RdmaListenerSpec> {
    let ListenerTransport::Rdma(options) = l.transport else { return None };
    let rdma = RdmaTransportConfig {
        in_capsule_data_size: l.in_capsule_data_size,
        max_queue_depth: u16::try_from(l.max_queue_size).unwrap_or(u16::MAX),
        send_with_invalidate: options.send_with_invalidate,
        srq: options.srq,
    };
    Some(RdmaListenerSpec { address: l.address, port_id, max_qid: max_io_queues, rdma: Arc::new(rdma) })
}

/// The discovery log's entry for RDMA listener `spec`, bound at `local`: as Linux nvmet reports RDMA ports,
/// reliable connected, provider not specified, RDMA CM.
#[cfg(feature = "rdma")]
pub fn rdma_listener_params(spec: &RdmaListenerSpec, local: SocketAddr) -> ListenerParams {
    ListenerParams {
        port_id: spec.port_id,
        trtype: TransportType::Rdma,
        adrfam: if local.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
        traddr: local.ip().to_string(),
        trsvcid: local.port().to_string(),
        tsas: Tsas::Rdma {
            qptype: RdmaQpType::Connected,
            prtype: RdmaProviderType::NotSpecified,
            cms: RdmaCms::RdmaCm,
            pkey: 0,
        },
    }
}

/// Open the storage of every namespace, start `config.reactors.threads` reactors and listen on every listener.
pub fn start(config: &TargetConfig) -> Result<RunningTarget, StartError> {
    let mut storages = Vec::new();
    let mut subsystems = Vec::with_capacity(config.subsystems.len());
    for s in &config.subsystems {
        subsystems.push(subsystem_params(s, &mut storages)?);
    }

    let mut listener_specs = Vec::with_capacity(config.listeners.len());
    #[cfg(feature = "rdma")]
    let mut rdma_specs = Vec::new();
    for (i, l) in config.listeners.iter().enumerate() {
        let port_id = u16::try_from(i + 1).unwrap_or(u16::MAX);
        #[cfg(feature = "rdma")]
        if let Some(spec) = rdma_listener_spec(l, port_id, config.limits.max_io_queues) {
            rdma_specs.push(spec);
            continue;
        }
        let spec = tcp_listener_spec(l, port_id).ok_or_else(|| StartError::UnsupportedTransport(l.to_string()))?;
        listener_specs.push(spec);
    }

    // Bind before building the model so that the discovery log reports the ports the sockets really got.
    let bound = BoundListeners::bind(&listener_specs)?;
    #[allow(unused_mut)] // without the rdma feature only TCP listeners are added
    let mut listener_params: Vec<ListenerParams> =
        listener_specs.iter().zip(bound.local_addrs()).map(|(spec, local)| tcp_listener_params(spec, *local)).collect();
    #[cfg(feature = "rdma")]
    let rdma_bound = if rdma_specs.is_empty() { None } else { Some(BoundRdmaListeners::bind(&rdma_specs)?) };
    #[cfg(feature = "rdma")]
    if let Some(rdma_bound) = &rdma_bound {
        let rdma = rdma_specs.iter().zip(rdma_bound.local_addrs());
        listener_params.extend(rdma.map(|(spec, local)| rdma_listener_params(spec, *local)));
        listener_params.sort_by_key(|p| p.port_id);
    }

    let limits = &config.limits;
    let target_params = TargetParams {
        mdts: limits.mdts,
        max_queue_entries: limits.max_queue_size,
        max_io_queues: limits.max_io_queues,
        kato_max_ms: limits.keep_alive_max_ms,
        kas: limits.kas(),
        discovery_enabled: config.discovery.enabled,
        listeners: listener_params,
        ..TargetParams::default()
    };
    let target = Target::new(target_params, subsystems)?;

    let engine = EngineConfig {
        buffer_size: usize::try_from(limits.mdts).unwrap_or(usize::MAX).max(EngineConfig::default().buffer_size),
        ..EngineConfig::default()
    };
    let mut reactors = Vec::with_capacity(config.reactors.threads);
    for index in 0..config.reactors.threads {
        let reactor_config =
            ReactorConfig { index, cpu: config.reactors.cpus.get(index).copied(), engine: engine.clone() };
        match ReactorHandle::spawn(reactor_config, Arc::clone(&target)) {
            Ok(r) => reactors.push(r),
            Err(e) => {
                for r in reactors {
                    r.shutdown();
                }
                return Err(e.into());
            }
        }
    }
    let reactors = Arc::new(reactors);
    let acceptor = match Acceptor::start(bound, Arc::clone(&reactors)) {
        Ok(a) => a,
        Err(e) => {
            stop_reactors(reactors);
            return Err(e.into());
        }
    };
    #[cfg(feature = "rdma")]
    let rdma_cm = match rdma_bound.map(|b| RdmaCmThread::start(b, Arc::clone(&reactors))).transpose() {
        Ok(cm) => cm,
        Err(e) => {
            acceptor.stop();
            stop_reactors(reactors);
            return Err(e.into());
        }
    };
    let metrics = match config.metrics.listen {
        None => None,
        Some(listen) => {
            let connections = reactors
                .iter()
                .map(|r| ConnectionCounter { transport: "tcp", count: r.connection_counter() })
                .collect();
            let collector = TargetCollector::new(Arc::clone(&target), connections);
            // The RDMA families only where RDMA is served.
            #[cfg(feature = "rdma")]
            let collector = match rdma_cm {
                Some(_) => collector.with_rdma(reactors.iter().map(ReactorHandle::rdma_counters).collect()),
                None => collector,
            };
            match MetricsServer::start(listen, crate::metrics::registry(collector)) {
                Ok(server) => Some(server),
                Err(e) => {
                    #[cfg(feature = "rdma")]
                    if let Some(cm) = rdma_cm {
                        cm.stop();
                    }
                    acceptor.stop();
                    stop_reactors(reactors);
                    return Err(e.into());
                }
            }
        }
    };
    Ok(RunningTarget {
        target,
        reactors,
        acceptor,
        #[cfg(feature = "rdma")]
        rdma_cm,
        storages,
        metrics,
    })
}

fn stop_reactors(reactors: Arc<Vec<ReactorHandle>>) {
    match Arc::try_unwrap(reactors) {
        Ok(reactors) => reactors.into_iter().for_each(ReactorHandle::shutdown),
        Err(_) => tracing::error!("reactors still shared at shutdown"),
    }
}

impl RunningTarget {
    /// The controller model (subsystems, namespaces) for reconfiguration and inspection.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The addresses the listeners are bound to, in configuration order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        self.acceptor.local_addrs()
    }

    /// The addresses the RDMA listeners are bound to, in configuration order.
    pub fn rdma_local_addrs(&self) -> &[SocketAddr] {
        #[cfg(feature = "rdma")]
        if let Some(cm) = &self.rdma_cm {
            return cm.local_addrs();
        }
        &[]
    }

    /// The TCP acceptor: the listeners it serves.
    pub fn acceptor(&self) -> &Acceptor {
        &self.acceptor
    }

    /// The TCP acceptor, to change its listeners (reload).
    pub fn acceptor_mut(&mut self) -> &mut Acceptor {
        &mut self.acceptor
    }

    /// The address the metrics endpoint is bound to, when `[metrics] listen` is set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// Keep `storage` (a namespace added by a reload) to flush it at shutdown.
    pub fn keep_storage(&mut self, storage: Arc<Storage>) {
        self.storages.push(storage);
    }

    /// Stop keeping `storage` (its namespace was removed by a reload).
    pub fn release_storage(&mut self, storage: &Arc<Storage>) {
        self.storages.retain(|s| !Arc::ptr_eq(s, storage));
    }

    /// Connections served now, over all reactors.
    pub fn connections(&self) -> usize {
        self.reactors.iter().map(ReactorHandle::connections).sum()
    }

    /// Every reactor's live connection count (for status reports on another thread).
    pub fn connection_counters(&self) -> Vec<Arc<std::sync::atomic::AtomicUsize>> {
        self.reactors.iter().map(ReactorHandle::connection_counter).collect()
    }

    /// Stop: close the listeners, end every association (in-flight storage ops complete first), then flush every
    /// namespace's storage so that acknowledged writes are durable.
    pub fn shutdown(self) {
        #[cfg(feature = "rdma")]
        if let Some(cm) = self.rdma_cm {
            cm.stop();
        }
        let RunningTarget { acceptor, reactors, storages, metrics, .. } = self;
        if let Some(metrics) = metrics {
            metrics.stop();
        }
        acceptor.stop();
        stop_reactors(reactors);
        for storage in storages {
            if let Err(e) = storage.flush_blocking() {
                tracing::error!(storage = %storage.describe(), error = %e, "flush at shutdown failed");
            }
        }
    }
}

/// Print what the target serves and how a Linux host connects to it (stdout, for people and scripts).
pub fn print_ready(config: &TargetConfig, running: &RunningTarget) {
    let (mut tcp, mut rdma) = (running.local_addrs().iter(), running.rdma_local_addrs().iter());
    let mut first = None;
    for listener in &config.listeners {
        let local = match listener.transport {
            ListenerTransport::Tcp(_) => tcp.next(),
            ListenerTransport::Rdma(_) => rdma.next(),
        };
        let Some(local) = local else { continue };
        println!("nvmf-target: listening on {}://{local}", listener.transport_type());
        first = first.or(Some((listener.transport_type(), *local)));
    }
    let Some((transport, first)) = first else { return };
    for s in &config.subsystems {
        let namespaces: Vec<String> = s
            .namespaces
            .iter()
            .map(|ns| match &ns.backend {
                NamespaceBackend::Path(path) => format!("nsid {}: {}", ns.nsid, path.display()),
                NamespaceBackend::Memory { size } => format!("nsid {}: memory:{}", ns.nsid, format_size(*size)),
                NamespaceBackend::Null { size } => format!("nsid {}: null:{}", ns.nsid, format_size(*size)),
            })
            .collect();
        println!("nvmf-target: subsystem {} ({})", s.nqn, namespaces.join(", "));
        println!(
            "nvmf-target: connect with: nvme connect -t {transport} -a {} -s {} -n {}",
            first.ip(),
            first.port(),
            s.nqn
        );
    }
    if let Some(addr) = running.metrics_addr() {
        println!("nvmf-target: metrics on http://{addr}/metrics");
    }
    println!("nvmf-target: ready");
}
