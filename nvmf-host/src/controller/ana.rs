//! Asymmetric Namespace Access as the host reads it, and the events the host asks for. After each association
//! comes up and on every ANA Change notice, a controller that reports ANA (CMIC bit 3) is asked for its ANA log
//! page (0Ch), which gives each ANA group's state on this controller's path; a namespace's group is its
//! Identify Namespace ANAGRPID. [`Controller::ana_state`] answers for a namespace and
//! [`Controller::ana_generation`] moves on each re-read, so a multipath head looks again only then.
//!
//! Events: Set Features Asynchronous Event Configuration enables the Namespace Attribute and ANA Change notices
//! the controller offers (OAES), as the Linux host does; a controller that refuses keeps its defaults.
//!
//! Runs where the namespace scan runs (the connecting thread, the supervisor), its admin commands unheld.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use nvmf_common::nvme::features::{AsyncEventConfiguration, SetFeatures};
use nvmf_common::nvme::identify::IdentifyController;
use nvmf_common::nvme::log_page::{lid, AnaLog, AnaState, GetLogPage, ANA_GROUP_DESCRIPTOR_SIZE, ANA_LOG_HEADER_SIZE};

use super::{Controller, Hold, Inner};
use crate::error::HostError;
use crate::queue::DataDirection;

/// Most ANA groups and namespaces the log is sized for (a hostile NANAGRPID or NN must not size a buffer).
const MAX_ANA_GROUPS: usize = 1024;
const MAX_ANA_NSIDS: usize = 65536;

/// The ANA groups' states on this path, as of the last read of the log.
#[derive(Debug, Default)]
pub(super) struct AnaTable {
    /// Whether the controller reports ANA at all (the log is read only then).
    pub(super) reporting: bool,
    /// The log's size: header, NANAGRPID descriptors and NN NSIDs (bounded).
    pub(super) log_bytes: usize,
    states: RwLock<HashMap<u32, AnaState>>,
    generation: AtomicU64,
}

impl AnaTable {
    pub(super) fn new(reporting: bool, nanagrpid: u32, nn: u32) -> Self {
        let groups = usize::try_from(nanagrpid).unwrap_or(usize::MAX).clamp(1, MAX_ANA_GROUPS);
        let nsids = usize::try_from(nn).unwrap_or(usize::MAX).clamp(1, MAX_ANA_NSIDS);
        let log_bytes = ANA_LOG_HEADER_SIZE + groups * ANA_GROUP_DESCRIPTOR_SIZE + nsids * 4;
        AnaTable { reporting, log_bytes, ..AnaTable::default() }
    }
}

impl Inner {
    /// Enable the Namespace Attribute and ANA Change notices `oaes` offers (a refusal is only logged).
    pub(super) fn enable_events(&self, oaes: u32) {
        let aec = AsyncEventConfiguration {
            namespace_attribute_notices: oaes & IdentifyController::OAES_NAMESPACE_ATTRIBUTE_NOTICES != 0,
            ana_change_notices: oaes & IdentifyController::OAES_ANA_CHANGE_NOTICES != 0,
            ..AsyncEventConfiguration::default()
        };
        if aec == AsyncEventConfiguration::default() {
            return;
        }
        let sqe = SetFeatures::new(&aec).to_sqe();
        let what = "Set Features (Asynchronous Event Configuration)";
        if let Err(e) = self.admin_command(Hold::Never, what, sqe, DataDirection::None, Vec::new()) {
            tracing::warn!(error = %e, "enabling asynchronous event notices");
        }
    }

    /// Read the ANA log (when the controller reports ANA) and replace the group states.
    pub(super) fn refresh_ana(&self) -> Result<(), HostError> {
        let table = &self.ana;
        if !table.reporting {
            return Ok(());
        }
        let what = "Get Log Page (Asymmetric Namespace Access)";
        let sqe = GetLogPage::new(lid::ASYMMETRIC_NAMESPACE_ACCESS, 0, table.log_bytes as u64)
            .map_err(|e| HostError::wire(what, e))?
            .to_sqe();
        let reply =
            self.admin_command(Hold::Never, what, sqe, DataDirection::ControllerToHost, vec![0; table.log_bytes])?;
        let log = AnaLog::parse(&reply.data).map_err(|e| HostError::wire("ANA log page", e))?;
        let states: HashMap<u32, AnaState> = log.groups.iter().map(|g| (g.grpid, g.state)).collect();
        tracing::debug!(traddr = %self.addr, ?states, "ANA log read");
        *table.states.write().unwrap_or_else(PoisonError::into_inner) = states;
        table.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// [`Inner::refresh_ana`], a failure logged.
    pub(super) fn refresh_ana_logged(&self) {
        if let Err(e) = self.refresh_ana() {
            tracing::warn!(traddr = %self.addr, error = %e, "reading the ANA log");
        }
    }
}

impl Controller {
    /// Namespace `nsid`'s ANA state on this path as of the last ANA log read; `None` when the controller does
    /// not report ANA (every path of such a controller is as good as optimized), its log could not be read yet
    /// (a path is not shut out for want of a log: an ANA status still marks it), or the namespace is unknown.
    pub fn ana_state(&self, nsid: u32) -> Option<AnaState> {
        let table = &self.inner.ana;
        if !table.reporting || table.generation.load(Ordering::Acquire) == 0 {
            return None;
        }
        let grpid = self.namespace(nsid).ok()?.anagrpid;
        // A group missing from the log has no accessible path here.
        let states = table.states.read().unwrap_or_else(PoisonError::into_inner);
        Some(states.get(&grpid).copied().unwrap_or(AnaState::Inaccessible))
    }

    /// Moves each time the ANA log is read (after a connect or reconnect, on an ANA Change notice, or when I/O
    /// met an ANA status: [`Controller::request_ana_refresh`]).
    pub fn ana_generation(&self) -> u64 {
        self.inner.ana.generation.load(Ordering::Acquire)
    }

    /// Have the supervisor read the ANA log again soon (an I/O completed with an ANA status); never blocks.
    pub fn request_ana_refresh(&self) {
        self.inner.supervision.request_ana_refresh();
    }
}
