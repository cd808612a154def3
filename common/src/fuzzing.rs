//! Entry points shared by the cargo-fuzz targets in `fuzz/` and the corpus replay test
//! (`common/tests/fuzz_corpus.rs`), so a corpus exercises exactly the same code under `cargo test` as under
//! the fuzzer. Each function takes arbitrary bytes, must never panic on them, and asserts the properties a
//! parser promises: whatever parses re-encodes to something that parses to the same value.
#![forbid(unsafe_code)]

use crate::fabrics::connect::{Connect, ConnectData, CONNECT_DATA_SIZE};
use crate::fabrics::disconnect::Disconnect;
use crate::fabrics::discovery::DiscoveryLogPage;
use crate::fabrics::property::{PropertyGet, PropertySet};
use crate::fabrics::tls::PskIdentity;
use crate::nvme::admin::{Abort, AsyncEvent, AsyncEventRequest, KeepAlive};
use crate::nvme::features::{
    AsyncEventConfiguration, GetFeatures, HostIdentifier, KeepAliveTimer, NumberOfQueues, SetFeatures,
    VolatileWriteCache,
};
use crate::nvme::identify::{
    ActiveNamespaceIdList, Identify, IdentifyController, IdentifyNamespace, NamespaceIdentificationDescriptor,
};
use crate::nvme::io::{DatasetManagement, IoCommand};
use crate::nvme::log_page::{
    copy_log_page_range, ChangedNamespaceList, ChangedNamespaces, CommandsSupportedAndEffects, ErrorInformationEntry,
    GetLogPage, SmartLog,
};
use crate::nvme::reservation::{
    ReservationAcquire, ReservationKeys, ReservationRegister, ReservationRelease, ReservationReport, ReservationStatus,
};
use crate::nvme::{CompletionQueueEntry, SglDescriptor, SubmissionQueueEntry};
use crate::transport::rdma::private_data::{RdmaCmAccept, RdmaCmReject, RdmaCmRequest};
use crate::transport::tcp::{Decoded, DecoderConfig, Direction, Framing, PduDecoder, PduError};

/// Check that a view parsed from an SQE survives `to_sqe` and a second parse unchanged.
macro_rules! view_round_trip {
    ($sqe:expr, $($view:ty),+ $(,)?) => {
        $(
            if let Ok(v) = <$view>::from_sqe($sqe) {
                let again = <$view>::from_sqe(&v.to_sqe()).expect(concat!(stringify!($view), " re-parses"));
                assert_eq!(again, v, concat!(stringify!($view), " round trip"));
            }
        )+
    };
}

/// Every typed SQE view (admin, I/O, fabrics) and the SGL and CQE codecs over the first 64 bytes.
pub fn sqe_views(data: &[u8]) {
    if let Ok(cqe) = CompletionQueueEntry::parse(data) {
        assert_eq!(CompletionQueueEntry::parse(&cqe.to_bytes()), Ok(cqe));
        let _ = cqe.status.name();
    }
    let Ok(sqe) = SubmissionQueueEntry::parse(data) else { return };
    assert_eq!(&sqe.to_bytes()[..], &data[..64]);
    if let Ok(sgl) = sqe.sgl1() {
        assert_eq!(SglDescriptor::parse(&sgl.to_bytes().expect("a parsed SGL encodes")), Ok(sgl));
    }
    view_round_trip!(
        &sqe,
        IoCommand,
        Identify,
        GetLogPage,
        GetFeatures,
        SetFeatures,
        KeepAlive,
        AsyncEventRequest,
        Abort,
        PropertyGet,
        PropertySet,
        Disconnect,
        ReservationRegister,
        ReservationAcquire,
        ReservationRelease,
        ReservationReport,
    );
    if let Ok(report) = ReservationReport::from_sqe(&sqe) {
        let _ = report.length_bytes();
    }
    if let Ok(c) = Connect::from_sqe(&sqe) {
        let again = Connect::from_sqe(&c.to_sqe().expect("a parsed Connect encodes")).expect("Connect re-parses");
        assert_eq!(again, c);
        let _ = c.queue_entries();
    }
    if let Ok(set) = SetFeatures::from_sqe(&sqe) {
        let _ = set.value::<VolatileWriteCache>();
        let _ = set.value::<NumberOfQueues>();
        let _ = set.value::<AsyncEventConfiguration>();
        let _ = set.value::<KeepAliveTimer>();
    }
    if let Ok(get) = PropertyGet::from_sqe(&sqe) {
        let _ = get.property();
    }
    if let Ok(set) = PropertySet::from_sqe(&sqe) {
        let _ = set.property();
    }
    if let Ok(log) = GetLogPage::from_sqe(&sqe) {
        let _ = (log.length_bytes(), log.offset());
    }
    if let Ok(event) = AsyncEvent::from_dw0(sqe.cdw10) {
        assert_eq!(AsyncEvent::from_dw0(event.to_dw0()), Ok(event));
    }
    if let Ok(IoCommand::DatasetManagement(dsm)) = IoCommand::from_sqe(&sqe) {
        if let Ok(ranges) = dsm.ranges(&data[64..]) {
            assert_eq!(ranges.count(), dsm.range_count());
        }
    }
}

/// The 1024-byte Connect data.
pub fn connect_data(data: &[u8]) {
    let Ok(cd) = ConnectData::parse(data) else { return };
    let mut out = [0u8; CONNECT_DATA_SIZE];
    cd.encode(&mut out).expect("parsed Connect data encodes");
    assert_eq!(ConnectData::parse(&out), Ok(cd));
}

/// The discovery log page (header and entries), as a host reads it at any length.
pub fn discovery_log(data: &[u8]) {
    let Ok(page) = DiscoveryLogPage::parse(data) else { return };
    assert!(page.entries_present() <= data.len() / 1024);
    for entry in page.entries().flatten() {
        let bytes = entry.to_bytes().expect("a parsed discovery entry encodes");
        let again = crate::fabrics::discovery::DiscoveryLogEntry::parse(&bytes).expect("entry re-parses");
        assert_eq!(again, entry);
    }
}

/// A TLS PSK identity, as a target reads the one a host offers in its ClientHello: whatever parses prints back to
/// exactly the bytes it came from.
pub fn psk_identity(data: &[u8]) {
    let Ok(identity) = PskIdentity::parse(data) else { return };
    let text = identity.to_string();
    assert_eq!(text.as_bytes(), data, "a PSK identity prints back as it was received");
    assert_eq!(PskIdentity::parse(text.as_bytes()), Ok(identity));
}

/// RDMA CM private data: request, accept and reject.
pub fn rdma_private_data(data: &[u8]) {
    if let Ok(r) = RdmaCmRequest::parse(data) {
        assert_eq!(RdmaCmRequest::parse(&r.to_bytes()), Ok(r));
    }
    if let Ok(a) = RdmaCmAccept::parse(data) {
        assert_eq!(RdmaCmAccept::parse(&a.to_bytes()), Ok(a));
    }
    if let Ok(r) = RdmaCmReject::parse(data) {
        assert_eq!(RdmaCmReject::parse(&r.to_bytes()), Ok(r));
    }
}

/// The DH-HMAC-CHAP messages: whatever parses re-encodes to the same value; then the bytes go to a host
/// transaction as the controller's Challenge and, when it replies, as its Success1 (the first byte splits them),
/// and to a controller transaction as the host's first two messages.
pub fn auth_messages(data: &[u8]) {
    use crate::fabrics::auth::controller::{ControllerCredentials, ControllerTransaction, MAX_HOST_MESSAGE_LEN};
    use crate::fabrics::auth::dh::DhGroup;
    use crate::fabrics::auth::host::{HostCredentials, HostTransaction};
    use crate::fabrics::auth::message::{Challenge, Failure, FailureKind, Negotiate, Reply, Success1, Success2};
    use crate::fabrics::auth::secret::DhchapSecret;
    use crate::fabrics::auth::{OsRandom, SequenceNumbers};

    if let Ok(m) = Negotiate::parse(data) {
        let again = Negotiate::parse(&m.to_bytes()).expect("a parsed Negotiate re-parses");
        assert_eq!((again.t_id, again.sc_c), (m.t_id, m.sc_c));
    }
    if let Ok(m) = Challenge::parse(data) {
        assert_eq!(Challenge::parse(&m.to_bytes().expect("encodes")), Ok(m));
    }
    if let Ok(m) = Reply::parse(data) {
        assert_eq!(Reply::parse(&m.to_bytes().expect("encodes")), Ok(m));
    }
    if let Ok(m) = Success1::parse(data) {
        assert_eq!(Success1::parse(&m.to_bytes()), Ok(m));
    }
    if let Ok(m) = Success2::parse(data) {
        assert_eq!(Success2::parse(&m.to_bytes()), Ok(m));
    }
    for kind in [FailureKind::Failure1, FailureKind::Failure2] {
        if let Ok(m) = Failure::parse(data, kind) {
            assert_eq!(Failure::parse(&m.to_bytes(), kind), Ok(m));
        }
    }
    let Some((&split, rest)) = data.split_first() else { return };
    let (challenge, success1) = rest.split_at(usize::from(split).min(rest.len()) * rest.len() / 256);
    let secret = DhchapSecret::new(None, &[7; 32]).expect("a 32-byte secret");
    let credentials =
        HostCredentials { secret: &secret, controller_secret: Some(&secret), hostnqn: "nqn.h", subnqn: "nqn.s" };
    let mut t = HostTransaction::new(credentials, u16::from_le_bytes([rest.get(4).copied().unwrap_or(0), 0]));
    t.negotiate();
    if t.reply(challenge, &SequenceNumbers::new(), &mut OsRandom).is_ok() {
        let _ = t.success(success1);
    }
    // The same two parts to a controller transaction, as the host's first and second messages (NULL group only:
    // a DH key pair per run would slow the fuzzer to a crawl).
    let credentials = ControllerCredentials {
        host_secret: secret.clone(),
        controller_secret: Some(secret),
        hostnqn: "nqn.h".to_owned(),
        subnqn: "nqn.s".to_owned(),
        hashes: Vec::new(),
        dh_groups: vec![DhGroup::Null],
    };
    let mut c = ControllerTransaction::new(credentials);
    let sequence = SequenceNumbers::new();
    for message in [challenge, success1] {
        let _ = c.send(message, &sequence, &mut OsRandom);
        assert!(c.receive().len() <= MAX_HOST_MESSAGE_LEN, "a controller message fits any Receive a host may send");
    }
}

/// The data structures a host parses from admin commands: Identify (controller, namespace, namespace lists,
/// identification descriptors), log pages, a Host Identifier, and log page windows; and from reservation
/// commands: the Reservation Status (either format) and the reservation keys. The first byte picks
/// the parameters that are not part of the structure.
pub fn admin_data(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    if let Ok(c) = IdentifyController::parse(rest) {
        let bytes = c.to_bytes().expect("a parsed Identify Controller encodes");
        assert_eq!(IdentifyController::parse(&bytes), Ok(c));
    }
    if let Ok(ns) = IdentifyNamespace::parse(rest) {
        assert_eq!(IdentifyNamespace::parse(&ns.to_bytes()), Ok(ns));
        let _ = ns.lba_data_size();
    }
    if let Ok(list) = ActiveNamespaceIdList::parse(rest) {
        let _ = list.iter().count();
    }
    if let Ok(list) = NamespaceIdentificationDescriptor::parse_list(rest) {
        let _ = list.iter().count();
    }
    let _ = ErrorInformationEntry::parse_log(rest).count();
    if let Ok(smart) = SmartLog::parse(rest) {
        assert_eq!(SmartLog::parse(&smart.to_bytes()), Ok(smart));
    }
    if let Ok(ChangedNamespaces::List(changed)) = ChangedNamespaceList::parse(rest) {
        let _ = changed.iter().count();
    }
    if let Ok(effects) = CommandsSupportedAndEffects::parse(rest) {
        assert_eq!(CommandsSupportedAndEffects::parse(&effects.to_bytes()), Ok(effects));
    }
    let _ = HostIdentifier::parse(u32::from(selector & 1), rest);
    let eds = selector & 2 != 0;
    if let Ok(status) = ReservationStatus::parse(rest, eds) {
        let mut bytes = vec![0u8; status.encode(eds, &mut [])];
        status.encode(eds, &mut bytes);
        assert_eq!(ReservationStatus::parse(&bytes, eds), Ok(status));
    }
    if let Ok(keys) = ReservationKeys::parse(rest) {
        assert_eq!(ReservationKeys::parse(&keys.to_bytes()), Ok(keys));
    }
    let mut window = [0u8; 64];
    let offset = rest.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let copied = copy_log_page_range(rest, offset, &mut window[..usize::from(selector % 65)]);
    assert!(copied <= usize::from(selector % 65));
    let mut sqe = SubmissionQueueEntry::new(crate::nvme::opcode::io::DATASET_MANAGEMENT);
    sqe.nsid = 1;
    sqe.cdw10 = u32::from(selector);
    if let Ok(dsm) = DatasetManagement::from_sqe(&sqe) {
        if let Ok(ranges) = dsm.ranges(rest) {
            assert_eq!(ranges.count(), dsm.range_count());
        }
    }
}

/// The NVMe/TCP stream decoder. The first byte picks the receiving direction, digests and PDU data
/// alignment; the second a chunk size. The rest is decoded twice, once whole and once fed in chunks, and
/// both must yield the same PDUs; each PDU must re-encode to bytes that decode to the same PDU.
pub fn tcp_pdu_stream(data: &[u8]) {
    let [mode, chunk, stream @ ..] = data else { return };
    let receive = if mode & 1 == 0 { Direction::HostToController } else { Direction::ControllerToHost };
    let framing = Framing { hdgst: mode & 2 != 0, ddgst: mode & 4 != 0, hpda: (mode >> 3) & 3, cpda: (mode >> 5) & 3 };
    let mut config = DecoderConfig::new(receive, 64 * 1024);
    config.framing = framing;
    let chunk = usize::from(*chunk).max(1);

    // One-shot, in place.
    let mut expected = Vec::new();
    let mut at = 0;
    let whole_error = loop {
        match crate::transport::tcp::decode(&stream[at..], &config) {
            Ok(Decoded::Pdu { pdu, data, consumed }) => {
                assert!(consumed > 0 && at + consumed <= stream.len());
                let payload = &stream[at..at + consumed][data];
                let bytes = pdu.to_bytes(payload, &framing).expect("a decoded PDU encodes");
                match crate::transport::tcp::decode(&bytes, &config) {
                    Ok(Decoded::Pdu { pdu: again, data: d, consumed: n }) => {
                        assert_eq!(again, pdu);
                        assert_eq!(&bytes[d], payload);
                        assert_eq!(n, bytes.len());
                    }
                    other => panic!("re-encoded PDU does not decode: {other:?}"),
                }
                expected.push((pdu, payload.to_vec()));
                at += consumed;
            }
            Ok(Decoded::Needed(n)) => {
                assert!(n > 0);
                break None;
            }
            Err(PduError::DataDigest { pdu, consumed, .. }) => {
                expected.push((pdu, Vec::new()));
                at += consumed;
            }
            Err(e) => break Some(e),
        }
        if at == stream.len() {
            break None;
        }
    };

    // Streaming, in chunks.
    let mut decoder = PduDecoder::new(config);
    let mut got = Vec::new();
    let mut stream_error = None;
    'chunks: for piece in stream.chunks(chunk) {
        let mut rest = piece;
        loop {
            let step = decoder.feed(rest);
            match step.result {
                Ok(Some(pdu)) => got.push((pdu.pdu, pdu.data.to_vec())),
                Ok(None) => {
                    assert_eq!(step.consumed, rest.len(), "an incomplete PDU takes all input");
                    continue 'chunks;
                }
                Err(PduError::DataDigest { pdu, .. }) => got.push((pdu, Vec::new())),
                Err(e) => {
                    stream_error = Some(e);
                    break 'chunks;
                }
            }
            assert!(step.consumed <= rest.len());
            rest = &rest[step.consumed..];
            if rest.is_empty() {
                break;
            }
        }
    }
    assert_eq!(got, expected, "chunked and whole decoding disagree");
    assert_eq!(stream_error.is_some(), whole_error.is_some(), "chunked and whole decoding disagree on errors");
}
