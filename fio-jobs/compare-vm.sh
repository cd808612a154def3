# The guest half of `fio-jobs/compare --vm`, run by nvmf-vm; sources tests/vm/guest-lib.sh ($NVMF_GUEST_LIB),
# whose setup helpers tests/vm/bench-tcp.sh uses too. Runs every fio-jobs/*.fio job on a memory-backed null_blk
# device reached four ways, each through the kernel's block layer:
#   local        the device itself (the limit)
#   nvmf-rs      our nvmf-target (NVMF_TARGET_BIN) exporting it over NVMe/TCP, the kernel host connected
#   nvmf-rs-ublk the same, our host (NVMF_HOST_BIN) connected and exporting the namespace as /dev/ublkbN
#   nvmet-tcp    the kernel's nvmet-tcp exporting it, the kernel host connected
#   nvmf-rs-rdma our nvmf-target over NVMe/RDMA (Soft-RoCE on the guest's rxe0, $NVMF_RDMA_ADDR), kernel host
#   nvmet-rdma   the kernel's nvmet-rdma exporting it, the kernel host connected over rxe0
#   tgtd         tgtd exporting it over iSCSI, open-iscsi (iscsid + iscsi_tcp) logged in
# Writes $NVMF_VM_LOGS/compare/<target>/<job>.json (fio's JSON) or <job>.err, and kernel (the guest's uname -r).
# Environment: COMPARE_RUNTIME (seconds per job), COMPARE_RAMP (empty: the job files' ramp), COMPARE_SIZE_MIB.
set -uo pipefail
. "$NVMF_GUEST_LIB"
runtime=${COMPARE_RUNTIME:-10}
ramp=${COMPARE_RAMP:-}
size=${COMPARE_SIZE_MIB:-1024}
out=$NVMF_VM_LOGS/compare
jobs_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nqn_ours=nqn.2024-01.io.nvmf-rs:compare-ours
nqn_kernel=nqn.2024-01.io.nvmf-rs:compare-nvmet
iqn=iqn.2024-01.io.nvmf-rs:compare
mkdir -p "$out"
uname -r > "$out/kernel"

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

dev=$(nullblk_create cmpnb0 "$size") || exit 1
run_jobs local "$dev"

# Kernel nvmet-tcp.
if nvmet_subsys "$nqn_kernel" "$dev" && nvmet_tcp_port 1 127.0.0.1 4420 "$nqn_kernel" &&
  remote=$(host_connect tcp 127.0.0.1 4420 "$nqn_kernel"); then
  run_jobs nvmet-tcp "$remote"
  host_disconnect "$nqn_kernel"
else
  echo "nvmet-tcp setup failed" > "$out/nvmet-tcp.skipped"
fi
# Kernel nvmet-rdma: the same subsystem on an RDMA port (rdma_cm needs the rxe0 address, not loopback).
if [ -n "${NVMF_RDMA_ADDR:-}" ] && nvmet_rdma_port 2 "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel" &&
  remote=$(host_connect rdma "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel"); then
  run_jobs nvmet-rdma "$remote"
  host_disconnect "$nqn_kernel"
else
  echo "nvmet-rdma setup failed (no rxe0?)" > "$out/nvmet-rdma.skipped"
fi
nvmet_teardown

# The ublk device `nvmf-host ublk` printed (empty until it did).
_ublk_device() { grep -m1 '^/dev/ublkb' "$(daemon_log ublk)"; }

# Ours.
cat > /tmp/compare-target.toml <<EOF
[logging]
level = "warn"
[[listener]]
address = "127.0.0.1"
port = 4421
[[listener]]
transport = "rdma"
address = "${NVMF_RDMA_ADDR:-10.77.0.1}"
port = 4421
[[subsystem]]
nqn = "$nqn_ours"
[[subsystem.namespace]]
path = "$dev"
EOF
if nvmf_target_start ours /tmp/compare-target.toml && remote=$(host_connect tcp 127.0.0.1 4421 "$nqn_ours"); then
  run_jobs nvmf-rs "$remote"
  host_disconnect "$nqn_ours"
  # Our host, as a user mounts a namespace: its ublk export with its defaults (one queue per CPU, pinned).
  if [ -n "${NVMF_HOST_BIN:-}" ] && modprobe ublk_drv; then
    start_daemon ublk "$NVMF_HOST_BIN" ublk -t tcp -a 127.0.0.1 -s 4421 -n "$nqn_ours"
    if wait_until 60 _ublk_device && [ -b "$(_ublk_device)" ]; then
      run_jobs nvmf-rs-ublk "$(_ublk_device)"
    else
      echo "nvmf-host ublk did not export the namespace (see ublk.log)" > "$out/nvmf-rs-ublk.skipped"
    fi
    stop_daemon ublk 30 || log "compare: nvmf-host ublk did not stop cleanly"
  else
    echo "no NVMF_HOST_BIN or no ublk_drv in the guest" > "$out/nvmf-rs-ublk.skipped"
  fi
  if [ -n "${NVMF_RDMA_ADDR:-}" ] && remote=$(host_connect rdma "$NVMF_RDMA_ADDR" 4421 "$nqn_ours"); then
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
stop_daemon ours

# tgtd + open-iscsi.
iscsi_disk() { iscsiadm -m session -P3 2>/dev/null | awk '/Attached scsi disk/ { print $4; exit }'; }
# sd_mod: nothing autoloads the SCSI disk driver in the guest, and without it the iSCSI LUN gets no /dev/sdX.
if command -v tgtd > /dev/null && command -v iscsiadm > /dev/null && modprobe iscsi_tcp && modprobe sd_mod; then
  mkdir -p /run/tgtd /var/lib/tgtd /run/lock/iscsi /etc/iscsi
  [ -s /etc/iscsi/initiatorname.iscsi ] || echo "InitiatorName=iqn.2024-01.io.nvmf-rs:guest" > /etc/iscsi/initiatorname.iscsi
  start_daemon tgtd tgtd -f --iscsi portal=127.0.0.1:3260
  wait_tcp_listen 3260
  tgtadm --lld iscsi --op new --mode target --tid 1 -T "$iqn" &&
    tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$dev" &&
    tgtadm --lld iscsi --op bind --mode target --tid 1 -I ALL || log "compare: tgtadm failed"
  # Its own session: iscsid signals its whole process group when it stops, which would end this script too.
  start_daemon iscsid setsid iscsid -f
  sleep 1
  if timeout 60 iscsiadm -m discovery -t sendtargets -p 127.0.0.1:3260 >&2 &&
    timeout 60 iscsiadm -m node -T "$iqn" -p 127.0.0.1:3260 --login >&2 &&
    wait_until 20 test -n "$(iscsi_disk)"; then
    disk=/dev/$(iscsi_disk)
    wait_until 10 test -b "$disk"
    log "compare: iSCSI disk $disk"
    run_jobs tgtd-iscsi "$disk"
    timeout 60 iscsiadm -m node -T "$iqn" -p 127.0.0.1:3260 --logout >&2
  else
    echo "open-iscsi login failed (see iscsid.log, tgtd.log)" > "$out/tgtd-iscsi.skipped"
  fi
  stop_daemon iscsid
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1
  tgtadm --lld iscsi --op delete --mode target --tid 1
  tgtadm --op delete --mode system
  stop_daemon tgtd || true
else
  echo "tgtd, iscsiadm or iscsi_tcp missing in the guest" > "$out/tgtd-iscsi.skipped"
fi
log "compare: done"
exit 0
