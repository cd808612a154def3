//! Reconnect against our target in-process on 127.0.0.1: held I/O (and a held admin command) completes after
//! the target is back, fails after ctrl-loss-tmo when it is not, fails fast after fast-io-fail-tmo; keep-alive
//! keeps an idle association live, a Keep Alive timing out on a network gone dark (a relay that drops bytes
//! without closing anything) starts a reconnect, and so does an idle I/O queue's connection hung up. The namespace
//! is a file in a temporary directory so its data survives a restart. Awaited commands (the async API) are held
//! the same way without blocking the thread that submits them.

mod host_support;

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use host_support::{options, pattern, SUBNQN};
use nvmf_common::nvme::identify::{cns, Identify, IdentifyController, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_config::TargetConfig;
use nvmf_host::queue::{DataDirection, Request};
use nvmf_host::{Controller, ControllerState, HostError};
use nvmf_target::daemon::RunningTarget;
use nvmf_tests::executor::block_on;

/// 16 MiB of 512-byte blocks, as a file.
fn image(dir: &Path) -> PathBuf {
    let image = dir.join("ns1.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(16 << 20)).expect("namespace image");
    image
}

/// Our target serving `image` on 127.0.0.1:`port` (0: any).
fn start(image: &Path, port: u16) -> RunningTarget {
    let text = format!(
        r#"
[reactors]
threads = 1

[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "{SUBNQN}"

[[subsystem.namespace]]
path = "{}"
"#,
        image.display()
    );
    let mut config = TargetConfig::from_str(&text, "<test>").expect("test configuration is valid");
    config.listeners[0].address.set_port(port);
    nvmf_target::daemon::start(&config).expect("target starts")
}

/// Wait (bounded generously, not a timing assertion) until `ctrl` is in a state `want` accepts.
fn wait_state(ctrl: &Controller, want: impl Fn(ControllerState) -> bool) -> ControllerState {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = ctrl.state();
        if want(s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `len` bytes at `slba` of namespace 1.
fn read_back(ctrl: &Controller, slba: u64, len: usize) -> Vec<u8> {
    let mut back = vec![0; len];
    ctrl.read(1, slba, &mut back).unwrap_or_else(|e| panic!("read of LBA {slba}: {e}"));
    back
}

/// The controller is live on its second association, and each `(slba, bytes)` written is on namespace 1.
fn assert_reconnected_once_with(ctrl: &Controller, written: &[(u64, &[u8])]) {
    assert_eq!(wait_state(ctrl, |s| s == ControllerState::Live), ControllerState::Live);
    assert_eq!(ctrl.reconnects(), 1);
    for &(slba, bytes) in written {
        assert!(read_back(ctrl, slba, bytes.len()) == bytes, "the write at LBA {slba} reached the namespace");
    }
}

fn addr_of(t: &RunningTarget) -> SocketAddr {
    t.local_addrs()[0]
}

#[test]
fn held_write_completes_after_the_target_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let target = start(&image, 0);
    let addr = addr_of(&target);
    let mut o = options(2);
    o.reconnect_delay = Duration::from_millis(300);
    o.ctrl_loss_tmo = Some(Duration::from_secs(60));
    let ctrl = Arc::new(Controller::connect(addr, SUBNQN, o).expect("connect"));

    let (a, b) = (pattern(64 << 10, 1), pattern(64 << 10, 2));
    ctrl.write(1, 0, &a).unwrap();
    assert_eq!(read_back(&ctrl, 0, a.len()), a);

    target.shutdown();
    // One writer through the blocking wrapper, one through submit_io + Pending::wait (owned buffer).
    let writer = {
        let (ctrl, b) = (Arc::clone(&ctrl), b.clone());
        std::thread::spawn(move || ctrl.write(1, 0, &b))
    };
    let submitter = {
        let (ctrl, b) = (Arc::clone(&ctrl), b.clone());
        std::thread::spawn(move || {
            let sqe = Write { nsid: 1, slba: 1024, nlb: 127, ..Write::default() }.to_sqe();
            let p =
                ctrl.submit_io(Request { sqe, data: b, direction: DataDirection::HostToController, context: () })?;
            p.wait(Duration::from_secs(30))
        })
    };
    // An admin command is held like the I/O.
    let admin = {
        let ctrl = Arc::clone(&ctrl);
        std::thread::spawn(move || {
            let sqe = Identify::new(cns::CONTROLLER, 0).to_sqe();
            let c2h = DataDirection::ControllerToHost;
            ctrl.admin_command("Identify Controller", sqe, c2h, vec![0; IDENTIFY_DATA_SIZE])
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!writer.is_finished() && !submitter.is_finished(), "I/O is held while the target is down");
    assert!(!admin.is_finished(), "the admin command is held while the target is down");
    assert!(matches!(ctrl.state(), ControllerState::Reconnecting { attempts } if attempts >= 1), "{:?}", ctrl.state());

    let target = start(&image, addr.port());
    writer.join().unwrap().expect("held write completes after the target is back");
    let reply = submitter.join().unwrap().expect("held submit_io completes");
    assert!(reply.result.expect("a completion").status.is_success());
    let identify = admin.join().unwrap().expect("held admin command completes after the target is back");
    let id = IdentifyController::parse(&identify.data).expect("Identify Controller data");
    assert_eq!(id.subnqn.to_string(), SUBNQN, "the held Identify ran on the new association");
    assert_reconnected_once_with(&ctrl, &[(0, &b)]);
    let sqe = Read { nsid: 1, slba: 1024, nlb: 127, ..Read::default() }.to_sqe();
    let data = vec![0; b.len()];
    let p = ctrl.submit_io(Request { sqe, data, direction: DataDirection::ControllerToHost, context: () }).unwrap();
    assert_eq!(p.wait(Duration::from_secs(10)).unwrap().data, b, "the held submit_io write reached the namespace");
    drop(Arc::into_inner(ctrl).expect("writers are done").disconnect());
    target.shutdown();
}

#[test]
fn held_write_fails_after_ctrl_loss_tmo() {
    let target = host_support::Target::start();
    let mut o = options(1);
    o.reconnect_delay = Duration::from_millis(500);
    o.ctrl_loss_tmo = Some(Duration::from_secs(2));
    let ctrl = Controller::connect(target.addr, SUBNQN, o).expect("connect");
    ctrl.write(1, 0, &pattern(4096, 3)).unwrap();
    drop(target);

    match ctrl.write(1, 0, &pattern(4096, 4)) {
        Err(HostError::ControllerLost { after }) => assert!(after >= Duration::from_secs(2), "{after:?}"),
        other => panic!("expected the controller-loss error, got {other:?}"),
    }
    assert_eq!(ctrl.state(), ControllerState::Failed);
    assert!(matches!(ctrl.read(1, 0, &mut [0; 512]), Err(HostError::ControllerLost { .. })));
    assert_eq!(ctrl.reconnects(), 0);
    ctrl.disconnect().expect("a failed controller has nothing to shut down");
}

#[test]
fn fast_io_fail_fails_io_while_reconnecting_and_io_works_after_the_target_returns() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let target = start(&image, 0);
    let addr = addr_of(&target);
    let mut o = options(1);
    o.reconnect_delay = Duration::from_millis(300);
    o.fast_io_fail_tmo = Some(Duration::from_millis(500));
    o.ctrl_loss_tmo = Some(Duration::from_secs(30));
    let ctrl = Controller::connect(addr, SUBNQN, o).expect("connect");
    target.shutdown();

    match ctrl.write(1, 0, &pattern(4096, 5)) {
        Err(HostError::FastIoFail { after }) => assert!(after >= Duration::from_millis(500), "{after:?}"),
        other => panic!("expected the fast-I/O-fail error, got {other:?}"),
    }
    assert!(matches!(ctrl.state(), ControllerState::Reconnecting { .. }), "{:?}", ctrl.state());
    // New I/O fails fast too, without waiting.
    assert!(matches!(ctrl.read(1, 0, &mut [0; 512]), Err(HostError::FastIoFail { .. })));

    let target = start(&image, addr.port());
    assert_eq!(wait_state(&ctrl, |s| s == ControllerState::Live), ControllerState::Live);
    let c = pattern(8192, 6);
    ctrl.write(1, 8, &c).unwrap();
    assert_reconnected_once_with(&ctrl, &[(8, &c)]);
    ctrl.disconnect().unwrap();
    target.shutdown();
}

#[test]
fn keep_alive_keeps_an_idle_association_live() {
    let target = host_support::Target::start();
    let mut o = options(1);
    o.keep_alive_tmo = Duration::from_secs(1);
    let ctrl = Controller::connect(target.addr, SUBNQN, o).expect("connect");
    let before = ctrl.admin().unwrap().stats().completed;
    std::thread::sleep(Duration::from_secs(3));
    // Without Keep Alives the target would have ended the association after 1 s.
    assert_eq!(ctrl.state(), ControllerState::Live);
    assert_eq!(ctrl.reconnects(), 0);
    let sent = ctrl.admin().unwrap().stats().completed - before;
    assert!(sent >= 3, "Keep Alives completed while idle: {sent}");
    let d = pattern(4096, 7);
    ctrl.write(1, 0, &d).unwrap();
    assert_eq!(read_back(&ctrl, 0, d.len()), d);
    assert_eq!(ctrl.reconnects(), 0, "the association was never replaced");
    ctrl.disconnect().unwrap();
}

/// A TCP relay between the host and the target that can silently stop carrying the connections it has
/// (bytes are read and dropped, nothing is closed): a network that went dark. Later connections are relayed.
/// It can also hang up one connection on the host's side only, the target seeing nothing.
struct Relay {
    addr: SocketAddr,
    /// Connections numbered below this are dark.
    dark_below: Arc<AtomicU64>,
    /// The connection hung up on the host's side (`u64::MAX`: none); dark from then on.
    cut: Arc<AtomicU64>,
    /// The host's side of each connection, by number.
    hosts: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dark_below = Arc::new(AtomicU64::new(0));
        let cut = Arc::new(AtomicU64::new(u64::MAX));
        let hosts = Arc::new(Mutex::new(Vec::new()));
        let (dark, cut_one, host_sides) = (Arc::clone(&dark_below), Arc::clone(&cut), Arc::clone(&hosts));
        std::thread::spawn(move || {
            for (n, host) in listener.incoming().enumerate() {
                let (Ok(host), Ok(ctrl)) = (host, TcpStream::connect(target)) else { continue };
                let n = n as u64;
                host_sides.lock().unwrap().push(host.try_clone().unwrap());
                for (from, to) in [(host.try_clone().unwrap(), ctrl.try_clone().unwrap()), (ctrl, host)] {
                    let (dark, cut) = (Arc::clone(&dark), Arc::clone(&cut_one));
                    std::thread::spawn(move || pump(from, to, n, &dark, &cut));
                }
            }
        });
        Relay { addr, dark_below, cut, hosts }
    }

    /// Hang up connection `n` on the host's side; the target's side stays open and hears nothing.
    fn cut_host_side(&self, n: u64) {
        self.cut.store(n, Ordering::SeqCst);
        self.hosts.lock().unwrap()[usize::try_from(n).unwrap()].shutdown(Shutdown::Both).unwrap();
    }

    /// Stop carrying every connection made so far.
    fn go_dark(&self) {
        self.dark_below.store(u64::MAX, Ordering::SeqCst);
    }

    /// Carry connections made from now on.
    fn carry_new(&self, made_so_far: u64) {
        self.dark_below.store(made_so_far, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, n: u64, dark_below: &AtomicU64, cut: &AtomicU64) {
    let carried = || n >= dark_below.load(Ordering::SeqCst) && n != cut.load(Ordering::SeqCst);
    let mut buf = [0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(len) if carried() => {
                if to.write_all(&buf[..len]).is_err() {
                    break;
                }
            }
            Ok(_) => {}
        }
    }
    // A dark network does not pass a close on either (the target ending the association is not seen).
    if carried() {
        let _ = to.shutdown(Shutdown::Both);
    }
}

#[test]
fn a_keep_alive_timeout_on_a_dark_network_reconnects_and_held_io_completes() {
    let target = host_support::Target::start();
    let relay = Relay::start(target.addr);
    let mut o = options(1);
    o.keep_alive_tmo = Duration::from_secs(1);
    o.reconnect_delay = Duration::from_millis(200);
    let ctrl = Arc::new(Controller::connect(relay.addr, SUBNQN, o).expect("connect through the relay"));
    // Admin and one I/O queue: connections 0 and 1.
    let a = pattern(4096, 10);
    ctrl.write(1, 0, &a).unwrap();

    relay.go_dark();
    // Sent into the dark: in flight when the host gives the association up, then resubmitted.
    let b = pattern(4096, 11);
    let writer = {
        let (ctrl, b) = (Arc::clone(&ctrl), b.clone());
        std::thread::spawn(move || ctrl.write(1, 0, &b))
    };
    let s = wait_state(&ctrl, |s| s != ControllerState::Live);
    assert!(matches!(s, ControllerState::Reconnecting { .. }), "the keep-alive timeout was noticed: {s:?}");
    relay.carry_new(2);
    writer.join().unwrap().expect("the write completes on the new association");
    assert_eq!(wait_state(&ctrl, |s| s == ControllerState::Live), ControllerState::Live);
    assert_eq!(ctrl.reconnects(), 1);
    assert_ne!(ctrl.cntlid(), ctrl.info().cntlid, "the target (still up) gave the new association another controller");
    assert_eq!(read_back(&ctrl, 0, b.len()), b);
}

#[test]
fn an_idle_io_queue_losing_its_connection_reconnects() {
    // Nothing in flight on the I/O queue, the admin queue untouched and no keep-alive: only the I/O queue's own
    // thread can tell the supervisor.
    let target = host_support::Target::start();
    let relay = Relay::start(target.addr);
    let mut o = options(1);
    o.keep_alive_tmo = Duration::ZERO;
    o.reconnect_delay = Duration::from_millis(200);
    let ctrl = Controller::connect(relay.addr, SUBNQN, o).expect("connect through the relay");
    let a = pattern(4096, 12);
    ctrl.write(1, 0, &a).unwrap();

    // Admin and one I/O queue: connections 0 and 1.
    relay.cut_host_side(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ctrl.reconnects() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ctrl.reconnects(), 1, "the lost I/O queue was noticed and the association replaced");
    assert_eq!(wait_state(&ctrl, |s| s == ControllerState::Live), ControllerState::Live);
    assert_eq!(read_back(&ctrl, 0, a.len()), a);
    ctrl.disconnect().unwrap();
}

#[test]
fn disconnecting_while_reconnecting_fails_held_io_and_returns_its_buffer() {
    let target = host_support::Target::start();
    let relay = Relay::start(target.addr);
    let mut o = options(1);
    o.keep_alive_tmo = Duration::from_secs(1);
    o.reconnect_delay = Duration::from_secs(600);
    let ctrl = Controller::connect(relay.addr, SUBNQN, o).expect("connect through the relay");
    relay.go_dark();
    let sqe = Write { nsid: 1, slba: 0, nlb: 7, ..Write::default() }.to_sqe();
    let data = pattern(4096, 15);
    let request = Request { sqe, data: data.clone(), direction: DataDirection::HostToController, context: () };
    let pending = ctrl.submit_io(request).unwrap();
    let waiter = std::thread::spawn(move || pending.wait(Duration::from_secs(60)));
    let s = wait_state(&ctrl, |s| s != ControllerState::Live);
    assert!(matches!(s, ControllerState::Reconnecting { .. }), "{s:?}");
    ctrl.disconnect().expect("a controller that is not live has nothing to shut down");
    let reply = waiter.join().unwrap().expect("the held command completes");
    assert!(matches!(reply.result, Err(HostError::ShutDown { .. })), "{:?}", reply.result);
    assert_eq!(reply.data, data, "the caller's buffer comes back");
}

#[test]
fn an_awaited_write_is_held_across_a_target_restart_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let target = start(&image, 0);
    let addr = addr_of(&target);
    let mut o = options(2);
    o.reconnect_delay = Duration::from_millis(300);
    o.ctrl_loss_tmo = Some(Duration::from_secs(20));
    let ctrl = Controller::connect(addr, SUBNQN, o).expect("connect");
    target.shutdown();
    assert!(matches!(wait_state(&ctrl, |s| s != ControllerState::Live), ControllerState::Reconnecting { .. }));

    // Submitted while reconnecting, on this thread: it must come back at once (blocking here would last
    // until ctrl-loss-tmo, since the target only returns below) holding the command.
    let data = pattern(64 << 10, 11);
    let sqe = Write { nsid: 1, slba: 2048, nlb: 127, ..Write::default() }.to_sqe();
    let request = Request { sqe, data: data.clone(), direction: DataDirection::HostToController, context: () };
    let pending = ctrl.submit_io_async(request).expect("held, not failed");
    let gathered = pattern(8192, 12);
    let target = start(&image, addr.port());
    let write = async {
        let reply = pending.await?;
        ctrl.write_async(1, 4096, &[std::io::IoSlice::new(&gathered[..100]), std::io::IoSlice::new(&gathered[100..])])
            .await?;
        Ok::<_, HostError>(reply)
    };
    // Each wait for a wake-up is bounded: the reconnect attempts' state changes and the completions wake it.
    let reply = block_on(write, Duration::from_secs(20)).expect("completes on the new association");
    assert!(reply.result.expect("a CQE").status.is_success());
    assert_eq!(reply.data, data, "the buffer comes back");
    assert_reconnected_once_with(&ctrl, &[(2048, &data), (4096, &gathered)]);
    ctrl.disconnect().unwrap();
    target.shutdown();
}

#[test]
fn an_awaited_held_command_fails_at_fast_io_fail_tmo() {
    let target = host_support::Target::start();
    let mut o = options(1);
    // No attempt (and so no state change) before the fast-fail deadline: only the supervisor's wake at that
    // deadline can tell the awaiting task.
    o.reconnect_delay = Duration::from_secs(30);
    o.fast_io_fail_tmo = Some(Duration::from_millis(500));
    o.ctrl_loss_tmo = Some(Duration::from_secs(60));
    let ctrl = Controller::connect(target.addr, SUBNQN, o).expect("connect");
    drop(target);
    assert!(matches!(wait_state(&ctrl, |s| s != ControllerState::Live), ControllerState::Reconnecting { .. }));

    let data = pattern(4096, 13);
    let sqe = Write { nsid: 1, slba: 0, nlb: 7, ..Write::default() }.to_sqe();
    let request = Request { sqe, data: data.clone(), direction: DataDirection::HostToController, context: () };
    let pending = ctrl.submit_io_async(request).expect("held");
    let reply = block_on(pending, Duration::from_secs(10)).expect("a reply");
    match reply.result {
        Err(HostError::FastIoFail { after }) => assert!(after >= Duration::from_millis(500), "{after:?}"),
        other => panic!("expected the fast-I/O-fail error, got {other:?}"),
    }
    assert_eq!(reply.data, data, "the buffer comes back with the error");
    assert!(matches!(ctrl.state(), ControllerState::Reconnecting { .. }), "{:?}", ctrl.state());
    drop(ctrl);
}
