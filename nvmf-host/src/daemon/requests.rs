//! The control requests ([`handle`]: connect, connect-all, disconnect, disconnect-all, list, config-path, reload
//! (see `super::reload`)) and the metrics
//! sample ([`samples`]), answered from the controller table on the calling thread (a control connection's, or
//! the metrics endpoint's).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvmf_common::fabrics::discovery::{treq, SubsystemType, TcpSecurityType, TransportType, Tsas};

use super::params::params_from_request;
use super::protocol::{
    ConnectAllEntry, ConnectParams, ControlReply, ControlRequest, ControllerView, DisconnectTarget, NamespaceView,
};
use super::reload::reload;
use super::table::{connect_once, end_controller, end_entry, state_name, DaemonState, Entry, Reserved, State};
use crate::controller::Controller;
use crate::controller::Transport;
use crate::discovery::DiscoveryRecord;
use crate::metrics::ControllerSample;

/// What the metrics collector reads (no admin command: a scrape must stay cheap).
pub(super) fn samples(shared: &DaemonState) -> Vec<ControllerSample> {
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
                paths: e.exports.iter().filter_map(|(_, x)| x.path_sample()).collect(),
                nbd_limits: e.exports.iter().filter_map(|(_, x)| x.nbd_limit_sample()).collect(),
            }
        })
        .collect()
}

fn list(shared: &DaemonState) -> Vec<ControllerView> {
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
                exports: e.exports.iter().map(|(nsid, x)| x.view(*nsid)).collect(),
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
fn connect(shared: &DaemonState, p: &ConnectParams) -> ControlReply {
    let params = match params_from_request(p, &shared.host) {
        Ok(params) => params,
        Err(message) => return ControlReply::Error { message },
    };
    let reserved = if p.duplicate_connect {
        Ok(shared.reserve(params.clone()))
    } else {
        shared.reserve_unique(params.clone(), None)
    };
    let Reserved { n, id, name } = match reserved {
        Ok(r) => r,
        Err(existing) => {
            let message = format!(
                "{} at {} is already connected as {existing} (--duplicate-connect for another association)",
                params.subnqn, params.addr
            );
            return ControlReply::Error { message };
        }
    };
    match connect_once(&shared.heads, &params, &name) {
        Ok((ctrl, exports)) => {
            let views = exports.iter().map(|(nsid, x)| x.view(*nsid)).collect();
            let mut table = shared.table();
            match table.get_mut(&n).filter(|e| e.id == id) {
                Some(entry) if !shared.stopping.load(Ordering::SeqCst) => {
                    entry.state = State::Connected(ctrl);
                    entry.exports = exports;
                    tracing::info!(%name, subnqn = %params.subnqn, traddr = %params.addr, "connected (control request)");
                    ControlReply::Connected { name, exports: views }
                }
                _ => {
                    let stopping = shared.stopping.load(Ordering::SeqCst);
                    let message = if stopping { "the daemon is stopping" } else { "disconnected meanwhile" };
                    drop(table);
                    end_controller(ctrl, exports);
                    ControlReply::Error { message: message.into() }
                }
            }
        }
        Err(message) => {
            let mut table = shared.table();
            if table.get(&n).is_some_and(|e| e.id == id) {
                table.remove(&n);
            }
            ControlReply::Error { message: format!("connecting to {} at {}: {message}", params.subnqn, params.addr) }
        }
    }
}

/// `connect-all`: the discovery log's NVM subsystem entries over TCP that are not connected yet.
fn connect_all(shared: &DaemonState, p: &ConnectParams) -> ControlReply {
    let params = match params_from_request(p, &shared.host) {
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
        } else if !matches!(r.trtype, TransportType::Tcp | TransportType::Rdma) {
            entry.outcome = "skipped: only tcp and rdma are implemented".into();
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
                match entry_request(p, r).map(|request| connect(shared, &request)) {
                    Err(skipped) => entry.outcome = skipped,
                    Ok(ControlReply::Connected { name, .. }) => {
                        entry.name = Some(name);
                        entry.outcome = "connected".into();
                    }
                    Ok(ControlReply::Error { message }) => entry.outcome = format!("failed: {message}"),
                    Ok(other) => entry.outcome = format!("failed: unexpected {other:?}"),
                }
            }
        }
        entries.push(entry);
    }
    ControlReply::ConnectedAll { entries }
}

/// What `connect-all` asks for one discovery log entry: its address and subsystem with the request's options; SQ
/// flow control disabled when the entry allows it (TREQ bit 2), as nvme-cli does; TLS as [`entry_tls`] says.
/// `Err`: the entry is skipped, and why.
fn entry_request(p: &ConnectParams, r: &DiscoveryRecord) -> Result<ConnectParams, String> {
    let tls = entry_tls(p, r)?;
    Ok(ConnectParams {
        transport: if r.trtype == TransportType::Rdma { "rdma" } else { "tcp" }.into(),
        traddr: r.traddr.clone(),
        trsvcid: r.trsvcid.clone(),
        nqn: r.subnqn.clone(),
        disable_sqflow: p.disable_sqflow || r.treq & treq::DISABLE_SQFLOW != 0,
        nbd: None,
        ublk: false,
        export_nsid: None,
        tls: tls && p.tls,
        tls_key: if tls { p.tls_key.clone() } else { None },
        ..p.clone()
    })
}

/// Whether `connect-all` secures its connection to entry `r` with TLS, from the entry's TSAS and TREQ as libnvme
/// reads them (`nvmf_connect_disc_entry`, for NVMe/TCP entries whose security type is not none):
/// - TLS 1.3 with a secure channel required: TLS with the `--tls-key` given; without one the entry is skipped
///   (libnvme lets the kernel look a PSK up in its keyring, which nvmf-host has not);
/// - TLS 1.3 with a secure channel not required (or not specified): TLS when a key was given, else plaintext
///   (libnvme asks for secure channel concatenation there);
/// - TLS 1.2, which nvmf-host does not speak: skipped where required, else plaintext;
/// - a plaintext or NVMe/RDMA entry: plaintext, whatever the request says (libnvme would keep a `--tls` asked for,
///   and its handshake would fail on a listener without TLS).
fn entry_tls(p: &ConnectParams, r: &DiscoveryRecord) -> Result<bool, String> {
    let Tsas::Tcp { sectype } = r.tsas else { return Ok(false) };
    if r.trtype != TransportType::Tcp {
        return Ok(false);
    }
    let required = r.treq & treq::SECURE_CHANNEL_MASK == treq::REQUIRED;
    let subnqn = &r.subnqn;
    match sectype {
        TcpSecurityType::None => Ok(false),
        TcpSecurityType::Tls13 if required && p.tls_key.is_none() => Err(format!(
            "skipped: {subnqn} requires TLS 1.3 (TREQ: secure channel required): give --tls-key, this host's \
             pre-shared key for it"
        )),
        TcpSecurityType::Tls13 => Ok(p.tls_key.is_some()),
        TcpSecurityType::Tls12 if required => {
            Err(format!("skipped: {subnqn} requires TLS 1.2, which nvmf-host does not speak (TLS 1.3 only)"))
        }
        TcpSecurityType::Tls12 => Ok(false),
    }
}

fn disconnect(shared: &DaemonState, which: Option<&DisconnectTarget>) -> ControlReply {
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
pub(super) fn handle(shared: &Arc<DaemonState>, request: ControlRequest) -> ControlReply {
    if shared.stopping.load(Ordering::SeqCst) {
        return ControlReply::Error { message: "the daemon is stopping".into() };
    }
    match request {
        ControlRequest::Connect(p) => connect(shared, &p),
        ControlRequest::ConnectAll(p) => connect_all(shared, &p),
        ControlRequest::Disconnect(which) => disconnect(shared, Some(&which)),
        ControlRequest::DisconnectAll => disconnect(shared, None),
        ControlRequest::List => ControlReply::List { controllers: list(shared) },
        ControlRequest::ConfigPath => {
            ControlReply::ConfigPath { path: shared.reloader().path().map(|p| p.display().to_string()) }
        }
        ControlRequest::Reload => match reload(shared) {
            Ok(summary) => ControlReply::Reloaded { changes: summary.lines().to_vec() },
            Err(e) => ControlReply::Error { message: e.to_string() },
        },
        ControlRequest::LogLevel(request) => match request.apply() {
            Ok(filter) => ControlReply::LogLevel { filter },
            Err(e) => ControlReply::Error { message: e.to_string() },
        },
    }
}

#[cfg(test)]
mod tests {
    use nvmf_common::fabrics::discovery::{AddressFamily, Tsas};

    use super::*;

    fn record(trtype: TransportType, treq: u8) -> DiscoveryRecord {
        DiscoveryRecord {
            trtype,
            adrfam: AddressFamily::Ipv4,
            subtype: SubsystemType::Nvm,
            treq,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4421".into(),
            subnqn: "nqn.2024-01.io.example:a".into(),
            traddr: "10.0.0.2".into(),
            tsas: Tsas::None,
        }
    }

    /// A `connect-all` request to 10.0.0.1:8009 asking for 2 I/O queues.
    fn asked() -> ConnectParams {
        ConnectParams {
            transport: "tcp".into(),
            traddr: "10.0.0.1".into(),
            trsvcid: "8009".into(),
            nqn: String::new(),
            nr_io_queues: Some(2),
            queue_size: None,
            keep_alive_tmo: None,
            reconnect_delay: None,
            ctrl_loss_tmo: None,
            fast_io_fail_tmo: None,
            iopolicy: None,
            hostnqn: None,
            hostid: None,
            hdr_digest: false,
            data_digest: false,
            disable_sqflow: false,
            host_iface: None,
            nbd: None,
            ublk: false,
            export_nsid: None,
            duplicate_connect: false,
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            tls: false,
            tls_key: None,
            tls_identity_version: None,
            tls_key_identity: None,
            tls_compat: false,
            concat: false,
        }
    }

    #[test]
    fn connect_all_disables_sq_flow_control_where_the_entry_allows_it() {
        let asked = asked();
        let allowed =
            entry_request(&asked, &record(TransportType::Rdma, treq::NOT_REQUIRED | treq::DISABLE_SQFLOW)).unwrap();
        assert!(allowed.disable_sqflow);
        assert_eq!(
            (allowed.transport.as_str(), allowed.traddr.as_str(), allowed.trsvcid.as_str(), allowed.nr_io_queues),
            ("rdma", "10.0.0.2", "4421", Some(2))
        );
        assert_eq!(allowed.nqn, "nqn.2024-01.io.example:a");
        assert!(!entry_request(&asked, &record(TransportType::Tcp, treq::NOT_REQUIRED)).unwrap().disable_sqflow);
        let forced = ConnectParams { disable_sqflow: true, ..asked };
        assert!(entry_request(&forced, &record(TransportType::Tcp, treq::NOT_SPECIFIED)).unwrap().disable_sqflow);
    }

    /// A TCP entry with this security type.
    fn tcp(sectype: TcpSecurityType, treq: u8) -> DiscoveryRecord {
        DiscoveryRecord { tsas: Tsas::Tcp { sectype }, ..record(TransportType::Tcp, treq) }
    }

    /// Whether the request for `entry` asks for TLS, as the daemon reads it (`--tls-key` means TLS).
    fn over_tls(asked: &ConnectParams, entry: &DiscoveryRecord) -> Result<bool, String> {
        let r = entry_request(asked, entry)?;
        assert_eq!(r.tls, r.tls_key.is_some() && asked.tls, "--tls only with the key");
        Ok(r.tls_key.is_some())
    }

    #[test]
    fn connect_all_follows_each_entrys_tls_requirement() {
        use TcpSecurityType::{None as Plaintext, Tls12, Tls13};
        let plain = asked();
        let key = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let keyed = ConnectParams {
            tls: true,
            tls_key: Some(key.into()),
            tls_identity_version: Some(0),
            tls_key_identity: None,
            tls_compat: true,
            ..asked()
        };
        // TLS 1.3 required: TLS with the key given, the entry skipped without one.
        let required = tcp(Tls13, treq::REQUIRED | treq::DISABLE_SQFLOW);
        assert_eq!(over_tls(&keyed, &required), Ok(true));
        let r = entry_request(&keyed, &required).unwrap();
        assert_eq!(
            (r.tls_key.as_ref().map(|k| k.expose()), r.tls_identity_version, r.tls_compat),
            (Some(key), Some(0), true)
        );
        assert!(r.disable_sqflow);
        let skipped = over_tls(&plain, &required).unwrap_err();
        assert_eq!(
            skipped,
            "skipped: nqn.2024-01.io.example:a requires TLS 1.3 (TREQ: secure channel required): give --tls-key, \
             this host's pre-shared key for it"
        );
        // TLS 1.3 not required (or not specified): TLS only with a key.
        for treq in [treq::NOT_REQUIRED, treq::NOT_SPECIFIED] {
            assert_eq!(over_tls(&keyed, &tcp(Tls13, treq)), Ok(true), "{treq}");
            assert_eq!(over_tls(&plain, &tcp(Tls13, treq)), Ok(false), "{treq}");
        }
        // Plaintext and RDMA entries: never TLS, key or not.
        for entry in
            [tcp(Plaintext, treq::NOT_SPECIFIED), tcp(Plaintext, treq::REQUIRED), record(TransportType::Rdma, 0)]
        {
            assert_eq!(over_tls(&keyed, &entry), Ok(false), "{entry:?}");
            assert_eq!(over_tls(&plain, &entry), Ok(false), "{entry:?}");
        }
        // TLS 1.2, which nvmf-host does not speak: plaintext where allowed, skipped where required.
        assert_eq!(over_tls(&keyed, &tcp(Tls12, treq::NOT_REQUIRED)), Ok(false));
        let skipped = over_tls(&keyed, &tcp(Tls12, treq::REQUIRED)).unwrap_err();
        assert!(skipped.contains("nqn.2024-01.io.example:a requires TLS 1.2"), "{skipped}");
    }
}
