//! Live reconfiguration of the `nvmf-target` binary: SIGHUP re-reads `--config`, adds and removes namespaces and
//! subsystems without dropping unaffected associations (the held AER completes with a Namespace Attribute Changed
//! notice), and rejects an invalid file with its file:line error while the target keeps serving.

mod target_support;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::property::{ControllerConfiguration, Property};
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::identify::{cns, ActiveNamespaceIdList, Identify, IdentifyNamespace, IDENTIFY_DATA_SIZE};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::Status;
use nvmf_tests::nvme_tcp_client::{ClientError, ClientOptions, Completion, TcpTestClient};
use target_support::{expect_namespace_notice, hold_aer, wait_log, TargetProcess};

const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:reload-one";
const SUBNQN2: &str = "nqn.2024-01.io.nvmf-rs:reload-two";

/// The configuration: subsystem one with namespace 1, plus `ns2` (a second namespace) and `second` (a second
/// subsystem) when asked.
fn config(port: u16, ns2: bool, second: bool) -> String {
    let mut text = format!(
        "[reactors]\nthreads = 2\n\n[[listener]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n\n[[subsystem.namespace]]\nnsid = 1\nmemory = \"4MiB\"\n"
    );
    if ns2 {
        text.push_str("\n[[subsystem.namespace]]\nnsid = 2\nmemory = \"8MiB\"\nblock_size = 4096\n");
    }
    if second {
        text.push_str(&format!("\n[[subsystem]]\nnqn = \"{SUBNQN2}\"\n\n[[subsystem.namespace]]\nmemory = \"1MiB\"\n"));
    }
    text
}

fn options() -> ClientOptions {
    ClientOptions { timeout: Duration::from_secs(5), ..ClientOptions::default() }
}

#[track_caller]
fn ok(result: Result<Completion, ClientError>) -> Completion {
    let c = result.expect("command answered");
    assert!(c.cqe.status.same_code(Status::SUCCESS), "status {}", c.cqe.status);
    c
}

/// Connect and enable a controller of `subnqn` with one I/O queue.
fn associate(addr: SocketAddr, subnqn: &str) -> (TcpTestClient, TcpTestClient) {
    let mut admin = TcpTestClient::connect(addr, options()).expect("TCP + ICReq");
    let c = ok(admin.fabrics_connect(subnqn, 0, 31, 0xFFFF, 0));
    let cntlid = u16::try_from(c.cqe.dw0 & 0xFFFF).unwrap();
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
    ok(admin.property_set(Property::Cc.offset(), Property::Cc.size(), u64::from(cc.to_u32())));
    let deadline = Instant::now() + Duration::from_secs(5);
    while ok(admin.property_get(Property::Csts.offset(), Property::Csts.size())).cqe.result64() & 1 == 0 {
        assert!(Instant::now() < deadline, "CSTS.RDY never set");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut io = TcpTestClient::connect(addr, options()).expect("TCP + ICReq");
    ok(io.fabrics_connect(subnqn, 1, 31, cntlid, 0));
    (admin, io)
}

fn identify(admin: &mut TcpTestClient, cns: u8, nsid: u32) -> Completion {
    ok(admin.command(Identify::new(cns, nsid).to_sqe(), None, IDENTIFY_DATA_SIZE))
}

fn active_namespaces(admin: &mut TcpTestClient) -> Vec<u32> {
    ActiveNamespaceIdList::parse(&identify(admin, cns::ACTIVE_NAMESPACE_ID_LIST, 0).data).unwrap().iter().collect()
}

#[test]
fn sighup_applies_namespace_and_subsystem_changes_and_rejects_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("target.toml");
    let log_path = dir.path().join("stderr.log");
    // Configurations cannot say port 0: take a free port and hand it over.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    std::fs::write(&config_path, config(port, false, false)).unwrap();

    let daemon = TargetProcess::spawn(&[OsStr::new("--config"), config_path.as_os_str()], None, &log_path);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the target never listened");
        std::thread::sleep(Duration::from_millis(20));
    }

    let (mut admin, mut io) = associate(addr, SUBNQN);
    assert_eq!(active_namespaces(&mut admin), [1]);
    let data: Vec<u8> = (0..8192u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    let write = Write { nsid: 1, slba: 8, nlb: 15, ..Write::default() };
    ok(io.command(write.to_sqe(), Some(&data), 0));
    let aer = hold_aer(&mut admin);

    // Namespace 2 and a second subsystem appear.
    std::fs::write(&config_path, config(port, true, true)).unwrap();
    daemon.signal("HUP");
    expect_namespace_notice(&mut admin, aer, 2);
    assert_eq!(active_namespaces(&mut admin), [1, 2]);
    let ns2 = IdentifyNamespace::parse(&identify(&mut admin, cns::NAMESPACE, 2).data).unwrap();
    assert_eq!(ns2.nsze, 2048, "8 MiB of 4 KiB blocks");
    // The first association was not disturbed: its data reads back.
    let c = ok(io.command(Read { nsid: 1, slba: 8, nlb: 15, ..Read::default() }.to_sqe(), None, data.len()));
    assert_eq!(c.data, data);
    // The new subsystem accepts a Connect and serves its namespace once the whole reload is applied (the notice
    // above can come before the reload has added the second subsystem).
    wait_log(&log_path, "configuration reloaded");
    let (mut admin2, _io2) = associate(addr, SUBNQN2);
    assert_eq!(active_namespaces(&mut admin2), [1]);

    // An invalid file is rejected with its location; the target keeps serving with the running configuration.
    std::fs::write(
        &config_path,
        format!("{}\n[[subsystem.namespace]]\nnsid = 2\nmemory = \"lots\"\n", config(port, true, true)),
    )
    .unwrap();
    daemon.signal("HUP");
    let log = wait_log(&log_path, "configuration rejected");
    let location = format!("{}:", config_path.display());
    assert!(log.lines().any(|l| l.contains("configuration rejected") && l.contains(&location)), "{log}");
    let rejected = log.lines().find(|l| l.contains("configuration rejected")).unwrap().to_owned();
    let after_path = rejected.split(&location).nth(1).unwrap();
    assert!(after_path.split(':').next().unwrap().parse::<u32>().is_ok(), "a line number: {rejected}");
    assert_eq!(active_namespaces(&mut admin), [1, 2]);
    let c = ok(io.command(Read { nsid: 1, slba: 8, nlb: 15, ..Read::default() }.to_sqe(), None, data.len()));
    assert_eq!(c.data, data);

    // Namespace 2 goes away again: another notice, and it is inactive.
    let aer = hold_aer(&mut admin);
    std::fs::write(&config_path, config(port, false, true)).unwrap();
    daemon.signal("HUP");
    expect_namespace_notice(&mut admin, aer, 2);
    assert_eq!(active_namespaces(&mut admin), [1]);
    let c = io.command(Read { nsid: 2, slba: 0, nlb: 0, ..Read::default() }.to_sqe(), None, 4096).unwrap();
    assert!(!c.cqe.status.is_success(), "I/O to a removed namespace fails");
    assert_eq!(active_namespaces(&mut admin2), [1], "the second subsystem is untouched");

    daemon.signal("TERM");
    let mut daemon = daemon;
    let exit = daemon.wait();
    assert!(exit.success(), "nvmf-target exited with {exit}");
}

/// Subsystem one with namespace 1, served on a TCP listener at each of `ports` on 127.0.0.1.
fn listeners_config(ports: &[u16]) -> String {
    let listeners: String =
        ports.iter().map(|port| format!("[[listener]]\naddress = \"127.0.0.1\"\nport = {port}\n\n")).collect();
    format!(
        "[reactors]\nthreads = 2\n\n{listeners}[[subsystem]]\nnqn = \"{SUBNQN}\"\n\n\
         [[subsystem.namespace]]\nnsid = 1\nmemory = \"4MiB\"\n"
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `nvmf-target reload --control SOCKET [extra]`: (success, stdout, stderr).
fn reload_command(socket: &Path, extra: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let out = Command::new(bin).arg("reload").arg("--control").arg(socket).args(extra).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn reload_command_prints_the_outcome_and_listeners_follow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("target.toml");
    let socket = dir.path().join("control.sock");
    let log_path = dir.path().join("stderr.log");
    let (first, second) = (free_port(), free_port());
    let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    std::fs::write(&config_path, listeners_config(&[first])).unwrap();
    // Started with a relative --config from its own directory: `reload` runs from another one.
    let args = [OsStr::new("--config"), OsStr::new("target.toml"), OsStr::new("--control"), socket.as_os_str()];
    let daemon = TargetProcess::spawn(&args, Some(dir.path()), &log_path);
    wait_log(&log_path, "control socket ready");
    let (mut admin, mut io) = associate(addr(first), SUBNQN);
    let data: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i % 253).unwrap()).collect();
    ok(io.command(Write { nsid: 1, slba: 0, nlb: 7, ..Write::default() }.to_sqe(), Some(&data), 0));

    // Nothing changed: the daemon says so.
    let (success, stdout, stderr) = reload_command(&socket, &[]);
    assert!(success, "{stderr}");
    assert_eq!(stdout.trim(), "no changes");

    // A second listener opens; a host connects through it.
    std::fs::write(&config_path, listeners_config(&[first, second])).unwrap();
    let (success, stdout, stderr) =
        reload_command(&socket, &[std::ffi::OsStr::new("--config"), config_path.as_os_str()]);
    assert!(success, "{stderr}");
    assert_eq!(stdout.trim(), "listeners: 1 added, 0 removed, 0 changed");
    let (mut admin2, _io2) = associate(addr(second), SUBNQN);
    assert_eq!(active_namespaces(&mut admin2), [1]);

    // The first listener closes; the association made through it keeps working.
    std::fs::write(&config_path, listeners_config(&[second])).unwrap();
    let (success, stdout, stderr) = reload_command(&socket, &[]);
    assert!(success, "{stderr}");
    assert_eq!(stdout.trim(), "listeners: 0 added, 1 removed, 0 changed");
    let refused = std::net::TcpStream::connect(addr(first)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let c = ok(io.command(Read { nsid: 1, slba: 0, nlb: 7, ..Read::default() }.to_sqe(), None, data.len()));
    assert_eq!(c.data, data);
    ok(admin.command(KeepAlive.to_sqe(), None, 0));

    // A listener that cannot bind: the daemon rejects the reload with the reason and keeps everything.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    std::fs::write(&config_path, listeners_config(&[second, taken_port])).unwrap();
    let (success, stdout, stderr) = reload_command(&socket, &[]);
    assert!(!success && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains(&format!("cannot listen on tcp://127.0.0.1:{taken_port}")), "{stderr}");
    assert!(stderr.contains("rejected; the daemon keeps its running configuration"), "{stderr}");
    associate(addr(second), SUBNQN);

    // An invalid file is caught by the command itself, with its location: the daemon is never asked.
    let requests = |log: &str| log.matches("control request").count();
    let before = requests(&std::fs::read_to_string(&log_path).unwrap());
    std::fs::write(&config_path, format!("{}\n[target]\nmdts = \"huge\"\n", listeners_config(&[second]))).unwrap();
    let (success, _, stderr) = reload_command(&socket, &[]);
    assert!(!success, "an invalid file fails the command");
    assert!(stderr.contains(&format!("{}:", config_path.display())) && stderr.contains("mdts"), "{stderr}");
    assert!(stderr.contains("not sent"), "{stderr}");
    // Only the config-path question reached the daemon.
    assert_eq!(requests(&std::fs::read_to_string(&log_path).unwrap()), before + 1);

    // Another file than the daemon's is refused.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, listeners_config(&[second])).unwrap();
    let (success, _, stderr) = reload_command(&socket, &[std::ffi::OsStr::new("--config"), other.as_os_str()]);
    assert!(!success && stderr.contains("the daemon reloads"), "{stderr}");

    daemon.signal("TERM");
    let mut daemon = daemon;
    assert!(daemon.wait().success());
    assert!(!socket.exists(), "the control socket is removed at exit");
}
