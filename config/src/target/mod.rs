//! The target's configuration: the validated model ([`TargetConfig`] and its parts), loading from TOML with
//! located errors, and printing the effective configuration back as TOML.
//!
//! Loading is two passes over the text: serde into the file schema (`schema`, unknown keys rejected), then
//! `validate` into this module's types, where every default is filled in (derived serial numbers and namespace
//! identifiers included), so the daemon never has to know a default. Errors of either pass are placed at a file,
//! line and column with the key path (see [`crate::error`]). Runs on the control plane at start-up (and on reload);
//! it reads one file and never blocks on anything else.
//!
//! The file's sections: `[target]` (controller limits), `[[listener]]` (+ `[listener.tcp]`), `[[subsystem]]` (+
//! `[[subsystem.namespace]]`), `[discovery]`, `[reactors]`, `[metrics]`, `[logging]`. `config/examples/target.toml`
//! documents every key with its default and allowed values.

mod schema;
#[cfg(test)]
mod tests;
mod to_raw;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nvmf_common::fabrics::auth::dh::DhGroup;
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::tls::ConfiguredPsk;
use nvmf_common::nvme::log_page::AnaState;
use serde::{Deserialize, Serialize};

use crate::document::SpanIndex;
use crate::error::{ConfigError, Location, Problem, ValueError};
use crate::ids::{Eui64, Nguid, Uuid};
pub use crate::PollMode;

pub(crate) use schema::*;
pub(crate) use to_raw::backend_to_raw;
pub(crate) use validate::validate;
// Shared with the host configuration's validation.
pub(crate) use validate::{check_nqn, cpu_list, int_in, ip_address, logging, metrics, socket_address};

/// Default NVMe/TCP and NVMe/RDMA port (IANA "nvme-over-fabrics" is 4420; 8009 is the discovery port).
pub const DEFAULT_PORT: u16 = 4420;
/// Conventional port of a discovery-only listener.
pub const DISCOVERY_PORT: u16 = 8009;
/// Largest ANA group ID (`[[subsystem.namespace]] ana_group`), the target's ANAGRPMAX.
pub const MAX_ANA_GROUP: u32 = 128;
/// What `[[listener]] ana_state` may be.
pub const ANA_STATE_ALLOWED: &str = "optimized, non-optimized, inaccessible, persistent-loss or change";
/// What the keys of `[[listener]] ana_group_states` may be.
pub const ANA_GROUP_STATES_ALLOWED: &str =
    "ANA group IDs 1..=128 as keys, each once, e.g. ana_group_states = { 2 = \"non-optimized\" }";
/// Default `[[subsystem.namespace]] ceph_conf` of an `rbd` namespace: where librados looks by default.
pub const DEFAULT_CEPH_CONF: &str = "/etc/ceph/ceph.conf";
/// Default `[[subsystem.namespace]] ceph_id` of an `rbd` namespace: the cephx user the `rbd` command uses by default.
pub const DEFAULT_CEPH_ID: &str = "admin";
/// Longest pool, RADOS namespace, image or cephx user name, in bytes.
const MAX_CEPH_NAME: usize = 255;
/// What an RBD image name (`rbd` in the file, `rbd:` on the command line) may be.
pub const RBD_IMAGE_ALLOWED: &str = "POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a \
     snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\"";
/// What a cephx user name (`ceph_id` in the file, `ceph-id=` on the command line) may be.
pub const CEPH_ID_ALLOWED: &str =
    "a cephx user such as \"admin\" or \"client.admin\": 1 to 255 bytes without whitespace or control characters";

/// A fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// NVMe/TCP.
    Tcp,
    /// NVMe/RDMA.
    Rdma,
}

impl Transport {
    /// The URL scheme and TOML spelling: `tcp` or `rdma`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The whole validated target configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetConfig {
    /// `[target]`: limits every controller advertises.
    pub limits: ControllerLimits,
    /// `[[listener]]`: where hosts connect (at least one).
    pub listeners: Vec<ListenerConfig>,
    /// `[[subsystem]]`: the NVM subsystems exported (NQNs unique).
    pub subsystems: Vec<SubsystemConfig>,
    /// `[discovery]`.
    pub discovery: DiscoveryConfig,
    /// `[reactors]`.
    pub reactors: ReactorConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[logging]`.
    pub logging: LoggingConfig,
}

/// `[target]`: controller limits, the same for every subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerLimits {
    /// Maximum data transfer size in bytes (Identify Controller MDTS, as a power of two times 4 KiB); a power of
    /// two from 4 KiB to 16 MiB. Default 1 MiB. Pool buffers are at least this large.
    pub mdts: u32,
    /// Most entries in one queue (CAP.MQES + 1), 32..=65536 (Linux's admin queue has 32). Default 128.
    pub max_queue_size: u32,
    /// Most I/O queues one controller may be granted (Set Features Number of Queues), 1..=65534. Default 128.
    pub max_io_queues: u16,
    /// Keep-alive timer granularity in milliseconds (Identify Controller KAS is this / 100), a multiple of 100
    /// from 100 to 6553500. Default 100.
    pub keep_alive_granularity_ms: u32,
    /// Longest keep-alive timeout (KATO) a host may ask for, in milliseconds; at least the granularity.
    /// Default 3600000 (one hour).
    pub keep_alive_max_ms: u32,
    /// Shortest keep-alive timeout a controller runs with, in milliseconds: 0 (none; KATO 0, no keep-alive, is
    /// accepted as Linux nvmet accepts it) or the granularity..=keep_alive_max_ms. A host's shorter KATO is raised
    /// to it and KATO 0 is refused. Default 0.
    pub keep_alive_min_ms: u32,
    /// How long a new queue pair may take from its transport connection to a completed Fabrics Connect (NVMe/TCP:
    /// ICReq included), in milliseconds, 100..=600000; a peer that takes longer is disconnected. Default 10000.
    pub connect_timeout_ms: u32,
    /// How long a connection may wait on its peer without progress — the peer reads none of the data queued for
    /// it, or sends none of the data it was asked for (NVMe/TCP R2T) — in milliseconds, 1000..=3600000; then it
    /// is disconnected. Default 30000.
    pub transfer_timeout_ms: u32,
    /// The most of each size class of a reactor's buffer pool one queue may hold, in percent, 1..=100. Default 50.
    pub queue_buffer_percent: u8,
    /// The most of each size class of a reactor's buffer pool that all queues of peers not admitted to an NVM
    /// subsystem (before their Connect completed, or on a discovery controller) may hold together, in percent,
    /// 1..=100. Default 25.
    pub anonymous_buffer_percent: u8,
    /// The most transport connections (NVMe/TCP connections, NVMe/RDMA queue pairs) one peer address — all the
    /// addresses of its prefix ([`address_prefix_v4`](Self::address_prefix_v4), `_v6`) — may hold at once,
    /// 1..=1048576; more are refused. Default 1024.
    pub max_connections_per_address: u32,
    /// The IPv4 prefix length under which peer addresses count as one for `max_connections_per_address`, 1..=32.
    /// Default 32 (each address).
    pub address_prefix_v4: u8,
    /// The same for IPv6, 1..=128. Default 64: a host owns its /64, so exact addresses would not limit it.
    pub address_prefix_v6: u8,
    /// The most live controllers one host NQN may have in one subsystem (the discovery subsystem included), 1..=65519;
    /// one more Connect is refused with Controller Busy. A host has one per path. Default 64.
    pub max_controllers_per_host: u16,
    /// The most reservation registrants (hosts) of one namespace, 1..=65536; one more host's Reservation Register is
    /// refused with Insufficient Capacity. Default 1024.
    pub max_registrants: u32,
    /// The DH-HMAC-CHAP Diffie-Hellman groups a host with keys may negotiate when its `[[subsystem.host]]` names
    /// none, in order of preference. Default null, ffdhe2048, ffdhe3072, ffdhe4096: ffdhe6144 and ffdhe8192 cost
    /// 10 and 21 ms of a CPU per exponentiation, two per transaction, one transaction per queue.
    pub dhchap_dhgroups: Vec<DhGroup>,
    /// Threads that run DH-HMAC-CHAP's Diffie-Hellman steps, off the reactors, 1..=64. Default 2.
    pub auth_threads: u16,
    /// DH steps the authentication threads may have queued, 1..=65536; one more waits (its command retries).
    /// Default 64.
    pub auth_queue_depth: u32,
    /// Threads that run the TLS handshakes of listeners with `tls`, off the reactors, 1..=64. Default 2.
    pub tls_threads: u16,
    /// Connections waiting for a TLS handshake thread, 1..=65536; more are closed. Default 64.
    pub tls_queue_depth: u32,
    /// AUTH_Negotiates (authentication attempts, each a DH key pair and shared secret) one peer address prefix
    /// ([`address_prefix_v4`](Self::address_prefix_v4), `_v6`) may send per second, in bursts of as many,
    /// 1..=1000000; one more fails its transaction. Default 256.
    pub auth_attempts_per_second: u32,
    /// NVMe/TCP keepalive: a connection whose peer has been silent this long (ms) is probed, and closed after three
    /// unanswered probes a tenth of it apart; 0 turns probes off. 0 or 10000..=86400000. Default 60000.
    pub tcp_keepalive_ms: u32,
    /// NVMe/TCP: the most bytes of PDUs (responses, read data, R2Ts) one connection may have waiting for its host
    /// to read before the target stops reading new PDUs from it, until the host catches up; 64KiB..=1GiB.
    /// Default 8MiB.
    pub tcp_send_backlog: u32,
    /// RBD namespaces: how long connecting to the Ceph cluster and each monitor request may take, in milliseconds,
    /// 1000..=600000 (librados' `client_mount_timeout`, `rados_mon_op_timeout`). Default 30000.
    pub ceph_mon_timeout_ms: u32,
    /// RBD namespaces: how long each OSD request may take, in milliseconds, 1000..=600000
    /// (`rados_osd_op_timeout`); a command whose storage op outlives it is answered with a retryable path error.
    /// Default 30000.
    pub ceph_osd_timeout_ms: u32,
    /// Where the target keeps state across restarts: the reservations of namespaces whose hosts enabled Persist
    /// Through Power Loss (`reservations/`). An absolute path; created (0700) at start if missing, and if unusable
    /// the target warns and runs without it (no PTPL). Default
    /// `/var/lib/nvmf-target`.
    pub state_dir: PathBuf,
}

impl ControllerLimits {
    /// Identify Controller KAS: keep-alive granularity in units of 100 ms.
    pub fn kas(&self) -> u16 {
        // Validated: keep_alive_granularity_ms ≤ 6_553_500.
        u16::try_from(self.keep_alive_granularity_ms / 100).unwrap_or(u16::MAX)
    }

    /// CAP.MQES: the largest queue size, 0's based.
    pub fn mqes(&self) -> u16 {
        // Validated: max_queue_size ≤ 65536.
        u16::try_from(self.max_queue_size - 1).unwrap_or(u16::MAX)
    }
}

/// `[[listener]]`: one address a transport listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// IP address and port (default port 4420).
    pub address: SocketAddr,
    /// Most entries in one queue on this listener: at most `[target].max_queue_size`, which is the default.
    pub max_queue_size: u32,
    /// Largest in-capsule data in bytes (IOCCSZ = (64 + this) / 16); a multiple of 16, at most MDTS. Default 16 KiB
    /// (Linux nvmet's TCP default).
    pub in_capsule_data_size: u32,
    /// The most transport connections (NVMe/TCP connections, NVMe/RDMA queue pairs) the listener holds at once,
    /// 1..=1048576; more are refused. Default 4096.
    pub max_connections: u32,
    /// Asymmetric Namespace Access: the state of every ANA group on this listener at start, but those in
    /// `ana_group_states` (`optimized`,
    /// `non-optimized`, `inaccessible`, `persistent-loss`, `change`). A host's multipath sends I/O to the
    /// optimized paths, then the non-optimized ones; I/O to a group in another state fails on this listener with
    /// an ANA status and the host uses another path. Default `optimized`. `nvmf-target ana-state` changes it while
    /// running.
    pub ana_state: AnaState,
    /// `ana_group_states`: the state at start of the ANA groups (1..=128) that differ from `ana_state` on this
    /// listener, as Linux nvmet's `ports/N/ana_groups/G/ana_state`; e.g. a gateway group of two targets exporting
    /// the same subsystem, each optimized for its own groups. Default empty.
    pub ana_group_states: BTreeMap<u32, AnaState>,
    /// The fabric and its own options.
    pub transport: ListenerTransport,
}

impl ListenerConfig {
    /// ANA group `group`'s state on this listener at start: its own in `ana_group_states`, else `ana_state`.
    pub fn group_ana_state(&self, group: u32) -> AnaState {
        self.ana_group_states.get(&group).copied().unwrap_or(self.ana_state)
    }

    /// The fabric.
    pub fn transport_type(&self) -> Transport {
        match self.transport {
            ListenerTransport::Tcp(_) => Transport::Tcp,
            ListenerTransport::Rdma(_) => Transport::Rdma,
        }
    }
}

impl fmt::Display for ListenerConfig {
    /// `tcp://127.0.0.1:4420`, `rdma://[::1]:4420`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.transport_type(), self.address)
    }
}

/// The fabric of a listener with that fabric's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerTransport {
    /// NVMe/TCP with `[listener.tcp]`.
    Tcp(TcpOptions),
    /// NVMe/RDMA with `[listener.rdma]`.
    Rdma(RdmaOptions),
}

/// `[listener.rdma]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaOptions {
    /// Answer a command whose keyed SGL asks for remote invalidation (subtype Fh, as the Linux host sends) with
    /// SEND with invalidate where the RDMA device supports it; otherwise a plain SEND (the host then invalidates
    /// locally). Default true.
    pub send_with_invalidate: bool,
    /// Receive command capsules through one shared receive queue per reactor and device (buffers shared by all
    /// the reactor's queue pairs on that device) instead of `depth` receive buffers per queue pair. Default false.
    pub srq: bool,
}

impl Default for RdmaOptions {
    fn default() -> Self {
        RdmaOptions { send_with_invalidate: true, srq: false }
    }
}

/// `[listener.tcp]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpOptions {
    /// Grant a header digest (HDGST) when the host's ICReq asks for one. Default true.
    pub header_digest: bool,
    /// Grant a data digest (DDGST) when the host's ICReq asks for one. Default true.
    pub data_digest: bool,
    /// TLS 1.3 with pre-shared keys (`[[listener]] tls`): `none`, `allowed` (TLS and plaintext connections) or
    /// `required` (plaintext ones are closed), as nvmet's `addr_tsas` and `addr_treq`; the discovery log says so.
    /// Default `none`.
    pub tls: TlsMode,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions { header_digest: true, data_digest: true, tls: TlsMode::None }
    }
}

/// Whether an NVMe/TCP listener secures its connections with TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plaintext only (a TLS ClientHello is not NVMe/TCP: the connection fails).
    #[default]
    None,
    /// Both: a connection that starts with a TLS handshake is secured, one that starts with an ICReq is not.
    Allowed,
    /// TLS only: a plaintext connection is closed.
    Required,
}

impl TlsMode {
    /// `none`, `allowed`, `required`.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::None => "none",
            TlsMode::Allowed => "allowed",
            TlsMode::Required => "required",
        }
    }

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        [TlsMode::None, TlsMode::Allowed, TlsMode::Required].into_iter().find(|m| m.name() == name)
    }
}

/// `[[subsystem]]`: one NVM subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// Subsystem NQN (1..=223 bytes without control characters, as Linux nvmet takes it; best in the format of
    /// NVMe Base 2.0 §4.5), not the discovery NQN, unique in the target.
    pub nqn: String,
    /// Serial number (Identify Controller SN): 1..=20 printable ASCII characters. Default: derived from the NQN
    /// ([`crate::ids::derive_serial`]).
    pub serial: String,
    /// Model number (Identify Controller MN): 1..=40 printable ASCII characters. Default `nvmf-rs`.
    pub model: String,
    /// Any host may connect. Default: true when `hosts` is empty. True with hosts listed is rejected, and so is
    /// false with none.
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false (names as for `nqn`, unique), without keys.
    pub hosts: Vec<String>,
    /// `[[subsystem.host]]`: hosts with DH-HMAC-CHAP keys, which must authenticate every queue (allowed to connect
    /// too; not also in `hosts`).
    pub host_keys: Vec<HostKeysConfig>,
    /// Refuse the Connect of a host without keys here. Default false.
    pub auth_required: bool,
    /// Lowest controller ID handed out, 1..=0xFFEF. Default 1.
    pub cntlid_min: u16,
    /// Highest controller ID handed out, `cntlid_min..=0xFFEF`. Default 0xFFEF.
    pub cntlid_max: u16,
    /// Identify Controller NN: the largest NSID, 1..=0xFFFFFFFE. Default 1024.
    pub max_namespaces: u32,
    /// `[[subsystem.namespace]]`: the namespaces, in file order (NSIDs unique).
    pub namespaces: Vec<NamespaceConfig>,
}

impl SubsystemConfig {
    /// Every host allowed to connect (when not `allow_any_host`): `hosts`, then the hosts with keys.
    pub fn allowed_hosts(&self) -> Vec<String> {
        self.hosts.iter().cloned().chain(self.host_keys.iter().map(|h| h.nqn.clone())).collect()
    }
}

/// `[[subsystem.host]]`: one host's DH-HMAC-CHAP settings. `Debug` prints no key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeysConfig {
    /// The host NQN (names as for `nqn`).
    pub nqn: String,
    /// The host's key (`dhchap_key` or `dhchap_key_file`): the host proves it holds it (nvme-cli's
    /// `--dhchap-secret`). A host entry has this key, a `tls_key`, or both.
    pub dhchap_key: Option<SecretConfig>,
    /// The controller's key (`dhchap_ctrl_key` or `dhchap_ctrl_key_file`): the target proves it holds it when the
    /// host asks (nvme-cli's `--dhchap-ctrl-secret`, bidirectional authentication). Default none.
    pub dhchap_ctrl_key: Option<SecretConfig>,
    /// Hash functions the host may use, in order of preference. Default: all (SHA-256 first, as nvmet).
    pub dhchap_hashes: Vec<HashFunction>,
    /// DH groups the host may use, in order of preference. Default: all (null first, as nvmet).
    pub dhchap_dhgroups: Vec<DhGroup>,
    /// The only host ID (a UUID, nvme-cli's `--hostid`) this host NQN may connect with, and that no other host NQN
    /// may use. Default none: the host ID of the host's first authenticated queue is bound to it until the target
    /// restarts.
    pub hostid: Option<Uuid>,
    /// The host's NVMe/TCP pre-shared key (`tls_key` or `tls_key_file`) in the interchange format
    /// (`NVMeTLSkey-1:01:…:`, nvme-cli's `gen-tls-key`): the TLS PSK of its connections to this subsystem is
    /// derived from it, the host NQN and the subsystem NQN, for identity version 0 or 1 (whichever the host
    /// offers). Default none: the host cannot connect over TLS.
    pub tls_key: Option<TlsKeyConfig>,
    /// Derive the PSK of version 0 identities as libnvme did before 1.16 (nvme-cli's `--compat`; nvme-cli 2.13
    /// knows only that one), for keys set up with older tools. A version 1 identity's digest says which derivation
    /// its host used, and either is taken. Default false.
    pub tls_key_compat: bool,
}

/// A TLS pre-shared key of the configuration and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsKeyConfig {
    /// The configured PSK (wiped when dropped; `Debug` shows its length only).
    pub key: ConfiguredPsk,
    /// The file it was read from (`None`: written inline).
    pub file: Option<PathBuf>,
}

/// A secret of the configuration and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretConfig {
    /// The secret (wiped when dropped; `Debug` shows its length only).
    pub secret: DhchapSecret,
    /// The file it was read from (`None`: written inline).
    pub file: Option<PathBuf>,
}

/// `[[subsystem.namespace]]`: one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Namespace ID, 1..=`max_namespaces`, unique in its subsystem. Default: one more than the previous
    /// namespace's (1 for the first).
    pub nsid: u32,
    /// Where the data lives.
    pub backend: NamespaceBackend,
    /// Logical block size in bytes: 512 or 4096. Default 512.
    pub block_size: u32,
    /// Read and write a `path` backend through the page cache instead of O_DIRECT (nvmet's `buffered_io`).
    /// Default false; true only with `path`.
    pub buffered_io: bool,
    /// Namespace UUID. Default: derived ([`crate::ids::derive_uuid`]). Unique in the target.
    pub uuid: Uuid,
    /// Namespace NGUID. Default: derived ([`crate::ids::derive_nguid`]). Unique in the target.
    pub nguid: Nguid,
    /// Namespace EUI-64. Default: derived ([`crate::ids::derive_eui64`]). Unique in the target.
    pub eui64: Eui64,
    /// Asymmetric Namespace Access group ID (Identify Namespace ANAGRPID), 1..=128: the namespace's path states
    /// are its group's on each listener. Default 1.
    pub ana_group: u32,
}

/// The storage behind a namespace: exactly one of `path`, `memory`, `null`, `rbd` in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceBackend {
    /// A block device or regular file (`path = "/dev/nvme0n1"`). A relative path in a file is relative to the
    /// configuration file's directory. Its size is the device's or file's.
    Path(PathBuf),
    /// RAM of `size` bytes, zero-filled at start, lost at exit (`memory = "1GiB"`). A multiple of the block size.
    Memory {
        /// Capacity in bytes.
        size: u64,
    },
    /// Discards writes and reads zeroes, `size` bytes (`null = "1TiB"`). A multiple of the block size.
    Null {
        /// Capacity in bytes.
        size: u64,
    },
    /// A Ceph RBD image reached through librbd (`rbd = "POOL/IMAGE"`, with `ceph_conf` and `ceph_id`), which must
    /// exist. Its capacity is the image's size rounded down to the block size, and follows the image when it is
    /// resized.
    Rbd(RbdImage),
}

/// A Ceph RBD image reached through librbd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdImage {
    /// The pool (`rbd`).
    pub pool: String,
    /// The RADOS namespace inside the pool; empty for the pool's default namespace.
    pub rados_namespace: String,
    /// The image's name.
    pub image: String,
    /// The Ceph configuration file (monitors, keyring path). Default /etc/ceph/ceph.conf.
    pub ceph_conf: PathBuf,
    /// The cephx user without the `client.` prefix. Default `admin`.
    pub ceph_id: String,
}

impl RbdImage {
    /// The image named `name` (`POOL/IMAGE` or `POOL/NAMESPACE/IMAGE`, see [`parse_rbd_image_name`]), reached
    /// with the default Ceph configuration file and user.
    pub fn parse(name: &str) -> Result<Self, ValueError> {
        let (pool, rados_namespace, image) = parse_rbd_image_name(name)?;
        Ok(RbdImage {
            pool,
            rados_namespace,
            image,
            ceph_conf: PathBuf::from(DEFAULT_CEPH_CONF),
            ceph_id: DEFAULT_CEPH_ID.to_owned(),
        })
    }
}

impl fmt::Display for RbdImage {
    /// The image's name as the `rbd` command writes it: `POOL/IMAGE` or `POOL/NAMESPACE/IMAGE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rados_namespace.is_empty() {
            write!(f, "{}/{}", self.pool, self.image)
        } else {
            write!(f, "{}/{}/{}", self.pool, self.rados_namespace, self.image)
        }
    }
}

/// Parse an RBD image name as the `rbd` command writes it, `POOL/IMAGE` or `POOL/NAMESPACE/IMAGE`, into (pool,
/// RADOS namespace, image); the namespace is empty in the first form. Each part is 1..=255 bytes without whitespace
/// or control characters; a snapshot (`@SNAP`) is refused, since snapshots are read-only.
pub fn parse_rbd_image_name(text: &str) -> Result<(String, String, String), ValueError> {
    let error = |problem: String| ValueError::new(problem, RBD_IMAGE_ALLOWED);
    if text.is_empty() {
        return Err(error("the image name is empty".to_owned()));
    }
    if text.contains('@') {
        return Err(error(format!("{text:?} names a snapshot: snapshots are read-only; export the image itself")));
    }
    if let Some(bad) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(error(format!("image name {text:?} contains {bad:?}")));
    }
    let parts: Vec<&str> = text.split('/').collect();
    let (pool, rados_namespace, image) = match parts[..] {
        [pool, image] => (pool, None, image),
        [pool, rados_namespace, image] => (pool, Some(rados_namespace), image),
        [_] => return Err(error(format!("image name {text:?} has no pool"))),
        _ => return Err(error(format!("image name {text:?} has {} parts, at most 3", parts.len()))),
    };
    let named = [("pool", Some(pool)), ("RADOS namespace", rados_namespace), ("image", Some(image))];
    for (what, part) in named.into_iter().filter_map(|(what, part)| Some((what, part?))) {
        if part.is_empty() {
            return Err(error(format!("the {what} of {text:?} is empty")));
        }
        if part.len() > MAX_CEPH_NAME {
            return Err(error(format!("the {what} of {text:?} is {} bytes long", part.len())));
        }
    }
    Ok((pool.to_owned(), rados_namespace.unwrap_or_default().to_owned(), image.to_owned()))
}

/// Parse a cephx user name, with or without its `client.` prefix (`client.admin` is `admin`), into the name
/// without it: 1..=255 bytes without whitespace or control characters.
pub fn parse_ceph_id(text: &str) -> Result<String, ValueError> {
    let id = text.strip_prefix("client.").unwrap_or(text);
    if id.is_empty() {
        return Err(ValueError::new(format!("cephx user {text:?} is empty"), CEPH_ID_ALLOWED));
    }
    if let Some(bad) = id.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(ValueError::new(format!("cephx user {text:?} contains {bad:?}"), CEPH_ID_ALLOWED));
    }
    if id.len() > MAX_CEPH_NAME {
        return Err(ValueError::new(format!("cephx user {text:?} is {} bytes long", id.len()), CEPH_ID_ALLOWED));
    }
    Ok(id.to_owned())
}

/// `[discovery]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// Serve the discovery subsystem (`nqn.2014-08.org.nvmexpress.discovery`) on every listener. Default true.
    pub enabled: bool,
    /// Hosts must authenticate to the discovery controller (DH-HMAC-CHAP) with the keys of their first
    /// `[[subsystem.host]]`; hosts with no keys anywhere are refused. Default false.
    pub auth_required: bool,
    /// Longest keep-alive timeout (KATO) a host may ask a discovery controller for, in milliseconds,
    /// 1000..=`[target] keep_alive_max_ms`; a longer one is refused. A discovery controller connected with KATO 0
    /// gets this (Linux nvmet: 120 s). Any peer may open one, so a silent one must end soon. Default 120000.
    pub keep_alive_max_ms: u32,
}

/// `[reactors]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReactorConfig {
    /// Number of reactor threads, 1..=1024. Default: the length of `cpus` if given, else the CPUs available to the
    /// process when the configuration was loaded.
    pub threads: usize,
    /// CPUs to pin reactors to, reactor `i` on `cpus[i]` (CPU numbers 0..=1023, unique, as many as `threads`).
    /// Empty: not pinned. Default empty.
    pub cpus: Vec<usize>,
    /// Block discards (Dataset Management deallocate) each reactor's discard worker may have queued, 1..=65536,
    /// on kernels without io_uring block discard (before 6.12), where a worker thread runs `BLKDISCARD` so the
    /// reactor never waits for the device; one more waits like a command on a full ring, each try counted in
    /// `nvmf_target_blkdiscard_queue_full_total`. Default 64.
    pub discard_queue_depth: usize,
    /// How a reactor with nothing to do waits: `adaptive` keeps polling after work for a window that follows the
    /// gaps between bursts, `sleep` always sleeps until an event, `busy` never sleeps. Default adaptive.
    pub poll: PollMode,
    /// The longest an adaptive reactor polls after work before it sleeps, 1..=100000 µs. Default 200.
    pub poll_window_us: u32,
    /// How NVMe/TCP sockets are read and written. Default epoll.
    pub socket_io: SocketIoMode,
    /// With `socket_io = "io_uring"`: a send carrying at least this many bytes of data goes zero copy
    /// (`IORING_OP_SENDMSG_ZC`: the NIC reads the pool's pages, held until the kernel's notification) to a host
    /// that is not on loopback (where the kernel copies anyway) over a connection without TLS; 0 never. 0..=16 MiB.
    /// Default 32768.
    pub send_zero_copy_bytes: u32,
    /// Which reactor serves an NVMe/TCP queue. Default round_robin.
    pub placement: QueuePlacement,
}

/// `[reactors] placement`: which reactor serves an NVMe/TCP queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueuePlacement {
    /// The reactor the listener deals the connection to, in turn.
    #[default]
    RoundRobin,
    /// At its Connect, the reactor pinned to the CPU its packets arrive on (`SO_INCOMING_CPU`); needs `cpus`.
    IncomingCpu,
}

impl QueuePlacement {
    /// The placement's name in the file: `round_robin`, `incoming_cpu`.
    pub fn name(self) -> &'static str {
        match self {
            QueuePlacement::RoundRobin => "round_robin",
            QueuePlacement::IncomingCpu => "incoming_cpu",
        }
    }
}

/// `[reactors] socket_io`: how a reactor drives its NVMe/TCP sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SocketIoMode {
    /// Readiness from epoll, then `read` and `writev`.
    #[default]
    Epoll,
    /// Receives and sends as ops on the reactor's io_uring, submitted with its storage ops, when the kernel has
    /// them; else epoll.
    IoUring,
}

impl SocketIoMode {
    /// The mode's name in the file: `epoll`, `io_uring`.
    pub fn name(self) -> &'static str {
        match self {
            SocketIoMode::Epoll => "epoll",
            SocketIoMode::IoUring => "io_uring",
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Address of the Prometheus `/metrics` endpoint, e.g. `127.0.0.1:9420`. Default: none (no endpoint).
    pub listen: Option<SocketAddr>,
}

/// Suggested metrics address (documented in the example; not a default).
pub const SUGGESTED_METRICS_LISTEN: &str = "127.0.0.1:9420";

/// `[logging]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingConfig {
    /// `tracing` filter: comma-separated directives, each `LEVEL` or `TARGET=LEVEL`, levels `trace`, `debug`,
    /// `info`, `warn`, `error`, `off` (e.g. `"info,nvmf_target::tcp=debug"`). The `RUST_LOG` environment variable,
    /// when set, is the daemon's to prefer. Default `info`.
    pub level: String,
    /// Output format. Default text.
    pub format: LogFormat,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl TargetConfig {
    /// Read and validate the configuration file at `path`. Relative namespace paths are taken relative to the
    /// file's directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let (text, base) = read_file(path)?;
        load(&text, &path.display().to_string(), base)
    }

    /// Validate configuration `text`; `origin` names it in errors (a path, or e.g. `<string>`). Relative
    /// namespace paths stay as written (relative to the working directory).
    pub fn from_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        load(text, origin, None)
    }
}

fn load(text: &str, origin: &str, base: Option<&Path>) -> Result<TargetConfig, ConfigError> {
    let raw: RawTargetConfig = toml::from_str(text).map_err(|error| syntax_error(&error, text, origin))?;
    validate(&raw, base, available_cpus()).map_err(|problem| place(problem, text, origin))
}

/// CPUs this process may run on (1 when unknown).
pub(crate) fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// A TOML parse or type error, placed and given its key path.
/// A configuration file's text and the directory its relative paths are taken from.
pub(crate) fn read_file(path: &Path) -> Result<(String, Option<&Path>), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    Ok((text, path.parent().filter(|dir| !dir.as_os_str().is_empty())))
}

pub(crate) fn syntax_error(error: &toml::de::Error, text: &str, origin: &str) -> ConfigError {
    let offset = error.span().map_or(0, |span| span.start);
    let key = SpanIndex::parse(text).map(|index| index.path_at(offset)).filter(|key| !key.segments().is_empty());
    // serde names Rust types in "expected ..."; say it in TOML's words.
    let message = error.message().trim_end();
    let message = if message.is_empty() { "invalid TOML syntax here" } else { message };
    // toml reports tables and date-times as serde maps.
    let found = if text.get(offset..).is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())) {
        "invalid type: date-time"
    } else {
        "invalid type: table"
    };
    let message = message
        .replace('\n', "; ")
        .replace("invalid type: map", found)
        .replace("expected i64", "expected an integer")
        .replace("expected u64", "expected an integer")
        .replace("expected a sequence", "expected an array")
        .replace("expected a map", "expected a table");
    ConfigError::Syntax { location: Location::at(origin, text, offset), key, message }
}

/// A validation problem, placed at its key (or the nearest table present in the file).
pub(crate) fn place(problem: Problem, text: &str, origin: &str) -> ConfigError {
    let offset = SpanIndex::parse(text).map_or(0, |index| index.span_of(&problem.key).start);
    ConfigError::Invalid {
        location: Location::at(origin, text, offset),
        key: problem.key,
        problem: problem.problem,
        allowed: problem.allowed,
    }
}

impl fmt::Display for TargetConfig {
    /// The effective configuration as TOML, every default written out; it loads back as the same configuration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = toml::to_string(&to_raw::to_raw(self, false)).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl TargetConfig {
    /// [`Display`](fmt::Display)'s text with every DH-HMAC-CHAP key written inline shown as `"<redacted>"` (keys read
    /// from files show as their paths either way): what `nvmf-target --check` prints, so that no key reaches a
    /// terminal or a log. It loads back as the same configuration when no key is inline.
    pub fn to_string_redacted(&self) -> String {
        toml::to_string(&to_raw::to_raw(self, true)).unwrap_or_default()
    }
}
