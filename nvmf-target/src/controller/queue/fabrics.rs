//! Fabrics commands on a connected queue: Property Get and Set (admin queue only; a CC write enables, resets or
//! shuts down the controller) and Disconnect (I/O queues only).

use nvmf_common::fabrics::disconnect::Disconnect;
use nvmf_common::fabrics::property::{Property, PropertyGet, PropertySet};
use nvmf_common::nvme::opcode::fctype;
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{Plan, Queue, SlotId, Step};
use crate::backend::IoEngine;
use crate::controller::association::{CcOutcome, Controller, VERSION};

impl Queue {
    pub(super) fn fabrics_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        admin: bool,
    ) -> Step {
        match sqe.fctype() {
            fctype::CONNECT => self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0),
            // Properties belong to the admin queue, Disconnect to I/O queues.
            fctype::PROPERTY_GET | fctype::PROPERTY_SET if !admin => {
                self.respond_err(engine, id, Status::INVALID_QUEUE_TYPE.with_dnr(), 0)
            }
            fctype::DISCONNECT if admin => self.respond_err(engine, id, Status::INVALID_QUEUE_TYPE.with_dnr(), 0),
            fctype::PROPERTY_GET => {
                let result = self.property_get(sqe);
                match result {
                    Ok((dw0, dw1)) => self.respond_ok(engine, id, dw0, dw1, None),
                    Err(status) => self.respond_err(engine, id, status, 0),
                }
            }
            fctype::PROPERTY_SET => self.property_set(engine, id, sqe),
            fctype::DISCONNECT => match Disconnect::from_sqe(sqe) {
                Ok(_) => {
                    tracing::debug!(qid = ?self.qid(), "Disconnect");
                    self.disconnect_slot = Some(id.0);
                    self.respond_ok(engine, id, 0, 0, None)
                }
                Err(_) => self.respond_err(engine, id, Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr(), 0),
            },
            _ => self.respond_err(engine, id, Status::INVALID_OPCODE.with_dnr(), 0),
        }
    }

    fn property_get(&self, sqe: &SubmissionQueueEntry) -> Result<(u32, u32), Status> {
        let invalid = Status::INVALID_FIELD.with_dnr();
        let get = PropertyGet::from_sqe(sqe).map_err(|_| invalid)?;
        let property = get.property().map_err(|_| invalid)?;
        let controller = self.controller().ok_or(Status::COMMAND_SEQUENCE_ERROR.with_dnr())?;
        let value = match property {
            Property::Cap => Controller::cap(self.target.params().max_queue_entries).to_u64(),
            Property::Vs => u64::from(VERSION.to_u32()),
            Property::Cc => u64::from(controller.cc().to_u32()),
            Property::Csts => u64::from(controller.csts().to_u32()),
            Property::Nssr => 0,
        };
        Ok(get.result_dwords(value))
    }

    fn property_set(&mut self, engine: &mut IoEngine, id: SlotId, sqe: &SubmissionQueueEntry) -> Step {
        let invalid = Status::INVALID_FIELD.with_dnr();
        let set = match PropertySet::from_sqe(sqe).and_then(|s| s.property().map(|p| (s, p))) {
            Ok((set, Property::Cc)) => set,
            // NSSR: NVM subsystem reset is not supported (CAP.NSSRS clear).
            Ok(_) | Err(_) => return self.respond_err(engine, id, invalid, 0),
        };
        let Some(controller) = self.controller().cloned() else {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        };
        match controller.set_cc(set.value32()) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok(CcOutcome::Done) => self.respond_ok(engine, id, 0, 0, None),
            Ok(CcOutcome::Shutdown) => {
                self.refresh_table();
                self.slot(id).plan = Plan::Shutdown;
                self.submit_ops(engine, id)
            }
        }
    }
}
