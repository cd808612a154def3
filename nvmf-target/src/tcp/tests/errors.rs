//! What a connection does with a host that breaks the protocol or goes away: TermReq and close for fatal errors
//! (NVMe/TCP's FES), a failed command for a data digest error, the end of the connection on close or H2CTermReq.

use super::*;

#[test]
fn command_before_icreq_is_a_sequence_error() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let mut p = rig.connect();
    p.command(SubmissionQueueEntry::new(0x7f), &[]);
    match p.expect(&mut rig.engine) {
        (Pdu::TermReq(t), data) => {
            assert_eq!(t.fes, FatalErrorStatus::PduSequenceError);
            assert_eq!(data[0], 0x04, "the offending CapsuleCmd header");
        }
        other => panic!("{other:?}"),
    }
    p.expect_closed(&mut rig.engine);
    assert!(matches!(p.error, Some(ConnectionError::Protocol(_))), "{:?}", p.error);
}

#[test]
fn h2c_data_digest_error_fails_only_that_command() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let (_admin, mut io) = association(&mut rig, false, true, 0);
    let engine = &mut rig.engine;
    let good = pattern(4096, 5);
    write_via_r2t(&mut io, engine, 0, &good, 4096);
    let cid = io.command(write_sqe(0, 4096, false), &[]);
    let r2t = match io.expect(engine) {
        (Pdu::R2t(r), _) => r,
        other => panic!("{other:?}"),
    };
    let h = H2cData { cccid: cid, ttag: r2t.ttag, datao: 0, datal: 4096, last_pdu: true };
    let mut bytes = Pdu::H2cData(h).to_bytes(&[0xEE; 4096], &io.framing).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff; // corrupt DDGST
    io.out.extend_from_slice(&bytes);
    let cqe = io.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status), (cid, Status::TRANSIENT_TRANSPORT_ERROR));
    assert!(!cqe.status.dnr());
    // The corrupt write did not happen and the connection carries on.
    assert_eq!(read(&mut io, engine, 0, 4096).0, good);
}

#[test]
fn in_capsule_data_digest_error_fails_only_that_command() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let (_admin, mut io) = association(&mut rig, true, true, 0);
    let engine = &mut rig.engine;
    let mut sqe = write_sqe(0, 4096, true);
    sqe.cid = 77;
    let mut bytes = Pdu::CapsuleCommand(CapsuleCommand { sqe }).to_bytes(&[0x11; 4096], &io.framing).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 1; // corrupt the data
    io.out.extend_from_slice(&bytes);
    let cqe = io.expect_response(engine);
    assert_eq!((cqe.cid, cqe.status, cqe.sqid), (77, Status::TRANSIENT_TRANSPORT_ERROR, 1));
    assert_eq!(read(&mut io, engine, 0, 4096).0, vec![0; 4096], "nothing was written");
}

#[test]
fn malformed_pdu_gets_term_req_then_close() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let mut p = rig.connect();
    p.initialize(&mut rig.engine, false, false, 0);
    let mut bytes = Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0x18) })
        .to_bytes(&[], &Framing::default())
        .unwrap();
    bytes[2] = 70; // HLEN
    p.out.extend_from_slice(&bytes);
    match p.expect(&mut rig.engine) {
        (Pdu::TermReq(t), data) => {
            assert_eq!((t.fes, t.fei), (FatalErrorStatus::InvalidPduHeaderField, 2));
            assert_eq!(&data[..8], &bytes[..8]);
        }
        other => panic!("{other:?}"),
    }
    p.expect_closed(&mut rig.engine);
    assert!(matches!(p.error, Some(ConnectionError::Pdu(_))), "{:?}", p.error);
    // Once closed, the connection stays closed.
    assert!(!p.conn.on_readable(&mut rig.engine).unwrap());
}

#[test]
fn header_digest_error_is_fatal() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let mut p = rig.connect();
    p.initialize(&mut rig.engine, true, false, 0);
    let mut bytes =
        Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0x18) }).to_bytes(&[], &p.framing).unwrap();
    bytes[73] ^= 1;
    p.out.extend_from_slice(&bytes);
    match p.expect(&mut rig.engine) {
        (Pdu::TermReq(t), _) => assert_eq!(t.fes, FatalErrorStatus::HeaderDigestError),
        other => panic!("{other:?}"),
    }
    p.expect_closed(&mut rig.engine);
}

#[test]
fn h2c_data_not_matching_the_r2t_gets_term_req() {
    type Mutate = fn(&mut H2cData);
    let cases: [(Mutate, FatalErrorStatus, u32); 4] = [
        (|h| h.ttag = h.ttag.wrapping_add(1), FatalErrorStatus::InvalidPduHeaderField, 10),
        (|h| h.cccid = h.cccid.wrapping_add(1), FatalErrorStatus::InvalidPduHeaderField, 8),
        (|h| h.datao = 4096, FatalErrorStatus::DataTransferOutOfRange, 0),
        (|h| h.datao = 512, FatalErrorStatus::PduSequenceError, 0),
    ];
    for (mutate, fes, fei) in cases {
        let mut rig = Rig::new(TcpTransportConfig::default());
        let (_admin, mut io) = association(&mut rig, false, false, 0);
        let cid = io.command(write_sqe(0, 4096, false), &[]);
        let r2t = match io.expect(&mut rig.engine) {
            (Pdu::R2t(r), _) => r,
            other => panic!("{other:?}"),
        };
        let mut h = H2cData { cccid: cid, ttag: r2t.ttag, datao: 0, datal: 512, last_pdu: false };
        mutate(&mut h);
        io.send(Pdu::H2cData(h), &[0u8; 512]);
        match io.expect(&mut rig.engine) {
            (Pdu::TermReq(t), data) => {
                assert_eq!((t.fes, t.fei), (fes, fei), "{h:?}");
                assert_eq!(data.len(), 24, "the offending H2CData header");
                assert_eq!(u16::from_le_bytes([data[10], data[11]]), h.ttag);
            }
            other => panic!("{other:?}"),
        }
        io.expect_closed(&mut rig.engine);
    }
}

#[test]
fn in_capsule_data_over_the_limit_is_fatal() {
    let config = TcpTransportConfig { in_capsule_data_size: 4096, ..Default::default() };
    let mut rig = Rig::new(config);
    let (_admin, mut io) = association(&mut rig, false, false, 0);
    let data = pattern(8192, 6);
    io.command(write_sqe(0, data.len(), true), &data);
    match io.expect(&mut rig.engine) {
        (Pdu::TermReq(t), _) => assert_eq!(t.fes, FatalErrorStatus::DataTransferLimitExceeded),
        other => panic!("{other:?}"),
    }
    io.expect_closed(&mut rig.engine);
}

#[test]
fn host_close_and_term_req_end_the_connection() {
    let mut rig = Rig::new(TcpTransportConfig::default());
    let (mut admin, mut io) = association(&mut rig, false, false, 0);
    // The host closes the I/O connection: the queue is told, nothing is sent.
    io.host.shutdown(std::net::Shutdown::Write).unwrap();
    io.expect_closed(&mut rig.engine);
    assert!(io.error.is_none(), "a clean close is Ok(false): {:?}", io.error);
    assert!(io.conn.queue().is_closed());
    // An H2CTermReq from the host ends the admin connection.
    let t = nvmf_common::transport::tcp::TermReq {
        direction: Direction::HostToController,
        fes: FatalErrorStatus::PduSequenceError,
        fei: 0,
    };
    admin.out.extend(Pdu::TermReq(t).to_bytes(&[], &Framing::default()).unwrap());
    admin.expect_closed(&mut rig.engine);
    assert!(matches!(admin.error, Some(ConnectionError::HostTerminated { .. })), "{:?}", admin.error);
}
