//! The host daemon (`nvmf-host run --config FILE`): keeps configured and CLI-requested controllers connected,
//! serves their namespaces as NBD exports, answers the CLI on a control socket, exposes `/metrics`
//! ([`crate::metrics`]) and talks to systemd (`nvmf_service::notify`).
//!
//! - this module: [`Daemon`] (start, reload, status, shutdown), [`run`] (the `run` command: config, logging,
//!   signals, sd_notify) and [`check`] (`run --check`);
//! - `table`: the controller table (name `nvmfN` → parameters, state, exports) behind one mutex, held only for
//!   map updates and snapshots; the connector threads; clean disconnects;
//! - `params`: connection parameters from the configuration or a request; `requests`: the control requests;
//! - [`control`]: the control socket (server and client); [`protocol`]: its JSON messages;
//! - [`reload`]: re-reading the file (SIGHUP, `nvmf-host reload`) and applying the difference.
//!
//! Threads: the main thread waits for SIGTERM/SIGINT and runs SIGHUP's reloads; one connector thread per configured
//! controller makes the first association, retrying every `reconnect_delay` until `ctrl_loss_tmo` (`-1`: forever; a
//! target that is down never makes the daemon exit), then ends — after that the [`crate::Controller`] reconnects by
//! itself; the control server runs one thread per CLI connection; the metrics endpoint and the sd_notify reporter have
//! a thread each. None of them is on an I/O path. Shutdown disconnects every controller cleanly (CC.SHN), in parallel.

pub mod control;
mod exports;
pub(crate) mod params;
pub mod protocol;
pub mod reload;
mod requests;
mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nvmf_config::host::{ExportKind, HostConfig};
use nvmf_service::metrics_http::{MetricsError, MetricsServer};
use nvmf_service::notify::ServiceNotifier;
use nvmf_service::rdma_sysfs::RdmaSysfs;

use crate::controller::PollOptions;
use crate::identity::{HostIdentity, IdentityError};
use crate::metrics::HostCollector;
use control::ControlServer;
use params::{config_params, HostDefaults};
use reload::{ReloadError, ReloadSummary};
use requests::{handle, samples};
use table::{end_entry, start_connectors, DaemonState, Entry, Reloader, Table};

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

/// The running daemon.
#[derive(Debug)]
pub struct Daemon {
    shared: Arc<DaemonState>,
    control: Option<ControlServer>,
    metrics: Option<MetricsServer>,
}

impl Daemon {
    /// Start from `config`: identity, control socket, metrics endpoint, one connector per configured controller.
    /// Returns after every configured controller has had its first connection attempt (so a service manager
    /// told READY next can order mounts after a reachable target's exports), never failing because a target is
    /// down. `path` is the file `config` was read from (what a reload re-reads; `None`: nothing to re-read);
    /// `notifier` hears a reload's `RELOADING=1` … `READY=1`.
    pub fn start(
        config: &HostConfig,
        path: Option<PathBuf>,
        notifier: Arc<ServiceNotifier>,
    ) -> Result<Daemon, DaemonError> {
        let identity = match (&config.host.hostnqn, config.host.hostid) {
            // Both configured: nothing to read or to generate.
            (Some(hostnqn), Some(hostid)) => HostIdentity { hostnqn: hostnqn.clone(), hostid },
            (nqn, id) => {
                let mut identity = HostIdentity::persistent(Path::new(SYSTEM_IDENTITY_DIR), &config.host.state_dir)?;
                if let Some(n) = nqn {
                    identity.hostnqn.clone_from(n);
                }
                if let Some(id) = id {
                    identity.hostid = id;
                }
                identity
            }
        };
        tracing::info!(hostnqn = %identity.hostnqn, "host identity");
        let queue_cpus = match &config.host.cpus {
            Some(cpus) => (!cpus.is_empty()).then(|| cpus.clone()),
            None => nvmf_service::cpus::allowed()
                .inspect_err(|error| tracing::warn!(%error, "I/O queue threads left unpinned"))
                .ok(),
        };
        let poll = PollOptions { mode: config.host.poll, window: config.host.poll_window };
        let shared = Arc::new(DaemonState {
            host: HostDefaults { identity, poll, queue_cpus },
            table: Mutex::new(Table::new()),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            reloader: Mutex::new(Reloader::new(path, config.clone(), notifier)),
            heads: Arc::default(),
        });
        let handler_shared = Arc::clone(&shared);
        let control = ControlServer::start::<protocol::HostProtocol>(
            &config.host.control_socket,
            Arc::new(move |r| handle(&handler_shared, r)),
        )
        .map_err(|e| DaemonError::Control { path: config.host.control_socket.clone(), reason: e.to_string() })?;
        let metrics = match config.metrics.listen {
            Some(listen) => {
                let sample_shared = Arc::clone(&shared);
                let collector = HostCollector::new(move || samples(&sample_shared));
                Some(MetricsServer::start(listen, crate::metrics::registry(collector, RdmaSysfs::system()))?)
            }
            None => None,
        };
        // The file names each association once (validated), and nothing else is connected yet.
        let entries: Vec<u32> = config
            .controllers
            .iter()
            .filter_map(|c| shared.reserve_unique(config_params(c, &shared.host), Some(c.clone())).ok())
            .map(|r| r.n)
            .collect();
        let daemon = Daemon { shared, control: Some(control), metrics };
        start_connectors(&daemon.shared, &entries).map_err(DaemonError::Thread)?;
        Ok(daemon)
    }

    /// Re-read the configuration file and apply the difference (see [`reload`]).
    pub fn reload(&self) -> Result<ReloadSummary, ReloadError> {
        reload::reload(&self.shared)
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

fn status_line(shared: &DaemonState) -> String {
    let (live, exports) = shared.counts();
    format!("{live} controllers live, {exports} exports")
}

/// `nvmf-host run --config FILE`: load the configuration, start logging, run the daemon until SIGTERM/SIGINT,
/// telling systemd READY, STATUS (`N controllers live, M exports`, with watchdog pings) and STOPPING; SIGHUP
/// reloads the file (a rejected file is logged and changes nothing).
pub fn run(config_path: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use nvmf_service::signals::Request;
    // Absolute: `nvmf-host reload` validates the file the daemon names from its own working directory, and a
    // reload must resolve the file's relative paths as the start did.
    let path = std::path::absolute(config_path).unwrap_or_else(|_| config_path.to_owned());
    let config = HostConfig::from_file(&path)?;
    nvmf_service::logging::init(&config.logging);
    let mut signals = nvmf_service::signals::Signals::new().context("installing signal handlers")?;
    let notifier = Arc::new(ServiceNotifier::from_env().context("$NOTIFY_SOCKET")?);
    let daemon = Daemon::start(&config, Some(path), Arc::clone(&notifier)).context("starting the host daemon")?;
    tracing::info!(control = ?daemon.control_socket(), metrics = ?daemon.metrics_addr(), status = daemon.status(), "ready");
    notifier.notify(&format!("READY=1\nSTATUS={}", daemon.status()));
    let reporter = nvmf_service::notify::StatusReporter::start(Arc::clone(&notifier), daemon.status_fn())?;
    while signals.wait() == Request::Reload {
        // The outcome is logged by the reload itself.
        let _ = daemon.reload();
    }
    notifier.notify("STOPPING=1");
    drop(reporter);
    tracing::info!("shutting down");
    daemon.shutdown();
    Ok(())
}

/// `nvmf-host run --config FILE --check`: load and validate the file as the daemon would, write one line
/// (`FILE: ok: N controllers, M exports (…)`) to `out`, connect nothing. A bad file is the located error.
pub fn check(config_path: &Path, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let config = HostConfig::from_file(config_path)?;
    writeln!(out, "{}: ok: {}", config_path.display(), summary(&config))?;
    Ok(())
}

/// `N controllers, M exports (K NBD, J ublk)`.
fn summary(config: &HostConfig) -> String {
    let exports = config.controllers.iter().flat_map(|c| &c.exports);
    let (nbd, ublk) = exports.fold((0, 0), |(n, u), e| match e.kind {
        ExportKind::Nbd(_) => (n + 1, u),
        ExportKind::Ublk => (n, u + 1),
    });
    format!("{} controllers, {} exports ({nbd} NBD, {ublk} ublk)", config.controllers.len(), nbd + ublk)
}
