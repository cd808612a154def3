#!/usr/bin/env python3
"""Seed the fuzz corpora from the kernel NVMe/TCP captures in common/tests/fixtures/kernel-tcp/ (run once; the
fuzzer grows the corpora from there). Seeds are named seed-*, so re-running replaces only them. With target names as
arguments (e.g. `fuzz/seed-corpus.py tcp_connection`), only those corpora are seeded."""
import os, struct, pathlib, sys

root = pathlib.Path(__file__).resolve().parent
fixtures = root.parent / "common/tests/fixtures/kernel-tcp"
corpus = root / "corpus"

only = set(sys.argv[1:])

def write(target, name, data):
    if only and target not in only:
        return
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

# TLS PSK identities as Linux hosts offer them: version 0, version 1 with a SHA-256 digest (libnvme's test/psk.c), and a
# version 1 generated PSK's with a SHA-384 digest.
PSK_HOST, PSK_SUB = "nqn.psk-test-host", "nqn.psk-test-subsys"
write("psk_identity", "v0", f"NVMe0R01 {PSK_HOST} {PSK_SUB}".encode())
write("psk_identity", "v1-sha256", f"NVMe1R01 {PSK_HOST} {PSK_SUB} iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=".encode())
write("psk_identity", "v1-sha384-generated",
      f"NVMe1G02 {PSK_HOST} {PSK_SUB} QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a".encode())

# tcp_connection: scripts for nvmf_target::fuzzing (its module docs give the format). Byte 0 picks the port's settings,
# then records: (connection | action << 2) and, for "send", a u16 length and the bytes the host sends.
SUBNQN = b"nqn.2024-01.io.nvmf-rs:fixture"  # the kernel captures' subsystem, so they replay as they are
HOSTNQN = b"nqn.2014-08.org.nvmexpress:uuid:9e400745-2f31-442c-9f44-c935641937fa"

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

class Host:
    """One connection's PDUs, framed as negotiated (hpda 0, cpda 0)."""
    def __init__(self, hdgst=False, ddgst=False):
        self.hdgst, self.ddgst = hdgst, ddgst

    def icreq(self, maxr2t=0):
        dgst = (1 if self.hdgst else 0) | (2 if self.ddgst else 0)
        return struct.pack("<BBBBIHBBI", 0, 0, 128, 0, 128, 0, 0, dgst, maxr2t) + bytes(112)

    def pdu(self, ptype, header, data=b"", flags=0):
        hlen = 8 + len(header)
        pdo = (hlen + (4 if self.hdgst else 0)) if data else 0
        plen = hlen + (4 if self.hdgst else 0) + len(data) + (4 if data and self.ddgst else 0)
        flags |= (1 if self.hdgst else 0) | (2 if data and self.ddgst else 0)
        h = struct.pack("<BBBBI", ptype, flags, hlen, pdo, plen) + header
        out = h + (struct.pack("<I", crc32c(h)) if self.hdgst else b"")
        return out + data + (struct.pack("<I", crc32c(data)) if data and self.ddgst else b"")

    def command(self, sqe, data=b""):
        return self.pdu(4, sqe, data)

    def h2c(self, cid, ttag, offset, data, last=True):
        return self.pdu(6, struct.pack("<HHIII", cid, ttag, offset, len(data), 0), data, 4 if last else 0)

def sqe(opcode, cid, nsid=0, cdw10=0, cdw11=0, cdw12=0, cdw13=0, sgl=None):
    sgl = sgl or bytes(16)
    head = struct.pack("<BBHI", opcode, 0x40, cid, nsid) + bytes(16)
    return head + sgl + struct.pack("<IIIIII", cdw10, cdw11, cdw12, cdw13, 0, 0)

def in_capsule(length):
    return struct.pack("<QI", 0, length) + bytes(3) + bytes([0x01])

def transport(length):
    return struct.pack("<QI", 0, length) + bytes(3) + bytes([0x5A])

def connect(cid, qid, cntlid=0xFFFF, sqsize=31, cattr=0, kato=0, subnqn=SUBNQN, via_r2t=False, hostnqn=HOSTNQN):
    sgl = transport(1024) if via_r2t else in_capsule(1024)
    cmd = sqe(0x7F, cid, 0x01, qid << 16, sqsize | cattr << 16, kato, sgl=sgl)
    data = bytes([7] * 16) + struct.pack("<H", cntlid) + bytes(238) + subnqn.ljust(256, b"\0") + hostnqn.ljust(256, b"\0")
    return cmd, data.ljust(1024, b"\0")

def property_set(cid, offset, value):
    return sqe(0x7F, cid, 0x00, 0, offset, value & 0xFFFFFFFF, value >> 32)

def script(settings, records):
    """records: (connection, bytes) to send, or (connection, action, [argument byte])."""
    out = bytearray([settings])
    for r in records:
        if isinstance(r[1], (bytes, bytearray)):
            out += bytes([r[0]]) + struct.pack("<H", len(r[1])) + r[1]
        else:
            out += bytes([r[0] | r[1] << 2]) + bytes(r[2:])
    return bytes(out)

CLOSE, TOGGLE_READ, CLOCK, SHUTDOWN, PLACED = 1, 2, 3, 4, 5
CC_EN = 0x00460001

def association(h0, h1, settings_cattr=0):
    """Admin connection 0 (Connect, CC.EN, Number of Queues) and I/O connection 1 (Connect qid 1 to CNTLID 1)."""
    cmd, data = connect(1, 0)
    recs = [(0, h0.icreq()), (0, h0.command(cmd, data)), (0, h0.command(property_set(2, 0x14, CC_EN))),
            (0, h0.command(sqe(0x09, 3, 0, 0x07, 0x00030003)))]
    cmd, data = connect(1, 1, cntlid=1, cattr=settings_cattr)
    recs += [(1, h1.icreq(maxr2t=1)), (1, h1.command(cmd, data))]
    return recs

def pattern(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))

def io_session(hdgst, ddgst, small_r2t=False):
    h0, h1 = Host(hdgst, ddgst), Host(hdgst, ddgst)
    recs = association(h0, h1)
    # Write 4 KiB in capsule, read it back; write 8 KiB through R2T (slot 0 is the first command's: TTAG 0), in two
    # H2CData; read; flush; write zeroes; DSM deallocate; compare.
    recs += [(1, h1.command(sqe(0x01, 10, 1, 0, 0, 7, sgl=in_capsule(4096)), pattern(4096, 1)))]
    recs += [(1, h1.command(sqe(0x02, 11, 1, 0, 0, 7, sgl=transport(4096))))]
    recs += [(1, h1.command(sqe(0x01, 12, 1, 16, 0, 15, sgl=transport(8192))))]
    recs += [(1, h1.h2c(12, 0, 0, pattern(4096, 2), last=small_r2t)), (1, h1.h2c(12, 0, 4096, pattern(4096, 3)))]
    recs += [(1, h1.command(sqe(0x02, 13, 1, 16, 0, 15, sgl=transport(8192))))]
    recs += [(1, h1.command(sqe(0x00, 14, 1)))]
    recs += [(1, h1.command(sqe(0x08, 15, 1, 32, 0, 7)))]
    dsm = struct.pack("<IIQ", 0, 8, 32)
    recs += [(1, h1.command(sqe(0x09, 16, 1, 0, 0x4, sgl=in_capsule(16)), dsm))]
    recs += [(1, h1.command(sqe(0x05, 17, 1, 0, 0, 7, sgl=in_capsule(4096)), pattern(4096, 1)))]
    recs += [(1, h1.command(sqe(0x02, 18, 2, 0, 0, 1, sgl=transport(8192))))]
    recs += [(0, h0.command(sqe(0x06, 20, 0, 1, sgl=transport(4096))))]  # Identify Controller
    recs += [(0, h0.command(sqe(0x02, 21, 0xFFFFFFFF, 0x3FF0002, sgl=transport(4096))))]  # SMART log
    recs += [(0, h0.command(sqe(0x0C, 22)))]  # AER, held
    recs += [(0, h0.command(sqe(0x18, 23)))]  # Keep Alive
    recs += [(1, h1.command(sqe(0x7F, 30, 0x08)))]  # Disconnect the I/O queue
    return recs

write("tcp_connection", "io", script(0x00, io_session(False, False)))
write("tcp_connection", "io-digests", script(0x03, io_session(True, True)))
write("tcp_connection", "io-small", script(0xF8, io_session(False, False, small_r2t=True)))
# The same with both connections holding their Connect for placement: the admin queue (key 1) is served where it
# is, the I/O queue (key 2) moves to a new connection on its socket.
write("tcp_connection", "io-placed", script(0x03, [(0, PLACED), (1, PLACED)] + io_session(True, True)))

# Connect data fetched by R2T (TTAG 0: the queue's first slot), then admin commands.
h = Host()
cmd, data = connect(1, 0, kato=5000, via_r2t=True)
write("tcp_connection", "connect-r2t", script(0x00, [(0, h.icreq()), (0, h.command(cmd)), (0, h.h2c(1, 0, 0, data)),
    (0, h.command(property_set(2, 0x14, CC_EN))), (0, h.command(sqe(0x06, 3, 0, 1, sgl=transport(4096))))]))

# A Connect that never gets its data, then silence: the clock runs past the Connect and transfer timeouts.
h = Host()
cmd, data = connect(1, 0, via_r2t=True)
write("tcp_connection", "connect-stalled", script(0x00, [(0, h.icreq()), (0, h.command(cmd)), (0, CLOCK, 60), (0, CLOCK, 200)]))

# An association whose admin queue's keep-alive expires while an I/O write waits for its data.
h0, h1 = Host(), Host()
recs = association(h0, h1)
recs[1] = (0, h0.command(*connect(1, 0, kato=1000)))
recs += [(1, h1.command(sqe(0x01, 10, 1, 0, 0, 31, sgl=transport(16384))))]
recs += [(0, CLOCK, 20), (1, h1.h2c(10, 0, 0, pattern(4096, 5), last=False)), (0, CLOCK, 20)]
write("tcp_connection", "keep-alive-expiry", script(0x00, recs))

# Writes waiting on R2T until the pool runs dry, a host that stops reading, a target shutdown mid-transfer.
h0, h1 = Host(), Host()
recs = association(h0, h1)
for cid in range(10, 18):
    recs += [(1, h1.command(sqe(0x01, cid, 1, cid * 32, 0, 31, sgl=transport(16384))))]
recs += [(1, TOGGLE_READ), (1, h1.command(sqe(0x02, 40, 1, 0, 0, 31, sgl=transport(16384))))]
recs += [(1, h1.h2c(10, 0, 0, pattern(16384, 6)))]
recs += [(1, SHUTDOWN), (0, CLOSE)]
write("tcp_connection", "pool-exhausted", script(0x40, recs))

# Discovery: Connect to the discovery NQN, read its log page.
h = Host()
cmd, data = connect(1, 0, subnqn=b"nqn.2014-08.org.nvmexpress.discovery")
write("tcp_connection", "discovery", script(0x00, [(0, h.icreq()), (0, h.command(cmd, data)),
    (0, h.command(property_set(2, 0x14, CC_EN))), (0, h.command(sqe(0x02, 3, 0, 0x00FF0070, sgl=transport(4096))))]))

# DH-HMAC-CHAP: KEYED has a key in the fuzzed subsystem (nvmf_target::fuzzing::KEYED_HOSTNQN), so its queues must
# authenticate. Connection 0: AUTH_Negotiate, the Challenge, a Reply the fuzzer cannot make right (AUTH_Failure1;
# the queue ends). Connection 1: a Receive before any Negotiate (Failure1 at once).
# Connection 2: an I/O queue Connect to CNTLID 1 that never authenticates (it holds no QID), until the connect
# timeout. Connection 3: below.
KEYED = b"nqn.2014-08.org.nvmexpress:uuid:5e1f7c3a-0b2d-4c6e-8f91-a2b3c4d5e6f7"
NEGOTIATE = (corpus / "auth_messages/seed-negotiate").read_bytes()
REPLY = (corpus / "auth_messages/seed-reply").read_bytes()
DHCHAP = 0xE9010100  # SECP E9h, SPSP0 and SPSP1 01h

def auth_send(h, cid, message):
    return h.command(sqe(0x7F, cid, 0x05, DHCHAP, len(message), sgl=in_capsule(len(message))), message)

def auth_receive(h, cid, al=4096):
    return h.command(sqe(0x7F, cid, 0x06, DHCHAP, al, sgl=transport(al)))

h0, h1, h2 = Host(), Host(), Host()
recs = [(0, h0.icreq()), (0, h0.command(*connect(1, 0, hostnqn=KEYED))), (0, auth_send(h0, 2, NEGOTIATE)),
        (0, auth_receive(h0, 3)), (0, auth_send(h0, 4, REPLY)), (0, auth_receive(h0, 5))]
recs += [(1, h1.icreq()), (1, h1.command(*connect(1, 0, hostnqn=KEYED))), (1, auth_receive(h1, 2))]
recs += [(2, h2.icreq()), (2, h2.command(*connect(1, 1, cntlid=1, hostnqn=KEYED))), (2, auth_send(h2, 2, NEGOTIATE))]
# Connection 3 offers ffdhe2048 only: the target's key pair is made on its authentication pool.
NEGOTIATE_2048 = bytearray(NEGOTIATE)
NEGOTIATE_2048[8 + 3] = 1  # dhlen
NEGOTIATE_2048[8 + 4 + 30:8 + 4 + 36] = bytes([1, 0, 0, 0, 0, 0])  # ffdhe2048
h3 = Host()
recs += [(3, h3.icreq()), (3, h3.command(*connect(1, 0, hostnqn=KEYED))), (3, auth_send(h3, 2, bytes(NEGOTIATE_2048))),
         (3, auth_receive(h3, 3)), (0, CLOCK, 60)]
write("tcp_connection", "auth", script(0x00, recs))

# Reservations on namespace 1: register (key 1), acquire Write Exclusive, a write, a report (extended), release,
# replace, unregister; the notification mask and PTPL features, and the Reservation Notification log.
h0, h1 = Host(), Host()
recs = association(h0, h1)
keys = lambda a, b: struct.pack("<QQ", a, b)
recs += [(1, h1.command(sqe(0x0D, 10, 1, 0, sgl=in_capsule(16)), keys(0, 1)))]
recs += [(1, h1.command(sqe(0x11, 11, 1, 1 << 8, sgl=in_capsule(16)), keys(1, 0)))]
recs += [(1, h1.command(sqe(0x01, 12, 1, 0, 0, 7, sgl=in_capsule(4096)), pattern(4096, 9)))]
recs += [(1, h1.command(sqe(0x0E, 13, 1, 1023, 1, sgl=transport(4096))))]
recs += [(1, h1.command(sqe(0x15, 14, 1, 1 << 8, sgl=in_capsule(8)), struct.pack("<Q", 1)))]
recs += [(1, h1.command(sqe(0x0D, 15, 1, 2, sgl=in_capsule(16)), keys(1, 5)))]
recs += [(0, h0.command(sqe(0x09, 20, 1, 0x82, 0b1110)))]  # Set Features: Reservation Notification Mask
recs += [(0, h0.command(sqe(0x0A, 21, 1, 0x83)))]  # Get Features: Reservation Persistence
recs += [(0, h0.command(sqe(0x09, 22, 1, 0x83, 0)))]  # Set Features: PTPL off
recs += [(0, h0.command(sqe(0x02, 23, 0xFFFFFFFF, 0x000F0080, sgl=transport(64))))]  # Reservation Notification log
recs += [(1, h1.command(sqe(0x0D, 16, 1, 1, sgl=in_capsule(16)), keys(5, 0)))]
write("tcp_connection", "reservations", script(0x00, recs))

def first_cntlid(pdu):
    """An I/O queue Connect names CNTLID 1 (nvmet gave the kernel another), the first our fresh target allocates."""
    if pdu[0] != 4 or pdu[8] != 0x7F or pdu[12] != 0x01 or pdu[3] == 0:
        return pdu
    pdu, pdo = bytearray(pdu), pdu[3]
    pdu[pdo + 16:pdo + 18] = struct.pack("<H", 1)
    if pdu[1] & 2:  # data digest
        pdu[-4:] = struct.pack("<I", crc32c(bytes(pdu[pdo:-4])))
    return bytes(pdu)

# The kernel's own sessions, one PDU per record: discovery; admin and I/O queue interleaved as the kernel ran them
# (the I/O queue's PDUs larger than MDTS left out).
def kernel_pdus(name):
    stream = (fixtures / f"{name}.host-to-controller.bin").read_bytes()
    return [nvm_css(pdu) for _, _, _, _, pdu in pdus(stream)]

def nvm_css(pdu):
    """A Property Set of CC selecting CSS 110b (nvmet's CAP.CSS offers I/O command sets) selects NVM instead, as
    the kernel does against a target (ours) whose CAP.CSS offers NVM only."""
    if pdu[0] != 4 or pdu[8] != 0x7F or pdu[12] != 0x00 or struct.unpack_from("<I", pdu, 52)[0] != 0x14:
        return pdu
    pdu = bytearray(pdu)
    pdu[56] &= 0x8F
    if pdu[1] & 1:  # header digest
        pdu[72:76] = struct.pack("<I", crc32c(bytes(pdu[:72])))
    return bytes(pdu)

for digest in ("nodigest", "digest"):
    settings = 0x03 if digest == "digest" else 0x00
    write("tcp_connection", f"kernel-{digest}-discovery",
          script(settings, [(0, p) for p in kernel_pdus(f"{digest}-discovery")]))
    admin = [(0, p) for p in kernel_pdus(f"{digest}-admin")]
    io = [(1, first_cntlid(p)) for p in kernel_pdus(f"{digest}-io") if len(p) <= 8192]
    write("tcp_connection", f"kernel-{digest}-association", script(settings, admin[:14] + io + admin[14:]))
