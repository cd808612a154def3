#!/usr/bin/env bash
# NVMe/RDMA benchmark in the test VM: our target (nvmf-target, release build) against the kernel's nvmet-rdma,
# each exporting a null_blk device of its own (/dev/nullbN, no memory backing) over Soft-RoCE (rxe0, 10.77.0.1) to
# the same kernel host (nvme-rdma). All targets (nvmet-rdma and ours with each reactor count) are up and connected
# at once, and the runs alternate between them, round after round, so a slowdown of the guest (other work on this
# machine) hits them alike. fio (io_uring, O_DIRECT, --output-format=json): 4 KiB randread and randwrite at QD 32
# and 128 KiB sequential read at QD 8. Prints a Markdown table (IOPS, MB/s, p99 completion latency, guest CPU %,
# per run, and ours/kernel ratios of the rounds' means). Not a test: under TCG absolute numbers mean little, the
# ratios are what to read.
#
#   tests/vm/bench-rdma.sh                       # build, boot one guest, run everything (~3 min)
#   BENCH_RUNTIME=20 BENCH_ROUNDS=3 BENCH_REACTORS="1 2" tests/vm/bench-rdma.sh
#
# Environment: BENCH_RUNTIME (seconds per fio run, default 10), BENCH_RAMP (2), BENCH_REACTORS (our reactor counts
# to try, default "2"), BENCH_QUEUES (the kernel host's I/O queues, `nvme connect -i`; default nvme-cli's own, one
# per vCPU), BENCH_ROUNDS (2), BENCH_BASELINE (another nvmf-target binary, e.g. a build of an older
# commit: also benchmarked, as "baseline", with each reactor count, to measure a change in the same run),
# BENCH_POLL (our reactors' `[reactors] poll` modes to try, each its own instance, e.g. "adaptive sleep"; default
# "adaptive"),
# BENCH_CPUS (guest vCPUs, 2), BENCH_LOGS (logs folder, default <target dir>/tmp/bench-rdma),
# BENCH_PROFILE=1 (also profile: per workload one more run of each target, with the guest's busy CPU time per I/O
# (host side included: the same for every target but the target's share) and for ours the reactors' context
# switches, user and system CPU time per I/O and RDMA counters, in $BENCH_LOGS/profile.md; then, per reactor
# count, one extra 5 s run of each 4 KiB workload under `strace -c -f` (syscalls per I/O) and one under
# `perf record -g` (perf-*.txt); those runs are slowed by the tracing and count for nothing in the table).
# The table is also written to $BENCH_LOGS/bench.md, beside every fio JSON. `--guest` is the half that runs in the
# VM.
#
# Guest CPU: QEMU `-cpu max,-erms` unless NVMF_VM_CPU says otherwise: TCG's slow `rep movsb` would otherwise charge
# every user-space copy ten times a kernel one (docs/benchmarks.md, "The guest CPU: no ERMS").
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
  for v in BENCH_RUNTIME BENCH_RAMP BENCH_REACTORS BENCH_QUEUES BENCH_ROUNDS BENCH_PROFILE BENCH_BASELINE BENCH_POLL; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  # Other work on this machine slows the guest's vCPUs unevenly: the host's load goes in the table's footer.
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  "$target_dir/debug/nvmf-vm" --bare --rxe --modules nvmet,nvmet_rdma,nvme_rdma --cpus "${BENCH_CPUS:-2}" \
    --deadline 1200 --logs "$logs" "${env_args[@]}" -- bash tests/vm/bench-rdma.sh --guest
  echo "QEMU \`-cpu $NVMF_VM_CPU\`. Host load average (1, 5, 15 min): $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after." |
    tee -a "$logs/bench.md"
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in the guest ----------------------------------------------------------------------------------------
. "$NVMF_GUEST_LIB"
runtime=${BENCH_RUNTIME:-10}
ramp=${BENCH_RAMP:-2}
reactors=${BENCH_REACTORS:-2}
rounds=${BENCH_ROUNDS:-2}
profile=${BENCH_PROFILE:-0}
queues=${BENCH_QUEUES:-$(nproc)}
nqn_kernel=nqn.2024-01.io.nvmf-rs:bench-nvmet
nqn_ours=nqn.2024-01.io.nvmf-rs:bench-ours
table=$NVMF_VM_LOGS/bench.md

# Our targets: "LABEL BINARY REACTORS POLL" each; with several BENCH_POLL modes each is its own instance, named
# after it.
polls=${BENCH_POLL:-adaptive}
ours=()
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
  wait_until 10 test -b "/dev/nullb$i" || { fail "no /dev/nullb$i"; exit 1; }
done

# The workloads: name, fio --rw, block size, queue depth.
workloads=("randread randread 4k 32" "randwrite randwrite 4k 32" "seqread read 128k 8")

_cpu_jiffies() { local _c u n s i w q sq st; read -r _c u n s i w q sq st _ < /proc/stat; echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"; }

# run_fio LABEL DEV WORKLOAD [ROUND]: one fio run; appends a table row and "IOPS MBPS P99" for the ratios
# (ROUND "profile": neither).
run_fio() {
  local label=$1 dev=$2 round=${4:-1} name rw bs qd out dir b0 t0 b1 t1 iops mbps p99 guest
  read -r name rw bs qd <<< "$3"
  dir=read
  [ "$rw" = randwrite ] && dir=write
  out=$NVMF_VM_LOGS/fio-${label// /_}-$name-$round.json
  read -r b0 t0 <<< "$(_cpu_jiffies)"
  timeout $((runtime + ramp + 60)) fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 \
    --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs=1 --time_based --runtime="$runtime" --ramp_time="$ramp" \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio $label $name"; return 1; }
  read -r b1 t1 <<< "$(_cpu_jiffies)"
  iops=$(jq -r ".jobs[0].$dir.iops | floor" "$out")
  mbps=$(jq -r ".jobs[0].$dir.bw_bytes / 1000000 | floor" "$out")
  p99=$(jq -r ".jobs[0].$dir.clat_ns.percentile[\"99.000000\"] / 1000 | floor" "$out")
  guest=$(((b1 - b0) * 100 / (t1 - t0)))
  log "$label $name ($round): $iops IOPS, $mbps MB/s, p99 $p99 µs, guest CPU $guest %"
  [ "$round" = profile ] && return 0
  echo "| $label | $bs $rw QD$qd | $round | $iops | $mbps | $p99 | $guest |" >> "$table"
  echo "$iops $mbps $p99" >> "$NVMF_VM_LOGS/result-${label// /_}-$name"
}

# _ios FIO_JSON: I/Os fio completed (both directions).
_ios() { jq -r '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$1"; }

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

# profiled_fio LABEL DEV WORKLOAD PID PORT: an extra run_fio (not in the table), with the reactors' context
# switches and CPU time per I/O and the RDMA counters (metrics on PORT) around it.
profiled_fio() {
  local label=$1 dev=$2 w=$3 pid=$4 port=$5 v0 n0 u0 s0 v1 n1 u1 s1 g0 g1 ios name out hz
  read -r v0 n0 u0 s0 <<< "$(_reactor_stats "$pid")"
  read -r g0 _ <<< "$(_cpu_jiffies)"
  [ "$port" = 0 ] || echo "before $3: $(_rdma_counters "$port")" >> "$NVMF_VM_LOGS/counters-${label// /_}"
  run_fio "$label" "$dev" "$w" profile || return 1
  read -r v1 n1 u1 s1 <<< "$(_reactor_stats "$pid")"
  read -r g1 _ <<< "$(_cpu_jiffies)"
  [ "$port" = 0 ] || echo "after $3: $(_rdma_counters "$port")" >> "$NVMF_VM_LOGS/counters-${label// /_}"
  read -r name _ <<< "$w"
  out=$NVMF_VM_LOGS/fio-${label// /_}-$name-profile.json
  ios=$(_ios "$out")
  hz=$(getconf CLK_TCK)
  [ "$ios" -gt 0 ] || ios=1
  # Voluntary switches are the reactors' sleeps (epoll waits that blocked); per I/O in thousandths.
  # CPU per I/O: the reactors' user and system time, and the whole guest's busy time (host side included).
  echo "| $label | $name | $(((v1 - v0) * 1000 / ios)) | $(((n1 - n0) * 1000 / ios)) | $(((u1 - u0) * 1000000 / hz / ios)) | $(((s1 - s0) * 1000000 / hz / ios)) | $(((g1 - g0) * 1000000 / hz / ios)) | $(jq -r '.jobs[0].ctx' "$out") |" >> "$NVMF_VM_LOGS/profile.md"
}

# traced_runs LABEL DEV PID: one short run of each 4 KiB workload under strace -c, then one under perf record.
traced_runs() {
  local label=$1 dev=$2 pid=$3 name rw bs qd w out tracer
  for w in "${workloads[@]:0:2}"; do
    read -r name rw bs qd <<< "$w"
    out=$NVMF_VM_LOGS/strace-${label// /_}-$name
    strace -c -f -p "$pid" -o "$out.txt" 2> "$out.err" &
    tracer=$!
    sleep 1
    fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 --rw="$rw" --bs="$bs" --iodepth="$qd" \
      --numjobs=1 --time_based --runtime=5 --output-format=json > "$out.json" 2> /dev/null || true
    kill -INT "$tracer" 2> /dev/null
    wait "$tracer" 2> /dev/null || true
    echo "strace $label $name: $(_ios "$out.json") I/Os" >> "$NVMF_VM_LOGS/profile.md"
    out=$NVMF_VM_LOGS/perf-${label// /_}-$name
    perf record -q -g -F 499 -p "$pid" -o "$out.data" -- sleep 6 2> "$out.err" &
    tracer=$!
    sleep 0.5
    fio --name="$name" --filename="$dev" --ioengine=io_uring --direct=1 --rw="$rw" --bs="$bs" --iodepth="$qd" \
      --numjobs=1 --time_based --runtime=5 --output-format=json > "$out.json" 2> /dev/null || true
    wait "$tracer" 2> /dev/null || true
    perf report -i "$out.data" --stdio --no-children --percent-limit 1 > "$out.txt" 2>> "$out.err" || true
    rm -f "$out.data"
  done
}

if [ "$profile" = 1 ]; then
  {
    echo "| target | workload | reactor sleeps / I/O (x1000) | preemptions / I/O (x1000) | reactor user µs / I/O | reactor system µs / I/O | guest busy µs / I/O | fio ctx switches |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
  } > "$NVMF_VM_LOGS/profile.md"
fi

{
  echo "| target | workload | round | IOPS | MB/s | p99 (µs) | guest CPU % |"
  echo "|---|---|---:|---:|---:|---:|---:|"
} > "$table"

# Every target up and connected: nvmet-rdma on 4420 (nullb0), our i-th target on 4420+i (nullb<i>, metrics on
# 9420+i when profiling), named by its label: "nvmf-rs (R reactors)" or "baseline (R reactors)".
nvmet_subsys "$nqn_kernel" /dev/nullb0
nvmet_rdma_port 1 "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel"
dev_kernel=$(host_connect rdma "$NVMF_RDMA_ADDR" 4420 "$nqn_kernel" -i "$queues")
declare -A dev_ours
labels=()
for i in $(seq 1 ${#ours[@]}); do
  read -r kind bin r poll <<< "${ours[i - 1]}"
  label="$kind ($r reactors)"
  labels+=("$label")
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
address = "$NVMF_RDMA_ADDR"
port = $((4420 + i))
[[subsystem]]
nqn = "$nqn_ours-$i"
[[subsystem.namespace]]
path = "/dev/nullb$i"
EOF
  NVMF_TARGET_BIN=$bin nvmf_target_start "ours-$i" "$config"
  dev_ours[$label]=$(host_connect rdma "$NVMF_RDMA_ADDR" $((4420 + i)) "$nqn_ours-$i" -i "$queues")
done

for round in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    run_fio nvmet-rdma "$dev_kernel" "$w" "$round"
    for label in "${labels[@]}"; do run_fio "$label" "${dev_ours[$label]}" "$w" "$round"; done
  done
done

if [ "$profile" = 1 ]; then
  # The kernel target's row: only the guest's busy time per I/O means something there (no reactors).
  for w in "${workloads[@]}"; do profiled_fio nvmet-rdma "$dev_kernel" "$w" 0 0; done
  for i in $(seq 1 ${#ours[@]}); do
    label=${labels[i - 1]}
    pid=$(nvmf_target_pid "ours-$i")
    # Idle with a host connected (keep-alives only): the reactors must sleep, not spin.
    read -r v0 _ u0 s0 <<< "$(_reactor_stats "$pid")"
    sleep 5
    read -r v1 _ u1 s1 <<< "$(_reactor_stats "$pid")"
    echo "idle $label, 5 s: reactor CPU $(((u1 + s1 - u0 - s0) * 1000 / $(getconf CLK_TCK))) ms, $((v1 - v0)) sleeps" >> "$NVMF_VM_LOGS/profile.md"
    for w in "${workloads[@]}"; do profiled_fio "$label" "${dev_ours[$label]}" "$w" "$pid" $((9420 + i)); done
    traced_runs "$label" "${dev_ours[$label]}" "$pid"
  done
fi

host_disconnect "$nqn_kernel"
nvmet_teardown
for i in $(seq 1 ${#ours[@]}); do
  host_disconnect "$nqn_ours-$i"
  stop_daemon "ours-$i"
done

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
    for label in "${labels[@]}"; do
      read -r oi om op <<< "$(_means "$NVMF_VM_LOGS/result-${label// /_}-$name")"
      echo "| $label | $name | $oi | $om | $op | $((oi * 100 / (ki > 0 ? ki : 1))) % | $((kp * 100 / (op > 0 ? op : 1))) % |"
    done
  done
  echo
  echo "Guest: $(nproc) vCPUs (QEMU TCG), kernel $(uname -r), the kernel host on $queues I/O queue(s), Soft-RoCE rxe0, null_blk irqmode=0, fio io_uring direct, ${runtime} s per run after ${ramp} s ramp, load average at the end $(cut -d' ' -f1-3 /proc/loadavg); copy_to_user $(copy_to_user_rate)."
} >> "$table"
cat "$table"
if [ "$profile" = 1 ]; then
  echo
  cat "$NVMF_VM_LOGS/profile.md"
  for f in "$NVMF_VM_LOGS"/strace-*.txt; do
    echo "== $f"
    head -n 25 "$f"
  done
  cat "$NVMF_VM_LOGS"/counters-*
fi
