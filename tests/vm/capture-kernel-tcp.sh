#!/bin/bash
# Record the kernel NVMe/TCP host talking to kernel nvmet-tcp (guest side of the fixture capture).
# Runs inside the test VM as root, with nvmet, nvmet_tcp, nvme_tcp and null_blk available:
#   OUT=/shared/dir tests/vm/capture-kernel-tcp.sh
# Writes OUT/nodigest.pcap, OUT/digest.pcap and OUT/termreq.pcap; the log is stdout.
# tests/vm/make-kernel-tcp-fixtures.sh turns them into common/tests/fixtures/kernel-tcp/.
set -u
OUT=${OUT:?set OUT to a shared directory}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
NQN=nqn.2024-01.io.nvmf-rs:fixture
C=/sys/kernel/config/nvmet

echo "kernel: $(uname -r)"
echo "nvme-cli: $(nvme version)"
modprobe -a nvmet nvmet_tcp nvme_tcp null_blk
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config

# A memory-backed null_blk (configfs) so reads return what was written; 512 B blocks, 64 MiB.
# (6.12 names a configfs null_blk device after its directory.)
B=/sys/kernel/config/nullb/nullb9
mkdir $B && echo 64 > $B/size && echo 512 > $B/blocksize && echo 1 > $B/memory_backed && echo 1 > $B/power
dev=/dev/nullb9
for _ in $(seq 50); do [ -b $dev ] && break; sleep 0.1; done
ls -l $dev

mkdir $C/subsystems/$NQN
echo 1 > $C/subsystems/$NQN/attr_allow_any_host
mkdir $C/subsystems/$NQN/namespaces/1
echo -n "$dev" > $C/subsystems/$NQN/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN/namespaces/1/enable
mkdir $C/ports/1
echo tcp > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo 127.0.0.1 > $C/ports/1/addr_traddr; echo 4420 > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
echo "nvmet port 1 inline_data_size: $(cat $C/ports/1/param_inline_data_size 2>/dev/null)"

# Deterministic payload: byte i of the 128 KiB buffer is (7*i + i/4096) mod 256.
$PY -c 'import sys; sys.stdout.buffer.write(bytes((7 * i + (i >> 12)) & 0xFF for i in range(131072)))' > /tmp/pattern

capture_start() { tcpdump -i lo -s 0 -U -w "$OUT/$1.pcap" "$2" 2>"/tmp/tcpdump-$1.log" & TP=$!; sleep 1.5; }
capture_stop() { sleep 0.5; kill -INT $TP; wait $TP; cat "/tmp/tcpdump-$1.log"; }

session() { # name, digest flags
  local name=$1; shift
  echo "=== session $name (nvme-cli flags: ${*:-none})"
  capture_start "$name" "tcp port 4420"
  set -x
  timeout 60 nvme discover -t tcp -a 127.0.0.1 -s 4420 "$@"
  timeout 60 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN -i 1 "$@"
  { set +x; } 2>/dev/null
  local ns=""
  for _ in $(seq 50); do
    for s in /sys/class/nvme-subsystem/*; do
      [ "$(cat $s/subsysnqn 2>/dev/null)" = $NQN ] && ns=$(ls $s | grep -E '^nvme[0-9]+n[0-9]+$' | head -1)
    done
    [ -n "$ns" ] && [ -b /dev/$ns ] && break; sleep 0.1
  done
  echo "namespace: /dev/$ns"; sleep 1   # let the partition scan's reads finish first
  set -x
  dd if=/tmp/pattern of=/dev/$ns bs=4k count=1 oflag=direct status=none
  dd if=/tmp/pattern of=/dev/$ns bs=128k count=1 seek=1 oflag=direct status=none
  dd if=/dev/$ns of=/tmp/r4 bs=4k count=1 iflag=direct status=none
  dd if=/dev/$ns of=/tmp/r128 bs=128k count=1 skip=1 iflag=direct status=none
  timeout 60 nvme disconnect -n $NQN
  { set +x; } 2>/dev/null
  head -c 4096 /tmp/pattern > /tmp/p4
  cmp /tmp/r128 /tmp/pattern && cmp /tmp/r4 /tmp/p4 && echo "read back: ok"
  capture_stop "$name"
}
session nodigest
session digest -g -G

echo "=== TermReq probes"
echo 5 > /sys/module/nvme_core/parameters/admin_timeout   # the bad-pdu cases end in a Connect timeout
capture_start termreq "tcp port 4420 or tcp portrange 4430-4432"
timeout 60 $PY "$HERE/termreq-probe.py" target 4420
for c in bad-icresp:4430 bad-pdu-type:4431 c2htermreq:4432; do
  $PY "$HERE/termreq-probe.py" host ${c#*:} ${c%%:*} & P=$!
  sleep 1
  timeout 30 nvme connect -t tcp -a 127.0.0.1 -s ${c#*:} -n $NQN -i 1; echo "nvme connect rc=$?"
  wait $P
done
capture_stop termreq
dmesg | grep -iE 'nvme|nvmet' | tail -40
