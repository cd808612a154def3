#!/usr/bin/env bash
# Host benchmark in the test VM: our host (`nvmf-host perf`, one I/O queue) vs the kernel's host (nvme-tcp /
# nvme-rdma connected with one I/O queue, fio io_uring direct on its /dev/nvmeXnY) against the same kernel target
# namespace (nvmet-tcp and nvmet-rdma, one memory-backed null_blk): 4 KiB randread and randwrite at QD 32 and
# 128 KiB sequential read at QD 8, BENCH_RUNTIME seconds each, no ramp on either side; BENCH_ROUNDS rounds in which
# each workload runs on both hosts back to back (ours first in odd rounds, the kernel's in even ones), the table
# giving the rounds' means and each round's ratio. The namespace is written whole before the first run.
# By default on two lab nodes joined by a virtio-net link (tests/vm/bench-lib.sh): node target runs nvmet and the
# null_blk, node host both hosts (and the exports), TCP and RDMA (rxe0 on each node's eth0, MTU 1500) over the
# link; `--one-guest` (or BENCH_NODES=1) runs the old mode, all in one guest, TCP over 127.0.0.1 and RDMA over rxe0
# on dummy0.
# perf runs with its default placement, the worker pinned to the first CPU, as the kernel host keeps its queue's
# work on the queue's io_cpu (docs/benchmarks.md, "Why perf pins its workers").
# Latency is submission to completion on both sides (perf's latency_us, fio's lat_ns with --lat_percentiles).
# Prints a Markdown table (IOPS, MiB/s, p99, busy CPU time per I/O: on two nodes the host node's and the target
# node's, in one guest the guest's, both sides together; ours/kernel) and the host machine's load average after
# the run; its footer says the mode, vCPUs, kernels and date. Not a test: under TCG absolute numbers mean little;
# compare ratios from one run.
#
#   tests/vm/host-bench.sh                      # build nvmf-host (release), boot two nodes, run everything
#   tests/vm/host-bench.sh --one-guest          # the same in one 2-vCPU guest
#   BENCH_RUNTIME=20 BENCH_ROUNDS=3 BENCH_TRANSPORTS=tcp tests/vm/host-bench.sh
#   RDMA_HOST_BENCH=1 NVMF_VM=1 cargo test --release -p nvmf-tests --test vm_host_rdma_lib -- --nocapture
#                                               # the opt-in hook: in that scenario's guest (one guest), with the
#                                               # test's profile
#
# Environment: BENCH_NODES (2, or 1: one guest), BENCH_KERNEL (the guests' kernel, nvmf-vm --kernel: backports
# (the newest Linux of trixie-backports, the default), lts (6.12) or X.Y), BENCH_NODE_CPUS (vCPUs per node, 1),
# BENCH_CPUS (the one guest's vCPUs, 2), BENCH_RUNTIME (seconds per run, default 10), BENCH_ROUNDS (1),
# BENCH_TRANSPORTS ("tcp rdma"), BENCH_LOGS (logs folder, default <target dir>/tmp/host-bench; two nodes: a
# folder per node in it). The table is also written to $BENCH_LOGS/bench.md, beside every perf and fio JSON.
# `--guest` is the half that runs on node host or in the one guest (it needs NVMF_HOST_BIN); `--lib` (sourced)
# defines the target side's functions for its on_target jobs. BENCH_BASELINE_BIN (an older nvmf-host binary): its
# perf runs too, on the same node, as rows "<transport> baseline". BENCH_PROFILE=1: after the table, each of our
# runs twice more, under `/usr/bin/time`
# (voluntary/involuntary context switches, user/system CPU µs per I/O) and under `strace -c -f` (syscalls per I/O,
# total and the most frequent; strace slows the run, so compare these between builds, not with the table):
# $BENCH_LOGS/profile.md. BENCH_DISABLE_SQFLOW=1: both hosts connect with SQ flow control disabled (nvme connect
# --disable-sqflow, perf --disable-sqflow; over TCP nvmet then ends successful reads without a response capsule).
# BENCH_EXPORT (a list: ublk, nbd): our host also serves the namespace as /dev/ublkbN (`nvmf-host ublk`, one I/O
# queue, its default placement) and/or, through the kernel's nbd driver, as /dev/nbd0 (`nvmf-host nbd` on a unix
# socket, one I/O queue; `nbd-client` with one connection, 4 KiB blocks) and fio runs on each as on the kernel
# host's device: rows "<transport> ublk" / "<transport> nbd" (and "... baseline" with BENCH_BASELINE_BIN);
# BENCH_UBLK_ARGS adds flags to both ublk exports (e.g. `--cpus none`). With
# BENCH_PROFILE=1 each export then runs each workload twice more: once to sample its threads from /proc (context
# switches and user + system CPU per I/O of the ublk queue thread and the NVMe I/O queue's thread), once under
# `strace -c -f` (the daemon's syscalls per I/O): $BENCH_LOGS/export-profile.md.
#
# Guest CPU: QEMU `-cpu max,-erms` unless NVMF_VM_CPU says otherwise: TCG's slow `rep movsb` would otherwise charge
# every user-space copy ten times a kernel one (docs/benchmarks.md, "The guest CPU: no ERMS").
set -euo pipefail

if [ "${1:-}" = --one-guest ]; then
  export BENCH_NODES=1
  shift
fi
if [ "${1:-}" != --guest ] && [ "${1:-}" != --lib ]; then
  cd "$(dirname "$0")/../.."
  target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
  echo "bench: building nvmf-host (release) and nvmf-vm" >&2
  cargo build --quiet --release -p nvmf-host --bin nvmf-host
  cargo build --quiet -p nvmf-tests --bin nvmf-vm
  logs=${BENCH_LOGS:-$target_dir/tmp/host-bench}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_HOST_BIN=$target_dir/release/nvmf-host")
  for v in BENCH_RUNTIME BENCH_ROUNDS BENCH_TRANSPORTS BENCH_BASELINE_BIN BENCH_PROFILE BENCH_DISABLE_SQFLOW \
    BENCH_EXPORT BENCH_UBLK_ARGS; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  . tests/vm/bench-lib.sh
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  bench_boot "$logs" tests/vm/host-bench.sh 1800 --bare --rxe \
    --modules nvmet,nvmet_tcp,nvmet_rdma,nvme_tcp,nvme_rdma,null_blk,ublk_drv,nbd "${env_args[@]}"
  # Right after the run: the 1- and 5-minute averages cover it (the guest's own vCPU threads count, about 2).
  [ "${BENCH_DISABLE_SQFLOW:-0}" = 1 ] && echo "Both hosts connected with --disable-sqflow." | tee -a "$logs/bench.md"
  echo "QEMU \`-cpu $NVMF_VM_CPU\`. Host machine load average right after the run (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)." |
    tee -a "$logs/bench.md"
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in a guest ------------------------------------------------------------------------------------------
[ "${1:-}" = --lib ] || [ -z "${NVMF_GUEST_LIB:-}" ] || . "$NVMF_GUEST_LIB"
# No exec for this: target jobs source the file each time.
bench_dir=.
[[ ${BASH_SOURCE[0]} != */* ]] || bench_dir=${BASH_SOURCE[0]%/*}
[[ $bench_dir = /* ]] || bench_dir=$PWD/$bench_dir
. "$bench_dir/bench-lib.sh"
transports=${BENCH_TRANSPORTS:-tcp rdma}
nqn=nqn.2024-01.io.nvmf-rs:host-bench

# --- the target side (on_target jobs) ---

# target_up: nvmet exporting a 1 GiB memory-backed null_blk (written whole before the first run, below) on a port
# per transport, on the target's address.
target_up() {
  local dev t
  dev=$(nullblk_create hostbench 1024)
  nvmet_subsys "$nqn" "$dev"
  for t in $transports; do
    case $t in
      tcp) nvmet_tcp_port 1 "$(bench_addr tcp)" 4420 "$nqn" ;;
      rdma) nvmet_rdma_port 2 "$(bench_addr rdma)" 4420 "$nqn" ;;
      *) fail "BENCH_TRANSPORTS: unknown transport $t"; return 1 ;;
    esac
  done
}

[ "${1:-}" = --lib ] && return 0

# --- the host side ---
: "${NVMF_HOST_BIN:?path of the nvmf-host binary}"
runtime=${BENCH_RUNTIME:-10}
rounds=${BENCH_ROUNDS:-1}
table=$NVMF_VM_LOGS/bench.md
# Connect flags both hosts get (nvme-cli and perf spell them alike).
sqflow=()
[ "${BENCH_DISABLE_SQFLOW:-0}" = 1 ] && sqflow=(--disable-sqflow)

# The workloads: name, fio --rw, perf -w, block size in bytes, queue depth.
workloads=("randread randread randread 4096 32" "randwrite randwrite randwrite 4096 32" "seqread read read 131072 8")

# The nodes' busy CPU jiffies between two cpu_snap snapshots, in µs: "HOST TARGET" (one guest: the guest's twice).
_busy_us() {
  local a b hz
  read -r -a a <<< "$1"
  read -r -a b <<< "$2"
  hz=$(getconf CLK_TCK)
  echo "$(((b[4] - a[4]) * 1000000 / hz)) $(((b[0] - a[0]) * 1000000 / hz))"
}

# ours TRTYPE ADDR PORT WORKLOAD [BIN [TAG [WRAPPER...]]] -> "IOPS MIBS P99_US HOST_US TARGET_US" (the host node's
# and the target node's busy CPU per I/O; in one guest both are the guest's, both sides together), perf's JSON kept.
ours() {
  local trtype=$1 addr=$2 port=$3 name pw bs qd out bin=${5:-$NVMF_HOST_BIN} tag=${6:-} s0 s1 h t
  read -r name _ pw bs qd <<< "$4"
  out=$NVMF_VM_LOGS/perf-$trtype-$name$tag.json
  s0=$(cpu_snap)
  timeout $((runtime + 60)) "${@:7}" "$bin" perf -t "$trtype" -a "$addr" -s "$port" -n "$nqn" -c 1 -q "$qd" \
    -o "$bs" -w "$pw" -T "$runtime" "${sqflow[@]}" --json > "$out" 2> "$out.err" ||
    { cat "$out.err" >&2; fail "nvmf-host perf -t $trtype $name"; return 1; }
  s1=$(cpu_snap)
  read -r h t <<< "$(_busy_us "$s0" "$s1")"
  jq -r --argjson h "$h" --argjson t "$t" \
    '"\(.iops | floor) \(.mib_per_s * 10 | floor / 10) \(.latency_us.p99 | floor) \($h / (.reads + .writes) | floor) \($t / (.reads + .writes) | floor)"' "$out"
}

# kernel TRTYPE DEV WORKLOAD [TAG] -> "IOPS MIBS P99_US HOST_US TARGET_US", fio's JSON kept.
kernel() {
  local trtype=$1 dev=$2 name rw bs qd dir=read out s0 s1 h t
  read -r name rw _ bs qd <<< "$3"
  [ "$rw" = randwrite ] && dir=write
  out=$NVMF_VM_LOGS/fio-$trtype-$name${4:-}.json
  s0=$(cpu_snap)
  timeout $((runtime + 60)) fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 --rw="$rw" \
    --bs="$bs" --iodepth="$qd" --numjobs=1 --time_based --runtime="$runtime" --lat_percentiles=1 \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio -t $trtype $name"; return 1; }
  s1=$(cpu_snap)
  read -r h t <<< "$(_busy_us "$s0" "$s1")"
  jq -r --argjson h "$h" --argjson t "$t" \
    ".jobs[0].$dir | \"\(.iops | floor) \(.bw_bytes / 104857.6 | floor / 10) \(.lat_ns.percentile[\"99.000000\"] / 1000 | floor) \(\$h / .total_ios | floor) \(\$t / .total_ios | floor)\"" "$out"
}

# ublk_export VAR NAME BIN TRTYPE ADDR: VAR := the /dev/ublkbN that `BIN ublk` (daemon NAME) serves the namespace
# as (not echoed: the daemon must be a child of this shell, not of a command substitution, for stop_daemon).
ublk_export() {
  local name=$2 bin=$3 log
  log=$(daemon_log "$name")
  # shellcheck disable=SC2086 # BENCH_UBLK_ARGS is a list of flags
  start_daemon "$name" "$bin" ublk -t "$4" -a "$5" -s 4420 -n "$nqn" -i 1 "${sqflow[@]}" ${BENCH_UBLK_ARGS:-}
  wait_until 60 _ublk_ready "$log" || { cat "$log" >&2; fail "$name: no ublk device"; return 1; }
  printf -v "$1" '%s' "$(grep -m1 '^/dev/ublkb' "$log")"
}
_ublk_ready() { local d; d=$(grep -m1 '^/dev/ublkb' "$1") && [ -b "$d" ]; }

# nbd_export VAR NAME BIN TRTYPE ADDR DEV: VAR := DEV (/dev/nbdN), which the kernel's nbd driver serves from
# `BIN nbd` (daemon NAME) over a unix socket, one connection.
nbd_export() {
  local name=$2 bin=$3 sock=/tmp/$2.sock
  start_daemon "$name" "$bin" nbd -t "$4" -a "$5" -s 4420 -n "$nqn" -i 1 "${sqflow[@]}" --listen "unix:$sock"
  daemon_ready "$name" 'exported at'
  nbd-client -u "$sock" -b 4096 "$6" >&2 || { fail "$name: nbd-client"; return 1; }
  printf -v "$1" '%s' "$6"
}
_nbd_stop() { nbd-client -d "$1" >&2 || true; stop_daemon "$2" 30; }

# _threads PID: one line per thread of PID: its name, voluntary and involuntary context switches, CPU ticks (user +
# system).
_threads() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "$(cat "$t/comm") $(awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
      END { print v, n }' "$t/status") $(sed 's/.*) //' "$t/stat" | awk '{ print $12 + $13 }')"
  done
}

# export_profile LABEL DAEMON DEV WORKLOAD -> export-profile.md rows: per thread of the export DAEMON serving DEV
# (ublk queue, NVMe I/O queue) context switches and CPU per I/O over one fio run, then the daemon's syscalls per I/O
# over a second run under strace (which slows it), the total and the four most frequent.
export_profile() {
  local label=$1 pid name ios st sp
  pid=$(cat "/run/nvmf-daemons/$2.pid")
  read -r name _ <<< "$4"
  _threads "$pid" > "$NVMF_VM_LOGS/threads-$2-$name.before"
  kernel "$t" "$3" "$4" "-profile-$2" > /dev/null
  _threads "$pid" > "$NVMF_VM_LOGS/threads-$2-$name.after"
  ios=$(jq '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$NVMF_VM_LOGS/fio-$t-$name-profile-$2.json")
  awk -v n="$ios" -v hz="$(getconf CLK_TCK)" -v l="$label $name" '
    NR == FNR { v[$1] = $2; i[$1] = $3; c[$1] = $4; next }
    $1 ~ /^(ublk|nvmf-q|nbd-[0-9])/ {
      printf "| %s | %s | %.2f | %.2f | %.1f | |\n", l, $1, ($2 - v[$1]) / n, ($3 - i[$1]) / n, ($4 - c[$1]) * 1e6 / hz / n
    }' "$NVMF_VM_LOGS/threads-$2-$name.before" "$NVMF_VM_LOGS/threads-$2-$name.after"
  st=$NVMF_VM_LOGS/strace-$2-$name.txt
  strace -c -f -p "$pid" -o "$st" 2> /dev/null &
  sp=$!
  sleep 1
  kernel "$t" "$3" "$4" "-strace-$2" > /dev/null
  kill -INT "$sp"
  wait "$sp" || true
  ios=$(jq '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$NVMF_VM_LOGS/fio-$t-$name-strace-$2.json")
  awk -v n="$ios" -v l="$label $name" '$NF == "total" { printf "| %s | all (strace) | | | | %.2f |\n", l, $4 / n }' "$st"
  grep -E '^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+' "$st" | grep -v ' total$' | sort -k4 -nr | head -4 |
    awk -v n="$ios" '{ printf "|   | %s | | | | %.2f |\n", $NF, $4 / n }'
}

# row TRANSPORT LABEL WORKLOAD OURS_RUNS KERNEL_RUNS: a table row of the rounds' means ("IOPS MIBS P99 HOST_US
# TARGET_US" per run, one run per line; TARGET_US only on two nodes) and the ratio of the mean IOPS, then the
# per-round ratios.
row() {
  local bs qd name two=0
  read -r name _ _ bs qd <<< "$3"
  bench_two_nodes && two=1
  paste -d' ' <(echo "$4") <(echo "$5") | awk -v t="$2" -v w="$((bs / 1024)) KiB $name QD$qd" -v two=$two '
    { for (i = 1; i <= 10; i++) s[i] += $i; r = r sep sprintf("%.2f", ($6 > 0 ? $1 / $6 : 0)); sep = " · "; n++ }
    END {
      for (i = 1; i <= 10; i++) m[i] = s[i] / n
      cpu = sprintf("%.0f | %.0f", m[4], m[9])
      if (two) cpu = cpu sprintf(" | %.0f | %.0f", m[5], m[10])
      printf "| %s | %s | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %s | %.2fx | %s |\n",
        t, w, m[1], m[6], m[2], m[7], m[3], m[8], cpu, (m[6] > 0 ? m[1] / m[6] : 0), r
    }'
}

{
  if bench_two_nodes; then
    cpu="ours host node CPU µs/I/O | kernel host node CPU µs/I/O | ours target node CPU µs/I/O | kernel target node CPU µs/I/O"
    align="---:|---:|---:|---:"
  else
    cpu="ours guest CPU µs/I/O | kernel guest CPU µs/I/O"
    align="---:|---:"
  fi
  echo "| transport | workload | ours IOPS | kernel IOPS | ours MiB/s | kernel MiB/s | ours p99 µs | kernel p99 µs | $cpu | ours/kernel IOPS | per round |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|$align|---:|---|"
} > "$table"

bench_sampler_start
on_target ". $bench_dir/host-bench.sh --lib; target_up"

# Per transport the kernel host connects once; then, round after round, each workload runs on both hosts back to
# back, so a slowdown of the guest (other work on this machine) hits both alike.
for t in $transports; do
  addr=$(bench_addr "$t")
  kdev=$(host_connect "$t" "$addr" 4420 "$nqn" -i 1 "${sqflow[@]}")
  if [ -z "${filled:-}" ]; then
    # Every block written once, so every read costs the target alike (null_blk answers unwritten blocks with a
    # memset, written ones with a copy) whichever host reads first.
    fio --name=fill --filename="$kdev" --ioengine=io_uring --direct=1 --rw=write --bs=1M --iodepth=4 > /dev/null
    filled=1
  fi
  udev='' bdev='' ndev='' nbdev=''
  case " ${BENCH_EXPORT:-} " in *" ublk "*)
    ublk_export udev "ublk-$t" "$NVMF_HOST_BIN" "$t" "$addr"
    [ -n "${BENCH_BASELINE_BIN:-}" ] && ublk_export bdev "ublk-$t-baseline" "$BENCH_BASELINE_BIN" "$t" "$addr"
  esac
  case " ${BENCH_EXPORT:-} " in *" nbd "*)
    nbd_export ndev "nbd-$t" "$NVMF_HOST_BIN" "$t" "$addr" /dev/nbd0
    [ -n "${BENCH_BASELINE_BIN:-}" ] && nbd_export nbdev "nbd-$t-baseline" "$BENCH_BASELINE_BIN" "$t" "$addr" /dev/nbd1
  esac
  declare -A o=() b=() k=() u=() ub=() n=() nb=()
  if [ "${BENCH_PROFILE:-0}" = 1 ] && [ -n "$udev$ndev" ] && [ ! -f "$NVMF_VM_LOGS/export-profile.md" ]; then
    {
      echo "| run | thread | voluntary ctxsw/I/O | involuntary ctxsw/I/O | CPU µs/I/O | syscalls/I/O |"
      echo "|---|---|---:|---:|---:|---:|"
    } > "$NVMF_VM_LOGS/export-profile.md"
  fi
  # record RUNS LABEL CMD...: run CMD (workload $w, round $r), add its result line to RUNS[$w] and log it.
  record() {
    local -n runs=$1
    local label=$2 res
    shift 2
    res=$("$@")
    runs[$w]+=$res$'\n'
    log "round $r $label $t ${w%% *}: $res"
  }
  for r in $(seq "$rounds"); do
    for w in "${workloads[@]}"; do
      # Odd rounds run our host first, even rounds the kernel's: a warm-up or a drift favours neither.
      if ((r % 2 == 0)); then
        record k kernel kernel "$t" "$kdev" "$w" "-r$r"
      fi
      record o ours ours "$t" "$addr" 4420 "$w" "$NVMF_HOST_BIN" "-r$r"
      if [ -n "${BENCH_BASELINE_BIN:-}" ]; then
        record b baseline ours "$t" "$addr" 4420 "$w" "$BENCH_BASELINE_BIN" "-baseline-r$r"
      fi
      [ -n "$udev" ] && record u ublk kernel "$t" "$udev" "$w" "-ublk-r$r"
      [ -n "$bdev" ] && record ub ublk-baseline kernel "$t" "$bdev" "$w" "-ublk-baseline-r$r"
      [ -n "$ndev" ] && record n nbd kernel "$t" "$ndev" "$w" "-nbd-r$r"
      [ -n "$nbdev" ] && record nb nbd-baseline kernel "$t" "$nbdev" "$w" "-nbd-baseline-r$r"
      if ((r % 2 == 1)); then
        record k kernel kernel "$t" "$kdev" "$w" "-r$r"
      fi
    done
  done
  for w in "${workloads[@]}"; do
    row "$t" "$t" "$w" "${o[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
    [ -n "${b[$w]:-}" ] && row "$t" "$t baseline" "$w" "${b[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
    [ -n "${u[$w]:-}" ] && row "$t" "$t ublk" "$w" "${u[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
    [ -n "${ub[$w]:-}" ] && row "$t" "$t ublk baseline" "$w" "${ub[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
    [ -n "${n[$w]:-}" ] && row "$t" "$t nbd" "$w" "${n[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
    [ -n "${nb[$w]:-}" ] && row "$t" "$t nbd baseline" "$w" "${nb[$w]%$'\n'}" "${k[$w]%$'\n'}" >> "$table"
  done
  if [ "${BENCH_PROFILE:-0}" = 1 ] && [ -n "$udev$ndev" ]; then
    for w in "${workloads[@]}"; do
      [ -n "$udev" ] && export_profile "$t ublk" "ublk-$t" "$udev" "$w" >> "$NVMF_VM_LOGS/export-profile.md"
      [ -n "$ndev" ] && export_profile "$t nbd" "nbd-$t" "$ndev" "$w" >> "$NVMF_VM_LOGS/export-profile.md"
      [ -n "$bdev" ] && export_profile "$t ublk baseline" "ublk-$t-baseline" "$bdev" "$w" >> "$NVMF_VM_LOGS/export-profile.md"
    done
  fi
  [ -n "$udev" ] && stop_daemon "ublk-$t" 30
  [ -n "$bdev" ] && stop_daemon "ublk-$t-baseline" 30
  [ -n "$ndev" ] && _nbd_stop "$ndev" "nbd-$t"
  [ -n "$nbdev" ] && _nbd_stop "$nbdev" "nbd-$t-baseline"
  host_disconnect "$nqn"
  unset o b k u ub n nb
done

# profile TRTYPE ADDR WORKLOAD BIN TAG -> profile.md rows: context switches and user/system CPU µs per I/O (a run
# under /usr/bin/time), then syscalls per I/O, the total and the six most frequent (a run under strace -c -f, which
# slows it).
profile() {
  local name st tm ios calls vol invol user sys
  read -r name _ <<< "$3"
  st=$NVMF_VM_LOGS/strace-$1-$name$5.txt
  tm=$NVMF_VM_LOGS/time-$1-$name$5.txt
  ours "$1" "$2" 4420 "$3" "$4" "$5-time" /usr/bin/time -o "$tm" -f '%w %c %U %S' > /dev/null
  ios=$(jq -r '.reads + .writes' "$NVMF_VM_LOGS/perf-$1-$name$5-time.json")
  read -r vol invol user sys < "$tm"
  ours "$1" "$2" 4420 "$3" "$4" "$5-strace" strace -c -f -o "$st" > /dev/null
  calls=$(awk '$NF == "total" { print $4 }' "$st")
  awk -v n="$1 $name ${5:-new}" -v i="$ios" -v v="$vol" -v w="$invol" -v c="$calls" -v u="$user" -v s="$sys" \
    -v j="$(jq -r '.reads + .writes' "$NVMF_VM_LOGS/perf-$1-$name$5-strace.json")" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.0f | %.0f | %.2f |\n", n, v / i, w / i, u * 1e6 / i, s * 1e6 / i, c / j }'
  grep -E '^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+' "$st" | sort -k4 -nr | head -6 |
    awk -v j="$(jq -r '.reads + .writes' "$NVMF_VM_LOGS/perf-$1-$name$5-strace.json")" '{ printf "|   %s | | | | | %.2f |\n", $NF, $4 / j }'
}

if [ "${BENCH_PROFILE:-0}" = 1 ]; then
  prof=$NVMF_VM_LOGS/profile.md
  {
    echo "| run | voluntary ctxsw/I/O | involuntary ctxsw/I/O | user CPU µs/I/O | system CPU µs/I/O | syscalls/I/O (strace) |"
    echo "|---|---:|---:|---:|---:|---:|"
  } > "$prof"
  for t in $transports; do
    addr=$(bench_addr "$t")
    for w in "${workloads[@]}"; do
      profile "$t" "$addr" "$w" "$NVMF_HOST_BIN" "" >> "$prof"
      [ -n "${BENCH_BASELINE_BIN:-}" ] && profile "$t" "$addr" "$w" "$BENCH_BASELINE_BIN" -baseline >> "$prof"
    done
  done
  cat "$prof"
fi
[ -f "$NVMF_VM_LOGS/export-profile.md" ] && cat "$NVMF_VM_LOGS/export-profile.md"

on_target nvmet_teardown
bench_sampler_stop
{
  echo
  echo "One I/O queue each side, ${runtime} s per run, no ramp, $rounds round(s) alternating which host runs first (means); namespace written whole first."
  echo "$(bench_setting)"
  if bench_two_nodes; then
    echo "nvmet on a 1 GiB memory-backed null_blk on the target node; TCP over the link, RDMA over Soft-RoCE (rxe0 on eth0)."
  else
    echo "nvmet on a 1 GiB memory-backed null_blk; TCP over the guest's loopback, RDMA over Soft-RoCE (rxe0)."
  fi
  where="The guest's"
  bench_two_nodes && where="The host node's"
  echo "$where copy_to_user (dd from tmpfs, 128 KiB reads): $(copy_to_user_rate)."
} >> "$table"
cat "$table"
