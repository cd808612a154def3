//! Unit tests of the controller: a target with memory (and file) namespaces, queues driven with SQEs built by
//! `nvmf-common`'s views, and a real [`IoEngine`] (memory storage completes without the kernel; files go
//! through io_uring).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{Connect, ConnectData, ConnectResponse, InvalidParameter, CNTLID_DYNAMIC};
use nvmf_common::fabrics::disconnect::Disconnect;
use nvmf_common::fabrics::discovery::{
    AddressFamily, DiscoveryLogPage, SubsystemType, TcpSecurityType, TransportType, Tsas, HEADER_SIZE,
};
use nvmf_common::fabrics::nqn::{Nqn, DISCOVERY_NQN};
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, PropertyGet, PropertySet, PropertySize,
    ShutdownNotification, ShutdownStatus, Version,
};
use nvmf_common::nvme::admin::{AsyncEvent, AsyncEventRequest, KeepAlive};
use nvmf_common::nvme::features::{
    fid, AsyncEventConfiguration, Feature, GetFeatures, KeepAliveTimer, NumberOfQueues, SetFeatures, VolatileWriteCache,
};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, NamespaceIdentificationDescriptor,
};
use nvmf_common::nvme::io::{Compare, DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes};
use nvmf_common::nvme::log_page::{
    lid, ChangedNamespaceList, ChangedNamespaces, CommandsSupportedAndEffects, ErrorInformationEntry, GetLogPage,
    SmartLog,
};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};

use super::queue::set_turn_time;
use super::subsystem::CNTLID_RANGE;
use super::*;
use crate::backend::{EngineConfig, IoEngine, Storage, StorageSpec};

const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:test";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";
const HOSTID: [u8; 16] = [7; 16];
const NS_SIZE: u64 = 1 << 20;
const BLOCK: u32 = 512;
const IN_CAPSULE: u32 = 8192;

fn engine_with(buffers: usize) -> IoEngine {
    IoEngine::new(&EngineConfig {
        ring_entries: 32,
        buffer_size: 1 << 20,
        buffer_count: buffers,
        small_buffer_size: 64 << 10,
        small_buffer_count: 0,
        max_files: 4,
    })
    .expect("io_uring engine")
}

fn engine() -> IoEngine {
    engine_with(16)
}

fn memory(size: u64, block_size: u32) -> Arc<Storage> {
    Arc::new(Storage::open(&StorageSpec::Memory { size, block_size }).unwrap())
}

fn listener() -> ListenerParams {
    ListenerParams {
        port_id: 1,
        trtype: TransportType::Tcp,
        adrfam: AddressFamily::Ipv4,
        traddr: "0.0.0.0".to_owned(),
        trsvcid: "4420".to_owned(),
        tsas: Tsas::Tcp { sectype: TcpSecurityType::None },
    }
}

fn target_params() -> TargetParams {
    TargetParams { mdts: 128 << 10, listeners: vec![listener()], ..TargetParams::default() }
}

fn subsystem_params() -> SubsystemParams {
    SubsystemParams {
        namespaces: vec![NamespaceParams::new(1, memory(NS_SIZE, BLOCK))],
        serial: "SN123".to_owned(),
        model: "nvmf-rs test".to_owned(),
        ..SubsystemParams::new(SUBNQN)
    }
}

fn target() -> Arc<Target> {
    Target::new(target_params(), vec![subsystem_params()]).unwrap()
}

fn transport_data(len: u32) -> SglDescriptor {
    SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific }
}

fn in_capsule(len: u32) -> SglDescriptor {
    SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset }
}

fn with_sgl(mut sqe: SubmissionQueueEntry, sgl: SglDescriptor) -> SubmissionQueueEntry {
    sqe.set_sgl1(&sgl).unwrap();
    sqe
}

/// A queue and the host side of it: builds and submits commands, carries out the steps, completes storage I/O.
struct Host {
    queue: Queue,
    key: u64,
    next_cid: u16,
}

/// The outcome of a command.
#[derive(Debug)]
struct Done {
    cqe: CompletionQueueEntry,
    data: Vec<u8>,
}

impl Done {
    fn status(&self) -> Status {
        self.cqe.status
    }

    fn ok(self) -> Self {
        assert!(self.cqe.status.is_success(), "command failed: {}", self.cqe.status);
        self
    }
}

static NEXT_KEY: AtomicUsize = AtomicUsize::new(1);

impl Host {
    fn new(target: &Arc<Target>) -> Self {
        let key = u64::try_from(NEXT_KEY.fetch_add(1, Ordering::Relaxed)).unwrap();
        Host { queue: Queue::new(Arc::clone(target), TransportInfo::tcp(1, IN_CAPSULE, key)), key, next_cid: 1 }
    }

    /// Submit `sqe` with `in_capsule` data; `host_data` answers a FetchData. `None` if the command is held.
    fn submit(
        &mut self,
        engine: &mut IoEngine,
        mut sqe: SubmissionQueueEntry,
        in_capsule: &[u8],
        host_data: &[u8],
    ) -> Option<Done> {
        sqe.cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        let step = self.queue.command(engine, &sqe, in_capsule).expect("command accepted");
        let done = self.drive(engine, step, host_data);
        if let Some(d) = &done {
            assert_eq!(d.cqe.cid, sqe.cid);
        }
        done
    }

    fn run(&mut self, engine: &mut IoEngine, sqe: SubmissionQueueEntry) -> Done {
        self.submit(engine, sqe, &[], &[]).expect("command completes")
    }

    fn drive(&mut self, engine: &mut IoEngine, mut step: Step, host_data: &[u8]) -> Option<Done> {
        for _ in 0..10_000 {
            match step {
                Step::FetchData { slot, buffer, len, .. } => {
                    let len = len as usize;
                    engine.buffer_mut(buffer)[..len].copy_from_slice(&host_data[..len]);
                    step = self.queue.data_received(engine, slot).unwrap();
                }
                Step::Respond { slot, cqe, data } => {
                    let data = data.map(|(b, n)| engine.buffer(b)[..n as usize].to_vec()).unwrap_or_default();
                    self.queue.release(engine, slot);
                    return Some(Done { cqe, data });
                }
                Step::Pending => {
                    if self.queue.in_flight() == 0 {
                        let mut out = Vec::new();
                        self.queue.poll(engine, Instant::now(), &mut out).unwrap();
                        match out.pop() {
                            Some(s) => step = s,
                            None => return None,
                        }
                        continue;
                    }
                    engine.submit().unwrap();
                    let mut completions = Vec::new();
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while completions.is_empty() {
                        engine.reap(|c| completions.push(c));
                        assert!(Instant::now() < deadline, "storage op never completed");
                    }
                    for c in completions {
                        let (key, slot) = split_storage_tag(c.tag);
                        assert_eq!(key, self.key);
                        let s = self.queue.io_completed(engine, slot, c.result);
                        if s != Step::Pending {
                            step = s;
                        }
                    }
                }
            }
        }
        panic!("command never completed");
    }

    fn connect(
        &mut self,
        engine: &mut IoEngine,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
    ) -> Done {
        self.connect_with(engine, qid, sqsize, cntlid, subnqn, hostnqn, HOSTID, 5000)
    }

    #[allow(clippy::too_many_arguments)]
    fn connect_with(
        &mut self,
        engine: &mut IoEngine,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
        hostid: [u8; 16],
        kato: u32,
    ) -> Done {
        let connect = Connect { qid, sqsize, cattr: 0, kato, sgl1: in_capsule(1024) };
        let data =
            ConnectData { hostid, cntlid, subnqn: Nqn::new(subnqn).unwrap(), hostnqn: Nqn::new(hostnqn).unwrap() };
        self.submit(engine, connect.to_sqe().unwrap(), &data.to_bytes(), &[]).unwrap()
    }

    fn property_get(&mut self, engine: &mut IoEngine, offset: u32, size: PropertySize) -> Done {
        self.run(engine, PropertyGet { size, offset }.to_sqe())
    }

    fn property_set(&mut self, engine: &mut IoEngine, offset: u32, value: u64) -> Done {
        self.run(engine, PropertySet { size: PropertySize::Four, offset, value }.to_sqe())
    }

    fn enable(&mut self, engine: &mut IoEngine) {
        let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..Default::default() };
        self.property_set(engine, 0x14, cc.to_u32().into()).ok();
    }

    fn identify(&mut self, engine: &mut IoEngine, cns: u8, nsid: u32) -> Done {
        self.run(engine, with_sgl(Identify::new(cns, nsid).to_sqe(), transport_data(4096)))
    }

    fn log_page(&mut self, engine: &mut IoEngine, glp: GetLogPage) -> Done {
        let len = u32::try_from(glp.length_bytes()).unwrap();
        self.run(engine, with_sgl(glp.to_sqe(), transport_data(len)))
    }

    fn read(&mut self, engine: &mut IoEngine, nsid: u32, slba: u64, blocks: u32) -> Done {
        let read = Read { nsid, slba, nlb: u16::try_from(blocks - 1).unwrap(), ..Default::default() };
        self.run(engine, with_sgl(read.to_sqe(), transport_data(blocks * BLOCK)))
    }

    fn write(&mut self, engine: &mut IoEngine, nsid: u32, slba: u64, data: &[u8]) -> Done {
        let blocks = u32::try_from(data.len()).unwrap() / BLOCK;
        let write = Write { nsid, slba, nlb: u16::try_from(blocks - 1).unwrap(), ..Default::default() };
        let sqe = with_sgl(write.to_sqe(), transport_data(blocks * BLOCK));
        self.submit(engine, sqe, &[], data).unwrap()
    }
}

/// An enabled admin queue and one I/O queue of the same controller.
struct Association {
    target: Arc<Target>,
    engine: IoEngine,
    admin: Host,
    io: Host,
    cntlid: u16,
}

fn associate(target: Arc<Target>) -> Association {
    let mut engine = engine();
    let mut admin = Host::new(&target);
    let done = admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    let done = io.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    assert_eq!(ConnectResponse::from_dw0(done.cqe.dw0).cntlid, cntlid);
    Association { target, engine, admin, io, cntlid }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| u8::try_from(i % 251).unwrap() ^ seed).collect()
}

// -------------------------------------------------------------------------------------------------------------
// Connect
// -------------------------------------------------------------------------------------------------------------

#[test]
fn connect_admin_then_io_queues() {
    let mut a = associate(target());
    assert!(CNTLID_RANGE.contains(&a.cntlid));
    assert_eq!(a.admin.queue.qid(), Some(0));
    assert_eq!(a.admin.queue.sqsize(), 31);
    assert_eq!(a.io.queue.qid(), Some(1));
    assert_eq!(a.io.queue.sqsize(), 127);
    let controller = a.admin.queue.controller().unwrap();
    assert_eq!(controller.hostnqn(), HOSTNQN);
    assert_eq!(controller.hostid(), HOSTID);
    assert_eq!(controller.io_queue_count(), 1);
    // A second association gets another controller ID.
    let mut other = Host::new(&a.target);
    let done = other.connect(&mut a.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    assert_ne!(ConnectResponse::from_dw0(done.cqe.dw0).cntlid, a.cntlid);
    assert_eq!(done.cqe.sqid, 0);
}

#[test]
fn connect_data_fetched_through_the_transport() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    let connect = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) };
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: CNTLID_DYNAMIC,
        subnqn: Nqn::new(SUBNQN).unwrap(),
        hostnqn: Nqn::new(HOSTNQN).unwrap(),
    };
    let done = host.submit(&mut engine, connect.to_sqe().unwrap(), &[], &data.to_bytes()).unwrap().ok();
    assert!(CNTLID_RANGE.contains(&ConnectResponse::from_dw0(done.cqe.dw0).cntlid));
}

#[test]
fn connect_refusals() {
    let mut params = subsystem_params();
    params.allow_any_host = false;
    params.hosts = vec![HOSTNQN.to_owned()];
    let target = Target::new(target_params(), vec![params]).unwrap();
    let mut engine = engine();
    let data_ipo = |off| InvalidParameter::in_data(off).to_dw0();
    let sqe_ipo = |off| InvalidParameter::in_command(off).to_dw0();

    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr());
    assert_eq!(done.cqe.dw0, data_ipo(512));

    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, "nqn.2024-01.io.nvmf-rs:nope", HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, data_ipo(256));

    // SQSIZE above MQES (128 entries).
    let done = Host::new(&target).connect(&mut engine, 0, 128, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, sqe_ipo(44));

    // Admin queue must ask for a dynamic controller.
    let done = Host::new(&target).connect(&mut engine, 0, 31, 5, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, data_ipo(16));

    // KATO above the target's limit.
    let done = Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 700_000);
    assert_eq!(done.cqe.dw0, sqe_ipo(48));

    // A Connect whose SGL is not 1024 bytes.
    let mut host = Host::new(&target);
    let mut sqe = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: in_capsule(1024) }.to_sqe().unwrap();
    sqe.set_sgl1(&in_capsule(512)).unwrap();
    let done = host.submit(&mut engine, sqe, &[0; 512], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());

    // In-capsule data shorter than the SGL says.
    let sqe = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: in_capsule(1024) }.to_sqe().unwrap();
    let done = host.submit(&mut engine, sqe, &[0; 100], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());

    // Nothing connected: the queue still awaits Connect.
    assert_eq!(host.queue.qid(), None);
}

#[test]
fn io_queue_connect_refusals() {
    let target = target();
    let mut engine = engine();
    let mut admin = Host::new(&target);
    let cntlid =
        ConnectResponse::from_dw0(admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;

    // Before CC.EN.
    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    admin.enable(&mut engine);

    // Grant 2 I/O queues.
    let noq = NumberOfQueues::with_counts(2, 2).unwrap();
    let done = admin.run(&mut engine, SetFeatures::new(&noq).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0), noq);

    let ipo = |p: InvalidParameter| p.to_dw0();
    let done = Host::new(&target).connect(&mut engine, 3, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_command(42)));

    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid + 1, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(16)));

    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid, SUBNQN, OTHER_HOST);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(16)));

    let done = Host::new(&target).connect_with(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN, [9; 16], 0);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(0)));

    let done = Host::new(&target).connect(&mut engine, 1, 200, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_command(44)));

    let mut io = Host::new(&target);
    io.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN).ok();
    let done = Host::new(&target).connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());

    // Connect on a connected queue.
    let done = io.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
}

#[test]
fn commands_before_connect_are_sequence_errors() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    let seq = Status::COMMAND_SEQUENCE_ERROR.with_dnr();
    assert_eq!(host.identify(&mut engine, cns::CONTROLLER, 0).status(), seq);
    assert_eq!(host.read(&mut engine, 1, 0, 1).status(), seq);
    assert_eq!(host.property_get(&mut engine, 0, PropertySize::Eight).status(), seq);
    assert_eq!(host.run(&mut engine, KeepAlive.to_sqe()).status(), seq);
    // Still connectable afterwards.
    host.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
}

#[test]
fn queue_overrun_is_fatal() {
    let target = target();
    let mut engine = engine();
    let mut queue = Queue::new(Arc::clone(&target), TransportInfo::tcp(1, IN_CAPSULE, 99));
    let sqe = KeepAlive.to_sqe();
    // Responses never released: the slots stay busy.
    for _ in 0..4 {
        assert!(matches!(queue.command(&mut engine, &sqe, &[]), Ok(Step::Respond { .. })));
    }
    assert_eq!(queue.command(&mut engine, &sqe, &[]), Err(QueueError::QueueOverrun { capacity: 4 }));
}

// -------------------------------------------------------------------------------------------------------------
// Properties
// -------------------------------------------------------------------------------------------------------------

#[test]
fn properties_and_enable() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    host.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();

    let cap = Capabilities::from_u64(host.property_get(&mut engine, 0x00, PropertySize::Eight).ok().cqe.result64());
    assert_eq!(cap.mqes, 127);
    assert!(cap.cqr);
    assert_eq!(cap.css & Capabilities::CSS_NVM, Capabilities::CSS_NVM);
    assert_eq!(cap.mpsmin, 0);
    assert!(cap.to > 0);
    let vs = host.property_get(&mut engine, 0x08, PropertySize::Four).ok();
    assert_eq!(Version::from_u32(vs.cqe.dw0), Version::V1_3);
    // CAP read with the wrong width, an unknown offset, writing a read-only property.
    let invalid = Status::INVALID_FIELD.with_dnr();
    assert_eq!(host.property_get(&mut engine, 0x00, PropertySize::Four).status(), invalid);
    assert_eq!(host.property_get(&mut engine, 0x40, PropertySize::Four).status(), invalid);
    assert_eq!(host.property_set(&mut engine, 0x1C, 1).status(), invalid);

    // Identify before CC.EN.
    assert_eq!(host.identify(&mut engine, cns::CONTROLLER, 0).status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());

    // A bad configuration (IOSQES 7) sets CSTS.CFS, not RDY.
    let bad = ControllerConfiguration { en: true, iosqes: 7, iocqes: 4, ..Default::default() };
    host.property_set(&mut engine, 0x14, bad.to_u32().into()).ok();
    let csts = ControllerStatus::from_u32(host.property_get(&mut engine, 0x1C, PropertySize::Four).cqe.dw0).unwrap();
    assert!(csts.cfs && !csts.rdy);
    host.property_set(&mut engine, 0x14, 0).ok();

    host.enable(&mut engine);
    let cc = host.property_get(&mut engine, 0x14, PropertySize::Four).ok().cqe.dw0;
    assert!(ControllerConfiguration::from_u32(cc).unwrap().en);
    let csts = ControllerStatus::from_u32(host.property_get(&mut engine, 0x1C, PropertySize::Four).cqe.dw0).unwrap();
    assert!(csts.rdy && !csts.cfs);
    host.identify(&mut engine, cns::CONTROLLER, 0).ok();
}

#[test]
fn shutdown_sets_shst_complete() {
    let mut a = associate(target());
    let cc = ControllerConfiguration {
        en: true,
        iosqes: 6,
        iocqes: 4,
        shn: ShutdownNotification::Normal,
        ..Default::default()
    };
    a.admin.property_set(&mut a.engine, 0x14, cc.to_u32().into()).ok();
    let csts = a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(ControllerStatus::from_u32(csts.cqe.dw0).unwrap().shst, ShutdownStatus::Complete);
}

#[test]
fn shutdown_flushes_file_storage_through_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns1");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let storage = Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap());
    assert!(storage.volatile_write_cache());
    let mut params = subsystem_params();
    params.namespaces = vec![NamespaceParams::new(1, storage)];
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());
    // VWC is reported and a write then a flush of all namespaces go through the ring.
    let id = IdentifyController::parse(&a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok().data).unwrap().vwc;
    assert_eq!(id, IdentifyController::VWC_PRESENT | IdentifyController::VWC_FLUSH_BROADCAST_SUPPORTED);
    let data = pattern(4096, 3);
    a.io.write(&mut a.engine, 1, 8, &data).ok();
    a.io.run(&mut a.engine, Flush { nsid: 0xFFFF_FFFF }.to_sqe()).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 8, 8).ok().data, data);
    let cc = ControllerConfiguration {
        en: true,
        iosqes: 6,
        iocqes: 4,
        shn: ShutdownNotification::Normal,
        ..Default::default()
    };
    a.admin.property_set(&mut a.engine, 0x14, cc.to_u32().into()).ok();
    let csts = a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(ControllerStatus::from_u32(csts.cqe.dw0).unwrap().shst, ShutdownStatus::Complete);
}

#[test]
fn controller_reset_ends_io_queues_and_allows_reconnect() {
    let mut a = associate(target());
    a.admin.property_set(&mut a.engine, 0x14, 0).ok();
    let csts = ControllerStatus::from_u32(a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).cqe.dw0);
    assert!(!csts.unwrap().rdy);
    let mut out = Vec::new();
    assert_eq!(
        a.io.queue.poll(&mut a.engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    assert!(a.io.queue.is_closed());
    a.admin.enable(&mut a.engine);
    let mut io = Host::new(&a.target);
    io.connect(&mut a.engine, 1, 127, a.cntlid, SUBNQN, HOSTNQN).ok();
    io.read(&mut a.engine, 1, 0, 1).ok();
}

// -------------------------------------------------------------------------------------------------------------
// Identify
// -------------------------------------------------------------------------------------------------------------

#[test]
fn identify_controller_fields() {
    let mut a = associate(target());
    let done = a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok();
    let id = IdentifyController::parse(&done.data).unwrap();
    assert_eq!(id.cntlid, a.cntlid);
    assert_eq!(id.sn, "SN123");
    assert_eq!(id.mn, "nvmf-rs test");
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.ver, Version::V1_3.to_u32());
    assert_eq!(id.mdts, 5); // 128 KiB = 2^5 × 4 KiB
    assert_eq!(id.ioccsz, (64 + IN_CAPSULE) / 16);
    assert_eq!(id.iorcsz, 1);
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.msdbd, 1);
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_IO);
    assert_eq!(id.nn, 1024);
    assert_eq!(id.maxcmd, 128);
    assert!(id.kas > 0);
    assert!(id.namespace_attribute_notices());
    assert_eq!(id.aerl, 3);
    assert_eq!(id.sqes, 0x66);
    assert_eq!(id.cqes, 0x44);
    assert!(id.oncs_has(
        IdentifyController::ONCS_COMPARE
            | IdentifyController::ONCS_DATASET_MANAGEMENT
            | IdentifyController::ONCS_WRITE_ZEROES
    ));
    // Memory has no volatile cache.
    assert!(!id.vwc_present());
    assert_eq!(id.sgl_support(), IdentifyController::SGLS_SUPPORTED_BYTE_ALIGNED);
    assert_ne!(id.sgls & IdentifyController::SGLS_ADDRESS_AS_OFFSET, 0);
    assert_ne!(id.sgls & IdentifyController::SGLS_TRANSPORT_DATA_BLOCK, 0);
    assert_eq!(id.sgls & IdentifyController::SGLS_KEYED_DATA_BLOCK, 0);
    assert_ne!(id.ctratt & IdentifyController::CTRATT_HOST_ID_128, 0);
    assert_ne!(id.ctratt & IdentifyController::CTRATT_TBKAS, 0, "Traffic Based Keep Alive");
    assert!(!id.fr.is_empty());
}

#[test]
fn identify_controller_over_rdma_reports_keyed_sgls() {
    let target = target();
    let admin = Queue::new(
        Arc::clone(&target),
        TransportInfo {
            trtype: TransportType::Rdma,
            in_capsule_data_size: 4096,
            port_id: 1,
            local_address: None,
            queue_key: 5,
        },
    );
    let controller = Controller::new(
        1,
        target.subsystem(SUBNQN).unwrap(),
        HOSTNQN,
        HOSTID,
        0,
        &TargetParams { max_io_queues: 4, ..TargetParams::default() },
        true,
    );
    let ctx = admin::AdminContext {
        target: &target,
        controller: &controller,
        transport: admin.transport(),
        table: &target.subsystem(SUBNQN).unwrap().namespaces(),
    };
    let id = admin::identify_controller(&ctx);
    assert_ne!(id.sgls & IdentifyController::SGLS_KEYED_DATA_BLOCK, 0);
    assert_eq!(id.sgls & IdentifyController::SGLS_TRANSPORT_DATA_BLOCK, 0);
    assert_eq!(id.ioccsz, (64 + 4096) / 16);
}

#[test]
fn identify_namespaces() {
    let mut params = subsystem_params();
    let mut eui = NamespaceParams::new(3, memory(1 << 16, 4096));
    eui.eui64 = Some([1, 2, 3, 4, 5, 6, 7, 8]);
    params.namespaces.push(eui);
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());

    let ns = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, 1).ok().data).unwrap();
    assert_eq!(ns.nsze, NS_SIZE / u64::from(BLOCK));
    assert_eq!(ns.ncap, ns.nsze);
    assert_eq!(ns.nlbaf, 0);
    assert_eq!(ns.flbas, 0);
    assert_eq!(ns.lba_data_size().unwrap(), BLOCK);
    assert_eq!(ns.dlfeat & 0x7, 0b001, "memory reads zeros after deallocate");
    assert_ne!(ns.nguid, [0; 16]);
    let ns3 = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, 3).ok().data).unwrap();
    assert_eq!(ns3.lba_data_size().unwrap(), 4096);
    assert_eq!(ns3.nsze, 16);
    assert_eq!(ns3.eui64, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_ne!(ns3.nguid, ns.nguid);

    // Inactive NSID in range: zeros. NSID 0, broadcast, beyond NN: Invalid Namespace.
    assert!(a.admin.identify(&mut a.engine, cns::NAMESPACE, 2).ok().data.iter().all(|&b| b == 0));
    let invalid_ns = Status::INVALID_NAMESPACE.with_dnr();
    for nsid in [0, 0xFFFF_FFFF, 1025] {
        assert_eq!(a.admin.identify(&mut a.engine, cns::NAMESPACE, nsid).status(), invalid_ns, "nsid {nsid:#x}");
    }

    let list = a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 0).ok().data;
    assert_eq!(ActiveNamespaceIdList::parse(&list).unwrap().iter().collect::<Vec<_>>(), vec![1, 3]);
    let list = a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 1).ok().data;
    assert_eq!(ActiveNamespaceIdList::parse(&list).unwrap().iter().collect::<Vec<_>>(), vec![3]);
    assert_eq!(a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 0xFFFF_FFFE).status(), invalid_ns);

    let descs = a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 3).ok().data;
    let descs: Vec<_> = NamespaceIdentificationDescriptor::parse_list(&descs).unwrap().iter().collect();
    assert_eq!(descs[0], NamespaceIdentificationDescriptor::Eui64([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(descs[1], NamespaceIdentificationDescriptor::Nguid(ns3.nguid));
    assert!(matches!(descs[2], NamespaceIdentificationDescriptor::Uuid(_)));
    assert_eq!(descs[3], NamespaceIdentificationDescriptor::Csi(0));
    let descs = a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 1).ok().data;
    assert_eq!(NamespaceIdentificationDescriptor::parse_list(&descs).unwrap().iter().count(), 3, "no EUI-64");
    assert_eq!(a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 2).status(), invalid_ns);

    // I/O Command Set specific Identify Controller: NVM (CSI 0) reports no limits beyond MDTS (all zero); other
    // command sets are not served.
    let nvm = a.admin.identify(&mut a.engine, cns::IO_COMMAND_SET_CONTROLLER, 0).ok().data;
    assert_eq!(nvm.len(), 4096);
    assert!(nvm.iter().all(|&b| b == 0));
    let zoned =
        Identify { csi: nvmf_common::nvme::identify::csi::ZONED, ..Identify::new(cns::IO_COMMAND_SET_CONTROLLER, 0) };
    let sqe = with_sgl(zoned.to_sqe(), transport_data(4096));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());

    // Unsupported CNS; Identify with in-capsule data (controller to host) or a short SGL.
    assert_eq!(a.admin.identify(&mut a.engine, 0x10, 0).status(), Status::INVALID_FIELD.with_dnr());
    let sqe = with_sgl(Identify::new(cns::CONTROLLER, 0).to_sqe(), in_capsule(0));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());
    let sqe = with_sgl(Identify::new(cns::CONTROLLER, 0).to_sqe(), transport_data(1024));
    let done = a.admin.run(&mut a.engine, sqe).ok();
    assert_eq!(done.data.len(), 1024);

    // Identifiers are stable: a second target built the same way derives the same NGUID.
    let again = Target::new(target_params(), vec![subsystem_params()]).unwrap();
    assert_eq!(again.subsystem(SUBNQN).unwrap().namespaces().get(1).unwrap().nguid(), ns.nguid);
}

// -------------------------------------------------------------------------------------------------------------
// Log pages and features
// -------------------------------------------------------------------------------------------------------------

#[test]
fn smart_log_counts_io() {
    let mut a = associate(target());
    let data = pattern(8192, 1);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    a.io.write(&mut a.engine, 1, 16, &data).ok();
    a.io.read(&mut a.engine, 1, 0, 16).ok();
    let smart = SmartLog::parse(
        &a.admin
            .log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0xFFFF_FFFF, 512).unwrap())
            .ok()
            .data,
    )
    .unwrap();
    assert_eq!(smart.host_write_commands, 2);
    assert_eq!(smart.host_read_commands, 1);
    // 16 KiB written = 32 units of 512 bytes: reported as 1 thousand, rounded up.
    assert_eq!(smart.data_units_written, 1);
    assert_eq!(smart.data_units_read, 1);
    assert_eq!(admin::data_units(512_000), 1);
    assert_eq!(admin::data_units(512_001), 2);
    assert_eq!(admin::data_units(0), 0);
    // SMART per namespace is not supported.
    let done = a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 1, 512).unwrap());
    assert_eq!(done.status(), Status::INVALID_FIELD.with_dnr());
}

#[test]
fn log_pages_honour_offset_and_length() {
    let mut a = associate(target());
    let full = a
        .admin
        .log_page(&mut a.engine, GetLogPage::new(lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 4096).unwrap())
        .ok()
        .data;
    let effects = CommandsSupportedAndEffects::parse(&full).unwrap();
    assert_ne!(effects.admin(0x06) & CommandsSupportedAndEffects::CSUPP, 0);
    assert_ne!(effects.io(0x01) & CommandsSupportedAndEffects::LBCC, 0);
    assert_eq!(effects.io(0x7E), 0);
    // The window [1024, 1024 + 64).
    let mut glp = GetLogPage::new(lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 64).unwrap();
    glp.lpo = 1024;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).ok().data, full[1024..1088]);
    // Past the end of the page: zeros beyond, an error when the offset itself is beyond.
    glp.lpo = 4096 - 32;
    let tail = a.admin.log_page(&mut a.engine, glp).ok().data;
    assert_eq!(tail[..32], full[4064..]);
    assert!(tail[32..].iter().all(|&b| b == 0));
    glp.lpo = 8192;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).status(), Status::INVALID_FIELD.with_dnr());
    glp.lpo = 2;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).status(), Status::INVALID_FIELD.with_dnr());
    // Unknown log, discovery log on an I/O controller.
    for id in [0x42, lid::DISCOVERY] {
        let done = a.admin.log_page(&mut a.engine, GetLogPage::new(id, 0, 512).unwrap());
        assert_eq!(done.status(), Status::INVALID_LOG_PAGE.with_dnr());
    }
    // NUMD asking for more than the SGL holds; more than MDTS.
    let sqe = with_sgl(GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap().to_sqe(), transport_data(256));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    let sqe = with_sgl(GetLogPage::new(lid::ERROR_INFORMATION, 0, 1 << 20).unwrap().to_sqe(), transport_data(1 << 20));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());
    // Firmware slot: slot 1 active.
    let fw =
        a.admin.log_page(&mut a.engine, GetLogPage::new(lid::FIRMWARE_SLOT_INFORMATION, 0, 512).unwrap()).ok().data;
    assert_eq!(fw[0], 1);
    assert_ne!(fw[8], 0);
}

#[test]
fn error_log_records_failed_commands() {
    let mut a = associate(target());
    assert_eq!(a.io.read(&mut a.engine, 9, 0, 1).status(), Status::INVALID_NAMESPACE.with_dnr());
    assert_eq!(a.io.read(&mut a.engine, 1, 1 << 40, 1).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    let page = a.admin.log_page(&mut a.engine, GetLogPage::new(lid::ERROR_INFORMATION, 0, 1024).unwrap()).ok().data;
    let entries: Vec<_> = ErrorInformationEntry::parse_log(&page).filter(|e| e.error_count != 0).collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].error_count, 2, "newest first");
    assert_eq!(entries[0].status, Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(entries[0].sqid, 1);
    assert_eq!(entries[1].nsid, 9);
    let smart = SmartLog::parse(
        &a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap()).ok().data,
    )
    .unwrap();
    assert_eq!(smart.number_of_error_log_entries, 2);
}

#[test]
fn features() {
    let mut a = associate(target());
    let get =
        |host: &mut Host, engine: &mut IoEngine, feature: u8| host.run(engine, GetFeatures::new(feature).to_sqe());
    // Number of queues: the default grant is the target maximum (64).
    let noq = NumberOfQueues::from_dw0(get(&mut a.admin, &mut a.engine, fid::NUMBER_OF_QUEUES).ok().cqe.dw0);
    assert_eq!(noq.submission_queues(), 64);
    // Keep alive timer: set, read back rounded up to KAS (1 s).
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 1500 }).to_sqe()).ok();
    assert_eq!(done.cqe.dw0, 0);
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::KEEP_ALIVE_TIMER).ok().cqe.dw0, 2000);
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 900_000 }).to_sqe());
    assert_eq!(done.status(), Status::KEEP_ALIVE_TIMEOUT_INVALID.with_dnr());
    // Asynchronous event configuration: namespace attribute notices on by default; unknown bits dropped.
    let aec = AsyncEventConfiguration::from_dword(
        get(&mut a.admin, &mut a.engine, fid::ASYNCHRONOUS_EVENT_CONFIGURATION).ok().cqe.dw0,
    )
    .unwrap();
    assert!(aec.namespace_attribute_notices);
    let mut sqe = SetFeatures::new(&AsyncEventConfiguration::default()).to_sqe();
    sqe.cdw11 = 0x0001_0100;
    a.admin.run(&mut a.engine, sqe).ok();
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::ASYNCHRONOUS_EVENT_CONFIGURATION).ok().cqe.dw0, 0x100);
    // No volatile cache on memory: WCE reads 0 and cannot be set.
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::VOLATILE_WRITE_CACHE).ok().cqe.dw0, 0);
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&VolatileWriteCache { wce: true }).to_sqe());
    assert_eq!(done.status(), Status::INVALID_FIELD.with_dnr());
    // Host identifier: 16 bytes of data with EXHID; not settable over fabrics.
    let mut sqe = GetFeatures::new(fid::HOST_IDENTIFIER).to_sqe();
    sqe.cdw11 = 1;
    let done = a.admin.run(&mut a.engine, with_sgl(sqe, transport_data(16))).ok();
    assert_eq!(done.data, HOSTID);
    sqe.cdw11 = 0;
    let done = a.admin.run(&mut a.engine, with_sgl(sqe, transport_data(16)));
    assert_eq!(done.status(), Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT.with_dnr());
    let set = SetFeatures { fid: fid::HOST_IDENTIFIER, cdw11: 1, ..Default::default() };
    assert_eq!(a.admin.run(&mut a.engine, set.to_sqe()).status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    // Saving, unknown features, supported capabilities.
    let mut save = SetFeatures::new(&KeepAliveTimer { kato_ms: 1000 });
    save.sv = true;
    assert_eq!(a.admin.run(&mut a.engine, save.to_sqe()).status(), Status::FEATURE_NOT_SAVEABLE.with_dnr());
    assert_eq!(get(&mut a.admin, &mut a.engine, 0x55).status(), Status::INVALID_FIELD.with_dnr());
    let mut caps = GetFeatures::new(fid::KEEP_ALIVE_TIMER);
    caps.sel = nvmf_common::nvme::features::Select::SupportedCapabilities;
    assert_eq!(a.admin.run(&mut a.engine, caps.to_sqe()).ok().cqe.dw0, 0b100);
    // Abort never aborts.
    let abort = nvmf_common::nvme::admin::Abort { sqid: 1, cid: 5 };
    assert_eq!(a.admin.run(&mut a.engine, abort.to_sqe()).ok().cqe.dw0, 1);
}

#[test]
fn number_of_queues_grant_is_capped() {
    let mut a = associate(target());
    // I/O queues exist: the grant does not change.
    let asked = NumberOfQueues::with_counts(1000, 1000).unwrap();
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&asked).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 64);
    let mut b = associate(target());
    drop(b.io);
    let mut fresh = Host::new(&b.target);
    let cntlid =
        ConnectResponse::from_dw0(fresh.connect(&mut b.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;
    fresh.enable(&mut b.engine);
    let done = fresh.run(&mut b.engine, SetFeatures::new(&asked).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 64);
    let two = NumberOfQueues::with_counts(2, 4).unwrap();
    let done = fresh.run(&mut b.engine, SetFeatures::new(&two).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 2);
    assert_eq!(
        Host::new(&b.target).connect(&mut b.engine, 3, 31, cntlid, SUBNQN, HOSTNQN).status(),
        Status::CONNECT_INVALID_PARAMETERS.with_dnr()
    );
}

// -------------------------------------------------------------------------------------------------------------
// Asynchronous events
// -------------------------------------------------------------------------------------------------------------

#[test]
fn aer_completes_on_namespace_change() {
    let mut a = associate(target());
    let wakes = Arc::new(AtomicUsize::new(0));
    // The notifier is registered before Connect in real use; this admin queue was connected without one, so
    // register through a fresh association.
    let mut engine = engine();
    let mut admin = Host::new(&a.target);
    let w = Arc::clone(&wakes);
    admin.queue.set_event_notifier(Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    admin.enable(&mut engine);
    drop(a.admin);

    assert!(admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "AER is held");
    let subsystem = a.target.subsystem(SUBNQN).unwrap();
    subsystem.add_namespace(NamespaceParams::new(2, memory(1 << 16, 512))).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 1);
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { slot, cqe, data: None }] = out[..] else { panic!("AER not completed: {out:?}") };
    admin.queue.release(&mut engine, slot);
    assert_eq!(AsyncEvent::from_dw0(cqe.dw0).unwrap(), AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED);
    assert_eq!(cqe.dw0, 0x0004_0002);

    // The I/O queue sees the new namespace.
    a.io.write(&mut a.engine, 2, 0, &pattern(512, 9)).ok();

    // Masked until the log is read: another change raises nothing, even with an AER held.
    assert!(admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    subsystem.remove_namespace(2).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 1);
    let mut glp = GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0xFFFF_FFFF, 4096).unwrap();
    glp.rae = true;
    let page = admin.log_page(&mut engine, glp).ok().data;
    let ChangedNamespaces::List(list) = ChangedNamespaceList::parse(&page).unwrap() else { panic!() };
    assert_eq!(list.iter().collect::<Vec<_>>(), vec![2]);
    // RAE kept the list and the mask; a read without RAE clears both.
    glp.rae = false;
    assert_eq!(admin.log_page(&mut engine, glp).ok().data, page);
    let page = admin.log_page(&mut engine, glp).ok().data;
    assert!(page.iter().all(|&b| b == 0));

    // Now a change completes the held AER.
    subsystem.add_namespace(NamespaceParams::new(5, memory(1 << 16, 512))).unwrap();
    assert_eq!(wakes.load(Ordering::Relaxed), 2);
    out.clear();
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert_eq!(out.len(), 1);
    let Step::Respond { slot, .. } = out[0] else { panic!() };
    admin.queue.release(&mut engine, slot);

    // A change with no AER outstanding is delivered by the next AER at once (after the log read unmasks).
    admin.log_page(&mut engine, GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0, 4096).unwrap()).ok();
    subsystem.remove_namespace(5).unwrap();
    let done = admin.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).unwrap().ok();
    assert_eq!(done.cqe.dw0, AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED.to_dw0());
}

#[test]
fn aer_limit() {
    let mut a = associate(target());
    for _ in 0..4 {
        assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    }
    let done = a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).unwrap();
    assert_eq!(done.status(), Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED.with_dnr());
}

#[test]
fn aer_disabled_by_configuration() {
    let mut a = associate(target());
    a.admin.run(&mut a.engine, SetFeatures::new(&AsyncEventConfiguration::default()).to_sqe()).ok();
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    a.target.subsystem(SUBNQN).unwrap().add_namespace(NamespaceParams::new(2, memory(1 << 16, 512))).unwrap();
    let mut out = Vec::new();
    a.admin.queue.poll(&mut a.engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty());
    // The changed list is kept regardless.
    let page =
        a.admin.log_page(&mut a.engine, GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0, 4096).unwrap()).ok().data;
    assert_eq!(page[..4], 2u32.to_le_bytes());
}

// -------------------------------------------------------------------------------------------------------------
// Keep alive
// -------------------------------------------------------------------------------------------------------------

#[test]
fn keep_alive_expiry_with_a_fake_clock() {
    let target = target();
    let mut engine = engine();
    // The reactor's turn time is the clock commands arrive by.
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    set_turn_time(at(0));
    let mut admin = Host::new(&target);
    let done = admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 2000).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    io.connect(&mut engine, 1, 31, cntlid, SUBNQN, HOSTNQN).ok();
    let mut out = Vec::new();
    // The timer runs from the last admin command, the reactor polls the queue by its deadline.
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(2000)));
    admin.queue.poll(&mut engine, at(1500), &mut out).unwrap();
    // A Keep Alive restarts the timer.
    set_turn_time(at(1600));
    admin.run(&mut engine, KeepAlive.to_sqe()).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(3600)));
    admin.queue.poll(&mut engine, at(3500), &mut out).unwrap();
    // Any admin command counts too.
    set_turn_time(at(3500));
    admin.property_get(&mut engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(5500)));
    admin.queue.poll(&mut engine, at(5499), &mut out).unwrap();
    // Traffic Based Keep Alive: an I/O command restarts the timer too; the queue publishes its commands'
    // arrival at most every TRAFFIC_GRANULARITY, so the timer runs from that much later.
    set_turn_time(at(5400));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(7500)));
    admin.queue.poll(&mut engine, at(5500), &mut out).unwrap();
    // Within the granularity the queue does not publish again; after it, it does.
    set_turn_time(at(5450));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(7500)));
    set_turn_time(at(6000));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(8100)));
    admin.queue.poll(&mut engine, at(8099), &mut out).unwrap();
    let controller = Arc::clone(admin.queue.controller().unwrap());
    assert_eq!(
        admin.queue.poll(&mut engine, at(8100), &mut out),
        Err(QueueError::KeepAliveExpired { cntlid, kato_ms: 2000 })
    );
    assert!(admin.queue.is_closed());
    assert!(target.subsystem(SUBNQN).unwrap().controller(cntlid).is_none());
    assert!(admin.queue.controller().is_none(), "a dead queue has no association");
    assert!(controller.is_terminated());
    assert!(controller.csts().cfs, "CSTS.CFS set on expiry");
    assert_eq!(controller.lock().errors[0].status, Status::KEEP_ALIVE_TIMER_EXPIRED);
    // The I/O queue of the association ends too.
    assert_eq!(io.queue.poll(&mut engine, at(8100), &mut out), Err(QueueError::AssociationEnded { cntlid }));
    // A dead queue refuses commands.
    assert_eq!(admin.queue.command(&mut engine, &KeepAlive.to_sqe(), &[]), Err(QueueError::Closed));
}

#[test]
fn kato_zero_never_expires() {
    let target = target();
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 0).ok();
    let t0 = Instant::now();
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, t0, &mut out).unwrap();
    admin.queue.poll(&mut engine, t0 + Duration::from_secs(3600), &mut out).unwrap();
    assert_eq!(admin.queue.keep_alive_deadline(), None);
}

#[test]
fn admin_disconnect_ends_the_association() {
    let mut a = associate(target());
    a.admin.queue.disconnect(&mut a.engine);
    a.admin.queue.disconnect(&mut a.engine);
    let mut out = Vec::new();
    assert_eq!(
        a.io.queue.poll(&mut a.engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    // The controller ID is free again and the subsystem forgot the controller.
    assert!(a.target.subsystem(SUBNQN).unwrap().controllers().is_empty());
}

// -------------------------------------------------------------------------------------------------------------
// I/O commands
// -------------------------------------------------------------------------------------------------------------

#[test]
fn write_then_read_back() {
    let mut a = associate(target());
    let data = pattern(64 << 10, 5);
    a.io.write(&mut a.engine, 1, 100, &data).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 100, 128).ok().data, data);
    // Partial overlap.
    assert_eq!(a.io.read(&mut a.engine, 1, 101, 1).ok().data, data[512..1024]);
    // Last block of the namespace.
    let last = NS_SIZE / u64::from(BLOCK) - 1;
    a.io.write(&mut a.engine, 1, last, &data[..512]).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, last, 1).ok().data, data[..512]);
}

#[test]
fn write_with_in_capsule_data() {
    let mut a = associate(target());
    let data = pattern(4096, 7);
    let write = Write { nsid: 1, slba: 8, nlb: 7, ..Default::default() };
    let sqe = with_sgl(write.to_sqe(), in_capsule(4096));
    a.io.submit(&mut a.engine, sqe, &data, &[]).unwrap().ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 8, 8).ok().data, data);
    // FUA is accepted.
    let write = Write { nsid: 1, slba: 8, nlb: 0, fua: true, ..Default::default() };
    let sqe = with_sgl(write.to_sqe(), in_capsule(512));
    a.io.submit(&mut a.engine, sqe, &data[..512], &[]).unwrap().ok();
}

#[test]
fn compare_matches_and_fails() {
    let mut a = associate(target());
    let data = pattern(2048, 11);
    a.io.write(&mut a.engine, 1, 40, &data).ok();
    let compare = Compare { nsid: 1, slba: 40, nlb: 3, ..Default::default() };
    let sqe = with_sgl(compare.to_sqe(), transport_data(2048));
    a.io.submit(&mut a.engine, sqe, &[], &data).unwrap().ok();
    let mut other = data.clone();
    other[2047] ^= 1;
    let done = a.io.submit(&mut a.engine, sqe, &[], &other).unwrap();
    assert_eq!(done.status(), Status::COMPARE_FAILURE.with_dnr());
    // In-capsule compare.
    let sqe = with_sgl(compare.to_sqe(), in_capsule(2048));
    a.io.submit(&mut a.engine, sqe, &data, &[]).unwrap().ok();
}

#[test]
fn flush_write_zeroes_and_deallocate() {
    let mut a = associate(target());
    let data = pattern(8192, 13);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    a.io.run(&mut a.engine, Flush { nsid: 1 }.to_sqe()).ok();
    a.io.run(&mut a.engine, Flush { nsid: 0xFFFF_FFFF }.to_sqe()).ok();
    assert_eq!(a.io.run(&mut a.engine, Flush { nsid: 7 }.to_sqe()).status(), Status::INVALID_NAMESPACE.with_dnr());

    // Write Zeroes over blocks 2..4.
    let wz = WriteZeroes { nsid: 1, slba: 2, nlb: 1, fua: true, ..Default::default() };
    a.io.run(&mut a.engine, wz.to_sqe()).ok();
    let back = a.io.read(&mut a.engine, 1, 0, 16).ok().data;
    assert_eq!(back[..1024], data[..1024]);
    assert!(back[1024..2048].iter().all(|&b| b == 0));
    assert_eq!(back[2048..], data[2048..]);
    let wz = WriteZeroes { nsid: 1, slba: NS_SIZE / 512, nlb: 0, ..Default::default() };
    assert_eq!(a.io.run(&mut a.engine, wz.to_sqe()).status(), Status::LBA_OUT_OF_RANGE.with_dnr());

    // Deallocate blocks 8..16 and 0..1 (two ranges, one empty).
    let ranges = [
        DsmRange { cattr: 0, length: 8, slba: 8 },
        DsmRange { cattr: 0, length: 0, slba: 3 },
        DsmRange { cattr: 0, length: 1, slba: 0 },
    ];
    let list: Vec<u8> = ranges.iter().flat_map(|r| r.to_bytes()).collect();
    let dsm = DatasetManagement { nsid: 1, nr: 2, ad: true, ..Default::default() };
    let sqe = with_sgl(dsm.to_sqe(), transport_data(48));
    a.io.submit(&mut a.engine, sqe, &[], &list).unwrap().ok();
    let back = a.io.read(&mut a.engine, 1, 0, 16).ok().data;
    assert!(back[..512].iter().all(|&b| b == 0));
    assert_eq!(back[512..1024], data[512..1024]);
    assert!(back[4096..].iter().all(|&b| b == 0));
    // In-capsule range list with a range beyond the namespace: nothing is deallocated.
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    let bad = [DsmRange { cattr: 0, length: 1, slba: 0 }, DsmRange { cattr: 0, length: 2, slba: NS_SIZE / 512 - 1 }];
    let list: Vec<u8> = bad.iter().flat_map(|r| r.to_bytes()).collect();
    let dsm = DatasetManagement { nsid: 1, nr: 1, ad: true, ..Default::default() };
    let done = a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(32)), &list, &[]).unwrap();
    assert_eq!(done.status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).ok().data, data[..512]);
    // A range list shorter than NR says.
    let done = a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(16)), &list[..16], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // Without AD the command is a hint: success, nothing changes.
    let dsm = DatasetManagement { nsid: 1, nr: 0, idr: true, ..Default::default() };
    a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(16)), &list[..16], &[]).unwrap().ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).ok().data, data[..512]);
}

#[test]
fn bad_io_commands() {
    let mut a = associate(target());
    let e = &mut a.engine;
    let io = &mut a.io;
    // Bad NSID.
    for nsid in [0, 2, 0xFFFF_FFFF] {
        assert_eq!(io.read(e, nsid, 0, 1).status(), Status::INVALID_NAMESPACE.with_dnr());
    }
    // LBA out of range, including SLBA + NLB overflowing 64 bits.
    let blocks = NS_SIZE / u64::from(BLOCK);
    assert_eq!(io.read(e, 1, blocks, 1).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(io.read(e, 1, blocks - 1, 2).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(io.read(e, 1, u64::MAX, 2).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    // Above MDTS (128 KiB): 257 blocks of 512 bytes with a matching SGL.
    assert_eq!(io.read(e, 1, 0, 257).status(), Status::INVALID_FIELD.with_dnr());
    // SGL length not matching the transfer.
    let read = Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() };
    let done = io.run(e, with_sgl(read.to_sqe(), transport_data(1024)));
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // Keyed SGL on TCP, a memory address, a segment.
    for sgl in [
        SglDescriptor::KeyedDataBlock { address: 0, length: 512, key: 1, subtype: SglSubtype::Address },
        SglDescriptor::DataBlock { address: 0x1000, length: 512, subtype: SglSubtype::Address },
        SglDescriptor::LastSegment { address: 0, length: 512, subtype: SglSubtype::Offset },
    ] {
        let done = io.run(e, with_sgl(read.to_sqe(), sgl));
        assert_eq!(done.status(), Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr(), "{sgl:?}");
    }
    // In-capsule: data for a read, offset beyond the data, data shorter than the SGL.
    assert_eq!(io.run(e, with_sgl(read.to_sqe(), in_capsule(512))).status(), Status::INVALID_FIELD.with_dnr());
    let write = Write { nsid: 1, slba: 0, nlb: 0, ..Default::default() };
    let sgl = SglDescriptor::DataBlock { address: 600, length: 512, subtype: SglSubtype::Offset };
    let done = io.submit(e, with_sgl(write.to_sqe(), sgl), &[0; 512], &[]).unwrap();
    assert_eq!(done.status(), Status::SGL_OFFSET_INVALID.with_dnr());
    let done = io.submit(e, with_sgl(write.to_sqe(), in_capsule(512)), &[0; 100], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // PRP data pointer, fused command.
    let mut prp = read.to_sqe();
    prp.flags = 0;
    assert_eq!(io.run(e, prp).status(), Status::INVALID_FIELD.with_dnr());
    // Unknown opcodes (including an admin opcode on an I/O queue).
    for opcode in [0x06, 0x7E, 0xFF] {
        assert_eq!(io.run(e, SubmissionQueueEntry::new(opcode)).status(), Status::INVALID_OPCODE.with_dnr());
    }
    // Properties belong to the admin queue; Connect again is a sequence error.
    let done = io.run(e, PropertyGet { size: PropertySize::Four, offset: 0x1C }.to_sqe());
    assert_eq!(done.status(), Status::INVALID_QUEUE_TYPE.with_dnr());
    // Unknown admin opcodes and I/O opcodes on the admin queue.
    for opcode in [0x01, 0x10, 0x80] {
        assert_eq!(a.admin.run(e, SubmissionQueueEntry::new(opcode)).status(), Status::INVALID_OPCODE.with_dnr());
    }
    assert_eq!(a.admin.run(e, Disconnect.to_sqe()).status(), Status::INVALID_QUEUE_TYPE.with_dnr());
    // The queue is still fine.
    io.read(e, 1, 0, 1).ok();
}

#[test]
fn io_disconnect_command() {
    let mut a = associate(target());
    a.io.run(&mut a.engine, Disconnect.to_sqe()).ok();
    let mut out = Vec::new();
    assert_eq!(a.io.queue.poll(&mut a.engine, Instant::now(), &mut out), Err(QueueError::Disconnected { qid: 1 }));
    assert_eq!(a.admin.queue.controller().unwrap().io_queue_count(), 0);
    // The QID can be connected again.
    Host::new(&a.target).connect(&mut a.engine, 1, 31, a.cntlid, SUBNQN, HOSTNQN).ok();
}

#[test]
fn pool_exhaustion_parks_commands_until_buffers_return() {
    let target = target();
    let mut engine = engine_with(1);
    let mut admin = Host::new(&target);
    let cntlid =
        ConnectResponse::from_dw0(admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    io.connect(&mut engine, 1, 31, cntlid, SUBNQN, HOSTNQN).ok();
    let read = |slba| with_sgl(Read { nsid: 1, slba, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    // The first read holds the only buffer until released.
    let step1 = io.queue.command(&mut engine, &read(0), &[]).unwrap();
    assert_eq!(step1, Step::Pending);
    engine.submit().unwrap();
    let mut completions = Vec::new();
    engine.reap(|c| completions.push(c));
    let (_, slot1) = split_storage_tag(completions[0].tag);
    let Step::Respond { slot, .. } = io.queue.io_completed(&mut engine, slot1, completions.pop().unwrap().result)
    else {
        panic!()
    };
    // The second read waits for a buffer; in-capsule data cannot wait: Command Interrupted (retryable).
    assert_eq!(io.queue.command(&mut engine, &read(1), &[]).unwrap(), Step::Pending);
    let write = with_sgl(Write { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), in_capsule(512));
    let Step::Respond { slot: wslot, cqe, .. } = io.queue.command(&mut engine, &write, &[0; 512]).unwrap() else {
        panic!()
    };
    assert_eq!(cqe.status, Status::COMMAND_INTERRUPTED);
    assert!(!cqe.status.dnr());
    io.queue.release(&mut engine, wslot);
    let mut out = Vec::new();
    io.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty(), "still no buffer");
    io.queue.release(&mut engine, slot);
    io.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty(), "the read went to storage");
    assert_eq!(io.queue.in_flight(), 1);
    let done = io.drive(&mut engine, Step::Pending, &[]).unwrap().ok();
    assert_eq!(done.data.len(), 512);
}

#[test]
fn disconnect_with_io_in_flight_orphans_the_slot() {
    let mut a = associate(target());
    let read = with_sgl(Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    assert_eq!(a.io.queue.command(&mut a.engine, &read, &[]).unwrap(), Step::Pending);
    assert_eq!(a.io.queue.in_flight(), 1);
    a.io.queue.disconnect(&mut a.engine);
    a.engine.submit().unwrap();
    let mut completions = Vec::new();
    a.engine.reap(|c| completions.push(c));
    for c in completions {
        let (_, slot) = split_storage_tag(c.tag);
        assert_eq!(a.io.queue.io_completed(&mut a.engine, slot, c.result), Step::Pending);
    }
    assert_eq!(a.io.queue.in_flight(), 0);
    // Its buffer went back to the pool.
    assert_eq!(a.engine.pool().available(), a.engine.pool().capacity());
}

#[test]
fn storage_errors_map_to_statuses() {
    let mut a = associate(target());
    let read = with_sgl(Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    assert_eq!(a.io.queue.command(&mut a.engine, &read, &[]).unwrap(), Step::Pending);
    a.engine.submit().unwrap();
    let mut completions = Vec::new();
    a.engine.reap(|c| completions.push(c));
    let (_, slot) = split_storage_tag(completions[0].tag);
    let step = a.io.queue.io_completed(&mut a.engine, slot, Err(std::io::Error::from_raw_os_error(libc::EIO)));
    let Step::Respond { cqe, data, slot } = step else { panic!() };
    assert_eq!(cqe.status, Status::UNRECOVERED_READ_ERROR.with_dnr());
    assert_eq!(data, None);
    a.io.queue.release(&mut a.engine, slot);
    let smart = SmartLog::parse(
        &a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap()).ok().data,
    )
    .unwrap();
    assert_eq!(smart.media_errors, 1);
}

// -------------------------------------------------------------------------------------------------------------
// Discovery
// -------------------------------------------------------------------------------------------------------------

#[test]
fn discovery_controller() {
    let mut hidden = SubsystemParams::new("nqn.2024-01.io.nvmf-rs:hidden");
    hidden.allow_any_host = false;
    hidden.hosts = vec![OTHER_HOST.to_owned()];
    let target = Target::new(target_params(), vec![subsystem_params(), hidden]).unwrap();
    let mut engine = engine();
    let mut host = Host::new(&target);
    host.queue = Queue::new(
        Arc::clone(&target),
        TransportInfo {
            local_address: Some("192.0.2.7".parse().unwrap()),
            ..TransportInfo::tcp(1, IN_CAPSULE, host.key)
        },
    );
    let done = host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 0).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    // Discovery controllers answer before CC.EN (as Linux nvmet does).
    let data = host.identify(&mut engine, cns::CONTROLLER, 0).ok().data;
    let id = IdentifyController::parse(&data).unwrap();
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_DISCOVERY);
    assert_eq!(id.subnqn, DISCOVERY_NQN);
    assert_eq!(id.nn, 0);
    assert_eq!(host.identify(&mut engine, cns::NAMESPACE, 1).status(), Status::INVALID_FIELD.with_dnr());
    host.enable(&mut engine);

    // The header alone, then the whole page.
    let header = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&header).unwrap();
    assert_eq!(page.header.numrec, 2, "current discovery subsystem + the one visible subsystem");
    let genctr = page.header.genctr;
    let full = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 3072).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&full).unwrap();
    assert!(page.is_complete());
    let entries: Vec<_> = page.entries().map(Result::unwrap).collect();
    assert_eq!(entries[0].subtype, SubsystemType::CurrentDiscovery);
    assert_eq!(entries[0].subnqn, DISCOVERY_NQN);
    assert_eq!(entries[1].subtype, SubsystemType::Nvm);
    assert_eq!(entries[1].subnqn, SUBNQN);
    assert_eq!(entries[1].traddr, "192.0.2.7", "wildcard replaced by the local address");
    assert_eq!(entries[1].trsvcid, "4420");
    assert_eq!(entries[1].trtype, TransportType::Tcp);
    assert_eq!(entries[1].portid, 1);
    assert_eq!(entries[1].cntlid, CNTLID_DYNAMIC);
    // Paged: the second entry alone, at offset 2048.
    let mut glp = GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap();
    glp.lpo = 2048;
    assert_eq!(host.log_page(&mut engine, glp).ok().data, full[2048..]);

    // An AER is held, then completed when a subsystem is added; GENCTR moves.
    assert!(host.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    target.add_subsystem(SubsystemParams::new("nqn.2024-01.io.nvmf-rs:new")).unwrap();
    let mut out = Vec::new();
    host.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { cqe, .. }] = out[..] else { panic!("{out:?}") };
    assert_eq!(cqe.dw0, AsyncEvent::DISCOVERY_LOG_PAGE_CHANGE.to_dw0());
    let header = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&header).unwrap();
    assert!(page.header.genctr > genctr);
    assert_eq!(page.header.numrec, 3);
    assert_eq!(header.len(), HEADER_SIZE);

    // No I/O queues on a discovery controller; no I/O log pages.
    let done = Host::new(&target).connect(&mut engine, 1, 31, cntlid, DISCOVERY_NQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, InvalidParameter::in_command(42).to_dw0());
    let done = host.log_page(&mut engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap());
    assert_eq!(done.status(), Status::INVALID_LOG_PAGE.with_dnr());
    // Keep alive is served.
    host.run(&mut engine, KeepAlive.to_sqe()).ok();
}

#[test]
fn discovery_can_be_disabled() {
    let params = TargetParams { discovery_enabled: false, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
}

// -------------------------------------------------------------------------------------------------------------
// Model
// -------------------------------------------------------------------------------------------------------------

#[test]
fn model_validation() {
    let bad = |p: SubsystemParams| Target::new(target_params(), vec![p]).unwrap_err();
    assert!(matches!(
        bad(SubsystemParams::new("not-an-nqn")),
        TargetError::Subsystem(SubsystemError::InvalidNqn { .. })
    ));
    assert!(matches!(
        bad(SubsystemParams::new(DISCOVERY_NQN)),
        TargetError::Subsystem(SubsystemError::InvalidNqn { .. })
    ));
    let mut p = subsystem_params();
    p.namespaces.push(NamespaceParams::new(1, memory(4096, 512)));
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::DuplicateNsid { nsid: 1, .. })));
    let mut p = subsystem_params();
    p.namespaces = vec![NamespaceParams::new(0, memory(4096, 512))];
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidNsid { nsid: 0, .. })));
    let mut p = subsystem_params();
    p.cntlid_range = 10..=0xFFF5;
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidCntlidRange { .. })));
    let mut p = subsystem_params();
    p.serial = "x".repeat(21);
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidText { field: "serial", .. })));
    assert!(matches!(
        Target::new(target_params(), vec![subsystem_params(), subsystem_params()]).unwrap_err(),
        TargetError::DuplicateSubsystem(_)
    ));
    for params in [
        TargetParams { mdts: 3000, ..target_params() },
        TargetParams { max_queue_entries: 1, ..target_params() },
        TargetParams { max_io_queues: 0, ..target_params() },
    ] {
        assert!(matches!(Target::new(params, vec![]).unwrap_err(), TargetError::InvalidParameter { .. }));
    }
    let target = target();
    let subsystem = target.subsystem(SUBNQN).unwrap();
    assert!(matches!(subsystem.remove_namespace(9), Err(SubsystemError::UnknownNsid { nsid: 9, .. })));
    assert!(matches!(
        subsystem.add_namespace(NamespaceParams::new(1025, memory(4096, 512))),
        Err(SubsystemError::InvalidNsid { .. })
    ));
    assert!(matches!(target.remove_subsystem("nqn.2024-01.io.nvmf-rs:nope"), Err(TargetError::UnknownSubsystem(_))));
}

#[test]
fn cntlid_allocation_wraps_within_the_range() {
    let mut p = subsystem_params();
    p.cntlid_range = 7..=8;
    let target = Target::new(target_params(), vec![p]).unwrap();
    let mut engine = engine();
    let mut hosts: Vec<Host> = (0..2).map(|_| Host::new(&target)).collect();
    let ids: Vec<u16> = hosts
        .iter_mut()
        .map(|h| {
            ConnectResponse::from_dw0(h.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
                .cntlid
        })
        .collect();
    assert_eq!(ids, vec![7, 8]);
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_CONTROLLER_BUSY);
    hosts[0].queue.disconnect(&mut engine);
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    assert_eq!(ConnectResponse::from_dw0(done.cqe.dw0).cntlid, 7);
}

#[test]
fn removing_a_subsystem_ends_its_associations() {
    let mut a = associate(target());
    a.target.remove_subsystem(SUBNQN).unwrap();
    let mut out = Vec::new();
    let now = Instant::now();
    assert_eq!(
        a.admin.queue.poll(&mut a.engine, now, &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    assert_eq!(a.io.queue.poll(&mut a.engine, now, &mut out), Err(QueueError::AssociationEnded { cntlid: a.cntlid }));
}

#[test]
fn storage_tags_round_trip() {
    let tag = storage_tag(0xABCD, SlotId::new(0x1234));
    assert_eq!(split_storage_tag(tag), (0xABCD, SlotId::new(0x1234)));
    assert_eq!(SlotId::new(9).index(), 9);
}

#[test]
fn transfers_larger_than_the_engine_buffers_fail_instead_of_waiting() {
    // MDTS 1 MiB but 64 KiB engine buffers: a 128 KiB read can never get a buffer.
    let params = TargetParams { mdts: 1 << 20, ..target_params() };
    let mut a = associate(Target::new(params, vec![subsystem_params()]).unwrap());
    a.engine = IoEngine::new(&EngineConfig {
        ring_entries: 32,
        buffer_size: 64 << 10,
        buffer_count: 2,
        small_buffer_size: 4096,
        small_buffer_count: 0,
        max_files: 4,
    })
    .unwrap();
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 256).status(), Status::INVALID_FIELD.with_dnr());
    a.io.read(&mut a.engine, 1, 0, 128).ok();
}

#[test]
fn queues_and_controllers_cross_threads() {
    fn send<T: Send>() {}
    fn shared<T: Send + Sync>() {}
    send::<Queue>();
    shared::<Controller>();
    shared::<Target>();
    shared::<Subsystem>();
    send::<Step>();
}

mod hostile {
    //! Arbitrary SQEs and in-capsule data on connected admin and I/O queues: the controller answers every one
    //! (or holds it, for AERs) and never panics.

    use super::*;
    use proptest::prelude::*;

    fn run_arbitrary(host: &mut Host, engine: &mut IoEngine, bytes: &[u8], in_capsule: &[u8]) -> bool {
        let sqe = SubmissionQueueEntry::parse(bytes).unwrap();
        let Ok(step) = host.queue.command(engine, &sqe, in_capsule) else { return false };
        let host_data = vec![0xA5u8; 1 << 20];
        let _ = host.drive(engine, step, &host_data);
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn arbitrary_commands_never_panic(
            commands in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 64), proptest::collection::vec(any::<u8>(), 0..2048), any::<bool>()),
                1..24,
            ),
        ) {
            let mut a = associate(target());
            for (mut bytes, data, on_admin) in commands {
                // Steer most commands towards real opcodes, NSIDs and data pointers so that they get past the
                // first checks; the rest stays arbitrary.
                let pick = bytes[63];
                if pick & 0x80 == 0 {
                    const OPCODES: [u8; 15] =
                        [0x02, 0x06, 0x09, 0x0A, 0x0C, 0x18, 0x08, 0x7F, 0x00, 0x01, 0x02, 0x05, 0x08, 0x09, 0x7F];
                    bytes[0] = OPCODES[usize::from(pick) % OPCODES.len()];
                    bytes[1] = 0x40;
                    if bytes[0] == 0x7F {
                        bytes[4] = [0x00, 0x01, 0x04, 0x08, 0x05][usize::from(bytes[5]) % 5];
                    } else if pick & 0x40 == 0 {
                        let nsid: u32 = [0, 1, 2, 0xFFFF_FFFF][usize::from(bytes[5]) % 4];
                        bytes[4..8].copy_from_slice(&nsid.to_le_bytes());
                    }
                    let len = u32::from(u16::from_le_bytes([bytes[9], bytes[10]])) * 4;
                    let sgl = if pick & 0x20 == 0 {
                        transport_data(len)
                    } else {
                        SglDescriptor::DataBlock {
                            address: u64::from(bytes[11] & 0x3),
                            length: u32::try_from(data.len()).unwrap(),
                            subtype: SglSubtype::Offset,
                        }
                    };
                    bytes[24..40].copy_from_slice(&sgl.to_bytes().unwrap());
                    // Small transfers: NLB and NR from one byte.
                    if bytes[0] != 0x7F && bytes[0] != 0x06 && bytes[0] != 0x02 {
                        let nlb = u16::from(bytes[12] & 0x7);
                        bytes[48..50].copy_from_slice(&nlb.to_le_bytes());
                    }
                }
                let host = if on_admin { &mut a.admin } else { &mut a.io };
                if !run_arbitrary(host, &mut a.engine, &bytes, &data) {
                    break;
                }
            }
        }
    }
}
