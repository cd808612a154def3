//! I/O commands: Read, Write (in-capsule and fetched), Compare, Flush, Write Zeroes, Dataset Management,
//! their refusals, Disconnect, pool exhaustion, orphaned slots and storage errors.

use super::*;

#[test]
fn write_then_read_back() {
    let mut a = associate(target());
    let data = pattern(64 << 10, 5);
    a.io.write(&mut a.engine, 1, 100, &data).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 100, 128).ok().data, data);
    // Partial overlap.
    assert_eq!(a.io.read(&mut a.engine, 1, 101, 1).ok().data, data[512..1024]);
    // Last block of the namespace.
    let last = NS_SIZE / u64::from(BLOCK) - 1;
    a.io.write(&mut a.engine, 1, last, &data[..512]).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, last, 1).ok().data, data[..512]);
}

#[test]
fn write_with_in_capsule_data() {
    let mut a = associate(target());
    let data = pattern(4096, 7);
    let write = Write { nsid: 1, slba: 8, nlb: 7, ..Default::default() };
    let sqe = with_sgl(write.to_sqe(), in_capsule(4096));
    a.io.submit(&mut a.engine, sqe, &data, &[]).unwrap().ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 8, 8).ok().data, data);
    // FUA is accepted.
    let write = Write { nsid: 1, slba: 8, nlb: 0, fua: true, ..Default::default() };
    let sqe = with_sgl(write.to_sqe(), in_capsule(512));
    a.io.submit(&mut a.engine, sqe, &data[..512], &[]).unwrap().ok();
}

#[test]
fn compare_matches_and_fails() {
    let mut a = associate(target());
    let data = pattern(2048, 11);
    a.io.write(&mut a.engine, 1, 40, &data).ok();
    let compare = Compare { nsid: 1, slba: 40, nlb: 3, ..Default::default() };
    let sqe = with_sgl(compare.to_sqe(), transport_data(2048));
    a.io.submit(&mut a.engine, sqe, &[], &data).unwrap().ok();
    let mut other = data.clone();
    other[2047] ^= 1;
    let done = a.io.submit(&mut a.engine, sqe, &[], &other).unwrap();
    assert_eq!(done.status(), Status::COMPARE_FAILURE.with_dnr());
    // In-capsule compare.
    let sqe = with_sgl(compare.to_sqe(), in_capsule(2048));
    a.io.submit(&mut a.engine, sqe, &data, &[]).unwrap().ok();
}

#[test]
fn flush_write_zeroes_and_deallocate() {
    let mut a = associate(target());
    let data = pattern(8192, 13);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    a.io.run(&mut a.engine, Flush { nsid: 1 }.to_sqe()).ok();
    a.io.run(&mut a.engine, Flush { nsid: 0xFFFF_FFFF }.to_sqe()).ok();
    assert_eq!(a.io.run(&mut a.engine, Flush { nsid: 7 }.to_sqe()).status(), Status::INVALID_NAMESPACE.with_dnr());

    // Write Zeroes over blocks 2..4.
    let wz = WriteZeroes { nsid: 1, slba: 2, nlb: 1, fua: true, ..Default::default() };
    a.io.run(&mut a.engine, wz.to_sqe()).ok();
    let back = a.io.read(&mut a.engine, 1, 0, 16).ok().data;
    assert_eq!(back[..1024], data[..1024]);
    assert!(back[1024..2048].iter().all(|&b| b == 0));
    assert_eq!(back[2048..], data[2048..]);
    let wz = WriteZeroes { nsid: 1, slba: NS_SIZE / 512, nlb: 0, ..Default::default() };
    assert_eq!(a.io.run(&mut a.engine, wz.to_sqe()).status(), Status::LBA_OUT_OF_RANGE.with_dnr());

    // Deallocate blocks 8..16 and 0..1 (two ranges, one empty).
    let ranges = [
        DsmRange { cattr: 0, length: 8, slba: 8 },
        DsmRange { cattr: 0, length: 0, slba: 3 },
        DsmRange { cattr: 0, length: 1, slba: 0 },
    ];
    let list: Vec<u8> = ranges.iter().flat_map(|r| r.to_bytes()).collect();
    let dsm = DatasetManagement { nsid: 1, nr: 2, ad: true, ..Default::default() };
    let sqe = with_sgl(dsm.to_sqe(), transport_data(48));
    a.io.submit(&mut a.engine, sqe, &[], &list).unwrap().ok();
    let back = a.io.read(&mut a.engine, 1, 0, 16).ok().data;
    assert!(back[..512].iter().all(|&b| b == 0));
    assert_eq!(back[512..1024], data[512..1024]);
    assert!(back[4096..].iter().all(|&b| b == 0));
    // In-capsule range list with a range beyond the namespace: nothing is deallocated.
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    let bad = [DsmRange { cattr: 0, length: 1, slba: 0 }, DsmRange { cattr: 0, length: 2, slba: NS_SIZE / 512 - 1 }];
    let list: Vec<u8> = bad.iter().flat_map(|r| r.to_bytes()).collect();
    let dsm = DatasetManagement { nsid: 1, nr: 1, ad: true, ..Default::default() };
    let done = a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(32)), &list, &[]).unwrap();
    assert_eq!(done.status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).ok().data, data[..512]);
    // A range list shorter than NR says.
    let done = a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(16)), &list[..16], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // Without AD the command is a hint: success, nothing changes.
    let dsm = DatasetManagement { nsid: 1, nr: 0, idr: true, ..Default::default() };
    a.io.submit(&mut a.engine, with_sgl(dsm.to_sqe(), in_capsule(16)), &list[..16], &[]).unwrap().ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).ok().data, data[..512]);
}

#[test]
fn bad_io_commands() {
    let mut a = associate(target());
    let e = &mut a.engine;
    let io = &mut a.io;
    // Bad NSID.
    for nsid in [0, 2, 0xFFFF_FFFF] {
        assert_eq!(io.read(e, nsid, 0, 1).status(), Status::INVALID_NAMESPACE.with_dnr());
    }
    // LBA out of range, including SLBA + NLB overflowing 64 bits.
    let blocks = NS_SIZE / u64::from(BLOCK);
    assert_eq!(io.read(e, 1, blocks, 1).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(io.read(e, 1, blocks - 1, 2).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    assert_eq!(io.read(e, 1, u64::MAX, 2).status(), Status::LBA_OUT_OF_RANGE.with_dnr());
    // Above MDTS (128 KiB): 257 blocks of 512 bytes with a matching SGL.
    assert_eq!(io.read(e, 1, 0, 257).status(), Status::INVALID_FIELD.with_dnr());
    // SGL length not matching the transfer.
    let read = Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() };
    let done = io.run(e, with_sgl(read.to_sqe(), transport_data(1024)));
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // Keyed SGL on TCP, a memory address, a segment.
    for sgl in [
        SglDescriptor::KeyedDataBlock { address: 0, length: 512, key: 1, subtype: SglSubtype::Address },
        SglDescriptor::DataBlock { address: 0x1000, length: 512, subtype: SglSubtype::Address },
        SglDescriptor::LastSegment { address: 0, length: 512, subtype: SglSubtype::Offset },
    ] {
        let done = io.run(e, with_sgl(read.to_sqe(), sgl));
        assert_eq!(done.status(), Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr(), "{sgl:?}");
    }
    // In-capsule: data for a read, offset beyond the data, data shorter than the SGL.
    assert_eq!(io.run(e, with_sgl(read.to_sqe(), in_capsule(512))).status(), Status::INVALID_FIELD.with_dnr());
    let write = Write { nsid: 1, slba: 0, nlb: 0, ..Default::default() };
    let sgl = SglDescriptor::DataBlock { address: 600, length: 512, subtype: SglSubtype::Offset };
    let done = io.submit(e, with_sgl(write.to_sqe(), sgl), &[0; 512], &[]).unwrap();
    assert_eq!(done.status(), Status::SGL_OFFSET_INVALID.with_dnr());
    let done = io.submit(e, with_sgl(write.to_sqe(), in_capsule(512)), &[0; 100], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // PRP data pointer, fused command.
    let mut prp = read.to_sqe();
    prp.flags = 0;
    assert_eq!(io.run(e, prp).status(), Status::INVALID_FIELD.with_dnr());
    // Unknown opcodes (including an admin opcode on an I/O queue).
    for opcode in [0x06, 0x7E, 0xFF] {
        assert_eq!(io.run(e, SubmissionQueueEntry::new(opcode)).status(), Status::INVALID_OPCODE.with_dnr());
    }
    // Properties belong to the admin queue; Connect again is a sequence error.
    let done = io.run(e, PropertyGet { size: PropertySize::Four, offset: 0x1C }.to_sqe());
    assert_eq!(done.status(), Status::INVALID_QUEUE_TYPE.with_dnr());
    // Unknown admin opcodes and I/O opcodes on the admin queue.
    for opcode in [0x01, 0x10, 0x80] {
        assert_eq!(a.admin.run(e, SubmissionQueueEntry::new(opcode)).status(), Status::INVALID_OPCODE.with_dnr());
    }
    assert_eq!(a.admin.run(e, Disconnect.to_sqe()).status(), Status::INVALID_QUEUE_TYPE.with_dnr());
    // The queue is still fine.
    io.read(e, 1, 0, 1).ok();
}

#[test]
fn io_disconnect_command() {
    let mut a = associate(target());
    a.io.run(&mut a.engine, Disconnect.to_sqe()).ok();
    let mut out = Vec::new();
    assert_eq!(a.io.queue.poll(&mut a.engine, Instant::now(), &mut out), Err(QueueError::Disconnected { qid: 1 }));
    assert_eq!(a.admin.queue.controller().unwrap().io_queue_count(), 0);
    // The QID can be connected again.
    Host::new(&a.target).connect(&mut a.engine, 1, 31, a.cntlid, SUBNQN, HOSTNQN).ok();
}

#[test]
fn pool_exhaustion_parks_commands_until_buffers_return() {
    let target = target();
    let mut engine = engine_with(1);
    let mut admin = Host::new(&target);
    let cntlid =
        ConnectResponse::from_dw0(admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    io.connect(&mut engine, 1, 31, cntlid, SUBNQN, HOSTNQN).ok();
    let read = |slba| with_sgl(Read { nsid: 1, slba, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    // The first read holds the only buffer until released.
    let step1 = io.queue.command(&mut engine, &read(0), &[]).unwrap();
    assert_eq!(step1, Step::Pending);
    engine.submit().unwrap();
    let mut completions = Vec::new();
    engine.reap(|c| completions.push(c));
    let (_, slot1) = split_storage_tag(completions[0].tag);
    let Step::Respond { slot, .. } = io.queue.io_completed(&mut engine, slot1, completions.pop().unwrap().result)
    else {
        panic!()
    };
    // The second read waits for a buffer; in-capsule data cannot wait: Command Interrupted (retryable).
    assert_eq!(io.queue.command(&mut engine, &read(1), &[]).unwrap(), Step::Pending);
    let write = with_sgl(Write { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), in_capsule(512));
    let Step::Respond { slot: wslot, cqe, .. } = io.queue.command(&mut engine, &write, &[0; 512]).unwrap() else {
        panic!()
    };
    assert_eq!(cqe.status, Status::COMMAND_INTERRUPTED);
    assert!(!cqe.status.dnr());
    io.queue.release(&mut engine, wslot);
    let mut out = Vec::new();
    io.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty(), "still no buffer");
    io.queue.release(&mut engine, slot);
    io.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty(), "the read went to storage");
    assert_eq!(io.queue.in_flight(), 1);
    let done = io.drive(&mut engine, Step::Pending, &[]).unwrap().ok();
    assert_eq!(done.data.len(), 512);
}

#[test]
fn disconnect_with_io_in_flight_orphans_the_slot() {
    let mut a = associate(target());
    let read = with_sgl(Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    assert_eq!(a.io.queue.command(&mut a.engine, &read, &[]).unwrap(), Step::Pending);
    assert_eq!(a.io.queue.in_flight(), 1);
    a.io.queue.disconnect(&mut a.engine);
    a.engine.submit().unwrap();
    let mut completions = Vec::new();
    a.engine.reap(|c| completions.push(c));
    for c in completions {
        let (_, slot) = split_storage_tag(c.tag);
        assert_eq!(a.io.queue.io_completed(&mut a.engine, slot, c.result), Step::Pending);
    }
    assert_eq!(a.io.queue.in_flight(), 0);
    // Its buffer went back to the pool.
    assert_eq!(a.engine.pool().available(), a.engine.pool().capacity());
}

#[test]
fn storage_errors_map_to_statuses() {
    let mut a = associate(target());
    let read = with_sgl(Read { nsid: 1, slba: 0, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    assert_eq!(a.io.queue.command(&mut a.engine, &read, &[]).unwrap(), Step::Pending);
    a.engine.submit().unwrap();
    let mut completions = Vec::new();
    a.engine.reap(|c| completions.push(c));
    let (_, slot) = split_storage_tag(completions[0].tag);
    let step = a.io.queue.io_completed(&mut a.engine, slot, Err(std::io::Error::from_raw_os_error(libc::EIO)));
    let Step::Respond { cqe, data, slot } = step else { panic!() };
    assert_eq!(cqe.status, Status::UNRECOVERED_READ_ERROR.with_dnr());
    assert_eq!(data, None);
    a.io.queue.release(&mut a.engine, slot);
    let smart = SmartLog::parse(
        &a.admin.log_page(&mut a.engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap()).ok().data,
    )
    .unwrap();
    assert_eq!(smart.media_errors, 1);
}

#[test]
fn transfers_larger_than_the_engine_buffers_fail_instead_of_waiting() {
    // MDTS 1 MiB but 64 KiB engine buffers: a 128 KiB read can never get a buffer.
    let params = TargetParams { mdts: 1 << 20, ..target_params() };
    let mut a = associate(Target::new(params, vec![subsystem_params()]).unwrap());
    a.engine = IoEngine::new(&EngineConfig {
        ring_entries: 32,
        buffer_size: 64 << 10,
        buffer_count: 2,
        small_buffer_size: 4096,
        small_buffer_count: 0,
        max_files: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 256).status(), Status::INVALID_FIELD.with_dnr());
    a.io.read(&mut a.engine, 1, 0, 128).ok();
}
