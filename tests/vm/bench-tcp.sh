#!/usr/bin/env bash
# NVMe/TCP benchmark in the test VM: our target (nvmf-target, release build) against the kernel's nvmet-tcp,
# both exporting the same null_blk device (/dev/nullb0, no memory backing) to the same kernel host over
# 127.0.0.1, fio 4 KiB randread and randwrite at QD 32 (io_uring, O_DIRECT). Prints a Markdown table: IOPS,
# p99 completion latency, the guest's CPU use and the target process's (ours only: nvmet runs in kernel
# threads). Not a test: TCG makes absolute numbers meaningless, the ratios are what to read.
#
#   tests/vm/bench-tcp.sh                        # build, boot one guest, run everything (~3-4 min)
#   BENCH_RUNTIME=20 BENCH_REACTORS="1 2" BENCH_PERF=1 tests/vm/bench-tcp.sh
#
# Environment: BENCH_RUNTIME (seconds per fio run, default 15), BENCH_RAMP (2), BENCH_REACTORS (our reactor
# counts to try, default "2"), BENCH_PERF=1 (perf record our daemon during one more randread run; report in the
# logs folder), BENCH_CPUS (guest vCPUs, 2), BENCH_LOGS (logs folder, default <target dir>/tmp/bench-tcp).
# The table is also written to $BENCH_LOGS/bench.md. `--guest` is the half that runs in the VM.
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
  logs=${BENCH_LOGS:-$target_dir/tmp/bench-tcp}
  rm -rf "$logs"
  mkdir -p "$logs"
  env_args=(--env "NVMF_TARGET_BIN=$target_dir/release/nvmf-target")
  for v in BENCH_RUNTIME BENCH_RAMP BENCH_REACTORS BENCH_PERF; do
    [ -n "${!v:-}" ] && env_args+=(--env "$v=${!v}")
  done
  export NVMF_VM_CPU=${NVMF_VM_CPU:-max,-erms}
  "$target_dir/debug/nvmf-vm" --bare --modules nvmet,nvmet_tcp,nvme_tcp --cpus "${BENCH_CPUS:-2}" \
    --deadline 1200 --logs "$logs" "${env_args[@]}" -- bash tests/vm/bench-tcp.sh --guest
  echo "QEMU \`-cpu $NVMF_VM_CPU\`." | tee -a "$logs/bench.md"
  echo "bench: logs in $logs" >&2
  exit 0
fi

# ---- in the guest ----------------------------------------------------------------------------------------
. "$NVMF_GUEST_LIB"
runtime=${BENCH_RUNTIME:-15}
ramp=${BENCH_RAMP:-2}
reactors=${BENCH_REACTORS:-2}
nqn_kernel=nqn.2024-01.io.nvmf-rs:bench-nvmet
nqn_ours=nqn.2024-01.io.nvmf-rs:bench-ours
table=$NVMF_VM_LOGS/bench.md

# Pure null_blk: no memory backing, completions inline, so the storage costs next to nothing.
modprobe null_blk nr_devices=1 gb=64 bs=512 queue_mode=2 irqmode=0 submit_queues="$(nproc)" hw_queue_depth=256
wait_until 10 test -b /dev/nullb0 || { fail "no /dev/nullb0"; exit 1; }

_cpu_busy_jiffies() { local _c u n s i w q sq st; read -r _c u n s i w q sq st _ < /proc/stat; echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"; }
_proc_jiffies() { local f; read -r -a f < "/proc/$1/stat"; echo "$((f[13] + f[14]))"; }

# run_fio LABEL DEV RW [PID]: one fio run; appends a table row.
run_fio() {
  local label=$1 dev=$2 rw=$3 pid=${4:-} out b0 t0 b1 t1 p0=0 p1=0 iops p99 guest proc dir
  out=$NVMF_VM_LOGS/fio-$label-$rw.json
  dir=${rw#rand}
  read -r b0 t0 <<< "$(_cpu_busy_jiffies)"
  [ -n "$pid" ] && p0=$(_proc_jiffies "$pid")
  timeout $((runtime + ramp + 60)) fio --name="$label" --filename="$dev" --ioengine=io_uring --direct=1 \
    --rw="$rw" --bs=4k --iodepth=32 --numjobs=1 --time_based --runtime="$runtime" --ramp_time="$ramp" \
    --output-format=json > "$out" 2> "$out.err" || { cat "$out.err" >&2; fail "fio $label $rw"; return 1; }
  read -r b1 t1 <<< "$(_cpu_busy_jiffies)"
  [ -n "$pid" ] && p1=$(_proc_jiffies "$pid")
  iops=$(jq -r ".jobs[0].$dir.iops | floor" "$out")
  p99=$(jq -r ".jobs[0].$dir.clat_ns.percentile[\"99.000000\"] / 1000 | floor" "$out")
  guest=$(((b1 - b0) * 100 / (t1 - t0)))
  # Our daemon's CPU as % of one CPU over the whole run (ramp included, like the guest figure).
  proc="–"
  [ -n "$pid" ] && proc=$(((p1 - p0) * 100 / ((t1 - t0) / $(nproc))))
  echo "| $label | 4 KiB $rw QD32 | $iops | $p99 | $guest | $proc |" >> "$table"
  log "$label $rw: $iops IOPS, p99 $p99 µs, guest CPU $guest %, target CPU $proc %"
  echo "$iops" > "$NVMF_VM_LOGS/iops-$label-$rw"
}

{
  echo "| target | workload | IOPS | p99 (µs) | guest CPU % | target process CPU % (of one CPU) |"
  echo "|---|---|---:|---:|---:|---:|"
} > "$table"

# Kernel nvmet-tcp.
nvmet_subsys "$nqn_kernel" /dev/nullb0
nvmet_tcp_port 1 127.0.0.1 4420 "$nqn_kernel"
dev=$(host_connect tcp 127.0.0.1 4420 "$nqn_kernel")
run_fio nvmet-tcp "$dev" randread
run_fio nvmet-tcp "$dev" randwrite
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
address = "127.0.0.1"
port = 4421
[[subsystem]]
nqn = "$nqn_ours"
[[subsystem.namespace]]
path = "/dev/nullb0"
EOF
  nvmf_target_start "ours-$r" "$config"
  pid=$(pgrep -P "$(cat "/run/nvmf-daemons/ours-$r.pid")" | head -1) # the daemon under `timeout`
  dev=$(host_connect tcp 127.0.0.1 4421 "$nqn_ours")
  run_fio "nvmf-rs ($r reactors)" "$dev" randread "$pid"
  run_fio "nvmf-rs ($r reactors)" "$dev" randwrite "$pid"
  if [ "${BENCH_PERF:-0}" = 1 ] && command -v perf > /dev/null; then
    log "perf record of our daemon during a randread run"
    timeout $((runtime + 60)) fio --name=perf --filename="$dev" --ioengine=io_uring --direct=1 --rw=randread \
      --bs=4k --iodepth=32 --time_based --runtime="$runtime" > /dev/null 2>&1 &
    fio_pid=$!
    sleep "$ramp"
    perf record -e cpu-clock -F 499 -g -p "$pid" -o "$NVMF_VM_LOGS/perf-$r.data" -- sleep $((runtime - ramp - 1)) \
      > "$NVMF_VM_LOGS/perf-$r.record.txt" 2>&1 || log "perf record failed (see perf-$r.record.txt)"
    wait "$fio_pid" || true
    perf report -i "$NVMF_VM_LOGS/perf-$r.data" --stdio --no-children --sort dso,sym 2> /dev/null |
      grep -v '^$' | head -80 > "$NVMF_VM_LOGS/perf-$r.txt" || true
    ps -L -o tid,comm,pcpu -p "$pid" > "$NVMF_VM_LOGS/threads-$r.txt" 2>&1 || true
  fi
  host_disconnect "$nqn_ours"
  stop_daemon "ours-$r"
done

# Ratios against nvmet-tcp.
{
  echo
  for rw in randread randwrite; do
    k=$(cat "$NVMF_VM_LOGS/iops-nvmet-tcp-$rw")
    for r in $reactors; do
      o=$(cat "$NVMF_VM_LOGS/iops-nvmf-rs ($r reactors)-$rw")
      echo "- $rw: nvmf-rs ($r reactors) / nvmet-tcp = $((o * 100 / k)) %"
    done
  done
  echo
  echo "Guest: $(nproc) vCPUs (QEMU TCG), kernel $(uname -r), null_blk irqmode=0, fio io_uring direct, ${runtime} s per run after ${ramp} s ramp; copy_to_user $(copy_to_user_rate)."
} >> "$table"
cat "$table"
