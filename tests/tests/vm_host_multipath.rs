//! Our host's native multipath through `/dev/ublkbN`, in the test VM, against two target sides: the Linux kernel
//! target (nvmet-tcp with two ports exporting one subsystem, a null_blk namespace, ANA group 1 optimized on port 4420
//! and non-optimized on 4421 in configfs `ports/N/ana_groups/1/ana_state`), and two of our target processes sharing
//! one file (same identifiers, CNTLIDs 1-99 and 100-199, listener 4420 optimized and 4421 non-optimized). The
//! `nvmf-host run` daemon connects through both (`connect … --ublk` twice: the second joins the first's export as a
//! path) and `list` shows the two paths with their ANA states. Under fio randwrite with crc32c verification on the
//! ublk device:
//!
//! - (a) path A made inaccessible and B optimized (ANA Change events): the writes move to B; then both are set back;
//! - (b) path A lost (nvmet: the port stops exporting the subsystem, reconnects are refused; ours: node A killed
//!   with SIGKILL): the writes go on through B (non-optimized);
//! - (c) path A back (the port exports it again; node A started again): the host reconnects it and the writes
//!   return to it.
//!
//! Which path carried the writes in each phase comes from the daemon's per-controller queue metrics. fio must
//! finish without a verify error; the longest pause in each case (an interval without a completed I/O, from
//! fio's per-I/O completion log) is printed, not bounded.
//!
//! Opt-in like every VM scenario (`NVMF_VM=1`); logs in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_multipath -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-host-multipath";

/// The kernel target: nvmet-tcp, two ports, ANA group 1's state per port in configfs; losing the path is the port
/// no longer exporting the subsystem (its controllers are deleted, reconnects refused).
const KERNEL_PATHS: &str = r#"
PORTS=/sys/kernel/config/nvmet/ports
ana() { echo "$2" > $PORTS/$1/ana_groups/1/ana_state; }
setup_paths() {
  nvmet_subsys_nullblk {NQN} 256
  nvmet_tcp_port 1 127.0.0.1 4420 {NQN}
  nvmet_tcp_port 2 127.0.0.1 4421 {NQN}
  ana 1 optimized
  ana 2 non-optimized
}
switch_a() { ana 1 inaccessible; ana 2 optimized; }
switch_back() { ana 1 optimized; ana 2 non-optimized; }
lose_a() { rm $PORTS/1/subsystems/{NQN}; }
return_a() { ln -s /sys/kernel/config/nvmet/subsystems/{NQN} $PORTS/1/subsystems/{NQN}; }
"#;

/// Two of our target nodes sharing one file (same identifiers, CNTLIDs 1-99 and 100-199); losing the path is
/// node A killed with SIGKILL, its return the same command line started again.
const OUR_PATHS: &str = r#"
node_config() {
  cat <<NODE
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = $1
ana_state = "$2"
[[subsystem]]
nqn = "{NQN}"
serial = "NVMFMP0001"
cntlid_min = $3
cntlid_max = $4
[[subsystem.namespace]]
path = "/tmp/shared.img"
uuid = "6b1d4e3f-9c20-4d7b-8f8e-3a2b4c5d6e7f"
nguid = "6b1d4e3f9c204d7b8f8e3a2b4c5d6e7f"
NODE
}
start_node() { start_daemon node-$1 timeout 900 "$NVMF_TARGET_BIN" --config /tmp/node-$1.toml --control /tmp/node-$1.sock; }
T() { "$NVMF_TARGET_BIN" ana-state --listener tcp://127.0.0.1:$2 --state $3 --control /tmp/node-$1.sock >&2; }
setup_paths() {
  truncate -s 256M /tmp/shared.img
  node_config 4420 optimized 1 99 > /tmp/node-a.toml
  node_config 4421 non-optimized 100 199 > /tmp/node-b.toml
  start_node a
  start_node b
  daemon_ready node-a 'nvmf-target: ready'
  daemon_ready node-b 'nvmf-target: ready'
}
switch_a() { T a 4420 inaccessible; T b 4421 optimized; }
switch_back() { T a 4420 optimized; T b 4421 non-optimized; }
lose_a() { kill -KILL "$(nvmf_target_pid node-a)"; }
return_a() {
  stop_daemon node-a 2>/dev/null || true
  start_node a
  daemon_ready node-a 'nvmf-target: ready'
}
"#;

/// The scenario, after the target side's `setup_paths`, `switch_a`, `switch_back`, `lose_a` and `return_a`.
const SCENARIO: &str = r#"
H() { "$NVMF_HOST_BIN" "$@" --control /tmp/host/control.sock; }
# Bytes the path (controller) wrote on its I/O queue 1.
written() { metric "nvmf_host_queue_bytes_total{controller=\"$1\",qid=\"1\",direction=\"write\"}" 127.0.0.1:9657 || echo 0; }
paths() { H list -o json | jq -r '.controllers[0].exports[0].paths | map("\(.name) \(.state) \(.ana_state)") | join(", ")'; }
_paths_are() { [ "$(paths)" = "$1" ]; }
# Writes of each path over the next $1 seconds: "nvmf0 +N nvmf1 +M" (bytes).
phase() {
  local a0 b0
  a0=$(written nvmf0); b0=$(written nvmf1)
  sleep $1
  echo "nvmf0 +$(( $(written nvmf0) - a0 )) nvmf1 +$(( $(written nvmf1) - b0 ))"
}

setup_paths
mkdir -p /tmp/host
cat > /tmp/host/host.toml <<'HOST_TOML'
[host]
state_dir = "/tmp/host/state"
control_socket = "/tmp/host/control.sock"
[metrics]
listen = "127.0.0.1:9657"
[logging]
level = "info"
HOST_TOML
start_daemon host "$NVMF_HOST_BIN" run --config /tmp/host/host.toml
daemon_ready host 'nvmf_host::daemon: ready'

first=$(H connect -t tcp -a 127.0.0.1 -s 4420 -n {NQN} -i 1 -c 1 --ublk)
second=$(H connect -t tcp -a 127.0.0.1 -s 4421 -n {NQN} -i 1 -c 1 --ublk)
echo "first: $(echo "$first" | tr '\n' ' ')"
echo "second: $(echo "$second" | tr '\n' ' ')"
dev=$(H list -o json | jq -r '.controllers[0].exports[0].address')
echo "devices: $(ls /dev/ublkb* | tr '\n' ' ')"
wait_until 10 _paths_are "nvmf0 live optimized, nvmf1 live non-optimized" || true
echo "paths: $(paths)"
H list >&2

out=$NVMF_VM_LOGS/fio-multipath
t0=$(now_ms)
timeout 400 fio --name=mp --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=64M --time_based --runtime=75 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  --write_lat_log=/tmp/mp --log_unix_epoch=1 --output-format=json --output=$out.json > $out.log 2>&1 &
fio_pid=$!
sleep 6
echo "steady: $(phase 4)"

# (a) A planned switch.
t_a=$(now_ms)
switch_a
wait_until 20 _paths_are "nvmf0 live inaccessible, nvmf1 live optimized" && echo "host saw (a) after $(( $(now_ms) - t_a )) ms"
echo "case (a): $(phase 5)"
switch_back
wait_until 20 _paths_are "nvmf0 live optimized, nvmf1 live non-optimized" || true
echo "back: $(phase 4)"

# (b) The optimized path is lost.
t_b=$(now_ms)
lose_a
_state0() { paths | cut -d, -f1 | cut -d' ' -f2; }
_lost() { [ "$(_state0)" != live ]; }
wait_until 20 _lost && echo "path 0 after (b): $(_state0)"
echo "case (b): $(phase 6)"

# (c) It comes back.
t_c=$(now_ms)
return_a
wait_until 40 _paths_are "nvmf0 live optimized, nvmf1 live non-optimized" && echo "host reconnected (c) after $(( $(now_ms) - t_c )) ms"
echo "case (c): $(phase 5)"
echo "fio still running: $(kill -0 $fio_pid 2>/dev/null && echo yes || echo no)"
rc=0
wait $fio_pid || rc=$?
echo "fio rc=$rc"
cat $out.log >&2 || true
jq -r '.jobs[0] | "fio error=\(.error) writes=\(.write.total_ios) verify-reads=\(.read.total_ios)"' $out.json
fio_completions /tmp/mp_clat.1.log
fio_pause $t0 $t_a "before (a)"
fio_pause $t_a $t_b "case (a)"
fio_pause $t_b $t_c "case (b)"
fio_pause $t_c 99999999999999 "case (c)"
H disconnect -n {NQN} >&2
wait_until 10 test ! -e "$dev" && echo "ublk device after disconnect: removed"
stop_daemon host
"#;

/// `nvmf0 +N nvmf1 +M` of a phase line.
fn deltas(out: &vm::VmOutput, prefix: &str) -> (u64, u64) {
    let line = out.stdout.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix:?} line"));
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.strip_prefix('+')?.parse().ok()).collect();
    assert_eq!(n.len(), 2, "{prefix}{line}");
    (n[0], n[1])
}

#[test]
fn host_multipath_over_ublk_against_kernel_nvmet() {
    scenario("host_multipath_over_ublk_against_kernel_nvmet", KERNEL_PATHS, &["nvmet", "nvmet_tcp", "null_blk"]);
}

#[test]
fn host_multipath_over_ublk_against_two_of_our_nodes() {
    scenario("host_multipath_over_ublk_against_two_of_our_nodes", OUR_PATHS, &[]);
}

/// Run [`SCENARIO`] with `paths` (the target side) and check it.
fn scenario(name: &str, paths: &str, modules: &[&str]) {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let mut all = vec!["ublk_drv"];
    all.extend_from_slice(modules);
    let vm = Vm::new(name).logs(logs).modules(all).deadline(Duration::from_secs(480));
    let vm = vm.with_our_daemons();
    let script = format!("set -eu\n{paths}{SCENARIO}").replace("{NQN}", NQN);
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    out.assert_lines(&[
        "first: nvmf0 nvmf0n1: exported at /dev/ublkb0 ",
        "second: nvmf1 nvmf1n1: exported at /dev/ublkb0 (now 2 paths) ",
        "devices: /dev/ublkb0 ",
        "paths: nvmf0 live optimized, nvmf1 live non-optimized",
        "path 0 after (b): reconnecting",
        "fio still running: yes",
        "fio rc=0",
        "ublk device after disconnect: removed",
    ]);
    assert!(out.stdout.contains("host saw (a) after"), "{}", out.stdout);
    assert!(out.stdout.contains("host reconnected (c) after"), "{}", out.stdout);
    let steady = deltas(&out, "steady: ");
    assert!(steady.0 > 0 && steady.1 == 0, "the optimized path takes every write: {steady:?}");
    let a = deltas(&out, "case (a): ");
    assert!(a.1 > 0 && a.0 == 0, "(a): the writes move to the newly optimized path: {a:?}");
    let back = deltas(&out, "back: ");
    assert!(back.0 > 0 && back.1 == 0, "back to the first path: {back:?}");
    let b = deltas(&out, "case (b): ");
    assert!(b.1 > 0 && b.0 == 0, "(b): the surviving path takes the writes: {b:?}");
    let c = deltas(&out, "case (c): ");
    assert!(c.0 > 0 && c.1 <= c.0 / 10, "(c): the writes return to the optimized path: {c:?}");
    let fio = out.stdout.lines().find(|l| l.starts_with("fio error=")).expect("fio summary");
    assert!(fio.starts_with("fio error=0 "), "{fio}");
    for case in ["case (a)", "case (b)", "case (c)"] {
        let pause = out.stdout.lines().find(|l| l.starts_with(&format!("pause {case}: "))).expect("pause line");
        assert!(!pause.ends_with("; 0 I/Os completed in it)"), "no I/O completed in {case}: {pause}");
        vm::note(&format!("{name}: {pause}"));
    }
}
