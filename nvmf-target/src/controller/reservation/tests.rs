//! The reservation model: access per type × host role × access, and the commands' rules.

use nvmf_common::nvme::reservation::{
    AcquireAction, Cptpl, NotificationType, RegisterAction, ReleaseAction, ReservationKeys, ReservationType,
};
use nvmf_common::nvme::Status;

use super::{Access, Notice, Notices, Registrant, ReservationState, Reservations, DEFAULT_MAX_REGISTRANTS};

const A: [u8; 16] = [0xa; 16];
const B: [u8; 16] = [0xb; 16];
const C: [u8; 16] = [0xc; 16];

fn keys(crkey: u64, second: u64) -> ReservationKeys {
    ReservationKeys { crkey, second }
}

fn conflict() -> Result<(), Status> {
    Err(Status::RESERVATION_CONFLICT.with_dnr())
}

fn register(s: &mut ReservationState, host: &[u8; 16], key: u64) {
    s.register(host, RegisterAction::Register, false, keys(0, key), &mut Notices::new()).unwrap();
}

fn acquire(s: &mut ReservationState, host: &[u8; 16], key: u64, rtype: ReservationType) -> Result<(), Status> {
    s.acquire(host, AcquireAction::Acquire, rtype, keys(key, 0), &mut Notices::new())
}

fn preempt(s: &mut ReservationState, host: &[u8; 16], key: u64, prkey: u64, rtype: ReservationType) -> Notices {
    let mut n = Notices::new();
    s.acquire(host, AcquireAction::Preempt, rtype, keys(key, prkey), &mut n).unwrap();
    n
}

/// Base 2.0 Figure "Command Behavior in the Presence of a Reservation": A holds, B is registered, C is not.
#[test]
fn access_per_type_and_role() {
    use ReservationType::*;
    // (type, holder read/write, registrant read/write, non-registrant read/write)
    let table = [
        (WriteExclusive, [true, true], [true, false], [true, false]),
        (ExclusiveAccess, [true, true], [false, false], [false, false]),
        (WriteExclusiveRegistrantsOnly, [true, true], [true, true], [true, false]),
        (ExclusiveAccessRegistrantsOnly, [true, true], [true, true], [false, false]),
        (WriteExclusiveAllRegistrants, [true, true], [true, true], [true, false]),
        (ExclusiveAccessAllRegistrants, [true, true], [true, true], [false, false]),
    ];
    for (rtype, holder, registrant, other) in table {
        let mut s = ReservationState::default();
        register(&mut s, &A, 1);
        register(&mut s, &B, 2);
        // No reservation: everyone may do anything.
        for host in [A, B, C] {
            assert_eq!(s.check(&host, Access::Write), Ok(()));
        }
        acquire(&mut s, &A, 1, rtype).unwrap();
        for (host, [read, write]) in [(A, holder), (B, registrant), (C, other)] {
            let expect = |ok: bool| if ok { Ok(()) } else { conflict() };
            assert_eq!(s.check(&host, Access::Read), expect(read), "{rtype:?} read by {host:?}");
            assert_eq!(s.check(&host, Access::Write), expect(write), "{rtype:?} write by {host:?}");
        }
    }
}

#[test]
fn register_replace_unregister() {
    let mut s = ReservationState::default();
    let mut n = Notices::new();
    register(&mut s, &A, 1);
    assert_eq!(s.generation, 1);
    // Registering again with the same key succeeds: the registrants stay as they were, but the generation moves
    // (Base 2.2 Figure 582: GEN counts every Reservation Register that completes successfully). Another key
    // conflicts and moves nothing.
    register(&mut s, &A, 1);
    assert_eq!(s.registrants.iter().collect::<Vec<_>>(), vec![Registrant { hostid: A, key: 1 }]);
    assert_eq!(s.generation, 2);
    assert_eq!(s.register(&A, RegisterAction::Register, false, keys(0, 2), &mut n), conflict());
    assert_eq!(s.generation, 2);
    // Replace needs the current key unless IEKEY.
    assert_eq!(s.register(&A, RegisterAction::Replace, false, keys(9, 2), &mut n), conflict());
    s.register(&A, RegisterAction::Replace, false, keys(1, 2), &mut n).unwrap();
    s.register(&A, RegisterAction::Replace, true, keys(9, 3), &mut n).unwrap();
    assert_eq!(s.registrants.get(&A).unwrap().key, 3);
    assert_eq!(s.generation, 4);
    // A host not registered can neither replace nor unregister, IEKEY or not.
    assert_eq!(s.register(&B, RegisterAction::Replace, true, keys(0, 1), &mut n), conflict());
    assert_eq!(s.register(&B, RegisterAction::Unregister, true, keys(0, 0), &mut n), conflict());
    assert_eq!(s.register(&A, RegisterAction::Unregister, false, keys(1, 0), &mut n), conflict());
    s.register(&A, RegisterAction::Unregister, true, keys(0, 0), &mut n).unwrap();
    assert!(s.registrants.is_empty());
    assert_eq!(s.generation, 5);
    assert!(n.is_empty());
}

#[test]
fn acquire_rules() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    // Not registered, or the wrong key: conflict.
    assert_eq!(acquire(&mut s, &A, 1, WriteExclusive), conflict());
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    assert_eq!(acquire(&mut s, &A, 2, WriteExclusive), conflict());
    acquire(&mut s, &A, 1, WriteExclusive).unwrap();
    // Again, same type: success; another type: conflict; another host: conflict.
    acquire(&mut s, &A, 1, WriteExclusive).unwrap();
    assert_eq!(acquire(&mut s, &A, 1, ExclusiveAccess), conflict());
    assert_eq!(acquire(&mut s, &B, 2, WriteExclusive), conflict());
    // Acquire does not move the generation.
    assert_eq!(s.generation, 2);
    // All Registrants: any registrant acquiring the same type succeeds.
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    acquire(&mut s, &A, 1, WriteExclusiveAllRegistrants).unwrap();
    acquire(&mut s, &B, 2, WriteExclusiveAllRegistrants).unwrap();
    assert!(s.is_holder(&B));
}

#[test]
fn unregistering_the_holder() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    acquire(&mut s, &A, 1, WriteExclusiveRegistrantsOnly).unwrap();
    let mut n = Notices::new();
    s.register(&A, RegisterAction::Unregister, false, keys(1, 0), &mut n).unwrap();
    assert_eq!(s.held, None);
    assert_eq!(n, vec![Notice { hostid: B, kind: NotificationType::ReservationReleased }]);
    // All Registrants: the reservation stays while a registrant remains.
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    acquire(&mut s, &A, 1, ExclusiveAccessAllRegistrants).unwrap();
    s.register(&A, RegisterAction::Unregister, false, keys(1, 0), &mut Notices::new()).unwrap();
    assert_eq!(s.held.map(|h| h.holder), Some(B));
    assert_eq!(s.check(&A, Access::Read), conflict());
    s.register(&B, RegisterAction::Unregister, false, keys(2, 0), &mut Notices::new()).unwrap();
    assert_eq!(s.held, None);
}

#[test]
fn preempt_the_holder() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    register(&mut s, &C, 3);
    acquire(&mut s, &A, 1, WriteExclusive).unwrap();
    let gen = s.generation;
    let n = preempt(&mut s, &B, 2, 1, ExclusiveAccess);
    assert_eq!(s.held.map(|h| (h.holder, h.rtype)), Some((B, ExclusiveAccess)));
    assert!(!s.registrants.iter().any(|r| r.hostid == A));
    assert_eq!(s.generation, gen + 1);
    assert!(n.contains(&Notice { hostid: A, kind: NotificationType::RegistrationPreempted }));
    // The type changed: the remaining registrants other than B hear the reservation was released.
    assert!(n.contains(&Notice { hostid: C, kind: NotificationType::ReservationReleased }));
    assert_eq!(s.check(&A, Access::Write), conflict());
    // PRKEY 0 against a holder that is someone else: Invalid Field.
    let mut n = Notices::new();
    assert_eq!(
        s.acquire(&C, AcquireAction::Preempt, WriteExclusive, keys(3, 0), &mut n),
        Err(Status::INVALID_FIELD.with_dnr())
    );
    // A PRKEY nobody has: conflict.
    assert_eq!(s.acquire(&C, AcquireAction::PreemptAndAbort, WriteExclusive, keys(3, 77), &mut n), conflict());
    // A PRKEY of a registrant that does not hold: that registrant goes, the reservation stays.
    register(&mut s, &A, 5);
    preempt(&mut s, &C, 3, 5, WriteExclusive);
    assert_eq!(s.held.map(|h| h.holder), Some(B));
    assert!(!s.registrants.iter().any(|r| r.hostid == A));
}

#[test]
fn preempt_without_reservation_and_all_registrants() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    let mut n = Notices::new();
    assert_eq!(s.acquire(&A, AcquireAction::Preempt, WriteExclusive, keys(1, 9), &mut n), conflict());
    preempt(&mut s, &A, 1, 2, WriteExclusive);
    assert_eq!(s.registrants.len(), 1);
    assert_eq!(s.held, None);
    // All Registrants with PRKEY 0: everyone else goes and the preempting host holds the new type.
    register(&mut s, &B, 2);
    register(&mut s, &C, 3);
    acquire(&mut s, &B, 2, WriteExclusiveAllRegistrants).unwrap();
    let n = preempt(&mut s, &A, 1, 0, ExclusiveAccess);
    assert_eq!(s.registrants.len(), 1);
    assert_eq!(s.held.map(|h| (h.holder, h.rtype)), Some((A, ExclusiveAccess)));
    assert_eq!(n.len(), 2);
}

#[test]
fn release_and_clear() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    acquire(&mut s, &A, 1, ExclusiveAccessRegistrantsOnly).unwrap();
    let mut n = Notices::new();
    // Wrong key: conflict. Not the holder: success, nothing happens. Wrong type: Invalid Field.
    assert_eq!(s.release(&A, ReleaseAction::Release, 4, keys(2, 0), &mut n), conflict());
    s.release(&B, ReleaseAction::Release, 4, keys(2, 0), &mut n).unwrap();
    assert!(s.held.is_some());
    assert_eq!(s.release(&A, ReleaseAction::Release, 1, keys(1, 0), &mut n), Err(Status::INVALID_FIELD.with_dnr()));
    let gen = s.generation;
    s.release(&A, ReleaseAction::Release, 4, keys(1, 0), &mut n).unwrap();
    assert_eq!(s.held, None);
    assert_eq!(s.generation, gen);
    assert_eq!(n, vec![Notice { hostid: B, kind: NotificationType::ReservationReleased }]);
    // Write Exclusive released: no notice.
    acquire(&mut s, &A, 1, WriteExclusive).unwrap();
    let mut n = Notices::new();
    s.release(&A, ReleaseAction::Release, 1, keys(1, 0), &mut n).unwrap();
    assert!(n.is_empty());
    // Clear: everything goes, the others hear they were preempted.
    acquire(&mut s, &A, 1, WriteExclusive).unwrap();
    s.release(&B, ReleaseAction::Clear, 0, keys(2, 0), &mut n).unwrap();
    assert_eq!(s, ReservationState { generation: gen + 1, ..ReservationState::default() });
    assert_eq!(n, vec![Notice { hostid: A, kind: NotificationType::ReservationPreempted }]);
}

#[test]
fn status_reports_holders() {
    use ReservationType::*;
    let mut s = ReservationState::default();
    register(&mut s, &A, 1);
    register(&mut s, &B, 2);
    acquire(&mut s, &B, 2, WriteExclusive).unwrap();
    let status = s.status();
    assert_eq!((status.generation, status.rtype, status.ptpls), (2, 1, false));
    assert_eq!(
        status.registrants.iter().map(|r| (r.hostid, r.rkey, r.holds)).collect::<Vec<_>>(),
        vec![(A, 1, false), (B, 2, true)]
    );
    s.release(&B, ReleaseAction::Release, 1, keys(2, 0), &mut Notices::new()).unwrap();
    acquire(&mut s, &B, 2, WriteExclusiveAllRegistrants).unwrap();
    assert!(s.status().registrants.iter().all(|r| r.holds));
}

#[test]
fn data_path_flag_and_persistence() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.json");
    let r = Reservations::new(Some(file.clone()), DEFAULT_MAX_REGISTRANTS);
    assert_eq!(r.check(&C, Access::Write), Ok(()));
    r.register(&A, RegisterAction::Register, false, Cptpl::Persist, keys(0, 1)).unwrap();
    assert!(r.ptpl());
    assert!(file.exists());
    r.update(|s, n| s.acquire(&A, AcquireAction::Acquire, ReservationType::WriteExclusive, keys(1, 0), n)).unwrap();
    assert_eq!(r.check(&C, Access::Write), conflict());
    assert_eq!(r.check(&A, Access::Write), Ok(()));
    // A restart restores the state.
    let restored = Reservations::new(Some(file.clone()), DEFAULT_MAX_REGISTRANTS);
    assert_eq!(*restored.read(), *r.read());
    assert_eq!(restored.check(&C, Access::Write), conflict());
    // PTPL off: the file goes; a restart starts empty.
    restored.set_ptpl(false).unwrap();
    assert!(!file.exists());
    assert_eq!(*Reservations::new(Some(file.clone()), DEFAULT_MAX_REGISTRANTS).read(), ReservationState::default());
    // A bad file: no reservations, no panic.
    std::fs::write(&file, "{").unwrap();
    assert_eq!(*Reservations::new(Some(file), DEFAULT_MAX_REGISTRANTS).read(), ReservationState::default());
    // Without a state directory PTPL cannot be enabled: Set Features is refused, CPTPL 11b is ignored (as nvmet).
    let volatile = Reservations::volatile();
    volatile.register(&A, RegisterAction::Register, false, Cptpl::Persist, keys(0, 1)).unwrap();
    assert!(!volatile.ptpl());
    assert_eq!(volatile.set_ptpl(true), Err(Status::INVALID_FIELD.with_dnr()));
}

#[test]
fn registrants_beyond_the_cap_get_insufficient_capacity_and_registered_hosts_go_on() {
    let r = Reservations::new(None, 2);
    let register = |host: &[u8; 16], action, crkey, nrkey| {
        r.register(host, action, false, Cptpl::NoChange, ReservationKeys { crkey, second: nrkey })
    };
    register(&A, RegisterAction::Register, 0, 1).unwrap();
    register(&B, RegisterAction::Register, 0, 2).unwrap();
    assert_eq!(register(&C, RegisterAction::Register, 0, 3), Err(Status::INSUFFICIENT_CAPACITY.with_dnr()));
    assert_eq!(r.read().generation, 2, "the refused Register changed nothing");
    // Hosts already registered still register again, replace their key and unregister; then there is room.
    register(&A, RegisterAction::Register, 0, 1).unwrap();
    register(&B, RegisterAction::Replace, 2, 5).unwrap();
    register(&A, RegisterAction::Unregister, 1, 0).unwrap();
    register(&C, RegisterAction::Register, 0, 3).unwrap();
    let hosts: Vec<_> = r.read().registrants.iter().map(|x| x.hostid).collect();
    assert_eq!(hosts, [B, C], "registration order");
}

#[test]
fn a_state_file_above_the_cap_is_restored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ns.json");
    let r = Reservations::new(Some(file.clone()), 3);
    for (i, host) in [A, B, C].iter().enumerate() {
        let keys = ReservationKeys { crkey: 0, second: i as u64 + 1 };
        r.register(host, RegisterAction::Register, false, Cptpl::Persist, keys).unwrap();
    }
    // Restarted with a lower cap: every registrant is back, and a new host finds no room.
    let restored = Reservations::new(Some(file), 1);
    assert_eq!(restored.read().registrants.len(), 3);
    let keys = ReservationKeys { crkey: 0, second: 9 };
    let d = [0xd; 16];
    assert_eq!(
        restored.register(&d, RegisterAction::Register, false, Cptpl::NoChange, keys),
        Err(Status::INSUFFICIENT_CAPACITY.with_dnr())
    );
}

#[test]
fn a_state_that_cannot_be_written_is_undone_once_no_later_change_depends_on_it() {
    // A state directory that cannot be made: a file is in its place.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("not-a-directory"), b"").unwrap();
    let r = Reservations::new(Some(dir.path().join("not-a-directory/ns.json")), DEFAULT_MAX_REGISTRANTS);
    let register = |host: &[u8; 16], key| {
        let keys = ReservationKeys { crkey: 0, second: key };
        r.register_deferred(host, RegisterAction::Register, false, Cptpl::Persist, keys).unwrap()
    };
    let (_, first) = register(&A, 1);
    let (_, second) = register(&B, 2);
    // The first write fails while the second change is pending: the state stays for the second write to decide.
    assert!(r.write_state(&first.unwrap()).is_err());
    assert_eq!(r.read().registrants.len(), 2);
    // The second fails too: back to the state on disk (none).
    assert!(r.write_state(&second.unwrap()).is_err());
    assert_eq!(*r.read(), ReservationState::default());
}

#[test]
fn a_later_state_on_disk_makes_an_earlier_write_moot() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ns.json");
    let r = Reservations::new(Some(file.clone()), DEFAULT_MAX_REGISTRANTS);
    let keys = |key| ReservationKeys { crkey: 0, second: key };
    let (_, first) = r.register_deferred(&A, RegisterAction::Register, false, Cptpl::Persist, keys(1)).unwrap();
    let (_, second) = r.register_deferred(&B, RegisterAction::Register, false, Cptpl::NoChange, keys(2)).unwrap();
    // The pool ran them out of order: the later state is written, the earlier one skipped.
    r.write_state(&second.unwrap()).unwrap();
    r.write_state(&first.unwrap()).unwrap();
    assert_eq!(Reservations::new(Some(file), DEFAULT_MAX_REGISTRANTS).read().registrants.len(), 2);
}
