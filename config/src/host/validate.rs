//! From the file schema to [`HostConfig`]: range and consistency checks, defaults filled in. Every check returns
//! a [`Problem`] naming the key path, what was found and what is allowed; the loader adds the line. The first
//! problem found is reported.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::fabrics::tls::{ConfiguredPsk, IdentityVersion};

use super::schema::{RawController, RawExport, RawHost, RawHostConfig};
use super::*;
use crate::error::{KeyPath, Problem, ValueError};
use crate::secret::{secret, tls_key_with_source};
use crate::target::{check_nqn, cpu_list, int_in, ip_address, logging, metrics, socket_address, DEFAULT_PORT};

/// Default `[[controller]] path_retries` (the Linux host retries a failed command up to 5 times,
/// `nvme_core.max_retries`).
pub const DEFAULT_PATH_RETRIES: u8 = 5;

/// Default `[[controller]] tls_identity_version` (and `--tls-identity-version`): 1, as `nvme connect --tls-key`
/// makes (libnvme passes the interchange format's version); the kernel host tries version 1 identities first since
/// Linux 6.12.
pub const DEFAULT_TLS_IDENTITY_VERSION: IdentityVersion = IdentityVersion::V1;

const NBD_ALLOWED: &str =
    "\"unix:/absolute/or/relative/path\" or a loopback \"ADDRESS:PORT\" such as \"127.0.0.1:10809\" or \"[::1]:10809\"";
const EXPORT_ALLOWED: &str = "exactly one of nbd = \"unix:/path\" or \"ADDRESS:PORT\" (an NBD server), or ublk = true \
                              (a /dev/ublkbN device)";

pub(crate) fn validate(raw: &RawHostConfig, base: Option<&Path>, cpus: usize) -> Result<HostConfig, Problem> {
    let root = KeyPath::root();
    let host = host(raw.host.as_ref(), &root.key("host"), base)?;
    let metrics = metrics(raw.metrics.as_ref(), &root.key("metrics"))?;
    let logging = logging(raw.logging.as_ref(), &root.key("logging"))?;
    let mut controllers = Vec::with_capacity(raw.controllers.len());
    let mut seen: HashMap<(Transport, SocketAddr, String), usize> = HashMap::new();
    let mut endpoints: HashMap<NbdEndpoint, String> = HashMap::new();
    for (i, rc) in raw.controllers.iter().enumerate() {
        let key = root.key("controller").index(i);
        let c = controller(rc, &key, base, cpus, &mut endpoints)?;
        // Each further path is a controller of its own with the table's settings and exports: the daemon makes
        // it a path of the same exports.
        let mut paths = Vec::with_capacity(rc.paths.len());
        for (j, rp) in rc.paths.iter().enumerate() {
            let pkey = key.key("path").index(j);
            let address = ip_address(&rp.address, &pkey.key("address"))?;
            let port = match rp.port {
                Some(p) => int_in(p, 1..=65535, &pkey.key("port"), "port", "1..=65535 (4420)")?,
                None => DEFAULT_PORT,
            };
            paths.push((pkey, ControllerConfig { address, port, ..c.clone() }));
        }
        for (pkey, c) in std::iter::once((key.clone(), c)).chain(paths) {
            if let Some(first) = seen.insert((c.transport, c.socket_addr(), c.nqn.clone()), i) {
                return Err(Problem::new(
                    pkey.key(if pkey == key { "nqn" } else { "address" }),
                    format!("{} at {}://{} is also controller[{first}]", c.nqn, c.transport, c.socket_addr()),
                    "each subsystem NQN, transport, address and port once",
                ));
            }
            controllers.push(c);
        }
    }
    Ok(HostConfig { host, metrics, logging, controllers })
}

fn path_in(text: &str, key: &KeyPath, base: Option<&Path>) -> Result<PathBuf, Problem> {
    if text.is_empty() {
        return Err(Problem::new(key.clone(), "the path is empty", "a directory or file path"));
    }
    Ok(resolve(Path::new(text), base))
}

fn resolve(path: &Path, base: Option<&Path>) -> PathBuf {
    match base {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_owned(),
    }
}

fn host(raw: Option<&RawHost>, key: &KeyPath, base: Option<&Path>) -> Result<HostSection, Problem> {
    let empty = RawHost::default();
    let raw = raw.unwrap_or(&empty);
    if let Some(nqn) = &raw.hostnqn {
        check_nqn(nqn, &key.key("hostnqn"))?;
        if nqn == DISCOVERY_NQN {
            return Err(Problem::new(
                key.key("hostnqn"),
                "the discovery subsystem's NQN cannot name a host",
                "this host's own NQN, e.g. nqn.2014-08.org.nvmexpress:uuid:<UUID>",
            ));
        }
    }
    let hostid = raw
        .hostid
        .as_deref()
        .map(|text| crate::ids::parse_uuid(text).map(|u| *u.as_bytes()).map_err(|e| e.at(key.key("hostid"))))
        .transpose()?;
    let state_dir = match &raw.state_dir {
        Some(text) => path_in(text, &key.key("state_dir"), base)?,
        None => PathBuf::from(DEFAULT_STATE_DIR),
    };
    let control_socket = match &raw.control_socket {
        Some(text) => path_in(text, &key.key("control_socket"), base)?,
        None => PathBuf::from(DEFAULT_CONTROL_SOCKET),
    };
    let poll = match raw.poll.as_deref() {
        None => PollMode::default(),
        Some(name) => PollMode::from_name(name).ok_or_else(|| {
            Problem::new(key.key("poll"), format!("{name:?} is not a poll mode"), "adaptive, sleep or busy")
        })?,
    };
    let window_us: u32 = match raw.poll_window_us {
        Some(us) => int_in(
            us,
            1..=i64::from(MAX_POLL_WINDOW_US),
            &key.key("poll_window_us"),
            "poll window",
            format!("1..={MAX_POLL_WINDOW_US} microseconds ({DEFAULT_POLL_WINDOW_US})"),
        )?,
        None => DEFAULT_POLL_WINDOW_US,
    };
    let poll_window = Duration::from_micros(u64::from(window_us));
    let cpus = raw.cpus.as_deref().map(|list| cpu_list(list, &key.key("cpus"))).transpose()?;
    Ok(HostSection { hostnqn: raw.hostnqn.clone(), hostid, state_dir, control_socket, poll, poll_window, cpus })
}

/// Whole seconds `0..=max` (or `-1` for "never" when `never` is allowed).
fn seconds(value: i64, key: &KeyPath, what: &str, min: i64, never: bool) -> Result<Option<Duration>, Problem> {
    if never && value == -1 {
        return Ok(None);
    }
    let allowed =
        if never { format!("-1 (never) or {min}..=31536000 seconds") } else { format!("{min}..=31536000 seconds") };
    let secs: u64 = int_in(value, min..=31_536_000, key, what, allowed)?;
    Ok(Some(Duration::from_secs(secs)))
}

fn controller(
    raw: &RawController,
    key: &KeyPath,
    base: Option<&Path>,
    cpus: usize,
    endpoints: &mut HashMap<NbdEndpoint, String>,
) -> Result<ControllerConfig, Problem> {
    let address = ip_address(&raw.address, &key.key("address"))?;
    let port = match raw.port {
        Some(p) => int_in(p, 1..=65535, &key.key("port"), "port", "1..=65535 (4420)")?,
        None => DEFAULT_PORT,
    };
    check_nqn(&raw.nqn, &key.key("nqn"))?;
    if raw.nqn == DISCOVERY_NQN {
        return Err(Problem::new(
            key.key("nqn"),
            "the discovery subsystem holds no namespaces to keep connected",
            "an NVM subsystem's NQN (use `nvmf-host connect-all` to connect what a discovery controller lists)",
        ));
    }
    let nr_io_queues = match raw.nr_io_queues {
        Some(n) => int_in(n, 1..=65534, &key.key("nr_io_queues"), "I/O queue count", "1..=65534")?,
        None => u16::try_from(cpus.clamp(1, 65534)).unwrap_or(1),
    };
    let queue_size = match raw.queue_size {
        Some(n) => int_in(n, 2..=1024, &key.key("queue_size"), "queue size", "2..=1024")?,
        None => 128,
    };
    let keep_alive_tmo = raw
        .keep_alive_tmo
        .map_or(Ok(Some(Duration::from_secs(5))), |v| seconds(v, &key.key("keep_alive_tmo"), "timeout", 0, false))?
        .unwrap_or_default();
    let reconnect_delay = raw
        .reconnect_delay
        .map_or(Ok(Some(Duration::from_secs(10))), |v| seconds(v, &key.key("reconnect_delay"), "delay", 1, false))?
        .unwrap_or(Duration::from_secs(10));
    let ctrl_loss_tmo = raw
        .ctrl_loss_tmo
        .map_or(Ok(Some(Duration::from_secs(600))), |v| seconds(v, &key.key("ctrl_loss_tmo"), "timeout", 0, true))?;
    let fast_io_fail_tmo =
        raw.fast_io_fail_tmo.map_or(Ok(None), |v| seconds(v, &key.key("fast_io_fail_tmo"), "timeout", 0, true))?;
    let iopolicy = match raw.iopolicy.as_deref() {
        None => IoPolicy::default(),
        Some(name) => IoPolicy::from_name(name).ok_or_else(|| {
            Problem::new(key.key("iopolicy"), format!("{name:?} is not an I/O policy"), "round-robin or queue-depth")
        })?,
    };
    let path_retries = match raw.path_retries {
        None => DEFAULT_PATH_RETRIES,
        Some(n) => int_in(n, 0..=15, &key.key("path_retries"), "retry count", "0..=15")?,
    };
    let host_iface = raw.host_iface.as_ref().map(|iface| interface_name(iface, &key.key("host_iface"))).transpose()?;
    if host_iface.is_some() && raw.transport == Some(Transport::Rdma) {
        return Err(Problem::new(
            key.key("host_iface"),
            "an interface for an NVMe/RDMA controller",
            "host_iface on NVMe/TCP controllers only (for RDMA the address's route picks the device)",
        ));
    }
    let dhchap_secret =
        secret(raw.dhchap_secret.as_ref(), raw.dhchap_secret_file.as_deref(), key, "dhchap_secret", base)?;
    let dhchap_ctrl_secret = secret(
        raw.dhchap_ctrl_secret.as_ref(),
        raw.dhchap_ctrl_secret_file.as_deref(),
        key,
        "dhchap_ctrl_secret",
        base,
    )?;
    if dhchap_ctrl_secret.is_some() && dhchap_secret.is_none() {
        let which = if raw.dhchap_ctrl_secret.is_some() { "dhchap_ctrl_secret" } else { "dhchap_ctrl_secret_file" };
        return Err(Problem::new(
            key.key(which),
            "a controller secret without the host's",
            "dhchap_secret (or dhchap_secret_file) as well: the controller is authenticated in the host's transaction",
        ));
    }
    let transport = raw.transport.unwrap_or(Transport::Tcp);
    let tls_key = tls(raw, transport, key, base)?;
    let tls_identity_version = match raw.tls_identity_version {
        None => DEFAULT_TLS_IDENTITY_VERSION,
        Some(n) => {
            let allowed = "0 (NVMe0R0x <hostnqn> <subnqn>) or 1 (NVMe1R0x <hostnqn> <subnqn> <digest>; the default)";
            let number = int_in(n, 0..=1, &key.key("tls_identity_version"), "PSK identity version", allowed)?;
            IdentityVersion::from_number(number).unwrap_or(DEFAULT_TLS_IDENTITY_VERSION)
        }
    };
    let concat = raw.concat.unwrap_or(false);
    if concat {
        let why = if dhchap_secret.is_none() {
            Some("concatenation without dhchap_secret (the PSK comes from its DH-HMAC-CHAP transaction)")
        } else if tls_key.is_some() {
            Some("concatenation with a tls_key (the PSK is generated, not configured)")
        } else if transport != Transport::Tcp {
            Some("concatenation over RDMA (TLS is NVMe/TCP's)")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Problem::new(key.key("concat"), why, "dhchap_secret, no tls_key, transport = \"tcp\""));
        }
    }
    let mut exports = Vec::with_capacity(raw.exports.len());
    let mut nsids: HashMap<u32, usize> = HashMap::new();
    for (j, re) in raw.exports.iter().enumerate() {
        let ekey = key.key("export").index(j);
        let e = export(re, &ekey, base)?;
        if let Some(first) = nsids.insert(e.nsid, j) {
            return Err(Problem::new(
                ekey.key("nsid"),
                format!("NSID {} is also export[{first}]'s", e.nsid),
                "each namespace of a controller exported once",
            ));
        }
        if let ExportKind::Nbd(nbd) = &e.kind {
            if let Some(other) = endpoints.insert(nbd.clone(), ekey.to_string()) {
                return Err(Problem::new(
                    ekey.key("nbd"),
                    format!("{nbd} is also {other}'s"),
                    "a different socket path or address for each export",
                ));
            }
        }
        exports.push(e);
    }
    Ok(ControllerConfig {
        transport,
        address,
        port,
        nqn: raw.nqn.clone(),
        nr_io_queues,
        queue_size,
        keep_alive_tmo,
        reconnect_delay,
        ctrl_loss_tmo,
        fast_io_fail_tmo,
        iopolicy,
        path_retries,
        hdr_digest: raw.hdr_digest.unwrap_or(false),
        data_digest: raw.data_digest.unwrap_or(false),
        disable_sqflow: raw.disable_sqflow.unwrap_or(false),
        host_iface,
        dhchap_secret,
        dhchap_ctrl_secret,
        tls_key,
        tls_identity_version,
        tls_compat: raw.tls_compat.unwrap_or(false),
        concat,
        exports,
    })
}

/// The controller's TLS key (`tls_key` or `tls_key_file`), checked against `tls` and the transport. A key means
/// TLS, as `--tls-key` does; `tls = true` alone is refused, as nvmf-host reads no kernel keyring.
fn tls(
    raw: &RawController,
    transport: Transport,
    key: &KeyPath,
    base: Option<&Path>,
) -> Result<Option<ConfiguredPsk>, Problem> {
    let tls_key = tls_key_with_source(raw.tls_key.as_ref(), raw.tls_key_file.as_deref(), key, "tls_key", base)?;
    match (raw.tls, &tls_key) {
        (Some(true), None) => Err(Problem::new(
            key.key("tls"),
            "TLS without a key",
            "tls_key = \"NVMeTLSkey-1:…\" or tls_key_file as well (nvmf-host reads its keys from its configuration, \
             not from a kernel keyring)",
        )),
        (Some(false), Some(_)) => Err(Problem::new(
            key.key("tls"),
            "tls = false with a TLS key",
            "no tls_key for a plaintext controller (a key means TLS)",
        )),
        (_, Some(_)) if transport == Transport::Rdma => Err(Problem::new(
            key.key(if raw.tls_key.is_some() { "tls_key" } else { "tls_key_file" }),
            "a TLS key for an NVMe/RDMA controller",
            "TLS on NVMe/TCP controllers only",
        )),
        _ => Ok(tls_key.map(|(psk, _)| psk)),
    }
}

fn export(raw: &RawExport, key: &KeyPath, base: Option<&Path>) -> Result<ExportConfig, Problem> {
    let nsid = int_in(raw.nsid, 1..=0xFFFF_FFFE, &key.key("nsid"), "NSID", "1..=4294967294")?;
    let kind = match (&raw.nbd, raw.ublk.unwrap_or(false)) {
        (Some(_), true) => {
            return Err(Problem::new(key.key("ublk"), "the export has both nbd and ublk = true", EXPORT_ALLOWED))
        }
        (Some(text), false) => ExportKind::Nbd(nbd_endpoint(text, base).map_err(|e| e.at(key.key("nbd")))?),
        (None, true) => ExportKind::Ublk,
        (None, false) => {
            return Err(Problem::new(key.clone(), "the export says nowhere to serve the namespace", EXPORT_ALLOWED))
        }
    };
    Ok(ExportConfig { nsid, kind })
}

/// `unix:PATH` or `ADDR:PORT`; relative unix paths are resolved against `base` when given.
pub(crate) fn nbd_endpoint(text: &str, base: Option<&Path>) -> Result<NbdEndpoint, ValueError> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(ValueError::new(format!("{text:?} names no socket path"), NBD_ALLOWED));
        }
        return Ok(NbdEndpoint::Unix(resolve(Path::new(path), base)));
    }
    let addr = socket_address(text, &KeyPath::root())
        .map_err(|_| ValueError::new(format!("{text:?} is neither unix:PATH nor an address and port"), NBD_ALLOWED))?;
    if !addr.ip().is_loopback() {
        // NBD has no authentication: on any other address the network could read and write the namespace.
        return Err(ValueError::new(
            format!("{text:?} is not a loopback address (NBD has no authentication)"),
            NBD_ALLOWED,
        ));
    }
    Ok(NbdEndpoint::Tcp(addr))
}

/// A network interface name as Linux takes it: 1..=15 bytes (IFNAMSIZ), no `/`, `:` or white space, not `.` or `..`.
fn interface_name(name: &str, key: &KeyPath) -> Result<String, Problem> {
    let ok = (1..=15).contains(&name.len())
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
        && name != "."
        && name != "..";
    if ok {
        Ok(name.to_owned())
    } else {
        Err(Problem::new(
            key.clone(),
            format!("{name:?} is not an interface name"),
            "a name such as eth0 (1..=15 bytes)",
        ))
    }
}
