//! Per-command transfer state of one connection: which commands are receiving host data through
//! R2T/H2CData, which are waiting for their response to be written.
//!
//! A command is known to the transport by its slot (the queue's command slot), which is also the Transfer
//! Tag (TTAG) of its R2Ts. The state is an explicit enum per slot; the table is a `Vec` indexed by slot,
//! grown to the queue depth once and then reused (no allocation per command).
//!
//! H2CData rules (NVMe/TCP 1.0 "H2CData PDU", "R2T PDU"; what Linux nvmet and SPDK check):
//! - TTAG names a slot receiving data, CCCID is that command's — else Invalid PDU Header Field (FEI = the
//!   field's offset);
//! - DATAL is at most MAXH2CDATA — else Data Transfer Limit Exceeded;
//! - the PDU lies within the data solicited so far — else Data Transfer Out of Range;
//! - PDUs arrive in order (DATAO is the next byte expected), stay within one R2T and LAST_PDU is set on
//!   exactly the PDU that ends an R2T — else PDU Sequence Error.
//!
//! Runs on the connection's reactor thread; pure bookkeeping, no I/O.

use nvmf_common::nvme::status::Status;
use nvmf_common::transport::tcp::{FatalErrorStatus, H2cData, R2t};

/// Byte offsets in the H2CData header, the FEI of an Invalid PDU Header Field error.
const FEI_CCCID: u32 = 8;
const FEI_TTAG: u32 = 10;

/// A fatal protocol error found by the transport (not by the PDU decoder): the connection sends a
/// C2HTermReq with `fes`/`fei` and closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{fes} (FEI {fei:#x}): {reason}")]
pub struct ProtocolViolation {
    /// Fatal Error Status for the C2HTermReq.
    pub fes: FatalErrorStatus,
    /// Fatal Error Information.
    pub fei: u32,
    /// What the host did wrong.
    pub reason: &'static str,
}

impl ProtocolViolation {
    pub(crate) fn new(fes: FatalErrorStatus, fei: u32, reason: &'static str) -> Self {
        ProtocolViolation { fes, fei, reason }
    }
}

/// Host data being received for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct H2cTransfer<B, S> {
    /// The queue's slot (its index is the TTAG).
    pub slot: S,
    /// The command's CID (CCCID of its R2T and H2CData PDUs).
    pub cccid: u16,
    /// Where the data goes.
    pub buffer: B,
    /// Bytes the command transfers.
    pub len: u32,
    /// Bytes received so far (also the DATAO the next H2CData must carry).
    pub received: u32,
    /// Bytes solicited by the R2Ts sent so far.
    pub solicited: u32,
    /// R2TL of each R2T (the last one may be shorter).
    pub r2t_len: u32,
    /// Set after a data digest error: the rest of the data is taken and dropped, then the command
    /// completes with this status instead of executing.
    pub failed: Option<Status>,
}

impl<B, S> H2cTransfer<B, S> {
    /// End of the R2T the next byte belongs to.
    fn current_r2t_end(&self) -> u32 {
        let k = u64::from(self.received / self.r2t_len) + 1;
        let end = k * u64::from(self.r2t_len);
        u32::try_from(end.min(u64::from(self.len))).unwrap_or(self.len)
    }

    /// R2Ts sent and not fully answered.
    fn outstanding(&self) -> u32 {
        if self.solicited == self.received {
            return 0;
        }
        // R2T boundaries are multiples of r2t_len: count the ones in (received, solicited].
        let first = self.received / self.r2t_len;
        let last = (self.solicited - 1) / self.r2t_len;
        last - first + 1
    }
}

/// What the transport is doing for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SlotState<B, S> {
    /// No transport work: free, executing in the queue (storage I/O), or held (AER).
    #[default]
    Idle,
    /// Soliciting and receiving host data.
    AwaitingH2cData(H2cTransfer<B, S>),
    /// Response (and data) queued for sending; the slot is released once its bytes are written.
    Sending,
}

/// What an accepted H2CData PDU means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct H2cAccepted<B, S> {
    /// The command the data belongs to.
    pub slot: S,
    /// Copy the PDU's data here (None after a data digest error on this command: drop it).
    pub buffer: Option<B>,
    /// At this offset of the buffer.
    pub offset: u32,
    /// All data arrived: hand the command back to the queue (`Ok`) or fail it with this status (`Err`).
    pub complete: Option<Result<(), Status>>,
}

/// Transfer state of every slot of one connection.
#[derive(Debug)]
pub(crate) struct TransferTable<B, S> {
    slots: Vec<SlotState<B, S>>,
    /// Most R2Ts outstanding per command: min(host MAXR2T + 1, our limit).
    max_outstanding: u32,
    /// Most data per H2CData PDU (our MAXH2CDATA).
    maxh2cdata: u32,
    /// Largest R2TL.
    max_r2t_len: u32,
    /// Slots in `AwaitingH2cData` (so a turn need not scan the table to know whether any waits).
    awaiting: usize,
}

impl<B: Copy, S: Copy> TransferTable<B, S> {
    /// A table for R2Ts of at most `max_r2t_len` bytes and H2CData PDUs of at most `maxh2cdata`.
    pub(crate) fn new(max_r2t_len: u32, maxh2cdata: u32) -> Self {
        TransferTable {
            slots: Vec::new(),
            max_outstanding: 1,
            maxh2cdata,
            max_r2t_len: max_r2t_len.max(1),
            awaiting: 0,
        }
    }

    /// Apply the host's MAXR2T (0's based, from ICReq) and our own limit.
    pub(crate) fn set_max_r2t(&mut self, host_maxr2t: u32, ours: u32) {
        self.max_outstanding = host_maxr2t.saturating_add(1).min(ours).max(1);
    }

    /// The state of `slot`.
    #[cfg(test)]
    pub(crate) fn get(&self, slot: u16) -> SlotState<B, S> {
        self.slots.get(usize::from(slot)).copied().unwrap_or_default()
    }

    fn entry(&mut self, slot: u16) -> &mut SlotState<B, S> {
        let i = usize::from(slot);
        if i >= self.slots.len() {
            self.slots.resize(i + 1, SlotState::Idle);
        }
        &mut self.slots[i]
    }

    /// Set `slot`'s state.
    pub(crate) fn set(&mut self, slot: u16, state: SlotState<B, S>) {
        let entry = self.entry(slot);
        let was = matches!(entry, SlotState::AwaitingH2cData(_));
        let is = matches!(state, SlotState::AwaitingH2cData(_));
        *entry = state;
        self.awaiting = self.awaiting + usize::from(is) - usize::from(was);
    }

    /// Start receiving `len` bytes of host data for command `cccid` (queue slot `slot`, TTAG `ttag`) into
    /// `buffer`.
    pub(crate) fn start_h2c(&mut self, ttag: u16, slot: S, cccid: u16, buffer: B, len: u32) {
        let t = H2cTransfer {
            slot,
            cccid,
            buffer,
            len,
            received: 0,
            solicited: 0,
            r2t_len: self.max_r2t_len.min(len.max(1)),
            failed: None,
        };
        self.set(ttag, SlotState::AwaitingH2cData(t));
    }

    /// The next R2T to send for `slot`, if the command needs more data and may have another R2T
    /// outstanding. Call until `None` after starting a transfer and after each accepted H2CData.
    pub(crate) fn next_r2t(&mut self, slot: u16) -> Option<R2t> {
        let max = self.max_outstanding;
        let SlotState::AwaitingH2cData(t) = self.entry(slot) else { return None };
        if t.solicited >= t.len || t.outstanding() >= max || t.failed.is_some() {
            return None;
        }
        let r2tl = t.r2t_len.min(t.len - t.solicited);
        let r2t = R2t { cccid: t.cccid, ttag: slot, r2to: t.solicited, r2tl };
        t.solicited += r2tl;
        Some(r2t)
    }

    /// Check an H2CData header against the transfer its TTAG names (see the module docs) and account for
    /// its data. `digest_ok` is false when the PDU failed its data digest: the data is dropped and the
    /// command will fail with Transient Transport Error.
    pub(crate) fn accept_h2c(&mut self, h: &H2cData, digest_ok: bool) -> Result<H2cAccepted<B, S>, ProtocolViolation> {
        use FatalErrorStatus::*;
        let maxh2cdata = self.maxh2cdata;
        let Some(SlotState::AwaitingH2cData(t)) = self.slots.get_mut(usize::from(h.ttag)) else {
            return Err(ProtocolViolation::new(InvalidPduHeaderField, FEI_TTAG, "TTAG names no transfer"));
        };
        if h.cccid != t.cccid {
            return Err(ProtocolViolation::new(InvalidPduHeaderField, FEI_CCCID, "CCCID is not the R2T's command"));
        }
        if h.datal > maxh2cdata {
            return Err(ProtocolViolation::new(DataTransferLimitExceeded, 0, "DATAL exceeds MAXH2CDATA"));
        }
        let end = u64::from(h.datao) + u64::from(h.datal);
        if end > u64::from(t.solicited) {
            return Err(ProtocolViolation::new(DataTransferOutOfRange, 0, "data beyond the solicited range"));
        }
        if h.datao != t.received {
            return Err(ProtocolViolation::new(PduSequenceError, 0, "DATAO is not the next byte expected"));
        }
        let r2t_end = u64::from(t.current_r2t_end());
        if end > r2t_end {
            return Err(ProtocolViolation::new(PduSequenceError, 0, "H2CData PDU crosses an R2T boundary"));
        }
        if h.last_pdu != (end == r2t_end) {
            return Err(ProtocolViolation::new(PduSequenceError, 0, "LAST_PDU not on the PDU that ends the R2T"));
        }
        // `end` ≤ solicited ≤ len: it fits.
        t.received = u32::try_from(end).unwrap_or(t.len);
        if !digest_ok && t.failed.is_none() {
            t.failed = Some(Status::TRANSIENT_TRANSPORT_ERROR);
        }
        let buffer = if t.failed.is_none() { Some(t.buffer) } else { None };
        // After a digest error no more is solicited: the command ends once the solicited data is in.
        let all_in = t.received == t.len || (t.failed.is_some() && t.received == t.solicited);
        let complete = if all_in {
            let outcome = match t.failed {
                Some(status) => Err(status),
                None => Ok(()),
            };
            Some(outcome)
        } else {
            None
        };
        let accepted = H2cAccepted { slot: t.slot, buffer, offset: h.datao, complete };
        if complete.is_some() {
            self.set(h.ttag, SlotState::Idle);
        }
        Ok(accepted)
    }

    /// Whether any command waits for host data (an R2T sent and not fully answered).
    pub(crate) fn awaiting_data(&self) -> bool {
        self.awaiting > 0
    }

    /// Forget every slot's state.
    pub(crate) fn clear(&mut self) {
        self.slots.fill(SlotState::Idle);
        self.awaiting = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h2c(cccid: u16, ttag: u16, datao: u32, datal: u32, last_pdu: bool) -> H2cData {
        H2cData { cccid, ttag, datao, datal, last_pdu }
    }

    fn drain_r2ts(t: &mut TransferTable<u8, u16>, slot: u16) -> Vec<(u32, u32)> {
        std::iter::from_fn(|| t.next_r2t(slot)).map(|r| (r.r2to, r.r2tl)).collect()
    }

    #[test]
    fn one_r2t_for_the_whole_transfer_by_default() {
        let mut t = TransferTable::new(u32::MAX, 4096);
        t.start_h2c(3, 3, 0x42, 9u8, 10_000);
        let r = t.next_r2t(3).unwrap();
        assert_eq!(r, R2t { cccid: 0x42, ttag: 3, r2to: 0, r2tl: 10_000 });
        assert_eq!(t.next_r2t(3), None);
        // The host splits it at MAXH2CDATA.
        let a = t.accept_h2c(&h2c(0x42, 3, 0, 4096, false), true).unwrap();
        assert_eq!((a.buffer, a.offset, a.complete), (Some(9), 0, None));
        t.accept_h2c(&h2c(0x42, 3, 4096, 4096, false), true).unwrap();
        let a = t.accept_h2c(&h2c(0x42, 3, 8192, 10_000 - 8192, true), true).unwrap();
        assert_eq!(a.complete, Some(Ok(())));
        assert_eq!(t.get(3), SlotState::Idle);
    }

    #[test]
    fn awaiting_data_counts_transfers_until_their_data_is_in() {
        let mut t = TransferTable::new(u32::MAX, 4096);
        assert!(!t.awaiting_data());
        t.start_h2c(3, 3, 0x42, 9u8, 4096);
        t.start_h2c(5, 5, 0x43, 8u8, 4096);
        t.next_r2t(3).unwrap();
        t.accept_h2c(&h2c(0x42, 3, 0, 4096, true), true).unwrap();
        assert!(t.awaiting_data(), "slot 5 still waits");
        t.set(5, SlotState::Sending);
        assert!(!t.awaiting_data());
        t.start_h2c(5, 5, 0x44, 8u8, 4096);
        t.clear();
        assert!(!t.awaiting_data());
    }

    #[test]
    fn maxr2t_limits_outstanding_r2ts() {
        let mut t = TransferTable::new(4096, 4096);
        t.set_max_r2t(1, 4); // host allows 2 outstanding
        t.start_h2c(0, 0, 7, 0u8, 4 * 4096 + 100);
        assert_eq!(drain_r2ts(&mut t, 0), vec![(0, 4096), (4096, 4096)]);
        t.accept_h2c(&h2c(7, 0, 0, 4096, true), true).unwrap();
        assert_eq!(drain_r2ts(&mut t, 0), vec![(8192, 4096)]);
        t.accept_h2c(&h2c(7, 0, 4096, 1000, false), true).unwrap();
        assert_eq!(drain_r2ts(&mut t, 0), vec![]);
        t.accept_h2c(&h2c(7, 0, 5096, 3096, true), true).unwrap();
        assert_eq!(drain_r2ts(&mut t, 0), vec![(12288, 4096)]);
        t.accept_h2c(&h2c(7, 0, 8192, 4096, true), true).unwrap();
        assert_eq!(drain_r2ts(&mut t, 0), vec![(16384, 100)]);
        t.accept_h2c(&h2c(7, 0, 12288, 4096, true), true).unwrap();
        let a = t.accept_h2c(&h2c(7, 0, 16384, 100, true), true).unwrap();
        assert_eq!(a.complete, Some(Ok(())));
        // Linux hosts send MAXR2T 0: one at a time; our own limit caps generous hosts.
        t.set_max_r2t(0, 4);
        assert_eq!(t.max_outstanding, 1);
        t.set_max_r2t(u32::MAX, 4);
        assert_eq!(t.max_outstanding, 4);
    }

    #[test]
    fn rejects_h2c_that_does_not_match_the_r2t() {
        use FatalErrorStatus::*;
        let fresh = || {
            let mut t = TransferTable::new(8192, 4096);
            t.start_h2c(1, 1, 5, 0u8, 16384);
            t.next_r2t(1).unwrap();
            t
        };
        let cases = [
            (h2c(5, 2, 0, 100, false), InvalidPduHeaderField, FEI_TTAG),
            (h2c(5, 999, 0, 100, false), InvalidPduHeaderField, FEI_TTAG),
            (h2c(6, 1, 0, 100, false), InvalidPduHeaderField, FEI_CCCID),
            (h2c(5, 1, 0, 4100, false), DataTransferLimitExceeded, 0),
            (h2c(5, 1, 8000, 1000, true), DataTransferOutOfRange, 0),
            (h2c(5, 1, 100, 100, false), PduSequenceError, 0),
            (h2c(5, 1, 0, 4096, true), PduSequenceError, 0),
        ];
        for (pdu, fes, fei) in cases {
            let e = fresh().accept_h2c(&pdu, true).unwrap_err();
            assert_eq!((e.fes, e.fei), (fes, fei), "{pdu:?}");
        }
        // Ending the R2T without LAST_PDU.
        let mut t = fresh();
        t.accept_h2c(&h2c(5, 1, 0, 4096, false), true).unwrap();
        assert_eq!(t.accept_h2c(&h2c(5, 1, 4096, 4096, false), true).unwrap_err().fes, PduSequenceError);
        // Data for an idle slot (its command is executing, or never asked for data).
        let mut t: TransferTable<u8, u16> = TransferTable::new(8192, 4096);
        t.set(0, SlotState::Sending);
        assert_eq!(t.accept_h2c(&h2c(5, 0, 0, 1, true), true).unwrap_err().fei, FEI_TTAG);
    }

    #[test]
    fn data_digest_error_drops_the_rest_and_fails_the_command() {
        let mut t = TransferTable::new(u32::MAX, 4096);
        t.start_h2c(2, 2, 1, 0u8, 8192);
        t.next_r2t(2).unwrap();
        let a = t.accept_h2c(&h2c(1, 2, 0, 4096, false), false).unwrap();
        assert_eq!((a.buffer, a.complete), (None, None));
        let a = t.accept_h2c(&h2c(1, 2, 4096, 4096, true), true).unwrap();
        assert_eq!((a.buffer, a.complete), (None, Some(Err(Status::TRANSIENT_TRANSPORT_ERROR))));
        // With several R2Ts: nothing more is solicited, the command ends with the data already asked for.
        let mut t = TransferTable::new(4096, 4096);
        t.set_max_r2t(1, 4);
        t.start_h2c(0, 0, 1, 0u8, 4 * 4096);
        assert_eq!(drain_r2ts(&mut t, 0).len(), 2);
        t.accept_h2c(&h2c(1, 0, 0, 4096, true), false).unwrap();
        assert_eq!(drain_r2ts(&mut t, 0), vec![]);
        let a = t.accept_h2c(&h2c(1, 0, 4096, 4096, true), true).unwrap();
        assert_eq!(a.complete, Some(Err(Status::TRANSIENT_TRANSPORT_ERROR)));
        assert_eq!(t.get(0), SlotState::Idle);
    }
}
