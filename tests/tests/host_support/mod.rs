//! Shared harness of our host against our target (`tests/host_*.rs`): our target in-process on 127.0.0.1
//! (ephemeral port) with memory namespaces, connect options with short timeouts, and the `nvmf-host` binary.
// Not `expect`: a test binary that uses all of it would leave the expectation unfulfilled.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::SocketAddr;
use std::time::Duration;

use nvmf_config::TargetConfig;
use nvmf_host::{ConnectOptions, HostIdentity};
use nvmf_target::daemon::RunningTarget;

/// The subsystem the test target exports.
pub const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:host-tests";

/// Namespace 1: 16 MiB of 512-byte blocks; namespace 2: 8 MiB of 4 KiB blocks.
pub fn config() -> String {
    format!(
        r#"
[reactors]
threads = 2

[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "{SUBNQN}"

[[subsystem.namespace]]
memory = "16MiB"

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
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its `[target] state_dir` (reservations that persist), removed on drop.
    _state_dir: tempfile::TempDir,
}

impl Target {
    /// Start the [`config`] target.
    pub fn start() -> Target {
        let mut config = TargetConfig::from_str(&config(), "<test>").expect("test configuration is valid");
        for l in &mut config.listeners {
            l.address.set_port(0);
        }
        let state_dir = tempfile::tempdir().expect("a temporary state directory");
        config.limits.state_dir = state_dir.path().to_owned();
        let running = nvmf_target::daemon::start(&config).expect("target starts");
        let addr = running.local_addrs()[0];
        Target { running: Some(running), addr, _state_dir: state_dir }
    }

    /// The [`SUBNQN`] subsystem as the target holds it (serial, model, live controllers).
    pub fn subsystem(&self) -> std::sync::Arc<nvmf_target::controller::subsystem::Subsystem> {
        let running = self.running.as_ref().expect("the target runs until dropped");
        running.target().subsystem(SUBNQN).expect("the test subsystem exists")
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

/// The `nvmf-host` binary, built by cargo with this test's profile once per test process
/// ([`nvmf_tests::workspace_bin`]: cargo gives `CARGO_BIN_EXE_*` only to the tests of the binary's own package).
pub fn nvmf_host() -> std::path::PathBuf {
    nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host").expect("nvmf-host binary")
}

/// Options with timeouts short enough for tests.
pub fn options(nr_io_queues: u16) -> ConnectOptions {
    let id = HostIdentity::generate();
    ConnectOptions {
        transport: nvmf_host::Transport::Tcp,
        hostnqn: id.hostnqn,
        hostid: id.hostid,
        nr_io_queues,
        queue_size: 128,
        keep_alive_tmo: Duration::from_secs(2),
        hdr_digest: false,
        data_digest: false,
        disable_sqflow: false,
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(10),
        reconnect_delay: Duration::from_millis(500),
        ctrl_loss_tmo: Some(Duration::from_secs(10)),
        fast_io_fail_tmo: None,
        host_iface: None,
        dhchap_secret: None,
        dhchap_ctrl_secret: None,
        tls: None,
        concat: false,
        iopolicy: nvmf_host::multipath::IoPolicy::default(),
        path_retries: 5,
        poll: nvmf_host::controller::PollOptions::default(),
        queue_cpus: None,
    }
}

/// Bytes that differ per offset and per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    #[expect(clippy::cast_possible_truncation, reason = "a repeating byte pattern")]
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 9) as u8)).collect()
}

/// Asserts that `promtool check metrics` accepts an exposition page (`promtool` comes with Debian's prometheus).
pub fn assert_promtool_accepts(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed");
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
