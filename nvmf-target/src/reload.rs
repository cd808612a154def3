//! Live reconfiguration (SIGHUP or `nvmf-target reload`): re-read the configuration file, validate it, and apply the
//! difference to the running target — subsystems, namespaces, host access, TCP listeners and their ANA states — without
//! touching unaffected associations. A TCP listener's ANA state of a group (`ana_state`, or its own in
//! `ana_group_states`) is applied when it differs from the file the target runs with (a state set since by `nvmf-target
//! ana-state` stays otherwise); a namespace whose `ana_group` changed is replaced, like any changed namespace. Changes
//! that need a restart (RDMA listeners, `[target]`, `[reactors]`, …) are logged, reported in [`ReloadSummary::ignored`]
//! and left as they run. Hosts' keys (DH-HMAC-CHAP keys, TLS PSKs) and a listener's `tls` mode apply to the next
//! transactions and connections; secured connections keep the TLS keys they were secured with.
//!
//! Runs on the main thread between requests; it may block on opening storage, binding listeners and flushing
//! removed namespaces, never on a reactor. Everything that can fail (reading, validating, opening new storage,
//! binding new listeners) happens before the first change, so a rejected reload leaves the target exactly as it
//! was.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::nvme::log_page::AnaState;
use nvmf_config::target::{HostKeysConfig, ListenerConfig, NamespaceConfig, SubsystemConfig, Transport};
use nvmf_config::{ConfigError, TargetConfig};
use nvmf_service::notify::reloading;

use crate::backend::Storage;
use crate::controller::ana::{AnaGroups, ANAGRPMAX};
use crate::controller::authentication::SubsystemAuth;
use crate::controller::{ListenerParams, NamespaceParams, SubsystemParams};
use crate::daemon::{
    discovery_auth, listener_ana_states, namespace_params, subsystem_auth, subsystem_params, RunningTarget, StartError,
};
use crate::notify::ServiceNotifier;
use crate::tcp::{ListenerSlot, TcpListenerSpec, TlsKeyring};
use crate::transport::ListenError;

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
    /// Namespaces moved to another ANA group, live (only their `ana_group` changed).
    pub namespaces_moved: usize,
    /// Subsystems whose host access changed.
    pub host_access_changed: usize,
    /// Associations ended because their host is no longer allowed.
    pub associations_revoked: usize,
    /// Subsystems whose authentication settings (hosts' keys, `auth_required`) changed.
    pub auth_changed: usize,
    /// TCP listeners opened.
    pub listeners_added: usize,
    /// TCP listeners closed (the connections they accepted keep running).
    pub listeners_removed: usize,
    /// TCP listeners kept whose settings changed (new connections get the new settings).
    pub listeners_changed: usize,
    /// TCP listeners whose ANA state changed (controllers connected through them get an ANA Change event).
    pub ana_states_changed: usize,
    /// Changed configuration keys that need a restart.
    pub ignored: Vec<String>,
}

impl fmt::Display for ReloadSummary {
    /// One line per kind of change, then the keys left alone; `no changes` when there is nothing to say.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = Vec::new();
        let mut count = |what: &str, parts: &[(usize, &str)]| {
            if parts.iter().any(|(n, _)| *n > 0) {
                let parts: Vec<String> = parts.iter().map(|(n, how)| format!("{n} {how}")).collect();
                lines.push(format!("{what}: {}", parts.join(", ")));
            }
        };
        count("subsystems", &[(self.subsystems_added, "added"), (self.subsystems_removed, "removed")]);
        count(
            "namespaces",
            &[
                (self.namespaces_added, "added"),
                (self.namespaces_removed, "removed"),
                (self.namespaces_moved, "moved to another ANA group"),
            ],
        );
        count(
            "host access",
            &[(self.host_access_changed, "subsystem(s) changed"), (self.associations_revoked, "association(s) ended")],
        );
        count("authentication", &[(self.auth_changed, "subsystem(s) changed (the next transactions use it)")]);
        count(
            "listeners",
            &[
                (self.listeners_added, "added"),
                (self.listeners_removed, "removed"),
                (self.listeners_changed, "changed"),
            ],
        );
        count("ANA states", &[(self.ana_states_changed, "listener(s) changed")]);
        if !self.ignored.is_empty() {
            lines.push(format!("not applied, restart to apply: {}", self.ignored.join(", ")));
        }
        if lines.is_empty() {
            lines.push("no changes".to_owned());
        }
        f.write_str(&lines.join("\n"))
    }
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The target runs from quick-start flags: there is no file to re-read.
    #[error("the target runs from quick-start flags, not a configuration file: nothing to re-read")]
    NoFile,
    /// The file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// New storage or a new listener could not be opened.
    #[error(transparent)]
    Start(#[from] StartError),
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
    /// The subsystem, `allow_any_host`, `hosts` as written, and every allowed host.
    SetHosts(String, bool, Vec<String>, Vec<String>),
    /// The subsystem, its new authentication settings and what the configuration says of them.
    SetAuth(String, SubsystemAuth, Vec<HostKeysConfig>, bool),
    RemoveNamespace(String, u32),
    AddNamespace(String, NamespaceConfig, NamespaceParams),
    /// The subsystem, the namespace, its new ANA group.
    MoveNamespace(String, u32, u32),
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

    /// The file the configuration is re-read from (`None`: quick-start flags).
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// Re-read the file and apply the difference, telling the service manager (`RELOADING=1` … `READY=1`). An
    /// invalid file is logged with its precise error, returned, and changes nothing.
    pub fn reload(
        &mut self,
        running: &mut RunningTarget,
        notifier: &ServiceNotifier,
    ) -> Result<ReloadSummary, ReloadError> {
        let Some(path) = self.path.clone() else {
            tracing::info!("reload requested, but the target runs from quick-start flags: nothing to re-read");
            return Err(ReloadError::NoFile);
        };
        notifier.notify(&reloading());
        let result = TargetConfig::from_file(&path)
            .map_err(ReloadError::from)
            .and_then(|new| self.apply(&new, running).map_err(ReloadError::from));
        match &result {
            Ok(summary) => tracing::info!(
                subsystems_added = summary.subsystems_added,
                subsystems_removed = summary.subsystems_removed,
                namespaces_added = summary.namespaces_added,
                namespaces_removed = summary.namespaces_removed,
                host_access_changed = summary.host_access_changed,
                associations_revoked = summary.associations_revoked,
                auth_changed = summary.auth_changed,
                listeners_added = summary.listeners_added,
                listeners_removed = summary.listeners_removed,
                listeners_changed = summary.listeners_changed,
                ignored = summary.ignored.len(),
                "configuration reloaded"
            ),
            Err(e) => tracing::error!("configuration rejected, the running one stays: {e}"),
        }
        notifier.notify("READY=1");
        result
    }

    /// Apply the difference between the running configuration and `new` to `running`. Fails (changing nothing)
    /// when new storage cannot be opened.
    pub fn apply(&mut self, new: &TargetConfig, running: &mut RunningTarget) -> Result<ReloadSummary, StartError> {
        let mut summary = ReloadSummary { ignored: ignored_changes(&self.current, new), ..ReloadSummary::default() };
        for key in &summary.ignored {
            tracing::warn!(key = %key, "configuration change not applied; restart to apply");
        }
        let changes = self.prepare(new, running.state_dir())?;
        let listeners = self.prepare_listeners(new, running)?;
        // The hosts' TLS keys before the listeners: one that starts requiring TLS below finds the new keys. Only the
        // next handshakes use them; secured connections keep theirs.
        running.acceptor().tls_gate().set_keyring(TlsKeyring::from_config(&new.subsystems));
        let target = Arc::clone(running.target());
        if let Some(plan) = listeners {
            self.apply_listeners(plan, new, running, &mut summary);
        }
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
                    Err(e) => tracing::error!(subnqn = %nqn, error = %e, "removing the subsystem failed"),
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
                        Err(e) => tracing::error!(subnqn = %config.nqn, error = %e, "adding the subsystem failed"),
                    }
                }
                Change::SetAuth(nqn, auth, host_keys, auth_required) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    subsystem.set_auth(auth);
                    if let Some(s) = self.subsystem_mut(&nqn) {
                        s.host_keys = host_keys;
                        s.auth_required = auth_required;
                    }
                    summary.auth_changed += 1;
                }
                Change::SetHosts(nqn, allow_any_host, hosts, allowed) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    match subsystem.set_host_access(allow_any_host, allowed) {
                        Ok(revoked) => {
                            summary.associations_revoked += revoked;
                            if let Some(s) = self.subsystem_mut(&nqn) {
                                s.allow_any_host = allow_any_host;
                                s.hosts = hosts;
                            }
                            // Which subsystems a host may see changed: discovery controllers must say so.
                            target.discovery_changed();
                            summary.host_access_changed += 1;
                        }
                        Err(e) => tracing::error!(subnqn = %nqn, error = %e, "changing host access failed"),
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
                        Err(e) => tracing::error!(subnqn = %nqn, nsid, error = %e, "removing the namespace failed"),
                    }
                }
                Change::MoveNamespace(nqn, nsid, group) => match target.move_namespace_ana_group(&nqn, nsid, group) {
                    Ok(_) => {
                        self.namespace_moved(&nqn, nsid, group);
                        summary.namespaces_moved += 1;
                    }
                    Err(e) => tracing::error!(subnqn = %nqn, nsid, group, error = %e, "moving the namespace failed"),
                },
                Change::AddNamespace(nqn, config, params) => {
                    let Some(subsystem) = target.subsystem(&nqn) else { continue };
                    let storage = Arc::clone(&params.storage);
                    match subsystem.add_namespace(params) {
                        Ok(_) => {
                            crate::daemon::watch_namespace_resize(&subsystem, config.nsid, &storage);
                            running.keep_storage(storage);
                            if let Some(s) = self.subsystem_mut(&nqn) {
                                let pos = s.namespaces.partition_point(|n| n.nsid < config.nsid);
                                s.namespaces.insert(pos, config);
                            }
                            summary.namespaces_added += 1;
                        }
                        Err(e) => {
                            tracing::error!(subnqn = %nqn, nsid = config.nsid, error = %e, "adding the namespace failed");
                        }
                    }
                }
            }
        }
        // The discovery controller's keys follow the subsystems' (and `[discovery] auth_required`).
        self.current.discovery.auth_required = new.discovery.auth_required;
        target.discovery_subsystem().set_auth(discovery_auth(&self.current));
        Ok(summary)
    }

    /// The TCP listeners of `new`, each kept (matched by address) or newly bound; `None` when they are as they
    /// run. Fails, changing nothing, when a new listener cannot be bound.
    fn prepare_listeners(
        &self,
        new: &TargetConfig,
        running: &RunningTarget,
    ) -> Result<Option<ListenerPlan>, StartError> {
        if tcp_listeners(&self.current).eq(tcp_listeners(new)) {
            return Ok(None);
        }
        let acceptor = running.acceptor();
        // New port IDs follow every ID in use (RDMA listeners' too): none is reused while connections accepted
        // through a closed listener may still name it.
        let mut last_port_id = running.target().listeners().iter().map(|l| l.port_id).max().unwrap_or(0);
        let mut plan = ListenerPlan::default();
        for l in tcp_listeners(new) {
            let unsupported = || StartError::Listener(ListenError::UnsupportedTransport(l.to_string()));
            match acceptor.listeners().iter().find(|(spec, _)| spec.address == l.address) {
                Some((spec, local)) => {
                    let kept =
                        TcpListenerSpec::from_config(l, spec.port_id, &self.current.limits).ok_or_else(unsupported)?;
                    if !self.current.listeners.contains(l) {
                        plan.changed += 1;
                    }
                    let before = self.current.listeners.iter().find(|o| o.address == l.address);
                    let changes = ana_changes(before, l);
                    if !changes.is_empty() {
                        plan.ana.push((spec.port_id, changes));
                    }
                    plan.params.push(kept.discovery_entry(*local));
                    plan.slots.push(ListenerSlot::Keep(kept));
                }
                None => {
                    last_port_id = last_port_id.checked_add(1).ok_or_else(unsupported)?;
                    let spec =
                        TcpListenerSpec::from_config(l, last_port_id, &self.current.limits).ok_or_else(unsupported)?;
                    let bound = acceptor.bind(&spec).map_err(ListenError::from)?;
                    plan.ana.push((last_port_id, listener_ana_states(l)));
                    plan.params.push(spec.discovery_entry(bound.local_addr()));
                    plan.slots.push(ListenerSlot::Open(bound));
                    plan.added += 1;
                }
            }
        }
        plan.removed = acceptor
            .listeners()
            .iter()
            .filter(|(spec, _)| tcp_listeners(new).all(|l| l.address != spec.address))
            .count();
        Ok(Some(plan))
    }

    /// Switch the acceptor and the discovery log to the listeners of `plan` (the TCP listeners of `new`).
    fn apply_listeners(
        &mut self,
        plan: ListenerPlan,
        new: &TargetConfig,
        running: &mut RunningTarget,
        summary: &mut ReloadSummary,
    ) {
        let ListenerPlan { slots, params, added, removed, changed, ana } = plan;
        if let Err(e) = running.acceptor_mut().reconfigure(slots) {
            tracing::error!(error = %e, "changing the listeners failed");
            return;
        }
        let target = running.target();
        let mut discovery: Vec<ListenerParams> =
            target.listeners().into_iter().filter(|l| l.trtype != TransportType::Tcp).collect();
        discovery.extend(params);
        discovery.sort_by_key(|l| l.port_id);
        target.set_listeners(discovery);
        for (port_id, changes) in ana {
            match target.set_ana_states(port_id, &changes) {
                Ok(true) => summary.ana_states_changed += 1,
                Ok(false) => {}
                Err(e) => tracing::error!(port_id, error = %e, "changing the ANA state failed"),
            }
        }
        // What runs: the new TCP listeners, and the RDMA listeners as they were.
        let rdma = self.current.listeners.iter().filter(|l| l.transport_type() != Transport::Tcp).cloned();
        self.current.listeners = tcp_listeners(new).cloned().chain(rdma).collect();
        summary.listeners_added = added;
        summary.listeners_removed = removed;
        summary.listeners_changed = changed;
    }

    /// The file moved namespace `nsid` of `nqn` to ANA group `group`. (A move on the control socket leaves the
    /// file's view alone: like a state set with `ana-state`, it stays until the file's `ana_group` changes.)
    fn namespace_moved(&mut self, nqn: &str, nsid: u32, group: u32) {
        if let Some(ns) = self.subsystem_mut(nqn).and_then(|s| s.namespaces.iter_mut().find(|n| n.nsid == nsid)) {
            ns.ana_group = group;
        }
    }

    fn subsystem_mut(&mut self, nqn: &str) -> Option<&mut SubsystemConfig> {
        self.current.subsystems.iter_mut().find(|s| s.nqn == nqn)
    }

    /// Every change from the running configuration to `new`, removals first (so a replaced namespace's NSID is
    /// free again), with the storage of everything added already open.
    fn prepare(&self, new: &TargetConfig, state_dir: Option<&std::path::Path>) -> Result<Vec<Change>, StartError> {
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
                let params = subsystem_params(s, state_dir, &mut Vec::new(), &self.current.limits)?;
                additions.push(Change::AddSubsystem(s.clone(), params));
                continue;
            };
            // Keys first: a host newly allowed with a key must never connect without authenticating.
            if old.host_keys != s.host_keys || old.auth_required != s.auth_required {
                let auth = subsystem_auth(s);
                additions.push(Change::SetAuth(s.nqn.clone(), auth, s.host_keys.clone(), s.auth_required));
            }
            if old.allow_any_host != s.allow_any_host || old.allowed_hosts() != s.allowed_hosts() {
                additions.push(Change::SetHosts(s.nqn.clone(), s.allow_any_host, s.hosts.clone(), s.allowed_hosts()));
            }
            // A namespace whose only change is its ANA group moves live; any other change replaces it.
            let moved = |ns: &NamespaceConfig| {
                old.namespaces.iter().find(|n| {
                    n.nsid == ns.nsid && n.ana_group != ns.ana_group && {
                        let mut same = (*n).clone();
                        same.ana_group = ns.ana_group;
                        same == *ns
                    }
                })
            };
            for ns in &old.namespaces {
                let replaced = s.namespaces.iter().all(|n| n != ns)
                    && !s.namespaces.iter().any(|n| n.nsid == ns.nsid && moved(n).is_some());
                if replaced {
                    removals.push(Change::RemoveNamespace(s.nqn.clone(), ns.nsid));
                }
            }
            for ns in &s.namespaces {
                if moved(ns).is_some() {
                    additions.push(Change::MoveNamespace(s.nqn.clone(), ns.nsid, ns.ana_group));
                } else if old.namespaces.iter().all(|n| n != ns) {
                    let mut params = namespace_params(&s.nqn, ns, &self.current.limits)?;
                    params.state_dir = state_dir.map(std::path::Path::to_owned);
                    additions.push(Change::AddNamespace(s.nqn.clone(), ns.clone(), params));
                }
            }
        }
        removals.extend(additions);
        Ok(removals)
    }
}

/// The listeners a reload switches to, already bound, with their discovery log entries.
#[derive(Debug, Default)]
struct ListenerPlan {
    slots: Vec<ListenerSlot>,
    params: Vec<ListenerParams>,
    added: usize,
    removed: usize,
    changed: usize,
    /// The ANA changes to make to these listeners (by port ID): what changed in the file, or all of a new
    /// listener's states.
    ana: Vec<(u16, Vec<(AnaGroups, AnaState)>)>,
}

/// The ANA changes a reload makes to TCP listener `l`: the groups whose state in the file differs from `before`
/// (the listener in the file the target runs with), or all of `l`'s states when there was none. Groups whose state
/// the file did not change keep the one they run with, a state set with `nvmf-target ana-state` since included.
fn ana_changes(before: Option<&ListenerConfig>, l: &ListenerConfig) -> Vec<(AnaGroups, AnaState)> {
    let Some(before) = before else { return listener_ana_states(l) };
    let changed: Vec<(AnaGroups, AnaState)> = (1..=ANAGRPMAX)
        .filter(|&g| before.group_ana_state(g) != l.group_ana_state(g))
        .map(|g| (AnaGroups::One(g), l.group_ana_state(g)))
        .collect();
    // Every group to the same state (`ana_state` changed, no group of its own either side): one change says it.
    if u32::try_from(changed.len()) == Ok(ANAGRPMAX) && changed.iter().all(|&(_, state)| state == l.ana_state) {
        return vec![(AnaGroups::All, l.ana_state)];
    }
    changed
}

/// The TCP listeners of `config`, in file order.
fn tcp_listeners(config: &TargetConfig) -> impl Iterator<Item = &ListenerConfig> {
    config.listeners.iter().filter(|l| l.transport_type() == Transport::Tcp)
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
    // TCP listeners are applied; RDMA listeners are opened at start only.
    let rdma = |c: &TargetConfig| -> Vec<ListenerConfig> {
        c.listeners.iter().filter(|l| l.transport_type() == Transport::Rdma).cloned().collect()
    };
    let (old_rdma, new_rdma) = (rdma(old), rdma(new));
    for l in old_rdma.iter().filter(|l| !new_rdma.contains(l)).chain(new_rdma.iter().filter(|l| !old_rdma.contains(l)))
    {
        check(true, &format!("listener {l}"));
    }
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
        // A TCP listener change is applied, not ignored.
        new.listeners[0].address.set_port(4421);
        new.limits.mdts *= 2;
        new.reactors.threads = 4;
        new.subsystems[1].serial = "other".to_owned();
        assert_eq!(ignored_changes(&old, &new), ["target", "reactors", &format!("subsystem {TWO} serial")]);
        let mut rdma = new.clone();
        rdma.listeners[0].transport = nvmf_config::target::ListenerTransport::Rdma(Default::default());
        assert_eq!(ignored_changes(&new, &rdma)[0], "listener rdma://127.0.0.1:4421");
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

    #[test]
    fn apply_sets_changed_ana_states_and_keeps_those_set_since() {
        let old = config();
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let target = Arc::clone(running.target());
        let state = |group| target.ana().port(1).get(group);
        assert_eq!(state(1), AnaState::Optimized);

        let mut new = old.clone();
        new.listeners[0].ana_state = AnaState::NonOptimized;
        let summary = reloader.apply(&new, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { listeners_changed: 1, ana_states_changed: 1, ..ReloadSummary::default() });
        assert!(summary.to_string().ends_with("ANA states: 1 listener(s) changed"), "{summary}");
        assert_eq!((state(1), state(128)), (AnaState::NonOptimized, AnaState::NonOptimized));

        // A state set on the control socket since stays while the file's does not change.
        target.set_ana_state(1, AnaGroups::One(2), AnaState::Inaccessible).unwrap();
        assert_eq!(reloader.apply(&new, &mut running).unwrap(), ReloadSummary::default());
        assert_eq!(state(2), AnaState::Inaccessible);

        // A namespace's new ANA group moves it, live: the same namespace, the groups' change counts moved.
        let before = Arc::clone(target.subsystem(ONE).unwrap().namespaces().get(2).unwrap());
        let (chgcnt, group2) = (target.ana().chgcnt(), target.ana().group_chgcnt(2));
        let mut regrouped = new.clone();
        regrouped.subsystems[0].namespaces[1].ana_group = 2;
        let summary = reloader.apply(&regrouped, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { namespaces_moved: 1, ..ReloadSummary::default() });
        assert!(summary.to_string().contains("1 moved to another ANA group"), "{summary}");
        let after = Arc::clone(target.subsystem(ONE).unwrap().namespaces().get(2).unwrap());
        assert!(Arc::ptr_eq(&before, &after) && after.ana_group() == 2);
        assert!(target.ana().chgcnt() != chgcnt && target.ana().group_chgcnt(2) != group2);
        // Moved back on the control socket: the file (group 2) then moves nothing until it changes.
        assert!(target.move_namespace_ana_group(ONE, 2, 1).unwrap());
        assert_eq!(reloader.apply(&regrouped, &mut running).unwrap(), ReloadSummary::default());
        assert_eq!(after.ana_group(), 1);
        // Any other change with it still replaces the namespace.
        regrouped.subsystems[0].namespaces[1].ana_group = 3;
        regrouped.subsystems[0].namespaces[1].block_size = 4096;
        let summary = reloader.apply(&regrouped, &mut running).unwrap();
        assert_eq!((summary.namespaces_removed, summary.namespaces_added, summary.namespaces_moved), (1, 1, 0));
        running.shutdown();
    }

    #[test]
    fn apply_sets_the_ana_group_states_the_file_changed() {
        use AnaState::*;
        // Node A of a gateway group: group 1 (and every other) optimized, group 2 non-optimized.
        let mut old = config();
        old.listeners[0].ana_group_states.insert(2, NonOptimized);
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let target = Arc::clone(running.target());
        let states =
            |port: u16, groups: &[u32]| groups.iter().map(|&g| target.ana().port(port).get(g)).collect::<Vec<_>>();
        assert_eq!(states(1, &[1, 2, 3, 128]), [Optimized, NonOptimized, Optimized, Optimized], "as started");

        // Set on the control socket: group 2 optimized, group 3 inaccessible.
        target.set_ana_state(1, AnaGroups::One(2), Optimized).unwrap();
        target.set_ana_state(1, AnaGroups::One(3), Inaccessible).unwrap();
        // The file's ana_state changes; group 2's own state does not: every group but 2 follows the file, in one
        // change, and group 2 keeps the state set since.
        let chgcnt = target.ana().chgcnt();
        let mut new = old.clone();
        new.listeners[0].ana_state = NonOptimized;
        let summary = reloader.apply(&new, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { listeners_changed: 1, ana_states_changed: 1, ..ReloadSummary::default() });
        assert_eq!(states(1, &[1, 2, 3, 128]), [NonOptimized, Optimized, NonOptimized, NonOptimized]);
        assert_eq!(target.ana().chgcnt(), chgcnt + 1, "one change");

        // A group of its own added, group 2's changed to what it already runs with: only group 5 changes.
        let mut more = new.clone();
        more.listeners[0].ana_group_states.extend([(2, Optimized), (5, Inaccessible)]);
        let summary = reloader.apply(&more, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { listeners_changed: 1, ana_states_changed: 1, ..ReloadSummary::default() });
        assert_eq!(states(1, &[1, 2, 4, 5]), [NonOptimized, Optimized, NonOptimized, Inaccessible]);
        assert_eq!(reloader.apply(&more, &mut running).unwrap(), ReloadSummary::default(), "the same file again");
        assert_eq!(reloader.current(), &more);

        // Group 5 set on the control socket, then the file drops its groups of their own and goes back to
        // optimized: every group optimized (group 2 was, in the file and running).
        target.set_ana_state(1, AnaGroups::One(5), Change).unwrap();
        let summary = reloader.apply(&without_groups(&old), &mut running).unwrap();
        assert_eq!(summary.ana_states_changed, 1);
        assert!((1..=ANAGRPMAX).all(|g| target.ana().port(1).get(g) == Optimized));

        // A new listener starts with its own: node B's view on a second address.
        let mut two = without_groups(&old);
        let mut second = two.listeners[0].clone();
        second.address = "127.0.0.2:0".parse().unwrap();
        second.ana_state = NonOptimized;
        second.ana_group_states.insert(2, Optimized);
        two.listeners.push(second);
        let summary = reloader.apply(&two, &mut running).unwrap();
        assert_eq!((summary.listeners_added, summary.ana_states_changed), (1, 1));
        assert_eq!(states(2, &[1, 2, 3]), [NonOptimized, Optimized, NonOptimized]);
        assert_eq!(states(1, &[1, 2, 3]), [Optimized, Optimized, Optimized], "the first listener is untouched");
        running.shutdown();
    }

    /// `config` with every listener's groups in its `ana_state`.
    fn without_groups(config: &TargetConfig) -> TargetConfig {
        let mut config = config.clone();
        config.listeners.iter_mut().for_each(|l| l.ana_group_states.clear());
        config
    }

    #[test]
    fn apply_rotates_host_keys_for_the_next_transactions() {
        use nvmf_common::fabrics::auth::secret::DhchapSecret;
        use nvmf_config::target::{HostKeysConfig, SecretConfig};
        let old = config();
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let one = running.target().subsystem(ONE).unwrap();
        let key = |byte: u8| SecretConfig { secret: DhchapSecret::new(None, &[byte; 32]).unwrap(), file: None };
        let entry = |byte: u8| HostKeysConfig {
            nqn: HOST.to_owned(),
            dhchap_key: Some(key(byte)),
            dhchap_ctrl_key: None,
            dhchap_hashes: Vec::new(),
            dhchap_dhgroups: Vec::new(),
            hostid: None,
            tls_key: None,
            tls_key_compat: false,
        };
        // The host gets a key: allowed (the only host now) and must authenticate.
        let mut new = old.clone();
        new.subsystems[0].allow_any_host = false;
        new.subsystems[0].host_keys = vec![entry(1)];
        let summary = reloader.apply(&new, &mut running).unwrap();
        assert_eq!((summary.auth_changed, summary.host_access_changed), (1, 1));
        assert!(summary.to_string().contains("authentication: 1 subsystem(s) changed"), "{summary}");
        assert!(one.host_allowed(HOST) && !one.host_allowed("nqn.2024-01.io.nvmf-rs:host-b"));
        assert_eq!(one.host_keys(HOST).unwrap().host_key, key(1).secret);
        // Rotated: only the keys change.
        let mut rotated = new.clone();
        rotated.subsystems[0].host_keys = vec![entry(2)];
        let summary = reloader.apply(&rotated, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { auth_changed: 1, ..ReloadSummary::default() });
        assert_eq!(one.host_keys(HOST).unwrap().host_key, key(2).secret);
        assert_eq!(reloader.current(), &rotated);
        running.shutdown();
    }

    #[test]
    fn apply_rotates_tls_keys_and_tls_modes_for_the_next_connections() {
        use std::io::{Read, Write};

        use nvmf_common::fabrics::discovery::{treq, TcpSecurityType, Tsas};
        use nvmf_common::fabrics::tls::{derive_tls_psk, ConfiguredPsk, IdentityVersion, PskDerivation};
        use nvmf_config::target::{ListenerTransport, TcpOptions, TlsKeyConfig, TlsMode};

        const K01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        const K02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
        let psk = |key: &str| ConfiguredPsk::parse(key).unwrap();
        let entry = |key: &str| HostKeysConfig {
            nqn: HOST.to_owned(),
            dhchap_key: None,
            dhchap_ctrl_key: None,
            dhchap_hashes: Vec::new(),
            dhchap_dhgroups: Vec::new(),
            hostid: None,
            tls_key: Some(TlsKeyConfig { key: psk(key), file: None }),
            tls_key_compat: false,
        };
        let identity = |key: &str| {
            derive_tls_psk(&psk(key), HOST, ONE, IdentityVersion::V1, PskDerivation::Rfc8446).unwrap().identity
        };
        let mut old = config();
        old.subsystems[0].host_keys = vec![entry(K01)];
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let finds = |running: &RunningTarget, key: &str| {
            running.acceptor().tls_gate().lookup(identity(key).as_bytes()).is_some()
        };
        assert!(finds(&running, K01) && !finds(&running, K02));

        // The key rotated: the next handshakes take the new one only.
        let mut rotated = old.clone();
        rotated.subsystems[0].host_keys = vec![entry(K02)];
        let summary = reloader.apply(&rotated, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { auth_changed: 1, ..ReloadSummary::default() });
        assert!(!finds(&running, K01) && finds(&running, K02));

        // The listener starts requiring TLS: its discovery log entry says so and a plaintext connection is closed.
        let listener = running.local_addrs()[0];
        let mut required = rotated.clone();
        required.listeners[0].transport =
            ListenerTransport::Tcp(TcpOptions { tls: TlsMode::Required, ..TcpOptions::default() });
        let summary = reloader.apply(&required, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { listeners_changed: 1, ..ReloadSummary::default() });
        assert_eq!(running.acceptor().listeners()[0].0.tcp.tls, TlsMode::Required);
        let entry = &running.target().listeners()[0];
        assert_eq!((entry.tsas, entry.secure_channel), (Tsas::Tcp { sectype: TcpSecurityType::Tls13 }, treq::REQUIRED));
        let read_after_icreq_byte = || {
            let mut plaintext = std::net::TcpStream::connect(listener).unwrap();
            plaintext.set_read_timeout(Some(std::time::Duration::from_millis(500))).unwrap();
            plaintext.write_all(&[0]).unwrap();
            plaintext.read(&mut [0u8; 8])
        };
        // Closed with our byte unread: a reset, or an end of stream if the close raced the byte.
        let closed = read_after_icreq_byte();
        assert!(
            matches!(&closed, Ok(0)) || matches!(&closed, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{closed:?}"
        );
        assert!(finds(&running, K02), "the keys stay");

        // Back to plaintext: the next connection reaches a reactor, which waits for the rest of its ICReq.
        let summary = reloader.apply(&rotated, &mut running).unwrap();
        assert_eq!(summary.listeners_changed, 1);
        let waiting = read_after_icreq_byte().unwrap_err();
        assert!(matches!(waiting.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{waiting}");
        let entry = &running.target().listeners()[0];
        assert_eq!(
            (entry.tsas, entry.secure_channel),
            (Tsas::Tcp { sectype: TcpSecurityType::None }, treq::NOT_SPECIFIED)
        );
        running.shutdown();
    }

    #[test]
    fn apply_opens_and_closes_tcp_listeners_and_rejects_one_that_cannot_bind() {
        let old = config();
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(None, old.clone());
        let first = running.local_addrs()[0];
        let genctr = running.target().discovery_genctr();

        // A second listener (127.0.0.2 is loopback too): bound, served, in the discovery log under a new port ID.
        let mut two = old.clone();
        let mut second = two.listeners[0].clone();
        second.address = "127.0.0.2:0".parse().unwrap();
        two.listeners.push(second.clone());
        let summary = reloader.apply(&two, &mut running).unwrap();
        assert_eq!(summary, ReloadSummary { listeners_added: 1, ..ReloadSummary::default() });
        assert_eq!(summary.to_string(), "listeners: 1 added, 0 removed, 0 changed");
        let added = running.local_addrs()[1];
        assert_eq!((running.local_addrs()[0], added.ip()), (first, second.address.ip()));
        std::net::TcpStream::connect(added).expect("the new listener accepts");
        let ports: Vec<(u16, String)> =
            running.target().listeners().iter().map(|l| (l.port_id, l.trsvcid.clone())).collect();
        assert_eq!(ports, [(1, first.port().to_string()), (2, added.port().to_string())]);
        assert!(running.target().discovery_genctr() > genctr, "hosts are told the discovery log changed");

        // An address in use rejects the whole reload: nothing changes, not even the valid part.
        let taken = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
        let mut bad = two.clone();
        let mut third = second.clone();
        third.address = taken.local_addr().unwrap();
        bad.listeners.push(third);
        bad.subsystems.pop();
        assert!(matches!(reloader.apply(&bad, &mut running), Err(StartError::Listener(_))));
        assert_eq!(running.local_addrs().len(), 2);
        assert!(running.target().subsystem(TWO).is_some());

        // Removing the first listener closes it; accepted connections are not the acceptor's to close.
        let kept = std::net::TcpStream::connect(first).unwrap();
        let mut only_second = two.clone();
        only_second.listeners.remove(0);
        let summary = reloader.apply(&only_second, &mut running).unwrap();
        assert_eq!((summary.listeners_added, summary.listeners_removed), (0, 1));
        assert_eq!(running.local_addrs(), [added]);
        let refused = std::net::TcpStream::connect(first).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(running.target().listeners().len(), 1);
        assert_eq!(reloader.current().listeners, only_second.listeners);
        drop(kept);
        running.shutdown();
    }

    #[test]
    fn reload_tells_the_service_manager_and_returns_the_outcome() {
        use std::os::unix::net::UnixDatagram;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("notify");
        let manager = UnixDatagram::bind(&socket).unwrap();
        manager.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let notifier = ServiceNotifier::to(socket.to_str().unwrap()).unwrap();
        let received = || {
            let mut buf = [0u8; 256];
            let n = manager.recv(&mut buf).expect("a notification");
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        // The uptime clock (CLOCK_BOOTTIME) is never behind CLOCK_MONOTONIC.
        let uptime_usec = || -> u64 {
            let text = std::fs::read_to_string("/proc/uptime").unwrap();
            let seconds: f64 = text.split_whitespace().next().unwrap().parse().unwrap();
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "seconds since boot, positive")]
            let usec = (seconds * 1e6) as u64;
            usec
        };

        let config_path = dir.path().join("target.toml");
        let old = config();
        std::fs::write(&config_path, old.to_string()).unwrap();
        let mut running = crate::daemon::start(&old).unwrap();
        let mut reloader = Reloader::new(Some(config_path.clone()), old.clone());
        let mut new = old.clone();
        new.subsystems.pop();
        // The file names port 0, which a file may not: keep the running listener's address out of the comparison.
        std::fs::write(&config_path, new.to_string().replace("port = 0", "port = 4420")).unwrap();
        new.listeners[0].address.set_port(4420);
        reloader.current.listeners = new.listeners.clone();

        let before = uptime_usec();
        let summary = reloader.reload(&mut running, &notifier).unwrap();
        assert_eq!(summary.to_string(), "subsystems: 0 added, 1 removed");
        let reloading = received();
        let usec: u64 = reloading
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap_or_else(|| panic!("{reloading}"))
            .parse()
            .unwrap();
        // /proc/uptime has 10 ms steps.
        assert!(usec > 0 && usec <= uptime_usec() + 10_000 && usec + 60_000_000 > before, "{usec} vs uptime {before}");
        assert_eq!(received(), "READY=1");

        // A rejected file: still RELOADING=1 … READY=1, and the error is returned.
        std::fs::write(&config_path, "[target]\nmdts = \"huge\"\n").unwrap();
        let err = reloader.reload(&mut running, &notifier).unwrap_err();
        assert!(matches!(err, ReloadError::Config(_)), "{err}");
        assert!(err.to_string().contains("target.toml:2:"), "{err}");
        assert!(received().starts_with("RELOADING=1\n"));
        assert_eq!(received(), "READY=1");
        assert!(running.target().subsystem(ONE).is_some());
        running.shutdown();
    }
}
