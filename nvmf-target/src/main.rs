//! The nvmf-target daemon: parse the command line, load the configuration, start logging, then
//! [`serve`](nvmf_target::serve::serve) until SIGTERM/SIGINT. `list`, `disconnect`, `reload`, `log-level` and
//! `ana-state` are clients of the running daemon's control socket ([`nvmf_target::control`]); `nvmf-target
//! systemd-devices` prints the unit's device drop-in ([`nvmf_target::systemd_devices`]); `nvmf-target doctor` checks
//! the machine for the configuration ([`nvmf_target::doctor`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use nvmf_config::target::NamespaceBackend;
use nvmf_config::{QuickStart, TargetConfig};
use nvmf_service::control::LogLevelRequest;
use nvmf_target::control::protocol::{AnaStateRequest, DisconnectRequest, NamespaceAnaGroupRequest};
use nvmf_target::control::{self, ReloadOutcome, TargetReply, TargetRequest, DEFAULT_CONTROL_SOCKET};
use nvmf_target::serve::{serve, ServeOptions};

/// Export local storage as NVMe over Fabrics subsystems.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Configuration file (TOML); not with the quick-start flags (the file says all).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Validate the configuration, open every path namespace as the daemon would (it exists, is readable and
    /// writable, fits the block size), print the effective configuration (keys written inline as "<redacted>")
    /// and exit.
    #[arg(long)]
    check: bool,
    /// With --check: do not open the path namespaces (a configuration prepared for another machine).
    #[arg(long, requires = "check")]
    no_path_check: bool,
    /// Serve the control socket (`nvmf-target list`, `reload`, …) here [default: /run/nvmf-target/control.sock;
    /// skipped with a warning when it cannot be created there].
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    #[command(flatten)]
    quick: QuickStart,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the running target: subsystems, namespaces, live controllers with their queues, listeners.
    List(ListArgs),
    /// End associations: one controller (--cntlid, with --nqn when several subsystems have it) or every
    /// controller of a host (--host). The host may connect again unless the allowed hosts no longer name it.
    Disconnect(DisconnectArgs),
    /// Validate the configuration file, then ask the running daemon to reload it and print what changed.
    Reload(ReloadArgs),
    /// Set the daemon's log filter while it runs (`debug`, `info,nvmf_target=trace`), or print it.
    LogLevel(LogLevelArgs),
    /// Set a listener's Asymmetric Namespace Access state, of one ANA group or all; hosts connected through it
    /// are told (ANA Change event) and their multipath moves I/O to the paths that serve it.
    AnaState(AnaStateArgs),
    /// Move a namespace to another ANA group while hosts use it (nvmet's `ana_grpid`): it follows that group's
    /// state on each listener from its next command; hosts are told (ANA Change and Namespace Attribute Changed).
    NsAnaGroup(NsAnaGroupArgs),
    /// Print the systemd drop-in that lets nvmf-target.service open the device nodes the configuration names,
    /// and no others (for /etc/systemd/system/nvmf-target.service.d/devices.conf).
    SystemdDevices(SystemdDevicesArgs),
    /// Check this machine for the configuration: RDMA modules, devices, ports, MTU and GIDs for the RDMA
    /// listeners, locked memory and huge pages for the buffer pools, NUMA, io_uring. One line per check
    /// (ok, info, warn, fail, with the fix); exit status 0 when nothing failed, 1 when a check failed, 2 when it
    /// cannot check.
    Doctor(DoctorArgs),
}

#[derive(Debug, Args)]
struct DoctorArgs {
    /// The configuration file the daemon runs from [default: /etc/nvmf/target.toml if it exists, else the
    /// configuration the quick-start flags (or their defaults) make, as the daemon runs without --config]
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    quick: QuickStart,
    /// Output format.
    #[arg(short, long = "output-format", value_enum, default_value = "normal")]
    output_format: OutputFormat,
}

/// The configuration file of the systemd unit.
const DEFAULT_CONFIG: &str = "/etc/nvmf/target.toml";

#[derive(Debug, Args)]
struct SystemdDevicesArgs {
    /// The configuration file the service runs from.
    #[arg(short, long, value_name = "FILE", default_value = "/etc/nvmf/target.toml")]
    config: PathBuf,
}

/// `--control`: where the daemon listens.
#[derive(Debug, Args)]
struct ControlArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTROL_SOCKET)]
    control: PathBuf,
}

/// `-o/--output-format`, as nvme-cli spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OutputFormat {
    /// Human-readable.
    Normal,
    /// JSON (the control protocol's `list` reply).
    Json,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Output format.
    #[arg(short, long = "output-format", value_enum, default_value = "normal")]
    output_format: OutputFormat,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).multiple(true).args(["cntlid", "host"]))]
struct DisconnectArgs {
    /// The controller ID.
    #[arg(long)]
    cntlid: Option<u16>,
    /// Every controller of this host NQN.
    #[arg(long, value_name = "HOSTNQN")]
    host: Option<String>,
    /// Only controllers of this subsystem.
    #[arg(short, long, value_name = "SUBNQN")]
    nqn: Option<String>,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Debug, Args)]
struct LogLevelArgs {
    /// The new filter: a level (error, warn, info, debug, trace) or RUST_LOG syntax (info,nvmf_target=debug);
    /// without it, print the filter in force.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Debug, Args)]
struct AnaStateArgs {
    /// The listener, as `nvmf-target list` shows it: tcp://ADDR:PORT or rdma://ADDR:PORT.
    #[arg(long, value_name = "URL")]
    listener: String,
    /// The ANA group, 1..=128 [default: every group].
    #[arg(long, value_name = "N")]
    group: Option<u32>,
    /// optimized, non-optimized, inaccessible, persistent-loss or change.
    #[arg(long, value_name = "STATE")]
    state: String,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Debug, Args)]
struct NsAnaGroupArgs {
    /// The subsystem NQN.
    #[arg(short = 'n', long, value_name = "NQN")]
    nqn: String,
    /// The namespace ID.
    #[arg(long, value_name = "NSID")]
    nsid: u32,
    /// The ANA group to move it to, 1..=128.
    #[arg(long, value_name = "N")]
    group: u32,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Debug, Args)]
struct ReloadArgs {
    /// The configuration file the daemon runs from [default: the one the daemon names].
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTROL_SOCKET)]
    control: PathBuf,
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => nvmf_service::error_line::report("nvmf-target", e.as_ref()),
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let mut cli = Cli::parse();
    match &cli.command {
        Some(Command::Reload(args)) => return reload(args),
        Some(Command::List(args)) => return list(args),
        Some(Command::Disconnect(args)) => return disconnect(args),
        Some(Command::LogLevel(args)) => return log_level(args),
        Some(Command::AnaState(args)) => return ana_state(args),
        Some(Command::NsAnaGroup(args)) => return ns_ana_group(args),
        Some(Command::Doctor(args)) => return Ok(doctor(args)),
        Some(Command::SystemdDevices(args)) => {
            let config = TargetConfig::from_file(&args.config)?;
            print!("{}", nvmf_target::systemd_devices::drop_in(&config, &args.config)?);
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    // The daemon names its file to `nvmf-target reload`, which may run from another directory: keep it absolute.
    if let Some(path) = &mut cli.config {
        *path = std::path::absolute(&*path).with_context(|| format!("{}", path.display()))?;
    }
    let config = match &cli.config {
        Some(_) if !cli.quick.is_empty() => bail!(
            "--config cannot be combined with --listen, --namespace, --nqn, --allow-host, --metrics or \
             --cntlid-range: put them in the file"
        ),
        Some(path) => TargetConfig::from_file(path)?,
        None => cli.quick.to_config()?,
    };
    if cli.check {
        if !cli.no_path_check {
            check_paths(&config)?;
        }
        print!("{}", config.to_string_redacted());
        return Ok(ExitCode::SUCCESS);
    }
    nvmf_target::logging::init(&config.logging);
    serve(config, &ServeOptions { config_path: cli.config, control: cli.control })?;
    Ok(ExitCode::SUCCESS)
}

/// `nvmf-target doctor`: the report of the checks, or exit status 2 when the configuration cannot be read.
fn doctor(args: &DoctorArgs) -> ExitCode {
    let json = args.output_format == OutputFormat::Json;
    let finish = nvmf_service::doctor::report::finish;
    let service_file = Path::new(DEFAULT_CONFIG);
    let config = match &args.config {
        Some(_) if !args.quick.is_empty() => Err(anyhow::anyhow!(
            "--config cannot be combined with the quick-start flags: check the file, or the flags alone"
        )),
        Some(path) => TargetConfig::from_file(path).map_err(anyhow::Error::from),
        None if args.quick.is_empty() && service_file.exists() => {
            TargetConfig::from_file(service_file).map_err(anyhow::Error::from)
        }
        None => args.quick.to_config().map_err(anyhow::Error::from),
    };
    match config {
        Ok(config) => finish("nvmf-target", Ok(nvmf_target::doctor::diagnose(&config, Path::new("/"))), json),
        Err(e) => finish("nvmf-target", Err(&*e), json),
    }
}

/// Open every path and RBD namespace of `config` the way the daemon will (an RBD image through its cluster), and
/// close it again.
fn check_paths(config: &TargetConfig) -> anyhow::Result<()> {
    for s in &config.subsystems {
        let opened = |ns: &&nvmf_config::target::NamespaceConfig| {
            matches!(ns.backend, NamespaceBackend::Path(_) | NamespaceBackend::Rbd(_))
        };
        for ns in s.namespaces.iter().filter(opened) {
            nvmf_target::daemon::namespace_params(&s.nqn, ns, &config.limits)?;
        }
    }
    Ok(())
}

/// `nvmf-target reload`: print what the daemon changed, or why nothing was.
fn reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    match control::request_reload(&args.control, args.config.as_deref())? {
        ReloadOutcome::Applied(changes) => {
            for line in changes {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ReloadOutcome::Invalid(error) => {
            eprintln!("{error}");
            eprintln!("nvmf-target reload: not sent; the daemon keeps its running configuration");
            Ok(ExitCode::FAILURE)
        }
        ReloadOutcome::Rejected(why) => {
            eprintln!("{why}");
            eprintln!("nvmf-target reload: rejected; the daemon keeps its running configuration");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Ask the daemon at `control`; its error reply becomes this command's error.
fn ask(control: &ControlArgs, request: &TargetRequest) -> anyhow::Result<TargetReply> {
    match control::request(&control.control, request)? {
        TargetReply::Error { message } => bail!("{message}"),
        reply => Ok(reply),
    }
}

/// `nvmf-target list`.
fn list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let TargetReply::List(listing) = ask(&args.control, &TargetRequest::List)? else {
        bail!("unexpected reply to list");
    };
    let mut out = std::io::stdout().lock();
    match args.output_format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &listing)?;
            std::io::Write::write_all(&mut out, b"\n")?;
        }
        OutputFormat::Normal => control::show::write_listing(&listing, &mut out)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `nvmf-target disconnect`: one line per association ended.
fn disconnect(args: &DisconnectArgs) -> anyhow::Result<ExitCode> {
    let request = DisconnectRequest { subnqn: args.nqn.clone(), cntlid: args.cntlid, hostnqn: args.host.clone() };
    let TargetReply::Disconnected { controllers } = ask(&args.control, &TargetRequest::Disconnect(request))? else {
        bail!("unexpected reply to disconnect");
    };
    for c in controllers {
        println!("{}: controller {} (host {}) disconnected", c.subnqn, c.cntlid, c.hostnqn);
    }
    Ok(ExitCode::SUCCESS)
}

/// `nvmf-target log-level [FILTER]`: prints the filter in force.
fn log_level(args: &LogLevelArgs) -> anyhow::Result<ExitCode> {
    let request = TargetRequest::LogLevel(LogLevelRequest { filter: args.filter.clone() });
    let TargetReply::LogLevel { filter } = ask(&args.control, &request)? else {
        bail!("unexpected reply to log-level");
    };
    println!("{filter}");
    Ok(ExitCode::SUCCESS)
}

/// `nvmf-target ns-ana-group`: prints whether the namespace moved.
fn ns_ana_group(args: &NsAnaGroupArgs) -> anyhow::Result<ExitCode> {
    let request = NamespaceAnaGroupRequest { subnqn: args.nqn.clone(), nsid: args.nsid, group: args.group };
    let TargetReply::NamespaceAnaGroup { moved } = ask(&args.control, &TargetRequest::NamespaceAnaGroup(request))?
    else {
        bail!("unexpected reply to ns-ana-group");
    };
    let how = if moved { "now" } else { "already" };
    println!("{} namespace {}: {how} in ANA group {}", args.nqn, args.nsid, args.group);
    Ok(ExitCode::SUCCESS)
}

/// `nvmf-target ana-state`: prints the listener's port ID and whether its state changed.
fn ana_state(args: &AnaStateArgs) -> anyhow::Result<ExitCode> {
    let request = AnaStateRequest { listener: args.listener.clone(), group: args.group, state: args.state.clone() };
    let TargetReply::AnaState { port_id, changed } = ask(&args.control, &TargetRequest::AnaState(request))? else {
        bail!("unexpected reply to ana-state");
    };
    let groups = args.group.map_or("every ANA group".to_owned(), |g| format!("ANA group {g}"));
    let how = if changed { "now" } else { "already" };
    println!("{} (port {port_id}): {groups} {how} {}", args.listener, args.state);
    Ok(ExitCode::SUCCESS)
}
