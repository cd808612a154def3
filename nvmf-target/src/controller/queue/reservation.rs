//! The reservation commands on an I/O queue (Reservation Register, Acquire, Release: 8 or 16 bytes of host
//! data, in the capsule or fetched; Reservation Report: the Reservation Status to the host), the per-I/O
//! reservation check, and telling the hosts a command's notices (Reservation Notification log entries and
//! their asynchronous events, to every controller of the host unless the namespace's mask hides them).
//!
//! The commands run on the reactor owning the queue; they take the namespace's reservation lock and, for the
//! notices, the subsystem's controller registry and each controller's mutex (never taken per I/O). A change the
//! namespace's state file must get (PTPL) is written by the target's state pool, off the reactor and outside the
//! reservation lock; the command completes when it is on disk (or fails with Internal Error, the state undone).

use std::any::Any;
use std::sync::Arc;

use nvmf_common::nvme::opcode::io as op;
use nvmf_common::nvme::reservation::{
    ReservationAcquire, ReservationKeys, ReservationRegister, ReservationRelease, ReservationReport, ACQUIRE_DATA_SIZE,
    REGISTER_DATA_SIZE, RELEASE_DATA_SIZE,
};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{storage_tag, Plan, Queue, SlotId, Step};
use crate::backend::IoEngine;
use crate::controller::io::{self, DataSource, Direction};
use crate::controller::reservation::{Access, Notices, StateWrite};
use crate::controller::subsystem::Namespace;
use crate::controller::Target;

/// A namespace's reservation state to write, on the target's state pool.
#[derive(Debug)]
pub(super) struct StateWriteStep {
    ns: Arc<Namespace>,
    write: StateWrite,
    result: Result<(), String>,
}

/// The state pool's work: write the state (blocks for the fsyncs, off the reactor).
fn run_state_write(payload: &mut (dyn Any + Send)) {
    if let Some(step) = payload.downcast_mut::<StateWriteStep>() {
        step.result = step.ns.reservations().write_state(&step.write).map_err(|e| e.to_string());
    }
}

fn invalid_field() -> Status {
    Status::INVALID_FIELD.with_dnr()
}

impl Queue {
    /// The reservation check of an I/O command on `ns` (one atomic load while no reservation is held).
    #[inline]
    pub(super) fn reservation_check(&self, ns: &Namespace, access: Access) -> Result<(), Status> {
        let Some(controller) = self.controller() else { return Ok(()) };
        let result = ns.reservations().check(controller.hostid_ref(), access);
        if result.is_err() {
            self.target.count_reservation_conflict();
        }
        result
    }

    /// A reservation command (opcode 0Dh, 0Eh, 11h or 15h) on an I/O queue.
    pub(super) fn reservation_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        match self.plan_reservation(sqe, in_capsule) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok((plan, source)) => {
                self.slot(id).plan = plan;
                match (plan, source) {
                    (Plan::ReservationReport { .. }, _) => self.reservation_report(engine, id),
                    (Plan::Reservation { len, .. }, Some(DataSource::InCapsule { offset })) => {
                        let mut data = [0u8; 16];
                        match in_capsule.get(offset..offset + len as usize) {
                            Some(d) => data[..d.len()].copy_from_slice(d),
                            None => return self.respond_err(engine, id, Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0),
                        }
                        self.execute_reservation(engine, id, &data)
                    }
                    (Plan::Reservation { len, .. }, _) => self.fetch_data(engine, id, len),
                    _ => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
                }
            }
        }
    }

    /// Validate a reservation command: the namespace, its ANA state, the command's fields and its SGL.
    fn plan_reservation(
        &self,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Result<(Plan, Option<DataSource>), Status> {
        let ns = self.table.get(sqe.nsid).ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
        self.ana.check(ns.ana_group())?;
        let trtype = self.transport.trtype;
        if sqe.opcode == op::RESERVATION_REPORT {
            let report = ReservationReport::from_sqe(sqe).map_err(|_| invalid_field())?;
            // Host identifiers are 128-bit: the regular data structure cannot carry them (nvmet answers the same).
            if !report.eds {
                return Err(Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT.with_dnr());
            }
            // NUMD shorter than the structure (its header included) gets that much of it: "only that specified
            // portion of the data structure is transferred" (Base 2.2 Figure 580; nvmet refuses one shorter than
            // the extended header with Invalid Field).
            let len = report.length_bytes();
            if len > u64::from(self.target.params().mdts) {
                return Err(invalid_field());
            }
            let (_, sgl_len) = io::data_source(sqe, trtype, Direction::ToHost, in_capsule.len())?;
            if u64::from(sgl_len) < len {
                return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
            }
            let len = u32::try_from(len).map_err(|_| invalid_field())?;
            return Ok((Plan::ReservationReport { nsid: sqe.nsid, len }, None));
        }
        let need = match sqe.opcode {
            op::RESERVATION_REGISTER => {
                ReservationRegister::from_sqe(sqe).map_err(|_| invalid_field())?;
                REGISTER_DATA_SIZE
            }
            op::RESERVATION_ACQUIRE => {
                // Ignore Existing Key is not defined for Acquire (nvmet: Invalid Field).
                if ReservationAcquire::from_sqe(sqe).map_err(|_| invalid_field())?.iekey {
                    return Err(invalid_field());
                }
                ACQUIRE_DATA_SIZE
            }
            op::RESERVATION_RELEASE => {
                if ReservationRelease::from_sqe(sqe).map_err(|_| invalid_field())?.iekey {
                    return Err(invalid_field());
                }
                RELEASE_DATA_SIZE
            }
            _ => return Err(Status::INVALID_OPCODE.with_dnr()),
        };
        let (source, sgl_len) = io::data_source(sqe, trtype, Direction::ToController, in_capsule.len())?;
        // The SGL may describe more than the data structure (as Dataset Management's range list).
        if (sgl_len as usize) < need {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
        }
        let len = u32::try_from(need).map_err(|_| invalid_field())?;
        Ok((Plan::Reservation { nsid: sqe.nsid, len }, Some(source)))
    }

    /// Register, Acquire or Release: the host data is in the slot's buffer.
    pub(super) fn reservation_data_ready(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        let (Plan::Reservation { len, .. }, Some(buffer)) = (s.plan, s.buffer) else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let mut data = [0u8; 16];
        let src = engine.buffer(buffer);
        let n = src.len().min(len as usize).min(16);
        data[..n].copy_from_slice(&src[..n]);
        self.release_buffers(engine, id);
        self.execute_reservation(engine, id, &data)
    }

    /// Run Register, Acquire or Release with its data (`data`: 16 bytes, Release's key in the first 8). When the
    /// namespace's state file must change (PTPL), the command completes once the target's state pool wrote it.
    fn execute_reservation(&mut self, engine: &mut IoEngine, id: SlotId, data: &[u8; 16]) -> Step {
        let sqe = self.slot(id).sqe;
        match self.reservation_update(&sqe, data) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok(None) => self.respond_ok(engine, id, 0, 0, None),
            Ok(Some(step)) => {
                self.slot(id).plan = Plan::ReservationWrite;
                self.offload_state_write(engine, id, Box::new(step))
            }
        }
    }

    fn reservation_update(
        &self,
        sqe: &SubmissionQueueEntry,
        data: &[u8; 16],
    ) -> Result<Option<StateWriteStep>, Status> {
        let controller = self.controller().ok_or(Status::COMMAND_SEQUENCE_ERROR.with_dnr())?;
        // The namespace may have been removed while the data was fetched.
        let ns = self.table.get(sqe.nsid).ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
        let hostid = controller.hostid_ref();
        let reservations = ns.reservations();
        let keys = ReservationKeys::parse(data).map_err(|_| invalid_field())?;
        let updated = match sqe.opcode {
            op::RESERVATION_REGISTER => {
                let c = ReservationRegister::from_sqe(sqe).map_err(|_| invalid_field())?;
                reservations.register_deferred(hostid, c.action, c.iekey, c.cptpl, keys)
            }
            op::RESERVATION_ACQUIRE => {
                let c = ReservationAcquire::from_sqe(sqe).map_err(|_| invalid_field())?;
                reservations.update_deferred(|state, notices| state.acquire(hostid, c.action, c.rtype, keys, notices))
            }
            op::RESERVATION_RELEASE => {
                let c = ReservationRelease::from_sqe(sqe).map_err(|_| invalid_field())?;
                let keys = ReservationKeys { second: 0, ..keys };
                reservations.update_deferred(|state, notices| state.release(hostid, c.action, c.rtype, keys, notices))
            }
            _ => Err(Status::INVALID_OPCODE.with_dnr()),
        };
        match updated {
            Ok((notices, write)) => {
                self.tell_hosts(ns, &notices);
                Ok(write.map(|write| StateWriteStep { ns: Arc::clone(ns), write, result: Ok(()) }))
            }
            Err(status) => {
                if status.same_code(Status::RESERVATION_CONFLICT) {
                    self.target.count_reservation_conflict();
                }
                if status.same_code(Status::INSUFFICIENT_CAPACITY) {
                    self.target.count_registrant_limit();
                }
                Err(status)
            }
        }
    }

    /// Hand `step` to the target's state pool.
    fn offload_state_write(&mut self, engine: &mut IoEngine, id: SlotId, step: Box<StateWriteStep>) -> Step {
        self.offload(engine, id, Target::state_pool, step, run_state_write)
    }

    /// A parked state write's retry (the queue's poll).
    pub(super) fn resubmit_state_write(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Some(step) = self.take_parked::<StateWriteStep>(id) else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        self.offload_state_write(engine, id, step)
    }

    /// The state pool wrote (or failed to write) `id`'s state: the command completes.
    pub(super) fn state_write_done(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let tag = storage_tag(self.transport.queue_key, id);
        let step = engine.take_offloaded(tag).and_then(|p| p.downcast::<StateWriteStep>().ok());
        match step.map(|s| s.result) {
            Some(Ok(())) => self.respond_ok(engine, id, 0, 0, None),
            failed => {
                let error = failed.and_then(Result::err).unwrap_or_else(|| "the write's thread failed".to_owned());
                tracing::error!(error, "reservation state not persisted; command failed");
                self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0)
            }
        }
    }

    /// Deliver notices to every controller of each host told (each controller's mask may hide them).
    fn tell_hosts(&self, ns: &Namespace, notices: &Notices) {
        if notices.is_empty() {
            return;
        }
        let Some(controller) = self.controller() else { return };
        let controllers = controller.subsystem().controllers();
        for notice in notices {
            for c in controllers.iter().filter(|c| c.hostid_ref() == &notice.hostid) {
                c.reservation_notice(notice.kind, ns.nsid());
            }
        }
    }

    /// Reservation Report, once a buffer is available.
    pub(super) fn reservation_report(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Plan::ReservationReport { nsid, len } = self.slot(id).plan else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let Some(ns) = self.table.get(nsid).cloned() else {
            return self.respond_err(engine, id, Status::INVALID_NAMESPACE.with_dnr(), 0);
        };
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        self.slot(id).buffer = Some(buffer);
        let status = ns.reservations().read().status();
        let out = engine.buffer_mut(buffer);
        let n = out.len().min(len as usize);
        status.encode(true, &mut out[..n]);
        self.respond_ok(engine, id, 0, 0, Some((buffer, len)))
    }
}
