//! Reservations of one namespace (NVMe Base 2.0 §8.19): its registrants (host identifier and reservation key),
//! the reservation held (type and holder), the generation counter and Persist Through Power Loss.
//!
//! Registrants are hosts, identified by the 128-bit Host Identifier of Connect (as Linux nvmet does): every
//! controller of one host ID shares its registration. The state lives behind an `RwLock` taken by the
//! reservation commands (any reactor) and, on the data path, only while a reservation is held: an `AtomicBool`
//! mirrors "a reservation exists", so a namespace without one costs an I/O command one atomic load and nothing
//! else (no lock, no allocation); with one, a read lock and one hash lookup of the host ID ([`Registrants`]). A
//! namespace has at most `max_registrants` registrants (`[target] max_registrants`): one more host's Register is
//! refused with Insufficient Capacity, so hosts with fresh host IDs cannot grow the list without bound.
//!
//! The commands' rules follow the spec and, where it leaves room, Linux nvmet (`drivers/nvme/target/pr.c`):
//! - Register on a host already registered succeeds when NRKEY equals its key, else Reservation Conflict;
//!   Unregister and Replace of a host not registered, or with a CRKEY that does not match (IEKEY clear), are
//!   Reservation Conflict; Replace of a host not registered is a conflict even with IEKEY set (nvmet).
//! - Acquire and Release with IEKEY set are Invalid Field (nvmet); the host must be registered with CRKEY.
//! - Preempt follows the spec's preempt rules in nvmet's order of cases (no reservation: unregister PRKEY's hosts;
//!   All Registrants with PRKEY 0: the preempting host holds alone; the holder preempting itself: the type changes;
//!   PRKEY the holder's: the preempting host holds, PRKEY's hosts go; another PRKEY: its hosts go, PRKEY 0 there is
//!   Invalid Field); preempt-and-abort is a
//!   preempt: commands of the preempted hosts already executing finish, and every later one is checked against
//!   the new state (each command is checked when it is submitted).
//! - Release by the holder naming a type other than the one held is Invalid Field in Command, as the spec's
//!   Reservation Release says (nvmet answers Reservation Conflict).
//! - The generation moves on every Register, Unregister and Replace that completes successfully (a host
//!   registering again with its own key too: Base 2.2 Figure 582, GEN, counts commands, not changes; nvmet does
//!   the same), every successful Preempt and Clear; it is reported in the Reservation Status.
//!
//! Notices (Reservation Notification log, asynchronous event) are returned to the caller as [`Notice`]s for
//! the hosts to tell; this module knows no controller. Persistence (PTPL) is [`super::reservation_file`]: while
//! PTPL is on, a reservation command writes the file under the write lock, so the I/O commands of that namespace
//! wait for the fsyncs when a reservation is held (they never do otherwise).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use nvmf_common::nvme::reservation::{
    AcquireAction, Cptpl, NotificationType, RegisterAction, RegisteredController, ReleaseAction, ReservationKeys,
    ReservationStatus, ReservationType, CNTLID_DYNAMIC,
};
use nvmf_common::nvme::Status;

use super::reservation_file::{self, ReservationFileError};

/// The default most registrants of a namespace (`[target] max_registrants`).
pub const DEFAULT_MAX_REGISTRANTS: usize = 1024;

/// What an I/O command does to the media, for the reservation check (Base 2.0 Figure "Command Behavior in the
/// Presence of a Reservation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read command group: Read, Compare.
    Read,
    /// Write command group: Write, Write Zeroes, Dataset Management, Flush.
    Write,
}

/// A registrant: a host and its reservation key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registrant {
    /// Host Identifier.
    pub hostid: [u8; 16],
    /// Reservation key.
    pub key: u64,
}

/// The registrants of a namespace in registration order, indexed by host ID: the data path's "is this host
/// registered" and a registrant's key are one hash lookup, not a scan of the list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registrants {
    order: Vec<[u8; 16]>,
    keys: HashMap<[u8; 16], u64>,
}

impl Registrants {
    /// Number of registrants.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Registrant `hostid`.
    pub fn get(&self, hostid: &[u8; 16]) -> Option<Registrant> {
        self.keys.get(hostid).map(|&key| Registrant { hostid: *hostid, key })
    }

    /// Whether `hostid` is registered.
    pub fn contains(&self, hostid: &[u8; 16]) -> bool {
        self.keys.contains_key(hostid)
    }

    /// The registrants in registration order.
    pub fn iter(&self) -> impl Iterator<Item = Registrant> + '_ {
        self.order.iter().map(|hostid| Registrant { hostid: *hostid, key: self.keys.get(hostid).copied().unwrap_or(0) })
    }

    /// The first registrant (the earliest registered).
    pub fn first(&self) -> Option<[u8; 16]> {
        self.order.first().copied()
    }

    /// Add `r` last; false (nothing changed) if its host is registered already.
    pub fn insert(&mut self, r: Registrant) -> bool {
        if self.keys.contains_key(&r.hostid) {
            return false;
        }
        self.keys.insert(r.hostid, r.key);
        self.order.push(r.hostid);
        true
    }

    /// Change the key of registrant `hostid`.
    fn set_key(&mut self, hostid: &[u8; 16], key: u64) {
        if let Some(k) = self.keys.get_mut(hostid) {
            *k = key;
        }
    }

    /// Remove registrant `hostid`.
    fn remove(&mut self, hostid: &[u8; 16]) {
        if self.keys.remove(hostid).is_some() {
            self.order.retain(|h| h != hostid);
        }
    }

    fn clear(&mut self) {
        self.order.clear();
        self.keys.clear();
    }
}

impl FromIterator<Registrant> for Registrants {
    /// Registrants in the iterator's order (a host listed again keeps its first place and key).
    fn from_iter<I: IntoIterator<Item = Registrant>>(iter: I) -> Self {
        let mut registrants = Registrants::default();
        for r in iter {
            registrants.insert(r);
        }
        registrants
    }
}

/// The reservation held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Its type.
    pub rtype: ReservationType,
    /// The host that acquired it (for the All Registrants types, every registrant holds it; this one is
    /// reported first).
    pub holder: [u8; 16],
}

/// A namespace's reservation state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservationState {
    /// Generation (Reservation Status GEN).
    pub generation: u32,
    /// Registrants in registration order.
    pub registrants: Registrants,
    /// The reservation, if one is held.
    pub held: Option<Held>,
    /// Persist Through Power Loss State.
    pub ptpl: bool,
}

/// Something a host must be told (Reservation Notification log and asynchronous event), per the spec: every
/// controller of `hostid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    /// The host told.
    pub hostid: [u8; 16],
    /// What happened.
    pub kind: NotificationType,
}

/// The result of a reservation command that changed nothing the host must hear of, or the notices it raised.
pub type Notices = Vec<Notice>;

fn conflict() -> Status {
    Status::RESERVATION_CONFLICT.with_dnr()
}

fn invalid_field() -> Status {
    Status::INVALID_FIELD.with_dnr()
}

impl ReservationState {
    fn registrant(&self, hostid: &[u8; 16]) -> Option<Registrant> {
        self.registrants.get(hostid)
    }

    fn is_registered(&self, hostid: &[u8; 16]) -> bool {
        self.registrants.contains(hostid)
    }

    /// Whether `hostid` holds the reservation (every registrant does for the All Registrants types).
    pub fn is_holder(&self, hostid: &[u8; 16]) -> bool {
        match self.held {
            Some(h) if h.rtype.all_registrants() => self.is_registered(hostid),
            Some(h) => &h.holder == hostid,
            None => false,
        }
    }

    /// The reservation check of an I/O command of `hostid`: `Ok` or Reservation Conflict.
    pub fn check(&self, hostid: &[u8; 16], access: Access) -> Result<(), Status> {
        let Some(held) = self.held else { return Ok(()) };
        let has_access =
            if held.rtype.registrants_have_access() { self.is_registered(hostid) } else { &held.holder == hostid };
        if has_access || (access == Access::Read && !held.rtype.exclusive_access()) {
            return Ok(());
        }
        Err(conflict())
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Remove registrant `hostid`; if it held the reservation, the reservation goes to another registrant
    /// (All Registrants types, while any remain) or is released (with a Reservation Released notice to the other
    /// registrants for the Registrants Only types).
    fn remove(&mut self, hostid: &[u8; 16], notices: &mut Notices) {
        self.registrants.remove(hostid);
        let Some(held) = self.held else { return };
        if held.rtype.all_registrants() {
            match self.registrants.first() {
                Some(next) => self.held = Some(Held { holder: next, ..held }),
                None => self.held = None,
            }
        } else if &held.holder == hostid {
            self.held = None;
            if held.rtype.registrants_have_access() {
                self.notify_others(hostid, NotificationType::ReservationReleased, notices);
            }
        }
    }

    fn notify_others(&self, except: &[u8; 16], kind: NotificationType, notices: &mut Notices) {
        notices
            .extend(self.registrants.iter().filter(|r| &r.hostid != except).map(|r| Notice { hostid: r.hostid, kind }));
    }

    /// Reservation Register.
    pub fn register(
        &mut self,
        hostid: &[u8; 16],
        action: RegisterAction,
        iekey: bool,
        keys: ReservationKeys,
        notices: &mut Notices,
    ) -> Result<(), Status> {
        let current = self.registrant(hostid);
        match action {
            // The same key again changes nothing but completes successfully, so the generation moves (below).
            RegisterAction::Register => match current {
                Some(r) if r.key == keys.second => {}
                Some(_) => return Err(conflict()),
                None => {
                    self.registrants.insert(Registrant { hostid: *hostid, key: keys.second });
                }
            },
            RegisterAction::Unregister => match current {
                Some(r) if iekey || r.key == keys.crkey => self.remove(hostid, notices),
                _ => return Err(conflict()),
            },
            RegisterAction::Replace => match current {
                Some(r) if iekey || r.key == keys.crkey => self.registrants.set_key(hostid, keys.second),
                _ => return Err(conflict()),
            },
        }
        self.bump();
        Ok(())
    }

    /// Unregister every registrant with key `prkey` (other than `hostid` when `spare_self`), telling each
    /// preempted host other than `hostid`; false if none had it.
    fn unregister_key(&mut self, hostid: &[u8; 16], prkey: u64, spare_self: bool, notices: &mut Notices) -> bool {
        let victims: Vec<[u8; 16]> = self
            .registrants
            .iter()
            .filter(|r| r.key == prkey && !(spare_self && &r.hostid == hostid))
            .map(|r| r.hostid)
            .collect();
        for victim in &victims {
            self.remove(victim, notices);
            if victim != hostid {
                notices.push(Notice { hostid: *victim, kind: NotificationType::RegistrationPreempted });
            }
        }
        !victims.is_empty()
    }

    /// Reservation Acquire.
    pub fn acquire(
        &mut self,
        hostid: &[u8; 16],
        action: AcquireAction,
        rtype: ReservationType,
        keys: ReservationKeys,
        notices: &mut Notices,
    ) -> Result<(), Status> {
        match self.registrant(hostid) {
            Some(r) if r.key == keys.crkey => {}
            _ => return Err(conflict()),
        }
        if action == AcquireAction::Acquire {
            return match self.held {
                None => {
                    self.held = Some(Held { rtype, holder: *hostid });
                    Ok(())
                }
                Some(h) if h.rtype == rtype && self.is_holder(hostid) => Ok(()),
                Some(_) => Err(conflict()),
            };
        }
        let prkey = keys.second;
        let Some(held) = self.held else {
            // No reservation: preempt unregisters the hosts registered with PRKEY.
            if !self.unregister_key(hostid, prkey, false, notices) {
                return Err(conflict());
            }
            self.bump();
            return Ok(());
        };
        if held.rtype.all_registrants() {
            if prkey == 0 {
                // Every other registrant goes; the preempting host holds a reservation of the new type.
                self.held = Some(Held { rtype, holder: *hostid });
                let others: Vec<[u8; 16]> = self.registrants.iter().map(|r| r.hostid).filter(|h| h != hostid).collect();
                for other in others {
                    self.remove(&other, notices);
                    notices.push(Notice { hostid: other, kind: NotificationType::RegistrationPreempted });
                }
            } else if !self.unregister_key(hostid, prkey, false, notices) {
                return Err(conflict());
            }
            self.bump();
            return Ok(());
        }
        if &held.holder == hostid {
            // The holder preempts itself: the type may change.
            self.held = Some(Held { rtype, holder: *hostid });
            if held.rtype != rtype {
                self.notify_others(hostid, NotificationType::ReservationReleased, notices);
            }
            self.bump();
            return Ok(());
        }
        let holder_key = self.registrant(&held.holder).map(|r| r.key);
        if holder_key == Some(prkey) {
            self.held = Some(Held { rtype, holder: *hostid });
            self.unregister_key(hostid, prkey, true, notices);
            if held.rtype != rtype {
                self.notify_others(hostid, NotificationType::ReservationReleased, notices);
            }
        } else if prkey == 0 {
            return Err(invalid_field());
        } else if !self.unregister_key(hostid, prkey, false, notices) {
            return Err(conflict());
        }
        self.bump();
        Ok(())
    }

    /// Reservation Release.
    pub fn release(
        &mut self,
        hostid: &[u8; 16],
        action: ReleaseAction,
        rtype: u8,
        keys: ReservationKeys,
        notices: &mut Notices,
    ) -> Result<(), Status> {
        match self.registrant(hostid) {
            Some(r) if r.key == keys.crkey => {}
            _ => return Err(conflict()),
        }
        match action {
            ReleaseAction::Release => {
                let Some(held) = self.held else { return Ok(()) };
                if !self.is_holder(hostid) {
                    return Ok(());
                }
                if held.rtype.to_u8() != rtype {
                    return Err(invalid_field());
                }
                self.held = None;
                if held.rtype.registrants_have_access() {
                    self.notify_others(hostid, NotificationType::ReservationReleased, notices);
                }
            }
            ReleaseAction::Clear => {
                self.notify_others(hostid, NotificationType::ReservationPreempted, notices);
                self.held = None;
                self.registrants.clear();
                self.bump();
            }
        }
        Ok(())
    }

    /// The Reservation Status data structure (registrants in registration order).
    pub fn status(&self) -> ReservationStatus {
        ReservationStatus {
            generation: self.generation,
            rtype: self.held.map_or(0, |h| h.rtype.to_u8()),
            ptpls: self.ptpl,
            registrants: self
                .registrants
                .iter()
                .map(|r| RegisteredController {
                    cntlid: CNTLID_DYNAMIC,
                    holds: self.is_holder(&r.hostid),
                    hostid: r.hostid,
                    rkey: r.key,
                })
                .collect(),
        }
    }
}

/// A state to write to the namespace's file (PTPL): the `seq`-th change, and the state after it.
#[derive(Debug, Clone)]
pub struct StateWrite {
    seq: u64,
    state: ReservationState,
}

/// The reservations of one namespace: the state, its data-path mirror and where it persists.
#[derive(Debug)]
pub struct Reservations {
    /// A reservation is held: the data path reads the state only then.
    held: AtomicBool,
    state: RwLock<ReservationState>,
    /// Changes to persist so far (moved under the state's write lock): each [`StateWrite`]'s `seq`.
    changes: AtomicU64,
    /// The last state on disk (or restored from it) and its `seq`: later writes of older states are skipped, and a
    /// write that fails puts the state back to this one.
    durable: Mutex<(u64, ReservationState)>,
    /// The file the state persists in while PTPL is on (`None`: no state directory; PTPL cannot be enabled).
    file: Option<PathBuf>,
    /// The most registrants; one more host's Register is refused with Insufficient Capacity.
    max_registrants: usize,
}

impl Reservations {
    /// Reservations of at most `max_registrants` registrants persisting in `file` (when PTPL is enabled), restored
    /// from it if it exists. A file that cannot be read or is invalid is logged (naming it) and the namespace starts
    /// without reservations; a valid one is restored whole, even above `max_registrants` (lowered since it was
    /// written): new hosts cannot register until enough have gone.
    pub fn new(file: Option<PathBuf>, max_registrants: usize) -> Self {
        let state = match file.as_deref().map(reservation_file::load) {
            Some(Ok(Some(state))) => {
                if state.registrants.len() > max_registrants {
                    tracing::warn!(
                        registrants = state.registrants.len(),
                        max_registrants,
                        "reservations restored with more registrants than max_registrants: new hosts cannot register"
                    );
                }
                tracing::info!(file = %file.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
                    registrants = state.registrants.len(), held = state.held.is_some(),
                    "reservations restored (persist through power loss)");
                state
            }
            Some(Ok(None)) | None => ReservationState::default(),
            Some(Err(e)) => {
                tracing::error!(error = %e, "reservation state not restored; the namespace starts without reservations");
                ReservationState::default()
            }
        };
        Reservations {
            held: AtomicBool::new(state.held.is_some()),
            durable: Mutex::new((0, state.clone())),
            state: RwLock::new(state),
            changes: AtomicU64::new(0),
            file,
            max_registrants,
        }
    }

    /// Reservations that never persist, with the default registrant limit.
    pub fn volatile() -> Self {
        Reservations::new(None, DEFAULT_MAX_REGISTRANTS)
    }

    /// Whether PTPL can be enabled (a state file is configured).
    pub fn can_persist(&self) -> bool {
        self.file.is_some()
    }

    /// The data-path check of an I/O command of `hostid`: one atomic load while no reservation is held.
    #[inline]
    pub fn check(&self, hostid: &[u8; 16], access: Access) -> Result<(), Status> {
        if !self.held.load(Ordering::Acquire) {
            return Ok(());
        }
        self.read().check(hostid, access)
    }

    /// The current state.
    pub fn read(&self) -> RwLockReadGuard<'_, ReservationState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, ReservationState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a reservation command on the state and publish whether a reservation is held; when the change must
    /// reach the namespace's file (PTPL on, or just turned off), the [`StateWrite`] to hand to
    /// [`Reservations::write_state`] before the command completes. The state lock is not held while the file is
    /// written: the I/O commands of the namespace never wait for the fsyncs.
    pub fn update_deferred(
        &self,
        f: impl FnOnce(&mut ReservationState, &mut Notices) -> Result<(), Status>,
    ) -> Result<(Notices, Option<StateWrite>), Status> {
        let mut notices = Notices::new();
        let mut state = self.write();
        let before = state.clone();
        f(&mut state, &mut notices)?;
        let write = (*state != before && (state.ptpl || before.ptpl) && self.file.is_some()).then(|| {
            let seq = self.changes.fetch_add(1, Ordering::AcqRel) + 1;
            StateWrite { seq, state: state.clone() }
        });
        self.held.store(state.held.is_some(), Ordering::Release);
        Ok((notices, write))
    }

    /// [`Reservations::update_deferred`] with the file written here, on the caller's thread, before it returns; a
    /// state that cannot be written is undone and the command fails with Internal Error.
    pub fn update(
        &self,
        f: impl FnOnce(&mut ReservationState, &mut Notices) -> Result<(), Status>,
    ) -> Result<Notices, Status> {
        self.write_now(self.update_deferred(f)?)
    }

    /// Write a deferred command's state here and now: its notices, or Internal Error if the state was not written.
    fn write_now(&self, (notices, write): (Notices, Option<StateWrite>)) -> Result<Notices, Status> {
        match write.map(|w| self.write_state(&w)) {
            Some(Err(e)) => {
                tracing::error!(error = %e, "reservation state not persisted; command failed");
                Err(Status::INTERNAL_ERROR.with_dnr())
            }
            _ => Ok(notices),
        }
    }

    /// Write `w` to the namespace's file (PTPL on) or remove the file (PTPL off), unless a later state is there
    /// already (it includes this change). On failure the state goes back to the last one on disk, if no later
    /// change came meanwhile (then that one's write decides), and the error is returned for the command to fail.
    /// Blocks for the fsyncs: called on a worker thread, or where blocking is acceptable.
    pub fn write_state(&self, w: &StateWrite) -> Result<(), ReservationFileError> {
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        if w.seq <= durable.0 {
            return Ok(());
        }
        match self.persist(&w.state) {
            Ok(()) => {
                *durable = (w.seq, w.state.clone());
                Ok(())
            }
            Err(e) => {
                let mut state = self.write();
                if self.changes.load(Ordering::Acquire) == w.seq {
                    *state = durable.1.clone();
                    self.held.store(state.held.is_some(), Ordering::Release);
                }
                Err(e)
            }
        }
    }

    /// Write the state (PTPL on) or remove the file (PTPL off).
    fn persist(&self, state: &ReservationState) -> Result<(), ReservationFileError> {
        let Some(file) = &self.file else { return Ok(()) };
        if state.ptpl {
            reservation_file::store(file, state)
        } else {
            reservation_file::remove(file)
        }
    }

    /// Reservation Register with its CPTPL. Without a state file PTPL cannot be on (RESCAP says so) and a CPTPL
    /// of 11b is ignored, as Linux nvmet ignores CPTPL: the Linux host's block-layer `pr_register` asks for it on
    /// every registration, and refusing would fail them all.
    pub fn register(
        &self,
        hostid: &[u8; 16],
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
        keys: ReservationKeys,
    ) -> Result<Notices, Status> {
        self.write_now(self.register_deferred(hostid, action, iekey, cptpl, keys)?)
    }

    /// [`Reservations::register`], the file written later ([`Reservations::update_deferred`]).
    pub fn register_deferred(
        &self,
        hostid: &[u8; 16],
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
        keys: ReservationKeys,
    ) -> Result<(Notices, Option<StateWrite>), Status> {
        let cptpl = if cptpl == Cptpl::Persist && !self.can_persist() { Cptpl::NoChange } else { cptpl };
        self.update_deferred(|state, notices| {
            let new_host = action == RegisterAction::Register && !state.is_registered(hostid);
            if new_host && state.registrants.len() >= self.max_registrants {
                return Err(Status::INSUFFICIENT_CAPACITY.with_dnr());
            }
            state.register(hostid, action, iekey, keys, notices)?;
            match cptpl {
                Cptpl::NoChange => {}
                Cptpl::Clear => state.ptpl = false,
                Cptpl::Persist => state.ptpl = true,
            }
            Ok(())
        })
    }

    /// Set Features Reservation Persistence (83h).
    pub fn set_ptpl(&self, ptpl: bool) -> Result<(), Status> {
        if ptpl && !self.can_persist() {
            return Err(invalid_field());
        }
        self.update(|state, _| {
            state.ptpl = ptpl;
            Ok(())
        })
        .map(drop)
    }

    /// Persist Through Power Loss State.
    pub fn ptpl(&self) -> bool {
        self.read().ptpl
    }
}

#[cfg(test)]
mod tests;
