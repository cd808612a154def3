#!/usr/bin/env python3
"""Seed the fuzz corpora from the kernel NVMe/TCP captures in common/tests/fixtures/kernel-tcp/ (run once; the
fuzzer grows the corpora from there). Seeds are named seed-*, so re-running replaces only them."""
import os, struct, pathlib

root = pathlib.Path(__file__).resolve().parent
fixtures = root.parent / "common/tests/fixtures/kernel-tcp"
corpus = root / "corpus"

def write(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(bytes(data))

def pdus(stream):
    at = 0
    while at + 8 <= len(stream):
        ptype, flags, hlen, pdo, plen = struct.unpack_from("<BBBBI", stream, at)
        if plen < 8 or at + plen > len(stream):
            return
        yield ptype, flags, hlen, pdo, stream[at:at + plen]
        at += plen

n = 0
for f in sorted(fixtures.glob("*.bin")):
    stream = f.read_bytes()
    digest = f.name.startswith("digest-")
    to_ctrl = "host-to-controller" in f.name
    mode = (0 if to_ctrl else 1) | (6 if digest else 0)
    body = stream[128:] if digest else stream  # the IC PDUs carry no digests
    write("tcp_pdu_stream", f"{f.stem}", bytes([mode, 13]) + body[:8192])
    for ptype, flags, hlen, pdo, pdu in pdus(stream):
        n += 1
        if ptype == 4:  # CapsuleCmd: the SQE follows the 8-byte common header
            sqe = pdu[8:72]
            data = pdu[pdo:len(pdu) - (4 if flags & 2 else 0)] if pdo else b""
            write("sqe_views", f"{f.stem}-{n}", sqe + data[:256])
            if sqe[0] == 0x7F and sqe[4] == 0x01 and len(data) >= 1024:
                write("connect_data", f"{f.stem}-{n}", data[:1024])
        elif ptype == 5:  # CapsuleResp: a CQE
            write("sqe_views", f"{f.stem}-{n}-cqe", pdu[8:24] + bytes(48))
        elif ptype == 7:  # C2HData: Identify data, log pages
            data = pdu[pdo:len(pdu) - (4 if flags & 2 else 0)]
            if "discovery" in f.name:
                write("discovery_log", f"{f.stem}-{n}", data)
            write("admin_data", f"{f.stem}-{n}", bytes([n & 0xff]) + data[:4096])

# RDMA CM private data as Linux nvme-rdma and nvmet-rdma send it: request (qid 1, hrqsize 128, hsqsize 127),
# accept (crqsize 128), reject (status 3, invalid QID).
write("rdma_private_data", "request", struct.pack("<HHHH", 0, 1, 128, 127) + bytes(24))
write("rdma_private_data", "accept", struct.pack("<HH", 0, 128) + bytes(28))
write("rdma_private_data", "reject", struct.pack("<HH", 0, 3))
