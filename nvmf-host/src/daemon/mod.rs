//! The host daemon (`nvmf-host run --config FILE`): keeps configured and CLI-requested controllers connected,
//! serves their namespaces as NBD exports, answers the CLI on a control socket, exposes `/metrics`
//! ([`crate::metrics`]) and talks to systemd (`nvmf_service::notify`).
//!
//! - this module: [`Daemon`] (start, status, shutdown) and [`run`] (the `run` command: config, logging,
//!   signals, sd_notify);
//! - `table`: the controller table (name `nvmfN` → parameters, state, exports) behind one mutex, held only for
//!   map updates and snapshots; the connector threads; clean disconnects;
//! - `params`: connection parameters from the configuration or a request; `requests`: the control requests;
//! - [`control`]: the control socket (server and client); [`protocol`]: its JSON messages.
//!
//! Threads: the main thread waits for SIGTERM/SIGINT; one connector thread per configured controller makes the
//! first association, retrying every `reconnect_delay` until `ctrl_loss_tmo` (`-1`: forever; a target that is
//! down never makes the daemon exit), then ends — after that the [`crate::Controller`] reconnects by itself;
//! the control server runs one thread per CLI connection; the metrics endpoint and the sd_notify reporter have
//! a thread each. None of them is on an I/O path. Shutdown disconnects every controller cleanly (CC.SHN), in
//! parallel.

pub mod control;
mod exports;
mod params;
pub mod protocol;
mod requests;
mod table;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use nvmf_config::host::HostConfig;
use nvmf_service::metrics_http::{MetricsError, MetricsServer};

use crate::identity::{HostIdentity, IdentityError};
use crate::metrics::HostCollector;
use control::ControlServer;
use params::config_params;
use requests::{handle, samples};
use table::{connector, end_entry, Connector, Entry, Shared, State, Table};

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
