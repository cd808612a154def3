//! Connection caps over NVMe/TCP on loopback: a peer address holds at most `[target] max_connections_per_address`
//! connections and a listener at most `[[listener]] max_connections`; more are closed at accept and counted
//! (`nvmf_target_rejected_connections_total{reason}`), and a closed connection gives its place back. Addresses count
//! as one within `[target] address_prefix_v4`.

mod target_support;

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvmf_common::nvme::admin::KeepAlive;
use nvmf_target::transport::Refusal;
use nvmf_tests::nvme_tcp_client::TcpTestClient;
use target_support::{connect_admin, enable, memory_config, ok, options, Target, SUBNQN};

/// How long a test waits for what must come (a bound against hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);

/// A TCP connection to `to` from loopback address `from` (any 127/8 address is local on Linux).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local = SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0);
    socket.bind(&local.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// Whether the target closed `socket` at once (end of stream or reset within [`PATIENCE`]); `false` if it is
/// still open after a short look.
fn closed_at_once(socket: &mut TcpStream) -> bool {
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buf = [0u8; 16];
    match socket.read(&mut buf) {
        Ok(0) => true,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
        other => panic!("unexpected read on a silent socket: {other:?}"),
    }
}

fn rejected_reach(t: &Target, reason: Refusal, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    while t.running().rejected_connections(reason) < n {
        assert!(Instant::now() < deadline, "{reason:?}: fewer than {n} refusals within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connections_beyond_the_address_and_listener_caps_are_refused_and_places_come_back() {
    let limits = "[target]\nmax_connections_per_address = 3\n\n[reactors]";
    let config = memory_config("")
        .replace("[reactors]", limits)
        .replace("address = \"127.0.0.1\"\n", "address = \"127.0.0.1\"\nmax_connections = 5\n");
    let t = Target::start(&config);

    // A host connected first keeps working whatever happens next (it holds one place of 127.0.0.1).
    let (mut host, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut host);

    // Two more from 127.0.0.1 fill its three places; the next is closed at accept.
    let mut first: Vec<TcpStream> = (0..2).map(|_| connect_from("127.0.0.1", t.addr)).collect();
    let mut over_address = connect_from("127.0.0.1", t.addr);
    assert!(closed_at_once(&mut over_address), "a 4th connection from one address was kept");
    rejected_reach(&t, Refusal::Address, 1);
    assert!(first.iter_mut().all(|s| !closed_at_once(s)), "admitted connections are kept");

    // Another address fills the listener's five places; a third address is then refused by the listener cap.
    let mut second: Vec<TcpStream> = (0..2).map(|_| connect_from("127.0.0.2", t.addr)).collect();
    assert!(second.iter_mut().all(|s| !closed_at_once(s)));
    let mut over_listener = connect_from("127.0.0.3", t.addr);
    assert!(closed_at_once(&mut over_listener), "a 6th connection on the listener was kept");
    rejected_reach(&t, Refusal::Listener, 1);
    assert_eq!(t.running().rejected_connections(Refusal::Address), 1);

    // Closing connections gives their places back: a new host from 127.0.0.1 connects and works.
    drop(first);
    let deadline = Instant::now() + PATIENCE;
    let mut again = loop {
        // Refused (ICReq unanswered) until the target has noticed the closes: try again.
        if let Ok(client) = TcpTestClient::connect(t.addr, options()) {
            break client;
        }
        assert!(Instant::now() < deadline, "places were not given back within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    ok(again.fabrics_connect(SUBNQN, 0, 31, 0xFFFF, 0));
    enable(&mut again);
    ok(again.command(KeepAlive.to_sqe(), None, 0));
    ok(host.command(KeepAlive.to_sqe(), None, 0));
}

#[test]
fn addresses_of_one_prefix_share_the_address_cap() {
    let limits = "[target]\nmax_connections_per_address = 2\naddress_prefix_v4 = 24\n\n[reactors]";
    let t = Target::start(&memory_config("").replace("[reactors]", limits));
    // 127.0.0.2 and 127.0.0.3 are one /24: two places between them; 127.0.1.2 is another prefix.
    let mut held = [connect_from("127.0.0.2", t.addr), connect_from("127.0.0.3", t.addr)];
    let mut over = connect_from("127.0.0.4", t.addr);
    assert!(closed_at_once(&mut over), "a 3rd connection from the same /24 was kept");
    rejected_reach(&t, Refusal::Address, 1);
    assert!(held.iter_mut().all(|s| !closed_at_once(s)), "admitted connections are kept");
    let mut other = connect_from("127.0.1.2", t.addr);
    assert!(!closed_at_once(&mut other), "another /24 has its own places");
    assert_eq!(t.running().rejected_connections(Refusal::Address), 1);
}
