//! Bringing one association up (see the parent module for the sequence): the admin queue and its Fabrics
//! Connect, CAP, CC.EN and CSTS.RDY, Identify Controller, Number of Queues and the I/O queues; what it learns
//! ([`ControllerInfo`]). Also the helpers every admin command of the controller runs through ([`run`],
//! [`finish`], [`check`]) and the Fabrics Connect request both the controller's queues and bare queues send.
//!
//! Runs on the thread that connects ([`super::Controller::connect`]) or reconnects (the supervisor), and blocks
//! on every command it sends, each bounded by the connect or I/O timeout.

use nvmf_common::transport::tls::HandshakePsk;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{
    Connect, ConnectData, ConnectResponse, CATTR_DISABLE_SQ_FLOW_CONTROL, CNTLID_DYNAMIC,
};
use nvmf_common::fabrics::nqn::{Nqn, DISCOVERY_NQN};
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertyGet, PropertySet,
};
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::identify::{cns, Identify, IdentifyController, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, SubmissionQueueEntry};

use super::authentication::{authenticate, authenticate_concatenated};
use super::events::MAX_AERS;
use super::options::{ConnectOptions, Transport};
use crate::error::HostError;
use crate::queue::handle::{Pending, QueueHandle, Reply, Submitter};
use crate::queue::{DataDirection, Request, MAX_QUEUE_DEPTH};
#[cfg(feature = "rdma")]
use crate::rdma::{DetachedTeardown, RdmaQueue, RdmaQueueOptions};
use crate::tcp::{TcpQueue, TcpQueueOptions};

/// Depth of the admin queue (Linux uses 32).
pub(super) const ADMIN_QUEUE_SIZE: u16 = 32;

/// In-capsule data the admin queue uses over NVMe/TCP (at least 8 KiB on the admin queue).
pub(super) const ADMIN_IN_CAPSULE: u32 = 8192;

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
    /// The controller reports Asymmetric Namespace Access (CMIC bit 3): its namespaces have ANA groups and the
    /// ANA log page (0Ch) says each group's state on this path.
    pub ana_reporting: bool,
    /// The subsystem may have several controllers (CMIC bit 1): a host may reach a namespace through more than
    /// one of them (multipath).
    pub multi_controller: bool,
    /// ANA groups the controller may report (NANAGRPID; sizes the ANA log).
    pub nanagrpid: u32,
    /// Optional Asynchronous Events Supported.
    pub oaes: u32,
    /// The capability register.
    pub cap: Capabilities,
}

/// The queues and facts of one association (what [`associate`] brings up).
#[derive(Debug)]
pub(super) struct Association {
    pub(super) info: ControllerInfo,
    pub(super) admin: QueueHandle,
    pub(super) io: Vec<QueueHandle>,
    /// Asynchronous Event Requests to keep outstanding (AERL + 1, capped).
    pub(super) aers: usize,
    /// The PSK its TCP queues are secured with (`--tls-key`'s, or the one `--concat` generated).
    pub(super) tls: Option<Arc<HandshakePsk>>,
}

pub(super) fn property_get(admin: &Submitter, p: Property, timeout: Duration) -> Result<u64, HostError> {
    let sqe = PropertyGet { size: p.size(), offset: p.offset() }.to_sqe();
    let reply = run(admin, "Property Get", sqe, DataDirection::None, Vec::new(), timeout)?;
    Ok(reply.result.map(|c| c.result64()).unwrap_or_default())
}

pub(super) fn property_set(admin: &Submitter, p: Property, value: u64, timeout: Duration) -> Result<(), HostError> {
    let sqe = PropertySet { size: p.size(), offset: p.offset(), value }.to_sqe();
    run(admin, "Property Set", sqe, DataDirection::None, Vec::new(), timeout).map(|_| ())
}

/// Submit one command and wait; a non-success status is [`HostError::Status`].
pub(super) fn run(
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

pub(super) fn finish(command: &'static str, pending: Pending, timeout: Duration) -> Result<Reply, HostError> {
    check(command, pending.wait(timeout)?)
}

/// `reply` of `command` if it succeeded; else its error, or its status as [`HostError::Status`].
pub(super) fn check(command: &'static str, reply: Reply) -> Result<Reply, HostError> {
    match &reply.result {
        Ok(cqe) if cqe.status.is_success() => Ok(reply),
        Ok(cqe) => Err(HostError::Status { command, status: cqe.status }),
        Err(e) => Err(e.clone()),
    }
}

/// The Fabrics Connect request for queue `qid` (its SQE and 1024-byte data), carrying `context`.
pub(super) fn connect_request<T>(
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

/// What a successful Connect response says (the CNTLID and the AUTHREQ bits), or the rejection.
pub(super) fn connect_response(qid: u16, cqe: &CompletionQueueEntry) -> Result<ConnectResponse, HostError> {
    if !cqe.status.is_success() {
        return Err(HostError::ConnectRejected { qid, status: cqe.status, dw0: cqe.dw0 });
    }
    Ok(ConnectResponse::from_dw0(cqe.dw0))
}

/// Fabrics Connect on a fresh queue, then DH-HMAC-CHAP when the controller asks for it or the options hold a
/// controller secret (see `authentication`); returns the CNTLID.
pub(super) fn fabrics_connect(
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
    let response = connect_response(qid, &reply.result?)?;
    let mut exchange = |command, sqe, direction, data| {
        run(q, command, sqe, direction, data, options.connect_timeout).map(|reply| reply.data)
    };
    authenticate(qid, &response, options, subnqn, &mut exchange)?;
    Ok(response.cntlid)
}

/// Connect queue `qid` of `depth` commands (SQSIZE) over the options' transport and start its I/O thread, polling
/// as the options say; `icd`: largest in-capsule write, `cntlid`: the association's (0xFFFF for the admin queue;
/// NVMe/RDMA sends it in the CM private data).
pub(super) fn open_queue(
    addr: SocketAddr,
    options: &ConnectOptions,
    qid: u16,
    depth: u16,
    icd: u32,
    cntlid: u16,
    tls: Option<&Arc<HandshakePsk>>,
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
                host_iface: options.host_iface.clone(),
                tls: tls.cloned(),
            };
            QueueHandle::spawn_with(TcpQueue::connect(addr, &qopts)?, options.poll.poller(), options.queue_cpu(qid))
        }
        #[cfg(feature = "rdma")]
        Transport::Rdma => {
            options.check_host_iface()?;
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
            QueueHandle::spawn_with(
                DetachedTeardown::new(RdmaQueue::connect(addr, &qopts)?),
                options.poll.poller(),
                options.queue_cpu(qid),
            )
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
pub(super) fn number_of_queues(admin: &Submitter, count: u16, timeout: Duration) -> Result<u16, HostError> {
    let want = u32::from(count);
    let nq = NumberOfQueues::with_counts(want, want).map_err(|e| HostError::wire("Number of Queues", e))?;
    let sqe = SetFeatures::new(&nq).to_sqe();
    let reply = run(admin, "Set Features (Number of Queues)", sqe, DataDirection::None, Vec::new(), timeout)?;
    let got = NumberOfQueues::from_dw0(reply.result.map(|c| c.dw0).unwrap_or_default());
    let granted = got.submission_queues().min(got.completion_queues()).min(want);
    Ok(u16::try_from(granted).unwrap_or(count))
}

pub(super) fn wait_csts(
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

/// Secure channel concatenation (`--concat`): a plaintext admin queue, its Connect and an authentication that
/// generates a PSK, then the queue is closed (Linux restarts its admin queue likewise); the PSK to connect with.
fn concatenate(
    addr: SocketAddr,
    subnqn: &str,
    options: &ConnectOptions,
    kato_ms: u32,
) -> Result<Arc<HandshakePsk>, HostError> {
    let admin = open_queue(addr, options, 0, ADMIN_QUEUE_SIZE - 1, 0, CNTLID_DYNAMIC, None)?;
    let a = admin.submitter();
    let request = connect_request(0, options, subnqn, ADMIN_QUEUE_SIZE - 1, CNTLID_DYNAMIC, kato_ms, ())?;
    let reply = a.submit(request)?.wait(options.connect_timeout)?;
    let response = connect_response(0, &reply.result?)?;
    let mut exchange = |command, sqe, direction, data| {
        run(&a, command, sqe, direction, data, options.connect_timeout).map(|reply| reply.data)
    };
    let psk = authenticate_concatenated(&response, options, subnqn, &mut exchange)?;
    drop(admin);
    Ok(psk)
}

/// Bring a whole association up (see the module docs); `io_queues` overrides the I/O queues asked for.
pub(super) fn associate(
    addr: SocketAddr,
    subnqn: &str,
    options: &ConnectOptions,
    io_queues: u16,
) -> Result<Association, HostError> {
    let t = options.io_timeout;
    let kato_ms = u32::try_from(options.keep_alive_tmo.as_millis()).unwrap_or(u32::MAX);
    let tls = match options.concat {
        true => Some(concatenate(addr, subnqn, options, kato_ms)?),
        false => options.tls.as_ref().map(|t| t.handshake_psk(&options.hostnqn, subnqn)).transpose()?,
    };
    let admin = open_queue(addr, options, 0, ADMIN_QUEUE_SIZE - 1, 0, CNTLID_DYNAMIC, tls.as_ref())?;
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
        ana_reporting: id.cmic & IdentifyController::CMIC_ANA_REPORTING != 0,
        multi_controller: id.cmic & IdentifyController::CMIC_MULTI_CONTROLLER != 0,
        nanagrpid: id.nanagrpid,
        oaes: id.oaes,
        cap,
    };

    let mut io = Vec::new();
    if io_queues > 0 {
        let granted = number_of_queues(&a, io_queues, t)?;
        // Depth: queue_size entries, never more than MQES allows; SQSIZE is 0's based.
        let entries = u32::from(options.queue_size).clamp(2, cap.max_queue_entries());
        let sqsize = u16::try_from(entries - 1).unwrap_or(u16::MAX);
        for qid in 1..=granted {
            let depth = sqsize.min(MAX_QUEUE_DEPTH);
            let q = open_queue(addr, options, qid, depth, in_capsule_data, cntlid, tls.as_ref())?;
            fabrics_connect(&q.submitter(), options, subnqn, sqsize, cntlid, 0)?;
            io.push(q);
        }
        info.io_queues = granted;
    }
    // A discovery controller reports its log changes differently; the host does not wait for its events.
    let aers = if subnqn == DISCOVERY_NQN { 0 } else { (usize::from(id.aerl) + 1).min(MAX_AERS) };
    Ok(Association { info, admin, io, aers, tls })
}
