//! Property Get/Set: CAP, VS, CC and CSTS, enabling, shutdown (with the flush of file storage) and
//! controller reset.

use super::*;

#[test]
fn properties_and_enable() {
    let target = target();
    let mut engine = engine();
    let mut host = Host::new(&target);
    host.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();

    let cap = Capabilities::from_u64(host.property_get(&mut engine, 0x00, PropertySize::Eight).ok().cqe.result64());
    assert_eq!(cap.mqes, 127);
    assert!(cap.cqr);
    assert_eq!(cap.css & Capabilities::CSS_NVM, Capabilities::CSS_NVM);
    assert_eq!(cap.mpsmin, 0);
    assert!(cap.to > 0);
    let vs = host.property_get(&mut engine, 0x08, PropertySize::Four).ok();
    assert_eq!(Version::from_u32(vs.cqe.dw0), Version::V1_3);
    // CAP read with the wrong width, an unknown offset, writing a read-only property.
    let invalid = Status::INVALID_FIELD.with_dnr();
    assert_eq!(host.property_get(&mut engine, 0x00, PropertySize::Four).status(), invalid);
    assert_eq!(host.property_get(&mut engine, 0x40, PropertySize::Four).status(), invalid);
    assert_eq!(host.property_set(&mut engine, 0x1C, 1).status(), invalid);

    // Identify before CC.EN.
    assert_eq!(host.identify(&mut engine, cns::CONTROLLER, 0).status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());

    // A bad configuration (IOSQES 7) sets CSTS.CFS, not RDY.
    let bad = ControllerConfiguration { en: true, iosqes: 7, iocqes: 4, ..Default::default() };
    host.property_set(&mut engine, 0x14, bad.to_u32().into()).ok();
    let csts = ControllerStatus::from_u32(host.property_get(&mut engine, 0x1C, PropertySize::Four).cqe.dw0).unwrap();
    assert!(csts.cfs && !csts.rdy);
    host.property_set(&mut engine, 0x14, 0).ok();

    host.enable(&mut engine);
    let cc = host.property_get(&mut engine, 0x14, PropertySize::Four).ok().cqe.dw0;
    assert!(ControllerConfiguration::from_u32(cc).unwrap().en);
    let csts = ControllerStatus::from_u32(host.property_get(&mut engine, 0x1C, PropertySize::Four).cqe.dw0).unwrap();
    assert!(csts.rdy && !csts.cfs);
    host.identify(&mut engine, cns::CONTROLLER, 0).ok();
}

#[test]
fn shutdown_sets_shst_complete() {
    let mut a = associate(target());
    let cc = ControllerConfiguration {
        en: true,
        iosqes: 6,
        iocqes: 4,
        shn: ShutdownNotification::Normal,
        ..Default::default()
    };
    a.admin.property_set(&mut a.engine, 0x14, cc.to_u32().into()).ok();
    let csts = a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(ControllerStatus::from_u32(csts.cqe.dw0).unwrap().shst, ShutdownStatus::Complete);
}

#[test]
fn shutdown_flushes_file_storage_through_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns1");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let storage = Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap());
    assert!(storage.volatile_write_cache());
    let mut params = subsystem_params();
    params.namespaces = vec![NamespaceParams::new(1, storage)];
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());
    // VWC is reported and a write then a flush of all namespaces go through the ring.
    let id = IdentifyController::parse(&a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok().data).unwrap().vwc;
    assert_eq!(id, IdentifyController::VWC_PRESENT | IdentifyController::VWC_FLUSH_BROADCAST_SUPPORTED);
    let data = pattern(4096, 3);
    a.io.write(&mut a.engine, 1, 8, &data).ok();
    a.io.run(&mut a.engine, Flush { nsid: 0xFFFF_FFFF }.to_sqe()).ok();
    assert_eq!(a.io.read(&mut a.engine, 1, 8, 8).ok().data, data);
    let cc = ControllerConfiguration {
        en: true,
        iosqes: 6,
        iocqes: 4,
        shn: ShutdownNotification::Normal,
        ..Default::default()
    };
    a.admin.property_set(&mut a.engine, 0x14, cc.to_u32().into()).ok();
    let csts = a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).ok();
    assert_eq!(ControllerStatus::from_u32(csts.cqe.dw0).unwrap().shst, ShutdownStatus::Complete);
}

#[test]
fn controller_reset_ends_io_queues_and_allows_reconnect() {
    let mut a = associate(target());
    a.admin.property_set(&mut a.engine, 0x14, 0).ok();
    let csts = ControllerStatus::from_u32(a.admin.property_get(&mut a.engine, 0x1C, PropertySize::Four).cqe.dw0);
    assert!(!csts.unwrap().rdy);
    let mut out = Vec::new();
    assert_eq!(
        a.io.queue.poll(&mut a.engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { cntlid: a.cntlid })
    );
    assert!(a.io.queue.is_closed());
    a.admin.enable(&mut a.engine);
    let mut io = Host::new(&a.target);
    io.connect(&mut a.engine, 1, 127, a.cntlid, SUBNQN, HOSTNQN).ok();
    io.read(&mut a.engine, 1, 0, 1).ok();
}
