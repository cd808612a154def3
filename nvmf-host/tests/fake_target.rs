//! A misbehaving controller: a `TcpListener` in the test answers ICReq, reads one CapsuleCmd and then
//! sends something the protocol does not allow. The host must fail the queue with the right typed error,
//! within its timeouts, without panicking; a data digest error fails only the command.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_common::nvme::io::Read;
use nvmf_common::nvme::{CompletionQueueEntry, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::Direction;
use nvmf_common::transport::tcp::{
    C2hData, CapsuleResponse, DigestTypes, FatalErrorStatus, Framing, IcResp, Pdu, PduError, TermReq,
};
use nvmf_host::queue::{Completion, DataDirection, Request};
use nvmf_host::tcp::{TcpQueue, TcpQueueOptions};
use nvmf_host::HostError;

/// Serve one connection: ICResp with `ddgst`/`hdgst` as asked, read one 72-byte capsule (no digests:
/// tests that enable them send no data), then write what `respond` builds from the capsule's CID.
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
        let capsule_len = 72 + if digests { 4 } else { 0 };
        let mut capsule = vec![0u8; capsule_len];
        s.read_exact(&mut capsule).unwrap();
        let sqe = SubmissionQueueEntry::parse(&capsule[8..72]).unwrap();
        for chunk in respond(sqe.cid, framing) {
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

/// Submit a 4 KiB read and poll until it completes or the queue fails; bounded.
fn read_until_done(q: &mut TcpQueue<u32>) -> (Option<HostError>, Option<Completion<u32>>) {
    let sqe = Read { nsid: 1, slba: 0, nlb: 7, ..Read::default() }.to_sqe();
    q.submit(Request { sqe, data: vec![0; 4096], direction: DataDirection::ControllerToHost, context: 7 }).unwrap();
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
