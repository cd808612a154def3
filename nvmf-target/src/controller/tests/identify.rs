//! Identify: the controller (over TCP and RDMA), namespaces, the active namespace list and the
//! namespace identification descriptors.

use super::*;

#[test]
fn identify_controller_fields() {
    let mut a = associate(target());
    let done = a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok();
    let id = IdentifyController::parse(&done.data).unwrap();
    assert_eq!(id.cntlid, a.cntlid);
    assert_eq!(id.sn, "SN123");
    assert_eq!(id.mn, "nvmf-rs test");
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.ver, Version::V1_3.to_u32());
    assert_eq!(id.mdts, 5); // 128 KiB = 2^5 × 4 KiB
    assert_eq!(id.ioccsz, (64 + IN_CAPSULE) / 16);
    assert_eq!(id.iorcsz, 1);
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.msdbd, 1);
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_IO);
    assert_eq!(id.nn, 1024);
    assert_eq!(id.maxcmd, 128);
    assert!(id.kas > 0);
    assert!(id.namespace_attribute_notices());
    assert_eq!(id.aerl, 3);
    assert_eq!(id.sqes, 0x66);
    assert_eq!(id.cqes, 0x44);
    assert!(id.oncs_has(
        IdentifyController::ONCS_COMPARE
            | IdentifyController::ONCS_DATASET_MANAGEMENT
            | IdentifyController::ONCS_WRITE_ZEROES
    ));
    // Memory has no volatile cache.
    assert!(!id.vwc_present());
    assert_eq!(id.sgl_support(), IdentifyController::SGLS_SUPPORTED_BYTE_ALIGNED);
    assert_ne!(id.sgls & IdentifyController::SGLS_ADDRESS_AS_OFFSET, 0);
    assert_ne!(id.sgls & IdentifyController::SGLS_TRANSPORT_DATA_BLOCK, 0);
    assert_eq!(id.sgls & IdentifyController::SGLS_KEYED_DATA_BLOCK, 0);
    assert_ne!(id.ctratt & IdentifyController::CTRATT_HOST_ID_128, 0);
    assert_ne!(id.ctratt & IdentifyController::CTRATT_TBKAS, 0, "Traffic Based Keep Alive");
    assert!(!id.fr.is_empty());
}

#[test]
fn identify_controller_over_rdma_reports_keyed_sgls() {
    let target = target();
    let admin = Queue::new(
        Arc::clone(&target),
        TransportInfo {
            trtype: TransportType::Rdma,
            in_capsule_data_size: 4096,
            port_id: 1,
            local_address: None,
            peer_address: None,
            queue_key: 5,
            secure_channel: None,
        },
        Instant::now(),
    );
    let controller = Controller::new(
        1,
        target.subsystem(SUBNQN).unwrap(),
        HOSTNQN,
        HOSTID,
        0,
        &TargetParams { max_io_queues: 4, ..TargetParams::default() },
        true,
    );
    let ctx = admin::AdminContext {
        target: &target,
        controller: &controller,
        transport: admin.transport(),
        table: &target.subsystem(SUBNQN).unwrap().namespaces(),
    };
    let id = admin::identify_controller(&ctx);
    assert_ne!(id.sgls & IdentifyController::SGLS_KEYED_DATA_BLOCK, 0);
    assert_eq!(id.sgls & IdentifyController::SGLS_TRANSPORT_DATA_BLOCK, 0);
    assert_eq!(id.ioccsz, (64 + 4096) / 16);
}

#[test]
fn identify_namespaces() {
    let mut params = subsystem_params();
    let mut eui = NamespaceParams::new(3, memory(1 << 16, 4096));
    eui.eui64 = Some([1, 2, 3, 4, 5, 6, 7, 8]);
    params.namespaces.push(eui);
    let mut a = associate(Target::new(target_params(), vec![params]).unwrap());

    let ns = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, 1).ok().data).unwrap();
    assert_eq!(ns.nsze, NS_SIZE / u64::from(BLOCK));
    assert_eq!(ns.ncap, ns.nsze);
    assert_eq!(ns.nlbaf, 0);
    assert_eq!(ns.flbas, 0);
    assert_eq!(ns.lba_data_size().unwrap(), BLOCK);
    assert_eq!(ns.dlfeat & 0x7, 0b001, "memory reads zeros after deallocate");
    assert_ne!(ns.nguid, [0; 16]);
    let ns3 = IdentifyNamespace::parse(&a.admin.identify(&mut a.engine, cns::NAMESPACE, 3).ok().data).unwrap();
    assert_eq!(ns3.lba_data_size().unwrap(), 4096);
    assert_eq!(ns3.nsze, 16);
    assert_eq!(ns3.eui64, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_ne!(ns3.nguid, ns.nguid);

    // Inactive NSID in range: zeros. NSID 0, broadcast, beyond NN: Invalid Namespace.
    assert!(a.admin.identify(&mut a.engine, cns::NAMESPACE, 2).ok().data.iter().all(|&b| b == 0));
    let invalid_ns = Status::INVALID_NAMESPACE.with_dnr();
    for nsid in [0, 0xFFFF_FFFF, 1025] {
        assert_eq!(a.admin.identify(&mut a.engine, cns::NAMESPACE, nsid).status(), invalid_ns, "nsid {nsid:#x}");
    }

    let list = a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 0).ok().data;
    assert_eq!(ActiveNamespaceIdList::parse(&list).unwrap().iter().collect::<Vec<_>>(), vec![1, 3]);
    let list = a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 1).ok().data;
    assert_eq!(ActiveNamespaceIdList::parse(&list).unwrap().iter().collect::<Vec<_>>(), vec![3]);
    assert_eq!(a.admin.identify(&mut a.engine, cns::ACTIVE_NAMESPACE_ID_LIST, 0xFFFF_FFFE).status(), invalid_ns);

    let descs = a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 3).ok().data;
    let descs: Vec<_> = NamespaceIdentificationDescriptor::parse_list(&descs).unwrap().iter().collect();
    assert_eq!(descs[0], NamespaceIdentificationDescriptor::Eui64([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(descs[1], NamespaceIdentificationDescriptor::Nguid(ns3.nguid));
    assert!(matches!(descs[2], NamespaceIdentificationDescriptor::Uuid(_)));
    assert_eq!(descs[3], NamespaceIdentificationDescriptor::Csi(0));
    let descs = a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 1).ok().data;
    assert_eq!(NamespaceIdentificationDescriptor::parse_list(&descs).unwrap().iter().count(), 3, "no EUI-64");
    assert_eq!(a.admin.identify(&mut a.engine, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 2).status(), invalid_ns);

    // I/O Command Set specific Identify Controller: NVM (CSI 0) reports no limits beyond MDTS (all zero); other
    // command sets are not served.
    let nvm = a.admin.identify(&mut a.engine, cns::IO_COMMAND_SET_CONTROLLER, 0).ok().data;
    assert_eq!(nvm.len(), 4096);
    assert!(nvm.iter().all(|&b| b == 0));
    let zoned =
        Identify { csi: nvmf_common::nvme::identify::csi::ZONED, ..Identify::new(cns::IO_COMMAND_SET_CONTROLLER, 0) };
    let sqe = with_sgl(zoned.to_sqe(), transport_data(4096));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());

    // Unsupported CNS; Identify with in-capsule data (controller to host) or a short SGL.
    assert_eq!(a.admin.identify(&mut a.engine, 0x10, 0).status(), Status::INVALID_FIELD.with_dnr());
    let sqe = with_sgl(Identify::new(cns::CONTROLLER, 0).to_sqe(), in_capsule(0));
    assert_eq!(a.admin.run(&mut a.engine, sqe).status(), Status::INVALID_FIELD.with_dnr());
    let sqe = with_sgl(Identify::new(cns::CONTROLLER, 0).to_sqe(), transport_data(1024));
    let done = a.admin.run(&mut a.engine, sqe).ok();
    assert_eq!(done.data.len(), 1024);

    // Identifiers are stable: a second target built the same way derives the same NGUID.
    let again = Target::new(target_params(), vec![subsystem_params()]).unwrap();
    assert_eq!(again.subsystem(SUBNQN).unwrap().namespaces().get(1).unwrap().nguid(), ns.nguid);
}
