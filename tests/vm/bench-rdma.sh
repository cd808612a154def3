#!/usr/bin/env bash
# NVMe/RDMA benchmark in the test VM: our target (nvmf-target, release build) against the kernel's nvmet-rdma,
# both exporting the same null_blk device (/dev/nullb0, no memory backing) over Soft-RoCE (rxe0, 10.77.0.1) to the
# same kernel host (nvme-rdma). fio (io_uring, O_DIRECT, --output-format=json): 4 KiB randread and randwrite at
# QD 32 and 128 KiB sequential read at QD 8. Prints a Markdown table (IOPS, MB/s, p99 completion latency, guest
# CPU %, and ours/kernel ratios). Not a test: under TCG absolute numbers mean little, the ratios are what to read.
#
#   tests/vm/bench-rdma.sh                       # build, boot one guest, run everything (~3 min)
#   BENCH_RUNTIME=20 BENCH_REACTORS="1 2" tests/vm/bench-rdma.sh
#
# Environment: BENCH_RUNTIME (seconds per fio run, default 10), BENCH_RAMP (2), BENCH_REACTORS (our reactor counts
# to try, default "2"), BENCH_CPUS (guest vCPUs, 2), BENCH_LOGS (logs folder, default <target dir>/tmp/bench-rdma).
# The table is also written to $BENCH_LOGS/bench.md, beside every fio JSON. `--guest` is the half that runs in the
# VM.
set -euo pipefail

if [ "${1:-}" != --guest ]; then
  cd "$(dirname "$0")/../.."
  target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
  echo "bench: building nvmf-target (release) and nvmf-vm" >&2
  cargo build --quiet --release -p nvmf-target --bin nvmf-target
  cargo build --quiet -p nvmf-tests --bin nvmf-vm
  logs=${BENCH_LOGS:-$target_dir/tmp/bench-rdma}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_TARGET_BIN=$target_dir/release/nvmf-target")
  for v in BENCH_RUNTIME BENCH_RAMP BENCH_REACTORS; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  "$target_dir/debug/nvmf-vm" --bare --rxe --modules nvmet,nvmet_rdma,nvme_rdma --cpus "${BENCH_CPUS:-2}" \
    --deadline 1200 --logs "$logs" "${env_args[@]}" -- bash tests/vm/bench-rdma.sh --guest
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in the guest ----------------------------------------------------------------------------------------
. "$NVMF_GUEST_LIB"
runtime=${BENCH_RUNTIME:-10}
ramp=${BENCH_RAMP:-2}
reactors=${BENCH_REACTORS:-2}
nqn_kernel=nqn.2024-01.io.nvmf-rs:bench-nvmet
nqn_ours=nqn.2024-01.io.nvmf-rs:bench-ours
table=$NVMF_VM_LOGS/bench.md

# Pure null_blk: no memory backing, completions inline, so the storage costs next to nothing.
modprobe null_blk nr_devices=1 gb=1 bs=512 queue_mode=2 irqmode=0 submit_queues="$(nproc)" hw_queue_depth=256
wait_until 10 test -b /dev/nullb0 || { fail "no /dev/nullb0"; exit 1; }

# The workloads: name, fio --rw, block size, queue depth.
workloads=("randread randread 4k 32" "randwrite randwrite 4k 32" "seqread read 128k 8")

_cpu_jiffies() { local _c u n s i w q sq st; read -r _c u n s i w q sq st _ < /proc/stat; echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"; }

# run_fio LABEL DEV WORKLOAD: one fio run; appends a table row and keeps "IOPS MBPS" for the ratios.
run_fio() {
  local label=$1 dev=$2 name rw bs qd out dir b0 t0 b1 t1 iops mbps p99 guest
  read -r name rw bs qd <<< "$3"
  dir=read
  [ "$rw" = randwrite ] && dir=write
  out=$NVMF_VM_LOGS/fio-${label// /_}-$name.json
  read -r b0 t0 <<< "$(_cpu_jiffies)"
  timeout $((runtime + ramp + 60)) fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 \
    --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs=1 --time_based --runtime="$runtime" --ramp_time="$ramp" \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio $label $name"; return 1; }
  read -r b1 t1 <<< "$(_cpu_jiffies)"
  iops=$(jq -r ".jobs[0].$dir.iops | floor" "$out")
  mbps=$(jq -r ".jobs[0].$dir.bw_bytes / 1000000 | floor" "$out")
  p99=$(jq -r ".jobs[0].$dir.clat_ns.percentile[\"99.000000\"] / 1000 | floor" "$out")
  guest=$(((b1 - b0) * 100 / (t1 - t0)))
  echo "| $label | $bs $rw QD$qd | $iops | $mbps | $p99 | $guest |" >> "$table"
  log "$label $name: $iops IOPS, $mbps MB/s, p99 $p99 µs, guest CPU $guest %"
  echo "$iops $mbps $p99" > "$NVMF_VM_LOGS/result-${label// /_}-$name"
}

{
  echo "| target | workload | IOPS | MB/s | p99 (µs) | guest CPU % |"
  echo "|---|---|---:|---:|---:|---:|"
} > "$table"

# Kernel nvmet-rdma.
nvmet_subsys "$nqn_kernel" /dev/nullb0
nvmet_rdma_port 1 "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel"
dev=$(host_connect rdma "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel")
for w in "${workloads[@]}"; do run_fio nvmet-rdma "$dev" "$w"; done
host_disconnect "$nqn_kernel"
nvmet_teardown

# Ours, with each reactor count.
for r in $reactors; do
  config=/tmp/bench-$r.toml
  cat > "$config" <<EOF
[reactors]
threads = $r
[logging]
level = "warn"
[[listener]]
transport = "rdma"
address = "$NVMF_RDMA_ADDR"
port = 4421
[[subsystem]]
nqn = "$nqn_ours"
[[subsystem.namespace]]
path = "/dev/nullb0"
EOF
  nvmf_target_start "ours-$r" "$config"
  dev=$(host_connect rdma "$NVMF_RDMA_ADDR" 4421 "$nqn_ours")
  for w in "${workloads[@]}"; do run_fio "nvmf-rs ($r reactors)" "$dev" "$w"; done
  host_disconnect "$nqn_ours"
  stop_daemon "ours-$r"
done

# Ratios against nvmet-rdma (IOPS; p99 as kernel/ours, so above 100 % is better for us too).
{
  echo
  echo "| ours / nvmet-rdma | workload | IOPS | p99 latency (kernel / ours) |"
  echo "|---|---|---:|---:|"
  for w in "${workloads[@]}"; do
    read -r name _ <<< "$w"
    read -r ki _ kp < "$NVMF_VM_LOGS/result-nvmet-rdma-$name"
    for r in $reactors; do
      read -r oi _ op < "$NVMF_VM_LOGS/result-nvmf-rs_(${r}_reactors)-$name"
      echo "| nvmf-rs ($r reactors) | $name | $((oi * 100 / (ki > 0 ? ki : 1))) % | $((kp * 100 / (op > 0 ? op : 1))) % |"
    done
  done
  echo
  echo "Guest: $(nproc) vCPUs (QEMU TCG), kernel $(uname -r), Soft-RoCE rxe0, null_blk irqmode=0, fio io_uring direct, ${runtime} s per run after ${ramp} s ramp."
} >> "$table"
cat "$table"
