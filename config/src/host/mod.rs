//! The host daemon's configuration (`nvmf-host run --config FILE`): the validated model ([`HostConfig`] and its
//! parts) and loading from TOML with located errors, in the same two passes and error style as the target's
//! ([`crate::target`]): serde into the file schema (`schema`, unknown keys rejected), then `validate`, which fills
//! in every default so the daemon never has to know one.
//!
//! The file's sections: `[host]` (identity overrides, state directory, control socket, how queue threads poll),
//! `[metrics]`, `[logging]` (as the target's), `[[controller]]` (one NVMe-oF controller to keep connected,
//! nvme-cli's connect options) and `[[controller.export]]` (a namespace of it served as a block device).
//! `config/examples/host.toml` documents every key. Runs on the control plane at start-up; it reads the file (and
//! the secret files it names, which must not be readable by group or others) and never blocks on anything else.

mod schema;
#[cfg(test)]
mod tests;
mod validate;

pub use validate::{DEFAULT_PATH_RETRIES, DEFAULT_TLS_IDENTITY_VERSION};

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::tls::{ConfiguredPsk, IdentityVersion, PskDerivation};

use crate::error::ConfigError;
use crate::target::{place, read_file, syntax_error, LoggingConfig, MetricsConfig, Transport};
use crate::PollMode;

/// Default state directory (generated host NQN and host ID live here).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nvmf-host";
/// Default control socket of the daemon (what the CLI talks to).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/nvmf-host/control.sock";
/// Default bound on an adaptive queue thread's spin after work (`poll_window_us`), in microseconds.
pub const DEFAULT_POLL_WINDOW_US: u32 = 200;
/// Largest `poll_window_us`: 100 ms of spinning is already a busy thread.
pub const MAX_POLL_WINDOW_US: u32 = 100_000;
/// Suggested metrics address of the host daemon (documented in the example; not a default).
pub const SUGGESTED_METRICS_LISTEN: &str = "127.0.0.1:9656";

/// The whole validated host configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// `[host]`.
    pub host: HostSection,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[logging]`.
    pub logging: LoggingConfig,
    /// `[[controller]]`: controllers to connect at start and keep connected (may be empty: the CLI adds more).
    pub controllers: Vec<ControllerConfig>,
}

/// `[host]`: who this host is and where the daemon keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSection {
    /// Host NQN override (a valid NQN). Default: `/etc/nvme/hostnqn`, else generated once into `state_dir`.
    pub hostnqn: Option<String>,
    /// Host Identifier override (a UUID). Default: `/etc/nvme/hostid`, else generated once into `state_dir`.
    pub hostid: Option<[u8; 16]>,
    /// Directory of the daemon's state (generated `hostnqn` and `hostid`). Default `/var/lib/nvmf-host`.
    pub state_dir: PathBuf,
    /// Unix socket the CLI's `connect`, `disconnect`, `list` … talk to. Default `/run/nvmf-host/control.sock`.
    pub control_socket: PathBuf,
    /// How every queue's I/O thread waits for completions (`poll`): adaptive (default), sleep or busy.
    pub poll: PollMode,
    /// How long an adaptive queue thread may keep polling after work before it sleeps (`poll_window_us`,
    /// 1..=100000 µs). Default 200 µs.
    pub poll_window: Duration,
    /// CPUs the I/O queues' threads are pinned to (`cpus`), I/O queue `q` of every controller (and the thread of
    /// its export's ublk queue) on `cpus[(q - 1) % len]`; empty: not pinned. `None` (the default): the CPUs the
    /// daemon may run on.
    pub cpus: Option<Vec<usize>>,
}

/// `[[controller]]`: one controller (subsystem at a transport address) to keep connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// The fabric: `tcp` or `rdma` (NVMe/RDMA through RDMA CM; `address` is the RDMA device's IP address).
    pub transport: Transport,
    /// The controller's IP address.
    pub address: IpAddr,
    /// Its port, 1..=65535. Default 4420.
    pub port: u16,
    /// Subsystem NQN (not the discovery NQN).
    pub nqn: String,
    /// I/O queues to ask for (`--nr-io-queues`), 1..=65534. Default: the CPUs available at load time.
    pub nr_io_queues: u16,
    /// Entries per I/O queue (`--queue-size`), 2..=1024. Default 128.
    pub queue_size: u16,
    /// Keep Alive Timeout (`--keep-alive-tmo`, whole seconds, 0 disables). Default 5 s.
    pub keep_alive_tmo: Duration,
    /// Time between reconnect attempts (`--reconnect-delay`, whole seconds ≥ 1). Default 10 s.
    pub reconnect_delay: Duration,
    /// Give up reconnecting after this long (`--ctrl-loss-tmo`, seconds; -1 = never, `None`). Default 600 s.
    pub ctrl_loss_tmo: Option<Duration>,
    /// Fail held I/O after this long while reconnecting (`--fast-io-fail-tmo`, seconds; -1 = off, `None`).
    /// Default off.
    pub fast_io_fail_tmo: Option<Duration>,
    /// How an export reached through several controllers spreads its commands over them (`--iopolicy`, Linux's
    /// names): `round-robin` (default) or `queue-depth`. The first controller of an export decides.
    pub iopolicy: IoPolicy,
    /// How many times an export sends a command again after it failed on a path (its connection lost, or a
    /// path-related status without DNR), 0..=15; then the command fails. The first controller decides. Default 5.
    pub path_retries: u8,
    /// Header digests (`--hdr-digest`). Default false.
    pub hdr_digest: bool,
    /// Data digests (`--data-digest`). Default false.
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (`--disable-sqflow`). Default false.
    pub disable_sqflow: bool,
    /// The network interface the connections leave through (`--host-iface`; NVMe/TCP only). Default: the route's.
    pub host_iface: Option<String>,
    /// The host's DH-HMAC-CHAP secret (`dhchap_secret`, or read from `dhchap_secret_file`). Default none.
    pub dhchap_secret: Option<DhchapSecret>,
    /// The controller's DH-HMAC-CHAP secret for bidirectional authentication (`dhchap_ctrl_secret` or
    /// `dhchap_ctrl_secret_file`; needs the host's). Default none.
    pub dhchap_ctrl_secret: Option<DhchapSecret>,
    /// NVMe/TCP over TLS 1.3 with this pre-shared key (`tls_key` or `tls_key_file`, the interchange format;
    /// `--tls --tls-key`): every queue's connection is secured before its ICReq. Default none: plaintext.
    pub tls_key: Option<ConfiguredPsk>,
    /// The PSK identity's version (`tls_identity_version`, `--tls-identity-version`). Default 1, as
    /// `nvme connect --tls-key` makes.
    pub tls_identity_version: IdentityVersion,
    /// Derive the TLS PSK as libnvme did before 1.16 (`tls_compat`, nvme-cli's `--compat`). Default false.
    pub tls_compat: bool,
    /// Secure channel concatenation (`concat`, `--concat`): the admin queue's DH-HMAC-CHAP generates the PSK every
    /// queue is then secured with (TLS 1.3), as `nvme connect --concat`; needs `dhchap_secret`, no `tls_key`, TCP.
    /// Default false.
    pub concat: bool,
    /// `[[controller.export]]`: namespaces served as block devices (NSIDs unique).
    pub exports: Vec<ExportConfig>,
}

impl ControllerConfig {
    /// The controller's socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    /// How the TLS PSK is derived from `tls_key`.
    pub fn tls_derivation(&self) -> PskDerivation {
        if self.tls_compat {
            PskDerivation::Compat
        } else {
            PskDerivation::Rfc8446
        }
    }
}

/// How a multipath export spreads commands over its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoPolicy {
    /// Each command to the next of the best paths.
    #[default]
    RoundRobin,
    /// Each command to the best path with the fewest commands outstanding.
    QueueDepth,
}

impl IoPolicy {
    /// Every policy.
    pub const ALL: [IoPolicy; 2] = [IoPolicy::RoundRobin, IoPolicy::QueueDepth];

    /// The policy's name, Linux's: `round-robin`, `queue-depth`.
    pub fn name(self) -> &'static str {
        match self {
            IoPolicy::RoundRobin => "round-robin",
            IoPolicy::QueueDepth => "queue-depth",
        }
    }

    /// From its name (see [`IoPolicy::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        IoPolicy::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for IoPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for IoPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IoPolicy::from_name(s).ok_or_else(|| format!("unknown I/O policy {s:?}: round-robin or queue-depth"))
    }
}

/// `[[controller.export]]`: one namespace served as a block device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// The namespace, 1..=0xFFFFFFFE.
    pub nsid: u32,
    /// How it is served: exactly one of `nbd = "…"` and `ublk = true`.
    pub kind: ExportKind,
}

/// How an export serves its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportKind {
    /// An NBD server (`nbd = "unix:/path"` or `nbd = "ADDR:PORT"`).
    Nbd(NbdEndpoint),
    /// A `/dev/ublkbN` block device through ublk_drv (`ublk = true`).
    Ublk,
}

/// Where an NBD export listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NbdEndpoint {
    /// A unix socket path (`unix:/run/nvmf-host/disk.sock`); a relative path is relative to the file's directory.
    Unix(PathBuf),
    /// A loopback TCP address (`127.0.0.1:10809`); others are refused (NBD has no authentication).
    Tcp(SocketAddr),
}

impl fmt::Display for NbdEndpoint {
    /// The spelling the file and the CLI's `--nbd` use: `unix:/path` or `ADDR:PORT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NbdEndpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            NbdEndpoint::Tcp(addr) => write!(f, "{addr}"),
        }
    }
}

impl NbdEndpoint {
    /// Parse `unix:/path` or `ADDR:PORT` (the CLI's `--nbd`; relative unix paths stay as written).
    pub fn parse(text: &str) -> Result<Self, crate::error::ValueError> {
        validate::nbd_endpoint(text, None)
    }
}

impl HostConfig {
    /// Read and validate the configuration file at `path`. Relative paths in it are taken relative to the file's
    /// directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let (text, base) = read_file(path)?;
        load(&text, &path.display().to_string(), base)
    }

    /// Validate configuration `text`; `origin` names it in errors. Relative paths stay as written.
    pub fn from_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        load(text, origin, None)
    }
}

fn load(text: &str, origin: &str, base: Option<&Path>) -> Result<HostConfig, ConfigError> {
    let raw: schema::RawHostConfig = toml::from_str(text).map_err(|error| syntax_error(&error, text, origin))?;
    validate::validate(&raw, base, crate::target::available_cpus()).map_err(|problem| place(problem, text, origin))
}
