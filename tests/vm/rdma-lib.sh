# Helpers for the NVMe/RDMA scenarios against our target (tests/tests/vm_target_rdma_matrix.rs), sourced after
# guest-lib.sh. Lines meant for the test to parse start with a fixed word ("totals", "usage", "probe", "gauge");
# progress goes to stderr like guest-lib's.
#
#   rdma_totals                       rxe0's RDMA resource counts, e.g. "pd 3 cq 5 qp 4 cm_id 4 mr 3 ctx 1 srq 0"
#                                     (every process and the kernel: `rdma resource show`)
#   rdma_count KIND                   one count of rdma_totals (qp, cq, mr, ...)
#   rdma_settle WANT [SECONDS]        wait until rdma_totals prints WANT (default 30 s); prints the final totals
#   rdma_settle_count KIND N [S]      wait until rdma_count KIND is N (default 30 s)
#   report_totals LABEL               print "totals LABEL: <rdma_totals>"
#   report_usage LABEL PID            print "usage LABEL: fds N rss_kib N" of process PID
#   report_gauge LABEL                print "gauge LABEL: N", our target's nvmf_target_rdma_queue_pairs summed over
#                                     its series (labels), or "gauge LABEL: absent" when /metrics has none
#   probe LABEL ARGS...               run $NVMF_RDMA_PROBE --subnqn $NQN ARGS ($PROBE_TIMEOUT s at most, 60) and
#                                     print "probe LABEL: <its JSON line>"
#
# Environment: NVMF_RDMA_PROBE (the probe binary), NQN (the subsystem under test).

rdma_totals() { rdma resource show | sed -n 's/^[0-9]*: rxe0: *//p' | sed 's/ *$//'; }

rdma_count() { rdma_totals | awk -v k="$1" '{ for (i = 1; i < NF; i += 2) if ($i == k) print $(i + 1) }'; }

_totals_are() { [ "$(rdma_totals)" = "$1" ]; }
_count_is() { [ "$(rdma_count "$1")" = "$2" ]; }
rdma_settle_count() { wait_until "${3:-30}" _count_is "$1" "$2" || log "RDMA $1 count did not return to $2"; }
rdma_settle() {
  wait_until "${2:-30}" _totals_are "$1" || log "RDMA resources did not return to: $1"
  rdma_totals
}

report_totals() { echo "totals $1: $(rdma_totals)"; }

report_usage() {
  local label=$1 pid=$2 fds rss
  fds=$(ls "/proc/$pid/fd" | wc -l)
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
  echo "usage $label: fds $fds rss_kib $rss"
}

report_gauge() {
  echo "gauge $1: $(curl -sf --max-time 10 http://127.0.0.1:9420/metrics |
    awk '$1 ~ /^nvmf_target_rdma_queue_pairs($|[{])/ { s += $2; f = 1 } END { print f ? s : "absent" }')"
}

probe() {
  local label=$1 out
  shift
  out=$(timeout "${PROBE_TIMEOUT:-60}" "$NVMF_RDMA_PROBE" --subnqn "$NQN" "$@") || log "probe $label exited with $?"
  [ -n "$out" ] || out='{"outcome":"no output"}'
  echo "probe $label: $out"
}
