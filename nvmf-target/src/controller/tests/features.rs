//! Get/Set Features, and the Number of Queues grant.

use super::*;

#[test]
fn features() {
    let mut a = associate(target());
    let get =
        |host: &mut Host, engine: &mut IoEngine, feature: u8| host.run(engine, GetFeatures::new(feature).to_sqe());
    // Number of queues: the default grant is the target maximum (64).
    let noq = NumberOfQueues::from_dw0(get(&mut a.admin, &mut a.engine, fid::NUMBER_OF_QUEUES).ok().cqe.dw0);
    assert_eq!(noq.submission_queues(), 64);
    // Keep alive timer: set, read back rounded up to KAS (1 s).
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 1500 }).to_sqe()).ok();
    assert_eq!(done.cqe.dw0, 0);
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::KEEP_ALIVE_TIMER).ok().cqe.dw0, 2000);
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&KeepAliveTimer { kato_ms: 900_000 }).to_sqe());
    assert_eq!(done.status(), Status::KEEP_ALIVE_TIMEOUT_INVALID.with_dnr());
    // Asynchronous event configuration: namespace attribute notices on by default; unknown bits dropped.
    let aec = AsyncEventConfiguration::from_dword(
        get(&mut a.admin, &mut a.engine, fid::ASYNCHRONOUS_EVENT_CONFIGURATION).ok().cqe.dw0,
    )
    .unwrap();
    assert!(aec.namespace_attribute_notices);
    let mut sqe = SetFeatures::new(&AsyncEventConfiguration::default()).to_sqe();
    sqe.cdw11 = 0x0001_0100;
    a.admin.run(&mut a.engine, sqe).ok();
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::ASYNCHRONOUS_EVENT_CONFIGURATION).ok().cqe.dw0, 0x100);
    // No volatile cache on memory: WCE reads 0 and cannot be set.
    assert_eq!(get(&mut a.admin, &mut a.engine, fid::VOLATILE_WRITE_CACHE).ok().cqe.dw0, 0);
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&VolatileWriteCache { wce: true }).to_sqe());
    assert_eq!(done.status(), Status::INVALID_FIELD.with_dnr());
    // Host identifier: 16 bytes of data with EXHID; not settable over fabrics.
    let mut sqe = GetFeatures::new(fid::HOST_IDENTIFIER).to_sqe();
    sqe.cdw11 = 1;
    let done = a.admin.run(&mut a.engine, with_sgl(sqe, transport_data(16))).ok();
    assert_eq!(done.data, HOSTID);
    sqe.cdw11 = 0;
    let done = a.admin.run(&mut a.engine, with_sgl(sqe, transport_data(16)));
    assert_eq!(done.status(), Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT.with_dnr());
    let set = SetFeatures { fid: fid::HOST_IDENTIFIER, cdw11: 1, ..Default::default() };
    assert_eq!(a.admin.run(&mut a.engine, set.to_sqe()).status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    // Saving, unknown features, supported capabilities.
    let mut save = SetFeatures::new(&KeepAliveTimer { kato_ms: 1000 });
    save.sv = true;
    assert_eq!(a.admin.run(&mut a.engine, save.to_sqe()).status(), Status::FEATURE_NOT_SAVEABLE.with_dnr());
    assert_eq!(get(&mut a.admin, &mut a.engine, 0x55).status(), Status::INVALID_FIELD.with_dnr());
    let mut caps = GetFeatures::new(fid::KEEP_ALIVE_TIMER);
    caps.sel = nvmf_common::nvme::features::Select::SupportedCapabilities;
    assert_eq!(a.admin.run(&mut a.engine, caps.to_sqe()).ok().cqe.dw0, 0b100);
    // Abort never aborts.
    let abort = nvmf_common::nvme::admin::Abort { sqid: 1, cid: 5 };
    assert_eq!(a.admin.run(&mut a.engine, abort.to_sqe()).ok().cqe.dw0, 1);
}

#[test]
fn number_of_queues_grant_is_capped() {
    let mut a = associate(target());
    // I/O queues exist: the grant does not change.
    let asked = NumberOfQueues::with_counts(1000, 1000).unwrap();
    let done = a.admin.run(&mut a.engine, SetFeatures::new(&asked).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 64);
    let mut b = associate(target());
    drop(b.io);
    let mut fresh = Host::new(&b.target);
    let cntlid =
        ConnectResponse::from_dw0(fresh.connect(&mut b.engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok().cqe.dw0)
            .cntlid;
    fresh.enable(&mut b.engine);
    let done = fresh.run(&mut b.engine, SetFeatures::new(&asked).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 64);
    let two = NumberOfQueues::with_counts(2, 4).unwrap();
    let done = fresh.run(&mut b.engine, SetFeatures::new(&two).to_sqe()).ok();
    assert_eq!(NumberOfQueues::from_dw0(done.cqe.dw0).submission_queues(), 2);
    assert_eq!(
        Host::new(&b.target).connect(&mut b.engine, 3, 31, cntlid, SUBNQN, HOSTNQN).status(),
        Status::CONNECT_INVALID_PARAMETERS.with_dnr()
    );
}
