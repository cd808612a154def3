//! Admin command dispatch: Keep Alive, Abort, Asynchronous Event Request (held until an event occurs), Get and
//! Set Features, and the commands that return data (Identify, Get Log Page), which run once a buffer is
//! available. The answers themselves are built by the controller's `admin` module.

use nvmf_common::nvme::admin::AbortResult;
use nvmf_common::nvme::opcode::{admin as admin_op, FABRICS};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{Plan, Queue, SlotId, SlotState, Step};
use crate::backend::IoEngine;
use crate::controller::admin::{self, AdminContext};
use crate::controller::association::AERL;
use crate::controller::io::{self, Direction};

impl Queue {
    fn admin_context(&self) -> Option<AdminContext<'_>> {
        Some(AdminContext {
            target: &self.target,
            controller: self.controller()?,
            transport: &self.transport,
            table: &self.table,
        })
    }

    pub(super) fn admin_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        if sqe.opcode == FABRICS {
            return self.fabrics_command(engine, id, sqe, true);
        }
        if let Err(status) = io::check_flags(sqe) {
            return self.respond_err(engine, id, status, 0);
        }
        let Some(controller) = self.controller() else {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        };
        let discovery = controller.is_discovery();
        // Linux nvmet does not require a discovery controller to be enabled; I/O controllers must be.
        if !discovery && !controller.is_ready() {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        self.refresh_table();
        match sqe.opcode {
            admin_op::KEEP_ALIVE => self.respond_ok(engine, id, 0, 0, None),
            admin_op::ABORT if !discovery => {
                // Commands are never aborted: the host's timeout handling resets the association instead.
                self.respond_ok(engine, id, AbortResult { not_aborted: true }.to_dw0(), 0, None)
            }
            admin_op::ASYNC_EVENT_REQUEST => self.async_event_request(engine, id),
            admin_op::SET_FEATURES => {
                let result = match self.admin_context() {
                    Some(ctx) => admin::set_features(&ctx, sqe),
                    None => Err(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
                };
                self.respond(engine, id, result)
            }
            admin_op::IDENTIFY | admin_op::GET_LOG_PAGE | admin_op::GET_FEATURES => {
                let is_host_id = sqe.opcode == admin_op::GET_FEATURES
                    && sqe.cdw10 & 0xff == u32::from(nvmf_common::nvme::features::fid::HOST_IDENTIFIER);
                if sqe.opcode == admin_op::GET_FEATURES && !is_host_id {
                    let result = match self.admin_context() {
                        Some(ctx) => admin::get_features(&ctx, sqe),
                        None => Err(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
                    };
                    return self.respond(engine, id, result);
                }
                let sgl_len = match io::data_source(sqe, self.transport.trtype, Direction::ToHost, in_capsule.len()) {
                    Ok((_, len)) => len,
                    Err(status) => return self.respond_err(engine, id, status, 0),
                };
                let len = match self.admin_context().map(|ctx| admin::output_len(&ctx, sqe, sgl_len)) {
                    Some(Ok(Some(len))) => len,
                    Some(Ok(None)) | None => {
                        return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
                    }
                    Some(Err(status)) => return self.respond_err(engine, id, status, 0),
                };
                self.slot(id).plan = Plan::AdminOutput { len };
                self.admin_output(engine, id)
            }
            _ => self.respond_err(engine, id, Status::INVALID_OPCODE.with_dnr(), 0),
        }
    }

    /// Run an admin command that returns data, once a buffer is available.
    pub(super) fn admin_output(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        let Plan::AdminOutput { len } = s.plan else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        self.slot(id).buffer = Some(buffer);
        let result = match self.admin_context() {
            Some(ctx) => admin::execute_with_output(&ctx, &s.sqe, engine.buffer_mut(buffer)),
            None => Err(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
        };
        match result {
            Ok(dw0) => self.respond_ok(engine, id, dw0, 0, Some((buffer, len))),
            Err(status) => self.respond_err(engine, id, status, 0),
        }
    }

    fn async_event_request(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Some(controller) = self.controller().cloned() else {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        };
        let event = {
            let mut state = controller.lock();
            controller.take_event_locked(&mut state)
        };
        if let Some(event) = event {
            return self.respond_ok(engine, id, event.to_dw0(), 0, None);
        }
        if self.held_aers.len() > usize::from(AERL) {
            return self.respond_err(engine, id, Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED.with_dnr(), 0);
        }
        self.slot(id).state = SlotState::HeldAer;
        self.held_aers.push_back(id.0);
        Step::Pending
    }
}
