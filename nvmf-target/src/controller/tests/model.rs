//! The target's model: parameter validation, CNTLID allocation, subsystem removal, storage tags and the
//! types' thread bounds.

use super::*;

#[test]
fn model_validation() {
    let bad = |p: SubsystemParams| Target::new(target_params(), vec![p]).unwrap_err();
    assert!(matches!(bad(SubsystemParams::new("")), TargetError::Subsystem(SubsystemError::InvalidNqn { .. })));
    assert!(matches!(
        bad(SubsystemParams::new(DISCOVERY_NQN)),
        TargetError::Subsystem(SubsystemError::InvalidNqn { .. })
    ));
    let mut p = subsystem_params();
    p.namespaces.push(NamespaceParams::new(1, memory(4096, 512)));
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::DuplicateNsid { nsid: 1, .. })));
    let mut p = subsystem_params();
    p.namespaces = vec![NamespaceParams::new(0, memory(4096, 512))];
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidNsid { nsid: 0, .. })));
    let mut p = subsystem_params();
    p.cntlid_range = 10..=0xFFF5;
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidCntlidRange { .. })));
    let mut p = subsystem_params();
    p.serial = "x".repeat(21);
    assert!(matches!(bad(p), TargetError::Subsystem(SubsystemError::InvalidText { field: "serial", .. })));
    assert!(matches!(
        Target::new(target_params(), vec![subsystem_params(), subsystem_params()]).unwrap_err(),
        TargetError::DuplicateSubsystem(_)
    ));
    for params in [
        TargetParams { mdts: 3000, ..target_params() },
        TargetParams { max_queue_entries: 1, ..target_params() },
        TargetParams { max_io_queues: 0, ..target_params() },
    ] {
        assert!(matches!(Target::new(params, vec![]).unwrap_err(), TargetError::InvalidParameter { .. }));
    }
    let target = target();
    let subsystem = target.subsystem(SUBNQN).unwrap();
    assert!(matches!(subsystem.remove_namespace(9), Err(SubsystemError::UnknownNsid { nsid: 9, .. })));
    assert!(matches!(
        subsystem.add_namespace(NamespaceParams::new(1025, memory(4096, 512))),
        Err(SubsystemError::InvalidNsid { .. })
    ));
    assert!(matches!(target.remove_subsystem("nqn.2024-01.io.nvmf-rs:nope"), Err(TargetError::UnknownSubsystem(_))));
}

#[test]
fn cntlid_allocation_wraps_within_the_range() {
    let mut p = subsystem_params();
    p.cntlid_range = 7..=8;
    let target = Target::new(target_params(), vec![p]).unwrap();
    let mut engine = engine();
    let mut hosts: Vec<Host> = (0..2).map(|_| Host::new(&target)).collect();
    let ids: Vec<u16> = hosts
        .iter_mut()
        .map(|h| {
            ConnectResponse::from_dw0(h.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
                .cntlid
        })
        .collect();
    assert_eq!(ids, vec![7, 8]);
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_CONTROLLER_BUSY);
    hosts[0].queue.disconnect(&mut engine);
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    assert_eq!(ConnectResponse::from_dw0(done.cqe.dw0).cntlid, 7);
}

#[test]
fn removing_a_subsystem_ends_its_associations() {
    let mut a = associate(target());
    a.target.remove_subsystem(SUBNQN).unwrap();
    let mut out = Vec::new();
    let now = Instant::now();
    assert_eq!(
        a.admin.queue.poll(&mut a.engine, now, &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    assert_eq!(a.io.queue.poll(&mut a.engine, now, &mut out), Err(QueueError::AssociationEnded { cntlid: a.cntlid }));
}

#[test]
fn storage_tags_round_trip() {
    let tag = storage_tag(0xABCD, SlotId::new(0x1234));
    assert_eq!(split_storage_tag(tag), (0xABCD, SlotId::new(0x1234)));
    assert_eq!(SlotId::new(9).index(), 9);
}

#[test]
fn queues_and_controllers_cross_threads() {
    fn send<T: Send>() {}
    fn shared<T: Send + Sync>() {}
    send::<Queue>();
    shared::<Controller>();
    shared::<Target>();
    shared::<Subsystem>();
    send::<Step>();
}
