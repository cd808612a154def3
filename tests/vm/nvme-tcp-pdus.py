#!/usr/bin/env python3
"""List the NVMe/TCP PDUs in a reassembled one-direction byte stream.

    nvme-tcp-pdus.py STREAM.bin [--summary]

Prints one line per PDU: offset, type, flags, hlen, pdo, plen and the fields that
matter for that type (opcode/cid of a command capsule, status of a response, data
offsets and lengths, R2T offsets, the in-capsule data length). --summary prints only
the counts per type in order of first appearance. Stdlib only; digests are not checked
here (the Rust decoder does that).
"""
import struct
import sys

TYPES = {0: "ICReq", 1: "ICResp", 2: "H2CTermReq", 3: "C2HTermReq", 4: "CapsuleCmd",
         5: "CapsuleResp", 6: "H2CData", 7: "C2HData", 9: "R2T"}
FCTYPES = {0x00: "PropertySet", 0x01: "Connect", 0x04: "PropertyGet", 0x05: "AuthSend",
           0x06: "AuthRecv", 0x08: "Disconnect"}


def describe(t, flags, hdr, body, hlen, pdo, plen, hd):
    if t in (0, 1):
        pfv, b4, b5, maxr2t_or_data = struct.unpack("<HBBI", hdr[8:16])
        if t == 0:
            return f"pfv={pfv} hpda={b4} dgst={b5:#x} maxr2t={maxr2t_or_data}"
        return f"pfv={pfv} cpda={b4} dgst={b5:#x} maxh2cdata={maxr2t_or_data}"
    if t == 4:
        sqe = hdr[8:72]
        opc, fl, cid = sqe[0], sqe[1], struct.unpack("<H", sqe[2:4])[0]
        extra = f"fctype={FCTYPES.get(sqe[4], hex(sqe[4]))}" if opc == 0x7F else f"nsid={struct.unpack('<I', sqe[4:8])[0]}"
        cdw10 = struct.unpack("<I", sqe[40:44])[0]
        sgl = sqe[24:40]
        sgl_len = struct.unpack("<I", sgl[8:12])[0]
        icd = 0
        if pdo:
            icd = plen - pdo - (4 if flags & 2 else 0)
        return f"opc={opc:#04x} cid={cid} {extra} cdw10={cdw10:#x} sgl.len={sgl_len} sgl.type={sgl[15]:#04x} incapsule={icd}"
    if t == 5:
        cqe = hdr[8:24]
        dw0 = struct.unpack("<I", cqe[0:4])[0]
        cid, sf = struct.unpack("<HH", cqe[12:16])
        return f"cid={cid} status={sf >> 1:#x} dw0={dw0:#x}"
    if t in (6, 7):
        cccid, ttag, off, ln = struct.unpack("<HHII", hdr[8:20])
        fl = []
        if flags & 0x04:
            fl.append("LAST")
        if flags & 0x08:
            fl.append("SUCCESS")
        tag = f"ttag={ttag} " if t == 6 else ""
        return f"cccid={cccid} {tag}off={off} len={ln} {'|'.join(fl)}"
    if t == 9:
        cccid, ttag, off, ln = struct.unpack("<HHII", hdr[8:20])
        return f"cccid={cccid} ttag={ttag} off={off} len={ln}"
    if t in (2, 3):
        fes, fei = struct.unpack("<HI", hdr[8:14])
        return f"fes={fes:#x} fei={fei:#x} data={plen - hlen}B"
    return ""


def main():
    path = sys.argv[1]
    summary = "--summary" in sys.argv
    data = open(path, "rb").read()
    off, counts = 0, {}
    while off < len(data):
        if off + 8 > len(data):
            print(f"{off}: {len(data) - off} trailing bytes (partial header)")
            break
        t, flags, hlen, pdo, plen = struct.unpack("<BBBBI", data[off:off + 8])
        name = TYPES.get(t, f"type{t:#x}")
        counts[name] = counts.get(name, 0) + 1
        hd = 4 if (flags & 1) and t not in (0, 1, 2, 3) else 0
        hdr = data[off:off + max(hlen, 128)].ljust(128, b"\0")
        if not summary:
            pdu = data[off:off + plen]
            print(f"{off:8}: {name:<11} flags={flags:#04x} hlen={hlen} pdo={pdo} plen={plen} "
                  f"{describe(t, flags, hdr, pdu, hlen, pdo, plen, hd)}")
        if plen < 8:
            print(f"{off}: plen {plen} < 8, stopping")
            break
        off += plen
    if summary:
        print(", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
