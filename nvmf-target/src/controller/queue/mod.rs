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
//! The data path (I/O commands) takes no lock and allocates nothing: the namespace table is a cached `Arc` refreshed
//! when the subsystem's generation changes, and so are the listener's ANA states (target's generation); counters are
//! single-writer atomics; buffers come from the reactor's [`IoEngine`] pool and storage ops go to its ring with tag
//! `(queue_key << 16) | slot`. When the pool is exhausted a command waits on the retry list (or, holding in-capsule
//! data it cannot keep, completes with the retryable Command Interrupted); a full ring likewise parks the command until
//! [`Queue::poll`].
//!
//! Nothing here blocks. Admin commands take the controller's mutex (uncontended by I/O). Arrivals and timers go by
//! the reactor's [`TurnClock`], which the engine every call takes carries (its docs say why there).
//!
//! This module holds the types, the slot slab and the entry points the transport calls ([`Queue::command`],
//! [`Queue::data_received`], [`Queue::io_completed`], [`Queue::poll`], [`Queue::release`], …); the command
//! handling they dispatch to is split by what it does, each child adding an `impl Queue` block:
//! - `connect`: Fabrics Connect, before the queue is connected.
//! - `authentication`: Authentication Send/Receive (DH-HMAC-CHAP) and what a queue not yet authenticated may do.
//! - `fabrics`: Property Get/Set and Disconnect on a connected queue.
//! - `admin`: admin command dispatch and held Asynchronous Event Requests.
//! - `io`: I/O command validation and planning, and getting host data in.
//! - `fused`: the fused Compare and Write: pairing its two commands, its storage op, answering both.
//! - `storage`: a plan's storage ops on the engine's ring and the command's finish.
//! - `buffers`: pool buffers, in-capsule copies, data fetches and the retry list.
//! - `respond`: completion queue entries, metrics and the error log.
//! - `state`: connecting, association liveness, SQ head, the namespace table cache.
//! - `reservation`: the reservation commands, the per-I/O reservation check and the notices to hosts.
//! - `keep_alive`: the Keep Alive timer and Traffic Based Keep Alive.

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::time::Instant;

use nvmf_common::fabrics::connect::CONNECT_DATA_SIZE;
use nvmf_common::nvme::io::DatasetManagement;
use nvmf_common::nvme::{CompletionQueueEntry, Status, SubmissionQueueEntry};

use super::ana::PortStates;
use super::association::{Controller, Notifier, AERL};
use super::io::{storage_status, StorageOp};
use super::subsystem::NamespaceTable;
use super::target::{Target, TransportInfo};
use super::EventNotifier;
#[cfg(doc)]
use crate::backend::TurnClock;
use crate::backend::{BufferBudget, BufferId, IoEngine, Payload};
use crate::counters::{QueueCounters, QueueRecorder};

pub use authentication::MAX_RECEIVE_LEN;

use authentication::QueueAuth;

mod admin;
mod authentication;
mod buffers;
mod connect;
mod fabrics;
mod fused;
mod io;
mod keep_alive;
mod reservation;
mod respond;
mod state;
mod storage;

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
    /// The queue's DH-HMAC-CHAP transaction failed; its last message was sent and the association ended.
    #[error("authentication of queue {qid} failed")]
    AuthenticationFailed {
        /// The queue.
        qid: u16,
    },
    /// No Fabrics Connect completed within the target's connect timeout (a peer that connects and stalls).
    #[error("no Connect completed within {timeout_ms} ms")]
    ConnectTimeout {
        /// The connect timeout.
        timeout_ms: u32,
    },
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
    /// A fused command with its host data in, waiting for the other command of its operation (its data, its
    /// arrival, or the storage op the second command carries).
    FusedWait,
    /// On the retry list: a fused command whose operation ended; respond with `status` at the next poll.
    NeedRespond,
}

/// What a command does, decided once it is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    None,
    /// Fabrics Connect whose 1024 bytes of data are fetched into the buffer.
    Connect,
    /// Authentication Send whose `len` bytes (the message) are fetched into the buffer.
    AuthenticationSend {
        len: u32,
    },
    /// Authentication Receive: the transaction's next message in `len` bytes, once a buffer is available.
    AuthenticationReceive {
        len: u32,
    },
    /// Authentication Send whose DH step runs on the target's pool (one op; the transaction is with it).
    AuthenticationStep,
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
    /// The Compare of a fused Compare and Write: host data in `buffer`, compared by the second command's op.
    FusedCompare {
        nsid: u32,
        offset: u64,
        len: u32,
    },
    /// The Write of a fused Compare and Write: host data in `buffer`; carries the operation's storage op.
    FusedWrite {
        nsid: u32,
        offset: u64,
        len: u32,
    },
    /// Range list of `list_len` bytes in `buffer` (cursor: range index).
    Dsm {
        nsid: u32,
        dsm: DatasetManagement,
        list_len: u32,
    },
    /// Reservation Register, Acquire or Release: its `len` bytes of host data, then the namespace's reservations.
    Reservation {
        nsid: u32,
        len: u32,
    },
    /// Reservation Register, Acquire or Release whose new state the target's state pool writes (PTPL).
    ReservationWrite,
    /// Reservation Report of `len` bytes, once a buffer is available.
    ReservationReport {
        nsid: u32,
        len: u32,
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
    /// The turn in which the command capsule arrived ([`TurnClock::turn`]; metrics: command latency).
    arrival: Option<Instant>,
    /// A budget made it wait for a buffer (counted once per command).
    budget_waited: bool,
    /// The slot of the other command of its fused operation, once both arrived.
    partner: Option<u16>,
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
        budget_waited: false,
        partner: None,
    };
}

/// Where the queue is in a fused operation: what the next command must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Fused {
    #[default]
    None,
    /// The first command (a Compare) arrived in this slot: the next command must be its second.
    First(u16),
    /// The first command failed: a second command that follows is aborted (Failed Fused Command).
    Refused,
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
    /// The controller lists this queue (holds its QID). An I/O queue that must authenticate is listed once it has.
    attached: bool,
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
    /// The queue's counters, counting from Connect; the queue's end folds them into the subsystem's totals.
    counters: QueueRecorder,
    storage_ops: usize,
    /// The pool buffers this queue holds, and its shares.
    budget: BufferBudget,
    table: Arc<NamespaceTable>,
    table_generation: u64,
    /// This queue's listener's ANA states, refreshed when the target's ANA generation moves.
    ana: Arc<PortStates>,
    ana_generation: u64,
    sq_head: u16,
    /// When the queue was created: its Connect must complete within the target's connect timeout from then.
    created: Instant,
    /// When the last command arrived (its reactor turn's clock reading): the keep-alive timer's start.
    last_activity: Option<Instant>,
    /// When this I/O queue last published a command's arrival to its controller (Traffic Based Keep Alive).
    traffic_published: Option<Instant>,
    notifier: Option<Notifier>,
    /// The slot of a Disconnect command: once released, the queue ends.
    disconnect_slot: Option<u16>,
    disconnected: bool,
    /// In-band authentication (DH-HMAC-CHAP) of this queue.
    auth: QueueAuth,
    /// A fused operation under way.
    fused: Fused,
    /// Work parked because its pool's queue was full (a DH step, a reservation state write), by slot.
    parked_offloads: Vec<(u16, Payload)>,
}

fn index_of(i: usize) -> u16 {
    // Slab indices are below 65536 by construction (twice at most 32768 entries).
    u16::try_from(i).unwrap_or(u16::MAX)
}

impl Queue {
    /// A queue for a new transport connection at `now` (its reactor's turn: the connect deadline runs from it),
    /// before Connect.
    pub fn new(target: Arc<Target>, transport: TransportInfo, now: Instant) -> Self {
        let slots = vec![Slot::FREE; usize::from(PRECONNECT_SLOTS)];
        let params = target.params();
        // Before Connect a queue needs one buffer at most: its Connect data.
        let budget = BufferBudget::anonymous(1, params.queue_buffer_percent, params.anonymous_buffer_percent);
        Queue {
            target,
            transport,
            state: QueueState::AwaitingConnect,
            slots,
            free: (0..PRECONNECT_SLOTS).rev().collect(),
            retry: VecDeque::with_capacity(usize::from(PRECONNECT_SLOTS)),
            held_aers: VecDeque::with_capacity(usize::from(AERL) + 1),
            counters: QueueRecorder::default(),
            storage_ops: 0,
            budget,
            table: Arc::new(NamespaceTable::default()),
            table_generation: 0,
            ana: Arc::new(PortStates::default()),
            // Never a real generation before the first refresh: u64::MAX is not reached by counting.
            ana_generation: u64::MAX,
            sq_head: 0,
            created: now,
            last_activity: None,
            traffic_published: None,
            notifier: None,
            disconnect_slot: None,
            disconnected: false,
            auth: QueueAuth::default(),
            fused: Fused::None,
            parked_offloads: Vec::new(),
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

    /// The target this queue serves.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
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
        self.counters.counters()
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
        self.disconnected || self.auth.ended() || !self.retry.is_empty()
    }

    /// Whether the queue's peer is not admitted to an NVM subsystem (before Connect; a discovery controller): its
    /// waiting commands can wait for the reactor's retry interval rather than be retried every turn.
    pub fn is_anonymous(&self) -> bool {
        self.budget.is_anonymous()
    }

    /// Storage ops of this queue not yet completed; the reactor keeps a dead queue until this is 0.
    pub fn in_flight(&self) -> usize {
        self.storage_ops
    }

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
        self.counters.set_outstanding(self.slots.len() - self.free.len());
        let arrival = engine.clock().turn();
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
            Some(_) if authentication::is_authentication_command(sqe) => {
                self.authentication_command(engine, id, sqe, in_capsule)
            }
            Some(_) if self.auth.blocks_commands() => {
                self.respond_err(engine, id, Status::AUTHENTICATION_REQUIRED.with_dnr(), 0)
            }
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
            Plan::AuthenticationSend { len } => {
                let message = buffer.map(|b| engine.buffer(b)[..len as usize].to_vec()).unwrap_or_default();
                self.release_buffers(engine, slot);
                self.authentication_message(engine, slot, message)
            }
            Plan::Write { .. } => self.submit_ops(engine, slot),
            Plan::Compare { .. } => self.start_compare_read(engine, slot),
            Plan::FusedCompare { .. } | Plan::FusedWrite { .. } => self.fused_data_in(engine, slot),
            Plan::Dsm { .. } => self.dsm_ranges_ready(engine, slot),
            Plan::Reservation { .. } => self.reservation_data_ready(engine, slot),
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
                Plan::FusedWrite { .. } => (StorageOp::CompareAndWrite, false),
                // Deallocation is advisory: a discard the storage cannot do is not an error.
                Plan::Dsm { .. } => (StorageOp::Write, e.kind() == std::io::ErrorKind::Unsupported),
                _ => (StorageOp::Write, false),
            };
            if !advisory && s.status.is_success() {
                s.status = storage_status(&e, op);
                // A miscompare is the answer to a Compare and Write (a lock already taken), not a failure to log.
                if s.status != Status::COMPARE_FAILURE.with_dnr() {
                    tracing::warn!(error = %e, status = %s.status, opcode = s.sqe.opcode, "storage op failed");
                }
            }
        }
        match s.state {
            SlotState::Orphaned => {
                if matches!(s.plan, Plan::AuthenticationStep | Plan::ReservationWrite) {
                    // The queue is gone: so is the step's transaction, with its key material.
                    drop(engine.take_offloaded(storage_tag(self.transport.queue_key, slot)));
                }
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

    /// When the transport must [`Queue::poll`] this queue without an event: its connect deadline before Connect
    /// (and authentication), its keep-alive deadline after, and a re-authentication's expiry (the queue's timers).
    pub fn next_deadline(&self) -> Option<Instant> {
        let timer = self.connect_deadline().or_else(|| self.keep_alive_deadline());
        match (timer, self.auth.deadline()) {
            (Some(timer), Some(reauthentication)) => Some(timer.min(reauthentication)),
            (timer, reauthentication) => timer.or(reauthentication),
        }
    }

    /// Called at [`Queue::next_deadline`], when the queue's notifier fired (asynchronous event, association ended or
    /// reset elsewhere), and at the end of every reactor turn while [`Queue::wants_poll`]: ends the queue if no Connect
    /// completed in time or its association ended, checks the keep-alive timer (admin queue: expiry tears the
    /// association down), delivers asynchronous events to held AERs and retries commands waiting for a pool buffer or
    /// ring space. Steps to carry out go to `out`.
    pub fn poll(&mut self, engine: &mut IoEngine, now: Instant, out: &mut Vec<Step>) -> Result<(), QueueError> {
        if self.disconnected {
            let qid = self.qid().unwrap_or(0);
            self.disconnect(engine);
            return Err(QueueError::Disconnected { qid });
        }
        if matches!(self.state, QueueState::Dead) {
            return Ok(());
        }
        if self.auth.ended() {
            let qid = self.qid().unwrap_or(0);
            // A failed transaction ends its queue only (an admin queue's end ends the association): nvmet ends the
            // whole association, which lets a peer that fails on purpose end another host's.
            self.disconnect(engine);
            return Err(QueueError::AuthenticationFailed { qid });
        }
        self.check_connect_deadline(engine, now)?;
        self.check_reauthentication_deadline(now);
        self.check_association(engine)?;
        if let QueueState::Connected(Association { controller, kind: QueueKind::Admin, .. }) = &self.state {
            let controller = Arc::clone(controller);
            self.check_keep_alive(engine, &controller, now)?;
            if !self.held_aers.is_empty() && controller.has_pending_event() {
                let mut state = controller.lock();
                while let Some(&index) = self.held_aers.front() {
                    let Some(event) = controller.take_event_locked(&mut state) else { break };
                    self.held_aers.pop_front();
                    out.push(self.respond_ok(engine, SlotId(index), event.to_dw0(), 0, None));
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
                SlotState::NeedRespond => self.respond_fused(engine, id),
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
        self.counters.set_outstanding(self.slots.len() - self.free.len());
        if self.disconnect_slot == Some(slot.0) {
            self.disconnect_slot = None;
            self.disconnected = true;
        }
        self.auth.released(slot.0);
    }

    /// The connection is gone: the queue is dead; for the admin queue the association ends. Slots with storage
    /// I/O in flight are released when their completions arrive (the reactor keeps the queue until
    /// [`Queue::in_flight`] is 0). Idempotent.
    pub fn disconnect(&mut self, engine: &mut IoEngine) {
        // Nothing completes on a dead queue: fold its counters into the subsystem's totals now.
        self.counters.retire();
        match mem::replace(&mut self.state, QueueState::Dead) {
            QueueState::Connected(a) => match a.kind {
                QueueKind::Admin => a.controller.terminate(),
                QueueKind::Io(qid) if a.attached => a.controller.detach_io_queue(qid, a.epoch),
                QueueKind::Io(_) => {}
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
        self.fused = Fused::None;
        self.parked_offloads.clear();
    }

    fn slot(&mut self, id: SlotId) -> &mut Slot {
        &mut self.slots[usize::from(id.0)]
    }
}
