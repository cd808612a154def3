//! Quick-start flags of `nvmf-target`: a whole target configuration from a few command-line flags, validated by
//! the same code as a file.
//!
//! ```text
//! nvmf-target                                  # 1 GiB memory namespace on tcp://127.0.0.1:4420
//! nvmf-target --listen tcp://0.0.0.0:4420 --namespace /dev/nvme0n1 --namespace null:1TiB,block-size=4096 \
//!             --nqn nqn.2024-01.com.example:disk --allow-host nqn.2014-08.org.nvmexpress:uuid:…
//! ```
//!
//! - `--listen URL` (repeatable): `tcp://ADDR[:PORT]` or `rdma://ADDR[:PORT]`, IPv6 in brackets, port default
//!   4420. Without it: [`DEFAULT_LISTEN`].
//! - `--namespace SPEC` (repeatable; NSIDs 1, 2, … in order): `PATH`, `memory:SIZE` or `null:SIZE` (sizes as in
//!   [`crate::size`]), then optionally `,uuid=UUID`, `,nguid=HEX32`, `,eui64=HEX16`, `,block-size=512|4096`.
//!   Identifiers not given are derived from the NQN and NSID ([`crate::ids`]), so they survive restarts. A path
//!   that itself starts with `memory:` or `null:` or holds a comma needs a configuration file (or `./memory:…`).
//!   Without any: [`DEFAULT_NAMESPACE`].
//! - `--nqn NQN`: the one subsystem's NQN, default [`DEFAULT_NQN`].
//! - `--allow-host NQN` (repeatable): only these hosts may connect; without it any host may.
//! - `--metrics ADDR:PORT`: serve Prometheus metrics there.
//!
//! Each missing flag takes its default independently, so with no flags at all the target exports a 1 GiB memory
//! namespace on `tcp://127.0.0.1:4420` as `nqn.2024-01.io.nvmf-rs:default`. Everything else (limits, discovery on,
//! reactors = available CPUs, `info` logging) is the configuration file's default.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::error::{ConfigError, KeySegment, Problem, ValueError};
use crate::ids::{self, Eui64, Nguid, Uuid};
use crate::size::{format_size, parse_size};
use crate::target::{
    available_cpus, validate, NamespaceBackend, RawListener, RawMetrics, RawNamespace, RawSize, RawSubsystem,
    RawTargetConfig, TargetConfig, Transport, DEFAULT_PORT,
};

/// The subsystem NQN when `--nqn` is absent.
pub const DEFAULT_NQN: &str = "nqn.2024-01.io.nvmf-rs:default";
/// The listener when `--listen` is absent.
pub const DEFAULT_LISTEN: &str = "tcp://127.0.0.1:4420";
/// The namespace when `--namespace` is absent.
pub const DEFAULT_NAMESPACE: &str = "memory:1GiB";

const LISTEN_ALLOWED: &str =
    "tcp://ADDRESS[:PORT] or rdma://ADDRESS[:PORT], IPv6 in brackets, e.g. tcp://0.0.0.0:4420 or tcp://[::1]:4420";
const OPTIONS_ALLOWED: &str = "options uuid=UUID, nguid=32 hex digits, eui64=16 hex digits, block-size=512|4096";

/// The quick-start flags, as given (clap `Args`: flatten into the binary's command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct QuickStart {
    /// Listen on tcp://ADDR:PORT or rdma://ADDR:PORT (repeatable) [default: tcp://127.0.0.1:4420]
    #[arg(long = "listen", value_name = "URL")]
    pub listen: Vec<String>,
    /// Export PATH, memory:SIZE or null:SIZE, optionally followed by ,uuid=UUID ,nguid=HEX ,eui64=HEX
    /// ,block-size=512|4096 (repeatable; NSIDs in order) [default: memory:1GiB]
    #[arg(long = "namespace", value_name = "SPEC")]
    pub namespaces: Vec<String>,
    /// Subsystem NQN [default: nqn.2024-01.io.nvmf-rs:default]
    #[arg(long = "nqn", value_name = "NQN")]
    pub nqn: Option<String>,
    /// Allow only this host NQN to connect (repeatable; without it any host may connect)
    #[arg(long = "allow-host", value_name = "NQN")]
    pub allow_hosts: Vec<String>,
    /// Serve Prometheus metrics on ADDR:PORT
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
}

impl QuickStart {
    /// True when no quick-start flag was given.
    pub fn is_empty(&self) -> bool {
        *self == QuickStart::default()
    }

    /// The target configuration these flags describe, validated like a file; errors name the flag and its value.
    pub fn to_config(&self) -> Result<TargetConfig, ConfigError> {
        let listen = self.listen_values();
        let namespaces = self.namespace_values();
        let nqn = self.nqn.as_deref().unwrap_or(DEFAULT_NQN);
        let mut raw = RawTargetConfig::default();
        for text in &listen {
            let spec = ListenSpec::parse(text).map_err(|error| flag_error("--listen", text, error))?;
            raw.listeners.push(RawListener {
                transport: Some(spec.transport),
                address: spec.address.ip().to_string(),
                port: Some(i64::from(spec.address.port())),
                ..RawListener::default()
            });
        }
        let mut subsystem =
            RawSubsystem { nqn: nqn.to_owned(), hosts: self.allow_hosts.clone(), ..RawSubsystem::default() };
        for text in &namespaces {
            let spec = NamespaceSpec::parse(text).map_err(|error| flag_error("--namespace", text, error))?;
            subsystem.namespaces.push(spec.to_raw());
        }
        raw.subsystems.push(subsystem);
        raw.metrics = self.metrics.clone().map(|listen| RawMetrics { listen: Some(listen) });
        validate(&raw, None, available_cpus()).map_err(|problem| self.place(problem, &listen, &namespaces, nqn))
    }

    fn listen_values(&self) -> Vec<String> {
        if self.listen.is_empty() {
            vec![DEFAULT_LISTEN.to_owned()]
        } else {
            self.listen.clone()
        }
    }

    fn namespace_values(&self) -> Vec<String> {
        if self.namespaces.is_empty() {
            vec![DEFAULT_NAMESPACE.to_owned()]
        } else {
            self.namespaces.clone()
        }
    }

    /// The flag (and its value) that produced the key a validation problem names.
    fn place(&self, problem: Problem, listen: &[String], namespaces: &[String], nqn: &str) -> ConfigError {
        let key = |i: usize| problem.key.segments().get(i);
        let name = |i: usize| match key(i) {
            Some(KeySegment::Key(name)) => Some(name.as_str()),
            _ => None,
        };
        let index = |i: usize| match key(i) {
            Some(KeySegment::Index(index)) => Some(*index),
            _ => None,
        };
        let pick = |values: &[String], i: Option<usize>| i.and_then(|i| values.get(i)).cloned().unwrap_or_default();
        let (flag, value) = match (name(0), name(2)) {
            (Some("listener"), _) => ("--listen", pick(listen, index(1))),
            (Some("subsystem"), Some("namespace")) => ("--namespace", pick(namespaces, index(3))),
            (Some("subsystem"), Some("hosts")) => ("--allow-host", pick(&self.allow_hosts, index(3))),
            (Some("subsystem"), _) => ("--nqn", nqn.to_owned()),
            (Some("metrics"), _) => ("--metrics", self.metrics.clone().unwrap_or_default()),
            _ => ("(quick start)", problem.key.to_string()),
        };
        ConfigError::Flag { flag, value, problem: problem.problem, allowed: problem.allowed }
    }
}

fn flag_error(flag: &'static str, value: &str, error: ValueError) -> ConfigError {
    ConfigError::Flag { flag, value: value.to_owned(), problem: error.problem, allowed: error.allowed }
}

/// A parsed `--listen` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenSpec {
    /// The fabric (URL scheme).
    pub transport: Transport,
    /// Address and port (default 4420).
    pub address: SocketAddr,
}

impl ListenSpec {
    /// Parse `tcp://ADDR[:PORT]` or `rdma://ADDR[:PORT]` (IPv6 in brackets).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let (scheme, rest) =
            text.split_once("://").ok_or_else(|| ValueError::new(format!("{text:?} has no scheme"), LISTEN_ALLOWED))?;
        let transport = match scheme {
            "tcp" => Transport::Tcp,
            "rdma" => Transport::Rdma,
            other => return Err(ValueError::new(format!("transport {other:?} is not supported"), LISTEN_ALLOWED)),
        };
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| ValueError::new(format!("{text:?} has no closing bracket"), LISTEN_ALLOWED))?;
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => {
                        return Err(ValueError::new(
                            format!("{after:?} after the address is not :PORT"),
                            LISTEN_ALLOWED,
                        ))
                    }
                },
            }
        } else if rest.matches(':').count() > 1 {
            return Err(ValueError::new(format!("IPv6 address in {text:?} is not in brackets"), LISTEN_ALLOWED));
        } else {
            match rest.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (rest, None),
            }
        };
        let ip: IpAddr =
            host.parse().map_err(|_| ValueError::new(format!("{host:?} is not an IP address"), LISTEN_ALLOWED))?;
        let port = match port {
            None => DEFAULT_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|&port| port != 0)
                .ok_or_else(|| ValueError::new(format!("port {port:?} is not 1..=65535"), LISTEN_ALLOWED))?,
        };
        Ok(ListenSpec { transport, address: SocketAddr::new(ip, port) })
    }
}

impl fmt::Display for ListenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.transport, self.address)
    }
}

/// A parsed `--namespace` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSpec {
    /// The storage.
    pub backend: NamespaceBackend,
    /// `block-size=`, 512 or 4096 (default 512 when absent).
    pub block_size: Option<u32>,
    /// `uuid=` (derived when absent).
    pub uuid: Option<Uuid>,
    /// `nguid=` (derived when absent).
    pub nguid: Option<Nguid>,
    /// `eui64=` (derived when absent).
    pub eui64: Option<Eui64>,
}

impl NamespaceSpec {
    /// Parse `PATH`, `memory:SIZE` or `null:SIZE`, then `,uuid=…`, `,nguid=…`, `,eui64=…`, `,block-size=…`.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let mut parts = text.split(',');
        let backend_text = parts.next().unwrap_or_default();
        let backend_allowed = "PATH, memory:SIZE or null:SIZE, e.g. /dev/nvme0n1, memory:1GiB, null:1TiB";
        let size = |text: &str| parse_size(text);
        let backend = if let Some(size_text) = backend_text.strip_prefix("memory:") {
            NamespaceBackend::Memory { size: size(size_text)? }
        } else if let Some(size_text) = backend_text.strip_prefix("null:") {
            NamespaceBackend::Null { size: size(size_text)? }
        } else if backend_text.is_empty() {
            return Err(ValueError::new("the namespace has no backend", backend_allowed));
        } else if backend_text == "memory" || backend_text == "null" {
            return Err(ValueError::new(format!("{backend_text} needs a size"), backend_allowed));
        } else {
            NamespaceBackend::Path(backend_text.into())
        };
        let mut spec = NamespaceSpec { backend, block_size: None, uuid: None, nguid: None, eui64: None };
        for option in parts {
            let (name, value) = option
                .split_once('=')
                .ok_or_else(|| ValueError::new(format!("option {option:?} is not NAME=VALUE"), OPTIONS_ALLOWED))?;
            let duplicate = || ValueError::new(format!("option {name:?} is given twice"), OPTIONS_ALLOWED);
            match name {
                "uuid" if spec.uuid.is_some() => return Err(duplicate()),
                "uuid" => spec.uuid = Some(ids::parse_uuid(value)?),
                "nguid" if spec.nguid.is_some() => return Err(duplicate()),
                "nguid" => spec.nguid = Some(Nguid::parse(value)?),
                "eui64" if spec.eui64.is_some() => return Err(duplicate()),
                "eui64" => spec.eui64 = Some(Eui64::parse(value)?),
                "block-size" if spec.block_size.is_some() => return Err(duplicate()),
                "block-size" => {
                    spec.block_size = Some(match value {
                        "512" => 512,
                        "4096" => 4096,
                        _ => {
                            return Err(ValueError::new(
                                format!("block size {value:?} is not supported"),
                                "512 or 4096",
                            ))
                        }
                    })
                }
                _ => return Err(ValueError::new(format!("option {name:?} is unknown"), OPTIONS_ALLOWED)),
            }
        }
        Ok(spec)
    }

    fn to_raw(&self) -> RawNamespace {
        let (path, memory, null) = match &self.backend {
            NamespaceBackend::Path(path) => (Some(path.to_string_lossy().into_owned()), None, None),
            NamespaceBackend::Memory { size } => (None, Some(RawSize::Text(format_size(*size))), None),
            NamespaceBackend::Null { size } => (None, None, Some(RawSize::Text(format_size(*size)))),
        };
        RawNamespace {
            nsid: None,
            path,
            memory,
            null,
            block_size: self.block_size.map(i64::from),
            uuid: self.uuid.map(|uuid| uuid.to_string()),
            nguid: self.nguid.map(|nguid| nguid.to_string()),
            eui64: self.eui64.map(|eui64| eui64.to_string()),
        }
    }
}
