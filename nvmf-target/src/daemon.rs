//! Starting and stopping a whole target from its validated configuration: open every namespace's storage, bind the
//! listeners, build the controller model, start the reactors (each with every transport's poll group), then the
//! transports' listener threads and the metrics endpoint. Runs on the control thread (main); nothing here is on the
//! data path, and nothing here names a transport but to print it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use nvmf_common::nvme::log_page::AnaState;
use nvmf_config::size::format_size;
use nvmf_config::target::{
    ControllerLimits, ListenerConfig, ListenerTransport, NamespaceBackend, NamespaceConfig, QueuePlacement,
    SubsystemConfig,
};
use nvmf_config::TargetConfig;

use crate::backend::{BackendError, ClusterTimeouts, EngineConfig, RbdSpec, Storage, StorageSpec};
use crate::controller::ana::AnaGroups;
use crate::controller::authentication::{HostKeys, SubsystemAuth};
use crate::controller::{NamespaceParams, Subsystem, SubsystemParams, Target, TargetError, TargetParams};
use crate::metrics::{MetricsError, MetricsServer, TargetCollector};
use crate::reactor::{ReactorConfig, ReactorError, ReactorHandle};
use crate::tcp::placement::IncomingCpuPlacement;
use crate::tcp::Acceptor;
use crate::transport::{
    BoundTransportListeners, ListenError, NewQueuePair, Refusal, TransportCounters, TransportListeners, TransportSet,
};

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
    Listener(#[from] ListenError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// A running target.
#[derive(Debug)]
pub struct RunningTarget {
    target: Arc<Target>,
    reactors: Arc<Vec<ReactorHandle<NewQueuePair>>>,
    counters: Vec<TransportCounters>,
    listeners: TransportListeners,
    storages: Vec<Arc<Storage>>,
    metrics: Option<MetricsServer>,
    /// Where NVMe/TCP connections are placed at Connect (`[reactors] placement = "incoming_cpu"` only).
    placement: Option<Arc<IncomingCpuPlacement>>,
    /// `[target] state_dir` if usable at start (see [`usable_state_dir`]); namespaces added by a reload use it too.
    state_dir: Option<std::path::PathBuf>,
}

/// `[target] state_dir` if the target can keep its state there: the directory (and its `reservations/`) exists or
/// is created (mode 0700) and a file can be written in it. Otherwise one warning names the path and the reason and
/// the target runs without a state directory: RESCAP without PTPL, and a Reservation Register's CPTPL ignored (as
/// Linux nvmet does), rather than failing every registration of the Linux host, which always asks for PTPL.
pub fn usable_state_dir(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    match check_state_dir(dir) {
        Ok(()) => Some(dir.to_owned()),
        Err(reason) => {
            tracing::warn!(state_dir = %dir.display(), reason = %reason,
                "state directory unusable: reservations cannot persist through power loss (PTPL not offered)");
            None
        }
    }
}

fn check_state_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let reservations = dir.join("reservations");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&reservations)
        .map_err(|e| format!("create {}: {e}", reservations.display()))?;
    let probe = reservations.join(format!(".probe.{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("write {}: {e}", probe.display()))?;
    std::fs::remove_file(&probe).map_err(|e| format!("remove {}: {e}", probe.display()))
}

/// The controller model's parameters for subsystem `s`, opening every namespace's storage (each is also pushed
/// onto `storages`, to be flushed at shutdown); reservations persist under `state_dir` (a usable `[target]
/// state_dir`, see [`usable_state_dir`]; `None`: they never persist); RBD images are reached within `limits`' Ceph
/// timeouts.
pub fn subsystem_params(
    s: &SubsystemConfig,
    state_dir: Option<&std::path::Path>,
    storages: &mut Vec<Arc<Storage>>,
    limits: &ControllerLimits,
) -> Result<SubsystemParams, StartError> {
    let mut params = SubsystemParams::new(s.nqn.clone());
    params.serial = s.serial.clone();
    params.model = s.model.clone();
    params.allow_any_host = s.allow_any_host;
    params.hosts = s.allowed_hosts();
    params.auth = subsystem_auth(s);
    params.cntlid_range = s.cntlid_min..=s.cntlid_max;
    params.max_namespaces = s.max_namespaces;
    for ns in &s.namespaces {
        let mut namespace = namespace_params(&s.nqn, ns, limits)?;
        namespace.state_dir = state_dir.map(std::path::Path::to_owned);
        storages.push(Arc::clone(&namespace.storage));
        params.namespaces.push(namespace);
    }
    Ok(params)
}

/// The authentication settings of subsystem `s`: the hosts' keys, and whether a host without one is refused.
pub fn subsystem_auth(s: &SubsystemConfig) -> SubsystemAuth {
    let hosts = s
        .host_keys
        .iter()
        .filter_map(|h| {
            let host_key = h.dhchap_key.as_ref()?.secret.clone();
            let keys = HostKeys {
                host_key,
                controller_key: h.dhchap_ctrl_key.as_ref().map(|k| k.secret.clone()),
                hashes: h.dhchap_hashes.clone(),
                dh_groups: h.dhchap_dhgroups.clone(),
                hostid: h.hostid.map(|id| *id.as_bytes()),
            };
            Some((h.nqn.clone(), Arc::new(keys)))
        })
        .collect();
    SubsystemAuth { required: s.auth_required, hosts }
}

/// The discovery controller's authentication settings: with `[discovery] auth_required`, every host with keys
/// authenticates with those of its first `[[subsystem.host]]`, and hosts without are refused.
pub fn discovery_auth(config: &TargetConfig) -> SubsystemAuth {
    if !config.discovery.auth_required {
        return SubsystemAuth::default();
    }
    let mut hosts = std::collections::BTreeMap::new();
    for s in &config.subsystems {
        for (nqn, keys) in subsystem_auth(s).hosts {
            hosts.entry(nqn).or_insert(keys);
        }
    }
    SubsystemAuth { required: true, hosts }
}

/// The controller model's parameters for namespace `ns` of subsystem `subsystem`, with its storage opened (an RBD
/// image within `limits`' Ceph timeouts).
pub fn namespace_params(
    subsystem: &str,
    ns: &NamespaceConfig,
    limits: &ControllerLimits,
) -> Result<NamespaceParams, StartError> {
    let spec = match &ns.backend {
        NamespaceBackend::Path(path) => StorageSpec::Path { path: path.clone(), block_size: ns.block_size },
        NamespaceBackend::Memory { size } => StorageSpec::Memory { size: *size, block_size: ns.block_size },
        NamespaceBackend::Null { size } => StorageSpec::Null { size: *size, block_size: ns.block_size },
        NamespaceBackend::Rbd(image) => StorageSpec::Rbd { spec: rbd_spec(image, limits), block_size: ns.block_size },
    };
    let open = if ns.buffered_io { Storage::open_buffered } else { Storage::open };
    let storage = Arc::new(open(&spec).map_err(|source| StartError::Storage {
        subsystem: subsystem.to_owned(),
        nsid: ns.nsid,
        source,
    })?);
    tracing::info!(subnqn = subsystem, nsid = ns.nsid, storage = %storage.describe(), "namespace");
    let mut namespace = NamespaceParams::new(ns.nsid, storage);
    namespace.uuid = Some(*ns.uuid.as_bytes());
    namespace.nguid = Some(*ns.nguid.as_bytes());
    namespace.eui64 = Some(*ns.eui64.as_bytes());
    namespace.ana_group = ns.ana_group;
    namespace.max_registrants = usize::try_from(limits.max_registrants).unwrap_or(usize::MAX);
    Ok(namespace)
}

/// Have hosts told when namespace `nsid`'s storage changes size (an RBD image resized): Identify Namespace
/// reports the new capacity and every controller of `subsystem` raises a Namespace Attribute Changed event. A
/// watch that cannot be set is logged: the namespace serves, at its size at open.
pub fn watch_namespace_resize(subsystem: &Arc<Subsystem>, nsid: u32, storage: &Arc<Storage>) {
    let weak = Arc::downgrade(subsystem);
    let watched = storage.watch_resize(move |capacity| {
        if let Some(subsystem) = weak.upgrade() {
            tracing::info!(subnqn = subsystem.nqn(), nsid, capacity, "namespace capacity changed");
            subsystem.namespace_resized(nsid);
        }
    });
    if let Err(e) = watched {
        tracing::warn!(subnqn = subsystem.nqn(), nsid, error = %e, "the namespace's size is not watched");
    }
}

/// The backend's spec of a configured RBD image, librados' waits as `limits` say.
pub fn rbd_spec(image: &nvmf_config::target::RbdImage, limits: &ControllerLimits) -> RbdSpec {
    RbdSpec {
        pool: image.pool.clone(),
        rados_namespace: image.rados_namespace.clone(),
        image: image.image.clone(),
        ceph_conf: image.ceph_conf.clone(),
        ceph_id: image.ceph_id.clone(),
        timeouts: ClusterTimeouts {
            mon: Duration::from_millis(u64::from(limits.ceph_mon_timeout_ms)),
            osd: Duration::from_millis(u64::from(limits.ceph_osd_timeout_ms)),
        },
    }
}

/// A listener's ANA states at start, as changes from every group optimized: `ana_state` for every group, then
/// each of `ana_group_states`.
pub fn listener_ana_states(listener: &ListenerConfig) -> Vec<(AnaGroups, AnaState)> {
    let groups = listener.ana_group_states.iter().map(|(&group, &state)| (AnaGroups::One(group), state));
    std::iter::once((AnaGroups::All, listener.ana_state)).chain(groups).collect()
}

/// Each reactor's I/O engine as `config` sizes it: large buffers hold the MDTS (at least the default 1 MiB).
pub fn engine_config(config: &TargetConfig) -> EngineConfig {
    EngineConfig {
        buffer_size: usize::try_from(config.limits.mdts).unwrap_or(usize::MAX).max(EngineConfig::default().buffer_size),
        discard_queue_depth: config.reactors.discard_queue_depth,
        defer_task_work: config.reactors.socket_io == nvmf_config::target::SocketIoMode::IoUring,
        send_zero_copy_bytes: config.reactors.send_zero_copy_bytes,
        ..EngineConfig::default()
    }
}

/// Open the storage of every namespace, start `config.reactors.threads` reactors and listen on every listener.
pub fn start(config: &TargetConfig) -> Result<RunningTarget, StartError> {
    let mut storages = Vec::new();
    let mut subsystems = Vec::with_capacity(config.subsystems.len());
    let state_dir = usable_state_dir(&config.limits.state_dir);
    for s in &config.subsystems {
        subsystems.push(subsystem_params(s, state_dir.as_deref(), &mut storages, &config.limits)?);
    }

    // Bind before building the model so that the discovery log reports the ports the sockets really got.
    let mut bound = BoundTransportListeners::bind(config)?;

    let limits = &config.limits;
    let target_params = TargetParams {
        mdts: limits.mdts,
        max_queue_entries: limits.max_queue_size,
        max_io_queues: limits.max_io_queues,
        kato_max_ms: limits.keep_alive_max_ms,
        discovery_kato_max_ms: config.discovery.keep_alive_max_ms,
        max_controllers_per_host: limits.max_controllers_per_host,
        kato_min_ms: limits.keep_alive_min_ms,
        connect_timeout_ms: limits.connect_timeout_ms,
        transfer_timeout_ms: limits.transfer_timeout_ms,
        queue_buffer_percent: limits.queue_buffer_percent,
        anonymous_buffer_percent: limits.anonymous_buffer_percent,
        kas: limits.kas(),
        discovery_enabled: config.discovery.enabled,
        listeners: bound.discovery_entries(),
        // Port IDs are the listeners' positions in the file, from 1 (as `BoundTransportListeners::bind` numbers them).
        ana_states: (1..).zip(config.listeners.iter().map(listener_ana_states)).collect(),
        dhchap_dhgroups: limits.dhchap_dhgroups.clone(),
        auth_threads: usize::from(limits.auth_threads),
        auth_queue_depth: usize::try_from(limits.auth_queue_depth).unwrap_or(usize::MAX),
        auth_attempts_per_second: limits.auth_attempts_per_second,
        address_prefix_v4: limits.address_prefix_v4,
        address_prefix_v6: limits.address_prefix_v6,
        ..TargetParams::default()
    };
    let target = Target::new(target_params, subsystems)?;
    bound.share_generated_psks(Arc::clone(target.generated_psks()));
    for subsystem in target.subsystems() {
        for ns in subsystem.namespaces().iter() {
            watch_namespace_resize(&subsystem, ns.nsid(), ns.storage());
        }
    }
    target.discovery_subsystem().set_auth(discovery_auth(config));

    let engine = engine_config(config);
    let placement = (config.reactors.placement == QueuePlacement::IncomingCpu)
        .then(|| IncomingCpuPlacement::new(&config.reactors.cpus).map(Arc::new))
        .flatten();
    let mut reactors = Vec::with_capacity(config.reactors.threads);
    let mut counters = Vec::with_capacity(config.reactors.threads);
    let mut waits = Vec::with_capacity(config.reactors.threads);
    for index in 0..config.reactors.threads {
        let reactor_config = ReactorConfig {
            index,
            cpu: config.reactors.cpus.get(index).copied(),
            engine: engine.clone(),
            poll: config.reactors.poll,
            poll_window: Duration::from_micros(u64::from(config.reactors.poll_window_us)),
            waits: Arc::default(),
        };
        let reactor_waits = Arc::clone(&reactor_config.waits);
        let reactor_counters = TransportCounters::default();
        let group = TransportSet::new(index, &reactor_counters, config.reactors.socket_io, placement.clone());
        match ReactorHandle::spawn(reactor_config, Arc::clone(&target), group) {
            Ok(r) => {
                reactors.push(r);
                counters.push(reactor_counters);
                waits.push(reactor_waits);
            }
            Err(e) => {
                for r in reactors {
                    r.shutdown();
                }
                return Err(e.into());
            }
        }
    }
    let reactors = Arc::new(reactors);
    if let Some(placement) = &placement {
        tracing::info!(cpus = ?config.reactors.cpus, "NVMe/TCP queues placed at Connect on the reactor of their incoming CPU");
        // Inlets, not the handles: the reactors' groups hold the placement, and stopping the reactors takes them
        // back from their Arc.
        let inlets: Vec<_> = reactors.iter().map(ReactorHandle::inlet).collect();
        placement.set_hand_off(Box::new(move |to, connection| {
            inlets.get(to).is_some_and(|inlet| inlet.accept(connection.into()).is_ok())
        }));
    }
    let listeners = match bound.start(&reactors) {
        Ok(listeners) => listeners,
        Err(e) => {
            stop_reactors(reactors);
            return Err(e.into());
        }
    };
    let metrics = match config.metrics.listen {
        None => None,
        Some(listen) => {
            let collector = TargetCollector::of_listeners(Arc::clone(&target), &listeners, &counters)
                .with_reactor_waits(waits)
                .with_placement(placement.clone());
            let rnic = crate::metrics::rnic_collector(config);
            match MetricsServer::start(listen, crate::metrics::registry(collector, rnic)) {
                Ok(server) => Some(server),
                Err(e) => {
                    listeners.stop();
                    stop_reactors(reactors);
                    return Err(e.into());
                }
            }
        }
    };
    Ok(RunningTarget { target, reactors, counters, listeners, storages, metrics, placement, state_dir })
}

fn stop_reactors(reactors: Arc<Vec<ReactorHandle<NewQueuePair>>>) {
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

    /// The state directory reservations persist in: `[target] state_dir` if it was usable at start, else `None`.
    pub fn state_dir(&self) -> Option<&std::path::Path> {
        self.state_dir.as_deref()
    }

    /// The addresses the TCP listeners are bound to, in configuration order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        self.listeners.tcp().local_addrs()
    }

    /// The addresses the RDMA listeners are bound to, in configuration order.
    pub fn rdma_local_addrs(&self) -> &[SocketAddr] {
        self.listeners.rdma_local_addrs()
    }

    /// The TCP acceptor: the listeners it serves.
    pub fn acceptor(&self) -> &Acceptor {
        self.listeners.tcp()
    }

    /// The TCP acceptor, to change its listeners (reload).
    pub fn acceptor_mut(&mut self) -> &mut Acceptor {
        self.listeners.tcp_mut()
    }

    /// What the TLS gate did to the connections of `tls` listeners so far.
    pub fn tls_counters(&self) -> &Arc<crate::tcp::TlsCounters> {
        self.listeners.tls_counters()
    }

    /// Connections every transport's listeners refused so far for `reason` (connection caps).
    pub fn rejected_connections(&self, reason: Refusal) -> u64 {
        self.listeners.admission().rejected(reason)
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

    /// NVMe/TCP connections served now, over all reactors.
    pub fn tcp_connections(&self) -> usize {
        self.counters.iter().map(|c| c.tcp_connections.load(std::sync::atomic::Ordering::Relaxed)).sum()
    }

    /// How each reactor drives its NVMe/TCP sockets (`io_uring`, `epoll`; `None` before it started).
    pub fn tcp_socket_paths(&self) -> Vec<Option<&'static str>> {
        self.counters.iter().map(|c| c.tcp_socket_path.name()).collect()
    }

    /// NVMe/TCP connections moved at Connect to the reactor on the CPU their packets arrive on; `None` unless
    /// `[reactors] placement = "incoming_cpu"`.
    pub fn tcp_connections_moved(&self) -> Option<u64> {
        self.placement.as_ref().map(|p| p.moved())
    }

    /// Data buffers over all reactors' pools: (free, total), as of each reactor's last turn.
    pub fn data_buffers(&self) -> (usize, usize) {
        let load = |a: &AtomicUsize| a.load(std::sync::atomic::Ordering::Relaxed);
        self.counters.iter().fold((0, 0), |(f, t), c| (f + load(&c.buffers.free), t + load(&c.buffers.total)))
    }

    /// Every reactor's live TCP connection count (for status reports on another thread).
    pub fn transport_counters(&self) -> Vec<TransportCounters> {
        self.counters.clone()
    }

    /// Stop: close the listeners, end every association (in-flight storage ops complete first), then flush every
    /// namespace's storage so that acknowledged writes are durable.
    pub fn shutdown(self) {
        let RunningTarget { listeners, reactors, storages, metrics, .. } = self;
        listeners.stop();
        if let Some(metrics) = metrics {
            metrics.stop();
        }
        stop_reactors(reactors);
        tracing::info!("reactors stopped");
        for storage in storages {
            if let Err(e) = storage.flush_blocking() {
                tracing::error!(storage = %storage.describe(), error = %e, "flush at shutdown failed");
            }
        }
        tracing::info!("storage flushed");
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
                NamespaceBackend::Rbd(image) => {
                    format!("nsid {}: rbd:{}", ns.nsid, rbd_spec(image, &config.limits).image_name())
                }
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:state-dir";

    fn start_with(state_dir: &std::path::Path) -> RunningTarget {
        let toml = format!(
            "[target]\nstate_dir = \"{}\"\n[reactors]\nthreads = 1\n[[listener]]\naddress = \"127.0.0.1\"\n\
             [[subsystem]]\nnqn = \"{SUBNQN}\"\nallow_any_host = true\n[[subsystem.namespace]]\nmemory = \"1MiB\"\n",
            state_dir.display()
        );
        let mut config = TargetConfig::from_str(&toml, "state-dir-test.toml").unwrap();
        config.listeners[0].address.set_port(0);
        start(&config).unwrap()
    }

    fn can_persist(running: &RunningTarget) -> bool {
        let subsystem = running.target().subsystem(SUBNQN).unwrap();
        let namespaces = subsystem.namespaces();
        namespaces.get(1).unwrap().reservations().can_persist()
    }

    #[test]
    fn a_missing_state_dir_is_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("a/b");
        let running = start_with(&state_dir);
        assert_eq!(running.state_dir(), Some(state_dir.as_path()));
        assert!(can_persist(&running));
        let mode = std::fs::metadata(&state_dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(state_dir.join("reservations").is_dir());
        running.shutdown();
    }

    #[test]
    fn an_unusable_state_dir_runs_without_ptpl() {
        // Under a regular file: unusable even for root (tests may run as root, where permissions do not bind).
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let state_dir = dir.path().join("file/state");
        assert_eq!(usable_state_dir(&state_dir), None);
        let running = start_with(&state_dir);
        assert_eq!(running.state_dir(), None);
        assert!(!can_persist(&running));
        running.shutdown();
    }

    #[test]
    fn a_read_only_state_dir_is_unusable_for_a_user() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("ro");
        std::fs::create_dir_all(state_dir.join("reservations")).unwrap();
        std::fs::set_permissions(state_dir.join("reservations"), std::fs::Permissions::from_mode(0o500)).unwrap();
        // Root writes anyway; a user cannot.
        let writable = std::fs::write(state_dir.join("reservations/x"), b"").is_ok();
        assert_eq!(usable_state_dir(&state_dir).is_some(), writable);
        std::fs::set_permissions(state_dir.join("reservations"), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}
