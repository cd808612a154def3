"""The target node's CPU sampler for the VM benchmarks (tests/vm/bench-lib.sh): listens on ADDR:PORT and answers
each connection's one request line, a PID or "-", with "BUSY TOTAL PROC NCPU": the node's busy and total jiffies
(/proc/stat), PID's user + system jiffies (0 without one) and the CPU count. The host node asks with bash's
/dev/tcp, so a snapshot costs neither node an exec. Ends with status 0 on SIGTERM."""

import os
import signal
import socket
import sys

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(8)
print("cpu-sampler: ready", flush=True)
ncpu = os.cpu_count()
while True:
    conn, _ = server.accept()
    with conn:
        request = conn.makefile().readline().strip()
        with open("/proc/stat") as f:
            u, n, sy, i, w, q, sq, st = (int(x) for x in f.readline().split()[1:9])
        proc = 0
        if request.isdigit():
            try:
                with open(f"/proc/{request}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                proc = int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                pass
        conn.sendall(f"{u + n + sy + q + sq + st} {u + n + sy + i + w + q + sq + st} {proc} {ncpu}\n".encode())
