# Shared by the VM benchmarks (bench-tcp.sh, bench-rdma.sh, host-bench.sh, fio-jobs/compare-vm.sh), sourced; it only
# defines functions and variables. Two modes:
#   two nodes  (the default) a lab of two guests, `target` and `host`, joined by one virtio-net link
#              (10.88.1.0/24, MTU 1500; Soft-RoCE rxe0 on eth0 of each): the targets and their null_blk devices on
#              node target, the hosts and fio on node host, whose script runs the target's steps with on_node
#   one guest  (BENCH_NODES=1 or --one-guest) the old single guest: everything over 127.0.0.1 and rxe0 on dummy0
# The guest halves run the same code in both modes: `on_target SCRIPT` runs SCRIPT on node target (a job of its
# own: no shell variables or functions carry over, so SCRIPT sources what it needs) or, in one guest, in a subshell.
#
# On the machine (before the guest boots):
#   bench_boot LOGS SCRIPT DEADLINE NVMF_VM_ARGS...   boot per BENCH_NODES (BENCH_KERNEL, BENCH_NODE_CPUS or
#                                                     BENCH_CPUS) and run `bash SCRIPT --guest` on the host node
#                                                     ($target_dir/debug/nvmf-vm); LOGS/bench.md is its table
# In a guest:
#   bench_two_nodes                      true on a lab node
#   bench_addr                           the target's address on the link (two nodes) or TRANSPORT's one-guest
#     TRANSPORT                          address (tcp: 127.0.0.1, rdma: $NVMF_RDMA_ADDR); the same on both nodes
#   on_target SCRIPT                     run SCRIPT where the targets run (set -euo pipefail, guest-lib and this
#                                        file sourced); its stdout, its status
#   bench_sampler_start / _stop          (host node) the target node's CPU sampler (cpu-sampler.py), queried
#                                        without an exec on either node: an on_node job costs that node most of a
#                                        CPU-second, which would land in the sampled window
#   cpu_snap [PID]                       "T_BUSY T_TOTAL T_PROC T_NCPU H_BUSY H_TOTAL": the target node's busy and
#                                        total jiffies, PID's (on the target; 0 without) and CPU count, then the
#                                        host node's (one guest: the same machine twice)
#   cpu_header / cpu_align               the CPU columns' header and alignment cells: "target node CPU %", "host
#                                        node CPU %" (two nodes) or "guest CPU %" (one guest)
#   cpu_pct SNAP0 SNAP1                  those columns' cells: busy % of the nodes between two snapshots
#   cpu_us SNAP0 SNAP1 IOS               "T H" (one guest: "G G"): each node's busy CPU µs per I/O
#   bench_setting                        a sentence for the table's footer: mode, vCPUs, kernels, date
#   node_perf_start NAME / node_perf_stop NAME   (where the targets run) `perf record -a` of the whole node; the stop
#                                        prints where its busy time went, by command and function

# No exec here: on_target jobs source this file each time, and an exec costs 0.3-1 s under TCG.
_bench_lib_dir=.
[[ ${BASH_SOURCE[0]} != */* ]] || _bench_lib_dir=${BASH_SOURCE[0]%/*}
[[ $_bench_lib_dir = /* ]] || _bench_lib_dir=$PWD/$_bench_lib_dir
BENCH_SAMPLER_PORT=4599

bench_boot() {
  local logs=$1 script=$2 deadline=$3 nodes=${BENCH_NODES:-2} cpus=${BENCH_NODE_CPUS:-1}
  local kernel=${BENCH_KERNEL:-backports} vm=$target_dir/debug/nvmf-vm
  shift 3
  if [ "$nodes" = 1 ]; then
    "$vm" --kernel "$kernel" --cpus "${BENCH_CPUS:-2}" --deadline "$deadline" --logs "$logs" "$@" -- bash "$script" --guest
  else
    "$vm" --kernel "$kernel" --node "target:cpus=$cpus" --node "host:cpus=$cpus" --link target-host --on host \
      --deadline "$deadline" --logs "$logs" "$@" -- bash "$script" --guest
    cp "$logs/host/bench.md" "$logs/bench.md"
  fi
}

bench_two_nodes() { [ -n "${NVMF_NODE:-}" ]; }

bench_addr() {
  if bench_two_nodes; then
    if [ "$NVMF_NODE" = target ]; then echo "$NVMF_RDMA_ADDR"; else node_addr target; fi
  elif [ "$1" = rdma ]; then
    echo "$NVMF_RDMA_ADDR"
  else
    echo 127.0.0.1
  fi
}

on_target() {
  local script="set -euo pipefail; . $_bench_lib_dir/bench-lib.sh; $1"
  if bench_two_nodes; then on_node target "$script"; else (eval "$script"); fi
}

# The target node's CPU sampler (tests/vm/cpu-sampler.py) on its link address.
bench_sampler_start() {
  bench_two_nodes || return 0
  on_target "start_daemon cpu-sampler timeout 7200 python3 $_bench_lib_dir/cpu-sampler.py \"\$NVMF_RDMA_ADDR\" $BENCH_SAMPLER_PORT
    daemon_ready cpu-sampler 'cpu-sampler: ready'"
  _bench_target_addr=$(bench_addr tcp)
}
bench_sampler_stop() { bench_two_nodes || return 0; on_target 'stop_daemon cpu-sampler'; }

# Builtins only: this runs right before and after every measured run.
_node_jiffies() { local _c u n s i w q sq st; read -r _c u n s i w q sq st _ < /proc/stat; echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"; }
_pid_jiffies() { local f; [ -r "/proc/$1/stat" ] || { echo 0; return; }; read -r -a f < "/proc/$1/stat"; echo "$((f[13] + f[14]))"; }
_bench_ncpu=""
cpu_snap() {
  local fd line
  if bench_two_nodes; then
    exec {fd}<> "/dev/tcp/$_bench_target_addr/$BENCH_SAMPLER_PORT" || { fail "no CPU sampler on the target node"; return 1; }
    echo "${1:--}" >&"$fd"
    read -r -t 20 line <&"$fd" || true
    exec {fd}>&-
    [ -n "$line" ] || { fail "the target node's CPU sampler did not answer"; return 1; }
    echo "$line $(_node_jiffies)"
  else
    [ -n "$_bench_ncpu" ] || _bench_ncpu=$(nproc)
    line=$(_node_jiffies)
    echo "$line $([ -n "${1:-}" ] && _pid_jiffies "$1" || echo 0) $_bench_ncpu $line"
  fi
}

cpu_header() { if bench_two_nodes; then echo "target node CPU % | host node CPU %"; else echo "guest CPU %"; fi; }
cpu_align() { if bench_two_nodes; then echo "---:|---:"; else echo "---:"; fi; }
cpu_pct() {
  local a b
  read -r -a a <<< "$1"
  read -r -a b <<< "$2"
  local t=$(((b[0] - a[0]) * 100 / (b[1] - a[1] > 0 ? b[1] - a[1] : 1)))
  local h=$(((b[4] - a[4]) * 100 / (b[5] - a[5] > 0 ? b[5] - a[5] : 1)))
  if bench_two_nodes; then echo "$t | $h"; else echo "$h"; fi
}
cpu_us() {
  local a b n=$(($3 > 0 ? $3 : 1)) hz
  read -r -a a <<< "$1"
  read -r -a b <<< "$2"
  hz=$(getconf CLK_TCK)
  echo "$(((b[0] - a[0]) * 1000000 / hz / n)) $(((b[4] - a[4]) * 1000000 / hz / n))"
}

# The target node's kernel and vCPU count, once ("RELEASE NCPU").
_bench_target_info=""
bench_setting() {
  local tk tn when
  when=$(date -u '+%Y-%m-%d %H:%M UTC')
  if bench_two_nodes; then
    [ -n "$_bench_target_info" ] || _bench_target_info=$(on_target 'echo "$(uname -r) $(nproc)"')
    read -r tk tn <<< "$_bench_target_info"
    echo "Two nodes (QEMU TCG), target and host, joined by a virtio-net link (MTU 1500), $tn vCPU(s) on the target, $(nproc) on the host; kernel $tk on the target, $(uname -r) on the host; $when."
  else
    echo "One guest (QEMU TCG), target and host over loopback (RDMA: rxe0 on dummy0), $(nproc) vCPUs; kernel $(uname -r); $when."
  fi
}

# node_perf_start NAME / node_perf_stop NAME: `perf record -a` of the whole target node (kernel threads, softirqs and
# our daemon alike: nvmet runs only in the kernel). node_perf_stop prints where the node's busy time went (idle
# left out): by command, then the hottest functions, each in % of the busy samples; the reports stay in
# $NVMF_VM_LOGS/perf-node-NAME.txt.
node_perf_start() {
  local ctl=/tmp/perf-node-$1.ctl ack=/tmp/perf-node-$1.ack c a line
  command -v perf > /dev/null || return 0
  rm -f "$ctl" "$ack"
  mkfifo "$ctl" "$ack"
  # Started with its events disabled, and enabled once it has described every process (seconds under TCG, more
  # the first time): the samples are those of the run that follows, not of perf's own start.
  start_daemon "perf-node-$1" timeout 120 perf record -q -a -e cpu-clock -F 999 -D -1 --control "fifo:$ctl,$ack" \
    -o "/tmp/perf-node-$1.data"
  exec {c}<> "$ctl" {a}<> "$ack"
  echo enable >&"$c"
  read -r -t 60 -u "$a" line || log "perf record on the target node did not start"
  exec {c}>&- {a}>&-
}
node_perf_stop() {
  local pid f=$NVMF_VM_LOGS/perf-node-$1.txt
  [ -f "/run/nvmf-daemons/perf-node-$1.pid" ] || { echo "(no perf)"; return 0; }
  pid=$(cat "/run/nvmf-daemons/perf-node-$1.pid")
  kill -INT "$pid"
  wait_until 60 _gone "$pid" || true
  stop_daemon "perf-node-$1" || true
  perf report -i "/tmp/perf-node-$1.data" --stdio --no-children --sort comm,sym 2> /dev/null |
    grep -v '^#' | grep -v '^$' > "$f" || true
  # "PCT% COMM [k] SYM": idle is the idle task's halt; kernel threads' names lose their instance numbers.
  awk '$1 ~ /%$/ {
      p = $1 + 0; c = $2; $1 = ""; $2 = ""; $3 = ""; sym = $0; sub(/^ +/, "", sym)
      if (sym ~ /safe_halt|default_idle|cpu_idle|poll_idle/) next
      sub(/\/[0-9:]+(-.*)?$/, "", c); sub(/-[0-9]+$/, "", c)
      busy += p; bycomm[c] += p; bysym[c " " sym] += p
    }
    END {
      if (busy == 0) exit
      for (c in bycomm) printf "C %.3f %s\n", bycomm[c] * 100 / busy, c
      for (k in bysym) printf "S %.3f %s\n", bysym[k] * 100 / busy, k
    }' "$f" > "$f.busy"
  [ -s "$f.busy" ] || { echo "(no samples)"; return 0; }
  printf 'by command: %s; functions: %s\n' \
    "$(grep '^C ' "$f.busy" | sort -k2 -nr | head -5 | awk '{ printf "%s%s %.0f %%", (NR > 1 ? ", " : ""), $3, $2 }')" \
    "$(grep '^S ' "$f.busy" | sort -k2 -nr | head -8 |
      awk '{ p = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); printf "%s%s %.1f %%", (NR > 1 ? ", " : ""), $0, p }')"
}
