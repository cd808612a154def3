//! `nvmf-host run` as a real process beside an in-process target on 127.0.0.1, driven by the CLI binary:
//! connect → list → NBD export → metrics (checked by promtool) → disconnect → connect-all → SIGTERM, plus the
//! daemon-missing and RDMA errors and the persistent host identity; `run --check`; reloads (`nvmf-host reload`
//! and SIGHUP) that add, remove and reconnect controllers and exports, and reject bad files whole.

mod host_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use host_support::SUBNQN;
use nvmf_config::TargetConfig;
use nvmf_target::daemon::RunningTarget;
use serde_json::Value;

/// The support target's configuration with a metrics endpoint, so the test can see its controllers.
fn start_target() -> (RunningTarget, SocketAddr, SocketAddr) {
    let text = format!("[metrics]\nlisten = \"127.0.0.1:{}\"\n{}", free_port(), host_support::config());
    let mut config = TargetConfig::from_str(&text, "<test>").expect("valid target configuration");
    for l in &mut config.listeners {
        l.address.set_port(0);
    }
    let running = nvmf_target::daemon::start(&config).expect("target starts");
    let addr = running.local_addrs()[0];
    let metrics = running.metrics_addr().expect("target metrics");
    (running, addr, metrics)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("metrics endpoint answers");
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// A metric's value in a Prometheus text exposition.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    control: PathBuf,
    metrics: SocketAddr,
}

impl Daemon {
    /// Write a configuration in a fresh directory (with `extra` appended) and start `nvmf-host run`.
    fn start(extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, extra)
    }

    fn start_in(dir: tempfile::TempDir, extra: &str) -> Daemon {
        Self::start_with(dir, extra, &[])
    }

    /// Start with extra environment variables (`NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    fn start_with(dir: tempfile::TempDir, extra: &str, env: &[(&str, String)]) -> Daemon {
        let control = dir.path().join("control.sock");
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = dir.path().join("host.toml");
        write_config(&config, metrics, extra);
        let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
        let child = Command::new(host_support::nvmf_host())
            // A path relative to the daemon's directory: `reload` (run from elsewhere) must still find the file.
            .args(["run", "--config", "host.toml"])
            .current_dir(dir.path())
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nvmf-host run starts");
        let mut d = Daemon { child, dir, control, metrics };
        // Ready when it logs so (after every configured controller's first attempt), or say why it died.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.log().contains("nvmf_host::daemon: ready") {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!("daemon exited with {status}: {}", d.log());
            }
            assert!(Instant::now() < deadline, "the daemon never became ready: {}", d.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(UnixStream::connect(&d.control).is_ok(), "control socket answers once ready");
        d
    }

    /// Replace the configuration file (same `[host]`, `[metrics]` and `[logging]`, these controllers).
    fn rewrite(&self, extra: &str) {
        write_config(&self.dir.path().join("host.toml"), self.metrics, extra);
    }

    /// Send SIGHUP and wait until the daemon has logged the outcome of one more reload than before.
    fn sighup(&self) -> String {
        let outcomes =
            |log: &str| log.matches("configuration reloaded").count() + log.matches("configuration rejected").count();
        let before = outcomes(&self.log());
        assert!(Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = self.log();
            if outcomes(&log) > before {
                return log;
            }
            assert!(Instant::now() < deadline, "no reload after SIGHUP: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(host_support::nvmf_host())
            .args(args)
            .arg("--control")
            .arg(&self.control)
            .output()
            .expect("nvmf-host runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}\ndaemon log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn list(&self) -> Vec<Value> {
        let j: Value = serde_json::from_str(&self.ok(&["list", "-o", "json"])).expect("list -o json is JSON");
        j["controllers"].as_array().expect("controllers").clone()
    }

    /// SIGTERM, then the exit status, the log and the directory (for a restart in it).
    fn terminate(mut self) -> (std::process::ExitStatus, String, tempfile::TempDir) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().unwrap();
        let log = self.log();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (status, log, dir)
    }
}

fn write_config(path: &Path, metrics: SocketAddr, extra: &str) {
    std::fs::write(
        path,
        format!(
            "[host]\nstate_dir = \"state\"\ncontrol_socket = \"control.sock\"\n[metrics]\nlisten = \"{metrics}\"\n\
             [logging]\nlevel = \"info\"\n{extra}"
        ),
    )
    .unwrap();
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write a pattern through the NBD export with qemu-io, read it back and compare (qemu-utils; skipped without).
fn qemu_io_round_trip(sock: &Path) {
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let out = match Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0xa5 4096 64k", "-c", "read -P 0xa5 4096 64k", "-c", "read -P 0 0 4096"])
        .arg(&uri)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIPPED: qemu-io data check: {e} (Debian package qemu-utils)");
            return;
        }
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("Pattern verification failed"), "qemu-io {uri}:\n{text}");
    assert_eq!(text.matches("read 65536/65536 bytes").count(), 1, "{text}");
}

/// Run qemu-io `commands` against the NBD export at `sock`; fails on an error or a pattern mismatch. `false`:
/// qemu-io is not installed (the caller's data check is skipped).
fn qemu_io(sock: &Path, commands: &[&str]) -> bool {
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = match cmd.arg(&uri).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIPPED: qemu-io data check: {e} (Debian package qemu-utils)");
            return false;
        }
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("Pattern verification failed"), "qemu-io {uri}:\n{text}");
    assert_eq!(text.matches("read ").count(), commands.iter().filter(|c| c.starts_with("read ")).count(), "{text}");
    true
}

fn port_of(addr: SocketAddr) -> String {
    addr.port().to_string()
}

/// The identity the daemon should use: /etc/nvme's (as nvme-cli) when present, else the one it stored.
fn expected_hostnqn(state: &Path) -> String {
    match std::fs::read_to_string("/etc/nvme/hostnqn") {
        Ok(n) if n.trim().starts_with("nqn.") => n.trim().to_owned(),
        _ => std::fs::read_to_string(state.join("hostnqn")).expect("generated host NQN stored").trim().to_owned(),
    }
}

#[test]
fn connect_list_export_metrics_disconnect_and_sigterm() {
    let (target, addr, target_metrics) = start_target();
    let port = port_of(addr);
    let d = Daemon::start("");
    assert!(d.list().is_empty());

    // connect prints the controller's name, like nvme-cli prints the device.
    let out = d.ok(&["connect", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "--nr-io-queues", "2"]);
    assert_eq!(out, "nvmf0\n");
    let list = d.list();
    assert_eq!(list.len(), 1, "{list:?}");
    let c = &list[0];
    assert_eq!((c["name"].as_str(), c["state"].as_str()), (Some("nvmf0"), Some("live")), "{c}");
    assert_eq!((c["subnqn"].as_str(), c["traddr"].as_str()), (Some(SUBNQN), Some("127.0.0.1")), "{c}");
    assert_eq!(c["trsvcid"].as_str(), Some(port.as_str()));
    assert_eq!(c["io_queues"], 2);
    assert_eq!(c["hostnqn"].as_str().unwrap(), expected_hostnqn(&d.dir.path().join("state")));
    let ns: Vec<(u64, u64)> = c["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["nsid"].as_u64().unwrap(), n["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(ns, [(1, 16 << 20), (2, 8 << 20)]);
    let table = d.ok(&["list"]);
    assert!(table.contains("nvmf0") && table.contains("live") && table.contains("1:16 MiB,2:8 MiB"), "{table}");
    // The log filter changes while the daemon runs; a filter that is not one is refused.
    assert_eq!(d.ok(&["log-level", "debug"]), "debug\n");
    assert_eq!(d.ok(&["log-level"]), "debug\n");
    let bad = d.cli(&["log-level", "loud"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("not one of off, error"));

    // nvme-cli refuses a duplicate connect unless asked (-D).
    let dup = d.cli(&["connect", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN]);
    assert!(!dup.status.success());
    let err = String::from_utf8_lossy(&dup.stderr);
    assert!(err.contains("is already connected as nvmf0 (--duplicate-connect for another association)"), "{err}");

    // A second association (-D) with an NBD export of namespace 2: NBD's greeting, then data through qemu-io.
    let sock = d.dir.path().join("ns2.nbd");
    let listen = format!("unix:{}", sock.display());
    let out = d.ok(&[
        "connect",
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        SUBNQN,
        "--nbd",
        &listen,
        "--export-nsid",
        "2",
        "-D",
    ]);
    assert_eq!(out, format!("nvmf1\nnvmf1n2: exported at nbd+unix:///?socket={}\n", sock.display()));
    let mut greeting = [0u8; 18];
    UnixStream::connect(&sock).expect("export listens").read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    qemu_io_round_trip(&sock);
    let list = d.list();
    assert_eq!(list[1]["exports"][0]["nsid"], 2, "{list:?}");
    assert_eq!(list[1]["exports"][0]["kind"].as_str(), Some("nbd"));
    assert_eq!(list[1]["exports"][0]["address"].as_str(), Some(listen.as_str()));

    // The daemon's /metrics: our families, accepted by promtool.
    let text = http_get(d.metrics, "/metrics");
    let live = format!(
        "nvmf_host_controller_state{{controller=\"nvmf0\",subnqn=\"{SUBNQN}\",traddr=\"127.0.0.1:{port}\",state=\"live\"}}"
    );
    assert_eq!(metric(&text, &live), Some(1.0), "{text}");
    assert_eq!(metric(&text, "nvmf_host_exports{controller=\"nvmf1\"}"), Some(1.0), "{text}");
    // Its NBD export's limits, none fired.
    for limit in ["clients", "handshake_timeout", "stop_write_timeout", "in_flight"] {
        let series = format!("nvmf_host_nbd_limits_total{{export=\"nvmf1n2\",limit=\"{limit}\"}}");
        assert_eq!(metric(&text, &series), Some(0.0), "{text}");
    }
    assert!(metric(&text, "nvmf_host_queue_commands_total{controller=\"nvmf0\",qid=\"0\"}").unwrap() > 0.0, "{text}");
    host_support::assert_promtool_accepts(&text);

    // disconnect -n ends both associations; disconnect of something unknown is an error.
    let out = d.ok(&["disconnect", "-n", SUBNQN]);
    assert_eq!(out, format!("NQN:{SUBNQN} disconnected 2 controller(s)\n"));
    assert!(d.list().is_empty());
    assert!(!sock.exists(), "the export's socket is removed");
    let err = d.cli(&["disconnect", "-d", "nvmf7"]);
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("no controller matches controller name nvmf7"));

    // connect-all through the target's discovery service; a second run skips what is connected.
    let out = d.ok(&["connect-all", "-t", "tcp", "-a", "127.0.0.1", "-s", &port]);
    assert!(out.contains(&format!("nvmf0    {SUBNQN} at 127.0.0.1:{port}: connected")), "{out}");
    let out = d.ok(&["connect-all", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-o", "json"]);
    let entries: Value = serde_json::from_str(&out).expect("connect-all -o json is JSON");
    let ours = entries.as_array().unwrap().iter().find(|e| e["subnqn"] == SUBNQN).expect("our subsystem listed");
    assert_eq!((ours["outcome"].as_str(), ours["name"].as_str()), (Some("already connected"), Some("nvmf0")), "{out}");
    assert_eq!(d.list().len(), 1);
    // Without -a, the discovery controllers a discovery.conf lists (nvme-cli's file and syntax).
    let conf = d.dir.path().join("discovery.conf");
    std::fs::write(&conf, format!("# ours\n--transport=tcp --traddr=127.0.0.1 --trsvcid={port}\n")).unwrap();
    let out = d.ok(&["connect-all", "--discovery-conf", conf.to_str().unwrap()]);
    assert!(out.contains(&format!("nvmf0    {SUBNQN} at 127.0.0.1:{port}: already connected")), "{out}");

    // SIGTERM: a clean exit with CC.SHN acknowledged for the live controller; the target has no controller left.
    let target_before = http_get(target_metrics, "/metrics");
    let series = format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}");
    assert_eq!(metric(&target_before, &series), Some(1.0), "{target_before}");
    let (status, log, _) = d.terminate();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("disconnected") && !log.contains("disconnect was not clean"), "{log}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let after = http_get(target_metrics, "/metrics");
        if metric(&after, &series) == Some(0.0) {
            let expiries = format!("nvmf_target_keep_alive_expiries_total{{subsystem=\"{SUBNQN}\"}}");
            assert_eq!(metric(&after, &expiries).unwrap_or(0.0), 0.0, "{after}");
            break;
        }
        assert!(Instant::now() < deadline, "the target still has a controller:\n{after}");
        std::thread::sleep(Duration::from_millis(20));
    }
    target.shutdown();
}

#[test]
fn configured_controllers_connect_at_start_and_a_down_target_does_not_stop_the_daemon() {
    let (target, addr, _) = start_target();
    let down = free_port();
    let d = Daemon::start(&format!(
        "[[controller]]\naddress = \"127.0.0.1\"\nport = {}\nnqn = \"{SUBNQN}\"\nnr_io_queues = 1\n\
         [[controller.export]]\nnsid = 1\nnbd = \"unix:disk.sock\"\n\
         [[controller]]\naddress = \"127.0.0.1\"\nport = {down}\nnqn = \"{SUBNQN}\"\nreconnect_delay = 1\n",
        addr.port()
    ));
    let list = d.list();
    assert_eq!(list.len(), 2, "{list:?}");
    assert_eq!(list[0]["state"].as_str(), Some("live"), "{list:?}");
    assert_eq!(list[0]["exports"][0]["nsid"], 1);
    assert!(d.dir.path().join("disk.sock").exists());
    assert_eq!(list[1]["state"].as_str(), Some("connecting"), "{list:?}");
    assert!(list[1]["error"].as_str().unwrap().starts_with("attempt "), "{list:?}");
    // The identity is stored once (unless /etc/nvme supplies it) and reused by the next start.
    let first = list[0]["hostnqn"].as_str().unwrap().to_owned();
    let state = d.dir.path().join("state");
    assert_eq!(first, expected_hostnqn(&state));
    let stored: Vec<_> =
        std::fs::read_dir(&state).map(|r| r.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    let (status, log, dir) = d.terminate();
    assert!(status.success(), "{log}");
    assert!(!dir.path().join("control.sock").exists(), "the control socket is removed at exit");
    let d2 = Daemon::start_in(
        dir,
        &format!(
            "[[controller]]\naddress = \"127.0.0.1\"\nport = {}\nnqn = \"{SUBNQN}\"\nnr_io_queues = 1\n",
            addr.port()
        ),
    );
    let list = d2.list();
    assert_eq!(list[0]["hostnqn"].as_str(), Some(first.as_str()), "same identity after a restart");
    let again: Vec<_> =
        std::fs::read_dir(&state).map(|r| r.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert_eq!(again, stored, "nothing regenerated");
    assert_eq!(d2.ok(&["disconnect-all"]), "nvmf0 disconnected\n");
    assert!(d2.list().is_empty());
    drop(d2);
    target.shutdown();
}

#[test]
fn errors_are_clear() {
    let missing = tempfile::tempdir().unwrap();
    let sock = missing.path().join("none.sock");
    let out = Command::new(host_support::nvmf_host()).args(["list", "--control"]).arg(&sock).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "no nvmf-host daemon at {} (is it running, with this --control socket?): start it with `nvmf-host run \
             --config …` or `systemctl start nvmf-host`",
            sock.display()
        )),
        "{err}"
    );
    let out = Command::new(host_support::nvmf_host())
        .args(["connect", "-t", "rdma", "-a", "10.0.0.1", "-n", SUBNQN, "--control"])
        .arg(&sock)
        .output()
        .unwrap();
    // `-t rdma` is a transport like tcp now: the request gets as far as the (missing) daemon.
    assert!(String::from_utf8_lossy(&out.stderr).contains("no nvmf-host daemon at"));
    let d = Daemon::start("");
    let out = d.cli(&["connect", "-t", "tcp", "-a", "127.0.0.1", "-s", &free_port().to_string(), "-n", SUBNQN]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("connecting to {SUBNQN} at 127.0.0.1:")), "{err}");
    assert!(d.list().is_empty(), "a failed connect leaves nothing behind");
    // Without ublk_drv (this machine's kernel has none) a ublk export fails with the hint, and nothing is left.
    if !Path::new("/dev/ublk-control").exists() {
        let (target, addr, _) = start_target();
        let port = port_of(addr);
        let out = d.cli(&["connect", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "--ublk"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("exporting namespace 1 (ublk): ublk_drv is not loaded (modprobe ublk_drv)"), "{err}");
        assert!(d.list().is_empty());
        target.shutdown();
    }
    let out = d.cli(&["connect", "-a", "127.0.0.1", "-n", SUBNQN, "--nbd", "nowhere"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--nbd: "), "{err}");
    let out = d.cli(&["connect", "-a", "127.0.0.1", "-n", SUBNQN, "-I", "not-a-uuid"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("host ID \"not-a-uuid\""), "{err}");
    assert!(d.list().is_empty());
    // A bad configuration file: the located error, exit status 1.
    let bad = missing.path().join("bad.toml");
    std::fs::write(&bad, "[[controller]]\naddress = \"127.0.0.1\"\nnqn = \"nqn.2024-01.io.example:x\"\nport = 0\n")
        .unwrap();
    let out = Command::new(host_support::nvmf_host()).args(["run", "--config"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:4:8: controller[0].port: port 0 is out of range", bad.display())), "{err}");
}

#[test]
fn tells_the_service_manager_ready_status_watchdog_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let (target, addr, _) = start_target();
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let manager = UnixDatagram::bind(&notify).unwrap();
    manager.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let d = Daemon::start_with(
        dir,
        &format!(
            "[[controller]]\naddress = \"127.0.0.1\"\nport = {}\nnqn = \"{SUBNQN}\"\nnr_io_queues = 1\n\
             [[controller.export]]\nnsid = 2\nnbd = \"127.0.0.1:{}\"\n",
            addr.port(),
            free_port()
        ),
        &[("NOTIFY_SOCKET", notify.display().to_string()), ("WATCHDOG_USEC", "200000".into())],
    );
    let next = || {
        let mut buf = [0u8; 512];
        let n = manager.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(next(), "READY=1\nSTATUS=1 controllers live, 1 exports");
    // The reporter pings the watchdog (at half of WATCHDOG_USEC) with the status.
    assert_eq!(next(), "WATCHDOG=1\nSTATUS=1 controllers live, 1 exports");
    assert_eq!(next(), "WATCHDOG=1\nSTATUS=1 controllers live, 1 exports");
    // Keep reading while the daemon stops, as a service manager does (the socket queue holds only a few
    // datagrams, and watchdog pings go on until the end).
    let reader = std::thread::spawn(move || loop {
        let mut buf = [0u8; 512];
        let n = manager.recv(&mut buf).expect("a notification");
        let last = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !last.starts_with("WATCHDOG=1") {
            return last;
        }
    });
    let (status, log, _) = d.terminate();
    assert!(status.success(), "{log}");
    assert_eq!(reader.join().unwrap(), "STOPPING=1");
    target.shutdown();
}

/// A `[[controller]]` of the support target at `addr` with one I/O queue (plus `extra` keys and tables).
fn controller(addr: SocketAddr, extra: &str) -> String {
    format!(
        "[[controller]]\naddress = \"127.0.0.1\"\nport = {}\nnqn = \"{SUBNQN}\"\nnr_io_queues = 1\n{extra}",
        addr.port()
    )
}

fn nbd_export(nsid: u32, socket: &str) -> String {
    format!("[[controller.export]]\nnsid = {nsid}\nnbd = \"unix:{socket}\"\n")
}

#[test]
fn run_check_validates_and_connects_nothing() {
    let (target, addr, target_metrics) = start_target();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("host.toml");
    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = format!(
        "[host]\nstate_dir = \"state\"\ncontrol_socket = \"control.sock\"\n{}{}{}",
        controller(addr, &nbd_export(1, "one.sock")),
        "[[controller.export]]\nnsid = 2\nublk = true\n",
        controller(down, "")
    );
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(host_support::nvmf_host()).args(["run", "--check", "--config"]).arg(&file).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout, format!("{}: ok: 2 controllers, 2 exports (1 NBD, 1 ublk)\n", file.display()));
    // Nothing was started: no identity stored, no socket, and the target saw no controller.
    for left in ["state", "control.sock", "one.sock"] {
        assert!(!dir.path().join(left).exists(), "{left} created by --check");
    }
    let series = format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}");
    assert_eq!(metric(&http_get(target_metrics, "/metrics"), &series).unwrap_or(0.0), 0.0);

    // A bad file: the located error and exit status 1. (Line 13 is the second export's NSID.)
    std::fs::write(&file, text.replace("nsid = 2\nublk", "nsid = 1\nublk")).unwrap();
    let out =
        Command::new(host_support::nvmf_host()).args(["run", "--config"]).arg(&file).arg("--check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:13:8: controller[0].export[1].nsid: NSID 1 is also export[0]'s", file.display())),
        "{err}"
    );
    target.shutdown();
}

#[test]
fn reload_adds_removes_reconnects_and_rejects_bad_files_whole() {
    let (t1, a1, t1_metrics) = start_target();
    let (t2, a2, _) = start_target();
    let first = controller(a1, &nbd_export(1, "a.sock"));
    let d = Daemon::start(&first);
    let dir = d.dir.path().to_owned();
    let (a_sock, b_sock, b2_sock) = (dir.join("a.sock"), dir.join("b.sock"), dir.join("b2.sock"));
    assert_eq!(d.list().len(), 1);
    assert!(a_sock.exists());

    // Added: connected (live after its first attempt) and exported; its export serves data.
    let second = controller(a2, &nbd_export(1, "b.sock"));
    d.rewrite(&format!("{first}{second}"));
    let out = d.ok(&["reload"]);
    assert_eq!(out, format!("added nvmf1: {SUBNQN} at tcp://{a2}: live\n"));
    let list = d.list();
    assert_eq!(list.len(), 2, "{list:?}");
    assert_eq!((list[1]["name"].as_str(), list[1]["state"].as_str()), (Some("nvmf1"), Some("live")), "{list:?}");
    assert_eq!(list[1]["trsvcid"].as_str(), Some(port_of(a2).as_str()));
    assert_eq!(list[1]["exports"][0]["address"].as_str(), Some(format!("unix:{}", b_sock.display()).as_str()));
    let data = qemu_io(&b_sock, &["write -P 0x5a 8192 64k", "read -P 0x5a 8192 64k"]);

    // Removed: its export stops (socket gone), its association ends; the other export still serves.
    d.rewrite(&second);
    let out = d.ok(&["reload"]);
    assert_eq!(out, format!("removed nvmf0: {SUBNQN} at tcp://{a1}\n"));
    let list = d.list();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["name"].as_str(), Some("nvmf1"));
    assert!(!a_sock.exists(), "the removed controller's NBD socket is gone");
    let series = format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}");
    // The target ends the association on its reactor once the host has closed it: wait for that.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&http_get(t1_metrics, "/metrics"), &series) != Some(0.0) {
        assert!(Instant::now() < deadline, "the first target still has a controller");
        std::thread::sleep(Duration::from_millis(20));
    }
    if data {
        qemu_io(&b_sock, &["read -P 0x5a 8192 64k"]);
    }
    let cntlid = list[0]["cntlid"].clone();

    // A bad file is rejected whole: by `reload` before sending, and by the daemon on SIGHUP; nothing changes.
    let bad = format!("{second}{}", controller(a1, "queue_size = 1\n"));
    d.rewrite(&bad);
    let out = d.cli(&["reload"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host.toml:21:14: controller[1].queue_size: queue size 1 is out of range"), "{err}");
    assert!(err.contains("not sent: the daemon keeps its running configuration"), "{err}");
    let log = d.sighup();
    assert!(log.contains("configuration rejected, the running one stays"), "{log}");
    let list = d.list();
    assert_eq!((list.len(), list[0]["state"].as_str(), &list[0]["cntlid"]), (1, Some("live"), &cntlid), "{list:?}");
    assert_eq!(list[0]["exports"].as_array().unwrap().len(), 1);
    assert!(!a_sock.exists(), "nothing of the rejected file was applied");

    // SIGHUP adds an export to the kept controller without touching its association or its other export.
    d.rewrite(&format!("{second}{}", nbd_export(2, "b2.sock")));
    let log = d.sighup();
    assert!(log.contains("reload: nvmf1: export of namespace 2 (NBD unix:"), "{log}");
    let list = d.list();
    assert_eq!((&list[0]["cntlid"], list[0]["reconnects"].as_u64()), (&cntlid, Some(0)), "same association");
    let nsids: Vec<u64> = list[0]["exports"].as_array().unwrap().iter().map(|x| x["nsid"].as_u64().unwrap()).collect();
    assert_eq!(nsids, [1, 2]);
    let mut greeting = [0u8; 16];
    UnixStream::connect(&b2_sock).expect("the new export listens").read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"NBDMAGICIHAVEOPT");
    if data {
        qemu_io(&b_sock, &["read -P 0x5a 8192 64k"]);
    }

    // `reload` removes that export again (its socket goes, the first export stays).
    d.rewrite(&second);
    assert_eq!(d.ok(&["reload"]), format!("nvmf1: export of namespace 2 at unix:{} stopped\n", b2_sock.display()));
    assert!(!b2_sock.exists() && b_sock.exists());

    // A changed connect option reconnects the controller under its name, with the new option.
    d.rewrite(&second.replace("nr_io_queues = 1", "nr_io_queues = 2"));
    let out = d.ok(&["reload"]);
    assert_eq!(out, format!("reconnected nvmf1: {SUBNQN} at tcp://{a2} (changed nr_io_queues): live\n"));
    let list = d.list();
    assert_eq!((list[0]["name"].as_str(), list[0]["io_queues"].as_u64()), (Some("nvmf1"), Some(2)), "{list:?}");
    assert_ne!(list[0]["cntlid"], cntlid, "a new association");
    if data {
        qemu_io(&b_sock, &["read -P 0x5a 8192 64k"]);
    }
    assert_eq!(d.ok(&["reload"]), "no changes\n");

    // An export that cannot start (its address is taken) is reported; the next reload of the file tries again.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap();
    let second = second.replace("nr_io_queues = 1", "nr_io_queues = 2");
    d.rewrite(&format!("{second}[[controller.export]]\nnsid = 2\nnbd = \"{at}\"\n"));
    let out = d.ok(&["reload"]);
    assert!(out.starts_with(&format!("nvmf1: export of namespace 2 (NBD {at}) failed: ")), "{out}");
    assert_eq!(d.list()[0]["exports"].as_array().unwrap().len(), 1);
    drop(taken);
    assert_eq!(d.ok(&["reload"]), format!("nvmf1: export of namespace 2 (NBD {at}) started\n"));
    let mut greeting = [0u8; 16];
    TcpStream::connect(at).expect("the export listens").read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"NBDMAGICIHAVEOPT");

    // Controllers connected by request are not the file's: a reload leaves them alone.
    let port = port_of(a1);
    assert_eq!(d.ok(&["connect", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "-i", "1"]), "nvmf0\n");
    d.rewrite("");
    assert_eq!(d.ok(&["reload"]), format!("removed nvmf1: {SUBNQN} at tcp://{a2}\n"));
    let list = d.list();
    assert_eq!((list.len(), list[0]["name"].as_str(), list[0]["state"].as_str()), (1, Some("nvmf0"), Some("live")));
    // A file's controller that a request already connected is not connected twice.
    d.rewrite(&controller(a1, ""));
    let out = d.ok(&["reload"]);
    assert_eq!(
        out,
        format!(
            "not added: {SUBNQN} at tcp://{a1}: already connected as nvmf0 by a connect request (disconnect it, \
             then reload)\n"
        )
    );
    assert_eq!(d.list().len(), 1);

    // A controller whose target is down is added all the same (retried in the background); changing its exports
    // restarts its connector under the same name.
    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let retried = controller(down, "reconnect_delay = 1\n");
    d.rewrite(&retried);
    let out = d.ok(&["reload"]);
    let added = format!("added nvmf1: {SUBNQN} at tcp://{down}: connecting: attempt 1: ");
    assert!(out.starts_with(&added) && out.lines().count() == 1, "{out}");
    d.rewrite(&format!("{retried}{}", nbd_export(1, "down.sock")));
    let out = d.ok(&["reload"]);
    let reconnected =
        format!("reconnected nvmf1: {SUBNQN} at tcp://{down} (exports changed while not connected): connecting: ");
    assert!(out.starts_with(&reconnected), "{out}");
    let list = d.list();
    assert_eq!(
        (list.len(), list[1]["name"].as_str(), list[1]["state"].as_str()),
        (2, Some("nvmf1"), Some("connecting"))
    );
    let (status, log, _) = d.terminate();
    assert!(status.success() && !log.contains("disconnect was not clean"), "{log}");
    t1.shutdown();
    t2.shutdown();
}

#[test]
fn reload_tells_the_service_manager_and_reports_what_needs_a_restart() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let manager = UnixDatagram::bind(&notify).unwrap();
    manager.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let d = Daemon::start_with(dir, "", &[("NOTIFY_SOCKET", notify.display().to_string())]);
    // The reporter's STATUS= lines come every few seconds; skip them.
    let next = || loop {
        let mut buf = [0u8; 512];
        let n = manager.recv(&mut buf).expect("a notification");
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !text.starts_with("STATUS=") {
            return text;
        }
    };
    assert!(next().starts_with("READY=1\n"));
    let uptime_usec = || -> u64 {
        let text = std::fs::read_to_string("/proc/uptime").unwrap();
        let seconds: f64 = text.split_whitespace().next().unwrap().parse().unwrap();
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "seconds since boot, positive")]
        let usec = (seconds * 1e6) as u64;
        usec
    };
    for how in ["sighup", "reload"] {
        let before = uptime_usec();
        if how == "sighup" {
            d.sighup();
        } else {
            assert_eq!(d.ok(&["reload"]), "no changes\n");
        }
        let reloading = next();
        let usec: u64 = reloading
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap_or_else(|| panic!("{how}: {reloading}"))
            .parse()
            .unwrap();
        // CLOCK_MONOTONIC is never ahead of the uptime clock (CLOCK_BOOTTIME; /proc/uptime has 10 ms steps).
        assert!(usec <= uptime_usec() + 10_000 && usec + 60_000_000 > before, "{how}: {usec} vs uptime {before}");
        assert_eq!(next(), "READY=1", "{how}");
    }
    // [host], [metrics] and [logging] are applied at start only: the reload says so and goes on.
    let text = std::fs::read_to_string(d.dir.path().join("host.toml")).unwrap();
    std::fs::write(d.dir.path().join("host.toml"), text.replace("level = \"info\"", "level = \"debug\"")).unwrap();
    assert_eq!(d.ok(&["reload"]), "not applied, restart to apply: logging\n");
    assert!(next().starts_with("RELOADING=1\n"));
    assert_eq!(next(), "READY=1");
    let (status, log, _) = d.terminate();
    assert!(status.success(), "{log}");
}
