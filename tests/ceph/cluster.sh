#!/bin/bash
# A one-node Ceph cluster in a folder, for tests and benchmarks: one monitor and one OSD on a memstore (data in
# RAM, gone when it stops), pool size 1, cephx on, every daemon's socket, log and pid under the folder, the
# monitor on a free 127.0.0.1 port and the OSD in a port range next to it. Nothing system-wide is touched.
#
#   tests/ceph/cluster.sh start DIR [POOL]   start it (DIR is created), create POOL (default rbd) and print
#                                            CEPH_CONF=DIR/ceph.conf
#   tests/ceph/cluster.sh stop DIR           stop its daemons (DIR stays)
#   tests/ceph/cluster.sh status DIR         `ceph -s`
#
# Needs Debian's ceph-mon, ceph-mgr, ceph-osd and ceph-common (the manager keeps the placement groups' state,
# which pool creation waits for). CEPH_MEMSTORE_BYTES sets the OSD's RAM (default 4 GiB; memory is used as written);
# CEPH_ADDR the address the daemons listen on (default 127.0.0.1; a test guest's link address serves other guests);
# CEPH_WATCH_TIMEOUT how long a silent client keeps its watches, hence its exclusive locks (default Ceph's 30 s).
set -Eeuo pipefail

usage() { echo "usage: $0 start|stop|status DIR [POOL]" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m "$2")
pool=${3:-rbd}
conf=$dir/ceph.conf

addr=${CEPH_ADDR:-127.0.0.1}

free_port() {
    python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$addr"
}

stop() {
    local pidfile pid
    for pidfile in "$dir"/run/*.pid; do
        [ -e "$pidfile" ] || continue
        pid=$(cat "$pidfile" 2>/dev/null || true)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    for pidfile in "$dir"/run/*.pid; do
        [ -e "$pidfile" ] || continue
        pid=$(cat "$pidfile" 2>/dev/null || true)
        for _ in $(seq 1 100); do
            [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

# On a failed start: what failed, and the daemons' own last words, which they write to their logs only.
tell() {
    local log
    echo "$0: \`$1\` failed with exit status $2" >&2
    for log in "$dir"/log/*.log "$dir"/log/*.out; do
        [ -s "$log" ] || continue
        echo "--- the end of $log:" >&2
        { grep -E '^[0-9]{4}-' "$log" | grep -v ' rocksdb: ' || true; } | tail -n 15 >&2
    done
}

start() {
    if [ -e "$conf" ]; then
        echo "$dir already holds a cluster; stop it and remove the folder first" >&2
        exit 1
    fi
    mkdir -p "$dir"/{mon,mgr,osd,run,log}
    local fsid mon_port osd_min osd_uuid
    fsid=$(cat /proc/sys/kernel/random/uuid)
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    mon_port=$(free_port)
    # The OSD binds several messenger ports (public, cluster, heartbeats); a range above the monitor's, chosen
    # per cluster so that two clusters on one machine do not collide.
    osd_min=$((20000 + RANDOM % 30000))
    cat >"$conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:$addr:$mon_port]
ms bind msgr1 = false
ms bind port min = $osd_min
ms bind port max = $((osd_min + 50))
public addr = $addr
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/keyring
run dir = $dir/run
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
# The monitor refuses to start when its folder's file system has less than 5% free; its data is small, and a
# test machine's disk may well be that full.
mon data avail crit = 0
osd client watch timeout = ${CEPH_WATCH_TIMEOUT:-30}
auth allow insecure global id reclaim = false
[mon]
mon data = $dir/mon
admin socket = $dir/run/\$name.asok
[mgr]
mgr data = $dir/mgr
keyring = $dir/mgr/keyring
admin socket = $dir/run/\$name.asok
[osd]
admin socket = $dir/run/\$name.asok
osd data = $dir/osd
keyring = $dir/osd/keyring
osd objectstore = memstore
memstore device bytes = ${CEPH_MEMSTORE_BYTES:-4294967296}
osd max object name len = 256
osd max object namespace len = 64
CONF
    ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
        --cap mgr 'allow *' >/dev/null
    chmod 600 "$dir/keyring"
    monmaptool --create --fsid "$fsid" --addv a "[v2:$addr:$mon_port]" "$dir/monmap" >/dev/null
    ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
    ceph-mon -c "$conf" -i a </dev/null >"$dir/log/mon.a.out" 2>&1
    ceph-authtool --create-keyring "$dir/mgr/keyring" --gen-key -n mgr.x >/dev/null
    ceph -c "$conf" --connect-timeout 30 auth add mgr.x mon 'allow profile mgr' osd 'allow *' \
        -i "$dir/mgr/keyring" >/dev/null 2>&1
    ceph-mgr -c "$conf" -i x </dev/null >"$dir/log/mgr.x.out" 2>&1
    local id
    id=$(ceph -c "$conf" --connect-timeout 30 osd create "$osd_uuid")
    ceph-osd -c "$conf" -i "$id" --mkfs --mkkey --osd-uuid "$osd_uuid" --no-mon-config 2>"$dir/log/osd-mkfs.err" \
        || { cat "$dir/log/osd-mkfs.err" >&2; exit 1; }
    ceph -c "$conf" auth add "osd.$id" osd 'allow *' mon 'allow profile osd' -i "$dir/osd/keyring" >/dev/null 2>&1
    ceph-osd -c "$conf" -i "$id" </dev/null >"$dir/log/osd.out" 2>&1
    timeout 60 ceph -c "$conf" osd pool create "$pool" 8 8 >/dev/null 2>&1
    timeout 60 rbd -c "$conf" pool init "$pool"
    # The pool is usable once its placement groups are active.
    for _ in $(seq 1 120); do
        # "N pgs: N active+clean; ..." once every placement group is.
        if ceph -c "$conf" pg stat 2>/dev/null | grep -Eq '^([0-9]+) pgs: \1 active\+clean;'; then
            echo "CEPH_CONF=$conf"
            return
        fi
        sleep 0.5
    done
    ceph -c "$conf" -s >&2
    echo "the pool's placement groups did not become active in 60 s" >&2
    exit 1
}

case $action in
start) trap 'status=$?; tell "$BASH_COMMAND" $status; stop; exit $status' ERR; start ;;
stop) stop ;;
status) ceph -c "$conf" -s ;;
*) usage ;;
esac
