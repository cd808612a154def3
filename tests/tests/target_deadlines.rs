//! Peers that stall cost only their own connection: over NVMe/TCP on loopback, a socket that sends nothing, one
//! that sends part of an ICReq, and one whose Connect needs its data fetched by R2T and never sends it are closed at
//! the target's connect timeout (`[target] connect_timeout_ms`); a connected host that never answers an R2T, and
//! one that pipelines reads and never reads the socket, at its transfer timeout (`transfer_timeout_ms`). Each is
//! counted, and a host that behaves keeps working meanwhile.
//!
//! Each scenario runs on both socket paths, `epoll::NAME` and `io_uring::NAME` (on io_uring, backpressure cancels
//! and re-arms the receive), one at a time (`target_support::alone`): the timeouts are measured against a target
//! that only that scenario loads.

mod target_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::Connect;
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::io::{Read as ReadCmd, Write as WriteCmd};
use nvmf_common::nvme::{SglDescriptor, SglSubtype, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{CapsuleCommand, Pdu};
use nvmf_target::controller::Stalled;
use nvmf_tests::nvme_tcp_client::ClientError;
use nvmf_tests::nvme_tcp_client::TcpTestClient;
use target_support::{
    alone, connect_admin, enable, expect_closed, memory_config, nlb, ok, options, read, Association, SocketIoMode,
    Target, SUBNQN,
};

target_support::on_each_socket_path!(
    stalled_peers_are_disconnected_at_the_connect_timeout,
    hosts_that_stall_a_transfer_are_disconnected_at_the_transfer_timeout,
);

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a test waits for a close that must come (a bound against hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);

fn target(io: SocketIoMode) -> Target {
    let limits = "[target]\nconnect_timeout_ms = 500\ntransfer_timeout_ms = 1000\n\n[reactors]";
    let config = memory_config("").replace("[reactors]", limits);
    Target::start_on(&config, io)
}

/// Wait until the target closes `socket` (end of stream or reset); fails after [`PATIENCE`].
fn closed_by_target(mut socket: TcpStream) {
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 256];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => panic!("the target sent {n} bytes to a peer that never finished its ICReq"),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the stalled socket: {e}"),
        }
        assert!(Instant::now() < deadline, "the target kept a stalled connection past {PATIENCE:?}");
    }
}

fn stalled_peers_are_disconnected_at_the_connect_timeout(io: SocketIoMode) {
    let _alone = alone();
    let t = target(io);
    let target = t.running().target();
    let (mut host, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut host);

    // Nothing after the TCP handshake.
    let start = Instant::now();
    let silent = TcpStream::connect(t.addr).unwrap();
    // Seven bytes of an ICReq (slowloris).
    let mut partial = TcpStream::connect(t.addr).unwrap();
    partial.write_all(&[0x00, 0x00, 128, 0, 128, 0, 0]).unwrap();
    // A Connect whose 1024 bytes of data the target must fetch with an R2T, never sent.
    let mut stalled = TcpTestClient::connect(t.addr, options()).unwrap();
    let connect = Connect {
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 0,
        sgl1: SglDescriptor::TransportDataBlock { length: 1024, subtype: SglSubtype::TransportSpecific },
    };
    let mut sqe = connect.to_sqe().unwrap();
    sqe.cid = stalled.next_cid();
    stalled.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).unwrap();
    let (r2t, _) = stalled.recv_pdu().unwrap();
    assert!(matches!(r2t, Pdu::R2t(_)), "the Connect's data is solicited: {r2t:?}");

    closed_by_target(silent);
    closed_by_target(partial);
    expect_closed(&mut stalled, PATIENCE);
    assert!(start.elapsed() >= CONNECT_TIMEOUT, "a connection was closed before its connect timeout");
    assert_eq!(target.timeouts(Stalled::Connect), 3);

    // The host that connected in time was never touched.
    ok(host.command(KeepAlive.to_sqe(), None, 0));
    assert_eq!(target.timeouts(Stalled::Connect), 3);
}

/// Send `sqe` with a Transport SGL Data Block of `len` bytes (data the target solicits or sends back); its CID.
fn send_with_transport_data(client: &mut TcpTestClient, mut sqe: SubmissionQueueEntry, len: u32) -> u16 {
    sqe.cid = client.next_cid();
    sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific })
        .expect("SGL encodes");
    client.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).expect("capsule sent");
    sqe.cid
}

/// Wait (bounded) until the target has counted `n` transfer timeouts.
fn transfer_timeouts_reach(t: &Target, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    while t.running().target().timeouts(Stalled::Transfer) < n {
        assert!(Instant::now() < deadline, "no transfer timeout counted within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hosts_that_stall_a_transfer_are_disconnected_at_the_transfer_timeout(io: SocketIoMode) {
    let _alone = alone();
    let t = target(io);
    let mut good = Association::new(t.addr, options(), 1);

    // A Write whose data the target solicits with an R2T that is never answered.
    let mut writer = Association::new(t.addr, options(), 1);
    let len = 64 * 1024;
    let write = WriteCmd { nsid: 1, slba: 0, nlb: nlb(len, 512), ..WriteCmd::default() }.to_sqe();
    // The target's timer starts at the time of the reactor turn that handles the Write (the clock is read once
    // per turn), which a busy machine may let begin well before the send: the bound is half the timeout, which
    // still tells a transfer timeout from a close at once; the counter says which deadline fired.
    let sent = Instant::now();
    send_with_transport_data(writer.io(), write, u32::try_from(len).unwrap());
    let (r2t, _) = writer.io().recv_pdu().unwrap();
    assert!(matches!(r2t, Pdu::R2t(_)), "the Write's data is solicited: {r2t:?}");
    expect_closed(writer.io(), PATIENCE);
    let waited = sent.elapsed();
    assert!(waited >= TRANSFER_TIMEOUT / 2, "closed {waited:?} after the Write, long before the transfer timeout");
    transfer_timeouts_reach(&t, 1);
    assert_eq!(t.running().target().timeouts(Stalled::Connect), 0);

    // Reads pipelined up to the queue's depth (31 MiB) by a host that never reads its socket: once the kernel's
    // buffers are full nothing moves, and the connection ends a transfer timeout later.
    let mut reader = Association::new(t.addr, options(), 1);
    for _ in 0..31 {
        let read = ReadCmd { nsid: 1, slba: 0, nlb: nlb(1 << 20, 512), ..ReadCmd::default() }.to_sqe();
        send_with_transport_data(reader.io(), read, 1 << 20);
    }
    transfer_timeouts_reach(&t, 2);
    // What the kernel buffered is still there to read; then the stream ends.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match reader.io().recv_pdu() {
            Ok(_) => {}
            Err(ClientError::Closed) => break,
            Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("draining the stalled reader: {e}"),
        }
        assert!(Instant::now() < deadline, "the stalled reader's connection did not end");
    }

    // The host that behaved was never touched.
    ok(Ok(read(good.io(), 1, 512, 0, 4096)));
    assert_eq!(t.running().target().timeouts(Stalled::Transfer), 2);
    assert_eq!(t.running().target().timeouts(Stalled::Connect), 0);
}
