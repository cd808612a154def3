//! Our host's native multipath against two of our target processes on loopback: one subsystem, one shared
//! file-backed namespace (same NGUID), distinct CNTLID ranges, listener A optimized and B non-optimized. The
//! host daemon's second `connect` to the subsystem joins the first's NBD export as a path; `list` shows both
//! paths with their ANA states; data written through the export is read back while (a) A's listener is made
//! inaccessible (I/O moves to B) and (b) A is killed with SIGKILL (I/O goes on through B); each phase's
//! writes land on the node the ANA states say. And a path whose target fails every command (a proxy rewrites each
//! I/O status to a path error) fails a read after `path_retries`, not never.

mod target_support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use target_support::TargetProcess;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:multipath";
const NGUID: &str = "5f0a6c1e2b3d4e5f8091a2b3c4d5e6f7";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn host_bin() -> std::path::PathBuf {
    nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host").expect("nvmf-host binary")
}

fn target_bin() -> std::path::PathBuf {
    nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary")
}

/// One target node: `nvmf-target` serving the shared file on `port` with the listener in `ana` state.
fn start_node(dir: &Path, name: &str, port: u16, ana: &str, cntlids: &str) -> TargetProcess {
    let control = dir.join(format!("{name}.sock"));
    let args = [
        "--listen".to_owned(),
        format!("tcp://127.0.0.1:{port},ana-state={ana}"),
        "--namespace".to_owned(),
        format!("{},nguid={NGUID}", dir.join("disk.img").display()),
        "--nqn".to_owned(),
        NQN.to_owned(),
        "--cntlid-range".to_owned(),
        cntlids.to_owned(),
        "--control".to_owned(),
        control.display().to_string(),
    ];
    let log = dir.join(format!("{name}.log"));
    let node = TargetProcess::spawn(&args, Some(dir), &log);
    target_support::wait_log(&log, "ready");
    node
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("command runs")
}

fn ok(bin: &Path, args: &[&str]) -> String {
    let out = run(bin, args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} {args:?}:\n{text}", bin.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Bytes the node's controllers were written, from `nvmf-target list -o json`.
fn bytes_written(dir: &Path, name: &str) -> u64 {
    let control = dir.join(format!("{name}.sock"));
    let text = ok(&target_bin(), &["list", "-o", "json", "--control", control.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&text).expect("list JSON");
    fn sum(v: &Value) -> u64 {
        match v {
            Value::Object(m) => {
                let own = m
                    .get("controllers")
                    .and_then(Value::as_array)
                    .map_or(0, |cs| cs.iter().filter_map(|c| c.get("bytes_written").and_then(Value::as_u64)).sum());
                own + m.iter().filter(|(k, _)| *k != "controllers").map(|(_, v)| sum(v)).sum::<u64>()
            }
            Value::Array(a) => a.iter().map(sum).sum(),
            _ => 0,
        }
    }
    sum(&v)
}

/// The body of `GET /metrics` at `addr`.
fn http_get(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// qemu-io `commands` against the NBD export at `sock`; panics on an error or a pattern mismatch.
fn qemu_io(sock: &Path, commands: &[&str]) {
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.arg(&uri).output().expect("qemu-io (Debian package qemu-utils)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("Pattern verification failed"), "qemu-io {commands:?}:\n{text}");
    let reads = commands.iter().filter(|c| c.starts_with("read ")).count();
    assert_eq!(text.matches("read ").count(), reads, "{text}");
}

struct HostDaemon {
    child: Child,
}

impl HostDaemon {
    /// `nvmf-host run --config DIR/host.toml`, logging into `DIR/host.log`.
    fn start(dir: &Path) -> HostDaemon {
        let child = Command::new(host_bin())
            .args(["run", "--config", dir.join("host.toml").to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("host.log")).unwrap())
            .spawn()
            .expect("nvmf-host run");
        HostDaemon { child }
    }
}

impl Drop for HostDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon's paths of namespace 1, as `(name, state, ana_state)` by name, from `list -o json`.
fn paths(control: &str) -> Vec<(String, String, String)> {
    let text = ok(&host_bin(), &["list", "-o", "json", "--control", control]);
    let v: Value = serde_json::from_str(&text).expect("list JSON");
    let controllers = v.as_array().cloned().or_else(|| v.get("controllers").and_then(Value::as_array).cloned());
    let first = controllers.unwrap_or_default().into_iter().next().expect("a controller");
    let export = &first["exports"][0];
    export["paths"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let s = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
                    (s("name"), s("state"), s("ana_state"))
                })
                .collect::<Vec<_>>()
        })
        .map(|mut ps| {
            // By name: which path joined first depends on which connect finished first.
            ps.sort();
            ps
        })
        .unwrap_or_default()
}

/// Two target nodes on one 64 MiB file in a temporary folder: A optimized (CNTLIDs 1-99), B non-optimized
/// (100-199).
struct Nodes {
    dir: tempfile::TempDir,
    port_a: u16,
    port_b: u16,
    a: TargetProcess,
    b: TargetProcess,
}

/// [`Nodes`] started; `None` (the test skips, saying why) without qemu-io to check the data with.
fn two_nodes() -> Option<Nodes> {
    if Command::new("qemu-io").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("SKIPPED: qemu-io is not installed (Debian package qemu-utils)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::File::create(dir.path().join("disk.img")).unwrap().set_len(64 << 20).unwrap();
    let (port_a, port_b) = (free_port(), free_port());
    let a = start_node(dir.path(), "a", port_a, "optimized", "1-99");
    let b = start_node(dir.path(), "b", port_b, "non-optimized", "100-199");
    Some(Nodes { dir, port_a, port_b, a, b })
}

/// Wait (bounded) until `f` holds.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_nodes_one_export_fails_over_on_ana_change_and_node_loss() {
    let Some(Nodes { dir, port_a, port_b, a, b: _node_b }) = two_nodes() else { return };
    let d = dir.path();
    let mut node_a = Some(a);

    let control = d.join("host.sock").display().to_string();
    let metrics = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        d.join("host.toml"),
        format!(
            "[host]\nstate_dir = \"{}\"\ncontrol_socket = \"{control}\"\n[metrics]\nlisten = \"{metrics}\"\n",
            d.join("state").display()
        ),
    )
    .unwrap();
    let _daemon = HostDaemon::start(d);
    wait_for("the host's control socket", || Path::new(&control).exists());

    let sock = d.join("disk.sock");
    let nbd = format!("unix:{}", sock.display());
    let connect = |port: u16, nbd: &str, extra: &[&str]| {
        let port = port.to_string();
        let args =
            ["connect", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", NQN, "-c", "1", "--control", &control];
        let mut args = args.to_vec();
        args.extend(["--nbd", nbd]);
        args.extend(extra);
        ok(&host_bin(), &args)
    };
    let first = connect(port_a, &nbd, &["--iopolicy", "queue-depth"]);
    assert!(first.starts_with("nvmf0\n"), "{first}");
    let other_sock = format!("unix:{}", d.join("unused.sock").display());
    let second = connect(port_b, &other_sock, &[]);
    assert!(second.contains(&format!("nvmf1n1: exported at nbd+unix:///?socket={}", sock.display())), "{second}");
    assert!(second.contains("(now 2 paths)"), "{second}");
    assert!(!d.join("unused.sock").exists(), "the second path must not start an export of its own");
    let want = |a: &str, b: &str| {
        vec![
            ("nvmf0".to_owned(), "live".to_owned(), a.to_owned()),
            ("nvmf1".to_owned(), "live".to_owned(), b.to_owned()),
        ]
    };
    assert_eq!(paths(&control), want("optimized", "non-optimized"));
    let list: Value = serde_json::from_str(&ok(&host_bin(), &["list", "-o", "json", "--control", &control])).unwrap();
    assert_eq!(list["controllers"][1]["exports"][0]["iopolicy"], "queue-depth", "the first path's policy: {list}");

    // Optimized path A takes the writes.
    let (a0, b0) = (bytes_written(d, "a"), bytes_written(d, "b"));
    qemu_io(&sock, &["write -P 0xa5 0 1M", "read -P 0xa5 0 1M"]);
    let (a1, b1) = (bytes_written(d, "a"), bytes_written(d, "b"));
    assert!(a1 - a0 >= 1 << 20, "node A wrote {} bytes", a1 - a0);
    assert_eq!(b1, b0, "node B (non-optimized) must take no writes while A is optimized");

    // (a) A's listener inaccessible: the host reads the ANA log (event) and writes go to B.
    let a_control = d.join("a.sock");
    let listener = format!("tcp://127.0.0.1:{port_a}");
    ok(
        &target_bin(),
        &["ana-state", "--listener", &listener, "--state", "inaccessible", "--control", a_control.to_str().unwrap()],
    );
    wait_for("path A inaccessible in list", || paths(&control) == want("inaccessible", "non-optimized"));
    let scrape = http_get(&metrics);
    for line in [
        "nvmf_host_path_ana_state{controller=\"nvmf0\",nsid=\"1\",state=\"inaccessible\"} 1",
        "nvmf_host_path_ana_state{controller=\"nvmf1\",nsid=\"1\",state=\"non-optimized\"} 1",
        "nvmf_host_path_failovers_total{controller=\"nvmf0\",nsid=\"1\"}",
    ] {
        assert!(scrape.contains(line), "missing {line:?} in\n{scrape}");
    }
    qemu_io(&sock, &["write -P 0x5a 1M 1M", "read -P 0x5a 1M 1M", "read -P 0xa5 0 1M"]);
    let (a2, b2) = (bytes_written(d, "a"), bytes_written(d, "b"));
    assert!(b2 - b1 >= 1 << 20, "node B wrote {} bytes after A became inaccessible", b2 - b1);
    assert_eq!(a2, a1, "node A took writes while inaccessible");

    // Back to optimized, then (b) node A killed: I/O goes on through B.
    ok(
        &target_bin(),
        &["ana-state", "--listener", &listener, "--state", "optimized", "--control", a_control.to_str().unwrap()],
    );
    wait_for("path A optimized again", || paths(&control) == want("optimized", "non-optimized"));
    drop(node_a.take());
    qemu_io(&sock, &["write -P 0x3c 2M 1M", "read -P 0x3c 2M 1M", "read -P 0x5a 1M 1M", "read -P 0xa5 0 1M"]);
    assert!(bytes_written(d, "b") - b2 >= 1 << 20, "node B took the writes after A was killed");
    let after = paths(&control);
    assert_eq!(after[1], ("nvmf1".to_owned(), "live".to_owned(), "non-optimized".to_owned()));
    assert_ne!(after[0].1, "live", "the killed node's path must not be live: {after:?}");
}

#[test]
fn a_controller_table_with_a_further_path_serves_one_export() {
    let Some(Nodes { dir, port_a, port_b, a: _node_a, b: _node_b }) = two_nodes() else { return };
    let d = dir.path();
    let control = d.join("host.sock").display().to_string();
    let sock = d.join("disk.sock");
    std::fs::write(
        d.join("host.toml"),
        format!(
            "[host]\nstate_dir = \"{state}\"\ncontrol_socket = \"{control}\"\n\
             [[controller]]\naddress = \"127.0.0.1\"\nport = {port_a}\nnqn = \"{NQN}\"\nreconnect_delay = 1\n\
             iopolicy = \"queue-depth\"\n[[controller.export]]\nnsid = 1\nnbd = \"unix:{sock}\"\n\
             [[controller.path]]\naddress = \"127.0.0.1\"\nport = {port_b}\n",
            state = d.join("state").display(),
            sock = sock.display(),
        ),
    )
    .unwrap();
    let check = run(&host_bin(), &["run", "--check", "--config", d.join("host.toml").to_str().unwrap()]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let _daemon = HostDaemon::start(d);
    wait_for("both paths live", || {
        Path::new(&control).exists()
            && paths(&control)
                == [
                    ("nvmf0".to_owned(), "live".to_owned(), "optimized".to_owned()),
                    ("nvmf1".to_owned(), "live".to_owned(), "non-optimized".to_owned()),
                ]
    });
    qemu_io(&sock, &["write -P 0x77 0 1M", "read -P 0x77 0 1M"]);
    assert!(bytes_written(d, "a") >= 1 << 20, "the optimized path took the writes");
    assert_eq!(bytes_written(d, "b"), 0, "the non-optimized path took writes");
}

/// A proxy in front of `to` that, once `armed`, answers every I/O queue command with Internal Path Error (a
/// path-related status without DNR) instead of the target's status: a target that fails every command on its path,
/// forever. NVMe/TCP without digests; the host's bytes pass as they are.
fn path_error_proxy(to: u16, armed: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for host in listener.incoming().flatten() {
            let target = std::net::TcpStream::connect(("127.0.0.1", to)).expect("the node behind the proxy");
            let (mut host_in, mut target_out) = (host.try_clone().unwrap(), target.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut host_in, &mut target_out));
            let (mut target_in, mut host_out, armed) = (target, host, std::sync::Arc::clone(&armed));
            std::thread::spawn(move || -> std::io::Result<()> {
                loop {
                    let mut header = [0u8; 8];
                    target_in.read_exact(&mut header)?;
                    let plen = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
                    let mut pdu = header.to_vec();
                    pdu.resize(plen.max(8), 0);
                    target_in.read_exact(&mut pdu[8..])?;
                    // CapsuleResp (type 5): the CQE's SQID at bytes 10-11, its status word at 14-15.
                    let sqid =
                        u16::from_le_bytes([pdu.get(18).copied().unwrap_or(0), pdu.get(19).copied().unwrap_or(0)]);
                    if pdu[0] == 5 && pdu.len() >= 24 && sqid != 0 && armed.load(std::sync::atomic::Ordering::Relaxed) {
                        let phase = pdu[22] & 1;
                        pdu[22..24].copy_from_slice(&(0x0600u16 | u16::from(phase)).to_le_bytes());
                    }
                    host_out.write_all(&pdu)?;
                }
            });
        }
    });
    port
}

/// A target that answers every command with a path error costs a bounded time: each command goes again
/// `path_retries` times, later retries slower, then fails; the path counts it. (Without the bound the export's
/// thread resent the command forever.)
#[test]
fn a_path_that_fails_every_command_fails_it_after_path_retries() {
    if Command::new("qemu-io").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("SKIPPED: qemu-io is not installed (Debian package qemu-utils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::File::create(d.join("disk.img")).unwrap().set_len(64 << 20).unwrap();
    let node_port = free_port();
    let _node = start_node(d, "a", node_port, "optimized", "1-99");
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = path_error_proxy(node_port, std::sync::Arc::clone(&armed));
    let control = d.join("host.sock").display().to_string();
    let metrics = format!("127.0.0.1:{}", free_port());
    let sock = d.join("disk.sock");
    std::fs::write(
        d.join("host.toml"),
        format!(
            "[host]\nstate_dir = \"{state}\"\ncontrol_socket = \"{control}\"\n[metrics]\nlisten = \"{metrics}\"\n\
             [[controller]]\naddress = \"127.0.0.1\"\nport = {proxy}\nnqn = \"{NQN}\"\npath_retries = 2\n\
             [[controller.export]]\nnsid = 1\nnbd = \"unix:{sock}\"\n",
            state = d.join("state").display(),
            sock = sock.display(),
        ),
    )
    .unwrap();
    let _daemon = HostDaemon::start(d);
    wait_for("the path live", || Path::new(&control).exists() && paths(&control).len() == 1);
    qemu_io(&sock, &["write -P 0x5a 0 64k", "read -P 0x5a 0 64k"]);

    armed.store(true, std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    // Bounded, so that a host that resends forever fails the test instead of hanging it.
    let out = Command::new("timeout")
        .args(["30", "qemu-io", "-f", "raw", "-c", "read 0 4k", &uri])
        .output()
        .expect("qemu-io");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let took = started.elapsed();
    assert!(text.contains("error") || text.contains("Input/output"), "the read failed: {text}");
    assert!(took < Duration::from_secs(20), "the failing read took {took:?}");
    let scrape = http_get(&metrics);
    let exhausted = scrape
        .lines()
        .find(|l| l.starts_with("nvmf_host_path_retries_exhausted_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(exhausted.is_some_and(|n| n >= 1), "retries exhausted counted:\n{scrape}");
    eprintln!("a read on a path that fails every command failed after {took:?}");
}
