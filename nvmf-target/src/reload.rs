//! Live reconfiguration (SIGHUP): re-read the configuration file, validate it, and apply the difference to the
//! running target — subsystems, namespaces and host access — without touching unaffected associations. Changes
//! that need a restart (listeners, `[target]`, `[reactors]`, …) are logged and left as they run.
//!
//! Runs on the main thread between signals; it may block on opening storage and flushing removed namespaces, never
//! on a reactor. Everything that can fail (reading, validating, opening new storage) happens before the first
//! change, so a rejected reload leaves the target exactly as it was.

use std::path::PathBuf;
use std::sync::Arc;

use nvmf_config::target::{NamespaceConfig, SubsystemConfig};
use nvmf_config::TargetConfig;

use crate::backend::Storage;
use crate::controller::{NamespaceParams, SubsystemParams};
use crate::daemon::{namespace_params, subsystem_params, RunningTarget, StartError};
use crate::notify::ServiceNotifier;

/// What a reload did: counts of applied changes, and the keys it left alone.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Subsystems added.
    pub subsystems_added: usize,
    /// Subsystems removed.
    pub subsystems_removed: usize,
    /// Namespaces added (including replacements of changed ones).
    pub namespaces_added: usize,
    /// Namespaces removed (including replacements of changed ones).
    pub namespaces_removed: usize,
    /// Subsystems whose host access changed.
    pub host_access_changed: usize,
    /// Changed configuration keys that need a restart.
    pub ignored: Vec<String>,
}

/// The configuration the target runs with and where to re-read it from.
#[derive(Debug)]
pub struct Reloader {
    path: Option<PathBuf>,
    current: TargetConfig,
}

/// A change prepared before anything is applied (its storage is already open).
enum Change {
    RemoveSubsystem(String),
    AddSubsystem(SubsystemConfig, SubsystemParams),
    SetHosts(String, bool, Vec<String>),
    RemoveNamespace(String, u32),
    AddNamespace(String, NamespaceConfig, NamespaceParams),
}

impl Reloader {
    /// A reloader for a target started from `current`, read from `path` (`None`: quick-start flags, nothing to
    /// re-read).
    pub fn new(path: Option<PathBuf>, current: TargetConfig) -> Self {
        Reloader { path, current }
    }

    /// The configuration as it runs now (what the last reloads applied).
    pub fn current(&self) -> &TargetConfig {
        &self.current
    }

    /// Re-read the file and apply the difference, telling the service manager (`RELOADING=1` … `READY=1`). An
    /// invalid file is logged with its precise error and changes nothing.
    pub fn reload(&mut self, running: &mut RunningTarget, notifier: &ServiceNotifier) {
        let Some(path) = self.path.clone() else {
            tracing::info!("reload requested, but the target runs from quick-start flags: nothing to re-read");
            return;
        };
        // MONOTONIC_USEC= (wanted by Type=notify-reload) is not sent: it needs clock_gettime, i.e. unsafe code.
        notifier.notify("RELOADING=1");
        match TargetConfig::from_file(&path) {
            Err(e) => tracing::error!("configuration rejected, the running one stays: {e}"),
            Ok(new) => match self.apply(&new, running) {
                Ok(summary) => tracing::info!(
                    subsystems_added = summary.subsystems_added,
                    subsystems_removed = summary.subsystems_removed,
                    namespaces_added = summary.namespaces_added,
                    namespaces_removed = summary.namespaces_removed,
                    host_access_changed = summary.host_access_changed,
                    ignored = summary.ignored.len(),
                    "configuration reloaded"
                ),
                Err(e) => tracing::error!("configuration rejected, the running one stays: {e}"),
            },
        }
        notifier.notify("READY=1");
    }

    /// Apply the difference between the running configuration and `new` to `running`. Fails (changing nothing)
    /// when new storage cannot be opened.
    pub fn apply(&mut self, new: &TargetConfig, running: &mut RunningTarget) -> Result<ReloadSummary, StartError> {
        let mut summary = ReloadSummary { ignored: ignored_changes(&self.current, new), ..ReloadSummary::default() };
        for key in &summary.ignored {
            tracing::warn!(key = %key, "configuration change not applied; restart to apply");
        }
        let changes = self.prepare(new)?;
        let target = Arc::clone(running.target());
        for change in changes {
            match change {
                Change::RemoveSubsystem(nqn) => match target.remove_subsystem(&nqn) {
                    Ok(subsystem) => {
                        for ns in subsystem.namespaces().iter() {
                            release(running, ns.storage());
                        }
                        self.current.subsystems.retain(|s| s.nqn != nqn);
                        summary.subsystems_removed += 1;
                    }
                    Err(e) => tracing::error!(subsystem = %nqn, error = %e, "removing the subsystem failed"),
                },
                Change::AddSubsystem(config, params) => {
                    let storages: Vec<Arc<Storage>> =
                        params.namespaces.iter().map(|n| Arc::clone(&n.storage)).collect();
                    match target.add_subsystem(params) {
                        Ok(_) => {
                            storages.into_iter().for_each(|s| running.keep_storage(s));
                            self.current.subsystems.push(config);
                            summary.subsystems_added += 1;
                        }
                        Err(e) => tracing::error!(subsystem = %config.nqn, error = %e, "adding the subsystem failed"),
                    }
                }
                Change::SetHosts(nqn, allow_any_host, hosts) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    match subsystem.set_host_access(allow_any_host, hosts.clone()) {
                        Ok(()) => {
                            if let Some(s) = self.subsystem_mut(&nqn) {
                                s.allow_any_host = allow_any_host;
                                s.hosts = hosts;
                            }
                            // Which subsystems a host may see changed: discovery controllers must say so.
                            target.discovery_changed();
                            summary.host_access_changed += 1;
                        }
                        Err(e) => tracing::error!(subsystem = %nqn, error = %e, "changing host access failed"),
                    }
                }
                Change::RemoveNamespace(nqn, nsid) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    match subsystem.remove_namespace(nsid) {
                        Ok(ns) => {
                            release(running, ns.storage());
                            if let Some(s) = self.subsystem_mut(&nqn) {
                                s.namespaces.retain(|n| n.nsid != nsid);
                            }
                            summary.namespaces_removed += 1;
                        }
                        Err(e) => tracing::error!(subsystem = %nqn, nsid, error = %e, "removing the namespace failed"),
                    }
                }
                Change::AddNamespace(nqn, config, params) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    let storage = Arc::clone(&params.storage);
                    match subsystem.add_namespace(params) {
                        Ok(_) => {
                            running.keep_storage(storage);
                            if let Some(s) = self.subsystem_mut(&nqn) {
                                let pos = s.namespaces.partition_point(|n| n.nsid < config.nsid);
                                s.namespaces.insert(pos, config);
                            }
                            summary.namespaces_added += 1;
                        }
                        Err(e) => {
                            tracing::error!(subsystem = %nqn, nsid = config.nsid, error = %e, "adding the namespace failed");
                        }
                    }
                }
            }
        }
        Ok(summary)
    }

    fn subsystem_mut(&mut self, nqn: &str) -> Option<&mut SubsystemConfig> {
        self.current.subsystems.iter_mut().find(|s| s.nqn == nqn)
    }

    /// Every change from the running configuration to `new`, removals first (so a replaced namespace's NSID is
    /// free again), with the storage of everything added already open.
    fn prepare(&self, new: &TargetConfig) -> Result<Vec<Change>, StartError> {
        let mut removals = Vec::new();
        let mut additions = Vec::new();
        for old in &self.current.subsystems {
            if !new.subsystems.iter().any(|s| s.nqn == old.nqn) {
                removals.push(Change::RemoveSubsystem(old.nqn.clone()));
            }
        }
        for s in &new.subsystems {
            let Some(old) = self.current.subsystems.iter().find(|o| o.nqn == s.nqn) else {
                // Storage opened here is only kept by the running target once the subsystem is added.
                let params = subsystem_params(s, &mut Vec::new())?;
                additions.push(Change::AddSubsystem(s.clone(), params));
                continue;
            };
            if old.allow_any_host != s.allow_any_host || old.hosts != s.hosts {
                additions.push(Change::SetHosts(s.nqn.clone(), s.allow_any_host, s.hosts.clone()));
            }
            for ns in &old.namespaces {
                if s.namespaces.iter().all(|n| n != ns) {
                    removals.push(Change::RemoveNamespace(s.nqn.clone(), ns.nsid));
                }
            }
            for ns in &s.namespaces {
                if old.namespaces.iter().all(|n| n != ns) {
                    additions.push(Change::AddNamespace(s.nqn.clone(), ns.clone(), namespace_params(&s.nqn, ns)?));
                }
            }
        }
        removals.extend(additions);
        Ok(removals)
    }
}

/// Stop flushing `storage` at shutdown and flush it now: its namespace is gone.
fn release(running: &mut RunningTarget, storage: &Arc<Storage>) {
    running.release_storage(storage);
    if let Err(e) = storage.flush_blocking() {
        tracing::error!(storage = %storage.describe(), error = %e, "flush of a removed namespace failed");
    }
}

/// The configuration keys that differ between `old` and `new` but are not applied by a reload.
pub fn ignored_changes(old: &TargetConfig, new: &TargetConfig) -> Vec<String> {
    let mut ignored = Vec::new();
    let mut check = |changed: bool, key: &str| {
        if changed {
            ignored.push(key.to_owned());
        }
    };
    check(old.listeners != new.listeners, "listener");
    check(old.limits != new.limits, "target");
    check(old.reactors != new.reactors, "reactors");
    check(old.discovery != new.discovery, "discovery");
    check(old.metrics != new.metrics, "metrics");
    check(old.logging != new.logging, "logging");
    for s in &new.subsystems {
        let Some(o) = old.subsystems.iter().find(|o| o.nqn == s.nqn) else { continue };
        let nqn = &s.nqn;
        check(o.serial != s.serial, &format!("subsystem {nqn} serial"));
        check(o.model != s.model, &format!("subsystem {nqn} model"));
        check(o.cntlid_min != s.cntlid_min, &format!("subsystem {nqn} cntlid_min"));
        check(o.cntlid_max != s.cntlid_max, &format!("subsystem {nqn} cntlid_max"));
        check(o.max_namespaces != s.max_namespaces, &format!("subsystem {nqn} max_namespaces"));
    }
    ignored
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use nvmf_config::target::NamespaceBackend;

    use super::*;

    const ONE: &str = "nqn.2024-01.io.nvmf-rs:reload-unit-one";
    const TWO: &str = "nqn.2024-01.io.nvmf-rs:reload-unit-two";
    const HOST: &str = "nqn.2024-01.io.nvmf-rs:host-a";

    fn config() -> TargetConfig {
        let text = format!(
            "[reactors]\nthreads = 1\n[[listener]]\naddress = \"127.0.0.1\"\nport = 4420\n\
             [[subsystem]]\nnqn = \"{ONE}\"\n[[subsystem.namespace]]\nmemory = \"1MiB\"\n\
             [[subsystem.namespace]]\nmemory = \"2MiB\"\n\
             [[subsystem]]\nnqn = \"{TWO}\"\n[[subsystem.namespace]]\nmemory = \"1MiB\"\n"
        );
        let mut config = TargetConfig::from_str(&text, "<test>").unwrap();
        config.listeners[0].address.set_port(0);
        config
    }

    fn nsids(running: &RunningTarget, nqn: &str) -> Vec<u32> {
        running.target().subsystem(nqn).unwrap().namespaces().iter().map(|ns| ns.nsid()).collect()
    }

    #[test]
    fn ignored_changes_name_each_key() {
        let old = config();
        assert!(ignored_changes(&old, &old).is_empty());
        let mut new = old.clone();
        new.listeners[0].address.set_port(4421);
        new.limits.mdts *= 2;
        new.reactors.threads = 4;
        new.subsystems[1].serial = "other".to_owned();
        assert_eq!(ignored_changes(&old, &new), ["listener", "target", "reactors", &format!("subsystem {TWO} serial")]);
    }

    #[test]
    fn apply_changes_namespaces_hosts_and_subsystems_in_place() {
        let old = config();
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let one = running.target().subsystem(ONE).unwrap();
        let first = Arc::clone(one.namespaces().get(1).unwrap());

        let mut new = old.clone();
        new.subsystems[0].allow_any_host = false;
        new.subsystems[0].hosts = vec![HOST.to_owned()];
        // Namespace 2 grows (replaced), namespace 1 is untouched, subsystem two goes away.
        new.subsystems[0].namespaces[1].backend = NamespaceBackend::Memory { size: 4 << 20 };
        new.subsystems.pop();
        new.reactors.threads = 2;
        let summary = reloader.apply(&new, &mut running).unwrap();
        assert_eq!(
            summary,
            ReloadSummary {
                subsystems_removed: 1,
                namespaces_added: 1,
                namespaces_removed: 1,
                host_access_changed: 1,
                ignored: vec!["reactors".to_owned()],
                ..ReloadSummary::default()
            }
        );
        assert!(one.host_allowed(HOST) && !one.host_allowed("nqn.2024-01.io.nvmf-rs:host-b"));
        assert_eq!(nsids(&running, ONE), [1, 2]);
        assert!(Arc::ptr_eq(one.namespaces().get(1).unwrap(), &first), "namespace 1 was not replaced");
        assert_eq!(one.namespaces().get(2).unwrap().num_blocks(), 8192, "4 MiB of 512-byte blocks");
        assert!(running.target().subsystem(TWO).is_none());
        // What runs now: the new file, except the ignored key.
        let mut applied = new.clone();
        applied.reactors = old.reactors.clone();
        assert_eq!(reloader.current(), &applied);
        // Applying the same file again changes nothing more.
        let again = reloader.apply(&new, &mut running).unwrap();
        assert_eq!(again, ReloadSummary { ignored: vec!["reactors".to_owned()], ..ReloadSummary::default() });

        // Storage that cannot be opened rejects the whole reload before anything changes.
        let mut bad = new.clone();
        bad.subsystems.push(old.subsystems[1].clone());
        let mut missing = bad.subsystems[0].namespaces[0].clone();
        missing.nsid = 3;
        missing.backend = NamespaceBackend::Path(PathBuf::from("/nonexistent/nvmf-rs-reload-test"));
        bad.subsystems[0].namespaces.push(missing);
        assert!(matches!(reloader.apply(&bad, &mut running), Err(StartError::Storage { nsid: 3, .. })));
        assert_eq!(nsids(&running, ONE), [1, 2]);
        assert!(running.target().subsystem(TWO).is_none(), "the valid part was not applied either");
        assert_eq!(reloader.current(), &applied);
        running.shutdown();
    }
}
