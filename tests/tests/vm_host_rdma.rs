//! Our host's `Controller` over NVMe/RDMA (Soft-RoCE `rxe0` in the test VM), driven the way a user does: the
//! `nvmf-host run` daemon, `nvmf-host connect -t rdma … --ublk | --nbd`, the kernel's block layer, fio, mkfs. The
//! library's RDMA queues and `Controller` themselves, run inside the guest: `vm_host_rdma_lib.rs`.
//!
//! One guest, three parts:
//! - (a) our host → the Linux kernel target (nvmet-rdma, a memory-backed null_blk namespace of 256 MiB): one
//!   association exported as `/dev/ublkb0`, a second (`-D`) that becomes its second path (native multipath: its
//!   `--nbd` is not started, `list` shows both paths optimized, both carry writes);
//!   fio randwrite + verify (crc32c) and a verifying randread at 4 KiB QD 32 and 128 KiB QD 8;
//!   ext4 made, mounted, written, remounted, compared and `fsck -n` clean on `/dev/ublkb0`; `nvmf-host list`
//!   shows both controllers live over rdma; the daemon's metrics count the bytes and latency of the I/O queues;
//!   disconnect removes the devices; `connect-all -t rdma` discovers and connects the subsystem. Measured (no
//!   timed assertion): fio 4 KiB randread QD 32 on `/dev/ublkb0` over RDMA, then the same subsystem over
//!   NVMe/TCP (nvmet-tcp on 127.0.0.1) exported the same way.
//! - (b) our host ↔ our target (`nvmf-target`, RDMA listener on `$NVMF_RDMA_ADDR:4430`, a file namespace):
//!   the same fio verify through an NBD export, and `nvmf-host perf -t rdma` reports I/O.
//! - (c) reconnect over RDMA: fio writes with inline verification through that export while our target is
//!   killed (SIGKILL) and started again two seconds later; the host holds the I/O, reconnects and fio finishes
//!   with every block verified.
//!
//! Opt-in like every VM scenario (`NVMF_VM=1`); logs in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_rdma -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const KNQN: &str = "nqn.2024-01.io.nvmf-rs:vm-host-rdma-kernel";
const ONQN: &str = "nqn.2024-01.io.nvmf-rs:vm-host-rdma-ours";

#[test]
fn host_over_rdma_against_kernel_and_our_target() {
    let name = "host_over_rdma_against_kernel_and_our_target";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).rxe(true).modules(["nbd", "ublk_drv"]).deadline(Duration::from_secs(420));
    let vm = vm.with_our_daemons();
    let script = format!(
        r#"
set -eu
H() {{ "$NVMF_HOST_BIN" "$@" --control /tmp/host/control.sock; }}
# fio 4 KiB randread QD 32 for 5 s on $1: prints the IOPS.
randread_iops() {{
  timeout 120 fio --name=bench --filename="$1" --ioengine=libaio --direct=1 --rw=randread --bs=4k --iodepth=32 \
    --size=128M --time_based --runtime=5 --output-format=json > "$NVMF_VM_LOGS/bench-$2.json" 2>&1
  jq -r '.jobs[0].read.iops | floor' "$NVMF_VM_LOGS/bench-$2.json"
}}
ublk_of() {{ H list -o json | jq -r --arg n "$1" '.controllers[] | select(.name == $n) | .exports[0].address'; }}

nvmet_subsys_nullblk {KNQN} 256
nvmet_rdma_port 1 "$NVMF_RDMA_ADDR" 4420 {KNQN}
nvmet_tcp_port 2 127.0.0.1 4420 {KNQN}
mkdir -p /tmp/host
cat > /tmp/host/host.toml <<'HOST_TOML'
[host]
state_dir = "/tmp/host/state"
control_socket = "/tmp/host/control.sock"
[metrics]
listen = "127.0.0.1:9656"
[logging]
level = "info"
HOST_TOML
start_daemon host "$NVMF_HOST_BIN" run --config /tmp/host/host.toml
daemon_ready host 'nvmf_host::daemon: ready'

# (a) our host -> nvmet-rdma
k_ublk=$(H connect -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -n {KNQN} -i 2 --ublk | sed -n 1p)
# A second association (-D) to the same subsystem is a second path of the same export (native multipath, as
# the kernel host): its --nbd is not started.
H connect -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -n {KNQN} -i 2 -D --nbd unix:/tmp/host/k.sock > /tmp/host/second.txt
k_path=$(sed -n 1p /tmp/host/second.txt)
echo "second path: $(sed -n 2p /tmp/host/second.txt)"
test -e /tmp/host/k.sock || echo "second path's nbd socket: not started"
log "connected $k_ublk (ublk) and $k_path (its second path) over rdma"
H list >&2
H list -o json > /tmp/host/list.json
echo "kernel: $(jq -r '[.controllers[] | "\(.name) \(.transport) \(.state) \(.io_queues)"] | join(", ")' /tmp/host/list.json)"
echo "paths: $(jq -r '.controllers[0].exports[0].paths | map("\(.name) \(.state) \(.ana_state)") | join(", ")' /tmp/host/list.json)"
ublk=$(ublk_of "$k_ublk")
echo "ublk device: $ublk"
echo "ublk size: $(blockdev --getsize64 $ublk)"
fio_rw_verify $ublk 4K 32 8M
fio_rw_verify $ublk 128K 8 16M
mkfs.ext4 -q -F $ublk
mkdir -p /tmp/mnt
mount $ublk /tmp/mnt
head -c 8388608 /dev/urandom > /tmp/host/payload
cp /tmp/host/payload /tmp/mnt/payload
mkdir /tmp/mnt/dir && for i in 1 2 3 4 5 6 7 8; do head -c 65536 /dev/urandom > /tmp/mnt/dir/f$i; done
(cd /tmp/mnt && sha256sum payload dir/*) > /tmp/host/sums
umount /tmp/mnt
echo 3 > /proc/sys/vm/drop_caches
mount $ublk /tmp/mnt
(cd /tmp/mnt && sha256sum -c --quiet /tmp/host/sums) && echo "ublk files read back: ok"
umount /tmp/mnt
fsck.ext4 -n -f $ublk >&2 && echo "ublk fsck: clean"
echo "rdma ublk randread iops: $(randread_iops $ublk rdma)"
written=$(metric "nvmf_host_queue_bytes_total{{controller=\"$k_ublk\",qid=\"1\",direction=\"write\"}}" 127.0.0.1:9656)
read=$(metric "nvmf_host_queue_bytes_total{{controller=\"$k_ublk\",qid=\"1\",direction=\"read\"}}" 127.0.0.1:9656)
lat=$(metric "nvmf_host_queue_command_latency_seconds_count{{controller=\"$k_ublk\",qid=\"1\"}}" 127.0.0.1:9656)
echo "metrics $k_ublk qid 1: written $written read $read latency count $lat"
[ "$written" -gt 0 ] && [ "$read" -gt 0 ] && [ "$lat" -gt 0 ] && echo "metrics counted: ok"
written2=$(metric "nvmf_host_queue_bytes_total{{controller=\"$k_path\",qid=\"1\",direction=\"write\"}}" 127.0.0.1:9656)
[ "$written2" -gt 0 ] && echo "second path carried writes: ok"
step H disconnect -n {KNQN}
wait_until 10 test ! -e "$ublk" && echo "ublk device after disconnect: removed"

# The same subsystem over NVMe/TCP, exported the same way: the comparison figure.
t_ublk=$(H connect -t tcp -a 127.0.0.1 -s 4420 -n {KNQN} -i 2 --ublk | sed -n 1p)
tublk=$(ublk_of "$t_ublk")
echo "tcp ublk randread iops: $(randread_iops $tublk tcp)"
step H disconnect -n {KNQN}
# connect-all over RDMA: discovery through nvmet-rdma's discovery controller, then its NVM subsystem.
H connect-all -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -o json > /tmp/host/all.json
echo "connect-all: $(jq -r '[.[] | "\(.subnqn) \(.outcome)"] | join(", ")' /tmp/host/all.json)"
echo "after connect-all: $(H list -o json | jq -r '[.controllers[] | "\(.transport) \(.state)"] | join(", ")')"
step H disconnect -n {KNQN}

# (b) our host <-> our target over RDMA
truncate -s 128M /tmp/ours.img
cat > /tmp/ours.toml <<'TARGET_TOML'
[target]
mdts = "1MiB"
max_queue_size = 128
[logging]
level = "info"
[[listener]]
transport = "rdma"
address = "10.77.0.1"
port = 4430
[[subsystem]]
nqn = "{ONQN}"
[[subsystem.namespace]]
path = "/tmp/ours.img"
TARGET_TOML
nvmf_target_start target /tmp/ours.toml
name=$(H connect -t rdma -a "$NVMF_RDMA_ADDR" -s 4430 -n {ONQN} -i 2 -c 1 -l 120 --nbd unix:/tmp/host/o.sock | sed -n 1p)
nbd-client -N ${{name}}n1 -u /tmp/host/o.sock /dev/nbd1 >&2
echo "nbd1 size: $(blockdev --getsize64 /dev/nbd1)"
fio_rw_verify /dev/nbd1 4K 32 8M
timeout 60 "$NVMF_HOST_BIN" perf -t rdma -a "$NVMF_RDMA_ADDR" -s 4430 -n {ONQN} -q 32 -o 4096 -w randread -T 2 --json \
  > "$NVMF_VM_LOGS/perf.json" 2> "$NVMF_VM_LOGS/perf.log" || {{ cat "$NVMF_VM_LOGS/perf.log" >&2; fail "perf -t rdma"; }}
echo "PERF $(cat "$NVMF_VM_LOGS/perf.json")"

# (c) our target killed and restarted under I/O
timeout 300 fio --name=verify --filename=/dev/nbd1 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=32M --time_based --runtime=12 --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 \
  > "$NVMF_VM_LOGS/reconnect-fio.log" 2>&1 &
fio_pid=$!
sleep 3
kill -KILL "$(nvmf_target_pid target)"
wait_until 10 _gone "$(cat /run/nvmf-daemons/target.pid)" || true
rm -f /run/nvmf-daemons/target.pid
sleep 2
nvmf_target_start target /tmp/ours.toml
if wait "$fio_pid"; then rc=0; else rc=$?; fi
read -r verified _ <<< "$(_fio_issued "$NVMF_VM_LOGS/reconnect-fio.log")"
grep -E 'err=|issued rwts' "$NVMF_VM_LOGS/reconnect-fio.log" >&2 || true
if [ $rc = 0 ] && [ "${{verified:-0}}" -gt 0 ]; then echo "fio across the restart: ok"; else echo "fio across the restart: rc=$rc verified=${{verified:-0}}"; fi
stamp() {{ date -d "$(grep -m1 "$1" "$(daemon_log host)" | cut -c1-27)" +%s.%N; }}
echo "association lost to reconnected: $(awk -v a="$(stamp 'reconnected traddr')" -v b="$(stamp 'association lost')" 'BEGIN {{ printf "%.1f", a - b }}') s"
echo "reconnected: $(grep -c 'reconnected' "$(daemon_log host)" || true)"
echo "state after: $(H list -o json | jq -r '.controllers[] | select(.subnqn == "{ONQN}") | "\(.state) reconnects=\(.reconnects)"')"
nbd-client -d /dev/nbd1 >&2
step H disconnect -n {ONQN}
# The queues of the association our target's SIGKILL ended are still being torn down on their own threads (an RDMA
# CM id whose peer vanished: up to ~50 s on Soft-RoCE, rdma/teardown.rs); the process is reaped after them.
stop_daemon host 90 && echo "daemon exit: 0"
echo "unclean disconnects: $(grep -c 'disconnect was not clean' "$(daemon_log host)" || true)"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    for needle in [
        "kernel: nvmf0 rdma live 2, nvmf1 rdma live 2\n",
        "ublk device: /dev/ublkb0\n",
        "ublk size: 268435456\n",
        "second path: nvmf1n1: exported at /dev/ublkb0 (now 2 paths)\n",
        "second path's nbd socket: not started\n",
        "paths: nvmf0 live optimized, nvmf1 live optimized\n",
        "second path carried writes: ok\n",
        "ublk files read back: ok\n",
        "ublk fsck: clean\n",
        "metrics counted: ok\n",
        "ublk device after disconnect: removed\n",
        &format!("{KNQN} connected\n"),
        "after connect-all: rdma live\n",
        "nbd1 size: 134217728\n",
        "fio across the restart: ok\n",
        "state after: live reconnects=1\n",
        "daemon exit: 0\n",
        "unclean disconnects: 0\n",
    ] {
        assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
    }
    for line in out.stdout.lines().filter(|l| l.starts_with("fio bs=")) {
        eprintln!("{line}");
    }
    assert_eq!(out.stdout.lines().filter(|l| l.starts_with("fio bs=")).count(), 3, "{}", out.report());
    let iops = |what: &str| -> u64 {
        let prefix = format!("{what} ublk randread iops: ");
        let line = out.stdout.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        line.and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no {prefix:?}\n{}", out.report()))
    };
    let (rdma, tcp) = (iops("rdma"), iops("tcp"));
    assert!(rdma > 0 && tcp > 0, "{}", out.report());
    eprintln!("fio 4k randread QD32 on /dev/ublkb0 via nvmet: rdma {rdma} IOPS, tcp {tcp} IOPS");
    let line = out.stdout.lines().find_map(|l| l.strip_prefix("PERF ")).unwrap_or_else(|| panic!("{}", out.report()));
    let perf: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("perf JSON {line}: {e}"));
    assert!(perf["iops"].as_f64().unwrap_or(0.0) > 0.0, "perf -t rdma against our target: {perf}");
    eprintln!("perf -t rdma against our target, 4k randread QD32: {} IOPS", perf["iops"]);
    if let Some(l) = out.stdout.lines().find(|l| l.starts_with("association lost to reconnected")) {
        eprintln!("{l}");
    }
}
