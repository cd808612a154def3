//! A witness under attack, over NVMe/TCP on loopback: a well-behaved host reads while peers that passed no host
//! check try to starve the target — 300 connections whose Connects need their data fetched by R2T and never send
//! it, 16 discovery connections that pipeline 1 MiB log reads and never read the socket, and 1000 slowloris sockets
//! (nothing, or 7 bytes of an ICReq). The witness sees no error and keeps at least half of its unattacked IOPS (in
//! one of three one-second windows); every attacker is closed at the configured deadlines and counted; afterwards
//! every reactor's buffer pool is whole.
//!
//! The attackers come from other loopback addresses than the witness (127.0.0.2..4): one peer address may hold at
//! most `[target] max_connections_per_address` connections, and the test is about what admitted peers can do. The
//! IOPS ratio is measured within one run (same machine, same moment), the way the issue states the requirement.
//!
//! A second scenario floods a target with what a peer can do with a host's NQN but not its key, and with what an
//! allowed host can do with fresh host IDs: four threads from 32 addresses that each run DH-HMAC-CHAP transactions
//! as a keyed host (the most expensive group the target allows by default, ffdhe4096) with made-up Replies that
//! cost the attacker nothing and the target two exponentiations each, over and over; and hosts with
//! fresh host IDs registering on the namespace until `max_registrants` refuses them (Insufficient Capacity). The
//! witness keeps at least half of its IOPS; the failures and refusals are counted.
//!
//! The scenarios run on both socket paths, `epoll::NAME` and `io_uring::NAME`, one after the other
//! (`target_support::alone`): each run's IOPS are measured on a machine that only it loads.

mod target_support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::auth::dh::DhGroup;
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::message::{Negotiate, ProtocolDescriptor, Reply};
use nvmf_common::fabrics::connect::Connect;
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::nvme::log_page::{lid, GetLogPage};
use nvmf_common::nvme::reservation::{Cptpl, RegisterAction, ReservationKeys, ReservationRegister};
use nvmf_common::nvme::{SglDescriptor, SglSubtype, Status};
use nvmf_common::transport::tcp::{CapsuleCommand, DigestTypes, Framing, IcReq, Pdu};
use nvmf_target::controller::Stalled;
use nvmf_tests::nvme_tcp_client::{ClientError, TcpTestClient};
use target_support::{alone, memory_config, ok, options, pattern, read, write, Association, SocketIoMode, Target};

target_support::on_each_socket_path!(
    a_well_behaved_host_keeps_working_while_anonymous_peers_try_to_starve_the_target,
    a_well_behaved_host_keeps_working_through_authentication_and_registrant_floods,
);

const BLOCK: usize = 512;
const READ_LEN: usize = 4096;
/// How long each IOPS window lasts.
const WINDOW: Duration = Duration::from_secs(1);
/// How many IOPS windows under attack the witness may take to keep half of its unattacked rate.
const ATTACKED_WINDOWS: usize = 3;
/// How long a test waits for what must come (a bound against hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);

fn target(io: SocketIoMode) -> Target {
    let limits = "[target]\nconnect_timeout_ms = 15000\ntransfer_timeout_ms = 15000\n\n[reactors]";
    Target::start_on(&memory_config("").replace("[reactors]", limits), io)
}

/// A TCP connection to `to` from loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

fn transport_data(len: u32) -> SglDescriptor {
    SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific }
}

/// ICReq and four admin Connects whose data the target must fetch by R2T, in one write; nothing after.
fn r2t_connects(from: &str, to: SocketAddr) -> TcpStream {
    let mut socket = connect_from(from, to);
    let framing = Framing::default();
    let icreq = IcReq { pfv: 0, hpda: 0, dgst: DigestTypes { hdgst_enable: false, ddgst_enable: false }, maxr2t: 0 };
    let mut bytes = Pdu::IcReq(icreq).to_bytes(&[], &framing).unwrap();
    for cid in 1..=4 {
        let connect = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) };
        let mut sqe = connect.to_sqe().unwrap();
        sqe.cid = cid;
        bytes.extend(Pdu::CapsuleCommand(CapsuleCommand { sqe }).to_bytes(&[], &framing).unwrap());
    }
    socket.write_all(&bytes).unwrap();
    socket
}

/// A discovery controller whose host pipelines 31 Get Log Page reads of 1 MiB and never reads a byte more.
fn undrained_discovery(to: SocketAddr) -> TcpTestClient {
    let mut client = TcpTestClient::connect(to, options()).unwrap();
    ok(client.fabrics_connect(DISCOVERY_NQN, 0, 31, 0xFFFF, 0));
    for _ in 0..31 {
        let mut sqe = GetLogPage::new(lid::DISCOVERY, 0, 1 << 20).unwrap().to_sqe();
        sqe.cid = client.next_cid();
        sqe.set_sgl1(&transport_data(1 << 20)).unwrap();
        client.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).unwrap();
    }
    client
}

/// Reads of the witness's pattern for one [`WINDOW`]: how many, each checked.
fn witness_reads(assoc: &mut Association, data: &[u8]) -> u32 {
    let blocks = (data.len() / READ_LEN) as u64;
    let end = Instant::now() + WINDOW;
    let mut n = 0u32;
    while Instant::now() < end {
        let i = u64::from(n) % blocks;
        let slba = i * (READ_LEN / BLOCK) as u64;
        let c = read(assoc.io(), 1, BLOCK, slba, READ_LEN);
        assert!(c.cqe.status.is_success(), "the witness's read failed under attack: {:?}", c.cqe);
        let at = usize::try_from(i).unwrap() * READ_LEN;
        assert_eq!(c.data, data[at..at + READ_LEN], "the witness read wrong bytes");
        n += 1;
    }
    n
}

/// Wait until the target closes `socket` (end of stream or reset), reading and dropping what it sends.
fn closed_by_target(socket: &mut TcpStream, deadline: Instant) {
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading an attacker's socket: {e}"),
        }
        assert!(Instant::now() < deadline, "an attacker's connection outlived the deadlines");
    }
}

/// Read (and drop) what the target sends a discovery attacker until it closes the connection.
fn drained_until_closed(client: &mut TcpTestClient, deadline: Instant) {
    loop {
        match client.recv_pdu() {
            Ok(_) => {}
            Err(ClientError::Closed | ClientError::TermReq { .. }) => return,
            Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(ClientError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading a discovery attacker's socket: {e}"),
        }
        assert!(Instant::now() < deadline, "a discovery attacker's connection outlived the deadlines");
    }
}

fn a_well_behaved_host_keeps_working_while_anonymous_peers_try_to_starve_the_target(io: SocketIoMode) {
    let _alone = alone();
    let t = target(io);
    let mut witness = Association::new(t.addr, options(), 1);
    let data = pattern(256 << 10, 7);
    for (i, chunk) in data.chunks(64 << 10).enumerate() {
        let slba = (i * (64 << 10) / BLOCK) as u64;
        assert!(write(witness.io(), 1, BLOCK, slba, chunk, false).cqe.status.is_success());
    }
    let unattacked = witness_reads(&mut witness, &data);

    let started = Instant::now();
    let mut r2t: Vec<TcpStream> = (0..300).map(|_| r2t_connects("127.0.0.2", t.addr)).collect();
    let mut slowloris: Vec<TcpStream> = (0..1000).map(|_| connect_from("127.0.0.3", t.addr)).collect();
    for s in slowloris.iter_mut().step_by(2) {
        s.write_all(&[0x00, 0x00, 128, 0, 128, 0, 0]).unwrap();
    }
    let mut discovery: Vec<TcpTestClient> = (0..16).map(|_| undrained_discovery(t.addr)).collect();
    let setup = started.elapsed();

    // Up to three windows under attack (all within the deadlines, which are long enough for that): one a busy
    // machine's scheduler took from the witness is noise, starvation shows in every window.
    let mut attacked = Vec::new();
    while attacked.len() < ATTACKED_WINDOWS && attacked.last().is_none_or(|&a| a * 2 < unattacked) {
        attacked.push(witness_reads(&mut witness, &data));
    }
    eprintln!("witness: {unattacked} reads/s unattacked, {attacked:?} under attack (attack set up in {setup:?})");
    assert!(
        attacked.iter().any(|&a| a * 2 >= unattacked),
        "the witness kept {attacked:?} of {unattacked} reads per second under attack (less than half)"
    );

    // Every attacker is closed: the pre-Connect ones at the connect timeout, the discovery ones at the transfer
    // timeout (their pipelined reads stalled: nothing is read from them until they are counted).
    let target = t.running().target();
    let deadline = Instant::now() + PATIENCE;
    // An R2T attacker whose Connect got its buffer waits on its peer for data, so the transfer timeout may end it
    // first: the two together count every attacker.
    let ended = || target.timeouts(Stalled::Connect) + target.timeouts(Stalled::Transfer);
    while target.timeouts(Stalled::Connect) < 1000 || ended() < 1316 {
        assert!(
            Instant::now() < deadline,
            "attackers outlived the deadlines: {} connect and {} transfer timeouts",
            target.timeouts(Stalled::Connect),
            target.timeouts(Stalled::Transfer)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for s in r2t.iter_mut().chain(slowloris.iter_mut()) {
        closed_by_target(s, deadline);
    }
    for d in &mut discovery {
        drained_until_closed(d, deadline);
    }

    // The witness is untouched, and every buffer is back in its pool.
    assert!(witness_reads(&mut witness, &data) > 0);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (free, total) = t.running().data_buffers();
        if free == total && total > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "buffers not back in their pools: {free} of {total} free");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A host with a DH-HMAC-CHAP key here, whose NQN the attackers know (not its key).
const KEYED: &str = "nqn.2014-08.org.nvmexpress:uuid:7a0c4e2f-9b1d-4e6f-8a3c-5d7e9f1b2c4d";
const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
/// Registrants the flooded namespace takes.
const MAX_REGISTRANTS: u32 = 32;

fn flooded_target(io: SocketIoMode) -> Target {
    let hosts = format!("allow_any_host = true\n[[subsystem.host]]\nnqn = \"{KEYED}\"\ndhchap_key = \"{KEY}\"");
    let limits = format!("[target]\nmax_registrants = {MAX_REGISTRANTS}\n\n[reactors]");
    Target::start_on(&memory_config(&hosts).replace("[reactors]", &limits), io)
}

/// One DH-HMAC-CHAP transaction as `KEYED` from `from`, offering only `group`, at no cost to the attacker: the
/// Reply carries a made-up response and DH value (of the group's size), so the target makes its key pair and the
/// shared secret before it can tell the Reply is wrong, and the attacker computes nothing. Whatever the target
/// refuses (the connection, the Connect, the group, the rate) ends the attempt.
fn failed_authentication(from: &str, to: SocketAddr, group: DhGroup) {
    let Ok(stream) = try_connect_from(from, to) else { return };
    let Ok(mut c) = TcpTestClient::from_stream(stream, options()) else { return };
    if c.initialize(options()).is_err() {
        return;
    }
    let hostid = *b"flood-auth-host!";
    match c.fabrics_connect_as(target_support::SUBNQN, 0, 0xFFFF, KEYED, hostid, (31, 0)) {
        Ok(done) if done.cqe.status.is_success() => {}
        _ => return,
    }
    let dhchap = ProtocolDescriptor { hashes: vec![HashFunction::Sha256], dh_groups: vec![group] };
    let negotiate = Negotiate { t_id: 1, sc_c: 0, dhchap }.to_bytes();
    if c.authentication_send(&negotiate).is_err() || c.authentication_receive().is_err() {
        return;
    }
    // A DH value the size of the group's prime, neither 0, 1 nor p-1: the target must exponentiate it.
    let dhv = vec![0x5a; group.value_len()];
    let reply = Reply { t_id: 1, rval: &[0xa5; 32], cval: None, seqnum: 0, dhv: &dhv }.to_bytes().unwrap();
    if c.authentication_send(&reply).is_ok() {
        let _ = c.authentication_receive();
    }
}

/// A TCP connection from `from`, or the error (the target may refuse or reset under the flood).
fn try_connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0).into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(socket.into())
}

/// A host with host ID `n` registers key `n` on namespace 1 (its own association, from 127.0.2.x); its status.
fn register_fresh_host(to: SocketAddr, n: u8) -> Status {
    let hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000{n:02x}");
    let hostid = [n; 16];
    let client = |qid: u16, cntlid: u16| {
        let stream = try_connect_from(&format!("127.0.2.{}", n % 250 + 1), to).expect("a flooding host connects");
        let mut c = TcpTestClient::from_stream(stream, options()).unwrap();
        c.initialize(options()).unwrap();
        let done = ok(c.fabrics_connect_as(target_support::SUBNQN, qid, cntlid, &hostnqn, hostid, (31, 0)));
        (c, u16::try_from(done.cqe.dw0 & 0xffff).unwrap())
    };
    let (mut admin, cntlid) = client(0, 0xFFFF);
    target_support::enable(&mut admin);
    let (mut io, _) = client(1, cntlid);
    let register =
        ReservationRegister { nsid: 1, action: RegisterAction::Register, iekey: false, cptpl: Cptpl::NoChange };
    let keys = ReservationKeys { crkey: 0, second: u64::from(n) + 1 }.to_bytes();
    io.command(register.to_sqe(), Some(&keys), 0).expect("Register answered").cqe.status
}

fn a_well_behaved_host_keeps_working_through_authentication_and_registrant_floods(io: SocketIoMode) {
    let _alone = alone();
    let t = flooded_target(io);
    let mut witness = Association::new(t.addr, options(), 1);
    let data = pattern(256 << 10, 5);
    for (i, chunk) in data.chunks(64 << 10).enumerate() {
        let slba = (i * (64 << 10) / BLOCK) as u64;
        assert!(write(witness.io(), 1, BLOCK, slba, chunk, false).cqe.status.is_success());
    }
    let unattacked = witness_reads(&mut witness, &data);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = t.addr;
    let attackers: Vec<_> = (0..4)
        .map(|k| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut attempts = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let from = format!("127.0.1.{}", attempts % 8 * 4 + k + 1);
                    failed_authentication(&from, addr, DhGroup::Ffdhe4096);
                    attempts += 1;
                }
                attempts
            })
        })
        .collect();
    let registrants = std::thread::spawn(move || (0..48u8).map(|n| register_fresh_host(addr, n)).collect::<Vec<_>>());

    let mut attacked = Vec::new();
    while attacked.len() < ATTACKED_WINDOWS && attacked.last().is_none_or(|&a| a * 2 < unattacked) {
        attacked.push(witness_reads(&mut witness, &data));
    }
    let statuses = registrants.join().expect("the registrant flood ran");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let attempts: u32 = attackers.into_iter().map(|a| a.join().expect("an authentication attacker ran")).sum();
    let target = t.running().target();
    let failures: u64 = target.auth_counters().snapshot().iter().filter(|c| !c.0).map(|c| c.3).sum();
    eprintln!(
        "witness: {unattacked} reads/s unattacked, {attacked:?} under the floods ({attempts} authentication attempts, \
         {failures} failed transactions counted, {} registrants refused)",
        target.registrant_limit_refusals()
    );
    assert!(
        attacked.iter().any(|&a| a * 2 >= unattacked),
        "the witness kept {attacked:?} of {unattacked} reads per second under the floods (less than half)"
    );
    let accepted = statuses.iter().filter(|s| s.is_success()).count();
    assert_eq!(accepted, MAX_REGISTRANTS as usize, "registrants accepted: {statuses:?}");
    assert!(statuses.iter().filter(|s| !s.is_success()).all(|s| s.same_code(Status::INSUFFICIENT_CAPACITY)));
    assert_eq!(target.registrant_limit_refusals(), 48 - u64::from(MAX_REGISTRANTS));
    assert!(failures > 0, "the failed transactions are counted");
    assert!(witness_reads(&mut witness, &data) > 0);
}
