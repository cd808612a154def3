//! One command slot of an [`super::RdmaQueue`]: where its command is ([`RdmaCommandState`]), what it carries,
//! and the check a response must pass before it may complete the command ([`Slot::accept_response`]). Plain
//! data, no verbs: the queue owns the memory and the posting.

use std::time::Instant;

use nvmf_common::nvme::CompletionQueueEntry;

use crate::queue::DataDirection;

/// Where a command is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaCommandState {
    /// The slot is free.
    Free,
    /// Staged by `submit`; its capsule is posted by the next `poll`.
    Staged,
    /// Capsule posted; waiting for the SEND completion and the response.
    Outstanding,
    /// Response received; waiting for the local invalidate of the command's window (and the SEND completion).
    Invalidating,
}

#[derive(Debug)]
pub(super) struct Slot<T> {
    pub(super) state: RdmaCommandState,
    pub(super) generation: u16,
    pub(super) context: Option<T>,
    pub(super) data: Vec<u8>,
    pub(super) direction: DataDirection,
    pub(super) in_capsule: bool,
    /// The window rkey handed to the controller, while the window may be bound.
    pub(super) rkey: Option<u32>,
    pub(super) sent: bool,
    pub(super) response: Option<CompletionQueueEntry>,
    /// When its capsule was posted (the command timeout counts from there).
    pub(super) submitted: Instant,
    /// Whether the command timeout applies (not to an Asynchronous Event Request).
    pub(super) timed: bool,
}

impl<T> Slot<T> {
    /// A free slot.
    pub(super) fn new(now: Instant) -> Self {
        Slot {
            state: RdmaCommandState::Free,
            generation: 0,
            context: None,
            data: Vec::new(),
            direction: DataDirection::None,
            in_capsule: false,
            rkey: None,
            sent: false,
            response: None,
            submitted: now,
            timed: true,
        }
    }

    /// Take `cqe`, the response for this slot's command (whose CID the caller matched), which invalidated
    /// `invalidated_rkey` if any. Returns whether the command's window must still be invalidated locally; `Err`
    /// says how the response breaks NVMe/RDMA (the queue fails). A command takes one response: a second one,
    /// even while the first waits for the SEND completion, would replace the status the first one gave.
    pub(super) fn accept_response(
        &mut self,
        cqe: CompletionQueueEntry,
        invalidated_rkey: Option<u32>,
    ) -> Result<bool, String> {
        if self.state != RdmaCommandState::Outstanding {
            return Err(format!("response for CID {:#x} in state {:?}", cqe.cid, self.state));
        }
        if self.response.is_some() {
            return Err(format!("a second response for CID {:#x}", cqe.cid));
        }
        if let Some(rkey) = invalidated_rkey {
            if self.rkey != Some(rkey) {
                return Err(format!(
                    "CID {:#x}'s response invalidated rkey {rkey:#x}, not the command's ({:?})",
                    cqe.cid, self.rkey
                ));
            }
            self.rkey = None;
        }
        self.response = Some(cqe);
        if self.rkey.is_some() {
            self.state = RdmaCommandState::Invalidating;
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use nvmf_common::nvme::Status;

    use super::*;

    fn outstanding(rkey: Option<u32>) -> Slot<()> {
        Slot { state: RdmaCommandState::Outstanding, rkey, ..Slot::new(Instant::now()) }
    }

    #[test]
    fn a_second_response_before_the_send_completion_is_refused() {
        // The first response arrived before its SEND completion: the command waits, its status kept.
        let mut slot = outstanding(None);
        let error = CompletionQueueEntry::new(0x1001, Status::INTERNAL_ERROR);
        assert_eq!(slot.accept_response(error, None), Ok(false));
        let success = CompletionQueueEntry::new(0x1001, Status::SUCCESS);
        let refused = slot.accept_response(success, None).unwrap_err();
        assert!(refused.contains("second response"), "{refused}");
        assert_eq!(slot.response, Some(error), "the first response's status stands");
    }

    #[test]
    fn a_response_while_invalidating_is_refused() {
        let mut slot = outstanding(Some(0x77));
        let cqe = CompletionQueueEntry::new(0x2002, Status::SUCCESS);
        assert_eq!(slot.accept_response(cqe, None), Ok(true), "the window is still open: invalidate it");
        assert_eq!(slot.state, RdmaCommandState::Invalidating);
        assert!(slot.accept_response(cqe, Some(0x77)).is_err());
    }

    #[test]
    fn a_response_invalidating_another_rkey_is_refused() {
        let mut slot = outstanding(Some(0x77));
        let cqe = CompletionQueueEntry::new(0x3003, Status::SUCCESS);
        assert!(slot.accept_response(cqe, Some(0x78)).is_err());
        assert_eq!(slot.accept_response(cqe, Some(0x77)), Ok(false), "the right rkey closes the window");
        assert_eq!(slot.rkey, None);
    }

    #[test]
    fn a_response_for_a_staged_command_is_refused() {
        let mut slot = Slot::<()> { state: RdmaCommandState::Staged, ..Slot::new(Instant::now()) };
        assert!(slot.accept_response(CompletionQueueEntry::new(0x4004, Status::SUCCESS), None).is_err());
    }
}
