//! NVMe reservations on our target (`nvmf-target`) driven by the Linux kernel host and nvme-cli in the test VM:
//! two hosts in one guest (two connections to one subsystem with different host NQNs and host IDs), each
//! addressed through its own controller's character device (`nvme … /dev/nvmeX -n 1`, so the kernel's multipath
//! head does not choose the path). Host A registers key 1 (PTPL on) and acquires Write Exclusive; host B
//! (registered with key 2) gets Reservation Conflict on a write and reads; the report shows both registrants and
//! the holder; B preempts A, whose write then conflicts; B releases; A registers again and holds Write Exclusive;
//! the target restarts (same state directory) and the hosts reconnect: the report and B's conflict are as before.
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
