//! Our host daemon (`nvmf-host run`, the namespace exported as `/dev/ublkbN`) against the Linux 6.12 kernel target
//! (nvmet-tcp on 127.0.0.1 or nvmet-rdma on Soft-RoCE `rxe0`, a memory-backed null_blk namespace) when the target
//! goes away under load.
//!
//! | test | what it proves |
//! |---|---|
//! | `kernel_target_restarted_under_load` (TCP) | while fio writes 64 MiB with crc32c verification through the export, the nvmet port is removed for 3 s and created again: no write completes while it is away (I/O is held), fio exits 0 having written and verified every block, a second read-back pass verifies every block again, `list` shows the controller live with exactly one reconnect, the host log one loss and one reconnect; the new association gets the Namespace Attribute Changed event when nvmet adds a namespace; after the daemon stops, the kernel's own host reads every block back verified |
//! | `kernel_nvmet_rdma_restarted_under_load` | the same over NVMe/RDMA (nvmet-rdma at `$NVMF_RDMA_ADDR`, the kernel's nvme-rdma host for the last read-back) |
//! | `kernel_target_gone_past_ctrl_loss_tmo` (TCP) | with `ctrl_loss_tmo = 5` the port is removed under fio load and never comes back: fio ends with EIO (not a hang), the controller is `failed`, a new read fails at once with EIO, and SIGTERM ends the daemon with status 0 and removes the device |
//!
//! The target is taken away by unlinking the subsystem from its port and removing the port: nvmet then deletes
//! the port's controllers (their connections close) and refuses new connections until the port is back, as a
//! restarted target does (over TCP the host's connects are refused, over RDMA its RDMA CM requests rejected).
//! Every wait is bounded (`timeout`, `wait_until`). Opt-in like every VM scenario:
//! `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`); logs (the daemon's, fio's, dmesg) in
//! `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_reconnect -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-host-reconnect";

/// Shell helpers both scenarios use (after guest-lib.sh): the daemon with one controller exporting namespace 1
/// over ublk, its `list`, nvmet's port going away, and the export's completed-write count.
const HELPERS: &str = r#"
set -eu
H=/tmp/host
# host_daemon_start RECONNECT_DELAY CTRL_LOSS_TMO: start the daemon (in this shell, so stop_daemon can reap it)
# connecting to nvmet at $T (tcp, rdma) $ADDR:4420, wait until it is ready; `export_of` then names its ublk device.
host_daemon_start() {
  mkdir -p $H
  cat > $H/host.toml <<EOF
[host]
state_dir = "$H/state"
control_socket = "$H/control.sock"
[logging]
level = "info"
[[controller]]
transport = "$T"
address = "$ADDR"
nqn = "$NQN"
nr_io_queues = 2
reconnect_delay = $1
ctrl_loss_tmo = $2
[[controller.export]]
nsid = 1
ublk = true
EOF
  start_daemon host "$NVMF_HOST_BIN" run --config $H/host.toml
  daemon_ready host 'nvmf_host::daemon: ready'
}
export_of() { host_list '.controllers[0].exports[0].address'; }
host_list() { timeout 30 "$NVMF_HOST_BIN" list -o json --control $H/control.sock | jq -r "$1"; }
state_is() { [ "$(host_list '.controllers[0].state')" = "$1" ]; }
# Port 1 for $NQN at $T $ADDR:4420 comes and goes: when it goes nvmet deletes its controllers, and connections are
# refused until it is back.
port_up() { "nvmet_${T}_port" 1 "$ADDR" 4420 "$NQN"; }
port_down() { rm "$NVMET/ports/1/subsystems/$NQN" && rmdir "$NVMET/ports/1"; log "nvmet port 1 removed"; }
# Writes the block device DEV (/dev/ublkbN) completed (its stat's fifth field).
writes_of() { local w; read -r _ _ _ _ w _ < "/sys/block/${1#/dev/}/stat"; echo "$w"; }
writes_over() { (($(writes_of "$1") > $2)); }
count() { grep -c "$1" "$(daemon_log host)" || true; }
"#;

/// The transports: the shell's `$T` and `$ADDR` (nvmet's port and the host's address).
#[derive(Debug, Clone, Copy)]
enum Transport {
    Tcp,
    Rdma,
}

/// Run `script` (after [`HELPERS`]) in a guest with nvmet, the kernel host and ublk_drv for `transport` (RDMA over
/// rxe0); `None` when the VM scenarios are skipped.
fn run(name: &str, transport: Transport, deadline: Duration, script: &str) -> Option<VmOutput> {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let (t, addr) = match transport {
        Transport::Tcp => ("tcp", "127.0.0.1"),
        Transport::Rdma => ("rdma", "$NVMF_RDMA_ADDR"),
    };
    let vm = Vm::new(name)
        .logs(logs)
        .modules(["nvmet", &format!("nvmet_{t}"), &format!("nvme_{t}"), "null_blk", "ublk_drv"])
        .rxe(matches!(transport, Transport::Rdma))
        .deadline(deadline);
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = match std::env::var_os("NVMF_HOST_BIN") {
                Some(bin) => PathBuf::from(bin),
                None => nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                    .unwrap_or_else(|e| panic!("nvmf-host binary: {e}")),
            };
            vm.env("NVMF_HOST_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let script = format!("T={t}\nADDR={addr}\nNQN={NQN}\n{HELPERS}{script}");
    let start = Instant::now();
    let out = vm.run_or_skip(&script)?;
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    Some(out)
}

#[test]
fn kernel_target_restarted_under_load() {
    restarted_under_load("kernel_target_restarted_under_load", Transport::Tcp);
}

#[test]
fn kernel_nvmet_rdma_restarted_under_load() {
    restarted_under_load("kernel_nvmet_rdma_restarted_under_load", Transport::Rdma);
}

/// The restart scenario over `transport` (see the module docs).
fn restarted_under_load(name: &str, transport: Transport) {
    let script = r#"
nvmet_subsys_nullblk $NQN 256
port_up
host_daemon_start 1 60
dev=$(export_of)
echo "export: $dev"
blocks=16384 # 64 MiB of 4 KiB
fio_args=(--ioengine=libaio --direct=1 --bs=4k --iodepth=32 --size=64M --verify=crc32c
  --verify_fatal=1 --group_reporting)
timeout 600 fio --name=write --filename="$dev" "${fio_args[@]}" --rw=randwrite --do_verify=1 > "$NVMF_VM_LOGS/fio-write.log" 2>&1 &
fio=$!
wait_until 120 writes_over "$dev" 2000 || fail "fio wrote nothing"

port_down
wait_until 30 state_is reconnecting || fail "the controller did not notice the loss"
held=$(writes_of "$dev")
echo "outage started before the writes ended: $( ((held < blocks)) && echo yes || echo "no ($held)")"
sleep 3
echo "writes completed while the target was away: $(($(writes_of "$dev") - held))"
port_up
rc=0
wait $fio || rc=$?
grep -E 'err=|issued rwts|verify' "$NVMF_VM_LOGS/fio-write.log" >&2
echo "fio exit: $rc"
echo "fio errors: $(grep -cE 'err= *[1-9]|verify: bad|Input/output error' "$NVMF_VM_LOGS/fio-write.log" || true)"
read -r r w <<< "$(_fio_issued "$NVMF_VM_LOGS/fio-write.log")"
echo "fio wrote $w and verified $r of $blocks"

timeout 600 fio --name=read --filename="$dev" "${fio_args[@]}" --rw=randread > "$NVMF_VM_LOGS/fio-read.log" 2>&1 ||
  { cat "$NVMF_VM_LOGS/fio-read.log" >&2; fail "read-back pass"; }
read -r r _ <<< "$(_fio_issued "$NVMF_VM_LOGS/fio-read.log")"
echo "read-back pass verified $r of $blocks"

echo "state: $(host_list '.controllers[0].state')"
echo "reconnects: $(host_list '.controllers[0].reconnects')"
echo "losses logged: $(count 'association lost; reconnecting')"
echo "reconnects logged: $(count 'INFO nvmf_host::controller::supervision: reconnected')"

# The new association has its Asynchronous Event Requests outstanding: nvmet's notice of a new namespace arrives.
ns2=$(nullblk_create nvmfns2 64)
s=$NVMET/subsystems/$NQN/namespaces/2
mkdir "$s" && echo -n "$ns2" > "$s/device_path" && echo 1 > "$s/enable"
wait_until 60 grep -q 'namespace attributes changed' "$(daemon_log host)" || fail "no namespace notice"
echo "namespace notice after the reconnect: yes"
echo "namespaces: $(host_list '[.controllers[0].namespaces[].nsid] | join(",")')"

stop_daemon host 30 && echo "daemon exit: 0"
# What the target holds, read by the kernel's host: every acknowledged write is there.
host_connect "$T" "$ADDR" 4420 "$NQN" > /dev/null
wait_until 10 _has_namespace "$NQN" 1 || fail "namespace 1 did not appear"
kdev=/dev/$(_namespace_of "$NQN" 1)
timeout 600 fio --name=read --filename="$kdev" "${fio_args[@]}" --rw=randread \
  > "$NVMF_VM_LOGS/fio-kernel-read.log" 2>&1 || { cat "$NVMF_VM_LOGS/fio-kernel-read.log" >&2; fail "kernel read-back"; }
read -r r _ <<< "$(_fio_issued "$NVMF_VM_LOGS/fio-kernel-read.log")"
echo "kernel host verified $r of $blocks"
host_disconnect $NQN
"#;
    let Some(out) = run(name, transport, Duration::from_secs(600), script) else { return };
    out.assert_lines(&[
        "export: /dev/ublkb0\n",
        "outage started before the writes ended: yes\n",
        "writes completed while the target was away: 0\n",
        "fio exit: 0\n",
        "fio errors: 0\n",
        "fio wrote 16384 and verified 16384 of 16384\n",
        "read-back pass verified 16384 of 16384\n",
        "state: live\n",
        "reconnects: 1\n",
        "losses logged: 1\n",
        "reconnects logged: 1\n",
        "namespace notice after the reconnect: yes\n",
        "namespaces: 1,2\n",
        "daemon exit: 0\n",
        "kernel host verified 16384 of 16384\n",
    ]);
}

#[test]
fn kernel_target_gone_past_ctrl_loss_tmo() {
    let script = r#"
nvmet_subsys_nullblk $NQN 256
port_up
host_daemon_start 1 5
dev=$(export_of)
echo "export: $dev"
timeout 300 fio --name=lost --filename="$dev" --ioengine=libaio --direct=1 --bs=4k --iodepth=32 --size=256M \
  --rw=randwrite --time_based --runtime=240 > "$NVMF_VM_LOGS/fio-lost.log" 2>&1 &
fio=$!
wait_until 120 writes_over "$dev" 1000 || fail "fio wrote nothing"
port_down
rc=0
wait $fio || rc=$?
grep -E 'err=|error' "$NVMF_VM_LOGS/fio-lost.log" >&2 || true
echo "fio ended: $( ((rc != 0 && rc != 124)) && echo "with an error" || echo "rc $rc")"
echo "fio saw EIO: $(grep -qE 'Input/output error|err= *5' "$NVMF_VM_LOGS/fio-lost.log" && echo yes || echo no)"
wait_until 30 state_is failed || true
echo "state: $(host_list '.controllers[0].state')"
echo "gave up logged: $(count 'controller lost: giving up')"
rc=0
timeout 30 dd if="$dev" of=/dev/null bs=4096 count=1 iflag=direct 2> $H/dd.err || rc=$?
cat $H/dd.err >&2
echo "read after the loss: $( ((rc != 0 && rc != 124)) && grep -q 'Input/output error' $H/dd.err && echo EIO || echo "rc $rc")"
stop_daemon host 30 && echo "daemon exit: 0"
echo "device after exit: $(test -e "$dev" && echo present || echo removed)"
"#;
    let Some(out) = run("kernel_target_gone_past_ctrl_loss_tmo", Transport::Tcp, Duration::from_secs(300), script)
    else {
        return;
    };
    out.assert_lines(&[
        "export: /dev/ublkb0\n",
        "fio ended: with an error\n",
        "fio saw EIO: yes\n",
        "state: failed\n",
        "gave up logged: 1\n",
        "read after the loss: EIO\n",
        "daemon exit: 0\n",
        "device after exit: removed\n",
    ]);
}
