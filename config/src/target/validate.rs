//! From the file schema to [`TargetConfig`]: range and consistency checks, defaults filled in.
//!
//! Every check returns a [`Problem`] naming the key path, what was found and what is allowed; the loader adds the
//! line. The first problem found is reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use nvmf_common::fabrics::nqn::{validate_nqn, DISCOVERY_NQN};

use super::*;
use crate::error::{KeyPath, Problem};
use crate::ids::{self, Eui64, Nguid};
use crate::size::{format_size, parse_size};

pub(crate) const NQN_ALLOWED: &str = "a name of 1 to 223 bytes without control characters, best an NQN \
                                     \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\"";
const ADDRESS_ALLOWED: &str = "an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\", \"::\" or \"::1\" \
                               (no host name, brackets or port)";
const BACKEND_ALLOWED: &str = "exactly one of path = \"/dev/...\" (block device or file), memory = \"SIZE\", \
                               null = \"SIZE\" or rbd = \"POOL/IMAGE\" (Ceph RBD image)";
const CEPH_CONF_ALLOWED: &str = "a Ceph configuration file path, e.g. \"/etc/ceph/ceph.conf\"";
const CEPH_OPTIONS_ALLOWED: &str = "ceph_conf and ceph_id with rbd = \"POOL/IMAGE\" only";
const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Defaults of `[target]`, `[[subsystem]]` and `[[listener]]`.
pub(crate) const DEFAULT_MDTS: u32 = 1 << 20;

/// Default `[target] state_dir`.
pub(crate) const DEFAULT_STATE_DIR: &str = "/var/lib/nvmf-target";
pub(crate) const DEFAULT_MAX_QUEUE_SIZE: u32 = 128;
pub(crate) const DEFAULT_MAX_IO_QUEUES: u16 = 128;
pub(crate) const DEFAULT_KEEP_ALIVE_GRANULARITY_MS: u32 = 100;
pub(crate) const DEFAULT_KEEP_ALIVE_MAX_MS: u32 = 3_600_000;
/// Default `[target] connect_timeout_ms`.
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u32 = 10_000;
/// Default `[target] transfer_timeout_ms`.
pub(crate) const DEFAULT_TRANSFER_TIMEOUT_MS: u32 = 30_000;
/// Default `[target] ceph_mon_timeout_ms` and `ceph_osd_timeout_ms` (librados' own defaults are 300 s and none).
pub(crate) const DEFAULT_CEPH_TIMEOUT_MS: u32 = 30_000;
/// Default `[target] queue_buffer_percent`.
pub(crate) const DEFAULT_QUEUE_BUFFER_PERCENT: u8 = 50;
/// Default `[target] anonymous_buffer_percent`.
pub(crate) const DEFAULT_ANONYMOUS_BUFFER_PERCENT: u8 = 25;
/// Default `[target] max_connections_per_address`.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: u32 = 1024;
/// Default `[target] address_prefix_v4`, `address_prefix_v6`.
pub(crate) const DEFAULT_ADDRESS_PREFIX_V4: u8 = 32;
pub(crate) const DEFAULT_ADDRESS_PREFIX_V6: u8 = 64;
/// Default `[target] max_controllers_per_host`.
pub(crate) const DEFAULT_MAX_CONTROLLERS_PER_HOST: u16 = 64;
/// Default `[target] auth_threads`.
pub(crate) const DEFAULT_AUTH_THREADS: u16 = 2;
/// Default `[target] auth_queue_depth`.
pub(crate) const DEFAULT_AUTH_QUEUE_DEPTH: u32 = 64;
/// Default `[target] tls_threads`.
pub(crate) const DEFAULT_TLS_THREADS: u16 = 2;
/// Default `[target] tls_queue_depth`.
pub(crate) const DEFAULT_TLS_QUEUE_DEPTH: u32 = 64;
/// Default `[target] auth_attempts_per_second`.
pub(crate) const DEFAULT_AUTH_ATTEMPTS_PER_SECOND: u32 = 256;
/// Default `[target] max_registrants`.
pub(crate) const DEFAULT_MAX_REGISTRANTS: u32 = 1024;
/// Default `[discovery] keep_alive_max_ms` (Linux nvmet gives a discovery controller of KATO 0 this much).
pub(crate) const DEFAULT_DISCOVERY_KATO_MAX_MS: u32 = 120_000;
/// Default `[target] tcp_keepalive_ms`.
pub(crate) const DEFAULT_TCP_KEEPALIVE_MS: u32 = 60_000;
/// Default `[target] tcp_send_backlog`.
pub(crate) const DEFAULT_TCP_SEND_BACKLOG: u32 = 8 << 20;
/// Default `[[listener]] max_connections`.
pub(crate) const DEFAULT_LISTENER_MAX_CONNECTIONS: u32 = 4096;
pub(crate) const DEFAULT_IN_CAPSULE_DATA_SIZE: u32 = 16 << 10;
pub(crate) const DEFAULT_DISCARD_QUEUE_DEPTH: usize = 64;
/// `[reactors] send_zero_copy_bytes` when not set: where zero copy starts to pay (the kernel's MSG_ZEROCOPY
/// documentation: around 10 KB; a 4 KiB read stays a copy, a 32 KiB one goes zero copy).
pub(crate) const DEFAULT_SEND_ZERO_COPY_BYTES: u32 = 32 << 10;
/// `[reactors] poll_window_us` when not set.
pub(crate) const DEFAULT_POLL_WINDOW_US: u32 = 200;
pub(crate) const DEFAULT_MODEL: &str = "nvmf-rs";
pub(crate) const DEFAULT_MAX_NAMESPACES: u32 = 1024;
pub(crate) const CNTLID_MIN: u16 = 1;
pub(crate) const CNTLID_MAX: u16 = 0xFFEF;
pub(crate) const DEFAULT_BLOCK_SIZE: u32 = 512;

/// An integer in `range`, converted to `T`.
pub(crate) fn int_in<T: TryFrom<i64>>(
    value: i64,
    range: std::ops::RangeInclusive<i64>,
    key: &KeyPath,
    what: &str,
    allowed: impl Display,
) -> Result<T, Problem> {
    let out_of_range = || Problem::new(key.clone(), format!("{what} {value} is out of range"), allowed.to_string());
    if !range.contains(&value) {
        return Err(out_of_range());
    }
    T::try_from(value).map_err(|_| out_of_range())
}

fn size_of(raw: &RawSize, key: &KeyPath) -> Result<u64, Problem> {
    match raw {
        RawSize::Text(text) => parse_size(text).map_err(|error| error.at(key.clone())),
        RawSize::Bytes(bytes) => u64::try_from(*bytes)
            .map_err(|_| Problem::new(key.clone(), format!("size {bytes} is negative"), crate::size::SIZE_SYNTAX)),
    }
}

fn printable_ascii(text: &str, max: usize, key: &KeyPath, what: &str) -> Result<String, Problem> {
    let allowed = format!("1 to {max} printable ASCII characters");
    if text.is_empty() || text.len() > max {
        return Err(Problem::new(key.clone(), format!("{what} {text:?} is {} bytes long", text.len()), allowed));
    }
    if let Some(bad) = text.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(Problem::new(key.clone(), format!("{what} {text:?} contains {bad:?}"), allowed));
    }
    Ok(text.to_owned())
}

pub(crate) fn check_nqn(nqn: &str, key: &KeyPath) -> Result<(), Problem> {
    validate_nqn(nqn)
        .map_err(|error| Problem::new(key.clone(), format!("{nqn:?} is not a valid NQN: {error}"), NQN_ALLOWED))
}

/// Validate `raw`. `base` resolves relative namespace paths; `cpus` is the default reactor count.
pub(crate) fn validate(raw: &RawTargetConfig, base: Option<&Path>, cpus: usize) -> Result<TargetConfig, Problem> {
    let root = KeyPath::root();
    let limits = limits(raw.target.as_ref().cloned().unwrap_or_default(), &root.key("target"))?;
    if raw.listeners.is_empty() {
        return Err(Problem::new(root.clone(), "no [[listener]] is configured", "one or more [[listener]] tables"));
    }
    let mut listeners = Vec::with_capacity(raw.listeners.len());
    let mut seen_listeners = HashMap::new();
    for (i, raw_listener) in raw.listeners.iter().enumerate() {
        let key = root.key("listener").index(i);
        let listener = listener(raw_listener, &limits, &key)?;
        if let Some(first) = seen_listeners.insert((listener.transport_type(), listener.address), i) {
            return Err(Problem::new(
                key,
                format!("{listener} is also listener[{first}]"),
                "each transport, address and port once",
            ));
        }
        listeners.push(listener);
    }
    let discovery_kato_max_ms = match raw.discovery.as_ref().and_then(|d| d.keep_alive_max_ms) {
        None => DEFAULT_DISCOVERY_KATO_MAX_MS.min(limits.keep_alive_max_ms),
        Some(value) => {
            let allowed = format!("1000..={} ([target] keep_alive_max_ms)", limits.keep_alive_max_ms);
            let key = root.key("discovery").key("keep_alive_max_ms");
            int_in(value, 1000..=i64::from(limits.keep_alive_max_ms), &key, "timeout", allowed)?
        }
    };
    let discovery = DiscoveryConfig {
        enabled: raw.discovery.as_ref().and_then(|d| d.enabled).unwrap_or(true),
        auth_required: raw.discovery.as_ref().and_then(|d| d.auth_required).unwrap_or(false),
        keep_alive_max_ms: discovery_kato_max_ms,
    };
    if discovery.auth_required && raw.subsystems.iter().all(|s| s.host_keys.is_empty()) {
        return Err(Problem::new(
            root.key("discovery").key("auth_required"),
            "the discovery controller requires authentication but no host has a key: no host could discover",
            "a [[subsystem.host]] with a dhchap_key, or auth_required = false",
        ));
    }
    if raw.subsystems.is_empty() && !discovery.enabled {
        return Err(Problem::new(
            root.clone(),
            "no [[subsystem]] is configured and discovery is disabled: nothing would be served",
            "one or more [[subsystem]] tables, or [discovery] enabled = true",
        ));
    }
    let mut subsystems = Vec::with_capacity(raw.subsystems.len());
    let mut nqns = HashMap::new();
    let mut identifiers = Identifiers::default();
    for (i, raw_subsystem) in raw.subsystems.iter().enumerate() {
        let key = root.key("subsystem").index(i);
        let subsystem = subsystem(raw_subsystem, base, &key, &mut identifiers)?;
        if let Some(first) = nqns.insert(subsystem.nqn.clone(), i) {
            return Err(Problem::new(
                key.key("nqn"),
                format!("NQN {:?} is also subsystem[{first}]'s", subsystem.nqn),
                "a different NQN for each subsystem",
            ));
        }
        subsystems.push(subsystem);
    }
    Ok(TargetConfig {
        limits,
        listeners,
        subsystems,
        discovery,
        reactors: reactors(raw.reactors.as_ref().cloned().unwrap_or_default(), &root.key("reactors"), cpus)?,
        metrics: metrics(raw.metrics.as_ref(), &root.key("metrics"))?,
        logging: logging(raw.logging.as_ref(), &root.key("logging"))?,
    })
}

fn limits(raw: RawLimits, key: &KeyPath) -> Result<ControllerLimits, Problem> {
    let mdts = match &raw.mdts {
        None => DEFAULT_MDTS,
        Some(size) => {
            let key = key.key("mdts");
            let bytes = size_of(size, &key)?;
            let allowed = "a power of two from 4KiB to 16MiB";
            if !bytes.is_power_of_two() || !(4096..=16 << 20).contains(&bytes) {
                return Err(Problem::new(key, format!("MDTS {} is not allowed", format_size(bytes)), allowed));
            }
            u32::try_from(bytes).map_err(|_| Problem::new(key, "MDTS too large", allowed))?
        }
    };
    let max_queue_size = match raw.max_queue_size {
        None => DEFAULT_MAX_QUEUE_SIZE,
        Some(value) => int_in(value, 32..=65536, &key.key("max_queue_size"), "queue size", "32..=65536")?,
    };
    let max_io_queues = match raw.max_io_queues {
        None => DEFAULT_MAX_IO_QUEUES,
        Some(value) => int_in(value, 1..=65534, &key.key("max_io_queues"), "I/O queue count", "1..=65534")?,
    };
    let keep_alive_granularity_ms = match raw.keep_alive_granularity_ms {
        None => DEFAULT_KEEP_ALIVE_GRANULARITY_MS,
        Some(value) => {
            let key = key.key("keep_alive_granularity_ms");
            let allowed = "a multiple of 100 from 100 to 6553500";
            let ms: u32 = int_in(value, 100..=6_553_500, &key, "granularity", allowed)?;
            if ms % 100 != 0 {
                return Err(Problem::new(key, format!("granularity {ms} is not a multiple of 100"), allowed));
            }
            ms
        }
    };
    let keep_alive_max_ms = match raw.keep_alive_max_ms {
        None => DEFAULT_KEEP_ALIVE_MAX_MS.max(keep_alive_granularity_ms),
        Some(value) => {
            let low = i64::from(keep_alive_granularity_ms);
            let allowed = format!("{low}..={} (at least keep_alive_granularity_ms)", u32::MAX);
            int_in(value, low..=i64::from(u32::MAX), &key.key("keep_alive_max_ms"), "timeout", allowed)?
        }
    };
    let keep_alive_min_ms = match raw.keep_alive_min_ms {
        None | Some(0) => 0,
        Some(value) => {
            let low = i64::from(keep_alive_granularity_ms);
            let allowed = format!("0 (none) or {low}..={keep_alive_max_ms} (the granularity to keep_alive_max_ms)");
            let range = low..=i64::from(keep_alive_max_ms);
            int_in(value, range, &key.key("keep_alive_min_ms"), "timeout", allowed)?
        }
    };
    let connect_timeout_ms = match raw.connect_timeout_ms {
        None => DEFAULT_CONNECT_TIMEOUT_MS,
        Some(value) => int_in(value, 100..=600_000, &key.key("connect_timeout_ms"), "timeout", "100..=600000")?,
    };
    let transfer_timeout_ms = match raw.transfer_timeout_ms {
        None => DEFAULT_TRANSFER_TIMEOUT_MS,
        Some(value) => int_in(value, 1000..=3_600_000, &key.key("transfer_timeout_ms"), "timeout", "1000..=3600000")?,
    };
    let ceph_timeout = |value: Option<i64>, name: &str| match value {
        None => Ok(DEFAULT_CEPH_TIMEOUT_MS),
        Some(value) => int_in(value, 1000..=600_000, &key.key(name), "timeout", "1000..=600000"),
    };
    let ceph_mon_timeout_ms = ceph_timeout(raw.ceph_mon_timeout_ms, "ceph_mon_timeout_ms")?;
    let ceph_osd_timeout_ms = ceph_timeout(raw.ceph_osd_timeout_ms, "ceph_osd_timeout_ms")?;
    let queue_buffer_percent = match raw.queue_buffer_percent {
        None => DEFAULT_QUEUE_BUFFER_PERCENT,
        Some(value) => int_in(value, 1..=100, &key.key("queue_buffer_percent"), "percentage", "1..=100")?,
    };
    let anonymous_buffer_percent = match raw.anonymous_buffer_percent {
        None => DEFAULT_ANONYMOUS_BUFFER_PERCENT,
        Some(value) => int_in(value, 1..=100, &key.key("anonymous_buffer_percent"), "percentage", "1..=100")?,
    };
    let max_connections_per_address = match raw.max_connections_per_address {
        None => DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        Some(value) => {
            int_in(value, 1..=1 << 20, &key.key("max_connections_per_address"), "connection count", "1..=1048576")?
        }
    };
    let address_prefix_v4 = match raw.address_prefix_v4 {
        None => DEFAULT_ADDRESS_PREFIX_V4,
        Some(value) => int_in(value, 1..=32, &key.key("address_prefix_v4"), "prefix length", "1..=32")?,
    };
    let address_prefix_v6 = match raw.address_prefix_v6 {
        None => DEFAULT_ADDRESS_PREFIX_V6,
        Some(value) => int_in(value, 1..=128, &key.key("address_prefix_v6"), "prefix length", "1..=128")?,
    };
    let max_controllers_per_host = match raw.max_controllers_per_host {
        None => DEFAULT_MAX_CONTROLLERS_PER_HOST,
        Some(value) => int_in(value, 1..=65519, &key.key("max_controllers_per_host"), "controller count", "1..=65519")?,
    };
    let max_registrants = match raw.max_registrants {
        None => DEFAULT_MAX_REGISTRANTS,
        Some(value) => int_in(value, 1..=65536, &key.key("max_registrants"), "registrant count", "1..=65536")?,
    };
    let dhchap_dhgroups = match &raw.dhchap_dhgroups {
        None => nvmf_common::fabrics::auth::controller::DEFAULT_DH_GROUPS.to_vec(),
        Some(names) => named_list(names, &key.key("dhchap_dhgroups"), dh_group, DHGROUPS_ALLOWED)?,
    };
    let auth_threads = match raw.auth_threads {
        None => DEFAULT_AUTH_THREADS,
        Some(value) => int_in(value, 1..=64, &key.key("auth_threads"), "thread count", "1..=64")?,
    };
    let auth_queue_depth = match raw.auth_queue_depth {
        None => DEFAULT_AUTH_QUEUE_DEPTH,
        Some(value) => int_in(value, 1..=65536, &key.key("auth_queue_depth"), "queue depth", "1..=65536")?,
    };
    let tls_threads = match raw.tls_threads {
        None => DEFAULT_TLS_THREADS,
        Some(value) => int_in(value, 1..=64, &key.key("tls_threads"), "thread count", "1..=64")?,
    };
    let tls_queue_depth = match raw.tls_queue_depth {
        None => DEFAULT_TLS_QUEUE_DEPTH,
        Some(value) => int_in(value, 1..=65536, &key.key("tls_queue_depth"), "queue depth", "1..=65536")?,
    };
    let auth_attempts_per_second = match raw.auth_attempts_per_second {
        None => DEFAULT_AUTH_ATTEMPTS_PER_SECOND,
        Some(value) => {
            int_in(value, 1..=1_000_000, &key.key("auth_attempts_per_second"), "attempt rate", "1..=1000000")?
        }
    };
    let tcp_keepalive_ms = match raw.tcp_keepalive_ms {
        None => DEFAULT_TCP_KEEPALIVE_MS,
        Some(0) => 0,
        Some(value) => int_in(
            value,
            10_000..=86_400_000,
            &key.key("tcp_keepalive_ms"),
            "keepalive",
            "0 (off) or 10000..=86400000",
        )?,
    };
    let tcp_send_backlog = match &raw.tcp_send_backlog {
        None => DEFAULT_TCP_SEND_BACKLOG,
        Some(size) => {
            let key = key.key("tcp_send_backlog");
            let bytes = size_of(size, &key)?;
            let allowed = "64KiB..=1GiB";
            if !(64 << 10..=1 << 30).contains(&bytes) {
                return Err(Problem::new(key, format!("send backlog {} is out of range", format_size(bytes)), allowed));
            }
            u32::try_from(bytes).map_err(|_| Problem::new(key, "send backlog too large", allowed))?
        }
    };
    let state_dir = match &raw.state_dir {
        None => PathBuf::from(DEFAULT_STATE_DIR),
        Some(dir) if Path::new(dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => {
            return Err(Problem::new(
                key.key("state_dir"),
                format!("{dir:?} is not an absolute path"),
                "an absolute directory path",
            ))
        }
    };
    Ok(ControllerLimits {
        state_dir,
        mdts,
        max_queue_size,
        max_io_queues,
        keep_alive_granularity_ms,
        keep_alive_max_ms,
        keep_alive_min_ms,
        connect_timeout_ms,
        transfer_timeout_ms,
        queue_buffer_percent,
        anonymous_buffer_percent,
        max_connections_per_address,
        address_prefix_v4,
        address_prefix_v6,
        max_controllers_per_host,
        max_registrants,
        dhchap_dhgroups,
        auth_threads,
        auth_queue_depth,
        tls_threads,
        tls_queue_depth,
        auth_attempts_per_second,
        tcp_keepalive_ms,
        tcp_send_backlog,
        ceph_mon_timeout_ms,
        ceph_osd_timeout_ms,
    })
}

/// Parse an IP address literal.
pub(crate) fn ip_address(text: &str, key: &KeyPath) -> Result<IpAddr, Problem> {
    text.parse().map_err(|_| Problem::new(key.clone(), format!("{text:?} is not an IP address"), ADDRESS_ALLOWED))
}

fn listener(raw: &RawListener, limits: &ControllerLimits, key: &KeyPath) -> Result<ListenerConfig, Problem> {
    let ip = ip_address(&raw.address, &key.key("address"))?;
    let port = match raw.port {
        None => DEFAULT_PORT,
        Some(port) => int_in(port, 1..=65535, &key.key("port"), "port", "1..=65535 (4420, or 8009 for discovery)")?,
    };
    let max_queue_size = match raw.max_queue_size {
        None => limits.max_queue_size,
        Some(value) => {
            let allowed = format!("32..={} ([target] max_queue_size)", limits.max_queue_size);
            int_in(value, 32..=i64::from(limits.max_queue_size), &key.key("max_queue_size"), "queue size", allowed)?
        }
    };
    let in_capsule_data_size = match &raw.in_capsule_data_size {
        None => DEFAULT_IN_CAPSULE_DATA_SIZE.min(limits.mdts),
        Some(size) => {
            let key = key.key("in_capsule_data_size");
            let bytes = size_of(size, &key)?;
            let allowed = format!("a multiple of 16 from 0 to {} ([target] mdts)", format_size(u64::from(limits.mdts)));
            if bytes % 16 != 0 || bytes > u64::from(limits.mdts) {
                return Err(Problem::new(key, format!("in-capsule data size {bytes} is not allowed"), allowed));
            }
            u32::try_from(bytes).map_err(|_| Problem::new(key, "in-capsule data size too large", allowed))?
        }
    };
    let max_connections = match raw.max_connections {
        None => DEFAULT_LISTENER_MAX_CONNECTIONS,
        Some(value) => int_in(value, 1..=1 << 20, &key.key("max_connections"), "connection count", "1..=1048576")?,
    };
    let ana_state = match &raw.ana_state {
        None => AnaState::Optimized,
        Some(name) => AnaState::from_name(name).ok_or_else(|| {
            Problem::new(key.key("ana_state"), format!("ANA state {name:?} is unknown"), ANA_STATE_ALLOWED)
        })?,
    };
    let ana_group_states = match &raw.ana_group_states {
        None => BTreeMap::new(),
        Some(states) => ana_group_states(states, &key.key("ana_group_states"))?,
    };
    let transport = match (raw.transport.unwrap_or(Transport::Tcp), &raw.tcp, &raw.rdma) {
        (Transport::Tcp, tcp, None) => {
            let tcp = tcp.clone().unwrap_or_default();
            let tls = match &raw.tls {
                None => TlsMode::None,
                Some(name) => TlsMode::from_name(name).ok_or_else(|| {
                    Problem::new(key.key("tls"), format!("TLS mode {name:?} is unknown"), "none, allowed or required")
                })?,
            };
            ListenerTransport::Tcp(TcpOptions {
                header_digest: tcp.header_digest.unwrap_or(true),
                data_digest: tcp.data_digest.unwrap_or(true),
                tls,
            })
        }
        (Transport::Rdma, None, _) if raw.tls.is_some() => {
            return Err(Problem::new(key.key("tls"), "TLS on an rdma listener", "tls only with transport = \"tcp\""))
        }
        (Transport::Rdma, None, rdma) => {
            let rdma = rdma.clone().unwrap_or_default();
            ListenerTransport::Rdma(RdmaOptions {
                send_with_invalidate: rdma.send_with_invalidate.unwrap_or(true),
                srq: rdma.srq.unwrap_or(false),
            })
        }
        (Transport::Tcp, _, Some(_)) => {
            return Err(Problem::new(
                key.key("rdma"),
                "[listener.rdma] options on a tcp listener",
                "a [listener.rdma] table only with transport = \"rdma\"",
            ))
        }
        (Transport::Rdma, Some(_), _) => {
            return Err(Problem::new(
                key.key("tcp"),
                "[listener.tcp] options on an rdma listener",
                "a [listener.tcp] table only with transport = \"tcp\"",
            ))
        }
    };
    Ok(ListenerConfig {
        address: SocketAddr::new(ip, port),
        max_queue_size,
        in_capsule_data_size,
        max_connections,
        ana_state,
        ana_group_states,
        transport,
    })
}

/// `[[listener]] ana_group_states` (at `key`): ANA group IDs 1..=128, each once, to known states.
fn ana_group_states(raw: &RawGroupStates, key: &KeyPath) -> Result<BTreeMap<u32, AnaState>, Problem> {
    let mut states = BTreeMap::new();
    let mut written = HashMap::new();
    for (text, name) in &raw.0 {
        let entry = key.key(text);
        let group: u32 = match text.parse::<i64>() {
            Ok(group) if text.bytes().all(|b| b.is_ascii_digit()) => {
                int_in(group, 1..=i64::from(MAX_ANA_GROUP), &entry, "ANA group", ANA_GROUP_STATES_ALLOWED)?
            }
            _ => return Err(Problem::new(entry, format!("{text:?} is not an ANA group ID"), ANA_GROUP_STATES_ALLOWED)),
        };
        if let Some(first) = written.insert(group, text) {
            return Err(Problem::new(
                entry,
                format!("ANA group {group} is named twice ({first:?} and {text:?})"),
                ANA_GROUP_STATES_ALLOWED,
            ));
        }
        let state = AnaState::from_name(name)
            .ok_or_else(|| Problem::new(entry.clone(), format!("ANA state {name:?} is unknown"), ANA_STATE_ALLOWED))?;
        states.insert(group, state);
    }
    Ok(states)
}

/// Namespace identifiers seen so far in the target, with where, to reject duplicates.
#[derive(Default)]
struct Identifiers {
    uuids: HashMap<Uuid, KeyPath>,
    nguids: HashMap<Nguid, KeyPath>,
    eui64s: HashMap<Eui64, KeyPath>,
}

fn unique<T: std::hash::Hash + Eq + Display>(
    seen: &mut HashMap<T, KeyPath>,
    value: T,
    key: KeyPath,
    what: &str,
) -> Result<(), Problem> {
    if let Some(first) = seen.get(&value) {
        return Err(Problem::new(
            key,
            format!("{what} {value} is also {first}'s"),
            format!("a {what} unique in the target (omit it to derive one)"),
        ));
    }
    seen.insert(value, key);
    Ok(())
}

fn subsystem(
    raw: &RawSubsystem,
    base: Option<&Path>,
    key: &KeyPath,
    identifiers: &mut Identifiers,
) -> Result<SubsystemConfig, Problem> {
    check_nqn(&raw.nqn, &key.key("nqn"))?;
    if raw.nqn == DISCOVERY_NQN {
        return Err(Problem::new(
            key.key("nqn"),
            "the discovery subsystem's NQN cannot name an NVM subsystem",
            "any other NQN ([discovery] enables the discovery subsystem)",
        ));
    }
    let serial = match &raw.serial {
        None => ids::derive_serial(&raw.nqn),
        Some(serial) => printable_ascii(serial, 20, &key.key("serial"), "serial number")?,
    };
    let model = printable_ascii(raw.model.as_deref().unwrap_or(DEFAULT_MODEL), 40, &key.key("model"), "model")?;
    let mut hosts = Vec::with_capacity(raw.hosts.len());
    for (i, host) in raw.hosts.iter().enumerate() {
        let host_key = key.key("hosts").index(i);
        check_nqn(host, &host_key)?;
        if let Some(first) = hosts.iter().position(|h| h == host) {
            return Err(Problem::new(host_key, format!("host {host:?} is also hosts[{first}]"), "each host NQN once"));
        }
        hosts.push(host.clone());
    }
    let mut host_keys: Vec<HostKeysConfig> = Vec::with_capacity(raw.host_keys.len());
    for (i, entry) in raw.host_keys.iter().enumerate() {
        let entry_key = key.key("host").index(i);
        check_nqn(&entry.nqn, &entry_key.key("nqn"))?;
        if let Some(first) = hosts.iter().position(|h| *h == entry.nqn) {
            return Err(Problem::new(
                entry_key.key("nqn"),
                format!("host {:?} is also hosts[{first}]", entry.nqn),
                "each host once: in hosts (no key) or as a [[subsystem.host]] (with keys)",
            ));
        }
        if let Some(first) = host_keys.iter().position(|h| h.nqn == entry.nqn) {
            return Err(Problem::new(
                entry_key.key("nqn"),
                format!("host {:?} is also host[{first}]", entry.nqn),
                "one [[subsystem.host]] per host",
            ));
        }
        let entry = host_keys_entry(entry, &entry_key, base)?;
        if let Some(first) = entry.hostid.and_then(|id| host_keys.iter().position(|h| h.hostid == Some(id))) {
            return Err(Problem::new(
                entry_key.key("hostid"),
                format!("host ID {} is also host[{first}]'s", entry.hostid.unwrap_or_default()),
                "each host ID once in a subsystem",
            ));
        }
        host_keys.push(entry);
    }
    let allow_any_host = match (raw.allow_any_host, hosts.is_empty()) {
        (None, no_hosts) => no_hosts && host_keys.is_empty(),
        // Any host may connect, and those with keys must authenticate.
        (Some(false), true) if !host_keys.is_empty() => false,
        (Some(true), false) => {
            return Err(Problem::new(
                key.key("allow_any_host"),
                "allow_any_host = true contradicts the hosts list",
                "allow_any_host = false with hosts, or no hosts list",
            ))
        }
        (Some(false), true) => {
            return Err(Problem::new(
                key.key("allow_any_host"),
                "allow_any_host = false with no hosts listed: no host could connect",
                "hosts = [\"nqn...\"] with allow_any_host = false, or allow_any_host = true",
            ))
        }
        (Some(allow), _) => allow,
    };
    let cntlid_allowed = format!("{CNTLID_MIN}..={CNTLID_MAX} (0x{CNTLID_MAX:04X})");
    let cntlid_range = i64::from(CNTLID_MIN)..=i64::from(CNTLID_MAX);
    let cntlid_min = match raw.cntlid_min {
        None => CNTLID_MIN,
        Some(value) => int_in(value, cntlid_range.clone(), &key.key("cntlid_min"), "cntlid_min", &cntlid_allowed)?,
    };
    let cntlid_max = match raw.cntlid_max {
        None => CNTLID_MAX,
        Some(value) => int_in(value, cntlid_range, &key.key("cntlid_max"), "cntlid_max", &cntlid_allowed)?,
    };
    if cntlid_min > cntlid_max {
        return Err(Problem::new(
            key.key(if raw.cntlid_max.is_some() { "cntlid_max" } else { "cntlid_min" }),
            format!("cntlid_min {cntlid_min} is greater than cntlid_max {cntlid_max}"),
            "cntlid_min <= cntlid_max",
        ));
    }
    let max_namespaces = match raw.max_namespaces {
        None => DEFAULT_MAX_NAMESPACES,
        Some(value) => int_in(value, 1..=0xFFFF_FFFE, &key.key("max_namespaces"), "max_namespaces", "1..=4294967294")?,
    };
    let mut namespaces = Vec::with_capacity(raw.namespaces.len());
    let mut nsids = HashMap::new();
    let mut next_nsid = 1i64;
    for (i, raw_namespace) in raw.namespaces.iter().enumerate() {
        let ns_key = key.key("namespace").index(i);
        let nsid_value = raw_namespace.nsid.unwrap_or(next_nsid);
        let nsid_key = ns_key.key("nsid");
        let allowed = format!("1..={max_namespaces} (max_namespaces), unique in the subsystem");
        let nsid: u32 = int_in(nsid_value, 1..=i64::from(max_namespaces), &nsid_key, "NSID", &allowed)?;
        if let Some(first) = nsids.insert(nsid, i) {
            let how = if raw_namespace.nsid.is_some() { "" } else { " (counted on from the previous namespace)" };
            return Err(Problem::new(nsid_key, format!("NSID {nsid}{how} is also namespace[{first}]'s"), allowed));
        }
        next_nsid = i64::from(nsid) + 1;
        let namespace = namespace(raw_namespace, &raw.nqn, nsid, base, &ns_key)?;
        unique(&mut identifiers.uuids, namespace.uuid, ns_key.key("uuid"), "UUID")?;
        unique(&mut identifiers.nguids, namespace.nguid, ns_key.key("nguid"), "NGUID")?;
        unique(&mut identifiers.eui64s, namespace.eui64, ns_key.key("eui64"), "EUI-64")?;
        namespaces.push(namespace);
    }
    Ok(SubsystemConfig {
        nqn: raw.nqn.clone(),
        serial,
        model,
        allow_any_host,
        hosts,
        host_keys,
        auth_required: raw.auth_required.unwrap_or(false),
        cntlid_min,
        cntlid_max,
        max_namespaces,
        namespaces,
    })
}

const HASHES_ALLOWED: &str = "sha256, sha384, sha512 (or hmac(sha256), hmac(sha384), hmac(sha512)), each once";
const DHGROUPS_ALLOWED: &str = "null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192, each once";

/// A hash function as nvmet (`hmac(sha256)`) or plainly (`sha256`) named.
fn hash_function(name: &str) -> Option<HashFunction> {
    let plain = name.strip_prefix("hmac(").and_then(|n| n.strip_suffix(')')).unwrap_or(name);
    match plain {
        "sha256" => Some(HashFunction::Sha256),
        "sha384" => Some(HashFunction::Sha384),
        "sha512" => Some(HashFunction::Sha512),
        _ => None,
    }
}

fn dh_group(name: &str) -> Option<DhGroup> {
    nvmf_common::fabrics::auth::dh::ALL_GROUPS.into_iter().find(|g| g.name() == name)
}

/// A list of names (`dhchap_hashes`, `dhchap_dhgroups`), each once, not empty.
fn named_list<T: PartialEq>(
    names: &[String],
    key: &KeyPath,
    parse: impl Fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Vec<T>, Problem> {
    if names.is_empty() {
        return Err(Problem::new(key.clone(), "the list is empty", format!("at least one of {allowed}")));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let value = parse(name).ok_or_else(|| Problem::new(key.index(i), format!("{name:?} is not known"), allowed))?;
        if out.contains(&value) {
            return Err(Problem::new(key.index(i), format!("{name:?} is listed twice"), allowed));
        }
        out.push(value);
    }
    Ok(out)
}

fn host_keys_entry(raw: &RawHostKeys, key: &KeyPath, base: Option<&Path>) -> Result<HostKeysConfig, Problem> {
    let source = |inline, file, name| {
        Ok::<_, Problem>(
            crate::secret::secret_with_source(inline, file, key, name, base)?
                .map(|(secret, file)| SecretConfig { secret, file }),
        )
    };
    let dhchap_key = source(raw.dhchap_key.as_ref(), raw.dhchap_key_file.as_deref(), "dhchap_key")?;
    let tls_key =
        crate::secret::tls_key_with_source(raw.tls_key.as_ref(), raw.tls_key_file.as_deref(), key, "tls_key", base)?
            .map(|(key, file)| TlsKeyConfig { key, file });
    if dhchap_key.is_none() && tls_key.is_none() {
        return Err(Problem::new(
            key.key("dhchap_key"),
            "the host has no key",
            "dhchap_key = \"DHHC-1:…\", tls_key = \"NVMeTLSkey-1:…\" or their _file forms (a host without keys \
             belongs in hosts)",
        ));
    }
    let dhchap_ctrl_key = source(raw.dhchap_ctrl_key.as_ref(), raw.dhchap_ctrl_key_file.as_deref(), "dhchap_ctrl_key")?;
    let dhchap_hashes = match &raw.dhchap_hashes {
        None => Vec::new(),
        Some(names) => named_list(names, &key.key("dhchap_hashes"), hash_function, HASHES_ALLOWED)?,
    };
    let dhchap_dhgroups = match &raw.dhchap_dhgroups {
        None => Vec::new(),
        Some(names) => named_list(names, &key.key("dhchap_dhgroups"), dh_group, DHGROUPS_ALLOWED)?,
    };
    let hostid = match &raw.hostid {
        None => None,
        Some(text) => Some(ids::parse_uuid(text).map_err(|error| error.at(key.key("hostid")))?),
    };
    Ok(HostKeysConfig {
        nqn: raw.nqn.clone(),
        dhchap_key,
        dhchap_ctrl_key,
        dhchap_hashes,
        dhchap_dhgroups,
        hostid,
        tls_key,
        tls_key_compat: raw.tls_key_compat.unwrap_or(false),
    })
}

fn namespace(
    raw: &RawNamespace,
    subnqn: &str,
    nsid: u32,
    base: Option<&Path>,
    key: &KeyPath,
) -> Result<NamespaceConfig, Problem> {
    let block_size = match raw.block_size {
        None => DEFAULT_BLOCK_SIZE,
        Some(512) => 512,
        Some(4096) => 4096,
        Some(other) => {
            return Err(Problem::new(
                key.key("block_size"),
                format!("block size {other} is not supported"),
                "512 or 4096",
            ))
        }
    };
    let sized = |name: &str, raw_size: &RawSize| -> Result<u64, Problem> {
        let size_key = key.key(name);
        let size = size_of(raw_size, &size_key)?;
        if size == 0 || size % u64::from(block_size) != 0 {
            return Err(Problem::new(
                size_key,
                format!("size {size} is not a positive multiple of the block size {block_size}"),
                format!("a positive multiple of {block_size} bytes, e.g. \"1GiB\""),
            ));
        }
        Ok(size)
    };
    let backends = [
        ("path", raw.path.is_some()),
        ("memory", raw.memory.is_some()),
        ("null", raw.null.is_some()),
        ("rbd", raw.rbd.is_some()),
    ];
    let mut given = backends.into_iter().filter_map(|(name, given)| given.then_some(name));
    if let (Some(first), Some(second)) = (given.next(), given.next()) {
        // Two or more: name the second in the order path, memory, null, rbd.
        return Err(Problem::new(
            key.key(second),
            format!("the namespace has both {first} and {second}"),
            BACKEND_ALLOWED,
        ));
    }
    let backend = if let Some(path) = &raw.path {
        NamespaceBackend::Path(resolved_path(path, base, &key.key("path"), "a block device or file path")?)
    } else if let Some(size) = &raw.memory {
        NamespaceBackend::Memory { size: sized("memory", size)? }
    } else if let Some(size) = &raw.null {
        NamespaceBackend::Null { size: sized("null", size)? }
    } else if let Some(name) = &raw.rbd {
        NamespaceBackend::Rbd(rbd_image(raw, name, base, key)?)
    } else {
        return Err(Problem::new(key.clone(), "the namespace has no backend", BACKEND_ALLOWED));
    };
    if !matches!(backend, NamespaceBackend::Rbd(_)) {
        let ceph = [("ceph_conf", raw.ceph_conf.is_some()), ("ceph_id", raw.ceph_id.is_some())];
        if let Some(name) = ceph.into_iter().find_map(|(name, given)| given.then_some(name)) {
            return Err(Problem::new(
                key.key(name),
                format!("{name} applies to rbd namespaces only"),
                CEPH_OPTIONS_ALLOWED,
            ));
        }
    }
    let buffered_io = raw.buffered_io.unwrap_or(false);
    if buffered_io && !matches!(backend, NamespaceBackend::Path(_)) {
        return Err(Problem::new(
            key.key("buffered_io"),
            "buffered_io applies to path namespaces only",
            "true with path, false (the default) with memory, null or rbd",
        ));
    }
    let uuid = match &raw.uuid {
        None => ids::derive_uuid(subnqn, nsid),
        Some(text) => ids::parse_uuid(text).map_err(|error| error.at(key.key("uuid")))?,
    };
    let nguid = match &raw.nguid {
        None => ids::derive_nguid(subnqn, nsid),
        Some(text) => Nguid::parse(text).map_err(|error| error.at(key.key("nguid")))?,
    };
    let eui64 = match &raw.eui64 {
        None => ids::derive_eui64(subnqn, nsid),
        Some(text) => Eui64::parse(text).map_err(|error| error.at(key.key("eui64")))?,
    };
    let ana_group = match raw.ana_group {
        None => 1,
        Some(group) => int_in(group, 1..=i64::from(MAX_ANA_GROUP), &key.key("ana_group"), "ANA group", "1..=128")?,
    };
    Ok(NamespaceConfig { nsid, backend, block_size, buffered_io, uuid, nguid, eui64, ana_group })
}

/// A path key's value (at `key`), not empty; taken relative to `base` when relative.
fn resolved_path(text: &str, base: Option<&Path>, key: &KeyPath, allowed: &str) -> Result<PathBuf, Problem> {
    if text.is_empty() {
        return Err(Problem::new(key.clone(), "the path is empty", allowed));
    }
    let path = PathBuf::from(text);
    Ok(match base {
        Some(base) if path.is_relative() => base.join(path),
        _ => path,
    })
}

/// The RBD image of a namespace with `rbd = name`, with its `ceph_conf` (relative to `base`) and `ceph_id`.
fn rbd_image(raw: &RawNamespace, name: &str, base: Option<&Path>, key: &KeyPath) -> Result<RbdImage, Problem> {
    let mut image = RbdImage::parse(name).map_err(|error| error.at(key.key("rbd")))?;
    if let Some(conf) = &raw.ceph_conf {
        image.ceph_conf = resolved_path(conf, base, &key.key("ceph_conf"), CEPH_CONF_ALLOWED)?;
    }
    if let Some(id) = &raw.ceph_id {
        image.ceph_id = parse_ceph_id(id).map_err(|error| error.at(key.key("ceph_id")))?;
    }
    Ok(image)
}

/// A `cpus` list (at `key`): CPU numbers 0..=1023, each once, in the order given.
pub(crate) fn cpu_list(raw: &[i64], key: &KeyPath) -> Result<Vec<usize>, Problem> {
    let mut cpus = Vec::new();
    let mut seen = HashSet::new();
    for (i, &cpu) in raw.iter().enumerate() {
        let cpu_key = key.index(i);
        let cpu: usize = int_in(cpu, 0..=1023, &cpu_key, "CPU", "CPU numbers 0..=1023, each once")?;
        if !seen.insert(cpu) {
            return Err(Problem::new(cpu_key, format!("CPU {cpu} is listed twice"), "CPU numbers 0..=1023, each once"));
        }
        cpus.push(cpu);
    }
    Ok(cpus)
}

fn reactors(raw: RawReactors, key: &KeyPath, available: usize) -> Result<ReactorConfig, Problem> {
    let cpus = cpu_list(raw.cpus.as_deref().unwrap_or_default(), &key.key("cpus"))?;
    if raw.cpus.is_some() && cpus.is_empty() {
        return Err(Problem::new(key.key("cpus"), "the CPU list is empty", "one or more CPU numbers, or no cpus key"));
    }
    let threads = match raw.threads {
        None if !cpus.is_empty() => cpus.len(),
        None => available.clamp(1, 1024),
        Some(value) => {
            let threads: usize = int_in(value, 1..=1024, &key.key("threads"), "thread count", "1..=1024")?;
            if !cpus.is_empty() && threads != cpus.len() {
                return Err(Problem::new(
                    key.key("threads"),
                    format!("{threads} threads but {} CPUs in cpus", cpus.len()),
                    "as many threads as CPUs listed (or omit threads)",
                ));
            }
            threads
        }
    };
    let discard_queue_depth = match raw.discard_queue_depth {
        None => DEFAULT_DISCARD_QUEUE_DEPTH,
        Some(value) => int_in(value, 1..=65536, &key.key("discard_queue_depth"), "queue depth", "1..=65536")?,
    };
    let poll = match raw.poll.as_deref() {
        None => PollMode::default(),
        Some(name) => name.parse().map_err(|_| {
            Problem::new(key.key("poll"), format!("{name:?} is not a poll mode"), "adaptive, sleep or busy")
        })?,
    };
    let poll_window_us = match raw.poll_window_us {
        None => DEFAULT_POLL_WINDOW_US,
        Some(value) => int_in(value, 1..=100_000, &key.key("poll_window_us"), "poll window", "1..=100000 µs")?,
    };
    let socket_io = match raw.socket_io.as_deref() {
        None | Some("epoll") => SocketIoMode::Epoll,
        Some("io_uring") => SocketIoMode::IoUring,
        Some(name) => {
            return Err(Problem::new(
                key.key("socket_io"),
                format!("{name:?} is not a socket I/O mode"),
                "epoll or io_uring",
            ))
        }
    };
    let send_zero_copy_bytes = match raw.send_zero_copy_bytes {
        None => DEFAULT_SEND_ZERO_COPY_BYTES,
        Some(value) => int_in(value, 0..=16 << 20, &key.key("send_zero_copy_bytes"), "size", "0..=16777216 bytes")?,
    };
    let placement = match raw.placement.as_deref() {
        None | Some("round_robin") => QueuePlacement::RoundRobin,
        Some("incoming_cpu") if cpus.len() >= 2 => QueuePlacement::IncomingCpu,
        Some("incoming_cpu") => {
            return Err(Problem::new(
                key.key("placement"),
                "\"incoming_cpu\" needs the reactors pinned to two or more CPUs",
                "round_robin, or incoming_cpu with cpus listing two or more CPUs",
            ))
        }
        Some(name) => {
            return Err(Problem::new(
                key.key("placement"),
                format!("{name:?} is not a queue placement"),
                "round_robin or incoming_cpu",
            ))
        }
    };
    Ok(ReactorConfig {
        threads,
        cpus,
        discard_queue_depth,
        poll,
        poll_window_us,
        socket_io,
        send_zero_copy_bytes,
        placement,
    })
}

/// Parse `ADDR:PORT` (IPv6 in brackets), port 1..=65535.
pub(crate) fn socket_address(text: &str, key: &KeyPath) -> Result<SocketAddr, Problem> {
    let allowed = "ADDRESS:PORT such as \"127.0.0.1:9420\" or \"[::1]:9420\", port 1..=65535";
    match text.parse::<SocketAddr>() {
        Ok(address) if address.port() != 0 => Ok(address),
        _ => Err(Problem::new(key.clone(), format!("{text:?} is not an address and port"), allowed)),
    }
}

pub(crate) fn metrics(raw: Option<&RawMetrics>, key: &KeyPath) -> Result<MetricsConfig, Problem> {
    let listen = raw.and_then(|m| m.listen.as_deref()).map(|text| socket_address(text, &key.key("listen")));
    Ok(MetricsConfig { listen: listen.transpose()? })
}

pub(crate) fn logging(raw: Option<&RawLogging>, key: &KeyPath) -> Result<LoggingConfig, Problem> {
    let level = raw.and_then(|l| l.level.clone()).unwrap_or_else(|| "info".to_owned());
    let allowed = "comma-separated LEVEL or TARGET=LEVEL directives, LEVEL one of trace, debug, info, warn, error, \
                   off; TARGET a Rust module path such as nvmf_target::tcp";
    for directive in level.split(',') {
        let directive = directive.trim();
        let (target, lvl) = directive.rsplit_once('=').map_or((None, directive), |(t, l)| (Some(t), l));
        let target_ok = target.is_none_or(|t| {
            !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
        });
        if !target_ok || !LEVELS.contains(&lvl.to_ascii_lowercase().as_str()) {
            return Err(Problem::new(
                key.key("level"),
                format!("log directive {directive:?} is not understood"),
                allowed,
            ));
        }
    }
    Ok(LoggingConfig { level, format: raw.and_then(|l| l.format).unwrap_or(LogFormat::Text) })
}
