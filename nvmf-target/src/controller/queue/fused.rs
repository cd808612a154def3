//! The fused Compare and Write (NVM command set): a Compare (FUSE first) and a Write (FUSE second) of the same
//! range, one right after the other on the queue. Each gets its host data in; once both have it, the Write's slot
//! carries one storage op that compares and writes atomically on the storage
//! ([`IoEngine::push_compare_and_write`]). Both commands are answered when it ends: success and success; a
//! miscompare: Compare Failure and Command Aborted due to Failed Fused Command; another error: that status and
//! Failed Fused.
//!
//! The pairing is `Queue::fused`: a first not followed by its second, or a second with no first before it, is
//! aborted with Missing Fused Command; a first that fails aborts its second with Failed Fused Command, and a second
//! that fails (or names another range: Invalid Field for both) aborts its first. A command whose operation ended
//! while it still waited for its data or a buffer is answered when those come.

use nvmf_common::nvme::Status;

use super::{storage_tag, Plan, Queue, SlotId, SlotState, Step};
use crate::backend::IoEngine;

impl Queue {
    /// Pair the second command `second` with its operation's `first` (both planned): they must name the same
    /// namespace and range, else both fail with Invalid Field (the first through [`Queue::settle_fused`], the
    /// second with the returned status).
    pub(super) fn pair_fused(&mut self, first: SlotId, second: SlotId) -> Result<(), Status> {
        let range = |plan: Plan| match plan {
            Plan::FusedCompare { nsid, offset, len } | Plan::FusedWrite { nsid, offset, len } => {
                Some((nsid, offset, len))
            }
            _ => None,
        };
        let (a, b) = (range(self.slot(first).plan), range(self.slot(second).plan));
        if a.is_none() || a != b {
            self.settle_fused(first, Status::INVALID_FIELD.with_dnr());
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        self.slot(first).partner = Some(second.0);
        self.slot(second).partner = Some(first.0);
        Ok(())
    }

    /// A fused command's host data is in: wait for the other command, or (both in) push the operation's op.
    pub(super) fn fused_data_in(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        if !s.status.is_success() {
            // Its operation ended while the data came in.
            return self.respond_err(engine, id, s.status, 0);
        }
        self.slot(id).state = SlotState::FusedWait;
        let Some(partner) = s.partner.map(SlotId) else { return Step::Pending };
        if self.slot(partner).state != SlotState::FusedWait {
            return Step::Pending;
        }
        let second = if matches!(s.plan, Plan::FusedWrite { .. }) { id } else { partner };
        self.submit_ops(engine, second)
    }

    /// Push the Compare and Write of the operation whose second command is `id` (parked while the engine is full).
    pub(super) fn submit_compare_and_write(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        let compare = s.partner.and_then(|first| self.slots[usize::from(first)].buffer);
        let (Plan::FusedWrite { nsid, offset, len }, Some(write), Some(compare)) = (s.plan, s.buffer, compare) else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let tag = storage_tag(self.transport.queue_key, id);
        let pushed = match self.table.get(nsid) {
            Some(ns) => engine.push_compare_and_write(tag, ns.storage(), (offset, len), compare, write),
            None => return self.respond_err(engine, id, Status::INVALID_NAMESPACE.with_dnr(), 0),
        };
        if pushed.is_err() {
            return self.park(id, SlotState::NeedSubmit);
        }
        let slot = self.slot(id);
        slot.state = SlotState::Executing;
        slot.ops += 1;
        self.storage_ops += 1;
        Step::Pending
    }

    /// The operation's op ended (`id` its second command): answer the second now, the first at the next poll.
    pub(super) fn compare_and_write_done(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        self.slot(id).partner = None;
        if let Some(first) = s.partner.map(SlotId) {
            self.settle_fused(first, s.status);
        }
        match s.plan {
            Plan::FusedWrite { .. } if s.status.is_success() => self.respond_ok(engine, id, 0, 0, None),
            _ => self.respond_err(engine, id, Status::ABORTED_FAILED_FUSED.with_dnr(), 0),
        }
    }

    /// End fused command `id`'s part in its operation with `status` (success too): answered at the next poll if
    /// its data is in, else once its data or buffer comes.
    pub(super) fn settle_fused(&mut self, id: SlotId, status: Status) {
        let s = self.slot(id);
        s.partner = None;
        if s.status.is_success() {
            s.status = status;
        }
        if s.state == SlotState::FusedWait {
            self.park(id, SlotState::NeedRespond);
        }
    }

    /// A settled fused command's answer ([`SlotState::NeedRespond`]).
    pub(super) fn respond_fused(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let status = self.slot(id).status;
        if status.is_success() {
            self.respond_ok(engine, id, 0, 0, None)
        } else {
            self.respond_err(engine, id, status, 0)
        }
    }
}
