//! [`BareAdmin`]: an NVMe/RDMA admin queue brought up by hand on a bare [`RdmaQueue`] — Fabrics Connect
//! (KATO 0: no keep-alive to send), Property Get CAP, Property Set CC.EN and the wait for CSTS.RDY within
//! CAP.TO, Identify Controller — and the few admin commands a tool needs next (namespace scan, Number of
//! Queues), plus the Fabrics Connect of bare I/O queues. For `perf -t rdma` and tests until
//! [`crate::Controller`] drives RDMA queues itself.
//!
//! Runs on the caller's thread; every command waits at most the I/O timeout of the [`ConnectOptions`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::CNTLID_DYNAMIC;
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertyGet, PropertySet,
};
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, IDENTIFY_DATA_SIZE,
};
use nvmf_common::nvme::SubmissionQueueEntry;

use super::{RdmaQueue, RdmaQueueOptions};
use crate::controller::{connect_request, connect_response, ConnectOptions, NamespaceInfo};
use crate::error::HostError;
use crate::tcp::{Completion, DataDirection, Request};

/// Admin queue depth (SQSIZE 31, as Linux).
const ADMIN_DEPTH: u16 = 31;

/// Submit `request` on `queue` and poll until it completes (bounded by `timeout`); the completion, whatever
/// its status.
pub fn execute<T>(
    queue: &mut RdmaQueue<T>,
    request: Request<T>,
    timeout: Duration,
) -> Result<Completion<T>, HostError> {
    let qid = queue.qid();
    queue.submit(request).map_err(|r| r.error)?;
    let deadline = Instant::now() + timeout;
    loop {
        queue.poll(Some(Duration::from_millis(100)))?;
        if let Some(c) = queue.next_completion() {
            return Ok(c);
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout { what: format!("a command on queue {qid}"), after: timeout });
        }
    }
}

/// Fabrics Connect on a fresh bare queue; returns the CNTLID.
pub fn fabrics_connect<T: Default>(
    queue: &mut RdmaQueue<T>,
    options: &ConnectOptions,
    subnqn: &str,
    sqsize: u16,
    cntlid: u16,
) -> Result<u16, HostError> {
    let qid = queue.qid();
    let request = connect_request(qid, options, subnqn, sqsize, cntlid, 0, T::default())?;
    let c = execute(queue, request, options.connect_timeout)?;
    connect_response(qid, &c.result?)
}

/// An enabled controller's admin queue and what bring-up learnt (see the module docs).
#[derive(Debug)]
pub struct BareAdmin {
    queue: RdmaQueue<()>,
    addr: SocketAddr,
    subnqn: String,
    options: ConnectOptions,
    /// The controller ID granted by Connect.
    pub cntlid: u16,
    /// CAP.
    pub cap: Capabilities,
    /// Largest transfer (MDTS), `None` when unlimited.
    pub max_transfer: Option<u32>,
    /// In-capsule data bytes an I/O command may carry (IOCCSZ * 16 - 64).
    pub in_capsule_data: u32,
    /// Number of namespaces (NN).
    pub nn: u32,
    /// Whether I/O queues connected from now on bind a memory window per command (when the device has them;
    /// default true). False gives the fallback: one region per slot and direction, keyed for the queue's life.
    pub memory_windows: bool,
}

impl BareAdmin {
    /// Connect the admin queue and enable the controller.
    pub fn connect(addr: SocketAddr, subnqn: &str, options: &ConnectOptions) -> Result<Self, HostError> {
        let qopts = RdmaQueueOptions {
            qid: 0,
            depth: ADMIN_DEPTH,
            in_capsule_limit: 0,
            cntlid: CNTLID_DYNAMIC,
            memory_windows: true,
            connect_timeout: options.connect_timeout,
            command_timeout: options.io_timeout,
        };
        let mut queue = RdmaQueue::connect(addr, &qopts)?;
        let cntlid = fabrics_connect(&mut queue, options, subnqn, ADMIN_DEPTH, CNTLID_DYNAMIC)?;
        let mut admin = BareAdmin {
            queue,
            addr,
            subnqn: subnqn.to_string(),
            options: options.clone(),
            cntlid,
            cap: Capabilities::from_u64(0),
            max_transfer: None,
            in_capsule_data: 0,
            nn: 0,
            memory_windows: true,
        };
        admin.cap = Capabilities::from_u64(admin.property_get(Property::Cap)?);
        let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
        let sqe =
            PropertySet { size: Property::Cc.size(), offset: Property::Cc.offset(), value: u64::from(cc.to_u32()) }
                .to_sqe();
        admin.command("Property Set CC", sqe, DataDirection::None, Vec::new())?;
        let within = Duration::from_millis(u64::from(admin.cap.timeout_ms().max(500)));
        let deadline = Instant::now() + within;
        loop {
            let v = u32::try_from(admin.property_get(Property::Csts)? & 0xFFFF_FFFF).unwrap_or(0);
            let csts = ControllerStatus::from_u32(v).map_err(|e| HostError::wire("CSTS", e))?;
            if csts.cfs {
                return Err(HostError::Controller("CSTS.CFS set while waiting for RDY".into()));
            }
            if csts.rdy {
                break;
            }
            if Instant::now() >= deadline {
                return Err(HostError::Timeout {
                    what: format!("CSTS.RDY after CC.EN (last {csts:?})"),
                    after: within,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
        let c =
            admin.command("Identify Controller", sqe, DataDirection::ControllerToHost, vec![0; IDENTIFY_DATA_SIZE])?;
        let id = IdentifyController::parse(&c.data).map_err(|e| HostError::wire("Identify Controller", e))?;
        let page = 1u64 << (12 + u32::from(admin.cap.mpsmin));
        admin.max_transfer =
            (id.mdts != 0).then(|| u32::try_from(page << u32::from(id.mdts).min(20)).unwrap_or(u32::MAX));
        admin.in_capsule_data = id.ioccsz.saturating_mul(16).saturating_sub(64);
        admin.nn = id.nn;
        Ok(admin)
    }

    /// The admin queue (for commands this type has no helper for).
    pub fn queue(&mut self) -> &mut RdmaQueue<()> {
        &mut self.queue
    }

    /// Run one admin command; a non-success status is [`HostError::Status`].
    pub fn command(
        &mut self,
        command: &'static str,
        sqe: SubmissionQueueEntry,
        direction: DataDirection,
        data: Vec<u8>,
    ) -> Result<Completion<()>, HostError> {
        let c = execute(&mut self.queue, Request { sqe, data, direction, context: () }, self.options.io_timeout)?;
        match &c.result {
            Ok(cqe) if cqe.status.is_success() => Ok(c),
            Ok(cqe) => Err(HostError::Status { command, status: cqe.status }),
            Err(e) => Err(e.clone()),
        }
    }

    /// Property Get.
    pub fn property_get(&mut self, p: Property) -> Result<u64, HostError> {
        let sqe = PropertyGet { size: p.size(), offset: p.offset() }.to_sqe();
        let c = self.command("Property Get", sqe, DataDirection::None, Vec::new())?;
        Ok(c.result.map(|cqe| cqe.result64()).unwrap_or_default())
    }

    /// The active namespaces (Identify CNS 02h, then CNS 00h each).
    pub fn namespaces(&mut self) -> Result<Vec<NamespaceInfo>, HostError> {
        let c2h = DataDirection::ControllerToHost;
        let sqe = Identify::new(cns::ACTIVE_NAMESPACE_ID_LIST, 0).to_sqe();
        let list = self.command("Identify (Active Namespace ID list)", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])?;
        let nsids: Vec<u32> = ActiveNamespaceIdList::parse(&list.data)
            .map_err(|e| HostError::wire("Active Namespace ID list", e))?
            .iter()
            .collect();
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let sqe = Identify::new(cns::NAMESPACE, nsid).to_sqe();
            let r = self.command("Identify Namespace", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])?;
            let ns = IdentifyNamespace::parse(&r.data).map_err(|e| HostError::wire("Identify Namespace", e))?;
            let block_size = ns.lba_data_size().map_err(|e| HostError::wire("Identify Namespace LBA format", e))?;
            out.push(NamespaceInfo { nsid, block_size, blocks: ns.nsze, nguid: ns.nguid, uuid: None });
        }
        Ok(out)
    }

    /// Set Features Number of Queues: ask for `count` I/O queue pairs; returns how many are granted.
    pub fn set_io_queues(&mut self, count: u16) -> Result<u16, HostError> {
        let want = u32::from(count);
        let nq = NumberOfQueues::with_counts(want, want).map_err(|e| HostError::wire("Number of Queues", e))?;
        let c = self.command(
            "Set Features (Number of Queues)",
            SetFeatures::new(&nq).to_sqe(),
            DataDirection::None,
            Vec::new(),
        )?;
        let got = NumberOfQueues::from_dw0(c.result.map(|cqe| cqe.dw0).unwrap_or_default());
        let granted = got.submission_queues().min(got.completion_queues()).min(want);
        Ok(u16::try_from(granted).unwrap_or(count))
    }

    /// Connect I/O queue `qid` of this association as a bare queue of `depth` commands (SQSIZE `depth`).
    pub fn connect_io_queue<T: Default>(&self, qid: u16, depth: u16) -> Result<RdmaQueue<T>, HostError> {
        let qopts = RdmaQueueOptions {
            qid,
            depth,
            in_capsule_limit: self.in_capsule_data,
            cntlid: self.cntlid,
            memory_windows: self.memory_windows,
            connect_timeout: self.options.connect_timeout,
            command_timeout: self.options.io_timeout,
        };
        let mut queue = RdmaQueue::connect(self.addr, &qopts)?;
        fabrics_connect(&mut queue, &self.options, &self.subnqn, depth, self.cntlid)?;
        Ok(queue)
    }

    /// Disconnect the admin queue (the controller tears the association down).
    pub fn close(mut self) {
        self.queue.close();
    }
}
