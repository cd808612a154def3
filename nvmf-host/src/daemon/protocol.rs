//! The control socket's protocol: one JSON object per line each way, a [`ControlRequest`] from the CLI and the
//! daemon's [`ControlReply`]. Plain data (serde), shared by both ends so they cannot drift.
//!
//! Requests (externally tagged): `{"connect": {…}}`, `{"connect_all": {…}}`, `{"disconnect": {"nqn": …}}` or
//! `{"disconnect": {"name": …}}`, `"disconnect_all"`, `"list"`, `"config_path"`, `"reload"`,
//! `{"log_level": {"filter": …}}`. Replies: `{"connected": {"name": …}}`, `{"connected_all": {"entries": […]}}`,
//! `{"disconnected": {"names": […]}}`, `{"list": {"controllers": […]}}`, `{"config_path": {"path": …}}`,
//! `{"reloaded": {"changes": […]}}`, `{"log_level": {"filter": …}}`, `{"error": {"message": …}}`. The framing
//! is [`nvmf_service::control`]'s, shared with `nvmf-target` (`docs/control-protocol.md`).

use nvmf_service::control::{LogLevelRequest, Protocol};
use serde::{Deserialize, Serialize};

/// The host daemon's control protocol.
#[derive(Debug)]
pub struct HostProtocol;

impl Protocol for HostProtocol {
    type Request = ControlRequest;
    type Reply = ControlReply;
    const DAEMON: &'static str = "nvmf-host";
    const START_HINT: &'static str = "`nvmf-host run --config …` or `systemctl start nvmf-host`";

    fn error(message: String) -> ControlReply {
        ControlReply::Error { message }
    }
}

/// Connection parameters of `connect` (nvme-cli's option names; durations in seconds, -1 = never).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectParams {
    /// `tcp` or `rdma`.
    pub transport: String,
    /// `-a`.
    pub traddr: String,
    /// `-s`.
    pub trsvcid: String,
    /// `-n` (for `connect`; ignored by `connect_all`, which takes them from the discovery log).
    #[serde(default)]
    pub nqn: String,
    /// `--nr-io-queues` (daemon default: the CPU count).
    #[serde(default)]
    pub nr_io_queues: Option<u16>,
    /// `--queue-size`.
    #[serde(default)]
    pub queue_size: Option<u16>,
    /// `--keep-alive-tmo` seconds.
    #[serde(default)]
    pub keep_alive_tmo: Option<u32>,
    /// `--reconnect-delay` seconds.
    #[serde(default)]
    pub reconnect_delay: Option<u32>,
    /// `--ctrl-loss-tmo` seconds, -1 = forever.
    #[serde(default)]
    pub ctrl_loss_tmo: Option<i64>,
    /// `--fast-io-fail-tmo` seconds, -1 = off.
    #[serde(default)]
    pub fast_io_fail_tmo: Option<i64>,
    /// `--iopolicy`: `round-robin` or `queue-depth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iopolicy: Option<String>,
    /// `--hostnqn` (default: the daemon's).
    #[serde(default)]
    pub hostnqn: Option<String>,
    /// `--hostid` (default: the daemon's).
    #[serde(default)]
    pub hostid: Option<String>,
    /// `--hdr-digest`.
    #[serde(default)]
    pub hdr_digest: bool,
    /// `--data-digest`.
    #[serde(default)]
    pub data_digest: bool,
    /// `--disable-sqflow`.
    #[serde(default)]
    pub disable_sqflow: bool,
    /// `--host-iface`: the interface NVMe/TCP connections leave through.
    #[serde(default)]
    pub host_iface: Option<String>,
    /// `--nbd`: export a namespace (the first active one, or `export_nsid`) over NBD on this endpoint
    /// (`unix:/path` or `ADDR:PORT`).
    #[serde(default)]
    pub nbd: Option<String>,
    /// `--ublk`: export it as a `/dev/ublkbN` block device.
    #[serde(default)]
    pub ublk: bool,
    /// The namespace `nbd` or `ublk` exports (default: the first active one).
    #[serde(default)]
    pub export_nsid: Option<u32>,
    /// `--duplicate-connect`: connect even when this host already has an association with the same subsystem at
    /// the same address (nvme-cli refuses that by default too).
    #[serde(default)]
    pub duplicate_connect: bool,
    /// `--dhchap-secret`: the host's DH-HMAC-CHAP secret (`DHHC-1:…`).
    #[serde(default)]
    pub dhchap_secret: Option<SecretText>,
    /// `--dhchap-ctrl-secret`: the controller's DH-HMAC-CHAP secret, for bidirectional authentication.
    #[serde(default)]
    pub dhchap_ctrl_secret: Option<SecretText>,
    /// `--tls`: NVMe/TCP over TLS 1.3.
    #[serde(default)]
    pub tls: bool,
    /// `--tls-key`: the configured PSK (`NVMeTLSkey-1:…`).
    #[serde(default)]
    pub tls_key: Option<SecretText>,
    /// `--tls-identity-version`: 0 or 1.
    #[serde(default)]
    pub tls_identity_version: Option<u8>,
    /// `--tls-key-identity`: the PSK identity the key must give (nvme-cli's option).
    #[serde(default)]
    pub tls_key_identity: Option<String>,
    /// `--tls-compat`: libnvme's older derivation.
    #[serde(default)]
    pub tls_compat: bool,
    /// `--concat`: secure channel concatenation (TLS keyed by the PSK DH-HMAC-CHAP generates).
    #[serde(default)]
    pub concat: bool,
}

/// A secret on its way to the daemon (the control socket is the daemon user's and root's only): serialized as the
/// plain string, wiped when dropped, and shown by `Debug` as `<secret>`, so a request in a log line or an error
/// carries no key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretText(pub zeroize::Zeroizing<String>);

impl SecretText {
    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SecretText {
    fn from(text: &str) -> Self {
        SecretText(zeroize::Zeroizing::new(text.to_owned()))
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// Which controllers `disconnect` ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum DisconnectTarget {
    /// Every controller of this subsystem NQN (`-n`).
    Nqn(String),
    /// The controller with this name (`-d nvmf0`).
    Name(String),
}

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlRequest {
    /// Connect one controller (and optionally export a namespace).
    Connect(ConnectParams),
    /// Read a discovery controller's log and connect every NVM subsystem entry not yet connected.
    ConnectAll(ConnectParams),
    /// Disconnect (CC.SHN) and forget controllers.
    Disconnect(DisconnectTarget),
    /// Disconnect every controller.
    DisconnectAll,
    /// Describe every controller.
    List,
    /// Name the configuration file the daemon runs from (what `reload` re-reads).
    ConfigPath,
    /// Re-read the configuration file and apply the difference (as SIGHUP does).
    Reload,
    /// Read or replace the log filter.
    LogLevel(LogLevelRequest),
}

/// One namespace of a controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    /// NSID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in blocks.
    pub blocks: u64,
    /// Size in bytes.
    pub size: u64,
}

/// One export of a controller.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExportView {
    /// The namespace exported.
    pub nsid: u32,
    /// `nbd` or `ublk`.
    pub kind: String,
    /// Where it is: the NBD listen address (`unix:/path`, `ADDR:PORT`) or the block device (`/dev/ublkb0`).
    pub address: String,
    /// What clients open: the NBD URI, or the block device.
    pub uri: String,
    /// The controllers the namespace is reached through (the export's multipath paths), this one among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathView>,
    /// How commands are spread over the paths (`round-robin`, `queue-depth`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iopolicy: String,
}

/// One path of an export.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PathView {
    /// The controller's name (`nvmf0`).
    pub name: String,
    /// The controller's state (`live`, `reconnecting`, …).
    pub state: String,
    /// The namespace's ANA state through it (`optimized`, `non-optimized`, `inaccessible`, `persistent-loss`,
    /// `change`; `none` when the controller does not report ANA).
    pub ana_state: String,
}

/// One controller as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerView {
    /// The daemon's name for it (`nvmf0`).
    pub name: String,
    /// `connecting`, `live`, `reconnecting`, `failed`.
    pub state: String,
    /// `tcp`.
    pub transport: String,
    /// Transport address.
    pub traddr: String,
    /// Transport service id.
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// The host NQN this association uses.
    pub hostnqn: String,
    /// Controller ID (once connected).
    pub cntlid: Option<u16>,
    /// Model number (once connected).
    pub model: Option<String>,
    /// Serial number (once connected).
    pub serial: Option<String>,
    /// I/O queues granted.
    pub io_queues: u16,
    /// Associations re-established after a loss.
    pub reconnects: u64,
    /// The last connect error, while connecting or failed.
    pub error: Option<String>,
    /// Active namespaces.
    pub namespaces: Vec<NamespaceView>,
    /// Running exports.
    pub exports: Vec<ExportView>,
}

/// The outcome of one discovery log entry in `connect_all`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectAllEntry {
    /// Subsystem NQN.
    pub subnqn: String,
    /// Its transport address and service id (`traddr:trsvcid`).
    pub address: String,
    /// The controller's name when connected now or before.
    pub name: Option<String>,
    /// `connected`, `already connected`, `skipped: …` or `failed: …`.
    pub outcome: String,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlReply {
    /// `connect` succeeded.
    Connected {
        /// The new controller's name.
        name: String,
        /// The exports started with it.
        exports: Vec<ExportView>,
    },
    /// `connect_all` ran.
    ConnectedAll {
        /// One per discovery log entry.
        entries: Vec<ConnectAllEntry>,
    },
    /// `disconnect`/`disconnect_all` ended these controllers.
    Disconnected {
        /// Their names.
        names: Vec<String>,
    },
    /// `list`.
    List {
        /// Every controller, by name.
        controllers: Vec<ControllerView>,
    },
    /// `config_path`.
    ConfigPath {
        /// The file (`None`: the daemon was started without one, so there is nothing to re-read).
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
    /// The request failed.
    Error {
        /// What went wrong.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_documented() {
        let r: ControlRequest = serde_json::from_str(r#"{"disconnect":{"nqn":"nqn.a"}}"#).unwrap();
        assert_eq!(r, ControlRequest::Disconnect(DisconnectTarget::Nqn("nqn.a".into())));
        let r: ControlRequest = serde_json::from_str(r#""list""#).unwrap();
        assert_eq!(r, ControlRequest::List);
        let r: ControlRequest =
            serde_json::from_str(r#"{"connect":{"transport":"tcp","traddr":"::1","trsvcid":"4420","nqn":"n"}}"#)
                .unwrap();
        assert!(matches!(r, ControlRequest::Connect(p) if p.nqn == "n" && p.nbd.is_none()));
        assert!(serde_json::from_str::<ControlRequest>(r#"{"format":"c:"}"#).is_err());
        assert_eq!(serde_json::from_str::<ControlRequest>(r#""reload""#).unwrap(), ControlRequest::Reload);
        assert_eq!(serde_json::from_str::<ControlRequest>(r#""config_path""#).unwrap(), ControlRequest::ConfigPath);
        let reply = serde_json::to_string(&ControlReply::Reloaded { changes: vec!["no changes".into()] }).unwrap();
        assert_eq!(reply, r#"{"reloaded":{"changes":["no changes"]}}"#);
        let reply = serde_json::to_string(&ControlReply::Error { message: "x".into() }).unwrap();
        assert_eq!(reply, r#"{"error":{"message":"x"}}"#);
    }
}
