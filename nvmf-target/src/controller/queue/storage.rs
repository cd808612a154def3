//! The storage ops of a planned command: which op each step of a [`Plan`] is, pushing them to the engine's ring
//! (parking the command while the ring is full), and finishing the command once all have completed.

use nvmf_common::nvme::io::NSID_ALL;
use nvmf_common::nvme::Status;

use super::{storage_tag, Plan, Queue, Slot, SlotId, SlotState, Step};
use crate::backend::{BufferId, IoEngine, IoOp, Payload, Work, WorkPool};
use crate::controller::Target;

impl Queue {
    /// The storage op at `cursor` of `s`'s plan: (next cursor, NSID, op, buffer), or `None` when the plan has
    /// no more ops.
    fn op_at(&self, engine: &IoEngine, s: &Slot) -> Option<(u32, u32, IoOp, Option<BufferId>)> {
        let cursor = s.cursor;
        // Flush of one namespace per volatile-cache namespace from `cursor` on (table index).
        let next_cached = |from: u32| {
            let start = usize::try_from(from).ok()?;
            self.table
                .iter()
                .enumerate()
                .skip(start)
                .find(|(_, ns)| ns.storage().volatile_write_cache())
                .map(|(i, ns)| (u32::try_from(i + 1).unwrap_or(u32::MAX), ns.nsid(), IoOp::Flush, None))
        };
        match s.plan {
            Plan::Read { nsid, offset, len } if cursor == 0 => Some((1, nsid, IoOp::Read { offset, len }, s.buffer)),
            Plan::Write { nsid, offset, len, fua } if cursor == 0 => {
                Some((1, nsid, IoOp::Write { offset, len, fua }, s.buffer))
            }
            Plan::Compare { nsid, offset, len } if cursor == 0 => Some((1, nsid, IoOp::Read { offset, len }, s.aux)),
            Plan::Flush { nsid: NSID_ALL } | Plan::Shutdown => next_cached(cursor),
            Plan::Flush { nsid } if cursor == 0 => {
                let cached = self.table.get(nsid).is_some_and(|ns| ns.storage().volatile_write_cache());
                cached.then_some((1, nsid, IoOp::Flush, None))
            }
            Plan::WriteZeroes { nsid, offset, len, .. } if cursor == 0 && s.stage == 0 => {
                Some((1, nsid, IoOp::WriteZeroes { offset, len }, None))
            }
            Plan::WriteZeroes { nsid, .. } if cursor == 0 => Some((1, nsid, IoOp::Flush, None)),
            Plan::Dsm { nsid, dsm, list_len } if dsm.ad => {
                let ns = self.table.get(nsid)?;
                if !ns.storage().supports_discard() {
                    return None;
                }
                let list = engine.buffer(s.buffer?);
                let ranges = dsm.ranges(list.get(..list_len as usize)?).ok()?;
                let shift = ns.block_shift();
                ranges.enumerate().skip(usize::try_from(cursor).ok()?).find(|(_, r)| r.length > 0).map(|(i, r)| {
                    let op = IoOp::Discard { offset: r.slba << shift, len: u64::from(r.length) << shift };
                    (u32::try_from(i + 1).unwrap_or(u32::MAX), nsid, op, None)
                })
            }
            _ => None,
        }
    }

    /// Hand `payload` to the target's `pool` to run `work` on as `id`'s one op: its completion comes as a storage op's
    /// (by the slot's storage tag) and the caller takes the payload back with `take_offloaded`. When the pool's queue
    /// is full the command parks on the retry list with its payload, which [`Queue::take_parked`] gives back.
    pub(super) fn offload(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        pool: fn(&Target) -> &WorkPool,
        payload: Payload,
        work: Work,
    ) -> Step {
        let tag = storage_tag(self.transport.queue_key, id);
        match engine.offload(pool(&self.target), tag, payload, work) {
            Ok(()) => {
                let s = self.slot(id);
                s.state = SlotState::Executing;
                s.ops += 1;
                self.storage_ops += 1;
                Step::Pending
            }
            Err(payload) => {
                self.parked_offloads.push((id.0, payload));
                self.park(id, SlotState::NeedSubmit)
            }
        }
    }

    /// The payload [`Queue::offload`] parked for `id`, if it is `T`.
    pub(super) fn take_parked<T: 'static>(&mut self, id: SlotId) -> Option<Box<T>> {
        let i = self.parked_offloads.iter().position(|(slot, _)| *slot == id.0)?;
        self.parked_offloads.swap_remove(i).1.downcast().ok()
    }

    /// Push the plan's remaining storage ops; parks the command when the ring is full, finishes it when there
    /// is nothing (left) to wait for.
    pub(super) fn submit_ops(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let index = usize::from(id.0);
        match self.slots[index].plan {
            Plan::FusedWrite { .. } => return self.submit_compare_and_write(engine, id),
            Plan::AuthenticationStep => return self.resubmit_authentication_step(engine, id),
            Plan::ReservationWrite => return self.resubmit_state_write(engine, id),
            _ => {}
        }
        self.slots[index].state = SlotState::Executing;
        while let Some((next, nsid, op, buffer)) = self.op_at(engine, &self.slots[index]) {
            let Some(ns) = self.table.get(nsid) else {
                let s = &mut self.slots[index];
                if s.status.is_success() {
                    s.status = Status::INVALID_NAMESPACE.with_dnr();
                }
                break;
            };
            let tag = storage_tag(self.transport.queue_key, id);
            if engine.push(tag, ns.storage(), op, buffer).is_err() {
                return self.park(id, SlotState::NeedSubmit);
            }
            let s = &mut self.slots[index];
            s.ops += 1;
            s.cursor = next;
            self.storage_ops += 1;
        }
        if self.slots[index].ops == 0 {
            self.ops_done(engine, id)
        } else {
            Step::Pending
        }
    }

    /// Every storage op of the plan completed: finish the command.
    pub(super) fn ops_done(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        match s.plan {
            Plan::FusedWrite { .. } => return self.compare_and_write_done(engine, id),
            // Before the status: a failed step ends the transaction too.
            Plan::AuthenticationStep => return self.authentication_step_done(engine, id),
            Plan::ReservationWrite => return self.state_write_done(engine, id),
            _ => {}
        }
        if !s.status.is_success() {
            if s.plan == Plan::Shutdown {
                // The host only waits for CSTS.SHST; report the shutdown complete and the error in the log.
                if let Some(c) = self.controller() {
                    c.shutdown_complete();
                }
            }
            return self.respond_err(engine, id, s.status, 0);
        }
        match s.plan {
            Plan::Read { len, .. } => match s.buffer {
                Some(buffer) => self.respond_ok(engine, id, 0, 0, Some((buffer, len))),
                None => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
            },
            Plan::Write { .. } => self.respond_ok(engine, id, 0, 0, None),
            Plan::Compare { len, .. } => {
                let same = match (s.buffer, s.aux) {
                    (Some(host), Some(media)) => {
                        let n = len as usize;
                        engine.buffer(host).get(..n).is_some_and(|h| Some(h) == engine.buffer(media).get(..n))
                    }
                    _ => false,
                };
                if same {
                    self.respond_ok(engine, id, 0, 0, None)
                } else {
                    self.respond_err(engine, id, Status::COMPARE_FAILURE.with_dnr(), 0)
                }
            }
            Plan::WriteZeroes { flush_after: true, .. } if s.stage == 0 => {
                let slot = self.slot(id);
                slot.stage = 1;
                slot.cursor = 0;
                self.submit_ops(engine, id)
            }
            Plan::WriteZeroes { .. } => self.respond_ok(engine, id, 0, 0, None),
            Plan::Shutdown => {
                if let Some(c) = self.controller() {
                    c.shutdown_complete();
                }
                self.respond_ok(engine, id, 0, 0, None)
            }
            Plan::Flush { .. } | Plan::Dsm { .. } => self.respond_ok(engine, id, 0, 0, None),
            Plan::None
            | Plan::Connect
            | Plan::AdminOutput { .. }
            | Plan::AuthenticationSend { .. }
            | Plan::AuthenticationReceive { .. }
            | Plan::AuthenticationStep
            | Plan::Reservation { .. }
            | Plan::ReservationWrite
            | Plan::ReservationReport { .. }
            | Plan::FusedCompare { .. }
            | Plan::FusedWrite { .. } => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
        }
    }
}
