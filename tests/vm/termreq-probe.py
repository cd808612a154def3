#!/usr/bin/env python3
"""Probe how the Linux kernel's NVMe/TCP target and host react to malformed PDUs.

    termreq-probe.py target PORT      # act as a host against nvmet-tcp on 127.0.0.1:PORT
    termreq-probe.py host PORT CASE   # act as a controller on 127.0.0.1:PORT for one
                                      # `nvme connect` (CASE: bad-icresp | bad-pdu-type |
                                      # c2htermreq)

For every case it prints what the peer sent back before closing the connection (or
before a 5 s silence), decoded as PDU headers, and whether any of it was a TermReq.
Stdlib only; run inside the test VM while tcpdump records port PORT.
"""
import socket
import struct
import sys
import time

TYPES = {0: "ICReq", 1: "ICResp", 2: "H2CTermReq", 3: "C2HTermReq", 4: "CapsuleCmd",
         5: "CapsuleResp", 6: "H2CData", 7: "C2HData", 9: "R2T"}


def crc32c(data, crc=0xFFFFFFFF):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def icreq(pfv=0, hlen=128, dgst=0, plen=128):
    h = struct.pack("<BBBBIHBBI", 0, 0, hlen, 0, plen, pfv, 0, dgst, 0)
    return h + bytes(plen - len(h))


def drain(sock, secs=5.0):
    sock.settimeout(secs)
    buf = bytearray()
    end = time.time() + secs
    try:
        while time.time() < end:
            chunk = sock.recv(65536)
            if not chunk:
                return bytes(buf), "peer closed the connection (FIN)"
            buf += chunk
    except socket.timeout:
        return bytes(buf), f"no more data for {secs:.0f} s (connection still open)"
    except ConnectionResetError:
        return bytes(buf), "peer reset the connection (RST)"
    return bytes(buf), "deadline"


def describe(data):
    out, off = [], 0
    while off + 8 <= len(data):
        t, flags, hlen, pdo, plen = struct.unpack("<BBBBI", data[off:off + 8])
        d = f"{TYPES.get(t, hex(t))}(flags={flags:#x} hlen={hlen} plen={plen})"
        if t in (2, 3):
            fes, fei = struct.unpack("<HI", data[off + 8:off + 14])
            d += f" fes={fes:#x} fei={fei:#x}"
        out.append(d)
        if plen < 8:
            break
        off += plen
    return out or ["(nothing)"]


def report(case, data, how):
    pdus = describe(data)
    term = any("TermReq" in p for p in pdus)
    print(f"case {case}: received {len(data)} bytes: {', '.join(pdus)}; {how}; TermReq={'yes' if term else 'no'}")
    sys.stdout.flush()


def target_cases(port):
    connect_sqe = bytearray(64)
    connect_sqe[0] = 0x7F  # fabrics
    connect_sqe[4] = 0x01  # Connect
    cases = {
        "icreq-pfv1": icreq(pfv=1),
        "icreq-hlen64": icreq(hlen=64),
        "icreq-plen64": icreq(plen=128)[:4] + struct.pack("<I", 64) + icreq()[8:],
        "pdu-type-0x0e-after-ic": None,
        "capsule-hlen-80-after-ic": None,
        "capsule-bad-hdgst-after-ic": None,
    }
    for name, first in cases.items():
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if first is not None:
            s.sendall(first)
        else:
            dg = 1 if "hdgst" in name else 0
            s.sendall(icreq(dgst=dg))
            resp, _ = drain(s, 2)
            print(f"  ({name}: ICResp {describe(resp)})")
            if name.startswith("pdu-type"):
                s.sendall(struct.pack("<BBBBI", 0x0E, 0, 8, 0, 8))
            elif name.startswith("capsule-hlen"):
                s.sendall(struct.pack("<BBBBI", 4, 0, 80, 0, 80) + bytes(connect_sqe) + bytes(8))
            else:
                hdr = struct.pack("<BBBBI", 4, 1, 72, 0, 76) + bytes(connect_sqe)
                s.sendall(hdr + struct.pack("<I", crc32c(hdr) ^ 0xDEADBEEF))
        data, how = drain(s)
        report(name, data, how)
        s.close()
        time.sleep(0.5)


def host_case(port, case):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    ls.settimeout(30)
    print(f"listening on 127.0.0.1:{port} for case {case}", flush=True)
    c, _ = ls.accept()
    c.settimeout(5)
    req = c.recv(128)
    print(f"  host sent: {describe(req)}")
    if case == "bad-icresp":
        resp = struct.pack("<BBBBIHBBI", 1, 0, 128, 0, 128, 1, 0, 0, 131072)  # pfv=1
        c.sendall(resp + bytes(128 - len(resp)))
    else:
        resp = struct.pack("<BBBBIHBBI", 1, 0, 128, 0, 128, 0, 0, 0, 131072)
        c.sendall(resp + bytes(128 - len(resp)))
        first, _ = drain(c, 3)
        print(f"  host sent: {describe(first)}")
        # the 6.12 host reads a whole 24-byte response header before it looks at the type
        if case == "bad-pdu-type":
            c.sendall(struct.pack("<BBBBI", 0x0E, 0, 24, 0, 24) + bytes(16))
        else:  # C2HTermReq, FES 1 = Invalid PDU Header Field, FEI 0 (byte offset of the bad field)
            c.sendall(struct.pack("<BBBBIHI", 3, 0, 24, 0, 24, 1, 0) + bytes(10))
    data, how = drain(c, 8)
    report(f"host-{case}", data, how)
    c.close()
    ls.close()


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target_cases(int(sys.argv[2]))
    else:
        host_case(int(sys.argv[2]), sys.argv[3])
