#!/usr/bin/env bash
# NVMe/TCP over TLS 1.3 (PSK, records in kTLS) against plaintext on the same target: our nvmf-target (release) on
# node target with two listeners on its link address, 4420 plaintext and 4421 `tls = "required"`, exporting our
# null backend (no storage cost: the transport is what differs); on node host `nvmf-host perf` (release) alternates
# plaintext and TLS runs of each workload, round after round, so a slowdown of the guests hits both alike.
# Workloads: 4 KiB randread QD32 and 128 KiB read QD8 (SPDK perf's letters: -q depth, -o size), on one I/O queue
# and on one per host vCPU. Prints a Markdown table (IOPS, MiB/s, mean latency, the target node's CPU %) and each
# workload's TLS/plaintext ratio of the rounds' means; its footer says the mode, vCPUs, kernels and date.
# Not a test: TCG makes absolute numbers meaningless, the ratios are what to read.
#
#   tests/vm/bench-tls.sh                        # build, boot two nodes, run everything
#   tests/vm/bench-tls.sh --one-guest            # the same in one 2-vCPU guest over loopback
#   BENCH_ROUNDS=3 BENCH_RUNTIME=10 BENCH_NODE_CPUS=2 tests/vm/bench-tls.sh
#
# Environment: BENCH_NODES (2, or 1), BENCH_KERNEL (backports, the default, or lts), BENCH_NODE_CPUS (vCPUs per
# node, 1), BENCH_CPUS (one guest's vCPUs, 2), BENCH_RUNTIME (seconds per run, 10), BENCH_ROUNDS (2),
# BENCH_SOCKET_IO (the target's `[reactors] socket_io`, epoll), BENCH_LOGS (default <target dir>/tmp/bench-tls).
# `--guest` is the half that runs on node host; `--lib` (sourced) defines the target side's functions.
#
# Guest CPU: QEMU `-cpu max,-erms` unless NVMF_VM_CPU says otherwise (docs/benchmarks.md, "The guest CPU: no ERMS").
set -euo pipefail

if [ "${1:-}" = --one-guest ]; then
  export BENCH_NODES=1
  shift
fi
if [ "${1:-}" != --guest ] && [ "${1:-}" != --lib ]; then
  cd "$(dirname "$0")/../.."
  target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
  echo "bench: building nvmf-target and nvmf-host (release) and nvmf-vm" >&2
  cargo build --quiet --release -p nvmf-target --bin nvmf-target -p nvmf-host --bin nvmf-host
  cargo build --quiet -p nvmf-tests --bin nvmf-vm
  logs=${BENCH_LOGS:-$target_dir/tmp/bench-tls}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_TARGET_BIN=$target_dir/release/nvmf-target" --env "NVMF_HOST_BIN=$target_dir/release/nvmf-host")
  for v in BENCH_RUNTIME BENCH_ROUNDS BENCH_SOCKET_IO; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  . tests/vm/bench-lib.sh
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  bench_boot "$logs" tests/vm/bench-tls.sh 3600 --bare --modules tls "${env_args[@]}"
  echo "QEMU \`-cpu $NVMF_VM_CPU\`. Host machine load average right after the run (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)." |
    tee -a "$logs/bench.md"
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in a guest ------------------------------------------------------------------------------------------
[ "${1:-}" = --lib ] || [ -z "${NVMF_GUEST_LIB:-}" ] || . "$NVMF_GUEST_LIB"
bench_dir=.
[[ ${BASH_SOURCE[0]} != */* ]] || bench_dir=${BASH_SOURCE[0]%/*}
[[ $bench_dir = /* ]] || bench_dir=$PWD/$bench_dir
. "$bench_dir/bench-lib.sh"
nqn=nqn.2024-01.io.nvmf-rs:bench-tls
hostnqn=nqn.2024-01.io.nvmf-rs:bench-tls-host
# 32 bytes 0x40..0x5f, hash 01 (SHA-256): TLS_AES_128_GCM_SHA256, as the kernel's default keys.
key='NVMeTLSkey-1:01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:'

# --- the target side (on_target jobs) ---

# target_up: our target on the link address, one reactor per vCPU; prints its pid.
target_up() {
  local addr
  addr=$(bench_addr tcp)
  cat > /tmp/bench-tls.toml <<EOF
[reactors]
threads = $(nproc)
socket_io = "${BENCH_SOCKET_IO:-epoll}"
[logging]
level = "warn"
[[listener]]
address = "$addr"
port = 4420
[[listener]]
address = "$addr"
port = 4421
tls = "required"
[[subsystem]]
nqn = "$nqn"
[[subsystem.host]]
nqn = "$hostnqn"
tls_key = "$key"
[[subsystem.namespace]]
null = "1TiB"
EOF
  nvmf_target_start bench-tls /tmp/bench-tls.toml
  nvmf_target_pid bench-tls
}

[ "${1:-}" = --lib ] && return 0

# --- the host side ---
: "${NVMF_HOST_BIN:?path of the nvmf-host binary}"
runtime=${BENCH_RUNTIME:-10}
rounds=${BENCH_ROUNDS:-2}
table=$NVMF_VM_LOGS/bench.md
addr=$(bench_addr tcp)
pid=$(on_target ". $bench_dir/bench-tls.sh --lib; target_up" | tail -1)
host_cpus=$(nproc)
bench_sampler_start

# run MODE QUEUES SIZE DEPTH WORKLOAD: one perf run; prints "IOPS MIB_S MEAN_US CPU%".
run() {
  local mode=$1 queues=$2 size=$3 depth=$4 workload=$5 port=4420 tls=() out s0 s1
  [ "$mode" = tls ] && port=4421 tls=(--tls-key "$key")
  out=$NVMF_VM_LOGS/perf-$mode-$queues-$size-$workload.txt
  s0=$(cpu_snap "$pid")
  timeout $((runtime + 60)) "$NVMF_HOST_BIN" perf -t tcp -a "$addr" -s $port -n "$nqn" --hostnqn "$hostnqn" \
    -c "$queues" -q "$depth" -o "$size" -w "$workload" -T "$runtime" "${tls[@]}" > "$out" 2>&1 ||
    { cat "$out" >&2; return 1; }
  s1=$(cpu_snap "$pid")
  sed -n 's/^Total *: *\([0-9.]*\) *\([0-9.]*\) *\([0-9.]*\).*/\1 \2 \3/p' "$out" | tr '\n' ' '
  cpu_pct "$s0" "$s1" | awk '{ print $1 }'
}

workloads=("1 4096 32 randread" "1 131072 8 read")
((host_cpus > 1)) && workloads+=("$host_cpus 4096 32 randread" "$host_cpus 131072 8 read")
declare -A sum
{
  echo "| workload | I/O queues | mode | IOPS | MiB/s | mean latency (µs) | target node CPU % |"
  echo "|---|---:|---|---:|---:|---:|---:|"
} > "$table"
for r in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    set -- $w
    for mode in plaintext tls; do
      read -r iops mib lat cpu <<< "$(run $mode "$@")"
      echo "| $4 $(( $2 / 1024 )) KiB QD$3 | $1 | $mode | $iops | $mib | $lat | $cpu |" >> "$table"
      sum["$w $mode"]=$(awk -v a="${sum["$w $mode"]:-0}" -v b="$iops" 'BEGIN { print a + b }')
    done
  done
done
bench_sampler_stop
{
  echo
  echo "TLS / plaintext, IOPS means over $rounds round(s):"
  echo
  for w in "${workloads[@]}"; do
    set -- $w
    echo "- $4 $(( $2 / 1024 )) KiB QD$3, $1 I/O queue(s): $(awk -v t="${sum["$w tls"]}" -v p="${sum["$w plaintext"]}" 'BEGIN { printf "%.2fx", t / p }')"
  done
  echo
  echo "$(bench_setting) Our target: \`socket_io = \"${BENCH_SOCKET_IO:-epoll}\"\`, null backend; host: \`nvmf-host perf\`, $runtime s per run."
} >> "$table"
cat "$table"
on_target 'stop_daemon bench-tls' || true
