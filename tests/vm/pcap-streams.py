#!/usr/bin/env python3
"""Split a pcap of NVMe/TCP traffic into per-connection, per-direction byte streams.

    pcap-streams.py CAPTURE.pcap OUTDIR PREFIX [--port 4420] [--names discovery,admin,io]

Every TCP connection to PORT (in the order its SYN appears) is written as
OUTDIR/PREFIX-NAME.host-to-controller.bin and OUTDIR/PREFIX-NAME.controller-to-host.bin,
where NAME comes from --names (default conn0, conn1, ...). Loopback captures arrive in
order, but retransmitted or duplicated segments are dropped by sequence number and any
overlap is trimmed; a gap in the sequence space is an error (the capture lost data).

Reads classic libpcap files (Ethernet or Linux cooked link types, IPv4/IPv6). Stdlib only.
"""
import argparse
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        end = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        end = ">"
    else:
        sys.exit(f"{path}: not a classic pcap file (pcapng is not supported; use tcpdump -w)")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        _, _, incl, orig = struct.unpack(end + "IIII", data[off:off + 16])
        off += 16
        if incl != orig:
            sys.exit(f"{path}: truncated packet (capture with -s 0)")
        yield linktype, data[off:off + incl]
        off += incl


def tcp_segment(linktype, frame):
    """Return ((src, sport), (dst, dport), seq, flags, payload) or None."""
    if linktype == 1:  # Ethernet
        ethertype = struct.unpack(">H", frame[12:14])[0]
        ip = frame[14:]
    elif linktype == 113:  # Linux cooked (SLL)
        ethertype = struct.unpack(">H", frame[14:16])[0]
        ip = frame[16:]
    elif linktype == 276:  # Linux cooked v2
        ethertype = struct.unpack(">H", frame[0:2])[0]
        ip = frame[20:]
    else:
        sys.exit(f"unsupported link type {linktype}")
    if ethertype == 0x0800:
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            return None
        total = struct.unpack(">H", ip[2:4])[0]
        src, dst = ip[12:16], ip[16:20]
        tcp = ip[ihl:total]
    elif ethertype == 0x86DD:
        if ip[6] != 6:
            return None
        plen = struct.unpack(">H", ip[4:6])[0]
        src, dst = ip[8:24], ip[24:40]
        tcp = ip[40:40 + plen]
    else:
        return None
    sport, dport, seq = struct.unpack(">HHI", tcp[:8])
    doff = (tcp[12] >> 4) * 4
    flags = tcp[13]
    return (src, sport), (dst, dport), seq, flags, tcp[doff:]


class Direction:
    def __init__(self):
        self.next_seq = None
        self.data = bytearray()
        self.dropped = 0

    def add(self, seq, flags, payload):
        syn = flags & 0x02
        if self.next_seq is None:
            if not syn:
                sys.exit("capture starts in the middle of a connection (no SYN)")
            self.next_seq = (seq + 1) & 0xFFFFFFFF
            return
        if syn or not payload:
            return
        rel = (seq - self.next_seq + 2**31) % 2**32 - 2**31
        if rel > 0:
            sys.exit(f"gap of {rel} bytes in the sequence space: the capture lost data")
        skip = -rel
        if skip >= len(payload):
            self.dropped += 1
            return
        self.data += payload[skip:]
        self.next_seq = (self.next_seq + len(payload) - skip) & 0xFFFFFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("outdir")
    ap.add_argument("prefix")
    ap.add_argument("--port", type=int, default=4420)
    ap.add_argument("--names", default="")
    args = ap.parse_args()
    names = [n for n in args.names.split(",") if n]
    conns = {}  # (host endpoint, controller endpoint) -> [h2c Direction, c2h Direction]
    order = []
    for linktype, frame in packets(args.pcap):
        seg = tcp_segment(linktype, frame)
        if seg is None:
            continue
        src, dst, seq, flags, payload = seg
        if dst[1] == args.port:
            key, idx = (src, dst), 0
        elif src[1] == args.port:
            key, idx = (dst, src), 1
        else:
            continue
        if key not in conns:
            if not (flags & 0x02) or idx != 0:
                continue  # tail of a connection that began before the capture
            conns[key] = [Direction(), Direction()]
            order.append(key)
        conns[key][idx].add(seq, flags, payload)
    if names and len(names) != len(order):
        sys.exit(f"{len(order)} connections in the capture but {len(names)} names given")
    for i, key in enumerate(order):
        name = names[i] if names else f"conn{i}"
        for d, label in zip(conns[key], ("host-to-controller", "controller-to-host")):
            path = f"{args.outdir}/{args.prefix}-{name}.{label}.bin"
            with open(path, "wb") as f:
                f.write(d.data)
            print(f"{path}: {len(d.data)} bytes ({d.dropped} duplicate segments dropped)")


if __name__ == "__main__":
    main()
