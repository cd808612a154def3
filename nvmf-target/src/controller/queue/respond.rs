//! Completing a command: its completion queue entry, its count in the queue's metrics, the Error Information
//! log entry of a failure, and the slot's move to `Responding`.

use nvmf_common::nvme::log_page::ErrorInformationEntry;
use nvmf_common::nvme::opcode::{fctype, FABRICS};
use nvmf_common::nvme::{CompletionQueueEntry, Status};

use super::{Fused, Plan, Queue, QueueState, SlotId, SlotState, Step};
use crate::backend::{BufferId, IoEngine, TurnClock};
use crate::counters::{CommandKind, Completed};

impl Queue {
    fn cqe(&self, id: SlotId, status: Status, dw0: u32, dw1: u32) -> CompletionQueueEntry {
        let s = &self.slots[usize::from(id.0)];
        let sqid = match self.qid() {
            Some(q) => q,
            // Before Connect: the queue a Connect asks for.
            None if s.sqe.opcode == FABRICS && s.sqe.fctype() == fctype::CONNECT => {
                u16::try_from(s.sqe.cdw10 >> 16).unwrap_or(0)
            }
            None => 0,
        };
        CompletionQueueEntry { dw0, dw1, sqhd: self.sq_head, sqid, cid: s.sqe.cid, phase: false, status }
    }

    /// Count a completing command in the queue's counters (after a namespace's first command: no lock, no
    /// allocation).
    fn count(&mut self, clock: &mut TurnClock, id: SlotId, status: Status) {
        let s = &self.slots[usize::from(id.0)];
        let io = self.counters.is_io();
        let (bytes_read, bytes_written) = match s.plan {
            Plan::Read { len, .. } if status.is_success() => (u64::from(len), 0),
            Plan::Write { len, .. } | Plan::FusedWrite { len, .. } if status.is_success() => (0, u64::from(len)),
            _ => (0, 0),
        };
        let completed = Completed {
            kind: CommandKind::of(&s.sqe, io),
            nsid: io.then_some(s.sqe.nsid),
            latency: s.arrival.map(|t| clock.completion().saturating_duration_since(t)),
            bytes_read,
            bytes_written,
            status,
        };
        let table = &self.table;
        self.counters.record(&completed, |nsid| table.get(nsid).is_some());
    }

    pub(super) fn respond_ok(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        dw0: u32,
        dw1: u32,
        data: Option<(BufferId, u32)>,
    ) -> Step {
        self.count(engine.clock_mut(), id, Status::SUCCESS);
        let cqe = self.cqe(id, Status::SUCCESS, dw0, dw1);
        self.slot(id).state = SlotState::Responding;
        Step::Respond { slot: id, cqe, data }
    }

    pub(super) fn respond_err(&mut self, engine: &mut IoEngine, id: SlotId, status: Status, dw0: u32) -> Step {
        // A fused command that fails ends its operation.
        if let Some(partner) = self.slot(id).partner.take() {
            self.settle_fused(SlotId(partner), Status::ABORTED_FAILED_FUSED.with_dnr());
        }
        if self.fused == Fused::First(id.0) {
            self.fused = Fused::Refused;
        }
        self.release_buffers(engine, id);
        self.count(engine.clock_mut(), id, status);
        let cqe = self.cqe(id, status, dw0, 0);
        let sqe = self.slot(id).sqe;
        self.slot(id).state = SlotState::Responding;
        let (opcode, cid, nsid) = (sqe.opcode, sqe.cid, sqe.nsid);
        tracing::debug!(%status, opcode, cid, nsid, qid = ?self.qid(), "command failed");
        if let QueueState::Connected(a) = &self.state {
            a.controller.record_error(ErrorInformationEntry {
                sqid: cqe.sqid,
                cid: cqe.cid,
                status,
                parameter_error_location: 0xFFFF,
                nsid: sqe.nsid,
                trtype: self.transport.trtype.to_u8(),
                opcode: sqe.opcode,
                ..ErrorInformationEntry::default()
            });
        }
        Step::Respond { slot: id, cqe, data: None }
    }

    pub(super) fn respond(&mut self, engine: &mut IoEngine, id: SlotId, result: Result<u32, Status>) -> Step {
        match result {
            Ok(dw0) => self.respond_ok(engine, id, dw0, 0, None),
            Err(status) => self.respond_err(engine, id, status, 0),
        }
    }
}
