//! The connection parameters of one controller ([`Params`]), from a `[[controller]]` table of the configuration
//! or from a CLI `connect` request: the transport address, the connect options (the daemon's host identity
//! unless overridden) and the namespaces to export.

use std::net::SocketAddr;
use std::time::Duration;

use nvmf_common::fabrics::tls::{derive_tls_psk, IdentityVersion, PskDerivation, PskIdentity};
use nvmf_config::host::{ControllerConfig, DEFAULT_TLS_IDENTITY_VERSION};
use nvmf_config::target::Transport as ConfigTransport;

use super::exports::ExportSpec;
use super::protocol::ConnectParams;
use crate::controller::{ConnectOptions, PollOptions, TlsKeyOptions, Transport};
use crate::endpoint::Endpoint;
use crate::identity::HostIdentity;
use crate::nbd::NbdListen;

/// How a controller is reached and what it should export.
#[derive(Debug, Clone)]
pub(super) struct Params {
    pub(super) transport: Transport,
    pub(super) addr: SocketAddr,
    pub(super) traddr: String,
    pub(super) trsvcid: String,
    pub(super) subnqn: String,
    pub(super) options: ConnectOptions,
    pub(super) exports: Vec<(Option<u32>, ExportSpec)>,
}

impl Params {
    pub(super) fn endpoint(&self) -> Endpoint {
        Endpoint { transport: self.transport, traddr: self.traddr.clone(), trsvcid: self.trsvcid.clone() }
    }

    /// Same subsystem at the same address, as the same host (what nvme-cli calls a duplicate connect).
    pub(super) fn same_association(&self, other: &Params) -> bool {
        self.transport == other.transport
            && self.addr == other.addr
            && self.subnqn == other.subnqn
            && self.options.hostnqn == other.options.hostnqn
    }
}

/// What every controller of the daemon shares: the host's identity and how its queues' threads run (`[host]`
/// `poll`, `poll_window_us` and `cpus`).
#[derive(Debug, Clone)]
pub(super) struct HostDefaults {
    pub(super) identity: HostIdentity,
    pub(super) poll: PollOptions,
    /// See [`ConnectOptions::queue_cpus`].
    pub(super) queue_cpus: Option<Vec<usize>>,
}

fn seconds_opt(v: Option<i64>, default: Option<Duration>) -> Option<Duration> {
    match v {
        Some(s) if s < 0 => None,
        Some(s) => Some(Duration::from_secs(s.unsigned_abs())),
        None => default,
    }
}

fn options_from_config(c: &ControllerConfig, host: &HostDefaults) -> ConnectOptions {
    ConnectOptions {
        transport: transport_from_config(c.transport),
        hostnqn: host.identity.hostnqn.clone(),
        hostid: host.identity.hostid,
        nr_io_queues: c.nr_io_queues,
        queue_size: c.queue_size,
        keep_alive_tmo: c.keep_alive_tmo,
        hdr_digest: c.hdr_digest,
        data_digest: c.data_digest,
        disable_sqflow: c.disable_sqflow,
        reconnect_delay: c.reconnect_delay,
        ctrl_loss_tmo: c.ctrl_loss_tmo,
        fast_io_fail_tmo: c.fast_io_fail_tmo,
        iopolicy: c.iopolicy,
        path_retries: c.path_retries,
        host_iface: c.host_iface.clone(),
        dhchap_secret: c.dhchap_secret.clone(),
        dhchap_ctrl_secret: c.dhchap_ctrl_secret.clone(),
        tls: c.tls_key.clone().map(|key| TlsKeyOptions {
            key,
            identity_version: c.tls_identity_version,
            derivation: c.tls_derivation(),
        }),
        concat: c.concat,
        poll: host.poll,
        queue_cpus: host.queue_cpus.clone(),
        ..ConnectOptions::default()
    }
}

fn transport_from_config(t: ConfigTransport) -> Transport {
    match t {
        ConfigTransport::Tcp => Transport::Tcp,
        ConfigTransport::Rdma => Transport::Rdma,
    }
}

/// A `[[controller]]` table's parameters, as `host` says for every controller.
pub(super) fn config_params(c: &ControllerConfig, host: &HostDefaults) -> Params {
    Params {
        transport: transport_from_config(c.transport),
        addr: c.socket_addr(),
        traddr: c.address.to_string(),
        trsvcid: c.port.to_string(),
        subnqn: c.nqn.clone(),
        options: options_from_config(c, host),
        exports: c.exports.iter().map(|e| (Some(e.nsid), ExportSpec::from(&e.kind))).collect(),
    }
}

/// Apply the connection options of `p` (nvme-cli's, as `connect` and the foreground commands take them) to
/// `options`; the ones not given keep their value.
pub(crate) fn apply_connect_params(options: &mut ConnectOptions, p: &ConnectParams) -> Result<(), String> {
    if let Some(n) = &p.hostnqn {
        options.hostnqn.clone_from(n);
    }
    if let Some(id) = &p.hostid {
        options.hostid = *uuid::Uuid::parse_str(id).map_err(|e| format!("host ID {id:?}: {e}"))?.as_bytes();
    }
    if let Some(n) = p.nr_io_queues {
        options.nr_io_queues = n;
    }
    if let Some(n) = p.queue_size {
        options.queue_size = n;
    }
    if let Some(s) = p.keep_alive_tmo {
        options.keep_alive_tmo = Duration::from_secs(u64::from(s));
    }
    if let Some(s) = p.reconnect_delay {
        options.reconnect_delay = Duration::from_secs(u64::from(s.max(1)));
    }
    options.ctrl_loss_tmo = seconds_opt(p.ctrl_loss_tmo, options.ctrl_loss_tmo);
    options.fast_io_fail_tmo = seconds_opt(p.fast_io_fail_tmo, options.fast_io_fail_tmo);
    if let Some(policy) = &p.iopolicy {
        options.iopolicy = policy.parse()?;
    }
    options.hdr_digest = p.hdr_digest;
    options.data_digest = p.data_digest;
    options.disable_sqflow = p.disable_sqflow;
    if p.host_iface.is_some() {
        options.host_iface.clone_from(&p.host_iface);
    }
    // The secret never goes into the message: a parse error says what is wrong with it, not what it is.
    if let Some(text) = &p.dhchap_secret {
        options.dhchap_secret = Some(text.expose().parse().map_err(|e| format!("--dhchap-secret: {e}"))?);
    }
    if let Some(text) = &p.dhchap_ctrl_secret {
        options.dhchap_ctrl_secret = Some(text.expose().parse().map_err(|e| format!("--dhchap-ctrl-secret: {e}"))?);
    }
    options.tls = tls_options(p)?;
    if let (Some(identity), Some(tls)) = (&p.tls_key_identity, &options.tls) {
        check_identity(identity, tls, &options.hostnqn, &p.nqn)?;
    }
    options.concat = p.concat;
    options.check_host_iface().and_then(|()| options.check_dhchap()).map_err(|e| e.to_string())
}

/// `--tls-key-identity` (nvme-cli's name for the identity of the key to use): the identity the key gives for this
/// host and subsystem must be that one; a connect-all (no subsystem yet) checks its version and hash only.
fn check_identity(identity: &str, tls: &TlsKeyOptions, hostnqn: &str, subnqn: &str) -> Result<(), String> {
    let wrong = |why: String| format!("--tls-key-identity {identity:?}: {why}");
    let parsed = PskIdentity::parse(identity.as_bytes()).map_err(|e| wrong(e.to_string()))?;
    if parsed.version() != tls.identity_version || parsed.hash() != tls.key.hash() {
        return Err(wrong("another version or hash than --tls-key and --tls-identity-version give".into()));
    }
    if subnqn.is_empty() {
        return Ok(());
    }
    let derived = derive_tls_psk(&tls.key, hostnqn, subnqn, tls.identity_version, tls.derivation)
        .map_err(|e| format!("--tls-key: {e}"))?;
    if derived.identity != identity {
        return Err(wrong(format!("the key gives {:?} for this host and subsystem", derived.identity)));
    }
    Ok(())
}

/// `--tls`, `--tls-key`, `--tls-key-identity`, `--tls-identity-version` and `--tls-compat` as the controller's TLS
/// settings.
fn tls_options(p: &ConnectParams) -> Result<Option<TlsKeyOptions>, String> {
    let Some(text) = &p.tls_key else {
        if p.tls || p.tls_key_identity.is_some() {
            return Err("--tls needs --tls-key NVMeTLSkey-1:…: (nvmf-host reads keys from its options and \
                        configuration, not from a kernel keyring)"
                .into());
        }
        return Ok(None);
    };
    if p.transport != "tcp" {
        return Err(format!("--tls is NVMe/TCP's; not for transport {}", p.transport));
    }
    let key = text.expose().trim().parse().map_err(|e| format!("--tls-key: {e}"))?;
    // The identity asked for says its version.
    let asked = p.tls_key_identity.as_deref().and_then(|i| PskIdentity::parse(i.as_bytes()).ok()).map(|i| i.version());
    let identity_version = match p.tls_identity_version {
        None => asked.unwrap_or(DEFAULT_TLS_IDENTITY_VERSION),
        Some(v) => IdentityVersion::from_number(v).ok_or_else(|| format!("--tls-identity-version {v}: 0 or 1"))?,
    };
    let derivation = if p.tls_compat { PskDerivation::Compat } else { PskDerivation::Rfc8446 };
    Ok(Some(TlsKeyOptions { key, identity_version, derivation }))
}

/// A `connect` request's parameters, as `host` says for every controller unless the request says otherwise.
pub(super) fn params_from_request(p: &ConnectParams, host: &HostDefaults) -> Result<Params, String> {
    let transport = match p.transport.as_str() {
        "tcp" => Transport::Tcp,
        "rdma" => Transport::Rdma,
        other => return Err(format!("unknown transport {other:?}; allowed: tcp, rdma")),
    };
    let endpoint = Endpoint { transport, traddr: p.traddr.clone(), trsvcid: p.trsvcid.clone() };
    let addr = endpoint.resolve().map_err(|e| e.to_string())?;
    let mut options = ConnectOptions {
        transport,
        hostnqn: host.identity.hostnqn.clone(),
        hostid: host.identity.hostid,
        poll: host.poll,
        queue_cpus: host.queue_cpus.clone(),
        ..Default::default()
    };
    apply_connect_params(&mut options, p)?;
    let mut exports = Vec::new();
    if let Some(text) = &p.nbd {
        let listen: NbdListen = text.parse().map_err(|e| format!("--nbd: {e}"))?;
        exports.push((p.export_nsid, ExportSpec::Nbd(listen)));
    }
    if p.ublk {
        exports.push((p.export_nsid, ExportSpec::Ublk));
    }
    Ok(Params {
        transport,
        addr,
        traddr: p.traddr.clone(),
        trsvcid: p.trsvcid.clone(),
        subnqn: p.nqn.clone(),
        options,
        exports,
    })
}

#[cfg(test)]
mod tests {
    use nvmf_common::fabrics::tls::ConfiguredPsk;
    use nvmf_config::host::HostConfig;

    use super::*;
    use crate::controller::IoPolicy;

    fn host() -> HostDefaults {
        HostDefaults { identity: HostIdentity::generate(), poll: PollOptions::default(), queue_cpus: None }
    }

    #[test]
    fn a_configured_rdma_controller_connects_over_rdma() {
        let text =
            "[[controller]]\ntransport = \"rdma\"\naddress = \"10.77.0.1\"\nnqn = \"nqn.2024-01.io.example:a\"\n";
        let config = HostConfig::from_str(text, "<test>").unwrap();
        let busy = PollOptions { mode: crate::controller::PollMode::Busy, window: Duration::from_micros(50) };
        let p =
            config_params(&config.controllers[0], &HostDefaults { poll: busy, queue_cpus: Some(vec![1]), ..host() });
        assert_eq!((p.transport, p.options.transport), (Transport::Rdma, Transport::Rdma));
        assert_eq!(p.options.poll, busy, "[host] poll reaches the controller's queues");
        assert_eq!(p.options.queue_cpus, Some(vec![1]), "[host] cpus too");
        assert_eq!(p.endpoint().resolve().unwrap(), "10.77.0.1:4420".parse().unwrap());
    }

    #[test]
    fn a_configured_tls_key_reaches_the_options_and_never_debug() {
        use nvmf_common::fabrics::tls::PskHash;
        let key = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let table = format!(
            "[[controller]]\naddress = \"10.77.0.1\"\nnqn = \"nqn.2024-01.io.example:a\"\ntls_key = \"{key}\"\n"
        );
        let config = HostConfig::from_str(&table, "<test>").unwrap();
        let tls = config_params(&config.controllers[0], &host()).options.tls.unwrap();
        assert_eq!(
            (tls.key.hash(), tls.identity_version, tls.derivation),
            (PskHash::Sha256, IdentityVersion::V1, PskDerivation::Rfc8446)
        );
        let psk = tls.handshake_psk("nqn.2024-01.io.example:h", "nqn.2024-01.io.example:a").unwrap();
        assert!(psk.identity.starts_with(b"NVMe1R01 nqn.2024-01.io.example:h nqn.2024-01.io.example:a "));
        let v0 = format!("{table}tls_identity_version = 0\ntls_compat = true\n");
        let config = HostConfig::from_str(&v0, "<test>").unwrap();
        let p = config_params(&config.controllers[0], &host());
        assert!(!format!("{p:?}").contains("VRLbtnN9"), "{p:?}");
        let tls = p.options.tls.unwrap();
        assert_eq!((tls.identity_version, tls.derivation), (IdentityVersion::V0, PskDerivation::Compat));
        let plain = "[[controller]]\naddress = \"10.77.0.1\"\nnqn = \"nqn.2024-01.io.example:a\"\n";
        let config = HostConfig::from_str(plain, "<test>").unwrap();
        assert!(config_params(&config.controllers[0], &host()).options.tls.is_none());
    }

    fn request(transport: &str) -> ConnectParams {
        let json = format!(r#"{{"transport":"{transport}","traddr":"127.0.0.1","trsvcid":"4420","nqn":"n"}}"#);
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn a_connect_request_carries_its_transport_into_the_options() {
        for (name, transport) in [("rdma", Transport::Rdma), ("tcp", Transport::Tcp)] {
            let p = params_from_request(&request(name), &host()).unwrap();
            assert_eq!((p.transport, p.options.transport), (transport, transport), "{name}");
        }
        let err = params_from_request(&request("fc"), &host()).unwrap_err();
        assert!(err.contains("unknown transport \"fc\""), "{err}");
        let mut r = request("tcp");
        r.iopolicy = Some("queue-depth".into());
        assert_eq!(params_from_request(&r, &host()).unwrap().options.iopolicy, IoPolicy::QueueDepth);
        r.iopolicy = Some("numa".into());
        let err = params_from_request(&r, &host()).unwrap_err();
        assert!(err.contains("unknown I/O policy \"numa\""), "{err}");
    }

    #[test]
    fn dhchap_secrets_travel_to_the_options_and_never_into_debug() {
        let secret = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let mut r = request("tcp");
        r.dhchap_secret = Some(secret.into());
        assert!(!format!("{r:?}").contains("AAEC"), "{r:?}");
        let p = params_from_request(&r, &host()).unwrap();
        assert_eq!(p.options.dhchap_secret.as_ref().map(|s| s.len()), Some(32));
        assert!(!format!("{:?}", p.options).contains("AAEC"));
        r.dhchap_secret = None;
        r.dhchap_ctrl_secret = Some(secret.into());
        let e = params_from_request(&r, &host()).unwrap_err();
        assert!(e.contains("needs the host secret too"), "{e}");
        r.dhchap_secret = Some("DHHC-1:00:AAAA:".into());
        let e = params_from_request(&r, &host()).unwrap_err();
        assert_eq!(e, "--dhchap-secret: the key field holds 3 bytes; a secret of 32, 48 or 64 bytes and its 4-byte CRC-32 are 36, 52 or 68");
    }

    #[test]
    fn a_tls_key_identity_must_be_the_one_the_key_gives() {
        let key = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let defaults = host();
        let hostnqn = defaults.identity.hostnqn.clone();
        let mut r = request("tcp");
        r.nqn = "nqn.2024-01.io.example:disk".into();
        r.tls_key = Some(key.into());
        let derived = |v| {
            let configured: ConfiguredPsk = key.parse().unwrap();
            derive_tls_psk(&configured, &hostnqn, &r.nqn, v, PskDerivation::Rfc8446).unwrap().identity
        };
        // The version 0 identity: its version is taken.
        r.tls_key_identity = Some(derived(IdentityVersion::V0));
        let p = params_from_request(&r, &defaults).unwrap();
        assert_eq!(p.options.tls.unwrap().identity_version, IdentityVersion::V0);
        r.tls_key_identity = Some(derived(IdentityVersion::V1));
        assert_eq!(
            params_from_request(&r, &defaults).unwrap().options.tls.unwrap().identity_version,
            IdentityVersion::V1
        );
        // Another subsystem's identity, and a made-up one.
        r.tls_key_identity = Some(derived(IdentityVersion::V1).replace("disk", "other"));
        let e = params_from_request(&r, &defaults).unwrap_err();
        assert!(e.starts_with("--tls-key-identity ") && e.contains("the key gives"), "{e}");
        r.tls_key_identity = Some("NVMe9Z01 x y".into());
        assert!(params_from_request(&r, &defaults).unwrap_err().starts_with("--tls-key-identity "));
        // Without a key: nvmf-host keeps no keyring.
        r.tls_key = None;
        assert!(params_from_request(&r, &defaults).unwrap_err().contains("--tls needs --tls-key"));
    }
}
