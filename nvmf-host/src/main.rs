//! The `nvmf-host` command: parse the command line, start tracing (for `run`, from the configuration's
//! `[logging]`; otherwise `RUST_LOG`, default `warn`, to stderr), run the command from the library; an error is
//! one line on stderr (`nvmf_service::error_line::report`) and exit status 1. `doctor` exits with what it found.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use nvmf_host::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // doctor's exit status says what it found (0, 1, 2), not only whether it ran.
    if let Command::Doctor(args) = &cli.command {
        return nvmf_host::cli::doctor::run(args);
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => nvmf_service::error_line::report("nvmf-host", e.as_ref()),
    }
}

/// The context of an inspection command's error: the command and the controller it was reading.
fn inspecting(command: &str, c: &nvmf_host::cli::inspect::ControllerArgs) -> String {
    format!("{command} of {} at {}:{}", c.nqn, c.endpoint.traddr, c.endpoint.trsvcid)
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    if !matches!(cli.command, Command::Run(_)) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    let what = match &cli.command {
        Command::Perf(a) => format!("perf against {}:{} {}", a.endpoint.traddr, a.endpoint.trsvcid, a.nqn),
        Command::Discover(a) => format!("discover at {}:{}", a.endpoint.traddr, a.endpoint.trsvcid),
        Command::Nbd(a) => format!("nbd export of {} namespace {}", a.nqn, a.nsid),
        #[cfg(feature = "ublk")]
        Command::Ublk(a) => format!("ublk export of {} namespace {}", a.nqn, a.nsid),
        Command::Run(a) => format!("nvmf-host run --config {}", a.config.display()),
        Command::Connect(a) => format!("connect to {} at {}:{}", a.nqn, a.endpoint.traddr, a.endpoint.trsvcid),
        Command::ConnectAll(a) => match &a.traddr {
            Some(traddr) => format!("connect-all at {traddr}:{}", a.trsvcid),
            None => format!("connect-all from {}", a.discovery_conf.display()),
        },
        Command::Disconnect(_) => "disconnect".to_owned(),
        Command::DisconnectAll(_) => "disconnect-all".to_owned(),
        Command::List(_) => "list".to_owned(),
        Command::Reload(_) => "reload".to_owned(),
        Command::LogLevel(_) => "log-level".to_owned(),
        Command::GenHostnqn => "gen-hostnqn".to_owned(),
        Command::GenDhchapKey(_) => "gen-dhchap-key".to_owned(),
        Command::GenTlsKey(_) => "gen-tls-key".to_owned(),
        Command::CheckTlsKey(_) => "check-tls-key".to_owned(),
        Command::ShowHostnqn => "show-hostnqn".to_owned(),
        Command::Doctor(_) => "doctor".to_owned(),
        Command::IdCtrl(a) => inspecting("id-ctrl", &a.controller),
        Command::IdNs(a) => inspecting("id-ns", &a.controller),
        Command::ListNs(a) => inspecting("list-ns", &a.controller),
        Command::SmartLog(a) => inspecting("smart-log", &a.controller),
        Command::ErrorLog(a) => inspecting("error-log", &a.controller),
        Command::GetLog(a) => inspecting("get-log", &a.controller),
        Command::NsRescan(a) => inspecting("ns-rescan", &a.controller),
        Command::ListSubsys(a) => inspecting("list-subsys", &a.controller),
        Command::ResvRegister(a) => inspecting("resv-register", &a.controller),
        Command::ResvAcquire(a) => inspecting("resv-acquire", &a.controller),
        Command::ResvRelease(a) => inspecting("resv-release", &a.controller),
        Command::ResvReport(a) => inspecting("resv-report", &a.controller),
    };
    let stdout = std::io::stdout();
    nvmf_host::cli::run(cli, &mut stdout.lock()).with_context(|| what)
}
