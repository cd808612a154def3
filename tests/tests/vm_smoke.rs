//! Smoke scenarios for the test VM: Soft-RoCE works, a binary cargo built here runs in the guest, and a hung
//! scenario is killed at its deadline with the console tail. The kernel's NVMe-oF target and host over TCP and RDMA
//! with fio verification: `vm_lab.rs`, across two guests.
//!
//! Each test boots its own guest (one at a time; the harness serializes them). They are opt-in: without
//! `NVMF_VM=1` or `NVMF_REQUIRE_VM=1` each prints `SKIPPED: ...` on stderr and passes; with
//! `NVMF_REQUIRE_VM=1` (CI) a machine that cannot run them fails them. Logs of each run land in
//! `target/tmp/vm-logs/<test>/` (dmesg, nvmet configfs, fio output). See tests/README.md.

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::{GuestStatus, Vm, VmOutput};

fn vm(name: &str) -> Vm {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    Vm::new(name).logs(logs)
}

#[track_caller]
fn assert_stdout_has(out: &VmOutput, needle: &str) {
    assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
}

#[test]
fn rxe_verbs_and_rdma_cm() {
    let vm = vm("rxe_verbs_and_rdma_cm").rxe(true).deadline(Duration::from_secs(180));
    let Some(out) = vm.run_or_skip(
        r#"
set -u
rdma link show rxe0/1
ibv_devices | grep -q rxe0 || { fail "ibv_devices does not list rxe0"; exit 1; }
test -c /dev/infiniband/uverbs0 || { fail "no /dev/infiniband/uverbs0"; exit 1; }
ibv_devinfo -d rxe0 | grep -E 'state|active_mtu'

# Verbs: an RC ping-pong over rxe0 (RoCE v2 needs a GRH: GID index 1 = ::ffff:10.77.0.1).
# The out-of-band exchange is TCP on 127.0.0.1:18515.
ok=0
for try in 1 2 3; do
  timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -n 200 > "$NVMF_VM_LOGS/pingpong-server.txt" 2>&1 &
  server=$!
  wait_tcp_listen 18515 20
  if timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -n 200 127.0.0.1; then wait $server && ok=1 && break; fi
  kill $server 2>/dev/null; wait $server
  log "ibv_rc_pingpong try $try failed"
done
[ $ok = 1 ] || { fail "ibv_rc_pingpong"; exit 1; }
echo "rc_pingpong: ok"

# RDMA CM: rping, 10 iterations, on the dummy netdev's address (rdma_cm does not work on loopback).
timeout 60 rping -s -a "$NVMF_RDMA_ADDR" -C 10 > "$NVMF_VM_LOGS/rping-server.txt" 2>&1 &
server=$!
sleep 1
timeout 60 rping -c -a "$NVMF_RDMA_ADDR" -C 10 -v || { fail "rping client"; exit 1; }
wait $server || { fail "rping server"; exit 1; }
echo "rping: ok"
"#,
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "rxe0/1 state ACTIVE");
    assert_stdout_has(&out, "bytes in");
    assert_stdout_has(&out, "rc_pingpong: ok");
    assert_eq!(out.stdout.matches("ping data: rdma-ping-").count(), 10, "{}", out.report());
    assert_stdout_has(&out, "rping: ok");
}

#[test]
fn cargo_binary_runs_in_guest() {
    let probe = env!("CARGO_BIN_EXE_vm-probe");
    let name = "cargo_binary_runs_in_guest";
    let vm = vm(name).rxe(true).modules(["nvmet"]).nvme_drive(64 << 20).deadline(Duration::from_secs(120));
    let Some(out) = vm.run_or_skip(&format!(
        r#"
{probe}
# The daemon helpers, with a stand-in daemon that exits 7 on SIGTERM.
start_daemon standin bash -c 'trap "echo stopping; exit 7" TERM; echo serving; while :; do sleep 0.2; done'
wait_until 10 grep -q serving "$(daemon_log standin)"
stop_daemon standin 10
echo "daemon status: $?"
test -b /dev/nvme0n1 && echo "emulated nvme: $(cat /sys/class/nvme/nvme0/transport) $(blockdev --getsize64 /dev/nvme0n1)"
"#
    )) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, &format!("kernel-release: {}", out.kernel_release));
    assert!(out.kernel_release.starts_with("6.12."), "{}", out.report());
    assert_stdout_has(&out, "uverbs0: present");
    assert_stdout_has(&out, "nvmet-configfs: present");
    assert_stdout_has(&out, "daemon status: 7");
    assert_stdout_has(&out, "emulated nvme: pcie 67108864");
    // What the guest left in the logs folder: the daemon's log and collect_logs' files.
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let standin = std::fs::read_to_string(logs.join("standin.log")).unwrap_or_default();
    assert!(standin.contains("serving") && standin.contains("stopping"), "standin.log: {standin:?}");
    for file in ["dmesg.txt", "state.txt", "stdout.txt", "stderr.txt", "console.log"] {
        assert!(logs.join(file).is_file(), "{file} missing in {}", logs.display());
    }
}

#[test]
fn hung_scenario_is_killed_at_its_deadline() {
    let vm = vm("hung_scenario_is_killed_at_its_deadline").deadline(Duration::from_secs(25));
    let Some(out) = vm.run_or_skip(
        r#"
echo "<2>nvmf-vm: this scenario hangs now" > /dev/kmsg
echo started
sleep 600
echo "not reached"
"#,
    ) else {
        return;
    };
    assert_eq!(out.status, GuestStatus::TimedOut, "{}", out.report());
    assert_stdout_has(&out, "started");
    assert!(!out.stdout.contains("not reached"), "{}", out.report());
    assert!(out.console_tail.contains("this scenario hangs now"), "{}", out.report());
}
