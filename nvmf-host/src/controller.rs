//! [`Controller`]: a host's association with an NVMe-oF controller over NVMe/TCP or NVMe/RDMA
//! ([`ConnectOptions::transport`]), kept up across connection loss.
//!
//! [`Controller::connect`] brings the association up the way the Linux host does: admin queue (TCP: ICReq;
//! RDMA: RDMA CM connect with HSQSIZE 31; then Fabrics Connect with CNTLID 0xFFFF and KATO), Property Get
//! CAP, Property Set CC.EN and a wait for CSTS.RDY bounded by CAP.TO, Identify Controller, Set Features
//! Number of Queues, then one connection (TCP socket or RDMA queue pair) and Fabrics Connect per granted I/O
//! queue, the namespace scan, and Asynchronous Event Requests. Everything above the queues is the same code
//! for both transports: each queue is a [`QueueHandle`] whose I/O thread drives a `TcpQueue` or an
//! `RdmaQueue` (writes up to the controller's IOCCSZ go in the capsule on either).
//!
//! Reconnect (nvme-cli's `--reconnect-delay`, `--ctrl-loss-tmo`, `--fast-io-fail-tmo`): when any queue of
//! the association fails (transport error, command timeout) or a Keep Alive fails, the controller becomes
//! [`ControllerState::Reconnecting`]: every queue's connection is aborted and every
//! [`ConnectOptions::reconnect_delay`] a whole new association is tried (same host NQN and ID, same number
//! of I/O queues) until one comes up — the queues' connections are then replaced in place, so the
//! [`QueueHandle`]s callers hold stay valid — or [`ConnectOptions::ctrl_loss_tmo`] has passed since the
//! loss ([`ControllerState::Failed`]). Meanwhile I/O is held: new I/O submissions wait, and I/O commands
//! the lost connection had in flight are resubmitted on the new association (reads, writes, flush, write
//! zeroes and DSM are safe to repeat at the block level), through the [`Pending`] the caller
//! waits on; see [`crate::queue::handle`] for how the owned buffers are kept without a copy. After `fast_io_fail_tmo`
//! held and new I/O fail with [`HostError::FastIoFail`] while attempts go on; after `ctrl_loss_tmo` with
//! [`HostError::ControllerLost`]. Admin commands of [`Controller::admin_command`] are held the same way (the
//! supervisor's own are not: it runs the reconnect they would wait for).
//!
//! Asynchronous events: the host keeps AERL + 1 Asynchronous Event Requests outstanding (at most 8); a
//! Namespace Attribute Changed notice makes it read the Changed Namespace List log (which clears the
//! event), rescan the namespaces and bump [`Controller::namespace_generation`], then re-arm the request.
//!
//! Threads: each queue has its I/O thread ([`QueueHandle`]). One supervisor thread per
//! controller sends the Keep Alives (every KATO/2; to a controller that reports Traffic Based Keep Alive, none while
//! I/O flows: see `supervise`), handles asynchronous events, notices a lost association
//! (a queue's I/O thread tells it when its connection fails, a held command when it meets a failed one) and runs
//! the reconnect attempts; it sleeps until one of those is due, blocks on admin commands and connects, and is
//! never on the data path. The blocking calls here run on the caller's thread, split transfers at MDTS, submit
//! every piece at once (spread round-robin over the I/O queues) and wait for all of them, each wait
//! bounded by [`ConnectOptions::io_timeout`] (and held while reconnecting). Each has an async twin
//! (`read_async`, `write_async`, `flush_async`, `write_zeroes_async`, `deallocate_async`, and
//! [`Controller::submit_io_async`]) for any executor: the same commands, awaited ([`Pending`] is a
//! `Future` woken by the queue's I/O thread), and held while reconnecting without blocking the task's thread
//! (the supervisor wakes held tasks on every state change and at the fast-fail deadline); the queue's command
//! timeout bounds them. Reads and writes take scatter-gather lists (`IoSliceMut`, `IoSlice`) whose lengths add
//! up to whole blocks; the wrappers copy between those and the queue's owned buffers (one buffer per command),
//! and zero-copy callers use [`Controller::submit_io`] with owned buffers. The data path takes one uncontended
//! `RwLock` read (the queue's current connection; only a reconnect write-locks it) and no other lock.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{
    Connect, ConnectData, ConnectResponse, CATTR_DISABLE_SQ_FLOW_CONTROL, CNTLID_DYNAMIC,
};
use nvmf_common::fabrics::nqn::{Nqn, DISCOVERY_NQN};
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertyGet, PropertySet, ShutdownNotification,
    ShutdownStatus,
};
use nvmf_common::nvme::admin::{AsyncEvent, AsyncEventRequest, KeepAlive};
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, NamespaceIdentificationDescriptor,
    IDENTIFY_DATA_SIZE,
};
use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes, DSM_MAX_RANGES};
use nvmf_common::nvme::log_page::{lid, ChangedNamespaceList, GetLogPage, CHANGED_NAMESPACE_LIST_SIZE};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, SubmissionQueueEntry};

use crate::error::HostError;
use crate::identity::HostIdentity;
use crate::queue::handle::{Completed, CompletionSink, Pending, QueueHandle, Recovery, Reply, Submitter};
use crate::queue::{execute, BareQueue, DataDirection, Request, MAX_QUEUE_DEPTH};
#[cfg(feature = "rdma")]
use crate::rdma::queue::DetachedTeardown;
#[cfg(feature = "rdma")]
use crate::rdma::{RdmaQueue, RdmaQueueOptions};
use crate::tcp::{TcpQueue, TcpQueueOptions};

/// Depth of the admin queue (Linux uses 32).
const ADMIN_QUEUE_SIZE: u16 = 32;
/// In-capsule data the admin queue uses over NVMe/TCP (at least 8 KiB on the admin queue).
const ADMIN_IN_CAPSULE: u32 = 8192;
/// Most Asynchronous Event Requests kept outstanding, whatever AERL allows (they occupy admin queue slots).
const MAX_AERS: usize = 8;

/// The NVMe-oF transport (nvme-cli's `-t/--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Transport {
    /// NVMe/TCP.
    #[default]
    Tcp,
    /// NVMe/RDMA (RDMA CM and verbs; needs the `rdma` feature and an RDMA device).
    Rdma,
}

impl Transport {
    /// The name nvme-cli and the discovery log use (`tcp`, `rdma`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }
}

/// How to connect (nvme-cli's option names in the field docs).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Transport (`-t`): every queue of the association uses it.
    pub transport: Transport,
    /// Host NQN (`--hostnqn`).
    pub hostnqn: String,
    /// Host Identifier (`--hostid`).
    pub hostid: [u8; 16],
    /// I/O queues to ask for (`--nr-io-queues`); the controller may grant fewer. 0: admin only.
    pub nr_io_queues: u16,
    /// Entries per I/O queue (`--queue-size`): SQSIZE + 1 in Connect.
    pub queue_size: u16,
    /// Keep Alive Timeout (`--keep-alive-tmo`); zero disables keep-alive.
    pub keep_alive_tmo: Duration,
    /// Header digests (`--hdr-digest`; NVMe/TCP only).
    pub hdr_digest: bool,
    /// Data digests (`--data-digest`; NVMe/TCP only).
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (`--disable-sqflow`; Connect CATTR bit 2, on every queue): it
    /// then reports no SQ head, and over NVMe/TCP may end a successful read with its last C2HData PDU instead of
    /// a response capsule. The host never relies on SQ head reports (it keeps no more commands outstanding than
    /// the queue has entries), so this only saves PDUs. nvme-cli's `connect-all` sets it for a discovery log entry
    /// that allows it (TREQ bit 2), as `nvmf-host connect-all` does.
    pub disable_sqflow: bool,
    /// Bound on connecting each queue (TCP and ICReq/ICResp; RDMA address and route resolution and the CM
    /// connect).
    pub connect_timeout: Duration,
    /// A command outstanding longer than this fails its queue.
    pub io_timeout: Duration,
    /// Wait between reconnect attempts after the association is lost (`--reconnect-delay`, default 10 s).
    pub reconnect_delay: Duration,
    /// Give up reconnecting this long after the association was lost (`--ctrl-loss-tmo`, default 600 s):
    /// held and new I/O then fail and the controller stays [`ControllerState::Failed`]. `None` (nvme-cli's
    /// -1) retries forever.
    pub ctrl_loss_tmo: Option<Duration>,
    /// Fail held and new I/O this long after the association was lost while reconnect attempts go on
    /// (`--fast-io-fail-tmo`); `None` (the default, nvme-cli's -1) holds I/O until reconnected or
    /// `ctrl_loss_tmo`.
    pub fast_io_fail_tmo: Option<Duration>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let id = HostIdentity::from_system();
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        ConnectOptions {
            transport: Transport::Tcp,
            hostnqn: id.hostnqn,
            hostid: id.hostid,
            nr_io_queues: u16::try_from(cores).unwrap_or(u16::MAX),
            queue_size: 128,
            keep_alive_tmo: Duration::from_secs(5),
            hdr_digest: false,
            data_digest: false,
            disable_sqflow: false,
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            reconnect_delay: Duration::from_secs(10),
            ctrl_loss_tmo: Some(Duration::from_secs(600)),
            fast_io_fail_tmo: None,
        }
    }
}

/// What Identify Controller told (the fields the host uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerInfo {
    /// Controller ID.
    pub cntlid: u16,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Firmware revision.
    pub firmware: String,
    /// Subsystem NQN as the controller reports it.
    pub subnqn: String,
    /// Largest transfer in bytes (MDTS), `None` for no limit.
    pub max_transfer: Option<u32>,
    /// Largest in-capsule data on I/O queues (IOCCSZ × 16 − 64).
    pub in_capsule_data: u32,
    /// Number of namespaces (NN).
    pub nn: u32,
    /// Optional NVM Command Support.
    pub oncs: u16,
    /// Volatile write cache present.
    pub vwc: bool,
    /// Keep Alive Support granularity in milliseconds (KAS × 100).
    pub kas_ms: u32,
    /// Traffic Based Keep Alive (CTRATT bit 6): any command restarts the controller's keep-alive timer, so the
    /// host skips a Keep Alive while I/O completes.
    pub traffic_based_keep_alive: bool,
    /// I/O queues granted by Set Features Number of Queues (and connected).
    pub io_queues: u16,
    /// The capability register.
    pub cap: Capabilities,
}

/// A namespace as Identify describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks (NSZE).
    pub blocks: u64,
    /// NGUID (zero if the controller reports none).
    pub nguid: [u8; 16],
    /// UUID from the Namespace Identification Descriptor list, if reported.
    pub uuid: Option<[u8; 16]>,
}

/// Where the association with the controller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerState {
    /// The association is up; I/O goes straight to the queues.
    Live,
    /// The association was lost; I/O is held while the host tries a new one every
    /// [`ConnectOptions::reconnect_delay`].
    Reconnecting {
        /// Attempts made since the loss.
        attempts: u32,
    },
    /// The host is disconnecting (or dropped the controller); I/O fails.
    Deleting,
    /// Reconnecting gave up after [`ConnectOptions::ctrl_loss_tmo`]; I/O fails.
    Failed,
}

/// The queues and facts of one association (what [`associate`] brings up).
#[derive(Debug)]
struct Association {
    info: ControllerInfo,
    admin: QueueHandle,
    io: Vec<QueueHandle>,
    /// Asynchronous Event Requests to keep outstanding (AERL + 1, capped).
    aers: usize,
}

/// Where the controller stands, shared by the controller, its queues (as their [`Recovery`]) and the
/// supervisor. Changed under the mutex; waiters (held I/O) sleep on the condition variable; the state is
/// mirrored in atomics so [`Controller::state`] and [`Controller::reconnects`] take no lock. It is also the
/// supervisor's inbox: every state change and every failed queue connection sends it a [`Wake::Look`], and the
/// Asynchronous Event Requests complete into it (a [`CompletionSink`]), so the supervisor sleeps until one of
/// those or its next deadline.
#[derive(Debug)]
struct Supervision {
    status: Mutex<Status>,
    changed: Condvar,
    /// The supervisor's wake-ups (unbounded: a queue's I/O thread sends on it and must never block).
    wake: Sender<Wake>,
    /// [`ControllerState`] as `kind << 32 | attempts`.
    word: AtomicU64,
    /// Associations since the first (the current association's epoch).
    reconnects: AtomicU64,
    fast_io_fail_tmo: Option<Duration>,
}

#[derive(Debug)]
struct Status {
    state: ControllerState,
    /// The current association: 0 for the first, +1 per reconnect.
    epoch: u64,
    /// When the association was lost (while not Live).
    lost_at: Option<Instant>,
    /// Tasks awaiting a held command ([`Recovery::poll_hold`]), woken by the next state change.
    held: Vec<Waker>,
}

impl ControllerState {
    fn to_word(self) -> u64 {
        match self {
            ControllerState::Live => 0,
            ControllerState::Reconnecting { attempts } => (1 << 32) | u64::from(attempts),
            ControllerState::Deleting => 2 << 32,
            ControllerState::Failed => 3 << 32,
        }
    }

    fn from_word(word: u64) -> Self {
        #[allow(clippy::cast_possible_truncation)] // the low half is the attempt count
        let attempts = word as u32;
        match word >> 32 {
            0 => ControllerState::Live,
            1 => ControllerState::Reconnecting { attempts },
            2 => ControllerState::Deleting,
            _ => ControllerState::Failed,
        }
    }
}

impl Supervision {
    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, status: &mut Status, state: ControllerState) {
        status.state = state;
        self.word.store(state.to_word(), Ordering::Release);
        self.wake_held(status);
        // Gone only once the supervisor stopped, which needs no telling.
        let _ = self.wake.send(Wake::Look);
    }

    /// Let every held command look at the state again (blocked or awaited).
    fn wake_held(&self, status: &mut Status) {
        self.changed.notify_all();
        for waker in status.held.drain(..) {
            waker.wake();
        }
    }

    /// Where a command held since association `epoch` failed (`cause`) stands: resubmit (`Ok`), fail, or
    /// keep waiting (`Pending`). A live controller still on that association starts reconnecting here.
    fn held(&self, status: &mut Status, qid: u16, epoch: u64, cause: &HostError) -> Poll<Result<(), HostError>> {
        if status.epoch > epoch {
            return Poll::Ready(Ok(()));
        }
        if status.state == ControllerState::Live {
            self.lose(status, epoch, cause);
        }
        Poll::Ready(Err(match status.state {
            ControllerState::Live | ControllerState::Reconnecting { .. } => {
                let lost = Self::lost_for(status);
                match self.fast_io_fail_tmo {
                    Some(f) if lost >= f => HostError::FastIoFail { after: lost },
                    _ => return Poll::Pending,
                }
            }
            ControllerState::Deleting => HostError::ShutDown { qid },
            ControllerState::Failed => HostError::ControllerLost { after: Self::lost_for(status) },
        }))
    }

    /// Association `epoch` was lost (`cause`): start reconnecting unless that already happened.
    fn lose(&self, status: &mut Status, epoch: u64, cause: &HostError) {
        if status.epoch == epoch && status.state == ControllerState::Live {
            tracing::warn!(error = %cause, "association lost; reconnecting");
            status.lost_at = Some(Instant::now());
            self.set(status, ControllerState::Reconnecting { attempts: 0 });
        }
    }

    fn lost_for(status: &Status) -> Duration {
        status.lost_at.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

impl Recovery for Supervision {
    fn hold(&self, qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError> {
        let mut status = self.lock();
        loop {
            match self.held(&mut status, qid, epoch, cause) {
                Poll::Ready(result) => return result,
                // Wake at the fast-fail deadline; otherwise the supervisor's state changes wake us (the
                // one-second bound is only a guard against a missed notification).
                Poll::Pending => {
                    let wait =
                        self.fast_io_fail_tmo.map_or(Duration::MAX, |f| f.saturating_sub(Self::lost_for(&status)));
                    let wait = wait.min(Duration::from_secs(1));
                    status = self.changed.wait_timeout(status, wait).unwrap_or_else(PoisonError::into_inner).0;
                }
            }
        }
    }

    fn poll_hold(&self, qid: u16, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        let mut status = self.lock();
        let held = self.held(&mut status, qid, epoch, cause);
        if held.is_pending() && !status.held.iter().any(|w| w.will_wake(cx.waker())) {
            // Woken by the next state change, or by the supervisor at the fast-fail deadline.
            status.held.push(cx.waker().clone());
        }
        held
    }

    fn link_failed(&self) {
        let _ = self.wake.send(Wake::Look);
    }
}

/// What wakes the supervisor (besides its deadlines).
#[derive(Debug)]
enum Wake {
    /// An Asynchronous Event Request completed.
    Event(Box<Completed>),
    /// The controller's state changed or a queue's connection failed: look again.
    Look,
}

impl CompletionSink for Supervision {
    fn push(&self, completed: Completed) {
        let _ = self.wake.send(Wake::Event(Box::new(completed)));
    }
    fn wake(&self) {}
}

/// What the controller, its supervisor and its queues share.
#[derive(Debug)]
struct Inner {
    addr: SocketAddr,
    subnqn: String,
    options: ConnectOptions,
    admin: QueueHandle,
    io: Vec<QueueHandle>,
    aers: usize,
    /// The current association's controller ID.
    cntlid: AtomicU16,
    /// Whether the current association's controller reports Traffic Based Keep Alive.
    traffic_based_keep_alive: AtomicBool,
    /// Commands on I/O queues connected outside the controller ([`Controller::bare_io_traffic`]).
    bare_io: Arc<IoTraffic>,
    namespaces: RwLock<HashMap<u32, NamespaceInfo>>,
    /// Bumped on each namespace change; waiters sleep on `namespace_changed`.
    namespace_generation: Mutex<u64>,
    namespace_changed: Condvar,
    supervision: Arc<Supervision>,
}

/// Where callers that drive bare I/O queues of the association (perf) report their commands, so the supervisor
/// counts them as I/O traffic: a Traffic Based Keep Alive controller then gets no Keep Alive while they run. Report
/// in batches (perf does every [`IoTraffic::REPORT_INTERVAL`]), not per command: it is one shared counter pair.
#[derive(Debug, Default)]
pub struct IoTraffic {
    submitted: AtomicU64,
    completed: AtomicU64,
}

impl IoTraffic {
    /// How often perf reports: well inside the supervisor's KATO/4 looks for any KATO of a second or more.
    pub const REPORT_INTERVAL: Duration = Duration::from_millis(100);

    /// Add commands submitted and completed since the last report.
    pub fn add(&self, submitted: u64, completed: u64) {
        self.submitted.fetch_add(submitted, Ordering::Relaxed);
        self.completed.fetch_add(completed, Ordering::Relaxed);
    }

    fn counts(&self) -> (u64, u64) {
        (self.submitted.load(Ordering::Relaxed), self.completed.load(Ordering::Relaxed))
    }
}

/// An association with one controller (see the module docs).
#[derive(Debug)]
pub struct Controller {
    inner: Arc<Inner>,
    info: ControllerInfo,
    next_io: AtomicUsize,
    supervisor: Option<JoinHandle<()>>,
}

fn property_get(admin: &Submitter, p: Property, timeout: Duration) -> Result<u64, HostError> {
    let sqe = PropertyGet { size: p.size(), offset: p.offset() }.to_sqe();
    let reply = run(admin, "Property Get", sqe, DataDirection::None, Vec::new(), timeout)?;
    Ok(reply.result.map(|c| c.result64()).unwrap_or_default())
}

fn property_set(admin: &Submitter, p: Property, value: u64, timeout: Duration) -> Result<(), HostError> {
    let sqe = PropertySet { size: p.size(), offset: p.offset(), value }.to_sqe();
    run(admin, "Property Set", sqe, DataDirection::None, Vec::new(), timeout).map(|_| ())
}

/// Submit one command and wait; a non-success status is [`HostError::Status`].
fn run(
    q: &Submitter,
    command: &'static str,
    sqe: SubmissionQueueEntry,
    direction: DataDirection,
    data: Vec<u8>,
    timeout: Duration,
) -> Result<Reply, HostError> {
    let pending = q.submit(Request { sqe, data, direction, context: () })?;
    finish(command, pending, timeout)
}

fn finish(command: &'static str, pending: Pending, timeout: Duration) -> Result<Reply, HostError> {
    check(command, pending.wait(timeout)?)
}

/// `reply` of `command` if it succeeded; else its error, or its status as [`HostError::Status`].
fn check(command: &'static str, reply: Reply) -> Result<Reply, HostError> {
    match &reply.result {
        Ok(cqe) if cqe.status.is_success() => Ok(reply),
        Ok(cqe) => Err(HostError::Status { command, status: cqe.status }),
        Err(e) => Err(e.clone()),
    }
}

/// The Fabrics Connect request for queue `qid` (its SQE and 1024-byte data), carrying `context`.
fn connect_request<T>(
    qid: u16,
    options: &ConnectOptions,
    subnqn: &str,
    sqsize: u16,
    cntlid: u16,
    kato_ms: u32,
    context: T,
) -> Result<Request<T>, HostError> {
    let connect = Connect {
        qid,
        sqsize,
        cattr: if options.disable_sqflow { CATTR_DISABLE_SQ_FLOW_CONTROL } else { 0 },
        kato: kato_ms,
        sgl1: SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset },
    };
    let sqe = connect.to_sqe().map_err(|e| HostError::wire("Connect", e))?;
    let subnqn = Nqn::new(subnqn).map_err(|e| HostError::InvalidRequest(format!("subsystem NQN: {e}")))?;
    let hostnqn = Nqn::new(&options.hostnqn).map_err(|e| HostError::InvalidRequest(format!("host NQN: {e}")))?;
    let data = ConnectData { hostid: options.hostid, cntlid, subnqn, hostnqn }.to_bytes().to_vec();
    Ok(Request { sqe, data, direction: DataDirection::HostToController, context })
}

/// The CNTLID a Connect response grants, or the rejection.
fn connect_response(qid: u16, cqe: &CompletionQueueEntry) -> Result<u16, HostError> {
    if !cqe.status.is_success() {
        return Err(HostError::ConnectRejected { qid, status: cqe.status, dw0: cqe.dw0 });
    }
    Ok(ConnectResponse::from_dw0(cqe.dw0).cntlid)
}

/// Fabrics Connect on a fresh queue; returns the CNTLID.
fn fabrics_connect(
    q: &Submitter,
    options: &ConnectOptions,
    subnqn: &str,
    sqsize: u16,
    cntlid: u16,
    kato_ms: u32,
) -> Result<u16, HostError> {
    let qid = q.qid();
    let pending = q.submit(connect_request(qid, options, subnqn, sqsize, cntlid, kato_ms, ())?)?;
    let reply = pending.wait(options.connect_timeout)?;
    connect_response(qid, &reply.result?)
}

/// Connect queue `qid` of `depth` commands (SQSIZE) over the options' transport and start its I/O thread;
/// `icd`: largest in-capsule write, `cntlid`: the association's (0xFFFF for the admin queue; NVMe/RDMA sends
/// it in the CM private data).
fn open_queue(
    addr: SocketAddr,
    options: &ConnectOptions,
    qid: u16,
    depth: u16,
    icd: u32,
    cntlid: u16,
) -> Result<QueueHandle, HostError> {
    match options.transport {
        Transport::Tcp => {
            let qopts = TcpQueueOptions {
                qid,
                depth,
                hdr_digest: options.hdr_digest,
                data_digest: options.data_digest,
                // NVMe/TCP: at least 8 KiB in-capsule on the admin queue.
                in_capsule_limit: if qid == 0 { ADMIN_IN_CAPSULE } else { icd },
                max_c2h_data: 16 << 20,
                connect_timeout: options.connect_timeout,
                command_timeout: options.io_timeout,
            };
            QueueHandle::spawn(TcpQueue::connect(addr, &qopts)?)
        }
        #[cfg(feature = "rdma")]
        Transport::Rdma => {
            let qopts = RdmaQueueOptions {
                qid,
                depth,
                // NVMe/RDMA: no in-capsule data on the admin queue.
                in_capsule_limit: if qid == 0 { 0 } else { icd },
                cntlid,
                memory_windows: true,
                connect_timeout: options.connect_timeout,
                command_timeout: options.io_timeout,
            };
            QueueHandle::spawn(DetachedTeardown::new(RdmaQueue::connect(addr, &qopts)?))
        }
        #[cfg(not(feature = "rdma"))]
        Transport::Rdma => {
            let _ = cntlid;
            Err(HostError::InvalidRequest("this build has no NVMe/RDMA (feature `rdma`)".into()))
        }
    }
}

/// Set Features Number of Queues: ask for `count` I/O submission and completion queue pairs; returns how
/// many the controller grants (at most `count`).
fn number_of_queues(admin: &Submitter, count: u16, timeout: Duration) -> Result<u16, HostError> {
    let want = u32::from(count);
    let nq = NumberOfQueues::with_counts(want, want).map_err(|e| HostError::wire("Number of Queues", e))?;
    let sqe = SetFeatures::new(&nq).to_sqe();
    let reply = run(admin, "Set Features (Number of Queues)", sqe, DataDirection::None, Vec::new(), timeout)?;
    let got = NumberOfQueues::from_dw0(reply.result.map(|c| c.dw0).unwrap_or_default());
    let granted = got.submission_queues().min(got.completion_queues()).min(want);
    Ok(u16::try_from(granted).unwrap_or(count))
}

fn wait_csts(
    admin: &Submitter,
    what: &str,
    within: Duration,
    timeout: Duration,
    done: impl Fn(&ControllerStatus) -> bool,
) -> Result<(), HostError> {
    let deadline = Instant::now() + within;
    loop {
        let v = u32::try_from(property_get(admin, Property::Csts, timeout)? & 0xFFFF_FFFF).unwrap_or(0);
        let csts = ControllerStatus::from_u32(v).map_err(|e| HostError::wire("CSTS", e))?;
        if csts.cfs {
            return Err(HostError::Controller(format!("CSTS.CFS set while waiting for {what}")));
        }
        if done(&csts) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout { what: format!("CSTS {what} (last {csts:?})"), after: within });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Bring a whole association up (see the module docs); `io_queues` overrides the I/O queues asked for.
fn associate(
    addr: SocketAddr,
    subnqn: &str,
    options: &ConnectOptions,
    io_queues: u16,
) -> Result<Association, HostError> {
    let t = options.io_timeout;
    let kato_ms = u32::try_from(options.keep_alive_tmo.as_millis()).unwrap_or(u32::MAX);
    let admin = open_queue(addr, options, 0, ADMIN_QUEUE_SIZE - 1, 0, CNTLID_DYNAMIC)?;
    let a = admin.submitter();
    let cntlid = fabrics_connect(&a, options, subnqn, ADMIN_QUEUE_SIZE - 1, CNTLID_DYNAMIC, kato_ms)?;

    let cap = Capabilities::from_u64(property_get(&a, Property::Cap, t)?);
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
    property_set(&a, Property::Cc, u64::from(cc.to_u32()), t)?;
    let ready_within = Duration::from_millis(u64::from(cap.timeout_ms().max(500)));
    wait_csts(&a, "RDY after CC.EN", ready_within, t, |c| c.rdy)?;

    let sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
    let reply = run(&a, "Identify Controller", sqe, DataDirection::ControllerToHost, vec![0; IDENTIFY_DATA_SIZE], t)?;
    let id = IdentifyController::parse(&reply.data).map_err(|e| HostError::wire("Identify Controller", e))?;
    let page = 1u64 << (12 + u32::from(cap.mpsmin));
    let max_transfer = (id.mdts != 0).then(|| u32::try_from(page << u32::from(id.mdts).min(20)).unwrap_or(u32::MAX));
    let in_capsule_data = id.ioccsz.saturating_mul(16).saturating_sub(64);
    let mut info = ControllerInfo {
        cntlid,
        serial: id.sn.trim().to_string(),
        model: id.mn.trim().to_string(),
        firmware: id.fr.trim().to_string(),
        subnqn: id.subnqn.to_string(),
        max_transfer,
        in_capsule_data,
        nn: id.nn,
        oncs: id.oncs,
        vwc: id.vwc_present(),
        kas_ms: u32::from(id.kas) * 100,
        traffic_based_keep_alive: id.ctratt & IdentifyController::CTRATT_TBKAS != 0,
        io_queues: 0,
        cap,
    };

    let mut io = Vec::new();
    if io_queues > 0 {
        let granted = number_of_queues(&a, io_queues, t)?;
        // Depth: queue_size entries, never more than MQES allows; SQSIZE is 0's based.
        let entries = u32::from(options.queue_size).clamp(2, cap.max_queue_entries());
        let sqsize = u16::try_from(entries - 1).unwrap_or(u16::MAX);
        for qid in 1..=granted {
            let q = open_queue(addr, options, qid, sqsize.min(MAX_QUEUE_DEPTH), in_capsule_data, cntlid)?;
            fabrics_connect(&q.submitter(), options, subnqn, sqsize, cntlid, 0)?;
            io.push(q);
        }
        info.io_queues = granted;
    }
    // A discovery controller reports its log changes differently; the host does not wait for its events.
    let aers = if subnqn == DISCOVERY_NQN { 0 } else { (usize::from(id.aerl) + 1).min(MAX_AERS) };
    Ok(Association { info, admin, io, aers })
}

impl Inner {
    /// I/O commands submitted and completed on every I/O queue so far, bare ones included (the Keep Alive's
    /// traffic check).
    fn io_counts(&self) -> (u64, u64) {
        self.io.iter().map(|q| q.stats()).fold(self.bare_io.counts(), |(s, c), m| (s + m.submitted, c + m.completed))
    }

    fn admin_command(
        &self,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Reply, HostError> {
        run(&self.admin.submitter(), command, sqe, direction, data, self.options.io_timeout)
    }

    /// Identify CNS 02h, then CNS 00h and 03h for each active namespace; replaces the namespace table.
    /// Returns the namespaces and whether the table changed.
    fn scan_namespaces(&self) -> Result<(Vec<NamespaceInfo>, bool), HostError> {
        let c2h = DataDirection::ControllerToHost;
        let list = self.admin_command(
            "Identify (Active Namespace ID list)",
            Identify::new(cns::ACTIVE_NAMESPACE_ID_LIST, 0).to_sqe(),
            c2h,
            vec![0; IDENTIFY_DATA_SIZE],
        )?;
        let nsids: Vec<u32> = ActiveNamespaceIdList::parse(&list.data)
            .map_err(|e| HostError::wire("Active Namespace ID list", e))?
            .iter()
            .collect();
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let sqe = Identify::new(cns::NAMESPACE, nsid).to_sqe();
            let r = self.admin_command("Identify Namespace", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])?;
            let ns = IdentifyNamespace::parse(&r.data).map_err(|e| HostError::wire("Identify Namespace", e))?;
            let block_size = ns.lba_data_size().map_err(|e| HostError::wire("Identify Namespace LBA format", e))?;
            let sqe = Identify::new(cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, nsid).to_sqe();
            // Optional before NVMe 1.3: a controller that refuses it simply reports no UUID.
            let uuid = self
                .admin_command("Identify (Namespace Identification Descriptors)", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])
                .ok()
                .and_then(|r| {
                    NamespaceIdentificationDescriptor::parse_list(&r.data).ok()?.iter().find_map(|d| match d {
                        NamespaceIdentificationDescriptor::Uuid(u) => Some(u),
                        _ => None,
                    })
                });
            out.push(NamespaceInfo { nsid, block_size, blocks: ns.nsze, nguid: ns.nguid, uuid });
        }
        let new: HashMap<u32, NamespaceInfo> = out.iter().map(|n| (n.nsid, *n)).collect();
        let mut table = self.namespaces.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *table != new;
        *table = new;
        Ok((out, changed))
    }

    fn bump_namespace_generation(&self) {
        let mut g = self.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner);
        *g += 1;
        self.namespace_changed.notify_all();
    }

    /// Put `count` Asynchronous Event Requests on the admin queue, completing to the supervisor.
    fn arm_aers(&self, count: usize) {
        let inbox: Arc<dyn CompletionSink> = self.supervision.clone();
        for _ in 0..count {
            let request = Request {
                sqe: AsyncEventRequest.to_sqe(),
                data: Vec::new(),
                direction: DataDirection::None,
                context: (),
            };
            if let Err(e) = self.admin.submit_unheld_to_sink(request, &inbox, 0) {
                tracing::warn!(error = %e, "submitting an Asynchronous Event Request");
            }
        }
    }

    /// An Asynchronous Event Request completed: handle the event and re-arm. Failed requests (the
    /// association went away) are re-armed by the reconnect instead.
    fn on_event(&self, reply: &Reply) {
        let cqe = match &reply.result {
            Ok(cqe) if cqe.status.is_success() => cqe,
            Ok(cqe) => return tracing::debug!(status = %cqe.status, "Asynchronous Event Request ended"),
            Err(e) => return tracing::debug!(error = %e, "Asynchronous Event Request ended"),
        };
        match AsyncEvent::from_dw0(cqe.dw0) {
            Ok(event) if event == AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED => {
                if let Err(e) = self.namespace_change() {
                    tracing::warn!(error = %e, "handling a Namespace Attribute Changed event");
                }
            }
            Ok(event) => tracing::info!(?event, "asynchronous event"),
            Err(e) => tracing::warn!(error = %e, dw0 = cqe.dw0, "unknown asynchronous event"),
        }
        self.arm_aers(1);
    }

    /// Read the Changed Namespace List (clearing the event), rescan and tell the waiters.
    fn namespace_change(&self) -> Result<(), HostError> {
        let size = CHANGED_NAMESPACE_LIST_SIZE as u64;
        let sqe = GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, u32::MAX, size)
            .map_err(|e| HostError::wire("Get Log Page (Changed Namespace List)", e))?
            .to_sqe();
        let log = self.admin_command(
            "Get Log Page (Changed Namespace List)",
            sqe,
            DataDirection::ControllerToHost,
            vec![0; CHANGED_NAMESPACE_LIST_SIZE],
        )?;
        let changed =
            ChangedNamespaceList::parse(&log.data).map_err(|e| HostError::wire("Changed Namespace List", e))?;
        tracing::info!(?changed, "namespace attributes changed; rescanning");
        self.scan_namespaces()?;
        self.bump_namespace_generation();
        Ok(())
    }

    fn queues(&self) -> impl Iterator<Item = &QueueHandle> {
        std::iter::once(&self.admin).chain(&self.io)
    }

    /// The first failure among the queues of the current association.
    fn failure(&self) -> Option<HostError> {
        self.queues().find_map(QueueHandle::failure)
    }

    /// One reconnect attempt: a new association with as many I/O queues as before, put in place.
    fn reconnect(&self) -> Result<(), HostError> {
        let want = u16::try_from(self.io.len()).unwrap_or(u16::MAX);
        let assoc = associate(self.addr, &self.subnqn, &self.options, want)?;
        if assoc.io.len() != self.io.len() {
            return Err(HostError::Controller(format!(
                "the new association has {} I/O queues, the controller had {}",
                assoc.io.len(),
                self.io.len()
            )));
        }
        let sup = &self.supervision;
        let epoch = sup.lock().epoch + 1;
        self.admin.replace(assoc.admin, epoch);
        for (q, new) in self.io.iter().zip(assoc.io) {
            q.replace(new, epoch);
        }
        self.cntlid.store(assoc.info.cntlid, Ordering::Relaxed);
        self.traffic_based_keep_alive.store(assoc.info.traffic_based_keep_alive, Ordering::Relaxed);
        {
            let mut status = sup.lock();
            status.epoch = epoch;
            sup.reconnects.store(epoch, Ordering::Relaxed);
            // Unless the controller was deleted meanwhile (that state must stand: the deleter waits for us).
            if matches!(status.state, ControllerState::Reconnecting { .. }) {
                status.lost_at = None;
                sup.set(&mut status, ControllerState::Live);
            }
        }
        tracing::info!(addr = %self.addr, subnqn = self.subnqn, cntlid = assoc.info.cntlid, epoch, "reconnected");
        if self.subnqn != DISCOVERY_NQN {
            match self.scan_namespaces() {
                Ok((_, true)) => self.bump_namespace_generation(),
                Ok((_, false)) => {}
                Err(e) => tracing::warn!(error = %e, "namespace scan after reconnect"),
            }
        }
        self.arm_aers(self.aers);
        Ok(())
    }
}

/// The supervisor thread (see the module docs): runs until the controller is deleted or fails. It sleeps until a
/// [`Wake`] or its next deadline: the next Keep Alive while live; the next attempt, the `fast_io_fail_tmo` (to
/// wake awaited held commands) or the `ctrl_loss_tmo` while reconnecting.
fn supervise(inner: &Inner, wakes: &Receiver<Wake>) {
    let sup = &inner.supervision;
    let o = &inner.options;
    let keep_alive = (!o.keep_alive_tmo.is_zero()).then_some(o.keep_alive_tmo);
    // A Keep Alive every KATO/2. To a controller with Traffic Based Keep Alive (any command it receives restarts its
    // timer) the supervisor looks every KATO/4, as Linux does, and sends none if since its last look I/O commands
    // were submitted (so the controller's timer restarted since then) and some completed (it is alive): the
    // next Keep Alive then goes out at most two looks, KATO/2, after the last I/O, as without TBKAS.
    let tbkas = || inner.traffic_based_keep_alive.load(Ordering::Relaxed);
    let interval = |kato: Duration| if tbkas() { kato / 4 } else { kato / 2 };
    let mut next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
    // I/O commands submitted and completed as of the last look.
    let mut io_seen = inner.io_counts();
    let mut next_attempt: Option<Instant> = None;
    // Whether the held commands were woken at this loss's fast-fail deadline.
    let mut fast_failed = false;
    let mut wake_at = next_keep_alive;
    loop {
        let wake = match wake_at {
            Some(t) => wakes.recv_timeout(t.saturating_duration_since(Instant::now())).ok(),
            // The sender lives in the supervision this thread holds: recv only returns with a wake.
            None => wakes.recv().ok(),
        };
        if let Some(Wake::Event(completed)) = wake {
            if let Some(reply) = completed.settle() {
                inner.on_event(&reply);
            }
        }
        let (state, epoch, lost_at) = {
            let s = sup.lock();
            (s.state, s.epoch, s.lost_at)
        };
        match state {
            ControllerState::Deleting | ControllerState::Failed => return,
            ControllerState::Live => {
                if let Some(e) = inner.failure() {
                    // Wakes this loop again (a Look), now Reconnecting.
                    sup.lose(&mut sup.lock(), epoch, &e);
                } else if next_keep_alive.is_some_and(|t| Instant::now() >= t) {
                    next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
                    let counts = inner.io_counts();
                    let traffic = tbkas() && counts.0 != io_seen.0 && counts.1 != io_seen.1;
                    io_seen = counts;
                    if !traffic {
                        let sqe = KeepAlive.to_sqe();
                        let sub = inner.admin.submitter();
                        if let Err(e) = run(&sub, "Keep Alive", sqe, DataDirection::None, Vec::new(), o.keep_alive_tmo)
                        {
                            sup.lose(&mut sup.lock(), epoch, &e);
                        }
                    }
                }
                wake_at = next_keep_alive;
            }
            ControllerState::Reconnecting { attempts } => {
                let lost_at = lost_at.unwrap_or_else(Instant::now);
                let give_up = o.ctrl_loss_tmo.map(|t| lost_at + t);
                // Held commands fail from the fast-fail deadline on; an awaited one learns it when woken.
                let fast_fail = o.fast_io_fail_tmo.map(|t| lost_at + t).filter(|_| !fast_failed);
                if fast_fail.is_some_and(|t| Instant::now() >= t) {
                    sup.wake_held(&mut sup.lock());
                    fast_failed = true;
                }
                let fast_fail = fast_fail.filter(|_| !fast_failed);
                let deadline = |attempt| earliest(earliest(attempt, give_up), fast_fail);
                let Some(at) = next_attempt else {
                    // Just lost: drop every connection now (outstanding commands complete and are held).
                    for q in inner.queues() {
                        q.abort();
                    }
                    next_attempt = Some(lost_at + o.reconnect_delay);
                    wake_at = deadline(next_attempt);
                    continue;
                };
                let now = Instant::now();
                if give_up.is_some_and(|t| now >= t) {
                    tracing::error!(addr = %inner.addr, subnqn = inner.subnqn, attempts, "controller lost: giving up");
                    let mut s = sup.lock();
                    if matches!(s.state, ControllerState::Reconnecting { .. }) {
                        sup.set(&mut s, ControllerState::Failed);
                    }
                    return;
                }
                if now < at {
                    wake_at = deadline(Some(at));
                    continue;
                }
                match inner.reconnect() {
                    Ok(()) => {
                        next_attempt = None;
                        fast_failed = false;
                        next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
                        wake_at = next_keep_alive;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, attempt = attempts + 1, "reconnect failed");
                        next_attempt = Some(Instant::now() + o.reconnect_delay);
                        wake_at = deadline(next_attempt);
                        let mut s = sup.lock();
                        if s.state == (ControllerState::Reconnecting { attempts }) {
                            sup.set(&mut s, ControllerState::Reconnecting { attempts: attempts + 1 });
                        }
                    }
                }
            }
        }
    }
}

/// The replies of a transfer's commands in order, or the first error (every command is waited for either way).
fn all_replies(results: impl Iterator<Item = Result<Reply, HostError>>) -> Result<Vec<Reply>, HostError> {
    let mut replies = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(r) => replies.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(replies), Err)
}

/// The bytes of `bufs` one after the other, cut into buffers of `chunk` bytes (the last may be shorter).
fn gather(bufs: &[IoSlice<'_>], chunk: usize) -> Vec<Vec<u8>> {
    let len: usize = bufs.iter().map(|b| b.len()).sum();
    let mut pieces = Vec::with_capacity(len.div_ceil(chunk));
    let mut piece = Vec::with_capacity(chunk.min(len));
    for buf in bufs {
        let mut src: &[u8] = buf;
        while !src.is_empty() {
            let n = (chunk - piece.len()).min(src.len());
            piece.extend_from_slice(&src[..n]);
            src = &src[n..];
            if piece.len() == chunk {
                let rest = len - (pieces.len() + 1) * chunk;
                pieces.push(std::mem::replace(&mut piece, Vec::with_capacity(chunk.min(rest))));
            }
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// Copy the replies' data into `bufs`, one after the other.
fn scatter(replies: Vec<Reply>, bufs: &mut [IoSliceMut<'_>]) {
    let mut dst = bufs.iter_mut().map(|b| &mut **b);
    let mut to: &mut [u8] = &mut [];
    for reply in replies {
        let mut src = &reply.data[..];
        while !src.is_empty() {
            if to.is_empty() {
                let Some(next) = dst.next() else { return };
                to = next;
                continue;
            }
            let n = to.len().min(src.len());
            to[..n].copy_from_slice(&src[..n]);
            to = &mut std::mem::take(&mut to)[n..];
            src = &src[n..];
        }
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Controller {
    /// Connect to subsystem `subnqn` at `addr` over [`ConnectOptions::transport`] and bring the association
    /// up (see the module docs). A failure here is returned as is: reconnecting starts only once an
    /// association was up.
    pub fn connect(addr: SocketAddr, subnqn: &str, options: ConnectOptions) -> Result<Self, HostError> {
        let assoc = associate(addr, subnqn, &options, options.nr_io_queues)?;
        let (wake, wakes) = channel();
        let supervision = Arc::new(Supervision {
            status: Mutex::new(Status { state: ControllerState::Live, epoch: 0, lost_at: None, held: Vec::new() }),
            changed: Condvar::new(),
            wake,
            word: AtomicU64::new(ControllerState::Live.to_word()),
            reconnects: AtomicU64::new(0),
            fast_io_fail_tmo: options.fast_io_fail_tmo,
        });
        let recovery: Arc<dyn Recovery> = supervision.clone();
        let inner = Arc::new(Inner {
            addr,
            subnqn: subnqn.to_owned(),
            options,
            // Recovering like the I/O queues, for `Controller::admin_command`; the supervisor's own commands
            // (keep-alive, event handling, the rescan) go to the current connection unheld, since holding them
            // would wait for the reconnect the supervisor itself runs.
            admin: assoc.admin.recovering(0, Arc::clone(&recovery)),
            io: assoc.io.into_iter().map(|q| q.recovering(0, Arc::clone(&recovery))).collect(),
            aers: assoc.aers,
            cntlid: AtomicU16::new(assoc.info.cntlid),
            traffic_based_keep_alive: AtomicBool::new(assoc.info.traffic_based_keep_alive),
            bare_io: Arc::default(),
            namespaces: RwLock::new(HashMap::new()),
            namespace_generation: Mutex::new(0),
            namespace_changed: Condvar::new(),
            supervision,
        });
        // A discovery controller has no namespaces (and refuses the Identify CNS 02h that lists them).
        if subnqn != DISCOVERY_NQN {
            inner.scan_namespaces()?;
        }
        inner.arm_aers(inner.aers);
        let thread_inner = Arc::clone(&inner);
        let supervisor = std::thread::Builder::new()
            .name("nvmf-supervisor".into())
            .spawn(move || supervise(&thread_inner, &wakes))
            .map_err(|e| {
                // The event requests would keep a graceful close waiting forever.
                inner.admin.abort();
                HostError::io(0, "spawning the supervisor thread", &e)
            })?;
        let info = assoc.info;
        let transport = inner.options.transport.name();
        tracing::info!(%addr, transport, subnqn, cntlid = info.cntlid, io_queues = info.io_queues, "connected");
        Ok(Controller { inner, info, next_io: AtomicUsize::new(0), supervisor: Some(supervisor) })
    }

    /// What Identify Controller said, plus the granted queue count, as of the first association (a
    /// reconnect keeps the queue count; the controller may give it another CNTLID).
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }

    /// The controller ID of the current association (a reconnect may get another one; lock-free).
    pub fn cntlid(&self) -> u16 {
        self.inner.cntlid.load(Ordering::Relaxed)
    }

    /// Where the association stands (lock-free: for metrics and health checks).
    pub fn state(&self) -> ControllerState {
        ControllerState::from_word(self.inner.supervision.word.load(Ordering::Acquire))
    }

    /// Associations re-established after a loss since [`Controller::connect`] (lock-free).
    pub fn reconnects(&self) -> u64 {
        self.inner.supervision.reconnects.load(Ordering::Relaxed)
    }

    /// Bumped each time the namespace table changes under the caller (a Namespace Attribute Changed event,
    /// or a rescan after a reconnect that found other namespaces).
    pub fn namespace_generation(&self) -> u64 {
        *self.inner.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait up to `timeout` for [`Controller::namespace_generation`] to move past `seen`; returns the
    /// generation then (still `seen` on timeout).
    pub fn wait_namespace_change(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.inner.namespace_generation.lock().unwrap_or_else(PoisonError::into_inner);
        let (g, _) = self
            .inner
            .namespace_changed
            .wait_timeout_while(g, timeout, |g| *g == seen)
            .unwrap_or_else(PoisonError::into_inner);
        *g
    }

    /// The address connected to.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The transport of every queue.
    pub fn transport(&self) -> Transport {
        self.inner.options.transport
    }

    /// The admin queue.
    pub fn admin(&self) -> Result<&QueueHandle, HostError> {
        Ok(&self.inner.admin)
    }

    /// The I/O queues (`io_queues()[0]` is QID 1).
    pub fn io_queues(&self) -> &[QueueHandle] {
        &self.inner.io
    }

    /// Run an admin command and wait; `data` is the buffer (sent or filled per `direction`). Held while the
    /// controller reconnects, like I/O: submitted to the new association once it is up, and resubmitted there
    /// if the lost connection had it in flight (so a command that is not safe to repeat may run twice); it
    /// fails with [`HostError::FastIoFail`] / [`HostError::ControllerLost`] as I/O does.
    pub fn admin_command(
        &self,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Reply, HostError> {
        let pending = self.inner.admin.submit(Request { sqe, data, direction, context: () })?;
        finish(command, pending, self.inner.options.io_timeout)
    }

    /// Fabrics Connect of a fresh bare I/O queue (`TcpQueue` or `RdmaQueue`, owned by the caller) to this
    /// association, SQSIZE `sqsize`: polls it on the caller's thread until the response arrives, bounded by the
    /// connect timeout. For callers that drive bare I/O queues themselves (perf, tests).
    pub fn fabrics_connect<T: Default, Q: BareQueue<T>>(&self, queue: &mut Q, sqsize: u16) -> Result<(), HostError> {
        let (qid, o) = (queue.qid(), self.options());
        let request = connect_request(qid, o, self.subnqn(), sqsize, self.cntlid(), 0, T::default())?;
        let c = execute(queue, request, o.connect_timeout)?;
        connect_response(qid, &c.result?).map(|_| ())
    }

    /// Set Features Number of Queues for `count` I/O queue pairs; returns how many the controller grants. For
    /// callers that connect bare I/O queues themselves (perf, tests): the controller's own queues stay as they
    /// are.
    pub fn request_io_queues(&self, count: u16) -> Result<u16, HostError> {
        number_of_queues(&self.inner.admin.submitter(), count, self.inner.options.io_timeout)
    }

    /// Where a caller driving bare I/O queues of this association reports their commands (see [`IoTraffic`]).
    pub fn bare_io_traffic(&self) -> Arc<IoTraffic> {
        Arc::clone(&self.inner.bare_io)
    }

    /// Property Get of `p` on the admin queue.
    pub fn property_get(&self, p: Property) -> Result<u64, HostError> {
        property_get(&self.inner.admin.submitter(), p, self.inner.options.io_timeout)
    }

    /// The options the controller was connected with.
    pub fn options(&self) -> &ConnectOptions {
        &self.inner.options
    }

    /// The subsystem NQN connected to.
    pub fn subnqn(&self) -> &str {
        &self.inner.subnqn
    }

    /// The active namespaces (Identify CNS 02h, then CNS 00h and 03h for each); refreshes the namespace
    /// table the I/O wrappers use.
    pub fn namespaces(&self) -> Result<Vec<NamespaceInfo>, HostError> {
        self.inner.scan_namespaces().map(|(list, _)| list)
    }

    /// The namespaces as of the last scan (no command sent).
    pub fn known_namespaces(&self) -> Vec<NamespaceInfo> {
        let mut list: Vec<NamespaceInfo> =
            self.inner.namespaces.read().unwrap_or_else(PoisonError::into_inner).values().copied().collect();
        list.sort_by_key(|n| n.nsid);
        list
    }

    fn namespace(&self, nsid: u32) -> Result<NamespaceInfo, HostError> {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&nsid)
            .copied()
            .ok_or_else(|| HostError::InvalidRequest(format!("namespace {nsid} is not active on this controller")))
    }

    /// The next I/O queue, round-robin.
    fn io_queue(&self) -> Result<&QueueHandle, HostError> {
        let io = &self.inner.io;
        if io.is_empty() {
            return Err(HostError::InvalidRequest("the association has no I/O queues".into()));
        }
        Ok(&io[self.next_io.fetch_add(1, Ordering::Relaxed) % io.len()])
    }

    /// Submit an I/O command on the next I/O queue (owned buffer, no copy); wait on the returned [`Pending`].
    /// While the controller reconnects this blocks until the new association is up (or fails with
    /// [`HostError::FastIoFail`] / [`HostError::ControllerLost`]), and a command the lost connection had
    /// in flight is resubmitted by [`Pending::wait`] with the same buffer.
    pub fn submit_io(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.io_queue()?.submit(request)
    }

    /// [`Controller::submit_io`] for async callers: never blocks while the controller reconnects (the
    /// [`Pending`] holds the command, and `.await`ing it waits for the new association), only briefly while
    /// the queue's request channel is full. Awaiting a [`Pending`] has no timeout of its own: the queue's
    /// command timeout fails a command the controller never answers.
    pub fn submit_io_async(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.io_queue()?.submit_async(request)
    }

    /// Blocks per command: MDTS and the 16-bit NLB, whichever is smaller.
    fn max_blocks(&self, block_size: u32) -> usize {
        let by_mdts =
            self.info.max_transfer.map_or(usize::MAX, |m| usize::try_from(m / block_size.max(1)).unwrap_or(1));
        by_mdts.clamp(1, 65536)
    }

    /// The bytes of one command (MDTS) on namespace `nsid` for a transfer of `len` bytes at `slba`, and the
    /// block size, once the transfer is checked to be whole blocks inside the namespace.
    fn transfer(&self, nsid: u32, slba: u64, len: usize) -> Result<(usize, usize), HostError> {
        let ns = self.namespace(nsid)?;
        let bs = usize::try_from(ns.block_size).unwrap_or(usize::MAX);
        if len == 0 || len % bs != 0 {
            return Err(HostError::InvalidRequest(format!("{len} bytes is not a whole number of {bs}-byte blocks")));
        }
        let blocks = (len / bs) as u64;
        if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return Err(HostError::InvalidRequest(format!(
                "LBAs {slba}+{blocks} beyond namespace {} ({} blocks)",
                ns.nsid, ns.blocks
            )));
        }
        Ok((self.max_blocks(ns.block_size) * bs, bs))
    }

    /// The Reads of `len` bytes from `slba`, one per `chunk` bytes, each with its own buffer.
    fn read_requests(&self, nsid: u32, slba: u64, len: usize) -> Result<Vec<Request<()>>, HostError> {
        let (chunk, bs) = self.transfer(nsid, slba, len)?;
        let requests = (0..len).step_by(chunk).map(|at| {
            let n = chunk.min(len - at);
            let nlb = u16::try_from(n / bs - 1).unwrap_or(u16::MAX);
            let sqe = Read { nsid, slba: slba + (at / bs) as u64, nlb, ..Read::default() }.to_sqe();
            Request { sqe, data: vec![0; n], direction: DataDirection::ControllerToHost, context: () }
        });
        Ok(requests.collect())
    }

    /// The Writes of the bytes of `bufs` (gathered) at `slba`, one per `chunk` bytes.
    fn write_requests(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<Vec<Request<()>>, HostError> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let (chunk, bs) = self.transfer(nsid, slba, len)?;
        let requests = gather(bufs, chunk).into_iter().scan(slba, |at, data| {
            let blocks = data.len() / bs;
            let nlb = u16::try_from(blocks - 1).unwrap_or(u16::MAX);
            let sqe = Write { nsid, slba: *at, nlb, ..Write::default() }.to_sqe();
            *at += blocks as u64;
            Some(Request { sqe, data, direction: DataDirection::HostToController, context: () })
        });
        Ok(requests.collect())
    }

    /// The Flush of namespace `nsid`.
    fn flush_requests(nsid: u32) -> Vec<Request<()>> {
        let sqe = Flush { nsid }.to_sqe();
        vec![Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () }]
    }

    /// The Write Zeroes over `blocks` blocks from `slba`, at most 65536 blocks each.
    fn write_zeroes_requests(&self, nsid: u32, slba: u64, blocks: u64) -> Result<Vec<Request<()>>, HostError> {
        let ns = self.namespace(nsid)?;
        if blocks == 0 || slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return Err(HostError::InvalidRequest(format!("Write Zeroes of LBAs {slba}+{blocks} on namespace {nsid}")));
        }
        let requests = (slba..slba + blocks).step_by(65536).map(|at| {
            let nlb = u16::try_from((slba + blocks - at).min(65536) - 1).unwrap_or(u16::MAX);
            let sqe = WriteZeroes { nsid, slba: at, nlb, ..WriteZeroes::default() }.to_sqe();
            Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () }
        });
        Ok(requests.collect())
    }

    /// The Dataset Management (AD) commands deallocating the `(slba, blocks)` ranges, 256 ranges each.
    fn deallocate_requests(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<Vec<Request<()>>, HostError> {
        self.namespace(nsid)?;
        let requests = ranges.chunks(DSM_MAX_RANGES).map(|group| {
            let nr = u8::try_from(group.len() - 1).unwrap_or(u8::MAX);
            let sqe = DatasetManagement { nsid, nr, ad: true, ..DatasetManagement::default() }.to_sqe();
            let data =
                group.iter().flat_map(|&(slba, length)| DsmRange { cattr: 0, length, slba }.to_bytes()).collect();
            Request { sqe, data, direction: DataDirection::HostToController, context: () }
        });
        Ok(requests.collect())
    }

    /// Submit every request at once (round-robin over the I/O queues) and wait for all, each wait bounded by
    /// the I/O timeout: the replies in order, or the first error.
    fn run_io(&self, command: &'static str, requests: Vec<Request<()>>) -> Result<Vec<Reply>, HostError> {
        let pending = requests.into_iter().map(|r| self.submit_io(r)).collect::<Result<Vec<_>, _>>()?;
        let t = self.inner.options.io_timeout;
        all_replies(pending.into_iter().map(|p| finish(command, p, t)))
    }

    /// [`Controller::run_io`] for async callers ([`Controller::submit_io_async`]).
    async fn run_io_async(&self, command: &'static str, requests: Vec<Request<()>>) -> Result<Vec<Reply>, HostError> {
        let pending = requests.into_iter().map(|r| self.submit_io_async(r)).collect::<Result<Vec<_>, _>>()?;
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            results.push(p.await.and_then(|reply| check(command, reply)));
        }
        all_replies(results.into_iter())
    }

    /// Read `buf.len()` bytes (whole blocks) from `slba` of namespace `nsid`.
    pub fn read(&self, nsid: u32, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.read_vectored(nsid, slba, &mut [IoSliceMut::new(buf)])
    }

    /// Read into the buffers of `bufs` in turn (scatter; their lengths add up to whole blocks) from `slba`.
    pub fn read_vectored(&self, nsid: u32, slba: u64, bufs: &mut [IoSliceMut<'_>]) -> Result<(), HostError> {
        let requests = self.read_requests(nsid, slba, bufs.iter().map(|b| b.len()).sum())?;
        scatter(self.run_io("Read", requests)?, bufs);
        Ok(())
    }

    /// [`Controller::read_vectored`], async: never blocks while the controller reconnects (see
    /// [`Controller::submit_io_async`]).
    pub async fn read_async(&self, nsid: u32, slba: u64, bufs: &mut [IoSliceMut<'_>]) -> Result<(), HostError> {
        let requests = self.read_requests(nsid, slba, bufs.iter().map(|b| b.len()).sum())?;
        scatter(self.run_io_async("Read", requests).await?, bufs);
        Ok(())
    }

    /// Write `data` (whole blocks) at `slba` of namespace `nsid`.
    pub fn write(&self, nsid: u32, slba: u64, data: &[u8]) -> Result<(), HostError> {
        self.write_vectored(nsid, slba, &[IoSlice::new(data)])
    }

    /// Write the buffers of `bufs` one after the other (gather; their lengths add up to whole blocks) at `slba`.
    pub fn write_vectored(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<(), HostError> {
        self.run_io("Write", self.write_requests(nsid, slba, bufs)?).map(|_| ())
    }

    /// [`Controller::write_vectored`], async.
    pub async fn write_async(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<(), HostError> {
        self.run_io_async("Write", self.write_requests(nsid, slba, bufs)?).await.map(|_| ())
    }

    /// Flush namespace `nsid`'s volatile write cache.
    pub fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.run_io("Flush", Self::flush_requests(nsid)).map(|_| ())
    }

    /// [`Controller::flush`], async.
    pub async fn flush_async(&self, nsid: u32) -> Result<(), HostError> {
        self.run_io_async("Flush", Self::flush_requests(nsid)).await.map(|_| ())
    }

    /// Write Zeroes over `blocks` blocks from `slba` (split into commands of at most 65536 blocks).
    pub fn write_zeroes(&self, nsid: u32, slba: u64, blocks: u64) -> Result<(), HostError> {
        self.run_io("Write Zeroes", self.write_zeroes_requests(nsid, slba, blocks)?).map(|_| ())
    }

    /// [`Controller::write_zeroes`], async.
    pub async fn write_zeroes_async(&self, nsid: u32, slba: u64, blocks: u64) -> Result<(), HostError> {
        self.run_io_async("Write Zeroes", self.write_zeroes_requests(nsid, slba, blocks)?).await.map(|_| ())
    }

    /// Deallocate (Dataset Management, AD) the `(slba, blocks)` ranges; up to 256 ranges per command.
    pub fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.run_io("Dataset Management", self.deallocate_requests(nsid, ranges)?).map(|_| ())
    }

    /// [`Controller::deallocate`], async.
    pub async fn deallocate_async(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.run_io_async("Dataset Management", self.deallocate_requests(nsid, ranges)?).await.map(|_| ())
    }

    /// Shut down cleanly: stop the supervisor, close the I/O queues, CC.SHN normal and wait for CSTS.SHST
    /// complete (bounded by CAP.TO, at least 5 s), then close the admin queue. Held I/O fails. A controller
    /// that is not live has no association to shut down: its queues are just closed.
    pub fn disconnect(mut self) -> Result<(), HostError> {
        let was = self.stop_supervisor();
        for q in &self.inner.io {
            q.shutdown();
        }
        if was != ControllerState::Live {
            self.inner.admin.abort();
            return Ok(());
        }
        let a = self.inner.admin.submitter();
        let t = self.inner.options.io_timeout;
        let cc = ControllerConfiguration {
            en: true,
            iosqes: 6,
            iocqes: 4,
            shn: ShutdownNotification::Normal,
            ..ControllerConfiguration::default()
        };
        let result = property_set(&a, Property::Cc, u64::from(cc.to_u32()), t).and_then(|()| {
            let within = Duration::from_millis(u64::from(self.info.cap.timeout_ms().max(5000)));
            wait_csts(&a, "SHST complete after CC.SHN", within, t, |c| c.shst == ShutdownStatus::Complete)
        });
        // Abort rather than close: the Asynchronous Event Requests stay outstanding until then.
        self.inner.admin.abort();
        result
    }

    /// Enter Deleting (held I/O fails) and join the supervisor; returns the state before.
    fn stop_supervisor(&mut self) -> ControllerState {
        let sup = &self.inner.supervision;
        let was = {
            let mut status = sup.lock();
            let was = status.state;
            sup.set(&mut status, ControllerState::Deleting);
            was
        };
        if let Some(t) = self.supervisor.take() {
            let _ = t.join();
        }
        was
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop_supervisor();
        self.inner.admin.abort();
    }
}
