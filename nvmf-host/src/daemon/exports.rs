//! A controller's exports as the daemon runs them: what to start ([`ExportSpec`]: an NBD server or a ublk device)
//! and the running server ([`RunningExport`]), with its `list` view. Starting runs on the connecting thread;
//! each export then has threads of its own (see [`crate::nbd`] and `crate::ublk`).

use std::fmt;
use std::sync::Arc;

use nvmf_config::host::{ExportKind, NbdEndpoint};

use super::protocol::ExportView;
use crate::controller::{ConnectOptions, Controller};
use crate::nbd::{NbdExport, NbdListen, NbdOptions};

/// How to serve one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ExportSpec {
    /// An NBD server listening there.
    Nbd(NbdListen),
    /// A `/dev/ublkbN` device.
    Ublk,
}

impl From<&ExportKind> for ExportSpec {
    fn from(kind: &ExportKind) -> Self {
        match kind {
            ExportKind::Nbd(NbdEndpoint::Unix(p)) => ExportSpec::Nbd(NbdListen::Unix(p.clone())),
            ExportKind::Nbd(NbdEndpoint::Tcp(a)) => ExportSpec::Nbd(NbdListen::Tcp(*a)),
            ExportKind::Ublk => ExportSpec::Ublk,
        }
    }
}

impl fmt::Display for ExportSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportSpec::Nbd(listen) => write!(f, "NBD {listen}"),
            ExportSpec::Ublk => f.write_str("ublk"),
        }
    }
}

/// A running export of one namespace.
#[derive(Debug)]
pub(super) enum RunningExport {
    /// An NBD server.
    Nbd(NbdExport),
    /// A ublk device (boxed: it is several times the size of an NBD server's handle).
    #[cfg(feature = "ublk")]
    Ublk(Box<crate::ublk::UblkExport>),
}

impl RunningExport {
    /// Start serving namespace `nsid` of `ctrl` as `spec` says; `name` is the controller's (`nvmf0`): the NBD
    /// export is named `nvmf0n1` (the empty default name is served too).
    pub(super) fn start(
        spec: &ExportSpec,
        ctrl: &Arc<Controller>,
        nsid: u32,
        name: &str,
        options: &ConnectOptions,
    ) -> Result<Self, String> {
        match spec {
            ExportSpec::Nbd(listen) => {
                let nbd = NbdOptions { export_name: format!("{name}n{nsid}"), ..NbdOptions::default() };
                NbdExport::start(Arc::clone(ctrl), nsid, listen.clone(), nbd)
                    .map(RunningExport::Nbd)
                    .map_err(|e| e.to_string())
            }
            #[cfg(feature = "ublk")]
            ExportSpec::Ublk => {
                let ublk = crate::ublk::UblkOptions { queue_depth: options.queue_size };
                crate::ublk::UblkExport::start(Arc::clone(ctrl), nsid, ublk)
                    .map(|x| RunningExport::Ublk(Box::new(x)))
                    .map_err(|e| e.to_string())
            }
            #[cfg(not(feature = "ublk"))]
            ExportSpec::Ublk => {
                let _ = options;
                Err("this nvmf-host was built without the ublk feature; use an NBD export".into())
            }
        }
    }

    /// Stop serving (NBD sessions end; the ublk device is removed after outstanding I/O completes).
    pub(super) fn stop(self) {
        match self {
            RunningExport::Nbd(x) => x.stop(),
            #[cfg(feature = "ublk")]
            RunningExport::Ublk(x) => {
                let dev = x.path();
                if let Err(e) = x.stop() {
                    tracing::warn!(device = %dev.display(), error = %e, "removing the ublk device failed");
                }
            }
        }
    }

    /// What `list` shows.
    pub(super) fn view(&self, nsid: u32) -> ExportView {
        match self {
            RunningExport::Nbd(x) => {
                ExportView { nsid, kind: "nbd".into(), address: x.local_addr().to_string(), uri: x.uri() }
            }
            #[cfg(feature = "ublk")]
            RunningExport::Ublk(x) => {
                let dev = x.path().display().to_string();
                ExportView { nsid, kind: "ublk".into(), address: dev.clone(), uri: dev }
            }
        }
    }
}
