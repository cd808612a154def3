//! An idle target sleeps: with an association connected (admin queue with a KATO, two I/O queues, across both
//! reactors) and nothing to do, its reactors wake for nothing — no periodic tick — and the keep-alive deadline
//! itself still wakes one in time to end a silent association. Its own test binary: it counts the context
//! switches of this process's `nvmf-reactor-*` threads, which another test's target would add to.

mod target_support;

use std::time::{Duration, Instant};

use nvmf_common::nvme::admin::KeepAlive;
use target_support::{
    connect_admin, connect_io, enable, expect_closed, memory_config, ok, options, read, Target, SUBNQN,
};

/// Context switches (voluntary or not) of this process's reactor threads so far: one per wake-up of a sleeping
/// reactor, at least.
fn reactor_switches() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("a task entry").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("nvmf-reactor") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

#[test]
fn idle_reactors_sleep_until_a_keep_alive_deadline() {
    let t = Target::start(&memory_config(""));
    let kato = Duration::from_secs(3);
    let (mut admin, cntlid) = connect_admin(t.addr, SUBNQN, options(), 3000);
    enable(&mut admin);
    let mut io = [1, 2].map(|qid| connect_io(t.addr, SUBNQN, options(), cntlid, qid).expect("I/O queue"));
    for q in &mut io {
        ok(Ok(read(q, 1, 512, 0, 512)));
    }
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
    let last_command = Instant::now();

    // A second of silence, well inside the KATO: nothing is due, so nothing wakes the reactors (a 50 ms tick on
    // each made about 40 wake-ups here).
    let before = reactor_switches();
    std::thread::sleep(Duration::from_secs(1));
    let woke = reactor_switches() - before;
    assert!(woke <= 4, "{woke} reactor wake-ups in a second with nothing to do");

    // The keep-alive deadline still wakes the admin queue's reactor: the silent association ends after the
    // KATO (not before), and its I/O queues with it.
    expect_closed(&mut admin, Duration::from_secs(10));
    let after = last_command.elapsed();
    assert!(after >= kato, "the association ended {after:?} after its last command, within the {kato:?} KATO");
    for q in &mut io {
        expect_closed(q, Duration::from_secs(5));
    }
}
