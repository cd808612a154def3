//! The target over 127.0.0.1 driven by the blocking NVMe/TCP test host: every admin, fabrics and I/O command the
//! target serves, discovery, asynchronous events, keep-alive expiry and digests. Invalid input is in
//! `target_errors.rs`, durability across `kill -9` in `target_durability.rs`.
//!
//! Each scenario runs on both of the reactors' socket paths (`[reactors] socket_io`): `epoll::NAME` and
//! `io_uring::NAME` (`target_support::on_each_socket_path!`).

mod target_support;

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::fabrics::discovery::{
    DiscoveryLogHeader, DiscoveryLogPage, SubsystemType, TransportType, HEADER_SIZE,
};
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::fabrics::property::{Capabilities, ControllerConfiguration, Property, Version};
use nvmf_common::nvme::admin::{Abort, AbortResult, AsyncEvent, AsyncEventRequest, KeepAlive};
use nvmf_common::nvme::features::{
    fid, AsyncEventConfiguration, Feature, GetFeatures, HostIdentifier, KeepAliveTimer, NumberOfQueues, SetFeatures,
    VolatileWriteCache,
};
use nvmf_common::nvme::identify::{
    cns, ActiveNamespaceIdList, IdentifyController, IdentifyNamespace, NamespaceIdentificationDescriptor,
};
use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, WriteZeroes, NSID_ALL};
use nvmf_common::nvme::log_page::{
    lid, ChangedNamespaceList, ChangedNamespaces, CommandsSupportedAndEffects, ErrorInformationEntry, SmartLog,
};
use nvmf_common::nvme::opcode::{admin as admin_op, io as io_op};
use nvmf_common::nvme::{SglDescriptor, SglSubtype, Status};
use nvmf_common::transport::tcp::{CapsuleCommand, FatalErrorStatus, H2cData, Pdu, R2t};
use nvmf_target::backend::{Storage, StorageSpec};
use nvmf_target::controller::NamespaceParams;
use nvmf_tests::nvme_tcp_client::{ClientOptions, TcpTestClient, TEST_HOSTID};
use target_support::*;

target_support::on_each_socket_path!(
    admin_connect_properties_enable_and_shutdown,
    identify_controller_namespaces_and_descriptors,
    identifiers_survive_a_restart,
    log_pages_error_smart_effects_with_offsets,
    features_get_and_set,
    keep_alive_and_abort,
    async_event_completes_when_a_namespace_is_added,
    read_write_in_capsule_and_r2t_from_512_bytes_to_1_mib,
    a_queue_moves_at_connect_to_the_reactor_on_the_cpu_its_packets_arrive_on,
    fused_compare_and_write_is_atomic_between_hosts,
    flush_write_zeroes_deallocate_and_compare,
    discovery_lists_the_subsystem_at_our_address,
    keep_alive_expiry_closes_the_association,
    digests_guard_headers_and_data,
    disconnect_ends_an_io_queue,
);

fn admin_connect_properties_enable_and_shutdown(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, cntlid) = connect_admin(t.addr, SUBNQN, options(), 0);
    let path = match io {
        SocketIoMode::Epoll => "epoll",
        SocketIoMode::IoUring => "io_uring",
    };
    assert_eq!(t.running().tcp_socket_paths(), [Some(path); 2], "the reactors' socket path");
    assert!((1..=0xFFEF).contains(&cntlid), "cntlid {cntlid}");

    let cap = Capabilities::from_u64(property(&mut admin, Property::Cap));
    assert_eq!(cap.mqes, 127, "CAP.MQES is the configured 128 entries, 0's based");
    assert_ne!(cap.css & Capabilities::CSS_NVM, 0, "CAP.CSS NVM");
    assert!(cap.to > 0, "CAP.TO");
    assert_eq!(Version::from_u32(u32::try_from(property(&mut admin, Property::Vs)).unwrap()), Version::V1_3);
    assert_eq!(property(&mut admin, Property::Cc), 0, "CC before enable");
    assert_eq!(property(&mut admin, Property::Csts) & 1, 0, "CSTS.RDY before enable");

    // Admin commands before CC.EN are a sequence error.
    assert_status(&identify(&mut admin, cns::CONTROLLER, 0), Status::COMMAND_SEQUENCE_ERROR);

    enable(&mut admin);
    let cc = ControllerConfiguration::from_u32(u32::try_from(property(&mut admin, Property::Cc)).unwrap()).unwrap();
    assert!(cc.en && cc.iosqes == 6 && cc.iocqes == 4, "CC reads back as written: {cc:?}");
    assert_status(&identify(&mut admin, cns::CONTROLLER, 0), Status::SUCCESS);

    let csts = shutdown_controller(&mut admin);
    assert!(!csts.cfs, "no fatal status after a normal shutdown");
}

fn identify_controller_namespaces_and_descriptors(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, cntlid) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut admin);

    let c = identify(&mut admin, cns::CONTROLLER, 0);
    assert_status(&c, Status::SUCCESS);
    let id = IdentifyController::parse(&c.data).unwrap();
    assert_eq!(id.ioccsz, (64 + 16 * 1024) / 16, "IOCCSZ: SQE + the default 16 KiB in-capsule data");
    assert_eq!(id.iorcsz, 1, "IORCSZ: a bare CQE");
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.msdbd, 1);
    assert_eq!(id.sgl_support(), IdentifyController::SGLS_SUPPORTED_BYTE_ALIGNED);
    assert_ne!(id.sgls & IdentifyController::SGLS_TRANSPORT_DATA_BLOCK, 0, "SGLS: transport data block");
    assert_ne!(id.sgls & IdentifyController::SGLS_ADDRESS_AS_OFFSET, 0, "SGLS: in-capsule offsets");
    assert_eq!(id.sgls & IdentifyController::SGLS_KEYED_DATA_BLOCK, 0, "no keyed SGLs over TCP");
    assert!(id.mdts != 0 && (4096u64 << id.mdts) >= 1 << 20, "MDTS {} is at least 1 MiB", id.mdts);
    for bit in [
        IdentifyController::ONCS_COMPARE,
        IdentifyController::ONCS_DATASET_MANAGEMENT,
        IdentifyController::ONCS_WRITE_ZEROES,
    ] {
        assert!(id.oncs_has(bit), "ONCS {:#x} lacks {bit:#x}", id.oncs);
    }
    assert!(!id.vwc_present(), "memory namespaces have no volatile write cache");
    assert_eq!(id.nn, 1024, "NN: the default max_namespaces");
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.cntlid, cntlid);
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_IO);
    assert!(id.namespace_attribute_notices(), "OAES namespace attribute notices");
    assert_eq!(id.kas, 1, "KAS = [target] keep_alive_granularity_ms / 100 (default 100 ms)");

    // CNS 0: namespace 1 is 4 MiB of 512-byte blocks, namespace 2 8 MiB of 4 KiB blocks.
    for (nsid, blocks, lbads) in [(1, NS1_BLOCKS, 9), (2, 2048, 12)] {
        let c = identify(&mut admin, cns::NAMESPACE, nsid);
        assert_status(&c, Status::SUCCESS);
        let ns = IdentifyNamespace::parse(&c.data).unwrap();
        assert_eq!((ns.nsze, ns.ncap), (blocks, blocks), "nsid {nsid}");
        assert_eq!(ns.lbaf[ns.format_index()].lbads, lbads, "nsid {nsid}");
        let want = t.config.subsystems[0].namespaces[usize::try_from(nsid - 1).unwrap()].nguid;
        assert_eq!(&ns.nguid, want.as_bytes(), "NGUID as configured/derived");
    }
    // An inactive NSID in range: a zeroed structure; out of range: Invalid Namespace.
    let c = identify(&mut admin, cns::NAMESPACE, 7);
    assert_status(&c, Status::SUCCESS);
    assert!(c.data.iter().all(|&b| b == 0));
    assert_status(&identify(&mut admin, cns::NAMESPACE, 1025), Status::INVALID_NAMESPACE);

    // CNS 2: active NSIDs above the given one.
    let c = identify(&mut admin, cns::ACTIVE_NAMESPACE_ID_LIST, 0);
    assert_status(&c, Status::SUCCESS);
    let list: Vec<u32> = ActiveNamespaceIdList::parse(&c.data).unwrap().iter().collect();
    assert_eq!(list, [1, 2]);
    let c = identify(&mut admin, cns::ACTIVE_NAMESPACE_ID_LIST, 1);
    assert_eq!(ActiveNamespaceIdList::parse(&c.data).unwrap().iter().collect::<Vec<_>>(), [2]);

    // CNS 3: NGUID and UUID as the configuration derives them (stable across restarts: see
    // `identifiers_survive_a_restart`).
    let ids = descriptors(&mut admin, 1);
    let ns = &t.config.subsystems[0].namespaces[0];
    assert_eq!(ids.nguid, *ns.nguid.as_bytes());
    assert_eq!(ids.uuid, *ns.uuid.as_bytes());
    assert_status(&identify(&mut admin, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 9), Status::INVALID_NAMESPACE);
    assert_status(&identify(&mut admin, 0x7f, 0), Status::INVALID_FIELD);
}

#[derive(Debug, PartialEq, Eq)]
struct NamespaceIds {
    nguid: [u8; 16],
    uuid: [u8; 16],
}

fn descriptors(admin: &mut TcpTestClient, nsid: u32) -> NamespaceIds {
    let c = identify(admin, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, nsid);
    assert_status(&c, Status::SUCCESS);
    let mut ids = NamespaceIds { nguid: [0; 16], uuid: [0; 16] };
    for d in NamespaceIdentificationDescriptor::parse_list(&c.data).unwrap().iter() {
        match d {
            NamespaceIdentificationDescriptor::Nguid(n) => ids.nguid = n,
            NamespaceIdentificationDescriptor::Uuid(u) => ids.uuid = u,
            _ => {}
        }
    }
    assert_ne!(ids.nguid, [0; 16], "an NGUID descriptor");
    assert_ne!(ids.uuid, [0; 16], "a UUID descriptor");
    ids
}

fn identifiers_survive_a_restart(io: SocketIoMode) {
    let config = memory_config("");
    let first = {
        let t = Target::start_on(&config, io);
        let (mut admin, _) = connect_admin(t.addr, SUBNQN, options(), 0);
        enable(&mut admin);
        [descriptors(&mut admin, 1), descriptors(&mut admin, 2)]
    };
    let t = Target::start_on(&config, io);
    let (mut admin, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut admin);
    assert_eq!([descriptors(&mut admin, 1), descriptors(&mut admin, 2)], first);
    assert_ne!(first[0], first[1], "namespaces have distinct identifiers");
}

fn log_pages_error_smart_effects_with_offsets(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 1);

    // SMART of a fresh controller: nothing read or written yet.
    let smart = |a: &mut Association| {
        let c = get_log_page(&mut a.admin, lid::SMART_HEALTH_INFORMATION, NSID_ALL, 0, 512, false);
        assert_status(&c, Status::SUCCESS);
        SmartLog::parse(&c.data).unwrap()
    };
    let before = smart(&mut a);
    assert_eq!(
        (before.data_units_read, before.data_units_written, before.host_read_commands, before.host_write_commands),
        (0, 0, 0, 0)
    );

    // 3 writes of 256 KiB (768 KiB = 1536 units of 512 bytes) and 2 reads of 512 KiB.
    for i in 0..3u64 {
        ok(Ok(write(a.io(), 1, 512, i * 512, &pattern(256 << 10, 1), false)));
    }
    for _ in 0..2 {
        ok(Ok(read(a.io(), 1, 512, 0, 512 << 10)));
    }
    let after = smart(&mut a);
    assert_eq!(after.host_write_commands, 3);
    assert_eq!(after.host_read_commands, 2);
    assert_eq!(after.data_units_written, 2, "1536 units of 512 bytes, in thousands rounded up");
    assert_eq!(after.data_units_read, 3, "2048 units of 512 bytes, in thousands rounded up");

    // A window of the log equals the same bytes of the whole log.
    let whole = get_log_page(&mut a.admin, lid::SMART_HEALTH_INFORMATION, NSID_ALL, 0, 512, false).data;
    let window = get_log_page(&mut a.admin, lid::SMART_HEALTH_INFORMATION, NSID_ALL, 32, 64, false);
    assert_status(&window, Status::SUCCESS);
    assert_eq!(window.data, whole[32..96]);
    // Past the end of the log: Invalid Field; an unknown log: Invalid Log Page.
    let c = get_log_page(&mut a.admin, lid::SMART_HEALTH_INFORMATION, NSID_ALL, 1024, 64, false);
    assert_status(&c, Status::INVALID_FIELD);
    assert_status(&get_log_page(&mut a.admin, 0xC7, 0, 0, 512, false), Status::INVALID_LOG_PAGE);

    // The error log records a failed command: the Invalid Namespace read below, by CID.
    let bad = read(a.io(), 99, 512, 0, 512);
    assert_status(&bad, Status::INVALID_NAMESPACE);
    let c = get_log_page(&mut a.admin, lid::ERROR_INFORMATION, 0, 0, 64 * 16, false);
    assert_status(&c, Status::SUCCESS);
    let entries: Vec<ErrorInformationEntry> =
        ErrorInformationEntry::parse_log(&c.data).filter(|e| e.error_count != 0).collect();
    let entry = entries.iter().find(|e| e.cid == bad.cqe.cid && e.sqid == 1).unwrap_or_else(|| {
        panic!("no error entry for cid {} on sqid 1 in {entries:?}", bad.cqe.cid);
    });
    assert!(entry.status.same_code(Status::INVALID_NAMESPACE), "{entry:?}");
    let smart_errors = smart(&mut a).number_of_error_log_entries;
    assert!(smart_errors >= 1, "SMART counts error log entries: {smart_errors}");

    // Commands Supported and Effects.
    let c = get_log_page(&mut a.admin, lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 0, 4096, false);
    assert_status(&c, Status::SUCCESS);
    let effects = CommandsSupportedAndEffects::parse(&c.data).unwrap();
    let csupp = CommandsSupportedAndEffects::CSUPP;
    let lbcc = CommandsSupportedAndEffects::LBCC;
    assert_eq!(effects.io(io_op::WRITE) & (csupp | lbcc), csupp | lbcc);
    assert_eq!(effects.io(io_op::READ) & (csupp | lbcc), csupp);
    assert_eq!(effects.io(0x7e), 0, "an unsupported I/O opcode");
    for op in [admin_op::IDENTIFY, admin_op::GET_LOG_PAGE, admin_op::KEEP_ALIVE] {
        assert_ne!(effects.admin(op) & csupp, 0, "admin opcode {op:#x} supported");
    }
    let window = get_log_page(&mut a.admin, lid::COMMANDS_SUPPORTED_AND_EFFECTS, 0, 1024, 8, false);
    assert_eq!(window.data, c.data[1024..1032], "the I/O half starts at byte 1024");
}

fn get_feature(admin: &mut TcpTestClient, fid: u8) -> u32 {
    ok(admin.command(GetFeatures::new(fid).to_sqe(), None, 0)).cqe.dw0
}

fn set_feature<F: Feature>(admin: &mut TcpTestClient, value: &F) -> nvmf_tests::nvme_tcp_client::Completion {
    admin.command(SetFeatures::new(value).to_sqe(), None, 0).expect("Set Features answered")
}

fn features_get_and_set(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut admin);

    // Volatile write cache: memory namespaces have none; it cannot be turned on.
    assert_eq!(get_feature(&mut admin, fid::VOLATILE_WRITE_CACHE), 0);
    assert_status(&set_feature(&mut admin, &VolatileWriteCache { wce: true }), Status::INVALID_FIELD);

    // Number of queues: the smaller request is granted for both.
    let asked = NumberOfQueues::with_counts(4, 6).unwrap();
    let c = ok(Ok(set_feature(&mut admin, &asked)));
    assert_eq!(NumberOfQueues::from_dw0(c.cqe.dw0), NumberOfQueues::with_counts(4, 4).unwrap());
    assert_eq!(get_feature(&mut admin, fid::NUMBER_OF_QUEUES), c.cqe.dw0);

    // Asynchronous event configuration round-trips the supported bits.
    let aec = AsyncEventConfiguration { namespace_attribute_notices: true, ..Default::default() };
    ok(Ok(set_feature(&mut admin, &aec)));
    assert_eq!(get_feature(&mut admin, fid::ASYNCHRONOUS_EVENT_CONFIGURATION), aec.to_dword());
    let none = AsyncEventConfiguration::default();
    ok(Ok(set_feature(&mut admin, &none)));
    assert_eq!(get_feature(&mut admin, fid::ASYNCHRONOUS_EVENT_CONFIGURATION), 0);

    // Keep-alive timer.
    ok(Ok(set_feature(&mut admin, &KeepAliveTimer { kato_ms: 5000 })));
    assert_eq!(get_feature(&mut admin, fid::KEEP_ALIVE_TIMER), 5000);
    let c = set_feature(&mut admin, &KeepAliveTimer { kato_ms: 3_600_001 });
    assert_status(&c, Status::KEEP_ALIVE_TIMEOUT_INVALID);
    assert_eq!(get_feature(&mut admin, fid::KEEP_ALIVE_TIMER), 5000, "a refused KATO changes nothing");

    // Host identifier: the 128-bit one from Connect, as data.
    let mut get = GetFeatures::new(fid::HOST_IDENTIFIER);
    get.cdw11 = HostIdentifier::EXHID;
    let c = ok(admin.command(get.to_sqe(), None, 16));
    assert_eq!(c.data, TEST_HOSTID);
    get.cdw11 = 0;
    let c = admin.command(get.to_sqe(), None, 16).unwrap();
    assert_status(&c, Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT);
    let set = SetFeatures { fid: fid::HOST_IDENTIFIER, cdw11: HostIdentifier::EXHID, ..SetFeatures::default() };
    let c = admin.command(set.to_sqe(), Some(&[7u8; 16]), 0).unwrap();
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);

    // Unknown feature; saving a feature.
    let c = admin.command(GetFeatures::new(0x7d).to_sqe(), None, 0).unwrap();
    assert_status(&c, Status::INVALID_FIELD);
    let mut save = SetFeatures::new(&KeepAliveTimer { kato_ms: 1000 });
    save.sv = true;
    assert_status(&admin.command(save.to_sqe(), None, 0).unwrap(), Status::FEATURE_NOT_SAVEABLE);
}

fn keep_alive_and_abort(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, _) = connect_admin(t.addr, SUBNQN, options(), 0);
    enable(&mut admin);
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
    let c = ok(admin.command(Abort { sqid: 1, cid: 0x1234 }.to_sqe(), None, 0));
    assert!(AbortResult::from_dw0(c.cqe.dw0).not_aborted, "Abort answers 'not aborted'");
}

fn async_event_completes_when_a_namespace_is_added(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 1);
    let aer_cid = send_command(&mut a.admin, AsyncEventRequest.to_sqe());
    // The AER is held: a Keep Alive issued after it completes first.
    ok(a.admin.command(KeepAlive.to_sqe(), None, 0));

    let storage = Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap();
    let subsystem = t.running().target().subsystem(SUBNQN).expect("subsystem");
    subsystem.add_namespace(NamespaceParams::new(3, Arc::new(storage))).expect("namespace added");

    let (pdu, _) = a.admin.recv_pdu().expect("the AER completes");
    let Pdu::CapsuleResponse(resp) = pdu else { panic!("expected the AER's response, got {pdu:?}") };
    assert_eq!(resp.cqe.cid, aer_cid);
    assert!(resp.cqe.status.is_success(), "{}", resp.cqe.status);
    assert_eq!(AsyncEvent::from_dw0(resp.cqe.dw0).unwrap(), AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED);

    // The changed namespace list names NSID 3 (kept with RAE, cleared by a read without it).
    for rae in [true, false] {
        let c = get_log_page(&mut a.admin, lid::CHANGED_NAMESPACE_LIST, 0, 0, 4096, rae);
        assert_status(&c, Status::SUCCESS);
        let ChangedNamespaces::List(l) = ChangedNamespaceList::parse(&c.data).unwrap() else { panic!("a list") };
        assert_eq!(l.iter().collect::<Vec<_>>(), [3], "rae {rae}");
    }
    let c = get_log_page(&mut a.admin, lid::CHANGED_NAMESPACE_LIST, 0, 0, 4096, false);
    let ChangedNamespaces::List(l) = ChangedNamespaceList::parse(&c.data).unwrap() else { panic!("a list") };
    assert!(l.is_empty(), "read clears the log");

    // The new namespace is visible and serves I/O.
    let c = identify(&mut a.admin, cns::ACTIVE_NAMESPACE_ID_LIST, 0);
    assert_eq!(ActiveNamespaceIdList::parse(&c.data).unwrap().iter().collect::<Vec<_>>(), [1, 2, 3]);
    let data = pattern(4096, 3);
    ok(Ok(write(a.io(), 3, 512, 8, &data, false)));
    assert_eq!(ok(Ok(read(a.io(), 3, 512, 8, 4096))).data, data);

    // AERL + 1 (4) requests are held; one more exceeds the limit.
    for _ in 0..4 {
        send_command(&mut a.admin, AsyncEventRequest.to_sqe());
    }
    let c = a.admin.command(AsyncEventRequest.to_sqe(), None, 0).unwrap();
    assert_status(&c, Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED);
    ok(a.admin.command(KeepAlive.to_sqe(), None, 0));
}

fn read_write_in_capsule_and_r2t_from_512_bytes_to_1_mib(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 2);
    let limit = a.io().in_capsule_limit;
    assert_eq!(limit, 16 * 1024);
    let mut slba = 0;
    for (i, len) in [512, 4096, limit, limit + 512, 128 << 10, 1 << 20].into_iter().enumerate() {
        let data = pattern(len, u8::try_from(i).unwrap());
        let q = &mut a.io[i % 2];
        let w = ok(Ok(write(q, 1, 512, slba, &data, false)));
        if len <= limit {
            assert_eq!(w.r2ts, 0, "{len} bytes go in the capsule");
        } else {
            assert!(w.r2ts >= 1, "{len} bytes are solicited with R2T");
        }
        let r = ok(Ok(read(&mut a.io[(i + 1) % 2], 1, 512, slba, len)));
        assert!(r.data == data, "{len} bytes at LBA {slba} read back differently");
        slba += (len / 512) as u64;
    }
    // 4 KiB blocks on namespace 2, up to the 1 MiB MDTS (256 blocks).
    let data = pattern(1 << 20, 9);
    ok(Ok(write(a.io(), 2, 4096, 1792, &data, true)));
    assert!(ok(Ok(read(a.io(), 2, 4096, 1792, 1 << 20))).data == data);
}

fn a_queue_moves_at_connect_to_the_reactor_on_the_cpu_its_packets_arrive_on(io: SocketIoMode) {
    let cpus = nvmf_service::cpus::allowed().expect("allowed CPUs");
    let [a, b, ..] = cpus[..] else {
        eprintln!("skipped: placement needs two CPUs, this process may use {cpus:?}");
        return;
    };
    let reactors = format!("cpus = [{a}, {b}]\nplacement = \"incoming_cpu\"");
    let t = Target::start_on(&memory_config("").replace("threads = 2", &reactors), io);
    // The host sends from CPU a only, so every queue's packets arrive there (loopback is processed on the sending
    // CPU). The listener deals connections in turn: the admin queue and I/O queue 2 to reactor 0 (on CPU a), I/O
    // queue 1 to reactor 1, which hands it to reactor 0 when its Connect arrives.
    let addr = t.addr;
    let host = std::thread::spawn(move || {
        nvmf_service::cpus::pin_current_thread(a).expect("pin the host to CPU a");
        let mut assoc = Association::new(addr, options(), 2);
        for (i, q) in assoc.io.iter_mut().enumerate() {
            let data = pattern(64 << 10, u8::try_from(i).unwrap());
            let slba = 1024 * i as u64;
            ok(Ok(write(q, 1, 512, slba, &data, false)));
            assert!(ok(Ok(read(q, 1, 512, slba, data.len()))).data == data, "queue {} reads back", i + 1);
        }
        assoc
    });
    let assoc = host.join().expect("host thread");
    let live: Vec<usize> = t
        .running()
        .transport_counters()
        .iter()
        .map(|c| c.tcp_connections.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert_eq!(live, [3, 0], "every queue on the reactor of CPU {a}");
    assert_eq!(t.running().tcp_connections_moved(), Some(1));
    drop(assoc);
}

fn fused_compare_and_write_is_atomic_between_hosts(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 1);
    let (old, new) = (pattern(4096, 7), pattern(4096, 8));
    ok(Ok(write(a.io(), 1, 512, 300, &old, false)));
    // Data in the capsule (one block) and fetched with R2Ts (eight blocks, beyond the in-capsule limit).
    let [c, w] = compare_and_write(a.io(), 1, 512, 300, &old[..512], &new[..512]);
    assert_eq!((c.cqe.status, w.cqe.status, c.r2ts), (Status::SUCCESS, Status::SUCCESS, 0));
    let mut want = old.clone();
    want[..512].copy_from_slice(&new[..512]);
    let [c, w] = compare_and_write(a.io(), 1, 512, 300, &want, &new);
    assert_eq!((c.cqe.status, w.cqe.status), (Status::SUCCESS, Status::SUCCESS));
    assert!(ok(Ok(read(a.io(), 1, 512, 300, 4096))).data == new, "the Write replaced the blocks");
    // A miscompare writes nothing.
    let [c, w] = compare_and_write(a.io(), 1, 512, 300, &old, &old);
    assert_eq!(
        (c.cqe.status, w.cqe.status),
        (Status::COMPARE_FAILURE.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr())
    );
    assert!(ok(Ok(read(a.io(), 1, 512, 300, 4096))).data == new, "nothing written");
    // The controller says it does Compare and Write.
    let id = identify(&mut a.admin, cns::CONTROLLER, 0);
    let id = IdentifyController::parse(&id.data).unwrap();
    assert_eq!(id.fuses, IdentifyController::FUSES_COMPARE_AND_WRITE);
    // Two hosts racing on one counter lose no increment.
    let wins = race_compare_and_write(t.addr, 1, 512, 900, 300);
    eprintln!("Compare and Write successes per host: {wins:?}");
}

fn flush_write_zeroes_deallocate_and_compare(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 1);
    let data = pattern(8192, 5);
    ok(Ok(write(a.io(), 1, 512, 100, &data, false)));
    ok(a.io().command(Flush { nsid: 1 }.to_sqe(), None, 0));
    ok(a.io().command(Flush { nsid: NSID_ALL }.to_sqe(), None, 0));

    // Compare: the same bytes succeed, one changed byte fails.
    ok(Ok(compare(a.io(), 1, 512, 100, &data)));
    let mut other = data.clone();
    other[4100] ^= 1;
    assert_status(&compare(a.io(), 1, 512, 100, &other), Status::COMPARE_FAILURE);

    // Write Zeroes on blocks 104..108 (the middle of the 16 written).
    let wz = WriteZeroes { nsid: 1, slba: 104, nlb: 3, ..WriteZeroes::default() };
    ok(a.io().command(wz.to_sqe(), None, 0));
    let mut want = data.clone();
    want[2048..4096].fill(0);
    assert!(ok(Ok(read(a.io(), 1, 512, 100, 8192))).data == want, "Write Zeroes zeroed exactly its blocks");

    // Deallocate blocks 110..116 and 200..202: they read as zeroes afterwards.
    ok(Ok(write(a.io(), 1, 512, 200, &pattern(1024, 6), false)));
    let ranges = [DsmRange { cattr: 0, length: 6, slba: 110 }, DsmRange { cattr: 0, length: 2, slba: 200 }];
    let list: Vec<u8> = ranges.iter().flat_map(|r| r.to_bytes()).collect();
    let dsm = DatasetManagement { nsid: 1, nr: 1, ad: true, ..DatasetManagement::default() };
    ok(a.io().command(dsm.to_sqe(), Some(&list), 0));
    want[5120..8192].fill(0);
    assert!(ok(Ok(read(a.io(), 1, 512, 100, 8192))).data == want, "deallocated blocks read zeroes");
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 200, 1024))).data, vec![0; 1024]);
}

fn discovery_lists_the_subsystem_at_our_address(io: SocketIoMode) {
    // On port 0: the discovery log must report the port the listener really got.
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, _) = connect_admin(t.addr, DISCOVERY_NQN, options(), 0);
    enable(&mut admin);
    let c = identify(&mut admin, cns::CONTROLLER, 0);
    assert_status(&c, Status::SUCCESS);
    let id = IdentifyController::parse(&c.data).unwrap();
    assert_eq!(id.cntrltype, IdentifyController::CNTRLTYPE_DISCOVERY);
    assert_eq!(id.subnqn, DISCOVERY_NQN);

    // The header first (as hosts do), then the whole page.
    let header = get_log_page(&mut admin, 0x70, 0, 0, HEADER_SIZE, false);
    assert_status(&header, Status::SUCCESS);
    let numrec = DiscoveryLogHeader::parse(&header.data).unwrap().numrec;
    assert_eq!(numrec, 2, "the discovery subsystem itself and ours");
    let len = HEADER_SIZE * 3;
    let c = get_log_page(&mut admin, 0x70, 0, 0, len, false);
    assert_status(&c, Status::SUCCESS);
    let page = DiscoveryLogPage::parse(&c.data).unwrap();
    assert!(page.is_complete());
    let port = t.addr.port().to_string();
    let entries: Vec<_> = page.entries().map(|e| e.expect("entry parses")).collect();
    let ours: Vec<_> = entries.iter().filter(|e| e.subnqn == SUBNQN).collect();
    assert_eq!(ours.len(), 1, "{entries:?}");
    let e = &ours[0];
    assert_eq!((e.trtype, e.subtype), (TransportType::Tcp, SubsystemType::Nvm));
    assert_eq!(e.traddr, "127.0.0.1");
    assert_eq!(e.trsvcid, port, "the port the host can connect to");
    // A paged read: the second entry alone.
    let second = get_log_page(&mut admin, 0x70, 0, 2048, 1024, false);
    assert_eq!(second.data, c.data[2048..3072]);
    // Discovery controllers serve no I/O commands' logs.
    assert_status(&get_log_page(&mut admin, lid::SMART_HEALTH_INFORMATION, 0, 0, 512, false), Status::INVALID_LOG_PAGE);
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
}

fn keep_alive_expiry_closes_the_association(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let (mut admin, cntlid) = connect_admin(t.addr, SUBNQN, options(), 1000);
    enable(&mut admin);
    let mut io = connect_io(t.addr, SUBNQN, options(), cntlid, 1).expect("I/O queue");
    // Keep Alive resets the timer: after 3 of them 400 ms apart (1.2 s in all, beyond the KATO) the association
    // is alive.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        ok(admin.command(KeepAlive.to_sqe(), None, 0));
    }
    ok(Ok(read(&mut io, 1, 512, 0, 512)));
    // Then silence: the target ends the admin queue and the association's I/O queue within a few seconds.
    expect_closed(&mut admin, Duration::from_secs(5));
    expect_closed(&mut io, Duration::from_secs(5));
    // The target serves new associations afterwards.
    let mut a = Association::new(t.addr, options(), 1);
    ok(Ok(read(a.io(), 1, 512, 0, 512)));
}

fn digests_guard_headers_and_data(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let opts = ClientOptions { hdgst: true, ddgst: true, ..options() };
    let mut a = Association::new(t.addr, opts, 1);
    assert!(a.io().framing().hdgst && a.io().framing().ddgst, "both digests granted");

    // I/O with digests: in-capsule and R2T writes, multi-PDU reads.
    for (len, seed) in [(4096, 1), (64 << 10, 2)] {
        let data = pattern(len, seed);
        ok(Ok(write(a.io(), 1, 512, 0, &data, false)));
        assert!(ok(Ok(read(a.io(), 1, 512, 0, len))).data == data);
    }

    // A corrupt data digest on in-capsule data fails only that command; the connection goes on.
    let before = ok(Ok(read(a.io(), 1, 512, 0, 4096))).data;
    let mut sqe = nvmf_common::nvme::io::Write { nsid: 1, slba: 0, nlb: 7, ..Default::default() }.to_sqe();
    sqe.cid = a.io().next_cid();
    sqe.set_sgl1(&SglDescriptor::DataBlock { address: 0, length: 4096, subtype: SglSubtype::Offset }).unwrap();
    let framing = a.io().framing();
    let mut bytes = Pdu::CapsuleCommand(CapsuleCommand { sqe }).to_bytes(&pattern(4096, 7), &framing).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    a.io().send_raw(&bytes).unwrap();
    let resp = expect_response(a.io(), sqe.cid);
    assert!(resp.same_code(Status::TRANSIENT_TRANSPORT_ERROR), "{resp}");
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 0, 4096))).data, before, "the corrupt write changed nothing");

    // The same for H2CData answering an R2T.
    let mut sqe = nvmf_common::nvme::io::Write { nsid: 1, slba: 0, nlb: 63, ..Default::default() }.to_sqe();
    sqe.cid = a.io().next_cid();
    sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length: 32768, subtype: SglSubtype::TransportSpecific }).unwrap();
    a.io().send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &[]).unwrap();
    let (pdu, _) = a.io().recv_pdu().unwrap();
    let Pdu::R2t(R2t { cccid, ttag, r2to, r2tl }) = pdu else { panic!("expected R2T, got {pdu:?}") };
    assert_eq!((cccid, r2to, r2tl), (sqe.cid, 0, 32768));
    let h2c = Pdu::H2cData(H2cData { cccid, ttag, datao: 0, datal: r2tl, last_pdu: true });
    let mut bytes = h2c.to_bytes(&pattern(32768, 8), &framing).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0x01; // a data byte: the digest no longer matches
    a.io().send_raw(&bytes).unwrap();
    let resp = expect_response(a.io(), sqe.cid);
    assert!(resp.same_code(Status::TRANSIENT_TRANSPORT_ERROR), "{resp}");
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 0, 4096))).data, before);

    // A corrupt header digest is fatal: C2HTermReq (Header Digest Error), then close. The admin queue lives on.
    let mut bytes = Pdu::CapsuleCommand(CapsuleCommand { sqe: KeepAlive.to_sqe() }).to_bytes(&[], &framing).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x80;
    a.io().send_raw(&bytes).unwrap();
    let term = expect_closed(a.io(), Duration::from_secs(5));
    assert_eq!(term.map(|t| t.0), Some(FatalErrorStatus::HeaderDigestError));
    ok(a.admin.command(KeepAlive.to_sqe(), None, 0));
}

/// Receive the CapsuleResp of `cid` (nothing else may arrive first); its status.
fn expect_response(client: &mut TcpTestClient, cid: u16) -> Status {
    match client.recv_pdu().expect("a response") {
        (Pdu::CapsuleResponse(r), _) if r.cqe.cid == cid => r.cqe.status,
        (other, _) => panic!("expected the response of cid {cid}, got {other:?}"),
    }
}

/// Disconnect on an I/O queue is answered and the queue closed; the association goes on.
fn disconnect_ends_an_io_queue(io: SocketIoMode) {
    let t = Target::start_on(&memory_config(""), io);
    let mut a = Association::new(t.addr, options(), 2);
    ok(a.io[0].command(nvmf_common::fabrics::disconnect::Disconnect.to_sqe(), None, 0));
    expect_closed(&mut a.io[0], Duration::from_secs(5));
    ok(Ok(read(&mut a.io[1], 1, 512, 0, 512)));
    ok(a.admin.command(KeepAlive.to_sqe(), None, 0));
    // Disconnect belongs to I/O queues.
    let c = a.admin.command(nvmf_common::fabrics::disconnect::Disconnect.to_sqe(), None, 0).unwrap();
    assert_status(&c, Status::INVALID_QUEUE_TYPE);
}
