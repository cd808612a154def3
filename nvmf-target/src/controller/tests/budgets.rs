//! Buffer budgets: a queue holds at most its share of the pool, and peers not admitted to an NVM subsystem
//! (before Connect, discovery controllers) at most theirs together, so stalled transfers cannot starve a host.

use super::*;
use crate::backend::BudgetLimit;

/// A raw command on `host`'s queue: the step the queue answers with, not driven any further.
fn start(host: &mut Host, engine: &mut IoEngine, sqe: SubmissionQueueEntry) -> Step {
    let mut sqe = sqe;
    sqe.cid = host.next_cid;
    host.next_cid += 1;
    host.queue.command(engine, &sqe, &[]).expect("command accepted")
}

fn connect_by_r2t() -> SubmissionQueueEntry {
    Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) }.to_sqe().unwrap()
}

#[test]
fn connects_whose_data_never_comes_hold_at_most_the_anonymous_share() {
    let target = target();
    let mut engine = engine_with(16);
    let mut stalled: Vec<Host> = (0..50).map(|_| Host::new(&target)).collect();
    let (mut fetching, mut refused) = (0, 0);
    for peer in &mut stalled {
        for _ in 0..4 {
            match start(peer, &mut engine, connect_by_r2t()) {
                Step::FetchData { .. } => fetching += 1,
                Step::Respond { cqe, .. } if cqe.status == Status::COMMAND_SEQUENCE_ERROR.with_dnr() => refused += 1,
                _ => {}
            }
        }
    }
    // 25 % of 16 buffers: four peers got one each; every other first Connect waits without a buffer, and a peer's
    // 2nd..4th Connect is refused at once (one Connect per queue), holding nothing.
    assert_eq!(fetching, 4);
    assert_eq!(refused, 50 * 3);
    assert_eq!(engine.pool().available(), 12);
    assert_eq!(target.budget_waits(BudgetLimit::Queue), 0);
    assert_eq!(target.budget_waits(BudgetLimit::Anonymous), 46);

    // A host that sends its Connect in the capsule is admitted and has the rest of the pool.
    let mut admin = Host::new(&target);
    let done = admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    io.connect(&mut engine, 1, 127, ConnectResponse::from_dw0(done.cqe.dw0).cntlid, SUBNQN, HOSTNQN).ok();
    let data = pattern(64 << 10, 3);
    for i in 0..8 {
        assert_eq!(io.write(&mut engine, 1, i * 128, &data).status(), Status::SUCCESS);
        assert_eq!(io.read(&mut engine, 1, i * 128, 128).ok().data, data);
    }

    // The stalled peers time out; their buffers go back.
    let late = Instant::now() + Duration::from_secs(3600);
    for peer in &mut stalled {
        assert!(peer.queue.poll(&mut engine, late, &mut Vec::new()).is_err());
    }
    assert_eq!(engine.pool().available(), 16);
}

#[test]
fn a_queue_holds_at_most_its_share_and_waits_for_its_own_buffers() {
    let Association { target, mut engine, mut io, .. } = associate(target());
    // Writes whose data never comes: half the pool (8 of 16), then they wait.
    let write = Write { nsid: 1, slba: 0, nlb: 7, ..Default::default() };
    let mut fetches = Vec::new();
    for _ in 0..12 {
        match start(&mut io, &mut engine, with_sgl(write.to_sqe(), transport_data(4096))) {
            Step::FetchData { slot, buffer, len, .. } => fetches.push((slot, buffer, len)),
            step => assert_eq!(step, Step::Pending),
        }
    }
    assert_eq!(fetches.len(), 8);
    assert_eq!(engine.pool().available(), 8);
    assert_eq!(target.budget_waits(BudgetLimit::Queue), 4);

    // Another host's queue still gets buffers.
    let mut other = Host::new(&target);
    other.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST).ok();
    other.enable(&mut engine);
    assert_eq!(other.identify(&mut engine, cns::CONTROLLER, 0).status(), Status::SUCCESS);

    // The first writes' data arrives: their buffers go back to this queue, whose waiting writes go on.
    for (slot, buffer, len) in fetches {
        engine.buffer_mut(buffer)[..len as usize].fill(9);
        let step = io.queue.data_received(&mut engine, slot).unwrap();
        let done = io.drive(&mut engine, step, &[]).unwrap();
        assert_eq!(done.status(), Status::SUCCESS);
    }
    let mut out = Vec::new();
    io.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(out.iter().all(|s| matches!(s, Step::FetchData { .. })));
    assert_eq!(target.budget_waits(BudgetLimit::Queue), 4, "a waiting command is counted once");
}

#[test]
fn discovery_log_reads_never_drained_hold_at_most_the_anonymous_share() {
    let target = target();
    let mut engine = engine_with(16);
    let mut held = 0;
    for _ in 0..8 {
        let mut peer = Host::new(&target);
        peer.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 0).ok();
        let glp = GetLogPage::new(lid::DISCOVERY, 0, 128 << 10).unwrap();
        for _ in 0..4 {
            // Responses never released: a peer that reads none of them.
            if matches!(
                start(&mut peer, &mut engine, with_sgl(glp.to_sqe(), transport_data(128 << 10))),
                Step::Respond { data: Some(_), .. }
            ) {
                held += 1;
            }
        }
    }
    // One buffer per discovery controller, four (25 % of 16) in all: four peers get one each.
    assert_eq!(held, 4);
    assert_eq!(engine.pool().available(), 12);
    assert_eq!(target.budget_waits(BudgetLimit::Queue), 4 * 3);
    assert_eq!(target.budget_waits(BudgetLimit::Anonymous), 4 * 4);
}
