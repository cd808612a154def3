//! Asymmetric Namespace Access: I/O refused on a listener whose state for the namespace's group serves none, the
//! Identify fields, the ANA log (per listener, RGO, offset window, change counts) and the ANA Change event
//! (only for controllers on the changed listener, masked until the log is read without RAE).

use nvmf_common::nvme::log_page::{AnaLog, AnaState, ANA_RGO};

use super::*;
use crate::controller::ana::{AnaGroups, ANAGRPMAX};

/// Namespace 1 in group 1, namespace 2 in group 2.
fn two_group_target() -> Arc<Target> {
    let mut ns2 = NamespaceParams::new(2, memory(NS_SIZE, BLOCK));
    ns2.ana_group = 2;
    let mut subsystem = subsystem_params();
    subsystem.namespaces.push(ns2);
    Target::new(target_params(), vec![subsystem]).unwrap()
}

/// An association whose queues connected through listener `port_id`, its admin queue with a notifier counting
/// wake-ups.
fn associate_on(target: &Arc<Target>, port_id: u16, wakes: &Arc<AtomicUsize>) -> Association {
    let mut engine = engine();
    let key = |_: ()| u64::try_from(NEXT_KEY.fetch_add(1, Ordering::Relaxed)).unwrap();
    let admin_key = key(());
    let mut admin = Host::on(target, TransportInfo::tcp(port_id, IN_CAPSULE, admin_key));
    let w = Arc::clone(wakes);
    admin.queue.set_event_notifier(Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    let done = admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let io_key = key(());
    let mut io = Host::on(target, TransportInfo::tcp(port_id, IN_CAPSULE, io_key));
    io.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    Association { target: Arc::clone(target), engine, admin, io, cntlid }
}

fn ana_log(a: &mut Association, rgo: bool, rae: bool) -> AnaLog {
    let mut glp = GetLogPage::new(lid::ASYMMETRIC_NAMESPACE_ACCESS, 0, 4096).unwrap();
    glp.lsp = if rgo { ANA_RGO } else { 0 };
    glp.rae = rae;
    AnaLog::parse(&a.admin.log_page(&mut a.engine, glp).ok().data).unwrap()
}

fn flush(a: &mut Association, nsid: u32) -> Status {
    a.io.run(&mut a.engine, Flush { nsid }.to_sqe()).status()
}

#[test]
fn io_follows_the_listeners_ana_state_of_the_namespaces_group() {
    let target = two_group_target();
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut a = associate_on(&target, 1, &wakes);
    let mut b = associate_on(&target, 2, &wakes);
    let data = pattern(4096, 3);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    a.io.write(&mut a.engine, 2, 0, &data).ok();

    // Group 1 inaccessible on listener 1: namespace 1's I/O there fails, retryable on another path.
    assert!(target.set_ana_state(1, AnaGroups::One(1), AnaState::Inaccessible).unwrap());
    let status = a.io.write(&mut a.engine, 1, 0, &data).status();
    assert_eq!(status, Status::ANA_INACCESSIBLE);
    assert!(!status.dnr(), "another path may serve it");
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 8).status(), Status::ANA_INACCESSIBLE);
    assert_eq!(flush(&mut a, 1), Status::ANA_INACCESSIBLE);
    // Namespace 2 (group 2) on listener 1, and namespace 1 on listener 2, still serve.
    a.io.write(&mut a.engine, 2, 8, &data).ok();
    assert_eq!(b.io.read(&mut b.engine, 1, 0, 8).ok().data, data);
    // Flush of every namespace names no namespace: not refused.
    assert!(flush(&mut a, 0xFFFF_FFFF).is_success());

    for (state, status) in
        [(AnaState::PersistentLoss, Status::ANA_PERSISTENT_LOSS), (AnaState::Change, Status::ANA_TRANSITION)]
    {
        target.set_ana_state(1, AnaGroups::All, state).unwrap();
        assert_eq!(a.io.read(&mut a.engine, 1, 0, 8).status(), status);
        assert_eq!(a.io.read(&mut a.engine, 2, 0, 8).status(), status);
    }
    // Non-optimized serves I/O.
    target.set_ana_state(1, AnaGroups::All, AnaState::NonOptimized).unwrap();
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 8).ok().data, data);
    assert_eq!(a.io.read(&mut a.engine, 2, 8, 8).ok().data, data);
    // Admin commands are not path-checked.
    target.set_ana_state(1, AnaGroups::All, AnaState::Inaccessible).unwrap();
    a.admin.identify(&mut a.engine, cns::NAMESPACE, 1).ok();

    assert_eq!(
        target.set_ana_state(1, AnaGroups::One(ANAGRPMAX + 1), AnaState::Optimized),
        Err(TargetError::InvalidAnaGroup(ANAGRPMAX + 1))
    );
    assert_eq!(target.set_ana_state(1, AnaGroups::All, AnaState::Inaccessible), Ok(false), "no change");
}

#[test]
fn namespace_groups_are_validated() {
    for group in [0, ANAGRPMAX + 1] {
        let mut subsystem = subsystem_params();
        subsystem.namespaces[0].ana_group = group;
        assert!(matches!(
            Target::new(target_params(), vec![subsystem]),
            Err(TargetError::Subsystem(SubsystemError::InvalidAnaGroup { nsid: 1, group: g, .. })) if g == group
        ));
        let target = target();
        let mut ns = NamespaceParams::new(2, memory(NS_SIZE, BLOCK));
        ns.ana_group = group;
        let subsystem = target.subsystem(SUBNQN).unwrap();
        assert!(matches!(subsystem.add_namespace(ns), Err(SubsystemError::InvalidAnaGroup { .. })));
        assert_eq!(subsystem.namespaces().len(), 1);
    }
    let mut ns = NamespaceParams::new(2, memory(NS_SIZE, BLOCK));
    ns.ana_group = ANAGRPMAX;
    target().subsystem(SUBNQN).unwrap().add_namespace(ns).unwrap();
}

#[test]
fn listeners_start_in_their_configured_state() {
    let params =
        TargetParams { ana_states: vec![(2, vec![(AnaGroups::All, AnaState::NonOptimized)])], ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut a = associate_on(&target, 2, &wakes);
    let log = ana_log(&mut a, false, false);
    assert_eq!(log.groups[0].state, AnaState::NonOptimized);
    a.io.read(&mut a.engine, 1, 0, 8).ok();
    let mut b = associate_on(&target, 1, &wakes);
    assert_eq!(ana_log(&mut b, false, false).groups[0].state, AnaState::Optimized);
}

#[test]
fn listeners_start_with_groups_of_their_own() {
    use AnaState::*;
    // A gateway group on one target's two listeners: port 1 optimized for group 1, port 2 for group 2.
    let ana_states = vec![
        (1, vec![(AnaGroups::All, Optimized), (AnaGroups::One(2), NonOptimized)]),
        (2, vec![(AnaGroups::All, NonOptimized), (AnaGroups::One(2), Optimized)]),
    ];
    let mut ns2 = NamespaceParams::new(2, memory(NS_SIZE, BLOCK));
    ns2.ana_group = 2;
    let mut subsystem = subsystem_params();
    subsystem.namespaces.push(ns2);
    let target = Target::new(TargetParams { ana_states, ..target_params() }, vec![subsystem]).unwrap();
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut a = associate_on(&target, 1, &wakes);
    let mut b = associate_on(&target, 2, &wakes);
    for (association, expected) in
        [(&mut a, [(1, Optimized), (2, NonOptimized)]), (&mut b, [(1, NonOptimized), (2, Optimized)])]
    {
        let log = ana_log(association, false, false);
        let groups: Vec<_> = log.groups.iter().map(|g| (g.grpid, g.state, g.nsids.clone())).collect();
        assert_eq!(groups, [(expected[0].0, expected[0].1, vec![1]), (expected[1].0, expected[1].1, vec![2])]);
        // Both states serve I/O.
        for nsid in [1, 2] {
            association.io.read(&mut association.engine, nsid, 0, 8).ok();
        }
    }
    // Every group not named has the listener's state.
    assert_eq!((target.ana().port(1).get(128), target.ana().port(2).get(128)), (Optimized, NonOptimized));
    // Identify Namespace names each namespace's group.
    for (nsid, group) in [(1, 1), (2, 2)] {
        let ns = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, nsid).ok().data).unwrap();
        assert_eq!(ns.anagrpid, group);
    }
    // A group of its own out of range is refused at start and when set.
    let bad =
        TargetParams { ana_states: vec![(1, vec![(AnaGroups::One(ANAGRPMAX + 1), Optimized)])], ..target_params() };
    assert!(matches!(Target::new(bad, vec![subsystem_params()]), Err(TargetError::InvalidAnaGroup(129))));
    assert_eq!(
        target.set_ana_states(1, &[(AnaGroups::All, Inaccessible), (AnaGroups::One(0), Optimized)]),
        Err(TargetError::InvalidAnaGroup(0))
    );
    assert_eq!(target.ana().port(1).get(1), Optimized, "nothing changed");
    // Several changes are one: both groups flip on port 1 with one ANA Change event.
    let chgcnt = target.ana().chgcnt();
    let changes = [(AnaGroups::One(1), NonOptimized), (AnaGroups::One(2), Optimized)];
    assert_eq!(target.set_ana_states(1, &changes), Ok(true));
    assert_eq!(target.ana().chgcnt(), chgcnt + 1);
    assert_eq!(target.set_ana_states(1, &changes), Ok(false), "no change");
    let states: Vec<_> = ana_log(&mut a, false, false).groups.iter().map(|g| g.state).collect();
    assert_eq!(states, [NonOptimized, Optimized]);
}

#[test]
fn identify_reports_ana() {
    let target = two_group_target();
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut a = associate_on(&target, 1, &wakes);
    let page = a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok().data;
    let id = IdentifyController::parse(&page).unwrap();
    assert_eq!(id.cmic, 0b1011, "multi-port, multi-controller, ANA reporting");
    assert_eq!((id.anatt, id.anacap, id.anagrpmax, id.nanagrpid), (10, 0x1F, 128, 128));
    assert_ne!(id.oaes & IdentifyController::OAES_ANA_CHANGE_NOTICES, 0);
    assert_eq!(id.mnan, 1024);
    for (nsid, group) in [(1, 1), (2, 2)] {
        let ns = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, nsid).ok().data).unwrap();
        assert_eq!(ns.anagrpid, group);
        assert_eq!(ns.nmic & IdentifyNamespace::NMIC_SHARED, IdentifyNamespace::NMIC_SHARED);
    }
    // ANA Change notices are enabled by default and may be set.
    let aec = a.admin.run(&mut a.engine, GetFeatures::new(fid::ASYNCHRONOUS_EVENT_CONFIGURATION).to_sqe()).ok();
    assert_ne!(aec.cqe.dw0 & (1 << 11), 0);
}

#[test]
fn ana_log_is_the_listeners_view() {
    let target = two_group_target();
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut a = associate_on(&target, 1, &wakes);
    let mut b = associate_on(&target, 2, &wakes);
    let log = ana_log(&mut a, false, false);
    assert_eq!(log.chgcnt, 0);
    let summary: Vec<_> = log.groups.iter().map(|g| (g.grpid, g.state, g.nsids.clone(), g.chgcnt)).collect();
    assert_eq!(summary, vec![(1, AnaState::Optimized, vec![1], 0), (2, AnaState::Optimized, vec![2], 0)]);

    target.set_ana_state(1, AnaGroups::One(2), AnaState::Inaccessible).unwrap();
    target.set_ana_state(2, AnaGroups::All, AnaState::NonOptimized).unwrap();
    let log = ana_log(&mut a, false, false);
    assert_eq!(log.chgcnt, 2);
    let summary: Vec<_> = log.groups.iter().map(|g| (g.grpid, g.state, g.chgcnt)).collect();
    assert_eq!(summary, vec![(1, AnaState::Optimized, 1), (2, AnaState::Inaccessible, 2)]);
    let log = ana_log(&mut b, false, false);
    let states: Vec<_> = log.groups.iter().map(|g| g.state).collect();
    assert_eq!(states, vec![AnaState::NonOptimized, AnaState::NonOptimized]);

    // Return Groups Only: the same groups, no NSIDs.
    let rgo = ana_log(&mut a, true, false);
    assert_eq!(rgo.groups.len(), 2);
    assert!(rgo.groups.iter().all(|g| g.nsids.is_empty()));

    // An offset reads the rest of the page (the first descriptor starts at 16); past the page is an error.
    let full = AnaLog::to_bytes(&ana_log(&mut a, false, false), false);
    let mut glp = GetLogPage::new(lid::ASYMMETRIC_NAMESPACE_ACCESS, 0, 16).unwrap();
    glp.lpo = 16;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).ok().data, full[16..32]);
    glp.lpo = 4096;
    assert_eq!(a.admin.log_page(&mut a.engine, glp).status(), Status::INVALID_FIELD.with_dnr());

    // Without namespaces in group 1 it is still listed (the default group), empty.
    let subsystem = target.subsystem(SUBNQN).unwrap();
    subsystem.remove_namespace(1).unwrap();
    let log = ana_log(&mut a, false, false);
    let groups: Vec<_> = log.groups.iter().map(|g| (g.grpid, g.nsids.clone())).collect();
    assert_eq!(groups, vec![(1, vec![]), (2, vec![2])]);
}

#[test]
fn ana_change_event_for_the_listeners_controllers_masked_until_the_log_is_read() {
    let target = two_group_target();
    let (wakes_a, wakes_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut a = associate_on(&target, 1, &wakes_a);
    let mut b = associate_on(&target, 2, &wakes_b);
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "AER held");
    assert!(b.admin.submit(&mut b.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "AER held");

    target.set_ana_state(1, AnaGroups::One(1), AnaState::Inaccessible).unwrap();
    assert_eq!((wakes_a.load(Ordering::Relaxed), wakes_b.load(Ordering::Relaxed)), (1, 0), "listener 1 only");
    let mut out = Vec::new();
    a.admin.queue.poll(&mut a.engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { slot, cqe, data: None }] = out[..] else { panic!("AER not completed: {out:?}") };
    a.admin.queue.release(&mut a.engine, slot);
    assert_eq!(cqe.dw0, AsyncEvent::ANA_CHANGE.to_dw0());
    assert_eq!(cqe.dw0, 0x000c_0302, "notice, ANA change, log 0Ch");

    // Masked: another change raises nothing until the log is read without RAE.
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    target.set_ana_state(1, AnaGroups::One(1), AnaState::Change).unwrap();
    assert_eq!(wakes_a.load(Ordering::Relaxed), 1);
    assert_eq!(ana_log(&mut a, false, true).groups[0].state, AnaState::Change);
    target.set_ana_state(1, AnaGroups::One(1), AnaState::NonOptimized).unwrap();
    assert_eq!(wakes_a.load(Ordering::Relaxed), 1, "RAE kept the mask");
    assert_eq!(ana_log(&mut a, true, false).groups[0].state, AnaState::NonOptimized);
    target.set_ana_state(1, AnaGroups::One(1), AnaState::Optimized).unwrap();
    assert_eq!(wakes_a.load(Ordering::Relaxed), 2);
    out.clear();
    a.admin.queue.poll(&mut a.engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { cqe, .. }] = out[..] else { panic!("AER not completed: {out:?}") };
    assert_eq!(cqe.dw0, AsyncEvent::ANA_CHANGE.to_dw0());

    // Disabled by Asynchronous Event Configuration: nothing.
    let aec = AsyncEventConfiguration { namespace_attribute_notices: true, ..Default::default() };
    b.admin.run(&mut b.engine, SetFeatures::new(&aec).to_sqe()).ok();
    target.set_ana_state(2, AnaGroups::All, AnaState::Inaccessible).unwrap();
    assert_eq!(wakes_b.load(Ordering::Relaxed), 0);
}
