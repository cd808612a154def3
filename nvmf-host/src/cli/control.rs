//! The commands that talk to the daemon's control socket, in nvme-cli's words: `connect`, `connect-all`, `disconnect`,
//! `disconnect-all`, `list`, `reload`, `log-level`; and `run`, which is the daemon. Each sends one request
//! ([`crate::daemon::protocol`]) and prints the reply; they run on the caller's thread.

use std::path::PathBuf;

use clap::Args;
use nvmf_config::host::{HostConfig, DEFAULT_CONTROL_SOCKET};
use nvmf_service::control::LogLevelRequest;

use super::{CliError, OutputFormat};
use crate::daemon::control::request;
use crate::daemon::protocol::{
    ConnectParams, ControlReply, ControlRequest, ControllerView, DisconnectTarget, SecretText,
};
use crate::daemon::reload::ReloadError;
use crate::endpoint::Endpoint;

/// `--control`: where the daemon listens.
#[derive(Debug, Clone, Args)]
pub struct ControlArgs {
    /// The daemon's control socket.
    #[arg(long = "control", value_name = "PATH", default_value = DEFAULT_CONTROL_SOCKET)]
    pub control: PathBuf,
}

/// `nvmf-host run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The daemon's configuration (TOML; see config/examples/host.toml).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Validate the configuration, print a one-line summary and exit (nothing is connected).
    #[arg(long)]
    pub check: bool,
}

/// The connection options `connect` and `connect-all` share (nvme-cli's names; seconds for times).
#[derive(Debug, Clone, Args)]
pub struct ConnectOptionArgs {
    /// I/O queues to ask for (default: the CPU count).
    #[arg(short = 'i', long = "nr-io-queues")]
    pub nr_io_queues: Option<u16>,
    /// Entries per I/O queue (default 128).
    #[arg(short = 'Q', long = "queue-size")]
    pub queue_size: Option<u16>,
    /// Keep Alive Timeout in seconds (default 5; 0 disables).
    #[arg(short = 'k', long = "keep-alive-tmo")]
    pub keep_alive_tmo: Option<u32>,
    /// Seconds between reconnect attempts (default 10).
    #[arg(short = 'c', long = "reconnect-delay")]
    pub reconnect_delay: Option<u32>,
    /// Seconds to keep reconnecting before failing I/O for good (default 600; -1 forever).
    #[arg(short = 'l', long = "ctrl-loss-tmo", allow_negative_numbers = true)]
    pub ctrl_loss_tmo: Option<i64>,
    /// Seconds after a loss when held I/O fails while reconnecting goes on (default -1: off).
    #[arg(short = 'F', long = "fast-io-fail-tmo", alias = "fast_io_fail_tmo", allow_negative_numbers = true)]
    pub fast_io_fail_tmo: Option<i64>,
    /// How an export reached through several controllers spreads commands over its best paths: round-robin
    /// (default) or queue-depth; the first controller of an export decides.
    #[arg(long = "iopolicy", value_name = "POLICY")]
    pub iopolicy: Option<String>,
    /// The network interface NVMe/TCP connections leave through (SO_BINDTODEVICE), as the kernel's host_iface.
    #[arg(short = 'f', long = "host-iface", value_name = "IFACE")]
    pub host_iface: Option<String>,
    /// Host NQN (default: the daemon's identity).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Host ID, a UUID (default: the daemon's identity).
    #[arg(short = 'I', long = "hostid")]
    pub hostid: Option<String>,
    /// NVMe/TCP header digests.
    #[arg(short = 'g', long = "hdr-digest")]
    pub hdr_digest: bool,
    /// NVMe/TCP data digests.
    #[arg(short = 'G', long = "data-digest")]
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (`connect-all` also does for entries whose TREQ allows it).
    #[arg(short = 'd', long = "disable-sqflow")]
    pub disable_sqflow: bool,
    /// DH-HMAC-CHAP host secret (`DHHC-1:…`, as `nvmf-host gen-dhchap-key` or nvme-cli prints it): answers a
    /// controller that asks for in-band authentication, on every queue.
    #[arg(short = 'S', long = "dhchap-secret", value_name = "SECRET")]
    pub dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP controller secret: the host authenticates the controller too (bidirectional); needs -S.
    #[arg(short = 'C', long = "dhchap-ctrl-secret", value_name = "SECRET")]
    pub dhchap_ctrl_secret: Option<String>,
    /// NVMe/TCP over TLS 1.3 with a pre-shared key (needs --tls-key: nvmf-host keeps no kernel keyring).
    #[arg(long = "tls")]
    pub tls: bool,
    /// The configured PSK in the interchange format (`NVMeTLSkey-1:01:…:`, as `nvmf-host gen-tls-key` or nvme-cli
    /// prints it); implies --tls.
    #[arg(long = "tls-key", value_name = "KEY")]
    pub tls_key: Option<String>,
    /// The PSK identity's version: 1 (`NVMe1R0x host subsystem digest`, the default, as `nvme connect --tls-key`)
    /// or 0 (`NVMe0R0x host subsystem`), as the key was inserted for the target (`nvme gen-tls-key --identity`).
    #[arg(long = "tls-identity-version", value_name = "0|1")]
    pub tls_identity_version: Option<u8>,
    /// The PSK identity to use, as nvme-cli names a key of its keyring (`NVMe1R01 <hostnqn> <subnqn> <digest>`):
    /// the identity --tls-key gives for this host and subsystem must be this one (it also sets the version).
    #[arg(long = "tls-key-identity", value_name = "IDENTITY")]
    pub tls_key_identity: Option<String>,
    /// Derive the TLS PSK as libnvme did before 1.16 (nvme-cli's `--compat`).
    #[arg(long = "tls-compat")]
    pub tls_compat: bool,
    /// Secure channel concatenation (NVMe/TCP, as `nvme connect --concat`): authenticate the admin queue with -S on
    /// a plaintext connection, then connect again with TLS keyed by the PSK that authentication generated.
    #[arg(long = "concat")]
    pub concat: bool,
}

impl ConnectOptionArgs {
    /// These options, with `defaults`' where these leave one out (a switch is on when either has it).
    pub fn or(self, defaults: &ConnectOptionArgs) -> ConnectOptionArgs {
        let d = defaults.clone();
        ConnectOptionArgs {
            nr_io_queues: self.nr_io_queues.or(d.nr_io_queues),
            queue_size: self.queue_size.or(d.queue_size),
            keep_alive_tmo: self.keep_alive_tmo.or(d.keep_alive_tmo),
            reconnect_delay: self.reconnect_delay.or(d.reconnect_delay),
            ctrl_loss_tmo: self.ctrl_loss_tmo.or(d.ctrl_loss_tmo),
            fast_io_fail_tmo: self.fast_io_fail_tmo.or(d.fast_io_fail_tmo),
            iopolicy: self.iopolicy.or(d.iopolicy),
            host_iface: self.host_iface.or(d.host_iface),
            hostnqn: self.hostnqn.or(d.hostnqn),
            hostid: self.hostid.or(d.hostid),
            hdr_digest: self.hdr_digest || d.hdr_digest,
            data_digest: self.data_digest || d.data_digest,
            disable_sqflow: self.disable_sqflow || d.disable_sqflow,
            dhchap_secret: self.dhchap_secret.or(d.dhchap_secret),
            dhchap_ctrl_secret: self.dhchap_ctrl_secret.or(d.dhchap_ctrl_secret),
            tls: self.tls || d.tls,
            tls_key: self.tls_key.or(d.tls_key),
            tls_identity_version: self.tls_identity_version.or(d.tls_identity_version),
            tls_key_identity: self.tls_key_identity.or(d.tls_key_identity),
            tls_compat: self.tls_compat || d.tls_compat,
            concat: self.concat || d.concat,
        }
    }
}

/// `nvmf-host connect`.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Connection options.
    #[command(flatten)]
    pub options: ConnectOptionArgs,
    /// Export a namespace over NBD on a unix socket `unix:/path` (mode 0600: the daemon's user and root) or
    /// loopback TCP `127.0.0.1:PORT` (any local user; other addresses are refused).
    #[arg(long = "nbd", value_name = "LISTEN")]
    pub nbd: Option<String>,
    /// Export a namespace as a /dev/ublkbN block device (needs ublk_drv).
    #[arg(long = "ublk", conflicts_with = "nbd")]
    pub ublk: bool,
    /// The namespace `--nbd` or `--ublk` exports (default: the first active one).
    #[arg(long = "export-nsid", alias = "nbd-nsid")]
    pub export_nsid: Option<u32>,
    /// Connect even if this subsystem is already connected at this address.
    #[arg(short = 'D', long = "duplicate-connect")]
    pub duplicate_connect: bool,
    /// The daemon.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `nvmf-host connect-all`.
#[derive(Debug, Clone, Args)]
pub struct ConnectAllArgs {
    /// Transport type of the discovery controller.
    #[arg(short = 't', long = "transport", value_enum, default_value = "tcp")]
    pub transport: crate::controller::Transport,
    /// The discovery controller's address; without it, every one `--discovery-conf` lists.
    #[arg(short = 'a', long = "traddr")]
    pub traddr: Option<String>,
    /// Its port (8009 is not assumed: nvme-cli's -s default is 4420 too).
    #[arg(short = 's', long = "trsvcid", default_value = "4420")]
    pub trsvcid: String,
    /// The discovery controllers to use without -a, one per line as this command's options (nvme-cli's file).
    #[arg(long = "discovery-conf", value_name = "FILE", default_value = super::discovery_conf::DISCOVERY_CONF)]
    pub discovery_conf: PathBuf,
    /// Connection options for every subsystem connected.
    #[command(flatten)]
    pub options: ConnectOptionArgs,
    /// Output format.
    #[arg(short = 'o', long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
    /// The daemon.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `nvmf-host disconnect`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["nqn", "device"])))]
pub struct DisconnectArgs {
    /// Disconnect every controller of this subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: Option<String>,
    /// Disconnect the controller with this name (`nvmf0`).
    #[arg(short = 'd', long = "device")]
    pub device: Option<String>,
    /// The daemon.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `nvmf-host log-level`.
#[derive(Debug, Clone, Args)]
pub struct LogLevelArgs {
    /// The new filter: a level (error, warn, info, debug, trace) or RUST_LOG syntax (info,nvmf_host=debug);
    /// without it, print the filter in force.
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,
    /// The daemon.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `nvmf-host list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Output format.
    #[arg(short = 'o', long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
    /// The daemon.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// The daemon's `connect` parameters for these flags (the foreground commands apply them too).
pub(super) fn params(endpoint: &Endpoint, nqn: &str, o: &ConnectOptionArgs) -> Result<ConnectParams, CliError> {
    Ok(ConnectParams {
        transport: endpoint.transport.name().into(),
        traddr: endpoint.traddr.clone(),
        trsvcid: endpoint.trsvcid.clone(),
        nqn: nqn.to_owned(),
        nr_io_queues: o.nr_io_queues,
        queue_size: o.queue_size,
        keep_alive_tmo: o.keep_alive_tmo,
        reconnect_delay: o.reconnect_delay,
        ctrl_loss_tmo: o.ctrl_loss_tmo,
        fast_io_fail_tmo: o.fast_io_fail_tmo,
        iopolicy: o.iopolicy.clone(),
        hostnqn: o.hostnqn.clone(),
        hostid: o.hostid.clone(),
        hdr_digest: o.hdr_digest,
        data_digest: o.data_digest,
        disable_sqflow: o.disable_sqflow,
        host_iface: o.host_iface.clone(),
        nbd: None,
        ublk: false,
        export_nsid: None,
        duplicate_connect: false,
        dhchap_secret: o.dhchap_secret.as_deref().map(SecretText::from),
        dhchap_ctrl_secret: o.dhchap_ctrl_secret.as_deref().map(SecretText::from),
        tls: o.tls,
        tls_key: o.tls_key.as_deref().map(SecretText::from),
        tls_identity_version: o.tls_identity_version,
        tls_key_identity: o.tls_key_identity.clone(),
        tls_compat: o.tls_compat,
        concat: o.concat,
    })
}

fn ask(control: &ControlArgs, r: &ControlRequest) -> Result<ControlReply, CliError> {
    match request(&control.control, r)? {
        ControlReply::Error { message } => Err(CliError::Daemon(message)),
        reply => Ok(reply),
    }
}

fn unexpected(reply: &ControlReply) -> CliError {
    CliError::Daemon(format!("unexpected reply {reply:?}"))
}

/// `connect`: prints the controller's name (like nvme-cli prints the device), then one line per export.
pub fn connect(a: &ConnectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let mut p = params(&a.endpoint, &a.nqn, &a.options)?;
    p.nbd.clone_from(&a.nbd);
    p.ublk = a.ublk;
    p.export_nsid = a.export_nsid;
    p.duplicate_connect = a.duplicate_connect;
    match ask(&a.control, &ControlRequest::Connect(p))? {
        ControlReply::Connected { name, exports } => {
            writeln!(out, "{name}")?;
            for x in exports {
                match x.paths.len() {
                    0 | 1 => writeln!(out, "{name}n{}: exported at {}", x.nsid, x.uri)?,
                    n => writeln!(out, "{name}n{}: exported at {} (now {n} paths)", x.nsid, x.uri)?,
                }
            }
            Ok(())
        }
        other => Err(unexpected(&other)),
    }
}

/// `connect-all`: one line per discovery log entry (or the JSON list).
pub fn connect_all(a: &ConnectAllArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let controllers = match &a.traddr {
        Some(traddr) => vec![(
            Endpoint { transport: a.transport, traddr: traddr.clone(), trsvcid: a.trsvcid.clone() },
            a.options.clone(),
        )],
        None => super::discovery_conf::read(&a.discovery_conf, &a.options)?,
    };
    let mut all = Vec::new();
    for (endpoint, options) in &controllers {
        let p = params(endpoint, "", options)?;
        match ask(&a.control, &ControlRequest::ConnectAll(p))? {
            ControlReply::ConnectedAll { entries } => all.extend(entries),
            other => return Err(unexpected(&other)),
        }
    }
    if a.output_format == OutputFormat::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&all).unwrap_or_default())?;
    } else {
        for e in all {
            let name = e.name.as_deref().unwrap_or("-");
            writeln!(out, "{name:<8} {} at {}: {}", e.subnqn, e.address, e.outcome)?;
        }
    }
    Ok(())
}

/// `disconnect -n NQN | -d NAME`: prints what nvme-cli prints (`NQN:… disconnected N controller(s)`).
pub fn disconnect(a: &DisconnectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let (which, label) = match (&a.nqn, &a.device) {
        (Some(nqn), _) => (DisconnectTarget::Nqn(nqn.clone()), format!("NQN:{nqn}")),
        (None, Some(name)) => (DisconnectTarget::Name(name.clone()), name.clone()),
        (None, None) => return Err(CliError::Daemon("disconnect needs -n NQN or -d NAME".into())),
    };
    match ask(&a.control, &ControlRequest::Disconnect(which))? {
        ControlReply::Disconnected { names } => {
            writeln!(out, "{label} disconnected {} controller(s)", names.len())?;
            Ok(())
        }
        other => Err(unexpected(&other)),
    }
}

/// `disconnect-all`.
pub fn disconnect_all(a: &ControlArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    match ask(a, &ControlRequest::DisconnectAll)? {
        ControlReply::Disconnected { names } => {
            for n in &names {
                writeln!(out, "{n} disconnected")?;
            }
            Ok(())
        }
        other => Err(unexpected(&other)),
    }
}

/// `list`: a table like `nvme list`, or `{"controllers": […]}` with `-o json`.
pub fn list(a: &ListArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let ControlReply::List { controllers } = ask(&a.control, &ControlRequest::List)? else {
        return Err(CliError::Daemon("unexpected reply to list".into()));
    };
    if a.output_format == OutputFormat::Json {
        let j = serde_json::json!({ "controllers": controllers });
        writeln!(out, "{}", serde_json::to_string_pretty(&j).unwrap_or_default())?;
        return Ok(());
    }
    write_list(&controllers, out)?;
    Ok(())
}

/// `reload`: ask the daemon which file it runs from, validate that file here (so a typo is reported
/// with its location and never reaches the daemon), then have the daemon apply it and print what changed.
pub fn reload(a: &ControlArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let control = &a.control;
    let path = match request(control, &ControlRequest::ConfigPath)? {
        ControlReply::ConfigPath { path: Some(path) } => PathBuf::from(path),
        ControlReply::ConfigPath { path: None } => return Err(CliError::Daemon(ReloadError::NoFile.to_string())),
        ControlReply::Error { message } => return Err(CliError::Daemon(message)),
        other => return Err(CliError::Daemon(format!("unexpected reply {other:?}"))),
    };
    if let Err(e) = HostConfig::from_file(&path) {
        return Err(CliError::Daemon(format!("{e}\nnot sent: the daemon keeps its running configuration")));
    }
    match request(control, &ControlRequest::Reload)? {
        ControlReply::Reloaded { changes } => {
            for line in changes {
                writeln!(out, "{line}")?;
            }
            Ok(())
        }
        ControlReply::Error { message } => {
            Err(CliError::Daemon(format!("{message}\nrejected: the daemon keeps its running configuration")))
        }
        other => Err(CliError::Daemon(format!("unexpected reply {other:?}"))),
    }
}

/// `log-level [FILTER]`: set the daemon's log filter, or read it; prints the filter in force.
pub fn log_level(a: &LogLevelArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let request = ControlRequest::LogLevel(LogLevelRequest { filter: a.filter.clone() });
    match ask(&a.control, &request)? {
        ControlReply::LogLevel { filter } => {
            writeln!(out, "{filter}")?;
            Ok(())
        }
        other => Err(unexpected(&other)),
    }
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1024 && v % 1024 == 0 && unit < UNITS.len() - 1 {
        v /= 1024;
        unit += 1;
    }
    format!("{v} {}", UNITS[unit])
}

/// The `list` table.
pub fn write_list(controllers: &[ControllerView], out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<8} {:<12} {:<28} {:<40} {:<24} Exports",
        "Name", "State", "Address", "Subsystem NQN", "Namespaces"
    )?;
    writeln!(out, "{:-<8} {:-<12} {:-<28} {:-<40} {:-<24} {:-<20}", "", "", "", "", "", "")?;
    for c in controllers {
        let address = format!("{} {}:{}", c.transport, c.traddr, c.trsvcid);
        let ns: Vec<String> = c.namespaces.iter().map(|n| format!("{}:{}", n.nsid, human_size(n.size))).collect();
        let exports: Vec<String> = c.exports.iter().map(|x| format!("{}@{}", x.nsid, x.address)).collect();
        writeln!(
            out,
            "{:<8} {:<12} {:<28} {:<40} {:<24} {}",
            c.name,
            c.state,
            address,
            c.subnqn,
            ns.join(","),
            exports.join(",")
        )?;
        if let Some(e) = &c.error {
            writeln!(out, "{:<8} error: {e}", "")?;
        }
        for x in c.exports.iter().filter(|x| x.paths.len() > 1) {
            let paths: Vec<String> =
                x.paths.iter().map(|p| format!("{} {} {}", p.name, p.state, p.ana_state)).collect();
            writeln!(out, "{:<8} n{} paths ({}): {}", "", x.nsid, x.iopolicy, paths.join(", "))?;
        }
    }
    Ok(())
}
