//! [`RdmaQueue`]: one host-side NVMe/RDMA queue pair as a poll-driven state machine, the twin of
//! NVMe/TCP `TcpQueue` (same [`Request`], [`Completion`] and [`Rejected`] types, same `submit` / `poll` /
//! `next_completion` shape).
//!
//! Whoever owns the queue drives it from one thread; nothing in it locks. [`RdmaQueue::submit`] stages a
//! command — copies write data into the slot's registered buffer (one memcpy; zero copy needs a pool-buffer
//! API later), sets SGL1 (in-capsule data block for writes up to the in-capsule limit on I/O queues, keyed SGL
//! otherwise, a null keyed SGL for no data) and writes the SQE into its capsule buffer — and
//! [`RdmaQueue::poll`] posts every staged capsule with one `post_send` (each keyed command's window bind
//! chained before its SEND), reaps the completion queue, reposts the consumed receives with one `post_recv`,
//! and sleeps on the completion channel and the RDMA CM event channel only when nothing completed (a
//! [`RdmaQueue::waker`] ends that sleep from another thread: how [`crate::queue::handle::QueueHandle`]'s I/O
//! thread is told of new requests).
//!
//! A command completes when its SEND completed, its response arrived and its data buffer is closed to the
//! controller again: the keyed SGL asks for send with invalidate (subtype Fh), and when the response did not
//! invalidate the window the host posts a local invalidate and waits for it. Only then are read data copied
//! out. Command identifiers are slot index plus a 4-bit generation, as on TCP.
//!
//! Anything the controller does that NVMe/RDMA does not allow — a response for no outstanding command, a
//! second response for one, an invalidated rkey that is not the command's (the checks of `slot.rs`), a failed
//! work completion, a disconnect — fails the whole queue
//! with a typed [`HostError`]: every outstanding command completes with it and the connection is
//! disconnected. Commands outstanding longer than the command timeout fail the queue too (not Asynchronous
//! Event Requests).
//!
//! Never blocks except in [`RdmaQueue::connect`] (address and route resolution, the CM connect; bounded by
//! the connect timeout) and in [`RdmaQueue::poll`] for at most the timeout the caller passes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_common::nvme::opcode::admin::ASYNC_EVENT_REQUEST;
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype};
use nvmf_common::transport::rdma::private_data::RdmaCmRequest;
use nvmf_common::transport::rdma::verbs::{
    CmEvent, CmEventKind, CmId, ConnParam, EventChannel, WcStatus, WorkCompletion,
};

use super::memory::{decode_wr_id, rdma, Capsule, QueueMemory, Transfer, WrKind};
pub use super::slot::RdmaCommandState;
use super::slot::Slot;
use crate::error::HostError;
use crate::queue::{command_id, BareQueue, Completion, DataDirection, QueueStats, Rejected, Request};

const COMPLETIONS: Token = Token(0);
const CM_EVENTS: Token = Token(1);
const WAKER: Token = Token(2);
/// Work completions taken per `ibv_poll_cq`.
const POLL_BATCH: usize = 32;

/// Whether "no memory windows" has been logged (once per process).
static NO_WINDOWS_LOGGED: AtomicBool = AtomicBool::new(false);

/// Settings of one queue.
#[derive(Debug, Clone)]
pub struct RdmaQueueOptions {
    /// The queue identifier (0 = admin), sent in the RDMA CM connect request.
    pub qid: u16,
    /// Commands outstanding at most (1..=4096); HSQSIZE (0's based) is `depth` and the host posts
    /// `depth + 1` receives (HRQSIZE), so pass SQSIZE from Fabrics Connect here.
    pub depth: u16,
    /// Largest write sent as in-capsule data on an I/O queue (from Identify IOCCSZ: `IOCCSZ * 16 - 64`); the
    /// admin queue never carries in-capsule data.
    pub in_capsule_limit: u32,
    /// The controller ID for the RDMA CM connect request (0xFFFF or the association's).
    pub cntlid: u16,
    /// Use a memory window per command when the device has them (otherwise, or when false, one region per
    /// slot and direction with a key valid for the queue's life).
    pub memory_windows: bool,
    /// Bound on address and route resolution and on the CM connect.
    pub connect_timeout: Duration,
    /// A command outstanding longer than this fails the queue.
    pub command_timeout: Duration,
}

impl Default for RdmaQueueOptions {
    fn default() -> Self {
        RdmaQueueOptions {
            qid: 0,
            depth: 31,
            in_capsule_limit: 0,
            cntlid: 0xFFFF,
            memory_windows: true,
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
        }
    }
}

/// A host NVMe/RDMA queue pair (see the module docs).
pub struct RdmaQueue<T> {
    /// First: the queue pair is destroyed before the event channel it reports on.
    memory: QueueMemory,
    events: EventChannel,
    poll: Poll,
    mio_events: Events,
    waker: Option<Arc<Waker>>,
    qid: u16,
    in_capsule_limit: u32,
    slots: Vec<Slot<T>>,
    free: Vec<u16>,
    staged: Vec<Capsule>,
    reposts: Vec<usize>,
    invalidates: Vec<usize>,
    completed: VecDeque<Completion<T>>,
    wcs: [WorkCompletion; POLL_BATCH],
    stats: QueueStats,
    failed: Option<HostError>,
    disconnected: bool,
    command_timeout: Duration,
    last_timeout_check: Instant,
}

impl<T> std::fmt::Debug for RdmaQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaQueue")
            .field("qid", &self.qid)
            .field("memory", &self.memory)
            .field("outstanding", &self.outstanding())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// The next RDMA CM event on `channel` that is not a time-wait exit, within `deadline`.
fn next_event(channel: &EventChannel, qid: u16, deadline: Instant, what: &str) -> Result<CmEvent, HostError> {
    let start = Instant::now();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HostError::Timeout { what: format!("{what} on queue {qid}"), after: start.elapsed() });
        }
        match channel.wait(left).map_err(rdma(qid, "waiting for an RDMA CM event"))? {
            Some(ev) if ev.kind == CmEventKind::TimewaitExit => continue,
            Some(ev) => return Ok(ev),
            None => continue,
        }
    }
}

fn expect_event(
    channel: &EventChannel,
    qid: u16,
    deadline: Instant,
    want: CmEventKind,
    what: &'static str,
) -> Result<(), HostError> {
    let ev = next_event(channel, qid, deadline, what)?;
    if ev.kind == want {
        return Ok(());
    }
    Err(HostError::Rdma { qid, what, message: format!("{:?} (status {})", ev.kind, ev.status) })
}

/// Why a CM connect was rejected: the NVMe/RDMA reject status when the private data carries one.
fn reject_reason(ev: &CmEvent) -> String {
    match ev.nvme_reject() {
        Ok(r) => format!("NVMe/RDMA reject status {:?} ({:#x})", r.sts, r.sts.to_u16()),
        Err(_) => format!("RDMA CM status {} without NVMe/RDMA reject data", ev.status),
    }
}

impl<T> RdmaQueue<T> {
    /// Resolve `addr`, create the queue pair and its memory, post the receives and connect with the
    /// NVMe/RDMA private data (blocking, bounded by `options.connect_timeout`). A reject is
    /// [`HostError::RdmaRejected`] with the controller's NVMe/RDMA status.
    pub fn connect(addr: SocketAddr, options: &RdmaQueueOptions) -> Result<Self, HostError> {
        let qid = options.qid;
        command_id::check_depth(options.depth)?;
        let deadline = Instant::now() + options.connect_timeout;
        let events = EventChannel::new().map_err(rdma(qid, "creating an RDMA CM event channel"))?;
        let mut id = CmId::new(&events).map_err(rdma(qid, "creating an RDMA CM id"))?;
        id.resolve_addr(None, addr, options.connect_timeout).map_err(rdma(qid, "resolving the RDMA address"))?;
        expect_event(&events, qid, deadline, CmEventKind::AddrResolved, "resolving the RDMA address")?;
        id.resolve_route(options.connect_timeout).map_err(rdma(qid, "resolving the RDMA route"))?;
        expect_event(&events, qid, deadline, CmEventKind::RouteResolved, "resolving the RDMA route")?;
        let device = id.device().map_err(rdma(qid, "opening the device"))?;
        let attrs = device.query().map_err(rdma(qid, "querying the device"))?;
        let slots = usize::from(options.depth);
        let windows = options.memory_windows
            && attrs.device_cap_flags.memory_windows_type_2()
            && usize::try_from(attrs.max_mw).is_ok_and(|m| m >= slots);
        if options.memory_windows && !windows && !NO_WINDOWS_LOGGED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                device = %device.name(),
                "no type 2 memory windows: data buffers keep their remote key for the queue's life"
            );
        }
        let receives = slots + 1;
        let mut memory = QueueMemory::new(qid, id, &device, slots, receives, windows)?;
        let all: Vec<usize> = (0..receives).collect();
        memory.post_receives(&all)?;

        // RDMA READs the controller may have outstanding against our memory (its writes' data).
        let rd = u8::try_from(attrs.max_qp_rd_atom.min(attrs.max_qp_init_rd_atom).min(16)).unwrap_or(1);
        let request = RdmaCmRequest { qid, hrqsize: options.depth + 1, hsqsize: options.depth, cntlid: options.cntlid };
        let param = ConnParam { responder_resources: rd, initiator_depth: rd, ..ConnParam::default() };
        memory.cm_id_mut().connect_nvme(&request, param).map_err(rdma(qid, "connecting"))?;
        let ev = next_event(&events, qid, deadline, "RDMA CM connect")?;
        match ev.kind {
            CmEventKind::Established => {}
            CmEventKind::Rejected => return Err(HostError::RdmaRejected { qid, addr, reason: reject_reason(&ev) }),
            kind => {
                return Err(HostError::Rdma {
                    qid,
                    what: "connecting",
                    message: format!("{kind:?} (status {}) from {addr}", ev.status),
                })
            }
        }

        let poll = Poll::new().map_err(|e| HostError::io(qid, "creating a poller", &e))?;
        let reg = |fd, token| {
            poll.registry()
                .register(&mut SourceFd(&fd), token, Interest::READABLE)
                .map_err(|e| HostError::io(qid, "registering an RDMA channel", &e))
        };
        reg(memory.completion_fd(), COMPLETIONS)?;
        reg(events.as_raw_fd(), CM_EVENTS)?;
        let now = Instant::now();
        Ok(RdmaQueue {
            memory,
            events,
            poll,
            mio_events: Events::with_capacity(4),
            waker: None,
            qid,
            in_capsule_limit: options.in_capsule_limit,
            slots: (0..slots).map(|_| Slot::new(now)).collect(),
            free: (0..options.depth).rev().collect(),
            staged: Vec::with_capacity(slots),
            reposts: Vec::with_capacity(receives),
            invalidates: Vec::with_capacity(slots),
            completed: VecDeque::with_capacity(slots),
            wcs: [WorkCompletion::default(); POLL_BATCH],
            stats: QueueStats::default(),
            failed: None,
            disconnected: false,
            command_timeout: options.command_timeout,
            last_timeout_check: now,
        })
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Whether commands get a memory window each (per-command remote access invalidation).
    pub fn memory_windows(&self) -> bool {
        self.memory.has_windows()
    }

    /// Change the in-capsule data limit (after Identify told IOCCSZ).
    pub fn set_in_capsule_limit(&mut self, limit: u32) {
        self.in_capsule_limit = limit;
    }

    /// Counters (`r2ts` stays 0: NVMe/RDMA has none).
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Command identifiers free for `submit`.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// A waker that ends a [`poll`](Self::poll) wait from another thread (registered beside the completion
    /// channel; made once, then shared).
    pub fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        if let Some(w) = &self.waker {
            return Ok(Arc::clone(w));
        }
        let w = Waker::new(self.poll.registry(), WAKER).map_err(|e| HostError::io(self.qid, "creating a waker", &e))?;
        let w = Arc::new(w);
        self.waker = Some(Arc::clone(&w));
        Ok(w)
    }

    /// Commands outstanding (staged ones included).
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether a command that can time out is outstanding: any but the admin queue's Asynchronous Event
    /// Requests, which wait for an event as long as it takes.
    pub fn timed_outstanding(&self) -> bool {
        // Only the admin queue has commands without a timeout: an I/O queue answers without a scan.
        self.outstanding() > 0
            && (self.qid != 0 || self.slots.iter().any(|s| s.state != RdmaCommandState::Free && s.timed))
    }

    /// The state of the command with identifier `cid` ([`RdmaCommandState::Free`] if none is outstanding).
    pub fn command_state(&self, cid: u16) -> RdmaCommandState {
        self.live(cid).map_or(RdmaCommandState::Free, |i| self.slots[i].state)
    }

    /// The error the queue failed with, if it did.
    pub fn failure(&self) -> Option<&HostError> {
        self.failed.as_ref()
    }

    /// The slot of a live command with identifier `cid`.
    fn live(&self, cid: u16) -> Option<usize> {
        let index = command_id::slot(cid);
        let slot = self.slots.get(index)?;
        (slot.state != RdmaCommandState::Free && command_id::of(index, slot.generation) == cid).then_some(index)
    }

    /// Stage a command (see the module docs); the next [`poll`](Self::poll) or [`flush`](Self::flush) posts
    /// it. Returns the CID.
    pub fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        let qid = self.qid;
        if let Some(e) = &self.failed {
            return Err(Box::new(Rejected { error: e.clone(), request }));
        }
        let Some(&index16) = self.free.last() else {
            let depth = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
            return Err(Box::new(Rejected { error: HostError::QueueFull { qid, depth }, request }));
        };
        let index = usize::from(index16);
        match self.stage(index, &request) {
            Ok(sqe_cid) => {
                self.free.pop();
                let slot = &mut self.slots[index];
                slot.context = Some(request.context);
                slot.data = request.data;
                self.stats.submitted += 1;
                let outstanding = u16::try_from(self.slots.len() - self.free.len()).unwrap_or(u16::MAX);
                self.stats.max_outstanding = self.stats.max_outstanding.max(outstanding);
                Ok(sqe_cid)
            }
            Err(error) => Err(Box::new(Rejected { error, request })),
        }
    }

    fn stage(&mut self, index: usize, request: &Request<T>) -> Result<u16, HostError> {
        let len = u32::try_from(request.data.len())
            .ok()
            .filter(|&l| l < 1 << 24)
            .ok_or_else(|| HostError::InvalidRequest(format!("{} bytes in one command", request.data.len())))?;
        let transfer = match request.direction {
            _ if len == 0 => None,
            DataDirection::None => None,
            DataDirection::HostToController => Some(Transfer::ToController),
            DataDirection::ControllerToHost => Some(Transfer::FromController),
        };
        let in_capsule = transfer == Some(Transfer::ToController) && self.qid != 0 && len <= self.in_capsule_limit;
        if let Some(t) = transfer {
            let src = (t == Transfer::ToController).then_some(request.data.as_slice());
            self.memory.stage(index, t, request.data.len(), src)?;
        }
        let windows = self.memory.has_windows();
        let mut rkey = None;
        let sgl = match transfer {
            Some(_) if in_capsule => SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset },
            Some(t) => {
                let (address, key) = self.memory.keyed(index, t, request.data.len())?;
                rkey = windows.then_some(key);
                let subtype = if windows { SglSubtype::Invalidate } else { SglSubtype::Address };
                SglDescriptor::KeyedDataBlock { address, length: len, key, subtype }
            }
            // No data: a null keyed SGL, as NVMe/RDMA hosts send it.
            None => SglDescriptor::KeyedDataBlock { address: 0, length: 0, key: 0, subtype: SglSubtype::Address },
        };
        let mut sqe = request.sqe;
        sqe.set_sgl1(&sgl).map_err(|e| HostError::wire("SGL1", e))?;
        let generation = command_id::next_generation(self.slots[index].generation);
        self.slots[index].generation = generation;
        sqe.cid = command_id::of(index, generation);
        self.memory.write_capsule(index, &sqe.to_bytes())?;
        self.staged.push(Capsule {
            index,
            in_capsule: if in_capsule { len } else { 0 },
            keyed: transfer.filter(|_| !in_capsule).map(|t| (t, len)),
        });
        let slot = &mut self.slots[index];
        slot.state = RdmaCommandState::Staged;
        slot.direction = request.direction;
        slot.in_capsule = in_capsule;
        slot.rkey = rkey;
        slot.sent = false;
        slot.response = None;
        slot.timed = !(self.qid == 0 && sqe.opcode == ASYNC_EVENT_REQUEST);
        Ok(sqe.cid)
    }

    /// Post every staged capsule (one `post_send` per 16). [`poll`](Self::poll) does this first.
    pub fn flush(&mut self) -> Result<(), HostError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Err(e) = self.post_staged() {
            self.fail(e.clone());
            return Err(e);
        }
        Ok(())
    }

    fn post_staged(&mut self) -> Result<(), HostError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        self.memory.post_capsules(&self.staged)?;
        // One clock read for the batch: the command timeout counts from here.
        let now = Instant::now();
        for c in self.staged.drain(..) {
            let slot = &mut self.slots[c.index];
            slot.state = RdmaCommandState::Outstanding;
            slot.submitted = now;
        }
        Ok(())
    }

    /// Post staged capsules, handle every completion, and when none arrived wait up to `timeout` (`None`:
    /// until something happens) for one or for an RDMA CM event. Completions are then in
    /// [`next_completion`](Self::next_completion). Returns the queue's failure once it has failed.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Err(e) = self.poll_inner(timeout) {
            self.fail(e.clone());
            return Err(e);
        }
        Ok(())
    }

    fn poll_inner(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        self.post_staged()?;
        if self.reap()? == 0 && timeout != Some(Duration::ZERO) && self.arm_if_idle()? {
            let timeout = if self.timed_outstanding() {
                Some(timeout.map_or(self.command_timeout, |t| t.min(self.command_timeout)))
            } else {
                timeout
            };
            self.wait_events(timeout)?;
            self.memory.drain_events()?;
            self.reap()?;
        }
        self.cm_events()?;
        self.check_timeouts()
    }

    /// Before its owner sleeps on the poller's descriptor instead of in [`poll`](Self::poll) (see
    /// [`BareQueue::prepare_wait`]): take the events already reported (a zero poll leaves them, and the descriptor
    /// would stay readable), then arm the completion queue as `poll` does before it sleeps. False when a completion
    /// came first (poll again).
    pub fn prepare_wait(&mut self) -> Result<bool, HostError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let prepared = self.prepare_wait_inner();
        if let Err(e) = &prepared {
            self.fail(e.clone());
        }
        prepared
    }

    fn prepare_wait_inner(&mut self) -> Result<bool, HostError> {
        self.wait_events(Some(Duration::ZERO))?;
        self.memory.drain_events()?;
        self.cm_events()?;
        Ok(self.reap()? == 0 && self.arm_if_idle()?)
    }

    /// Arm the completion queue; true when nothing completed meanwhile (a completion between the last reap and
    /// arming raised no event, so look once more), and sleeping is safe.
    fn arm_if_idle(&mut self) -> Result<bool, HostError> {
        self.memory.arm()?;
        Ok(self.reap()? == 0)
    }

    /// Wait up to `timeout` for the poller's events (completion channel, RDMA CM, waker).
    fn wait_events(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        match self.poll.poll(&mut self.mio_events, timeout) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(HostError::io(self.qid, "polling", &e)),
        }
    }

    /// Handle RDMA CM events: anything after ESTABLISHED ends the queue.
    fn cm_events(&mut self) -> Result<(), HostError> {
        let qid = self.qid;
        while let Some(ev) = self.events.get_event().map_err(rdma(qid, "reading RDMA CM events"))? {
            match ev.kind {
                CmEventKind::TimewaitExit | CmEventKind::Established => {}
                CmEventKind::Disconnected => {
                    self.disconnected = true;
                    return Err(HostError::Closed { qid });
                }
                kind => {
                    return Err(HostError::Rdma {
                        qid,
                        what: "connection event",
                        message: format!("{kind:?} (status {})", ev.status),
                    })
                }
            }
        }
        Ok(())
    }

    fn check_timeouts(&mut self) -> Result<(), HostError> {
        let now = Instant::now();
        if now.duration_since(self.last_timeout_check) < Duration::from_millis(50) {
            return Ok(());
        }
        self.last_timeout_check = now;
        if let Some(slot) = self.slots.iter().find(|s| {
            !matches!(s.state, RdmaCommandState::Free | RdmaCommandState::Staged)
                && s.timed
                && now.duration_since(s.submitted) > self.command_timeout
        }) {
            return Err(HostError::Timeout {
                what: format!("command on queue {} in state {:?}", self.qid, slot.state),
                after: self.command_timeout,
            });
        }
        Ok(())
    }

    /// Poll the completion queue dry, then repost consumed receives and post local invalidates (one post
    /// each). Returns the completions handled.
    fn reap(&mut self) -> Result<usize, HostError> {
        let mut total = 0;
        loop {
            let n = self.memory.poll(&mut self.wcs)?;
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_work_completion(&wc)?;
            }
            total += n;
            if n < POLL_BATCH {
                break;
            }
        }
        if !self.reposts.is_empty() {
            self.memory.post_receives(&self.reposts)?;
            self.reposts.clear();
        }
        if !self.invalidates.is_empty() {
            self.memory.post_invalidates(&self.invalidates)?;
            self.invalidates.clear();
        }
        Ok(total)
    }

    fn on_work_completion(&mut self, wc: &WorkCompletion) -> Result<(), HostError> {
        let qid = self.qid;
        let Some((kind, index)) = decode_wr_id(wc.wr_id) else {
            return Err(HostError::Rdma {
                qid,
                what: "work completion",
                message: format!("unknown wr_id {:#x}", wc.wr_id),
            });
        };
        if wc.status != WcStatus::Success {
            return Err(HostError::Rdma {
                qid,
                what: "work completion",
                message: format!("{kind:?} of slot {index}: {} (vendor error {:#x})", wc.status, wc.vendor_err),
            });
        }
        let violation = |message: String| HostError::Rdma { qid, what: "response from the controller", message };
        match kind {
            WrKind::Send => {
                if let Some(slot) = self.slots.get_mut(index) {
                    slot.sent = true;
                }
                self.try_complete(index)
            }
            WrKind::Invalidate => {
                if let Some(slot) = self.slots.get_mut(index) {
                    slot.rkey = None;
                }
                self.try_complete(index)
            }
            WrKind::Bind => Ok(()),
            WrKind::Recv => {
                let bytes = self.memory.response(index)?;
                self.reposts.push(index);
                if usize::try_from(wc.byte_len).ok() != Some(bytes.len()) {
                    return Err(violation(format!("{} bytes received where a 16-byte response belongs", wc.byte_len)));
                }
                let cqe = CompletionQueueEntry::parse(&bytes).map_err(|e| HostError::wire("response", e))?;
                let Some(slot_index) = self.live(cqe.cid) else {
                    return Err(violation(format!("response for CID {:#x}, which is not outstanding", cqe.cid)));
                };
                if self.slots[slot_index].accept_response(cqe, wc.invalidated_rkey).map_err(violation)? {
                    self.invalidates.push(slot_index);
                }
                self.try_complete(slot_index)
            }
        }
    }

    /// Complete slot `index` if its SEND completed, its response arrived and its window is closed.
    fn try_complete(&mut self, index: usize) -> Result<(), HostError> {
        let Some(slot) = self.slots.get(index) else { return Ok(()) };
        let ready = matches!(slot.state, RdmaCommandState::Outstanding | RdmaCommandState::Invalidating)
            && slot.sent
            && slot.rkey.is_none()
            && !self.memory.is_bound(index);
        let Some(cqe) = slot.response.filter(|_| ready) else { return Ok(()) };
        if slot.direction == DataDirection::ControllerToHost && !slot.data.is_empty() && cqe.status.is_success() {
            let mut data = std::mem::take(&mut self.slots[index].data);
            let copied = self.memory.copy_out(index, Transfer::FromController, &mut data);
            self.slots[index].data = data;
            copied?;
        }
        self.complete(index, Ok(cqe));
        Ok(())
    }

    fn complete(&mut self, index: usize, result: Result<CompletionQueueEntry, HostError>) {
        let slot = &mut self.slots[index];
        slot.state = RdmaCommandState::Free;
        slot.response = None;
        let data = std::mem::take(&mut slot.data);
        if let Some(context) = slot.context.take() {
            self.completed.push_back(Completion { context, result, data, r2ts: 0, in_capsule: slot.in_capsule });
        }
        self.free.push(u16::try_from(index).unwrap_or(0));
        self.stats.completed += 1;
    }

    /// Fail the queue: complete every outstanding command with `error` and disconnect. The memory stays
    /// registered until the queue is dropped (the queue pair first).
    fn fail(&mut self, error: HostError) {
        if self.failed.is_some() {
            return;
        }
        if matches!(error, HostError::ShutDown { .. }) {
            tracing::debug!(qid = self.qid, "queue closed");
        } else {
            tracing::warn!(qid = self.qid, %error, "queue failed");
        }
        self.disconnect();
        self.staged.clear();
        for index in 0..self.slots.len() {
            if self.slots[index].state != RdmaCommandState::Free {
                self.complete(index, Err(error.clone()));
            }
        }
        self.failed = Some(error);
    }

    fn disconnect(&mut self) {
        if !self.disconnected {
            self.disconnected = true;
            if let Err(e) = self.memory.cm_id_mut().disconnect() {
                tracing::debug!(qid = self.qid, error = %e, "rdma_disconnect");
            }
        }
    }

    /// Fail the queue with [`HostError::ShutDown`] (outstanding commands complete with it) and disconnect.
    pub fn close(&mut self) {
        let qid = self.qid;
        self.fail(HostError::ShutDown { qid });
    }

    /// The next finished command, if any.
    pub fn next_completion(&mut self) -> Option<Completion<T>> {
        self.completed.pop_front()
    }
}

impl<T> Drop for RdmaQueue<T> {
    fn drop(&mut self) {
        self.disconnect();
    }
}

impl<T: Send> BareQueue<T> for RdmaQueue<T> {
    fn qid(&self) -> u16 {
        RdmaQueue::qid(self)
    }
    fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        RdmaQueue::submit(self, request)
    }
    fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        RdmaQueue::poll(self, timeout)
    }
    fn next_completion(&mut self) -> Option<Completion<T>> {
        RdmaQueue::next_completion(self)
    }
    fn close(&mut self) {
        RdmaQueue::close(self);
    }
    fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        RdmaQueue::waker(self)
    }
    fn free_slots(&self) -> usize {
        RdmaQueue::free_slots(self)
    }
    fn outstanding(&self) -> usize {
        RdmaQueue::outstanding(self)
    }
    fn timed_outstanding(&self) -> bool {
        RdmaQueue::timed_outstanding(self)
    }
    fn failure(&self) -> Option<&HostError> {
        RdmaQueue::failure(self)
    }
    fn stats(&self) -> QueueStats {
        RdmaQueue::stats(self)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.poll.as_raw_fd())
    }
    fn prepare_wait(&mut self) -> Result<bool, HostError> {
        RdmaQueue::prepare_wait(self)
    }
}
