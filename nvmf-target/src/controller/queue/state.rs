//! The queue's association state: becoming connected (sizing the slot slab from SQSIZE, loading the namespace
//! table), noticing that the association ended, the SQ head pointer, and refreshing the cached namespace table.

use super::{index_of, Association, Queue, QueueError, QueueKind, QueueState, Slot};
use crate::backend::IoEngine;
use crate::controller::association::IoQueueRefusal;

impl Queue {
    pub(super) fn advance_sq_head(&mut self) {
        if let QueueState::Connected(a) = &self.state {
            let entries = u32::from(a.sqsize) + 1;
            self.sq_head = u16::try_from((u32::from(self.sq_head) + 1) % entries).unwrap_or(0);
        }
    }

    /// End the queue if its association ended (or, for an I/O queue, its controller was reset).
    pub(super) fn check_association(&mut self, engine: &mut IoEngine) -> Result<(), QueueError> {
        let QueueState::Connected(a) = &self.state else { return Ok(()) };
        let ended = a.controller.is_terminated() || (a.kind != QueueKind::Admin && a.controller.io_epoch() != a.epoch);
        if ended {
            let cntlid = a.controller.cntlid();
            tracing::debug!(cntlid, qid = ?self.qid(), "queue closing: association ended");
            self.disconnect(engine);
            return Err(QueueError::AssociationEnded { cntlid });
        }
        Ok(())
    }

    /// Refresh the cached namespace table if the subsystem's generation moved, and the listener's ANA states if
    /// the target's ANA generation moved.
    pub(super) fn refresh_table(&mut self) {
        let QueueState::Connected(a) = &self.state else { return };
        if self.target.ana_generation() != self.ana_generation {
            let (states, generation) = self.target.ana_port_with_generation(self.transport.port_id);
            self.ana = states;
            self.ana_generation = generation;
        }
        let subsystem = a.controller.subsystem();
        if subsystem.generation() != self.table_generation {
            let (table, generation) = subsystem.namespaces_with_generation();
            self.table = table;
            self.table_generation = generation;
        }
    }

    /// Become connected: size the slab from SQSIZE (once), load the namespace table; `authenticate`: the host must
    /// authenticate the queue before anything else.
    pub(super) fn establish(&mut self, association: Association, authenticate: bool) {
        let entries = usize::from(association.sqsize) + 1;
        let total = (entries * 2).min(usize::from(u16::MAX) + 1);
        let old = self.slots.len();
        if total > old {
            self.slots.reserve_exact(total - old);
            self.slots.resize(total, Slot::FREE);
            self.free.reserve(total - old);
            self.free.extend((old..total).rev().map(index_of));
            self.retry.reserve(total);
        }
        self.sq_head = index_of(1 % entries);
        let (table, generation) = association.controller.subsystem().namespaces_with_generation();
        self.table = table;
        self.table_generation = generation;
        let io = association.kind != QueueKind::Admin;
        self.counters.connect(association.controller.subsystem().metrics(), io);
        self.state = QueueState::Connected(association);
        self.require_authentication(authenticate);
        if !authenticate {
            self.admit_budget();
        }
    }

    /// Admitted to an NVM subsystem (connected, and authenticated if it must be), the queue leaves the anonymous
    /// share: until then a peer that knows a keyed host NQN but not its key is charged like any anonymous peer. A
    /// discovery controller, which any peer may open, stays in it with one buffer at a time (hosts read the discovery
    /// log one command at a time), so one peer cannot take the whole anonymous share.
    fn admit_budget(&mut self) {
        let QueueState::Connected(a) = &self.state else { return };
        let params = self.target.params();
        match a.controller.is_discovery() {
            true => self.budget.set_limits(1, params.queue_buffer_percent, Some(params.anonymous_buffer_percent)),
            false => self.budget.set_limits(u16::MAX, params.queue_buffer_percent, None),
        }
    }

    /// The queue's first transaction succeeded: it leaves the anonymous share and an I/O queue takes its QID, in the
    /// I/O epoch of its Connect. Err: the QID was taken meanwhile (by a queue that authenticated first) or the
    /// controller was reset; the queue must end.
    pub(super) fn authenticated(&mut self) -> Result<(), IoQueueRefusal> {
        let entry = match &self.state {
            QueueState::Connected(a) if !a.attached => match a.kind {
                QueueKind::Io(qid) => Some((self.queue_entry(qid, a.sqsize), a.epoch)),
                QueueKind::Admin => None,
            },
            _ => None,
        };
        if let Some((entry, epoch)) = entry {
            let QueueState::Connected(a) = &mut self.state else { return Ok(()) };
            a.controller.attach_io_queue(entry, Some(epoch))?;
            a.attached = true;
        }
        self.admit_budget();
        Ok(())
    }
}
