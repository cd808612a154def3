//! The nvmf-target daemon: parse the command line, load the configuration, start tracing, run the target until
//! SIGTERM/SIGINT (reloading the configuration on SIGHUP or a control-socket request), telling a service manager
//! (sd_notify) when it is ready, how it is doing and when it stops. `nvmf-target reload` is the control client.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use nvmf_config::{QuickStart, TargetConfig};
use nvmf_target::control::{self, ControlServer, Reply, Request, DEFAULT_CONTROL_SOCKET};
use nvmf_target::notify::{ServiceNotifier, StatusReporter};
use nvmf_target::reload::Reloader;

/// Export local storage as NVMe over Fabrics subsystems.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Configuration file (TOML); the quick-start flags are ignored with it.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Validate the configuration, print the effective configuration and exit.
    #[arg(long)]
    check: bool,
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

fn main() -> anyhow::Result<ExitCode> {
    let mut cli = Cli::parse();
    if let Some(Command::Reload(args)) = &cli.command {
        return reload(args);
    }
    // The daemon names its file to `nvmf-target reload`, which may run from another directory: keep it absolute.
    if let Some(path) = &mut cli.config {
        *path = std::path::absolute(&*path).with_context(|| format!("{}", path.display()))?;
    }
    let config = match &cli.config {
        Some(path) => TargetConfig::from_file(path)?,
        None => cli.quick.to_config()?,
    };
    if cli.check {
        print!("{config}");
        return Ok(ExitCode::SUCCESS);
    }
    nvmf_target::logging::init(&config.logging);
    let (requests, received) = std::sync::mpsc::channel();
    let signals = nvmf_target::signals::Signals::new().context("installing signal handlers")?;
    control::forward_signals(signals, requests.clone()).context("starting the signal thread")?;
    let notifier = Arc::new(ServiceNotifier::from_env().context("$NOTIFY_SOCKET")?);
    let mut running = nvmf_target::daemon::start(&config).context("starting the target")?;
    let control = start_control(cli.control.as_deref(), requests)?;
    nvmf_target::daemon::print_ready(&config, &running);
    notifier.notify("READY=1");
    let status =
        StatusReporter::start(Arc::clone(&notifier), running.connection_counters(), Arc::clone(running.target()))?;
    let mut reloader = Reloader::new(cli.config.clone(), config);
    for request in received {
        match request {
            Request::Terminate => break,
            Request::Reload(reply) => {
                let outcome = reloader.reload(&mut running, &notifier);
                if let Some(reply) = reply {
                    let _ =
                        reply.send(outcome.map_or_else(|e| Reply::error(e.to_string()), |s| Reply::ok(s.to_string())));
                }
            }
            Request::ConfigPath(reply) => {
                let _ = reply.send(match reloader.path() {
                    Some(path) => Reply::ok(path.display().to_string()),
                    None => Reply::error("the target runs from quick-start flags, not a configuration file"),
                });
            }
        }
    }
    notifier.notify("STOPPING=1");
    drop(status);
    tracing::info!("shutting down");
    if let Some(control) = control {
        control.stop();
    }
    running.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// The control socket at `path`, or at the default path when it can be served there (a warning otherwise: SIGHUP
/// still reloads).
fn start_control(
    path: Option<&Path>,
    requests: std::sync::mpsc::Sender<Request>,
) -> anyhow::Result<Option<ControlServer>> {
    match path {
        Some(path) => Ok(Some(ControlServer::start(path, requests)?)),
        None => match ControlServer::start(Path::new(DEFAULT_CONTROL_SOCKET), requests) {
            Ok(server) => Ok(Some(server)),
            Err(e) => {
                tracing::warn!("no control socket ({e}); `nvmf-target reload` cannot reach this daemon, SIGHUP can");
                Ok(None)
            }
        },
    }
}

/// `nvmf-target reload`: validate the daemon's configuration file here, so that a typo is reported with its
/// location and never reaches the daemon, then have the daemon apply it and print what it did.
fn reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let socket = &args.control;
    let named = control::request(socket, "config-path")?;
    anyhow::ensure!(named.ok, "{}", named.text);
    let daemon_file = PathBuf::from(&named.text);
    if let Some(file) = &args.config {
        let same = match (file.canonicalize(), daemon_file.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => file == &daemon_file,
        };
        anyhow::ensure!(same, "the daemon reloads {}, not {}", daemon_file.display(), file.display());
    }
    if let Err(e) = TargetConfig::from_file(&daemon_file) {
        eprintln!("{e}");
        eprintln!("nvmf-target reload: not sent; the daemon keeps its running configuration");
        return Ok(ExitCode::FAILURE);
    }
    let reply = control::request(socket, "reload")?;
    if reply.ok {
        println!("{}", reply.text);
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{}", reply.text);
        eprintln!("nvmf-target reload: rejected; the daemon keeps its running configuration");
        Ok(ExitCode::FAILURE)
    }
}
