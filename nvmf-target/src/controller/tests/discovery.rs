//! The discovery controller and its Discovery Log Page.

use super::*;

#[test]
fn discovery_controller() {
    let mut hidden = SubsystemParams::new("nqn.2024-01.io.nvmf-rs:hidden");
    hidden.allow_any_host = false;
    hidden.hosts = vec![OTHER_HOST.to_owned()];
    let target = Target::new(target_params(), vec![subsystem_params(), hidden]).unwrap();
    let mut engine = engine();
    let mut host = Host::new(&target);
    host.queue = Queue::new(
        Arc::clone(&target),
        TransportInfo {
            local_address: Some("192.0.2.7".parse().unwrap()),
            ..TransportInfo::tcp(1, IN_CAPSULE, host.key)
        },
        Instant::now(),
    );
    let done = host.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN, HOSTID, 0).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    // KATO 0 on a discovery controller becomes nvmet's 120 s: a vanished host's controller is reclaimed.
    assert_eq!(host.queue.controller().unwrap().kato_ms(), DISCOVERY_KATO_MS);
    assert!(host.queue.keep_alive_deadline().is_some());
    // Discovery controllers answer before CC.EN (as Linux nvmet does).
    let data = host.identify(&mut engine, cns::CONTROLLER, 0).ok().data;
    let id = IdentifyController::parse(&data).unwrap();
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_DISCOVERY);
    assert_eq!(id.subnqn, DISCOVERY_NQN);
    assert_eq!(id.nn, 0);
    assert_eq!(host.identify(&mut engine, cns::NAMESPACE, 1).status(), Status::INVALID_FIELD.with_dnr());
    host.enable(&mut engine);

    // The header alone, then the whole page.
    let header = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&header).unwrap();
    assert_eq!(page.header.numrec, 2, "current discovery subsystem + the one visible subsystem");
    let genctr = page.header.genctr;
    let full = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 3072).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&full).unwrap();
    assert!(page.is_complete());
    let entries: Vec<_> = page.entries().map(Result::unwrap).collect();
    assert_eq!(entries[0].subtype, SubsystemType::CurrentDiscovery);
    assert_eq!(entries[0].subnqn, DISCOVERY_NQN);
    assert_eq!(entries[1].subtype, SubsystemType::Nvm);
    assert_eq!(entries[1].subnqn, SUBNQN);
    assert_eq!(entries[1].traddr, "192.0.2.7", "wildcard replaced by the local address");
    assert_eq!(entries[1].trsvcid, "4420");
    assert_eq!(entries[1].trtype, TransportType::Tcp);
    assert_eq!(entries[1].portid, 1);
    assert_eq!(entries[1].cntlid, CNTLID_DYNAMIC);
    // Paged: the second entry alone, at offset 2048.
    let mut glp = GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap();
    glp.lpo = 2048;
    assert_eq!(host.log_page(&mut engine, glp).ok().data, full[2048..]);

    // An AER is held, then completed when a subsystem is added; GENCTR moves.
    assert!(host.submit(&mut engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none());
    target.add_subsystem(SubsystemParams::new("nqn.2024-01.io.nvmf-rs:new")).unwrap();
    let mut out = Vec::new();
    host.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    let [Step::Respond { cqe, .. }] = out[..] else { panic!("{out:?}") };
    assert_eq!(cqe.dw0, AsyncEvent::DISCOVERY_LOG_PAGE_CHANGE.to_dw0());
    let header = host.log_page(&mut engine, GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap()).ok().data;
    let page = DiscoveryLogPage::parse(&header).unwrap();
    assert!(page.header.genctr > genctr);
    assert_eq!(page.header.numrec, 3);
    assert_eq!(header.len(), HEADER_SIZE);

    // No I/O queues on a discovery controller; no I/O log pages.
    let done = Host::new(&target).connect(&mut engine, 1, 31, cntlid, DISCOVERY_NQN, HOSTNQN);
    assert_eq!(done.cqe.dw0, InvalidParameter::in_command(42).to_dw0());
    let done = host.log_page(&mut engine, GetLogPage::new(lid::SMART_HEALTH_INFORMATION, 0, 512).unwrap());
    assert_eq!(done.status(), Status::INVALID_LOG_PAGE.with_dnr());
    // Keep alive is served.
    host.run(&mut engine, KeepAlive.to_sqe()).ok();
}

#[test]
fn discovery_can_be_disabled() {
    let params = TargetParams { discovery_enabled: false, ..target_params() };
    let target = Target::new(params, vec![subsystem_params()]).unwrap();
    let mut engine = engine();
    let done = Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_PARAMETERS.with_dnr());
}
