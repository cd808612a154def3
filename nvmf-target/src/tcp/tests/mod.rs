//! End-to-end tests of [`TcpConnection`]: a host made of hand-encoded PDUs (nvmf-common) on a loopback
//! socket, the real controller `Queue` and an `IoEngine` serving a memory namespace (a buffered file namespace in
//! one test).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{Connect, ConnectData, CATTR_DISABLE_SQ_FLOW_CONTROL, CNTLID_DYNAMIC};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{ControllerConfiguration, PropertyGet, PropertySet, PropertySize};
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::io::{Flush, Read as ReadCmd, Write as WriteCmd};
use nvmf_common::nvme::sgl::{SglDescriptor, SglSubtype};
use nvmf_common::nvme::{CompletionQueueEntry, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{
    CapsuleCommand, DecoderConfig, DigestTypes, Direction, FatalErrorStatus, Framing, H2cData, IcReq, Pdu, PduDecoder,
    R2t,
};

use super::{ConnectionError, SocketIo, TcpConnection, TcpTransportConfig};
use crate::backend::{cached_and_unwritten_pages, EngineConfig, IoEngine, Storage, StorageSpec};
use crate::controller::{
    split_storage_tag, NamespaceParams, Queue, SubsystemParams, Target, TargetParams, TransportInfo,
};

const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:tcp-test";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const BLOCK: u32 = 512;

mod errors;

/// The target side of a test: the reactor's engine and the target.
struct Rig {
    engine: IoEngine,
    target: Arc<Target>,
    config: TcpTransportConfig,
    next_key: u64,
    /// Connections drive their sockets through the engine's ring ([`SocketIo::IoUring`]).
    ring: bool,
}

/// The rigs' usual namespace 1: 16 MiB of memory.
fn memory_storage() -> Arc<Storage> {
    Arc::new(Storage::open(&StorageSpec::Memory { size: 16 << 20, block_size: BLOCK }).expect("memory storage"))
}

impl Rig {
    fn new(config: TcpTransportConfig) -> Rig {
        Rig::with_storage(config, memory_storage())
    }

    /// A rig whose namespace 1 is `storage`.
    fn with_storage(config: TcpTransportConfig, storage: Arc<Storage>) -> Rig {
        Rig::with_engine(config, storage, false)
    }

    /// A rig whose engine defers completion work to its thread's entries when `defer_task_work` (as a reactor's
    /// with sockets on the ring).
    fn with_engine(config: TcpTransportConfig, storage: Arc<Storage>, defer_task_work: bool) -> Rig {
        let engine = IoEngine::new(&EngineConfig {
            ring_entries: 64,
            buffer_size: 1 << 20,
            buffer_count: 4,
            small_buffer_size: 64 << 10,
            small_buffer_count: 16,
            max_files: 4,
            defer_task_work,
            ..EngineConfig::default()
        })
        .expect("io engine");
        let mut subsystem = SubsystemParams::new(SUBNQN);
        subsystem.namespaces.push(NamespaceParams::new(1, storage));
        let target = Target::new(TargetParams::default(), vec![subsystem]).expect("target");
        Rig { engine, target, config, next_key: 1, ring: false }
    }

    /// A rig whose connections use the socket path `ring` says; `None` (the test says it skipped) when this
    /// kernel's io_uring cannot carry sockets.
    fn on_path(config: TcpTransportConfig, ring: bool) -> Option<Rig> {
        let mut rig = Rig::with_engine(config, memory_storage(), ring);
        if ring && rig.engine.start_socket_io() != crate::backend::SocketOps::Supported {
            eprintln!("skipped the io_uring socket path: this kernel lacks the ops");
            return None;
        }
        rig.ring = ring;
        Some(rig)
    }

    /// A new connection from a host socket.
    fn connect(&mut self) -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        host.set_nonblocking(true).unwrap();
        host.set_nodelay(true).unwrap();
        let key = self.next_key;
        self.next_key += 1;
        let info = TransportInfo::tcp(1, self.config.in_capsule_data_size, key);
        let queue = Queue::new(Arc::clone(&self.target), info, self.engine.clock().turn());
        let io = if self.ring { SocketIo::IoUring(key) } else { SocketIo::Epoll };
        let mut conn = TcpConnection::new(mio::net::TcpStream::from_std(server), queue, &self.config, io);
        conn.start(&mut self.engine);
        Peer {
            conn,
            key,
            ring: self.ring,
            reading: true,
            host,
            out: Vec::new(),
            decoder: PduDecoder::new(DecoderConfig::new(Direction::ControllerToHost, 1 << 24)),
            framing: Framing::default(),
            inbox: VecDeque::new(),
            eof: false,
            error: None,
            next_cid: 1,
        }
    }
}

thread_local! {
    /// Socket completions one connection's pump took for another connection of the test's rig.
    static STRAY_NET_COMPLETIONS: std::cell::Cell<Vec<crate::backend::NetCompletion>> = const { std::cell::Cell::new(Vec::new()) };
}

/// One host connection and the target's `TcpConnection` for it.
struct Peer {
    conn: TcpConnection,
    key: u64,
    /// The connection's socket is on the ring: its completions come from the engine, not readiness.
    ring: bool,
    /// The host reads its socket when pumped.
    reading: bool,
    host: std::net::TcpStream,
    /// Bytes the host has yet to write.
    out: Vec<u8>,
    decoder: PduDecoder,
    framing: Framing,
    inbox: VecDeque<(Pdu, Vec<u8>)>,
    /// The target closed the socket.
    eof: bool,
    /// What `on_readable` / `on_writable` returned when the connection ended.
    error: Option<ConnectionError>,
    next_cid: u16,
}

impl Peer {
    fn send(&mut self, pdu: Pdu, data: &[u8]) {
        let bytes = pdu.to_bytes(data, &self.framing).unwrap();
        self.out.extend_from_slice(&bytes);
    }

    fn cid(&mut self) -> u16 {
        self.next_cid += 1;
        self.next_cid
    }

    /// One reactor turn for this connection, and the host's side of the socket.
    fn pump(&mut self, engine: &mut IoEngine) {
        let now = Instant::now();
        engine.clock_mut().start_turn(now);
        if !self.out.is_empty() {
            match self.host.write(&self.out) {
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.out.clear(),
            }
        }
        let record = |r: Result<bool, ConnectionError>, error: &mut Option<ConnectionError>| {
            if let Err(e) = r {
                error.get_or_insert(e);
            }
        };
        if !self.ring {
            let r = self.conn.on_readable(engine);
            record(r, &mut self.error);
        }
        let r = self.conn.poll(engine, now).map(|()| true);
        record(r, &mut self.error);
        engine.submit().unwrap();
        let mut completions = Vec::new();
        engine.reap(|c| completions.push(c));
        for c in completions {
            let (key, slot) = split_storage_tag(c.tag);
            assert_eq!(key, self.key, "completion routed to the wrong connection");
            self.conn.io_completed(engine, slot, c.result);
        }
        // Socket completions of the rig's other connections wait for their own pump.
        let mut net = STRAY_NET_COMPLETIONS.take();
        engine.take_net_completions(&mut net);
        let (mine, others): (Vec<_>, Vec<_>) = net.into_iter().partition(|c| c.tag == self.key);
        STRAY_NET_COMPLETIONS.set(others);
        for c in mine {
            let r = self.conn.net_completed(engine, c);
            record(r, &mut self.error);
        }
        let r = self.conn.on_writable(engine);
        record(r, &mut self.error);
        engine.submit().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while self.reading {
            match self.host.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    let mut at = 0;
                    while at < n {
                        let f = self.decoder.feed(&buf[at..n]);
                        at += f.consumed;
                        match f.result {
                            Ok(Some(p)) => {
                                let pdu = p.pdu;
                                let data = p.data.to_vec();
                                if let Pdu::IcResp(r) = pdu {
                                    self.framing = Framing {
                                        hdgst: r.dgst.hdgst_enable,
                                        ddgst: r.dgst.ddgst_enable,
                                        hpda: self.framing.hpda,
                                        cpda: r.cpda,
                                    };
                                    self.decoder.set_framing(self.framing);
                                }
                                self.inbox.push_back((pdu, data));
                            }
                            Ok(None) => {}
                            Err(e) => panic!("host could not decode the target's PDU: {e}"),
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.eof = true;
                    break;
                }
            }
        }
    }

    /// The next PDU from the target.
    fn expect(&mut self, engine: &mut IoEngine) -> (Pdu, Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(p) = self.inbox.pop_front() {
                return p;
            }
            assert!(!self.eof, "connection closed while a PDU was expected (error: {:?})", self.error);
            assert!(Instant::now() < deadline, "no PDU from the target");
            self.pump(engine);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The next PDU, which must be a CapsuleResp.
    fn expect_response(&mut self, engine: &mut IoEngine) -> CompletionQueueEntry {
        match self.expect(engine) {
            (Pdu::CapsuleResponse(r), _) => r.cqe,
            other => panic!("expected a CapsuleResp, got {other:?}"),
        }
    }

    /// Pump until the target closed the connection.
    fn expect_closed(&mut self, engine: &mut IoEngine) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.eof {
            assert!(Instant::now() < deadline, "the target did not close the connection");
            self.pump(engine);
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(self.conn.is_closed());
    }

    fn initialize(&mut self, engine: &mut IoEngine, hdgst: bool, ddgst: bool, hpda: u8) {
        let dgst = DigestTypes { hdgst_enable: hdgst, ddgst_enable: ddgst };
        self.send(Pdu::IcReq(IcReq { pfv: 0, hpda, dgst, maxr2t: 0 }), &[]);
        self.framing.hpda = hpda;
        match self.expect(engine) {
            (Pdu::IcResp(r), _) => {
                assert_eq!((r.pfv, r.cpda), (0, 0));
                assert_eq!(r.dgst, dgst);
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    /// Send a command; in-capsule `data` if any.
    fn command(&mut self, mut sqe: SubmissionQueueEntry, data: &[u8]) -> u16 {
        let cid = self.cid();
        sqe.cid = cid;
        self.send(Pdu::CapsuleCommand(CapsuleCommand { sqe }), data);
        cid
    }

    /// Fabrics Connect with in-capsule Connect data; returns the response.
    fn connect(&mut self, engine: &mut IoEngine, qid: u16, cntlid: u16, cattr: u8) -> CompletionQueueEntry {
        let cid = self.send_connect(qid, cntlid, cattr);
        let cqe = self.expect_response(engine);
        assert_eq!(cqe.cid, cid);
        cqe
    }

    /// Send a Fabrics Connect with in-capsule Connect data; its CID.
    fn send_connect(&mut self, qid: u16, cntlid: u16, cattr: u8) -> u16 {
        let sgl1 = SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset };
        let sqe = Connect { qid, sqsize: 31, cattr, kato: 0, sgl1 }.to_sqe().unwrap();
        let data = ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Nqn::new(HOSTNQN).unwrap(),
        }
        .to_bytes();
        self.command(sqe, &data)
    }
}

fn admin_sqe_ok(peer: &mut Peer, engine: &mut IoEngine, sqe: SubmissionQueueEntry) -> CompletionQueueEntry {
    let cid = peer.command(sqe, &[]);
    let cqe = peer.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS), "{sqe:?}");
    cqe
}

/// An enabled controller (admin connection) and a connected I/O queue 1.
fn association(rig: &mut Rig, hdgst: bool, ddgst: bool, cattr: u8) -> (Peer, Peer) {
    let mut admin = rig.connect();
    admin.initialize(&mut rig.engine, hdgst, ddgst, 0);
    let cqe = admin.connect(&mut rig.engine, 0, CNTLID_DYNAMIC, 0);
    assert_eq!(cqe.status, Status::SUCCESS);
    let cntlid = u16::try_from(cqe.dw0 & 0xffff).unwrap();
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..Default::default() };
    let set = PropertySet { size: PropertySize::Four, offset: 0x14, value: u64::from(cc.to_u32()) };
    admin_sqe_ok(&mut admin, &mut rig.engine, set.to_sqe());
    let nq = SetFeatures::new(&NumberOfQueues { nsqr: 0, ncqr: 0 });
    admin_sqe_ok(&mut admin, &mut rig.engine, nq.to_sqe());
    let mut io = rig.connect();
    io.initialize(&mut rig.engine, hdgst, ddgst, 0);
    let cqe = io.connect(&mut rig.engine, 1, cntlid, cattr);
    assert_eq!(cqe.status, Status::SUCCESS, "I/O queue Connect");
    (admin, io)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| i.to_le_bytes()[0].wrapping_mul(31).wrapping_add(seed)).collect()
}

fn write_sqe(slba: u64, len: usize, in_capsule: bool) -> SubmissionQueueEntry {
    let blocks = u16::try_from(len / BLOCK as usize - 1).unwrap();
    let mut sqe = WriteCmd { nsid: 1, slba, nlb: blocks, ..Default::default() }.to_sqe();
    let length = u32::try_from(len).unwrap();
    let sgl = if in_capsule {
        SglDescriptor::DataBlock { address: 0, length, subtype: SglSubtype::Offset }
    } else {
        SglDescriptor::TransportDataBlock { length, subtype: SglSubtype::TransportSpecific }
    };
    sqe.set_sgl1(&sgl).unwrap();
    sqe
}

fn read_sqe(slba: u64, len: usize) -> SubmissionQueueEntry {
    let blocks = u16::try_from(len / BLOCK as usize - 1).unwrap();
    let mut sqe = ReadCmd { nsid: 1, slba, nlb: blocks, ..Default::default() }.to_sqe();
    let length = u32::try_from(len).unwrap();
    sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length, subtype: SglSubtype::TransportSpecific }).unwrap();
    sqe
}

/// Write `data` at `slba` through R2T/H2CData (H2CData PDUs of `chunk` bytes); returns the R2Ts seen.
fn write_via_r2t(io: &mut Peer, engine: &mut IoEngine, slba: u64, data: &[u8], chunk: usize) -> Vec<R2t> {
    let cid = io.command(write_sqe(slba, data.len(), false), &[]);
    let mut r2ts = Vec::new();
    let mut sent = 0usize;
    while sent < data.len() {
        let r2t = match io.expect(engine) {
            (Pdu::R2t(r), _) => r,
            other => panic!("expected R2T, got {other:?}"),
        };
        assert_eq!((r2t.cccid, r2t.r2to as usize), (cid, sent));
        let end = sent + r2t.r2tl as usize;
        while sent < end {
            let n = chunk.min(end - sent);
            let h = H2cData {
                cccid: cid,
                ttag: r2t.ttag,
                datao: u32::try_from(sent).unwrap(),
                datal: u32::try_from(n).unwrap(),
                last_pdu: sent + n == end,
            };
            io.send(Pdu::H2cData(h), &data[sent..sent + n]);
            sent += n;
        }
        r2ts.push(r2t);
    }
    let cqe = io.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS));
    r2ts
}

/// Read `len` bytes at `slba`; returns the data and the C2HData PDUs' (datao, datal, success).
fn read(io: &mut Peer, engine: &mut IoEngine, slba: u64, len: usize) -> (Vec<u8>, Vec<(u32, u32, bool)>) {
    let cid = io.command(read_sqe(slba, len), &[]);
    let mut data = Vec::new();
    let mut pdus = Vec::new();
    loop {
        match io.expect(engine) {
            (Pdu::C2hData(c), d) => {
                assert_eq!((c.cccid, c.datao as usize), (cid, data.len()));
                assert_eq!(c.last_pdu, data.len() + d.len() == len);
                data.extend_from_slice(&d);
                pdus.push((c.datao, c.datal, c.success));
                if c.success {
                    return (data, pdus);
                }
            }
            (Pdu::CapsuleResponse(r), _) => {
                assert_eq!((r.cqe.cid, r.cqe.status), (cid, Status::SUCCESS));
                return (data, pdus);
            }
            other => panic!("expected C2HData or CapsuleResp, got {other:?}"),
        }
    }
}

#[test]
fn ic_handshake_negotiates_digests_as_allowed() {
    let mut rig = Rig::new(TcpTransportConfig { data_digest: false, ..Default::default() });
    let mut p = rig.connect();
    p.send(
        Pdu::IcReq(IcReq { pfv: 0, hpda: 2, dgst: DigestTypes { hdgst_enable: true, ddgst_enable: true }, maxr2t: 0 }),
        &[],
    );
    match p.expect(&mut rig.engine) {
        (Pdu::IcResp(r), _) => {
            assert_eq!(r.dgst, DigestTypes { hdgst_enable: true, ddgst_enable: false });
            assert_eq!((r.pfv, r.cpda, r.maxh2cdata), (0, 0, 128 * 1024));
        }
        other => panic!("{other:?}"),
    }
    let mut p = rig.connect();
    p.initialize(&mut rig.engine, false, false, 0);
    // A second ICReq is a PDU Sequence Error.
    p.send(Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 }), &[]);
    match p.expect(&mut rig.engine) {
        (Pdu::TermReq(t), data) => {
            assert_eq!((t.fes, t.fei), (FatalErrorStatus::PduSequenceError, 0));
            assert_eq!(data.len(), 128, "the offending ICReq header");
        }
        other => panic!("{other:?}"),
    }
    p.expect_closed(&mut rig.engine);
}

#[test]
fn connect_with_in_capsule_data() {
    for (hdgst, ddgst) in [(false, false), (true, true), (true, false)] {
        let mut rig = Rig::new(TcpTransportConfig::default());
        let mut p = rig.connect();
        p.initialize(&mut rig.engine, hdgst, ddgst, 0);
        let cqe = p.connect(&mut rig.engine, 0, CNTLID_DYNAMIC, 0);
        assert_eq!(cqe.status, Status::SUCCESS);
        assert_ne!(cqe.dw0 & 0xffff, u32::from(CNTLID_DYNAMIC));
    }
}

#[test]
fn write_via_r2t_and_in_capsule_then_read_back() {
    for (hdgst, ddgst) in [(false, false), (true, true)] {
        let config = TcpTransportConfig { max_c2h_data: 64 * 1024, ..Default::default() };
        let mut rig = Rig::new(config);
        let (_admin, mut io) = association(&mut rig, hdgst, ddgst, 0);
        let engine = &mut rig.engine;
        // 300 KiB through one R2T, sent by the host in MAXH2CDATA-sized PDUs.
        let big = pattern(300 * 1024, 1);
        let r2ts = write_via_r2t(&mut io, engine, 8, &big, 128 * 1024);
        assert_eq!(r2ts.len(), 1);
        assert_eq!((r2ts[0].r2to, r2ts[0].r2tl), (0, 300 * 1024));
        // 4 KiB in-capsule right after it.
        let small = pattern(4096, 2);
        let cid = io.command(write_sqe(1000, small.len(), true), &small);
        let cqe = io.expect_response(engine);
        assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS));
        // Read both back: 300 KiB comes as 64 KiB C2HData PDUs, then a CapsuleResp.
        let (got, pdus) = read(&mut io, engine, 8, big.len());
        assert!(got == big, "data read back differs (digests {hdgst}/{ddgst})");
        assert_eq!(pdus.len(), 5);
        assert!(pdus.iter().all(|&(_, len, success)| len <= 64 * 1024 && !success));
        let (got, _) = read(&mut io, engine, 1000, small.len());
        assert_eq!(got, small);
    }
}

#[test]
fn buffered_file_namespace_round_trips_and_flush_and_fua_leave_nothing_unwritten() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("ns.img");
    std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    file.sync_all().unwrap();
    let unwritten = || cached_and_unwritten_pages(file.as_raw_fd()).expect("cachestat (Linux 6.5)").1;
    // The namespace as the daemon opens it from a configuration file; without the key it is O_DIRECT.
    let open = |buffered_io: &str| {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
             [[subsystem.namespace]]\npath = \"{}\"\n{buffered_io}",
            path.display()
        );
        let config = nvmf_config::TargetConfig::from_str(&text, "test").unwrap();
        let ns = &config.subsystems[0].namespaces[0];
        crate::daemon::namespace_params(SUBNQN, ns, &config.limits).unwrap().storage
    };
    assert!(open("").is_direct(), "ext4 under /var/tmp takes O_DIRECT");
    let storage = open("buffered_io = true\n");
    assert!(!storage.is_direct() && storage.volatile_write_cache());
    let mut rig = Rig::with_storage(TcpTransportConfig::default(), storage);
    let (_admin, mut io) = association(&mut rig, false, false, 0);
    let engine = &mut rig.engine;
    assert_eq!(unwritten(), 0, "the file starts clean");
    // A plain write is acknowledged from the page cache (so it is still dirty there); Flush writes it back.
    let big = pattern(300 * 1024, 3);
    write_via_r2t(&mut io, engine, 8, &big, 128 * 1024);
    assert!(unwritten() > 0, "a buffered write sits dirty in the page cache");
    let cid = io.command(Flush { nsid: 1 }.to_sqe(), &[]);
    let cqe = io.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS), "Flush");
    assert_eq!(unwritten(), 0, "Flush wrote the page cache back");
    // A FUA write is durable when acknowledged, with no Flush.
    let small = pattern(4096, 4);
    let mut sqe = write_sqe(1000, small.len(), true);
    sqe.cdw12 = WriteCmd { fua: true, ..WriteCmd::from_sqe(&sqe).unwrap() }.to_sqe().cdw12;
    let cid = io.command(sqe, &small);
    let cqe = io.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS), "FUA write");
    assert_eq!(unwritten(), 0, "the FUA write was written back before its completion");
    // Both read back over the wire and from the file itself.
    assert!(read(&mut io, engine, 8, big.len()).0 == big, "R2T write read back");
    assert_eq!(read(&mut io, engine, 1000, small.len()).0, small, "FUA write read back");
    let on_disk = std::fs::read(&path).unwrap();
    let at = |slba: usize, len: usize| &on_disk[slba * BLOCK as usize..slba * BLOCK as usize + len];
    assert!(at(8, big.len()) == &big[..] && at(1000, small.len()) == &small[..], "the data is in the file");
}

#[test]
fn r2ts_are_split_and_limited_by_maxr2t() {
    let config = TcpTransportConfig { max_r2t_len: 64 * 1024, ..Default::default() };
    let mut rig = Rig::new(config);
    let (_admin, mut io) = association(&mut rig, false, false, 0);
    let data = pattern(200 * 1024, 3);
    // The host's MAXR2T is 0: one R2T at a time, each at most 64 KiB.
    let r2ts = write_via_r2t(&mut io, &mut rig.engine, 0, &data, 16 * 1024);
    let shape: Vec<_> = r2ts.iter().map(|r| (r.r2to / 1024, r.r2tl / 1024)).collect();
    assert_eq!(shape, vec![(0, 64), (64, 64), (128, 64), (192, 8)]);
    assert_eq!(read(&mut io, &mut rig.engine, 0, data.len()).0, data);
}

#[test]
fn success_flag_when_the_host_disabled_sq_flow_control() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let (_admin, mut io) = association(&mut rig, true, true, CATTR_DISABLE_SQ_FLOW_CONTROL);
    let data = pattern(8192, 4);
    write_via_r2t(&mut io, &mut rig.engine, 0, &data, 8192);
    let (got, pdus) = read(&mut io, &mut rig.engine, 0, data.len());
    assert_eq!(got, data);
    assert_eq!(pdus, vec![(0, 8192, true)], "one C2HData with SUCCESS, no CapsuleResp");
    // The next command's response is the next PDU: no CapsuleResp followed the read.
    let (got, _) = read(&mut io, &mut rig.engine, 0, 512);
    assert_eq!(got, data[..512]);
}

#[test]
fn pdus_split_across_reads_and_many_per_read() {
    let mut rig = Rig::new(TcpTransportConfig { receive_buffer_size: 4096, ..Default::default() });
    let (_admin, mut io) = association(&mut rig, true, true, 0);
    let engine = &mut rig.engine;
    // Eight in-capsule writes in one burst, larger than the receive buffer: PDUs straddle reads.
    let mut expected = Vec::new();
    for i in 0..8u8 {
        let data = pattern(1024, 10 + i);
        let cid = io.command(write_sqe(u64::from(i) * 2, data.len(), true), &data);
        expected.push(cid);
    }
    for cid in expected {
        let cqe = io.expect_response(engine);
        assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS));
    }
    for i in 0..8u8 {
        assert_eq!(read(&mut io, engine, u64::from(i) * 2, 1024).0, pattern(1024, 10 + i));
    }
}

#[test]
fn the_receive_buffer_stays_small_until_the_queue_is_connected() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let mut peer = rig.connect();
    peer.initialize(&mut rig.engine, false, false, 0);
    assert_eq!(peer.conn.receive_buffer_len(), 8 << 10, "an unconnected peer costs a small buffer");
    let cqe = peer.connect(&mut rig.engine, 0, 0xFFFF, 0);
    assert!(cqe.status.is_success(), "{cqe:?}");
    let cap = PropertyGet { size: PropertySize::Eight, offset: 0 }.to_sqe();
    admin_sqe_ok(&mut peer, &mut rig.engine, cap);
    assert_eq!(peer.conn.receive_buffer_len(), TcpTransportConfig::default().receive_buffer_size);
}

#[test]
fn reading_pauses_while_the_send_backlog_is_over_its_limit_and_resumes_without_losing_a_command() {
    for ring in [false, true] {
        let config = TcpTransportConfig { max_send_backlog: 64 << 10, ..TcpTransportConfig::default() };
        let Some(mut rig) = Rig::on_path(config, ring) else { continue };
        let (_admin, mut io) = association(&mut rig, false, false, 0);
        let len = 128 << 10;
        let data = pattern(len, 5);
        write_via_r2t(&mut io, &mut rig.engine, 0, &data, 32 << 10);
        // Small socket buffers: what the target sends piles up in its send queue, not in the kernel.
        socket2::SockRef::from(&*io.conn.stream_mut()).set_send_buffer_size(16 << 10).unwrap();
        socket2::SockRef::from(&io.host).set_recv_buffer_size(16 << 10).unwrap();
        // The host stops reading and sends reads one at a time: once the backlog is over the limit, reading pauses
        // with commands still to decode (on the ring: the receive is cancelled).
        io.reading = false;
        let mut cids = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !io.conn.is_read_paused() {
            assert!(cids.len() < 24, "reading never paused ({} reads sent, ring: {ring})", cids.len());
            assert!(Instant::now() < deadline, "reading never paused (ring: {ring})");
            cids.push(io.command(read_sqe(0, len), &[]));
            for _ in 0..20 {
                io.pump(&mut rig.engine);
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        assert_eq!(rig.target.send_backlog_pauses(), 1, "the pause is counted once (ring: {ring})");
        // More commands while paused, then the host reads again: every read comes back whole.
        for _ in 0..4 {
            cids.push(io.command(read_sqe(0, len), &[]));
        }
        io.reading = true;
        let mut got: std::collections::HashMap<u16, Vec<u8>> = cids.iter().map(|&c| (c, Vec::new())).collect();
        let mut answered = 0;
        while answered < cids.len() {
            match io.expect(&mut rig.engine) {
                (Pdu::C2hData(c), d) => got.get_mut(&c.cccid).expect("a read we sent").extend_from_slice(&d),
                (Pdu::CapsuleResponse(r), _) => {
                    assert_eq!(r.cqe.status, Status::SUCCESS, "ring: {ring}");
                    answered += 1;
                }
                other => panic!("expected C2HData or CapsuleResp, got {other:?}"),
            }
        }
        assert!(got.values().all(|d| *d == data), "every read brought the data back (ring: {ring})");
        assert!(!io.conn.is_read_paused());
        assert_eq!(read(&mut io, &mut rig.engine, 0, 4096).0, data[..4096], "the queue goes on (ring: {ring})");
    }
}

#[test]
fn a_read_event_stops_at_a_short_read_unless_the_host_hung_up() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let mut p = rig.connect();
    p.initialize(&mut rig.engine, false, false, 0);
    // A Keep Alive and the end of the stream, both in the socket before the target reads.
    let mut sqe = SubmissionQueueEntry::new(0x18);
    sqe.cid = p.cid();
    let bytes = Pdu::CapsuleCommand(CapsuleCommand { sqe }).to_bytes(&[], &p.framing).unwrap();
    p.host.write_all(&bytes).unwrap();
    p.host.shutdown(std::net::Shutdown::Write).unwrap();
    // The read of the capsule filled less than the buffer: the event's reading ends there.
    assert!(p.conn.on_read_event(&mut rig.engine, false).unwrap(), "read past a short read");
    // The hang-up's event reads on to the end of the stream.
    assert!(!p.conn.on_read_event(&mut rig.engine, true).unwrap(), "the end of the stream was not seen");
}

#[test]
fn a_connection_held_at_connect_is_served_where_it_is_placed_on_either_socket_path() {
    for ring in [false, true] {
        let Some(mut rig) = Rig::on_path(TcpTransportConfig::default(), ring) else { continue };
        // Placed where it is: the held Connect is handled then.
        let mut p = rig.connect();
        p.conn.place_at_connect();
        p.initialize(&mut rig.engine, true, true, 0);
        let cid = p.send_connect(0, CNTLID_DYNAMIC, 0);
        hold_until_placed(&mut p, &mut rig.engine, ring);
        assert!(p.conn.place_here(&mut rig.engine).unwrap());
        let cqe = p.expect_response(&mut rig.engine);
        assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS), "ring: {ring}");
        assert!(!p.conn.awaits_placement());

        // Moved: another connection (another reactor's, with its own queue) takes the socket up, with the digests
        // ICReq negotiated, and answers the Connect without a second ICResp.
        let mut q = rig.connect();
        q.conn.place_at_connect();
        q.initialize(&mut rig.engine, true, true, 0);
        let cid = q.send_connect(0, CNTLID_DYNAMIC, 0);
        hold_until_placed(&mut q, &mut rig.engine, ring);
        let placeholder = rig.connect().conn;
        let held = std::mem::replace(&mut q.conn, placeholder);
        let (stream, initialized) = held.into_initialized(&mut rig.engine).expect("ready to move");
        q.key = rig.next_key;
        rig.next_key += 1;
        let info = TransportInfo::tcp(1, rig.config.in_capsule_data_size, q.key);
        let queue = Queue::new(Arc::clone(&rig.target), info, rig.engine.clock().turn());
        let io = if ring { SocketIo::IoUring(q.key) } else { SocketIo::Epoll };
        q.conn = TcpConnection::new(stream, queue, &rig.config, io);
        assert!(q.conn.resume(&mut rig.engine, initialized).unwrap());
        let cqe = q.expect_response(&mut rig.engine);
        assert_eq!((cqe.cid, cqe.status), (cid, Status::SUCCESS), "ring: {ring}");
        let get = PropertyGet { size: PropertySize::Eight, offset: 0 };
        let cap = admin_sqe_ok(&mut q, &mut rig.engine, get.to_sqe());
        assert_ne!(cap.dw0, 0, "CAP read after the move (ring: {ring})");
    }
}

/// Pump `p` until its connection holds the Connect for placement with nothing in flight, checking nothing was
/// answered meanwhile.
fn hold_until_placed(p: &mut Peer, engine: &mut IoEngine, ring: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.conn.can_leave() {
        assert!(Instant::now() < deadline, "the Connect was not held (ring: {ring})");
        p.pump(engine);
        std::thread::sleep(Duration::from_micros(200));
    }
    p.pump(engine);
    assert!(p.inbox.is_empty() && !p.eof, "the target answered a held Connect (ring: {ring})");
}
