//! [`Controller`]: one association with an NVMe-oF controller over NVMe/TCP.
//!
//! [`Controller::connect`] brings the association up the way the Linux host does: admin queue (ICReq,
//! Fabrics Connect with CNTLID 0xFFFF and KATO), Property Get CAP, Property Set CC.EN and a wait for
//! CSTS.RDY bounded by CAP.TO, Identify Controller, Set Features Number of Queues, then one TCP connection
//! and Fabrics Connect per granted I/O queue, and a keep-alive timer at KATO/2.
//!
//! Threads: each queue has its I/O thread ([`crate::tcp::QueueHandle`]); the keep-alive timer has one; the
//! blocking calls here run on the caller's thread, split transfers at MDTS, submit every piece at once
//! (spread round-robin over the I/O queues) and wait for all of them, each wait bounded by
//! [`ConnectOptions::io_timeout`]. The blocking wrappers copy between the caller's slice and the queue's
//! owned buffer; zero-copy callers use [`Controller::submit_io`] with owned buffers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{Connect, ConnectData, ConnectResponse, CNTLID_DYNAMIC};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertyGet, PropertySet, ShutdownNotification,
    ShutdownStatus,
};
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, NamespaceIdentificationDescriptor,
    IDENTIFY_DATA_SIZE,
};
use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes, DSM_MAX_RANGES};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, SubmissionQueueEntry};

use crate::error::HostError;
use crate::identity::HostIdentity;
use crate::tcp::{DataDirection, Pending, QueueHandle, Reply, Request, Submitter, TcpQueue, TcpQueueOptions};

/// Depth of the admin queue (Linux uses 32).
const ADMIN_QUEUE_SIZE: u16 = 32;
/// In-capsule data the admin queue uses (NVMe/TCP: at least 8 KiB on the admin queue).
const ADMIN_IN_CAPSULE: u32 = 8192;

/// How to connect (nvme-cli's option names in the field docs).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
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
    /// Header digests (`--hdr-digest`).
    pub hdr_digest: bool,
    /// Data digests (`--data-digest`).
    pub data_digest: bool,
    /// Bound on connecting each queue (TCP and ICReq/ICResp).
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
            hostnqn: id.hostnqn,
            hostid: id.hostid,
            nr_io_queues: u16::try_from(cores).unwrap_or(u16::MAX),
            queue_size: 128,
            keep_alive_tmo: Duration::from_secs(5),
            hdr_digest: false,
            data_digest: false,
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

#[derive(Debug)]
struct KeepAliveTimer {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

/// An association with one controller (see the module docs).
#[derive(Debug)]
pub struct Controller {
    addr: SocketAddr,
    info: ControllerInfo,
    admin: Option<QueueHandle>,
    io: Vec<QueueHandle>,
    next_io: AtomicUsize,
    namespaces: RwLock<HashMap<u32, NamespaceInfo>>,
    keep_alive: Option<KeepAliveTimer>,
    io_timeout: Duration,
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
    let reply = pending.wait(timeout)?;
    match &reply.result {
        Ok(cqe) if cqe.status.is_success() => Ok(reply),
        Ok(cqe) => Err(HostError::Status { command, status: cqe.status }),
        Err(e) => Err(e.clone()),
    }
}

/// The Fabrics Connect request for queue `qid` (its SQE and 1024-byte data), carrying `context`.
pub(crate) fn connect_request<T>(
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
        cattr: 0,
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
pub(crate) fn connect_response(qid: u16, cqe: &CompletionQueueEntry) -> Result<u16, HostError> {
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

fn open_queue(
    addr: SocketAddr,
    options: &ConnectOptions,
    qid: u16,
    depth: u16,
    icd: u32,
) -> Result<QueueHandle, HostError> {
    let qopts = TcpQueueOptions {
        qid,
        depth,
        hdr_digest: options.hdr_digest,
        data_digest: options.data_digest,
        in_capsule_limit: icd,
        max_c2h_data: 16 << 20,
        connect_timeout: options.connect_timeout,
        command_timeout: options.io_timeout,
    };
    QueueHandle::spawn(TcpQueue::connect(addr, &qopts)?)
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

impl Controller {
    /// Connect to subsystem `subnqn` at `addr` and bring the association up (see the module docs).
    pub fn connect(addr: SocketAddr, subnqn: &str, options: ConnectOptions) -> Result<Self, HostError> {
        let t = options.io_timeout;
        let kato_ms = u32::try_from(options.keep_alive_tmo.as_millis()).unwrap_or(u32::MAX);
        let admin = open_queue(addr, &options, 0, ADMIN_QUEUE_SIZE - 1, ADMIN_IN_CAPSULE)?;
        let a = admin.submitter();
        let cntlid = fabrics_connect(&a, &options, subnqn, ADMIN_QUEUE_SIZE - 1, CNTLID_DYNAMIC, kato_ms)?;

        let cap = Capabilities::from_u64(property_get(&a, Property::Cap, t)?);
        let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
        property_set(&a, Property::Cc, u64::from(cc.to_u32()), t)?;
        let ready_within = Duration::from_millis(u64::from(cap.timeout_ms().max(500)));
        wait_csts(&a, "RDY after CC.EN", ready_within, t, |c| c.rdy)?;

        let sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
        let reply =
            run(&a, "Identify Controller", sqe, DataDirection::ControllerToHost, vec![0; IDENTIFY_DATA_SIZE], t)?;
        let id = IdentifyController::parse(&reply.data).map_err(|e| HostError::wire("Identify Controller", e))?;
        let page = 1u64 << (12 + u32::from(cap.mpsmin));
        let max_transfer =
            (id.mdts != 0).then(|| u32::try_from(page << u32::from(id.mdts).min(20)).unwrap_or(u32::MAX));
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
            io_queues: 0,
            cap,
        };

        let mut io = Vec::new();
        if options.nr_io_queues > 0 {
            let want = NumberOfQueues::with_counts(u32::from(options.nr_io_queues), u32::from(options.nr_io_queues))
                .map_err(|e| HostError::wire("Number of Queues", e))?;
            let reply = run(
                &a,
                "Set Features (Number of Queues)",
                SetFeatures::new(&want).to_sqe(),
                DataDirection::None,
                Vec::new(),
                t,
            )?;
            let got = NumberOfQueues::from_dw0(reply.result.map(|c| c.dw0).unwrap_or_default());
            let granted = got.submission_queues().min(got.completion_queues()).min(u32::from(options.nr_io_queues));
            let granted = u16::try_from(granted).unwrap_or(options.nr_io_queues);
            // Depth: queue_size entries, never more than MQES allows; SQSIZE is 0's based.
            let entries = u32::from(options.queue_size).clamp(2, cap.max_queue_entries());
            let sqsize = u16::try_from(entries - 1).unwrap_or(u16::MAX);
            for qid in 1..=granted {
                let q = open_queue(addr, &options, qid, sqsize.min(crate::tcp::MAX_QUEUE_DEPTH), in_capsule_data)?;
                fabrics_connect(&q.submitter(), &options, subnqn, sqsize, cntlid, 0)?;
                io.push(q);
            }
            info.io_queues = granted;
        }

        let keep_alive = (kato_ms > 0).then(|| {
            let (stop, stopped) = channel::<()>();
            let interval = options.keep_alive_tmo / 2;
            let sub = a.clone();
            let thread = std::thread::Builder::new().name("nvmf-keepalive".into()).spawn(move || loop {
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = run(&sub, "Keep Alive", KeepAlive.to_sqe(), DataDirection::None, Vec::new(), t)
                        {
                            tracing::warn!(error = %e, "keep-alive failed");
                            if matches!(e, HostError::ShutDown { .. }) {
                                return;
                            }
                        }
                    }
                    _ => return,
                }
            });
            thread.map(|thread| KeepAliveTimer { stop, thread })
        });
        let keep_alive = keep_alive.transpose().map_err(|e| HostError::io(0, "spawning the keep-alive thread", &e))?;

        let ctrl = Controller {
            addr,
            info,
            admin: Some(admin),
            io,
            next_io: AtomicUsize::new(0),
            namespaces: RwLock::new(HashMap::new()),
            keep_alive,
            io_timeout: t,
        };
        // A discovery controller has no namespaces (and refuses the Identify CNS 02h that lists them).
        if subnqn != nvmf_common::fabrics::nqn::DISCOVERY_NQN {
            ctrl.namespaces()?;
        }
        tracing::info!(%addr, subnqn, cntlid, io_queues = ctrl.info.io_queues, "connected");
        Ok(ctrl)
    }

    /// What Identify Controller said, plus the granted queue count.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }

    /// Where the association stands (cheap: for metrics and health checks).
    pub fn state(&self) -> ControllerState {
        ControllerState::Live
    }

    /// Associations re-established after a loss since [`Controller::connect`].
    pub fn reconnects(&self) -> u64 {
        0
    }

    /// The address connected to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin queue.
    pub fn admin(&self) -> Result<&QueueHandle, HostError> {
        self.admin.as_ref().ok_or(HostError::ShutDown { qid: 0 })
    }

    /// The I/O queues (`io_queues()[0]` is QID 1).
    pub fn io_queues(&self) -> &[QueueHandle] {
        &self.io
    }

    /// Run an admin command and wait; `data` is the buffer (sent or filled per `direction`).
    pub fn admin_command(
        &self,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Reply, HostError> {
        run(&self.admin()?.submitter(), command, sqe, direction, data, self.io_timeout)
    }

    /// The active namespaces (Identify CNS 02h, then CNS 00h and 03h for each); refreshes the namespace
    /// table the I/O wrappers use.
    pub fn namespaces(&self) -> Result<Vec<NamespaceInfo>, HostError> {
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
        let mut table = self.namespaces.write().unwrap_or_else(PoisonError::into_inner);
        *table = out.iter().map(|n| (n.nsid, *n)).collect();
        Ok(out)
    }

    fn namespace(&self, nsid: u32) -> Result<NamespaceInfo, HostError> {
        self.namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&nsid)
            .copied()
            .ok_or_else(|| HostError::InvalidRequest(format!("namespace {nsid} is not active on this controller")))
    }

    /// The next I/O queue, round-robin.
    fn io_queue(&self) -> Result<&QueueHandle, HostError> {
        if self.io.is_empty() {
            return Err(HostError::InvalidRequest("the association has no I/O queues".into()));
        }
        Ok(&self.io[self.next_io.fetch_add(1, Ordering::Relaxed) % self.io.len()])
    }

    /// Submit an I/O command on the next I/O queue (owned buffer, no copy); wait on the returned [`Pending`].
    pub fn submit_io(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.io_queue()?.submit(request)
    }

    /// Blocks per command: MDTS and the 16-bit NLB, whichever is smaller.
    fn max_blocks(&self, block_size: u32) -> usize {
        let by_mdts =
            self.info.max_transfer.map_or(usize::MAX, |m| usize::try_from(m / block_size.max(1)).unwrap_or(1));
        by_mdts.clamp(1, 65536)
    }

    fn check_buffer(ns: &NamespaceInfo, slba: u64, len: usize) -> Result<usize, HostError> {
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
        Ok(bs)
    }

    fn wait_all(&self, command: &'static str, pending: Vec<Pending>) -> Result<Vec<Reply>, HostError> {
        let mut replies = Vec::with_capacity(pending.len());
        let mut first_error = None;
        for p in pending {
            match finish(command, p, self.io_timeout) {
                Ok(r) => replies.push(r),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(replies), Err)
    }

    /// Read `buf.len()` bytes (whole blocks) from `slba` of namespace `nsid`.
    pub fn read(&self, nsid: u32, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        let ns = self.namespace(nsid)?;
        let bs = Self::check_buffer(&ns, slba, buf.len())?;
        let chunk = self.max_blocks(ns.block_size) * bs;
        let mut pending = Vec::new();
        for (i, piece) in buf.chunks(chunk).enumerate() {
            let nlb = u16::try_from(piece.len() / bs - 1).unwrap_or(u16::MAX);
            let sqe = Read { nsid, slba: slba + ((i * chunk / bs) as u64), nlb, ..Read::default() }.to_sqe();
            let data = vec![0; piece.len()];
            pending.push(self.submit_io(Request {
                sqe,
                data,
                direction: DataDirection::ControllerToHost,
                context: (),
            })?);
        }
        for (reply, piece) in self.wait_all("Read", pending)?.into_iter().zip(buf.chunks_mut(chunk)) {
            piece.copy_from_slice(&reply.data);
        }
        Ok(())
    }

    /// Write `data` (whole blocks) at `slba` of namespace `nsid`.
    pub fn write(&self, nsid: u32, slba: u64, data: &[u8]) -> Result<(), HostError> {
        let ns = self.namespace(nsid)?;
        let bs = Self::check_buffer(&ns, slba, data.len())?;
        let chunk = self.max_blocks(ns.block_size) * bs;
        let mut pending = Vec::new();
        for (i, piece) in data.chunks(chunk).enumerate() {
            let nlb = u16::try_from(piece.len() / bs - 1).unwrap_or(u16::MAX);
            let sqe = Write { nsid, slba: slba + ((i * chunk / bs) as u64), nlb, ..Write::default() }.to_sqe();
            let request =
                Request { sqe, data: piece.to_vec(), direction: DataDirection::HostToController, context: () };
            pending.push(self.submit_io(request)?);
        }
        self.wait_all("Write", pending).map(|_| ())
    }

    /// Flush namespace `nsid`'s volatile write cache.
    pub fn flush(&self, nsid: u32) -> Result<(), HostError> {
        let sqe = Flush { nsid }.to_sqe();
        let p = self.submit_io(Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () })?;
        finish("Flush", p, self.io_timeout).map(|_| ())
    }

    /// Write Zeroes over `blocks` blocks from `slba` (split into commands of at most 65536 blocks).
    pub fn write_zeroes(&self, nsid: u32, slba: u64, blocks: u64) -> Result<(), HostError> {
        let ns = self.namespace(nsid)?;
        if blocks == 0 || slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return Err(HostError::InvalidRequest(format!("Write Zeroes of LBAs {slba}+{blocks} on namespace {nsid}")));
        }
        let mut pending = Vec::new();
        let mut at = slba;
        while at < slba + blocks {
            let n = (slba + blocks - at).min(65536);
            let nlb = u16::try_from(n - 1).unwrap_or(u16::MAX);
            let sqe = WriteZeroes { nsid, slba: at, nlb, ..WriteZeroes::default() }.to_sqe();
            pending.push(self.submit_io(Request {
                sqe,
                data: Vec::new(),
                direction: DataDirection::None,
                context: (),
            })?);
            at += n;
        }
        self.wait_all("Write Zeroes", pending).map(|_| ())
    }

    /// Deallocate (Dataset Management, AD) the `(slba, blocks)` ranges; up to 256 ranges per command.
    pub fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.namespace(nsid)?;
        let mut pending = Vec::new();
        for group in ranges.chunks(DSM_MAX_RANGES) {
            let nr = u8::try_from(group.len() - 1).unwrap_or(u8::MAX);
            let sqe = DatasetManagement { nsid, nr, ad: true, ..DatasetManagement::default() }.to_sqe();
            let data =
                group.iter().flat_map(|&(slba, length)| DsmRange { cattr: 0, length, slba }.to_bytes()).collect();
            pending.push(self.submit_io(Request {
                sqe,
                data,
                direction: DataDirection::HostToController,
                context: (),
            })?);
        }
        self.wait_all("Dataset Management", pending).map(|_| ())
    }

    /// Shut down cleanly: stop keep-alive, close the I/O queues, CC.SHN normal and wait for CSTS.SHST
    /// complete (bounded by CAP.TO, at least 5 s), then close the admin queue.
    pub fn disconnect(mut self) -> Result<(), HostError> {
        self.stop_keep_alive();
        for q in self.io.drain(..) {
            q.close();
        }
        let admin = self.admin.take().ok_or(HostError::ShutDown { qid: 0 })?;
        let a = admin.submitter();
        let t = self.io_timeout;
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
        admin.close();
        result
    }

    fn stop_keep_alive(&mut self) {
        if let Some(k) = self.keep_alive.take() {
            drop(k.stop);
            let _ = k.thread.join();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop_keep_alive();
    }
}
