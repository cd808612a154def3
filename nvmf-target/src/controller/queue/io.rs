//! I/O commands: their validation (flags, NSID, SGL against transfer length and in-capsule data, MDTS, LBA
//! range, the namespace's ANA state on the queue's listener, its reservations), the [`Plan`] each becomes, and
//! getting its host data in before it goes to storage.

use nvmf_common::nvme::io::{is_invalid_opcode, IoCommand, NSID_ALL};
use nvmf_common::nvme::opcode::FABRICS;
use nvmf_common::nvme::reservation::is_reservation_opcode;
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{Fused, Plan, Queue, SlotId, Step};
use crate::backend::IoEngine;
use crate::controller::io::{self, DataSource, Direction};
use crate::controller::reservation::Access;

impl Queue {
    pub(super) fn io_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        let fuse = sqe.fuse();
        // The command after a fused operation's first must be its second: otherwise the first is aborted.
        let fused = std::mem::take(&mut self.fused);
        if let (Fused::First(first), false) = (fused, fuse == io::FUSE_SECOND) {
            self.settle_fused(SlotId(first), Status::ABORTED_MISSING_FUSED.with_dnr());
        }
        if sqe.opcode == FABRICS {
            return self.fabrics_command(engine, id, sqe, false);
        }
        let first = match (fuse, fused) {
            (io::FUSE_SECOND, Fused::First(first)) => Some(SlotId(first)),
            (io::FUSE_SECOND, Fused::Refused) => {
                return self.respond_err(engine, id, Status::ABORTED_FAILED_FUSED.with_dnr(), 0)
            }
            (io::FUSE_SECOND, Fused::None) => {
                return self.respond_err(engine, id, Status::ABORTED_MISSING_FUSED.with_dnr(), 0)
            }
            _ => None,
        };
        let flags = if fuse == io::FUSE_NONE { io::check_flags(sqe) } else { io::check_data_pointer(sqe) };
        if let Err(status) = flags {
            return self.io_command_failed(engine, id, first, status);
        }
        self.refresh_table();
        if fuse == io::FUSE_NONE && is_reservation_opcode(sqe.opcode) {
            return self.reservation_command(engine, id, sqe, in_capsule);
        }
        let planned = IoCommand::from_sqe(sqe)
            .map_err(|e| if is_invalid_opcode(&e) { Status::INVALID_OPCODE } else { Status::INVALID_FIELD }.with_dnr())
            .and_then(|command| self.plan_io(sqe, &command, in_capsule));
        let (plan, source) = match planned {
            Ok(planned) => planned,
            Err(status) => return self.io_command_failed(engine, id, first, status),
        };
        self.slot(id).plan = plan;
        if fuse == io::FUSE_FIRST {
            self.fused = Fused::First(id.0);
        }
        if let Some(first) = first {
            if let Err(status) = self.pair_fused(first, id) {
                return self.respond_err(engine, id, status, 0);
            }
        }
        self.start_io(engine, id, source, in_capsule)
    }

    /// An I/O command failed validation: answer it; a fused operation's first is then refused (its second will be
    /// aborted), a second aborts its `first`.
    fn io_command_failed(&mut self, engine: &mut IoEngine, id: SlotId, first: Option<SlotId>, status: Status) -> Step {
        if self.slot(id).sqe.fuse() == io::FUSE_FIRST {
            self.fused = Fused::Refused;
        }
        if let Some(first) = first {
            self.settle_fused(first, Status::ABORTED_FAILED_FUSED.with_dnr());
        }
        self.respond_err(engine, id, status, 0)
    }

    /// Validate an I/O command (NSID, SGL against transfer length and in-capsule data, MDTS, LBA range) and
    /// decide its plan and where its data is. A fused command (FUSE first or second) must be a Compare or a Write
    /// within the namespace's atomic Compare and Write unit.
    fn plan_io(
        &self,
        sqe: &SubmissionQueueEntry,
        command: &IoCommand,
        in_capsule: &[u8],
    ) -> Result<(Plan, Option<DataSource>), Status> {
        let invalid_ns = Status::INVALID_NAMESPACE.with_dnr();
        let mdts = u64::from(self.target.params().mdts);
        let trtype = self.transport.trtype;
        // Read, Write and Compare: the SGL must describe exactly blocks × block size, within MDTS.
        let rw = |nsid: u32, slba: u64, blocks: u32, direction: Direction, access: Access| {
            let ns = self.table.get(nsid).ok_or(invalid_ns)?;
            self.ana.check(ns.ana_group())?;
            self.reservation_check(ns, access)?;
            let len = u64::from(blocks) << ns.block_shift();
            let (source, sgl_len) = io::data_source(sqe, trtype, direction, in_capsule.len())?;
            if u64::from(sgl_len) != len {
                return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
            }
            if len > mdts {
                return Err(Status::INVALID_FIELD.with_dnr());
            }
            let offset = io::lba_offset(ns, slba, u64::from(blocks))?;
            Ok((offset, sgl_len, source))
        };
        let write_through = !self.controller().is_some_and(|c| c.write_cache_enabled());
        // A fused operation's range: within what the namespace does atomically.
        let atomic = |nsid: u32, len: u32| {
            let ns = self.table.get(nsid).ok_or(invalid_ns)?;
            match ns.storage().compare_and_write_limit() {
                Some(limit) if len <= limit => Ok(()),
                Some(limit) if limit >= ns.block_size() => Err(Status::ATOMIC_WRITE_UNIT_EXCEEDED.with_dnr()),
                _ => Err(Status::INVALID_FIELD.with_dnr()),
            }
        };
        let fuse = sqe.fuse();
        Ok(match *command {
            IoCommand::Compare(c) if fuse == io::FUSE_FIRST => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController, Access::Read)?;
                atomic(c.nsid, len)?;
                (Plan::FusedCompare { nsid: c.nsid, offset, len }, Some(source))
            }
            IoCommand::Write(c) if fuse == io::FUSE_SECOND => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController, Access::Write)?;
                atomic(c.nsid, len)?;
                (Plan::FusedWrite { nsid: c.nsid, offset, len }, Some(source))
            }
            // The NVM command set's one fused operation is Compare then Write.
            _ if fuse != io::FUSE_NONE => return Err(Status::INVALID_FIELD.with_dnr()),
            IoCommand::Read(c) => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToHost, Access::Read)?;
                (Plan::Read { nsid: c.nsid, offset, len }, Some(source))
            }
            IoCommand::Write(c) => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController, Access::Write)?;
                (Plan::Write { nsid: c.nsid, offset, len, fua: c.fua || write_through }, Some(source))
            }
            IoCommand::Compare(c) => {
                // Compare reads the media: the read command group.
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController, Access::Read)?;
                (Plan::Compare { nsid: c.nsid, offset, len }, Some(source))
            }
            IoCommand::Flush(c) => {
                // Flush of every namespace (NSID FFFFFFFFh) is not checked against reservations (as nvmet, which
                // checks commands against the one namespace they name).
                if c.nsid != NSID_ALL {
                    let ns = self.table.get(c.nsid).ok_or(invalid_ns)?;
                    self.ana.check(ns.ana_group())?;
                    self.reservation_check(ns, Access::Write)?;
                }
                (Plan::Flush { nsid: c.nsid }, None)
            }
            IoCommand::WriteZeroes(c) => {
                let ns = self.table.get(c.nsid).ok_or(invalid_ns)?;
                self.ana.check(ns.ana_group())?;
                self.reservation_check(ns, Access::Write)?;
                if !ns.storage().supports_write_zeroes() {
                    return Err(Status::INVALID_OPCODE.with_dnr());
                }
                let offset = io::lba_offset(ns, c.slba, u64::from(c.blocks()))?;
                let len = u64::from(c.blocks()) << ns.block_shift();
                let flush_after = (c.fua || write_through) && ns.storage().volatile_write_cache();
                (Plan::WriteZeroes { nsid: c.nsid, offset, len, flush_after }, None)
            }
            IoCommand::DatasetManagement(c) => {
                let ns = self.table.get(c.nsid).ok_or(invalid_ns)?;
                self.ana.check(ns.ana_group())?;
                self.reservation_check(ns, Access::Write)?;
                let list_len = c.range_list_len();
                let (source, sgl_len) = io::data_source(sqe, trtype, Direction::ToController, in_capsule.len())?;
                // The SGL may describe more than the list (Linux nvmet: `nvmet_check_data_len_lte`).
                if (sgl_len as usize) < list_len {
                    return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
                }
                let list_len = u32::try_from(list_len).map_err(|_| Status::INVALID_FIELD.with_dnr())?;
                (Plan::Dsm { nsid: c.nsid, dsm: c, list_len }, Some(source))
            }
        })
    }

    /// Start a planned I/O command: get its data in (in-capsule copy or fetch) or go to storage.
    fn start_io(&mut self, engine: &mut IoEngine, id: SlotId, source: Option<DataSource>, in_capsule: &[u8]) -> Step {
        let plan = self.slot(id).plan;
        let data_len = match plan {
            Plan::Write { len, .. }
            | Plan::Compare { len, .. }
            | Plan::FusedCompare { len, .. }
            | Plan::FusedWrite { len, .. }
            | Plan::Dsm { list_len: len, .. } => len,
            Plan::Read { .. } => return self.start_read(engine, id),
            _ => return self.submit_ops(engine, id),
        };
        match source {
            Some(DataSource::InCapsule { offset }) => {
                let data = in_capsule.get(offset..offset + data_len as usize).unwrap_or_default();
                if let Err(step) = self.take_in_capsule(engine, id, data) {
                    return step;
                }
                match plan {
                    Plan::Compare { .. } => self.start_compare_read(engine, id),
                    Plan::FusedCompare { .. } | Plan::FusedWrite { .. } => self.fused_data_in(engine, id),
                    Plan::Dsm { .. } => self.dsm_ranges_ready(engine, id),
                    _ => self.submit_ops(engine, id),
                }
            }
            _ => self.fetch_data(engine, id, data_len),
        }
    }

    pub(super) fn start_read(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Plan::Read { len, .. } = self.slot(id).plan else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        self.slot(id).buffer = Some(buffer);
        self.submit_ops(engine, id)
    }

    /// Compare: host data is in; read the media into a second buffer.
    pub(super) fn start_compare_read(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Plan::Compare { len, .. } = self.slot(id).plan else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let aux = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        self.slot(id).aux = Some(aux);
        self.submit_ops(engine, id)
    }

    /// Dataset Management: the range list is in; check every range before deallocating any.
    pub(super) fn dsm_ranges_ready(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        let (Plan::Dsm { nsid, dsm, list_len }, Some(buffer)) = (s.plan, s.buffer) else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let Some(ns) = self.table.get(nsid) else {
            return self.respond_err(engine, id, Status::INVALID_NAMESPACE.with_dnr(), 0);
        };
        let list = engine.buffer(buffer);
        let list = list.get(..list_len as usize).unwrap_or(list);
        if let Err(status) = io::check_dsm_ranges(ns, &dsm, list) {
            return self.respond_err(engine, id, status, 0);
        }
        self.submit_ops(engine, id)
    }
}
