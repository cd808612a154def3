//! Unit tests of the controller: a target with memory (and file) namespaces, queues driven with SQEs built by
//! `nvmf-common`'s views, and a real [`IoEngine`] (memory storage completes without the kernel; files go
//! through io_uring).
//!
//! This module holds what every topic's tests share: the target and engine builders and [`Host`], which drives
//! a queue the way a transport and a host would; each child module holds the tests of one topic.

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

use super::subsystem::CNTLID_RANGE;
use super::*;
use crate::backend::{EngineConfig, IoEngine, Storage, StorageSpec};

mod ana;
mod async_events;
mod authentication;
mod budgets;
mod connect;
mod discovery;
mod features;
mod fused;
mod hostile;
mod identify;
mod io;
mod keep_alive;
mod log_pages;
mod model;
mod properties;
mod reservations;

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
        ..EngineConfig::default()
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
        secure_channel: 0,
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
    /// Each command starts a reactor turn at the real clock; false while the test moves the engine's clock itself.
    real_clock: bool,
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
        Host::on(target, TransportInfo::tcp(1, IN_CAPSULE, key))
    }

    /// A host whose queue `transport` describes (its queue key too).
    fn on(target: &Arc<Target>, transport: TransportInfo) -> Self {
        let key = transport.queue_key;
        let queue = Queue::new(Arc::clone(target), transport, Instant::now());
        Host { queue, key, next_cid: 1, real_clock: true }
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
        if self.real_clock {
            engine.clock_mut().start_turn(Instant::now());
        }
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

    #[expect(clippy::too_many_arguments, reason = "every Connect field a test varies")]
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
