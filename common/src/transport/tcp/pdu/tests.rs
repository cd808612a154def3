//! Wire-format tests of every PDU: layouts against Linux's structs, rejections, and encode/parse round trips.

use super::super::digest::{self, DIGEST_LEN};
use super::*;
use crate::nvme::opcode;
use crate::nvme::status::Status;
use crate::nvme::{CompletionQueueEntry, SubmissionQueueEntry};
use crate::wire::{put16, put32, WireError};
use proptest::prelude::*;

const NONE: Framing = Framing { hdgst: false, ddgst: false, hpda: 0, cpda: 0 };
const MAX: u32 = 1 << 20;

fn fatal_of(e: PduError) -> (FatalErrorStatus, u32) {
    (e.fes().expect("fatal"), e.fei())
}

/// Encode with `framing`, then parse, expecting the same PDU and data.
fn round_trip(pdu: &Pdu, data: &[u8], framing: &Framing) -> Vec<u8> {
    let bytes = pdu.to_bytes(data, framing).unwrap();
    let (parsed, layout) = Pdu::parse(&bytes, framing, MAX).unwrap();
    assert_eq!(&parsed, pdu);
    assert_eq!(layout.plen, bytes.len());
    assert_eq!(&bytes[layout.data_range()], data);
    bytes
}

// Layout tests: each field lands at the offset of Linux include/linux/nvme-tcp.h.

#[test]
fn common_header_layout() {
    // struct nvme_tcp_hdr: type @0, flags @1, hlen @2, pdo @3, plen (le32) @4; 8 bytes.
    let ch = CommonHeader { pdu_type: PduType::C2hData, flags: 0x0d, hlen: 24, pdo: 28, plen: 0x0403_0201 };
    let mut b = [0u8; 8];
    ch.encode(&mut b).unwrap();
    assert_eq!(b, [0x07, 0x0d, 24, 28, 0x01, 0x02, 0x03, 0x04]);
    assert_eq!(CommonHeader::parse(&b).unwrap(), ch);
    assert!(CommonHeader::encode(&ch, &mut [0u8; 7]).is_err());
}

#[test]
fn pdu_type_values() {
    // enum nvme_tcp_pdu_type.
    let all = [
        (PduType::IcReq, 0x0),
        (PduType::IcResp, 0x1),
        (PduType::H2cTermReq, 0x2),
        (PduType::C2hTermReq, 0x3),
        (PduType::CapsuleCmd, 0x4),
        (PduType::CapsuleResp, 0x5),
        (PduType::H2cData, 0x6),
        (PduType::C2hData, 0x7),
        (PduType::R2t, 0x9),
    ];
    for (t, v) in all {
        assert_eq!(t.to_u8(), v);
        assert_eq!(PduType::from_u8(v), Some(t));
    }
    assert_eq!(PduType::from_u8(0x8), None);
    assert_eq!(PduType::from_u8(0xA), None);
    // sizeof() of each Linux struct.
    assert_eq!(PduType::IcReq.header_len(), 128);
    assert_eq!(PduType::IcResp.header_len(), 128);
    assert_eq!(PduType::H2cTermReq.header_len(), 24);
    assert_eq!(PduType::CapsuleCmd.header_len(), 72);
    assert_eq!(PduType::CapsuleResp.header_len(), 24);
    assert_eq!(PduType::H2cData.header_len(), 24);
    assert_eq!(PduType::R2t.header_len(), 24);
}

#[test]
fn fatal_error_status_values() {
    // enum nvme_tcp_fatal_error_status.
    for v in 1u16..=6 {
        assert_eq!(FatalErrorStatus::from_u16(v).unwrap().to_u16(), v);
    }
    assert_eq!(FatalErrorStatus::from_u16(0), None);
    assert_eq!(FatalErrorStatus::from_u16(7), None);
    assert_eq!(FatalErrorStatus::HeaderDigestError.to_u16(), 3);
    assert_eq!(FatalErrorStatus::DataTransferLimitExceeded.to_u16(), 5);
}

#[test]
fn icreq_layout() {
    // struct nvme_tcp_icreq_pdu: hdr, pfv (le16) @8, hpda @10, digest @11, maxr2t (le32) @12, rsvd2[112].
    let p = Pdu::IcReq(IcReq {
        pfv: 0,
        hpda: 0x1f,
        dgst: DigestTypes { hdgst_enable: true, ddgst_enable: true },
        maxr2t: 0x1234_5678,
    });
    let b = round_trip(&p, &[], &NONE);
    assert_eq!(b.len(), 128);
    assert_eq!(&b[..8], &[0x00, 0x00, 128, 0x00, 128, 0, 0, 0]);
    assert_eq!(&b[8..16], &[0x00, 0x00, 0x1f, 0x03, 0x78, 0x56, 0x34, 0x12]);
    assert!(b[16..].iter().all(|&x| x == 0));
    // Digests negotiated or not, ICReq never carries one.
    let fr = Framing { hdgst: true, ddgst: true, hpda: 3, cpda: 3 };
    assert_eq!(p.to_bytes(&[], &fr).unwrap(), b);
}

#[test]
fn icresp_layout() {
    // struct nvme_tcp_icresp_pdu: hdr, pfv @8, cpda @10, digest @11, maxdata (MAXH2CDATA) @12.
    let p = Pdu::IcResp(IcResp {
        pfv: 0,
        cpda: 0x02,
        dgst: DigestTypes { hdgst_enable: false, ddgst_enable: true },
        maxh2cdata: 0x0040_0000,
    });
    let b = round_trip(&p, &[], &NONE);
    assert_eq!(&b[..8], &[0x01, 0x00, 128, 0x00, 128, 0, 0, 0]);
    assert_eq!(&b[8..16], &[0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x40, 0x00]);
}

#[test]
fn term_req_layout() {
    // struct nvme_tcp_term_pdu: hdr, fes (le16) @8, fei (le32) @10, rsvd[8]; then the offending header.
    let p = Pdu::TermReq(TermReq {
        direction: Direction::ControllerToHost,
        fes: FatalErrorStatus::InvalidPduHeaderField,
        fei: 0x0403_0201,
    });
    let data = [0xAAu8; 24];
    let b = round_trip(&p, &data, &Framing { hdgst: true, ddgst: true, hpda: 7, cpda: 7 });
    assert_eq!(&b[..8], &[0x03, 0x00, 24, 0x00, 48, 0, 0, 0]);
    assert_eq!(&b[8..14], &[0x01, 0x00, 0x01, 0x02, 0x03, 0x04]);
    assert_eq!(&b[24..], &data);
    let h2c = Pdu::TermReq(TermReq {
        direction: Direction::HostToController,
        fes: FatalErrorStatus::HeaderDigestError,
        fei: 0,
    });
    assert_eq!(round_trip(&h2c, &[], &NONE)[..4], [0x02, 0x00, 24, 0x00]);
    assert_eq!(TermReq::error_data(&[7u8; 200]).len(), 128);
    assert_eq!(TermReq::error_data(&[7u8; 72]).len(), 72);
}

#[test]
fn c2h_term_req_the_linux_host_recognises() {
    // The C2HTermReq tests/vm/termreq-probe.py sent to the Linux 6.12 host, which logged "Received
    // C2HTermReq (FES = Invalid PDU Header Field)" (tests/fixtures/kernel-tcp/README.md).
    let mut b = vec![0x03, 0x00, 0x18, 0x00, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00];
    b.extend_from_slice(&[0u8; 10]);
    let (p, layout) = Pdu::parse(&b, &NONE, 0).unwrap();
    let t = TermReq { direction: Direction::ControllerToHost, fes: FatalErrorStatus::InvalidPduHeaderField, fei: 0 };
    assert_eq!(p, Pdu::TermReq(t));
    assert_eq!((layout.plen, layout.data_len), (24, 0));
    assert_eq!(Pdu::TermReq(t).to_bytes(&[], &NONE).unwrap(), b);
}

#[test]
fn capsule_command_layout() {
    // struct nvme_tcp_cmd_pdu: hdr, then the 64-byte struct nvme_command at byte 8.
    let mut sqe = SubmissionQueueEntry::new(opcode::FABRICS);
    sqe.cid = 0xBEEF;
    sqe.nsid = 0x01; // fctype Connect
    sqe.cdw10 = 0xA1A2_A3A4;
    let p = Pdu::CapsuleCommand(CapsuleCommand { sqe });
    let data = [0x5Au8; 1024];
    let b = round_trip(&p, &data, &NONE);
    assert_eq!(&b[..8], &[0x04, 0x00, 72, 72, 0x48, 0x04, 0, 0]);
    assert_eq!(b[8], 0x7F);
    assert_eq!(&b[10..12], &[0xEF, 0xBE]);
    assert_eq!(b[12], 0x01);
    assert_eq!(&b[48..52], &[0xA4, 0xA3, 0xA2, 0xA1]);
    // Without in-capsule data PDO is 0 (Linux nvme_tcp_setup_cmd_pdu).
    let b = round_trip(&p, &[], &NONE);
    assert_eq!(&b[..8], &[0x04, 0x00, 72, 0, 72, 0, 0, 0]);
}

#[test]
fn capsule_command_with_digests_and_padding() {
    let p = Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(opcode::io::WRITE) });
    let data: Vec<u8> = (0..100u8).collect();
    // CPDA 7 → 32-byte alignment: HLEN 72 + HDGST 4 = 76 → PDO 96.
    let fr = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 7 };
    let b = round_trip(&p, &data, &fr);
    assert_eq!(b[1], FLAG_HDGSTF | FLAG_DDGSTF);
    assert_eq!(b[3], 96);
    assert_eq!(b.len(), 96 + 100 + 4);
    assert_eq!(&b[72..76], &digest::digest_to_bytes(digest::crc32c(&b[..72])));
    assert!(b[76..96].iter().all(|&x| x == 0));
    assert_eq!(&b[196..], &digest::digest_to_bytes(digest::crc32c(&data)));
    // HPDA does not apply to a host-to-controller PDU.
    let fr = Framing { hdgst: true, ddgst: false, hpda: 31, cpda: 0 };
    let b = round_trip(&p, &data, &fr);
    assert_eq!((b[1], b[3], b.len()), (FLAG_HDGSTF, 76, 176));
}

#[test]
fn capsule_response_layout() {
    // struct nvme_tcp_rsp_pdu: hdr, then the 16-byte struct nvme_completion at byte 8.
    let mut cqe = CompletionQueueEntry::new(0x1234, Status::SUCCESS);
    cqe.dw0 = 0x0000_0001;
    cqe.sqhd = 0x0009;
    let p = Pdu::CapsuleResponse(CapsuleResponse { cqe });
    let b = round_trip(&p, &[], &NONE);
    assert_eq!(&b[..8], &[0x05, 0x00, 24, 0, 24, 0, 0, 0]);
    assert_eq!(&b[8..12], &[1, 0, 0, 0]);
    assert_eq!(&b[16..18], &[0x09, 0x00]);
    assert_eq!(&b[20..22], &[0x34, 0x12]);
    let b = round_trip(&p, &[], &Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 });
    assert_eq!(&b[..8], &[0x05, FLAG_HDGSTF, 24, 0, 28, 0, 0, 0]);
}

#[test]
fn data_pdu_layout() {
    // struct nvme_tcp_data_pdu: hdr, command_id @8, ttag @10, data_offset @12, data_length @16, rsvd[4].
    let p = Pdu::H2cData(H2cData { cccid: 0x0201, ttag: 0x0403, datao: 0x0807_0605, datal: 8, last_pdu: true });
    let data = [9u8; 8];
    let b = round_trip(&p, &data, &NONE);
    assert_eq!(&b[..8], &[0x06, FLAG_LAST_PDU, 24, 24, 32, 0, 0, 0]);
    assert_eq!(&b[8..24], &[1, 2, 3, 4, 5, 6, 7, 8, 8, 0, 0, 0, 0, 0, 0, 0]);
    let p = Pdu::C2hData(C2hData { cccid: 0x0201, datao: 0x0807_0605, datal: 8, last_pdu: true, success: true });
    // HPDA 3 → 16-byte alignment: 24 + 4 = 28 → PDO 32.
    let fr = Framing { hdgst: true, ddgst: true, hpda: 3, cpda: 0 };
    let b = round_trip(&p, &data, &fr);
    assert_eq!(&b[..8], &[0x07, 0x0f, 24, 32, 44, 0, 0, 0]);
    assert_eq!(&b[8..20], &[1, 2, 0, 0, 5, 6, 7, 8, 8, 0, 0, 0]);
}

#[test]
fn r2t_layout() {
    // struct nvme_tcp_r2t_pdu: hdr, command_id @8, ttag @10, r2t_offset @12, r2t_length @16, rsvd[4].
    let p = Pdu::R2t(R2t { cccid: 0x0201, ttag: 0x0403, r2to: 0x0807_0605, r2tl: 0x0C0B_0A09 });
    let b = round_trip(&p, &[], &NONE);
    assert_eq!(&b[..8], &[0x09, 0, 24, 0, 24, 0, 0, 0]);
    assert_eq!(&b[8..24], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0, 0, 0]);
}

#[test]
fn max_encoded_header_len_is_tight() {
    let mut worst = 0;
    for pda in 0..=MAX_PDA {
        let fr = Framing { hdgst: true, ddgst: true, hpda: pda, cpda: pda };
        for dir in [Direction::HostToController, Direction::ControllerToHost] {
            for hlen in [CAPSULE_COMMAND_HEADER_LEN, DATA_HEADER_LEN] {
                let align = fr.alignment(dir);
                worst = worst.max((hlen + DIGEST_LEN).div_ceil(align) * align);
            }
        }
    }
    assert_eq!(worst, MAX_ENCODED_HEADER_LEN);
}

// Rejection paths.

fn c2h(framing: &Framing) -> Vec<u8> {
    let p = Pdu::C2hData(C2hData { cccid: 1, datao: 0, datal: 16, last_pdu: false, success: false });
    p.to_bytes(&[1u8; 16], framing).unwrap()
}

fn parse_err(b: &[u8], framing: &Framing) -> (FatalErrorStatus, u32) {
    fatal_of(Pdu::parse(b, framing, MAX).unwrap_err())
}

#[test]
fn rejects_bad_common_header() {
    let ihf = FatalErrorStatus::InvalidPduHeaderField;
    let mut b = c2h(&NONE);
    b[0] = 0x08;
    assert_eq!(parse_err(&b, &NONE), (ihf, 0));
    let mut b = c2h(&NONE);
    b[2] = 28;
    assert_eq!(parse_err(&b, &NONE), (ihf, 2));
    assert!(matches!(CommonHeader::parse(&[0u8; 7]), Err(PduError::Fatal { .. })));
}

#[test]
fn rejects_bad_flags() {
    let ihf = FatalErrorStatus::InvalidPduHeaderField;
    // Reserved bit.
    let mut b = c2h(&NONE);
    b[1] |= 0x10;
    assert_eq!(parse_err(&b, &NONE), (ihf, 1));
    // SUCCESS without LAST_PDU.
    let mut b = c2h(&NONE);
    b[1] |= FLAG_SUCCESS;
    assert_eq!(parse_err(&b, &NONE), (ihf, 1));
    // SUCCESS on H2CData.
    let p = Pdu::H2cData(H2cData { cccid: 1, ttag: 1, datao: 0, datal: 4, last_pdu: true });
    let mut b = p.to_bytes(&[0; 4], &NONE).unwrap();
    b[1] |= FLAG_SUCCESS;
    assert_eq!(parse_err(&b, &NONE), (ihf, 1));
    // HDGSTF without negotiated header digests, and missing when negotiated.
    let hd = Framing { hdgst: true, ..NONE };
    assert_eq!(parse_err(&c2h(&hd), &NONE), (ihf, 1));
    assert_eq!(parse_err(&c2h(&NONE), &hd), (ihf, 1));
    // DDGSTF likewise.
    let dd = Framing { ddgst: true, ..NONE };
    assert_eq!(parse_err(&c2h(&dd), &NONE), (ihf, 1));
    assert_eq!(parse_err(&c2h(&NONE), &dd), (ihf, 1));
    // DDGSTF on a PDU without data.
    let p = Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0) });
    let mut b = p.to_bytes(&[], &dd).unwrap();
    b[1] |= FLAG_DDGSTF;
    assert_eq!(parse_err(&b, &dd), (ihf, 1));
    // Any flag on ICReq.
    let p = Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 });
    let mut b = p.to_bytes(&[], &NONE).unwrap();
    b[1] = FLAG_HDGSTF;
    assert_eq!(parse_err(&b, &hd), (ihf, 1));
}

#[test]
fn rejects_bad_plen_and_pdo() {
    let ihf = FatalErrorStatus::InvalidPduHeaderField;
    // PLEN below HLEN.
    let mut b = c2h(&NONE);
    put32(&mut b, 4, 20);
    assert_eq!(parse_err(&b, &NONE), (ihf, 4));
    // Data PDU without data.
    put32(&mut b, 4, 24);
    b[3] = 0;
    assert_eq!(parse_err(&b, &NONE), (ihf, 4));
    // PLEN with room for only the data digest.
    let dd = Framing { ddgst: true, ..NONE };
    let mut b = c2h(&dd);
    put32(&mut b, 4, 28);
    assert_eq!(parse_err(&b, &dd), (ihf, 4));
    // ICReq with PLEN ≠ 128.
    let p = Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 });
    let mut b = p.to_bytes(&[], &NONE).unwrap();
    put32(&mut b, 4, 132);
    assert_eq!(parse_err(&b, &NONE), (ihf, 4));
    // PDO inside the header, PDO inside the header digest, PDO misaligned, PDO set without data.
    let mut b = c2h(&NONE);
    b[3] = 20;
    assert_eq!(parse_err(&b, &NONE), (ihf, 3));
    let hd = Framing { hdgst: true, ..NONE };
    let mut b = c2h(&hd);
    b[3] = 24;
    assert_eq!(parse_err(&b, &hd), (ihf, 3));
    let al = Framing { hpda: 1, ..NONE }; // 8-byte alignment
    let mut b = c2h(&al);
    assert_eq!(b[3], 24);
    b[3] = 28;
    assert_eq!(parse_err(&b, &al), (ihf, 3));
    let p = Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::default() });
    let mut b = p.to_bytes(&[], &NONE).unwrap();
    b[3] = 24;
    assert_eq!(parse_err(&b, &NONE), (ihf, 3));
    // CapsuleResp with trailing data.
    let mut b = p.to_bytes(&[], &NONE).unwrap();
    put32(&mut b, 4, 28);
    assert_eq!(parse_err(&b, &NONE), (ihf, 4));
    // A TermReq longer than 152, or with a PDO other than 0 / HLEN.
    let t = Pdu::TermReq(TermReq {
        direction: Direction::HostToController,
        fes: FatalErrorStatus::PduSequenceError,
        fei: 0,
    });
    let mut b = t.to_bytes(&[0; 128], &NONE).unwrap();
    assert_eq!(Pdu::parse(&b, &NONE, 0).unwrap().1.data_len, 128, "TermReq data is not limited by max_data_len");
    put32(&mut b, 4, 153);
    assert_eq!(parse_err(&b, &NONE), (ihf, 4));
    let mut b = t.to_bytes(&[0; 8], &NONE).unwrap();
    b[3] = 24;
    assert!(Pdu::parse(&b, &NONE, MAX).is_ok());
    b[3] = 28;
    assert_eq!(parse_err(&b, &NONE), (ihf, 3));
    assert!(t.to_bytes(&[0; 129], &NONE).is_err());
}

#[test]
fn rejects_data_over_limit() {
    let b = c2h(&NONE);
    assert!(Pdu::parse(&b, &NONE, 16).is_ok());
    let e = Pdu::parse(&b, &NONE, 15).unwrap_err();
    assert_eq!(fatal_of(e), (FatalErrorStatus::DataTransferLimitExceeded, 0));
    // Absurd PLEN is refused from the common header alone.
    let mut ch = [0u8; 8];
    CommonHeader { pdu_type: PduType::H2cData, flags: 0, hlen: 24, pdo: 24, plen: u32::MAX }.encode(&mut ch).unwrap();
    let ch = CommonHeader::parse(&ch).unwrap();
    let e = PduLayout::validate(&ch, &NONE, MAX).unwrap_err();
    assert_eq!(e.fes(), Some(FatalErrorStatus::DataTransferLimitExceeded));
}

#[test]
fn rejects_bad_specific_fields() {
    let ihf = FatalErrorStatus::InvalidPduHeaderField;
    let req = Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 });
    let good = req.to_bytes(&[], &NONE).unwrap();
    let mut b = good.clone();
    b[8] = 1;
    assert_eq!(parse_err(&b, &NONE), (ihf, 8));
    let mut b = good.clone();
    b[10] = 32;
    assert_eq!(parse_err(&b, &NONE), (ihf, 10));
    let mut b = good.clone();
    b[11] = 0x04;
    assert_eq!(parse_err(&b, &NONE), (ihf, 11));
    let resp = Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: DigestTypes::default(), maxh2cdata: 4096 });
    let good = resp.to_bytes(&[], &NONE).unwrap();
    for bad in [4092u32, 4098, 0] {
        let mut b = good.clone();
        put32(&mut b, 12, bad);
        assert_eq!(parse_err(&b, &NONE), (ihf, 12));
    }
    let t = Pdu::TermReq(TermReq {
        direction: Direction::ControllerToHost,
        fes: FatalErrorStatus::PduSequenceError,
        fei: 0,
    });
    for bad in [0u16, 7, 0xffff] {
        let mut b = t.to_bytes(&[], &NONE).unwrap();
        put16(&mut b, 8, bad);
        assert_eq!(parse_err(&b, &NONE), (ihf, 8));
    }
    // DATAL disagreeing with PLEN.
    let mut b = c2h(&NONE);
    put32(&mut b, 16, 15);
    assert_eq!(parse_err(&b, &NONE), (ihf, 16));
    // DATAO + DATAL overflowing.
    let mut b = c2h(&NONE);
    put32(&mut b, 12, u32::MAX - 4);
    assert_eq!(parse_err(&b, &NONE), (ihf, 12));
    // R2TL 0.
    let r = Pdu::R2t(R2t { cccid: 1, ttag: 1, r2to: 0, r2tl: 1 });
    let mut b = r.to_bytes(&[], &NONE).unwrap();
    put32(&mut b, 16, 0);
    assert_eq!(parse_err(&b, &NONE), (ihf, 16));
}

#[test]
fn encode_rejects_invalid_values() {
    let out = &mut [0u8; MAX_ENCODED_HEADER_LEN];
    let bad = [
        (Pdu::IcReq(IcReq { pfv: 1, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 }), 0),
        (Pdu::IcReq(IcReq { pfv: 0, hpda: 32, dgst: DigestTypes::default(), maxr2t: 0 }), 0),
        (Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: DigestTypes::default(), maxh2cdata: 4095 }), 0),
        (Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 }), 1),
        (Pdu::C2hData(C2hData { cccid: 0, datao: 0, datal: 4, last_pdu: false, success: true }), 4),
        (Pdu::C2hData(C2hData { cccid: 0, datao: 0, datal: 4, last_pdu: true, success: false }), 5),
        (Pdu::H2cData(H2cData { cccid: 0, ttag: 0, datao: 0, datal: 0, last_pdu: true }), 0),
        (Pdu::H2cData(H2cData { cccid: 0, ttag: 0, datao: u32::MAX, datal: 1, last_pdu: true }), 1),
        (Pdu::R2t(R2t { cccid: 0, ttag: 0, r2to: 0, r2tl: 0 }), 0),
    ];
    for (p, len) in bad {
        assert!(p.encode_header(len, &NONE, out).is_err(), "{p:?} with {len} bytes");
    }
    let p = Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0) });
    assert!(matches!(p.encode_header(8, &NONE, &mut [0u8; 71]), Err(WireError::OutputTooSmall { .. })));
}

#[test]
fn error_to_term_req() {
    let mut b = c2h(&NONE);
    b[3] = 20;
    let e = Pdu::parse(&b, &NONE, MAX).unwrap_err();
    assert!(e.is_fatal());
    let t = e.term_req(Direction::ControllerToHost).unwrap();
    assert_eq!(
        t,
        TermReq { direction: Direction::HostToController, fes: FatalErrorStatus::InvalidPduHeaderField, fei: 3 }
    );
    let t = e.term_req(Direction::HostToController).unwrap();
    assert_eq!(t.direction, Direction::ControllerToHost);
    assert!(e.to_string().contains("PDO"), "{e}");
}

proptest! {
    #[test]
    fn encode_parse_round_trip((pdu, data) in strategies::any_pdu(), framing in strategies::framing()) {
        let bytes = pdu.to_bytes(&data, &framing).unwrap();
        let (parsed, layout) = Pdu::parse(&bytes, &framing, MAX).unwrap();
        prop_assert_eq!(parsed, pdu);
        prop_assert_eq!(layout.plen, bytes.len());
        prop_assert_eq!(&bytes[layout.data_range()], &data[..]);
        if layout.hdgst {
            prop_assert!(digest::verify(&bytes[..layout.hlen], bytes[layout.hlen..layout.hlen + 4].try_into().unwrap()).is_ok());
        }
        if layout.ddgst {
            let end = layout.data_range().end;
            prop_assert!(digest::verify(&data, bytes[end..end + 4].try_into().unwrap()).is_ok());
        }
        // The vectored form writes the same header bytes.
        let mut out = [0u8; MAX_ENCODED_HEADER_LEN];
        let l = pdu.encode_header(data.len(), &framing, &mut out).unwrap();
        prop_assert_eq!(&out[..l.prefix_len()], &bytes[..l.prefix_len()]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), framing in strategies::framing(), max in any::<u32>()) {
        if let Ok((pdu, layout)) = Pdu::parse(&bytes, &framing, max.min(1 << 16)) {
            // Re-encoding what parsed gives a PDU that parses the same (data filled in).
            let data = vec![0u8; layout.data_len];
            let again = pdu.to_bytes(&data, &framing).unwrap();
            let (reparsed, _) = Pdu::parse(&again, &framing, max).unwrap();
            prop_assert_eq!(reparsed, pdu);
        }
    }

    #[test]
    fn arbitrary_header_after_valid_type(t in proptest::sample::select(vec![0u8, 1, 2, 3, 4, 5, 6, 7, 9]), rest in proptest::collection::vec(any::<u8>(), 140), framing in strategies::framing()) {
        // Random bytes rarely get past the type and HLEN checks; force those to explore the rest.
        let mut bytes = rest;
        bytes[0] = t;
        bytes[2] = u8::try_from(PduType::from_u8(t).unwrap().header_len()).unwrap();
        if let Ok((pdu, layout)) = Pdu::parse(&bytes, &framing, 1 << 16) {
            let data = vec![0u8; layout.data_len];
            let again = pdu.to_bytes(&data, &framing).unwrap();
            prop_assert_eq!(Pdu::parse(&again, &framing, 1 << 16).unwrap().0, pdu);
        }
    }
}
