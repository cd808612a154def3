//! The nvmf-target daemon: parse the command line, load the configuration, start tracing, run the target until
//! SIGTERM/SIGINT (reloading the configuration on SIGHUP), telling a service manager (sd_notify) when it is
//! ready, how it is doing and when it stops.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use nvmf_config::{QuickStart, TargetConfig};
use nvmf_target::notify::{ServiceNotifier, StatusReporter};
use nvmf_target::reload::Reloader;
use nvmf_target::signals::Request;

/// Export local storage as NVMe over Fabrics subsystems.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Configuration file (TOML); the quick-start flags are ignored with it.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Validate the configuration, print the effective configuration and exit.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    quick: QuickStart,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = match &cli.config {
        Some(path) => TargetConfig::from_file(path)?,
        None => cli.quick.to_config()?,
    };
    if cli.check {
        print!("{config}");
        return Ok(());
    }
    nvmf_target::logging::init(&config.logging);
    let mut signals = nvmf_target::signals::Signals::new().context("installing signal handlers")?;
    let notifier = Arc::new(ServiceNotifier::from_env().context("$NOTIFY_SOCKET")?);
    let mut running = nvmf_target::daemon::start(&config).context("starting the target")?;
    nvmf_target::daemon::print_ready(&config, &running);
    notifier.notify("READY=1");
    let status = StatusReporter::start(Arc::clone(&notifier), running.connection_counters())?;
    let mut reloader = Reloader::new(cli.config.clone(), config);
    while signals.wait() == Request::Reload {
        reloader.reload(&mut running, &notifier);
    }
    notifier.notify("STOPPING=1");
    drop(status);
    tracing::info!("shutting down");
    running.shutdown();
    Ok(())
}
