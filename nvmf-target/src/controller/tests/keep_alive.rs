//! Keep Alive: expiry (on a fake clock), KATO 0, the target's minimum KATO, and the end of an association with its
//! admin queue.

use super::*;

#[test]
fn keep_alive_expiry_with_a_fake_clock() {
    let target = target();
    let mut engine = engine();
    // The reactor's turn time is the clock commands arrive by: this test moves the engine's clock itself.
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    engine.clock_mut().start_turn(at(0));
    let mut admin = Host::new(&target);
    admin.real_clock = false;
    let done = admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 2000).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(&target);
    io.real_clock = false;
    io.connect(&mut engine, 1, 31, cntlid, SUBNQN, HOSTNQN).ok();
    let mut out = Vec::new();
    // The timer runs from the last admin command, the reactor polls the queue by its deadline.
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(2000)));
    admin.queue.poll(&mut engine, at(1500), &mut out).unwrap();
    // A Keep Alive restarts the timer.
    engine.clock_mut().start_turn(at(1600));
    admin.run(&mut engine, KeepAlive.to_sqe()).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(3600)));
    admin.queue.poll(&mut engine, at(3500), &mut out).unwrap();
    // Any admin command counts too.
    engine.clock_mut().start_turn(at(3500));
    admin.property_get(&mut engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(5500)));
    admin.queue.poll(&mut engine, at(5499), &mut out).unwrap();
    // Traffic Based Keep Alive: an I/O command restarts the timer too; the queue publishes its commands'
    // arrival at most every TRAFFIC_GRANULARITY, so the timer runs from that much later.
    engine.clock_mut().start_turn(at(5400));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(7500)));
    admin.queue.poll(&mut engine, at(5500), &mut out).unwrap();
    // Within the granularity the queue does not publish again; after it, it does.
    engine.clock_mut().start_turn(at(5450));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(7500)));
    engine.clock_mut().start_turn(at(6000));
    io.read(&mut engine, 1, 0, 1).ok();
    assert_eq!(admin.queue.keep_alive_deadline(), Some(at(8100)));
    admin.queue.poll(&mut engine, at(8099), &mut out).unwrap();
    let controller = Arc::clone(admin.queue.controller().unwrap());
    assert_eq!(
        admin.queue.poll(&mut engine, at(8100), &mut out),
        Err(QueueError::KeepAliveExpired { cntlid, kato_ms: 2000 })
    );
    assert!(admin.queue.is_closed());
    assert!(target.subsystem(SUBNQN).unwrap().controller(cntlid).is_none());
    assert!(admin.queue.controller().is_none(), "a dead queue has no association");
    assert!(controller.is_terminated());
    assert!(controller.csts().cfs, "CSTS.CFS set on expiry");
    assert_eq!(controller.lock().errors[0].status, Status::KEEP_ALIVE_TIMER_EXPIRED);
    // The I/O queue of the association ends too.
    assert_eq!(io.queue.poll(&mut engine, at(8100), &mut out), Err(QueueError::AssociationEnded { cntlid }));
    // A dead queue refuses commands.
    assert_eq!(admin.queue.command(&mut engine, &KeepAlive.to_sqe(), &[]), Err(QueueError::Closed));
}

#[test]
fn kato_zero_never_expires() {
    let target = target();
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 0).ok();
    let t0 = Instant::now();
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, t0, &mut out).unwrap();
    admin.queue.poll(&mut engine, t0 + Duration::from_secs(3600), &mut out).unwrap();
    assert_eq!(admin.queue.keep_alive_deadline(), None);
}

#[test]
fn a_kato_below_the_minimum_is_raised_and_kato_zero_refused() {
    let params = TargetParams { kato_min_ms: 5000, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    // KATO 0 would leave a vanished host's controller forever: refused, pointing at KATO.
    let done = Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 0);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, InvalidParameter::in_command(48).to_dw0());
    // A shorter KATO runs at the minimum.
    let mut admin = Host::new(&target);
    admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 1000).ok();
    assert_eq!(admin.queue.controller().unwrap().kato_ms(), 5000);
    admin.enable(&mut engine);
    // So does Set Features; KATO 0 there is refused too and leaves the timer as it was.
    admin.run(&mut engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 2000 }).to_sqe()).ok();
    assert_eq!(admin.queue.controller().unwrap().kato_ms(), 5000);
    let done = admin.run(&mut engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 0 }).to_sqe());
    assert_eq!(done.status(), Status::KEEP_ALIVE_TIMEOUT_INVALID.with_dnr());
    assert_eq!(admin.queue.controller().unwrap().kato_ms(), 5000);
    admin.run(&mut engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 8000 }).to_sqe()).ok();
    assert_eq!(admin.queue.controller().unwrap().kato_ms(), 8000);
    assert_eq!(target.kato_minimum(KatoMinimum::Refused), 2);
    assert_eq!(target.kato_minimum(KatoMinimum::Raised), 2);
    // Discovery keeps its own keep-alive for KATO 0 (`nvme discover`), as without a minimum.
    let mut discovery = Host::new(&target);
    discovery.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 0).ok();
    assert_eq!(discovery.queue.controller().unwrap().kato_ms(), DISCOVERY_KATO_MS);
}

#[test]
fn admin_disconnect_ends_the_association() {
    let mut a = associate(target());
    a.admin.queue.disconnect(&mut a.engine);
    a.admin.queue.disconnect(&mut a.engine);
    let mut out = Vec::new();
    assert_eq!(
        a.io.queue.poll(&mut a.engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    // The controller ID is free again and the subsystem forgot the controller.
    assert!(a.target.subsystem(SUBNQN).unwrap().controllers().is_empty());
}
