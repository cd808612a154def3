//! `nvmf-host nbd`: connect to a subsystem and serve one namespace over NBD in the foreground until SIGINT or
//! SIGTERM, then stop the export and disconnect cleanly. Runs on the caller's thread; the export has its own.

use std::sync::Arc;

use clap::Args;
use nvmf_service::signals::Signals;

use super::{CliError, ForegroundConnection};
use crate::controller::Controller;
use crate::endpoint::Endpoint;
use crate::nbd::{NbdError, NbdExport, NbdListen, NbdOptions, DEFAULT_NBD_SOCKET};

/// `nvmf-host nbd`.
#[derive(Debug, Clone, Args)]
pub struct NbdArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Namespace to export.
    #[arg(long = "nsid", default_value_t = 1)]
    pub nsid: u32,
    /// Where to serve NBD: a unix socket `unix:/path`, created mode 0600 (this user and root only), or loopback
    /// TCP `127.0.0.1:PORT` / `[::1]:PORT` (any local user; other addresses are refused: NBD has no
    /// authentication).
    #[arg(long = "listen", value_name = "unix:PATH|ADDR:PORT", default_value = DEFAULT_NBD_SOCKET)]
    pub listen: NbdListen,
    /// Host identity, queues and digests.
    #[command(flatten)]
    pub connection: ForegroundConnection,
    /// The export's name (clients may also use the empty default name).
    #[arg(long = "export-name", default_value = "")]
    pub export_name: String,
    /// Refuse writes.
    #[arg(long = "read-only")]
    pub read_only: bool,
}

/// Connect, export, print the URI, serve until SIGINT/SIGTERM, stop, disconnect.
pub fn run(a: &NbdArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    let connect = a.connection.options(&a.endpoint)?;
    // Before anything starts, so a signal during the connect is not lost.
    let signals = Signals::new().map_err(|source| NbdError::Io {
        what: "installing signal handlers for",
        listen: a.listen.to_string(),
        source,
    })?;
    let ctrl = Arc::new(Controller::connect(addr, &a.nqn, connect)?);
    let options = NbdOptions { export_name: a.export_name.clone(), read_only: a.read_only, ..NbdOptions::default() };
    let export = NbdExport::start(Arc::clone(&ctrl), a.nsid, a.listen.clone(), options)?;
    writeln!(out, "{} namespace {} exported at {}", a.nqn, a.nsid, export.uri())?;
    out.flush()?;
    signals.wait_for_termination();
    export.stop();
    match Arc::try_unwrap(ctrl) {
        Ok(ctrl) => ctrl.disconnect()?,
        // Unreachable once the export's threads are joined; the association then ends with the process.
        Err(_) => tracing::warn!("controller still shared at exit; not shutting it down"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn listen(extra: &[&str]) -> Result<NbdListen, clap::Error> {
        let args = ["nvmf-host", "nbd", "-a", "127.0.0.1", "-n", "nqn.2024-01.io.nvmf-rs:default"];
        match Cli::try_parse_from(args.iter().chain(extra))?.command {
            Command::Nbd(a) => Ok(a.listen),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_unix_socket_by_default_and_tcp_on_loopback_only_when_asked() {
        assert_eq!(listen(&[]).unwrap(), NbdListen::Unix(DEFAULT_NBD_SOCKET.into()));
        assert_eq!(listen(&["--listen", "127.0.0.1:10809"]).unwrap(), "127.0.0.1:10809".parse().unwrap());
        let err = listen(&["--listen", "0.0.0.0:10809"]).unwrap_err().to_string();
        assert!(err.contains("loopback address only"), "{err}");
    }
}
