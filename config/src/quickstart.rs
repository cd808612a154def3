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
//!   4420, then optionally `,ana-state=STATE` (every ANA group's state on the listener: the file's `ana_state`)
//!   and `,ana-group-state=GROUP:STATE` (repeatable, each group once: that group's own state, the file's
//!   `ana_group_states`).
//!   Without it: [`DEFAULT_LISTEN`].
//! - `--namespace SPEC` (repeatable; NSIDs 1, 2, … in order): `PATH`, `memory:SIZE`, `null:SIZE` (sizes as in
//!   [`crate::size`]) or `rbd:POOL/IMAGE` (a Ceph RBD image, also `rbd:POOL/NAMESPACE/IMAGE`: the file's `rbd`),
//!   then optionally `,uuid=UUID`, `,nguid=HEX32`, `,eui64=HEX16`, `,block-size=512|4096`,
//!   `,buffered-io=true|false` (a path through the page cache instead of O_DIRECT: the file's `buffered_io`),
//!   `,ana-group=1..128` (the namespace's ANA group: the file's `ana_group`), and for `rbd:` `,ceph-conf=PATH`
//!   (the Ceph configuration file, default `/etc/ceph/ceph.conf`: the file's `ceph_conf`) and `,ceph-id=NAME` (the
//!   cephx user, default `admin`: the file's `ceph_id`).
//!   Identifiers not given are derived from the NQN and NSID ([`crate::ids`]), so they survive restarts. A path
//!   that itself starts with `memory:`, `null:` or `rbd:` or holds a comma needs a configuration file (or
//!   `./memory:…`). Without any: [`DEFAULT_NAMESPACE`].
//! - `--nqn NQN`: the one subsystem's NQN, default [`DEFAULT_NQN`].
//! - `--allow-host NQN[,dhchap-key=DHHC-1:…:[,dhchap-ctrl-key=DHHC-1:…:]]` (repeatable): only these hosts may
//!   connect; without it any host may. With `dhchap-key` the host must authenticate every queue (DH-HMAC-CHAP,
//!   nvme-cli's `--dhchap-secret`), with `dhchap-ctrl-key` the target too when the host asks (its
//!   `--dhchap-ctrl-secret`). Errors never repeat a key.
//! - `--cntlid-range MIN-MAX`: the controller IDs the subsystem hands out (the file's `cntlid_min`, `cntlid_max`),
//!   so that two targets exporting the same subsystem to one host's multipath give distinct IDs.
//! - `--metrics ADDR:PORT`: serve Prometheus metrics there.
//!
//! Each missing flag takes its default independently, so with no flags at all the target exports a 1 GiB memory
//! namespace on `tcp://127.0.0.1:4420` as `nqn.2024-01.io.nvmf-rs:default`. Everything else (limits, discovery on,
//! reactors = available CPUs, `info` logging) is the configuration file's default.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use nvmf_common::nvme::log_page::AnaState;

use crate::error::{ConfigError, KeySegment, Problem, ValueError};
use crate::ids::{self, Eui64, Nguid, Uuid};
use crate::secret::RawSecret;
use crate::size::parse_size;
use crate::target::{
    available_cpus, backend_to_raw, parse_ceph_id, validate, NamespaceBackend, RawGroupStates, RawHostKeys,
    RawListener, RawMetrics, RawNamespace, RawSubsystem, RawTargetConfig, RbdImage, TargetConfig, Transport,
    ANA_STATE_ALLOWED, DEFAULT_PORT, MAX_ANA_GROUP,
};

/// The subsystem NQN when `--nqn` is absent.
pub const DEFAULT_NQN: &str = "nqn.2024-01.io.nvmf-rs:default";
/// The listener when `--listen` is absent.
pub const DEFAULT_LISTEN: &str = "tcp://127.0.0.1:4420";
/// The namespace when `--namespace` is absent.
pub const DEFAULT_NAMESPACE: &str = "memory:1GiB";

const LISTEN_ALLOWED: &str =
    "tcp://ADDRESS[:PORT] or rdma://ADDRESS[:PORT], IPv6 in brackets, e.g. tcp://0.0.0.0:4420 or tcp://[::1]:4420";
const OPTIONS_ALLOWED: &str = "options uuid=UUID, nguid=32 hex digits, eui64=16 hex digits, block-size=512|4096, \
     buffered-io=true|false, ana-group=1..128, and with rbd:POOL/IMAGE ceph-conf=PATH, ceph-id=NAME";
const BACKEND_ALLOWED: &str = "PATH, memory:SIZE, null:SIZE or rbd:POOL/IMAGE, e.g. /dev/nvme0n1, memory:1GiB, \
     null:1TiB, rbd:rbd/disk1";
const LISTEN_OPTIONS_ALLOWED: &str = "options ana-state=STATE (once), ana-group-state=GROUP:STATE (each group \
     once), GROUP 1..=128, STATE optimized|non-optimized|inaccessible|persistent-loss|change, and tls=none|allowed|required \
     (tcp, once)";
const CNTLID_RANGE_ALLOWED: &str = "MIN-MAX, two controller IDs in 1..=65519, MIN <= MAX, e.g. 1-32";

/// The quick-start flags, as given (clap `Args`: flatten into the binary's command line). `Debug` shows
/// `--allow-host` values with their keys elided.
#[derive(Clone, Default, PartialEq, Eq, clap::Args)]
pub struct QuickStart {
    /// Listen on tcp://ADDR:PORT or rdma://ADDR:PORT, optionally followed by ,ana-state=STATE (every ANA group's
    /// state) and ,ana-group-state=GROUP:STATE (one group's, once per group) (repeatable)
    /// [default: tcp://127.0.0.1:4420]
    #[arg(long = "listen", value_name = "URL")]
    pub listen: Vec<String>,
    /// Export PATH, memory:SIZE, null:SIZE or rbd:POOL/IMAGE (a Ceph RBD image), optionally followed by ,uuid=UUID
    /// ,nguid=HEX ,eui64=HEX ,block-size=512|4096 ,buffered-io=true|false ,ana-group=N, and for rbd ,ceph-conf=PATH
    /// ,ceph-id=NAME (repeatable; NSIDs in order) [default: memory:1GiB]
    #[arg(long = "namespace", value_name = "SPEC")]
    pub namespaces: Vec<String>,
    /// Subsystem NQN [default: nqn.2024-01.io.nvmf-rs:default]
    #[arg(long = "nqn", value_name = "NQN")]
    pub nqn: Option<String>,
    /// Allow only this host NQN to connect (repeatable; without it any host may connect); with
    /// ,dhchap-key=DHHC-1:…: it must authenticate (and ,dhchap-ctrl-key=DHHC-1:…: authenticates the target to it)
    #[arg(long = "allow-host", value_name = "NQN[,dhchap-key=KEY[,dhchap-ctrl-key=KEY]]")]
    pub allow_hosts: Vec<String>,
    /// Serve Prometheus metrics on ADDR:PORT
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Hand out controller IDs MIN..=MAX only [default: 1-65519]
    #[arg(long = "cntlid-range", value_name = "MIN-MAX")]
    pub cntlid_range: Option<String>,
}

impl fmt::Debug for QuickStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts: Vec<String> = self.allow_hosts.iter().map(|h| shown_host(h)).collect();
        f.debug_struct("QuickStart")
            .field("listen", &self.listen)
            .field("namespaces", &self.namespaces)
            .field("nqn", &self.nqn)
            .field("allow_hosts", &hosts)
            .field("metrics", &self.metrics)
            .field("cntlid_range", &self.cntlid_range)
            .finish()
    }
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
                ana_state: spec.ana_state.map(|state| state.name().to_owned()),
                ana_group_states: (!spec.ana_group_states.is_empty()).then(|| {
                    RawGroupStates(
                        spec.ana_group_states
                            .iter()
                            .map(|(group, state)| (group.to_string(), state.name().to_owned()))
                            .collect(),
                    )
                }),
                tls: spec.tls.clone(),
                ..RawListener::default()
            });
        }
        let mut subsystem = RawSubsystem { nqn: nqn.to_owned(), ..RawSubsystem::default() };
        if let Some(text) = &self.cntlid_range {
            let (min, max) = parse_cntlid_range(text).map_err(|error| flag_error("--cntlid-range", text, error))?;
            subsystem.cntlid_min = Some(i64::from(min));
            subsystem.cntlid_max = Some(i64::from(max));
        }
        let mut keyed = Vec::new();
        for text in &self.allow_hosts {
            match allow_host(text).map_err(|error| flag_error("--allow-host", &shown_host(text), error))? {
                (host, None) => subsystem.hosts.push(host),
                (host, Some(keys)) => {
                    keyed.push(shown_host(text));
                    subsystem.host_keys.push(RawHostKeys { nqn: host, ..keys });
                }
            }
        }
        let plain = subsystem.hosts.clone();
        for text in &namespaces {
            let spec = NamespaceSpec::parse(text).map_err(|error| flag_error("--namespace", text, error))?;
            subsystem.namespaces.push(spec.to_raw());
        }
        raw.subsystems.push(subsystem);
        raw.metrics = self.metrics.clone().map(|listen| RawMetrics { listen: Some(listen) });
        validate(&raw, None, available_cpus())
            .map_err(|problem| self.place(problem, &listen, &namespaces, nqn, [&plain, &keyed]))
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
    fn place(
        &self,
        problem: Problem,
        listen: &[String],
        namespaces: &[String],
        nqn: &str,
        [plain, keyed]: [&[String]; 2],
    ) -> ConfigError {
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
            (Some("subsystem"), Some("hosts")) => ("--allow-host", pick(plain, index(3))),
            (Some("subsystem"), Some("host")) => ("--allow-host", pick(keyed, index(3))),
            (Some("subsystem"), Some("cntlid_min" | "cntlid_max")) => {
                ("--cntlid-range", self.cntlid_range.clone().unwrap_or_default())
            }
            (Some("subsystem"), _) => ("--nqn", nqn.to_owned()),
            (Some("metrics"), _) => ("--metrics", self.metrics.clone().unwrap_or_default()),
            _ => ("(quick start)", problem.key.to_string()),
        };
        ConfigError::Flag { flag, value, problem: problem.problem, allowed: problem.allowed }
    }
}

/// Parse `--cntlid-range`: `MIN-MAX`, both in 1..=0xFFEF, MIN <= MAX.
fn parse_cntlid_range(text: &str) -> Result<(u16, u16), ValueError> {
    let bad = || ValueError::new(format!("{text:?} is not a controller ID range"), CNTLID_RANGE_ALLOWED);
    let (min, max) = text.split_once('-').ok_or_else(bad)?;
    let id = |t: &str| t.trim().parse::<u16>().ok().filter(|id| (1..=0xFFEF).contains(id)).ok_or_else(bad);
    let (min, max) = (id(min)?, id(max)?);
    if min > max {
        return Err(bad());
    }
    Ok((min, max))
}

const ALLOW_HOST_ALLOWED: &str = "NQN, or NQN,dhchap-key=DHHC-1:…: with optionally ,dhchap-ctrl-key=DHHC-1:…:, \
                                  and/or NQN,tls-key=NVMeTLSkey-1:…:";

/// An `--allow-host` value: the NQN, and the keys when given.
fn allow_host(text: &str) -> Result<(String, Option<RawHostKeys>), ValueError> {
    let mut parts = text.split(',');
    let nqn = parts.next().unwrap_or_default().to_owned();
    let mut keys = RawHostKeys::default();
    for part in parts {
        let slot = match part.split_once('=') {
            Some(("dhchap-key", key)) => (&mut keys.dhchap_key, key),
            Some(("dhchap-ctrl-key", key)) => (&mut keys.dhchap_ctrl_key, key),
            Some(("tls-key", key)) => (&mut keys.tls_key, key),
            _ => (&mut None, ""),
        };
        match slot {
            (slot @ None, key) if !key.is_empty() => *slot = Some(RawSecret(key.to_owned())),
            _ => {
                let name = part.split_once('=').map_or(part, |(name, _)| name);
                return Err(ValueError::new(
                    format!("{name:?} is not an option, or is given twice"),
                    ALLOW_HOST_ALLOWED,
                ));
            }
        }
    }
    if keys.dhchap_ctrl_key.is_some() && keys.dhchap_key.is_none() {
        return Err(ValueError::new("dhchap-ctrl-key without dhchap-key", ALLOW_HOST_ALLOWED));
    }
    let keyed = keys.dhchap_key.is_some() || keys.tls_key.is_some();
    Ok((nqn, keyed.then_some(keys)))
}

/// An `--allow-host` value as errors show it: the keys elided.
fn shown_host(text: &str) -> String {
    text.split(',')
        .map(|part| match part.split_once('=') {
            Some((name, _)) => format!("{name}=…"),
            None => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn flag_error(flag: &'static str, value: &str, error: ValueError) -> ConfigError {
    ConfigError::Flag { flag, value: value.to_owned(), problem: error.problem, allowed: error.allowed }
}

/// A parsed `--listen` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    /// The fabric (URL scheme).
    pub transport: Transport,
    /// Address and port (default 4420).
    pub address: SocketAddr,
    /// `ana-state=`: every ANA group's state on the listener (optimized when absent).
    pub ana_state: Option<AnaState>,
    /// `ana-group-state=GROUP:STATE` (repeatable, each group once): groups with a state of their own.
    pub ana_group_states: BTreeMap<u32, AnaState>,
    /// `tls=none|allowed|required` (NVMe/TCP).
    pub tls: Option<String>,
}

impl ListenSpec {
    /// Parse `tcp://ADDR[:PORT]` or `rdma://ADDR[:PORT]` (IPv6 in brackets), then `,ana-state=STATE` and
    /// `,ana-group-state=GROUP:STATE` (repeatable, each group once).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let mut parts = text.split(',');
        let url = parts.next().unwrap_or_default();
        let mut ana_state = None;
        let mut ana_group_states = BTreeMap::new();
        let mut tls = None;
        let state = |name: &str| {
            AnaState::from_name(name)
                .ok_or_else(|| ValueError::new(format!("ANA state {name:?} is unknown"), ANA_STATE_ALLOWED))
        };
        for option in parts {
            match option.split_once('=') {
                Some(("ana-state", _)) if ana_state.is_some() => {
                    return Err(ValueError::new("option \"ana-state\" is given twice", LISTEN_OPTIONS_ALLOWED))
                }
                Some(("ana-state", name)) => ana_state = Some(state(name)?),
                Some(("tls", _)) if tls.is_some() => {
                    return Err(ValueError::new("option \"tls\" is given twice", LISTEN_OPTIONS_ALLOWED))
                }
                Some(("tls", mode)) => tls = Some(mode.to_owned()),
                Some(("ana-group-state", value)) => {
                    let (group_text, name) = value.split_once(':').ok_or_else(|| {
                        ValueError::new(format!("ana-group-state {value:?} is not GROUP:STATE"), LISTEN_OPTIONS_ALLOWED)
                    })?;
                    let group =
                        group_text.parse().ok().filter(|group| (1..=MAX_ANA_GROUP).contains(group)).ok_or_else(
                            || ValueError::new(format!("ANA group {group_text:?} is invalid"), "1..=128"),
                        )?;
                    if ana_group_states.insert(group, state(name)?).is_some() {
                        return Err(ValueError::new(
                            format!("option \"ana-group-state\" names group {group} twice"),
                            LISTEN_OPTIONS_ALLOWED,
                        ));
                    }
                }
                _ => return Err(ValueError::new(format!("option {option:?} is unknown"), LISTEN_OPTIONS_ALLOWED)),
            }
        }
        Ok(ListenSpec { ana_state, ana_group_states, tls, ..ListenSpec::parse_url(url)? })
    }

    /// Parse `tcp://ADDR[:PORT]` or `rdma://ADDR[:PORT]` (IPv6 in brackets) alone.
    pub fn parse_url(text: &str) -> Result<Self, ValueError> {
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
        Ok(ListenSpec {
            transport,
            address: SocketAddr::new(ip, port),
            ana_state: None,
            ana_group_states: BTreeMap::new(),
            tls: None,
        })
    }
}

impl fmt::Display for ListenSpec {
    /// The URL, without options.
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
    /// `buffered-io=`, true or false (false when absent; true only for a path).
    pub buffered_io: Option<bool>,
    /// `ana-group=`, 1..=128 (1 when absent).
    pub ana_group: Option<u32>,
}

impl NamespaceSpec {
    /// Parse `PATH`, `memory:SIZE`, `null:SIZE` or `rbd:POOL/IMAGE` (`rbd:POOL/NAMESPACE/IMAGE`), then
    /// `,uuid=…`, `,nguid=…`, `,eui64=…`, `,block-size=…`, `,buffered-io=…`, `,ana-group=…`, and for `rbd:`
    /// `,ceph-conf=PATH` and `,ceph-id=NAME` (each option once).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let mut parts = text.split(',');
        let backend_text = parts.next().unwrap_or_default();
        let size = |text: &str| parse_size(text);
        let backend = if let Some(size_text) = backend_text.strip_prefix("memory:") {
            NamespaceBackend::Memory { size: size(size_text)? }
        } else if let Some(size_text) = backend_text.strip_prefix("null:") {
            NamespaceBackend::Null { size: size(size_text)? }
        } else if backend_text == "rbd" || backend_text == "rbd:" {
            return Err(ValueError::new("rbd needs POOL/IMAGE", BACKEND_ALLOWED));
        } else if let Some(name) = backend_text.strip_prefix("rbd:") {
            NamespaceBackend::Rbd(RbdImage::parse(name)?)
        } else if backend_text.is_empty() {
            return Err(ValueError::new("the namespace has no backend", BACKEND_ALLOWED));
        } else if backend_text == "memory" || backend_text == "null" {
            return Err(ValueError::new(format!("{backend_text} needs a size"), BACKEND_ALLOWED));
        } else {
            NamespaceBackend::Path(backend_text.into())
        };
        // The rbd options given so far (each once).
        let mut ceph_options = Vec::new();
        let mut spec = NamespaceSpec {
            backend,
            block_size: None,
            uuid: None,
            nguid: None,
            eui64: None,
            buffered_io: None,
            ana_group: None,
        };
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
                "buffered-io" if spec.buffered_io.is_some() => return Err(duplicate()),
                "buffered-io" => {
                    spec.buffered_io = Some(value.parse().map_err(|_| {
                        ValueError::new(format!("buffered-io {value:?} is not a boolean"), "true or false")
                    })?)
                }
                "ana-group" if spec.ana_group.is_some() => return Err(duplicate()),
                "ana-group" => {
                    spec.ana_group = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|group| (1..=MAX_ANA_GROUP).contains(group))
                            .ok_or_else(|| ValueError::new(format!("ANA group {value:?} is invalid"), "1..=128"))?,
                    )
                }
                "ceph-conf" | "ceph-id" => {
                    let NamespaceBackend::Rbd(image) = &mut spec.backend else {
                        return Err(ValueError::new(
                            format!("option {name:?} applies to rbd namespaces only"),
                            OPTIONS_ALLOWED,
                        ));
                    };
                    if ceph_options.contains(&name) {
                        return Err(duplicate());
                    }
                    ceph_options.push(name);
                    match name {
                        "ceph-conf" if value.is_empty() => {
                            return Err(ValueError::new("ceph-conf is empty", "a Ceph configuration file path"))
                        }
                        "ceph-conf" => image.ceph_conf = value.into(),
                        _ => image.ceph_id = parse_ceph_id(value)?,
                    }
                }
                _ => return Err(ValueError::new(format!("option {name:?} is unknown"), OPTIONS_ALLOWED)),
            }
        }
        Ok(spec)
    }

    fn to_raw(&self) -> RawNamespace {
        RawNamespace {
            nsid: None,
            block_size: self.block_size.map(i64::from),
            buffered_io: self.buffered_io,
            uuid: self.uuid.map(|uuid| uuid.to_string()),
            nguid: self.nguid.map(|nguid| nguid.to_string()),
            eui64: self.eui64.map(|eui64| eui64.to_string()),
            ana_group: self.ana_group.map(i64::from),
            ..backend_to_raw(&self.backend)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{ListenerTransport, TcpOptions, DEFAULT_CEPH_CONF, DEFAULT_CEPH_ID};
    use clap::Parser;

    fn flags(args: &[&str]) -> QuickStart {
        #[derive(Debug, Parser)]
        struct Cli {
            #[command(flatten)]
            quick: QuickStart,
        }
        Cli::try_parse_from(std::iter::once("nvmf-target").chain(args.iter().copied())).unwrap().quick
    }

    fn error(args: &[&str]) -> String {
        flags(args).to_config().expect_err("the flags should be rejected").to_string()
    }

    #[test]
    fn no_flags_export_a_memory_namespace_on_localhost() {
        let quick = flags(&[]);
        assert!(quick.is_empty());
        let config = quick.to_config().unwrap();
        assert_eq!(config.listeners.len(), 1);
        assert_eq!(config.listeners[0].to_string(), "tcp://127.0.0.1:4420");
        assert_eq!(config.listeners[0].transport, ListenerTransport::Tcp(TcpOptions::default()));
        let subsystem = &config.subsystems[0];
        assert_eq!(subsystem.nqn, DEFAULT_NQN);
        assert!(subsystem.allow_any_host);
        let namespace = &subsystem.namespaces[0];
        assert_eq!((namespace.nsid, namespace.block_size), (1, 512));
        assert_eq!(namespace.backend, NamespaceBackend::Memory { size: 1 << 30 });
        assert_eq!(namespace.uuid, ids::derive_uuid(DEFAULT_NQN, 1));
        assert_eq!(config.metrics.listen, None);
        assert!(config.discovery.enabled);
        // Same flags, same identifiers: a restart keeps them.
        assert_eq!(flags(&[]).to_config().unwrap(), config);
        // The printed configuration loads as the same configuration.
        assert_eq!(TargetConfig::from_str(&config.to_string(), "printed").unwrap(), config);
    }

    #[test]
    fn every_flag() {
        let quick = flags(&[
            "--listen",
            "tcp://0.0.0.0:4420",
            "--listen",
            "rdma://[fe80::1]",
            "--namespace",
            "/dev/nvme0n1,buffered-io=true",
            "--namespace",
            "null:1TiB,block-size=4096,eui64=0123456789abcdef",
            "--namespace",
            "memory:64M,uuid=f81d4fae-7dec-11d0-a765-00a0c91e6bf6,nguid=00112233445566778899aabbccddeeff",
            "--nqn",
            "nqn.2024-01.com.example:disk",
            "--allow-host",
            "nqn.2024-01.com.example:host1",
            "--allow-host",
            "nqn.2024-01.com.example:host2",
            "--metrics",
            "127.0.0.1:9420",
            "--cntlid-range",
            "100-199",
        ]);
        assert!(!quick.is_empty());
        let config = quick.to_config().unwrap();
        let listeners: Vec<String> = config.listeners.iter().map(ToString::to_string).collect();
        assert_eq!(listeners, ["tcp://0.0.0.0:4420", "rdma://[fe80::1]:4420"]);
        let subsystem = &config.subsystems[0];
        assert_eq!(subsystem.nqn, "nqn.2024-01.com.example:disk");
        assert!(!subsystem.allow_any_host);
        assert_eq!(subsystem.hosts, ["nqn.2024-01.com.example:host1", "nqn.2024-01.com.example:host2"]);
        let ns = &subsystem.namespaces;
        assert_eq!(ns.iter().map(|ns| ns.nsid).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(ns[0].backend, NamespaceBackend::Path("/dev/nvme0n1".into()));
        assert_eq!(ns[0].nguid, ids::derive_nguid("nqn.2024-01.com.example:disk", 1));
        assert!(ns[0].buffered_io && !ns[1].buffered_io && !ns[2].buffered_io);
        assert_eq!(ns[1].backend, NamespaceBackend::Null { size: 1 << 40 });
        assert_eq!(ns[1].block_size, 4096);
        assert_eq!(ns[1].eui64.to_string(), "0123456789abcdef");
        assert_eq!(ns[1].uuid, ids::derive_uuid("nqn.2024-01.com.example:disk", 2));
        assert_eq!(ns[2].backend, NamespaceBackend::Memory { size: 64 << 20 });
        assert_eq!(ns[2].uuid.to_string(), "f81d4fae-7dec-11d0-a765-00a0c91e6bf6");
        assert_eq!(ns[2].nguid.to_string(), "00112233445566778899aabbccddeeff");
        assert_eq!(config.metrics.listen, Some("127.0.0.1:9420".parse().unwrap()));
        assert_eq!((subsystem.cntlid_min, subsystem.cntlid_max), (100, 199));
    }

    #[test]
    fn ana_flags() {
        let config = flags(&[
            "--listen",
            "tcp://127.0.0.1:4420",
            "--listen",
            "tcp://127.0.0.1:4421,ana-state=non-optimized",
            "--namespace",
            "memory:1M",
            "--namespace",
            "memory:1M,ana-group=2",
        ])
        .to_config()
        .unwrap();
        let states: Vec<_> = config.listeners.iter().map(|l| l.ana_state).collect();
        assert_eq!(states, [AnaState::Optimized, AnaState::NonOptimized]);
        assert!(config.listeners.iter().all(|l| l.ana_group_states.is_empty()));
        let groups: Vec<_> = config.subsystems[0].namespaces.iter().map(|ns| ns.ana_group).collect();
        assert_eq!(groups, [1, 2]);
        assert_eq!(
            NamespaceSpec::parse("memory:1M,ana-group=129").unwrap_err().to_string(),
            "ANA group \"129\" is invalid; allowed: 1..=128"
        );
        for range in ["5", "0-3", "9-3", "1-65520", "a-b"] {
            assert_eq!(
                error(&["--cntlid-range", range]),
                format!("--cntlid-range \"{range}\": \"{range}\" is not a controller ID range; allowed: {CNTLID_RANGE_ALLOWED}")
            );
        }
    }

    #[test]
    fn ana_group_state_flags() {
        // A gateway group's node A: group 1 optimized, group 2 non-optimized; a second listener the reverse.
        let config = flags(&[
            "--listen",
            "tcp://127.0.0.1:4420,ana-group-state=2:non-optimized",
            "--listen",
            "tcp://127.0.0.1:4421,ana-group-state=1:non-optimized,ana-state=optimized,ana-group-state=3:inaccessible",
        ])
        .to_config()
        .unwrap();
        let listeners = &config.listeners;
        let states = |l: usize| (1..=4).map(|g| listeners[l].group_ana_state(g)).collect::<Vec<_>>();
        use AnaState::*;
        assert_eq!(states(0), [Optimized, NonOptimized, Optimized, Optimized]);
        assert_eq!(states(1), [NonOptimized, Optimized, Inaccessible, Optimized]);
        assert_eq!(listeners[1].ana_group_states.keys().copied().collect::<Vec<_>>(), [1, 3]);
        // As a file says it.
        assert_eq!(TargetConfig::from_str(&config.to_string(), "printed").unwrap(), config);
        let spec = ListenSpec::parse("rdma://10.0.0.1,ana-state=inaccessible,ana-group-state=128:change").unwrap();
        assert_eq!(
            (spec.ana_state, spec.ana_group_states.into_iter().collect()),
            (Some(Inaccessible), vec![(128, Change)])
        );
        for (text, problem, allowed) in [
            ("tcp://1.2.3.4,ana-group-state=2", "ana-group-state \"2\" is not GROUP:STATE", LISTEN_OPTIONS_ALLOWED),
            ("tcp://1.2.3.4,ana-group-state=0:optimized", "ANA group \"0\" is invalid", "1..=128"),
            ("tcp://1.2.3.4,ana-group-state=129:optimized", "ANA group \"129\" is invalid", "1..=128"),
            ("tcp://1.2.3.4,ana-group-state=x:optimized", "ANA group \"x\" is invalid", "1..=128"),
            ("tcp://1.2.3.4,ana-group-state=2:standby", "ANA state \"standby\" is unknown", ANA_STATE_ALLOWED),
            (
                "tcp://1.2.3.4,ana-group-state=2:optimized,ana-group-state=2:optimized",
                "option \"ana-group-state\" names group 2 twice",
                LISTEN_OPTIONS_ALLOWED,
            ),
        ] {
            let error = ListenSpec::parse(text).unwrap_err();
            assert_eq!((error.problem.as_str(), error.allowed.as_str()), (problem, allowed), "{text}");
        }
        assert_eq!(
            error(&["--listen", "tcp://10.0.0.1,ana-group-state=2:optimized,ana-group-state=2:inaccessible"]),
            format!(
                "--listen \"tcp://10.0.0.1,ana-group-state=2:optimized,ana-group-state=2:inaccessible\": option \
                 \"ana-group-state\" names group 2 twice; allowed: {LISTEN_OPTIONS_ALLOWED}"
            )
        );
    }

    #[test]
    fn listen_spec_errors() {
        let cases: &[(&str, &str)] = &[
            ("127.0.0.1:4420", "\"127.0.0.1:4420\" has no scheme"),
            ("udp://127.0.0.1:4420", "transport \"udp\" is not supported"),
            ("tcp://[::1", "\"tcp://[::1\" has no closing bracket"),
            ("tcp://[::1]4420", "\"4420\" after the address is not :PORT"),
            ("tcp://::1:4420", "IPv6 address in \"tcp://::1:4420\" is not in brackets"),
            ("tcp://localhost:4420", "\"localhost\" is not an IP address"),
            ("tcp://1.2.3.4:0", "port \"0\" is not 1..=65535"),
            ("tcp://1.2.3.4:65536", "port \"65536\" is not 1..=65535"),
            ("tcp://1.2.3.4:", "port \"\" is not 1..=65535"),
        ];
        for &(text, problem) in cases {
            let error = ListenSpec::parse(text).unwrap_err();
            assert_eq!(error.problem, problem, "{text}");
            assert_eq!(error.allowed, LISTEN_ALLOWED);
        }
        assert_eq!(ListenSpec::parse("tcp://[::1]:4421").unwrap().to_string(), "tcp://[::1]:4421");
        let spec = ListenSpec::parse("tcp://[::1]:4421,ana-state=inaccessible").unwrap();
        assert_eq!((spec.to_string().as_str(), spec.ana_state), ("tcp://[::1]:4421", Some(AnaState::Inaccessible)));
        for (text, problem, allowed) in [
            ("tcp://1.2.3.4,ana-state=standby", "ANA state \"standby\" is unknown", ANA_STATE_ALLOWED),
            (
                "tcp://1.2.3.4,ana-state=change,ana-state=change",
                "option \"ana-state\" is given twice",
                LISTEN_OPTIONS_ALLOWED,
            ),
            ("tcp://1.2.3.4,x=1", "option \"x=1\" is unknown", LISTEN_OPTIONS_ALLOWED),
        ] {
            let error = ListenSpec::parse(text).unwrap_err();
            assert_eq!((error.problem.as_str(), error.allowed.as_str()), (problem, allowed), "{text}");
        }
        assert_eq!(ListenSpec::parse("rdma://10.0.0.1").unwrap().to_string(), "rdma://10.0.0.1:4420");
    }

    #[test]
    fn namespace_spec_errors() {
        let cases: &[(&str, &str)] = &[
            ("", "the namespace has no backend; allowed: PATH, memory:SIZE, null:SIZE or rbd:POOL/IMAGE, e.g. /dev/nvme0n1, memory:1GiB, null:1TiB, rbd:rbd/disk1"),
            ("memory", "memory needs a size; allowed: PATH, memory:SIZE, null:SIZE or rbd:POOL/IMAGE, e.g. /dev/nvme0n1, memory:1GiB, null:1TiB, rbd:rbd/disk1"),
            ("null:1X", "size \"1X\" has an unknown unit \"x\"; allowed: a whole number of bytes with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"1GiB\""),
            ("/f,size=1", "option \"size\" is unknown; allowed: options uuid=UUID, nguid=32 hex digits, eui64=16 hex digits, block-size=512|4096, buffered-io=true|false, ana-group=1..128, and with rbd:POOL/IMAGE ceph-conf=PATH, ceph-id=NAME"),
            ("/f,uuid", "option \"uuid\" is not NAME=VALUE; allowed: options uuid=UUID, nguid=32 hex digits, eui64=16 hex digits, block-size=512|4096, buffered-io=true|false, ana-group=1..128, and with rbd:POOL/IMAGE ceph-conf=PATH, ceph-id=NAME"),
            ("/f,block-size=1024", "block size \"1024\" is not supported; allowed: 512 or 4096"),
            ("/f,block-size=512,block-size=512", "option \"block-size\" is given twice; allowed: options uuid=UUID, nguid=32 hex digits, eui64=16 hex digits, block-size=512|4096, buffered-io=true|false, ana-group=1..128, and with rbd:POOL/IMAGE ceph-conf=PATH, ceph-id=NAME"),
            ("/f,buffered-io=1", "buffered-io \"1\" is not a boolean; allowed: true or false"),
            ("/f,uuid=x", "\"x\" is not a UUID; allowed: a UUID such as \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", not all zero"),
            ("/f,nguid=1", "NGUID \"1\" is not 32 hexadecimal digits; allowed: 32 hexadecimal digits, not all zero"),
            ("/f,eui64=0000000000000000", "an all-zero EUI-64 means \"no EUI-64\" to a host; allowed: 16 hexadecimal digits, not all zero"),
        ];
        for &(text, message) in cases {
            assert_eq!(NamespaceSpec::parse(text).unwrap_err().to_string(), message, "{text}");
        }
        let spec = NamespaceSpec::parse("./memory:1G").unwrap();
        assert_eq!(spec.backend, NamespaceBackend::Path("./memory:1G".into()));
    }

    #[test]
    fn rbd_namespaces() {
        let config = flags(&[
            "--namespace",
            "rbd:rbd/disk1",
            "--namespace",
            "rbd:ssd/tenant-a/disk2,ceph-conf=/etc/ceph/lab.conf,ceph-id=client.nvmf,block-size=4096,ana-group=2",
            "--namespace",
            "rbd:rbd/disk3,ceph-id=nvmf,ceph-conf=ceph.conf",
        ])
        .to_config()
        .unwrap();
        let ns = &config.subsystems[0].namespaces;
        let images: Vec<&RbdImage> = ns
            .iter()
            .map(|ns| match &ns.backend {
                NamespaceBackend::Rbd(image) => image,
                other => panic!("not rbd: {other:?}"),
            })
            .collect();
        assert_eq!(
            *images[0],
            RbdImage {
                pool: "rbd".into(),
                rados_namespace: String::new(),
                image: "disk1".into(),
                ceph_conf: DEFAULT_CEPH_CONF.into(),
                ceph_id: DEFAULT_CEPH_ID.into(),
            }
        );
        assert_eq!(
            *images[1],
            RbdImage {
                pool: "ssd".into(),
                rados_namespace: "tenant-a".into(),
                image: "disk2".into(),
                ceph_conf: "/etc/ceph/lab.conf".into(),
                ceph_id: "nvmf".into(),
            }
        );
        assert_eq!((ns[1].block_size, ns[1].ana_group), (4096, 2));
        // A relative ceph-conf is relative to the working directory, as a namespace path is.
        assert_eq!((images[2].ceph_conf.to_str(), images[2].ceph_id.as_str()), (Some("ceph.conf"), "nvmf"));
        assert!(ns.iter().all(|ns| !ns.buffered_io));
        // The printed configuration loads as the same configuration.
        assert_eq!(TargetConfig::from_str(&config.to_string(), "printed").unwrap(), config);
        // The same namespace written in a file.
        let file = format!(
            "[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"{DEFAULT_NQN}\"\n[[subsystem.namespace]]\n\
             rbd = \"ssd/tenant-a/disk2\"\nceph_conf = \"/etc/ceph/lab.conf\"\nceph_id = \"client.nvmf\"\n"
        );
        let from_file = TargetConfig::from_str(&file, "t.toml").unwrap();
        assert_eq!(from_file.subsystems[0].namespaces[0].backend, ns[1].backend);
    }

    #[test]
    fn rbd_namespace_errors() {
        let cases: &[(&str, &str)] = &[
            ("rbd", "rbd needs POOL/IMAGE"),
            ("rbd:", "rbd needs POOL/IMAGE"),
            ("rbd:,ceph-id=admin", "rbd needs POOL/IMAGE"),
            ("rbd:disk1", "image name \"disk1\" has no pool"),
            (
                "rbd:rbd/disk1@snap",
                "\"rbd/disk1@snap\" names a snapshot: snapshots are read-only; export the image itself",
            ),
            ("rbd:a/b/c/d", "image name \"a/b/c/d\" has 4 parts, at most 3"),
            ("rbd:rbd//disk1", "the RADOS namespace of \"rbd//disk1\" is empty"),
            ("rbd:rbd/my disk", "image name \"rbd/my disk\" contains ' '"),
            ("rbd:rbd/disk1,ceph-id=", "cephx user \"\" is empty"),
            ("rbd:rbd/disk1,ceph-id=client.", "cephx user \"client.\" is empty"),
            ("rbd:rbd/disk1,ceph-id=a b", "cephx user \"a b\" contains ' '"),
            ("rbd:rbd/disk1,ceph-conf=", "ceph-conf is empty"),
            ("rbd:rbd/disk1,ceph-conf=/a,ceph-conf=/b", "option \"ceph-conf\" is given twice"),
            ("rbd:rbd/disk1,ceph-id=a,ceph-id=a", "option \"ceph-id\" is given twice"),
            ("/dev/sda,ceph-conf=/etc/ceph/ceph.conf", "option \"ceph-conf\" applies to rbd namespaces only"),
            ("memory:1G,ceph-id=admin", "option \"ceph-id\" applies to rbd namespaces only"),
            ("rbd:rbd/disk1,ceph_id=admin", "option \"ceph_id\" is unknown"),
        ];
        for &(text, problem) in cases {
            assert_eq!(NamespaceSpec::parse(text).unwrap_err().problem, problem, "{text}");
        }
        assert_eq!(
            NamespaceSpec::parse("rbd").unwrap_err().to_string(),
            format!("rbd needs POOL/IMAGE; allowed: {BACKEND_ALLOWED}")
        );
        assert_eq!(NamespaceSpec::parse("rbd:x@y").unwrap_err().allowed, crate::target::RBD_IMAGE_ALLOWED);
        assert_eq!(NamespaceSpec::parse("/f,ceph-id=a").unwrap_err().allowed, OPTIONS_ALLOWED);
        assert_eq!(
            error(&["--namespace", "rbd:rbd/disk1,buffered-io=true"]),
            "--namespace \"rbd:rbd/disk1,buffered-io=true\": buffered_io applies to path namespaces only; allowed: \
             true with path, false (the default) with memory, null or rbd"
        );
        // A file named `rbd` or starting with `rbd:` is a path again with `./`.
        assert_eq!(NamespaceSpec::parse("./rbd").unwrap().backend, NamespaceBackend::Path("./rbd".into()));
    }

    #[test]
    fn validation_errors_name_the_flag() {
        assert_eq!(
            error(&["--listen", "tcp://10.0.0.1", "--listen", "ftp://x"]),
            format!("--listen \"ftp://x\": transport \"ftp\" is not supported; allowed: {LISTEN_ALLOWED}")
        );
        assert_eq!(
            error(&["--listen", "tcp://10.0.0.1", "--listen", "tcp://10.0.0.1:4420"]),
            "--listen \"tcp://10.0.0.1:4420\": tcp://10.0.0.1:4420 is also listener[0]; allowed: each transport, \
             address and port once"
        );
        assert_eq!(
            error(&["--namespace", "/dev/sda", "--namespace", "memory:1000"]),
            "--namespace \"memory:1000\": size 1000 is not a positive multiple of the block size 512; allowed: a \
             positive multiple of 512 bytes, e.g. \"1GiB\""
        );
        let uuid = "f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
        let second = format!("null:1G,uuid={uuid}");
        assert_eq!(
            error(&["--namespace", &format!("null:1G,uuid={uuid}"), "--namespace", &second]),
            format!(
                "--namespace {second:?}: UUID {uuid} is also subsystem[0].namespace[0].uuid's; allowed: a UUID \
                 unique in the target (omit it to derive one)"
            )
        );
        assert_eq!(
            error(&["--namespace", "memory:1G,buffered-io=true"]),
            "--namespace \"memory:1G,buffered-io=true\": buffered_io applies to path namespaces only; allowed: true \
             with path, false (the default) with memory, null or rbd"
        );
        assert!(error(&["--nqn", "nqn.2014-08.org.nvmexpress.discovery"])
            .starts_with("--nqn \"nqn.2014-08.org.nvmexpress.discovery\": the discovery subsystem's NQN"));
        assert!(error(&["--nqn", ""]).starts_with("--nqn \"\": \"\" is not a valid NQN: NQN is empty"));
        assert!(error(&["--allow-host", "nqn.2024-01.io.x:h", "--allow-host", "h\u{7f}2"])
            .starts_with("--allow-host \"h\\u{7f}2\": \"h\\u{7f}2\" is not a valid NQN: NQN contains a control"));
        assert!(error(&["--metrics", "9420"]).starts_with("--metrics \"9420\": \"9420\" is not an address and port"));
    }

    #[test]
    fn allow_host_with_keys() {
        let key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let config = flags(&[
            "--allow-host",
            "nqn.2024-01.io.x:plain",
            "--allow-host",
            &format!("nqn.2024-01.io.x:one,dhchap-key={key}"),
            "--allow-host",
            &format!("nqn.2024-01.io.x:two,dhchap-key={key},dhchap-ctrl-key={key}"),
        ])
        .to_config()
        .unwrap();
        let s = &config.subsystems[0];
        assert_eq!(s.hosts, ["nqn.2024-01.io.x:plain"]);
        assert_eq!(s.host_keys.len(), 2);
        assert!(s.host_keys[0].dhchap_ctrl_key.is_none() && s.host_keys[1].dhchap_ctrl_key.is_some());
        let bad = error(&["--allow-host", "nqn.2024-01.io.x:one,dhchap-key=DHHC-1:00:AAAA:"]);
        assert!(bad.starts_with("--allow-host \"nqn.2024-01.io.x:one,dhchap-key=…\": the key field"), "{bad}");
        assert!(!bad.contains("AAAA"), "{bad}");
        let bad = error(&["--allow-host", &format!("nqn.2024-01.io.x:one,dhchap-ctrl-key={key}")]);
        assert!(bad.contains("dhchap-ctrl-key without dhchap-key") && !bad.contains("AAEC"), "{bad}");
        let quick = flags(&["--allow-host", &format!("nqn.2024-01.io.x:one,dhchap-key={key}")]);
        assert!(format!("{quick:?}").contains("\"nqn.2024-01.io.x:one,dhchap-key=…\""), "{quick:?}");
        let bad = error(&["--allow-host", "nqn.2024-01.io.x:one,secret=x"]);
        assert!(bad.contains("\"secret\" is not an option"), "{bad}");
    }
}
