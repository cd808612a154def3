//! Asymmetric Namespace Access against the Linux 6.12 kernel host's native multipath, in the test VM: our target
//! with two TCP listeners (4420 optimized, 4421 non-optimized) and one memory namespace; the kernel host connects
//! through both and shows one multipath namespace with two paths in those ANA states (sysfs `ana_state`, `nvme
//! list-subsys`); fio randwrite with crc32c verification runs on the multipath device while `nvmf-target
//! ana-state` makes 4420 inaccessible and 4421 optimized: the host follows (ANA Change events, the ANA log) and
//! I/O goes on through 4421 without a verify error. The longest I/O latency fio saw and the longest gap
//! between 200 ms intervals with completed writes are printed (`ana: longest …`).
//!
//! `two_nodes_one_subsystem_survive_a_node_loss`: two target processes export one subsystem from one file (same
//! identifiers, disjoint CNTLID ranges); node A is killed under verified fio, and I/O goes on through node B.
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs (the daemon's, fio's,
//! dmesg) land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_ana -- --nocapture

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
timeout 200 fio --name=ana --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=64M --time_based --runtime=45 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  --write_bw_log=/tmp/ana --log_avg_msec=200 --output-format=json --output=$out.json > $out.log 2>&1 &
fio_pid=$!
sleep 12
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
# The write bandwidth log: 200 ms averages, "msec, KiB/s, dir, bs, offset". After the switch: writes completed
# (KiB summed over intervals) and the longest gap between intervals with some (fio logs no empty interval).
cp /tmp/ana_bw.1.log $NVMF_VM_LOGS/ 2>/dev/null || true
awk -F', *' -v s=$t_switch '$3 == 1 {
    if ($2 > 0) { if (prev != "" && $1 - prev > longest) longest = $1 - prev; prev = $1 }
    if ($1 > s + 2000) after += $2
  } END { printf "ana: longest gap between completed writes %d ms; writes after the switch: %s\n", longest, (after > 0 ? "yes" : "no") }' /tmp/ana_bw.1.log
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
    let script =
        format!("CONFIG=/tmp/nvmf-target.toml\ncat > $CONFIG <<'EOF'\n{CONFIG}\nEOF\n{}", SCRIPT.replace("{NQN}", NQN));
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
    for line in out.stdout.lines().filter(|l| l.starts_with("ana: longest") || l.starts_with("host saw")) {
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
start_daemon node-a timeout 900 "$NVMF_TARGET_BIN" --config /tmp/node-a.toml --control /tmp/node-a.sock
start_daemon node-b timeout 900 "$NVMF_TARGET_BIN" --config /tmp/node-b.toml --control /tmp/node-b.sock
daemon_ready node-a 'nvmf-target: ready'
daemon_ready node-b 'nvmf-target: ready'
dev=$(host_connect tcp 127.0.0.1 4420 $NQN -i 2)
dev2=$(host_connect tcp 127.0.0.1 4421 $NQN -i 2)
echo "one device: $([ "$dev" = "$dev2" ] && echo yes || echo "no ($dev, $dev2)")"
b=$(basename $dev)
n=${b##*n}
# Each path: "cntlid N port P STATE", by port.
paths() {
  local p c
  for p in /sys/class/nvme/nvme*/nvme*c*n$n; do
    [ -e "$p/ana_state" ] || continue
    c=$(basename "$(dirname "$p")")
    echo "cntlid $(cat /sys/class/nvme/$c/cntlid) port $(sed -n 's/.*trsvcid=\([0-9]*\).*/\1/p' /sys/class/nvme/$c/address) $(cat $p/ana_state) $(cat /sys/class/nvme/$c/state)"
  done | sort -k4
}
echo "paths: $(paths | tr '\n' ';')"

out=$NVMF_VM_LOGS/fio-two
t0=${EPOCHREALTIME/./}
timeout 200 fio --name=two --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=64M --time_based --runtime=40 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  --write_bw_log=/tmp/two --log_avg_msec=200 --output-format=json --output=$out.json > $out.log 2>&1 &
fio_pid=$!
sleep 12
# Node A is lost: its process dies without a word to the host.
kill -KILL "$(nvmf_target_pid node-a)"
t_loss=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
log "node A killed"
sleep 5
echo "paths after the loss: $(paths | tr '\n' ';')"
rc=0
wait $fio_pid || rc=$?
echo "fio rc=$rc"
jq -r '.jobs[0] | "fio error=\(.error)"' $out.json
cp /tmp/two_bw.1.log $NVMF_VM_LOGS/ 2>/dev/null || true
awk -F', *' -v s=$t_loss '$3 == 1 {
    if ($2 > 0) { if (prev != "" && $1 - prev > longest) longest = $1 - prev; prev = $1 }
    if ($1 > s + 2000) after += $2
  } END { printf "two nodes: longest gap between completed writes %d ms; writes after the loss: %s\n", longest, (after > 0 ? "yes" : "no") }' /tmp/two_bw.1.log
echo "host I/O errors: $(dmesg | grep -c 'I/O error' || true)"
"$NVMF_TARGET_BIN" list -o json --control /tmp/node-b.sock | jq -r '"node B controllers: \([.subsystems[].controllers[]?.cntlid] | map(tostring) | join(" "))"'
host_disconnect $NQN
stop_daemon node-b
stop_daemon node-a || true
echo "two nodes: done"
"#;

/// Two target processes export one subsystem (one file, same identifiers, CNTLIDs 1-99 and 100-199); the kernel host
/// sees one namespace with two paths (optimized on node A, non-optimized on node B); node A is killed under verified
/// fio and I/O goes on through node B without an error reaching fio.
#[test]
fn two_nodes_one_subsystem_survive_a_node_loss() {
    let name = "two_nodes_one_subsystem_survive_a_node_loss";
    let vm = target_vm(name);
    let node = |port: &str, min: &str, max: &str, state: &str| {
        NODE_CONFIG.replace("{PORT}", port).replace("{MIN}", min).replace("{MAX}", max).replace("{STATE}", state)
    };
    let script = format!(
        "cat > /tmp/node-a.toml <<'EOF'\n{}\nEOF\ncat > /tmp/node-b.toml <<'EOF'\n{}\nEOF\n{TWO_NODES}",
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
        "fio rc=0\n",
        "fio error=0\n",
        "writes after the loss: yes\n",
        "host I/O errors: 0\n",
        "node B controllers: 100\n",
        "two nodes: done\n",
    ]);
    let after = out.stdout.lines().find(|l| l.starts_with("paths after the loss: ")).unwrap_or_default();
    assert!(after.contains("port 4421 non-optimized live") && !after.contains("port 4420 optimized live"), "{after}");
    for line in out.stdout.lines().filter(|l| l.starts_with("two nodes: longest")) {
        vm::note(&format!("{name}: {line}"));
    }
}
