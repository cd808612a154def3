//! A controller's exports as the daemon runs them: what to start ([`ExportSpec`]: an NBD server or a ublk device),
//! the running servers, one per namespace whatever the number of controllers it is reached through ([`Heads`]:
//! native multipath, see [`crate::multipath`]), and a controller's path in one ([`RunningExport`]), with its
//! `list` view. Starting runs on the connecting thread;
//! each export then has threads of its own (see [`crate::nbd`] and `crate::ublk`).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nvmf_config::host::{ExportKind, NbdEndpoint};

use super::protocol::{ExportView, PathView};
use crate::controller::{ConnectOptions, Controller};
use crate::metrics::{NbdLimitSample, PathSample};
use crate::multipath::{NamespaceHead, PathError};
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

/// The daemon's running exports, one per namespace head: a controller whose namespace another controller
/// already exports (same subsystem, NSID and NGUID/UUID) joins that export as a path instead of starting its own.
/// Locked to find, start and stop an export (a ublk device is added under it, so two controllers connecting at
/// once cannot start two exports of one namespace); never on an I/O path.
#[derive(Debug, Default)]
pub(super) struct Heads(Mutex<Vec<HeadExport>>);

#[derive(Debug)]
struct HeadExport {
    head: Arc<NamespaceHead>,
    server: Server,
}

impl Heads {
    fn lock(&self) -> MutexGuard<'_, Vec<HeadExport>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One controller's part in an export: its path in the namespace's head. The export runs while it has a path.
#[derive(Debug)]
pub(super) struct RunningExport {
    heads: Arc<Heads>,
    head: Arc<NamespaceHead>,
    /// The controller's name, its path's name in the head.
    name: String,
}

/// An export's server.
#[derive(Debug)]
enum Server {
    /// An NBD server.
    Nbd(NbdExport),
    /// A ublk device (boxed: it is several times the size of an NBD server's handle).
    #[cfg(feature = "ublk")]
    Ublk(Box<crate::ublk::UblkExport>),
}

impl RunningExport {
    /// Serve namespace `nsid` of `ctrl` (named `name`, `nvmf0`): as a new path of the export that already serves
    /// that namespace through another controller, else as `spec` says (the NBD export is named `nvmf0n1`; the
    /// empty default name is served too).
    pub(super) fn start(
        heads: &Arc<Heads>,
        spec: &ExportSpec,
        ctrl: &Arc<Controller>,
        nsid: u32,
        name: &str,
        options: &ConnectOptions,
    ) -> Result<Self, String> {
        let ns = ctrl
            .known_namespaces()
            .into_iter()
            .find(|n| n.nsid == nsid)
            .ok_or_else(|| format!("namespace {nsid} is not active on this controller"))?;
        let mut list = heads.lock();
        if let Some(h) = list.iter().find(|h| h.head.matches(ctrl.subnqn(), &ns)) {
            match h.head.add_path(Arc::clone(ctrl), name) {
                Ok(()) => {
                    let head = Arc::clone(&h.head);
                    return Ok(RunningExport { heads: Arc::clone(heads), head, name: name.to_owned() });
                }
                Err(PathError::NotOneSubsystem(why)) => tracing::warn!(path = name, nsid, reason = %why,
                    "same subsystem NQN and namespace identifier as a running export, but not a path of it: exported on its own"),
                Err(e) => return Err(e.to_string()),
            }
        }
        let head =
            Arc::new(NamespaceHead::new(Arc::clone(ctrl), name, nsid, options.iopolicy).map_err(|e| e.to_string())?);
        let server = Server::start(spec, &head, name)?;
        list.push(HeadExport { head: Arc::clone(&head), server });
        Ok(RunningExport { heads: Arc::clone(heads), head, name: name.to_owned() })
    }

    /// Leave the export; the last path stops it (NBD sessions end; the ublk device is removed after outstanding
    /// I/O completes).
    pub(super) fn stop(self) {
        let mut list = self.heads.lock();
        if self.head.remove_path(&self.name) > 0 {
            tracing::info!(path = %self.name, nsid = self.head.nsid(), "path removed; the export stays");
            return;
        }
        let Some(i) = list.iter().position(|h| Arc::ptr_eq(&h.head, &self.head)) else { return };
        let h = list.swap_remove(i);
        drop(list);
        h.server.stop();
    }

    /// This controller's path as a scrape sees it.
    pub(super) fn path_sample(&self) -> Option<PathSample> {
        let view = self.head.view().into_iter().find(|p| p.name == self.name)?;
        Some(PathSample {
            nsid: self.head.nsid(),
            ana_state: view.ana_state,
            failovers: view.failovers,
            retries_exhausted: view.retries_exhausted,
        })
    }

    /// The export's limit counts, when it is an NBD export.
    pub(super) fn nbd_limit_sample(&self) -> Option<NbdLimitSample> {
        let list = self.heads.lock();
        match &list.iter().find(|h| Arc::ptr_eq(&h.head, &self.head))?.server {
            Server::Nbd(x) => Some(NbdLimitSample { export: x.name().to_owned(), counts: x.limits().counts() }),
            #[cfg(feature = "ublk")]
            Server::Ublk(_) => None,
        }
    }

    /// What `list` shows.
    pub(super) fn view(&self, nsid: u32) -> ExportView {
        let list = self.heads.lock();
        let mut view = list
            .iter()
            .find(|h| Arc::ptr_eq(&h.head, &self.head))
            .map(|h| h.server.view(nsid))
            .unwrap_or_else(|| ExportView { nsid, kind: "stopped".into(), ..ExportView::default() });
        view.paths = self
            .head
            .view()
            .into_iter()
            .map(|p| PathView { name: p.name, state: p.state.to_owned(), ana_state: p.ana_state.to_owned() })
            .collect();
        view.iopolicy = self.head.policy().name().to_owned();
        view
    }
}

impl Server {
    fn start(spec: &ExportSpec, head: &Arc<NamespaceHead>, name: &str) -> Result<Self, String> {
        let nsid = head.nsid();
        match spec {
            ExportSpec::Nbd(listen) => {
                let nbd = NbdOptions { export_name: format!("{name}n{nsid}"), ..NbdOptions::default() };
                NbdExport::start_head(Arc::clone(head), listen.clone(), nbd).map(Server::Nbd).map_err(|e| e.to_string())
            }
            #[cfg(feature = "ublk")]
            ExportSpec::Ublk => {
                let depth = head.first_controller().map_or(128, |c| c.options().queue_size);
                let ublk = crate::ublk::UblkOptions { queue_depth: depth };
                crate::ublk::UblkExport::start_head(Arc::clone(head), ublk)
                    .map(|x| Server::Ublk(Box::new(x)))
                    .map_err(|e| e.to_string())
            }
            #[cfg(not(feature = "ublk"))]
            ExportSpec::Ublk => Err("this nvmf-host was built without the ublk feature; use an NBD export".into()),
        }
    }

    fn stop(self) {
        match self {
            Server::Nbd(x) => x.stop(),
            #[cfg(feature = "ublk")]
            Server::Ublk(x) => {
                let dev = x.path();
                if let Err(e) = x.stop() {
                    tracing::warn!(device = %dev.display(), error = %e, "removing the ublk device failed");
                }
            }
        }
    }

    fn view(&self, nsid: u32) -> ExportView {
        match self {
            Server::Nbd(x) => ExportView {
                nsid,
                kind: "nbd".into(),
                address: x.local_addr().to_string(),
                uri: x.uri(),
                ..ExportView::default()
            },
            #[cfg(feature = "ublk")]
            Server::Ublk(x) => {
                let dev = x.path().display().to_string();
                ExportView { nsid, kind: "ublk".into(), address: dev.clone(), uri: dev, ..ExportView::default() }
            }
        }
    }
}
