//! Reservations of a [`Controller`] (Register, Acquire, Release, Report: I/O commands, sent on an I/O queue) and
//! the I/O passthrough they go through: one typed command, waited for with the I/O timeout. A reservation
//! conflict is [`HostError::Status`] with [`Status::RESERVATION_CONFLICT`] ([`is_reservation_conflict`]).

use nvmf_common::nvme::reservation::{
    ReservationAcquire, ReservationKeys, ReservationRegister, ReservationRelease, ReservationReport, ReservationStatus,
    REGISTERED_CONTROLLER_EXT_SIZE, STATUS_EXT_HEADER_SIZE,
};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::association::finish;
use super::Controller;
use crate::error::HostError;
use crate::queue::handle::Reply;
use crate::queue::{DataDirection, Request};

/// The most bytes a Reservation Report may ask for: the extended header and 65535 registrants (NUMD is a dword
/// count, but no namespace has more registrants than a 16-bit count says).
pub const MAX_REPORT_BYTES: usize = STATUS_EXT_HEADER_SIZE + REGISTERED_CONTROLLER_EXT_SIZE * 65535;

/// Whether `error` is a command's Reservation Conflict status.
pub fn is_reservation_conflict(error: &HostError) -> bool {
    matches!(error, HostError::Status { status, .. } if status.same_code(Status::RESERVATION_CONFLICT))
}

impl Controller {
    /// I/O passthrough: submit `sqe` (its CID and data pointer are the queue's) on the next I/O queue with `data`
    /// (sent or filled per `direction`) and wait, bounded by the I/O timeout. The reply, or the command's error
    /// status as [`HostError::Status`] named `command`.
    pub fn io_command(
        &self,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Reply, HostError> {
        let pending = self.submit_io(Request { sqe, data, direction, context: () })?;
        finish(command, pending, self.inner.options.io_timeout)
    }

    /// Reservation Register with `keys` (CRKEY, NRKEY).
    pub fn reservation_register(&self, cmd: &ReservationRegister, keys: ReservationKeys) -> Result<(), HostError> {
        let data = keys.to_bytes().to_vec();
        self.io_command("Reservation Register", cmd.to_sqe(), DataDirection::HostToController, data).map(|_| ())
    }

    /// Reservation Acquire with `keys` (CRKEY, PRKEY).
    pub fn reservation_acquire(&self, cmd: &ReservationAcquire, keys: ReservationKeys) -> Result<(), HostError> {
        let data = keys.to_bytes().to_vec();
        self.io_command("Reservation Acquire", cmd.to_sqe(), DataDirection::HostToController, data).map(|_| ())
    }

    /// Reservation Release with CRKEY `crkey`.
    pub fn reservation_release(&self, cmd: &ReservationRelease, crkey: u64) -> Result<(), HostError> {
        let data = crkey.to_le_bytes().to_vec();
        self.io_command("Reservation Release", cmd.to_sqe(), DataDirection::HostToController, data).map(|_| ())
    }

    /// Reservation Report: the raw Reservation Status ((NUMD + 1) × 4 bytes, at most [`MAX_REPORT_BYTES`] and the
    /// controller's MDTS).
    pub fn reservation_report_raw(&self, cmd: &ReservationReport) -> Result<Vec<u8>, HostError> {
        let len = usize::try_from(cmd.length_bytes()).unwrap_or(usize::MAX);
        if len > MAX_REPORT_BYTES {
            return Err(HostError::InvalidRequest(format!(
                "Reservation Report of {len} bytes: at most {MAX_REPORT_BYTES}"
            )));
        }
        if let Some(max) = self.info().max_transfer.and_then(|m| usize::try_from(m).ok()) {
            if len > max {
                return Err(HostError::InvalidRequest(format!(
                    "Reservation Report of {len} bytes: the controller's MDTS is {max} bytes"
                )));
            }
        }
        let reply =
            self.io_command("Reservation Report", cmd.to_sqe(), DataDirection::ControllerToHost, vec![0; len])?;
        Ok(reply.data)
    }

    /// Reservation Report, parsed (registrants past the bytes asked for are left out).
    pub fn reservation_report(&self, cmd: &ReservationReport) -> Result<ReservationStatus, HostError> {
        let data = self.reservation_report_raw(cmd)?;
        ReservationStatus::parse(&data, cmd.eds).map_err(|e| HostError::wire("Reservation Status", e))
    }
}
