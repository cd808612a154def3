//! The protocol half of a connection: what a decoded PDU does to the queue, the transfers and the send queue
//! ([`Session`]), apart from the socket, the receive buffer and the decoder that the parent module owns.

use nvmf_common::fabrics::connect::Connect;
use nvmf_common::nvme::cqe::CompletionQueueEntry;
use nvmf_common::nvme::sqe::SubmissionQueueEntry;
use nvmf_common::nvme::status::Status;
use nvmf_common::transport::tcp::{FatalErrorStatus, Framing, H2cData, IcReq, Pdu};
use nvmf_common::wire::WireError;

use super::{Fatal, Handled, Phase, Session};
use crate::backend::IoEngine;
use crate::controller::{QueueError, SlotId, Step};
use crate::tcp::error::ConnectionError;
use crate::tcp::outgoing::{negotiate, queue_c2h_data, queue_pdu, queue_r2t, queue_response};
use crate::tcp::transfer::{ProtocolViolation, SlotState};

impl Session {
    pub(super) fn backlogged(&self) -> bool {
        self.send.pending_bytes() > self.config.max_send_backlog
    }

    /// Release to the queue the slots whose bytes were all written.
    pub(super) fn release_done(&mut self, engine: &mut IoEngine) {
        for slot in self.done.drain(..) {
            self.transfers.set(slot.index(), SlotState::Idle);
            self.queue.release(engine, slot);
        }
    }

    /// Handle one whole, valid PDU.
    pub(super) fn handle(&mut self, engine: &mut IoEngine, pdu: Pdu, data: &[u8]) -> Result<Handled, Fatal> {
        let violation =
            |fes, fei, reason, data_len| Err(Fatal::Violation(ProtocolViolation::new(fes, fei, reason), pdu, data_len));
        match (self.phase, pdu) {
            (_, Pdu::TermReq(t)) => {
                tracing::info!(fes = %t.fes, fei = t.fei, "host sent H2CTermReq");
                Err(Fatal::Close(ConnectionError::HostTerminated { fes: t.fes, fei: t.fei }))
            }
            (Phase::AwaitingIcReq, Pdu::IcReq(icreq)) => {
                // ICResp goes out without digests: they apply from the next PDU on.
                let icresp = negotiate(&icreq, &self.config).icresp;
                queue_pdu(&mut self.send, &Pdu::IcResp(icresp), &Framing::default()).map_err(encode)?;
                Ok(Handled::Negotiated(self.initialize(&icreq)))
            }
            (Phase::AwaitingIcReq, _) => {
                violation(FatalErrorStatus::PduSequenceError, 0, "a PDU other than ICReq before ICReq", data.len())
            }
            (_, Pdu::IcReq(_)) => violation(FatalErrorStatus::PduSequenceError, 0, "a second ICReq", 0),
            (_, Pdu::CapsuleCommand(c)) => {
                if data.len() > usize::try_from(self.config.in_capsule_data_size).unwrap_or(usize::MAX) {
                    return violation(
                        FatalErrorStatus::DataTransferLimitExceeded,
                        0,
                        "in-capsule data exceeds the IOCCSZ we advertise",
                        data.len(),
                    );
                }
                self.note_connect(&c.sqe);
                let step = self.queue.command(engine, &c.sqe, data).map_err(queue_error)?;
                self.apply(engine, step)?;
                Ok(Handled::Done)
            }
            (_, Pdu::H2cData(h)) => {
                self.h2c_data(engine, &h, Some(data))?;
                Ok(Handled::Done)
            }
            // The decoder only lets host-to-controller PDUs through.
            (_, _) => violation(FatalErrorStatus::InvalidPduHeaderField, 0, "PDU type not sent by hosts", 0),
        }
    }

    /// Accept `icreq` (its ICResp is the caller's): commands flow with the framing returned.
    pub(super) fn initialize(&mut self, icreq: &IcReq) -> Framing {
        let n = negotiate(icreq, &self.config);
        self.framing = n.framing;
        self.transfers.set_max_r2t(n.maxr2t, self.config.max_r2t_per_command);
        self.phase = Phase::Live;
        self.icreq = Some(*icreq);
        tracing::debug!(framing = ?n.framing, maxr2t = n.maxr2t, "NVMe/TCP connection initialized");
        n.framing
    }

    /// Remember a Connect that disables SQ flow control, so that its successful response turns the
    /// C2HData SUCCESS optimisation on.
    fn note_connect(&mut self, sqe: &SubmissionQueueEntry) {
        if let Ok(connect) = Connect::from_sqe(sqe) {
            self.connect_disabling_sq_flow = connect.disable_sq_flow_control().then_some(sqe.cid);
        }
    }

    /// An H2CData PDU: check it against its transfer, place its data, solicit more or hand the command back.
    /// `data` is None after a data digest error.
    fn h2c_data(&mut self, engine: &mut IoEngine, h: &H2cData, data: Option<&[u8]>) -> Result<(), Fatal> {
        let violation = |v| Fatal::Violation(v, Pdu::H2cData(*h), usize::try_from(h.datal).unwrap_or(0));
        let accepted = self.transfers.accept_h2c(h, data.is_some()).map_err(violation)?;
        self.h2c_received += u64::try_from(data.map_or(0, <[u8]>::len)).unwrap_or(u64::MAX);
        if let (Some(buffer), Some(data)) = (accepted.buffer, data) {
            let start = usize::try_from(accepted.offset).unwrap_or(usize::MAX);
            let Some(dest) = engine.buffer_mut(buffer).get_mut(start..start.saturating_add(data.len())) else {
                let v = ProtocolViolation::new(
                    FatalErrorStatus::DataTransferOutOfRange,
                    0,
                    "H2CData beyond the command's buffer",
                );
                return Err(violation(v));
            };
            dest.copy_from_slice(data);
        }
        match accepted.complete {
            None => {
                while let Some(r2t) = self.transfers.next_r2t(h.ttag) {
                    queue_r2t(&mut self.send, r2t, &self.framing).map_err(encode)?;
                }
                Ok(())
            }
            Some(Ok(())) => {
                let step = self.queue.data_received(engine, accepted.slot).map_err(queue_error)?;
                self.apply(engine, step)
            }
            Some(Err(status)) => self.fail_command(engine, accepted.slot, status),
        }
    }

    /// A PDU whose data failed its digest: fail the command it belongs to with Transient Transport Error
    /// and carry on (NVMe/TCP 1.0: a data digest error is not fatal to the connection).
    pub(super) fn data_digest_error(&mut self, engine: &mut IoEngine, pdu: &Pdu) -> Result<(), Fatal> {
        match (self.phase, pdu) {
            (Phase::Live, Pdu::CapsuleCommand(c)) => {
                tracing::warn!(cid = c.sqe.cid, "data digest error in a command capsule");
                // The queue never sees the command: answer it here.
                let cqe = self.transport_cqe(c.sqe.cid, Status::TRANSIENT_TRANSPORT_ERROR);
                queue_response(&mut self.send, cqe, &self.framing).map_err(encode)
            }
            (Phase::Live, Pdu::H2cData(h)) => {
                tracing::warn!(cccid = h.cccid, datao = h.datao, "data digest error in H2CData");
                self.h2c_data(engine, h, None)
            }
            _ => Err(Fatal::Violation(
                ProtocolViolation::new(FatalErrorStatus::PduSequenceError, 0, "unexpected PDU"),
                *pdu,
                0,
            )),
        }
    }

    /// A completion made by the transport for a command the queue cannot complete (its data was corrupt).
    fn transport_cqe(&self, cid: u16, status: Status) -> CompletionQueueEntry {
        let mut cqe = CompletionQueueEntry::new(cid, status);
        cqe.sqid = self.queue.qid().unwrap_or(0);
        cqe.sqhd = self.last_sqhd;
        cqe
    }

    /// Complete `slot`, whose host data could not be received intact, with `status` without executing it.
    fn fail_command(&mut self, engine: &mut IoEngine, slot: SlotId, status: Status) -> Result<(), Fatal> {
        self.transfers.set(slot.index(), SlotState::Idle);
        let step = self.queue.transfer_failed(engine, slot, status).map_err(queue_error)?;
        self.apply(engine, step)
    }

    /// Do what the queue asked.
    pub(super) fn apply(&mut self, engine: &mut IoEngine, step: Step) -> Result<(), Fatal> {
        match step {
            Step::Pending => Ok(()),
            Step::FetchData { slot, cid, buffer, len } => {
                if len == 0 {
                    let step = self.queue.data_received(engine, slot).map_err(queue_error)?;
                    return self.apply(engine, step);
                }
                let ttag = slot.index();
                self.transfers.start_h2c(ttag, slot, cid, buffer, len);
                while let Some(r2t) = self.transfers.next_r2t(ttag) {
                    queue_r2t(&mut self.send, r2t, &self.framing).map_err(encode)?;
                }
                Ok(())
            }
            Step::Respond { slot, cqe, data } => {
                self.last_sqhd = cqe.sqhd;
                if self.connect_disabling_sq_flow == Some(cqe.cid) {
                    self.connect_disabling_sq_flow = None;
                    self.sq_flow_control_disabled |= cqe.status.is_success();
                }
                let success = self.config.c2h_success && self.sq_flow_control_disabled && cqe.status.is_success();
                let mut sent_success = false;
                if let Some((buffer, data_len)) = data.filter(|&(_, len)| len > 0) {
                    let len = usize::try_from(data_len).unwrap_or(usize::MAX);
                    let bytes = engine.buffer(buffer);
                    let Some(bytes) = bytes.get(..len) else {
                        tracing::error!(len, have = bytes.len(), "response data longer than its buffer");
                        let e =
                            WireError::invalid("C2HData", "DATAL", u64::from(data_len), "at most the buffer length");
                        return Err(encode(e));
                    };
                    queue_c2h_data(
                        &mut self.send,
                        cqe.cid,
                        buffer,
                        bytes,
                        self.config.max_c2h_data,
                        success,
                        &self.framing,
                    )
                    .map_err(encode)?;
                    sent_success = success;
                }
                if !sent_success {
                    queue_response(&mut self.send, cqe, &self.framing).map_err(encode)?;
                }
                self.transfers.set(slot.index(), SlotState::Sending);
                self.send.push_done(slot);
                Ok(())
            }
        }
    }
}

fn encode(e: WireError) -> Fatal {
    Fatal::Close(ConnectionError::Encode(e))
}

fn queue_error(e: QueueError) -> Fatal {
    tracing::debug!(error = %e, "queue ended the connection");
    Fatal::Close(ConnectionError::Queue(e))
}
