//! `nvmf-host ublk`: connect to a subsystem and serve one namespace as `/dev/ublkbN` in the foreground until
//! SIGINT or SIGTERM, then delete the device and disconnect cleanly. Runs on the caller's thread; the
//! device's queues have their own.

use std::sync::Arc;

use clap::Args;
use nvmf_service::signals::Signals;

use super::{CliError, ForegroundConnection};
use crate::controller::Controller;
use crate::endpoint::Endpoint;
use crate::ublk::{UblkError, UblkExport, UblkOptions};

/// `nvmf-host ublk`.
#[derive(Debug, Clone, Args)]
pub struct UblkArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Namespace to export.
    #[arg(long = "nsid", default_value_t = 1)]
    pub nsid: u32,
    /// Host identity, queues and digests.
    #[command(flatten)]
    pub connection: ForegroundConnection,
    /// CPUs to pin each queue's threads to (the ublk queue's and the NVMe I/O queue's, together), as taskset -c
    /// writes them (0,2-3): queue i's on the i-th, round robin; `none`: not pinned. Default: the CPUs this process
    /// may run on.
    #[arg(long = "cpus", value_name = "LIST|none")]
    pub cpus: Option<String>,
}

/// Connect, add the device, print its path, serve until SIGINT/SIGTERM, delete it, disconnect.
pub fn run(a: &UblkArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    // Entries per I/O queue (`--queue-size`, default 128), and so the ublk queue depth.
    let mut connect = a.connection.options(&a.endpoint)?;
    connect.queue_cpus = super::cpus_arg(a.cpus.as_deref())?;
    let queue_depth = connect.queue_size;
    // Before anything starts, so a signal during the connect is not lost.
    let signals = Signals::new().map_err(|source| UblkError::Driver {
        what: "installing signal handlers",
        dev_id: None,
        source,
    })?;
    let ctrl = Arc::new(Controller::connect(addr, &a.nqn, connect)?);
    let options = UblkOptions { queue_depth };
    let export = UblkExport::start(Arc::clone(&ctrl), a.nsid, options)?;
    writeln!(out, "{}", export.path().display())?;
    out.flush()?;
    signals.wait_for_termination();
    export.stop()?;
    match Arc::try_unwrap(ctrl) {
        Ok(ctrl) => ctrl.disconnect()?,
        // Unreachable once the queue threads are joined; the association then ends with the process.
        Err(_) => tracing::warn!("controller still shared at exit; not shutting it down"),
    }
    Ok(())
}
