//! Proptest strategies for PDUs, shared with the decoder's tests.

use super::*;
use crate::nvme::{CompletionQueueEntry, SubmissionQueueEntry};
use proptest::prelude::*;

/// Any framing a connection could negotiate.
pub fn framing() -> impl Strategy<Value = Framing> {
    (any::<bool>(), any::<bool>(), 0..=MAX_PDA, 0..=MAX_PDA).prop_map(|(hdgst, ddgst, hpda, cpda)| Framing {
        hdgst,
        ddgst,
        hpda,
        cpda,
    })
}

fn sqe() -> impl Strategy<Value = SubmissionQueueEntry> {
    (any::<[u8; 64]>()).prop_map(|b| SubmissionQueueEntry::parse(&b).expect("64 bytes"))
}

fn cqe() -> impl Strategy<Value = CompletionQueueEntry> {
    (any::<[u8; 16]>()).prop_map(|b| CompletionQueueEntry::parse(&b).expect("16 bytes"))
}

fn dgst() -> impl Strategy<Value = DigestTypes> {
    (any::<bool>(), any::<bool>()).prop_map(|(h, d)| DigestTypes { hdgst_enable: h, ddgst_enable: d })
}

fn fes() -> impl Strategy<Value = FatalErrorStatus> {
    (1u16..=6).prop_map(|v| FatalErrorStatus::from_u16(v).expect("1..=6"))
}

fn data(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..=max)
}

/// A valid PDU travelling `direction` with its data.
pub fn pdu(direction: Direction) -> BoxedStrategy<(Pdu, Vec<u8>)> {
    let term = (fes(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..=TERM_REQ_MAX_DATA_LEN))
        .prop_map(move |(fes, fei, d)| (Pdu::TermReq(TermReq { direction, fes, fei }), d));
    match direction {
        Direction::HostToController => prop_oneof![
            (0..=MAX_PDA, dgst(), any::<u32>())
                .prop_map(|(hpda, dgst, maxr2t)| (Pdu::IcReq(IcReq { pfv: 0, hpda, dgst, maxr2t }), vec![])),
            term,
            (sqe(), proptest::collection::vec(any::<u8>(), 0..300))
                .prop_map(|(sqe, d)| (Pdu::CapsuleCommand(CapsuleCommand { sqe }), d)),
            (any::<u16>(), any::<u16>(), 0u32..1 << 30, any::<bool>(), data(300)).prop_map(
                |(cccid, ttag, datao, last_pdu, d)| {
                    let datal = u32::try_from(d.len()).expect("small");
                    (Pdu::H2cData(H2cData { cccid, ttag, datao, datal, last_pdu }), d)
                }
            ),
        ]
        .boxed(),
        Direction::ControllerToHost => prop_oneof![
            (0..=MAX_PDA, dgst(), (MIN_MAXH2CDATA / 4)..=(u32::MAX / 4))
                .prop_map(|(cpda, dgst, m)| (Pdu::IcResp(IcResp { pfv: 0, cpda, dgst, maxh2cdata: m * 4 }), vec![])),
            term,
            cqe().prop_map(|cqe| (Pdu::CapsuleResponse(CapsuleResponse { cqe }), vec![])),
            (any::<u16>(), 0u32..1 << 30, any::<bool>(), any::<bool>(), data(300)).prop_map(
                |(cccid, datao, last_pdu, success, d)| {
                    let datal = u32::try_from(d.len()).expect("small");
                    let success = success && last_pdu;
                    (Pdu::C2hData(C2hData { cccid, datao, datal, last_pdu, success }), d)
                }
            ),
            (any::<u16>(), any::<u16>(), 0u32..1 << 30, 1u32..1 << 30)
                .prop_map(|(cccid, ttag, r2to, r2tl)| (Pdu::R2t(R2t { cccid, ttag, r2to, r2tl }), vec![])),
        ]
        .boxed(),
    }
}

/// A valid PDU of either direction.
pub fn any_pdu() -> BoxedStrategy<(Pdu, Vec<u8>)> {
    prop_oneof![pdu(Direction::HostToController), pdu(Direction::ControllerToHost)].boxed()
}
