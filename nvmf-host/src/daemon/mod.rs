//! The host daemon (`nvmf-host run --config FILE`): keeps configured and CLI-requested controllers connected,
//! serves their namespaces as NBD exports, answers the CLI on a control socket ([`control`], [`protocol`]),
//! exposes `/metrics` ([`crate::metrics`]) and talks to systemd (`nvmf_service::notify`).
//!
//! What it owns: the controller table (name `nvmfN` → connection parameters, state, exports) behind one mutex,
//! held only for map updates and snapshots — never across a connect, an admin command or a disconnect.
//!
//! Threads: the main thread waits for SIGTERM/SIGINT; one connector thread per configured controller makes the
//! first association, retrying every `reconnect_delay` until `ctrl_loss_tmo` (`-1`: forever; a target that is
//! down never makes the daemon exit), then ends — after that the [`Controller`] reconnects by itself; the
//! control server runs one thread per CLI connection; the metrics endpoint and the sd_notify reporter have a
//! thread each. None of them is on an I/O path. Shutdown disconnects every controller cleanly (CC.SHN), in
//! parallel.

pub mod control;
pub mod protocol;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::discovery::{SubsystemType, TransportType};
use nvmf_config::host::{ControllerConfig, HostConfig, NbdEndpoint};
use nvmf_config::target::Transport as ConfigTransport;
use nvmf_service::metrics_http::{MetricsError, MetricsServer};

use crate::cli::{Endpoint, Transport};
use crate::controller::{ConnectOptions, Controller, ControllerState};
use crate::identity::{HostIdentity, IdentityError};
use crate::metrics::{ControllerSample, HostCollector};
use crate::nbd::{NbdExport, NbdListen, NbdOptions};
use control::ControlServer;
use protocol::{
    ConnectAllEntry, ConnectParams, ControlReply, ControlRequest, ControllerView, DisconnectTarget, ExportView,
    NamespaceView,
};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The host identity could not be stored.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The control socket could not be served.
    #[error("control socket {}: {reason}", path.display())]
    Control {
        /// The socket path.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// A connector thread could not be started.
    #[error("starting a connector thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Where the system's nvme-cli identity files live.
const SYSTEM_IDENTITY_DIR: &str = "/etc/nvme";

/// How a controller is reached and what it should export.
#[derive(Debug, Clone)]
struct Params {
    transport: Transport,
    addr: SocketAddr,
    traddr: String,
    trsvcid: String,
    subnqn: String,
    options: ConnectOptions,
    exports: Vec<(Option<u32>, NbdListen)>,
}

impl Params {
    fn endpoint(&self) -> Endpoint {
        Endpoint { transport: self.transport, traddr: self.traddr.clone(), trsvcid: self.trsvcid.clone() }
    }

    /// Same subsystem at the same address, as the same host (what nvme-cli calls a duplicate connect).
    fn same_association(&self, other: &Params) -> bool {
        self.transport == other.transport
            && self.addr == other.addr
            && self.subnqn == other.subnqn
            && self.options.hostnqn == other.options.hostnqn
    }
}

#[derive(Debug)]
enum State {
    Connecting { attempts: u32, error: Option<String> },
    Connected(Arc<Controller>),
    Failed(String),
}

#[derive(Debug)]
struct Connector {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

#[derive(Debug)]
struct Entry {
    name: String,
    params: Params,
    state: State,
    exports: Exports,
    connector: Option<Connector>,
}

/// Running exports: `(nsid, server)`.
type Exports = Vec<(u32, NbdExport)>;

/// The controller table, keyed by instance number (`nvmf{n}`).
type Table = BTreeMap<u32, Entry>;

#[derive(Debug)]
struct Shared {
    identity: HostIdentity,
    table: Mutex<Table>,
    stopping: AtomicBool,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserve the lowest free instance number for `params`.
    fn reserve(&self, params: Params) -> (u32, String) {
        let mut table = self.table();
        let n = (0..).find(|n| !table.contains_key(n)).unwrap_or(u32::MAX);
        let name = format!("nvmf{n}");
        let entry = Entry {
            name: name.clone(),
            params,
            state: State::Connecting { attempts: 0, error: None },
            exports: Vec::new(),
            connector: None,
        };
        table.insert(n, entry);
        (n, name)
    }

    /// `(live controllers, running exports)`.
    fn counts(&self) -> (usize, usize) {
        let table = self.table();
        let live = table
            .values()
            .filter(|e| matches!(&e.state, State::Connected(c) if c.state() == ControllerState::Live))
            .count();
        (live, table.values().map(|e| e.exports.len()).sum())
    }
}

/// The running daemon.
#[derive(Debug)]
pub struct Daemon {
    shared: Arc<Shared>,
    control: Option<ControlServer>,
    metrics: Option<MetricsServer>,
}

impl Daemon {
    /// Start from `config`: identity, control socket, metrics endpoint, one connector per configured controller.
    /// Returns after every configured controller has had its first connection attempt (so a service manager
    /// told READY next can order mounts after a reachable target's exports), never failing because a target is
    /// down.
    pub fn start(config: &HostConfig) -> Result<Daemon, DaemonError> {
        let mut identity = HostIdentity::persistent(Path::new(SYSTEM_IDENTITY_DIR), &config.host.state_dir)?;
        if let Some(n) = &config.host.hostnqn {
            identity.hostnqn.clone_from(n);
        }
        if let Some(id) = config.host.hostid {
            identity.hostid = id;
        }
        tracing::info!(hostnqn = %identity.hostnqn, "host identity");
        let shared = Arc::new(Shared { identity, table: Mutex::new(Table::new()), stopping: AtomicBool::new(false) });
        let handler_shared = Arc::clone(&shared);
        let control = ControlServer::start(&config.host.control_socket, Arc::new(move |r| handle(&handler_shared, r)))
            .map_err(|e| DaemonError::Control { path: config.host.control_socket.clone(), reason: e.to_string() })?;
        let metrics = match config.metrics.listen {
            Some(listen) => {
                let sample_shared = Arc::clone(&shared);
                let collector = HostCollector::new(move || samples(&sample_shared));
                Some(MetricsServer::start(listen, crate::metrics::registry(collector))?)
            }
            None => None,
        };
        let (first_tx, first_rx) = channel::<()>();
        for c in &config.controllers {
            let params = config_params(c, &shared.identity);
            let usable = params.endpoint().resolve();
            let (n, _) = shared.reserve(params);
            if let Err(e) = usable {
                tracing::error!(nqn = %c.nqn, address = %c.socket_addr(), error = %e, "controller not started");
                if let Some(entry) = shared.table().get_mut(&n) {
                    entry.state = State::Failed(e.to_string());
                }
                continue;
            }
            let (stop, stopped) = channel::<()>();
            let thread_shared = Arc::clone(&shared);
            let first = first_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("nvmf{n}-connect"))
                .spawn(move || connector(&thread_shared, n, &stopped, first))
                .map_err(DaemonError::Thread)?;
            if let Some(entry) = shared.table().get_mut(&n) {
                entry.connector = Some(Connector { stop, thread });
            }
        }
        drop(first_tx);
        // Every connector drops its sender after its first attempt.
        while first_rx.recv().is_ok() {}
        Ok(Daemon { shared, control: Some(control), metrics })
    }

    /// The control socket's path.
    pub fn control_socket(&self) -> Option<&Path> {
        self.control.as_ref().map(ControlServer::path)
    }

    /// The metrics endpoint's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// The sd_notify status line: `N controllers live, M exports`.
    pub fn status(&self) -> String {
        status_line(&self.shared)
    }

    /// A function producing [`Daemon::status`] for a reporter thread.
    pub fn status_fn(&self) -> impl Fn() -> String + Send + 'static {
        let shared = Arc::clone(&self.shared);
        move || status_line(&shared)
    }

    /// Stop serving the CLI and metrics, then disconnect every controller (CC.SHN), in parallel.
    pub fn shutdown(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(c) = self.control.take() {
            c.stop();
        }
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        let entries: Vec<Entry> = std::mem::take(&mut *self.shared.table()).into_values().collect();
        std::thread::scope(|s| {
            for e in entries {
                s.spawn(move || end_entry(e));
            }
        });
        tracing::info!("every controller disconnected");
    }
}

fn status_line(shared: &Shared) -> String {
    let (live, exports) = shared.counts();
    format!("{live} controllers live, {exports} exports")
}

fn seconds_opt(v: Option<i64>, default: Option<Duration>) -> Option<Duration> {
    match v {
        Some(s) if s < 0 => None,
        Some(s) => Some(Duration::from_secs(s.unsigned_abs())),
        None => default,
    }
}

fn listen_of(e: &NbdEndpoint) -> NbdListen {
    match e {
        NbdEndpoint::Unix(p) => NbdListen::Unix(p.clone()),
        NbdEndpoint::Tcp(a) => NbdListen::Tcp(*a),
    }
}

fn options_from_config(c: &ControllerConfig, identity: &HostIdentity) -> ConnectOptions {
    ConnectOptions {
        hostnqn: identity.hostnqn.clone(),
        hostid: identity.hostid,
        nr_io_queues: c.nr_io_queues,
        queue_size: c.queue_size,
        keep_alive_tmo: c.keep_alive_tmo,
        hdr_digest: c.hdr_digest,
        data_digest: c.data_digest,
        reconnect_delay: c.reconnect_delay,
        ctrl_loss_tmo: c.ctrl_loss_tmo,
        fast_io_fail_tmo: c.fast_io_fail_tmo,
        ..ConnectOptions::default()
    }
}

fn config_params(c: &ControllerConfig, identity: &HostIdentity) -> Params {
    Params {
        transport: match c.transport {
            ConfigTransport::Tcp => Transport::Tcp,
            ConfigTransport::Rdma => Transport::Rdma,
        },
        addr: c.socket_addr(),
        traddr: c.address.to_string(),
        trsvcid: c.port.to_string(),
        subnqn: c.nqn.clone(),
        options: options_from_config(c, identity),
        exports: c.exports.iter().map(|e| (Some(e.nsid), listen_of(&e.nbd))).collect(),
    }
}

fn params_from_request(p: &ConnectParams, identity: &HostIdentity) -> Result<Params, String> {
    let transport = match p.transport.as_str() {
        "tcp" => Transport::Tcp,
        "rdma" => Transport::Rdma,
        other => return Err(format!("unknown transport {other:?}; allowed: tcp, rdma")),
    };
    let endpoint = Endpoint { transport, traddr: p.traddr.clone(), trsvcid: p.trsvcid.clone() };
    let addr = endpoint.resolve().map_err(|e| e.to_string())?;
    let mut options =
        ConnectOptions { hostnqn: identity.hostnqn.clone(), hostid: identity.hostid, ..Default::default() };
    if let Some(n) = &p.hostnqn {
        options.hostnqn.clone_from(n);
    }
    if let Some(id) = &p.hostid {
        options.hostid = *uuid::Uuid::parse_str(id).map_err(|e| format!("host ID {id:?}: {e}"))?.as_bytes();
    }
    if let Some(n) = p.nr_io_queues {
        options.nr_io_queues = n;
    }
    if let Some(n) = p.queue_size {
        options.queue_size = n;
    }
    if let Some(s) = p.keep_alive_tmo {
        options.keep_alive_tmo = Duration::from_secs(u64::from(s));
    }
    if let Some(s) = p.reconnect_delay {
        options.reconnect_delay = Duration::from_secs(u64::from(s.max(1)));
    }
    options.ctrl_loss_tmo = seconds_opt(p.ctrl_loss_tmo, options.ctrl_loss_tmo);
    options.fast_io_fail_tmo = seconds_opt(p.fast_io_fail_tmo, options.fast_io_fail_tmo);
    options.hdr_digest = p.hdr_digest;
    options.data_digest = p.data_digest;
    let exports = match &p.nbd {
        Some(text) => {
            let listen: NbdListen = text.parse().map_err(|e| format!("--nbd: {e}"))?;
            vec![(p.nbd_nsid, listen)]
        }
        None => Vec::new(),
    };
    Ok(Params {
        transport,
        addr,
        traddr: p.traddr.clone(),
        trsvcid: p.trsvcid.clone(),
        subnqn: p.nqn.clone(),
        options,
        exports,
    })
}

/// Connect once and start the exports (NBD export name `{name}n{nsid}`, e.g. `nvmf0n1`; the empty default name
/// is served too); an export that fails ends the association (all or nothing).
fn connect_once(params: &Params, name: &str) -> Result<(Arc<Controller>, Exports), String> {
    let ctrl =
        Arc::new(Controller::connect(params.addr, &params.subnqn, params.options.clone()).map_err(|e| e.to_string())?);
    let mut exports = Vec::new();
    for (nsid, listen) in &params.exports {
        let nsid = match nsid {
            Some(n) => *n,
            None => match ctrl.namespaces().map(|v| v.first().map(|n| n.nsid)) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    end_controller(ctrl, exports);
                    return Err("the controller has no active namespace to export".into());
                }
                Err(e) => {
                    end_controller(ctrl, exports);
                    return Err(e.to_string());
                }
            },
        };
        let options = NbdOptions { export_name: format!("{name}n{nsid}"), ..NbdOptions::default() };
        match NbdExport::start(Arc::clone(&ctrl), nsid, listen.clone(), options) {
            Ok(x) => exports.push((nsid, x)),
            Err(e) => {
                end_controller(ctrl, exports);
                return Err(format!("exporting namespace {nsid} on {listen}: {e}"));
            }
        }
    }
    Ok((ctrl, exports))
}

/// A configured controller's first association: attempts every `reconnect_delay` until connected, stopped, or
/// `ctrl_loss_tmo` has passed. Signals `first` after the first attempt.
fn connector(shared: &Shared, n: u32, stopped: &std::sync::mpsc::Receiver<()>, first: Sender<()>) {
    let Some((params, name)) = shared.table().get(&n).map(|e| (e.params.clone(), e.name.clone())) else { return };
    let started = Instant::now();
    let mut first = Some(first);
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        let result = connect_once(&params, &name);
        let mut table = shared.table();
        let Some(entry) = table.get_mut(&n) else {
            // Disconnected (or shutting down) while connecting.
            drop(table);
            if let Ok((ctrl, exports)) = result {
                end_controller(ctrl, exports);
            }
            return;
        };
        match result {
            Ok((ctrl, exports)) => {
                tracing::info!(name = %entry.name, subnqn = %params.subnqn, addr = %params.addr, attempts, "controller connected");
                entry.state = State::Connected(ctrl);
                entry.exports = exports;
                return;
            }
            Err(e) => {
                tracing::warn!(name = %entry.name, subnqn = %params.subnqn, addr = %params.addr, attempts, error = %e,
                    "connect failed; retrying in {:?}", params.options.reconnect_delay);
                let gave_up = params.options.ctrl_loss_tmo.is_some_and(|t| started.elapsed() >= t);
                if gave_up {
                    tracing::error!(name = %entry.name, "giving up after ctrl_loss_tmo");
                    entry.state = State::Failed(e);
                    return;
                }
                entry.state = State::Connecting { attempts, error: Some(e) };
            }
        }
        drop(table);
        first.take();
        match stopped.recv_timeout(params.options.reconnect_delay) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Stop an entry's connector and exports and disconnect its controller (CC.SHN).
fn end_entry(entry: Entry) {
    let Entry { name, state, exports, connector, .. } = entry;
    if let Some(c) = connector {
        drop(c.stop);
        let _ = c.thread.join();
    }
    match state {
        State::Connected(ctrl) => {
            end_controller(ctrl, exports);
            tracing::info!(%name, "disconnected");
        }
        _ => drop(exports),
    }
}

/// Stop `exports`, then disconnect `ctrl` once this is the last reference (a `list` or scrape may hold one
/// for a moment).
fn end_controller(mut ctrl: Arc<Controller>, exports: Exports) {
    for (_, x) in exports {
        x.stop();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Arc::try_unwrap(ctrl) {
            Ok(c) => {
                if let Err(e) = c.disconnect() {
                    tracing::warn!(error = %e, "disconnect was not clean");
                }
                return;
            }
            Err(still_shared) if Instant::now() < deadline => {
                ctrl = still_shared;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => {
                tracing::warn!("controller still in use after 5 s; dropping it without a shutdown notification");
                return;
            }
        }
    }
}

fn state_name(state: &State) -> (String, Option<String>) {
    match state {
        State::Connecting { attempts, error } => {
            ("connecting".into(), error.as_ref().map(|e| format!("attempt {attempts}: {e}")))
        }
        State::Failed(e) => ("failed".into(), Some(e.clone())),
        State::Connected(c) => (
            match c.state() {
                ControllerState::Live => "live",
                ControllerState::Reconnecting { .. } => "reconnecting",
                ControllerState::Deleting => "deleting",
                ControllerState::Failed => "failed",
            }
            .into(),
            None,
        ),
    }
}

fn export_view(nsid: u32, x: &NbdExport) -> ExportView {
    ExportView { nsid, nbd: x.local_addr().to_string(), uri: x.uri() }
}

/// What the metrics collector reads (no admin command: a scrape must stay cheap).
fn samples(shared: &Shared) -> Vec<ControllerSample> {
    let table = shared.table();
    table
        .values()
        .map(|e| {
            let (state, _) = state_name(&e.state);
            let (reconnects, queues) = match &e.state {
                State::Connected(c) => {
                    let mut q: Vec<_> = c.admin().map(|a| (0, a.stats())).into_iter().collect();
                    q.extend(c.io_queues().iter().map(|h| (h.qid(), h.stats())));
                    (c.reconnects(), q)
                }
                _ => (0, Vec::new()),
            };
            ControllerSample {
                name: e.name.clone(),
                subnqn: e.params.subnqn.clone(),
                traddr: format!("{}:{}", e.params.traddr, e.params.trsvcid),
                state,
                reconnects,
                exports: e.exports.len(),
                queues,
            }
        })
        .collect()
}

fn list(shared: &Shared) -> Vec<ControllerView> {
    let snapshot: Vec<(ControllerView, Option<Arc<Controller>>)> = shared
        .table()
        .values()
        .map(|e| {
            let (state, error) = state_name(&e.state);
            let ctrl = match &e.state {
                State::Connected(c) => Some(Arc::clone(c)),
                _ => None,
            };
            let view = ControllerView {
                name: e.name.clone(),
                state,
                transport: match e.params.transport {
                    Transport::Tcp => "tcp".into(),
                    Transport::Rdma => "rdma".into(),
                },
                traddr: e.params.traddr.clone(),
                trsvcid: e.params.trsvcid.clone(),
                subnqn: e.params.subnqn.clone(),
                hostnqn: e.params.options.hostnqn.clone(),
                cntlid: None,
                model: None,
                serial: None,
                io_queues: 0,
                reconnects: 0,
                error,
                namespaces: Vec::new(),
                exports: e.exports.iter().map(|(nsid, x)| export_view(*nsid, x)).collect(),
            };
            (view, ctrl)
        })
        .collect();
    // Identify runs outside the table lock.
    snapshot
        .into_iter()
        .map(|(mut view, ctrl)| {
            if let Some(c) = ctrl {
                let info = c.info();
                view.cntlid = Some(info.cntlid);
                view.model = Some(info.model.clone());
                view.serial = Some(info.serial.clone());
                view.io_queues = info.io_queues;
                view.reconnects = c.reconnects();
                match c.namespaces() {
                    Ok(ns) => {
                        view.namespaces = ns
                            .iter()
                            .map(|n| NamespaceView {
                                nsid: n.nsid,
                                block_size: n.block_size,
                                blocks: n.blocks,
                                size: n.blocks.saturating_mul(u64::from(n.block_size)),
                            })
                            .collect();
                    }
                    Err(e) => view.error = Some(format!("listing namespaces: {e}")),
                }
            }
            view
        })
        .collect()
}

/// `connect`: one attempt, like `nvme connect` (the Controller reconnects by itself once it is up).
fn connect(shared: &Shared, p: &ConnectParams) -> ControlReply {
    let params = match params_from_request(p, &shared.identity) {
        Ok(params) => params,
        Err(message) => return ControlReply::Error { message },
    };
    if !p.duplicate_connect {
        let existing = shared.table().values().find(|e| e.params.same_association(&params)).map(|e| e.name.clone());
        if let Some(name) = existing {
            return ControlReply::Error {
                message: format!(
                    "{} at {} is already connected as {name} (--duplicate-connect for another association)",
                    params.subnqn, params.addr
                ),
            };
        }
    }
    let (n, name) = shared.reserve(params.clone());
    match connect_once(&params, &name) {
        Ok((ctrl, exports)) => {
            let views = exports.iter().map(|(nsid, x)| export_view(*nsid, x)).collect();
            let mut table = shared.table();
            match table.get_mut(&n) {
                Some(entry) if !shared.stopping.load(Ordering::SeqCst) => {
                    entry.state = State::Connected(ctrl);
                    entry.exports = exports;
                    tracing::info!(%name, subnqn = %params.subnqn, addr = %params.addr, "connected (control request)");
                    ControlReply::Connected { name, exports: views }
                }
                _ => {
                    drop(table);
                    end_controller(ctrl, exports);
                    ControlReply::Error { message: "the daemon is stopping".into() }
                }
            }
        }
        Err(message) => {
            shared.table().remove(&n);
            ControlReply::Error { message: format!("connecting to {} at {}: {message}", params.subnqn, params.addr) }
        }
    }
}

/// `connect-all`: the discovery log's NVM subsystem entries over TCP that are not connected yet.
fn connect_all(shared: &Shared, p: &ConnectParams) -> ControlReply {
    let params = match params_from_request(p, &shared.identity) {
        Ok(params) => params,
        Err(message) => return ControlReply::Error { message },
    };
    let log = match crate::discovery::discover(params.addr, params.options.clone()) {
        Ok(log) => log,
        Err(e) => return ControlReply::Error { message: format!("discovery at {}: {e}", params.addr) },
    };
    let mut entries = Vec::new();
    for r in &log.records {
        let address = format!("{}:{}", r.traddr, r.trsvcid);
        let mut entry = ConnectAllEntry { subnqn: r.subnqn.clone(), address, name: None, outcome: String::new() };
        if r.subtype != SubsystemType::Nvm {
            entry.outcome = "skipped: not an NVM subsystem".into();
        } else if r.trtype != TransportType::Tcp {
            entry.outcome = "skipped: only tcp is implemented".into();
        } else {
            let existing = shared
                .table()
                .values()
                .find(|e| e.params.subnqn == r.subnqn && e.params.traddr == r.traddr && e.params.trsvcid == r.trsvcid)
                .map(|e| e.name.clone());
            if let Some(name) = existing {
                entry.name = Some(name);
                entry.outcome = "already connected".into();
            } else {
                let request = ConnectParams {
                    traddr: r.traddr.clone(),
                    trsvcid: r.trsvcid.clone(),
                    nqn: r.subnqn.clone(),
                    nbd: None,
                    nbd_nsid: None,
                    ..p.clone()
                };
                match connect(shared, &request) {
                    ControlReply::Connected { name, .. } => {
                        entry.name = Some(name);
                        entry.outcome = "connected".into();
                    }
                    ControlReply::Error { message } => entry.outcome = format!("failed: {message}"),
                    other => entry.outcome = format!("failed: unexpected {other:?}"),
                }
            }
        }
        entries.push(entry);
    }
    ControlReply::ConnectedAll { entries }
}

fn disconnect(shared: &Shared, which: Option<&DisconnectTarget>) -> ControlReply {
    let removed: Vec<Entry> = {
        let mut table = shared.table();
        let keys: Vec<u32> = table
            .iter()
            .filter(|(_, e)| match which {
                None => true,
                Some(DisconnectTarget::Nqn(nqn)) => &e.params.subnqn == nqn,
                Some(DisconnectTarget::Name(name)) => &e.name == name,
            })
            .map(|(k, _)| *k)
            .collect();
        keys.iter().filter_map(|k| table.remove(k)).collect()
    };
    if removed.is_empty() {
        if let Some(w) = which {
            let what = match w {
                DisconnectTarget::Nqn(n) => format!("subsystem NQN {n}"),
                DisconnectTarget::Name(n) => format!("controller name {n}"),
            };
            return ControlReply::Error { message: format!("no controller matches {what}") };
        }
    }
    let names = removed.iter().map(|e| e.name.clone()).collect();
    std::thread::scope(|s| {
        for e in removed {
            s.spawn(move || end_entry(e));
        }
    });
    ControlReply::Disconnected { names }
}

/// Answer one control request (on the control connection's thread).
fn handle(shared: &Shared, request: ControlRequest) -> ControlReply {
    if shared.stopping.load(Ordering::SeqCst) {
        return ControlReply::Error { message: "the daemon is stopping".into() };
    }
    match request {
        ControlRequest::Connect(p) => connect(shared, &p),
        ControlRequest::ConnectAll(p) => connect_all(shared, &p),
        ControlRequest::Disconnect(which) => disconnect(shared, Some(&which)),
        ControlRequest::DisconnectAll => disconnect(shared, None),
        ControlRequest::List => ControlReply::List { controllers: list(shared) },
    }
}

/// `nvmf-host run --config FILE`: load the configuration, start logging, run the daemon until SIGTERM/SIGINT,
/// telling systemd READY, STATUS (`N controllers live, M exports`, with watchdog pings) and STOPPING.
pub fn run(config_path: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let config = HostConfig::from_file(config_path)?;
    nvmf_service::logging::init(&config.logging);
    let signals = nvmf_service::signals::Signals::new().context("installing signal handlers")?;
    let notifier = Arc::new(nvmf_service::notify::ServiceNotifier::from_env().context("$NOTIFY_SOCKET")?);
    let daemon = Daemon::start(&config).context("starting the host daemon")?;
    tracing::info!(control = ?daemon.control_socket(), metrics = ?daemon.metrics_addr(), status = daemon.status(), "ready");
    notifier.notify(&format!("READY=1\nSTATUS={}", daemon.status()));
    let reporter = nvmf_service::notify::StatusReporter::start(Arc::clone(&notifier), daemon.status_fn())?;
    signals.wait_for_termination();
    notifier.notify("STOPPING=1");
    drop(reporter);
    tracing::info!("shutting down");
    daemon.shutdown();
    Ok(())
}
