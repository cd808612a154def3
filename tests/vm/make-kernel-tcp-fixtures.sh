#!/bin/bash
# Turn the pcaps written by capture-kernel-tcp.sh into common/tests/fixtures/kernel-tcp/:
#   tests/vm/make-kernel-tcp-fixtures.sh CAPTURE_DIR
# Each TCP connection becomes <session>-<connection>.{host-to-controller,controller-to-host}.bin;
# the pcaps are kept xz-compressed; every stream's PDU listing goes to pdus.txt, and the PDU counts per
# stream (the README's table) are printed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CAP=${1:?capture dir}
FIX=$HERE/../../common/tests/fixtures/kernel-tcp
mkdir -p "$FIX"
for s in nodigest digest; do
  python3 "$HERE/pcap-streams.py" "$CAP/$s.pcap" "$FIX" "$s" --names discovery,admin,io
  xz -9 -c "$CAP/$s.pcap" > "$FIX/$s.pcap.xz"
done
xz -9 -c "$CAP/termreq.pcap" > "$FIX/termreq.pcap.xz"
: > "$FIX/pdus.txt"
for s in nodigest digest; do
  for c in discovery admin io; do
    for d in host-to-controller controller-to-host; do
      f=$s-$c.$d.bin
      { echo "== $f"; python3 "$HERE/nvme-tcp-pdus.py" "$FIX/$f"; echo; } >> "$FIX/pdus.txt"
      echo "| \`${f%.bin}\` | $(python3 "$HERE/nvme-tcp-pdus.py" "$FIX/$f" --summary) |"
    done
  done
done
