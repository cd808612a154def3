//! The target's control requests and replies: plain data (serde), shared by the daemon and `nvmf-target`'s client
//! commands so they cannot drift. The framing (one JSON object per line) is [`nvmf_service::control`]'s, the same
//! as `nvmf-host`'s; `docs/control-protocol.md` has examples.
//!
//! Requests (externally tagged): `"list"`, `{"disconnect": {"subnqn": …, "cntlid": …, "hostnqn": …}}`,
//! `"config_path"`, `"reload"`, `{"log_level": {"filter": …}}`, `{"ana_state": {"listener": "tcp://ADDR:PORT",
//! "group": N|null, "state": …}}`. Replies: `{"list": {"subsystems": […], "listeners": […]}}`,
//! `{"disconnected": {"controllers": […]}}`, `{"config_path": {"path": …}}`, `{"reloaded": {"changes": […]}}`,
//! `{"log_level": {"filter": …}}`, `{"ana_state": {"port_id": …, "changed": …}}`, `{"error": {"message": …}}`.

use nvmf_service::control::{LogLevelRequest, Protocol};
use serde::{Deserialize, Serialize};

/// Where the daemon serves its control socket unless told otherwise (systemd's `RuntimeDirectory=nvmf-target`).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/nvmf-target/control.sock";

/// The target daemon's control protocol.
#[derive(Debug)]
pub struct TargetProtocol;

impl Protocol for TargetProtocol {
    type Request = TargetRequest;
    type Reply = TargetReply;
    const DAEMON: &'static str = "nvmf-target";
    const START_HINT: &'static str = "`nvmf-target --config …` or `systemctl start nvmf-target`";

    fn error(message: String) -> TargetReply {
        TargetReply::Error { message }
    }
}

/// A request to the target daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetRequest {
    /// Describe subsystems, namespaces, listeners and live controllers.
    List,
    /// End the associations of the controllers selected.
    Disconnect(DisconnectRequest),
    /// Name the configuration file the daemon runs from (what `reload` re-reads).
    ConfigPath,
    /// Re-read the configuration file and apply the difference (as SIGHUP does).
    Reload,
    /// Read or replace the log filter.
    LogLevel(LogLevelRequest),
    /// Change a listener's Asymmetric Namespace Access state, of one group or all.
    AnaState(AnaStateRequest),
    /// Move a namespace to another ANA group, live.
    NamespaceAnaGroup(NamespaceAnaGroupRequest),
}

/// Move namespace `nsid` of `subnqn` to ANA group `group` (nvmet: writing the namespace's `ana_grpid`): its
/// commands follow that group's states from the next one; the subsystem's controllers get an ANA Change and a
/// Namespace Attribute Changed event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceAnaGroupRequest {
    /// The subsystem.
    pub subnqn: String,
    /// The namespace.
    pub nsid: u32,
    /// The ANA group, 1..=128.
    pub group: u32,
}

/// Set the ANA state of `group` (every group when `None`) on `listener`; the controllers connected through it get
/// an ANA Change event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnaStateRequest {
    /// The listener, as `list` shows it: `tcp://ADDR:PORT` or `rdma://ADDR:PORT` (IPv6 in brackets).
    pub listener: String,
    /// The ANA group, 1..=128; `None`: every group.
    #[serde(default)]
    pub group: Option<u32>,
    /// `optimized`, `non-optimized`, `inaccessible`, `persistent-loss` or `change`.
    pub state: String,
}

/// Which controllers `disconnect` ends: those matching every selector given (at least `cntlid` or `hostnqn`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisconnectRequest {
    /// Only this subsystem's controllers.
    #[serde(default)]
    pub subnqn: Option<String>,
    /// The controller with this ID (controller IDs are per subsystem: with several matches, `subnqn` must choose).
    #[serde(default)]
    pub cntlid: Option<u16>,
    /// Every controller of this host NQN.
    #[serde(default)]
    pub hostnqn: Option<String>,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetReply {
    /// `list`.
    List(Listing),
    /// `disconnect` ended these associations.
    Disconnected {
        /// One per controller.
        controllers: Vec<ControllerId>,
    },
    /// `config_path`.
    ConfigPath {
        /// The file (`None`: the daemon runs from quick-start flags, so there is nothing to re-read).
        path: Option<String>,
    },
    /// `reload` applied the file.
    Reloaded {
        /// What changed, one line each (`no changes` when nothing did).
        changes: Vec<String>,
    },
    /// `log_level`: the filter in force.
    LogLevel {
        /// `RUST_LOG` syntax.
        filter: String,
    },
    /// `ana_state` was applied.
    AnaState {
        /// The listener's port ID.
        port_id: u16,
        /// False when the groups already were in that state (no event raised).
        changed: bool,
    },
    /// `namespace_ana_group` was applied.
    NamespaceAnaGroup {
        /// False when the namespace already was in that group (no event raised).
        moved: bool,
    },
    /// The request failed.
    Error {
        /// What went wrong, one line.
        message: String,
    },
}

/// What `list` shows: like `nvmetcli ls`, and SPDK's `nvmf_get_subsystems`, `nvmf_get_controllers` and
/// `nvmf_get_qpairs` together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// The discovery subsystem first, then the NVM subsystems by NQN.
    pub subsystems: Vec<SubsystemView>,
    /// The listeners (the discovery log's ports).
    pub listeners: Vec<ListenerView>,
}

/// One subsystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemView {
    /// Subsystem NQN.
    pub nqn: String,
    /// `nvm` or `discovery`.
    pub subtype: String,
    /// Serial number (SN).
    pub serial: String,
    /// Model number (MN).
    pub model: String,
    /// Any host may connect.
    pub allow_any_host: bool,
    /// The host NQNs allowed (when not `allow_any_host`).
    pub hosts: Vec<String>,
    /// The controller IDs it allocates from, first and last.
    pub cntlid_range: [u16; 2],
    /// Number of Namespaces (the largest NSID it may use).
    pub max_namespaces: u32,
    /// Namespaces by NSID.
    pub namespaces: Vec<NamespaceView>,
    /// Live controllers by controller ID.
    pub controllers: Vec<ControllerView>,
}

/// One namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    /// NSID.
    pub nsid: u32,
    /// The storage: a path, `memory` or `null`.
    pub backend: String,
    /// Size in bytes.
    pub size: u64,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks (NSZE).
    pub blocks: u64,
    /// NGUID, 32 hex digits.
    pub nguid: String,
    /// UUID, hyphenated.
    pub uuid: String,
    /// EUI-64, 16 hex digits (all zeros: none).
    pub eui64: String,
    /// ANA group ID.
    #[serde(default)]
    pub ana_group: u32,
}

/// One live controller (an association).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerView {
    /// Controller ID.
    pub cntlid: u16,
    /// Host NQN from its Connect.
    pub hostnqn: String,
    /// Host Identifier from its Connect, as a UUID.
    pub hostid: String,
    /// `tcp` or `rdma`.
    pub transport: String,
    /// The host's address (of its admin queue).
    pub traddr: String,
    /// The host's port (of its admin queue).
    pub trsvcid: String,
    /// Keep Alive Timeout in milliseconds (0: none).
    pub kato_ms: u32,
    /// CSTS.RDY.
    pub ready: bool,
    /// When the association started, seconds since the Unix epoch.
    pub connected_at: u64,
    /// Its age in seconds.
    pub connected_seconds: u64,
    /// The queues connected, the admin queue (QID 0) first.
    pub queues: Vec<QueueView>,
    /// Read and Compare commands completed.
    pub read_commands: u64,
    /// Write and Write Zeroes commands completed.
    pub write_commands: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Commands completed with an error status.
    pub errors: u64,
}

/// One queue of a controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// Queue ID (0: admin).
    pub qid: u16,
    /// Entries (SQSIZE + 1).
    pub depth: u32,
    /// Commands it holds now: arrived, response not yet sent and released.
    pub in_flight: u32,
    /// The host's address and port of this queue's connection.
    pub peer: String,
    /// Read and Compare commands completed.
    pub read_commands: u64,
    /// Write and Write Zeroes commands completed.
    pub write_commands: u64,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerView {
    /// `tcp` or `rdma`.
    pub transport: String,
    /// Address.
    pub traddr: String,
    /// Port.
    pub trsvcid: String,
    /// The discovery log's PORTID.
    pub port_id: u16,
    /// The listener's ANA state of each group that holds a namespace (and of group 1), by group ID.
    #[serde(default)]
    pub ana_states: Vec<AnaGroupState>,
}

/// One ANA group's state on a listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnaGroupState {
    /// ANA group ID.
    pub group: u32,
    /// `optimized`, `non-optimized`, `inaccessible`, `persistent-loss` or `change`.
    pub state: String,
}

/// A controller `disconnect` ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerId {
    /// Its subsystem.
    pub subnqn: String,
    /// Controller ID.
    pub cntlid: u16,
    /// Its host.
    pub hostnqn: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_read_as_documented() {
        let r: TargetRequest = serde_json::from_str(r#""list""#).unwrap();
        assert_eq!(r, TargetRequest::List);
        let r: TargetRequest = serde_json::from_str(r#"{"disconnect":{"subnqn":"testnqn","cntlid":3}}"#).unwrap();
        let want = DisconnectRequest { subnqn: Some("testnqn".into()), cntlid: Some(3), hostnqn: None };
        assert_eq!(r, TargetRequest::Disconnect(want));
        let r: TargetRequest = serde_json::from_str(r#"{"log_level":{"filter":"debug"}}"#).unwrap();
        assert_eq!(r, TargetRequest::LogLevel(LogLevelRequest { filter: Some("debug".into()) }));
        assert!(serde_json::from_str::<TargetRequest>(r#"{"disconnect":{"cntlid":"x"}}"#).is_err());
        assert!(serde_json::from_str::<TargetRequest>(r#"{"disconnect":{"qid":1}}"#).is_err());
        assert!(serde_json::from_str::<TargetRequest>(r#""format""#).is_err());
        let r: TargetRequest =
            serde_json::from_str(r#"{"ana_state":{"listener":"tcp://10.0.0.1:4420","group":null,"state":"change"}}"#)
                .unwrap();
        let want = AnaStateRequest { listener: "tcp://10.0.0.1:4420".into(), group: None, state: "change".into() };
        assert_eq!(r, TargetRequest::AnaState(want));
        let r: TargetRequest =
            serde_json::from_str(r#"{"ana_state":{"listener":"tcp://[::1]:4421","group":2,"state":"optimized"}}"#)
                .unwrap();
        assert!(matches!(r, TargetRequest::AnaState(AnaStateRequest { group: Some(2), .. })));
        let reply = serde_json::to_string(&TargetReply::AnaState { port_id: 2, changed: true }).unwrap();
        assert_eq!(reply, r#"{"ana_state":{"port_id":2,"changed":true}}"#);
        let reply = serde_json::to_string(&TargetReply::List(Listing::default())).unwrap();
        assert_eq!(reply, r#"{"list":{"subsystems":[],"listeners":[]}}"#);
        let reply = serde_json::to_string(&TargetReply::Error { message: "x".into() }).unwrap();
        assert_eq!(reply, r#"{"error":{"message":"x"}}"#);
    }
}
