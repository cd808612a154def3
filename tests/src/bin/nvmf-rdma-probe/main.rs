//! `nvmf-rdma-probe`: a raw NVMe/RDMA host (RDMA CM + verbs through `nvmf_common::transport::rdma::verbs`) that
//! sends what a well-behaved host never would, for the VM scenarios in `tests/vm_target_rdma_matrix.rs`. Each run
//! prints one JSON line saying what it observed and exits 0; the test decides whether that was right. Exit 1 (with a
//! `"outcome":"probe_error"` line) only when the probe itself could not run (no RDMA device, no route).
//!
//!     nvmf-rdma-probe [--addr IP:PORT] [--subnqn NQN] [--hostnqn NQN] COMMAND
//!
//! | command | what it does | outcomes |
//! |---|---|---|
//! | `reject --case recfmt\|qid\|hsqsize\|hrqsize\|short` | RDMA CM connect with malformed private data | `rejected` (CM status, NVMe/RDMA reject code) or `accepted` |
//! | `admin-connect` | admin queue: Fabrics Connect, Property Get CAP (positive control) | `completed` with statuses and cntlid |
//! | `io --before-connect [--qid N]` | a Read on a fresh queue before any Fabrics Connect | `completed` (status) or `broken` |
//! | `bad-keyed-sgl --case rkey\|rkey-read\|length\|write-length` | after admin Connect: Identify whose keyed SGL has a wrong rkey (the target's RDMA WRITE fails), Connect data under a wrong rkey (its RDMA READ fails), an Identify SGL shorter than the 4 KiB structure (`wrote_beyond_sgl`: whether memory past it changed), or on an I/O queue a 4 KiB Write whose SGL describes 512 bytes | `completed` (status) or `broken` (QP error / disconnect) |
//! | `oversize-capsule [--size BYTES]` | after admin Connect, a SEND larger than the target's receive buffers (default: the IOCCSZ it advertises + 4 KiB) | `completed` or `broken` |
//! | `cycles N` | N × (CM connect, Fabrics Connect admin, Property Get CAP, disconnect), as fast as it can | `done` with counts |
//! | `hold [--seconds S]` | admin Connect, an Asynchronous Event Request the target keeps, then sleep (to be killed) | `holding` (printed before sleeping) |
//! | `stall [--seconds S]` | admin Connect, then Property Gets without reposting a receive: once its receives are used up the target's response SEND meets RNR NAKs (this host asks for rnr_retry_count 7: retried forever); wait up to S s (default 60) for the target to disconnect | `disconnected` (`seconds` after the unanswerable command) or `still_connected` |
//! | `impostor --key KEY` | the real host (`--hostnqn`, DH-HMAC-CHAP key KEY) authenticates its admin queue; an impostor opens I/O queue 1 of its controller (same host NQN, host ID, CNTLID) and never authenticates; the real I/O queue 1 connects and authenticates; the impostor fails a Receive before any Negotiate; the real queues read and keep alive | `done` with each step's status |
//! | `silent [--qid N] [--seconds S] [--count N]` | RDMA CM connect (queue `qid`, default 1), then nothing: no Fabrics Connect; wait up to S s (default 60) for the target to disconnect. With `--count`: N such queue pairs from this process, one summary | `disconnected` (after `seconds`) or `still_connected`; with `--count`: counts `disconnected`, `refused` (the connect failed), `other`, and the `fastest` and `slowest` disconnects in s |
//!
//! `broken` lines say which work completion failed first (`wc_status`, `wc_op`) or `timeout`, and whether the
//! target's RDMA CM disconnect arrived within a few seconds (`disconnected`).
//!
//! Runs single-threaded; every wait is bounded (10 s per step). Keyed SGLs name one memory region registered with
//! remote read and write (subtype 0x0, no invalidation), as SPDK's host does.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::auth::command::AuthenticationCommand;
use nvmf_common::fabrics::auth::host::{HostCredentials, HostTransaction};
use nvmf_common::fabrics::auth::message::auth_id;
use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::auth::{OsRandom, SequenceNumbers};
use nvmf_common::fabrics::connect::{Connect, ConnectData, CNTLID_DYNAMIC};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertyGet, PropertySet, PropertySize,
};
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::identify::{cns, Identify, IdentifyController};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::opcode::admin;
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};
use nvmf_common::transport::rdma::private_data::{RdmaCmAccept, RdmaCmRejectStatus, RdmaCmRequest};
use nvmf_common::transport::rdma::verbs::{
    AccessFlags, CmEvent, CmEventKind, CmId, CompletionQueue, ConnParam, EventChannel, MemoryRegion, QpCapabilities,
    QpInitAttr, QueuePair, RdmaError, RecvWr, SendOpcode, SendWr, WorkCompletion,
};
use serde_json::{json, Value};

mod commands;

use commands::*;

const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a broken queue waits for the target's disconnect.
const DISCONNECT_WAIT: Duration = Duration::from_secs(5);
/// Admin queue size as Linux asks for it (32 entries: hsqsize 31, hrqsize 32).
const QUEUE_ENTRIES: u16 = 32;
const RECV_SLOT: usize = 64;
/// Capsule memory of a queue: an SQE and 8 KiB of in-capsule data.
const SEND_CAPACITY: usize = 64 + 8192;
/// Capsule memory of the oversize probe: beyond the largest in-capsule data a target may advertise (MDTS-bound,
/// 1 MiB here) and a page more.
const OVERSIZE_CAPACITY: usize = 64 + (1 << 20) + 4096;
const DATA_CAPACITY: usize = 64 * 1024;
const SQE_SIZE: usize = 64;
const CQE_SIZE: usize = 16;
const CONNECT_DATA_LEN: u32 = 1024;
const IDENTIFY_LEN: u32 = 4096;
/// The send work request's id (receives use their slot index).
const WR_SEND: u64 = u64::MAX;
const DEFAULT_SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:vm-rdma";
const DEFAULT_HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:2f6e0d4c-5a1b-4c3d-9e8f-7a6b5c4d3e2f";
const HOSTID: [u8; 16] =
    [0x2f, 0x6e, 0x0d, 0x4c, 0x5a, 0x1b, 0x4c, 0x3d, 0x9e, 0x8f, 0x7a, 0x6b, 0x5c, 0x4d, 0x3e, 0x2f];

/// The host ID a host NQN connects with: the UUID of a `nqn.2014-08.org.nvmexpress:uuid:` NQN (as nvme-cli takes
/// it), else [`HOSTID`], so that two host NQNs of one probe run are two hosts.
fn host_id_of(hostnqn: &str) -> [u8; 16] {
    let hex: String = hostnqn.strip_prefix("nqn.2014-08.org.nvmexpress:uuid:").unwrap_or("").replace('-', "");
    let mut id = [0u8; 16];
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return HOSTID;
    }
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    id
}

/// The probe could not run (a setup step failed): not an observation about the target.
#[derive(Debug)]
struct ProbeError(String);

impl From<RdmaError> for ProbeError {
    fn from(e: RdmaError) -> Self {
        ProbeError(e.to_string())
    }
}

impl From<nvmf_common::WireError> for ProbeError {
    fn from(e: nvmf_common::WireError) -> Self {
        ProbeError(e.to_string())
    }
}

/// Why a queue stopped working mid-command.
#[derive(Debug, Clone)]
enum Broken {
    /// A work completion failed (`op` is "send" or "recv").
    Wc { op: &'static str, status: String },
    /// RDMA CM reported the connection down (or another event that ends it).
    Cm(CmEventKind),
    /// Nothing within the timeout.
    Timeout,
}

impl Broken {
    fn to_json(&self) -> Value {
        match self {
            Broken::Wc { op, status } => json!({ "wc_op": op, "wc_status": status }),
            Broken::Cm(kind) => json!({ "cm_event": format!("{kind:?}") }),
            Broken::Timeout => json!({ "timeout": true }),
        }
    }
}

/// What the target answered to a connect request.
enum Opened {
    Established { queue: Box<HostQueue>, crqsize: Option<u16> },
    Rejected { cm_status: i32, private_data: Vec<u8> },
    Failed { event: CmEventKind, cm_status: i32 },
}

/// One host queue pair with the memory its commands use. Fields drop in order: the QP (with its CM id) before
/// the regions it named.
struct HostQueue {
    qp: QueuePair,
    cq: CompletionQueue,
    recv: MemoryRegion,
    send: MemoryRegion,
    data: MemoryRegion,
    channel: EventChannel,
    next_cid: u16,
    disconnected: bool,
}

fn status_json(s: Status) -> Value {
    json!({
        "sct": s.sct() as u8,
        "sc": s.sc(),
        "dnr": s.dnr(),
        "name": s.name().map_or_else(|| format!("sct {:#x} sc {:#04x}", s.sct() as u8, s.sc()), str::to_string),
    })
}

/// Wait for the next RDMA CM event on `channel` that is not a time-wait exit of an earlier connection.
fn next_event(channel: &EventChannel, timeout: Duration) -> Result<Option<CmEvent>, ProbeError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match channel.wait(left)? {
            Some(ev) if ev.kind == CmEventKind::TimewaitExit => continue,
            Some(ev) => return Ok(Some(ev)),
            None => continue,
        }
    }
}

fn expect_event(channel: &EventChannel, kind: CmEventKind) -> Result<(), ProbeError> {
    match next_event(channel, TIMEOUT)? {
        Some(ev) if ev.kind == kind => Ok(()),
        Some(ev) => Err(ProbeError(format!("expected {kind:?}, got {:?} (status {})", ev.kind, ev.status))),
        None => Err(ProbeError(format!("no {kind:?} within {TIMEOUT:?}"))),
    }
}

/// Resolve `addr`, create a queue pair and its memory, and connect with `private_data`.
/// `send_capacity` bytes of capsule memory ([`SEND_CAPACITY`], or more for an oversize capsule).
fn open(addr: SocketAddr, private_data: &[u8], send_capacity: usize) -> Result<Opened, ProbeError> {
    let channel = EventChannel::new()?;
    let mut id = CmId::new(&channel)?;
    id.resolve_addr(None, addr, Duration::from_secs(2))?;
    expect_event(&channel, CmEventKind::AddrResolved)?;
    id.resolve_route(Duration::from_secs(2))?;
    expect_event(&channel, CmEventKind::RouteResolved)?;
    let device = id.device()?;
    let attrs = device.query()?;
    let pd = device.alloc_pd()?;
    let slots = u32::from(QUEUE_ENTRIES);
    let cq = device.create_cq(2 * slots + 16, None, 0)?;
    let caps =
        QpCapabilities { max_send_wr: 16, max_recv_wr: slots, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInitAttr { send_cq: &cq, recv_cq: &cq, srq: None, caps, sq_sig_all: false };
    let qp = QueuePair::create(id, &pd, &init).map_err(|(_, e)| e)?;
    let recv =
        pd.register(vec![0u8; RECV_SLOT * usize::from(QUEUE_ENTRIES)].into_boxed_slice(), AccessFlags::LOCAL_WRITE)?;
    let send = pd.register(vec![0u8; send_capacity].into_boxed_slice(), AccessFlags::NONE)?;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let data = pd.register(vec![0u8; DATA_CAPACITY].into_boxed_slice(), remote)?;
    let mut queue = HostQueue { qp, cq, recv, send, data, channel, next_cid: 1, disconnected: false };
    for slot in 0..usize::from(QUEUE_ENTRIES) {
        queue.post_recv_slot(slot)?;
    }

    // RDMA READs the target may issue against our memory at once (Linux offers the device's maximum).
    let rd = u8::try_from(attrs.max_qp_rd_atom.min(attrs.max_qp_init_rd_atom).min(16)).unwrap_or(1);
    let param = ConnParam { private_data, responder_resources: rd, initiator_depth: rd, ..ConnParam::default() };
    queue.qp.cm_id_mut().connect(&param)?;
    let Some(ev) = next_event(&queue.channel, TIMEOUT)? else {
        return Err(ProbeError(format!("no answer to the connect request within {TIMEOUT:?}")));
    };
    Ok(match ev.kind {
        CmEventKind::Established => {
            let crqsize = ev.nvme_accept().ok().map(|a: RdmaCmAccept| a.crqsize);
            Opened::Established { queue: Box::new(queue), crqsize }
        }
        CmEventKind::Rejected => {
            Opened::Rejected { cm_status: ev.status, private_data: ev.private_data.as_bytes().to_vec() }
        }
        kind => Opened::Failed { event: kind, cm_status: ev.status },
    })
}

/// Connect with well-formed private data for queue `qid`; anything but an accept is a probe error.
fn open_queue(addr: SocketAddr, qid: u16, send_capacity: usize) -> Result<(HostQueue, Option<u16>), ProbeError> {
    let request = RdmaCmRequest { qid, hrqsize: QUEUE_ENTRIES, hsqsize: QUEUE_ENTRIES - 1, cntlid: 0 };
    match open(addr, &request.to_bytes(), send_capacity)? {
        Opened::Established { queue, crqsize } => Ok((*queue, crqsize)),
        Opened::Rejected { cm_status, private_data } => Err(ProbeError(format!(
            "connect rejected: CM status {cm_status}, private data {:02x?}",
            &private_data[..private_data.len().min(4)]
        ))),
        Opened::Failed { event, cm_status } => Err(ProbeError(format!("connect failed: {event:?} ({cm_status})"))),
    }
}

impl HostQueue {
    fn post_recv_slot(&mut self, slot: usize) -> Result<(), ProbeError> {
        let len = u32::try_from(RECV_SLOT).unwrap_or(u32::MAX);
        let sge = [self.recv.sge(slot * RECV_SLOT, len)?];
        let wr = [RecvWr { wr_id: u64::try_from(slot).unwrap_or(0), sges: &sge }];
        // SAFETY: `recv` is a field of `self` and outlives `qp` (dropped first); it is read (read_at, volatile)
        // only after this receive's completion is polled.
        unsafe { self.qp.post_recv(&wr)? };
        Ok(())
    }

    /// A keyed SGL descriptor for `len` bytes at the start of the data region.
    fn keyed(&self, len: u32) -> Result<SglDescriptor, ProbeError> {
        let (address, key) = self.data.remote(0, usize::try_from(len).unwrap_or(usize::MAX))?;
        Ok(SglDescriptor::KeyedDataBlock { address, length: len, key, subtype: SglSubtype::Address })
    }

    /// SEND `sqe` (with the next command identifier) followed by `extra` bytes (in-capsule data, or junk for an
    /// oversize capsule); returns the command identifier. The caller polls the SEND's completion before the next.
    fn post(&mut self, mut sqe: SubmissionQueueEntry, extra: usize) -> Result<u16, ProbeError> {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        sqe.cid = cid;
        if sqe.dptr == [0; 16] {
            // No data: a null keyed SGL (address, length and key 0), as Linux sends it; NVMe/RDMA targets
            // refuse a zeroed data block descriptor (it would claim in-host memory by address).
            let null = SglDescriptor::KeyedDataBlock { address: 0, length: 0, key: 0, subtype: SglSubtype::Address };
            sqe.set_sgl1(&null)?;
        }
        self.send.write_at(0, &sqe.to_bytes())?;
        let len = u32::try_from(SQE_SIZE + extra).map_err(|_| ProbeError("capsule too large".into()))?;
        let sge = [self.send.sge(0, len)?];
        let wr = [SendWr::new(WR_SEND, SendOpcode::Send, &sge)];
        // SAFETY: `send` outlives `qp` (field order) and is not written again before this SEND's completion is
        // polled (exec waits for it; `hold` never writes it again) or the queue pair is destroyed.
        unsafe { self.qp.post_send(&wr)? };
        Ok(cid)
    }

    /// [`post`](Self::post) `sqe` and wait for its send completion and its response. `Ok(Err(..))` when the
    /// queue broke instead.
    fn exec(
        &mut self,
        sqe: SubmissionQueueEntry,
        extra: usize,
    ) -> Result<Result<CompletionQueueEntry, Broken>, ProbeError> {
        if self.disconnected {
            return Ok(Err(Broken::Cm(CmEventKind::Disconnected)));
        }
        let cid = self.post(sqe, extra)?;
        let mut sent = false;
        let mut response = None;
        let deadline = Instant::now() + TIMEOUT;
        let mut wcs = [WorkCompletion::default(); 16];
        loop {
            let n = self.cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                let op = if wc.wr_id == WR_SEND { "send" } else { "recv" };
                if !wc.is_success() {
                    return Ok(Err(Broken::Wc { op, status: wc.status.name().to_string() }));
                }
                if wc.wr_id == WR_SEND {
                    sent = true;
                    continue;
                }
                let slot = usize::try_from(wc.wr_id).unwrap_or(0);
                let mut b = [0u8; CQE_SIZE];
                self.recv.read_at(slot * RECV_SLOT, &mut b)?;
                self.post_recv_slot(slot)?;
                let cqe = CompletionQueueEntry::parse(&b)?;
                if cqe.cid == cid {
                    response = Some(cqe);
                }
            }
            if let (true, Some(cqe)) = (sent, response) {
                return Ok(Ok(cqe));
            }
            if let Some(ev) = self.channel.get_event()? {
                if ev.kind != CmEventKind::TimewaitExit {
                    self.disconnected = true;
                    return Ok(Err(Broken::Cm(ev.kind)));
                }
            }
            if Instant::now() > deadline {
                return Ok(Err(Broken::Timeout));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Fabrics Connect for `qid` with the Connect data under `key` (the data region's rkey, or a wrong one).
    fn fabrics_connect(
        &mut self,
        subnqn: &str,
        hostnqn: &str,
        qid: u16,
        cntlid: u16,
        wrong_key: bool,
    ) -> Result<Result<CompletionQueueEntry, Broken>, ProbeError> {
        let data = ConnectData {
            hostid: host_id_of(hostnqn),
            cntlid,
            subnqn: Nqn::new(subnqn).map_err(|e| ProbeError(format!("--subnqn {subnqn}: {}", e.reason())))?,
            hostnqn: Nqn::new(hostnqn).map_err(|e| ProbeError(format!("--hostnqn {hostnqn}: {}", e.reason())))?,
        };
        self.data.write_at(0, &data.to_bytes())?;
        let mut sgl1 = self.keyed(CONNECT_DATA_LEN)?;
        if wrong_key {
            sgl1 = corrupt_key(sgl1);
        }
        // No keep-alive: only the transport's teardown may end the controller.
        let sqe = Connect { qid, sqsize: QUEUE_ENTRIES - 1, cattr: 0, kato: 0, sgl1 }.to_sqe()?;
        self.exec(sqe, 0)
    }

    fn property_get_cap(&mut self) -> Result<Result<CompletionQueueEntry, Broken>, ProbeError> {
        self.exec(PropertyGet { size: PropertySize::Eight, offset: Property::Cap.offset() }.to_sqe(), 0)
    }

    /// Property Set CC.EN and wait (bounded by CAP.TO) for CSTS.RDY, so that admin commands execute.
    fn enable(&mut self) -> Result<(), ProbeError> {
        let expect = |what: &str, r: Result<CompletionQueueEntry, Broken>| match r {
            Ok(cqe) if cqe.status.is_success() => Ok(cqe),
            Ok(cqe) => Err(ProbeError(format!("{what}: {}", cqe.status))),
            Err(b) => Err(ProbeError(format!("{what}: queue broke: {b:?}"))),
        };
        let cap = Capabilities::from_u64(expect("Property Get CAP", self.property_get_cap()?)?.result64());
        let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
        let set = PropertySet { size: PropertySize::Four, offset: Property::Cc.offset(), value: cc.to_u32().into() };
        expect("Property Set CC.EN", self.exec(set.to_sqe(), 0)?)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(cap.timeout_ms()).max(1000));
        loop {
            let get = PropertyGet { size: PropertySize::Four, offset: Property::Csts.offset() };
            let csts = expect("Property Get CSTS", self.exec(get.to_sqe(), 0)?)?;
            if ControllerStatus::from_u32(csts.dw0)?.rdy {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ProbeError("CSTS.RDY did not follow CC.EN within CAP.TO".into()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Disconnect and wait (bounded) for RDMA CM to confirm.
    fn close(mut self) -> Result<(), ProbeError> {
        if !self.disconnected {
            self.qp.cm_id_mut().disconnect()?;
            if let Some(ev) = next_event(&self.channel, DISCONNECT_WAIT)? {
                if ev.kind != CmEventKind::Disconnected {
                    return Err(ProbeError(format!("disconnect: got {:?}", ev.kind)));
                }
            }
        }
        Ok(())
    }

    /// After a broken command: whether the target's disconnect arrives within [`DISCONNECT_WAIT`] (`false`
    /// when nothing, or another RDMA CM event, arrived).
    fn wait_disconnected(&mut self) -> Result<bool, ProbeError> {
        if !self.disconnected {
            if let Some(ev) = next_event(&self.channel, DISCONNECT_WAIT)? {
                self.disconnected = true;
                return Ok(ev.kind == CmEventKind::Disconnected);
            }
        }
        Ok(self.disconnected)
    }
}

/// The same descriptor under an rkey the host never registered.
fn corrupt_key(sgl: SglDescriptor) -> SglDescriptor {
    match sgl {
        SglDescriptor::KeyedDataBlock { address, length, key, subtype } => {
            SglDescriptor::KeyedDataBlock { address, length, key: key ^ 0x00a5_5a00, subtype }
        }
        other => other,
    }
}

#[derive(Debug)]
struct Options {
    addr: SocketAddr,
    subnqn: String,
    hostnqn: String,
}

const USAGE: &str = "usage: nvmf-rdma-probe [--addr IP:PORT] [--subnqn NQN] [--hostnqn NQN] COMMAND
  reject --case recfmt|qid|hsqsize|hrqsize|short
  admin-connect
  io --before-connect [--qid N]
  bad-keyed-sgl --case rkey|rkey-read|length|write-length
  oversize-capsule [--size BYTES]
  cycles N
  hold [--seconds S]
  stall [--seconds S]
  silent [--qid N] [--seconds S] [--count N]
  impostor --key DHHC-1:...";

fn run(args: &[String]) -> Result<Value, ProbeError> {
    let addr = std::env::var("NVMF_RDMA_ADDR").unwrap_or_else(|_| "10.77.0.1".into());
    let mut o = Options {
        addr: format!("{addr}:4420").parse().map_err(|e| ProbeError(format!("NVMF_RDMA_ADDR {addr}: {e}")))?,
        subnqn: DEFAULT_SUBNQN.into(),
        hostnqn: DEFAULT_HOSTNQN.into(),
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| ProbeError(format!("{name} needs a value")));
        match a.as_str() {
            "--addr" => {
                let v = value("--addr")?;
                o.addr = v.parse().map_err(|e| ProbeError(format!("--addr {v}: {e}")))?;
            }
            "--subnqn" => o.subnqn = value("--subnqn")?,
            "--hostnqn" => o.hostnqn = value("--hostnqn")?,
            "--case" | "--qid" | "--size" | "--seconds" | "--count" | "--key" => {
                rest.push(a.clone());
                rest.push(value(a)?);
            }
            _ => rest.push(a.clone()),
        }
    }
    let flag = |name: &str| rest.iter().position(|a| a == name).and_then(|i| rest.get(i + 1)).map(String::as_str);
    let number = |name: &str, default: u64| -> Result<u64, ProbeError> {
        flag(name).map_or(Ok(default), |v| v.parse().map_err(|e| ProbeError(format!("{name} {v}: {e}"))))
    };
    let case = || flag("--case").ok_or_else(|| ProbeError("--case is required".into()));
    match rest.first().map(String::as_str) {
        Some("reject") => reject(&o, case()?),
        Some("admin-connect") => admin_connect(&o),
        Some("io") if rest.iter().any(|a| a == "--before-connect") => {
            let qid = u16::try_from(number("--qid", 1)?).map_err(|_| ProbeError("--qid: 0..=65535".into()))?;
            io_before_connect(&o, qid)
        }
        Some("bad-keyed-sgl") => bad_keyed_sgl(&o, case()?),
        Some("oversize-capsule") => {
            let size = flag("--size").map(|_| number("--size", 0)).transpose()?;
            oversize_capsule(&o, size.map(|s| usize::try_from(s).unwrap_or(usize::MAX)))
        }
        Some("cycles") => {
            let n = rest.get(1).and_then(|n| n.parse().ok()).ok_or_else(|| ProbeError("cycles N".into()))?;
            cycles(&o, n)
        }
        Some("hold") => hold(&o, number("--seconds", 600)?),
        Some("impostor") => impostor(&o, flag("--key").ok_or_else(|| ProbeError("--key is required".into()))?),
        Some("stall") => stall(&o, number("--seconds", 60)?),
        Some("silent") => {
            let qid = u16::try_from(number("--qid", 1)?).map_err(|_| ProbeError("--qid: 0..=65535".into()))?;
            match number("--count", 1)? {
                1 => silent(&o, qid, number("--seconds", 60)?),
                n => silent_many(&o, qid, number("--seconds", 60)?, n),
            }
        }
        _ => Err(ProbeError(USAGE.into())),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}", json!({ "outcome": "probe_error", "error": e.0 }));
            ExitCode::FAILURE
        }
    }
}
