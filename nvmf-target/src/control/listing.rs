//! What `list` shows, what `disconnect` ends and what `ana-state` changes, read off the running [`Target`]: its
//! subsystems, their namespaces and live controllers (each controller's queues and counters), and the listeners with
//! their ANA states. Control plane only:
//! it takes the subsystems' and controllers' locks briefly, as admin commands do, and never touches a queue.

use std::time::{SystemTime, UNIX_EPOCH};

use nvmf_common::nvme::log_page::AnaState;
use nvmf_config::quickstart::ListenSpec;

use crate::controller::ana::{valid_group, AnaGroups, DEFAULT_ANA_GROUP};
use crate::controller::{Controller, Namespace, Subsystem, Target};

use super::protocol::{
    AnaGroupState, AnaStateRequest, ControllerId, ControllerView, DisconnectRequest, ListenerView, Listing,
    NamespaceView, QueueView, SubsystemView,
};

/// The target as `list` shows it.
pub fn listing(target: &Target) -> Listing {
    let now = SystemTime::now();
    let subsystems = std::iter::once(std::sync::Arc::clone(target.discovery_subsystem()))
        .chain(target.subsystems())
        .map(|s| subsystem_view(&s, now))
        .collect();
    let mut groups: Vec<u32> = std::iter::once(DEFAULT_ANA_GROUP)
        .chain(target.subsystems().iter().flat_map(|s| s.namespaces().ana_groups()))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let ana = target.ana();
    let listeners = target
        .listeners()
        .into_iter()
        .map(|l| {
            let states = ana.port(l.port_id);
            ListenerView {
                transport: l.trtype.name().to_owned(),
                traddr: l.traddr,
                trsvcid: l.trsvcid,
                port_id: l.port_id,
                ana_states: groups
                    .iter()
                    .map(|&group| AnaGroupState { group, state: states.get(group).name().to_owned() })
                    .collect(),
            }
        })
        .collect();
    Listing { subsystems, listeners }
}

/// Apply `request` (see [`AnaStateRequest`]): the listener's port ID and whether anything changed, or why not.
pub fn set_ana_state(target: &Target, request: &AnaStateRequest) -> Result<(u16, bool), String> {
    let spec = ListenSpec::parse_url(&request.listener).map_err(|e| format!("listener {}: {e}", request.listener))?;
    let state = AnaState::from_name(&request.state).ok_or_else(|| {
        format!(
            "ANA state {:?} is unknown; allowed: optimized, non-optimized, inaccessible, persistent-loss or change",
            request.state
        )
    })?;
    let groups = match request.group {
        None => AnaGroups::All,
        Some(group) if valid_group(group) => AnaGroups::One(group),
        Some(group) => return Err(format!("ANA group {group} is invalid; allowed: 1..=128")),
    };
    let listener = target
        .listeners()
        .into_iter()
        .find(|l| {
            l.trtype.name() == spec.transport.as_str()
                && l.traddr.parse() == Ok(spec.address.ip())
                && l.trsvcid == spec.address.port().to_string()
        })
        .ok_or_else(|| format!("no listener {spec} (see `nvmf-target list`)"))?;
    let changed = target.set_ana_state(listener.port_id, groups, state).map_err(|e| e.to_string())?;
    tracing::info!(listener = %spec, port_id = listener.port_id, group = ?request.group, state = state.name(), changed,
        "ANA state set on the control socket");
    Ok((listener.port_id, changed))
}

fn subsystem_view(s: &Subsystem, now: SystemTime) -> SubsystemView {
    let (allow_any_host, hosts) = s.host_access();
    let range = s.cntlid_range();
    let mut controllers: Vec<_> = s.controllers().iter().map(|c| controller_view(c, now)).collect();
    controllers.sort_by_key(|c| c.cntlid);
    SubsystemView {
        nqn: s.nqn().to_owned(),
        subtype: if s.is_discovery() { "discovery" } else { "nvm" }.to_owned(),
        serial: s.serial().to_owned(),
        model: s.model().to_owned(),
        allow_any_host,
        hosts,
        cntlid_range: [*range.start(), *range.end()],
        max_namespaces: s.max_namespaces(),
        namespaces: s.namespaces().iter().map(|ns| namespace_view(ns)).collect(),
        controllers,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn namespace_view(ns: &Namespace) -> NamespaceView {
    NamespaceView {
        nsid: ns.nsid(),
        backend: ns.storage().describe(),
        size: ns.storage().capacity(),
        block_size: ns.block_size(),
        blocks: ns.num_blocks(),
        nguid: hex(&ns.nguid()),
        uuid: uuid::Uuid::from_bytes(ns.uuid()).hyphenated().to_string(),
        eui64: hex(&ns.eui64()),
        ana_group: ns.ana_group(),
    }
}

fn controller_view(c: &Controller, now: SystemTime) -> ControllerView {
    let queues = c.queues();
    let admin = queues.iter().find(|q| q.qid == 0);
    let peer = admin.and_then(|q| q.peer);
    let connected_at = c.connected_at().unwrap_or(now);
    let counters = c.counters();
    ControllerView {
        cntlid: c.cntlid(),
        hostnqn: c.hostnqn().to_owned(),
        hostid: uuid::Uuid::from_bytes(c.hostid()).hyphenated().to_string(),
        transport: admin.map_or("", |q| q.trtype.name()).to_owned(),
        traddr: peer.map(|p| p.ip().to_string()).unwrap_or_default(),
        trsvcid: peer.map(|p| p.port().to_string()).unwrap_or_default(),
        kato_ms: c.kato_ms(),
        ready: c.is_ready(),
        connected_at: connected_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        connected_seconds: now.duration_since(connected_at).map_or(0, |d| d.as_secs()),
        queues: queues
            .iter()
            .map(|q| QueueView {
                qid: q.qid,
                depth: q.depth,
                in_flight: q.outstanding,
                peer: q.peer.map(|p| p.to_string()).unwrap_or_default(),
                read_commands: q.counters.read_commands,
                write_commands: q.counters.write_commands,
            })
            .collect(),
        read_commands: counters.read_commands,
        write_commands: counters.write_commands,
        bytes_read: counters.bytes_read,
        bytes_written: counters.bytes_written,
        errors: counters.errors,
    }
}

/// End the associations `request` selects (see [`DisconnectRequest`]); the controllers ended, or why none was.
/// Their hosts may connect again: a kernel host reconnects within its `ctrl_loss_tmo`, unless the subsystem's
/// allowed hosts no longer name it.
pub fn disconnect(target: &Target, request: &DisconnectRequest) -> Result<Vec<ControllerId>, String> {
    if request.cntlid.is_none() && request.hostnqn.is_none() {
        return Err("disconnect needs a controller ID or a host NQN".into());
    }
    let subsystems: Vec<_> = match &request.subnqn {
        Some(nqn) if nqn == target.discovery_subsystem().nqn() => {
            vec![std::sync::Arc::clone(target.discovery_subsystem())]
        }
        Some(nqn) => vec![target.subsystem(nqn).ok_or_else(|| format!("no subsystem {nqn}"))?],
        None => {
            std::iter::once(std::sync::Arc::clone(target.discovery_subsystem())).chain(target.subsystems()).collect()
        }
    };
    let selected: Vec<_> = subsystems
        .iter()
        .flat_map(|s| s.controllers())
        .filter(|c| request.cntlid.is_none_or(|id| c.cntlid() == id))
        .filter(|c| request.hostnqn.as_deref().is_none_or(|h| c.hostnqn() == h))
        .collect();
    if selected.is_empty() {
        return Err(format!("no live controller matches {}", describe(request)));
    }
    if request.cntlid.is_some() && request.hostnqn.is_none() && selected.len() > 1 {
        let names: Vec<_> = selected.iter().map(|c| c.subsystem().nqn().to_owned()).collect();
        return Err(format!(
            "controller ID {} is live in {} subsystems ({}): name one with --nqn",
            request.cntlid.unwrap_or_default(),
            names.len(),
            names.join(", ")
        ));
    }
    let ended = selected
        .iter()
        .map(|c| {
            tracing::info!(
                subnqn = c.subsystem().nqn(),
                cntlid = c.cntlid(),
                hostnqn = c.hostnqn(),
                "disconnect requested on the control socket"
            );
            c.terminate();
            ControllerId { subnqn: c.subsystem().nqn().to_owned(), cntlid: c.cntlid(), hostnqn: c.hostnqn().to_owned() }
        })
        .collect();
    Ok(ended)
}

/// The selectors of `request`, as a user typed them.
fn describe(request: &DisconnectRequest) -> String {
    let mut parts = Vec::new();
    if let Some(id) = request.cntlid {
        parts.push(format!("--cntlid {id}"));
    }
    if let Some(host) = &request.hostnqn {
        parts.push(format!("--host {host}"));
    }
    if let Some(nqn) = &request.subnqn {
        parts.push(format!("--nqn {nqn}"));
    }
    parts.join(" ")
}
