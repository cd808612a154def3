//! Holding I/O while the controller reconnects: the policy a recovering queue follows ([`Recovery`], the
//! controller's supervision implements it), which failures mean the connection lost a command
//! (`transport_loss`), and what a command keeps to be resubmitted (`Retry`).

use std::sync::Arc;
use std::task::{Context, Poll};

use nvmf_common::nvme::SubmissionQueueEntry;

use super::{Reply, Slot};
use crate::error::HostError;
use crate::queue::{DataDirection, Request};

/// What a queue of a reconnecting controller does with I/O its connection cannot carry (see the module
/// docs). Implemented by the controller's supervision state.
pub(crate) trait Recovery: Send + Sync + std::fmt::Debug {
    /// The link of queue `qid` in association `epoch` failed with `cause`: block until a newer association
    /// is live (`Ok`: resubmit there) or the I/O must fail (the error to fail it with).
    fn hold(&self, qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError>;
    /// [`Recovery::hold`] without blocking: `Pending` after arranging for `cx`'s task to be woken when the
    /// answer may have changed.
    fn poll_hold(&self, qid: u16, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>>;
    /// A link of a recovering queue failed, whether or not a command was in flight (called on its I/O thread:
    /// must not block).
    fn link_failed(&self);
}

/// Whether `e` means the connection was lost (so the command may be resubmitted on a new one), as opposed
/// to something wrong with the command itself.
pub(crate) fn transport_loss(e: &HostError) -> bool {
    matches!(
        e,
        HostError::Io { .. }
            | HostError::Pdu { .. }
            | HostError::Protocol { .. }
            | HostError::TermReq { .. }
            | HostError::Closed { .. }
            | HostError::Timeout { .. }
            | HostError::ShutDown { .. }
            | HostError::Rdma { .. }
    )
}

/// Why the connection lost the command `reply` answers, if it did (a command it lost may go to a new one).
pub(super) fn lost_cause(reply: &Reply) -> Option<HostError> {
    match &reply.result {
        Err(e) if transport_loss(e) => Some(e.clone()),
        _ => None,
    }
}

/// What a [`Pending`] (or a sink's [`Completed`]) of a recovering queue keeps to resubmit its command.
#[derive(Debug)]
pub(super) struct Retry {
    pub(super) slot: Arc<Slot>,
    pub(super) epoch: u64,
    pub(super) sqe: SubmissionQueueEntry,
    pub(super) direction: DataDirection,
}

impl Retry {
    /// `reply` of this command: `Ok` with the command to resubmit when the connection lost it (after
    /// holding until a newer association is live), `Err` with the reply to deliver (the recovery's error in
    /// it when the command must fail).
    #[expect(clippy::result_large_err, reason = "the reply goes back to the caller by value either way")]
    pub(super) fn recover(&self, reply: Reply) -> Result<Request<()>, Reply> {
        let Some(cause) = lost_cause(&reply) else { return Err(reply) };
        if let Err(e) = self.slot.hold(self.epoch, &cause) {
            return Err(Reply { result: Err(e), ..reply });
        }
        Ok(Request { sqe: self.sqe, data: reply.data, direction: self.direction, context: () })
    }
}

/// Why [`Slot::try_submit_via`] did not submit.
#[derive(Debug)]
pub(super) enum Refused {
    /// The command fails with this error; its buffer comes back.
    Failed(HostError, Vec<u8>),
    /// The controller is reconnecting: hold the request until association `epoch` (failed with `cause`) is
    /// replaced.
    Held { epoch: u64, cause: HostError, request: Request<()> },
}
