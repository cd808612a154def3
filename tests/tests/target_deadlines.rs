//! Peers that connect and stall cost only their own connection: over NVMe/TCP on loopback, a socket that sends
//! nothing, one that sends part of an ICReq, and one whose Connect needs its data fetched by R2T and never sends it
//! are all closed at the target's connect timeout (`[target] connect_timeout_ms`), counted, and a host that
//! connected properly keeps working meanwhile.

mod target_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::Connect;
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::{SglDescriptor, SglSubtype};
use nvmf_common::transport::tcp::{CapsuleCommand, Pdu};
use nvmf_tests::nvme_tcp_client::TcpTestClient;
use target_support::{connect_admin, enable, expect_closed, memory_config, ok, options, Target, SUBNQN};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a test waits for a close that must come (a bound against hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);

fn target() -> Target {
    let config = memory_config("").replace("[reactors]", "[target]\nconnect_timeout_ms = 500\n\n[reactors]");
    Target::start(&config)
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

#[test]
fn stalled_peers_are_disconnected_at_the_connect_timeout() {
    let t = target();
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
    assert_eq!(target.connect_timeouts(), 3);

    // The host that connected in time was never touched.
    ok(host.command(KeepAlive.to_sqe(), None, 0));
    assert_eq!(target.connect_timeouts(), 3);
}
