//! Live reconfiguration of the host daemon (SIGHUP, or `nvmf-host reload` over the control socket): re-read the
//! configuration file, validate it whole, and apply the difference to the configured controllers without
//! touching the others (`reload`). `nvmf-host reload` asks for one over the control socket.
//!
//! A configured controller is known by its association: transport, address, port and subsystem NQN (the host
//! NQN is the daemon's for all of them). Against the running configuration a reload:
//! - connects a controller the file adds (the daemon's retry policy: a connector thread, like at start; the
//!   reload returns after its first attempt);
//! - stops the exports of a controller the file no longer names and disconnects it (CC.SHN);
//! - reconnects, under the same name, a controller whose connect options changed (queues, queue size,
//!   timeouts, digests): they are negotiated at connect time, so the association is ended cleanly and made again
//!   with the new options — its exports go away meanwhile;
//! - starts and stops the exports added to or removed from a controller that is kept and live, leaving its
//!   association and its other exports alone (a controller not connected yet is restarted with the new list).
//!
//! Controllers connected by a `connect` request are not the file's and are never touched (a file's controller
//! that such a request already connected is reported, not connected twice); a file's controller ended by a
//! `disconnect` request is connected again by the next reload, as the file still names it. `[host]`,
//! `[metrics]` and `[logging]` changes need a restart: they are reported and left as they run. A file that does
//! not read or validate is rejected whole before anything changes. Runs on the thread that asked (main for
//! SIGHUP, a control connection's thread for `reload`), one reload at a time (the `Reloader` mutex); it blocks
//! on disconnects, exports and first connect attempts, never holding the table lock across them.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvmf_config::host::{ControllerConfig, ExportConfig, HostConfig};
use nvmf_config::ConfigError;
use nvmf_service::notify::reloading;

use super::exports::{ExportSpec, RunningExport};
use super::params::config_params;
use super::table::{end_entry, start_connectors, state_name, DaemonState, Entry, Exports, State};
use crate::controller::{ConnectOptions, Controller};

/// What a reload changed, one line per controller touched (and one for the changes left for a restart).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    lines: Vec<String>,
}

impl ReloadSummary {
    /// The lines (`no changes` when nothing changed).
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    fn push(&mut self, line: String) {
        tracing::info!("reload: {line}");
        self.lines.push(line);
    }
}

impl fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines.join("\n"))
    }
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The daemon was started without a file.
    #[error("the daemon was started without a configuration file: nothing to re-read")]
    NoFile,
    /// The file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The daemon is shutting down.
    #[error("the daemon is stopping")]
    Stopping,
}

/// Re-read the file and apply the difference, telling the service manager `RELOADING=1` … `READY=1`. An invalid
/// file is logged with its located error, returned, and changes nothing.
pub(super) fn reload(shared: &Arc<DaemonState>) -> Result<ReloadSummary, ReloadError> {
    let mut reloader = shared.reloader();
    let Some(path) = reloader.path.clone() else {
        tracing::info!("reload requested, but the daemon was started without a configuration file");
        return Err(ReloadError::NoFile);
    };
    reloader.notifier.notify(&reloading());
    let result = HostConfig::from_file(&path).map_err(ReloadError::from).and_then(|new| {
        let summary = apply(shared, &reloader.current, &new)?;
        Ok((summary, new))
    });
    let result = match result {
        Ok((summary, new)) => {
            reloader.current = new;
            tracing::info!(file = %path.display(), "configuration reloaded");
            Ok(summary)
        }
        Err(e) => {
            tracing::error!("configuration rejected, the running one stays: {e}");
            Err(e)
        }
    };
    reloader.notifier.notify("READY=1");
    result
}

/// The association a configured controller is known by.
fn same_controller(a: &ControllerConfig, b: &ControllerConfig) -> bool {
    a.transport == b.transport && a.socket_addr() == b.socket_addr() && a.nqn == b.nqn
}

fn describe(c: &ControllerConfig) -> String {
    format!("{} at {}://{}", c.nqn, c.transport, c.socket_addr())
}

fn describe_export(e: &ExportConfig) -> String {
    format!("namespace {} ({})", e.nsid, ExportSpec::from(&e.kind))
}

/// The connect options that differ (the keys of `[[controller]]`).
fn changed_options(old: &ControllerConfig, new: &ControllerConfig) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut check = |differs: bool, key| {
        if differs {
            changed.push(key);
        }
    };
    check(old.nr_io_queues != new.nr_io_queues, "nr_io_queues");
    check(old.queue_size != new.queue_size, "queue_size");
    check(old.keep_alive_tmo != new.keep_alive_tmo, "keep_alive_tmo");
    check(old.reconnect_delay != new.reconnect_delay, "reconnect_delay");
    check(old.ctrl_loss_tmo != new.ctrl_loss_tmo, "ctrl_loss_tmo");
    check(old.fast_io_fail_tmo != new.fast_io_fail_tmo, "fast_io_fail_tmo");
    check(old.hdr_digest != new.hdr_digest, "hdr_digest");
    check(old.data_digest != new.data_digest, "data_digest");
    check(old.disable_sqflow != new.disable_sqflow, "disable_sqflow");
    check(old.iopolicy != new.iopolicy, "iopolicy");
    check(old.path_retries != new.path_retries, "path_retries");
    let tls = |c: &ControllerConfig| (c.tls_key.clone(), c.tls_identity_version, c.tls_compat);
    check(tls(old) != tls(new), "tls");
    check(old.concat != new.concat, "concat");
    // A key added to the schema but not to the list above still counts as a change.
    let without_exports = |c: &ControllerConfig| ControllerConfig { exports: Vec::new(), ..c.clone() };
    if changed.is_empty() && without_exports(old) != without_exports(new) {
        changed.push("options");
    }
    changed
}

/// The sections applied only at start that differ.
fn ignored_changes(old: &HostConfig, new: &HostConfig) -> Vec<&'static str> {
    let mut ignored = Vec::new();
    let (a, b) = (&old.host, &new.host);
    for (differs, key) in [
        (a.hostnqn != b.hostnqn, "host.hostnqn"),
        (a.hostid != b.hostid, "host.hostid"),
        (a.state_dir != b.state_dir, "host.state_dir"),
        (a.control_socket != b.control_socket, "host.control_socket"),
        (a.poll != b.poll, "host.poll"),
        (a.poll_window != b.poll_window, "host.poll_window_us"),
        (a.cpus != b.cpus, "host.cpus"),
        (old.metrics != new.metrics, "metrics"),
        (old.logging != new.logging, "logging"),
    ] {
        if differs {
            ignored.push(key);
        }
    }
    ignored
}

/// Export changes on a kept, live controller.
struct ExportChange {
    n: u32,
    id: u64,
    name: String,
    ctrl: Arc<Controller>,
    options: ConnectOptions,
    stop: Exports,
    start: Vec<ExportConfig>,
}

/// Apply the difference between `old` (running) and `new`. Nothing here can reject the file: what fails at run
/// time (a connect, an export) is reported in its line and left to the retry policy or the next reload.
fn apply(shared: &Arc<DaemonState>, old: &HostConfig, new: &HostConfig) -> Result<ReloadSummary, ReloadError> {
    let mut summary = ReloadSummary::default();
    // Entries to end (removed, or the old association of a reconnected controller), and what to start after.
    let mut ended: Vec<Entry> = Vec::new();
    let mut connect: Vec<(u32, String)> = Vec::new();
    let mut exports: Vec<ExportChange> = Vec::new();
    {
        let mut table = shared.table();
        if shared.stopping.load(Ordering::SeqCst) {
            return Err(ReloadError::Stopping);
        }
        let configured: Vec<u32> = table.iter().filter(|(_, e)| e.config.is_some()).map(|(n, _)| *n).collect();
        for n in configured {
            let Some(entry) = table.get_mut(&n) else { continue };
            let Some(running) = entry.config.clone() else { continue };
            let Some(wanted) = new.controllers.iter().find(|c| same_controller(c, &running)) else {
                if let Some(e) = table.remove(&n) {
                    summary.push(format!("removed {}: {}", e.name, describe(&running)));
                    ended.push(e);
                }
                continue;
            };
            if *wanted == running {
                continue;
            }
            let changed = changed_options(&running, wanted);
            let params = config_params(wanted, &shared.host);
            match &entry.state {
                State::Connected(ctrl) if changed.is_empty() => {
                    let stop_nsids: Vec<u32> =
                        running.exports.iter().filter(|e| !wanted.exports.contains(e)).map(|e| e.nsid).collect();
                    let (stop, keep) =
                        std::mem::take(&mut entry.exports).into_iter().partition(|(nsid, _)| stop_nsids.contains(nsid));
                    entry.exports = keep;
                    exports.push(ExportChange {
                        n,
                        id: entry.id,
                        name: entry.name.clone(),
                        ctrl: Arc::clone(ctrl),
                        options: params.options.clone(),
                        stop,
                        start: wanted.exports.iter().filter(|e| !running.exports.contains(e)).cloned().collect(),
                    });
                    entry.params = params;
                    entry.config = Some(wanted.clone());
                }
                _ => {
                    let why = if changed.is_empty() {
                        "exports changed while not connected".to_owned()
                    } else {
                        format!("changed {}", changed.join(", "))
                    };
                    let fresh = shared.new_entry(entry.name.clone(), params, Some(wanted.clone()));
                    if let Some(e) = table.insert(n, fresh) {
                        connect.push((n, format!("reconnected {}: {} ({why})", e.name, describe(wanted))));
                        ended.push(e);
                    }
                }
            }
        }
        for c in &new.controllers {
            let known = table.values().any(|e| e.config.as_ref().is_some_and(|r| same_controller(r, c)));
            if known {
                continue;
            }
            match shared.reserve_unique_in(&mut table, config_params(c, &shared.host), Some(c.clone())) {
                Ok(r) => connect.push((r.n, format!("added {}: {}", r.name, describe(c)))),
                Err(existing) => summary.push(format!(
                    "not added: {}: already connected as {existing} by a connect request (disconnect it, then reload)",
                    describe(c)
                )),
            }
        }
    }
    // Old associations end first: their NBD sockets and ublk devices are free again for what starts next.
    std::thread::scope(|s| {
        for e in ended {
            s.spawn(move || end_entry(e));
        }
    });
    for change in exports {
        apply_exports(shared, change, &mut summary);
    }
    let entries: Vec<u32> = connect.iter().map(|(n, _)| *n).collect();
    if let Err(e) = start_connectors(shared, &entries) {
        tracing::error!(error = %e, "starting a connector thread failed");
        let mut table = shared.table();
        for n in &entries {
            if let Some(entry) = table.get_mut(n).filter(|e| e.connector.is_none()) {
                if matches!(entry.state, State::Connecting { attempts: 0, .. }) {
                    entry.state = State::Failed(format!("starting a connector thread: {e}"));
                }
            }
        }
    }
    for (n, line) in connect {
        let state = shared.table().get(&n).map(|e| state_name(&e.state));
        let outcome = match state {
            Some((state, Some(error))) => format!("{state}: {error}"),
            Some((state, None)) => state,
            None => "disconnected meanwhile".to_owned(),
        };
        summary.push(format!("{line}: {outcome}"));
    }
    let ignored = ignored_changes(old, new);
    if !ignored.is_empty() {
        summary.push(format!("not applied, restart to apply: {}", ignored.join(", ")));
    }
    if summary.lines.is_empty() {
        summary.lines.push("no changes".to_owned());
    }
    Ok(summary)
}

/// Stop the exports a kept controller no longer has, start its new ones, and put them in its entry (unless it
/// was disconnected meanwhile: then they stop again). An export that fails to start is left out of the entry's
/// running configuration, so the next reload of the same file tries it again.
fn apply_exports(shared: &DaemonState, change: ExportChange, summary: &mut ReloadSummary) {
    let ExportChange { n, id, name, ctrl, options, stop, start } = change;
    for (nsid, x) in stop {
        let what = x.view(nsid).address;
        x.stop();
        summary.push(format!("{name}: export of namespace {nsid} at {what} stopped"));
    }
    let mut started = Vec::new();
    let mut failed = Vec::new();
    for e in &start {
        let spec = ExportSpec::from(&e.kind);
        match RunningExport::start(&shared.heads, &spec, &ctrl, e.nsid, &name, &options) {
            Ok(x) => {
                summary.push(format!("{name}: export of {} started", describe_export(e)));
                started.push((e.nsid, x));
            }
            Err(error) => {
                tracing::error!(%name, nsid = e.nsid, %error, "starting an export failed");
                summary.push(format!("{name}: export of {} failed: {error}", describe_export(e)));
                failed.push(e.nsid);
            }
        }
    }
    let mut table = shared.table();
    match table.get_mut(&n).filter(|e| e.id == id) {
        Some(entry) => {
            entry.exports.extend(started);
            if let Some(c) = entry.config.as_mut() {
                c.exports.retain(|e| !failed.contains(&e.nsid));
            }
            entry.params.exports.retain(|(nsid, _)| nsid.is_none_or(|n| !failed.contains(&n)));
        }
        None => {
            drop(table);
            started.into_iter().for_each(|(_, x)| x.stop());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> HostConfig {
        HostConfig::from_str(text, "<test>").unwrap()
    }

    const ONE: &str =
        "[[controller]]\naddress = \"127.0.0.1\"\nnqn = \"nqn.2024-01.io.example:one\"\nnr_io_queues = 1\n";

    #[test]
    fn options_that_changed_are_named_and_exports_are_not_options() {
        let old = config(ONE);
        let new =
            config(&format!("{ONE}queue_size = 64\nhdr_digest = true\n[[controller.export]]\nnsid = 1\nublk = true\n"));
        let (a, b) = (&old.controllers[0], &new.controllers[0]);
        assert!(same_controller(a, b));
        assert_eq!(changed_options(a, b), ["queue_size", "hdr_digest"]);
        let exports_only = config(&format!("{ONE}[[controller.export]]\nnsid = 1\nublk = true\n"));
        assert!(changed_options(a, &exports_only.controllers[0]).is_empty());
        assert_ne!(*a, exports_only.controllers[0]);
        // A TLS key added, rotated or derived differently reconnects the controller with it.
        let key = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let tls = config(&format!("{ONE}tls_key = \"{key}\"\n"));
        assert_eq!(changed_options(a, &tls.controllers[0]), ["tls"]);
        let v0 = config(&format!("{ONE}tls_key = \"{key}\"\ntls_identity_version = 0\n"));
        assert_eq!(changed_options(&tls.controllers[0], &v0.controllers[0]), ["tls"]);
        let elsewhere = config(&ONE.replace("127.0.0.1", "127.0.0.2"));
        assert!(!same_controller(a, &elsewhere.controllers[0]));
        let other_port = config(&format!("{ONE}port = 4421\n"));
        assert!(!same_controller(a, &other_port.controllers[0]));
        assert_eq!(describe(a), "nqn.2024-01.io.example:one at tcp://127.0.0.1:4420");
    }

    #[test]
    fn start_only_sections_are_reported() {
        let old = config(ONE);
        assert!(ignored_changes(&old, &old).is_empty());
        let new = config(&format!(
            "[host]\ncontrol_socket = \"/run/x.sock\"\n[metrics]\nlisten = \"127.0.0.1:9656\"\n[logging]\nformat = \"json\"\n{ONE}"
        ));
        assert_eq!(ignored_changes(&old, &new), ["host.control_socket", "metrics", "logging"]);
        let polling = config(&format!("[host]\npoll = \"busy\"\npoll_window_us = 50\ncpus = [0]\n{ONE}"));
        assert_eq!(ignored_changes(&old, &polling), ["host.poll", "host.poll_window_us", "host.cpus"]);
    }
}
