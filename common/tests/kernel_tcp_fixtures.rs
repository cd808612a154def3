//! Decode real NVMe/TCP traffic between the Linux kernel host (nvme-tcp) and the kernel target
//! (nvmet-tcp), captured in a VM (tests/vm/capture-kernel-tcp.sh, split by tests/vm/pcap-streams.py).
//!
//! The fixtures live in `tests/fixtures/kernel-tcp/`: one `NAME.host-to-controller.bin` and one
//! `NAME.controller-to-host.bin` per TCP connection (the byte stream of each direction), a README.md naming
//! them with a table of the PDU types and counts of each stream, and `pdus.txt`, the capture tool's own
//! decode (offset, type and fields of every PDU). Every connection must decode completely, digests
//! included, with fields that agree across the two directions, with the README's table and with
//! `pdus.txt`.
//!
//! The test fails when the fixture directory is missing: it does not pass vacuously.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use nvmf_common::nvme::opcode;
use nvmf_common::transport::tcp::{
    decode, CommonHeader, Decoded, DecoderConfig, Direction, Framing, IcReq, IcResp, Pdu, PduError,
};

const HOST_TO_CONTROLLER: &str = ".host-to-controller.bin";
const CONTROLLER_TO_HOST: &str = ".controller-to-host.bin";
/// Larger than any data the kernel puts in one PDU (nvmet-tcp offers MAXH2CDATA 4 MiB; the host's C2HData
/// follow its I/O size).
const MAX_DATA: u32 = 16 << 20;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-tcp")
}

/// A PDU with its data, as decoded from one direction's stream.
#[derive(Debug, Clone)]
struct Received {
    /// Offset of the PDU in its stream.
    offset: usize,
    pdu: Pdu,
    data: Vec<u8>,
}

/// Decode a whole stream. `framing_after_ic` gives the framing to switch to after the first PDU (the
/// ICReq/ICResp). Returns the PDUs and, if decoding stopped early, the error and offset.
fn decode_stream(
    bytes: &[u8],
    receive: Direction,
    framing_after_ic: Option<Framing>,
) -> (Vec<Received>, Option<(usize, String)>) {
    let mut config = DecoderConfig::new(receive, MAX_DATA);
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match decode(&bytes[at..], &config) {
            Ok(Decoded::Pdu { pdu, data, consumed }) => {
                out.push(Received { offset: at, pdu, data: bytes[at..][data].to_vec() });
                at += consumed;
                if matches!(pdu, Pdu::IcReq(_) | Pdu::IcResp(_)) {
                    if let Some(f) = framing_after_ic {
                        config.framing = f;
                    }
                }
            }
            Ok(Decoded::Needed(n)) => {
                return (out, Some((at, format!("stream ends inside a PDU ({n} more bytes needed)"))));
            }
            Err(e) => return (out, Some((at, describe(&e)))),
        }
    }
    (out, None)
}

fn describe(e: &PduError) -> String {
    format!("{e} (FES {:?}, FEI {})", e.fes(), e.fei())
}

/// The framing a connection negotiated, from the first PDU of each direction.
fn negotiated(h2c: &[u8], c2h: &[u8]) -> Option<(IcReq, IcResp, Framing)> {
    let first = |bytes: &[u8], receive| match decode(bytes, &DecoderConfig::new(receive, MAX_DATA)) {
        Ok(Decoded::Pdu { pdu, .. }) => Some(pdu),
        _ => None,
    };
    let Some(Pdu::IcReq(req)) = first(h2c, Direction::HostToController) else { return None };
    let Some(Pdu::IcResp(resp)) = first(c2h, Direction::ControllerToHost) else { return None };
    let framing =
        Framing { hdgst: resp.dgst.hdgst_enable, ddgst: resp.dgst.ddgst_enable, hpda: req.hpda, cpda: resp.cpda };
    Some((req, resp, framing))
}

/// Check one well-formed connection; returns the decoded host-to-controller and controller-to-host PDUs.
fn check_connection(name: &str, h2c_bytes: &[u8], c2h_bytes: &[u8]) -> (Vec<Received>, Vec<Received>) {
    let (icreq, icresp, framing) =
        negotiated(h2c_bytes, c2h_bytes).unwrap_or_else(|| panic!("{name}: does not start with ICReq / ICResp"));
    assert_eq!(icreq.pfv, 0, "{name}: ICReq PFV");
    assert!(icreq.hpda <= 31, "{name}: ICReq HPDA");
    assert_eq!(icresp.pfv, 0, "{name}: ICResp PFV");
    assert!(icresp.maxh2cdata >= 4096 && icresp.maxh2cdata % 4 == 0, "{name}: MAXH2CDATA {}", icresp.maxh2cdata);
    // The controller grants no digest the host did not ask for.
    assert!(!framing.hdgst || icreq.dgst.hdgst_enable, "{name}: HDGST granted unasked");
    assert!(!framing.ddgst || icreq.dgst.ddgst_enable, "{name}: DDGST granted unasked");
    if name.starts_with("digest") {
        assert!(framing.hdgst && framing.ddgst, "{name}: nvme connect -g -G should negotiate both digests");
    }

    let (h2c, err) = decode_stream(h2c_bytes, Direction::HostToController, Some(framing));
    if let Some((at, e)) = err {
        panic!("{name} host-to-controller: byte {at}: {e}");
    }
    let (c2h, err) = decode_stream(c2h_bytes, Direction::ControllerToHost, Some(framing));
    if let Some((at, e)) = err {
        panic!("{name} controller-to-host: byte {at}: {e}");
    }

    eprintln!("{name}: {} + {} PDUs, {framing:?}", h2c.len(), c2h.len());

    // Host to controller: ICReq, then the Connect command with its 1024-byte data in the capsule.
    let commands: Vec<_> = h2c
        .iter()
        .filter_map(|r| match r.pdu {
            Pdu::CapsuleCommand(c) => Some((c.sqe, r.data.as_slice())),
            _ => None,
        })
        .collect();
    let (connect, connect_data) = commands.first().unwrap_or_else(|| panic!("{name}: no command"));
    assert_eq!(connect.opcode, opcode::FABRICS, "{name}: first command is a fabrics command");
    assert_eq!(connect.fctype(), opcode::fctype::CONNECT, "{name}: first command is Connect");
    assert_eq!(connect_data.len(), 1024, "{name}: Connect data travels in the capsule");
    assert!(connect_data[256..].starts_with(b"nqn."), "{name}: SUBNQN at byte 256 of the Connect data");
    assert!(connect_data[512..].starts_with(b"nqn."), "{name}: HOSTNQN at byte 512 of the Connect data");
    let cids: BTreeSet<u16> = commands.iter().map(|(sqe, _)| sqe.cid).collect();

    // Controller to host: every response, data and R2T names a command the host sent; C2HData of one
    // command arrives in order, and ends with LAST_PDU.
    let mut next_datao: HashMap<u16, u32> = HashMap::new();
    let mut r2ts: Vec<(u16, u16, u32, u32)> = Vec::new();
    let mut responses = 0;
    for r in &c2h {
        match r.pdu {
            Pdu::CapsuleResponse(resp) => {
                assert!(cids.contains(&resp.cqe.cid), "{name}: CapsuleResp for unknown command {:#x}", resp.cqe.cid);
                responses += 1;
            }
            Pdu::C2hData(d) => {
                assert!(cids.contains(&d.cccid), "{name}: C2HData for unknown command {:#x}", d.cccid);
                assert_eq!(d.datal as usize, r.data.len());
                let expect = next_datao.entry(d.cccid).or_insert(0);
                assert_eq!(d.datao, *expect, "{name}: C2HData DATAO of command {:#x}", d.cccid);
                *expect = if d.last_pdu { 0 } else { d.datao + d.datal };
                assert!(!d.success || d.last_pdu);
            }
            Pdu::R2t(t) => {
                assert!(cids.contains(&t.cccid), "{name}: R2T for unknown command {:#x}", t.cccid);
                assert!(t.r2tl > 0);
                r2ts.push((t.cccid, t.ttag, t.r2to, t.r2tl));
            }
            Pdu::IcResp(_) => {}
            other => panic!("{name}: unexpected controller-to-host PDU {other:?}"),
        }
    }
    assert!(responses > 0, "{name}: no CapsuleResp");
    assert!(next_datao.values().all(|&v| v == 0), "{name}: a C2HData transfer did not end with LAST_PDU");

    // H2CData answers R2Ts: each burst (up to LAST_PDU) has the R2T's CCCID and TTAG, starts at R2TO, is
    // contiguous, stays within MAXH2CDATA per PDU, and adds up to R2TL.
    let mut bursts: Vec<(u16, u16, u32, u32)> = Vec::new();
    let mut open: HashMap<(u16, u16), (u32, u32)> = HashMap::new(); // (cccid, ttag) -> (start, length so far)
    for r in &h2c {
        if let Pdu::H2cData(d) = r.pdu {
            assert!(cids.contains(&d.cccid), "{name}: H2CData for unknown command {:#x}", d.cccid);
            assert_eq!(d.datal as usize, r.data.len());
            assert!(d.datal <= icresp.maxh2cdata, "{name}: H2CData longer than MAXH2CDATA");
            let entry = open.entry((d.cccid, d.ttag)).or_insert((d.datao, 0));
            assert_eq!(d.datao, entry.0 + entry.1, "{name}: H2CData DATAO not contiguous");
            entry.1 += d.datal;
            if d.last_pdu {
                let (start, len) = open.remove(&(d.cccid, d.ttag)).expect("just inserted");
                bursts.push((d.cccid, d.ttag, start, len));
            }
        }
    }
    assert!(open.is_empty(), "{name}: an H2CData transfer did not end with LAST_PDU");
    let mut unanswered = r2ts.clone();
    for b in &bursts {
        let i = unanswered.iter().position(|r| r == b).unwrap_or_else(|| {
            panic!("{name}: H2CData burst (cccid, ttag, offset, length) {b:?} answers no R2T in {r2ts:?}")
        });
        unanswered.swap_remove(i);
    }
    assert!(unanswered.is_empty(), "{name}: R2Ts never answered: {unanswered:?}");
    (h2c, c2h)
}

/// The README's "PDU counts" table: rows `| \`STREAM\` | Type N, Type N |`, types in order of first
/// appearance.
fn readme_counts(readme: &str) -> Vec<(String, Vec<(String, usize)>)> {
    readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, stream, counts, _] = cells.as_slice() else { return None };
            let stream = stream.strip_prefix('`')?.strip_suffix('`')?;
            let counts = counts
                .split(',')
                .map(|item| {
                    let (t, n) = item.trim().rsplit_once(' ')?;
                    Some((t.to_owned(), n.parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()?;
            Some((stream.to_owned(), counts))
        })
        .collect()
}

/// Types and counts of decoded PDUs, in order of first appearance.
fn counts_of(pdus: &[Received]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for r in pdus {
        let name = r.pdu.pdu_type().name();
        match out.iter_mut().find(|(t, _)| t == name) {
            Some((_, n)) => *n += 1,
            None => out.push((name.to_owned(), 1)),
        }
    }
    out
}

/// `pdus.txt`: per stream file, each PDU line's offset, type and `key=value` fields.
type Expected = HashMap<String, Vec<(usize, String, HashMap<String, u64>)>>;

fn parse_pdus_txt(text: &str) -> Expected {
    let mut out: Expected = HashMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(file) = line.strip_prefix("== ") {
            current = Some(file.trim().to_owned());
            out.entry(file.trim().to_owned()).or_default();
            continue;
        }
        let Some((offset, rest)) = line.split_once(':') else { continue };
        let Ok(offset) = offset.trim().parse::<usize>() else { continue };
        let mut words = rest.split_whitespace();
        let Some(pdu_type) = words.next() else { continue };
        let fields = words
            .filter_map(|w| {
                let (k, v) = w.split_once('=')?;
                let v = match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                    None => v.parse().ok()?,
                };
                Some((k.to_owned(), v))
            })
            .collect();
        let file = current.clone().expect("a PDU line before any == header");
        out.entry(file).or_default().push((offset, pdu_type.to_owned(), fields));
    }
    out
}

/// The fields `pdus.txt` shows for a decoded PDU, as far as this decoder exposes them.
fn fields_of(r: &Received, stream: &[u8]) -> HashMap<String, u64> {
    let ch = CommonHeader::parse(&stream[r.offset..]).expect("decoded PDU has a common header");
    let mut f: HashMap<String, u64> = HashMap::new();
    let mut put = |k: &str, v: u64| {
        f.insert(k.to_owned(), v);
    };
    put("flags", ch.flags.into());
    put("hlen", ch.hlen.into());
    put("pdo", ch.pdo.into());
    put("plen", ch.plen.into());
    match r.pdu {
        Pdu::IcReq(p) => {
            put("pfv", p.pfv.into());
            put("hpda", p.hpda.into());
            put("dgst", p.dgst.to_u8().into());
            put("maxr2t", p.maxr2t.into());
        }
        Pdu::IcResp(p) => {
            put("pfv", p.pfv.into());
            put("cpda", p.cpda.into());
            put("dgst", p.dgst.to_u8().into());
            put("maxh2cdata", p.maxh2cdata.into());
        }
        Pdu::CapsuleCommand(c) => {
            put("opc", c.sqe.opcode.into());
            put("cid", c.sqe.cid.into());
            put("cdw10", c.sqe.cdw10.into());
            put("incapsule", u64::try_from(r.data.len()).expect("small"));
        }
        Pdu::CapsuleResponse(c) => {
            put("cid", c.cqe.cid.into());
            put("dw0", c.cqe.dw0.into());
        }
        Pdu::H2cData(d) => {
            put("cccid", d.cccid.into());
            put("ttag", d.ttag.into());
            put("off", d.datao.into());
            put("len", d.datal.into());
        }
        Pdu::C2hData(d) => {
            put("cccid", d.cccid.into());
            put("off", d.datao.into());
            put("len", d.datal.into());
        }
        Pdu::R2t(t) => {
            put("cccid", t.cccid.into());
            put("ttag", t.ttag.into());
            put("off", t.r2to.into());
            put("len", t.r2tl.into());
        }
        Pdu::TermReq(t) => {
            put("fes", t.fes.to_u16().into());
            put("fei", t.fei.into());
        }
    }
    f
}

#[test]
fn kernel_tcp_fixtures_decode() {
    let dir = fixture_dir();
    assert!(
        dir.is_dir(),
        "fixture directory {} is missing: capture it with tests/vm/capture-kernel-tcp.sh (see tests/vm/)",
        dir.display()
    );
    let readme = fs::read_to_string(dir.join("README.md"))
        .unwrap_or_else(|e| panic!("{}: README.md naming the fixtures: {e}", dir.display()));
    let expected = parse_pdus_txt(
        &fs::read_to_string(dir.join("pdus.txt")).unwrap_or_else(|e| panic!("{}: pdus.txt: {e}", dir.display())),
    );

    let mut names: Vec<String> = fs::read_dir(&dir)
        .expect("readable fixture directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(HOST_TO_CONTROLLER).map(str::to_owned))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "{}: no *{HOST_TO_CONTROLLER} streams", dir.display());

    // Decode and check every connection; keep the PDUs of every stream.
    let mut decoded: HashMap<String, (Vec<u8>, Vec<Received>)> = HashMap::new();
    for name in &names {
        let h2c = fs::read(dir.join(format!("{name}{HOST_TO_CONTROLLER}"))).expect("host-to-controller stream");
        let c2h = fs::read(dir.join(format!("{name}{CONTROLLER_TO_HOST}")))
            .unwrap_or_else(|e| panic!("{name}: the controller-to-host stream: {e}"));
        let (h2c_pdus, c2h_pdus) = check_connection(name, &h2c, &c2h);
        decoded.insert(format!("{name}.host-to-controller"), (h2c, h2c_pdus));
        decoded.insert(format!("{name}.controller-to-host"), (c2h, c2h_pdus));
    }

    // The README's table of PDU types per stream, in order of first appearance, with counts.
    let table = readme_counts(&readme);
    assert!(!table.is_empty(), "README.md has no PDU count table");
    let mut named = BTreeSet::new();
    for (stream, counts) in &table {
        let (_, pdus) = decoded.get(stream).unwrap_or_else(|| panic!("README names {stream}, which has no .bin"));
        assert_eq!(&counts_of(pdus), counts, "{stream}: PDU types and counts");
        named.extend(counts.iter().map(|(t, _)| t.clone()));
    }
    assert_eq!(table.len(), decoded.len(), "README counts every stream");
    // Every PDU type the table names is one this decoder knows, and decoded somewhere.
    let known: BTreeSet<String> =
        decoded.values().flat_map(|(_, p)| p.iter().map(|r| r.pdu.pdu_type().name().to_owned())).collect();
    assert_eq!(named, known);

    // pdus.txt, the capture's own decode: same offsets, types and fields.
    for (stream, (bytes, pdus)) in &decoded {
        let lines = expected.get(&format!("{stream}.bin")).unwrap_or_else(|| panic!("pdus.txt lacks {stream}.bin"));
        assert_eq!(pdus.len(), lines.len(), "{stream}: PDU count against pdus.txt");
        for (r, (offset, pdu_type, fields)) in pdus.iter().zip(lines) {
            assert_eq!((r.offset, r.pdu.pdu_type().name()), (*offset, pdu_type.as_str()), "{stream}");
            for (k, v) in fields_of(r, bytes) {
                if let Some(want) = fields.get(&k) {
                    assert_eq!(v, *want, "{stream} @{offset} {pdu_type}: {k}");
                }
            }
        }
    }
}

#[test]
fn kernel_digests_are_checked() {
    // The 128 KiB H2CData of the digest session: intact it decodes; a flipped data byte is a data digest
    // error, a flipped header byte a header digest error.
    let dir = fixture_dir();
    let bytes = fs::read(dir.join(format!("digest-io{HOST_TO_CONTROLLER}"))).expect("digest-io stream");
    let (pdus, err) = decode_stream(&bytes, Direction::HostToController, None);
    assert!(err.is_some(), "without the negotiated framing the HDGSTF flags are invalid");
    let framing = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 };
    let (pdus_ok, err) = decode_stream(&bytes, Direction::HostToController, Some(framing));
    assert!(err.is_none() && pdus.len() == 1);
    let at = pdus_ok.iter().find(|r| matches!(r.pdu, Pdu::H2cData(_))).expect("an H2CData").offset;
    let config = DecoderConfig { framing, receive: Direction::HostToController, max_data_len: MAX_DATA };
    let mut data_flip = bytes[at..].to_vec();
    data_flip[28 + 1000] ^= 0x20;
    assert!(matches!(decode(&data_flip, &config), Err(PduError::DataDigest { .. })));
    let mut header_flip = bytes[at..].to_vec();
    header_flip[9] ^= 0x01; // CCCID
    assert!(matches!(decode(&header_flip, &config), Err(PduError::HeaderDigest { .. })));
}

#[test]
fn readme_count_rows() {
    let rows = readme_counts(
        "| `a-io.host-to-controller` | ICReq 1, CapsuleCmd 8, H2CData 1 |\n\
         | `x-{a,b}.bin` | session A, no digests |\n| kernel | Debian |\n",
    );
    assert_eq!(
        rows,
        vec![(
            "a-io.host-to-controller".to_owned(),
            vec![("ICReq".to_owned(), 1), ("CapsuleCmd".to_owned(), 8), ("H2CData".to_owned(), 1)]
        )]
    );
}

#[test]
fn pdus_txt_lines() {
    let e = parse_pdus_txt("== s.bin\n     128: CapsuleResp flags=0x00 hlen=24 cid=4096 status=0x4006\n");
    let (offset, t, f) = &e["s.bin"][0];
    assert_eq!((*offset, t.as_str()), (128, "CapsuleResp"));
    assert_eq!((f["cid"], f["status"], f["hlen"]), (4096, 0x4006, 24));
}
