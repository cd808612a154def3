//! A command's data buffers: allocation from the reactor's [`IoEngine`] pool within the queue's
//! [`BufferBudget`](crate::backend::BufferBudget) (parking the command on the retry list while the pool is empty or
//! the budget refuses), copies of in-capsule data, asking the transport for host data, retrying parked
//! commands, and giving the buffers back.

use nvmf_common::nvme::Status;

use super::connect::CONNECT_DATA_LEN;
use super::{Plan, Queue, SlotId, SlotState, Step};
use crate::backend::{AllocRefusal, BufferId, IoEngine};

impl Queue {
    pub(super) fn release_buffers(&mut self, engine: &mut IoEngine, id: SlotId) {
        let s = self.slot(id);
        let (buffer, aux) = (s.buffer.take(), s.aux.take());
        for b in [buffer, aux].into_iter().flatten() {
            engine.release_within(b, &mut self.budget);
        }
    }

    /// Park `id` on the retry list in `state`.
    pub(super) fn park(&mut self, id: SlotId, state: SlotState) -> Step {
        self.slot(id).state = state;
        self.retry.push_back(id.0);
        Step::Pending
    }

    /// A pool buffer of `len` bytes within the queue's budget, or the step to return: parked until a buffer is free
    /// (or the budget allows one), or failed if no buffer of the pool can ever hold `len` (MDTS configured above
    /// the engine's buffer size).
    pub(super) fn alloc(&mut self, engine: &mut IoEngine, id: SlotId, len: u32) -> Result<BufferId, Step> {
        match engine.alloc_within(len as usize, &mut self.budget) {
            Ok(buffer) => Ok(buffer),
            Err(AllocRefusal::TooLarge) => {
                tracing::error!(len, buffer_size = engine.buffer_size(), "transfer larger than the engine's buffers");
                Err(self.respond_err(engine, id, Status::INVALID_FIELD.with_dnr(), 0))
            }
            Err(refusal) => {
                if let AllocRefusal::Budget(limit) = refusal {
                    let slot = self.slot(id);
                    if !slot.budget_waited {
                        slot.budget_waited = true;
                        self.target.count_budget_wait(limit);
                    }
                }
                Err(self.park(id, SlotState::NeedBuffer))
            }
        }
    }

    /// Get a buffer of `len` for the host's data and ask the transport for it.
    pub(super) fn fetch_data(&mut self, engine: &mut IoEngine, id: SlotId, len: u32) -> Step {
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        let s = self.slot(id);
        s.buffer = Some(buffer);
        s.state = SlotState::AwaitingData;
        Step::FetchData { slot: id, cid: s.sqe.cid, buffer, len }
    }

    /// Copy in-capsule data into a pool buffer. Without a buffer the data cannot be kept: the command
    /// completes with Command Interrupted, which hosts retry.
    pub(super) fn take_in_capsule(&mut self, engine: &mut IoEngine, id: SlotId, data: &[u8]) -> Result<(), Step> {
        let buffer = match engine.alloc_within(data.len(), &mut self.budget) {
            Ok(buffer) => buffer,
            Err(refusal) => {
                tracing::debug!(len = data.len(), ?refusal, "no buffer for in-capsule data");
                if let AllocRefusal::Budget(limit) = refusal {
                    self.target.count_budget_wait(limit);
                }
                return Err(self.respond_err(engine, id, Status::COMMAND_INTERRUPTED, 0));
            }
        };
        engine.buffer_mut(buffer)[..data.len()].copy_from_slice(data);
        let s = self.slot(id);
        s.buffer = Some(buffer);
        s.has_data = true;
        Ok(())
    }

    /// A slot parked for a buffer: try again.
    pub(super) fn resume_buffer(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        self.slot(id).state = SlotState::Executing;
        match s.plan {
            Plan::AdminOutput { .. } => self.admin_output(engine, id),
            Plan::Read { .. } => self.start_read(engine, id),
            Plan::Compare { .. } if s.has_data => self.start_compare_read(engine, id),
            Plan::Connect => self.fetch_data(engine, id, CONNECT_DATA_LEN),
            Plan::AuthenticationSend { len } => self.fetch_data(engine, id, len),
            Plan::AuthenticationReceive { .. } => self.authentication_output(engine, id),
            Plan::Write { len, .. } | Plan::Compare { len, .. } => self.fetch_data(engine, id, len),
            // Its operation ended while it waited for a buffer.
            Plan::FusedCompare { .. } | Plan::FusedWrite { .. } if !s.status.is_success() => {
                self.respond_err(engine, id, s.status, 0)
            }
            Plan::FusedCompare { len, .. } | Plan::FusedWrite { len, .. } => self.fetch_data(engine, id, len),
            Plan::Dsm { list_len, .. } => self.fetch_data(engine, id, list_len),
            Plan::Reservation { len, .. } => self.fetch_data(engine, id, len),
            Plan::ReservationReport { .. } => self.reservation_report(engine, id),
            _ => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
        }
    }
}
