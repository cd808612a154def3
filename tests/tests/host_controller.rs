//! The host library against our target, in-process on 127.0.0.1: bring-up, namespaces, I/O at many sizes
//! (in-capsule and R2T paths, with and without digests), pipelining, flush / write zeroes / deallocate,
//! keep-alive and disconnect; SQ flow control disabled; the async API with scatter-gather buffers.

mod host_support;

use std::io::{IoSlice, IoSliceMut, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_support::{options, pattern, Target, SUBNQN};
use nvmf_common::fabrics::connect::{Connect, ConnectData};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{Property, PropertyGet};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::Status;
use nvmf_common::nvme::{SglDescriptor, SglSubtype};
use nvmf_host::queue::{execute, DataDirection, Request};
use nvmf_host::tcp::{TcpQueue, TcpQueueOptions};
use nvmf_host::{Controller, HostError};
use nvmf_tests::executor::{block_on, join_all};

#[test]
fn bring_up_and_namespaces() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(2)).expect("connect");
    let info = ctrl.info().clone();
    assert_eq!(info.subnqn, SUBNQN);
    assert_eq!(info.io_queues, 2);
    assert_eq!(ctrl.io_queues().len(), 2);
    assert!(info.in_capsule_data >= 1024, "IOCCSZ gives {} bytes", info.in_capsule_data);
    assert!(info.max_transfer.is_some());
    let ns = ctrl.namespaces().expect("namespaces");
    assert_eq!(ns.iter().map(|n| n.nsid).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!((ns[0].block_size, ns[0].blocks), (512, 16 << 11));
    assert_eq!((ns[1].block_size, ns[1].blocks), (4096, 2048));
    assert_ne!(ns[0].nguid, ns[1].nguid);
    ctrl.disconnect().expect("clean disconnect");
}

#[test]
fn connect_to_unknown_subsystem_is_rejected_with_its_status() {
    let target = Target::start();
    let err = Controller::connect(target.addr, "nqn.2024-01.io.nvmf-rs:nope", options(1)).unwrap_err();
    let message = err.to_string();
    match err {
        HostError::ConnectRejected { qid: 0, status, .. } => assert!(!status.is_success()),
        other => panic!("expected ConnectRejected, got {other}"),
    }
    assert!(
        message.starts_with("Connect of queue 0 refused: the target has no subsystem with this NQN ("),
        "{message}"
    );
}

#[test]
fn a_controller_that_cannot_authenticate_itself_is_not_used() {
    // Our target has no DH-HMAC-CHAP yet: asked to prove it holds the controller secret, it cannot, and the host
    // stops at the admin queue with the command that failed.
    let target = Target::start();
    let secret: nvmf_common::fabrics::auth::secret::DhchapSecret =
        "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:".parse().unwrap();
    let mut o = options(1);
    o.dhchap_secret = Some(secret.clone());
    let only_host = Controller::connect(target.addr, SUBNQN, o.clone()).expect("a host secret alone is not used");
    only_host.disconnect().unwrap();
    o.dhchap_ctrl_secret = Some(secret);
    let err = Controller::connect(target.addr, SUBNQN, o).unwrap_err();
    assert!(matches!(err, HostError::Status { command: "Authentication Send", .. }), "{err}");
}

#[test]
fn connect_refused_names_the_address() {
    // A port nobody listens on: bind, learn the port, close.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    match Controller::connect(addr, SUBNQN, options(1)).unwrap_err() {
        HostError::ConnectFailed { addr: a, .. } => assert_eq!(a, addr),
        other => panic!("expected ConnectFailed, got {other}"),
    }
}

fn write_read_sizes(hdr_digest: bool, data_digest: bool) {
    let target = Target::start();
    let mut opts = options(2);
    opts.hdr_digest = hdr_digest;
    opts.data_digest = data_digest;
    let ctrl = Controller::connect(target.addr, SUBNQN, opts).expect("connect");
    let mut slba = 0u64;
    for (i, len) in [512usize, 4096, 8192, 16 * 1024, 64 * 1024, 128 * 1024, 1 << 20].into_iter().enumerate() {
        let data = pattern(len, u8::try_from(i).unwrap() + 1);
        ctrl.write(1, slba, &data).unwrap_or_else(|e| panic!("write {len}: {e}"));
        let mut back = vec![0u8; len];
        ctrl.read(1, slba, &mut back).unwrap_or_else(|e| panic!("read {len}: {e}"));
        assert!(back == data, "{len} bytes read back differ");
        slba += (len / 512) as u64;
    }
    // 4 KiB-block namespace too.
    let data = pattern(256 * 1024, 77);
    ctrl.write(2, 10, &data).expect("write ns 2");
    let mut back = vec![0u8; data.len()];
    ctrl.read(2, 10, &mut back).expect("read ns 2");
    assert!(back == data);
    let r2ts: u64 = ctrl.io_queues().iter().map(|q| q.stats().r2ts).sum();
    assert!(r2ts > 0, "large writes went through R2T");
    ctrl.disconnect().expect("disconnect");
}

#[test]
fn write_read_back_many_sizes() {
    write_read_sizes(false, false);
}

#[test]
fn write_read_back_with_digests() {
    write_read_sizes(true, true);
}

#[test]
fn in_capsule_and_r2t_paths_are_both_used() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    let icd = usize::try_from(ctrl.info().in_capsule_data).unwrap();
    for (len, want_in_capsule) in [(512usize, true), (icd, true), (icd + 512, false)] {
        let sqe = nvmf_common::nvme::io::Write {
            nsid: 1,
            slba: 100,
            nlb: u16::try_from(len / 512 - 1).unwrap(),
            ..Default::default()
        }
        .to_sqe();
        let p = ctrl
            .submit_io(Request { sqe, data: pattern(len, 9), direction: DataDirection::HostToController, context: () })
            .unwrap();
        let reply = p.wait(Duration::from_secs(10)).unwrap();
        assert!(reply.result.unwrap().status.is_success());
        assert_eq!(reply.in_capsule, want_in_capsule, "{len} bytes");
        assert_eq!(reply.r2ts > 0, !want_in_capsule, "{len} bytes");
    }
}

#[test]
fn sixty_four_commands_in_flight_on_one_queue() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    let data = pattern(64 * 4096, 3);
    ctrl.write(1, 0, &data).unwrap();

    // Directly on a queue from one thread (poll API): a second admin queue (a new association), Connect,
    // then 64 Property Gets of CAP submitted before any completion is taken.
    let qopts = TcpQueueOptions { qid: 0, depth: 127, ..TcpQueueOptions::default() };
    let mut q: TcpQueue<usize> = TcpQueue::connect(target.addr, &qopts).unwrap();
    let id = nvmf_host::HostIdentity::generate();
    let connect = Connect {
        qid: 0,
        sqsize: 127,
        cattr: 0,
        kato: 0,
        sgl1: SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset },
    };
    let connect_data = ConnectData {
        hostid: id.hostid,
        cntlid: 0xFFFF,
        subnqn: Nqn::new(SUBNQN).unwrap(),
        hostnqn: Nqn::new(&id.hostnqn).unwrap(),
    }
    .to_bytes()
    .to_vec();
    let connect_sqe = connect.to_sqe().unwrap();
    q.submit(Request {
        sqe: connect_sqe,
        data: connect_data,
        direction: DataDirection::HostToController,
        context: usize::MAX,
    })
    .unwrap_or_else(|r| panic!("Connect: {}", r.error));
    let c = loop {
        q.poll(Some(Duration::from_millis(100))).expect("poll");
        if let Some(c) = q.next_completion() {
            break c;
        }
    };
    assert!(c.result.unwrap().status.is_success(), "admin Connect with SQSIZE 127");
    let cap_sqe = PropertyGet { size: Property::Cap.size(), offset: Property::Cap.offset() }.to_sqe();
    for i in 0..64usize {
        q.submit(Request { sqe: cap_sqe, data: Vec::new(), direction: DataDirection::None, context: i })
            .unwrap_or_else(|r| panic!("submit {i}: {}", r.error));
    }
    assert_eq!(q.outstanding(), 64);
    let mut seen = [false; 64];
    let mut caps = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.iter().any(|s| !s) {
        assert!(Instant::now() < deadline, "completions missing");
        q.poll(Some(Duration::from_millis(100))).expect("poll");
        while let Some(c) = q.next_completion() {
            assert!(!seen[c.context], "completion {} twice", c.context);
            seen[c.context] = true;
            let cqe = c.result.expect("a CQE");
            assert!(cqe.status.is_success());
            caps.insert(cqe.result64());
        }
    }
    assert_eq!(caps.len(), 1, "every Property Get returned the same CAP");
    assert_eq!(q.stats().max_outstanding, 64);

    // Through the controller's I/O thread: 64 reads submitted back to back on one I/O queue, data checked.
    let q1 = &ctrl.io_queues()[0];
    let pending: Vec<_> = (0..64usize)
        .map(|i| {
            let sqe = Read { nsid: 1, slba: (i * 8) as u64, nlb: 7, ..Read::default() }.to_sqe();
            q1.submit(Request { sqe, data: vec![0; 4096], direction: DataDirection::ControllerToHost, context: () })
                .unwrap()
        })
        .collect();
    for (i, p) in pending.into_iter().enumerate() {
        let r = p.wait(Duration::from_secs(10)).unwrap();
        assert!(r.result.unwrap().status.is_success());
        assert!(r.data == data[i * 4096..(i + 1) * 4096], "read {i}");
    }
    // How many of these overlap depends on thread scheduling (the I/O thread may finish one before the next
    // is submitted), so it is not asserted here: the poll-API half above proves 64 in flight deterministically.
}

/// Large reads make the queue read its socket in small windows (the payloads go straight into their buffers):
/// 128 KiB and 4 KiB reads in flight together, back to back on one queue, each lands whole and in place.
#[test]
fn large_and_small_reads_in_flight_together() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    let data = pattern(16 * 128 * 1024, 5);
    ctrl.write(1, 0, &data).unwrap();
    let q1 = &ctrl.io_queues()[0];
    for round in 0..4 {
        let pending: Vec<_> = (0..16usize)
            .map(|i| {
                // Even: a 128 KiB read of chunk i; odd: the 4 KiB at chunk i's block `round`.
                let (offset, len) =
                    if i % 2 == 0 { (i * 131_072, 131_072) } else { (i * 131_072 + round * 4096, 4096) };
                let nlb = u16::try_from(len / 512 - 1).unwrap();
                let sqe = Read { nsid: 1, slba: (offset / 512) as u64, nlb, ..Read::default() }.to_sqe();
                let request =
                    Request { sqe, data: vec![0; len], direction: DataDirection::ControllerToHost, context: () };
                (offset, len, q1.submit(request).unwrap())
            })
            .collect();
        for (offset, len, p) in pending {
            let r = p.wait(Duration::from_secs(10)).unwrap();
            assert!(r.result.unwrap().status.is_success());
            assert!(r.data == data[offset..offset + len], "round {round}: {len} bytes at {offset}");
        }
    }
}

#[test]
fn flush_write_zeroes_deallocate() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(2)).expect("connect");
    let data = pattern(64 * 512, 5);
    ctrl.write(1, 1000, &data).unwrap();
    ctrl.flush(1).expect("flush");
    ctrl.write_zeroes(1, 1008, 16).expect("write zeroes");
    let mut back = vec![0xAAu8; data.len()];
    ctrl.read(1, 1000, &mut back).unwrap();
    assert!(back[..8 * 512] == data[..8 * 512]);
    assert!(back[8 * 512..24 * 512].iter().all(|&b| b == 0), "zeroed");
    assert!(back[24 * 512..] == data[24 * 512..]);
    ctrl.deallocate(1, &[(1000, 8), (1040, 8)]).expect("deallocate");
    ctrl.read(1, 1000, &mut back).unwrap();
    // Deallocated blocks of a memory namespace read as zeroes (DLFEAT) or keep data; either way the others do.
    assert!(back[24 * 512..40 * 512] == data[24 * 512..40 * 512]);
    // Out-of-range requests are refused before anything is sent.
    assert!(matches!(ctrl.write_zeroes(1, 16 << 11, 1), Err(HostError::InvalidRequest(_))));
    assert!(matches!(ctrl.read(9, 0, &mut [0; 512]), Err(HostError::InvalidRequest(_))));
    ctrl.disconnect().unwrap();
}

#[test]
fn controller_status_errors_are_typed() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    // Read past the end, sent raw so the host's own range check does not stop it.
    let sqe = Read { nsid: 1, slba: 16 << 11, nlb: 0, ..Read::default() }.to_sqe();
    let p = ctrl
        .submit_io(Request { sqe, data: vec![0; 512], direction: DataDirection::ControllerToHost, context: () })
        .unwrap();
    let cqe = p.wait(Duration::from_secs(5)).unwrap().result.unwrap();
    assert!(cqe.status.same_code(Status::LBA_OUT_OF_RANGE), "{}", cqe.status);
}

/// Our target reports Traffic Based Keep Alive and restarts its keep-alive timer on I/O: while reads complete, the
/// host sends no Keep Alive for longer than the KATO and the association stays; once idle, Keep Alives resume.
#[test]
fn traffic_based_keep_alive_skips_keep_alives_while_io_completes() {
    let target = Target::start();
    let mut opts = options(1);
    opts.keep_alive_tmo = Duration::from_secs(2);
    let ctrl = Controller::connect(target.addr, SUBNQN, opts).expect("connect");
    assert!(ctrl.info().traffic_based_keep_alive, "the target reports TBKAS");
    // Completed admin commands: the Asynchronous Event Requests the controller armed at connect are submitted
    // (and counted) whenever the admin queue's I/O thread gets to them, but do not complete here; Keep Alives do.
    let admin = || ctrl.admin().unwrap().stats().completed;
    let before = admin();
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        ctrl.read(1, 0, &mut buf).expect("read while no Keep Alive goes out");
    }
    // Without TBKAS the host sends one every 1 s (KATO/2), with it but ignoring the I/O one every 0.5 s; the
    // supervisor's first look may come before the first read completed.
    let during_io = admin() - before;
    assert!(during_io <= 1, "Keep Alives sent while I/O completed for 3 s: {during_io}");
    // Idle for 1.5 × KATO: only the Keep Alives (every 0.5 s) hold the association.
    let before = admin();
    std::thread::sleep(Duration::from_secs(3));
    let idle = admin() - before;
    assert!(idle >= 3, "Keep Alives sent in 3 idle seconds: {idle}");
    ctrl.read(1, 0, &mut buf).expect("still associated");
    assert_eq!(ctrl.reconnects(), 0, "the target never ended the association");
    ctrl.disconnect().unwrap();
}

/// I/O on a bare queue (perf's) counts as traffic for Traffic Based Keep Alive once reported through
/// `Controller::bare_io_traffic`; unreported, the supervisor sees none and keeps sending Keep Alives.
#[test]
fn bare_queue_io_reported_as_traffic_skips_keep_alives() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(0)).expect("connect");
    assert!(ctrl.info().traffic_based_keep_alive, "the target reports TBKAS");
    assert_eq!(ctrl.request_io_queues(1).unwrap(), 1);
    let qopts = TcpQueueOptions { qid: 1, depth: 31, ..TcpQueueOptions::default() };
    let mut queue: TcpQueue<()> = TcpQueue::connect(target.addr, &qopts).unwrap();
    ctrl.fabrics_connect(&mut queue, 31).expect("bare I/O queue Connect");
    let traffic = ctrl.bare_io_traffic();
    // Keep Alives (completed admin commands) during 3 s of reads on the bare queue.
    let mut keep_alives_during_reads = |report: bool| {
        let before = ctrl.admin().unwrap().stats().completed;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            let sqe = Read { nsid: 1, slba: 0, nlb: 7, ..Read::default() }.to_sqe();
            let request = Request { sqe, data: vec![0; 4096], direction: DataDirection::ControllerToHost, context: () };
            let c = execute(&mut queue, request, Duration::from_secs(5)).expect("read on the bare queue");
            assert!(c.result.expect("completion").status.is_success());
            if report {
                traffic.add(1, 1);
            }
        }
        ctrl.admin().unwrap().stats().completed - before
    };
    // KATO 2 s: a look every 0.5 s, a Keep Alive at each while the supervisor sees no traffic.
    let unreported = keep_alives_during_reads(false);
    assert!(unreported >= 4, "Keep Alives in 3 s of unreported bare I/O: {unreported}");
    let reported = keep_alives_during_reads(true);
    assert!(reported <= 1, "Keep Alives in 3 s of reported bare I/O: {reported}");
    assert_eq!(ctrl.reconnects(), 0);
    ctrl.disconnect().unwrap();
}

/// A relay on 127.0.0.1 to `to` for any number of connections; counts the bytes the controller sends.
fn counting_relay(to: SocketAddr) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&count);
    std::thread::spawn(move || {
        for host in listener.incoming() {
            let (Ok(host), Ok(target)) = (host, TcpStream::connect(to)) else { return };
            let (mut from_host, mut to_target) = (host.try_clone().unwrap(), target.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_host, &mut to_target);
                let _ = to_target.shutdown(Shutdown::Write);
            });
            let (mut from_target, mut to_host, counter) = (target, host, Arc::clone(&counter));
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n @ 1..) = from_target.read(&mut buf) {
                    // Counted before the host can see them: once a read completes, its bytes are in.
                    counter.fetch_add(n as u64, Ordering::SeqCst);
                    if to_host.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to_host.shutdown(Shutdown::Write);
            });
        }
    });
    (addr, count)
}

/// With SQ flow control disabled (`--disable-sqflow`), our target ends each successful read with its C2HData PDU
/// (SUCCESS flag) and sends no response capsule: 24 bytes less per read on the wire, same data.
#[test]
fn disabled_sq_flow_control_saves_the_read_response_capsule() {
    const READS: u64 = 100;
    const C2H_DATA: u64 = 24 + 4096; // common header 8 + PDU-specific header 16, then the data
    const CAPSULE_RESP: u64 = 8 + 16; // common header, then the completion queue entry
    let target = Target::start();
    let (relay, from_target) = counting_relay(target.addr);
    let data = pattern(4096, 9);
    for disable_sqflow in [true, false] {
        let mut opts = options(1);
        // Nothing but the reads on the wire while counting.
        opts.keep_alive_tmo = Duration::ZERO;
        opts.disable_sqflow = disable_sqflow;
        let ctrl = Controller::connect(relay, SUBNQN, opts).expect("connect through the relay");
        ctrl.write(1, 8, &data).unwrap();
        let before = from_target.load(Ordering::SeqCst);
        let mut buf = vec![0u8; 4096];
        for _ in 0..READS {
            buf.fill(0);
            ctrl.read(1, 8, &mut buf).unwrap();
            assert_eq!(buf, data);
        }
        let per_read = C2H_DATA + if disable_sqflow { 0 } else { CAPSULE_RESP };
        let sent = from_target.load(Ordering::SeqCst) - before;
        assert_eq!(sent, READS * per_read, "bytes from the target for {READS} reads, disable_sqflow {disable_sqflow}");
        ctrl.disconnect().unwrap();
    }
}

#[test]
fn disconnect_then_a_new_association() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(2)).expect("connect");
    ctrl.write(1, 5, &pattern(512, 1)).unwrap();
    let start = Instant::now();
    ctrl.disconnect().expect("disconnect");
    assert!(start.elapsed() < Duration::from_secs(5));
    let again = Controller::connect(target.addr, SUBNQN, options(2)).expect("reconnect");
    let mut b = vec![0u8; 512];
    again.read(1, 5, &mut b).unwrap();
    assert_eq!(b, pattern(512, 1));
    again.disconnect().unwrap();
}

/// How long a test waits for an awaited command to wake its task (generous: a missing wake-up fails).
const WOKEN_WITHIN: Duration = Duration::from_secs(10);

/// `data` cut at `cuts` (ascending offsets) into slices.
fn cut<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<IoSlice<'a>> {
    let mut slices = Vec::new();
    let mut rest = data;
    let mut at = 0;
    for &c in cuts {
        let (head, tail) = rest.split_at(c - at);
        slices.push(IoSlice::new(head));
        (rest, at) = (tail, c);
    }
    slices.push(IoSlice::new(rest));
    slices
}

#[test]
fn async_io_with_scatter_gather_buffers() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(2)).expect("connect");
    let mdts = usize::try_from(ctrl.info().max_transfer.expect("MDTS")).unwrap();
    // Longer than one command can carry, so it splits; the buffers' edges fall inside blocks and across the
    // commands' edges.
    let len = 2 * mdts + 3 * 512;
    let data = pattern(len, 9);
    let slices = cut(&data, &[1000, 1007, mdts - 5, mdts + 4096, len - 1]);
    block_on(ctrl.write_async(1, 100, &slices), WOKEN_WITHIN).expect("gathered write");

    let mut whole = vec![0u8; len];
    ctrl.read(1, 100, &mut whole).expect("read back");
    assert!(whole == data, "the gathered write put the bytes in order");

    let mut back = vec![0u8; len];
    {
        let (a, rest) = back.split_at_mut(513);
        let (b, rest) = rest.split_at_mut(0);
        let (c, d) = rest.split_at_mut(mdts + 7);
        let mut bufs = [IoSliceMut::new(a), IoSliceMut::new(b), IoSliceMut::new(c), IoSliceMut::new(d)];
        block_on(ctrl.read_async(1, 100, &mut bufs), WOKEN_WITHIN).expect("scattered read");
    }
    assert!(back == data, "the scattered read filled the buffers in order");

    // The blocking vectored calls take the same lists.
    let other = pattern(8192, 10);
    ctrl.write_vectored(2, 3, &cut(&other, &[1, 4096])).expect("write_vectored");
    let (mut x, mut y) = (vec![0u8; 100], vec![0u8; 8092]);
    block_on(ctrl.read_async(2, 3, &mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)]), WOKEN_WITHIN)
        .expect("read ns 2");
    assert!([x, y].concat() == other);
    let mut z = vec![0u8; 8192];
    ctrl.read_vectored(2, 3, &mut [IoSliceMut::new(&mut z)]).expect("read_vectored");
    assert!(z == other);

    block_on(ctrl.write_zeroes_async(1, 101, 4), WOKEN_WITHIN).expect("write zeroes");
    let mut zeroed = vec![0xAAu8; 6 * 512];
    block_on(ctrl.read_async(1, 100, &mut [IoSliceMut::new(&mut zeroed)]), WOKEN_WITHIN).unwrap();
    assert!(zeroed[..512] == data[..512], "block 100 kept");
    assert!(zeroed[512..5 * 512].iter().all(|&b| b == 0), "blocks 101-104 zeroed");
    assert!(zeroed[5 * 512..] == data[5 * 512..6 * 512], "block 105 kept");
    block_on(ctrl.flush_async(1), WOKEN_WITHIN).expect("flush");
    block_on(ctrl.deallocate_async(1, &[(2000, 8), (4000, 16)]), WOKEN_WITHIN).expect("deallocate");

    // The futures can move between an executor's threads (tokio::spawn needs that).
    fn send<T: Send>(t: T) -> T {
        t
    }
    block_on(send(ctrl.flush_async(1)), WOKEN_WITHIN).expect("flush");
    let mut one = vec![0u8; 512];
    block_on(send(ctrl.read_async(1, 100, &mut [IoSliceMut::new(&mut one)])), WOKEN_WITHIN).expect("read");

    // Bad requests fail before anything is sent.
    let mut odd = vec![0u8; 700];
    let e = block_on(ctrl.read_async(1, 0, &mut [IoSliceMut::new(&mut odd)]), WOKEN_WITHIN).unwrap_err();
    assert!(matches!(e, HostError::InvalidRequest(_)), "{e}");
    let blocks = ctrl.namespaces().unwrap()[0].blocks;
    let e = block_on(ctrl.write_async(1, blocks - 1, &[IoSlice::new(&[0; 1024])]), WOKEN_WITHIN).unwrap_err();
    assert!(matches!(e, HostError::InvalidRequest(_)), "{e}");
    let e = block_on(ctrl.flush_async(7), WOKEN_WITHIN).unwrap_err();
    assert!(matches!(e, HostError::Status { command: "Flush", .. }), "{e}");
    ctrl.disconnect().expect("disconnect");
}

#[test]
fn sixty_four_awaited_commands_in_flight_from_one_thread() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(2)).expect("connect");
    let block = |i: usize| pattern(4096, u8::try_from(i % 200).unwrap() + 20);
    let writes = (0..64usize)
        .map(|i| {
            let sqe = Write { nsid: 1, slba: (i * 8) as u64, nlb: 7, ..Write::default() }.to_sqe();
            let request = Request { sqe, data: block(i), direction: DataDirection::HostToController, context: () };
            ctrl.submit_io_async(request).expect("submitted")
        })
        .collect();
    for (i, reply) in block_on(join_all(writes), WOKEN_WITHIN).into_iter().enumerate() {
        assert!(reply.expect("write completes").result.expect("a CQE").status.is_success(), "write {i}");
    }
    let reads = (0..64usize)
        .map(|i| {
            let sqe = Read { nsid: 1, slba: (i * 8) as u64, nlb: 7, ..Read::default() }.to_sqe();
            let data = vec![0; 4096];
            ctrl.submit_io_async(Request { sqe, data, direction: DataDirection::ControllerToHost, context: () })
                .expect("submitted")
        })
        .collect();
    for (i, reply) in block_on(join_all(reads), WOKEN_WITHIN).into_iter().enumerate() {
        let reply = reply.expect("read completes");
        assert!(reply.result.expect("a CQE").status.is_success());
        assert!(reply.data == block(i), "read {i} returns write {i}'s bytes");
    }
    ctrl.disconnect().expect("disconnect");
}

#[test]
fn more_large_reads_in_flight_than_the_targets_buffer_pool_holds() {
    // One I/O queue, so one reactor of the target serves all of it: 96 reads of 1 MiB submitted at once against its
    // pool of 32 large buffers. Those beyond it wait on the target's retry list and go as buffers come back (how
    // many overlap depends on scheduling).
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    let image = pattern(16 << 20, 21);
    ctrl.write(1, 0, &image).expect("fill the namespace");
    let mib = 1usize << 20;
    let reads = (0..96usize)
        .map(|i| {
            let slba = ((i % 16) * mib / 512) as u64;
            let sqe = Read { nsid: 1, slba, nlb: u16::try_from(mib / 512 - 1).unwrap(), ..Read::default() }.to_sqe();
            let data = vec![0; mib];
            ctrl.submit_io_async(Request { sqe, data, direction: DataDirection::ControllerToHost, context: () })
                .expect("submitted")
        })
        .collect();
    for (i, reply) in block_on(join_all(reads), WOKEN_WITHIN).into_iter().enumerate() {
        let reply = reply.expect("read completes");
        assert!(reply.result.expect("a CQE").status.is_success(), "read {i}");
        let at = (i % 16) * mib;
        assert!(reply.data == image[at..at + mib], "read {i} has the bytes of MiB {}", i % 16);
    }
    ctrl.disconnect().expect("disconnect");
}
