//! Shared harness of the native target tests (`tests/target_*.rs`): start a target in-process on 127.0.0.1 with
//! an ephemeral port, bring up admin and I/O queues with the blocking test host, and a few command builders.
//! Every wait is bounded and fails with a message saying what did not happen.
#![expect(dead_code, reason = "each test binary uses part of it")]

use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::property::{ControllerConfiguration, ControllerStatus, Property, ShutdownNotification};
use nvmf_common::nvme::admin::{AsyncEvent, AsyncEventRequest, KeepAlive};
use nvmf_common::nvme::identify::{cns, Identify, IdentifyController, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::io::{Compare, Read, Write};
use nvmf_common::nvme::log_page::{lid, ChangedNamespaceList, ChangedNamespaces, GetLogPage};
use nvmf_common::nvme::{SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{CapsuleCommand, Pdu};
use nvmf_config::TargetConfig;
use nvmf_target::daemon::RunningTarget;
use nvmf_tests::nvme_tcp_client::{ClientError, ClientOptions, Completion, TcpTestClient};

pub use nvmf_config::target::SocketIoMode;

/// One `#[test]` per socket path for each scenario `fn NAME(io: SocketIoMode)` named: `epoll::NAME` and
/// `io_uring::NAME`, each calling the scenario with [`SocketIoMode::Epoll`] or [`SocketIoMode::IoUring`] (every
/// kernel since 5.6 has the ops). The scenario passes `io` to [`Target::start_on`].
#[allow(unused_macros, reason = "the test binaries with socket-path variants use it")]
macro_rules! on_each_socket_path {
    ($($scenario:ident),+ $(,)?) => {
        mod epoll {
            $(
                #[test]
                fn $scenario() {
                    super::$scenario($crate::target_support::SocketIoMode::Epoll);
                }
            )+
        }
        mod io_uring {
            $(
                #[test]
                fn $scenario() {
                    super::$scenario($crate::target_support::SocketIoMode::IoUring);
                }
            )+
        }
    };
}
#[allow(unused_imports, reason = "the test binaries with socket-path variants use it")]
pub(crate) use on_each_socket_path;

/// Hold this while a scenario runs to run no other scenario of this test binary that takes it at the same time:
/// scenarios that measure the target's timing or load it on purpose (the peers that stall, flood or stop reading),
/// whose epoll and io_uring runs share one binary, each measure a target that only they load.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The subsystem every test configuration exports.
pub const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:native-tests";

/// Namespace 1 (memory) and namespace 2 (memory, 4 KiB blocks) with a 4 MiB / 8 MiB capacity.
pub const NS1_BLOCKS: u64 = 8192;

/// A configuration with one subsystem of two memory namespaces (`extra` is appended to the `[[subsystem]]`
/// table, e.g. a host allow-list).
pub fn memory_config(extra: &str) -> String {
    format!(
        r#"
[reactors]
threads = 2

[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "{SUBNQN}"
{extra}

[[subsystem.namespace]]
memory = "4MiB"

[[subsystem.namespace]]
memory = "8MiB"
block_size = 4096
"#
    )
}

/// A target running in this process, shut down on drop.
#[derive(Debug)]
pub struct Target {
    running: Option<RunningTarget>,
    /// Where the first listener is bound.
    pub addr: SocketAddr,
    /// The configuration it runs.
    pub config: TargetConfig,
}

impl Target {
    /// Parse `toml`, bind every listener to an ephemeral port (configurations cannot say port 0) and start, with
    /// the reactors' sockets as `toml` says (epoll unless it sets `[reactors] socket_io`).
    pub fn start(toml: &str) -> Target {
        let config = TargetConfig::from_str(toml, "<test>").expect("test configuration is valid");
        Target::start_config(config)
    }

    /// [`Target::start`] with the reactors driving their NVMe/TCP sockets through `io` (`[reactors] socket_io`).
    pub fn start_on(toml: &str, io: SocketIoMode) -> Target {
        let mut config = TargetConfig::from_str(toml, "<test>").expect("test configuration is valid");
        config.reactors.socket_io = io;
        Target::start_config(config)
    }

    fn start_config(mut config: TargetConfig) -> Target {
        for l in &mut config.listeners {
            l.address.set_port(0);
        }
        let running = nvmf_target::daemon::start(&config).expect("target starts");
        let addr = running.local_addrs()[0];
        Target { running: Some(running), addr, config }
    }

    /// The running target.
    pub fn running(&self) -> &RunningTarget {
        self.running.as_ref().expect("target running")
    }

    /// Stop the target now (flushes storage).
    pub fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

/// Options with a timeout short enough for tests.
pub fn options() -> ClientOptions {
    ClientOptions { timeout: Duration::from_secs(5), ..ClientOptions::default() }
}

/// Assert a completion's status type and code (CRD/M/DNR ignored) with a readable message.
#[track_caller]
pub fn assert_status(c: &Completion, want: Status) {
    assert!(c.cqe.status.same_code(want), "status {} (cid {}), expected {want}", c.cqe.status, c.cqe.cid);
}

/// Unwrap a client result and assert success.
#[track_caller]
pub fn ok(result: Result<Completion, ClientError>) -> Completion {
    let c = result.expect("command answered");
    assert_status(&c, Status::SUCCESS);
    c
}

/// Connect an admin queue (`cntlid` 0xFFFF) with `kato_ms`; returns the client and the controller ID.
pub fn connect_admin(addr: SocketAddr, subnqn: &str, opts: ClientOptions, kato_ms: u32) -> (TcpTestClient, u16) {
    let mut admin = TcpTestClient::connect(addr, opts).expect("TCP + ICReq");
    let c = ok(admin.fabrics_connect(subnqn, 0, 31, 0xFFFF, kato_ms));
    #[expect(clippy::cast_possible_truncation, reason = "CNTLID is dword 0 bits 15:0")]
    let cntlid = c.cqe.dw0 as u16;
    (admin, cntlid)
}

/// Read a 4- or 8-byte property.
pub fn property(admin: &mut TcpTestClient, p: Property) -> u64 {
    ok(admin.property_get(p.offset(), p.size())).cqe.result64()
}

/// Wait (bounded) until CSTS satisfies `pred`.
pub fn wait_csts(admin: &mut TcpTestClient, what: &str, pred: impl Fn(&ControllerStatus) -> bool) -> ControllerStatus {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = u32::try_from(property(admin, Property::Csts)).expect("CSTS is 4 bytes");
        let csts = ControllerStatus::from_u32(v).expect("CSTS decodes");
        if pred(&csts) {
            return csts;
        }
        assert!(Instant::now() < deadline, "CSTS never showed {what}: {csts:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Enable the controller (CC.EN with 64/16-byte entries) and wait for CSTS.RDY.
pub fn enable(admin: &mut TcpTestClient) {
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
    ok(admin.property_set(Property::Cc.offset(), Property::Cc.size(), u64::from(cc.to_u32())));
    wait_csts(admin, "RDY", |c| c.rdy);
}

/// Normal shutdown through CC.SHN; waits for CSTS.SHST complete.
pub fn shutdown_controller(admin: &mut TcpTestClient) -> ControllerStatus {
    let cc = ControllerConfiguration {
        en: true,
        iosqes: 6,
        iocqes: 4,
        shn: ShutdownNotification::Normal,
        ..ControllerConfiguration::default()
    };
    ok(admin.property_set(Property::Cc.offset(), Property::Cc.size(), u64::from(cc.to_u32())));
    wait_csts(admin, "SHST complete", |c| c.shst == nvmf_common::fabrics::property::ShutdownStatus::Complete)
}

/// Identify with CNS `cns` for `nsid`: the 4096-byte structure.
pub fn identify(admin: &mut TcpTestClient, cns: u8, nsid: u32) -> Completion {
    admin.command(Identify::new(cns, nsid).to_sqe(), None, IDENTIFY_DATA_SIZE).expect("Identify answered")
}

/// In-capsule data limit from Identify Controller IOCCSZ.
pub fn in_capsule_limit(admin: &mut TcpTestClient) -> usize {
    let c = identify(admin, cns::CONTROLLER, 0);
    assert_status(&c, Status::SUCCESS);
    let id = IdentifyController::parse(&c.data).expect("Identify Controller parses");
    usize::try_from(id.ioccsz * 16 - 64).expect("fits")
}

/// A connected, enabled controller with `io_queues` I/O queues (qid 1..), each knowing the in-capsule limit.
#[derive(Debug)]
pub struct Association {
    /// The admin queue.
    pub admin: TcpTestClient,
    /// Controller ID.
    pub cntlid: u16,
    /// I/O queues, `io[0]` is qid 1.
    pub io: Vec<TcpTestClient>,
}

impl Association {
    /// Connect, enable, read IOCCSZ and connect `io_queues` I/O queues.
    pub fn new(addr: SocketAddr, opts: ClientOptions, io_queues: u16) -> Association {
        let (mut admin, cntlid) = connect_admin(addr, SUBNQN, opts, 0);
        enable(&mut admin);
        let limit = in_capsule_limit(&mut admin);
        admin.in_capsule_limit = limit;
        let io = (1..=io_queues)
            .map(|qid| {
                let mut q = connect_io(addr, SUBNQN, opts, cntlid, qid).expect("I/O Connect answered");
                q.in_capsule_limit = limit;
                q
            })
            .collect();
        Association { admin, cntlid, io }
    }

    /// I/O queue 1.
    pub fn io(&mut self) -> &mut TcpTestClient {
        &mut self.io[0]
    }
}

/// Open a TCP connection and connect I/O queue `qid` of controller `cntlid`; the client if it succeeded.
pub fn connect_io(
    addr: SocketAddr,
    subnqn: &str,
    opts: ClientOptions,
    cntlid: u16,
    qid: u16,
) -> Result<TcpTestClient, Completion> {
    let mut q = TcpTestClient::connect(addr, opts).expect("TCP + ICReq");
    let c = q.fabrics_connect(subnqn, qid, 31, cntlid, 0).expect("I/O Connect answered");
    if c.cqe.status.is_success() {
        Ok(q)
    } else {
        Err(c)
    }
}

/// 0's based NLB for `len` bytes of `block` bytes.
pub fn nlb(len: usize, block: usize) -> u16 {
    assert!(len % block == 0 && len > 0);
    u16::try_from(len / block - 1).expect("at most 65536 blocks")
}

/// Write `data` at `slba` of `nsid` (block size `block`).
pub fn write(io: &mut TcpTestClient, nsid: u32, block: usize, slba: u64, data: &[u8], fua: bool) -> Completion {
    let sqe = Write { nsid, slba, nlb: nlb(data.len(), block), fua, ..Write::default() }.to_sqe();
    io.command(sqe, Some(data), 0).expect("Write answered")
}

/// Read `len` bytes at `slba` of `nsid`.
pub fn read(io: &mut TcpTestClient, nsid: u32, block: usize, slba: u64, len: usize) -> Completion {
    let sqe = Read { nsid, slba, nlb: nlb(len, block), ..Read::default() }.to_sqe();
    io.command(sqe, None, len).expect("Read answered")
}

/// Compare `data` with the media at `slba`.
pub fn compare(io: &mut TcpTestClient, nsid: u32, block: usize, slba: u64, data: &[u8]) -> Completion {
    let sqe = Compare { nsid, slba, nlb: nlb(data.len(), block), ..Compare::default() }.to_sqe();
    io.command(sqe, Some(data), 0).expect("Compare answered")
}

/// A fused Compare and Write at `slba` of `nsid`: `new` replaces the blocks if they hold `expected`. The Compare's
/// and the Write's completions.
pub fn compare_and_write(
    io: &mut TcpTestClient,
    nsid: u32,
    block: usize,
    slba: u64,
    expected: &[u8],
    new: &[u8],
) -> [Completion; 2] {
    let mut first = Compare { nsid, slba, nlb: nlb(expected.len(), block), ..Compare::default() }.to_sqe();
    first.flags |= 1;
    let mut second = Write { nsid, slba, nlb: nlb(new.len(), block), ..Write::default() }.to_sqe();
    second.flags |= 2;
    let done = io.commands_together(&[(first, expected), (second, new)]).expect("Compare and Write answered");
    done.try_into().expect("two completions")
}

/// Two hosts (two controllers, each one I/O queue) add 1 to a counter in block `slba` of `nsid` with Compare and
/// Write until it reaches `target`, each reading the block and trying to replace what it read. Every success must be
/// one increment: the counter's final value is the successes of both (a compare and a write that let the other
/// host in between would count an increment twice). Returns each host's successes.
pub fn race_compare_and_write(addr: SocketAddr, nsid: u32, block: usize, slba: u64, target: u64) -> [u64; 2] {
    let encode = move |v: u64| {
        let mut b = vec![0u8; block];
        b[..8].copy_from_slice(&v.to_le_bytes());
        b
    };
    let mut a = Association::new(addr, options(), 1);
    assert_status(&write(a.io(), nsid, block, slba, &encode(0), false), Status::SUCCESS);
    let host = move || {
        let mut a = Association::new(addr, options(), 1);
        let mut wins = 0;
        loop {
            let now = ok(Ok(read(a.io(), nsid, block, slba, block))).data;
            let v = u64::from_le_bytes(now[..8].try_into().expect("8 bytes"));
            if v >= target {
                return wins;
            }
            let [compare, write] = compare_and_write(a.io(), nsid, block, slba, &now, &encode(v + 1));
            if compare.cqe.status.is_success() && write.cqe.status.is_success() {
                wins += 1;
            } else {
                // The other host changed the counter since it was read.
                assert_eq!(compare.cqe.status, Status::COMPARE_FAILURE.with_dnr(), "Compare");
                assert_eq!(write.cqe.status, Status::ABORTED_FAILED_FUSED.with_dnr(), "Write");
            }
        }
    };
    let hosts = [std::thread::spawn(host), std::thread::spawn(host)];
    let wins = hosts.map(|h| h.join().expect("host thread"));
    let end = ok(Ok(read(a.io(), nsid, block, slba, block))).data;
    assert_eq!(end, encode(target), "the counter stopped at its target");
    assert_eq!(wins[0] + wins[1], target, "every successful Compare and Write was one increment: {wins:?}");
    wins
}

/// Get Log Page `lid` (NSID `nsid`), `len` bytes from `offset`, with Retain Asynchronous Event `rae`.
pub fn get_log_page(admin: &mut TcpTestClient, lid: u8, nsid: u32, offset: u64, len: usize, rae: bool) -> Completion {
    let mut glp = GetLogPage::new(lid, nsid, len as u64).expect("log page length");
    glp.lpo = offset;
    glp.rae = rae;
    admin.command(glp.to_sqe(), None, len).expect("Get Log Page answered")
}

/// Bytes that differ per offset and per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    #[expect(clippy::cast_possible_truncation, reason = "a repeating byte pattern")]
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 9) as u8)).collect()
}

/// Wait until the target closes the connection; returns the C2HTermReq it sent first, if any. Fails if the
/// connection is still open after `within` or the target sends anything else.
pub fn expect_closed(
    client: &mut TcpTestClient,
    within: Duration,
) -> Option<(nvmf_common::transport::tcp::FatalErrorStatus, u32)> {
    let deadline = Instant::now() + within;
    let mut term = None;
    loop {
        match client.recv_pdu() {
            Err(ClientError::Closed) => return term,
            Err(ClientError::TermReq { fes, fei }) => term = Some((fes, fei)),
            Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return term,
            Err(ClientError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                assert!(Instant::now() < deadline, "the target did not close the connection within {within:?}");
            }
            Err(e) => panic!("while waiting for the close: {e}"),
            Ok((pdu, _)) => panic!("while waiting for the close the target sent {pdu:?}"),
        }
        assert!(Instant::now() < deadline, "the target did not close the connection within {within:?}");
    }
}

/// Send a capsule without waiting for its response (for held commands such as AERs); returns the CID used.
pub fn send_command(client: &mut TcpTestClient, mut sqe: SubmissionQueueEntry) -> u16 {
    use nvmf_common::nvme::{SglDescriptor, SglSubtype};
    use nvmf_common::transport::tcp::{CapsuleCommand, Pdu};
    sqe.cid = client.next_cid();
    sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length: 0, subtype: SglSubtype::TransportSpecific })
        .expect("SGL encodes");
    client.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).expect("capsule sent");
    sqe.cid
}

/// `GET /metrics` over HTTP/1.1 (the server closes after one response); the body.
pub fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("metrics endpoint accepts");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("metrics response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The [`memory_config`] target started in this process with its metrics endpoint on, every listener and the
/// endpoint on ephemeral ports (port 0 is not a valid configuration, but it is what a test needs).
pub fn start_with_metrics() -> RunningTarget {
    let toml = format!("[metrics]\nlisten = \"127.0.0.1:9420\"\n{}", memory_config(""));
    let mut config = TargetConfig::from_str(&toml, "<test>").expect("test configuration is valid");
    config.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    for l in &mut config.listeners {
        l.address.set_port(0);
    }
    nvmf_target::daemon::start(&config).expect("target starts")
}

/// An `nvmf-target` process (the binary) logging at `RUST_LOG=info` into a file; killed on drop.
pub struct TargetProcess(Child);

impl TargetProcess {
    /// Start `nvmf-target ARGS` in `cwd` (the test's directory when `None`), its stderr into `log`.
    pub fn spawn<S: AsRef<OsStr>>(args: &[S], cwd: Option<&Path>, log: &Path) -> TargetProcess {
        let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
        let mut command = Command::new(bin);
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        let child = command
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("nvmf-target starts");
        TargetProcess(child)
    }

    /// Wait for the process to exit.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.0.wait().expect("wait for nvmf-target")
    }

    /// Send signal `name` (`HUP`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.0.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{name}");
    }
}

impl Drop for TargetProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait (bounded) until the log file contains `needle`; returns the log.
pub fn wait_log(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        assert!(Instant::now() < deadline, "the target never logged {needle:?}; log:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send an Asynchronous Event Request without waiting; returns its CID.
pub fn hold_aer(admin: &mut TcpTestClient) -> u16 {
    let mut sqe = AsyncEventRequest.to_sqe();
    sqe.cid = admin.next_cid();
    sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length: 0, subtype: SglSubtype::TransportSpecific }).unwrap();
    admin.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).expect("capsule sent");
    // The AER is held: a Keep Alive issued after it completes first.
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
    sqe.cid
}

/// The held AER `cid` completes with a Namespace Attribute Changed notice; the changed namespace list (read
/// without RAE, which re-arms the event) names exactly `nsid`.
pub fn expect_namespace_notice(admin: &mut TcpTestClient, cid: u16, nsid: u32) {
    let (pdu, _) = admin.recv_pdu().expect("the AER completes");
    let Pdu::CapsuleResponse(resp) = pdu else { panic!("expected the AER's response, got {pdu:?}") };
    assert_eq!(resp.cqe.cid, cid);
    assert!(resp.cqe.status.is_success(), "{}", resp.cqe.status);
    assert_eq!(AsyncEvent::from_dw0(resp.cqe.dw0).unwrap(), AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED);
    let glp = GetLogPage::new(lid::CHANGED_NAMESPACE_LIST, 0, 4096).unwrap();
    let c = ok(admin.command(glp.to_sqe(), None, 4096));
    let ChangedNamespaces::List(l) = ChangedNamespaceList::parse(&c.data).unwrap() else { panic!("a list") };
    assert_eq!(l.iter().collect::<Vec<_>>(), [nsid]);
}
