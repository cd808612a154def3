# The guest half of `fio-jobs/compare --vm`, run by nvmf-vm; sources tests/vm/guest-lib.sh ($NVMF_GUEST_LIB),
# whose setup helpers tests/vm/bench-tcp.sh uses too, and tests/vm/bench-lib.sh (the two modes, on_target). Runs
# every fio-jobs/*.fio job on a memory-backed null_blk device reached several ways, each through the kernel's
# block layer:
#   local        the device itself (the limit), on the node that has it
#   nvmf-rs      our nvmf-target (NVMF_TARGET_BIN) exporting it over NVMe/TCP, the kernel host connected
#   nvmf-rs-ublk the same, our host (NVMF_HOST_BIN) connected and exporting the namespace as /dev/ublkbN
#   nvmet-tcp    the kernel's nvmet-tcp exporting it, the kernel host connected
#   nvmf-rs-rdma our nvmf-target over NVMe/RDMA (Soft-RoCE, rxe0), the kernel host connected
#   nvmet-rdma   the kernel's nvmet-rdma exporting it, the kernel host connected over rxe0
#   tgtd         tgtd exporting it over iSCSI, open-iscsi (iscsid + iscsi_tcp) logged in
# Two nodes (the default of `compare --vm`, a lab node: $NVMF_NODE set): this runs on node host, with the hosts
# and fio; the device, the targets and the `local` runs are on node target (on_target jobs), reached over the
# link at the target's address. One guest (`compare --vm --one-guest`): all in it, over 127.0.0.1 and rxe0 on
# dummy0.
# Writes $NVMF_VM_LOGS/compare/<target>/<job>.json (fio's JSON) or <job>.err, or <target>.skipped with the
# reason, on the node where fio ran (two nodes: `local` in the target's logs, the rest in the host's); and
# `kernel` (uname -r, or each node's when they differ) and `setting` (mode, vCPUs, kernels, date) in the host's.
# Environment: COMPARE_RUNTIME (seconds per job), COMPARE_RAMP (empty: the job files' ramp), COMPARE_SIZE_MIB.
# `--lib` (sourced) defines the target side's functions for its on_target jobs.
set -uo pipefail
[ "${1:-}" = --lib ] || . "$NVMF_GUEST_LIB"
# No exec for this: target jobs source the file each time.
jobs_dir=.
[[ ${BASH_SOURCE[0]} != */* ]] || jobs_dir=${BASH_SOURCE[0]%/*}
[[ $jobs_dir = /* ]] || jobs_dir=$PWD/$jobs_dir
. "$jobs_dir/../tests/vm/bench-lib.sh"
runtime=${COMPARE_RUNTIME:-10}
ramp=${COMPARE_RAMP:-}
size=${COMPARE_SIZE_MIB:-1024}
out=$NVMF_VM_LOGS/compare
nqn_ours=nqn.2024-01.io.nvmf-rs:compare-ours
nqn_kernel=nqn.2024-01.io.nvmf-rs:compare-nvmet
iqn=iqn.2024-01.io.nvmf-rs:compare
lib=". $jobs_dir/compare-vm.sh --lib"

# run_jobs TARGET DEV: every job on DEV.
run_jobs() {
  local target=$1 dev=$2 job name
  mkdir -p "$out/$target"
  for job in "$jobs_dir"/*.fio; do
    name=$(basename "$job" .fio)
    if [ -n "$ramp" ]; then
      sed "s/^ramp_time=.*/ramp_time=$ramp/" "$job" > "/tmp/$name.fio"
      job=/tmp/$name.fio
    fi
    log "compare: $target $name"
    FILENAME=$dev RUNTIME=$runtime timeout $((runtime + 120)) fio --output-format=json "$job" \
      > "$out/$target/$name.json" 2> "$out/$target/$name.err" || log "compare: fio $target $name failed"
  done
}

# --- the target side (on_target jobs) ---

# ours_up DEV: our target exporting DEV over TCP and RDMA on port 4421 of the target's addresses.
ours_up() {
  cat > /tmp/compare-target.toml <<EOF
[logging]
level = "warn"
[[listener]]
address = "$(bench_addr tcp)"
port = 4421
[[listener]]
transport = "rdma"
address = "$(bench_addr rdma)"
port = 4421
[[subsystem]]
nqn = "$nqn_ours"
[[subsystem.namespace]]
path = "$1"
EOF
  nvmf_target_start ours /tmp/compare-target.toml
}

# tgtd_up DEV: tgtd exporting DEV as LUN 1 of $iqn on port 3260 of the target's address; tgtd_down.
tgtd_up() {
  local addr
  addr=$(bench_addr tcp)
  command -v tgtd > /dev/null || { fail "no tgtd"; return 1; }
  mkdir -p /run/tgtd /var/lib/tgtd
  start_daemon tgtd timeout 7200 tgtd -f --iscsi "portal=$addr:3260"
  wait_tcp_listen 3260
  tgtadm --lld iscsi --op new --mode target --tid 1 -T "$iqn"
  tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$1"
  tgtadm --lld iscsi --op bind --mode target --tid 1 -I ALL
}
tgtd_down() {
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1 || true
  tgtadm --lld iscsi --op delete --mode target --tid 1 || true
  tgtadm --op delete --mode system || true
  stop_daemon tgtd || true
}

[ "${1:-}" = --lib ] && return 0

# --- the host side ---
addr=$(bench_addr tcp)
rdma_addr=$(bench_addr rdma)
mkdir -p "$out"
kernel=$(uname -r)
if bench_two_nodes; then
  k=$(on_target 'uname -r')
  [ "$k" = "$kernel" ] || kernel="target $k, host $kernel"
fi
echo "$kernel" > "$out/kernel"
bench_setting > "$out/setting"

dev=$(on_target "$lib; nullblk_create cmpnb0 $size") || exit 1
on_target "$lib; run_jobs local $dev"

# Kernel nvmet-tcp.
if on_target "nvmet_subsys $nqn_kernel $dev; nvmet_tcp_port 1 $addr 4420 $nqn_kernel" &&
  remote=$(host_connect tcp "$addr" 4420 "$nqn_kernel"); then
  run_jobs nvmet-tcp "$remote"
  host_disconnect "$nqn_kernel"
else
  echo "nvmet-tcp setup failed" > "$out/nvmet-tcp.skipped"
fi
# Kernel nvmet-rdma: the same subsystem on an RDMA port (rdma_cm needs rxe0's address, not loopback).
if on_target "nvmet_rdma_port 2 $rdma_addr 4420 $nqn_kernel" &&
  remote=$(host_connect rdma "$rdma_addr" 4420 "$nqn_kernel"); then
  run_jobs nvmet-rdma "$remote"
  host_disconnect "$nqn_kernel"
else
  echo "nvmet-rdma setup failed (no rxe0?)" > "$out/nvmet-rdma.skipped"
fi
on_target nvmet_teardown

# The ublk device `nvmf-host ublk` printed (empty until it did).
_ublk_device() { grep -m1 '^/dev/ublkb' "$(daemon_log ublk)"; }

# Ours.
if on_target "$lib; ours_up $dev" && remote=$(host_connect tcp "$addr" 4421 "$nqn_ours"); then
  run_jobs nvmf-rs "$remote"
  host_disconnect "$nqn_ours"
  # Our host, as a user mounts a namespace: its ublk export with its defaults (one queue per CPU, pinned).
  if [ -n "${NVMF_HOST_BIN:-}" ] && modprobe ublk_drv; then
    start_daemon ublk timeout 7200 "$NVMF_HOST_BIN" ublk -t tcp -a "$addr" -s 4421 -n "$nqn_ours"
    if wait_until 60 _ublk_device && [ -b "$(_ublk_device)" ]; then
      run_jobs nvmf-rs-ublk "$(_ublk_device)"
    else
      echo "nvmf-host ublk did not export the namespace (see ublk.log)" > "$out/nvmf-rs-ublk.skipped"
    fi
    stop_daemon ublk 30 || log "compare: nvmf-host ublk did not stop cleanly"
  else
    echo "no NVMF_HOST_BIN or no ublk_drv in the guest" > "$out/nvmf-rs-ublk.skipped"
  fi
  if remote=$(host_connect rdma "$rdma_addr" 4421 "$nqn_ours"); then
    run_jobs nvmf-rs-rdma "$remote"
    host_disconnect "$nqn_ours"
  else
    echo "kernel host could not connect over RDMA (see ours.log)" > "$out/nvmf-rs-rdma.skipped"
  fi
else
  echo "nvmf-target setup failed (see ours.log)" > "$out/nvmf-rs.skipped"
  echo "nvmf-target setup failed (see ours.log)" > "$out/nvmf-rs-rdma.skipped"
  echo "nvmf-target setup failed (see ours.log)" > "$out/nvmf-rs-ublk.skipped"
fi
on_target 'stop_daemon ours || true'

# tgtd + open-iscsi.
iscsi_disk() { iscsiadm -m session -P3 2>/dev/null | awk '/Attached scsi disk/ { print $4; exit }'; }
_iscsi_attached() { [ -n "$(iscsi_disk)" ]; }
# sd_mod: nothing autoloads the SCSI disk driver in the guest, and without it the iSCSI LUN gets no /dev/sdX.
if command -v iscsiadm > /dev/null && modprobe iscsi_tcp && modprobe sd_mod && on_target "$lib; tgtd_up $dev"; then
  mkdir -p /run/lock/iscsi /etc/iscsi
  [ -s /etc/iscsi/initiatorname.iscsi ] || echo "InitiatorName=iqn.2024-01.io.nvmf-rs:guest" > /etc/iscsi/initiatorname.iscsi
  # Its own session: iscsid signals its whole process group when it stops, which would end this script too.
  start_daemon iscsid setsid timeout 7200 iscsid -f
  sleep 1
  if timeout 60 iscsiadm -m discovery -t sendtargets -p "$addr:3260" >&2 &&
    timeout 60 iscsiadm -m node -T "$iqn" -p "$addr:3260" --login >&2 &&
    wait_until 20 _iscsi_attached; then
    disk=/dev/$(iscsi_disk)
    wait_until 10 test -b "$disk"
    log "compare: iSCSI disk $disk"
    run_jobs tgtd-iscsi "$disk"
    timeout 60 iscsiadm -m node -T "$iqn" -p "$addr:3260" --logout >&2
  else
    echo "open-iscsi login failed (see iscsid.log, tgtd.log)" > "$out/tgtd-iscsi.skipped"
  fi
  stop_daemon iscsid
  on_target "$lib; tgtd_down"
else
  echo "tgtd, iscsiadm or iscsi_tcp missing, or tgtd setup failed (see tgtd.log)" > "$out/tgtd-iscsi.skipped"
fi
log "compare: done"
exit 0
