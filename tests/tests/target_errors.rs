//! Hostile and wrong input to the target over 127.0.0.1: every refused Connect, every NVMe status for a bad
//! command (NSID, LBA range, MDTS, SGL, opcode, queue type, sequence), and malformed NVMe/TCP PDUs, which end
//! their connection with a C2HTermReq while other connections keep being served.

mod target_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{data_offset, sqe_offset, InvalidParameter};
use nvmf_common::fabrics::property::{Property, PropertyGet, PropertySize};
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::features::{NumberOfQueues, SetFeatures};
use nvmf_common::nvme::identify::{cns, Identify};
use nvmf_common::nvme::io::{Compare, DatasetManagement, DsmRange, Read, Write, WriteZeroes};
use nvmf_common::nvme::opcode::FABRICS;
use nvmf_common::nvme::{SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{CapsuleCommand, DigestTypes, FatalErrorStatus, IcReq, Pdu};
use nvmf_tests::nvme_tcp_client::{Completion, TcpTestClient};
use target_support::*;

/// Connect Invalid Parameters pointing at `at`.
#[track_caller]
fn assert_invalid_parameter(c: &Completion, at: InvalidParameter) {
    assert_status(c, Status::CONNECT_INVALID_PARAMETERS);
    assert!(c.cqe.status.dnr(), "DNR");
    assert_eq!(InvalidParameter::from_dw0(c.cqe.dw0), at);
}

fn fresh(addr: SocketAddr) -> TcpTestClient {
    TcpTestClient::connect(addr, options()).expect("TCP + ICReq")
}

#[test]
fn connect_refusals() {
    // Allow-list without our host NQN.
    let other_host = r#"hosts = ["nqn.2024-01.com.example:another-host"]"#;
    let t = Target::start(&memory_config(other_host));
    let c = fresh(t.addr).fabrics_connect(SUBNQN, 0, 31, 0xFFFF, 0).unwrap();
    assert_status(&c, Status::CONNECT_INVALID_HOST);
    assert!(c.cqe.status.dnr());
    drop(t);

    let t = Target::start(&memory_config(""));
    let addr = t.addr;
    // Unknown subsystem: Invalid Parameters at SUBNQN in the Connect data.
    let c = fresh(addr).fabrics_connect("nqn.2024-01.io.nvmf-rs:nobody", 0, 31, 0xFFFF, 0).unwrap();
    assert_invalid_parameter(&c, InvalidParameter::in_data(data_offset::SUBNQN));
    // SQSIZE above CAP.MQES (127): at SQSIZE in the SQE.
    let c = fresh(addr).fabrics_connect(SUBNQN, 0, 128, 0xFFFF, 0).unwrap();
    assert_invalid_parameter(&c, InvalidParameter::in_command(sqe_offset::SQSIZE));
    // An admin queue naming a controller: at CNTLID in the data.
    let c = fresh(addr).fabrics_connect(SUBNQN, 0, 31, 1, 0).unwrap();
    assert_invalid_parameter(&c, InvalidParameter::in_data(data_offset::CNTLID));
    // KATO above the configured maximum (one hour): at KATO in the SQE.
    let c = fresh(addr).fabrics_connect(SUBNQN, 0, 31, 0xFFFF, 3_600_001).unwrap();
    assert_invalid_parameter(&c, InvalidParameter::in_command(sqe_offset::KATO));

    let (mut admin, cntlid) = connect_admin(addr, SUBNQN, options(), 0);
    // A second Connect on a connected queue.
    let c = admin.fabrics_connect(SUBNQN, 0, 31, 0xFFFF, 0).unwrap();
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    // I/O queues before CC.EN.
    let c = connect_io(addr, SUBNQN, options(), cntlid, 1).unwrap_err();
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    enable(&mut admin);
    // Two I/O queues granted: qid 3 is beyond them (at QID in the SQE).
    let c = ok(admin.command(SetFeatures::new(&NumberOfQueues::with_counts(2, 2).unwrap()).to_sqe(), None, 0));
    assert_eq!(NumberOfQueues::from_dw0(c.cqe.dw0).submission_queues(), 2);
    let c = connect_io(addr, SUBNQN, options(), cntlid, 3).unwrap_err();
    assert_invalid_parameter(&c, InvalidParameter::in_command(sqe_offset::QID));
    // An unknown controller; the same qid twice.
    let c = connect_io(addr, SUBNQN, options(), cntlid.wrapping_add(100), 1).unwrap_err();
    assert_invalid_parameter(&c, InvalidParameter::in_data(data_offset::CNTLID));
    let mut io = connect_io(addr, SUBNQN, options(), cntlid, 2).expect("qid 2");
    let c = connect_io(addr, SUBNQN, options(), cntlid, 2).unwrap_err();
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    // An I/O queue of the discovery subsystem.
    let (_disc, disc_cntlid) = connect_admin(addr, nvmf_common::fabrics::nqn::DISCOVERY_NQN, options(), 0);
    let c = connect_io(addr, nvmf_common::fabrics::nqn::DISCOVERY_NQN, options(), disc_cntlid, 1).unwrap_err();
    assert_invalid_parameter(&c, InvalidParameter::in_command(sqe_offset::QID));
    // None of it disturbed the association.
    ok(Ok(read(&mut io, 1, 512, 0, 512)));
}

#[test]
fn commands_before_connect_are_sequence_errors() {
    let t = Target::start(&memory_config(""));
    let mut q = fresh(t.addr);
    let read = Read { nsid: 1, slba: 0, nlb: 0, ..Read::default() }.to_sqe();
    assert_status(&q.command(read, None, 512).unwrap(), Status::COMMAND_SEQUENCE_ERROR);
    let c = q.command(Identify::new(cns::CONTROLLER, 0).to_sqe(), None, 4096).unwrap();
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    let get = PropertyGet { size: PropertySize::Eight, offset: Property::Cap.offset() };
    assert_status(&q.command_raw(get.to_sqe(), &[], &[], 0).unwrap(), Status::COMMAND_SEQUENCE_ERROR);
    // The queue can still connect afterwards.
    ok(q.fabrics_connect(SUBNQN, 0, 31, 0xFFFF, 0));
}

/// An SQE with `sgl` as SGL1 (CID set by `command_raw`).
fn with_sgl(mut sqe: SubmissionQueueEntry, sgl: SglDescriptor) -> SubmissionQueueEntry {
    sqe.set_sgl1(&sgl).unwrap();
    sqe
}

fn transport_sgl(length: u32) -> SglDescriptor {
    SglDescriptor::TransportDataBlock { length, subtype: SglSubtype::TransportSpecific }
}

/// Issue `sqe` exactly as built (SGL included) with a fresh CID; expect `want` with DNR.
#[track_caller]
fn expect_status(q: &mut TcpTestClient, mut sqe: SubmissionQueueEntry, in_capsule: &[u8], want: Status) {
    sqe.cid = q.next_cid();
    let c = q.command_raw(sqe, in_capsule, &[], 0).expect("answered");
    assert_status(&c, want);
    assert!(c.cqe.status.dnr(), "{want} carries DNR");
}

#[test]
fn io_commands_with_invalid_fields() {
    let t = Target::start(&memory_config(""));
    let mut a = Association::new(t.addr, options(), 1);
    let q = a.io();
    let end = NS1_BLOCKS;
    let read = |nsid, slba, nlb| Read { nsid, slba, nlb, ..Read::default() }.to_sqe();
    let write = |nsid, slba, nlb| Write { nsid, slba, nlb, ..Write::default() }.to_sqe();

    // Invalid namespace: 0, an inactive NSID, the broadcast NSID.
    for nsid in [0, 3, 0xFFFF_FFFF] {
        expect_status(q, with_sgl(read(nsid, 0, 0), transport_sgl(512)), &[], Status::INVALID_NAMESPACE);
        let wz = WriteZeroes { nsid, ..WriteZeroes::default() }.to_sqe();
        expect_status(q, wz, &[], Status::INVALID_NAMESPACE);
    }

    // LBA out of range: one block past the end, a range crossing it, SLBA + NLB overflowing 64 bits.
    for (slba, nlb) in [(end, 0), (end - 1, 1), (u64::MAX, 0), (u64::MAX - 2, 7)] {
        let len = (u32::from(nlb) + 1) * 512;
        expect_status(q, with_sgl(read(1, slba, nlb), transport_sgl(len)), &[], Status::LBA_OUT_OF_RANGE);
        let data = vec![0u8; len as usize];
        let inline = SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset };
        expect_status(q, with_sgl(write(1, slba, nlb), inline), &data, Status::LBA_OUT_OF_RANGE);
        let cmp = Compare { nsid: 1, slba, nlb, ..Compare::default() }.to_sqe();
        expect_status(q, with_sgl(cmp, inline), &data, Status::LBA_OUT_OF_RANGE);
        let wz = WriteZeroes { nsid: 1, slba, nlb, ..WriteZeroes::default() }.to_sqe();
        expect_status(q, wz, &[], Status::LBA_OUT_OF_RANGE);
    }
    let range = DsmRange { cattr: 0, length: 8, slba: end - 4 }.to_bytes();
    let dsm = DatasetManagement { nsid: 1, nr: 0, ad: true, ..DatasetManagement::default() }.to_sqe();
    let inline16 = SglDescriptor::DataBlock { address: 0, length: 16, subtype: SglSubtype::Offset };
    expect_status(q, with_sgl(dsm, inline16), &range, Status::LBA_OUT_OF_RANGE);

    // Transfers above MDTS (1 MiB): 2 MiB reads and writes, refused before any data moves.
    expect_status(q, with_sgl(read(1, 0, 4095), transport_sgl(2 << 20)), &[], Status::INVALID_FIELD);
    expect_status(q, with_sgl(write(1, 0, 4095), transport_sgl(2 << 20)), &[], Status::INVALID_FIELD);

    // Bad SGLs.
    // The SGL length is not the transfer length.
    expect_status(q, with_sgl(read(1, 0, 7), transport_sgl(2048)), &[], Status::DATA_SGL_LENGTH_INVALID);
    expect_status(q, with_sgl(write(1, 0, 0), transport_sgl(4096)), &[], Status::DATA_SGL_LENGTH_INVALID);
    // A memory address data block, a keyed (RDMA) data block, a segment: not for TCP.
    let address = SglDescriptor::DataBlock { address: 0x1000, length: 512, subtype: SglSubtype::Address };
    expect_status(q, with_sgl(read(1, 0, 0), address), &[], Status::SGL_DESCRIPTOR_TYPE_INVALID);
    let keyed = SglDescriptor::KeyedDataBlock { address: 0x1000, length: 512, key: 9, subtype: SglSubtype::Address };
    expect_status(q, with_sgl(read(1, 0, 0), keyed), &[], Status::SGL_DESCRIPTOR_TYPE_INVALID);
    let mut reserved = read(1, 0, 0);
    reserved.dptr = [0; 16];
    reserved.dptr[15] = 0x70; // SGL descriptor type 7: reserved
    expect_status(q, reserved, &[], Status::SGL_DESCRIPTOR_TYPE_INVALID);
    // In-capsule data: offset past the data, more than was sent, for a read.
    let past = SglDescriptor::DataBlock { address: 1024, length: 512, subtype: SglSubtype::Offset };
    expect_status(q, with_sgl(write(1, 0, 0), past), &[0; 512], Status::SGL_OFFSET_INVALID);
    let long = SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset };
    expect_status(q, with_sgl(write(1, 0, 1), long), &[0; 512], Status::DATA_SGL_LENGTH_INVALID);
    let inline512 = SglDescriptor::DataBlock { address: 0, length: 512, subtype: SglSubtype::Offset };
    expect_status(q, with_sgl(read(1, 0, 0), inline512), &[], Status::INVALID_FIELD);
    // PRPs instead of SGLs, fused commands.
    let mut prp = read(1, 0, 0);
    prp.flags = 0;
    expect_status(q, prp, &[], Status::INVALID_FIELD);
    let mut fused = with_sgl(read(1, 0, 0), transport_sgl(512));
    fused.flags |= 0b01;
    expect_status(q, fused, &[], Status::INVALID_FIELD);

    // Unknown and misplaced opcodes on an I/O queue.
    expect_status(q, SubmissionQueueEntry::new(0x7c), &[], Status::INVALID_OPCODE);
    expect_status(q, with_sgl(Identify::new(1, 0).to_sqe(), transport_sgl(4096)), &[], Status::INVALID_OPCODE);
    let get = PropertyGet { size: PropertySize::Eight, offset: Property::Cap.offset() }.to_sqe();
    expect_status(q, get, &[], Status::INVALID_QUEUE_TYPE);
    let mut fabrics = SubmissionQueueEntry::new(FABRICS);
    fabrics.nsid = 0x10; // fctype 10h: not a fabrics command
    expect_status(q, fabrics, &[], Status::INVALID_OPCODE);

    // After all of it the queue works.
    let data = pattern(4096, 4);
    ok(Ok(target_support::write(q, 1, 512, end - 8, &data, false)));
    assert_eq!(ok(Ok(target_support::read(q, 1, 512, end - 8, 4096))).data, data);
}

#[test]
fn admin_commands_with_invalid_fields() {
    let t = Target::start(&memory_config(""));
    let (mut admin, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut admin);
    expect_status(&mut admin, SubmissionQueueEntry::new(0xC1), &[], Status::INVALID_OPCODE);
    // Create I/O Submission Queue (0x01) has no place over fabrics.
    expect_status(&mut admin, SubmissionQueueEntry::new(0x01), &[], Status::INVALID_OPCODE);
    // Identify with in-capsule data (controller-to-host data cannot be in the capsule), or with no data.
    let inline = SglDescriptor::DataBlock { address: 0, length: 4096, subtype: SglSubtype::Offset };
    let id = Identify::new(cns::CONTROLLER, 0).to_sqe();
    expect_status(&mut admin, with_sgl(id, inline), &[0; 4096], Status::INVALID_FIELD);
    expect_status(&mut admin, with_sgl(id, transport_sgl(0)), &[], Status::DATA_SGL_LENGTH_INVALID);
    // Property Set of a read-only property.
    let c = admin.property_set(Property::Cap.offset(), Property::Cap.size(), 0).unwrap();
    assert_status(&c, Status::INVALID_FIELD);
    let c = admin.property_get(0x1000, PropertySize::Four).unwrap();
    assert_status(&c, Status::INVALID_FIELD);
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
}

#[test]
fn in_capsule_data_beyond_ioccsz_is_fatal() {
    let t = Target::start(&memory_config(""));
    let mut a = Association::new(t.addr, options(), 1);
    let len = 16 * 1024 + 512;
    let mut sqe = Write { nsid: 1, slba: 0, nlb: 32, ..Write::default() }.to_sqe();
    sqe.set_sgl1(&SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset }).unwrap();
    sqe.cid = a.io().next_cid();
    let data = vec![0u8; len as usize];
    a.io().send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &data).unwrap();
    let term = expect_closed(a.io(), Duration::from_secs(5));
    assert_eq!(term.map(|t| t.0), Some(FatalErrorStatus::DataTransferLimitExceeded));
    ok(a.admin.command(KeepAlive.to_sqe(), None, 0));
}

/// A CapsuleCmd carrying a Keep Alive, as bytes without digests.
fn keep_alive_capsule() -> Vec<u8> {
    Pdu::CapsuleCommand(CapsuleCommand { sqe: KeepAlive.to_sqe() })
        .to_bytes(&[], &nvmf_common::transport::tcp::Framing::default())
        .unwrap()
}

/// Wait (bounded) until the target serves `n` connections.
fn wait_connections(t: &Target, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.running().tcp_connections() != n {
        assert!(Instant::now() < deadline, "{} connections served, expected {n}", t.running().tcp_connections());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A malformed-PDU case: what, whether ICReq goes first, the bytes, the FES, and the FEI where the spec defines
/// it as the offending field's byte offset.
type Malformed = (&'static str, bool, Vec<u8>, FatalErrorStatus, Option<u32>);

#[test]
fn malformed_pdus_end_only_their_connection() {
    let t = Target::start(&memory_config(""));
    // A witness association opened before the broken connections, used after each.
    let mut witness = Association::new(t.addr, options(), 1);
    let data = pattern(4096, 11);
    ok(Ok(write(witness.io(), 1, 512, 64, &data, false)));
    wait_connections(&t, 2);

    let mut bad_hlen = keep_alive_capsule();
    bad_hlen[2] = 0x40;
    let mut unknown_type = keep_alive_capsule();
    unknown_type[0] = 0x0F;
    let mut short_plen = keep_alive_capsule();
    short_plen[4..8].copy_from_slice(&8u32.to_le_bytes());
    let icreq = Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst: DigestTypes::default(), maxr2t: 0 })
        .to_bytes(&[], &nvmf_common::transport::tcp::Framing::default())
        .unwrap();
    let mut bad_pfv = icreq.clone();
    bad_pfv[8] = 1;

    let cases: [Malformed; 6] = [
        ("HLEN wrong for the type", true, bad_hlen, FatalErrorStatus::InvalidPduHeaderField, Some(2)),
        ("unknown PDU type", true, unknown_type, FatalErrorStatus::InvalidPduHeaderField, Some(0)),
        ("PLEN below HLEN", true, short_plen, FatalErrorStatus::InvalidPduHeaderField, Some(4)),
        ("ICReq twice", true, icreq.clone(), FatalErrorStatus::PduSequenceError, None),
        ("a capsule before ICReq", false, keep_alive_capsule(), FatalErrorStatus::PduSequenceError, None),
        ("ICReq with PFV 1", false, bad_pfv, FatalErrorStatus::InvalidPduHeaderField, Some(8)),
    ];
    for (what, initialize, bytes, fes, fei) in cases {
        let mut bad = TcpTestClient::connect_without_icreq(t.addr, options()).unwrap();
        if initialize {
            bad.initialize(options()).unwrap();
        }
        bad.send_raw(&bytes).unwrap();
        let term = expect_closed(&mut bad, Duration::from_secs(5));
        let Some((got_fes, got_fei)) = term else { panic!("{what}: closed without a C2HTermReq") };
        assert_eq!(got_fes, fes, "{what}");
        if let Some(fei) = fei {
            assert_eq!(got_fei, fei, "{what}: FEI is the offending field's offset");
        }
        // The witness is untouched.
        assert_eq!(ok(Ok(read(witness.io(), 1, 512, 64, 4096))).data, data, "{what}");
        ok(witness.admin.command(KeepAlive.to_sqe(), None, 0));
    }

    // A host vanishing in the middle of a PDU (half a capsule) or of a write's data (R2T outstanding).
    let mut half = fresh(t.addr);
    half.send_raw(&keep_alive_capsule()[..40]).unwrap();
    drop(half);
    let mut mid_write = connect_io(t.addr, SUBNQN, options(), witness.cntlid, 2).expect("qid 2");
    let mut sqe = Write { nsid: 1, slba: 64, nlb: 63, ..Write::default() }.to_sqe();
    sqe.set_sgl1(&transport_sgl(32768)).unwrap();
    sqe.cid = mid_write.next_cid();
    mid_write.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).unwrap();
    let (pdu, _) = mid_write.recv_pdu().unwrap();
    assert!(matches!(pdu, Pdu::R2t(_)), "{pdu:?}");
    drop(mid_write);
    // Every broken connection is gone; the witness still reads what it wrote.
    wait_connections(&t, 2);
    assert_eq!(ok(Ok(read(witness.io(), 1, 512, 64, 4096))).data, data);
}
