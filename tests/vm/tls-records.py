#!/usr/bin/env python3
"""Check that a TCP byte stream of an NVMe/TCP connection secured by TLS 1.3 carries nothing in the clear after
the handshake's first flight.

    tls-records.py STREAM.bin [--forbid TEXT ...]

The stream (one direction, as pcap-streams.py writes it) must be a sequence of whole TLS records: handshake (22)
records first (the ClientHello or ServerHello, in the clear), then only change_cipher_spec (20) and application_data
(23) records, as TLS 1.3 sends everything after the hellos. No byte after the first record may contain a --forbid
text (the NQNs: they travel in the clear only inside the PSK identity of the ClientHello). Prints one summary line;
exits 1 on a violation.
"""
import argparse
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("stream")
    p.add_argument("--forbid", action="append", default=[])
    a = p.parse_args()
    data = open(a.stream, "rb").read()
    if not data:
        sys.exit(f"{a.stream}: empty stream")
    off, counts, first_end, hellos_done = 0, {}, None, False
    while off < len(data):
        if off + 5 > len(data):
            sys.exit(f"{a.stream}: a partial record header at {off}")
        ctype, version, length = data[off], data[off + 1 : off + 3], int.from_bytes(data[off + 3 : off + 5], "big")
        if version not in (b"\x03\x01", b"\x03\x03"):
            sys.exit(f"{a.stream}: record at {off} has version {version.hex()}: not TLS (an NVMe/TCP PDU in the clear?)")
        if ctype == 22:
            if hellos_done:
                sys.exit(f"{a.stream}: a handshake record in the clear at {off}, after encrypted records")
        elif ctype in (20, 23):
            hellos_done = hellos_done or ctype == 23
        else:
            sys.exit(f"{a.stream}: record type {ctype} at {off}")
        counts[ctype] = counts.get(ctype, 0) + 1
        off += 5 + length
        if first_end is None:
            first_end = off
    if off != len(data):
        sys.exit(f"{a.stream}: the last record runs past the stream's end")
    rest = data[first_end:]
    for text in a.forbid:
        if text.encode() in rest:
            sys.exit(f"{a.stream}: {text!r} in the clear after the first record")
    names = {22: "handshake", 20: "change_cipher_spec", 23: "application_data"}
    summary = ", ".join(f"{counts[t]} {names[t]}" for t in sorted(counts))
    print(f"{a.stream.rsplit('/', 1)[-1]}: {len(data)} bytes, {summary}; nothing forbidden after the first record")


if __name__ == "__main__":
    main()
