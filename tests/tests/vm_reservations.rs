//! NVMe reservations on our target (`nvmf-target`) driven by the Linux kernel host and nvme-cli in the test VM:
//! two hosts in one guest (two connections to one subsystem with different host NQNs and host IDs), each
//! addressed through its own controller's character device (`nvme … /dev/nvmeX -n 1`, so the kernel's multipath
//! head does not choose the path). Host A registers key 1 (PTPL on) and acquires Write Exclusive; host B
//! (registered with key 2) gets Reservation Conflict on a write and reads; the report shows both registrants and
//! the holder; B preempts A, whose write then conflicts; B releases; A registers again and holds Write Exclusive;
//! the target restarts (same state directory) and the hosts reconnect: the report and B's conflict are as before.
//!
//! `our_host_cli_reserves_on_kernel_nvmet`: our host's reservation commands (`nvmf-host resv-*`, `perf` for writes)
//! as two hosts against the kernel target, nvmet-tcp, and against ours; the guest's nvmet (Linux 6.12) has no
//! reservation support (no namespace `resv_enable`), which the test checks there.
//!
//! The daemon runs in the guest from the cargo build ([`nvmf_tests::workspace_bin::nvmf_target`]). Opt-in like
//! every VM scenario: `NVMF_VM=1`. Logs land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_reservations -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-reservations";
const HOSTID_A: &str = "0a0a0a0a-0000-4000-8000-00000000000a";
const HOSTID_B: &str = "0b0b0b0b-0000-4000-8000-00000000000b";

#[test]
fn kernel_hosts_reserve_preempt_and_persist() {
    let name = "kernel_hosts_reserve_preempt_and_persist";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).modules(["nvme_tcp"]).deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm,
    };
    let config = format!(
        r#"
[target]
state_dir = "/tmp/nvmf-state"
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
address = "127.0.0.1"
port = 4420
[[subsystem]]
nqn = "{NQN}"
[[subsystem.namespace]]
memory = "16MiB"
block_size = 512
"#
    );
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
{config}
EOF
A=nqn.2014-08.org.nvmexpress:uuid:{HOSTID_A}
B=nqn.2014-08.org.nvmexpress:uuid:{HOSTID_B}
ctrl_for_host() {{
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat $c/subsysnqn 2>/dev/null)" = "{NQN}" ] && [ "$(cat $c/hostnqn 2>/dev/null)" = "$1" ] &&
      [ "$(cat $c/state 2>/dev/null)" = live ] && {{ echo "${{c##*/}}"; return 0; }}
  done
  return 1
}}
# Straight through /dev/nvme-fabrics: nvme-cli 2.3 answers "already connected" for a second host NQN to the same
# subsystem and address, even with --duplicate-connect.
connect_as() {{
  local reply rc=0
  modprobe nvme_tcp
  exec 3<>/dev/nvme-fabrics
  echo -n "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn={NQN},hostnqn=$1,hostid=$2,nr_io_queues=1,reconnect_delay=1,duplicate_connect" >&3 || rc=$?
  [ $rc = 0 ] && read -r reply <&3
  exec 3>&-
  log "connected as $1: $reply"
  return $rc
}}
head -c 512 /dev/urandom > /tmp/block
io_write() {{ nvme io-passthru /dev/$1 -n 1 --opcode=0x01 --data-len=512 --write --input-file=/tmp/block --cdw10=0 --cdw12=0; }}
io_read() {{ nvme io-passthru /dev/$1 -n 1 --opcode=0x02 --data-len=512 --read --cdw10=0 --cdw12=0 > /dev/null; }}
try() {{
  local label=$1 out
  shift
  if out=$("$@" 2>&1); then echo "$label: ok"; else echo "$label: failed: $(echo "$out" | tr '\n' ' ' | head -c 300)"; fi
}}
report() {{
  nvme resv-report /dev/$1 -n 1 --eds -o json > /tmp/report.json
  echo "report $2: $(jq -c '{{rtype, regctl, ptpls, regs: [.regctlext[]? // .regctl_eds[]? | {{rkey, rcsts}}]}}' /tmp/report.json) raw: $(jq -c . /tmp/report.json)"
}}

mkdir -p /tmp/nvmf-state
nvmf_target_start target $CONFIG
connect_as $A {HOSTID_A}
connect_as $B {HOSTID_B}
wait_until 10 ctrl_for_host $A
wait_until 10 ctrl_for_host $B
ca=$(ctrl_for_host $A); cb=$(ctrl_for_host $B)
echo "controllers: A=$ca B=$cb"
nvme id-ctrl /dev/$ca -o json | jq -r '"oncs=\(.oncs)"'
nvme id-ns /dev/$ca -n 1 -o json | jq -r '"rescap=\(.rescap)"'

try "A register" nvme resv-register /dev/$ca -n 1 --nrkey=1 --rrega=0 --cptpl=3
try "B register" nvme resv-register /dev/$cb -n 1 --nrkey=2 --rrega=0
try "A acquire" nvme resv-acquire /dev/$ca -n 1 --crkey=1 --rtype=1 --racqa=0
try "A write" io_write $ca
try "B write" io_write $cb
try "B read" io_read $cb
report $cb held-by-A
try "B acquire" nvme resv-acquire /dev/$cb -n 1 --crkey=2 --rtype=1 --racqa=0
try "B preempt" nvme resv-acquire /dev/$cb -n 1 --crkey=2 --prkey=1 --rtype=1 --racqa=1
try "A write after preempt" io_write $ca
try "B write after preempt" io_write $cb
report $ca held-by-B
try "B release" nvme resv-release /dev/$cb -n 1 --crkey=2 --rtype=1 --rrela=0
try "A write after release" io_write $ca
try "A register again" nvme resv-register /dev/$ca -n 1 --nrkey=5 --rrega=0 --cptpl=3
try "A acquire again" nvme resv-acquire /dev/$ca -n 1 --crkey=5 --rtype=1 --racqa=0
echo "state files: $(ls /tmp/nvmf-state/reservations/)"
echo "conflicts: $(metric nvmf_target_reservation_conflicts_total)"

stop_daemon target || true
nvmf_target_start target $CONFIG
wait_until 60 ctrl_for_host $A
wait_until 60 ctrl_for_host $B
ca=$(ctrl_for_host $A); cb=$(ctrl_for_host $B)
report $cb after-restart
try "B write after restart" io_write $cb
try "A write after restart" io_write $ca
try "A clear" nvme resv-release /dev/$ca -n 1 --crkey=5 --rrela=1
host_disconnect {NQN}
stop_daemon target
echo "reservations: done"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else {
        return;
    };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    let has = |needle: &str| assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
    let conflict = |label: &str| {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{label}: ")))
            .unwrap_or_else(|| panic!("no {label:?}\n{}", out.report()));
        let l = line.to_lowercase();
        let is_conflict =
            ["reservation_conflict", "reservation conflict", "0x83", "0x4083"].iter().any(|s| l.contains(s));
        assert!(
            l.contains("failed") && is_conflict,
            "{label}: expected a reservation conflict: {line}\n{}",
            out.report()
        );
    };
    has("oncs=45");
    has("rescap=255");
    for ok in ["A register", "B register", "A acquire", "A write", "B read", "B preempt", "B write after preempt"] {
        has(&format!("{ok}: ok"));
    }
    for ok in ["B release", "A write after release", "A register again", "A acquire again", "A write after restart"] {
        has(&format!("{ok}: ok"));
    }
    has("A clear: ok");
    conflict("B write");
    conflict("B acquire");
    conflict("A write after preempt");
    conflict("B write after restart");
    has(r#"report held-by-A: {"rtype":1,"regctl":2,"ptpls":1,"regs":[{"rkey":1,"rcsts":1},{"rkey":2,"rcsts":0}]}"#);
    has(r#"report held-by-B: {"rtype":1,"regctl":1,"ptpls":1,"regs":[{"rkey":2,"rcsts":1}]}"#);
    has(r#"report after-restart: {"rtype":1,"regctl":2,"ptpls":1,"regs":[{"rkey":2,"rcsts":0},{"rkey":5,"rcsts":1}]}"#);
    has("state files: nqn.2024-01.io.nvmf-rs:vm-reservations.ns1.json");
    // The extended report carries the 128-bit host IDs (dynamic controllers: CNTLID FFFFh), and the generation moved
    // with register, register, preempt, register.
    has(
        r#"raw: {"gen":2,"rtype":1,"regctl":2,"ptpls":1,"regctlext":[{"cntlid":65535,"rcsts":1,"rkey":1,"hostid":"0a0a0a0a00004000800000000000000a"},{"cntlid":65535,"rcsts":0,"rkey":2,"hostid":"0b0b0b0b00004000800000000000000b"}]}"#,
    );
    has(r#"raw: {"gen":4,"#);
    // B's write, B's acquire, A's write after the preempt.
    has("conflicts: 3");
    has("reservations: done");
}

/// The report lines of `our_host_cli_reserves_on_kernel_nvmet`: `TARGET report LABEL: JSON` → the JSON.
fn report_of(out: &vm::VmOutput, target: &str, label: &str) -> serde_json::Value {
    let prefix = format!("{target} report {label}: ");
    let json = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", out.report()));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{prefix}: not JSON ({e}): {json}\n{}", out.report()))
}

/// `(hostid, rkey, holds)` of each registrant of a `resv-report --eds -o json` answer, by host ID.
fn registrants(report: &serde_json::Value) -> Vec<(String, u64, u64)> {
    let mut regs: Vec<_> = report["regctlext"]
        .as_array()
        .unwrap_or_else(|| panic!("no regctlext in {report}"))
        .iter()
        .map(|r| {
            (
                r["hostid"].as_str().unwrap_or_default().to_owned(),
                r["rkey"].as_u64().unwrap_or(u64::MAX),
                r["rcsts"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    regs.sort();
    regs
}

/// Asserts the sequence `sequence` ran against `target` (`ours` or `nvmet`): every step's outcome and every report.
fn assert_sequence(out: &vm::VmOutput, target: &str) {
    let step = |label: &str| {
        let prefix = format!("{target} {label}: ");
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", out.report()))
            .to_owned()
    };
    let ok = |label: &str, says: &str| {
        let line = step(label);
        assert!(line.starts_with("rc=0 ") && line.contains(says), "{target} {label}: {line}\n{}", out.report());
    };
    let conflict = |label: &str| {
        let line = step(label);
        assert!(
            !line.starts_with("rc=0 ")
                && ["reservation conflict", "reservation_conflict"].iter().any(|c| line.to_lowercase().contains(c)),
            "{target} {label}: expected a reservation conflict: {line}\n{}",
            out.report()
        );
    };
    let a = HOSTID_A.replace('-', "");
    let b = HOSTID_B.replace('-', "");
    ok("A register", "NVME Reservation Register success");
    ok("B register", "NVME Reservation Register success");
    let both = report_of(out, target, "registered");
    assert_eq!((both["rtype"].as_u64(), both["regctl"].as_u64()), (Some(0), Some(2)), "{target}: {both}");
    ok("A acquire", "NVME Reservation Acquire success");
    ok("A write", "");
    conflict("B write");
    conflict("B acquire");
    // Held by A, Write Exclusive; both registered; read by B.
    let held = report_of(out, target, "held-by-A");
    assert_eq!((held["rtype"].as_u64(), held["regctl"].as_u64()), (Some(1), Some(2)), "{target}: {held}");
    assert_eq!(registrants(&held), vec![(a.clone(), 0xa1, 1), (b.clone(), 0xb2, 0)], "{target}: {held}");
    ok("B preempt", "NVME Reservation Acquire success");
    let preempted = report_of(out, target, "held-by-B");
    assert_eq!(
        (preempted["rtype"].as_u64(), preempted["regctl"].as_u64()),
        (Some(1), Some(1)),
        "{target}: {preempted}"
    );
    assert_eq!(registrants(&preempted), vec![(b.clone(), 0xb2, 1)], "{target}: {preempted}");
    conflict("A write after preempt");
    ok("B write after preempt", "");
    ok("B release", "NVME Reservation Release success");
    let released = report_of(out, target, "released");
    assert_eq!((released["rtype"].as_u64(), released["regctl"].as_u64()), (Some(0), Some(1)), "{target}: {released}");
    assert_eq!(registrants(&released), vec![(b, 0xb2, 0)], "{target}: {released}");
    ok("B clear", "NVME Reservation Release success");
    let cleared = report_of(out, target, "cleared");
    assert_eq!((cleared["rtype"].as_u64(), cleared["regctl"].as_u64()), (Some(0), Some(0)), "{target}: {cleared}");
    assert_eq!(registrants(&cleared), vec![], "{target}: {cleared}");
}

/// Our host's CLI (`nvmf-host resv-register`, `resv-acquire`, `resv-release`, `resv-report`, and `perf` for the
/// writes) as two hosts (two `--hostnqn`/`--hostid` pairs), each command its own association, against the kernel
/// target (nvmet-tcp, a null_blk namespace) and against ours in the same guest: A and B register, A acquires
/// Write Exclusive; the report (B's, extended, JSON) has both registrants and A holding; B's write and B's acquire
/// conflict; B preempts A: the report has B alone, holding, and A's write conflicts; B releases (no holder) and
/// clears (no registrant).
///
/// nvmet takes reservations only on a namespace with `resv_enable` set (Linux 6.13 and later). The guest's kernel
/// (Debian's 6.12) has no such attribute and no reservation support: ONCS and RESCAP say so, and the Reservation
/// Register is refused as an invalid opcode. The test checks exactly that there, and runs the full sequence on
/// nvmet only where `resv_enable` exists; against our target it always runs.
#[test]
fn our_host_cli_reserves_on_kernel_nvmet() {
    let name = "our_host_cli_reserves_on_kernel_nvmet";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).modules(["nvmet", "nvmet_tcp", "null_blk"]).deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let host = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                .unwrap_or_else(|e| panic!("nvmf-host binary: {e}"));
            let target = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_HOST_BIN", host.to_string_lossy()).env("NVMF_TARGET_BIN", target.to_string_lossy())
        }
        Err(_) => vm,
    };
    let script = format!(
        r#"
set -eu
KNQN=nqn.2024-01.io.nvmf-rs:vm-resv-nvmet
ONQN=nqn.2024-01.io.nvmf-rs:vm-resv-ours
A=nqn.2014-08.org.nvmexpress:uuid:{HOSTID_A}
B=nqn.2014-08.org.nvmexpress:uuid:{HOSTID_B}

# nvmet: a null_blk namespace (a file in the guest's overlay root would get a 1-byte LBA format from nvmet, which
# nvmf-host refuses); resv_enable (Linux 6.13+) must be set before the namespace is enabled.
nb=$(nullblk_create resvnb 64)
s=$NVMET/subsystems/$KNQN
mkdir -p $s
echo 1 > $s/attr_allow_any_host
mkdir $s/namespaces/1
echo -n $nb > $s/namespaces/1/device_path
echo "nvmet namespace attributes: $(ls $s/namespaces/1 | tr '\n' ' ')"
if [ -e $s/namespaces/1/resv_enable ]; then
  echo 1 > $s/namespaces/1/resv_enable
  echo "nvmet resv_enable: present"
else
  echo "nvmet resv_enable: absent"
fi
echo 1 > $s/namespaces/1/enable
nvmet_tcp_port 1 127.0.0.1 4420 $KNQN

cat > /tmp/target.toml <<'EOF'
[[listener]]
address = "127.0.0.1"
port = 4421
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-resv-ours"
[[subsystem.namespace]]
memory = "64MiB"
EOF
nvmf_target_start target /tmp/target.toml

H() {{ timeout 60 "$NVMF_HOST_BIN" "$@"; }}
# LABEL CMD...: "LABEL: rc=N OUTPUT" (its stdout and stderr on one line).
run() {{
  local label=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  echo "$label: rc=$rc $(echo "$out" | tr '\n' ' ' | head -c 400)"
}}
# sequence TARGET PORT NQN: the reservation sequence, hosts A and B each with its own associations.
sequence() {{
  local t=$1 c=(-t tcp -a 127.0.0.1 -s $2 -n $3)
  local a=("${{c[@]}}" -q $A -I {HOSTID_A}) b=("${{c[@]}}" -q $B -I {HOSTID_B})
  local pa=(-a 127.0.0.1 -s $2 -n $3 --hostnqn $A -I {HOSTID_A} -w randwrite -T 1 -q 1 -c 1)
  local pb=(-a 127.0.0.1 -s $2 -n $3 --hostnqn $B -I {HOSTID_B} -w randwrite -T 1 -q 1 -c 1)
  report() {{ echo "$t report $1: $(H resv-report "${{b[@]}}" -N 1 --eds -o json | jq -c .)"; }}
  run "$t A register" H resv-register "${{a[@]}}" -N 1 --nrkey 0xa1 --rrega 0
  run "$t B register" H resv-register "${{b[@]}}" -N 1 --nrkey 0xb2 --rrega 0
  report registered
  run "$t A acquire" H resv-acquire "${{a[@]}}" -N 1 --crkey 0xa1 --rtype 1 --racqa 0
  run "$t A write" H perf "${{pa[@]}}"
  run "$t B write" H perf "${{pb[@]}}"
  run "$t B acquire" H resv-acquire "${{b[@]}}" -N 1 --crkey 0xb2 --rtype 1 --racqa 0
  report held-by-A
  run "$t B preempt" H resv-acquire "${{b[@]}}" -N 1 --crkey 0xb2 --prkey 0xa1 --rtype 1 --racqa 1
  report held-by-B
  run "$t A write after preempt" H perf "${{pa[@]}}"
  run "$t B write after preempt" H perf "${{pb[@]}}"
  run "$t B release" H resv-release "${{b[@]}}" -N 1 --crkey 0xb2 --rtype 1 --rrela 0
  report released
  run "$t B clear" H resv-release "${{b[@]}}" -N 1 --crkey 0xb2 --rrela 1
  report cleared
}}

sequence ours 4421 $ONQN
H id-ctrl -t tcp -a 127.0.0.1 -s 4420 -n $KNQN -o json | jq -r '"nvmet oncs: \(.oncs), reservations bit: \((.oncs / 32 | floor) % 2)"'
H id-ns -t tcp -a 127.0.0.1 -s 4420 -n $KNQN -N 1 -o json | jq -r '"nvmet rescap: \(.rescap)"'
if [ -e $s/namespaces/1/resv_enable ]; then
  sequence nvmet 4420 $KNQN
else
  run "nvmet A register" H resv-register -t tcp -a 127.0.0.1 -s 4420 -n $KNQN -q $A -I {HOSTID_A} -N 1 --nrkey 0xa1
  run "nvmet A report" H resv-report -t tcp -a 127.0.0.1 -s 4420 -n $KNQN -q $A -I {HOSTID_A} -N 1 --eds -o json
fi
echo "kernel: $(uname -r)"
stop_daemon target
nvmet_teardown
echo "reservations via nvmf-host: done"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    out.assert_lines(&["reservations via nvmf-host: done\n"]);
    assert_sequence(&out, "ours");
    if out.stdout.contains("nvmet resv_enable: present\n") {
        assert_sequence(&out, "nvmet");
        vm::note(&format!("{name}: nvmet took the whole reservation sequence"));
        return;
    }
    // No reservations in this kernel's nvmet: it says so in Identify, and refuses the command.
    out.assert_lines(&["nvmet resv_enable: absent\n", "reservations bit: 0\n", "nvmet rescap: 0\n"]);
    for label in ["nvmet A register", "nvmet A report"] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{label}: ")))
            .unwrap_or_else(|| panic!("no {label:?} line\n{}", out.report()));
        assert!(!line.contains("rc=0 ") && line.to_lowercase().contains("invalid_opcode"), "{line}\n{}", out.report());
    }
    let kernel = out.stdout.lines().find_map(|l| l.strip_prefix("kernel: ")).unwrap_or("?");
    vm::note(&format!(
        "{name}: the guest's nvmet (Linux {kernel}) has no reservation support (no namespace resv_enable, ONCS bit 5 \
         clear, Reservation Register refused): the sequence ran against our target only"
    ));
}
