//! The `nvmf-host` command: parse the command line, start tracing (`RUST_LOG`, default `warn`, to stderr),
//! run the command from the library.

use anyhow::Context;
use clap::Parser;
use nvmf_host::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let what = match &cli.command {
        Command::Perf(a) => format!("perf against {}:{} {}", a.endpoint.traddr, a.endpoint.trsvcid, a.nqn),
        Command::Discover(a) => format!("discover at {}:{}", a.endpoint.traddr, a.endpoint.trsvcid),
        Command::Nbd(a) => format!("nbd export of {} namespace {}", a.nqn, a.nsid),
    };
    let stdout = std::io::stdout();
    nvmf_host::cli::run(&cli, &mut stdout.lock()).with_context(|| what)
}
