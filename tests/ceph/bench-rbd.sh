#!/bin/bash
# RBD through our target vs fio's rbd engine straight on the same image, on this machine: a one-node cluster
# (tests/ceph/cluster.sh, or the one CEPH_CONF names), a 1 GiB image written once in full, then rounds alternating
#   fio --ioengine=rbd (librbd in fio's process, its cache off as the target's is: writes durable when completed)
#   nvmf-host perf -> nvmf-target --namespace rbd:... over NVMe/TCP on 127.0.0.1 (one queue)
# at 4 KiB QD32 randread and randwrite. Prints IOPS and the CPU each path spent per I/O: fio's process (librbd's
# threads included) against the target's and perf's processes together; the OSD's CPU per I/O beside, for scale.
#
#   tests/ceph/bench-rbd.sh            BENCH_ROUNDS (3), BENCH_RUNTIME (10 s), BENCH_QD (32)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${BENCH_ROUNDS:-3} runtime=${BENCH_RUNTIME:-10} qd=${BENCH_QD:-32}
work=$(mktemp -d /var/tmp/nvmf-bench-rbd.XXXXXX)
target_pid=
cleanup() {
    [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null || true
    [ "${own_cluster:-}" != 1 ] || tests/ceph/cluster.sh stop "$work/cluster" >/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${CEPH_CONF:-}" ]; then
    own_cluster=1
    eval "$(tests/ceph/cluster.sh start "$work/cluster" | grep '^CEPH_CONF=')"
    export CEPH_CONF
fi
cargo build --release --quiet -p nvmf-target -p nvmf-host
rbd rm rbd/bench-rbd >/dev/null 2>&1 || true
rbd create --size 1G rbd/bench-rbd
fio --name=fill --ioengine=rbd --clientname=admin --pool=rbd --rbdname=bench-rbd --rw=write --bs=1M --iodepth=8 \
    --size=1G >/dev/null
osd_pid=$(cat "$(dirname "$CEPH_CONF")/run/osd.0.pid")
tck=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/nvmf-target --listen "tcp://127.0.0.1:$port" --control "$work/control.sock" \
    --namespace "rbd:rbd/bench-rbd,ceph-conf=$CEPH_CONF" >"$work/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 1 100); do grep -q 'nvmf-target: ready' "$work/target.log" && break; sleep 0.1; done
run_fio() { # ROUND RW
    local o0 o1 ios iops cpu
    o0=$(ticks "$osd_pid")
    CEPH_ARGS="--rbd_cache=false" /usr/bin/time -f '%U %S' -o "$work/fio.time" fio --name=f --ioengine=rbd \
        --clientname=admin --pool=rbd --rbdname=bench-rbd --rw="$2" --bs=4k --iodepth="$qd" \
        --runtime="$runtime" --time_based --output-format=json >"$work/fio.json"
    o1=$(ticks "$osd_pid")
    ios=$(jq '.jobs[0].read.total_ios + .jobs[0].write.total_ios' "$work/fio.json")
    iops=$(jq '(.jobs[0].read.iops + .jobs[0].write.iops) | floor' "$work/fio.json")
    cpu=$(awk '{ print $1 + $2 }' "$work/fio.time")
    echo "$1 $2 fio-rbd $iops $(echo "$cpu * 1000000 / $ios" | bc) $(( (o1 - o0) * 1000000 / tck / ios ))"
}
run_target() { # ROUND RW
    local o0 o1 t0 t1 ios iops cpu target_cpu
    o0=$(ticks "$osd_pid"); t0=$(ticks "$target_pid")
    /usr/bin/time -f '%U %S' -o "$work/perf.time" target/release/nvmf-host perf -t tcp -a 127.0.0.1 -s "$port" \
        -n nqn.2024-01.io.nvmf-rs:default -w "$2" -q "$qd" -o 4096 -T "$runtime" >"$work/perf.out" 2>&1
    o1=$(ticks "$osd_pid"); t1=$(ticks "$target_pid")
    iops=$(awk '/^Total/ { printf "%d", $3 }' "$work/perf.out")
    ios=$((iops * runtime))
    cpu=$(awk '{ print $1 + $2 }' "$work/perf.time")
    target_cpu=$(echo "($t1 - $t0) / $tck" | bc -l)
    echo "$1 $2 target $iops $(echo "($cpu + $target_cpu) * 1000000 / $ios" | bc) $(( (o1 - o0) * 1000000 / tck / ios ))"
}
echo "round workload path IOPS cpu_us_per_io osd_cpu_us_per_io"
# Odd rounds run fio first, even rounds the target first: the OSD's cost per write drifts over a run, and a fixed
# order would charge the drift to the path that always comes second.
for round in $(seq 1 "$rounds"); do
    for rw in randread randwrite; do
        if [ $((round % 2)) = 1 ]; then
            run_fio "$round" "$rw"; run_target "$round" "$rw"
        else
            run_target "$round" "$rw"; run_fio "$round" "$rw"
        fi
    done
done
