//! The command side of a [`super::TcpQueue`]: the slot table (one [`CommandState`] per command identifier), the
//! send queue of encoded PDU headers whose data is written from the commands' own buffers, and the handling of
//! every PDU the controller sends after ICResp (CapsuleResp, C2HData, R2T, TermReq) with its checks. Kept apart
//! from the socket and the decoder so that a received PDU, which borrows the decoder, can be handled while it is
//! borrowed. Runs on the queue owner's thread and never blocks: [`Commands::flush`] writes until the socket
//! would block.

use std::collections::VecDeque;
use std::io::{IoSlice, Write};
use std::ops::Range;
use std::time::Instant;

use nvmf_common::nvme::opcode::admin::ASYNC_EVENT_REQUEST;
use nvmf_common::nvme::opcode::{fctype, FABRICS};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::pdu::MAX_ENCODED_HEADER_LEN;
use nvmf_common::transport::tcp::{C2hData, CapsuleCommand, FatalErrorStatus, Framing, H2cData, Pdu, R2t, DIGEST_LEN};

use crate::error::HostError;
use crate::queue::{command_id, Completion, DataDirection, QueueStats, Rejected, Request};

/// Most iovecs handed to one `writev`.
const MAX_IOVECS: usize = 64;

/// Where a command is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandState {
    /// The slot is free.
    Free,
    /// Capsule queued or sent; waiting for R2T, C2HData or the response.
    AwaitingResponse,
    /// Sending the H2CData PDUs answering one R2T.
    SendingH2c {
        /// The R2T's transfer tag.
        ttag: u16,
        /// Offset of the solicited data.
        r2to: u32,
        /// Length of the solicited data.
        r2tl: u32,
    },
    /// C2HData arriving; `received` bytes so far (in order).
    ReceivingC2h {
        /// Bytes received.
        received: u32,
    },
}

#[derive(Debug)]
pub(super) struct Slot<T> {
    pub(super) state: CommandState,
    pub(super) generation: u16,
    pub(super) context: Option<T>,
    pub(super) data: Vec<u8>,
    pub(super) direction: DataDirection,
    /// `data.len()` as the wire's u32.
    pub(super) len: u32,
    /// Queued PDUs of this command not yet fully written to the socket.
    pub(super) unsent: u32,
    pub(super) r2ts: u16,
    pub(super) in_capsule: bool,
    pub(super) digest_error: bool,
    /// When the command was submitted, to the poll: stamped by the first [`super::TcpQueue::poll`] after `submit`.
    pub(super) submitted: Instant,
    /// Whether the command timeout applies: not to an Asynchronous Event Request, which the controller
    /// holds until an event occurs.
    pub(super) timed: bool,
}

/// One PDU in the send queue: its encoded header and where its data lives.
#[derive(Debug)]
pub(super) struct OutPdu {
    header: [u8; MAX_ENCODED_HEADER_LEN],
    header_len: usize,
    /// The command whose buffer holds the data (and whose `unsent` count this PDU is in).
    slot: Option<usize>,
    data: Range<usize>,
    ddgst: [u8; DIGEST_LEN],
    ddgst_len: usize,
    written: usize,
}

impl OutPdu {
    fn total(&self) -> usize {
        self.header_len + self.data.len() + self.ddgst_len
    }
}

/// The command side of the queue: slots, send queue, completions. Kept apart from the socket and decoder
/// so received PDUs (which borrow the decoder) can be handled while it is borrowed.
#[derive(Debug)]
pub(super) struct Commands<T> {
    pub(super) qid: u16,
    pub(super) framing: Framing,
    pub(super) maxh2cdata: u32,
    pub(super) in_capsule_limit: u32,
    pub(super) slots: Vec<Slot<T>>,
    pub(super) free: Vec<u16>,
    /// Slots submitted since the last poll, whose `submitted` time that poll stamps: one clock read per batch
    /// instead of one per command (in a guest without a vDSO clock each read is a system call).
    pub(super) unstamped: Vec<u16>,
    pub(super) out: VecDeque<OutPdu>,
    pub(super) completed: VecDeque<Completion<T>>,
    pub(super) stats: QueueStats,
    /// Outstanding reads of at least [`LARGE_READ`] bytes: while there are any, the socket is read into `rx` only
    /// `SMALL_RX_WINDOW` bytes at a time (see `TcpQueue::receive`).
    pub(super) large_reads: usize,
}

pub(super) fn protocol(qid: u16, pdu: &Pdu, fes: FatalErrorStatus, reason: String) -> HostError {
    HostError::Protocol { qid, pdu: format!("{pdu:?}"), reason, fes }
}

fn is_connect(sqe: &SubmissionQueueEntry) -> bool {
    sqe.opcode == FABRICS && sqe.fctype() == fctype::CONNECT
}

/// Reads this large make `TcpQueue::receive` read the socket into `rx` in small windows.
const LARGE_READ: u32 = 32 * 1024;

fn is_large_read(direction: DataDirection, len: u32) -> bool {
    direction == DataDirection::ControllerToHost && len >= LARGE_READ
}

impl<T> Commands<T> {
    /// The slot of a live command with identifier `cid`.
    pub(super) fn live(&self, cid: u16) -> Option<usize> {
        let index = command_id::slot(cid);
        let slot = self.slots.get(index)?;
        (slot.state != CommandState::Free && command_id::of(index, slot.generation) == cid).then_some(index)
    }

    pub(super) fn start(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        let qid = self.qid;
        let Some(&index16) = self.free.last() else {
            let depth = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
            return Err(Box::new(Rejected { error: HostError::QueueFull { qid, depth }, request }));
        };
        let Ok(len) = u32::try_from(request.data.len()) else {
            return Err(Box::new(Rejected {
                error: HostError::InvalidRequest(format!("{} bytes in one command", request.data.len())),
                request,
            }));
        };
        let index = usize::from(index16);
        let mut sqe = request.sqe;
        let h2c = request.direction == DataDirection::HostToController && len > 0;
        let in_capsule = h2c && (len <= self.in_capsule_limit || is_connect(&sqe));
        let sgl = if in_capsule {
            SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset }
        } else {
            SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific }
        };
        if let Err(e) = sqe.set_sgl1(&sgl) {
            return Err(Box::new(Rejected { error: HostError::wire("SGL1", e), request }));
        }
        let generation = command_id::next_generation(self.slots[index].generation);
        self.slots[index].generation = generation;
        sqe.cid = command_id::of(index, generation);
        let data_range = if in_capsule { 0..request.data.len() } else { 0..0 };
        let mut out = OutPdu {
            header: [0; MAX_ENCODED_HEADER_LEN],
            header_len: 0,
            slot: Some(index),
            data: data_range.clone(),
            ddgst: [0; DIGEST_LEN],
            ddgst_len: 0,
            written: 0,
        };
        let pdu = Pdu::CapsuleCommand(CapsuleCommand { sqe });
        match pdu.encode(&request.data[data_range], &self.framing, &mut out.header) {
            Ok(enc) => {
                out.header_len = enc.layout.prefix_len();
                if let Some(d) = enc.data_digest {
                    out.ddgst = d;
                    out.ddgst_len = DIGEST_LEN;
                }
            }
            Err(e) => return Err(Box::new(Rejected { error: HostError::wire("CapsuleCmd", e), request })),
        }
        self.free.pop();
        let slot = &mut self.slots[index];
        slot.state = CommandState::AwaitingResponse;
        slot.context = Some(request.context);
        slot.data = request.data;
        slot.direction = request.direction;
        slot.len = len;
        slot.unsent = 1;
        slot.r2ts = 0;
        slot.in_capsule = in_capsule;
        slot.digest_error = false;
        if is_large_read(slot.direction, len) {
            self.large_reads += 1;
        }
        self.unstamped.push(index16);
        slot.timed = !(qid == 0 && sqe.opcode == ASYNC_EVENT_REQUEST);
        self.out.push_back(out);
        self.stats.submitted += 1;
        let outstanding = u16::try_from(self.slots.len() - self.free.len()).unwrap_or(u16::MAX);
        self.stats.max_outstanding = self.stats.max_outstanding.max(outstanding);
        Ok(sqe.cid)
    }

    /// Write queued PDUs until the socket would block; many PDUs per `writev`.
    pub(super) fn flush(&mut self, w: &mut impl Write) -> std::io::Result<()> {
        while !self.out.is_empty() {
            let result = {
                let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
                let mut count = 0;
                for item in &self.out {
                    if count + 3 > MAX_IOVECS {
                        break;
                    }
                    let data: &[u8] = match item.slot {
                        Some(i) => self.slots[i].data.get(item.data.clone()).unwrap_or_default(),
                        None => &[],
                    };
                    let mut skip = item.written;
                    for part in [&item.header[..item.header_len], data, &item.ddgst[..item.ddgst_len]] {
                        if skip >= part.len() {
                            skip -= part.len();
                            continue;
                        }
                        slices[count] = IoSlice::new(&part[skip..]);
                        count += 1;
                        skip = 0;
                    }
                }
                w.write_vectored(&slices[..count])
            };
            let mut n = match result {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while n > 0 {
                let Some(item) = self.out.front_mut() else { break };
                let remaining = item.total() - item.written;
                if n < remaining {
                    item.written += n;
                    break;
                }
                n -= remaining;
                if let Some(done) = self.out.pop_front() {
                    self.sent(&done);
                }
            }
        }
        Ok(())
    }

    /// A PDU was written completely.
    fn sent(&mut self, pdu: &OutPdu) {
        if let Some(i) = pdu.slot {
            let slot = &mut self.slots[i];
            slot.unsent = slot.unsent.saturating_sub(1);
            if slot.unsent == 0 && matches!(slot.state, CommandState::SendingH2c { .. }) {
                slot.state = CommandState::AwaitingResponse;
            }
        }
    }

    pub(super) fn complete(&mut self, index: usize, result: Result<CompletionQueueEntry, HostError>) {
        let slot = &mut self.slots[index];
        let result = result.map(|mut cqe| {
            if slot.digest_error && cqe.status.is_success() {
                cqe.status = Status::TRANSIENT_TRANSPORT_ERROR;
            }
            cqe
        });
        slot.state = CommandState::Free;
        if is_large_read(slot.direction, slot.len) {
            self.large_reads -= 1;
        }
        let data = std::mem::take(&mut slot.data);
        if let Some(context) = slot.context.take() {
            self.completed.push_back(Completion {
                context,
                result,
                data,
                r2ts: slot.r2ts,
                in_capsule: slot.in_capsule,
            });
        }
        self.free.push(u16::try_from(index).unwrap_or(0));
        self.stats.completed += 1;
    }

    pub(super) fn on_pdu(&mut self, pdu: Pdu, data: &[u8]) -> Result<(), HostError> {
        let qid = self.qid;
        match pdu {
            Pdu::CapsuleResponse(resp) => {
                let Some(index) = self.live(resp.cqe.cid) else {
                    let reason = format!("CapsuleResp for CID {:#x}, which is not outstanding", resp.cqe.cid);
                    return Err(protocol(qid, &pdu, FatalErrorStatus::InvalidPduHeaderField, reason));
                };
                if self.slots[index].unsent > 0 {
                    let reason = "CapsuleResp before the command's data was sent".to_string();
                    return Err(protocol(qid, &pdu, FatalErrorStatus::PduSequenceError, reason));
                }
                let result =
                    if resp.cqe.status.is_success() { self.all_received(index, resp.cqe) } else { Ok(resp.cqe) };
                self.complete(index, result);
                Ok(())
            }
            Pdu::C2hData(c2h) => self.on_c2h(&pdu, c2h, Some(data)),
            Pdu::R2t(r2t) => self.on_r2t(&pdu, r2t),
            Pdu::TermReq(t) => Err(HostError::TermReq { qid, fes: t.fes, fei: t.fei }),
            other => {
                let reason = "a PDU the controller does not send after ICResp".to_string();
                Err(protocol(qid, &other, FatalErrorStatus::PduSequenceError, reason))
            }
        }
    }

    pub(super) fn on_data_digest_error(&mut self, pdu: &Pdu) -> Result<(), HostError> {
        match *pdu {
            Pdu::C2hData(c2h) => self.on_c2h(pdu, c2h, None),
            _ => Err(protocol(
                self.qid,
                pdu,
                FatalErrorStatus::InvalidPduHeaderField,
                "data digest error on a PDU that carries no command data".into(),
            )),
        }
    }

    /// C2HData: `data` is `None` when its digest failed (checks still apply; nothing is copied).
    fn on_c2h(&mut self, pdu: &Pdu, c2h: C2hData, data: Option<&[u8]>) -> Result<(), HostError> {
        let (index, range) = self.c2h_target(pdu, c2h, data.map(<[u8]>::len))?;
        let slot = &mut self.slots[index];
        match (data, slot.data.get_mut(range)) {
            (Some(data), Some(dst)) => dst.copy_from_slice(data),
            _ => slot.digest_error = true,
        }
        self.c2h_done(pdu, c2h, index)
    }

    /// Check a C2HData carrying `data_len` bytes (`None`: unknown, its digest failed) against its command: the
    /// command's slot and where the data goes in its buffer.
    pub(super) fn c2h_target(
        &self,
        pdu: &Pdu,
        c2h: C2hData,
        data_len: Option<usize>,
    ) -> Result<(usize, Range<usize>), HostError> {
        let qid = self.qid;
        let range_error = |reason: String| protocol(qid, pdu, FatalErrorStatus::DataTransferOutOfRange, reason);
        let Some(index) = self.live(c2h.cccid) else {
            let reason = format!("C2HData for CCCID {:#x}, which is not outstanding", c2h.cccid);
            return Err(protocol(qid, pdu, FatalErrorStatus::InvalidPduHeaderField, reason));
        };
        let slot = &self.slots[index];
        if slot.direction != DataDirection::ControllerToHost {
            return Err(range_error(format!("C2HData for CID {:#x}, which reads no data", c2h.cccid)));
        }
        let received = match slot.state {
            CommandState::AwaitingResponse => 0,
            CommandState::ReceivingC2h { received } => received,
            other => return Err(range_error(format!("C2HData for a command in state {other:?}"))),
        };
        if c2h.datao != received {
            return Err(range_error(format!("DATAO {} but {received} bytes received so far", c2h.datao)));
        }
        let end = c2h.datao.checked_add(c2h.datal).filter(|&end| end <= slot.len).ok_or_else(|| {
            range_error(format!("DATAO {} + DATAL {} beyond the command's {} bytes", c2h.datao, c2h.datal, slot.len))
        })?;
        let range = usize::try_from(c2h.datao).unwrap_or(usize::MAX)..usize::try_from(end).unwrap_or(usize::MAX);
        match (data_len, slot.data.get(range.clone())) {
            (Some(n), Some(dst)) if n == dst.len() => Ok((index, range)),
            (None, Some(_)) => Ok((index, range)),
            (n, _) => Err(range_error(format!("{n:?} data bytes for DATAL {}", c2h.datal))),
        }
    }

    /// A checked C2HData's data is in the command's buffer (or its digest failed): the command advances, and
    /// completes if the controller set SUCCESS.
    pub(super) fn c2h_done(&mut self, pdu: &Pdu, c2h: C2hData, index: usize) -> Result<(), HostError> {
        // DATAO + DATAL was checked against the command's length.
        self.slots[index].state = CommandState::ReceivingC2h { received: c2h.datao.saturating_add(c2h.datal) };
        if c2h.success {
            if !c2h.last_pdu {
                return Err(protocol(
                    self.qid,
                    pdu,
                    FatalErrorStatus::InvalidPduHeaderField,
                    "SUCCESS without LAST_PDU".into(),
                ));
            }
            let result = self.all_received(index, CompletionQueueEntry::new(c2h.cccid, Status::SUCCESS));
            self.complete(index, result);
        }
        Ok(())
    }

    /// `cqe`, a success for slot `index`, unless the command reads data that has not all arrived: then
    /// [`HostError::IncompleteData`], as the rest of its buffer holds no data of this read.
    fn all_received(&self, index: usize, cqe: CompletionQueueEntry) -> Result<CompletionQueueEntry, HostError> {
        let slot = &self.slots[index];
        if slot.direction != DataDirection::ControllerToHost {
            return Ok(cqe);
        }
        let received = match slot.state {
            CommandState::ReceivingC2h { received } => received,
            _ => 0,
        };
        if received == slot.len {
            return Ok(cqe);
        }
        Err(HostError::IncompleteData { qid: self.qid, cid: cqe.cid, received, expected: slot.len })
    }

    /// R2T: queue H2CData PDUs of at most MAXH2CDATA covering the solicited range.
    fn on_r2t(&mut self, pdu: &Pdu, r2t: R2t) -> Result<(), HostError> {
        let qid = self.qid;
        let range_error = |reason: String| protocol(qid, pdu, FatalErrorStatus::DataTransferOutOfRange, reason);
        let Some(index) = self.live(r2t.cccid) else {
            let reason = format!("R2T for CCCID {:#x}, which is not outstanding", r2t.cccid);
            return Err(protocol(qid, pdu, FatalErrorStatus::InvalidPduHeaderField, reason));
        };
        let slot = &self.slots[index];
        if slot.direction != DataDirection::HostToController || slot.in_capsule || slot.len == 0 {
            return Err(range_error(format!("R2T for CID {:#x}, which has no data to solicit", r2t.cccid)));
        }
        if slot.state != CommandState::AwaitingResponse || slot.unsent > 0 {
            // MAXR2T 0 in ICReq: one outstanding R2T per command.
            return Err(protocol(
                qid,
                pdu,
                FatalErrorStatus::PduSequenceError,
                format!("R2T while the command is in state {:?} (MAXR2T allows one)", slot.state),
            ));
        }
        let end = r2t.r2to.checked_add(r2t.r2tl).filter(|&end| end <= slot.len && r2t.r2tl > 0).ok_or_else(|| {
            range_error(format!("R2TO {} + R2TL {} outside the command's {} bytes", r2t.r2to, r2t.r2tl, slot.len))
        })?;
        let mut offset = r2t.r2to;
        while offset < end {
            let datal = (end - offset).min(self.maxh2cdata);
            let h2c = Pdu::H2cData(H2cData {
                cccid: r2t.cccid,
                ttag: r2t.ttag,
                datao: offset,
                datal,
                last_pdu: offset + datal == end,
            });
            let range = usize::try_from(offset).unwrap_or(usize::MAX)..usize::try_from(offset + datal).unwrap_or(0);
            let mut out = OutPdu {
                header: [0; MAX_ENCODED_HEADER_LEN],
                header_len: 0,
                slot: Some(index),
                data: range.clone(),
                ddgst: [0; DIGEST_LEN],
                ddgst_len: 0,
                written: 0,
            };
            let chunk = self.slots[index].data.get(range).unwrap_or_default();
            let enc = h2c.encode(chunk, &self.framing, &mut out.header).map_err(|e| HostError::wire("H2CData", e))?;
            out.header_len = enc.layout.prefix_len();
            if let Some(d) = enc.data_digest {
                out.ddgst = d;
                out.ddgst_len = DIGEST_LEN;
            }
            self.out.push_back(out);
            self.slots[index].unsent += 1;
            offset += datal;
        }
        let slot = &mut self.slots[index];
        slot.state = CommandState::SendingH2c { ttag: r2t.ttag, r2to: r2t.r2to, r2tl: r2t.r2tl };
        slot.r2ts = slot.r2ts.saturating_add(1);
        self.stats.r2ts += 1;
        Ok(())
    }
}
