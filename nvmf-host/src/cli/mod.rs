//! The `nvmf-host` command line: clap definitions with nvme-cli's option names and the dispatch ([`run`]); each
//! command in its file, run on the caller's thread with output to stdout: [`perf`], [`discover`], [`nbd`],
//! `ublk`, the daemon's commands in [`control`] (`run`, `connect`, `connect-all`, `disconnect`,
//! `disconnect-all`, `list`, `reload`), [`doctor`], [`gen_dhchap_key`], [`gen_tls_key`] and [`check_tls_key`] (TLS
//! PSKs in interchange format), and nvme-cli's inspection commands in
//! [`inspect`] (`id-ctrl`, `id-ns`, `list-ns`, `smart-log`, `error-log`, `get-log`, `ns-rescan`, `list-subsys`). The
//! CLI calls the daemon (its control protocol, `run`), never the other way round.
//!
//! Every command takes `-t tcp` or `-t rdma` ([`Transport`]); the address is an IP address on both.

pub mod check_tls_key;
pub mod control;
pub mod discover;
pub mod discovery_conf;
pub mod doctor;
pub mod gen_dhchap_key;
pub mod gen_tls_key;
pub mod inspect;
pub mod nbd;
pub mod perf;
pub mod resv;
#[cfg(feature = "ublk")]
pub mod ublk;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nvmf_common::fabrics::auth::secret::DhchapSecret;

use crate::controller::ConnectOptions;
use crate::endpoint::{Endpoint, ResolveError};
use crate::error::HostError;
use crate::perf::PerfError;

/// What went wrong in a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The address did not resolve.
    #[error(transparent)]
    Address(#[from] ResolveError),
    /// The host library failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// perf failed.
    #[error(transparent)]
    Perf(#[from] PerfError),
    /// `--cpus` is not a CPU list, or the process's CPUs could not be read.
    #[error(transparent)]
    Cpus(#[from] nvmf_service::cpus::CpuError),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// The NBD export failed to start.
    #[error(transparent)]
    Nbd(#[from] crate::nbd::NbdError),
    /// The ublk export failed.
    #[cfg(feature = "ublk")]
    #[error(transparent)]
    Ublk(#[from] crate::ublk::UblkError),
    /// The daemon could not be reached.
    #[error(transparent)]
    Control(#[from] crate::daemon::control::ControlError),
    /// The daemon refused the request.
    #[error("{0}")]
    Daemon(String),
    /// The connection options do not go together.
    #[error("{0}")]
    Options(String),
    /// `run` failed.
    #[error("{0:#}")]
    Run(anyhow::Error),
    /// A reservation command, or an I/O command, met another host's reservation.
    #[error("{0}: reservation conflict")]
    ReservationConflict(&'static str),
}

/// NVMe over Fabrics host tools.
#[derive(Debug, Parser)]
#[command(name = "nvmf-host", version, about)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure IOPS, bandwidth and latency against a namespace (like SPDK's perf).
    Perf(perf::PerfArgs),
    /// Print a discovery controller's Discovery Log Page (like `nvme discover`).
    Discover(discover::DiscoverArgs),
    /// Serve a namespace over NBD (an owner-only unix socket, or loopback TCP when asked) until SIGINT/SIGTERM.
    Nbd(nbd::NbdArgs),
    /// Serve a namespace as a /dev/ublkbN block device until SIGINT/SIGTERM.
    #[cfg(feature = "ublk")]
    Ublk(ublk::UblkArgs),
    /// Run the daemon: keep the configured controllers connected and exported, answer the commands below.
    Run(control::RunArgs),
    /// Connect a controller through the daemon (like `nvme connect`); prints its name.
    Connect(control::ConnectArgs),
    /// Connect every NVM subsystem a discovery controller lists that is not connected yet.
    ConnectAll(control::ConnectAllArgs),
    /// Disconnect the controllers of a subsystem (`-n`) or one controller (`-d nvmf0`).
    Disconnect(control::DisconnectArgs),
    /// Disconnect every controller.
    DisconnectAll(control::ControlArgs),
    /// List the daemon's controllers, their state, namespaces and exports.
    List(control::ListArgs),
    /// Validate the daemon's configuration file here, then have the daemon re-read it and apply the difference
    /// (as SIGHUP does); prints what changed.
    Reload(control::ControlArgs),
    /// Set the daemon's log filter while it runs (`debug`, `info,nvmf_host=trace`), or print it.
    LogLevel(control::LogLevelArgs),
    /// Print a host NQN for /etc/nvme/hostnqn, as nvme-cli does: the machine's UUID form, else a random one.
    GenHostnqn,
    /// Print a new DH-HMAC-CHAP secret (`DHHC-1:…`) for --dhchap-secret and nvmet's dhchap_key, as
    /// `nvme gen-dhchap-key` does.
    GenDhchapKey(gen_dhchap_key::GenDhchapKeyArgs),
    /// Print a new TLS PSK in interchange format (`NVMeTLSkey-1:…`) for NVMe/TCP over TLS, as
    /// `nvme gen-tls-key` does.
    GenTlsKey(gen_tls_key::GenTlsKeyArgs),
    /// Check a TLS PSK in interchange format and print the PSK identity it gives for a host and a subsystem, as
    /// `nvme check-tls-key` does.
    CheckTlsKey(check_tls_key::CheckTlsKeyArgs),
    /// Print the host NQN every command uses: /etc/nvme/hostnqn, else derived from the machine's UUID, else the
    /// one generated once for this user.
    ShowHostnqn,
    /// Check this machine for the configuration: RDMA modules, devices, ports, MTU and GIDs for RDMA
    /// controllers, locked memory for their queues, io_uring, ublk_drv and nbd for the exports. One line per
    /// check (ok, info, warn, fail, with the fix); exit status 0 when nothing failed, 1 when a check failed, 2
    /// when it cannot check.
    Doctor(doctor::DoctorArgs),
    /// Print a controller's Identify Controller data structure (like `nvme id-ctrl`).
    IdCtrl(inspect::commands::InspectArgs),
    /// Print a namespace's Identify Namespace data structure (like `nvme id-ns`).
    IdNs(inspect::commands::IdNsArgs),
    /// Print the controller's active namespace IDs (like `nvme list-ns`).
    ListNs(inspect::commands::InspectArgs),
    /// Print the SMART / Health Information log (like `nvme smart-log`).
    SmartLog(inspect::commands::SmartLogArgs),
    /// Print the Error Information log (like `nvme error-log`).
    ErrorLog(inspect::commands::ErrorLogArgs),
    /// Print any log page as a hex dump, or raw with -b (like `nvme get-log`).
    GetLog(inspect::commands::GetLogArgs),
    /// Re-read the controller's namespaces (the list, then each one's Identify) and print their IDs.
    NsRescan(inspect::commands::InspectArgs),
    /// Print the subsystem, the controller, its transport, address and state (like `nvme list-subsys`).
    ListSubsys(inspect::commands::InspectArgs),
    /// Register, unregister or replace a reservation key (like `nvme resv-register`).
    ResvRegister(resv::ResvRegisterArgs),
    /// Acquire or preempt a reservation (like `nvme resv-acquire`).
    ResvAcquire(resv::ResvAcquireArgs),
    /// Release or clear a reservation (like `nvme resv-release`).
    ResvRelease(resv::ResvReleaseArgs),
    /// Print the Reservation Status (like `nvme resv-report`).
    ResvReport(resv::ResvReportArgs),
}

/// `-t/--transport`.
pub use crate::controller::Transport;

/// `-o/--output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable, like nvme-cli.
    #[default]
    Normal,
    /// JSON, with nvme-cli's field names.
    Json,
}

/// The connection options of the commands that connect by themselves (`nbd`, `ublk`, `perf`): `connect`'s, under
/// the same names.
#[derive(Debug, Clone, Args)]
pub struct ForegroundConnection {
    /// nvme-cli's connection options.
    #[command(flatten)]
    pub options: control::ConnectOptionArgs,
}

impl ForegroundConnection {
    /// The library's options for these flags, connecting over `endpoint`'s transport.
    pub fn options(&self, endpoint: &Endpoint) -> Result<ConnectOptions, CliError> {
        let mut o = connect_options(None);
        o.transport = endpoint.transport;
        let params = control::params(endpoint, "", &self.options)?;
        crate::daemon::params::apply_connect_params(&mut o, &params).map_err(CliError::Options)?;
        Ok(o)
    }
}

/// A `--cpus LIST|none` value: the CPUs listed (as `taskset -c` writes them), `None` for `none`, and the CPUs
/// this process may run on when left out.
fn cpus_arg(arg: Option<&str>) -> Result<Option<Vec<usize>>, CliError> {
    Ok(match arg {
        Some("none") => None,
        Some(list) => Some(nvmf_service::cpus::parse_list(list)?),
        None => Some(nvmf_service::cpus::allowed()?),
    })
}

fn connect_options(hostnqn: Option<&String>) -> ConnectOptions {
    let mut o = ConnectOptions::default();
    // The default identity is the system's (/etc/nvme) or a generated one; `--hostnqn` overrides the NQN.
    if let Some(n) = hostnqn {
        n.clone_into(&mut o.hostnqn);
    }
    o
}

/// `-S/--dhchap-secret` and `-C/--dhchap-ctrl-secret` of the commands that connect on their own (`discover`, the
/// inspection commands), as nvme-cli spells them.
#[derive(Debug, Clone, Default, Args)]
pub struct DhchapArgs {
    /// DH-HMAC-CHAP host secret (`DHHC-1:…`), for a controller that asks for authentication.
    #[arg(short = 'S', long = "dhchap-secret", value_name = "SECRET")]
    pub dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP controller secret: authenticate the controller too; needs -S.
    #[arg(short = 'C', long = "dhchap-ctrl-secret", value_name = "SECRET")]
    pub dhchap_ctrl_secret: Option<String>,
}

impl DhchapArgs {
    /// Put the secrets given into `options`.
    fn apply(&self, options: &mut ConnectOptions) -> Result<(), CliError> {
        options.dhchap_secret = parse_secret(self.dhchap_secret.as_deref(), "--dhchap-secret")?;
        options.dhchap_ctrl_secret = parse_secret(self.dhchap_ctrl_secret.as_deref(), "--dhchap-ctrl-secret")?;
        Ok(())
    }
}

/// A DH-HMAC-CHAP secret given as option `flag`; a bad one is an error naming the flag and what is wrong (never the
/// text).
fn parse_secret(text: Option<&str>, flag: &str) -> Result<Option<DhchapSecret>, CliError> {
    text.map(|t| t.parse().map_err(|e| CliError::Options(format!("{flag}: {e}")))).transpose()
}

/// Run a parsed command line, writing to `out`.
pub fn run(cli: &Cli, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    match &cli.command {
        Command::Perf(a) => perf::run(a, out),
        Command::Discover(a) => discover::run(a, out),
        Command::Nbd(a) => nbd::run(a, out),
        #[cfg(feature = "ublk")]
        Command::Ublk(a) => ublk::run(a, out),
        Command::Run(a) if a.check => crate::daemon::check(&a.config, out).map_err(CliError::Run),
        Command::Run(a) => crate::daemon::run(&a.config).map_err(CliError::Run),
        Command::Reload(a) => control::reload(a, out),
        Command::Connect(a) => control::connect(a, out),
        Command::ConnectAll(a) => control::connect_all(a, out),
        Command::Disconnect(a) => control::disconnect(a, out),
        Command::DisconnectAll(a) => control::disconnect_all(a, out),
        Command::List(a) => control::list(a, out),
        Command::LogLevel(a) => control::log_level(a, out),
        Command::GenHostnqn => {
            writeln!(
                out,
                "{}",
                crate::identity::HostIdentity::generate_hostnqn(&crate::identity::MachineUuid::system())
            )?;
            Ok(())
        }
        Command::GenDhchapKey(a) => gen_dhchap_key::run(a, out),
        Command::GenTlsKey(a) => gen_tls_key::run(a, out),
        Command::CheckTlsKey(a) => check_tls_key::run(a, out),
        Command::ShowHostnqn => {
            writeln!(out, "{}", crate::identity::HostIdentity::from_system().hostnqn)?;
            Ok(())
        }
        Command::Doctor(a) => doctor::write(a, out),
        Command::IdCtrl(a) => inspect::commands::id_ctrl(a, out),
        Command::IdNs(a) => inspect::commands::id_ns(a, out),
        Command::ListNs(a) => inspect::commands::list_ns(a, out),
        Command::SmartLog(a) => inspect::commands::smart_log(a, out),
        Command::ErrorLog(a) => inspect::commands::error_log(a, out),
        Command::GetLog(a) => inspect::commands::get_log(a, out),
        Command::NsRescan(a) => inspect::commands::ns_rescan(a, out),
        Command::ListSubsys(a) => inspect::commands::list_subsys(a, out),
        Command::ResvRegister(a) => resv::register(a, out),
        Command::ResvAcquire(a) => resv::acquire(a, out),
        Command::ResvRelease(a) => resv::release(a, out),
        Command::ResvReport(a) => resv::report(a, out),
    }
}

/// Tests of the commands that print from their options alone: parse `args` as `A` and run it, its output or the error
/// it says.
#[cfg(test)]
pub(super) fn run_args<A: clap::Args + clap::FromArgMatches>(
    args: &[&str],
    run: fn(&A, &mut dyn std::io::Write) -> Result<(), CliError>,
) -> Result<String, String> {
    #[derive(clap::Parser)]
    struct P<A: clap::Args> {
        #[command(flatten)]
        a: A,
    }
    let argv = std::iter::once("cmd").chain(args.iter().copied());
    let p = <P<A> as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    run(&p.a, &mut out).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out).unwrap_or_default())
}
