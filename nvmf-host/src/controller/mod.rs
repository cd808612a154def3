//! [`Controller`]: a host's association with an NVMe-oF controller over NVMe/TCP or NVMe/RDMA
//! ([`ConnectOptions::transport`]), kept up across connection loss.
//!
//! [`Controller::connect`] brings the association up the way the Linux host does: admin queue (TCP: ICReq; RDMA:
//! RDMA CM connect with HSQSIZE 31; then Fabrics Connect with CNTLID 0xFFFF and KATO), Property Get CAP, Property
//! Set CC.EN and a wait for CSTS.RDY bounded by CAP.TO, Identify Controller, Set Features Number of Queues, then
//! one connection (TCP socket or RDMA queue pair) and Fabrics Connect per granted I/O queue, the namespace scan,
//! and Asynchronous Event Requests. Everything above the queues is the same code for both transports: each queue is
//! a [`QueueHandle`] whose I/O thread drives a `TcpQueue` or an `RdmaQueue` (writes up to the controller's IOCCSZ
//! go in the capsule on either).
//!
//! Reconnect (nvme-cli's `--reconnect-delay`, `--ctrl-loss-tmo`, `--fast-io-fail-tmo`): when any queue of the
//! association fails (transport error, command timeout) or a Keep Alive fails, the controller becomes
//! [`ControllerState::Reconnecting`]: every queue's connection is aborted and every
//! [`ConnectOptions::reconnect_delay`] a whole new association is tried (same host NQN and ID, same number of I/O
//! queues) until one comes up — the queues' connections are then replaced in place, so the [`QueueHandle`]s callers
//! hold stay valid — or [`ConnectOptions::ctrl_loss_tmo`] has passed since the loss ([`ControllerState::Failed`]).
//! Meanwhile I/O is held: new I/O submissions wait, and I/O commands the lost connection had in flight are
//! resubmitted on the new association (reads, writes, flush, write zeroes and DSM are safe to repeat at the block
//! level), through the [`crate::queue::handle::Pending`] the caller waits on; see [`crate::queue::handle`] for how
//! the owned buffers are kept without a copy. After `fast_io_fail_tmo` held and new I/O fail with
//! [`HostError::FastIoFail`] while attempts go on; after `ctrl_loss_tmo` with [`HostError::ControllerLost`]. Admin
//! commands of [`Controller::admin_command`] are held the same way (the supervisor's own are not: it runs the
//! reconnect they would wait for).
//!
//! Asynchronous events: the host enables the Namespace Attribute and ANA Change notices the controller offers and
//! keeps AERL + 1 Asynchronous Event Requests outstanding (at most 8); a Namespace Attribute Changed notice makes it
//! read the Changed Namespace List log (which clears the event), rescan the namespaces and bump
//! [`Controller::namespace_generation`]; an ANA Change notice makes it read the ANA log ([`Controller::ana_state`]);
//! then it re-arms the request.
//!
//! Threads: each queue has its I/O thread ([`QueueHandle`]). One supervisor thread per controller sends the Keep
//! Alives (every KATO/2; to a controller that reports Traffic Based Keep Alive, none while I/O flows: see
//! `supervise`), handles asynchronous events, notices a lost association (a queue's I/O thread tells it when its
//! connection fails, a held command when it meets a failed one) and runs the reconnect attempts; it sleeps until
//! one of those is due, blocks on admin commands and connects, and is never on the data path. The blocking calls
//! here run on the caller's thread, split transfers at MDTS, submit every piece at once (spread round-robin over
//! the I/O queues) and wait for all of them, each wait bounded by [`ConnectOptions::io_timeout`] (and held while
//! reconnecting). Each has an async twin (`read_async`, `write_async`, `flush_async`, `write_zeroes_async`,
//! `deallocate_async`, and [`Controller::submit_io_async`]) for any executor: the same commands, awaited (a
//! [`crate::queue::handle::Pending`] is a `Future` woken by the queue's I/O thread), and held while reconnecting
//! without blocking the task's thread (the supervisor wakes held tasks on every state change and at the fast-fail
//! deadline); the queue's command timeout bounds them. Reads and writes take scatter-gather lists (`IoSliceMut`,
//! `IoSlice`) whose lengths add up to whole blocks; the wrappers copy between those and the queue's owned buffers
//! (one buffer per command), and zero-copy callers use [`Controller::submit_io`] with owned buffers. The data path
//! takes one uncontended `RwLock` read (the queue's current connection; only a reconnect write-locks it) and no
//! other lock.
//!
//! Files: `options` (how to connect), `ana` (the ANA log and the event configuration), `association` (bringing one
//! association up: the admin queue, CC.EN, Identify, the I/O queues), `authentication` (DH-HMAC-CHAP on each queue
//! after its Connect), `supervision` (where the controller stands, keep-alive, holding I/O, reconnect; the supervisor
//! thread), `events` (Asynchronous Event Requests and the namespace table), `io` (the blocking and async I/O API),
//! `admin` (Identify and Get Log Page for callers), `reservation` (the I/O passthrough [`Controller::io_command`] and
//! the reservation commands), and this file: the [`Controller`] itself, its admin commands, connect and disconnect.

mod admin;
mod ana;
mod association;
mod authentication;
mod events;
mod io;
mod options;
pub mod reservation;
mod supervision;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::fabrics::property::{ControllerConfiguration, Property, ShutdownNotification, ShutdownStatus};
use nvmf_common::nvme::SubmissionQueueEntry;
use nvmf_common::transport::tls::HandshakePsk;

use crate::error::HostError;
use crate::queue::handle::{QueueHandle, Recovery, Reply};
use crate::queue::{execute, BareQueue, DataDirection, Request};
pub use association::ControllerInfo;
use association::{
    associate, connect_request, connect_response, finish, number_of_queues, property_get, property_set, run, wait_csts,
};
pub use events::NamespaceInfo;
pub use options::{ConnectOptions, IoPolicy, PollMode, PollOptions, TlsKeyOptions, Transport};
use supervision::{supervise, Status, Supervision};
pub use supervision::{ControllerState, IoTraffic};

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
    /// The current association's TLS PSK ([`Controller::tls_psk`]).
    tls: CurrentPsk,
    namespaces: RwLock<HashMap<u32, NamespaceInfo>>,
    /// Bumped on each namespace change; waiters sleep on `namespace_changed`.
    namespace_generation: Mutex<u64>,
    namespace_changed: Condvar,
    /// The ANA groups' states on this path.
    ana: ana::AnaTable,
    supervision: Arc<Supervision>,
}

/// The current association's TLS PSK, replaced by a reconnect; `Debug` shows the identity only.
struct CurrentPsk(Mutex<Option<Arc<HandshakePsk>>>);

impl CurrentPsk {
    fn get(&self) -> Option<Arc<HandshakePsk>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, psk: Option<Arc<HandshakePsk>>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = psk;
    }
}

impl std::fmt::Debug for CurrentPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(psk) => write!(f, "CurrentPsk({})", String::from_utf8_lossy(&psk.identity)),
            None => f.write_str("CurrentPsk(none)"),
        }
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

/// How an admin command meets a reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Held while the controller reconnects and resubmitted on the new association, like I/O: callers' commands
    /// ([`Controller::admin_command`]).
    UntilReconnected,
    /// On the current connection only, failing with it: the supervisor's own commands (the namespace scans of
    /// an event or a reconnect), since holding them would wait for the reconnect the supervisor itself runs.
    Never,
}

impl Inner {
    /// Run an admin command and wait (bounded by the I/O timeout); `data` is the buffer (sent or filled per
    /// `direction`); a non-success status is [`HostError::Status`]. The one way the controller runs an admin
    /// command once it is up (bring-up and the Keep Alive use the queue's submitter directly: `run`).
    fn admin_command(
        &self,
        hold: Hold,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Reply, HostError> {
        let timeout = self.options.io_timeout;
        match hold {
            Hold::UntilReconnected => {
                finish(command, self.admin.submit(Request { sqe, data, direction, context: () })?, timeout)
            }
            Hold::Never => run(&self.admin.submitter(), command, sqe, direction, data, timeout),
        }
    }
}

impl Controller {
    /// Connect to subsystem `subnqn` at `addr` over [`ConnectOptions::transport`] and bring the association
    /// up (see the module docs). A failure here is returned as is: reconnecting starts only once an
    /// association was up.
    pub fn connect(addr: SocketAddr, subnqn: &str, options: ConnectOptions) -> Result<Self, HostError> {
        options.check_dhchap()?;
        let assoc = associate(addr, subnqn, &options, options.nr_io_queues)?;
        let (wake, wakes) = channel();
        let supervision = Arc::new(Supervision {
            status: Mutex::new(Status { state: ControllerState::Live, epoch: 0, lost_at: None, held: Vec::new() }),
            changed: Condvar::new(),
            wake,
            word: AtomicU64::new(ControllerState::Live.to_word()),
            reconnects: AtomicU64::new(0),
            fast_io_fail_tmo: options.fast_io_fail_tmo,
            ana_refresh_requested: AtomicBool::new(false),
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
            tls: CurrentPsk(Mutex::new(assoc.tls)),
            namespaces: RwLock::new(HashMap::new()),
            namespace_generation: Mutex::new(0),
            namespace_changed: Condvar::new(),
            ana: ana::AnaTable::new(assoc.info.ana_reporting, assoc.info.nanagrpid, assoc.info.nn),
            supervision,
        });
        // A discovery controller has no namespaces (and refuses the Identify CNS 02h that lists them).
        if subnqn != DISCOVERY_NQN {
            inner.scan_namespaces()?;
            inner.enable_events(assoc.info.oaes);
            inner.refresh_ana_logged();
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
        tracing::info!(traddr = %addr, transport, subnqn, cntlid = info.cntlid, io_queues = info.io_queues, "connected");
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

    /// How long ago the association was lost, while it is (`None` while live).
    pub fn lost_for(&self) -> Option<std::time::Duration> {
        self.inner.supervision.lock().lost_at.map(|t| t.elapsed())
    }

    /// Associations re-established after a loss since [`Controller::connect`] (lock-free).
    pub fn reconnects(&self) -> u64 {
        self.inner.supervision.reconnects.load(Ordering::Relaxed)
    }

    /// The address connected to.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The transport of every queue.
    pub fn transport(&self) -> Transport {
        self.inner.options.transport
    }

    /// The PSK the current association's NVMe/TCP queues are secured with: `--tls-key`'s, or the one `--concat`
    /// generated for this association (a reconnect generates another). Bare I/O queues connect with it.
    pub fn tls_psk(&self) -> Option<Arc<HandshakePsk>> {
        self.inner.tls.get()
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
        self.inner.admin_command(Hold::UntilReconnected, command, sqe, direction, data)
    }

    /// Fabrics Connect of a fresh bare I/O queue (`TcpQueue` or `RdmaQueue`, owned by the caller) to this association,
    /// SQSIZE `sqsize`, and its DH-HMAC-CHAP authentication when called for: polls it on the caller's thread until the
    /// responses arrive, each bounded by the connect timeout. For callers that drive bare I/O queues themselves (perf,
    /// tests).
    pub fn fabrics_connect<T: Default, Q: BareQueue<T>>(&self, queue: &mut Q, sqsize: u16) -> Result<(), HostError> {
        let (qid, o) = (queue.qid(), self.options());
        let request = connect_request(qid, o, self.subnqn(), sqsize, self.cntlid(), 0, T::default())?;
        let c = execute(queue, request, o.connect_timeout)?;
        let response = connect_response(qid, &c.result?)?;
        let mut exchange = |command, sqe, direction, data| {
            let c = execute(queue, Request { sqe, data, direction, context: T::default() }, o.connect_timeout)?;
            match c.result? {
                cqe if cqe.status.is_success() => Ok(c.data),
                cqe => Err(HostError::Status { command, status: cqe.status }),
            }
        };
        authentication::authenticate(qid, &response, o, self.subnqn(), &mut exchange)
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
