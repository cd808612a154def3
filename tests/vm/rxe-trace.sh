#!/usr/bin/env bash
# Where the time of a 128 KiB read over Soft-RoCE goes, in the test VM: our host (`nvmf-host perf`, one I/O queue)
# and the kernel host (nvme-rdma, fio io_uring) reading 128 KiB at QD 8 from the same kernel nvmet-rdma namespace,
# each run under the function_graph tracer limited to rxe's two task functions (`rxe_sender`: a QP's requester and
# completer; `rxe_receiver`: its responder). Prints, per run, IOPS and the time spent in each (outermost calls only,
# time scheduled out excluded) in total and per read, and that time as a share of the run.
# Why: host-bench.sh finds our host and the kernel's at par at 128 KiB over RDMA, the rounds scattering on both
# sides of 1.0x. If one QP's send task — the target's, which generates every RDMA WRITE packet (copy and ICRC) —
# is busy most of the run for either host, that serialised task is the ceiling both hosts meet.
#
#   tests/vm/rxe-trace.sh                      # build, boot one guest, 2 rounds of 10 s per host (~3 min)
#   TRACE_ROUNDS=3 TRACE_RUNTIME=20 tests/vm/rxe-trace.sh
#
# Under the tracer every traced call costs a little more, so compare the shares between the hosts, not the IOPS
# with host-bench's.
set -euo pipefail

if [ "${1:-}" != --guest ]; then
  cd "$(dirname "$0")/../.."
  target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
  cargo build --quiet --release -p nvmf-host --bin nvmf-host
  cargo build --quiet -p nvmf-tests --bin nvmf-vm
  logs=${TRACE_LOGS:-$target_dir/tmp/rxe-trace}
  rm -rf "$logs" && mkdir -p "$logs"
  env_args=(--env "NVMF_HOST_BIN=$target_dir/release/nvmf-host")
  for v in TRACE_ROUNDS TRACE_RUNTIME; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  "$target_dir/debug/nvmf-vm" --bare --rxe --modules nvmet,nvmet_rdma,nvme_rdma,null_blk --cpus 2 --deadline 900 \
    --logs "$logs" "${env_args[@]}" -- bash tests/vm/rxe-trace.sh --guest
  cat "$logs/rxe-trace.md"
  exit 0
fi

# ---- in the guest ----------------------------------------------------------------------------------------
[ -n "${NVMF_GUEST_LIB:-}" ] && . "$NVMF_GUEST_LIB"
: "${NVMF_HOST_BIN:?path of the nvmf-host binary}"
rounds=${TRACE_ROUNDS:-2}
runtime=${TRACE_RUNTIME:-10}
out=$NVMF_VM_LOGS/rxe-trace.md
T=/sys/kernel/tracing
mountpoint -q $T || mount -t tracefs nodev $T
nqn=nqn.2024-01.io.nvmf-rs:rxe-trace
dev=$(nullblk_create rxetrace 1024)
nvmet_subsys "$nqn" "$dev"
nvmet_rdma_port 2 "$NVMF_RDMA_ADDR" 4420 "$nqn"
kdev=$(host_connect rdma "$NVMF_RDMA_ADDR" 4420 "$nqn" -i 1)
# Every block written once, so reads cost null_blk the same whichever host reads first.
fio --name=fill --filename="$kdev" --ioengine=io_uring --direct=1 --rw=write --bs=1M --iodepth=4 > /dev/null
echo 65536 > $T/buffer_size_kb

trace_on() {
  echo 0 > $T/tracing_on
  echo nop > $T/current_tracer
  echo > $T/trace
  echo 'rxe_sender rxe_receiver' > $T/set_ftrace_filter
  echo function_graph > $T/current_tracer
  echo 0 > $T/options/sleep-time
  echo funcgraph-proc > $T/trace_options
  echo funcgraph-tail > $T/trace_options
  echo 1 > $T/tracing_on
}

# trace_off LABEL IOS: a table row from the trace: outermost calls only (two spaces after the duration column;
# a nested call is indented further), a leaf as "name();", a call with traced calls inside closing as "} /* name */".
trace_off() {
  local label=$1 ios=$2 lost
  echo 0 > $T/tracing_on
  cp $T/trace /tmp/trace.txt
  lost=$(grep -c LOST /tmp/trace.txt || true)
  echo nop > $T/current_tracer
  awk -F'|' -v label="$label" -v ios="$ios" -v secs="$runtime" -v lost="$lost" '
    $3 ~ /^  (rxe_|\} \/\* rxe_)/ {
      d = $2; gsub(/[^0-9.]/, "", d); if (d == "") next
      f = ($3 ~ /rxe_sender/) ? "sender" : "receiver"; t[f] += d
    }
    END {
      printf "| %s | %.0f | %.0f ms | %.0f µs | %.0f %% | %.0f ms | %.0f µs | %s |\n", label, ios / secs,
        t["sender"] / 1000, t["sender"] / ios, t["sender"] / 10000 / secs, t["receiver"] / 1000, t["receiver"] / ios, lost
    }' /tmp/trace.txt >> "$out"
}

{
  echo "| run | IOPS | rxe_sender | per read | of the run | rxe_receiver | per read | lost events |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$out"
for r in $(seq "$rounds"); do
  trace_on
  timeout $((runtime + 60)) "$NVMF_HOST_BIN" perf -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -n "$nqn" -c 1 -q 8 -o 131072 \
    -w read -T "$runtime" --json > "$NVMF_VM_LOGS/perf-r$r.json"
  trace_off "ours r$r" "$(jq -r .reads "$NVMF_VM_LOGS/perf-r$r.json")"
  trace_on
  timeout $((runtime + 60)) fio --name=k --filename="$kdev" --ioengine=io_uring --direct=1 --rw=read --bs=128k \
    --iodepth=8 --numjobs=1 --time_based --runtime="$runtime" --output-format=json > "$NVMF_VM_LOGS/fio-r$r.json"
  trace_off "kernel r$r" "$(jq -r .jobs[0].read.total_ios "$NVMF_VM_LOGS/fio-r$r.json")"
done
host_disconnect "$nqn"
cat "$out"
