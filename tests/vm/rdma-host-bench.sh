#!/usr/bin/env bash
# Guest script: our NVMe/RDMA host (`nvmf-host perf -t rdma`) vs the kernel's nvme-rdma host driven by fio
# (io_uring, direct) against the same kernel nvmet-rdma namespace (memory-backed null_blk) over rxe0: 4 KiB
# random read at QD 32 on one queue, BENCH_RUNTIME seconds each (default 10). Prints one line per side.
#
#   cargo build -p nvmf-host --release --bin nvmf-host   # or: RDMA_HOST_BENCH=1 NVMF_VM=1 cargo test -p nvmf-tests --test vm_rdma_host
#   cargo run -p nvmf-tests --bin nvmf-vm -- \
#     "NVMF_HOST_BIN=$CARGO_TARGET_DIR/release/nvmf-host tests/vm/rdma-host-bench.sh"
set -eu
[ -n "${NVMF_GUEST_LIB:-}" ] && . "$NVMF_GUEST_LIB"
NQN=nqn.2024-01.io.nvmf-rs:rdma-host-bench
T=${BENCH_RUNTIME:-10}
: "${NVMF_HOST_BIN:?path of the nvmf-host binary}"
dev=$(nullblk_create rdmahostbench 1024)
nvmet_subsys $NQN "$dev"
nvmet_rdma_port 1 "$NVMF_RDMA_ADDR" 4420 $NQN

ours=$(timeout $((T + 60)) "$NVMF_HOST_BIN" perf -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -n $NQN \
  -q 32 -o 4096 -w randread -T "$T" --json)
echo "ours:   $(echo "$ours" | grep -o '"iops":[0-9.]*' | head -1) $(echo "$ours" | grep -o '"latency_us":{[^}]*}' | head -1)"

dev=$(host_connect rdma "$NVMF_RDMA_ADDR" 4420 $NQN -i 1)
kernel=$(timeout $((T + 60)) fio --name=kernel --filename="$dev" --ioengine=io_uring --direct=1 --rw=randread \
  --bs=4k --iodepth=32 --runtime="$T" --time_based)
host_disconnect $NQN
echo "kernel: $(echo "$kernel" | grep -E 'read: IOPS=') $(echo "$kernel" | grep -E '^ +clat \(' | head -1)"
