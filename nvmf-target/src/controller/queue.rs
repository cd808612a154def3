//! [`Queue`]: one submission/completion queue pair as the controller sees it, driven by its transport.
//!
//! A queue is created when a transport connection is accepted and owned by that connection's reactor thread
//! until it is dropped. It knows nothing but the target until a Connect arrives; then it is the admin queue
//! (a new controller) or an I/O queue (of a live controller). States: `AwaitingConnect` → `Connected` → `Dead`.
//!
//! Every command occupies a slot of a fixed slab, allocated once at Connect: twice the queue's entries, because
//! a slot stays busy from its command's arrival until the transport's [`Queue::release`] (which on RDMA can
//! trail the host's reuse of the SQ entry). A host submitting beyond that has broken flow control:
//! [`QueueError::QueueOverrun`]. Command identifiers are not checked for conflicts (Linux nvmet does not either;
//! a reused CID whose slot awaits release is normal). A slot's state is an explicit enum (SPDK style): Free →
//! NeedBuffer / AwaitingData / NeedSubmit / Executing / HeldAer → Responding → Free, or Orphaned when the queue
//! dies with storage I/O in flight.
//!
//! The data path (I/O commands) takes no lock and allocates nothing: the namespace table is a cached `Arc`
//! refreshed when the subsystem's generation changes; counters are single-writer atomics; buffers come from
//! the reactor's [`IoEngine`] pool and storage ops go to its ring with tag `(queue_key << 16) | slot`. When the
//! pool is exhausted a command waits on the retry list (or, holding in-capsule data it cannot keep, completes
//! with the retryable Command Interrupted); a full ring likewise parks the command until [`Queue::poll`].
//!
//! Nothing here blocks. Admin commands take the controller's mutex (uncontended by I/O).

use std::cell::Cell;
use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{
    connect_error_response, data_offset, sqe_offset, Connect, ConnectData, ConnectResponse, InvalidParameter,
    CNTLID_DYNAMIC, CONNECT_DATA_SIZE,
};
use nvmf_common::fabrics::disconnect::Disconnect;
use nvmf_common::fabrics::property::{Property, PropertyGet, PropertySet};
use nvmf_common::nvme::admin::AbortResult;
use nvmf_common::nvme::io::{is_invalid_opcode, DatasetManagement, IoCommand, NSID_ALL};
use nvmf_common::nvme::log_page::ErrorInformationEntry;
use nvmf_common::nvme::opcode::{admin as admin_op, fctype, FABRICS};
use nvmf_common::nvme::{CompletionQueueEntry, Status, StatusCodeType, SubmissionQueueEntry};

use super::admin::{self, AdminContext};
use super::association::{
    CcOutcome, Controller, IoQueueRefusal, Notifier, QueueCounters, AERL, TRAFFIC_GRANULARITY, VERSION,
};
use super::io::{self, DataSource, Direction, StorageOp};
use super::subsystem::NamespaceTable;
use super::target::{Target, TransportInfo};
use super::EventNotifier;
use crate::backend::{BufferId, IoEngine, IoOp};
use crate::metrics::{CommandKind, Completed, QueueRecorder};

thread_local! {
    /// The reactor's clock reading of its current turn (`None` off a reactor thread).
    static TURN_TIME: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Set by a reactor once per turn, right after its poll returned: command latencies are measured in its turns.
/// Reading the clock per command costs two `clock_gettime` per I/O, a system call where the vDSO cannot read the
/// clock source (HPET, as in TCG guests); a turn's reading is off by at most that turn's own work.
pub(crate) fn set_turn_time(now: Instant) {
    TURN_TIME.with(|t| t.set(Some(now)));
}

/// The current turn's time ([`set_turn_time`]), or the clock off a reactor thread.
fn turn_time() -> Instant {
    TURN_TIME.with(Cell::get).unwrap_or_else(Instant::now)
}

/// Bytes of Connect data.
const CONNECT_DATA_LEN: u32 = 1024;

/// Slots a queue has before Connect tells it its size.
const PRECONNECT_SLOTS: u16 = 4;

/// A command's slot in its queue. Transports use it to name the command in [`Step`]s and callbacks (e.g. as
/// the NVMe/TCP transfer tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotId(u16);

impl SlotId {
    /// The slot with index `index`.
    pub const fn new(index: u16) -> Self {
        SlotId(index)
    }

    /// The slot's index.
    pub const fn index(self) -> u16 {
        self.0
    }
}

/// The storage tag of `slot`'s ops on queue `queue_key` (see [`TransportInfo::queue_key`]).
pub fn storage_tag(queue_key: u64, slot: SlotId) -> u64 {
    (queue_key << 16) | u64::from(slot.0)
}

/// The queue key and slot of a storage tag.
pub fn split_storage_tag(tag: u64) -> (u64, SlotId) {
    let [lo, hi, ..] = tag.to_le_bytes();
    (tag >> 16, SlotId(u16::from_le_bytes([lo, hi])))
}

/// What the transport must do next for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Obtain `len` bytes of host data into `engine.buffer_mut(buffer)` (TCP: R2T/H2CData; RDMA: RDMA READ),
    /// then call [`Queue::data_received`].
    FetchData {
        /// The command.
        slot: SlotId,
        /// Its Command Identifier (TCP R2Ts name it).
        cid: u16,
        /// Where the data goes.
        buffer: BufferId,
        /// How many bytes (from the start of the command's data).
        len: u32,
    },
    /// Send `data` (the first `len` bytes of the buffer) to the host if present (TCP C2HData, RDMA WRITE), then
    /// the response capsule with `cqe`; afterwards call [`Queue::release`].
    Respond {
        /// The command.
        slot: SlotId,
        /// The completion to send.
        cqe: CompletionQueueEntry,
        /// Data for the host, if any.
        data: Option<(BufferId, u32)>,
    },
    /// Nothing to do now: the command went to storage or is held (AER); it comes back from
    /// [`Queue::io_completed`] or [`Queue::poll`].
    Pending,
}

/// A fatal queue condition: the transport must end the connection (and call [`Queue::disconnect`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The host has more commands outstanding than its queue holds (flow control broken).
    #[error("queue overrun: the host has more than {capacity} commands outstanding")]
    QueueOverrun {
        /// Slots of the queue.
        capacity: usize,
    },
    /// No command arrived on the admin queue within the Keep Alive Timeout; the association was torn down.
    #[error("keep alive timeout ({kato_ms} ms) expired on controller {cntlid}")]
    KeepAliveExpired {
        /// The controller.
        cntlid: u16,
        /// The Keep Alive Timeout.
        kato_ms: u32,
    },
    /// The association this queue belongs to ended (admin queue gone, keep-alive expiry, controller reset,
    /// subsystem removed).
    #[error("the association of controller {cntlid} ended")]
    AssociationEnded {
        /// The controller.
        cntlid: u16,
    },
    /// The host deleted this I/O queue with a Disconnect command, whose response has been sent.
    #[error("the host disconnected I/O queue {qid}")]
    Disconnected {
        /// The queue.
        qid: u16,
    },
    /// The transport reported data for a slot that did not ask for any.
    #[error("slot {slot} is not waiting for host data")]
    UnexpectedData {
        /// The slot.
        slot: u16,
    },
    /// The queue is closed; nothing more can be submitted.
    #[error("the queue is closed")]
    Closed,
}

/// Per-slot state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    /// On the retry list: waiting for a pool buffer.
    NeedBuffer,
    /// `FetchData` returned; waiting for `data_received`.
    AwaitingData,
    /// On the retry list: more storage ops to push when the ring has room (`ops` may be in flight).
    NeedSubmit,
    /// Being handled, or `ops` storage ops in flight.
    Executing,
    /// An Asynchronous Event Request held for an event.
    HeldAer,
    /// `Respond` returned; waiting for `release`.
    Responding,
    /// The queue died with `ops` storage ops in flight; the slot frees when they complete.
    Orphaned,
}

/// What a command does, decided once it is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    None,
    /// Fabrics Connect whose 1024 bytes of data are fetched into the buffer.
    Connect,
    /// An admin command that returns `len` bytes, executed once a buffer is available.
    AdminOutput {
        len: u32,
    },
    /// CC.SHN: flush every namespace with a volatile cache (cursor: table index), then CSTS.SHST complete.
    Shutdown,
    Read {
        nsid: u32,
        offset: u64,
        len: u32,
    },
    Write {
        nsid: u32,
        offset: u64,
        len: u32,
        fua: bool,
    },
    /// Host data in `buffer`, media read into `aux`.
    Compare {
        nsid: u32,
        offset: u64,
        len: u32,
    },
    /// One namespace, or every namespace for NSID FFFFFFFFh (cursor: table index).
    Flush {
        nsid: u32,
    },
    /// Stage 0 zeroes; stage 1 flushes (FUA on a volatile cache).
    WriteZeroes {
        nsid: u32,
        offset: u64,
        len: u64,
        flush_after: bool,
    },
    /// Range list of `list_len` bytes in `buffer` (cursor: range index).
    Dsm {
        nsid: u32,
        dsm: DatasetManagement,
        list_len: u32,
    },
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    plan: Plan,
    sqe: SubmissionQueueEntry,
    buffer: Option<BufferId>,
    aux: Option<BufferId>,
    has_data: bool,
    /// Storage ops in flight.
    ops: u32,
    /// Progress through a multi-op plan.
    cursor: u32,
    stage: u8,
    /// First error seen by the plan's storage ops.
    status: Status,
    /// The turn in which the command capsule arrived ([`turn_time`]; metrics: command latency).
    arrival: Option<Instant>,
}

impl Slot {
    const FREE: Slot = Slot {
        state: SlotState::Free,
        plan: Plan::None,
        sqe: SubmissionQueueEntry {
            opcode: 0,
            flags: 0,
            cid: 0,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            dptr: [0; 16],
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        },
        buffer: None,
        aux: None,
        has_data: false,
        ops: 0,
        cursor: 0,
        stage: 0,
        status: Status::SUCCESS,
        arrival: None,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueKind {
    Admin,
    Io(u16),
}

#[derive(Debug)]
struct Association {
    controller: Arc<Controller>,
    kind: QueueKind,
    sqsize: u16,
    /// The controller's I/O epoch when this I/O queue connected.
    epoch: u32,
}

#[derive(Debug)]
enum QueueState {
    AwaitingConnect,
    Connected(Association),
    Dead,
}

/// One submission/completion queue pair, owned by its reactor.
#[derive(Debug)]
pub struct Queue {
    target: Arc<Target>,
    transport: TransportInfo,
    state: QueueState,
    slots: Vec<Slot>,
    free: Vec<u16>,
    retry: VecDeque<u16>,
    held_aers: VecDeque<u16>,
    counters: Arc<QueueCounters>,
    storage_ops: usize,
    table: Arc<NamespaceTable>,
    table_generation: u64,
    sq_head: u16,
    /// When the last command arrived (its reactor turn's clock reading): the keep-alive timer's start.
    last_activity: Option<Instant>,
    /// When this I/O queue last published a command's arrival to its controller (Traffic Based Keep Alive).
    traffic_published: Option<Instant>,
    notifier: Option<Notifier>,
    /// The slot of a Disconnect command: once released, the queue ends.
    disconnect_slot: Option<u16>,
    disconnected: bool,
    /// Metrics counters while connected; dropping them (the queue ended) folds them into the subsystem's totals.
    metrics: Option<QueueRecorder>,
}

/// Outcome of the Connect checks: the status and dword 0 to answer with.
type ConnectResult = Result<u32, (Status, u32)>;

fn invalid_parameter(p: InvalidParameter) -> (Status, u32) {
    (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), p.to_dw0())
}

fn index_of(i: usize) -> u16 {
    // Slab indices are below 65536 by construction (twice at most 32768 entries).
    u16::try_from(i).unwrap_or(u16::MAX)
}

impl Queue {
    /// A queue for a new transport connection, before Connect.
    pub fn new(target: Arc<Target>, transport: TransportInfo) -> Self {
        let slots = vec![Slot::FREE; usize::from(PRECONNECT_SLOTS)];
        Queue {
            target,
            transport,
            state: QueueState::AwaitingConnect,
            slots,
            free: (0..PRECONNECT_SLOTS).rev().collect(),
            retry: VecDeque::with_capacity(usize::from(PRECONNECT_SLOTS)),
            held_aers: VecDeque::with_capacity(usize::from(AERL) + 1),
            counters: Arc::new(QueueCounters::default()),
            storage_ops: 0,
            table: Arc::new(NamespaceTable::default()),
            table_generation: 0,
            sq_head: 0,
            last_activity: None,
            traffic_published: None,
            notifier: None,
            disconnect_slot: None,
            disconnected: false,
            metrics: None,
        }
    }

    /// Register the callback that wakes this queue's reactor (call before the first command). It is called
    /// from any thread when [`Queue::poll`] has something to do: an asynchronous event to deliver, or the
    /// association torn down.
    pub fn set_event_notifier(&mut self, notifier: EventNotifier) {
        self.notifier = Some(Notifier(notifier));
    }

    /// The queue ID once connected (0: admin queue).
    pub fn qid(&self) -> Option<u16> {
        match &self.state {
            QueueState::Connected(a) => Some(match a.kind {
                QueueKind::Admin => 0,
                QueueKind::Io(qid) => qid,
            }),
            _ => None,
        }
    }

    /// The queue's SQSIZE (0's based) once connected, else 0.
    pub fn sqsize(&self) -> u16 {
        match &self.state {
            QueueState::Connected(a) => a.sqsize,
            _ => 0,
        }
    }

    /// The controller of the association, once connected.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        match &self.state {
            QueueState::Connected(a) => Some(&a.controller),
            _ => None,
        }
    }

    /// True once the queue is dead (disconnected, association ended).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, QueueState::Dead)
    }

    /// This queue's counters (for metrics).
    pub fn counters(&self) -> &Arc<QueueCounters> {
        &self.counters
    }

    /// What the transport told the queue.
    pub fn transport(&self) -> &TransportInfo {
        &self.transport
    }

    /// The command in `slot` while it is being handled (the RDMA transport reads its keyed SGL for a
    /// [`Step::FetchData`] or a [`Step::Respond`] with data); `None` for a free slot or an unknown one.
    pub fn sqe(&self, slot: SlotId) -> Option<&SubmissionQueueEntry> {
        self.slots.get(usize::from(slot.0)).filter(|s| s.state != SlotState::Free).map(|s| &s.sqe)
    }

    /// Whether [`Queue::poll`] has work at the end of this turn: commands waiting for a buffer or ring space (a
    /// turn's completions may have freed them), or a finished Disconnect to act on.
    pub fn wants_poll(&self) -> bool {
        self.disconnected || !self.retry.is_empty()
    }

    /// Storage ops of this queue not yet completed; the reactor keeps a dead queue until this is 0.
    pub fn in_flight(&self) -> usize {
        self.storage_ops
    }

    /// When the keep-alive timer expires if no command arrives (admin queue with a KATO): KATO after the last
    /// command on any of the controller's queues (Traffic Based Keep Alive, as Identify reports). The reactor
    /// `poll`s the queue then (the queue's only timer).
    pub fn keep_alive_deadline(&self) -> Option<Instant> {
        match &self.state {
            QueueState::Connected(Association { controller, kind: QueueKind::Admin, .. }) => {
                let kato = controller.kato_ms();
                if kato == 0 {
                    return None;
                }
                self.keep_alive_start(controller).map(|t| t + Duration::from_millis(u64::from(kato)))
            }
            _ => None,
        }
    }

    // ---------------------------------------------------------------------------------------------------------
    // Transport entry points
    // ---------------------------------------------------------------------------------------------------------

    /// A command capsule arrived; `in_capsule` is its in-capsule data (possibly empty). The queue validates
    /// everything and answers bad input with the spec's status in a [`Step::Respond`].
    pub fn command(
        &mut self,
        engine: &mut IoEngine,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Result<Step, QueueError> {
        if matches!(self.state, QueueState::Dead) {
            return Err(QueueError::Closed);
        }
        self.check_association(engine)?;
        let Some(index) = self.free.pop() else {
            return Err(QueueError::QueueOverrun { capacity: self.slots.len() });
        };
        let arrival = turn_time();
        self.last_activity = Some(arrival);
        self.publish_traffic(arrival);
        self.advance_sq_head();
        self.slots[usize::from(index)] =
            Slot { state: SlotState::Executing, sqe: *sqe, arrival: Some(arrival), ..Slot::FREE };
        let id = SlotId(index);
        let kind = match &self.state {
            QueueState::Connected(a) => Some(a.kind),
            _ => None,
        };
        Ok(match kind {
            None => self.unconnected_command(engine, id, sqe, in_capsule),
            Some(QueueKind::Admin) => self.admin_command(engine, id, sqe, in_capsule),
            Some(QueueKind::Io(_)) => self.io_command(engine, id, sqe, in_capsule),
        })
    }

    /// The transport could not bring `slot`'s host data (e.g. a data digest error): complete the command with
    /// `status` instead. Its buffer is freed; the transport sends the returned response and then calls
    /// [`Queue::release`] as for any other.
    pub fn transfer_failed(&mut self, engine: &mut IoEngine, slot: SlotId, status: Status) -> Result<Step, QueueError> {
        match self.slots.get(usize::from(slot.0)) {
            Some(s) if s.state == SlotState::AwaitingData => Ok(self.respond_err(engine, slot, status, 0)),
            _ => Err(QueueError::UnexpectedData { slot: slot.0 }),
        }
    }

    /// All host data for `slot` is in its buffer.
    pub fn data_received(&mut self, engine: &mut IoEngine, slot: SlotId) -> Result<Step, QueueError> {
        let index = usize::from(slot.0);
        match self.slots.get(index) {
            Some(s) if s.state == SlotState::AwaitingData => {}
            _ => return Err(QueueError::UnexpectedData { slot: slot.0 }),
        }
        let s = &mut self.slots[index];
        s.has_data = true;
        s.state = SlotState::Executing;
        let (plan, buffer, sqe) = (s.plan, s.buffer, s.sqe);
        Ok(match plan {
            Plan::Connect => {
                let mut data = [0u8; CONNECT_DATA_SIZE];
                if let Some(b) = buffer {
                    let src = engine.buffer(b);
                    let n = src.len().min(CONNECT_DATA_SIZE);
                    data[..n].copy_from_slice(&src[..n]);
                }
                self.release_buffers(engine, slot);
                self.finish_connect(engine, slot, &sqe, &data)
            }
            Plan::Write { .. } => self.submit_ops(engine, slot),
            Plan::Compare { .. } => self.start_compare_read(engine, slot),
            Plan::Dsm { .. } => self.dsm_ranges_ready(engine, slot),
            _ => self.respond_err(engine, slot, Status::INTERNAL_ERROR.with_dnr(), 0),
        })
    }

    /// A storage op of `slot` completed (the reactor routes [`IoCompletion`](crate::backend::IoCompletion)
    /// tags with [`split_storage_tag`]).
    pub fn io_completed(&mut self, engine: &mut IoEngine, slot: SlotId, result: Result<u32, std::io::Error>) -> Step {
        let Some(s) = self.slots.get_mut(usize::from(slot.0)) else {
            tracing::warn!(slot = slot.0, "storage completion for a slot the queue does not have");
            return Step::Pending;
        };
        if s.ops == 0 {
            tracing::warn!(slot = slot.0, state = ?s.state, "storage completion for a slot with no op in flight");
            return Step::Pending;
        }
        s.ops -= 1;
        self.storage_ops = self.storage_ops.saturating_sub(1);
        if let Err(e) = result {
            let (op, advisory) = match s.plan {
                Plan::Read { .. } | Plan::Compare { .. } => (StorageOp::Read, false),
                // Deallocation is advisory: a discard the storage cannot do is not an error.
                Plan::Dsm { .. } => (StorageOp::Write, e.kind() == std::io::ErrorKind::Unsupported),
                _ => (StorageOp::Write, false),
            };
            if !advisory && s.status.is_success() {
                s.status = io::storage_status(&e, op);
                tracing::warn!(error = %e, status = %s.status, opcode = s.sqe.opcode, "storage op failed");
            }
        }
        match s.state {
            SlotState::Orphaned => {
                if s.ops == 0 {
                    *s = Slot::FREE;
                    self.free.push(slot.0);
                }
                Step::Pending
            }
            SlotState::Executing if s.ops == 0 => self.ops_done(engine, slot),
            _ => Step::Pending,
        }
    }

    /// Called at the keep-alive deadline, when the queue's notifier fired (asynchronous event, association ended
    /// or reset elsewhere), and at the end of every reactor turn while [`Queue::wants_poll`]: ends the queue if
    /// its association ended, checks the keep-alive timer (admin queue: expiry tears the association down),
    /// delivers asynchronous events to held AERs and retries commands waiting for a pool buffer or ring space.
    /// Steps to carry out go to `out`.
    pub fn poll(&mut self, engine: &mut IoEngine, now: Instant, out: &mut Vec<Step>) -> Result<(), QueueError> {
        if self.disconnected {
            let qid = self.qid().unwrap_or(0);
            self.disconnect(engine);
            return Err(QueueError::Disconnected { qid });
        }
        if matches!(self.state, QueueState::Dead) {
            return Ok(());
        }
        self.check_association(engine)?;
        if let QueueState::Connected(Association { controller, kind: QueueKind::Admin, .. }) = &self.state {
            let controller = Arc::clone(controller);
            self.check_keep_alive(engine, &controller, now)?;
            if !self.held_aers.is_empty() && controller.has_pending_event() {
                let mut state = controller.lock();
                while let Some(&index) = self.held_aers.front() {
                    let Some(event) = controller.take_event_locked(&mut state) else { break };
                    self.held_aers.pop_front();
                    out.push(self.respond_ok(SlotId(index), event.to_dw0(), 0, None));
                }
            }
        }
        self.refresh_table();
        for _ in 0..self.retry.len() {
            let Some(index) = self.retry.pop_front() else { break };
            let id = SlotId(index);
            let step = match self.slots[usize::from(index)].state {
                SlotState::NeedBuffer => self.resume_buffer(engine, id),
                SlotState::NeedSubmit => self.submit_ops(engine, id),
                _ => Step::Pending,
            };
            if step != Step::Pending {
                out.push(step);
            }
        }
        Ok(())
    }

    /// The transport sent everything for `slot`: free the slot and its buffers.
    pub fn release(&mut self, engine: &mut IoEngine, slot: SlotId) {
        let index = usize::from(slot.0);
        match self.slots.get(index) {
            Some(s) if s.state == SlotState::Responding => {}
            other => {
                tracing::debug!(slot = slot.0, state = ?other.map(|s| s.state), "release of a slot not responding");
                return;
            }
        }
        self.release_buffers(engine, slot);
        self.slots[index] = Slot::FREE;
        self.free.push(slot.0);
        if self.disconnect_slot == Some(slot.0) {
            self.disconnect_slot = None;
            self.disconnected = true;
        }
    }

    /// The connection is gone: the queue is dead; for the admin queue the association ends. Slots with storage
    /// I/O in flight are released when their completions arrive (the reactor keeps the queue until
    /// [`Queue::in_flight`] is 0). Idempotent.
    pub fn disconnect(&mut self, engine: &mut IoEngine) {
        // Nothing completes on a dead queue: fold its counters into the subsystem's totals now.
        self.metrics = None;
        match mem::replace(&mut self.state, QueueState::Dead) {
            QueueState::Connected(a) => match a.kind {
                QueueKind::Admin => a.controller.terminate(),
                QueueKind::Io(qid) => a.controller.detach_io_queue(qid, a.epoch),
            },
            QueueState::AwaitingConnect | QueueState::Dead => {}
        }
        for i in 0..self.slots.len() {
            let id = SlotId(index_of(i));
            if self.slots[i].state == SlotState::Free {
                continue;
            }
            // The engine defers the release of a buffer an op is using until its completion.
            self.release_buffers(engine, id);
            let s = &mut self.slots[i];
            if s.ops > 0 {
                s.state = SlotState::Orphaned;
            } else if s.state != SlotState::Orphaned {
                *s = Slot::FREE;
                self.free.push(id.0);
            }
        }
        self.retry.clear();
        self.held_aers.clear();
        self.disconnect_slot = None;
    }

    // ---------------------------------------------------------------------------------------------------------
    // Queue state
    // ---------------------------------------------------------------------------------------------------------

    fn advance_sq_head(&mut self) {
        if let QueueState::Connected(a) = &self.state {
            let entries = u32::from(a.sqsize) + 1;
            self.sq_head = u16::try_from((u32::from(self.sq_head) + 1) % entries).unwrap_or(0);
        }
    }

    /// End the queue if its association ended (or, for an I/O queue, its controller was reset).
    fn check_association(&mut self, engine: &mut IoEngine) -> Result<(), QueueError> {
        let QueueState::Connected(a) = &self.state else { return Ok(()) };
        let ended = a.controller.is_terminated() || (a.kind != QueueKind::Admin && a.controller.io_epoch() != a.epoch);
        if ended {
            let cntlid = a.controller.cntlid();
            tracing::info!(cntlid, qid = ?self.qid(), "queue closing: association ended");
            self.disconnect(engine);
            return Err(QueueError::AssociationEnded { cntlid });
        }
        Ok(())
    }

    /// An I/O queue's command arrived at `arrival`: tell the controller's keep-alive timer, at most every
    /// [`TRAFFIC_GRANULARITY`] (one shared write per interval, not per command).
    fn publish_traffic(&mut self, arrival: Instant) {
        let QueueState::Connected(Association { controller, kind: QueueKind::Io(_), .. }) = &self.state else {
            return;
        };
        if self.traffic_published.is_none_or(|p| arrival.saturating_duration_since(p) >= TRAFFIC_GRANULARITY) {
            self.traffic_published = Some(arrival);
            controller.note_io_traffic(arrival);
        }
    }

    /// Where the keep-alive timer runs from: the later of this (admin) queue's last command and the I/O traffic
    /// the controller's queues published (`None` before either).
    fn keep_alive_start(&self, controller: &Controller) -> Option<Instant> {
        self.last_activity.max(controller.io_traffic())
    }

    fn check_keep_alive(
        &mut self,
        engine: &mut IoEngine,
        controller: &Arc<Controller>,
        now: Instant,
    ) -> Result<(), QueueError> {
        self.last_activity.get_or_insert(now);
        let last = self.keep_alive_start(controller).unwrap_or(now);
        let kato_ms = controller.kato_ms();
        if kato_ms > 0 && now.saturating_duration_since(last) >= Duration::from_millis(u64::from(kato_ms)) {
            let cntlid = controller.cntlid();
            tracing::warn!(cntlid, kato_ms, host = %controller.hostnqn(), "keep alive timeout expired");
            controller.keep_alive_expired();
            self.disconnect(engine);
            return Err(QueueError::KeepAliveExpired { cntlid, kato_ms });
        }
        Ok(())
    }

    /// Refresh the cached namespace table if the subsystem's generation moved.
    fn refresh_table(&mut self) {
        let QueueState::Connected(a) = &self.state else { return };
        let subsystem = a.controller.subsystem();
        if subsystem.generation() != self.table_generation {
            let (table, generation) = subsystem.namespaces_with_generation();
            self.table = table;
            self.table_generation = generation;
        }
    }

    /// Become connected: size the slab from SQSIZE (once), load the namespace table.
    fn establish(&mut self, association: Association) {
        let entries = usize::from(association.sqsize) + 1;
        let total = (entries * 2).min(usize::from(u16::MAX) + 1);
        let old = self.slots.len();
        if total > old {
            self.slots.reserve_exact(total - old);
            self.slots.resize(total, Slot::FREE);
            self.free.reserve(total - old);
            self.free.extend((old..total).rev().map(index_of));
            self.retry.reserve(total);
        }
        self.sq_head = index_of(1 % entries);
        let (table, generation) = association.controller.subsystem().namespaces_with_generation();
        self.table = table;
        self.table_generation = generation;
        let io = association.kind != QueueKind::Admin;
        self.metrics = Some(QueueRecorder::new(association.controller.subsystem().metrics(), io));
        self.state = QueueState::Connected(association);
    }

    // ---------------------------------------------------------------------------------------------------------
    // Completion
    // ---------------------------------------------------------------------------------------------------------

    fn slot(&mut self, id: SlotId) -> &mut Slot {
        &mut self.slots[usize::from(id.0)]
    }

    fn release_buffers(&mut self, engine: &mut IoEngine, id: SlotId) {
        let s = self.slot(id);
        let (buffer, aux) = (s.buffer.take(), s.aux.take());
        for b in [buffer, aux].into_iter().flatten() {
            engine.release(b);
        }
    }

    fn cqe(&self, id: SlotId, status: Status, dw0: u32, dw1: u32) -> CompletionQueueEntry {
        let s = &self.slots[usize::from(id.0)];
        let sqid = match self.qid() {
            Some(q) => q,
            // Before Connect: the queue a Connect asks for.
            None if s.sqe.opcode == FABRICS && s.sqe.fctype() == fctype::CONNECT => {
                u16::try_from(s.sqe.cdw10 >> 16).unwrap_or(0)
            }
            None => 0,
        };
        CompletionQueueEntry { dw0, dw1, sqhd: self.sq_head, sqid, cid: s.sqe.cid, phase: false, status }
    }

    /// Count a completing command in the queue's metrics (after a namespace's first command: no lock, no
    /// allocation).
    fn count(&mut self, id: SlotId, status: Status) {
        let Some(recorder) = self.metrics.as_mut() else { return };
        let s = &self.slots[usize::from(id.0)];
        let io = recorder.is_io();
        let (bytes_read, bytes_written) = match s.plan {
            Plan::Read { len, .. } if status.is_success() => (u64::from(len), 0),
            Plan::Write { len, .. } if status.is_success() => (0, u64::from(len)),
            _ => (0, 0),
        };
        let completed = Completed {
            kind: CommandKind::of(&s.sqe, io),
            nsid: io.then_some(s.sqe.nsid),
            latency: s.arrival.map(|t| turn_time().saturating_duration_since(t)),
            bytes_read,
            bytes_written,
            status,
        };
        let table = &self.table;
        recorder.record(&completed, |nsid| table.get(nsid).is_some());
    }

    fn respond_ok(&mut self, id: SlotId, dw0: u32, dw1: u32, data: Option<(BufferId, u32)>) -> Step {
        self.count(id, Status::SUCCESS);
        let cqe = self.cqe(id, Status::SUCCESS, dw0, dw1);
        self.slot(id).state = SlotState::Responding;
        Step::Respond { slot: id, cqe, data }
    }

    fn respond_err(&mut self, engine: &mut IoEngine, id: SlotId, status: Status, dw0: u32) -> Step {
        self.release_buffers(engine, id);
        self.count(id, status);
        let cqe = self.cqe(id, status, dw0, 0);
        let sqe = self.slot(id).sqe;
        self.slot(id).state = SlotState::Responding;
        self.counters.error(status.sct() == StatusCodeType::MediaError);
        let (opcode, cid, nsid) = (sqe.opcode, sqe.cid, sqe.nsid);
        tracing::debug!(%status, opcode, cid, nsid, qid = ?self.qid(), "command failed");
        if let QueueState::Connected(a) = &self.state {
            a.controller.record_error(ErrorInformationEntry {
                sqid: cqe.sqid,
                cid: cqe.cid,
                status,
                parameter_error_location: 0xFFFF,
                nsid: sqe.nsid,
                trtype: self.transport.trtype.to_u8(),
                opcode: sqe.opcode,
                ..ErrorInformationEntry::default()
            });
        }
        Step::Respond { slot: id, cqe, data: None }
    }

    fn respond(&mut self, engine: &mut IoEngine, id: SlotId, result: Result<u32, Status>) -> Step {
        match result {
            Ok(dw0) => self.respond_ok(id, dw0, 0, None),
            Err(status) => self.respond_err(engine, id, status, 0),
        }
    }

    /// Park `id` on the retry list in `state`.
    fn park(&mut self, id: SlotId, state: SlotState) -> Step {
        self.slot(id).state = state;
        self.retry.push_back(id.0);
        Step::Pending
    }

    /// A pool buffer of `len` bytes, or the step to return: parked until a buffer is free, or failed if no
    /// buffer of the pool can ever hold `len` (MDTS configured above the engine's buffer size).
    fn alloc(&mut self, engine: &mut IoEngine, id: SlotId, len: u32) -> Result<BufferId, Step> {
        if let Some(buffer) = engine.alloc(len as usize) {
            return Ok(buffer);
        }
        if len as usize > engine.buffer_size() {
            tracing::error!(len, buffer_size = engine.buffer_size(), "transfer larger than the engine's buffers");
            return Err(self.respond_err(engine, id, Status::INVALID_FIELD.with_dnr(), 0));
        }
        Err(self.park(id, SlotState::NeedBuffer))
    }

    /// Get a buffer of `len` for the host's data and ask the transport for it.
    fn fetch_data(&mut self, engine: &mut IoEngine, id: SlotId, len: u32) -> Step {
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        let s = self.slot(id);
        s.buffer = Some(buffer);
        s.state = SlotState::AwaitingData;
        Step::FetchData { slot: id, cid: s.sqe.cid, buffer, len }
    }

    /// Copy in-capsule data into a pool buffer. Without a buffer the data cannot be kept: the command
    /// completes with Command Interrupted, which hosts retry.
    fn take_in_capsule(&mut self, engine: &mut IoEngine, id: SlotId, data: &[u8]) -> Result<(), Step> {
        let Some(buffer) = engine.alloc(data.len()) else {
            tracing::debug!(len = data.len(), "buffer pool exhausted for in-capsule data");
            return Err(self.respond_err(engine, id, Status::COMMAND_INTERRUPTED, 0));
        };
        engine.buffer_mut(buffer)[..data.len()].copy_from_slice(data);
        let s = self.slot(id);
        s.buffer = Some(buffer);
        s.has_data = true;
        Ok(())
    }

    /// A slot parked for a buffer: try again.
    fn resume_buffer(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        self.slot(id).state = SlotState::Executing;
        match s.plan {
            Plan::AdminOutput { .. } => self.admin_output(engine, id),
            Plan::Read { .. } => self.start_read(engine, id),
            Plan::Compare { .. } if s.has_data => self.start_compare_read(engine, id),
            Plan::Connect => self.fetch_data(engine, id, CONNECT_DATA_LEN),
            Plan::Write { len, .. } | Plan::Compare { len, .. } => self.fetch_data(engine, id, len),
            Plan::Dsm { list_len, .. } => self.fetch_data(engine, id, list_len),
            _ => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
        }
    }

    // ---------------------------------------------------------------------------------------------------------
    // Connect
    // ---------------------------------------------------------------------------------------------------------

    fn unconnected_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        if sqe.opcode != FABRICS || sqe.fctype() != fctype::CONNECT {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        if let Err(status) = io::check_flags(sqe) {
            return self.respond_err(engine, id, status, 0);
        }
        if let Err(e) = Connect::from_sqe(sqe) {
            let (status, dw0) = connect_error_response(&e);
            return self.respond_err(engine, id, status, dw0);
        }
        match io::data_source(sqe, self.transport.trtype, Direction::ToController, in_capsule.len()) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok((DataSource::InCapsule { offset }, len)) => {
                // Connect::from_sqe checked the length is 1024; data_source that it lies within the capsule.
                let data = in_capsule.get(offset..offset + len as usize).unwrap_or_default();
                self.finish_connect(engine, id, sqe, data)
            }
            Ok((DataSource::Transport, _)) => {
                self.slot(id).plan = Plan::Connect;
                self.fetch_data(engine, id, CONNECT_DATA_LEN)
            }
        }
    }

    fn finish_connect(&mut self, engine: &mut IoEngine, id: SlotId, sqe: &SubmissionQueueEntry, data: &[u8]) -> Step {
        let result = match Connect::from_sqe(sqe) {
            Ok(connect) => self.connect(&connect, data),
            Err(e) => Err(connect_error_response(&e)),
        };
        match result {
            Ok(dw0) => self.respond_ok(id, dw0, 0, None),
            Err((status, dw0)) => {
                tracing::info!(%status, dw0, qid = sqe.cdw10 >> 16, "Connect refused");
                self.respond_err(engine, id, status, dw0)
            }
        }
    }

    fn connect(&mut self, connect: &Connect, data: &[u8]) -> ConnectResult {
        let data = ConnectData::parse(data).map_err(|e| connect_error_response(&e))?;
        let hostnqn = data.hostnqn.as_str();
        let Some(subsystem) = self.target.subsystem(data.subnqn.as_str()) else {
            tracing::info!(subnqn = data.subnqn.as_str(), host = hostnqn, "Connect to an unknown subsystem");
            return Err(invalid_parameter(InvalidParameter::in_data(data_offset::SUBNQN)));
        };
        if !subsystem.host_allowed(hostnqn) {
            tracing::info!(subnqn = subsystem.nqn(), host = hostnqn, "Connect from a host not allowed");
            return Err((
                Status::CONNECT_INVALID_HOST.with_dnr(),
                InvalidParameter::in_data(data_offset::HOSTNQN).to_dw0(),
            ));
        }
        let params = self.target.params();
        if connect.queue_entries() > params.max_queue_entries {
            return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::SQSIZE)));
        }
        if connect.is_admin() {
            if data.cntlid != CNTLID_DYNAMIC {
                return Err(invalid_parameter(InvalidParameter::in_data(data_offset::CNTLID)));
            }
            if connect.kato > params.kato_max_ms {
                return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::KATO)));
            }
            let controller = subsystem
                .register_controller(|cntlid| {
                    Arc::new(Controller::new(
                        cntlid,
                        Arc::clone(&subsystem),
                        hostnqn,
                        data.hostid,
                        connect.kato,
                        params,
                        true,
                    ))
                })
                .ok_or((Status::CONNECT_CONTROLLER_BUSY, 0))?;
            controller.attach_admin_queue(Arc::clone(&self.counters), self.notifier.clone());
            let cntlid = controller.cntlid();
            tracing::info!(
                cntlid,
                subnqn = subsystem.nqn(),
                host = hostnqn,
                kato_ms = connect.kato,
                "admin queue connected"
            );
            self.establish(Association { controller, kind: QueueKind::Admin, sqsize: connect.sqsize, epoch: 0 });
            return Ok(ConnectResponse { cntlid, atr: false, ascr: false }.to_dw0());
        }
        if subsystem.is_discovery() {
            return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::QID)));
        }
        let Some(controller) = subsystem.controller(data.cntlid).filter(|c| c.hostnqn() == hostnqn) else {
            return Err(invalid_parameter(InvalidParameter::in_data(data_offset::CNTLID)));
        };
        if controller.hostid() != data.hostid {
            return Err(invalid_parameter(InvalidParameter::in_data(data_offset::HOSTID)));
        }
        let epoch = match controller.attach_io_queue(connect.qid, Arc::clone(&self.counters), self.notifier.clone()) {
            Ok(epoch) => epoch,
            Err(IoQueueRefusal::QidAboveGranted(granted)) => {
                tracing::info!(qid = connect.qid, granted, "I/O queue beyond the queues granted");
                return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::QID)));
            }
            Err(refusal) => {
                tracing::info!(qid = connect.qid, ?refusal, "I/O queue Connect refused");
                return Err((Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0));
            }
        };
        let cntlid = controller.cntlid();
        tracing::debug!(cntlid, qid = connect.qid, sqsize = connect.sqsize, "I/O queue connected");
        self.establish(Association { controller, kind: QueueKind::Io(connect.qid), sqsize: connect.sqsize, epoch });
        Ok(ConnectResponse { cntlid, atr: false, ascr: false }.to_dw0())
    }

    // ---------------------------------------------------------------------------------------------------------
    // Fabrics and admin commands
    // ---------------------------------------------------------------------------------------------------------

    fn fabrics_command(&mut self, engine: &mut IoEngine, id: SlotId, sqe: &SubmissionQueueEntry, admin: bool) -> Step {
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
                    Ok((dw0, dw1)) => self.respond_ok(id, dw0, dw1, None),
                    Err(status) => self.respond_err(engine, id, status, 0),
                }
            }
            fctype::PROPERTY_SET => self.property_set(engine, id, sqe),
            fctype::DISCONNECT => match Disconnect::from_sqe(sqe) {
                Ok(_) => {
                    tracing::debug!(qid = ?self.qid(), "Disconnect");
                    self.disconnect_slot = Some(id.0);
                    self.respond_ok(id, 0, 0, None)
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
            Ok(CcOutcome::Done) => self.respond_ok(id, 0, 0, None),
            Ok(CcOutcome::Shutdown) => {
                self.refresh_table();
                self.slot(id).plan = Plan::Shutdown;
                self.submit_ops(engine, id)
            }
        }
    }

    fn admin_context(&self) -> Option<AdminContext<'_>> {
        Some(AdminContext {
            target: &self.target,
            controller: self.controller()?,
            transport: &self.transport,
            table: &self.table,
        })
    }

    fn admin_command(
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
            admin_op::KEEP_ALIVE => self.respond_ok(id, 0, 0, None),
            admin_op::ABORT if !discovery => {
                // Commands are never aborted: the host's timeout handling resets the association instead.
                self.respond_ok(id, AbortResult { not_aborted: true }.to_dw0(), 0, None)
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
    fn admin_output(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
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
            Ok(dw0) => self.respond_ok(id, dw0, 0, Some((buffer, len))),
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
            return self.respond_ok(id, event.to_dw0(), 0, None);
        }
        if self.held_aers.len() > usize::from(AERL) {
            return self.respond_err(engine, id, Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED.with_dnr(), 0);
        }
        self.slot(id).state = SlotState::HeldAer;
        self.held_aers.push_back(id.0);
        Step::Pending
    }

    // ---------------------------------------------------------------------------------------------------------
    // I/O commands
    // ---------------------------------------------------------------------------------------------------------

    fn io_command(&mut self, engine: &mut IoEngine, id: SlotId, sqe: &SubmissionQueueEntry, in_capsule: &[u8]) -> Step {
        if sqe.opcode == FABRICS {
            return self.fabrics_command(engine, id, sqe, false);
        }
        if let Err(status) = io::check_flags(sqe) {
            return self.respond_err(engine, id, status, 0);
        }
        self.refresh_table();
        let command = match IoCommand::from_sqe(sqe) {
            Ok(c) => c,
            Err(e) if is_invalid_opcode(&e) => {
                return self.respond_err(engine, id, Status::INVALID_OPCODE.with_dnr(), 0)
            }
            Err(_) => return self.respond_err(engine, id, Status::INVALID_FIELD.with_dnr(), 0),
        };
        match self.plan_io(sqe, &command, in_capsule) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok((plan, source)) => {
                self.slot(id).plan = plan;
                self.start_io(engine, id, source, in_capsule)
            }
        }
    }

    /// Validate an I/O command (NSID, SGL against transfer length and in-capsule data, MDTS, LBA range) and
    /// decide its plan and where its data is.
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
        let rw = |nsid: u32, slba: u64, blocks: u32, direction: Direction| {
            let ns = self.table.get(nsid).ok_or(invalid_ns)?;
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
        Ok(match *command {
            IoCommand::Read(c) => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToHost)?;
                (Plan::Read { nsid: c.nsid, offset, len }, Some(source))
            }
            IoCommand::Write(c) => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController)?;
                (Plan::Write { nsid: c.nsid, offset, len, fua: c.fua || write_through }, Some(source))
            }
            IoCommand::Compare(c) => {
                let (offset, len, source) = rw(c.nsid, c.slba, c.blocks(), Direction::ToController)?;
                (Plan::Compare { nsid: c.nsid, offset, len }, Some(source))
            }
            IoCommand::Flush(c) => {
                if c.nsid != NSID_ALL && self.table.get(c.nsid).is_none() {
                    return Err(invalid_ns);
                }
                (Plan::Flush { nsid: c.nsid }, None)
            }
            IoCommand::WriteZeroes(c) => {
                let ns = self.table.get(c.nsid).ok_or(invalid_ns)?;
                if !ns.storage().supports_write_zeroes() {
                    return Err(Status::INVALID_OPCODE.with_dnr());
                }
                let offset = io::lba_offset(ns, c.slba, u64::from(c.blocks()))?;
                let len = u64::from(c.blocks()) << ns.block_shift();
                let flush_after = (c.fua || write_through) && ns.storage().volatile_write_cache();
                (Plan::WriteZeroes { nsid: c.nsid, offset, len, flush_after }, None)
            }
            IoCommand::DatasetManagement(c) => {
                self.table.get(c.nsid).ok_or(invalid_ns)?;
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
            Plan::Write { len, .. } | Plan::Compare { len, .. } | Plan::Dsm { list_len: len, .. } => len,
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
                    Plan::Dsm { .. } => self.dsm_ranges_ready(engine, id),
                    _ => self.submit_ops(engine, id),
                }
            }
            _ => self.fetch_data(engine, id, data_len),
        }
    }

    fn start_read(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
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
    fn start_compare_read(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
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
    fn dsm_ranges_ready(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
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

    /// The storage op at `cursor` of `s`'s plan: (next cursor, NSID, op, buffer), or `None` when the plan has
    /// no more ops.
    fn op_at(&self, engine: &IoEngine, s: &Slot) -> Option<(u32, u32, IoOp, Option<BufferId>)> {
        let cursor = s.cursor;
        // Flush of one namespace per volatile-cache namespace from `cursor` on (table index).
        let next_cached = |from: u32| {
            let start = usize::try_from(from).ok()?;
            self.table
                .iter()
                .enumerate()
                .skip(start)
                .find(|(_, ns)| ns.storage().volatile_write_cache())
                .map(|(i, ns)| (u32::try_from(i + 1).unwrap_or(u32::MAX), ns.nsid(), IoOp::Flush, None))
        };
        match s.plan {
            Plan::Read { nsid, offset, len } if cursor == 0 => Some((1, nsid, IoOp::Read { offset, len }, s.buffer)),
            Plan::Write { nsid, offset, len, fua } if cursor == 0 => {
                Some((1, nsid, IoOp::Write { offset, len, fua }, s.buffer))
            }
            Plan::Compare { nsid, offset, len } if cursor == 0 => Some((1, nsid, IoOp::Read { offset, len }, s.aux)),
            Plan::Flush { nsid: NSID_ALL } | Plan::Shutdown => next_cached(cursor),
            Plan::Flush { nsid } if cursor == 0 => {
                let cached = self.table.get(nsid).is_some_and(|ns| ns.storage().volatile_write_cache());
                cached.then_some((1, nsid, IoOp::Flush, None))
            }
            Plan::WriteZeroes { nsid, offset, len, .. } if cursor == 0 && s.stage == 0 => {
                Some((1, nsid, IoOp::WriteZeroes { offset, len }, None))
            }
            Plan::WriteZeroes { nsid, .. } if cursor == 0 => Some((1, nsid, IoOp::Flush, None)),
            Plan::Dsm { nsid, dsm, list_len } if dsm.ad => {
                let ns = self.table.get(nsid)?;
                if !ns.storage().supports_discard() {
                    return None;
                }
                let list = engine.buffer(s.buffer?);
                let ranges = dsm.ranges(list.get(..list_len as usize)?).ok()?;
                let shift = ns.block_shift();
                ranges.enumerate().skip(usize::try_from(cursor).ok()?).find(|(_, r)| r.length > 0).map(|(i, r)| {
                    let op = IoOp::Discard { offset: r.slba << shift, len: u64::from(r.length) << shift };
                    (u32::try_from(i + 1).unwrap_or(u32::MAX), nsid, op, None)
                })
            }
            _ => None,
        }
    }

    /// Push the plan's remaining storage ops; parks the command when the ring is full, finishes it when there
    /// is nothing (left) to wait for.
    fn submit_ops(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let index = usize::from(id.0);
        self.slots[index].state = SlotState::Executing;
        while let Some((next, nsid, op, buffer)) = self.op_at(engine, &self.slots[index]) {
            let Some(ns) = self.table.get(nsid) else {
                let s = &mut self.slots[index];
                if s.status.is_success() {
                    s.status = Status::INVALID_NAMESPACE.with_dnr();
                }
                break;
            };
            let tag = storage_tag(self.transport.queue_key, id);
            if engine.push(tag, ns.storage(), op, buffer).is_err() {
                return self.park(id, SlotState::NeedSubmit);
            }
            let s = &mut self.slots[index];
            s.ops += 1;
            s.cursor = next;
            self.storage_ops += 1;
        }
        if self.slots[index].ops == 0 {
            self.ops_done(engine, id)
        } else {
            Step::Pending
        }
    }

    /// Every storage op of the plan completed: finish the command.
    fn ops_done(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let s = *self.slot(id);
        if !s.status.is_success() {
            if s.plan == Plan::Shutdown {
                // The host only waits for CSTS.SHST; report the shutdown complete and the error in the log.
                if let Some(c) = self.controller() {
                    c.shutdown_complete();
                }
            }
            return self.respond_err(engine, id, s.status, 0);
        }
        match s.plan {
            Plan::Read { len, .. } => {
                self.counters.read(u64::from(len));
                match s.buffer {
                    Some(buffer) => self.respond_ok(id, 0, 0, Some((buffer, len))),
                    None => self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0),
                }
            }
            Plan::Write { len, .. } => {
                self.counters.write(u64::from(len));
                self.respond_ok(id, 0, 0, None)
            }
            Plan::Compare { len, .. } => {
                let same = match (s.buffer, s.aux) {
                    (Some(host), Some(media)) => {
                        let n = len as usize;
                        engine.buffer(host).get(..n).is_some_and(|h| Some(h) == engine.buffer(media).get(..n))
                    }
                    _ => false,
                };
                if same {
                    self.counters.compare();
                    self.respond_ok(id, 0, 0, None)
                } else {
                    self.respond_err(engine, id, Status::COMPARE_FAILURE.with_dnr(), 0)
                }
            }
            Plan::WriteZeroes { flush_after: true, .. } if s.stage == 0 => {
                let slot = self.slot(id);
                slot.stage = 1;
                slot.cursor = 0;
                self.submit_ops(engine, id)
            }
            Plan::WriteZeroes { .. } => {
                self.counters.write(0);
                self.respond_ok(id, 0, 0, None)
            }
            Plan::Shutdown => {
                if let Some(c) = self.controller() {
                    c.shutdown_complete();
                }
                self.respond_ok(id, 0, 0, None)
            }
            Plan::Flush { .. } | Plan::Dsm { .. } => self.respond_ok(id, 0, 0, None),
            Plan::None | Plan::Connect | Plan::AdminOutput { .. } => {
                self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0)
            }
        }
    }
}
