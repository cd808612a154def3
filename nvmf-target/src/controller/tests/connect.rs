//! Connect: admin and I/O queues, the data fetched through the transport, refusals, commands before
//! Connect and queue overrun.

use super::*;

#[test]
fn connect_admin_then_io_queues() {
    let mut a = associate(target());
    assert!(CNTLID_RANGE.contains(&a.cntlid));
    assert_eq!(a.admin.queue.qid(), Some(0));
    assert_eq!(a.admin.queue.sqsize(), 31);
    assert_eq!(a.io.queue.qid(), Some(1));
    assert_eq!(a.io.queue.sqsize(), 127);
    let controller = a.admin.queue.controller().unwrap();
    assert_eq!(controller.hostnqn(), HOSTNQN);
    assert_eq!(controller.hostid(), HOSTID);
    assert_eq!(controller.io_queue_count(), 1);
    // A second association gets another controller ID.
    let mut other = Host::new(&a.target);
    let done = other.connect(&mut a.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    assert_ne!(ConnectResponse::from_dw0(done.cqe.dw0).cntlid, a.cntlid);
    assert_eq!(done.cqe.sqid, 0);
}

#[test]
fn connect_data_fetched_through_the_transport() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    let connect = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) };
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: CNTLID_DYNAMIC,
        subnqn: Nqn::new(SUBNQN).unwrap(),
        hostnqn: Nqn::new(HOSTNQN).unwrap(),
    };
    let done = host.submit(&mut engine, connect.to_sqe().unwrap(), &[], &data.to_bytes()).unwrap().ok();
    assert!(CNTLID_RANGE.contains(&ConnectResponse::from_dw0(done.cqe.dw0).cntlid));
}

#[test]
fn a_second_connect_while_the_first_fetches_its_data_is_refused() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: CNTLID_DYNAMIC,
        subnqn: Nqn::new(SUBNQN).unwrap(),
        hostnqn: Nqn::new(HOSTNQN).unwrap(),
    }
    .to_bytes();
    // Connect A asks for its data (R2T); before it comes, Connect B arrives with its data in the capsule.
    let mut a = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) }.to_sqe().unwrap();
    a.cid = 1;
    let Step::FetchData { slot, buffer, .. } = host.queue.command(&mut engine, &a, &[]).unwrap() else {
        panic!("Connect A fetches its data")
    };
    let mut b = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: in_capsule(1024) }.to_sqe().unwrap();
    b.cid = 2;
    let Step::Respond { slot: b_slot, cqe, .. } = host.queue.command(&mut engine, &b, &data).unwrap() else {
        panic!("Connect B is answered at once")
    };
    assert_eq!((cqe.cid, cqe.status), (2, Status::COMMAND_SEQUENCE_ERROR.with_dnr()));
    host.queue.release(&mut engine, b_slot);
    // A's data: A connects the queue, once.
    engine.buffer_mut(buffer)[..1024].copy_from_slice(&data);
    let step = host.queue.data_received(&mut engine, slot).unwrap();
    let done = host.drive(&mut engine, step, &[]).unwrap().ok();
    assert_eq!(done.cqe.cid, 1);
    assert_eq!(target.subsystem(SUBNQN).unwrap().controllers().len(), 1, "one controller");
}

#[test]
fn connect_refusals() {
    let mut params = subsystem_params();
    params.allow_any_host = false;
    params.hosts = vec![HOSTNQN.to_owned()];
    let target = Target::new(target_params(), vec![params]).unwrap();
    let mut engine = engine();
    let data_ipo = |off| InvalidParameter::in_data(off).to_dw0();
    let sqe_ipo = |off| InvalidParameter::in_command(off).to_dw0();

    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr());
    assert_eq!(done.cqe.dw0, data_ipo(512));
    // The refusal took this host's log line for the interval: a peer connecting in a loop logs once per 10 s.
    assert_eq!(target.refused_connects().admit(OTHER_HOST, Instant::now()), None);

    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, "nqn.2024-01.io.nvmf-rs:nope", HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, data_ipo(256));

    // SQSIZE above MQES (128 entries).
    let done = Host::new(&target).connect(&mut engine, 0, 128, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, sqe_ipo(44));

    // Admin queue must ask for a dynamic controller.
    let done = Host::new(&target).connect(&mut engine, 0, 31, 5, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, data_ipo(16));

    // KATO above the target's limit.
    let done = Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 700_000);
    assert_eq!(done.cqe.dw0, sqe_ipo(48));

    // A Connect whose SGL is not 1024 bytes.
    let mut host = Host::new(&target);
    let mut sqe = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: in_capsule(1024) }.to_sqe().unwrap();
    sqe.set_sgl1(&in_capsule(512)).unwrap();
    let done = host.submit(&mut engine, sqe, &[0; 512], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());

    // In-capsule data shorter than the SGL says.
    let sqe = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: in_capsule(1024) }.to_sqe().unwrap();
    let done = host.submit(&mut engine, sqe, &[0; 100], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());

    // Nothing connected: the queue still awaits Connect.
    assert_eq!(host.queue.qid(), None);
}

#[test]
fn io_queue_connect_refusals() {
    let target = target();
    let mut engine = engine();
    let mut admin = Host::new(&target);
    let cntlid =
        ConnectResponse::from_dw0(admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;

    // Before CC.EN.
    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    admin.enable(&mut engine);

    // Grant 2 I/O queues.
    let noq = NumberOfQueues::with_counts(2, 2).unwrap();
    let done = admin.run(&mut engine, SetFeatures::new(&noq).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0), noq);

    let ipo = |p: InvalidParameter| p.to_dw0();
    let done = Host::new(&target).connect(&mut engine, 3, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_command(42)));

    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid + 1, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(16)));

    let done = Host::new(&target).connect(&mut engine, 1, 127, cntlid, SUBNQN, OTHER_HOST);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(16)));

    // Another host ID under the same host NQN answers as an unknown CNTLID does: no probing for controllers.
    let done = Host::new(&target).connect_with(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN, [9; 16], 0);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_data(16)));

    let done = Host::new(&target).connect(&mut engine, 1, 200, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, ipo(InvalidParameter::in_command(44)));

    let mut io = Host::new(&target);
    io.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN).ok();
    let done = Host::new(&target).connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());

    // Connect on a connected queue.
    let done = io.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
}

#[test]
fn commands_before_connect_are_sequence_errors() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    let seq = Status::COMMAND_SEQUENCE_ERROR.with_dnr();
    assert_eq!(host.identify(&mut engine, cns::CONTROLLER, 0).status(), seq);
    assert_eq!(host.read(&mut engine, 1, 0, 1).status(), seq);
    assert_eq!(host.property_get(&mut engine, 0, PropertySize::Eight).status(), seq);
    assert_eq!(host.run(&mut engine, KeepAlive.to_sqe()).status(), seq);
    // Still connectable afterwards.
    host.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
}

#[test]
fn queue_overrun_is_fatal() {
    let target = target();
    let mut engine = engine();
    let mut queue = Queue::new(Arc::clone(&target), TransportInfo::tcp(1, IN_CAPSULE, 99), Instant::now());
    let sqe = KeepAlive.to_sqe();
    // Responses never released: the slots stay busy.
    for _ in 0..4 {
        assert!(matches!(queue.command(&mut engine, &sqe, &[]), Ok(Step::Respond { .. })));
    }
    assert_eq!(queue.command(&mut engine, &sqe, &[]), Err(QueueError::QueueOverrun { capacity: 4 }));
}

#[test]
fn host_access_change_ends_the_associations_it_no_longer_allows() {
    let mut a = associate(target());
    let subsystem = a.target.subsystem(SUBNQN).unwrap();
    let mut out = Vec::new();
    // The host stays allowed: its association lives on.
    assert_eq!(subsystem.set_host_access(false, vec![HOSTNQN.to_owned()]).unwrap(), 0);
    a.io.queue.poll(&mut a.engine, Instant::now(), &mut out).unwrap();
    assert_eq!(subsystem.controllers().len(), 1);
    // Revoked: the association ends, its queues close, and the host cannot connect again.
    assert_eq!(subsystem.set_host_access(false, vec![OTHER_HOST.to_owned()]).unwrap(), 1);
    assert_eq!(
        a.io.queue.poll(&mut a.engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    assert!(subsystem.controllers().is_empty());
    let done = Host::new(&a.target).connect(&mut a.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr());
}

#[test]
fn a_queue_without_a_completed_connect_ends_at_its_connect_deadline() {
    let params = TargetParams { connect_timeout_ms: 500, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    let mut out = Vec::new();

    // Nothing arrives: the queue ends at the deadline, not before.
    let mut silent = Host::new(&target);
    let deadline = silent.queue.next_deadline().expect("a deadline before Connect");
    silent.queue.poll(&mut engine, deadline - Duration::from_millis(1), &mut out).unwrap();
    let timed_out = Err(QueueError::ConnectTimeout { timeout_ms: 500 });
    assert_eq!(silent.queue.poll(&mut engine, deadline, &mut out), timed_out);
    assert!(silent.queue.is_closed());

    // A Connect whose data the peer never sends: the buffer it took goes back to the pool when the queue ends.
    let free = engine.pool().available();
    let mut stalled = Host::new(&target);
    let connect = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 0, sgl1: transport_data(1024) };
    let step = stalled.queue.command(&mut engine, &connect.to_sqe().unwrap(), &[]).unwrap();
    assert!(matches!(step, Step::FetchData { .. }), "{step:?}");
    assert_eq!(engine.pool().available(), free - 1);
    let deadline = stalled.queue.next_deadline().unwrap();
    assert_eq!(stalled.queue.poll(&mut engine, deadline, &mut out), timed_out);
    assert_eq!(engine.pool().available(), free);
    assert_eq!(target.timeouts(Stalled::Connect), 2);

    // A Connect that completes in time clears the deadline (an admin queue with KATO 0 has no timer then).
    let mut admin = Host::new(&target);
    admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 0).ok();
    assert_eq!(admin.queue.next_deadline(), None);
    admin.queue.poll(&mut engine, deadline + Duration::from_secs(60), &mut out).unwrap();
    assert_eq!(target.timeouts(Stalled::Connect), 2);
}

#[test]
fn a_controller_lists_its_queues_and_ends_by_request() {
    let mut a = associate(target());
    a.io.write(&mut a.engine, 1, 0, &pattern(4096, 3)).ok();
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "AER is held");
    let controller = Arc::clone(a.admin.queue.controller().unwrap());
    let queues = controller.queues();
    let shape: Vec<_> = queues.iter().map(|q| (q.qid, q.depth, q.outstanding, q.counters.write_commands)).collect();
    assert_eq!(shape, [(0, 32, 1, 0), (1, 128, 0, 1)], "the held AER is the admin queue's one command");
    assert!(queues.iter().all(|q| q.trtype == TransportType::Tcp));

    let listing = crate::control::listing::listing(&a.target);
    let subsystem = listing.subsystems.iter().find(|s| s.nqn == SUBNQN).unwrap();
    let [c] = &subsystem.controllers[..] else { panic!("one controller: {subsystem:?}") };
    assert_eq!((c.cntlid, c.hostnqn.as_str(), c.queues.len(), c.bytes_written), (a.cntlid, HOSTNQN, 2, 4096));
    assert_eq!(listing.subsystems[0].subtype, "discovery", "the discovery subsystem is listed first");

    // Selecting nobody ends nothing; selecting the controller ends its association and its queues close.
    let by = |cntlid, hostnqn: Option<&str>| crate::control::protocol::DisconnectRequest {
        subnqn: None,
        cntlid,
        hostnqn: hostnqn.map(str::to_owned),
    };
    let none = crate::control::listing::disconnect(&a.target, &by(None, Some(OTHER_HOST))).unwrap_err();
    assert_eq!(none, format!("no live controller matches --host {OTHER_HOST}"));
    let ended = crate::control::listing::disconnect(&a.target, &by(Some(a.cntlid), None)).unwrap();
    assert_eq!(ended.len(), 1);
    assert!(controller.is_terminated());
    let mut out = Vec::new();
    assert!(a.io.queue.poll(&mut a.engine, Instant::now(), &mut out).is_err(), "the I/O queue closes");
    assert!(crate::control::listing::listing(&a.target).subsystems[1].controllers.is_empty());
}

#[test]
fn a_host_nqn_has_at_most_max_controllers_per_host_in_a_subsystem() {
    let params = TargetParams { max_controllers_per_host: 2, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    let mut first = Host::new(&target);
    first.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    let mut second = Host::new(&target);
    second.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    // Controller Busy without DNR: the host may retry once one of its controllers ended.
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_CONTROLLER_BUSY);
    assert_eq!(target.connect_limit_refusals(ConnectLimit::ControllersPerHost), 1);
    // Other hosts and other subsystems are not charged; an ended controller gives its place back.
    Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST).ok();
    Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN).ok();
    first.queue.disconnect(&mut engine);
    Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
}

#[test]
fn a_discovery_controller_keep_alive_timeout_has_its_own_ceiling() {
    let params = TargetParams { discovery_kato_max_ms: 30_000, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    let kato_ipo = InvalidParameter::in_command(nvmf_common::fabrics::connect::sqe_offset::KATO).to_dw0();
    let mut host = Host::new(&target);
    let done = host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 30_100);
    assert_eq!((done.status(), done.cqe.dw0), (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), kato_ipo));
    assert_eq!(target.connect_limit_refusals(ConnectLimit::DiscoveryKato), 1);
    // Up to the ceiling it is the host's; KATO 0 gets the ceiling. NVM subsystems keep kato_max_ms.
    let mut host = Host::new(&target);
    host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 30_000).ok();
    assert_eq!(host.queue.controller().unwrap().kato_ms(), 30_000);
    let mut host = Host::new(&target);
    host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 0).ok();
    assert_eq!(host.queue.controller().unwrap().kato_ms(), 30_000);
    let mut host = Host::new(&target);
    host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 300_000).ok();
}
