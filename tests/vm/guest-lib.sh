# Helpers for test VM scenarios (bash). Every scenario the harness runs has sourced this file already; in an
# interactive guest shell: . "$NVMF_GUEST_LIB". Progress goes to stderr; functions that produce a value (a
# device path) print it on stdout, so `dev=$(host_connect ...)` works. Every wait is bounded.
#
#   nullblk_create NAME SIZE_MIB              memory-backed null_blk through configfs -> /dev/NAME
#   nvmet_subsys NQN DEVICE [NSID]            kernel target subsystem (any host) with one namespace
#   nvmet_subsys_nullblk NQN [SIZE_MIB]       the same, backed by a fresh memory-backed null_blk
#   nvmet_tcp_port ID ADDR SVCID NQN...       kernel target port (tcp / rdma), exporting the subsystems
#   nvmet_rdma_port ID ADDR SVCID NQN...
#   nvmet_tls_port ID ADDR SVCID NQN...       a tcp port with addr_tsas tls1.3 (TLS required; the handshakes are
#                                             tlshd's: debian13-lib.sh)
#   nvmet_allow_host NQN HOSTNQN              the subsystem allows this host only (a configfs host entry)
#   nvmet_teardown                            remove every port, subsystem, namespace and host entry
#   host_connect TRTYPE ADDR SVCID NQN [ARGS] kernel host connect (nvme-cli) -> the namespace's /dev/nvmeXnY
#   host_disconnect NQN
#   fio_verify DEV [SECONDS] [ENGINE]         random writes with crc32c verification (default 10 s, libaio)
#   start_daemon NAME CMD...                  run CMD in the background, output to $(daemon_log NAME)
#   daemon_log NAME                           its log (guest tmpfs; copied to $NVMF_VM_LOGS/NAME.log)
#   daemon_ready NAME PATTERN [SECONDS]       until NAME's log has PATTERN (60 s); else its log, daemon_report, fail
#   daemon_report NAME                        its exit status, or every thread's state and kernel stack; dmesg
#   stop_daemon NAME [SECONDS]                SIGTERM, then SIGKILL after SECONDS (10); returns its status
#   wait_until SECONDS CMD...                 retry CMD every 0.2 s until it succeeds or SECONDS pass
#   wait_tcp_listen PORT [SECONDS]            until something listens on TCP PORT
#   netns_link NETNS HERE_ADDR THERE_ADDR     network namespace NETNS, its eth0 (THERE_ADDR/24) a veth peer of
#                                             v-NETNS here (HERE_ADDR/24): a second machine on a link
#   collect_logs [DIR]                        dmesg, nvmet configfs, nvme/rdma state -> DIR ($NVMF_VM_LOGS)
#   now_ms                                    Unix-epoch milliseconds (the clock of fio's --log_unix_epoch=1)
#   fio_completions LOG                       fio's per-I/O completion log (--write_lat_log=P --log_unix_epoch=1:
#                                             P_clat.1.log) sorted by time into /tmp/completions.sorted
#   fio_pause FROM_MS TO_MS LABEL             from it: "pause LABEL: N ms (from M ms into it; K I/Os completed in
#                                             it)", the longest interval without a completed I/O (write or verify
#                                             read) that starts in [FROM, TO), where, and how many completed there
#   step CMD...                               run CMD, log it with its status and duration
#
# A lab node (tests/src/vm/lab.rs; $NVMF_NODE is its name, $NVMF_LAB_NODES every node's):
#   on_node NODE SCRIPT                       run SCRIPT on lab node NODE (its agent; guest-lib sourced there), print
#                                             its stdout, its stderr on stderr; its exit status (ON_NODE_TIMEOUT, 3600 s)
#   node_addr PEER                            PEER's address on the link between this node and PEER
#   link_addr PEER                            this node's own address on that link
#   link_if PEER                              this node's interface on that link (ethK; Soft-RoCE rxeK on it)
#
# Our target (nvmf-target, path in $NVMF_TARGET_BIN; tests/tests/vm_target_tcp.rs):
#   nvmf_target_start NAME CONFIG [NETNS]     run it with CONFIG (in network namespace NETNS) until it is ready
#   ctrl_of NQN                               the live controller (nvmeX) of the connected subsystem NQN
#   namespaces_of NQN                         every namespace block device (nvmeXnY) of connected NQN, one a line
#   nvmf_target_pid NAME                      the pid of the nvmf-target process itself (not its `timeout`)
#   nvmf_target_reload NAME [SECONDS]         SIGHUP it, wait for the log's next "configuration reloaded" or
#                                             "configuration rejected" line (default 15 s) and print that line
#   metric SERIES [ADDR:PORT] [NETNS]         one value of its Prometheus endpoint (default 127.0.0.1:9420)
#   fio_rw_verify DEV BS QD SIZE [ENGINE]     randwrite with crc32c verification of SIZE bytes, then a randread
#                                             pass verifying the same blocks; prints the verified block counts
#                                             (fio: the array _FIO if a caller sets it, as fio13_rw_verify does)
#
# With the Debian 13 user space (Vm::debian13_userspace, $NVMF_DEBIAN13_ROOT): debian13-lib.sh beside this file,
# sourced below (nvme13, tlshd_start, host_connect_tls, the TLS keys).
#
# Environment: NVMF_RDMA_ADDR (10.77.0.1, rxe0's address on dummy0; a lab node's address on its first link), NVMF_VM_LOGS (a folder shared with the
# host when the harness was given one, else /run/nvmf-logs).

NVMET=/sys/kernel/config/nvmet
NULLB=/sys/kernel/config/nullb
# Logs hold UTF-8 (e.g. "…" in messages): under the C locale grep would call them binary and print "binary file
# matches" instead of the line. CI runs with no LANG at all.
export LC_ALL=C.UTF-8
: "${NVMF_RDMA_ADDR:=10.77.0.1}"
: "${NVMF_VM_LOGS:=/run/nvmf-logs}"
mkdir -p "$NVMF_VM_LOGS" /run/nvmf-daemons

_uptime() { local up _; read -r up _ </proc/uptime; echo "$up"; }
log() { echo "[$(_uptime)] $*" >&2; }
fail() { echo "FAIL: $*" >&2; return 1; }

_usecs() { echo "${EPOCHREALTIME/./}"; }
step() {
  local t0 rc dt
  t0=$(_usecs)
  log "\$ $*"
  "$@"
  rc=$?
  dt=$(($(_usecs) - t0))
  log "  (rc=$rc, $((dt / 1000000)).$((dt / 100000 % 10)) s)"
  return $rc
}

# _nap SECONDS: wait without an exec (a read with a timeout on stage2's fifo that nobody writes).
_nap() {
  if [ -p /run/nvmf-nap ]; then read -r -t "$1" _ <> /run/nvmf-nap || true; else sleep "$1"; fi
  return 0
}

# Builtins only in the loop: every exec costs 0.3-1 s under TCG.
wait_until() {
  local end=$((SECONDS + $1))
  shift
  until "$@" 2>/dev/null; do
    ((SECONDS >= end)) && return 1
    _nap 0.2
  done
}

wait_tcp_listen() { wait_until "${2:-10}" _tcp_listening "$1"; }
_tcp_listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }

netns_link() {
  local ns=$1 here=$2 there=$3
  ip netns add "$ns" && ip link add "v-$ns" type veth peer name eth0 netns "$ns" &&
    ip addr add "$here/24" dev "v-$ns" && ip link set "v-$ns" up &&
    ip -n "$ns" addr add "$there/24" dev eth0 && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
    { fail "cannot link network namespace $ns ($there) to this one ($here)"; return 1; }
  log "network namespace $ns: $there on eth0, linked to $here on v-$ns"
}

nullblk_create() {
  local name=$1 size=$2 d=$NULLB/$1
  [ -d $NULLB ] || modprobe null_blk || { fail "null_blk unavailable"; return 1; }
  mkdir "$d" && echo "$size" > "$d/size" && echo 512 > "$d/blocksize" && echo 1 > "$d/memory_backed" &&
    echo 1 > "$d/power" || { fail "cannot create null_blk $name"; return 1; }
  wait_until 5 test -b "/dev/$name" || { fail "/dev/$name did not appear"; return 1; }
  log "null_blk /dev/$name: $size MiB, memory-backed"
  echo "/dev/$name"
}

nvmet_subsys() {
  local nqn=$1 dev=$2 nsid=${3:-1} s=$NVMET/subsystems/$1
  [ -d $NVMET ] || modprobe nvmet || { fail "nvmet unavailable"; return 1; }
  mkdir -p "$s" && echo 1 > "$s/attr_allow_any_host" && mkdir "$s/namespaces/$nsid" &&
    echo -n "$dev" > "$s/namespaces/$nsid/device_path" && echo 1 > "$s/namespaces/$nsid/enable" ||
    { fail "cannot create nvmet subsystem $nqn (namespace $nsid = $dev)"; return 1; }
  log "nvmet subsystem $nqn: namespace $nsid = $dev"
}

_nullblk_seq=0
nvmet_subsys_nullblk() {
  local dev
  _nullblk_seq=$((_nullblk_seq + 1))
  dev=$(nullblk_create "nvmfnb$_nullblk_seq" "${2:-256}") || return 1
  nvmet_subsys "$1" "$dev"
}

_nvmet_port() {
  local id=$1 trtype=$2 addr=$3 svcid=$4 p=$NVMET/ports/$1 nqn
  shift 4
  modprobe "nvmet_$trtype" || { fail "nvmet_$trtype unavailable"; return 1; }
  mkdir "$p" && echo "$trtype" > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
    echo "$addr" > "$p/addr_traddr" && echo "$svcid" > "$p/addr_trsvcid" ||
    { fail "cannot create nvmet port $id ($trtype $addr:$svcid)"; return 1; }
  # Before the port is enabled (its first subsystem): tls1.3 makes addr_treq "required".
  if [ -n "${_NVMET_TSAS:-}" ]; then
    echo "$_NVMET_TSAS" > "$p/addr_tsas" || { fail "nvmet port $id: addr_tsas $_NVMET_TSAS refused"; return 1; }
  fi
  for nqn in "$@"; do
    ln -s "$NVMET/subsystems/$nqn" "$p/subsystems/$nqn" || { fail "cannot export $nqn on port $id"; return 1; }
  done
  log "nvmet port $id: $trtype $addr:$svcid${_NVMET_TSAS:+ ($_NVMET_TSAS)} exports ${*:-nothing}"
}
nvmet_tcp_port() { _nvmet_port "$1" tcp "$2" "$3" "${@:4}"; }
nvmet_rdma_port() { _nvmet_port "$1" rdma "$2" "$3" "${@:4}"; }
nvmet_tls_port() { _NVMET_TSAS=tls1.3 _nvmet_port "$1" tcp "$2" "$3" "${@:4}"; }

nvmet_allow_host() {
  local s=$NVMET/subsystems/$1 h=$NVMET/hosts/$2
  mkdir -p "$h" && echo 0 > "$s/attr_allow_any_host" && ln -s "$h" "$s/allowed_hosts/$2" ||
    { fail "cannot restrict nvmet subsystem $1 to host $2"; return 1; }
  log "nvmet subsystem $1 allows host $2 only"
}

nvmet_teardown() {
  local p s n h
  for p in "$NVMET"/ports/*; do
    [ -d "$p" ] || continue
    rm -f "$p"/subsystems/* 2>/dev/null
    rmdir "$p"
  done
  for s in "$NVMET"/subsystems/*; do
    [ -d "$s" ] || continue
    rm -f "$s"/allowed_hosts/* 2>/dev/null
    for n in "$s"/namespaces/*; do
      [ -d "$n" ] || continue
      echo 0 > "$n/enable"
      rmdir "$n"
    done
    rmdir "$s"
  done
  for h in "$NVMET"/hosts/*; do
    [ -d "$h" ] && rmdir "$h"
  done
  return 0
}

# The block device of namespace NSID (default: the lowest NSID) of the connected subsystem NQN. Found by NSID,
# not by name: the kernel scans namespaces concurrently, so nvme0n1 can be NSID 2.
_namespace_of() {
  local s d
  for s in /sys/class/nvme-subsystem/*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    for d in "$s"/nvme*n*; do
      [ -e "$d/nsid" ] && echo "$(cat "$d/nsid") $(basename "$d")"
    done | sort -n | { if [ -n "${2:-}" ]; then grep "^$2 "; else cat; fi; } | head -1 | cut -d' ' -f2
  done
}

# nvme-cli is the array _NVME_CLI when a caller sets it (debian13-lib.sh's host_connect_tls: nvme-cli 2.13 in the
# Debian 13 root), else this machine's.
host_connect() {
  local trtype=$1 addr=$2 svcid=$3 nqn=$4 ns=""
  shift 4
  modprobe "nvme_$trtype" || { fail "nvme_$trtype unavailable"; return 1; }
  timeout 60 "${_NVME_CLI[@]:-nvme}" connect -t "$trtype" -a "$addr" -s "$svcid" -n "$nqn" "$@" >&2 ||
    { fail "nvme connect -t $trtype -a $addr -s $svcid -n $nqn $* failed"; return 1; }
  wait_until 10 _has_namespace "$nqn" || { fail "no namespace of $nqn appeared"; return 1; }
  ns=$(_namespace_of "$nqn")
  log "connected $nqn over $trtype $addr:$svcid: /dev/$ns"
  echo "/dev/$ns"
}
_has_namespace() { local ns; ns=$(_namespace_of "$1" "${2:-}"); [ -n "$ns" ] && [ -b "/dev/$ns" ]; }

host_disconnect() {
  timeout 60 nvme disconnect -n "$1" >&2 || { fail "nvme disconnect -n $1 failed"; return 1; }
}

fio_verify() {
  local dev=$1 secs=${2:-10} engine=${3:-libaio} out=$NVMF_VM_LOGS/fio-$(basename "$1").log
  timeout $((secs + 60)) fio --name=verify --filename="$dev" --ioengine="$engine" --direct=1 \
    --rw=randwrite --bs=4k --iodepth=16 --size=64M --time_based --runtime="$secs" \
    --verify=crc32c --verify_backlog=256 --verify_fatal=1 --do_verify=1 --group_reporting > "$out" 2>&1
  local rc=$?
  local verified
  verified=$(sed -n 's/.*issued rwts: total=\([0-9]*\),.*/\1/p' "$out")
  grep -E 'WRITE:|err=|issued rwts' "$out" >&2
  [ $rc = 0 ] || { cat "$out" >&2; fail "fio verify on $dev: rc=$rc"; return 1; }
  [ "${verified:-0}" -gt 0 ] || { fail "fio on $dev verified nothing (no verify reads)"; return 1; }
  log "fio verify on $dev: ok ($verified blocks read back and verified)"
}

# A daemon writes its log to the guest's tmpfs, which scenarios read (`daemon_log`): over the 9p share a write
# now and then never reached the file (a `ready` line the daemon had logged, so `daemon_ready` failed with the
# daemon up). `tail -F` mirrors it into $NVMF_VM_LOGS as it grows (for a run that times out); stop_daemon and
# collect_logs copy it there whole.
daemon_log() { echo "/run/nvmf-daemons/$1.log"; }
# The daemon runs under a watcher subshell that records its exit status in NAME.status, so that another job of a
# lab node (another shell) can stop it and learn how it ended; its pid (NAME.pid) is the daemon's own.
start_daemon() {
  local name=$1 log pid
  shift
  log=$(daemon_log "$name")
  _stop_mirror "$name"
  rm -f "/run/nvmf-daemons/$name.pid" "/run/nvmf-daemons/$name.status"
  (
    "$@" > "$log" 2>&1 &
    echo $! > "/run/nvmf-daemons/$name.pid.tmp" && mv "/run/nvmf-daemons/$name.pid.tmp" "/run/nvmf-daemons/$name.pid"
    rc=0
    wait $! || rc=$? # the caller's `set -e` holds in this subshell too
    echo $rc > "/run/nvmf-daemons/$name.status"
  ) > /dev/null 2>&1 &
  wait_until 10 test -s "/run/nvmf-daemons/$name.pid"
  read -r pid < "/run/nvmf-daemons/$name.pid"
  log "started $name (pid $pid): $*"
  tail -n +1 -F "$log" > "$NVMF_VM_LOGS/$name.log" 2>/dev/null &
  echo $! > "/run/nvmf-daemons/$name.mirror"
}
_stop_mirror() {
  local pid
  pid=$(cat "/run/nvmf-daemons/$1.mirror" 2>/dev/null) || return 0
  # Safe under `set -e`: the mirror may be gone already, and `wait` returns its SIGTERM status.
  kill "$pid" 2>/dev/null || true
  wait_until 5 _gone "$pid" || true
  wait "$pid" 2>/dev/null || true
  rm -f "/run/nvmf-daemons/$1.mirror"
}
# _publish_log NAME [DIR]: the whole log into DIR ($NVMF_VM_LOGS; the mirror may have missed a write).
_publish_log() {
  _stop_mirror "$1"
  cp "$(daemon_log "$1")" "${2:-$NVMF_VM_LOGS}/$1.log" 2>/dev/null || true
}

daemon_ready() {
  local name=$1 pattern=$2 log pid
  log=$(daemon_log "$name")
  pid=$(cat "/run/nvmf-daemons/$name.pid" 2>/dev/null) || { fail "no daemon $name"; return 1; }
  wait_until "${3:-60}" _ready_or_gone "$log" "$pattern" "$pid" || true
  if grep -q "$pattern" "$log" && ! _gone "$pid"; then
    log "$name ready"
    return 0
  fi
  tail -n 40 "$log" >&2
  daemon_report "$name"
  fail "$name did not become ready"
}
_ready_or_gone() { grep -q "$2" "$1" || _gone "$3"; }

# Why a daemon is stuck or gone: its exit status (127: not a child of this shell), or each thread's state, wait
# channel and kernel stack, its children's too (our target runs under `timeout`); then the kernel log's tail,
# where a segfault or a hung task shows (the console is quiet). Safe under `set -e`.
daemon_report() {
  local pid p t rc=0
  pid=$(cat "/run/nvmf-daemons/$1.pid" 2>/dev/null) || return 0
  if _gone "$pid"; then
    wait_until 5 test -e "/run/nvmf-daemons/$1.status" || true
    rc=$(cat "/run/nvmf-daemons/$1.status" 2>/dev/null || echo unknown)
    echo "$1 (pid $pid) has exited: status $rc" >&2
  else
    for p in "$pid" $(awk -v p="$pid" '$4 == p { print $1 }' /proc/[0-9]*/stat 2>/dev/null); do
      for t in /proc/"$p"/task/*; do
        echo "$1: pid $p thread ${t##*/} $(cat "$t/comm") state $(awk '{ print $3 }' "$t/stat") wchan $(cat "$t/wchan")"
        sed 's/^/    /' "$t/stack" || true
      done
    done >&2 2>/dev/null
  fi
  echo "dmesg (tail):" >&2
  dmesg | tail -n 30 >&2 || true
}

stop_daemon() {
  local name=$1 secs=${2:-10} pid rc
  pid=$(cat "/run/nvmf-daemons/$name.pid" 2>/dev/null) || { fail "no daemon $name"; return 1; }
  kill -TERM "$pid" 2>/dev/null
  if ! wait_until "$secs" _gone "$pid"; then
    log "$name did not stop within $secs s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null
  fi
  # Its leader shows as a zombie while the other threads still exit (RDMA and io_uring teardown can take seconds
  # under TCG); the status comes once the whole process is reaped.
  wait_until "$((secs > 15 ? secs : 15))" test -e "/run/nvmf-daemons/$name.status" || true
  if [ ! -e "/run/nvmf-daemons/$name.status" ] && [ -d "/proc/$pid" ]; then
    log "$name has not been reaped: its threads (state, kernel stack):"
    local t
    for t in /proc/"$pid"/task/*; do
      log "  $(cut -d' ' -f1-3 "$t/stat" 2>/dev/null) $(tr '\n' ' ' < "$t/stack" 2>/dev/null | cut -c1-300)"
    done
  fi
  rc=$(cat "/run/nvmf-daemons/$name.status" 2>/dev/null || echo 255)
  rm -f "/run/nvmf-daemons/$name.pid" "/run/nvmf-daemons/$name.status"
  _publish_log "$name"
  log "stopped $name: status $rc"
  return $rc
}
_gone() { ! kill -0 "$1" 2>/dev/null || [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

collect_logs() {
  local dir=${1:-$NVMF_VM_LOGS} f
  mkdir -p "$dir"
  for f in /run/nvmf-daemons/*.log; do
    [ -e "$f" ] && _publish_log "$(basename "$f" .log)" "$dir"
  done
  dmesg > "$dir/dmesg.txt" 2>&1
  {
    echo "# nvme list"; nvme list 2>&1
    echo "# rdma link"; rdma link 2>&1
    echo "# ip addr"; ip addr 2>&1
    echo "# lsmod"; lsmod 2>&1
  } > "$dir/state.txt"
  if [ -d "$NVMET" ]; then
    find "$NVMET" -maxdepth 6 \( -type f -o -type l \) 2>/dev/null | while read -r f; do
      if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f = $(head -c 200 "$f" 2>/dev/null | tr '\n' ' ')"; fi
    done > "$dir/nvmet-configfs.txt"
  fi
}

# --- failover pauses, from fio's completion log ----------------------------------------------------------

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
fio_completions() { sort -n -t, -k1,1 "$1" > /tmp/completions.sorted; }
fio_pause() {
  awk -F', *' -v from="$1" -v to="$2" -v label="$3" '
    { t = $1 + 0 }
    prev != "" && prev >= from && prev < to && t - prev > longest { longest = t - prev; at = prev - from }
    t >= from && t < to { n++ }
    { prev = t }
    END { printf "pause %s: %d ms (from %d ms into it; %d I/Os completed in it)\n", label, longest, at, n }' \
    /tmp/completions.sorted
}

# --- lab nodes -------------------------------------------------------------------------------------------

_on_node_seq=0
on_node() {
  local node=$1 script=$2 d=/run/nvmf-lab/$1/jobs id rc end
  [ -d "$d" ] || { fail "no lab node $node (this guest is ${NVMF_NODE:-not a lab node})"; return 1; }
  _on_node_seq=$((_on_node_seq + 1))
  id=from-${NVMF_NODE}-$$-$_on_node_seq
  printf '%s\n' "$script" > "$d/$id.tmp" && mv "$d/$id.tmp" "$d/$id.sh" || { fail "cannot hand a job to $node"; return 1; }
  end=$((SECONDS + ${ON_NODE_TIMEOUT:-3600}))
  until [ -e "$d/$id.status" ]; do
    ((SECONDS < end)) || { fail "node $node did not finish job $id in ${ON_NODE_TIMEOUT:-3600} s"; return 1; }
    _nap 0.2
  done
  cat "$d/$id.out"
  cat "$d/$id.err" >&2
  read -r rc < "$d/$id.status"
  rm -f "$d/$id.out" "$d/$id.err" "$d/$id.status"
  return "$rc"
}

# _link_field PEER FIELD: a field of this node's line for PEER in /run/nvmf-vm/links
# (1 IFNAME, 2 MAC, 3 ADDR/PREFIX, 4 PEER, 5 PEER_ADDR).
_link_field() {
  local f
  while read -r -a f; do
    [ "${f[3]}" = "$1" ] && { echo "${f[$2 - 1]}"; return 0; }
  done < /run/nvmf-vm/links
  fail "node ${NVMF_NODE:-?} has no link to $1"
}
node_addr() { _link_field "$1" 5; }
link_addr() { local a; a=$(_link_field "$1" 3) && echo "${a%/*}"; }
link_if() { _link_field "$1" 1; }

# --- our target ------------------------------------------------------------------------------------------

nvmf_target_start() {
  local name=$1 config=$2 netns=${3:-}
  [ -x "${NVMF_TARGET_BIN:-}" ] || { fail "NVMF_TARGET_BIN (${NVMF_TARGET_BIN:-unset}) is not an executable"; return 1; }
  if [ -n "$netns" ]; then
    start_daemon "$name" ip netns exec "$netns" timeout 900 "$NVMF_TARGET_BIN" --config "$config"
  else
    start_daemon "$name" timeout 900 "$NVMF_TARGET_BIN" --config "$config"
  fi
  daemon_ready "$name" 'nvmf-target: ready'
}

ctrl_of() {
  local s c
  for s in /sys/class/nvme-subsystem/*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    for c in "$s"/nvme[0-9]*; do
      [ -e "$c" ] || continue
      c=${c##*/}
      [[ $c =~ ^nvme[0-9]+$ ]] && [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] && { echo "$c"; return 0; }
    done
  done
  return 1
}

metric() {
  local series=$1 addr=${2:-127.0.0.1:9420} netns=${3:-}
  if [ -n "$netns" ]; then
    ip netns exec "$netns" curl -sf --max-time 10 "http://$addr/metrics"
  else
    curl -sf --max-time 10 "http://$addr/metrics"
  fi | awk -v s="$series" '$1 == s { print $2; found = 1 } END { exit !found }'
}

# The "issued rwts: total=R,W,..." counts of a fio log, as "R W".
_fio_issued() { sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' "$1" | head -1; }

fio_rw_verify() {
  local dev=$1 bs=$2 qd=$3 size=$4 engine=${5:-libaio} out rc w r rr blocks
  out=$NVMF_VM_LOGS/fio-$(basename "$dev")-$bs-qd$qd
  local common=(--filename="$dev" --ioengine="$engine" --direct=1 --bs="$bs" --iodepth="$qd" --size="$size"
    --verify=crc32c --verify_fatal=1 --group_reporting)
  timeout 600 "${_FIO[@]:-fio}" --name=write "${common[@]}" --rw=randwrite --do_verify=1 > "$out-write.log" 2>&1
  rc=$?
  [ $rc = 0 ] || { cat "$out-write.log" >&2; fail "fio randwrite+verify bs=$bs qd=$qd on $dev: rc=$rc"; return 1; }
  timeout 600 "${_FIO[@]:-fio}" --name=read "${common[@]}" --rw=randread > "$out-read.log" 2>&1
  rc=$?
  [ $rc = 0 ] || { cat "$out-read.log" >&2; fail "fio randread+verify bs=$bs qd=$qd on $dev: rc=$rc"; return 1; }
  # total=READS,WRITES: the write job's reads are its verification.
  read -r r w <<< "$(_fio_issued "$out-write.log")"
  read -r rr _ <<< "$(_fio_issued "$out-read.log")"
  blocks=$(($(numfmt --from=iec "$size") / $(numfmt --from=iec "$bs")))
  echo "fio bs=$bs qd=$qd: wrote $w, verified $r after writing, $rr on randread (of $blocks)"
  [ "${w:-0}" = "$blocks" ] && [ "${r:-0}" = "$blocks" ] && [ "${rr:-0}" = "$blocks" ] ||
    { fail "fio bs=$bs qd=$qd: expected $blocks blocks written and verified twice"; return 1; }
}

namespaces_of() {
  local s
  for s in /sys/class/nvme-subsystem/*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    ls "$s" | grep -E '^nvme[0-9]+n[0-9]+$'
  done
  return 0
}

# start_daemon ran `timeout ... nvmf-target` (`ip netns exec` execs): signal the target, not timeout, which
# forwards a signal once and then ignores it.
nvmf_target_pid() {
  local pid
  pid=$(cat "/run/nvmf-daemons/$1.pid" 2>/dev/null) || { fail "no daemon $1"; return 1; }
  pgrep -P "$pid" -x nvmf-target || { fail "no nvmf-target process under $1 (pid $pid)"; return 1; }
}

_reload_outcomes() { grep -acE 'configuration (reloaded|rejected)' "$1" || true; }
_reload_logged() { [ "$(_reload_outcomes "$1")" -gt "$2" ]; }
nvmf_target_reload() {
  local name=$1 secs=${2:-15} log pid before
  log=$(daemon_log "$name")
  pid=$(nvmf_target_pid "$name") || return 1
  before=$(_reload_outcomes "$log")
  kill -HUP "$pid" || { fail "cannot signal $name (pid $pid)"; return 1; }
  if ! wait_until "$secs" _reload_logged "$log" "$before"; then
    tail -n 20 "$log" >&2
    fail "$name logged no reload outcome within $secs s"
    return 1
  fi
  log "$name reloaded its configuration"
  grep -aE 'configuration (reloaded|rejected)' "$log" | tail -n 1
}

# The guest's copy_to_user speed, "MB/s (erms: yes|no)": dd reads a 16 MiB tmpfs file 128 KiB at a time (the
# benchmarks' footer: QEMU 7.2's TCG runs `rep movsb`, which the kernel's copy_to_user and glibc's memcpy use on
# CPUs with ERMS, about ten times slower than a plain loop, so this rate says how dear every user-space copy is).
copy_to_user_rate() {
  local f=/dev/shm/copy-rate erms=no rate
  grep -qw erms /proc/cpuinfo && erms=yes
  head -c 16M /dev/zero > "$f"
  rate=$(dd if="$f" of=/dev/null bs=128K 2>&1 | awk '/copied/ { print $(NF - 1), $NF }')
  rm -f "$f"
  echo "$rate (erms: $erms)"
}

# --- the Debian 13 user space ----------------------------------------------------------------------------

if [ -n "${NVMF_DEBIAN13_ROOT:-}" ]; then
  . "${BASH_SOURCE[0]%/*}/debian13-lib.sh"
fi
