#!/usr/bin/env bash
# NVMe/RDMA benchmark in the test VM: our target (nvmf-target, release build) against the kernel's nvmet-rdma,
# each exporting a null_blk device of its own (/dev/nullbN, no memory backing) over Soft-RoCE to the same kernel
# host (nvme-rdma). By default on two lab nodes joined by a virtio-net link (tests/vm/bench-lib.sh): node target runs
# the targets and null_blk, node host the kernel host and fio, rxe0 on each node's eth0 (MTU 1500), the targets
# listening on the target's link address; `--one-guest` (or BENCH_NODES=1) runs the old mode, all in one guest over
# rxe0 on dummy0 (10.77.0.1). All targets (nvmet-rdma and ours with each reactor count) are up and connected at
# once, and the runs alternate between them, round after round, so a slowdown of the guests (other work on this
# machine) hits them alike. fio (io_uring, O_DIRECT, --output-format=json): 4 KiB randread and randwrite at QD 32
# and 128 KiB sequential read at QD 8. Prints a Markdown table (IOPS, MB/s, p99 completion latency, each node's CPU
# % (one guest: the guest's), per run, and ours/kernel ratios of the rounds' means); its footer says the mode,
# vCPUs, kernels and date. Not a test: under TCG absolute numbers mean little, the ratios are what to read.
#
#   tests/vm/bench-rdma.sh                       # build, boot two nodes, run everything
#   tests/vm/bench-rdma.sh --one-guest           # the same in one 2-vCPU guest
#   BENCH_RUNTIME=20 BENCH_ROUNDS=3 BENCH_REACTORS="1 2" BENCH_NODE_CPUS=2 tests/vm/bench-rdma.sh
#
# Environment: BENCH_NODES (2, or 1: one guest), BENCH_KERNEL (the guests' kernel, nvmf-vm --kernel: backports
# (the newest Linux of trixie-backports, the default), lts (6.12) or X.Y), BENCH_NODE_CPUS (vCPUs per node, 1),
# BENCH_CPUS (the one guest's vCPUs, 2), BENCH_RUNTIME (seconds per fio run, default 10), BENCH_RAMP (2),
# BENCH_REACTORS (our reactor counts to try, default the target's vCPU count on two nodes, "2" in one guest),
# BENCH_QUEUES (the kernel host's I/O queues, `nvme connect -i`; default nvme-cli's own, one per host vCPU),
# BENCH_ROUNDS (2), BENCH_BASELINE (another nvmf-target binary, e.g. a build of an older commit: also
# benchmarked, as "baseline", with each reactor count, to measure a change in the same run), BENCH_POLL (our
# reactors' `[reactors] poll` modes to try, each its own instance, e.g. "adaptive sleep"; default "adaptive"),
# BENCH_LOGS (logs folder, default <target dir>/tmp/bench-rdma; two nodes: a folder per node in it),
# BENCH_PROFILE=1 (also profile: per workload one more run of each target, with each node's busy CPU time per I/O
# and for ours the reactors' context switches, user and system CPU time per I/O and RDMA counters, in
# $BENCH_LOGS/profile.md; then, per reactor count, one extra 5 s run of each 4 KiB workload under `strace -c -f`
# (syscalls per I/O) and one under `perf record -g` (perf-*.txt in the target's logs), and for every target one
# of each under `perf record -a` of the target node (where its busy time goes, by command and function:
# profile-node.md); those runs are slowed by the tracing and count for nothing in the table).
# The table is also written to $BENCH_LOGS/bench.md, beside every fio JSON. `--guest` is the half that runs on node
# host (or in the one guest); `--lib` (sourced) defines the target side's functions for its on_target jobs.
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
  echo "bench: building nvmf-target (release) and nvmf-vm" >&2
  cargo build --quiet --release -p nvmf-target --bin nvmf-target
  cargo build --quiet -p nvmf-tests --bin nvmf-vm
  logs=${BENCH_LOGS:-$target_dir/tmp/bench-rdma}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_TARGET_BIN=$target_dir/release/nvmf-target")
  for v in BENCH_RUNTIME BENCH_RAMP BENCH_REACTORS BENCH_QUEUES BENCH_ROUNDS BENCH_PROFILE BENCH_BASELINE BENCH_POLL; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  . tests/vm/bench-lib.sh
  # Other work on this machine slows the guest's vCPUs unevenly: the host's load goes in the table's footer.
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  bench_boot "$logs" tests/vm/bench-rdma.sh 1800 --bare --rxe --modules nvmet,nvmet_rdma,nvme_rdma "${env_args[@]}"
  echo "QEMU \`-cpu $NVMF_VM_CPU\`. Host load average (1, 5, 15 min): $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after." |
    tee -a "$logs/bench.md"
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in a guest ------------------------------------------------------------------------------------------
[ "${1:-}" = --lib ] || . "$NVMF_GUEST_LIB"
# No exec for this: target jobs source the file each time.
bench_dir=.
[[ ${BASH_SOURCE[0]} != */* ]] || bench_dir=${BASH_SOURCE[0]%/*}
[[ $bench_dir = /* ]] || bench_dir=$PWD/$bench_dir
. "$bench_dir/bench-lib.sh"
runtime=${BENCH_RUNTIME:-10}
ramp=${BENCH_RAMP:-2}
rounds=${BENCH_ROUNDS:-2}
profile=${BENCH_PROFILE:-0}
polls=${BENCH_POLL:-adaptive}
nqn_kernel=nqn.2024-01.io.nvmf-rs:bench-nvmet
nqn_ours=nqn.2024-01.io.nvmf-rs:bench-ours

# The workloads: name, fio --rw, block size, queue depth.
workloads=("randread randread 4k 32" "randwrite randwrite 4k 32" "seqread read 128k 8")

# --- the target side (on_target jobs) ---

# targets_up: every target up on the target's address, a line "LABEL|PORT|NQN|DAEMON" each: nvmet-rdma on 4420
# (nullb0), our i-th target on 4420+i (nullb<i>, metrics on 127.0.0.1:9420+i when profiling), named by its label:
# "nvmf-rs (R reactors)" or "baseline (R reactors)".
targets_up() {
  local addr reactors ours=() p suffix r i kind bin poll config lines
  addr=$(bench_addr rdma)
  reactors=${BENCH_REACTORS:-2}
  bench_two_nodes && reactors=${BENCH_REACTORS:-$(nproc)}
  # Our targets: "KIND BINARY REACTORS POLL" each; with several BENCH_POLL modes each is its own instance, named
  # after it.
  for p in $polls; do
    suffix=""
    [ "$polls" = "$p" ] || suffix="-$p"
    for r in $reactors; do ours+=("nvmf-rs$suffix $NVMF_TARGET_BIN $r $p"); done
    if [ -n "${BENCH_BASELINE:-}" ]; then
      for r in $reactors; do ours+=("baseline$suffix $BENCH_BASELINE $r $p"); done
    fi
  done
  # Pure null_blk: no memory backing, completions inline, so the storage costs next to nothing. nullb0 for
  # nvmet-rdma, nullb<i> for our i-th target.
  modprobe null_blk nr_devices=$((${#ours[@]} + 1)) gb=1 bs=512 queue_mode=2 irqmode=0 submit_queues="$(nproc)" \
    hw_queue_depth=256
  for i in $(seq 0 ${#ours[@]}); do
    wait_until 10 test -b "/dev/nullb$i" || { fail "no /dev/nullb$i"; return 1; }
  done
  nvmet_subsys "$nqn_kernel" /dev/nullb0
  nvmet_rdma_port 1 "$addr" 4420 "$nqn_kernel"
  lines="nvmet-rdma|4420|$nqn_kernel|"
  for i in $(seq 1 ${#ours[@]}); do
    read -r kind bin r poll <<< "${ours[i - 1]}"
    config=/tmp/bench-$i.toml
    cat > "$config" <<EOF
[reactors]
threads = $r
$(grep -q poll_window_us "$bin" && echo "poll = \"$poll\"")
[logging]
level = "warn"
$([ "$profile" = 1 ] && printf '[metrics]\nlisten = "127.0.0.1:%s"' $((9420 + i)))
[[listener]]
transport = "rdma"
address = "$addr"
port = $((4420 + i))
[[subsystem]]
nqn = "$nqn_ours-$i"
[[subsystem.namespace]]
path = "/dev/nullb$i"
EOF
    NVMF_TARGET_BIN=$bin nvmf_target_start "ours-$i" "$config"
    lines+=$'\n'"$kind ($r reactors)|$((4420 + i))|$nqn_ours-$i|ours-$i"
  done
  echo "$lines"
}

# targets_down DAEMON...: our targets stopped, nvmet's configuration removed.
targets_down() {
  local d
  nvmet_teardown
  for d in "$@"; do stop_daemon "$d"; done
}

# _reactor_stats PID: "voluntary involuntary user_ticks system_ticks" summed over the target's reactor threads.
_reactor_stats() {
  local t v=0 n=0 u=0 s=0 vol inv fields
  for t in /proc/"$1"/task/*; do
    case $(cat "$t/comm" 2> /dev/null) in nvmf-reactor-*) ;; *) continue ;; esac
    vol=$(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status")
    inv=$(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "$t/status")
    read -r -a fields < <(sed 's/.*) //' "$t/stat")
    v=$((v + vol))
    n=$((n + inv))
    u=$((u + fields[11]))
    s=$((s + fields[12]))
  done
  echo "$v $n $u $s"
}

# _rdma_counters PORT: our RDMA counters (series=value), on one line.
_rdma_counters() {
  curl -sf --max-time 10 "http://127.0.0.1:$1/metrics" |
    awk '/^nvmf_target_rdma_(work_requests|completions)/ { sub(/nvmf_target_rdma_/, ""); printf "%s=%s ", $1, $2 }'
}

# reactor_mark PID PORT: "V N U S|COUNTERS" of our target PID (metrics on PORT), before or after a profiled run.
reactor_mark() { echo "$(_reactor_stats "$1")|$(_rdma_counters "$2")"; }

# reactor_idle LABEL PID: the reactors' CPU and sleeps over 5 s idle with a host connected (keep-alives only: the
# reactors must sleep, not spin).
reactor_idle() {
  local v0 u0 s0 v1 u1 s1
  read -r v0 _ u0 s0 <<< "$(_reactor_stats "$2")"
  sleep 5
  read -r v1 _ u1 s1 <<< "$(_reactor_stats "$2")"
  echo "idle $1, 5 s: reactor CPU $(((u1 + s1 - u0 - s0) * 1000 / $(getconf CLK_TCK))) ms, $((v1 - v0)) sleeps"
}

# trace_start NAME SECONDS CMD...: CMD (a tracer of our target) in the background for at most SECONDS;
# trace_stop NAME [SIGNAL]: SIGNAL to it (none: let it end by itself) and wait for it.
trace_start() {
  local name=$1 secs=$2
  shift 2
  start_daemon "$name" timeout "$secs" "$@"
  _nap 1 || true
}
trace_stop() {
  local pid
  pid=$(cat "/run/nvmf-daemons/$1.pid")
  [ -z "${2:-}" ] || kill "-$2" "$pid"
  wait_until 30 _gone "$pid" || true
  stop_daemon "$1" || true
}

[ "${1:-}" = --lib ] && return 0

# --- the host side ---
queues=${BENCH_QUEUES:-$(nproc)}
addr=$(bench_addr rdma)
table=$NVMF_VM_LOGS/bench.md

# run_fio LABEL DEV WORKLOAD [ROUND]: one fio run; appends a table row and "IOPS MBPS P99" for the ratios
# (ROUND "profile": neither). Its CPU snapshots stay in run_s0 and run_s1.
run_fio() {
  local label=$1 dev=$2 round=${4:-1} name rw bs qd out dir iops mbps p99 cpu
  read -r name rw bs qd <<< "$3"
  dir=read
  [ "$rw" = randwrite ] && dir=write
  out=$NVMF_VM_LOGS/fio-${label// /_}-$name-$round.json
  run_s0=$(cpu_snap)
  timeout $((runtime + ramp + 60)) fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 \
    --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs=1 --time_based --runtime="$runtime" --ramp_time="$ramp" \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio $label $name"; return 1; }
  run_s1=$(cpu_snap)
  iops=$(jq -r ".jobs[0].$dir.iops | floor" "$out")
  mbps=$(jq -r ".jobs[0].$dir.bw_bytes / 1000000 | floor" "$out")
  p99=$(jq -r ".jobs[0].$dir.clat_ns.percentile[\"99.000000\"] / 1000 | floor" "$out")
  cpu=$(cpu_pct "$run_s0" "$run_s1")
  log "$label $name ($round): $iops IOPS, $mbps MB/s, p99 $p99 µs, CPU % $cpu"
  [ "$round" = profile ] && return 0
  echo "| $label | $bs $rw QD$qd | $round | $iops | $mbps | $p99 | $cpu |" >> "$table"
  echo "$iops $mbps $p99" >> "$NVMF_VM_LOGS/result-${label// /_}-$name"
}

# _ios FIO_JSON: I/Os fio completed (both directions).
_ios() { jq -r '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$1"; }

# profiled_fio LABEL DEV WORKLOAD DAEMON: an extra run_fio (not in the table), with each node's busy CPU per I/O
# and, for our target (DAEMON), its reactors' context switches and CPU time per I/O and the RDMA counters around it.
profiled_fio() {
  local label=$1 dev=$2 w=$3 daemon=$4 pid=0 port=0 m0="0 0 0 0|" m1="0 0 0 0|" v0 n0 u0 s0 v1 n1 u1 s1 ios name
  local out hz tus hus busy
  if [ -n "$daemon" ]; then
    pid=${pids[$daemon]}
    port=$((9420 + ${daemon#ours-}))
    m0=$(on_target ". $bench_dir/bench-rdma.sh --lib; reactor_mark $pid $port")
    echo "before $w: ${m0#*|}" >> "$NVMF_VM_LOGS/counters-${label// /_}"
  fi
  run_fio "$label" "$dev" "$w" profile || return 1
  if [ -n "$daemon" ]; then
    m1=$(on_target ". $bench_dir/bench-rdma.sh --lib; reactor_mark $pid $port")
    echo "after $w: ${m1#*|}" >> "$NVMF_VM_LOGS/counters-${label// /_}"
  fi
  read -r v0 n0 u0 s0 <<< "${m0%%|*}"
  read -r v1 n1 u1 s1 <<< "${m1%%|*}"
  read -r name _ <<< "$w"
  out=$NVMF_VM_LOGS/fio-${label// /_}-$name-profile.json
  ios=$(_ios "$out")
  hz=$(getconf CLK_TCK)
  [ "$ios" -gt 0 ] || ios=1
  read -r tus hus <<< "$(cpu_us "$run_s0" "$run_s1" "$ios")"
  busy=$hus
  bench_two_nodes && busy="$tus | $hus"
  # Voluntary switches are the reactors' sleeps (epoll waits that blocked); per I/O in thousandths.
  # CPU per I/O: the reactors' user and system time, and each node's busy time (one guest: both sides).
  echo "| $label | $name | $(((v1 - v0) * 1000 / ios)) | $(((n1 - n0) * 1000 / ios)) | $(((u1 - u0) * 1000000 / hz / ios)) | $(((s1 - s0) * 1000000 / hz / ios)) | $busy | $(jq -r '.jobs[0].ctx' "$out") |" >> "$NVMF_VM_LOGS/profile.md"
}

# _fio5 WORKLOAD DEV OUT: a 5 s run of WORKLOAD ("NAME RW BS QD") on DEV, fio's JSON in OUT (not in the table).
_fio5() {
  local name rw bs qd
  read -r name rw bs qd <<< "$1"
  fio --name="$name" --filename="$2" --ioengine=io_uring --direct=1 --rw="$rw" --bs="$bs" --iodepth="$qd" \
    --numjobs=1 --time_based --runtime=5 --output-format=json > "$3" 2> /dev/null || true
}

# traced_runs LABEL DEV DAEMON: one short run of each 4 KiB workload with our target under strace -c, then one
# with it under perf record.
traced_runs() {
  local label=$1 dev=$2 pid=${pids[$3]} name w out file=${1// /_}
  file=${file//[()]/}
  for w in "${workloads[@]:0:2}"; do
    name=${w%% *}
    out=strace-$file-$name
    on_target ". $bench_dir/bench-rdma.sh --lib; trace_start $out 600 strace -c -f -p $pid -o \$NVMF_VM_LOGS/$out.txt"
    _fio5 "$w" "$dev" "$NVMF_VM_LOGS/$out.json"
    on_target ". $bench_dir/bench-rdma.sh --lib; trace_stop $out INT"
    echo "strace $label $name: $(_ios "$NVMF_VM_LOGS/$out.json") I/Os" >> "$NVMF_VM_LOGS/profile.md"
    # perf records for longer than fio runs: starting it, on two nodes, takes a job on the target.
    out=perf-$file-$name
    on_target ". $bench_dir/bench-rdma.sh --lib; trace_start $out 60 perf record -q -g -F 499 -p $pid -o /tmp/$out.data -- sleep 8"
    _fio5 "$w" "$dev" "$NVMF_VM_LOGS/$out.json"
    on_target ". $bench_dir/bench-rdma.sh --lib; trace_stop $out
      perf report -i /tmp/$out.data --stdio --no-children --percent-limit 1 > \$NVMF_VM_LOGS/$out.txt 2> /dev/null || true
      rm -f /tmp/$out.data"
  done
}

# node_profile LABEL DEV NAME: a 5 s run of each 4 KiB workload under `perf record -a` on the target node; where its
# busy time went, a line each in profile-node.md.
node_profile() {
  local w name
  for w in "${workloads[@]:0:2}"; do
    name=${w%% *}
    on_target "node_perf_start $3-$name"
    _fio5 "$w" "$2" "$NVMF_VM_LOGS/perf-node-$3-$name.json"
    echo "- $1, $name, the target node's busy time (perf record -a): $(on_target "node_perf_stop $3-$name")" >> "$NVMF_VM_LOGS/profile-node.md"
  done
}

if [ "$profile" = 1 ]; then
  busy_header="guest busy µs / I/O"
  bench_two_nodes && busy_header="target node busy µs / I/O | host node busy µs / I/O"
  {
    echo "| target | workload | reactor sleeps / I/O (x1000) | preemptions / I/O (x1000) | reactor user µs / I/O | reactor system µs / I/O | $busy_header | fio ctx switches |"
    echo "|---|---|---:|---:|---:|---:|$(cpu_align)|---:|"
  } > "$NVMF_VM_LOGS/profile.md"
fi

{
  echo "| target | workload | round | IOPS | MB/s | p99 (µs) | $(cpu_header) |"
  echo "|---|---|---:|---:|---:|---:|$(cpu_align)|"
} > "$table"

bench_sampler_start
# Every target up and connected.
up=$(on_target ". $bench_dir/bench-rdma.sh --lib; targets_up")
mapfile -t targets <<< "$up"
declare -A dev_of pids
labels=()
daemons=()
for t in "${targets[@]}"; do
  IFS='|' read -r label port nqn daemon <<< "$t"
  labels+=("$label")
  [ -z "$daemon" ] || daemons+=("$daemon")
  dev_of[$label]=$(host_connect rdma "$addr" "$port" "$nqn" -i "$queues")
done

for round in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    for label in "${labels[@]}"; do run_fio "$label" "${dev_of[$label]}" "$w" "$round"; done
  done
done

if [ "$profile" = 1 ]; then
  for d in "${daemons[@]}"; do pids[$d]=$(on_target "nvmf_target_pid $d"); done
  for t in "${targets[@]}"; do
    IFS='|' read -r label _ _ daemon <<< "$t"
    # The kernel target's row: only the nodes' busy time per I/O means something there (no reactors).
    [ -z "$daemon" ] || on_target ". $bench_dir/bench-rdma.sh --lib; reactor_idle '$label' ${pids[$daemon]}" >> "$NVMF_VM_LOGS/profile.md"
    for w in "${workloads[@]}"; do profiled_fio "$label" "${dev_of[$label]}" "$w" "$daemon"; done
    [ -z "$daemon" ] || traced_runs "$label" "${dev_of[$label]}" "$daemon"
    node_profile "$label" "${dev_of[$label]}" "${daemon:-nvmet}"
  done
fi

for t in "${targets[@]}"; do
  IFS='|' read -r _ _ nqn _ <<< "$t"
  host_disconnect "$nqn"
done
on_target ". $bench_dir/bench-rdma.sh --lib; targets_down ${daemons[*]}"
bench_sampler_stop

# _means RESULT_FILE: "IOPS MBPS P99", each the mean over the rounds.
_means() { awk '{ i += $1; m += $2; p += $3; n++ } END { if (n) printf "%d %d %d\n", i / n, m / n, p / n; else print "0 0 0" }' "$1"; }

# Ratios of the rounds' means against nvmet-rdma (IOPS; p99 as kernel/ours, so above 100 % is better for us too).
{
  echo
  echo "| mean of $rounds rounds | workload | IOPS | MB/s | p99 (µs) | IOPS ours / nvmet-rdma | p99 kernel / ours |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for w in "${workloads[@]}"; do
    read -r name _ <<< "$w"
    read -r ki km kp <<< "$(_means "$NVMF_VM_LOGS/result-nvmet-rdma-$name")"
    echo "| nvmet-rdma | $name | $ki | $km | $kp | | |"
    for label in "${labels[@]:1}"; do
      read -r oi om op <<< "$(_means "$NVMF_VM_LOGS/result-${label// /_}-$name")"
      echo "| $label | $name | $oi | $om | $op | $((oi * 100 / (ki > 0 ? ki : 1))) % | $((kp * 100 / (op > 0 ? op : 1))) % |"
    done
  done
  echo
  whose="the guest's"
  bench_two_nodes && whose="the host node's"
  echo "$(bench_setting) The kernel host on $queues I/O queue(s), Soft-RoCE (rxe0), null_blk irqmode=0, fio io_uring direct, ${runtime} s per run after ${ramp} s ramp, $whose load average at the end $(cut -d' ' -f1-3 /proc/loadavg); copy_to_user $(copy_to_user_rate)."
} >> "$table"
cat "$table"
if [ "$profile" = 1 ]; then
  echo
  cat "$NVMF_VM_LOGS/profile.md"
  echo
  cat "$NVMF_VM_LOGS/profile-node.md"
  on_target 'for f in "$NVMF_VM_LOGS"/strace-*.txt; do echo "== $f"; head -n 25 "$f"; done'
  cat "$NVMF_VM_LOGS"/counters-*
fi
