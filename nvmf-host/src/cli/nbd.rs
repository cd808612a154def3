//! `nvmf-host nbd`: connect to a subsystem and serve one namespace over NBD in the foreground until SIGINT or
//! SIGTERM, then stop the export and disconnect cleanly. Runs on the caller's thread; the export has its own.

use std::sync::Arc;

use clap::Args;
use nvmf_service::signals::Signals;

use super::{CliError, ForegroundConnection};
use crate::controller::Controller;
use crate::endpoint::Endpoint;
use crate::nbd::{NbdError, NbdExport, NbdListen, NbdOptions};

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
    /// Where to serve NBD: `unix:/path` or `ADDR:PORT` (loopback by default).
    #[arg(long = "listen", default_value = "127.0.0.1:10809")]
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
    let connect = a.connection.options(&a.endpoint);
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
