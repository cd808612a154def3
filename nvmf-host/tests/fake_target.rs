//! A misbehaving controller: a `TcpListener` in the test answers ICReq, reads the host's CapsuleCmds and then
//! sends something the protocol does not allow. The host must fail the queue with the right typed error,
//! within its timeouts, without panicking; a data digest error, or a success for a read whose data did not all
//! arrive, fails only the command. No command completes successfully with bytes the controller did not send.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::ConnectResponse;
use nvmf_common::nvme::io::{Flush, Read, Write};
use nvmf_common::nvme::{CompletionQueueEntry, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::Direction;
use nvmf_common::transport::tcp::{
    C2hData, CapsuleResponse, DigestTypes, FatalErrorStatus, Framing, IcResp, Pdu, PduError, R2t, TermReq,
};
use nvmf_host::queue::{Completion, DataDirection, Request};
use nvmf_host::tcp::{TcpQueue, TcpQueueOptions};
use nvmf_host::{Controller, HostError};

/// Serve one connection: ICResp with `ddgst`/`hdgst` as asked, read one CapsuleCmd, then write what `respond`
/// builds from its CID.
fn fake(
    digests: bool,
    respond: impl FnOnce(u16, Framing) -> Vec<u8> + Send + 'static,
) -> (std::net::SocketAddr, JoinHandle<()>) {
    fake_chunks(digests, move |cid, f| vec![respond(cid, f)])
}

/// [`fake`] writing the response in pieces, 20 ms apart, so the host receives them in separate reads.
fn fake_chunks(
    digests: bool,
    respond: impl FnOnce(u16, Framing) -> Vec<Vec<u8>> + Send + 'static,
) -> (std::net::SocketAddr, JoinHandle<()>) {
    fake_script(digests, 1, move |sqes, f| respond(sqes[0].cid, f))
}

/// Serve one connection: ICResp with `ddgst`/`hdgst` as asked, read `capsules` CapsuleCmds (each whole, by its
/// PLEN, in-capsule data included), then write the pieces `respond` builds from their SQEs, 20 ms apart.
fn fake_script(
    digests: bool,
    capsules: usize,
    respond: impl FnOnce(&[SubmissionQueueEntry], Framing) -> Vec<Vec<u8>> + Send + 'static,
) -> (std::net::SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut icreq = [0u8; 128];
        s.read_exact(&mut icreq).unwrap();
        let dgst = DigestTypes { hdgst_enable: digests, ddgst_enable: digests };
        let icresp = Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst, maxh2cdata: 8192 });
        s.write_all(&icresp.to_bytes(&[], &Framing::default()).unwrap()).unwrap();
        let framing = Framing { hdgst: digests, ddgst: digests, hpda: 0, cpda: 0 };
        let sqes: Vec<SubmissionQueueEntry> = (0..capsules)
            .map(|_| {
                let mut capsule = vec![0u8; 8];
                s.read_exact(&mut capsule).unwrap();
                let plen = u32::from_le_bytes(capsule[4..8].try_into().unwrap());
                capsule.resize(usize::try_from(plen).unwrap(), 0);
                s.read_exact(&mut capsule[8..]).unwrap();
                SubmissionQueueEntry::parse(&capsule[8..72]).unwrap()
            })
            .collect();
        for chunk in respond(&sqes, framing) {
            s.write_all(&chunk).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        // Keep the socket open until the host hangs up (or 5 s pass).
        let mut sink = [0u8; 256];
        while let Ok(n) = s.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
    });
    (addr, t)
}

fn queue(addr: std::net::SocketAddr, digests: bool) -> TcpQueue<u32> {
    let opts = TcpQueueOptions {
        qid: 1,
        depth: 8,
        hdr_digest: digests,
        data_digest: digests,
        command_timeout: Duration::from_secs(2),
        max_c2h_data: 64 * 1024,
        ..TcpQueueOptions::default()
    };
    TcpQueue::connect(addr, &opts).expect("ICReq/ICResp")
}

/// A 4 KiB read whose buffer holds [`STALE`] bytes.
fn read_request() -> Request<u32> {
    let sqe = Read { nsid: 1, slba: 0, nlb: 7, ..Read::default() }.to_sqe();
    Request { sqe, data: vec![STALE; 4096], direction: DataDirection::ControllerToHost, context: 7 }
}

/// What a read's buffer holds before the controller's data lands in it.
const STALE: u8 = 0xEE;

/// Submit a 4 KiB read ([`read_request`]) and poll until it completes or the queue fails; bounded.
fn read_until_done(q: &mut TcpQueue<u32>) -> (Option<HostError>, Option<Completion<u32>>) {
    until_done(q, read_request())
}

/// Submit `request` and poll until it completes or the queue fails; bounded.
fn until_done(q: &mut TcpQueue<u32>, request: Request<u32>) -> (Option<HostError>, Option<Completion<u32>>) {
    q.submit(request).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the host hung");
        let r = q.poll(Some(Duration::from_millis(100)));
        if let Some(c) = q.next_completion() {
            return (r.err(), Some(c));
        }
        if let Err(e) = r {
            return (Some(e), q.next_completion());
        }
    }
}

/// [`read_until_done`] on a fresh queue (no digests) to `addr`, which must complete it successfully with the queue
/// intact; the data read. Joins the fake target `t`.
fn read_succeeds(addr: std::net::SocketAddr, t: JoinHandle<()>) -> Vec<u8> {
    let mut q = queue(addr, false);
    let (err, c) = read_until_done(&mut q);
    assert!(err.is_none(), "{err:?}");
    let c = c.expect("completed");
    assert!(c.result.expect("a CQE").status.is_success());
    drop(q);
    t.join().unwrap();
    c.data
}

fn pdu(p: Pdu, data: &[u8], framing: Framing) -> Vec<u8> {
    p.to_bytes(data, &framing).unwrap()
}

#[test]
fn c2h_data_for_an_unknown_cccid_fails_the_queue() {
    let (addr, t) = fake(false, |cid, f| {
        let c2h = C2hData { cccid: cid ^ 0x0800, datao: 0, datal: 512, last_pdu: false, success: false };
        pdu(Pdu::C2hData(c2h), &[1; 512], f)
    });
    let mut q = queue(addr, false);
    let (err, c) = read_until_done(&mut q);
    match err {
        Some(HostError::Protocol { qid: 1, reason, fes, .. }) => {
            assert!(reason.contains("CCCID"), "{reason}");
            assert_eq!(fes, FatalErrorStatus::InvalidPduHeaderField);
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    // The outstanding command completed with the same error, and the queue stays failed.
    assert!(matches!(c.expect("command completed").result, Err(HostError::Protocol { .. })));
    assert!(q.poll(Some(Duration::ZERO)).is_err());
    t.join().unwrap();
}

#[test]
fn c2h_data_beyond_the_command_fails_the_queue() {
    let (addr, t) = fake(false, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 0, datal: 8192, last_pdu: true, success: false };
        pdu(Pdu::C2hData(c2h), &[2; 8192], f)
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q).0 {
        Some(HostError::Protocol { reason, fes, .. }) => {
            assert_eq!(fes, FatalErrorStatus::DataTransferOutOfRange, "{reason}");
        }
        other => panic!("expected Data Transfer Out of Range, got {other:?}"),
    }
    t.join().unwrap();
}

#[test]
fn absurd_datal_is_refused_from_the_header() {
    // PLEN/DATAL of 3 GiB: the decoder refuses it after the header, nothing is buffered for it.
    let (addr, t) = fake(false, |cid, f| {
        let mut b =
            pdu(Pdu::C2hData(C2hData { cccid: cid, datao: 0, datal: 4, last_pdu: true, success: false }), &[0; 4], f);
        let datal: u32 = 3 << 30;
        b[4..8].copy_from_slice(&(datal + 24).to_le_bytes());
        b[16..20].copy_from_slice(&datal.to_le_bytes());
        b.truncate(24);
        b
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q).0 {
        Some(HostError::Pdu { error, .. }) => {
            assert_eq!(error.fes(), Some(FatalErrorStatus::DataTransferLimitExceeded), "{error}");
        }
        other => panic!("expected Data Transfer Limit Exceeded, got {other:?}"),
    }
    t.join().unwrap();
}

#[test]
fn bad_header_digest_fails_the_queue() {
    let (addr, t) = fake(true, |cid, f| {
        let mut b =
            pdu(Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) }), &[], f);
        b[24] ^= 0xFF; // HDGST follows the 24-byte header
        b
    });
    let mut q = queue(addr, true);
    match read_until_done(&mut q).0 {
        Some(HostError::Pdu { error: e @ PduError::HeaderDigest { .. }, .. }) => {
            assert_eq!(e.fes(), Some(FatalErrorStatus::HeaderDigestError));
        }
        other => panic!("expected a header digest error, got {other:?}"),
    }
    t.join().unwrap();
}

#[test]
fn bad_data_digest_fails_the_command_with_transient_transport_error() {
    let (addr, t) = fake(true, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 0, datal: 4096, last_pdu: true, success: false };
        let mut b = pdu(Pdu::C2hData(c2h), &[3; 4096], f);
        let n = b.len();
        b[n - 1] ^= 0xFF; // DDGST is last
        b.extend(pdu(
            Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) }),
            &[],
            f,
        ));
        b
    });
    let mut q = queue(addr, true);
    let (err, c) = read_until_done(&mut q);
    assert!(err.is_none(), "{err:?}");
    let cqe = c.expect("completed").result.expect("a CQE");
    assert!(cqe.status.same_code(Status::TRANSIENT_TRANSPORT_ERROR), "{}", cqe.status);
    assert!(q.failure().is_none(), "the queue survives a data digest error");
    drop(q);
    t.join().unwrap();
}

#[test]
fn success_flag_completes_the_read() {
    let (addr, t) = fake(false, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 0, datal: 4096, last_pdu: true, success: true };
        pdu(Pdu::C2hData(c2h), &[4; 4096], f)
    });
    assert!(read_succeeds(addr, t).iter().all(|&b| b == 4));
}

/// The host reads C2HData straight into the command's buffer once a header is in; PDUs cut anywhere (mid-header,
/// mid-data, two PDUs in one read) must still land whole and in place.
#[test]
fn c2h_data_split_across_reads_lands_in_the_buffer() {
    let (addr, t) = fake_chunks(false, |cid, f| {
        let first = C2hData { cccid: cid, datao: 0, datal: 3000, last_pdu: false, success: false };
        let second = C2hData { cccid: cid, datao: 3000, datal: 1096, last_pdu: true, success: false };
        let data: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
        let mut b = pdu(Pdu::C2hData(first), &data[..3000], f);
        b.extend(pdu(Pdu::C2hData(second), &data[3000..], f));
        let response = CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) };
        b.extend(pdu(Pdu::CapsuleResponse(response), &[], f));
        // The first PDU's header cut (assembled by the decoder); the second PDU's header whole with two data bytes
        // behind the first PDU's end, then its data in two more reads (read straight into the buffer), the last
        // one with the CapsuleResp behind the data (in the same read, into the receive buffer).
        [0, 10, 100, 3050, 3100, b.len()].windows(2).map(|w| b[w[0]..w[1]].to_vec()).collect()
    });
    let expected: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    assert_eq!(read_succeeds(addr, t), expected);
}

/// A C2HData out of the command's range is refused from its header, before its data arrives.
#[test]
fn c2h_data_header_alone_beyond_the_command_fails_the_queue() {
    let (addr, t) = fake_chunks(false, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 1024, datal: 4096, last_pdu: true, success: false };
        let b = pdu(Pdu::C2hData(c2h), &[3; 4096], f);
        // The header and a few data bytes; the rest never comes.
        vec![b[..40].to_vec()]
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q).0 {
        Some(HostError::Protocol { reason, fes, .. }) => {
            assert_eq!(fes, FatalErrorStatus::DataTransferOutOfRange, "{reason}");
        }
        other => panic!("expected Data Transfer Out of Range, got {other:?}"),
    }
    t.join().unwrap();
}

#[test]
fn term_req_and_close_are_reported() {
    let (addr, t) = fake(false, |_, f| {
        pdu(
            Pdu::TermReq(TermReq {
                direction: Direction::ControllerToHost,
                fes: FatalErrorStatus::PduSequenceError,
                fei: 0,
            }),
            &[],
            f,
        )
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q).0 {
        Some(HostError::TermReq { fes: FatalErrorStatus::PduSequenceError, .. }) => {}
        other => panic!("expected TermReq, got {other:?}"),
    }
    t.join().unwrap();

    // A short PDU, then the controller closes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut icreq = [0u8; 128];
        s.read_exact(&mut icreq).unwrap();
        let icresp = Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: DigestTypes::default(), maxh2cdata: 8192 });
        s.write_all(&icresp.to_bytes(&[], &Framing::default()).unwrap()).unwrap();
        let mut capsule = [0u8; 72];
        s.read_exact(&mut capsule).unwrap();
        s.write_all(&[0x07, 0, 24, 0]).unwrap(); // half a C2HData header
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q).0 {
        Some(HostError::Closed { qid: 1 }) => {}
        other => panic!("expected Closed, got {other:?}"),
    }
    t.join().unwrap();
}

#[test]
fn a_silent_controller_times_the_command_out() {
    let (addr, t) = fake(false, |_, _| Vec::new());
    let mut q = queue(addr, false);
    let start = Instant::now();
    match read_until_done(&mut q).0 {
        Some(HostError::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(q);
    t.join().unwrap();
}

#[test]
fn digest_not_granted_is_a_negotiation_error() {
    let (addr, t) = fake(false, |_, _| Vec::new());
    let opts = TcpQueueOptions { hdr_digest: true, ..TcpQueueOptions::default() };
    match TcpQueue::<()>::connect(addr, &opts) {
        Err(HostError::Negotiation { .. }) => {}
        other => panic!("expected a negotiation error, got {other:?}"),
    }
    drop(t); // the fake waits for a capsule that never comes; it times out on its own
}

fn response(cid: u16, f: Framing) -> Vec<u8> {
    pdu(Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) }), &[], f)
}

/// `read_until_done`'s outcome when the controller claims success after half of the read's data: the command fails
/// with [`HostError::IncompleteData`], its stale half never reported as read, and the queue (whose PDU stream is
/// intact) goes on.
fn assert_incomplete(q: &TcpQueue<u32>, (err, c): (Option<HostError>, Option<Completion<u32>>)) {
    assert!(err.is_none(), "the queue survives: {err:?}");
    assert!(q.failure().is_none());
    let c = c.expect("completed");
    match c.result {
        Err(HostError::IncompleteData { qid: 1, received: 2048, expected: 4096, .. }) => {}
        other => panic!("expected IncompleteData, got {other:?}"),
    }
    assert!(c.data[2048..].iter().all(|&b| b == STALE), "the buffer's tail is what the host put there");
}

#[test]
fn success_response_after_part_of_the_read_fails_the_command() {
    let (addr, t) = fake(false, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 0, datal: 2048, last_pdu: true, success: false };
        let mut b = pdu(Pdu::C2hData(c2h), &[5; 2048], f);
        b.extend(response(cid, f));
        b
    });
    let mut q = queue(addr, false);
    let outcome = read_until_done(&mut q);
    assert_incomplete(&q, outcome);
    drop(q);
    t.join().unwrap();
}

#[test]
fn success_response_without_any_read_data_fails_the_command() {
    let (addr, t) = fake(false, response);
    let mut q = queue(addr, false);
    match read_until_done(&mut q) {
        (None, Some(Completion { result: Err(HostError::IncompleteData { received: 0, expected: 4096, .. }), .. })) => {
        }
        other => panic!("expected IncompleteData, got {other:?}"),
    }
    drop(q);
    t.join().unwrap();
}

#[test]
fn success_flag_before_all_data_fails_the_command() {
    let (addr, t) = fake(false, |cid, f| {
        let c2h = C2hData { cccid: cid, datao: 0, datal: 2048, last_pdu: true, success: true };
        pdu(Pdu::C2hData(c2h), &[6; 2048], f)
    });
    let mut q = queue(addr, false);
    let outcome = read_until_done(&mut q);
    assert_incomplete(&q, outcome);
    drop(q);
    t.join().unwrap();
}

/// Data for bytes already received (DATAO behind what arrived) is refused as out of range.
#[test]
fn c2h_data_overlapping_received_data_fails_the_queue() {
    let (addr, t) = fake(false, |cid, f| {
        let first = C2hData { cccid: cid, datao: 0, datal: 2048, last_pdu: false, success: false };
        let again = C2hData { cccid: cid, datao: 1024, datal: 3072, last_pdu: true, success: true };
        let mut b = pdu(Pdu::C2hData(first), &[7; 2048], f);
        b.extend(pdu(Pdu::C2hData(again), &[8; 3072], f));
        b
    });
    let mut q = queue(addr, false);
    match read_until_done(&mut q) {
        (Some(HostError::Protocol { fes: FatalErrorStatus::DataTransferOutOfRange, .. }), Some(c)) => {
            assert!(matches!(c.result, Err(HostError::Protocol { .. })), "{:?}", c.result);
        }
        other => panic!("expected Data Transfer Out of Range, got {other:?}"),
    }
    t.join().unwrap();
}

/// A second response for a command that completed names a CID no longer outstanding: the queue fails (as Linux
/// recovers on an unknown command ID), and the other outstanding read completes with that error, not with success.
#[test]
fn a_second_response_fails_the_queue_and_completes_no_other_command() {
    let (addr, t) = fake_script(false, 2, |sqes, f| {
        let cid = sqes[0].cid;
        let c2h = C2hData { cccid: cid, datao: 0, datal: 4096, last_pdu: true, success: false };
        let mut b = pdu(Pdu::C2hData(c2h), &[9; 4096], f);
        b.extend(response(cid, f));
        vec![b, response(cid, f)]
    });
    let mut q = queue(addr, false);
    q.submit(Request { context: 1, ..read_request() }).unwrap();
    q.submit(Request { context: 2, ..read_request() }).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    let mut failure = None;
    while done.len() < 2 {
        assert!(Instant::now() < deadline, "the host hung");
        if let Err(e) = q.poll(Some(Duration::from_millis(100))) {
            failure = Some(e);
        }
        done.extend(std::iter::from_fn(|| q.next_completion()));
    }
    match failure {
        Some(HostError::Protocol { reason, fes: FatalErrorStatus::InvalidPduHeaderField, .. }) => {
            assert!(reason.contains("not outstanding"), "{reason}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    let first = done.iter().find(|c| c.context == 1).expect("the first read");
    assert!(first.result.as_ref().is_ok_and(|cqe| cqe.status.is_success()), "{:?}", first.result);
    assert!(first.data.iter().all(|&b| b == 9));
    let second = done.iter().find(|c| c.context == 2).expect("the second read");
    assert!(matches!(second.result, Err(HostError::Protocol { .. })), "{:?}", second.result);
    t.join().unwrap();
}

/// An R2T that solicits no write data — for a read, for a command without data, or outside the write — fails the
/// queue with Data Transfer Out of Range; no H2CData is sent for it.
#[test]
fn r2t_that_solicits_no_write_data_fails_the_queue() {
    let write = Write { nsid: 1, slba: 0, nlb: 31, ..Write::default() }.to_sqe();
    let cases = [
        ("a read", read_request(), 0, 4096),
        (
            "a flush",
            Request { sqe: Flush { nsid: 1 }.to_sqe(), data: Vec::new(), direction: DataDirection::None, context: 0 },
            0,
            4096,
        ),
        (
            "beyond a 16 KiB write",
            Request { sqe: write, data: vec![1; 16384], direction: DataDirection::HostToController, context: 0 },
            8192,
            16384,
        ),
    ];
    for (what, request, r2to, r2tl) in cases {
        let (addr, t) = fake(false, move |cid, f| pdu(Pdu::R2t(R2t { cccid: cid, ttag: 1, r2to, r2tl }), &[], f));
        let mut q = queue(addr, false);
        match until_done(&mut q, request) {
            (Some(HostError::Protocol { fes: FatalErrorStatus::DataTransferOutOfRange, .. }), Some(c)) => {
                assert!(c.result.is_err(), "{what}: {:?}", c.result);
            }
            other => panic!("{what}: expected Data Transfer Out of Range, got {other:?}"),
        }
        assert_eq!(q.stats().r2ts, 0, "{what}: no R2T was answered");
        t.join().unwrap();
    }
}

/// A Connect response asking for in-band authentication (AUTHREQ: ATR, ASCR) that this host cannot give (no secret
/// configured; a secure channel) ends the connect with one clear error before any other command is sent.
#[test]
fn a_target_that_requires_authentication_is_refused_at_connect() {
    for (atr, ascr) in [(true, false), (false, true), (true, true)] {
        let (addr, t) = fake(false, move |cid, f| {
            let mut cqe = CompletionQueueEntry::new(cid, Status::SUCCESS);
            cqe.dw0 = ConnectResponse { cntlid: 1, atr, ascr }.to_dw0();
            pdu(Pdu::CapsuleResponse(CapsuleResponse { cqe }), &[], f)
        });
        let start = Instant::now();
        match Controller::connect(addr, "nqn.2024-01.io.nvmf-rs:auth", options(1)) {
            Err(e @ HostError::AuthenticationRequired { qid: 0, secure_channel }) => {
                assert_eq!(secure_channel, ascr);
                let want = if ascr { "requires a secure channel" } else { "requires DH-HMAC-CHAP authentication" };
                assert!(e.to_string().contains(want), "{e}");
            }
            other => panic!("ATR {atr} ASCR {ascr}: expected AuthenticationRequired, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(3), "no later command waited for an answer");
        t.join().unwrap();
    }
}

/// Options with timeouts short enough for tests.
fn options(nr_io_queues: u16) -> nvmf_host::ConnectOptions {
    let id = nvmf_host::HostIdentity::generate();
    nvmf_host::ConnectOptions {
        hostnqn: id.hostnqn,
        hostid: id.hostid,
        nr_io_queues,
        keep_alive_tmo: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(10),
        ..nvmf_host::ConnectOptions::default()
    }
}
