//! The controller table and what changes it: [`DaemonState`] (the daemon's identity, the table of [`Entry`]s behind
//! one mutex, and the running configuration a reload replaces: [`Reloader`]), [`connect_once`] (an association and
//! its exports), the configured controllers' [`connector`] threads (retries every `reconnect_delay` until
//! `ctrl_loss_tmo`; started by [`start_connectors`]), and [`end_entry`] (exports stopped, CC.SHN). The mutex is held
//! for map updates and snapshots only: never across a connect, an admin command or a disconnect.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_config::host::{ControllerConfig, HostConfig};
use nvmf_service::notify::ServiceNotifier;

use super::exports::{Heads, RunningExport};
use super::params::{HostDefaults, Params};
use crate::controller::{Controller, ControllerState};

#[derive(Debug)]
pub(super) enum State {
    Connecting { attempts: u32, error: Option<String> },
    Connected(Arc<Controller>),
    Failed(String),
}

#[derive(Debug)]
pub(super) struct Connector {
    pub(super) stop: Sender<()>,
    pub(super) thread: JoinHandle<()>,
}

#[derive(Debug)]
pub(super) struct Entry {
    /// Unique for the daemon's life: a connector that outlived its entry (disconnected, or replaced by a reload
    /// under the same name) finds a different id there and leaves it alone.
    pub(super) id: u64,
    pub(super) name: String,
    /// The `[[controller]]` this entry keeps connected (`None`: a `connect` request's); what a reload compares.
    pub(super) config: Option<ControllerConfig>,
    pub(super) params: Params,
    pub(super) state: State,
    pub(super) exports: Exports,
    pub(super) connector: Option<Connector>,
}

/// A reserved table entry: its key, its id and its name (`nvmf{n}`).
#[derive(Debug)]
pub(super) struct Reserved {
    pub(super) n: u32,
    pub(super) id: u64,
    pub(super) name: String,
}

/// Running exports: `(nsid, server)`.
pub(super) type Exports = Vec<(u32, RunningExport)>;

/// The controller table, keyed by instance number (`nvmf{n}`).
pub(super) type Table = BTreeMap<u32, Entry>;

/// The configuration the daemon runs with, where to re-read it, and whom to tell ([`super::reload`] uses it).
#[derive(Debug)]
pub(super) struct Reloader {
    pub(super) path: Option<PathBuf>,
    pub(super) current: HostConfig,
    pub(super) notifier: Arc<ServiceNotifier>,
}

impl Reloader {
    pub(super) fn new(path: Option<PathBuf>, current: HostConfig, notifier: Arc<ServiceNotifier>) -> Self {
        Reloader { path, current, notifier }
    }

    /// The file a reload re-reads.
    pub(super) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

#[derive(Debug)]
pub(super) struct DaemonState {
    /// The host's identity and how every controller's queue threads run.
    pub(super) host: HostDefaults,
    pub(super) table: Mutex<Table>,
    pub(super) stopping: AtomicBool,
    pub(super) next_id: AtomicU64,
    /// The running configuration and its file; held for a whole reload, so reloads run one at a time.
    pub(super) reloader: Mutex<Reloader>,
    /// The running exports, one per namespace over its paths.
    pub(super) heads: Arc<Heads>,
}

impl DaemonState {
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn reloader(&self) -> MutexGuard<'_, Reloader> {
        self.reloader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserve the lowest free instance number for `params` (a `connect` request's).
    pub(super) fn reserve(&self, params: Params) -> Reserved {
        let entry = self.new_entry(String::new(), params, None);
        Self::reserve_in(&mut self.table(), entry)
    }

    /// Reserve an instance number for `params` (from `config` when it is a configured controller's) unless this
    /// host already has that association (nvme-cli's duplicate check, atomic with the reservation); `Err` names
    /// the existing controller.
    pub(super) fn reserve_unique(&self, params: Params, config: Option<ControllerConfig>) -> Result<Reserved, String> {
        self.reserve_unique_in(&mut self.table(), params, config)
    }

    /// [`DaemonState::reserve_unique`] in a table already locked.
    pub(super) fn reserve_unique_in(
        &self,
        table: &mut Table,
        params: Params,
        config: Option<ControllerConfig>,
    ) -> Result<Reserved, String> {
        match table.values().find(|e| e.params.same_association(&params)) {
            Some(e) => Err(e.name.clone()),
            None => Ok(Self::reserve_in(table, self.new_entry(String::new(), params, config))),
        }
    }

    fn reserve_in(table: &mut Table, mut entry: Entry) -> Reserved {
        let n = (0..).find(|n| !table.contains_key(n)).unwrap_or(u32::MAX);
        entry.name = format!("nvmf{n}");
        let reserved = Reserved { n, id: entry.id, name: entry.name.clone() };
        table.insert(n, entry);
        reserved
    }

    /// A new entry, not connected yet, with a fresh id.
    pub(super) fn new_entry(&self, name: String, params: Params, config: Option<ControllerConfig>) -> Entry {
        Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            name,
            config,
            params,
            state: State::Connecting { attempts: 0, error: None },
            exports: Vec::new(),
            connector: None,
        }
    }

    /// `(live controllers, running exports)`.
    pub(super) fn counts(&self) -> (usize, usize) {
        let table = self.table();
        let live = table
            .values()
            .filter(|e| matches!(&e.state, State::Connected(c) if c.state() == ControllerState::Live))
            .count();
        (live, table.values().map(|e| e.exports.len()).sum())
    }
}

/// Connect once and start the exports (see [`RunningExport::start`]); an export that fails ends the association
/// (all or nothing).
pub(super) fn connect_once(
    heads: &Arc<Heads>,
    params: &Params,
    name: &str,
) -> Result<(Arc<Controller>, Exports), String> {
    let ctrl =
        Arc::new(Controller::connect(params.addr, &params.subnqn, params.options.clone()).map_err(|e| e.to_string())?);
    let mut exports = Vec::new();
    for (nsid, spec) in &params.exports {
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
        match RunningExport::start(heads, spec, &ctrl, nsid, name, &params.options) {
            Ok(x) => exports.push((nsid, x)),
            Err(e) => {
                end_controller(ctrl, exports);
                return Err(format!("exporting namespace {nsid} ({spec}): {e}"));
            }
        }
    }
    Ok((ctrl, exports))
}

/// A configured controller's first association: attempts every `reconnect_delay` until connected, stopped, or
/// `ctrl_loss_tmo` has passed. Signals `first` after the first attempt.
fn connector(shared: &DaemonState, n: u32, stopped: &Receiver<()>, first: Sender<()>) {
    let Some((id, params, name)) = shared.table().get(&n).map(|e| (e.id, e.params.clone(), e.name.clone())) else {
        return;
    };
    let started = Instant::now();
    let mut first = Some(first);
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        let result = connect_once(&shared.heads, &params, &name);
        let mut table = shared.table();
        let Some(entry) = table.get_mut(&n).filter(|e| e.id == id) else {
            // Disconnected, replaced by a reload, or shutting down while connecting.
            drop(table);
            if let Ok((ctrl, exports)) = result {
                end_controller(ctrl, exports);
            }
            return;
        };
        match result {
            Ok((ctrl, exports)) => {
                tracing::info!(name = %entry.name, subnqn = %params.subnqn, traddr = %params.addr, attempts, "controller connected");
                entry.state = State::Connected(ctrl);
                entry.exports = exports;
                return;
            }
            Err(e) => {
                tracing::warn!(name = %entry.name, subnqn = %params.subnqn, traddr = %params.addr, attempts, error = %e,
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

/// Start a connector thread for each configured entry in `entries` (an endpoint that cannot be used fails the
/// entry instead), then wait until each has made its first attempt. `Err`: a thread could not be started (its
/// entry and those after it are left without a connector).
pub(super) fn start_connectors(shared: &Arc<DaemonState>, entries: &[u32]) -> std::io::Result<()> {
    let (first_tx, first_rx) = channel::<()>();
    let mut result = Ok(());
    for &n in entries {
        let Some(params) = shared.table().get(&n).map(|e| e.params.clone()) else { continue };
        if let Err(e) = params.endpoint().resolve() {
            tracing::error!(subnqn = %params.subnqn, traddr = %params.addr, error = %e, "controller not started");
            if let Some(entry) = shared.table().get_mut(&n) {
                entry.state = State::Failed(e.to_string());
            }
            continue;
        }
        let (stop, stopped) = channel::<()>();
        let thread_shared = Arc::clone(shared);
        let first = first_tx.clone();
        match std::thread::Builder::new()
            .name(format!("nvmf{n}-connect"))
            .spawn(move || connector(&thread_shared, n, &stopped, first))
        {
            Ok(thread) => {
                if let Some(entry) = shared.table().get_mut(&n) {
                    entry.connector = Some(Connector { stop, thread });
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    drop(first_tx);
    // Every connector drops its sender after its first attempt.
    while first_rx.recv().is_ok() {}
    result
}

/// Stop an entry's connector and exports and disconnect its controller (CC.SHN).
pub(super) fn end_entry(entry: Entry) {
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
pub(super) fn end_controller(mut ctrl: Arc<Controller>, exports: Exports) {
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

pub(super) fn state_name(state: &State) -> (String, Option<String>) {
    match state {
        State::Connecting { attempts, error } => {
            ("connecting".into(), error.as_ref().map(|e| format!("attempt {attempts}: {e}")))
        }
        State::Failed(e) => ("failed".into(), Some(e.clone())),
        State::Connected(c) => (c.state().name().into(), None),
    }
}
