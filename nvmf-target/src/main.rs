//! The nvmf-target daemon: parse the command line, load the configuration, start logging, then
//! [`serve`](nvmf_target::serve::serve) until SIGTERM/SIGINT. `nvmf-target reload` is the control client
//! ([`nvmf_target::control::request_reload`]); `nvmf-target systemd-devices` prints the unit's device drop-in
//! ([`nvmf_target::systemd_devices`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use nvmf_config::target::NamespaceBackend;
use nvmf_config::{QuickStart, TargetConfig};
use nvmf_target::control::{self, ReloadOutcome, DEFAULT_CONTROL_SOCKET};
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
    /// writable, fits the block size), print the effective configuration and exit.
    #[arg(long)]
    check: bool,
    /// With --check: do not open the path namespaces (a configuration prepared for another machine).
    #[arg(long, requires = "check")]
    no_path_check: bool,
    /// Serve the control socket (`nvmf-target reload`) here [default: /run/nvmf-target/control.sock, skipped
    /// with a warning when its directory is missing].
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    #[command(flatten)]
    quick: QuickStart,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the configuration file, then ask the running daemon to reload it and print what changed.
    Reload(ReloadArgs),
    /// Print the systemd drop-in that lets nvmf-target.service open the device nodes the configuration names,
    /// and no others (for /etc/systemd/system/nvmf-target.service.d/devices.conf).
    SystemdDevices(SystemdDevicesArgs),
}

#[derive(Debug, Args)]
struct SystemdDevicesArgs {
    /// The configuration file the service runs from.
    #[arg(short, long, value_name = "FILE", default_value = "/etc/nvmf/target.toml")]
    config: PathBuf,
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
            "--config cannot be combined with --listen, --namespace, --nqn, --allow-host or --metrics: put them in \
             the file"
        ),
        Some(path) => TargetConfig::from_file(path)?,
        None => cli.quick.to_config()?,
    };
    if cli.check {
        if !cli.no_path_check {
            check_paths(&config)?;
        }
        print!("{config}");
        return Ok(ExitCode::SUCCESS);
    }
    nvmf_target::logging::init(&config.logging);
    serve(config, &ServeOptions { config_path: cli.config, control: cli.control })?;
    Ok(ExitCode::SUCCESS)
}

/// Open every path namespace of `config` the way the daemon will, and close it again.
fn check_paths(config: &TargetConfig) -> anyhow::Result<()> {
    for s in &config.subsystems {
        for ns in s.namespaces.iter().filter(|ns| matches!(ns.backend, NamespaceBackend::Path(_))) {
            nvmf_target::daemon::namespace_params(&s.nqn, ns)?;
        }
    }
    Ok(())
}

/// `nvmf-target reload`: print what the daemon changed, or why nothing was.
fn reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    match control::request_reload(&args.control, args.config.as_deref())? {
        ReloadOutcome::Applied(changes) => {
            println!("{changes}");
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
