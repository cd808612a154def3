//! Asynchronous events and the namespace table: the host keeps AERL + 1 Asynchronous Event Requests
//! outstanding (at most [`MAX_AERS`]), completing into the supervisor's inbox; a Namespace Attribute Changed
//! notice makes it read the Changed Namespace List log (which clears the event), rescan the namespaces and bump
//! [`super::Controller::namespace_generation`], then re-arm the request.
//!
//! Runs on the supervisor thread (an event, the rescan after a reconnect) or the caller's
//! ([`super::Controller::namespaces`]); its admin commands go to the current connection unheld
//! (`Hold::Never`) and block for their completion, bounded by the I/O timeout.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use nvmf_common::nvme::admin::{AsyncEvent, AsyncEventRequest};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyNamespace, NamespaceIdentificationDescriptor, IDENTIFY_DATA_SIZE,
};
use nvmf_common::nvme::log_page::{lid, ChangedNamespaceList, GetLogPage, CHANGED_NAMESPACE_LIST_SIZE};

use super::{Controller, Hold, Inner};
use crate::error::HostError;
use crate::queue::handle::{CompletionSink, Reply};
use crate::queue::{DataDirection, Request};

/// Most Asynchronous Event Requests kept outstanding, whatever AERL allows (they occupy admin queue slots).
pub(super) const MAX_AERS: usize = 8;

/// A namespace as Identify describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks (NSZE).
    pub blocks: u64,
    /// NGUID (zero if the controller reports none).
    pub nguid: [u8; 16],
    /// UUID from the Namespace Identification Descriptor list, if reported.
    pub uuid: Option<[u8; 16]>,
    /// The namespace's ANA group (ANAGRPID; 0 when the controller does not report ANA).
    pub anagrpid: u32,
}

impl Inner {
    /// Identify CNS 02h, then CNS 00h and 03h for each active namespace; replaces the namespace table.
    /// Returns the namespaces and whether the table changed.
    pub(super) fn scan_namespaces(&self) -> Result<(Vec<NamespaceInfo>, bool), HostError> {
        let c2h = DataDirection::ControllerToHost;
        let list = self.admin_command(
            Hold::Never,
            "Identify (Active Namespace ID list)",
            Identify::new(cns::ACTIVE_NAMESPACE_ID_LIST, 0).to_sqe(),
            c2h,
            vec![0; IDENTIFY_DATA_SIZE],
        )?;
        let nsids: Vec<u32> = ActiveNamespaceIdList::parse(&list.data)
            .map_err(|e| HostError::wire("Active Namespace ID list", e))?
            .iter()
            .collect();
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let sqe = Identify::new(cns::NAMESPACE, nsid).to_sqe();
            let r = self.admin_command(Hold::Never, "Identify Namespace", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])?;
            let ns = IdentifyNamespace::parse(&r.data).map_err(|e| HostError::wire("Identify Namespace", e))?;
            let block_size = ns.lba_data_size().map_err(|e| HostError::wire("Identify Namespace LBA format", e))?;
            let sqe = Identify::new(cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, nsid).to_sqe();
            // Optional before NVMe 1.3: a controller that refuses it simply reports no UUID.
            let uuid = self
                .admin_command(
                    Hold::Never,
                    "Identify (Namespace Identification Descriptors)",
                    sqe,
                    c2h,
                    vec![0; IDENTIFY_DATA_SIZE],
                )
                .ok()
                .and_then(|r| {
                    NamespaceIdentificationDescriptor::parse_list(&r.data).ok()?.iter().find_map(|d| match d {
                        NamespaceIdentificationDescriptor::Uuid(u) => Some(u),
                        _ => None,
                    })
                });
            out.push(NamespaceInfo { nsid, block_size, blocks: ns.nsze, nguid: ns.nguid, uuid, anagrpid: ns.anagrpid });
        }
        let new: HashMap<u32, NamespaceInfo> = out.iter().map(|n| (n.nsid, *n)).collect();
        let mut table = self.namespaces.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *table != new;
        *table = new;
        Ok((out, changed))
    }

    pub(super) fn bump_namespace_generation(&self) {
        let mut g = self.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner);
        *g += 1;
        self.namespace_changed.notify_all();
    }

    /// Put `count` Asynchronous Event Requests on the admin queue, completing to the supervisor.
    pub(super) fn arm_aers(&self, count: usize) {
        let inbox: Arc<dyn CompletionSink> = self.supervision.clone();
        for _ in 0..count {
            let request = Request {
                sqe: AsyncEventRequest.to_sqe(),
                data: Vec::new(),
                direction: DataDirection::None,
                context: (),
            };
            if let Err(e) = self.admin.submit_unheld_to_sink(request, &inbox, 0) {
                tracing::warn!(error = %e, "submitting an Asynchronous Event Request");
            }
        }
    }

    /// An Asynchronous Event Request completed: handle the event and re-arm. Failed requests (the
    /// association went away) are re-armed by the reconnect instead.
    pub(super) fn on_event(&self, reply: &Reply) {
        let cqe = match &reply.result {
            Ok(cqe) if cqe.status.is_success() => cqe,
            Ok(cqe) => return tracing::debug!(status = %cqe.status, "Asynchronous Event Request ended"),
            Err(e) => return tracing::debug!(error = %e, "Asynchronous Event Request ended"),
        };
        match AsyncEvent::from_dw0(cqe.dw0) {
            Ok(event) if event == AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED => {
                if let Err(e) = self.namespace_change() {
                    tracing::warn!(error = %e, "handling a Namespace Attribute Changed event");
                }
            }
            Ok(event) if event == AsyncEvent::ANA_CHANGE => self.refresh_ana_logged(),
            Ok(event) => tracing::info!(?event, "asynchronous event"),
            Err(e) => tracing::warn!(error = %e, dw0 = cqe.dw0, "unknown asynchronous event"),
        }
        self.arm_aers(1);
    }

    /// Read the Changed Namespace List (clearing the event), rescan and tell the waiters.
    fn namespace_change(&self) -> Result<(), HostError> {
        let size = CHANGED_NAMESPACE_LIST_SIZE as u64;
        let sqe = GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, u32::MAX, size)
            .map_err(|e| HostError::wire("Get Log Page (Changed Namespace List)", e))?
            .to_sqe();
        let log = self.admin_command(
            Hold::Never,
            "Get Log Page (Changed Namespace List)",
            sqe,
            DataDirection::ControllerToHost,
            vec![0; CHANGED_NAMESPACE_LIST_SIZE],
        )?;
        let changed =
            ChangedNamespaceList::parse(&log.data).map_err(|e| HostError::wire("Changed Namespace List", e))?;
        tracing::info!(?changed, "namespace attributes changed; rescanning");
        self.scan_namespaces()?;
        self.bump_namespace_generation();
        Ok(())
    }
}

impl Controller {
    /// Bumped each time the namespace table changes under the caller (a Namespace Attribute Changed event,
    /// or a rescan after a reconnect that found other namespaces).
    pub fn namespace_generation(&self) -> u64 {
        *self.inner.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait up to `timeout` for [`Controller::namespace_generation`] to move past `seen`; returns the
    /// generation then (still `seen` on timeout).
    pub fn wait_namespace_change(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.inner.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner);
        let (g, _) = self
            .inner
            .namespace_changed
            .wait_timeout_while(g, timeout, |g| *g == seen)
            .unwrap_or_else(PoisonError::into_inner);
        *g
    }

    /// The active namespaces (Identify CNS 02h, then CNS 00h and 03h for each); refreshes the namespace
    /// table the I/O wrappers use.
    pub fn namespaces(&self) -> Result<Vec<NamespaceInfo>, HostError> {
        self.inner.scan_namespaces().map(|(list, _)| list)
    }

    /// The namespaces as of the last scan (no command sent).
    pub fn known_namespaces(&self) -> Vec<NamespaceInfo> {
        let mut list: Vec<NamespaceInfo> =
            self.inner.namespaces.read().unwrap_or_else(PoisonError::into_inner).values().copied().collect();
        list.sort_by_key(|n| n.nsid);
        list
    }

    pub(super) fn namespace(&self, nsid: u32) -> Result<NamespaceInfo, HostError> {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&nsid)
            .copied()
            .ok_or_else(|| HostError::InvalidRequest(format!("namespace {nsid} is not active on this controller")))
    }
}
