//! `nvmf-target doctor` and the RNIC counters on a machine with RDMA: the test VM's Soft-RoCE `rxe0` (10.77.0.1 on
//! `dummy0`, MTU 9000). For a configuration with an RDMA listener on `$NVMF_RDMA_ADDR`, doctor passes (exit 0) with
//! the RDMA modules, devices, the port (ACTIVE, RoCE MTU 4096) and the listener's RoCEv2 GID all ok; with
//! `ulimit -l` below the reactors' pools it names memlock: a failure (exit 1) without `CAP_IPC_LOCK`, a warning as
//! root (the kernel does not charge pinning to a process that has it). Then the target's `/metrics` has rxe0's
//! `hw_counters`, and its `sent_pkts` / `rcvd_pkts` move by at least one packet per I/O of a short fio run of the
//! kernel host (`nvme connect -t rdma`).
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_doctor -- --nocapture

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::{self, Vm, VmOutput};
use serde_json::Value;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-doctor";

/// 8 MiB of 4 KiB random reads and writes.
const FIO_IOS: u64 = 2048;

#[track_caller]
fn line<'a>(out: &'a VmOutput, prefix: &str) -> &'a str {
    out.stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?}\n{}", out.report()))
}

/// The text between `=== name ===` and `=== end ===`.
#[track_caller]
fn section<'a>(out: &'a VmOutput, name: &str) -> &'a str {
    let start = format!("=== {name} ===\n");
    let from = out.stdout.find(&start).unwrap_or_else(|| panic!("no section {name}\n{}", out.report())) + start.len();
    let len = out.stdout[from..].find("=== end ===").expect("section end");
    &out.stdout[from..from + len]
}

#[test]
fn doctor_passes_with_soft_roce_and_the_rnic_counters_move() {
    let name = "doctor_passes_with_soft_roce_and_the_rnic_counters_move";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).rxe(true).modules(["nvme_rdma"]).deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
transport = "rdma"
address = "10.77.0.1"
[[subsystem]]
nqn = "{NQN}"
[[subsystem.namespace]]
memory = "64MiB"
EOF
doctor() {{ $NVMF_TARGET_BIN doctor --config $CONFIG "$@"; }}
rc=0; ( ulimit -l unlimited; doctor ) > /tmp/doctor.txt || rc=$?
echo "doctor: status $rc"
echo "=== doctor ==="; cat /tmp/doctor.txt; echo "=== end ==="
rc=0; ( ulimit -l unlimited; doctor -o json ) > /tmp/doctor.json || rc=$?
echo "doctor json: status $rc"
echo "=== json ==="; cat /tmp/doctor.json; echo "=== end ==="
# 1 MiB of locked memory, far below two reactors' pools; without CAP_IPC_LOCK the limit holds.
rc=0; ( ulimit -l 1024; setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock $NVMF_TARGET_BIN doctor --config $CONFIG ) \
  > /tmp/low.txt || rc=$?
echo "low memlock without CAP_IPC_LOCK: status $rc"
grep '^fail  memlock' /tmp/low.txt || true
rc=0; ( ulimit -l 1024; doctor ) > /tmp/low-root.txt || rc=$?
echo "low memlock as root: status $rc"
grep '^warn  memlock' /tmp/low-root.txt || true

nvmf_target_start target $CONFIG
hw() {{ metric "nvmf_target_rnic_hw_counters_total{{device=\"rxe0\",port=\"1\",counter=\"$1\"}}"; }}
echo "port: state $(metric 'nvmf_target_rnic_port_state_id{{device="rxe0",port="1"}}'), mtu $(metric 'nvmf_target_rnic_port_active_mtu_bytes{{device="rxe0",port="1"}}')"
sent0=$(hw sent_pkts); rcvd0=$(hw rcvd_pkts)
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 {NQN} -i 1)
timeout 300 fio --name=load --filename=$dev --ioengine=libaio --direct=1 --bs=4k --iodepth=8 --rw=randrw --size=8M \
  > $NVMF_VM_LOGS/fio.log 2>&1
host_disconnect {NQN}
sent1=$(hw sent_pkts); rcvd1=$(hw rcvd_pkts)
echo "rnic: sent_pkts +$((sent1 - sent0)), rcvd_pkts +$((rcvd1 - rcvd0))"
echo "=== hw_counters ==="; curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_rnic_hw_counters_total' || true; echo "=== end ==="
stop_daemon target
"#
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    out.assert_success();

    // Doctor passes, and says why: every RDMA check of the listener's path is ok.
    assert_eq!(line(&out, "doctor: status"), "doctor: status 0", "{}", out.report());
    let text = section(&out, "doctor");
    for ok in ["rdma modules", "rdma devices", "port rxe0/1", "gid 10.77.0.1", "memlock", "io_uring"] {
        assert!(text.lines().any(|l| l.starts_with(&format!("ok    {ok}: "))), "{ok} not ok:\n{text}");
    }
    assert!(text.contains("RoCE MTU 4096 (dummy0 MTU 9000)") && text.contains("RoCEv2 GID"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("fail")), "{text}");
    assert_eq!(line(&out, "doctor json: status"), "doctor json: status 0");
    let json: Value = serde_json::from_str(section(&out, "json")).expect("doctor -o json parses");
    assert_eq!(json["ok"], true);
    assert!(json["findings"].as_array().unwrap().iter().any(|f| f["check"] == "port rxe0/1" && f["level"] == "ok"));

    // Locked memory below the pools: named, a failure only where the kernel enforces it.
    assert_eq!(line(&out, "low memlock without CAP_IPC_LOCK"), "low memlock without CAP_IPC_LOCK: status 1");
    let low = line(&out, "fail  memlock: ");
    assert!(low.contains("RLIMIT_MEMLOCK 1 MiB is below the 128 MiB to pin (2 reactor(s) × 64 MiB"), "{low}");
    assert_eq!(line(&out, "low memlock as root"), "low memlock as root: status 0");
    assert!(line(&out, "warn  memlock: ").contains("CAP_IPC_LOCK"));

    // The RNIC counters: the port as doctor saw it, and packets counted under load (host and target share rxe0).
    assert_eq!(line(&out, "port: "), "port: state 4, mtu 4096");
    let moved = line(&out, "rnic: ");
    let delta = |name: &str| -> u64 {
        let at = moved.find(&format!("{name} +")).unwrap_or_else(|| panic!("{moved}")) + name.len() + 2;
        moved[at..].split(',').next().unwrap().parse().unwrap_or_else(|_| panic!("{moved}"))
    };
    assert!(delta("sent_pkts") >= FIO_IOS && delta("rcvd_pkts") >= FIO_IOS, "{moved}");
    let counters = section(&out, "hw_counters");
    for name in ["sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs", "retry_exceeded_err"] {
        let series = format!("nvmf_target_rnic_hw_counters_total{{device=\"rxe0\",port=\"1\",counter=\"{name}\"}} ");
        assert!(counters.contains(&series), "no {name}:\n{counters}");
    }
}
