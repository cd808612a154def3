#!/usr/bin/env bash
# NVMe/TCP benchmark in the test VM: our target (nvmf-target, release build) against the kernel's nvmet-tcp,
# both exporting the same null_blk device (/dev/nullb0, no memory backing) to the same kernel host, fio 4 KiB
# randread and randwrite at QD 32 by default (io_uring, O_DIRECT). By default on two lab nodes joined by a
# virtio-net link (tests/vm/bench-lib.sh): node target runs the targets and the null_blk device, node host the
# kernel host and fio, over the target's link address; `--one-guest` (or BENCH_NODES=1) runs the old mode, all
# in one guest over 127.0.0.1. Every target is up at once (ours stopped with SIGSTOP while another is measured,
# so a busy-polling one costs the others nothing); the kernel host connects to each in turn with each I/O queue
# count, round after round, so a slowdown of the guests hits them alike. Prints a Markdown table (IOPS, p99
# completion latency, each node's CPU use (one guest: the guest's) and the target process's: ours only, nvmet
# runs in kernel threads) and the ratios of the rounds' means; its footer says the mode, vCPUs, kernels and date.
# Not a test: TCG makes absolute numbers meaningless, the ratios are what to read.
#
#   tests/vm/bench-tcp.sh                        # build, boot two nodes, run everything
#   tests/vm/bench-tcp.sh --one-guest            # the same in one 2-vCPU guest over loopback
#   BENCH_QUEUES="2 1" BENCH_NODE_CPUS=2 BENCH_ROUNDS=3 BENCH_REACTORS="1 2" BENCH_PERF=1 tests/vm/bench-tcp.sh
#
# Environment: BENCH_NODES (2, or 1: one guest), BENCH_KERNEL (the guests' kernel, nvmf-vm --kernel: backports
# (the newest Linux of trixie-backports, the default), lts (6.12) or X.Y), BENCH_NODE_CPUS (vCPUs per node, 1),
# BENCH_CPUS (the one guest's vCPUs, 2), BENCH_RUNTIME (seconds per fio run, default 15), BENCH_RAMP (2),
# BENCH_IODEPTH (fio's queue depth, 32), BENCH_REACTORS (our reactor counts to try, default the target's vCPU
# count on two nodes, "2" in one guest), BENCH_QUEUES (the kernel host's I/O queue counts to try, `nvme connect
# -i`; default the host's vCPU count, nvme-cli's own default), BENCH_ROUNDS (1), BENCH_BASELINE (another
# nvmf-target binary, e.g. a build of an older commit: also benchmarked, as "baseline", with each reactor count, to
# measure a change in the same run), BENCH_PROFILE=1 (after the rounds, with one host I/O queue: each target's
# CPU per I/O on each node over a 5 s randread run, and ours under `strace -c -f`: system calls per I/O by call;
# then a 5 s randread and randwrite run each under `perf record -a` of the target node: where its busy time goes,
# by command and function; in profile.md), BENCH_POLL (variants of our target to try, each its own instance: a `[reactors] poll` mode,
# optionally with `,SOCKET_IO` for `socket_io`, `,CPUS` (`+`-separated) for `cpus`, one per reactor, and `,PLACEMENT`
# for `placement`, e.g. "adaptive sleep adaptive,io_uring adaptive,epoll,1 adaptive,epoll,0+1,incoming_cpu"; default
# "adaptive"), BENCH_PERF=1 (perf record our daemon during one more randread run; report in the target's logs),
# BENCH_LOGS (logs folder, default <target dir>/tmp/bench-tcp; two nodes: a folder per node in it).
# The table is also written to $BENCH_LOGS/bench.md. `--guest` is the half that runs on node host (or in the one
# guest); `--lib` (sourced) defines the target side's functions for its on_target jobs.
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
  logs=${BENCH_LOGS:-$target_dir/tmp/bench-tcp}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_TARGET_BIN=$target_dir/release/nvmf-target")
  for v in BENCH_RUNTIME BENCH_RAMP BENCH_IODEPTH BENCH_REACTORS BENCH_QUEUES BENCH_ROUNDS BENCH_BASELINE BENCH_POLL BENCH_PERF BENCH_PROFILE; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  . tests/vm/bench-lib.sh
  # Other work on this machine slows the guest's vCPUs unevenly: the host's load goes in the table's footer.
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  bench_boot "$logs" tests/vm/bench-tcp.sh 3600 --bare --modules nvmet,nvmet_tcp,nvme_tcp "${env_args[@]}"
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
runtime=${BENCH_RUNTIME:-15}
ramp=${BENCH_RAMP:-2}
qd=${BENCH_IODEPTH:-32}
polls=${BENCH_POLL:-adaptive}
rounds=${BENCH_ROUNDS:-1}
nqn_kernel=nqn.2024-01.io.nvmf-rs:bench-nvmet

# --- the target side (on_target jobs) ---

# targets_up: null_blk, nvmet-tcp and each of our targets (stopped with SIGSTOP) on the target's address; a line
# "LABEL|PORT|NQN|DAEMON|PID" each (nvmet-tcp runs in kernel threads: no daemon).
targets_up() {
  local addr reactors builds=() p suffix sio cpus place port=4421 r build name bin poll nqn config poll_line sio_line
  local cpus_line place_line pid lines
  addr=$(bench_addr tcp)
  reactors=${BENCH_REACTORS:-2}
  bench_two_nodes && reactors=${BENCH_REACTORS:-$(nproc)}
  # Pure null_blk: no memory backing, completions inline, so the storage costs next to nothing.
  modprobe null_blk nr_devices=1 gb=64 bs=512 queue_mode=2 irqmode=0 submit_queues="$(nproc)" hw_queue_depth=256
  wait_until 10 test -b /dev/nullb0 || { fail "no /dev/nullb0"; return 1; }
  lines="nvmet-tcp|4420|$nqn_kernel||"
  nvmet_subsys "$nqn_kernel" /dev/nullb0
  nvmet_tcp_port 1 "$addr" 4420 "$nqn_kernel"
  # "NAME BINARY POLL SOCKET_IO CPUS PLACEMENT": with one variant the name is the build's; with several, each is
  # named after it.
  for p in $polls; do
    suffix=""
    [ "$polls" = "$p" ] || suffix="-${p//,/-}"
    IFS=, read -r p sio cpus place <<< "$p"
    builds+=("nvmf-rs$suffix $NVMF_TARGET_BIN $p ${sio:-epoll} ${cpus:--} ${place:--}")
    [ -n "${BENCH_BASELINE:-}" ] && builds+=("baseline$suffix $BENCH_BASELINE $p ${sio:-epoll} ${cpus:--} ${place:--}")
  done
  for r in $reactors; do
    for build in "${builds[@]}"; do
      read -r name bin poll sio cpus place <<< "$build"
      nqn=nqn.2024-01.io.nvmf-rs:bench-$name-$r
      config=/tmp/bench-$name-$r.toml
      # A baseline older than these keys takes neither line.
      poll_line="" sio_line=""
      grep -q poll_window_us "$bin" && poll_line="poll = \"$poll\""
      grep -q socket_io "$bin" && sio_line="socket_io = \"$sio\""
      cpus_line="" place_line=""
      [ "$cpus" = - ] || cpus_line="cpus = [${cpus//+/, }]"
      [ "$place" = - ] || ! grep -q incoming_cpu "$bin" || place_line="placement = \"$place\""
      printf '%s\n' "[reactors]" "threads = $r" "$poll_line" "$sio_line" "$cpus_line" "$place_line" "[logging]" \
        'level = "warn"' "[[listener]]" "address = \"$addr\"" "port = $port" "[[subsystem]]" "nqn = \"$nqn\"" \
        "[[subsystem.namespace]]" 'path = "/dev/nullb0"' > "$config"
      start_daemon "$name-$r" timeout 7200 "$bin" --config "$config"
      daemon_ready "$name-$r" 'nvmf-target: ready'
      pid=$(nvmf_target_pid "$name-$r")
      lines+=$'\n'"$name ($r reactors)|$port|$nqn|$name-$r|$pid"
      kill -STOP "$pid"
      port=$((port + 1))
    done
  done
  echo "$lines"
}

# targets_down TARGET...: every daemon woken and stopped, nvmet's configuration removed.
targets_down() {
  local t label port nqn daemon pid
  for t in "$@"; do
    IFS='|' read -r label port nqn daemon pid <<< "$t"
    [ -z "$pid" ] || kill -CONT "$pid"
    [ -z "$daemon" ] || stop_daemon "$daemon"
  done
  nvmet_teardown
}

# trace_start NAME PID / trace_stop NAME: `strace -c -f` of PID, its summary in $NVMF_VM_LOGS/NAME.txt.
trace_start() {
  start_daemon "$1" timeout 600 strace -c -f -p "$2" -o "$NVMF_VM_LOGS/$1.txt"
  _nap 1 || true
}
trace_stop() {
  local pid
  pid=$(cat "/run/nvmf-daemons/$1.pid")
  kill -INT "$pid"
  wait_until 20 _gone "$pid" || true
  stop_daemon "$1" || true
}
# strace_per_io NAME IOS: "CALLS|TOP" of NAME's summary: syscalls per I/O, and the five most frequent per I/O.
strace_per_io() {
  local f=$NVMF_VM_LOGS/$1.txt calls top
  # strace -c: "% time seconds usecs/call calls [errors] syscall", the total line too (ending in "total").
  calls=$(awk -v n="$2" '$NF == "total" { printf "%.2f", $4 / n }' "$f")
  top=$(awk -v n="$2" '$1 ~ /^[0-9.]+$/ && $NF != "total" { printf "%s %.2f\n", $NF, $4 / n }' "$f" |
    sort -k2 -nr | head -5 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')
  echo "$calls|$top"
}

# perf_target DAEMON PID SECONDS: perf record of PID for SECONDS, its report and threads in $NVMF_VM_LOGS.
perf_target() {
  perf record -e cpu-clock -F 499 -g -p "$2" -o "$NVMF_VM_LOGS/perf-$1.data" -- sleep "$3" \
    > "$NVMF_VM_LOGS/perf-$1.record.txt" 2>&1 || log "perf record failed (see perf-$1.record.txt)"
  perf report -i "$NVMF_VM_LOGS/perf-$1.data" --stdio --no-children --sort dso,sym 2> /dev/null |
    grep -v '^$' | head -80 > "$NVMF_VM_LOGS/perf-$1.txt" || true
  ps -L -o tid,comm,pcpu -p "$2" > "$NVMF_VM_LOGS/threads-$1.txt" 2>&1 || true
}

[ "${1:-}" = --lib ] && return 0

# --- the host side ---
queues=${BENCH_QUEUES:-$(nproc)}
addr=$(bench_addr tcp)
table=$NVMF_VM_LOGS/bench.md

# The workloads: "NAME FIO_RW BS QD" each, 4 KiB random at the benchmark's depth, then 128 KiB sequential reads at
# QD8 (BENCH_SEQREAD=0 leaves those out).
workloads=("randread randread 4k $qd" "randwrite randwrite 4k $qd")
[ "${BENCH_SEQREAD:-1}" = 0 ] || workloads+=("seqread read 128k 8")

# _key LABEL QUEUES WORKLOAD: the results file of a target, queue count and workload.
_key() { local l=${1// /_}; l=${l//[()]/}; echo "$NVMF_VM_LOGS/iops-$l-q$2-$3"; }

# run_fio LABEL QUEUES ROUND DEV WORKLOAD [PID]: one fio run of WORKLOAD ("NAME FIO_RW BS QD"); appends a table row,
# and its IOPS to the results file.
run_fio() {
  local label=$1 q=$2 round=$3 dev=$4 pid=${6:-} name rw bs depth key out s0 s1 a b iops p99 cpu proc dir
  read -r name rw bs depth <<< "$5"
  key=$(_key "$label" "$q" "$name")
  out=$NVMF_VM_LOGS/fio-${key#"$NVMF_VM_LOGS"/iops-}-$round.json
  dir=${rw#rand}
  s0=$(cpu_snap "$pid")
  timeout $((runtime + ramp + 60)) fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 \
    --rw="$rw" --bs="$bs" --iodepth="$depth" --numjobs=1 --time_based --runtime="$runtime" --ramp_time="$ramp" \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio $label $name"; return 1; }
  s1=$(cpu_snap "$pid")
  iops=$(jq -r ".jobs[0].$dir.iops | floor" "$out")
  p99=$(jq -r ".jobs[0].$dir.clat_ns.percentile[\"99.000000\"] / 1000 | floor" "$out")
  cpu=$(cpu_pct "$s0" "$s1")
  # Our daemon's CPU as % of one of the target's CPUs over the whole run (ramp included, like the node figures).
  proc="–"
  read -r -a a <<< "$s0"
  read -r -a b <<< "$s1"
  [ -n "$pid" ] && proc=$(((b[2] - a[2]) * 100 * b[3] / (b[1] - a[1] > 0 ? b[1] - a[1] : 1)))
  echo "| $label | $q | ${bs%k} KiB $rw QD$depth | $round | $iops | $p99 | $cpu | $proc |" >> "$table"
  log "$label, $q I/O queue(s), $name ($round): $iops IOPS, p99 $p99 µs, CPU % $cpu, target process CPU $proc %"
  echo "$iops" >> "$key"
}

{
  echo "| target | host I/O queues | workload | round | IOPS | p99 (µs) | $(cpu_header) | target process CPU % (of one CPU) |"
  echo "|---|---:|---|---:|---:|---:|$(cpu_align)|---:|"
} > "$table"

bench_sampler_start
# The targets, all up at once: "LABEL|PORT|NQN|DAEMON|PID" each.
up=$(on_target ". $bench_dir/bench-tcp.sh --lib; targets_up")
mapfile -t targets <<< "$up"

# Each of our targets runs only while it is measured (SIGSTOP otherwise), so that an idle one, or one whose
# reactors poll without sleeping (`busy`), takes no CPU from the target being measured.
_wake() { [ -z "$1" ] || on_target "kill -CONT $1"; }
_rest() { [ -z "$1" ] || on_target "kill -STOP $1"; }

for round in $(seq "$rounds"); do
  for q in $queues; do
    for t in "${targets[@]}"; do
      IFS='|' read -r label port nqn daemon pid <<< "$t"
      _wake "$pid"
      dev=$(host_connect tcp "$addr" "$port" "$nqn" -i "$q")
      for w in "${workloads[@]}"; do
        run_fio "$label" "$q" "$round" "$dev" "$w" "$pid"
      done
      host_disconnect "$nqn"
      _rest "$pid"
    done
  done
done

# _fio5 DEV OUT [RW]: a 5 s 4 KiB random run (randread by default) at the benchmark's queue depth; its I/O count.
_fio5() {
  local rw=${3:-randread}
  timeout 60 fio --name=profile --filename="$1" --ioengine=io_uring --direct=1 --rw="$rw" --bs=4k --iodepth="$qd" \
    --time_based --runtime=5 --output-format=json > "$2" 2> /dev/null || true
  jq -r ".jobs[0].${rw#rand}.total_ios // 0" "$2" 2> /dev/null || echo 0
}

if [ "${BENCH_PROFILE:-0}" = 1 ]; then
  prof=$NVMF_VM_LOGS/profile.md
  hz=$(getconf CLK_TCK)
  busy_header="guest busy µs / I/O"
  bench_two_nodes && busy_header="target node busy µs / I/O | host node busy µs / I/O"
  {
    echo "| target (one host I/O queue, 4 KiB randread QD$qd) | IOPS | $busy_header | target process µs / I/O | syscalls / I/O (under strace) | the most frequent, per I/O |"
    echo "|---|---:|$(cpu_align)|---:|---:|---|"
  } > "$prof"
  for t in "${targets[@]}"; do
    IFS='|' read -r label port nqn daemon pid <<< "$t"
    _wake "$pid"
    dev=$(host_connect tcp "$addr" "$port" "$nqn" -i 1)
    s0=$(cpu_snap "$pid")
    ios=$(_fio5 "$dev" "$NVMF_VM_LOGS/profile-${daemon:-nvmet}.json")
    s1=$(cpu_snap "$pid")
    [ "$ios" -gt 0 ] || ios=1
    read -r tus hus <<< "$(cpu_us "$s0" "$s1" "$ios")"
    busy=$hus
    bench_two_nodes && busy="$tus | $hus"
    proc="–" calls="–" top="–"
    if [ -n "$pid" ]; then
      read -r -a a <<< "$s0"
      read -r -a b <<< "$s1"
      proc=$(((b[2] - a[2]) * 1000000 / hz / ios))
      on_target ". $bench_dir/bench-tcp.sh --lib; trace_start strace-$daemon $pid"
      traced=$(_fio5 "$dev" "$NVMF_VM_LOGS/strace-$daemon.json")
      [ "$traced" -gt 0 ] || traced=1
      summary=$(on_target ". $bench_dir/bench-tcp.sh --lib; trace_stop strace-$daemon; strace_per_io strace-$daemon $traced")
      IFS='|' read -r calls top <<< "$summary"
    fi
    echo "| $label | $((ios / 5)) | $busy | $proc | $calls | $top |" >> "$prof"
    # Where the target node's time goes, by command and function, for every target (nvmet has no process).
    for rw in randread randwrite; do
      name=${daemon:-nvmet}-$rw
      on_target "node_perf_start $name"
      _fio5 "$dev" "$NVMF_VM_LOGS/perf-node-$name.json" "$rw" > /dev/null
      echo "- $label, 4 KiB $rw, the target node's busy time (perf record -a): $(on_target "node_perf_stop $name")" >> "$prof.perf"
    done
    host_disconnect "$nqn"
    _rest "$pid"
  done
  cat "$prof" >> "$table"
  [ -f "$prof.perf" ] && { echo; cat "$prof.perf"; } >> "$table"
fi

if [ "${BENCH_PERF:-0}" = 1 ]; then
  for t in "${targets[@]}"; do
    IFS='|' read -r label port nqn daemon pid <<< "$t"
    case $daemon in nvmf-rs-*) ;; *) continue ;; esac
    log "perf record of $label during a randread run"
    _wake "$pid"
    dev=$(host_connect tcp "$addr" "$port" "$nqn" -i "${queues%% *}")
    timeout $((runtime + 60)) fio --name=perf --filename="$dev" --ioengine=io_uring --direct=1 --rw=randread \
      --bs=4k --iodepth="$qd" --time_based --runtime="$runtime" > /dev/null 2>&1 &
    fio_pid=$!
    sleep "$ramp"
    on_target ". $bench_dir/bench-tcp.sh --lib; if command -v perf > /dev/null; then perf_target $daemon $pid $((runtime - ramp - 1)); fi"
    wait "$fio_pid" || true
    host_disconnect "$nqn"
    _rest "$pid"
  done
fi
on_target ". $bench_dir/bench-tcp.sh --lib; targets_down $(printf '%q ' "${targets[@]}")"
bench_sampler_stop

# _mean FILE: the mean of its lines.
_mean() { awk '{ s += $1; n++ } END { if (n) printf "%d", s / n; else print 0 }' "$1"; }
# _ratio A B: mean(A) / mean(B), then each round's, "1.23x (rounds 1.20 · 1.26)".
_ratio() {
  awk -v a="$(_mean "$1")" -v b="$(_mean "$2")" 'BEGIN { printf "%.2fx", (b ? a / b : 0) }'
  printf ' (rounds %s)' "$(paste -d' ' "$1" "$2" | awk '{ printf "%s%.2f", (NR > 1 ? " · " : ""), ($2 ? $1 / $2 : 0) }')"
}

# Ratios of the rounds' means against nvmet-tcp (and of this build against the baseline build, when there is one).
{
  echo
  for q in $queues; do
    for w in "${workloads[@]}"; do
      rw=${w%% *}
      for t in "${targets[@]:1}"; do
        IFS='|' read -r label _ <<< "$t"
        echo "- $q I/O queue(s), $rw: $label / nvmet-tcp = $(_ratio "$(_key "$label" "$q" "$rw")" "$(_key nvmet-tcp "$q" "$rw")")"
        case $label in
          baseline*) echo "- $q I/O queue(s), $rw: nvmf-rs / baseline${label#baseline} = $(_ratio "$(_key "nvmf-rs${label#baseline}" "$q" "$rw")" "$(_key "$label" "$q" "$rw")")" ;;
        esac
      done
      # Each further poll mode against the first (same reactor count).
      first=${polls%% *}
      for t in "${targets[@]:1}"; do
        IFS='|' read -r label _ <<< "$t"
        case $label in nvmf-rs-*) ;; *) continue ;; esac
        mode=${label#nvmf-rs-}
        mode=${mode%% *}
        first_name=${first//,/-}
        [ "$mode" = "$first_name" ] && continue
        echo "- $q I/O queue(s), $rw: $label / nvmf-rs-$first_name${label#"nvmf-rs-$mode"} = $(_ratio "$(_key "$label" "$q" "$rw")" "$(_key "nvmf-rs-$first_name${label#"nvmf-rs-$mode"}" "$q" "$rw")")"
      done
    done
  done
  echo
  echo "$(bench_setting) null_blk irqmode=0, fio io_uring direct, ${runtime} s per run after ${ramp} s ramp, $rounds round(s); copy_to_user $(copy_to_user_rate)."
} >> "$table"
cat "$table"
