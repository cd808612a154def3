//! [`RdmaConnection`]: one NVMe/RDMA queue pair serving one controller [`Queue`], driven by its reactor.
//!
//! Receive path: `depth` receive buffers (SQE + in-capsule data) are posted at accept, or, on an `srq` listener, the
//! queue pair receives into its reactor's shared receive queue on the device (the reactor finds the connection by the
//! completion's queue pair number and reposts the buffer; the connection owns no receives then). A receive completion
//! shorter than an SQE ends the connection; otherwise the SQE and in-capsule data go to the queue straight from the
//! receive buffer (the queue copies in-capsule data into its engine buffer), then the buffer is queued for reposting
//! (all reposts of a reactor turn go in one `post_recv`) and the command goes to the queue, whose [`Step`] says what to
//! do next.
//!
//! Send path: `FetchData` becomes an RDMA READ of the command's keyed SGL into the engine buffer (at most the
//! negotiated initiator depth outstanding; the rest wait in a FIFO); `Respond` becomes an unsignalled RDMA WRITE of
//! the data (if any) chained with the signalled SEND of the CQE (inline where the queue pair allows), with
//! invalidate when the keyed SGL asked for it and the device can. All work requests of a turn are posted in one
//! `post_send` ([`RdmaConnection::flush`]), as many as the send queue has room for. A SEND's completion releases
//! the slot.
//!
//! Transfer timeout: while signalled work requests (RDMA READs, SENDs) are outstanding and none completes for
//! `[target] transfer_timeout_ms`, the connection ends (`nvmf_target_timeouts_total{state="transfer"}`). Our SENDs'
//! RNR retry count is the host's (its connect request's; Linux asks for 7, retrying forever), so a host that posts
//! no receive buffers would otherwise stall the send queue, and the buffers it holds, for good.
//!
//! Teardown (host disconnect, a work completion error, a fatal queue error, keep-alive expiry, a transfer timeout,
//! shutdown): the queue
//! is told, `rdma_disconnect` moves the queue pair to the error state, and the connection stays until every posted
//! work request has completed (flushed) and no storage op of its queue is in flight, or a flush timeout passed;
//! then the reactor drops it (queue pair first, then its regions).
//!
//! Runs on its reactor thread only; never blocks, allocates nothing per command.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvmf_common::nvme::cqe::CQE_SIZE;
use nvmf_common::nvme::sgl::{SglDescriptor, SglSubtype};
use nvmf_common::nvme::sqe::{SubmissionQueueEntry, SQE_SIZE};
use nvmf_common::transport::rdma::verbs::{MemoryRegion, QueuePair, RdmaError, WorkCompletion};

use super::counters::RdmaCounters;
use super::device::{DeviceContext, SharedReceive};
use super::memory::{post_recvs, post_sends, received, PostScratch, ReceiveQueue, Work};
use super::routing::{split_wr_id, wr_id, ConnectionKey, WrKind};
use crate::backend::{BufferId, IoEngine};
use crate::controller::{Queue, QueueError, SlotId, Stalled, Step};

/// How long a closing connection waits for its posted work requests to flush before it is dropped anyway
/// (destroying the queue pair ends them all).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RdmaConnectionError {
    /// The queue ended (keep-alive expiry, association ended, host Disconnect, overrun).
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A verb failed (posting, copying out of a region).
    #[error(transparent)]
    Verbs(#[from] RdmaError),
    /// A work request completed with an error.
    #[error("{kind:?} work request of slot/buffer {index} completed with {status}")]
    Completion {
        /// What it was.
        kind: WrKind,
        /// Its index.
        index: u16,
        /// The status name.
        status: &'static str,
    },
    /// The host broke the transport's rules.
    #[error("{0}")]
    Protocol(&'static str),
    /// No RDMA READ or SEND completed for the transfer timeout while some were outstanding (a host that posts no
    /// receive buffers, or whose NIC stopped answering).
    #[error("the host stalled: no RDMA READ or SEND completed for {timeout_ms} ms")]
    Stalled {
        /// The transfer timeout.
        timeout_ms: u32,
    },
}

/// A command waiting for an RDMA READ slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingRead {
    slot: SlotId,
    buffer: BufferId,
    len: u32,
}

/// RDMA READs of one queue pair: at most `max` outstanding (the initiator depth negotiated at accept: more would
/// stall the send queue), the rest waiting in FIFO order in a queue sized once for every slot.
#[derive(Debug)]
struct ReadThrottle {
    waiting: VecDeque<PendingRead>,
    outstanding: u32,
    max: u32,
}

impl ReadThrottle {
    fn new(max: u32, slots: usize) -> Self {
        ReadThrottle { waiting: VecDeque::with_capacity(slots), outstanding: 0, max: max.max(1) }
    }

    /// Queue a command's READ.
    fn push(&mut self, read: PendingRead) {
        self.waiting.push_back(read);
    }

    /// The next READ to post now, if the depth allows one (it counts as outstanding from here).
    fn next(&mut self) -> Option<PendingRead> {
        if self.outstanding >= self.max {
            return None;
        }
        let read = self.waiting.pop_front()?;
        self.outstanding += 1;
        Some(read)
    }

    /// A READ completed (or was flushed).
    fn completed(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// Forget the waiting READs (the connection is closing).
    fn clear(&mut self) {
        self.waiting.clear();
    }
}

/// Whether a queue pair's transfers move: the transfer timer runs from the last reactor turn in which a signalled
/// work request completed (or since signalled ones became outstanding), and is off while none is outstanding.
#[derive(Debug, Default)]
struct TransferClock {
    since: Option<Instant>,
    progressed: bool,
}

impl TransferClock {
    /// A signalled work request completed.
    fn progress(&mut self) {
        self.progressed = true;
    }

    /// End of a turn at `now`; `waiting`: signalled work requests are outstanding.
    fn note(&mut self, now: Instant, waiting: bool) {
        if !waiting {
            self.since = None;
        } else if self.progressed || self.since.is_none() {
            self.since = Some(now);
        }
        self.progressed = false;
    }

    /// When the queue pair is stalled, if it waits on the host now.
    fn deadline(&self, timeout: Duration) -> Option<Instant> {
        self.since.map(|since| since + timeout)
    }
}

/// How many of the `pending` send queue work requests to post with `room` free send queue entries: as many as fit,
/// but never a WRITE without the SEND that follows it (that SEND's completion frees both).
fn postable(pending: &[Work], room: usize) -> usize {
    let n = pending.len().min(room);
    if n > 0 && matches!(pending[n - 1], Work::Write { .. }) {
        n - 1
    } else {
        n
    }
}

/// A keyed SGL data block of a command.
#[derive(Debug, Clone, Copy)]
struct Keyed {
    address: u64,
    length: u32,
    key: u32,
    invalidate: bool,
}

/// How a connection was set up (by the reactor's accept).
#[derive(Debug)]
pub(crate) struct ConnectionSetup {
    pub(crate) key: ConnectionKey,
    pub(crate) device: usize,
    pub(crate) depth: u16,
    pub(crate) receive_size: usize,
    pub(crate) cq_entries: u32,
    pub(crate) max_reads: u32,
    pub(crate) invalidate: bool,
    /// A SEND with invalidate may carry its CQE inline (not on iWARP: see `DeviceContext::iwarp`).
    pub(crate) inline_invalidate: bool,
    /// RDMA WRITEs are signalled (Soft-iWARP: see `DeviceContext::soft_iwarp`).
    pub(crate) signal_writes: bool,
    pub(crate) peer: Option<SocketAddr>,
}

/// One queue pair and its queue (see the module docs).
#[derive(Debug)]
pub(crate) struct RdmaConnection {
    // Dropped first: destroying the queue pair ends every work request naming the regions below.
    qp: QueuePair,
    /// Own receive buffers (`None`: receives through the shared receive queue).
    receive: Option<MemoryRegion<Box<[u8]>>>,
    responses: MemoryRegion<Box<[u8]>>,
    queue: Queue,
    setup: ConnectionSetup,
    /// Response slots (queue slots this connection can answer).
    response_slots: usize,
    inline_cqe: bool,
    max_send_wr: u32,
    /// Send queue entries in use (a WRITE is freed with the SEND after it).
    sq_used: u32,
    /// Signalled send queue work requests and receives posted and not completed.
    sends_outstanding: u32,
    receives_outstanding: u32,
    reads: ReadThrottle,
    pending: Vec<Work>,
    reposts: Vec<u16>,
    /// Per slot: the engine buffer handed to the device, and the send queue entries its SEND frees.
    held: Vec<Option<BufferId>>,
    send_cost: Vec<u8>,
    closing_since: Option<Instant>,
    transfers: TransferClock,
    steps: Vec<Step>,
    scratch: PostScratch,
}

impl RdmaConnection {
    /// A connection on `qp` (own receives, if `receive` is given, not yet posted) serving `queue`.
    pub(crate) fn new(
        qp: QueuePair,
        receive: Option<MemoryRegion<Box<[u8]>>>,
        responses: MemoryRegion<Box<[u8]>>,
        queue: Queue,
        setup: ConnectionSetup,
    ) -> Self {
        let caps = qp.caps();
        let response_slots = responses.len() / CQE_SIZE;
        let depth = usize::from(setup.depth);
        let reposts = if receive.is_some() { (0..setup.depth).collect() } else { Vec::new() };
        RdmaConnection {
            inline_cqe: caps.max_inline_data >= 16,
            max_send_wr: caps.max_send_wr,
            qp,
            receive,
            responses,
            queue,
            response_slots,
            sq_used: 0,
            sends_outstanding: 0,
            receives_outstanding: 0,
            reads: ReadThrottle::new(setup.max_reads, response_slots),
            pending: Vec::with_capacity(3 * response_slots),
            reposts,
            held: vec![None; response_slots],
            send_cost: vec![0; response_slots],
            closing_since: None,
            transfers: TransferClock::default(),
            steps: Vec::with_capacity(depth),
            scratch: PostScratch::default(),
            setup,
        }
    }

    /// The queue pair (its CM id: events, accept).
    pub(crate) fn qp_mut(&mut self) -> &mut QueuePair {
        &mut self.qp
    }

    /// The queue pair.
    pub(crate) fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// How it was set up.
    pub(crate) fn setup(&self) -> &ConnectionSetup {
        &self.setup
    }

    /// Whether it is ending (the reactor drops it once [`RdmaConnection::is_drained`]).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing_since.is_some()
    }

    /// Closing, with every posted work request completed and no storage op in flight (or the flush timeout past).
    pub(crate) fn is_drained(&self, now: Instant) -> bool {
        let Some(since) = self.closing_since else { return false };
        let flushed = self.sends_outstanding == 0 && self.receives_outstanding == 0;
        (flushed || now.saturating_duration_since(since) >= FLUSH_TIMEOUT) && self.queue.in_flight() == 0
    }

    /// Whether the queue has work for [`RdmaConnection::poll`] at the end of this turn (`Queue::wants_poll`).
    pub(crate) fn wants_poll(&self) -> bool {
        !self.is_closing() && self.queue.wants_poll()
    }

    /// When this connection needs the reactor next without an event: the queue's next deadline (Connect, keep-alive)
    /// and the transfer timeout; while closing, the flush timeout ([`RdmaConnection::is_drained`]).
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        match self.closing_since {
            Some(since) => Some(since + FLUSH_TIMEOUT),
            None => self.transfer_deadline().into_iter().chain(self.queue.next_deadline()).min(),
        }
    }

    /// End of a reactor turn (after [`RdmaConnection::flush`]): run the transfer timer while signalled work requests
    /// are outstanding.
    pub(crate) fn note_turn(&mut self, now: Instant) {
        self.transfers.note(now, !self.is_closing() && self.sends_outstanding > 0);
    }

    fn transfer_timeout_ms(&self) -> u32 {
        self.queue.target().params().transfer_timeout_ms
    }

    fn transfer_deadline(&self) -> Option<Instant> {
        self.transfers.deadline(Duration::from_millis(u64::from(self.transfer_timeout_ms())))
    }

    /// Whether it receives through the shared receive queue.
    pub(crate) fn uses_shared_receive(&self) -> bool {
        self.receive.is_none()
    }

    /// A completion of one of this connection's work requests (`shared`: the shared receive region, for a
    /// [`WrKind::SharedRecv`], whose buffer the caller reposts).
    pub(crate) fn completion(
        &mut self,
        engine: &mut IoEngine,
        wc: &WorkCompletion,
        kind: WrKind,
        index: u16,
        shared: Option<&SharedReceive>,
        counters: &RdmaCounters,
    ) {
        match kind {
            WrKind::Recv => self.receives_outstanding = self.receives_outstanding.saturating_sub(1),
            WrKind::SharedRecv => {}
            WrKind::Read => {
                self.transfers.progress();
                self.sends_outstanding = self.sends_outstanding.saturating_sub(1);
                self.sq_used = self.sq_used.saturating_sub(1);
                self.reads.completed();
                self.end_hold(engine, index);
            }
            // Its send queue entry is freed with the SEND after it, and so is its buffer.
            WrKind::Write => {
                self.transfers.progress();
                self.sends_outstanding = self.sends_outstanding.saturating_sub(1);
            }
            WrKind::Send => {
                self.transfers.progress();
                self.sends_outstanding = self.sends_outstanding.saturating_sub(1);
                let cost = self.send_cost.get(usize::from(index)).copied().unwrap_or(1);
                self.sq_used = self.sq_used.saturating_sub(u32::from(cost));
                self.end_hold(engine, index);
            }
        }
        if !wc.is_success() {
            counters.completion_error(wc.status);
            if !self.is_closing() {
                let status = wc.status.name();
                self.close(engine, &RdmaConnectionError::Completion { kind, index, status });
            }
            return;
        }
        counters.completed(kind);
        if self.is_closing() {
            return;
        }
        let result = match kind {
            WrKind::Recv | WrKind::SharedRecv => self.receive(engine, shared, index, wc.byte_len),
            WrKind::Read => self
                .queue
                .data_received(engine, SlotId::new(index))
                .map_err(RdmaConnectionError::from)
                .and_then(|step| self.apply(engine, step))
                .and_then(|()| self.start_reads(engine)),
            WrKind::Send => {
                self.queue.release(engine, SlotId::new(index));
                Ok(())
            }
            WrKind::Write => Ok(()),
        };
        if let Err(e) = result {
            self.close(engine, &e);
        }
    }

    /// A storage op of this connection's queue completed.
    pub(crate) fn io_completed(&mut self, engine: &mut IoEngine, slot: SlotId, result: Result<u32, std::io::Error>) {
        let step = self.queue.io_completed(engine, slot, result);
        if self.is_closing() {
            return;
        }
        if let Err(e) = self.apply(engine, step) {
            self.close(engine, &e);
        }
    }

    /// At the queue's timer, when its notifier fired, or at the end of a turn while it
    /// [`RdmaConnection::wants_poll`]: the queue's timers, held AERs and retries.
    pub(crate) fn poll(&mut self, engine: &mut IoEngine, now: Instant) {
        if self.is_closing() {
            return;
        }
        if self.transfer_deadline().is_some_and(|deadline| now >= deadline) {
            self.queue.target().count_timeout(Stalled::Transfer);
            let timeout_ms = self.transfer_timeout_ms();
            self.close(engine, &RdmaConnectionError::Stalled { timeout_ms });
            return;
        }
        let mut steps = std::mem::take(&mut self.steps);
        let polled = self.queue.poll(engine, now, &mut steps);
        let mut result = polled.map_err(RdmaConnectionError::from);
        for step in steps.drain(..) {
            if result.is_ok() {
                result = self.apply(engine, step);
            }
        }
        self.steps = steps;
        if let Err(e) = result {
            self.close(engine, &e);
        }
    }

    /// Post this turn's receive reposts (first, so a host answered below finds its buffer back) and the send
    /// queue work requests that fit, each batch in one call.
    pub(crate) fn flush(&mut self, engine: &mut IoEngine, device: &DeviceContext, counters: &RdmaCounters) {
        if self.is_closing() {
            return;
        }
        if let Some(receive) = self.receive.as_ref().filter(|_| !self.reposts.is_empty()) {
            let key = self.setup.key;
            let size = self.setup.receive_size;
            let result = post_recvs(
                &mut ReceiveQueue::Pair(&mut self.qp),
                receive,
                size,
                &self.reposts,
                |i| wr_id(key, WrKind::Recv, i),
                &mut self.scratch,
            );
            let posted = posted_count(&result, self.reposts.len());
            self.receives_outstanding += u32::try_from(posted).unwrap_or(u32::MAX);
            counters.posted_receives(posted);
            self.reposts.clear();
            if let Err(e) = result {
                self.close(engine, &e.into());
                return;
            }
        }
        if self.pending.is_empty() {
            return;
        }
        let room = usize::try_from(self.max_send_wr.saturating_sub(self.sq_used)).unwrap_or(0);
        let n = postable(&self.pending, room);
        if n == 0 {
            return;
        }
        let result = post_sends(&mut self.qp, &device.pool, &self.responses, &self.pending[..n], &mut self.scratch);
        let posted = posted_count(&result, n);
        for w in &self.pending[..posted] {
            counters.posted(w);
            if !matches!(w, Work::Write { signal: None, .. }) {
                self.sends_outstanding += 1;
            }
        }
        self.sq_used += u32::try_from(posted).unwrap_or(u32::MAX);
        self.pending.drain(..posted);
        if let Err(e) = result {
            self.close(engine, &e.into());
        }
    }

    /// End the connection (idempotent): drop unposted work, tell the queue, disconnect (the queue pair's posted
    /// work requests then flush).
    pub(crate) fn close(&mut self, engine: &mut IoEngine, why: &RdmaConnectionError) {
        if self.is_closing() {
            return;
        }
        match why {
            RdmaConnectionError::Queue(QueueError::Disconnected { .. }) => {
                tracing::debug!(traddr = ?self.setup.peer, qid = ?self.queue.qid(), "NVMe/RDMA queue deleted by the host");
            }
            _ => {
                tracing::debug!(traddr = ?self.setup.peer, qid = ?self.queue.qid(), reason = %why, "NVMe/RDMA connection ending")
            }
        }
        self.closing_since = Some(Instant::now());
        for w in std::mem::take(&mut self.pending) {
            match w {
                Work::Read { wr_id, .. } | Work::Send { wr_id, .. } => {
                    if let Some((_, _, index)) = split_wr_id(wr_id) {
                        self.end_hold(engine, index);
                    }
                }
                Work::Write { .. } => {}
            }
        }
        self.reads.clear();
        self.reposts.clear();
        self.queue.disconnect(engine);
        if let Err(e) = self.qp.cm_id_mut().disconnect() {
            tracing::debug!(error = %e, "rdma_disconnect");
        }
    }

    /// The host disconnected (RDMA CM `DISCONNECTED`).
    pub(crate) fn peer_disconnected(&mut self, engine: &mut IoEngine) {
        if !self.is_closing() {
            tracing::debug!(traddr = ?self.setup.peer, qid = ?self.queue.qid(), "NVMe/RDMA host disconnected");
        }
        self.close(engine, &RdmaConnectionError::Protocol("host disconnected"));
    }

    /// Before the reactor drops it: take every buffer back from the device (its queue pair is destroyed next).
    pub(crate) fn finish(&mut self, engine: &mut IoEngine) {
        for index in 0..self.held.len() {
            self.end_hold(engine, u16::try_from(index).unwrap_or(u16::MAX));
        }
    }

    /// A receive buffer completed with `byte_len` bytes: hand the command to the queue. `shared`: the buffer is
    /// in the shared receive region (the reactor reposts it) rather than the connection's own.
    fn receive(
        &mut self,
        engine: &mut IoEngine,
        shared: Option<&SharedReceive>,
        index: u16,
        byte_len: u32,
    ) -> Result<(), RdmaConnectionError> {
        let len = usize::try_from(byte_len).unwrap_or(usize::MAX);
        if len < SQE_SIZE || len > self.setup.receive_size {
            return Err(RdmaConnectionError::Protocol("command capsule shorter than an SQE or longer than IOCCSZ"));
        }
        let (region, size) = match shared {
            Some(shared) => (&shared.region, shared.buffer_size),
            None => (
                self.receive
                    .as_ref()
                    .ok_or(RdmaConnectionError::Protocol("receive on a queue pair without buffers"))?,
                self.setup.receive_size,
            ),
        };
        let at = usize::from(index) * size;
        let capsule = received(region, at, len)
            .ok_or(RdmaConnectionError::Protocol("receive buffer outside the receive region"))?;
        let sqe =
            SubmissionQueueEntry::parse(&capsule[..SQE_SIZE]).map_err(|_| RdmaConnectionError::Protocol("bad SQE"))?;
        // The queue copies in-capsule data into its own buffer: after this the receive buffer can be reposted.
        let step = self.queue.command(engine, &sqe, &capsule[SQE_SIZE..]);
        if shared.is_none() {
            self.reposts.push(index);
        }
        self.apply(engine, step?)
    }

    /// Carry out what the queue asked for.
    fn apply(&mut self, engine: &mut IoEngine, mut step: Step) -> Result<(), RdmaConnectionError> {
        loop {
            match step {
                Step::Pending => return Ok(()),
                Step::FetchData { slot, len: 0, .. } => step = self.queue.data_received(engine, slot)?,
                Step::FetchData { slot, buffer, len, .. } => {
                    self.reads.push(PendingRead { slot, buffer, len });
                    return self.start_reads(engine);
                }
                Step::Respond { slot, cqe, data } => {
                    let index = usize::from(slot.index());
                    if index >= self.response_slots {
                        return Err(RdmaConnectionError::Protocol("more commands outstanding than the queue depth"));
                    }
                    self.responses.write_at(index * CQE_SIZE, &cqe.to_bytes())?;
                    let keyed = self.keyed(slot);
                    let mut cost = 1;
                    if let Some((buffer, len)) = data.filter(|&(_, len)| len > 0) {
                        let Some(k) = keyed else {
                            return Err(RdmaConnectionError::Protocol("data for a command without a keyed SGL"));
                        };
                        let len = len.min(k.length);
                        let local = self.hold(engine, slot.index(), buffer, len)?;
                        let signal =
                            self.setup.signal_writes.then(|| wr_id(self.setup.key, WrKind::Write, slot.index()));
                        self.pending.push(Work::Write { signal, local, len, remote_addr: k.address, rkey: k.key });
                        cost = 2;
                    }
                    self.send_cost[index] = cost;
                    let invalidate =
                        keyed.filter(|k| k.invalidate && self.setup.invalidate && k.length > 0).map(|k| k.key);
                    self.pending.push(Work::Send {
                        wr_id: wr_id(self.setup.key, WrKind::Send, slot.index()),
                        response: index * CQE_SIZE,
                        invalidate,
                        inline: self.inline_cqe && (invalidate.is_none() || self.setup.inline_invalidate),
                    });
                    return Ok(());
                }
            }
        }
    }

    /// Issue RDMA READs from the FIFO while the initiator depth allows.
    fn start_reads(&mut self, engine: &mut IoEngine) -> Result<(), RdmaConnectionError> {
        while let Some(read) = self.reads.next() {
            let Some(k) = self.keyed(read.slot) else {
                return Err(RdmaConnectionError::Protocol("host data for a command without a keyed SGL"));
            };
            let len = read.len.min(k.length);
            let local = self.hold(engine, read.slot.index(), read.buffer, len)?;
            self.pending.push(Work::Read {
                wr_id: wr_id(self.setup.key, WrKind::Read, read.slot.index()),
                local,
                len,
                remote_addr: k.address,
                rkey: k.key,
            });
        }
        Ok(())
    }

    /// The keyed SGL data block of `slot`'s command, if it has one.
    fn keyed(&self, slot: SlotId) -> Option<Keyed> {
        match self.queue.sqe(slot)?.sgl1().ok()? {
            SglDescriptor::KeyedDataBlock { address, length, key, subtype } => {
                Some(Keyed { address, length, key, invalidate: subtype == SglSubtype::Invalidate })
            }
            _ => None,
        }
    }

    /// Hand `buffer` (its first `len` bytes) to the device for `slot`; its offset in the pool region.
    fn hold(
        &mut self,
        engine: &mut IoEngine,
        slot: u16,
        buffer: BufferId,
        len: u32,
    ) -> Result<usize, RdmaConnectionError> {
        let index = usize::from(slot);
        if index >= self.held.len() {
            return Err(RdmaConnectionError::Protocol("more commands outstanding than the queue depth"));
        }
        let offset = engine
            .start_transfer(buffer, len)
            .ok_or(RdmaConnectionError::Protocol("engine buffer not available for a transfer"))?;
        self.held[index] = Some(buffer);
        Ok(offset)
    }

    /// The device is done with `slot`'s buffer (if it held one).
    fn end_hold(&mut self, engine: &mut IoEngine, slot: u16) {
        if let Some(buffer) = self.held.get_mut(usize::from(slot)).and_then(Option::take) {
            engine.end_transfer(buffer);
        }
    }
}

/// Work requests of a batch of `n` that were posted: all, or those before the refused one.
fn posted_count(result: &Result<(), RdmaError>, n: usize) -> usize {
    match result {
        Ok(()) => n,
        Err(RdmaError::Post { posted, .. }) => *posted,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(slot: u16) -> PendingRead {
        PendingRead { slot: SlotId::new(slot), buffer: BufferId::from_raw(u32::from(slot)), len: 4096 }
    }

    #[test]
    fn reads_beyond_the_initiator_depth_wait_in_order() {
        let mut t = ReadThrottle::new(2, 8);
        for slot in 0..4 {
            t.push(read(slot));
        }
        assert_eq!(t.next(), Some(read(0)));
        assert_eq!(t.next(), Some(read(1)));
        assert_eq!(t.next(), None, "depth 2 reached");
        t.completed();
        assert_eq!(t.next(), Some(read(2)));
        assert_eq!(t.next(), None);
        t.completed();
        t.completed();
        assert_eq!(t.next(), Some(read(3)));
        assert_eq!(t.next(), None, "nothing waiting");
        t.push(read(5));
        t.clear();
        t.completed();
        assert_eq!(t.next(), None, "cleared");
        // A device reporting no initiator depth still gets one READ at a time.
        let mut one = ReadThrottle::new(0, 1);
        one.push(read(0));
        one.push(read(1));
        assert_eq!(one.next(), Some(read(0)));
        assert_eq!(one.next(), None);
    }

    #[test]
    fn the_transfer_timer_runs_from_the_last_progress_while_work_is_outstanding() {
        let timeout = Duration::from_secs(30);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut clock = TransferClock::default();
        clock.note(at(0), false);
        assert_eq!(clock.deadline(timeout), None, "nothing outstanding");
        clock.note(at(10), true);
        assert_eq!(clock.deadline(timeout), Some(at(10) + timeout), "runs from when work became outstanding");
        clock.note(at(20), true);
        assert_eq!(clock.deadline(timeout), Some(at(10) + timeout), "no completion: the deadline stays");
        clock.progress();
        clock.note(at(30), true);
        assert_eq!(clock.deadline(timeout), Some(at(30) + timeout), "a completion restarts it");
        clock.note(at(40), true);
        assert_eq!(clock.deadline(timeout), Some(at(30) + timeout));
        clock.progress();
        clock.note(at(50), false);
        assert_eq!(clock.deadline(timeout), None, "all completed");
        clock.note(at(60), true);
        assert_eq!(clock.deadline(timeout), Some(at(60) + timeout));
    }

    #[test]
    fn a_write_is_never_posted_without_its_send() {
        let write = Work::Write { signal: None, local: 0, len: 4096, remote_addr: 1, rkey: 2 };
        let send = Work::Send { wr_id: 3, response: 0, invalidate: None, inline: true };
        let read = Work::Read { wr_id: 4, local: 0, len: 512, remote_addr: 5, rkey: 6 };
        let pending = [send, write, send, read, write, send];
        assert_eq!(postable(&pending, 10), 6);
        assert_eq!(postable(&pending, 6), 6);
        assert_eq!(postable(&pending, 5), 4, "the WRITE at 4 waits for room for its SEND");
        assert_eq!(postable(&pending, 3), 3);
        assert_eq!(postable(&pending, 2), 1, "the WRITE at 1 waits");
        assert_eq!(postable(&pending, 0), 0);
        assert_eq!(postable(&[], 4), 0);
    }

    #[test]
    fn a_refused_post_counts_only_what_went_before_it() {
        assert_eq!(posted_count(&Ok(()), 5), 5);
        let refused = Err(RdmaError::Post {
            verb: "ibv_post_send",
            errno: nvmf_common::transport::rdma::verbs::Errno(12),
            posted: 2,
            total: 5,
        });
        assert_eq!(posted_count(&refused, 5), 2);
        assert_eq!(posted_count(&Err(RdmaError::InvalidArgument { what: "x", detail: "y".into() }), 5), 0);
    }
}
