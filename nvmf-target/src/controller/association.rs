//! The controller of an association: what the admin queue and the I/O queues of one host connection share.
//!
//! A [`Controller`] is created by an admin-queue Connect and lives until that queue goes away (disconnect,
//! keep-alive expiry, subsystem removal). Its admin-level state — CC/CSTS, features, the asynchronous event
//! queue, the Changed Namespace List and Error Information logs, the I/O queues connected — is behind a
//! `Mutex`, taken by admin commands, at Connect and by control-plane notifications, never per I/O. What I/O
//! queues must see cheaply is mirrored in atomics: `ready` (CSTS.RDY), `io_epoch` (bumped by a controller
//! reset: I/O queues of an older epoch end), `terminated`, the write-cache enable and KATO, and the time of the
//! latest I/O command (Traffic Based Keep Alive: I/O restarts the keep-alive timer, published by each I/O queue at
//! most every [`TRAFFIC_GRANULARITY`], so the admin queue's timer sees it without a write per command).
//!
//! Counters (`crate::counters`): every queue owns a [`QueueCounters`] whose fields are atomics written by that queue's
//! reactor alone with a plain load + store (no locked read-modify-write on the data path); the SMART log sums them on
//! demand over the subsystem's live controllers, plus the totals of queues and associations that went away.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::fabrics::property::{
    Capabilities, ControllerConfiguration, ControllerStatus, ShutdownNotification, ShutdownStatus, Version,
};
use nvmf_common::nvme::admin::AsyncEvent;
use nvmf_common::nvme::identify::NSID_LIST_ENTRIES;
use nvmf_common::nvme::log_page::ErrorInformationEntry;
use nvmf_common::nvme::reservation::{NotificationLog, NotificationType};
use nvmf_common::nvme::Status;

use super::subsystem::Subsystem;
use super::EventNotifier;

use crate::counters::{CounterSnapshot, QueueCounters};

/// Version reported in VS and Identify Controller VER: NVMe 1.3.0 (everything a 1.3 fabrics controller
/// needs is implemented; 2.0 would add mandatory Identify CNS values and log pages we do not serve).
pub const VERSION: Version = Version::V1_3;

/// Asynchronous Event Request Limit, 0's based (AERL): up to 4 held AERs.
pub const AERL: u8 = 3;

/// Error Information Log Entries, 0's based (ELPE): the newest 16 errors are kept.
pub const ELPE: u8 = 15;

/// Reservation Notification log pages a controller keeps unread; older ones are dropped (the host sees the gap in
/// the Log Page Count).
pub const RESERVATION_LOG_ENTRIES: usize = 64;

/// How often at most an I/O queue publishes its latest command's time to its controller (Traffic Based Keep
/// Alive): the published time can be this much older than the latest I/O command, so the keep-alive timer adds it.
pub const TRAFFIC_GRANULARITY: Duration = Duration::from_millis(100);

/// Default Keep Alive Support (KAS) in 100 ms units: the timer's granularity (1 s). KATO is rounded up to a
/// multiple of it. [`TargetParams::kas`](super::TargetParams::kas) sets it.
pub const DEFAULT_KAS: u16 = 10;

/// CAP.TO: worst-case time for CSTS.RDY to follow CC.EN, in 500 ms units (we are immediate; hosts wait
/// at most this long).
const CAP_TO: u8 = 15;

/// Event kinds that are masked once reported until the host reads their log page (NVMe Base 2.0 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    NamespaceAttribute,
    DiscoveryLog,
    AnaChange,
    /// Reservation Log Page Available (not gated by Asynchronous Event Configuration: the namespace's Reservation
    /// Notification Mask decides).
    ReservationLog,
}

impl EventKind {
    fn bit(self) -> u32 {
        match self {
            EventKind::NamespaceAttribute => 1 << 0,
            EventKind::DiscoveryLog => 1 << 1,
            EventKind::AnaChange => 1 << 2,
            EventKind::ReservationLog => 1 << 3,
        }
    }

    /// The Asynchronous Event Configuration bit enabling the event.
    fn aec_bit(self) -> u32 {
        match self {
            EventKind::NamespaceAttribute => 1 << 8,
            EventKind::DiscoveryLog => 1 << 31,
            EventKind::AnaChange => 1 << 11,
            EventKind::ReservationLog => 0,
        }
    }

    fn event(self) -> AsyncEvent {
        match self {
            EventKind::NamespaceAttribute => AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED,
            EventKind::DiscoveryLog => AsyncEvent::DISCOVERY_LOG_PAGE_CHANGE,
            EventKind::AnaChange => AsyncEvent::ANA_CHANGE,
            EventKind::ReservationLog => AsyncEvent::RESERVATION_LOG_PAGE_AVAILABLE,
        }
    }
}

/// What a CC write asks the caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CcOutcome {
    /// Done; complete the Property Set.
    Done,
    /// CC.SHN was set: flush every namespace, then call [`Controller::shutdown_complete`].
    Shutdown,
}

/// A queue's wake-up callback, printable.
#[derive(Clone)]
pub(crate) struct Notifier(pub(crate) EventNotifier);

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notifier")
    }
}

impl Notifier {
    pub(crate) fn notify(&self) {
        (self.0)();
    }
}

/// A queue connected to the controller: what the controller keeps of it.
#[derive(Debug)]
pub(crate) struct QueueEntry {
    pub(crate) qid: u16,
    /// The controller's I/O epoch when it connected (I/O queues).
    pub(crate) epoch: u32,
    pub(crate) counters: Arc<QueueCounters>,
    pub(crate) notifier: Option<Notifier>,
    /// SQSIZE, 0's based.
    pub(crate) sqsize: u16,
    pub(crate) trtype: TransportType,
    /// The host's transport address.
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) connected_at: SystemTime,
}

impl QueueEntry {
    fn snapshot(&self) -> QueueSnapshot {
        QueueSnapshot {
            qid: self.qid,
            depth: u32::from(self.sqsize) + 1,
            outstanding: self.counters.outstanding(),
            trtype: self.trtype,
            peer: self.peer,
            connected_at: self.connected_at,
            counters: self.counters.snapshot(),
        }
    }
}

/// A connected queue as `nvmf-target list` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Queue ID (0: admin).
    pub qid: u16,
    /// Entries (SQSIZE + 1).
    pub depth: u32,
    /// Commands it holds now.
    pub outstanding: u32,
    /// The transport carrying it.
    pub trtype: TransportType,
    /// The host's transport address.
    pub peer: Option<SocketAddr>,
    /// When its Fabrics Connect completed.
    pub connected_at: SystemTime,
    /// Its counters.
    pub counters: CounterSnapshot,
}

/// The Changed Namespace List (log 04h) being accumulated.
#[derive(Debug, Default)]
pub(crate) struct ChangedNamespaces {
    pub(crate) nsids: Vec<u32>,
    pub(crate) overflow: bool,
}

/// The Reservation Notification log pages not yet read (log 80h), and the controller's Reservation Notification
/// Masks (feature 82h).
#[derive(Debug, Default)]
pub(crate) struct ReservationLog {
    /// The Log Page Count of the latest page (0: none yet; wraps to 1).
    pub(crate) count: u64,
    pub(crate) pages: VecDeque<NotificationLog>,
    /// The mask of each namespace this controller's host set (none: 0, nothing masked). Per controller, so one host
    /// cannot mask the notices another host's controllers get (nvmet and SPDK keep one mask per namespace).
    pub(crate) masks: BTreeMap<u32, u32>,
}

impl ReservationLog {
    /// The oldest unread page (with the number of pages after it), or the empty page; reading removes it.
    pub(crate) fn take(&mut self) -> NotificationLog {
        match self.pages.pop_front() {
            Some(page) => NotificationLog { available: u8::try_from(self.pages.len()).unwrap_or(u8::MAX), ..page },
            None => NotificationLog::EMPTY,
        }
    }
}

/// Admin-level state, behind [`Controller`]'s mutex.
#[derive(Debug)]
pub(crate) struct ControllerState {
    pub(crate) cc: ControllerConfiguration,
    pub(crate) csts: ControllerStatus,
    pub(crate) aec: u32,
    pub(crate) granted_io_queues: u16,
    admin: Option<QueueEntry>,
    io_queues: Vec<QueueEntry>,
    events: VecDeque<AsyncEvent>,
    masked: u32,
    pub(crate) changed: ChangedNamespaces,
    pub(crate) error_count: u64,
    pub(crate) errors: VecDeque<ErrorInformationEntry>,
    pub(crate) reservation_log: ReservationLog,
    retired: CounterSnapshot,
}

impl ControllerState {
    /// Number of I/O queues connected.
    pub(crate) fn io_queue_count(&self) -> usize {
        self.io_queues.len()
    }
}

/// The controller of one association (NVMe-oF dynamic controller model).
#[derive(Debug)]
pub struct Controller {
    cntlid: u16,
    /// The listener its admin queue connected through (ANA states and events are per listener).
    port_id: u16,
    subsystem: Arc<Subsystem>,
    hostnqn: String,
    hostid: [u8; 16],
    max_io_queues: u16,
    ready: AtomicBool,
    io_epoch: AtomicU32,
    terminated: AtomicBool,
    event_pending: AtomicBool,
    write_cache: AtomicBool,
    kato_ms: AtomicU32,
    /// Keep Alive Support: the timer granularity in 100 ms units.
    kas: u16,
    /// The origin of `io_traffic_ns`.
    created: Instant,
    /// Nanoseconds after `created`, plus one (0: none yet), of the latest I/O command an I/O queue published.
    io_traffic_ns: AtomicU64,
    state: Mutex<ControllerState>,
}

/// KATO rounded up to the KAS granularity (0 stays 0: disabled).
pub(crate) fn round_kato(kato_ms: u32, kas: u16) -> u32 {
    let unit = u32::from(kas.max(1)) * 100;
    kato_ms.div_ceil(unit).saturating_mul(unit)
}

impl Controller {
    /// A controller `cntlid` of `subsystem` for host `hostnqn`/`hostid`, disabled, with KATO `kato_ms` and the
    /// target's keep-alive granularity and I/O queue limit.
    pub(crate) fn new(
        cntlid: u16,
        subsystem: Arc<Subsystem>,
        hostnqn: &str,
        hostid: [u8; 16],
        kato_ms: u32,
        params: &super::TargetParams,
        write_cache: bool,
    ) -> Self {
        let (kas, max_io_queues) = (params.kas, params.max_io_queues);
        let aec = if subsystem.is_discovery() {
            EventKind::DiscoveryLog.aec_bit()
        } else {
            EventKind::NamespaceAttribute.aec_bit() | EventKind::AnaChange.aec_bit()
        };
        Controller {
            cntlid,
            port_id: 0,
            hostnqn: hostnqn.to_owned(),
            hostid,
            max_io_queues,
            ready: AtomicBool::new(false),
            io_epoch: AtomicU32::new(0),
            terminated: AtomicBool::new(false),
            event_pending: AtomicBool::new(false),
            write_cache: AtomicBool::new(write_cache),
            kato_ms: AtomicU32::new(round_kato(kato_ms, kas)),
            kas,
            created: Instant::now(),
            io_traffic_ns: AtomicU64::new(0),
            state: Mutex::new(ControllerState {
                cc: ControllerConfiguration::default(),
                csts: ControllerStatus::default(),
                // Like Linux nvmet, the notices we support start enabled: a host that never sets the feature
                // still learns about namespace changes.
                aec,
                granted_io_queues: max_io_queues,
                admin: None,
                io_queues: Vec::new(),
                events: VecDeque::with_capacity(4),
                masked: 0,
                changed: ChangedNamespaces::default(),
                error_count: 0,
                errors: VecDeque::with_capacity(usize::from(ELPE) + 1),
                reservation_log: ReservationLog::default(),
                retired: CounterSnapshot::default(),
            }),
            subsystem,
        }
    }

    /// The same controller, reached through listener `port_id` (its admin queue's [`TransportInfo::port_id`]).
    ///
    /// [`TransportInfo::port_id`]: super::TransportInfo::port_id
    pub(crate) fn on_port(self, port_id: u16) -> Self {
        Controller { port_id, ..self }
    }

    /// The listener (port ID) the controller's admin queue connected through.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// Controller ID.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The subsystem.
    pub fn subsystem(&self) -> &Arc<Subsystem> {
        &self.subsystem
    }

    /// Host NQN from the admin Connect.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// Host Identifier from the admin Connect.
    pub fn hostid(&self) -> [u8; 16] {
        self.hostid
    }

    /// Host Identifier from the admin Connect, by reference (the per-I/O reservation check).
    #[inline]
    pub fn hostid_ref(&self) -> &[u8; 16] {
        &self.hostid
    }

    /// True for a discovery controller.
    pub fn is_discovery(&self) -> bool {
        self.subsystem.is_discovery()
    }

    /// CSTS.RDY.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The association has ended; its queues must close.
    pub fn is_terminated(&self) -> bool {
        self.terminated.load(Ordering::Acquire)
    }

    /// Current I/O queue epoch; a controller reset bumps it and every I/O queue of an older epoch ends.
    pub fn io_epoch(&self) -> u32 {
        self.io_epoch.load(Ordering::Acquire)
    }

    /// Keep Alive Support (Identify KAS): the keep-alive timer's granularity in 100 ms units.
    pub fn kas(&self) -> u16 {
        self.kas
    }

    /// Keep Alive Timeout in milliseconds (0: disabled), rounded up to KAS.
    pub fn kato_ms(&self) -> u32 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    /// Record I/O traffic at `at` (an I/O queue's command arrival; see [`TRAFFIC_GRANULARITY`]).
    pub(crate) fn note_io_traffic(&self, at: Instant) {
        let ns = u64::try_from(at.saturating_duration_since(self.created).as_nanos()).unwrap_or(u64::MAX - 1);
        self.io_traffic_ns.fetch_max(ns + 1, Ordering::Relaxed);
    }

    /// The latest I/O traffic published, plus [`TRAFFIC_GRANULARITY`] for what the queues have not published
    /// yet: the keep-alive timer restarts there.
    pub fn io_traffic(&self) -> Option<Instant> {
        match self.io_traffic_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.created + Duration::from_nanos(ns - 1) + TRAFFIC_GRANULARITY),
        }
    }

    /// Volatile write cache enabled (Set Features 06h); when disabled every write is FUA.
    pub fn write_cache_enabled(&self) -> bool {
        self.write_cache.load(Ordering::Relaxed)
    }

    pub(crate) fn set_write_cache(&self, enabled: bool) {
        self.write_cache.store(enabled, Ordering::Relaxed);
    }

    pub(crate) fn set_kato(&self, kato_ms: u32) {
        self.kato_ms.store(round_kato(kato_ms, self.kas), Ordering::Relaxed);
    }

    /// Maximum I/O queues the target grants.
    pub fn max_io_queues(&self) -> u16 {
        self.max_io_queues
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// CSTS as the host reads it.
    pub fn csts(&self) -> ControllerStatus {
        self.lock().csts
    }

    /// CC as the host last wrote it.
    pub fn cc(&self) -> ControllerConfiguration {
        self.lock().cc
    }

    /// CAP for this controller.
    pub fn cap(max_queue_entries: u32) -> Capabilities {
        Capabilities {
            // 0's based; the target parameters keep max_queue_entries within 2..=32768.
            mqes: u16::try_from(max_queue_entries.saturating_sub(1)).unwrap_or(u16::MAX),
            cqr: true,
            to: CAP_TO,
            css: Capabilities::CSS_NVM,
            mpsmin: 0,
            mpsmax: 0,
            ..Capabilities::default()
        }
    }

    /// Register the admin queue (its counters and wake-up callback).
    pub(crate) fn attach_admin_queue(&self, entry: QueueEntry) {
        self.lock().admin = Some(entry);
    }

    /// The connected queues, the admin queue first, then the I/O queues by QID.
    pub fn queues(&self) -> Vec<QueueSnapshot> {
        let state = self.lock();
        let mut queues: Vec<_> = state.admin.iter().chain(&state.io_queues).map(QueueEntry::snapshot).collect();
        queues.sort_by_key(|q| q.qid);
        queues
    }

    /// Handle a CC write (NVMe Base 2.0 §3.6 and Linux nvmet's `nvmet_update_cc`): enabling checks the
    /// configuration (IOSQES 6 / IOCQES 4 on I/O controllers, MPS 0, AMS 0, CSS NVM or admin-only) and sets
    /// CSTS.RDY or CSTS.CFS; disabling resets the controller (CSTS.RDY clear, every I/O queue ends); setting
    /// SHN starts a shutdown the caller completes.
    pub(crate) fn set_cc(&self, value: u32) -> Result<CcOutcome, Status> {
        let new = ControllerConfiguration::from_u32(value).map_err(|_| Status::INVALID_FIELD.with_dnr())?;
        let mut state = self.lock();
        let old = state.cc;
        state.cc = new;
        let mut outcome = CcOutcome::Done;
        if new.en && !old.en {
            let io_sizes_ok = self.is_discovery() || (new.iosqes == 6 && new.iocqes == 4);
            // CSS 000b NVM, 111b admin only (CAP.CSS advertises NVM; Linux nvmet accepts both).
            let css_ok = new.css == 0 || new.css == 0b111;
            if io_sizes_ok && new.mps == 0 && new.ams == 0 && css_ok {
                state.csts.rdy = true;
                state.csts.cfs = false;
                self.ready.store(true, Ordering::Release);
                tracing::debug!(cntlid = self.cntlid, "controller enabled");
            } else {
                tracing::warn!(cntlid = self.cntlid, cc = value, "invalid controller configuration: CSTS.CFS");
                state.csts.cfs = true;
            }
        }
        if !new.en && old.en {
            self.reset_locked(&mut state);
        }
        if new.shn != ShutdownNotification::None && old.shn == ShutdownNotification::None {
            state.csts.shst = ShutdownStatus::Occurring;
            outcome = CcOutcome::Shutdown;
        }
        if new.shn == ShutdownNotification::None && old.shn != ShutdownNotification::None {
            state.csts.shst = ShutdownStatus::Normal;
        }
        Ok(outcome)
    }

    /// Controller reset: CSTS.RDY and CFS clear, shutdown status normal, every I/O queue of the association
    /// ends (their queues see the new epoch and close).
    fn reset_locked(&self, state: &mut ControllerState) {
        state.csts.rdy = false;
        state.csts.cfs = false;
        state.csts.shst = ShutdownStatus::Normal;
        self.ready.store(false, Ordering::Release);
        self.io_epoch.fetch_add(1, Ordering::AcqRel);
        for q in state.io_queues.drain(..) {
            state.retired += q.counters.snapshot();
            if let Some(notifier) = q.notifier {
                notifier.notify();
            }
        }
        tracing::debug!(cntlid = self.cntlid, "controller reset");
    }

    /// Every namespace is flushed: CSTS.SHST = complete.
    pub(crate) fn shutdown_complete(&self) {
        let mut state = self.lock();
        if state.csts.shst == ShutdownStatus::Occurring {
            state.csts.shst = ShutdownStatus::Complete;
        }
        tracing::debug!(cntlid = self.cntlid, "shutdown complete");
    }

    /// Whether I/O queue `qid` may connect now, without taking its QID: the I/O epoch it would belong to, or why
    /// not. A queue that must authenticate first takes its QID only once authenticated
    /// ([`Controller::attach_io_queue`]), so a peer that cannot authenticate never holds a QID of the real host.
    pub(crate) fn admit_io_queue(&self, qid: u16) -> Result<u32, IoQueueRefusal> {
        let state = self.lock();
        Self::io_queue_refusal(&state, qid).map_or_else(|| Ok(self.io_epoch()), Err)
    }

    /// Connect I/O queue `qid`: take its QID in the I/O epoch `epoch` (the current one if `None`); the epoch, or
    /// why not (a reset since `epoch`: [`IoQueueRefusal::Reset`]).
    pub(crate) fn attach_io_queue(&self, mut entry: QueueEntry, epoch: Option<u32>) -> Result<u32, IoQueueRefusal> {
        let mut state = self.lock();
        if let Some(refusal) = Self::io_queue_refusal(&state, entry.qid) {
            return Err(refusal);
        }
        // The epoch moves under this lock (a reset), so the check and the push are one step.
        let current = self.io_epoch();
        if epoch.is_some_and(|e| e != current) {
            return Err(IoQueueRefusal::Reset);
        }
        entry.epoch = current;
        state.io_queues.push(entry);
        Ok(current)
    }

    fn io_queue_refusal(state: &ControllerState, qid: u16) -> Option<IoQueueRefusal> {
        if !state.csts.rdy {
            return Some(IoQueueRefusal::NotReady);
        }
        if qid > state.granted_io_queues {
            return Some(IoQueueRefusal::QidAboveGranted(state.granted_io_queues));
        }
        state.io_queues.iter().any(|q| q.qid == qid).then_some(IoQueueRefusal::AlreadyConnected)
    }

    /// I/O queue `qid` of `epoch` went away: keep its counters' totals, free the qid.
    pub(crate) fn detach_io_queue(&self, qid: u16, epoch: u32) {
        let mut state = self.lock();
        if let Some(pos) = state.io_queues.iter().position(|q| q.qid == qid && q.epoch == epoch) {
            let q = state.io_queues.swap_remove(pos);
            state.retired += q.counters.snapshot();
        }
    }

    /// Number of I/O queues connected.
    pub fn io_queue_count(&self) -> usize {
        self.lock().io_queues.len()
    }

    /// End the association: mark it terminated, forget it in the subsystem and wake every queue so that it
    /// closes. Idempotent.
    pub fn terminate(&self) {
        if self.terminated.swap(true, Ordering::AcqRel) {
            return;
        }
        // No longer among the subsystem's live controllers: its counts move to the subsystem's ended ones.
        self.subsystem.retire_counters(self.counters());
        self.ready.store(false, Ordering::Release);
        self.subsystem.unregister_controller(self.cntlid);
        let notifiers: Vec<Notifier> = {
            let state = self.lock();
            state.io_queues.iter().chain(&state.admin).filter_map(|q| q.notifier.clone()).collect()
        };
        let (cntlid, subsystem, host) = (self.cntlid, self.subsystem.nqn(), &self.hostnqn);
        tracing::info!(cntlid, subnqn = subsystem, hostnqn = host, "association ended");
        for notifier in notifiers {
            notifier.notify();
        }
    }

    /// The Keep Alive Timer expired (NVMe Base 2.0 §3.9.4.3): log an error with Keep Alive Timer Expired, set
    /// CSTS.CFS, and end the association (message-based transports terminate the connection).
    pub(crate) fn keep_alive_expired(&self) {
        self.record_error(ErrorInformationEntry {
            sqid: 0xFFFF,
            cid: 0xFFFF,
            status: Status::KEEP_ALIVE_TIMER_EXPIRED,
            parameter_error_location: 0xFFFF,
            ..ErrorInformationEntry::default()
        });
        self.lock().csts.cfs = true;
        self.subsystem.metrics().keep_alive_expired();
        self.terminate();
    }

    /// A namespace of the subsystem was added or removed: remember it in the Changed Namespace List and
    /// raise a Namespace Attribute Changed event unless disabled or masked.
    pub(crate) fn namespace_changed(&self, nsid: u32) {
        let notifier = {
            let mut state = self.lock();
            let changed = &mut state.changed;
            if !changed.overflow && !changed.nsids.contains(&nsid) {
                if changed.nsids.len() < NSID_LIST_ENTRIES {
                    changed.nsids.push(nsid);
                } else {
                    changed.overflow = true;
                }
            }
            self.raise_locked(&mut state, EventKind::NamespaceAttribute)
        };
        if let Some(notifier) = notifier {
            notifier.notify();
        }
    }

    /// The ANA state of a group on this controller's listener changed: raise an ANA Change event unless disabled
    /// or masked (until the host reads the ANA log without RAE).
    pub(crate) fn ana_changed(&self) {
        let notifier = {
            let mut state = self.lock();
            self.raise_locked(&mut state, EventKind::AnaChange)
        };
        if let Some(notifier) = notifier {
            notifier.notify();
        }
    }

    /// The discovery log changed: raise a Discovery Log Page Change event unless disabled or masked.
    pub(crate) fn discovery_log_changed(&self) {
        let notifier = {
            let mut state = self.lock();
            self.raise_locked(&mut state, EventKind::DiscoveryLog)
        };
        if let Some(notifier) = notifier {
            notifier.notify();
        }
    }

    /// This controller's Reservation Notification Mask of namespace `nsid`.
    pub(crate) fn reservation_mask(&self, nsid: u32) -> u32 {
        self.lock().reservation_log.masks.get(&nsid).copied().unwrap_or(0)
    }

    /// Set this controller's Reservation Notification Mask of namespace `nsid`.
    pub(crate) fn set_reservation_mask(&self, nsid: u32, mask: u32) {
        self.lock().reservation_log.masks.insert(nsid, mask);
    }

    /// A reservation notice for namespace `nsid`, unless this controller's mask hides it: a Reservation Notification
    /// log page and a Reservation Log Page Available event (masked until the host reads the log).
    pub(crate) fn reservation_notice(&self, kind: NotificationType, nsid: u32) {
        let notifier = {
            let mut state = self.lock();
            let log = &mut state.reservation_log;
            if log.masks.get(&nsid).is_some_and(|mask| mask & kind.mask_bit() != 0) {
                return;
            }
            log.count = log.count.wrapping_add(1).max(1);
            if log.pages.len() >= RESERVATION_LOG_ENTRIES {
                log.pages.pop_front();
            }
            let page = NotificationLog { count: log.count, kind, available: 0, nsid };
            log.pages.push_back(page);
            self.raise_locked(&mut state, EventKind::ReservationLog)
        };
        if let Some(notifier) = notifier {
            notifier.notify();
        }
    }

    /// Queue `kind`'s event if enabled and not masked; returns the admin queue's notifier to call.
    fn raise_locked(&self, state: &mut ControllerState, kind: EventKind) -> Option<Notifier> {
        let enabled = kind == EventKind::ReservationLog || state.aec & kind.aec_bit() != 0;
        if !enabled || state.masked & kind.bit() != 0 {
            return None;
        }
        state.masked |= kind.bit();
        state.events.push_back(kind.event());
        self.event_pending.store(true, Ordering::Release);
        state.admin.as_ref().and_then(|a| a.notifier.clone())
    }

    /// The host read `kind`'s log page without RAE: the event may be reported again.
    pub(crate) fn unmask_locked(state: &mut ControllerState, kind: EventKind) {
        state.masked &= !kind.bit();
    }

    /// An event may be waiting for an AER (cheap check for the admin queue's poll).
    pub(crate) fn has_pending_event(&self) -> bool {
        self.event_pending.load(Ordering::Acquire)
    }

    /// The oldest undelivered event.
    pub(crate) fn take_event_locked(&self, state: &mut ControllerState) -> Option<AsyncEvent> {
        let event = state.events.pop_front();
        if state.events.is_empty() {
            self.event_pending.store(false, Ordering::Release);
        }
        event
    }

    /// Keep an Error Information log entry (newest first, at most ELPE + 1).
    pub(crate) fn record_error(&self, mut entry: ErrorInformationEntry) {
        let mut state = self.lock();
        state.error_count = state.error_count.wrapping_add(1).max(1);
        entry.error_count = state.error_count;
        if state.errors.len() > usize::from(ELPE) {
            state.errors.pop_back();
        }
        state.errors.push_front(entry);
    }

    /// When the admin queue's Connect completed (the association's start).
    pub fn connected_at(&self) -> Option<SystemTime> {
        self.lock().admin.as_ref().map(|a| a.connected_at)
    }

    /// Counters summed over every queue the association has had.
    pub fn counters(&self) -> CounterSnapshot {
        let state = self.lock();
        let mut total = state.retired;
        for q in &state.io_queues {
            total += q.counters.snapshot();
        }
        if let Some(admin) = &state.admin {
            total += admin.counters.snapshot();
        }
        total
    }
}

/// Why an I/O queue Connect is refused by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoQueueRefusal {
    /// CSTS.RDY is clear.
    NotReady,
    /// The QID is above the number of I/O queues granted (the value).
    QidAboveGranted(u16),
    /// An I/O queue with this QID is connected.
    AlreadyConnected,
    /// The controller was reset since the queue's Connect.
    Reset,
}
