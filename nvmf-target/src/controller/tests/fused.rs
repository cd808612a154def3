//! The fused Compare and Write: both commands answered as the spec says for a match, a miscompare, a missing or
//! failed partner and mismatched ranges, whichever command's data comes first; storage that cannot do it
//! atomically refuses it.

use super::*;

const FUSE_FIRST: u8 = 1;
const FUSE_SECOND: u8 = 2;

/// One command to submit: its SQE, its in-capsule data, and the data a FetchData gets.
struct Command {
    sqe: SubmissionQueueEntry,
    in_capsule: Vec<u8>,
    fetched: Vec<u8>,
}

fn fused(mut sqe: SubmissionQueueEntry, fuse: u8, data: &[u8], capsule: bool) -> Command {
    let len = u32::try_from(data.len()).unwrap();
    sqe = with_sgl(sqe, if capsule { in_capsule(len) } else { transport_data(len) });
    sqe.flags |= fuse;
    let (in_capsule, fetched) = if capsule { (data.to_vec(), Vec::new()) } else { (Vec::new(), data.to_vec()) };
    Command { sqe, in_capsule, fetched }
}

fn compare(slba: u64, data: &[u8], capsule: bool) -> Command {
    let nlb = u16::try_from(data.len() / 512 - 1).unwrap();
    fused(Compare { nsid: 1, slba, nlb, ..Default::default() }.to_sqe(), FUSE_FIRST, data, capsule)
}

fn write(slba: u64, data: &[u8], capsule: bool) -> Command {
    let nlb = u16::try_from(data.len() / 512 - 1).unwrap();
    fused(Write { nsid: 1, slba, nlb, ..Default::default() }.to_sqe(), FUSE_SECOND, data, capsule)
}

/// Submit `commands` one after the other, then carry out every step (the host's data for the fetches in reverse
/// order when `late_first`), and return each command's status, in order.
fn run(host: &mut Host, engine: &mut IoEngine, commands: Vec<Command>, late_first: bool) -> Vec<Status> {
    let mut cids = Vec::new();
    let mut steps = Vec::new();
    for c in &commands {
        let mut sqe = c.sqe;
        sqe.cid = host.next_cid;
        host.next_cid += 1;
        cids.push(sqe.cid);
        steps.push(host.queue.command(engine, &sqe, &c.in_capsule).unwrap());
    }
    if late_first {
        steps.reverse();
    }
    let mut statuses: Vec<Option<Status>> = vec![None; commands.len()];
    for _ in 0..1000 {
        let mut next = Vec::new();
        for step in steps.drain(..) {
            match step {
                Step::FetchData { slot, cid, buffer, len } => {
                    let i = cids.iter().position(|&c| c == cid).unwrap();
                    engine.buffer_mut(buffer)[..len as usize].copy_from_slice(&commands[i].fetched);
                    next.push(host.queue.data_received(engine, slot).unwrap());
                }
                Step::Respond { slot, cqe, .. } => {
                    let i = cids.iter().position(|&c| c == cqe.cid).unwrap();
                    assert!(statuses[i].replace(cqe.status).is_none(), "answered twice");
                    host.queue.release(engine, slot);
                }
                Step::Pending => {}
            }
        }
        if statuses.iter().all(Option::is_some) {
            return statuses.into_iter().flatten().collect();
        }
        engine.submit().unwrap();
        let mut completions = Vec::new();
        engine.reap(|c| completions.push(c));
        for c in completions {
            let (_, slot) = split_storage_tag(c.tag);
            next.push(host.queue.io_completed(engine, slot, c.result));
        }
        if host.queue.wants_poll() {
            host.queue.poll(engine, Instant::now(), &mut next).unwrap();
        }
        steps = next;
    }
    panic!("commands never completed: {statuses:?}");
}

fn read_command(slba: u64) -> Command {
    let sqe = with_sgl(Read { nsid: 1, slba, nlb: 0, ..Default::default() }.to_sqe(), transport_data(512));
    Command { sqe, in_capsule: Vec::new(), fetched: Vec::new() }
}

fn read_back(a: &mut Association, slba: u64, blocks: u32) -> Vec<u8> {
    a.io.read(&mut a.engine, 1, slba, blocks).ok().data
}

#[test]
fn a_match_writes_and_a_miscompare_does_not() {
    let mut a = associate(target());
    let (old, new, other) = (pattern(1024, 1), pattern(1024, 2), pattern(1024, 3));
    a.io.write(&mut a.engine, 1, 10, &old).ok();
    for capsule in [true, false] {
        a.io.write(&mut a.engine, 1, 10, &old).ok();
        let done = run(&mut a.io, &mut a.engine, vec![compare(10, &old, capsule), write(10, &new, capsule)], false);
        assert_eq!(done, [Status::SUCCESS, Status::SUCCESS]);
        assert_eq!(read_back(&mut a, 10, 2), new);
        // The blocks now hold `new`: comparing with `old` fails and writes nothing.
        let done = run(&mut a.io, &mut a.engine, vec![compare(10, &old, capsule), write(10, &other, capsule)], false);
        assert_eq!(done, [Status::COMPARE_FAILURE.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr()]);
        assert_eq!(read_back(&mut a, 10, 2), new);
    }
}

#[test]
fn either_command_s_data_may_come_first() {
    let mut a = associate(target());
    let (old, new) = (pattern(2048, 4), pattern(2048, 5));
    a.io.write(&mut a.engine, 1, 64, &old).ok();
    let done = run(&mut a.io, &mut a.engine, vec![compare(64, &old, false), write(64, &new, false)], true);
    assert_eq!(done, [Status::SUCCESS, Status::SUCCESS]);
    assert_eq!(read_back(&mut a, 64, 4), new);
    // Compare data in the capsule, write data fetched (and the other way round).
    let done = run(&mut a.io, &mut a.engine, vec![compare(64, &new, true), write(64, &old, false)], true);
    assert_eq!(done, [Status::SUCCESS, Status::SUCCESS]);
    let done = run(&mut a.io, &mut a.engine, vec![compare(64, &old, false), write(64, &new, true)], false);
    assert_eq!(done, [Status::SUCCESS, Status::SUCCESS]);
    assert_eq!(read_back(&mut a, 64, 4), new);
}

#[test]
fn a_missing_partner_aborts_the_other_command() {
    let mut a = associate(target());
    let data = pattern(512, 6);
    // A first followed by another command: Missing Fused; the other command runs.
    for capsule in [true, false] {
        let done = run(&mut a.io, &mut a.engine, vec![compare(0, &data, capsule), read_command(0)], false);
        assert_eq!(done, [Status::ABORTED_MISSING_FUSED.with_dnr(), Status::SUCCESS]);
    }
    // A second with no first before it.
    let done = run(&mut a.io, &mut a.engine, vec![write(0, &data, true)], false);
    assert_eq!(done, [Status::ABORTED_MISSING_FUSED.with_dnr()]);
    // Two firsts: the first one is missing its second; the other pairs with the write.
    let zeros = read_back(&mut a, 0, 1);
    let done = run(
        &mut a.io,
        &mut a.engine,
        vec![compare(0, &data, true), compare(0, &zeros, true), write(0, &data, true)],
        false,
    );
    assert_eq!(done, [Status::ABORTED_MISSING_FUSED.with_dnr(), Status::SUCCESS, Status::SUCCESS]);
    assert_eq!(read_back(&mut a, 0, 1), data);
}

#[test]
fn a_failed_command_aborts_its_partner() {
    let mut a = associate(target());
    let data = pattern(1024, 7);
    a.io.write(&mut a.engine, 1, 20, &data).ok();
    // The first refused (a Read is no first command): its second is aborted.
    let mut first = read_command(20);
    first.sqe.flags |= FUSE_FIRST;
    let done = run(&mut a.io, &mut a.engine, vec![first, write(20, &pattern(512, 8), true)], false);
    assert_eq!(done, [Status::INVALID_FIELD.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr()]);
    // The second beyond the namespace: it fails, and aborts its first.
    let last = NS_SIZE / u64::from(BLOCK);
    let done = run(&mut a.io, &mut a.engine, vec![compare(20, &data, false), write(last, &data, true)], false);
    assert_eq!(done, [Status::ABORTED_FAILED_FUSED.with_dnr(), Status::LBA_OUT_OF_RANGE.with_dnr()]);
    // Two ranges: both Invalid Field.
    let done = run(&mut a.io, &mut a.engine, vec![compare(20, &data, true), write(21, &data, true)], false);
    assert_eq!(done, [Status::INVALID_FIELD.with_dnr(), Status::INVALID_FIELD.with_dnr()]);
    assert_eq!(read_back(&mut a, 20, 2), data);
    // Reserved FUSE value.
    let mut reserved = compare(20, &data, true);
    reserved.sqe.flags |= 3;
    assert_eq!(run(&mut a.io, &mut a.engine, vec![reserved], false), [Status::INVALID_FIELD.with_dnr()]);
    // Admin commands are never fused.
    let mut identify = with_sgl(Identify::new(cns::CONTROLLER, 0).to_sqe(), transport_data(4096));
    identify.flags |= FUSE_FIRST;
    assert_eq!(a.admin.run(&mut a.engine, identify).status(), Status::INVALID_FIELD.with_dnr());
}

fn fuses_and_acwu(a: &mut Association) -> (u16, u16) {
    let data = a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok().data;
    let id = IdentifyController::parse(&data).unwrap();
    (id.fuses, id.acwu)
}

#[test]
fn the_controller_advertises_it_where_storage_does_it_atomically() {
    let mut a = associate(target());
    assert_eq!(fuses_and_acwu(&mut a), (IdentifyController::FUSES_COMPARE_AND_WRITE, 0));

    // A file: another writer could come between the compare and the write.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let storage = Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap());
    let params = SubsystemParams { namespaces: vec![NamespaceParams::new(1, storage)], ..subsystem_params() };
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());
    assert_eq!(fuses_and_acwu(&mut a).0, 0);
    let zeros = vec![0u8; 512];
    let done = run(&mut a.io, &mut a.engine, vec![compare(0, &zeros, true), write(0, &zeros, true)], false);
    assert_eq!(done, [Status::INVALID_FIELD.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr()]);
}

#[test]
fn null_storage_compares_with_zeros() {
    let null = Arc::new(Storage::open(&StorageSpec::Null { size: NS_SIZE, block_size: BLOCK }).unwrap());
    let params = SubsystemParams { namespaces: vec![NamespaceParams::new(1, null)], ..subsystem_params() };
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());
    let (zeros, data) = (vec![0u8; 512], pattern(512, 9));
    let done = run(&mut a.io, &mut a.engine, vec![compare(5, &zeros, true), write(5, &data, true)], false);
    assert_eq!(done, [Status::SUCCESS, Status::SUCCESS]);
    let done = run(&mut a.io, &mut a.engine, vec![compare(5, &data, true), write(5, &data, true)], false);
    assert_eq!(done, [Status::COMPARE_FAILURE.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr()]);
}
