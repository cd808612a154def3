//! Asymmetric Namespace Access against the Linux 6.12 kernel host's native multipath, in the test VM: our target
//! with two TCP listeners (4420 optimized, 4421 non-optimized) and one memory namespace; the kernel host connects
//! through both and shows one multipath namespace with two paths in those ANA states (sysfs `ana_state`, `nvme
//! list-subsys`); fio randwrite with crc32c verification runs on the multipath device while `nvmf-target
//! ana-state` makes 4420 inaccessible and 4421 optimized: the host follows (ANA Change events, the ANA log) and
//! I/O goes on through 4421 without a verify error. The longest I/O latency fio saw and (case (a), a planned
//! switch) the longest pause, an interval without any completed I/O, are printed (`pause case (a): N ms`).
//!
//! `two_nodes_one_subsystem_survive_a_node_loss`: two target processes export one subsystem from one file (same
//! identifiers, disjoint CNTLID ranges). Under verified fio: (b) node A (optimized) is killed with SIGKILL, I/O goes
//! on through node B, which is then made optimized; (c) node A is restarted with the same command line (optimized
//! again), the host reconnects that path, node B is set back to non-optimized, and the I/O returns to node A
//! (node A's controller command counters grow, node B's nearly stop). The pauses of (b) and (c) are printed.
//!
//! The pauses come from fio's per-I/O completion log (`--write_lat_log --log_unix_epoch=1`): the longest interval
//! between two consecutive completions (writes or verify reads) that starts in the case's window. They are printed,
//! not bounded: under TCG they depend on the machine's load.
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs (the daemon's, fio's,
//! dmesg) land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_ana -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-ana";

const CONFIG: &str = r#"
[target]
mdts = "1MiB"
[reactors]
threads = 2
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = 4420
[[listener]]
address = "127.0.0.1"
port = 4421
ana_state = "non-optimized"
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-ana"
[[subsystem.namespace]]
memory = "128MiB"
"#;

/// Bash functions shared by the scenarios' scripts (the pauses come from guest-lib's `fio_completions` and
/// `fio_pause`): whether fio wrote after a time.
const PAUSES: &str = r#"
writes_after() { awk -F', *' -v s=$1 '$1 > s && $3 == 1 { n++ } END { print (n > 0 ? "yes" : "no") }' /tmp/completions.sorted; }
"#;

/// The guest script: `{NQN}` is substituted.
const SCRIPT: &str = r#"
set -eu
modprobe nvme_tcp
echo "multipath: $(cat /sys/module/nvme_core/parameters/multipath)"
SOCK=/tmp/nvmf-target.sock
start_daemon target timeout 900 "$NVMF_TARGET_BIN" --config $CONFIG --control $SOCK
daemon_ready target 'nvmf-target: ready'
T() { "$NVMF_TARGET_BIN" "$@" --control $SOCK; }

dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
dev2=$(host_connect tcp 127.0.0.1 4421 {NQN} -i 2)
echo "multipath device: $dev (second connect: $dev2)"
b=$(basename $dev)

# Each path of the multipath namespace: "port PORT STATE", by port. Linux 6.12 has no /sys/block/<head>/multipath
# directory yet: a path is the controller's hidden disk nvmeXcYnZ of the head's namespace.
paths() {
  local p c n port
  n=${b##*n}
  for p in /sys/class/nvme/nvme*/nvme*c*n$n; do
    [ -e "$p/ana_state" ] || continue
    c=$(basename "$(dirname "$p")")
    port=$(sed -n 's/.*trsvcid=\([0-9]*\).*/\1/p' /sys/class/nvme/$c/address)
    echo "port $port $(cat $p/ana_state)"
  done | sort
}
_states_are() { [ "$(paths | tr '\n' ' ')" = "$1" ]; }

wait_until 20 _states_are "port 4420 optimized port 4421 non-optimized " || true
echo "paths before: $(paths | tr '\n' ';')"
echo "path count: $(paths | wc -l)"
nvme list-subsys -o json $dev > /tmp/list-subsys.json || nvme list-subsys -o json > /tmp/list-subsys.json
cat /tmp/list-subsys.json
jq -r '[.. | objects | select(has("ANAState")) | "\(.Address | capture("trsvcid=(?<p>[0-9]+)").p)=\(.ANAState)"] | sort | "list-subsys ana: \(join(" "))"' /tmp/list-subsys.json
jq -r '[.. | objects | select(has("Paths")) | .Paths | length] | "list-subsys paths: \(join(" "))"' /tmp/list-subsys.json
T list

# fio on the multipath device; the ANA states change under it.
out=$NVMF_VM_LOGS/fio-ana
t0=${EPOCHREALTIME/./}
t0_ms=$(now_ms)
timeout 200 fio --name=ana --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=64M --time_based --runtime=45 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  --write_lat_log=/tmp/ana --log_unix_epoch=1 --output-format=json --output=$out.json > $out.log 2>&1 &
fio_pid=$!
sleep 12
# (a) A planned switch: 4420 inaccessible, 4421 optimized.
t_a=$(now_ms)
T ana-state --listener tcp://127.0.0.1:4420 --state inaccessible
T ana-state --listener tcp://127.0.0.1:4421 --state optimized
t_switch=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
if wait_until 30 _states_are "port 4420 inaccessible port 4421 optimized "; then
  echo "host saw the change after $(( (${EPOCHREALTIME/./} - t0) / 1000 - t_switch )) ms"
fi
echo "paths after: $(paths | tr '\n' ';')"
rc=0
wait $fio_pid || rc=$?
echo "fio rc=$rc"
cat $out.log >&2 || true
jq -r '.jobs[0] | "fio error=\(.error) writes=\(.write.total_ios) verify-reads=\(.read.total_ios)"' $out.json
jq -r '.jobs[0] | "ana: longest write latency \(.write.lat_ns.max / 1000000 | floor) ms, longest verify-read latency \(.read.lat_ns.max / 1000000 | floor) ms"' $out.json
fio_completions /tmp/ana_clat.1.log
fio_pause $t0_ms $t_a "before the switch"
fio_pause $t_a 99999999999999 "case (a)"
echo "writes after the switch: $(writes_after $((t_a + 2000)))"
echo "ana log reads: $(dmesg | grep -c 'ANA group' || true)"
dmesg | grep -E 'ANA|nvme' | tail -n 20 >&2 || true
echo "host I/O errors: $(dmesg | grep -c 'I/O error' || true)"
T list
host_disconnect {NQN}
stop_daemon target
echo "ana: done"
"#;

/// The guest for `name`: nvme_tcp loaded, `$NVMF_TARGET_BIN` set, logs in `target/tmp/vm-logs/<name>/`.
fn target_vm(name: &str) -> Vm {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).modules(["nvme_tcp"]).deadline(Duration::from_secs(360));
    match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    }
}

/// Two listeners, the kernel's multipath over both, an ANA switch under verified fio.
#[test]
fn kernel_multipath_follows_ana_states() {
    let name = "kernel_multipath_follows_ana_states";
    let vm = target_vm(name);
    let script = format!(
        "CONFIG=/tmp/nvmf-target.toml\ncat > $CONFIG <<'EOF'\n{CONFIG}\nEOF\n{PAUSES}{}",
        SCRIPT.replace("{NQN}", NQN)
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    out.assert_lines(&[
        "multipath: Y",
        "path count: 2",
        "paths before: port 4420 optimized;port 4421 non-optimized;",
        "list-subsys paths: 2",
        "list-subsys ana: 4420=optimized 4421=non-optimized",
        "(port 1, ANA group 1 optimized)",
        "(port 2, ANA group 1 non-optimized)",
        "tcp://127.0.0.1:4420 (port 1): every ANA group now inaccessible",
        "tcp://127.0.0.1:4421 (port 2): every ANA group now optimized",
        "host saw the change after",
        "paths after: port 4420 inaccessible;port 4421 optimized;",
        "(port 1, ANA group 1 inaccessible)",
        "(port 2, ANA group 1 optimized)",
        "fio rc=0",
        "fio error=0",
        "writes after the switch: yes",
        "host I/O errors: 0",
        "ana: done",
    ]);
    for line in out
        .stdout
        .lines()
        .filter(|l| l.starts_with("ana: longest") || l.starts_with("host saw") || l.starts_with("pause "))
    {
        vm::note(&format!("{name}: {line}"));
    }
}

/// One target node's configuration: `{PORT}`, `{MIN}`, `{MAX}` and `{STATE}` are substituted. Both nodes export the
/// same subsystem and the same file with the same identifiers and serial, with disjoint CNTLID ranges.
const NODE_CONFIG: &str = r#"
[target]
mdts = "1MiB"
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = {PORT}
ana_state = "{STATE}"
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-ana-two"
serial = "NVMFHA0001"
cntlid_min = {MIN}
cntlid_max = {MAX}
[[subsystem.namespace]]
path = "/tmp/shared.img"
uuid = "5a0c3d2e-8b1f-4c6a-9e7d-2f1a3b4c5d6e"
nguid = "5a0c3d2e8b1f4c6a9e7d2f1a3b4c5d6e"
"#;

const TWO_NODES: &str = r#"
set -eu
modprobe nvme_tcp
NQN=nqn.2024-01.io.nvmf-rs:vm-ana-two
truncate -s 128M /tmp/shared.img
start_node() {
  start_daemon node-$1 timeout 900 "$NVMF_TARGET_BIN" --config /tmp/node-$1.toml --control /tmp/node-$1.sock
}
TA() { "$NVMF_TARGET_BIN" "$@" --control /tmp/node-a.sock; }
TB() { "$NVMF_TARGET_BIN" "$@" --control /tmp/node-b.sock; }
# Read and write commands node $1's controllers completed (its `list`; a restarted node starts from 0).
io_of() { "$NVMF_TARGET_BIN" list -o json --control /tmp/node-$1.sock | jq '[.subsystems[].controllers[]? | .read_commands + .write_commands] | add // 0'; }
start_node a
start_node b
daemon_ready node-a 'nvmf-target: ready'
daemon_ready node-b 'nvmf-target: ready'
# -c 1: a lost path is retried every second (nvme-cli's --reconnect-delay; the kernel's default is 10 s).
dev=$(host_connect tcp 127.0.0.1 4420 $NQN -i 2 -c 1)
dev2=$(host_connect tcp 127.0.0.1 4421 $NQN -i 2 -c 1)
echo "one device: $([ "$dev" = "$dev2" ] && echo yes || echo "no ($dev, $dev2)")"
b=$(basename $dev)
n=${b##*n}
# Each path: "cntlid N port P ANA-STATE CONTROLLER-STATE;", by port. Builtins only: the waits call it in a loop
# under fio's load, where every exec costs up to a second under TCG.
paths() {
  local p c addr cntlid ana state
  local -A by_port=()
  for p in /sys/class/nvme/nvme*/nvme*c*n$n; do
    [ -e "$p/ana_state" ] || continue
    c=${p%/*}
    read -r addr < $c/address
    read -r cntlid < $c/cntlid
    read -r ana < $p/ana_state
    read -r state < $c/state
    [[ $addr =~ trsvcid=([0-9]+) ]] && by_port[${BASH_REMATCH[1]}]="cntlid $cntlid port ${BASH_REMATCH[1]} $ana $state;"
  done
  echo "${by_port[4420]:-}${by_port[4421]:-}"
}
_paths_are() { [ "$(paths)" = "$1" ]; }
_a_path_down() { [[ $(paths) != *"port 4420 optimized live;"* ]]; }
_a_path_live() { [[ $(paths) == *"port 4420 optimized live;"* ]]; }
_b_is() { [[ $(paths) == *"port 4421 $1 live;"* ]]; }
echo "paths: $(paths)"

out=$NVMF_VM_LOGS/fio-two
t0=$(now_ms)
# Every I/O's completion (fio's completion-latency log, Unix-epoch milliseconds): the pauses are read from it.
timeout 200 fio --name=two --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=64M --time_based --runtime=90 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  --write_lat_log=/tmp/two --log_unix_epoch=1 --output-format=json --output=$out.json > $out.log 2>&1 &
fio_pid=$!
sleep 8

# (b) Node A is lost: its process dies without a word to the host. The host fails over to node B's
# non-optimized path; then B is made optimized, as a cluster manager would.
t_loss=$(now_ms)
kill -KILL "$(nvmf_target_pid node-a)"
log "node A killed"
wait_until 20 _a_path_down || true
echo "paths after the loss: $(paths)"
TB ana-state --listener tcp://127.0.0.1:4421 --state optimized
wait_until 20 _b_is optimized || true
echo "paths after the failover: $(paths)"
b0=$(io_of b)
sleep 4
echo "case (b) I/O on node B: +$(( $(io_of b) - b0 ))"
stop_daemon node-a 2>/dev/null || true # reaps it and publishes its log, which the restart overwrites
cp "$(daemon_log node-a)" $NVMF_VM_LOGS/node-a-killed.log

# (c) Node A comes back (the same command line: its listener is optimized again), the host reconnects that path,
# and node B goes back to non-optimized: I/O returns to node A.
t_back=$(now_ms)
start_node a
daemon_ready node-a 'nvmf-target: ready'
t_ready=$(now_ms)
if wait_until 30 _a_path_live; then
  echo "host reconnected node A $(( $(now_ms) - t_ready )) ms after it was ready ($(( t_ready - t_back )) ms after its start)"
fi
TB ana-state --listener tcp://127.0.0.1:4421 --state non-optimized
wait_until 20 _paths_are "cntlid 1 port 4420 optimized live;cntlid 100 port 4421 non-optimized live;" || true
echo "paths after the return: $(paths)"
t_switched=$(now_ms)
sleep 1
a0=$(io_of a); b0=$(io_of b)
sleep 4
a1=$(io_of a); b1=$(io_of b)
echo "case (c) I/O: node A +$((a1 - a0)) node B +$((b1 - b0))"
echo "fio still running after the counters: $(kill -0 $fio_pid 2>/dev/null && echo yes || echo no)"
TA list

rc=0
wait $fio_pid || rc=$?
echo "fio rc=$rc"
jq -r '.jobs[0] | "fio error=\(.error) writes=\(.write.total_ios) verify-reads=\(.read.total_ios)"' $out.json
fio_completions /tmp/two_clat.1.log
fio_pause $t0 $t_loss "before the loss"
fio_pause $t_loss $t_back "case (b)"
fio_pause $t_back 99999999999999 "case (c)"
echo "writes after the return: $(writes_after $t_switched)"
echo "host I/O errors: $(dmesg | grep -c 'I/O error' || true)"
TB list -o json | jq -r '"node B controllers: \([.subsystems[].controllers[]?.cntlid] | map(tostring) | join(" "))"'
TA list -o json | jq -r '"node A controllers: \([.subsystems[].controllers[]?.cntlid] | map(tostring) | join(" "))"'
host_disconnect $NQN
stop_daemon node-b
stop_daemon node-a
echo "two nodes: done"
"#;

/// The two numbers of a `PREFIX +X ... +Y` line.
fn two_counts(out: &vm::VmOutput, prefix: &str) -> (u64, u64) {
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", out.report()));
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.strip_prefix('+')?.parse().ok()).collect();
    match n[..] {
        [x] => (x, 0),
        [x, y] => (x, y),
        _ => panic!("{prefix}{line}: not one or two +N counts"),
    }
}

/// Two target processes export one subsystem (one file, same identifiers, CNTLIDs 1-99 and 100-199); the kernel host
/// sees one namespace with two paths (optimized on node A, non-optimized on node B). Under verified fio:
/// (b) node A is killed with SIGKILL: I/O goes on through node B, which is then made optimized; (c) node A is
/// restarted with the same command line (its listener optimized again), the host reconnects that path (reconnect
/// delay 1 s), node B goes back to non-optimized, and the I/O returns to node A: node A's controller counts commands
/// while node B's nearly stop. fio finishes without an error; the longest pause of each case is printed (`pause case
/// (b): N ms`).
#[test]
fn two_nodes_one_subsystem_survive_a_node_loss() {
    let name = "two_nodes_one_subsystem_survive_a_node_loss";
    let vm = target_vm(name);
    let node = |port: &str, min: &str, max: &str, state: &str| {
        NODE_CONFIG.replace("{PORT}", port).replace("{MIN}", min).replace("{MAX}", max).replace("{STATE}", state)
    };
    let script = format!(
        "cat > /tmp/node-a.toml <<'EOF'\n{}\nEOF\ncat > /tmp/node-b.toml <<'EOF'\n{}\nEOF\n{PAUSES}{TWO_NODES}",
        node("4420", "1", "99", "optimized"),
        node("4421", "100", "199", "non-optimized"),
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    out.assert_lines(&[
        "one device: yes\n",
        "paths: cntlid 1 port 4420 optimized live;cntlid 100 port 4421 non-optimized live;\n",
        "tcp://127.0.0.1:4421 (port 1): every ANA group now optimized\n",
        "host reconnected node A ",
        "tcp://127.0.0.1:4421 (port 1): every ANA group now non-optimized\n",
        "paths after the return: cntlid 1 port 4420 optimized live;cntlid 100 port 4421 non-optimized live;\n",
        "fio still running after the counters: yes\n",
        "fio rc=0\n",
        "fio error=0 ",
        "writes after the return: yes\n",
        "host I/O errors: 0\n",
        "node B controllers: 100\n",
        "node A controllers: 1\n",
        "two nodes: done\n",
    ]);
    let line = |prefix: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", out.report()))
    };
    // (b): node A's path is down, node B's live, then optimized; B served the I/O.
    let after = line("paths after the loss: ");
    assert!(after.contains("port 4421 non-optimized live") && !after.contains("port 4420 optimized live"), "{after}");
    let failover = line("paths after the failover: ");
    assert!(
        failover.contains("port 4421 optimized live") && !failover.contains("port 4420 optimized live"),
        "{failover}"
    );
    let (b_during_loss, _) = two_counts(&out, "case (b) I/O on node B: ");
    assert!(b_during_loss > 0, "node B completed no I/O after node A's loss\n{}", out.report());
    // (c): the restarted node A serves the I/O; node B, non-optimized again, nearly stops (commands in flight at the
    // switch may still complete there).
    let (a, b) = two_counts(&out, "case (c) I/O: node A ");
    assert!(
        a > 0 && b * 10 <= a,
        "case (c): node A +{a}, node B +{b}: the I/O did not return to node A\n{}",
        out.report()
    );
    for case in ["before the loss", "case (b)", "case (c)"] {
        let pause = line(&format!("pause {case}: "));
        assert!(!pause.ends_with("; 0 I/Os completed in it)"), "no I/O completed in {case}: {pause}");
        vm::note(&format!("{name}: {pause}"));
    }
    vm::note(&format!("{name}: {}", line("host reconnected node A ")));
}
