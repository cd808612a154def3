//! Asymmetric Namespace Access: I/O refused on a listener whose state for the namespace's group serves none.

use nvmf_common::nvme::log_page::AnaState;

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
    let mut admin = Host {
        queue: Queue::new(Arc::clone(target), TransportInfo::tcp(port_id, IN_CAPSULE, admin_key)),
        key: admin_key,
        next_cid: 1,
    };
    let w = Arc::clone(wakes);
    admin.queue.set_event_notifier(Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    let done = admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let io_key = key(());
    let mut io = Host {
        queue: Queue::new(Arc::clone(target), TransportInfo::tcp(port_id, IN_CAPSULE, io_key)),
        key: io_key,
        next_cid: 1,
    };
    io.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    Association { target: Arc::clone(target), engine, admin, io, cntlid }
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
