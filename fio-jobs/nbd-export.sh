#!/usr/bin/env bash
# The NBD export on this machine: fio's nbd engine -> `nvmf-host nbd` (a unix socket) -> NVMe/TCP on 127.0.0.1 ->
# nvmf-target serving a file on /dev/shm through the page cache. 4 KiB randread and randwrite at QD 32 and
# 128 KiB sequential read at QD 8, NBD_RUNTIME seconds each, NBD_ROUNDS rounds; with NBD_BASELINE_DIR (a folder
# holding an older build's nvmf-host) each run is repeated with that export right after, same target. Prints one
# line per run (IOPS, fio's p99 completion latency, the export's and the target's CPU per I/O from /proc) and a
# Markdown table of the rounds' means. Not a test: compare builds within one run.
#
#   fio-jobs/nbd-export.sh                                   # build (release) and run, one I/O queue
#   NBD_BASELINE_DIR=/path/to/old/release NBD_QUEUES=2 NBD_ROUNDS=3 fio-jobs/nbd-export.sh
#
# Environment: NBD_RUNTIME (10), NBD_ROUNDS (2), NBD_QUEUES (the export's I/O queues, `-i`, 1), NBD_PORT (4499).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v fio > /dev/null && command -v jq > /dev/null || { echo "nbd-export: needs fio and jq" >&2; exit 1; }
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "nbd-export: this fio has no nbd engine (libnbd)" >&2; exit 1; }
target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
cargo build --quiet --release -p nvmf-target --bin nvmf-target -p nvmf-host --bin nvmf-host
runtime=${NBD_RUNTIME:-10} rounds=${NBD_ROUNDS:-2} queues=${NBD_QUEUES:-1} port=${NBD_PORT:-4499}
nqn=nqn.2024-01.io.nvmf-rs:nbd-export
work=$(mktemp -d)
image=/dev/shm/nvmf-nbd-export-$$.img
truncate -s 256M "$image"
cat > "$work/target.toml" <<EOF
[logging]
level = "warn"

[[listener]]
address = "127.0.0.1"
port = $port

[[subsystem]]
nqn = "$nqn"

[[subsystem.namespace]]
path = "$image"
buffered_io = true
EOF
"$target_dir/release/nvmf-target" --config "$work/target.toml" --control "$work/target.sock" > "$work/target.out" \
  2> "$work/target.log" &
target=$!
trap 'kill $target 2> /dev/null; rm -rf "$work" "$image"' EXIT
for _ in $(seq 100); do grep -q "nvmf-target: ready" "$work/target.out" && break; sleep 0.1; done

builds=("new $target_dir/release")
[ -n "${NBD_BASELINE_DIR:-}" ] && builds+=("baseline $NBD_BASELINE_DIR")
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
declare -A sum_iops=() sum_p99=() sum_host=() sum_target=()
for r in $(seq "$rounds"); do
  for w in "randread 4k 32" "randwrite 4k 32" "read 128k 8"; do
    read -r rw bs qd <<< "$w"
    for b in "${builds[@]}"; do
      read -r name dir <<< "$b"
      rm -f "$work/nbd.sock"
      "$dir/nvmf-host" nbd -a 127.0.0.1 -s "$port" -n "$nqn" -i "$queues" --listen "unix:$work/nbd.sock" \
        > /dev/null 2> "$work/host-$name.log" &
      host=$!
      for _ in $(seq 100); do [ -S "$work/nbd.sock" ] && break; sleep 0.1; done
      h0=$(cpu_ticks $host) t0=$(cpu_ticks $target)
      fio --name=nbd --ioengine=nbd --uri="nbd+unix:///?socket=$work/nbd.sock" --rw="$rw" --bs="$bs" \
        --iodepth="$qd" --size=256M --time_based --runtime="$runtime" --output-format=json \
        --output="$work/fio.json" > /dev/null 2>&1
      h1=$(cpu_ticks $host) t1=$(cpu_ticks $target)
      kill -TERM $host
      wait $host || true
      f=$work/fio.json
      ios=$(jq '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$f")
      iops=$(jq '.jobs[0].read.iops + .jobs[0].write.iops | floor' "$f")
      p99=$(jq '[.jobs[0].read, .jobs[0].write | .clat_ns.percentile["99.000000"] // 0] | max / 1000 | floor' "$f")
      hcpu=$(((h1 - h0) * 1000000 / hz / ios)) tcpu=$(((t1 - t0) * 1000000 / hz / ios))
      echo "round $r $rw $bs QD$qd $name: $iops IOPS, p99 $p99 µs, export $hcpu µs CPU/I/O, target $tcpu µs CPU/I/O"
      k="$rw $bs QD$qd|$name"
      sum_iops[$k]=$((${sum_iops[$k]:-0} + iops)) sum_p99[$k]=$((${sum_p99[$k]:-0} + p99))
      sum_host[$k]=$((${sum_host[$k]:-0} + hcpu)) sum_target[$k]=$((${sum_target[$k]:-0} + tcpu))
    done
  done
done
echo
echo "| workload | build | IOPS | p99 µs | export CPU µs/I/O | target CPU µs/I/O |"
echo "|---|---|---:|---:|---:|---:|"
for w in "randread 4k QD32" "randwrite 4k QD32" "read 128k QD8"; do
  for b in "${builds[@]}"; do
    read -r name _ <<< "$b"
    k="$w|$name"
    echo "| $w | $name | $((sum_iops[$k] / rounds)) | $((sum_p99[$k] / rounds)) | $((sum_host[$k] / rounds)) | $((sum_target[$k] / rounds)) |"
  done
done
echo
echo "$(nproc) CPUs, $(uname -r), export with $queues I/O queue(s), ${runtime} s per run, $rounds round(s), $(date -u +%F)."
