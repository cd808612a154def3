//! Reservations driven through queues: two hosts (two host IDs) on one namespace, Register / Acquire /
//! Release / Report with their data in the capsule or fetched, the conflicts I/O commands get, the notices the
//! preempted host reads, Identify and the features, and Persist Through Power Loss across a new target.

use nvmf_common::nvme::reservation::{
    AcquireAction, Cptpl, NotificationLog, NotificationType, RegisterAction, ReleaseAction, ReservationAcquire,
    ReservationKeys, ReservationRegister, ReservationRelease, ReservationReport, ReservationStatus, ReservationType,
    NOTIFICATION_LOG_SIZE,
};

use super::*;

const HOST_A: [u8; 16] = [0xa; 16];
const HOST_B: [u8; 16] = [0xb; 16];
const NQN_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-2222-3333-4444-555555555555";
const NQN_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-3333-4444-555555555555";

/// An enabled association of host `hostnqn` / `hostid`.
fn associate_as(target: &Arc<Target>, hostnqn: &str, hostid: [u8; 16]) -> Association {
    let mut engine = engine();
    let mut admin = Host::new(target);
    let done = admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, hostnqn, hostid, 5000).ok();
    let cntlid = ConnectResponse::from_dw0(done.cqe.dw0).cntlid;
    admin.enable(&mut engine);
    let mut io = Host::new(target);
    io.connect_with(&mut engine, 1, 127, cntlid, SUBNQN, hostnqn, hostid, 5000).ok();
    Association { target: Arc::clone(target), engine, admin, io, cntlid }
}

/// Submit a reservation command with `data` in the capsule (`in_capsule`) or fetched.
fn send(a: &mut Association, sqe: SubmissionQueueEntry, data: &[u8], in_capsule_data: bool) -> Done {
    let len = u32::try_from(data.len()).unwrap();
    if in_capsule_data {
        a.io.submit(&mut a.engine, with_sgl(sqe, in_capsule(len)), data, &[]).unwrap()
    } else {
        a.io.submit(&mut a.engine, with_sgl(sqe, transport_data(len)), &[], data).unwrap()
    }
}

fn register(a: &mut Association, action: RegisterAction, iekey: bool, crkey: u64, nrkey: u64, cptpl: Cptpl) -> Done {
    let sqe = ReservationRegister { nsid: 1, action, iekey, cptpl }.to_sqe();
    send(a, sqe, &ReservationKeys { crkey, second: nrkey }.to_bytes(), true)
}

fn acquire(a: &mut Association, action: AcquireAction, rtype: ReservationType, crkey: u64, prkey: u64) -> Done {
    let sqe = ReservationAcquire { nsid: 1, action, iekey: false, rtype }.to_sqe();
    send(a, sqe, &ReservationKeys { crkey, second: prkey }.to_bytes(), false)
}

fn release(a: &mut Association, action: ReleaseAction, rtype: u8, crkey: u64) -> Done {
    let sqe = ReservationRelease { nsid: 1, action, iekey: false, rtype }.to_sqe();
    send(a, sqe, &crkey.to_le_bytes(), true)
}

fn report(a: &mut Association, bytes: u32, eds: bool) -> Done {
    let sqe = ReservationReport { nsid: 1, numd: bytes / 4 - 1, eds }.to_sqe();
    a.io.run(&mut a.engine, with_sgl(sqe, transport_data(bytes)))
}

fn conflict() -> Status {
    Status::RESERVATION_CONFLICT.with_dnr()
}

#[test]
fn two_hosts_register_acquire_preempt_release() {
    let target = target();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    let mut b = associate_as(&target, NQN_B, HOST_B);
    register(&mut a, RegisterAction::Register, false, 0, 1, Cptpl::NoChange).ok();
    register(&mut b, RegisterAction::Register, false, 0, 2, Cptpl::NoChange).ok();
    acquire(&mut a, AcquireAction::Acquire, ReservationType::WriteExclusive, 1, 0).ok();
    // B is registered but does not hold a Write Exclusive reservation: it reads, it does not write.
    let data = pattern(512, 1);
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    assert_eq!(b.io.write(&mut b.engine, 1, 0, &data).status(), conflict());
    assert_eq!(b.io.read(&mut b.engine, 1, 0, 1).ok().data, data);
    let zeroes = WriteZeroes { nsid: 1, slba: 0, nlb: 0, ..Default::default() };
    assert_eq!(b.io.run(&mut b.engine, zeroes.to_sqe()).status(), conflict());
    assert_eq!(b.io.run(&mut b.engine, Flush { nsid: 1 }.to_sqe()).status(), conflict());
    assert_eq!(target.reservation_conflicts(), 3);
    // The report shows both registrants, A holding.
    let full = report(&mut b, 4096, true).ok().data;
    let status = ReservationStatus::parse(&full, true).unwrap();
    assert_eq!(status.rtype, 1);
    assert_eq!(status.generation, 2);
    let regs: Vec<_> = status.registrants.iter().map(|r| (r.hostid, r.rkey, r.holds, r.cntlid)).collect();
    assert_eq!(regs, vec![(HOST_A, 1, true, 0xFFFF), (HOST_B, 2, false, 0xFFFF)]);
    // The regular format cannot carry 128-bit host IDs; fewer bytes than the extended header is Invalid Field.
    assert_eq!(report(&mut b, 4096, false).status(), Status::HOST_IDENTIFIER_INCONSISTENT_FORMAT.with_dnr());
    // A report shorter than the structure gets its start, with the full registrant count, however short (Base 2.2
    // Figure 580, NUMD: "only that specified portion of the data structure is transferred"), the header too.
    let short = report(&mut b, 64, true).ok().data;
    assert_eq!(ReservationStatus::announced_registrants(&short), Some(2));
    let header = report(&mut b, 60, true).ok().data;
    assert_eq!(header.len(), 60);
    assert_eq!(header[..60], full[..60]);
    let dwords = report(&mut b, 8, true).ok().data;
    assert_eq!((dwords.len(), dwords[4], ReservationStatus::announced_registrants(&dwords)), (8, 1, Some(2)));
    assert_eq!(report(&mut b, 4, true).ok().data, full[..4]);
    // B cannot acquire; B preempts A with A's key and holds an Exclusive Access reservation.
    assert_eq!(acquire(&mut b, AcquireAction::Acquire, ReservationType::WriteExclusive, 2, 0).status(), conflict());
    acquire(&mut b, AcquireAction::PreemptAndAbort, ReservationType::ExclusiveAccess, 2, 1).ok();
    assert_eq!(a.io.write(&mut a.engine, 1, 0, &data).status(), conflict());
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).status(), conflict());
    b.io.write(&mut b.engine, 1, 0, &data).ok();
    // A hears it was preempted: the event, then the log page (read once).
    let done = a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).expect("event pending");
    assert_eq!(AsyncEvent::from_dw0(done.cqe.dw0).unwrap(), AsyncEvent::RESERVATION_LOG_PAGE_AVAILABLE);
    assert_eq!(done.cqe.dw0, 0x0080_0006);
    let glp = GetLogPage::new(lid::RESERVATION_NOTIFICATION, 0xFFFF_FFFF, 64).unwrap();
    let page = a.admin.log_page(&mut a.engine, glp).ok().data;
    let expected =
        NotificationLog { count: 1, kind: NotificationType::RegistrationPreempted, available: 0, nsid: 1 }.to_bytes();
    assert_eq!(page, expected);
    let page = a.admin.log_page(&mut a.engine, glp).ok().data;
    assert_eq!(page, [0u8; NOTIFICATION_LOG_SIZE]);
    // A is no longer registered: its release and register-replace conflict.
    assert_eq!(release(&mut a, ReleaseAction::Release, 2, 1).status(), conflict());
    assert_eq!(register(&mut a, RegisterAction::Replace, true, 0, 5, Cptpl::NoChange).status(), conflict());
    // B releases with the wrong type (Invalid Field), then the right one; A writes again.
    assert_eq!(release(&mut b, ReleaseAction::Release, 1, 2).status(), Status::INVALID_FIELD.with_dnr());
    release(&mut b, ReleaseAction::Release, 2, 2).ok();
    a.io.write(&mut a.engine, 1, 0, &data).ok();
    // Clear drops every registrant.
    register(&mut a, RegisterAction::Register, false, 0, 7, Cptpl::NoChange).ok();
    release(&mut b, ReleaseAction::Clear, 0, 2).ok();
    let status = ReservationStatus::parse(&report(&mut a, 4096, true).ok().data, true).unwrap();
    assert!(status.registrants.is_empty());
    assert_eq!(status.rtype, 0);
}

#[test]
fn controllers_of_one_host_share_the_registration() {
    let target = target();
    let mut a1 = associate_as(&target, NQN_A, HOST_A);
    let mut a2 = associate_as(&target, NQN_A, HOST_A);
    let mut b = associate_as(&target, NQN_B, HOST_B);
    register(&mut a1, RegisterAction::Register, false, 0, 1, Cptpl::NoChange).ok();
    acquire(&mut a2, AcquireAction::Acquire, ReservationType::ExclusiveAccess, 1, 0).ok();
    a1.io.read(&mut a1.engine, 1, 0, 1).ok();
    a2.io.read(&mut a2.engine, 1, 0, 1).ok();
    assert_eq!(b.io.read(&mut b.engine, 1, 0, 1).status(), conflict());
}

#[test]
fn hostile_reservation_commands() {
    let target = target();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    // Unknown namespace.
    let mut sqe =
        ReservationRegister { nsid: 9, action: RegisterAction::Register, iekey: false, cptpl: Cptpl::NoChange }
            .to_sqe();
    assert_eq!(send(&mut a, sqe, &[0; 16], true).status(), Status::INVALID_NAMESPACE.with_dnr());
    // Reserved action, reserved CPTPL, reserved type, IEKEY in Acquire.
    sqe.nsid = 1;
    sqe.cdw10 = 5;
    assert_eq!(send(&mut a, sqe, &[0; 16], true).status(), Status::INVALID_FIELD.with_dnr());
    sqe.cdw10 = 1 << 30;
    assert_eq!(send(&mut a, sqe, &[0; 16], true).status(), Status::INVALID_FIELD.with_dnr());
    let mut acq = ReservationAcquire {
        nsid: 1,
        action: AcquireAction::Acquire,
        iekey: false,
        rtype: ReservationType::WriteExclusive,
    }
    .to_sqe();
    acq.cdw10 = 9 << 8;
    assert_eq!(send(&mut a, acq, &[0; 16], true).status(), Status::INVALID_FIELD.with_dnr());
    acq.cdw10 = 1 << 8 | 1 << 3;
    assert_eq!(send(&mut a, acq, &[0; 16], true).status(), Status::INVALID_FIELD.with_dnr());
    // Data shorter than the structure.
    sqe.cdw10 = 0;
    assert_eq!(send(&mut a, sqe, &[0; 8], true).status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    assert_eq!(send(&mut a, sqe, &[0; 8], false).status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // A report larger than MDTS, NUMD at its maximum, an SGL shorter than NUMD.
    let big = ReservationReport { nsid: 1, numd: u32::MAX, eds: true }.to_sqe();
    assert_eq!(a.io.run(&mut a.engine, with_sgl(big, transport_data(4096))).status(), Status::INVALID_FIELD.with_dnr());
    let report = ReservationReport { nsid: 1, numd: 1023, eds: true }.to_sqe();
    let done = a.io.run(&mut a.engine, with_sgl(report, transport_data(1024)));
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // Reservation commands are I/O commands: an admin queue answers Invalid Opcode.
    let done = a.admin.submit(&mut a.engine, with_sgl(sqe, in_capsule(16)), &[0; 16], &[]).unwrap();
    assert_eq!(done.status(), Status::INVALID_OPCODE.with_dnr());
}

#[test]
fn identify_and_features() {
    let target = target();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    let data = a.admin.identify(&mut a.engine, cns::CONTROLLER, 0).ok().data;
    let id = IdentifyController::parse(&data).unwrap();
    assert!(id.oncs_has(IdentifyController::ONCS_RESERVATIONS));
    let data = a.admin.identify(&mut a.engine, cns::NAMESPACE, 1).ok().data;
    // No state directory: every type and IEKEY, not PTPL.
    assert_eq!(IdentifyNamespace::parse(&data).unwrap().rescap, 0xfe);
    // Reservation Notification Mask: per namespace, or all with NSID FFFFFFFFh; unknown bits refused.
    let mut set = SetFeatures { nsid: 1, fid: fid::RESERVATION_NOTIFICATION_MASK, sv: false, cdw11: 0b10, cdw12: 0 };
    a.admin.run(&mut a.engine, set.to_sqe()).ok();
    let get = GetFeatures { nsid: 1, ..GetFeatures::new(fid::RESERVATION_NOTIFICATION_MASK) };
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 0b10);
    set.cdw11 = 1;
    assert_eq!(a.admin.run(&mut a.engine, set.to_sqe()).status(), Status::INVALID_FIELD.with_dnr());
    set.nsid = 0xFFFF_FFFF;
    set.cdw11 = 0b1110;
    a.admin.run(&mut a.engine, set.to_sqe()).ok();
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 0b1110);
    let get2 = GetFeatures { nsid: 2, ..get };
    assert_eq!(a.admin.run(&mut a.engine, get2.to_sqe()).status(), Status::INVALID_NAMESPACE.with_dnr());
    // Reservation Persistence: off, and cannot be turned on without a state directory.
    let get = GetFeatures { nsid: 1, ..GetFeatures::new(fid::RESERVATION_PERSISTENCE) };
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 0);
    let set = SetFeatures { nsid: 1, fid: fid::RESERVATION_PERSISTENCE, sv: false, cdw11: 1, cdw12: 0 };
    assert_eq!(a.admin.run(&mut a.engine, set.to_sqe()).status(), Status::INVALID_FIELD.with_dnr());
    // The Linux host's pr_register always asks for PTPL: registered, PTPL stays off.
    register(&mut a, RegisterAction::Register, false, 0, 1, Cptpl::Persist).ok();
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 0);
}

#[test]
fn masked_notices_are_not_sent() {
    let target = target();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    let mut b = associate_as(&target, NQN_B, HOST_B);
    let set = SetFeatures { nsid: 1, fid: fid::RESERVATION_NOTIFICATION_MASK, sv: false, cdw11: 0b10, cdw12: 0 };
    a.admin.run(&mut a.engine, set.to_sqe()).ok();
    register(&mut a, RegisterAction::Register, false, 0, 1, Cptpl::NoChange).ok();
    register(&mut b, RegisterAction::Register, false, 0, 2, Cptpl::NoChange).ok();
    acquire(&mut b, AcquireAction::Preempt, ReservationType::WriteExclusive, 2, 1).ok();
    assert!(a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).is_none(), "no event");
}

/// The mask is the controller's: a host that masks everything hides nothing from another host.
#[test]
fn a_host_mask_hides_only_its_own_notices() {
    let target = target();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    let mut b = associate_as(&target, NQN_B, HOST_B);
    let set =
        SetFeatures { nsid: 0xFFFF_FFFF, fid: fid::RESERVATION_NOTIFICATION_MASK, sv: false, cdw11: 0b1110, cdw12: 0 };
    b.admin.run(&mut b.engine, set.to_sqe()).ok();
    let get = GetFeatures { nsid: 1, ..GetFeatures::new(fid::RESERVATION_NOTIFICATION_MASK) };
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 0, "A's mask is its own");
    register(&mut a, RegisterAction::Register, false, 0, 1, Cptpl::NoChange).ok();
    register(&mut b, RegisterAction::Register, false, 0, 2, Cptpl::NoChange).ok();
    acquire(&mut b, AcquireAction::Preempt, ReservationType::WriteExclusive, 2, 1).ok();
    let event =
        a.admin.submit(&mut a.engine, AsyncEventRequest.to_sqe(), &[], &[]).expect("A is told it was preempted");
    assert!(event.status().is_success());
}

#[test]
fn persist_through_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let params = || {
        let mut ns = NamespaceParams::new(1, memory(NS_SIZE, BLOCK));
        ns.state_dir = Some(dir.path().to_owned());
        SubsystemParams { namespaces: vec![ns], ..subsystem_params() }
    };
    {
        let target = Target::new(target_params(), vec![params()]).unwrap();
        let mut a = associate_as(&target, NQN_A, HOST_A);
        let data = a.admin.identify(&mut a.engine, cns::NAMESPACE, 1).ok().data;
        assert_eq!(IdentifyNamespace::parse(&data).unwrap().rescap, 0xff);
        register(&mut a, RegisterAction::Register, false, 0, 1, Cptpl::Persist).ok();
        acquire(&mut a, AcquireAction::Acquire, ReservationType::WriteExclusiveRegistrantsOnly, 1, 0).ok();
        let get = GetFeatures { nsid: 1, ..GetFeatures::new(fid::RESERVATION_PERSISTENCE) };
        assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 1);
        assert_eq!(target.state_pool().counters().ran(), 2, "both changes written by the state pool");
    }
    // A new target (a restart) finds the registration and the reservation.
    let target = Target::new(target_params(), vec![params()]).unwrap();
    let mut b = associate_as(&target, NQN_B, HOST_B);
    let status = ReservationStatus::parse(&report(&mut b, 4096, true).ok().data, true).unwrap();
    assert!(status.ptpls);
    assert_eq!(status.rtype, 3);
    assert_eq!(
        status.registrants.iter().map(|r| (r.hostid, r.rkey, r.holds)).collect::<Vec<_>>(),
        vec![(HOST_A, 1, true)]
    );
    assert_eq!(b.io.write(&mut b.engine, 1, 0, &pattern(512, 3)).status(), conflict());
    // Only a registrant changes PTPL: B, not one, is refused and the state stays.
    let set = SetFeatures { nsid: 1, fid: fid::RESERVATION_PERSISTENCE, sv: false, cdw11: 0, cdw12: 0 };
    assert_eq!(b.admin.run(&mut b.engine, set.to_sqe()).status(), conflict());
    let target = Target::new(target_params(), vec![params()]).unwrap();
    let mut a = associate_as(&target, NQN_A, HOST_A);
    let get = GetFeatures { nsid: 1, ..GetFeatures::new(fid::RESERVATION_PERSISTENCE) };
    assert_eq!(a.admin.run(&mut a.engine, get.to_sqe()).ok().cqe.dw0, 1, "still persisting");
    // Set Features by the registrant turns PTPL off: the file goes, the next restart starts empty.
    a.admin.run(&mut a.engine, set.to_sqe()).ok();
    drop(a);
    let target = Target::new(target_params(), vec![params()]).unwrap();
    let mut b = associate_as(&target, NQN_B, HOST_B);
    let status = ReservationStatus::parse(&report(&mut b, 4096, true).ok().data, true).unwrap();
    assert_eq!((status.ptpls, status.registrants.len(), status.rtype), (false, 0, 0));
}
