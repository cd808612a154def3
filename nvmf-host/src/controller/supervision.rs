//! Keeping the association up: where the controller stands ([`ControllerState`], [`Supervision`]), holding I/O
//! while it reconnects (the queues' [`Recovery`]), and the supervisor thread ([`supervise`]) that sends the Keep
//! Alives, takes the asynchronous events, notices a lost association and runs the reconnect attempts.
//!
//! Threads: one supervisor per controller; it sleeps until a [`Wake`] or its next deadline, blocks on admin
//! commands and connects, and is never on the data path. Held I/O blocks in [`Recovery::hold`] (the caller's
//! thread) or waits as a task woken by [`Recovery::poll_hold`]'s registration; a queue's I/O thread only sends
//! [`Wake::Look`] on an unbounded channel (it must never block).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::nvme::admin::KeepAlive;

use super::association::{associate, run};
use super::Inner;
use crate::error::HostError;
use crate::queue::handle::{Completed, CompletionSink, QueueHandle, Recovery};
use crate::queue::DataDirection;

/// Where the association with the controller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerState {
    /// The association is up; I/O goes straight to the queues.
    Live,
    /// The association was lost; I/O is held while the host tries a new one every
    /// [`super::ConnectOptions::reconnect_delay`].
    Reconnecting {
        /// Attempts made since the loss.
        attempts: u32,
    },
    /// The host is disconnecting (or dropped the controller); I/O fails.
    Deleting,
    /// Reconnecting gave up after [`super::ConnectOptions::ctrl_loss_tmo`]; I/O fails.
    Failed,
}

impl ControllerState {
    /// The state's name as `nvmf-host list` and `list-subsys` show it: `live`, `reconnecting`, `deleting`,
    /// `failed`.
    pub fn name(self) -> &'static str {
        match self {
            ControllerState::Live => "live",
            ControllerState::Reconnecting { .. } => "reconnecting",
            ControllerState::Deleting => "deleting",
            ControllerState::Failed => "failed",
        }
    }

    pub(super) fn to_word(self) -> u64 {
        match self {
            ControllerState::Live => 0,
            ControllerState::Reconnecting { attempts } => (1 << 32) | u64::from(attempts),
            ControllerState::Deleting => 2 << 32,
            ControllerState::Failed => 3 << 32,
        }
    }

    pub(super) fn from_word(word: u64) -> Self {
        #[expect(clippy::cast_possible_truncation, reason = "the low half is the attempt count")]
        let attempts = word as u32;
        match word >> 32 {
            0 => ControllerState::Live,
            1 => ControllerState::Reconnecting { attempts },
            2 => ControllerState::Deleting,
            _ => ControllerState::Failed,
        }
    }
}

/// Where the controller stands, shared by the controller, its queues (as their [`Recovery`]) and the
/// supervisor. Changed under the mutex; waiters (held I/O) sleep on the condition variable; the state is
/// mirrored in atomics so [`Controller::state`] and [`Controller::reconnects`] take no lock. It is also the
/// supervisor's inbox: every state change and every failed queue connection sends it a [`Wake::Look`], and the
/// Asynchronous Event Requests complete into it (a [`CompletionSink`]), so the supervisor sleeps until one of
/// those or its next deadline.
#[derive(Debug)]
pub(super) struct Supervision {
    pub(super) status: Mutex<Status>,
    pub(super) changed: Condvar,
    /// The supervisor's wake-ups (unbounded: a queue's I/O thread sends on it and must never block).
    pub(super) wake: Sender<Wake>,
    /// [`ControllerState`] as `kind << 32 | attempts`.
    pub(super) word: AtomicU64,
    /// Associations since the first (the current association's epoch).
    pub(super) reconnects: AtomicU64,
    pub(super) fast_io_fail_tmo: Option<Duration>,
    /// An [`Wake::AnaRefresh`] is on its way (many commands meeting one ANA change ask once).
    pub(super) ana_refresh_requested: AtomicBool,
}

#[derive(Debug)]
pub(super) struct Status {
    pub(super) state: ControllerState,
    /// The current association: 0 for the first, +1 per reconnect.
    pub(super) epoch: u64,
    /// When the association was lost (while not Live).
    pub(super) lost_at: Option<Instant>,
    /// Tasks awaiting a held command ([`Recovery::poll_hold`]), woken by the next state change.
    pub(super) held: Vec<Waker>,
}

impl Supervision {
    pub(super) fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn set(&self, status: &mut Status, state: ControllerState) {
        status.state = state;
        self.word.store(state.to_word(), Ordering::Release);
        self.wake_held(status);
        // Gone only once the supervisor stopped, which needs no telling.
        let _ = self.wake.send(Wake::Look);
    }

    /// Ask the supervisor to read the ANA log again (once for any number of asks before it does).
    pub(super) fn request_ana_refresh(&self) {
        if !self.ana_refresh_requested.swap(true, Ordering::AcqRel) {
            let _ = self.wake.send(Wake::AnaRefresh);
        }
    }

    /// Let every held command look at the state again (blocked or awaited).
    fn wake_held(&self, status: &mut Status) {
        self.changed.notify_all();
        for waker in status.held.drain(..) {
            waker.wake();
        }
    }

    /// Where a command held since association `epoch` failed (`cause`) stands: resubmit (`Ok`), fail, or
    /// keep waiting (`Pending`). A live controller still on that association starts reconnecting here.
    fn held(&self, status: &mut Status, qid: u16, epoch: u64, cause: &HostError) -> Poll<Result<(), HostError>> {
        if status.epoch > epoch {
            return Poll::Ready(Ok(()));
        }
        if status.state == ControllerState::Live {
            self.lose(status, epoch, cause);
        }
        Poll::Ready(Err(match status.state {
            ControllerState::Live | ControllerState::Reconnecting { .. } => {
                let lost = Self::lost_for(status);
                match self.fast_io_fail_tmo {
                    Some(f) if lost >= f => HostError::FastIoFail { after: lost },
                    _ => return Poll::Pending,
                }
            }
            ControllerState::Deleting => HostError::ShutDown { qid },
            ControllerState::Failed => HostError::ControllerLost { after: Self::lost_for(status) },
        }))
    }

    /// Association `epoch` was lost (`cause`): start reconnecting unless that already happened.
    fn lose(&self, status: &mut Status, epoch: u64, cause: &HostError) {
        if status.epoch == epoch && status.state == ControllerState::Live {
            tracing::warn!(error = %cause, "association lost; reconnecting");
            status.lost_at = Some(Instant::now());
            self.set(status, ControllerState::Reconnecting { attempts: 0 });
        }
    }

    fn lost_for(status: &Status) -> Duration {
        status.lost_at.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

impl Recovery for Supervision {
    fn hold(&self, qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError> {
        let mut status = self.lock();
        loop {
            match self.held(&mut status, qid, epoch, cause) {
                Poll::Ready(result) => return result,
                // Wake at the fast-fail deadline; otherwise the supervisor's state changes wake us (the
                // one-second bound is only a guard against a missed notification).
                Poll::Pending => {
                    let wait =
                        self.fast_io_fail_tmo.map_or(Duration::MAX, |f| f.saturating_sub(Self::lost_for(&status)));
                    let wait = wait.min(Duration::from_secs(1));
                    status = self.changed.wait_timeout(status, wait).unwrap_or_else(PoisonError::into_inner).0;
                }
            }
        }
    }

    fn poll_hold(&self, qid: u16, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        let mut status = self.lock();
        let held = self.held(&mut status, qid, epoch, cause);
        if held.is_pending() && !status.held.iter().any(|w| w.will_wake(cx.waker())) {
            // Woken by the next state change, or by the supervisor at the fast-fail deadline.
            status.held.push(cx.waker().clone());
        }
        held
    }

    fn link_failed(&self) {
        let _ = self.wake.send(Wake::Look);
    }
}

/// What wakes the supervisor (besides its deadlines).
#[derive(Debug)]
pub(super) enum Wake {
    /// An Asynchronous Event Request completed.
    Event(Box<Completed>),
    /// The controller's state changed or a queue's connection failed: look again.
    Look,
    /// I/O met an ANA status: read the ANA log again.
    AnaRefresh,
}

impl CompletionSink for Supervision {
    fn push(&self, completed: Completed) {
        let _ = self.wake.send(Wake::Event(Box::new(completed)));
    }
    fn wake(&self) {}
}

/// Where callers that drive bare I/O queues of the association (perf) report their commands, so the supervisor
/// counts them as I/O traffic: a Traffic Based Keep Alive controller then gets no Keep Alive while they run. Report
/// in batches (perf does every [`IoTraffic::REPORT_INTERVAL`]), not per command: it is one shared counter pair.
#[derive(Debug, Default)]
pub struct IoTraffic {
    submitted: AtomicU64,
    completed: AtomicU64,
}

impl IoTraffic {
    /// How often perf reports: well inside the supervisor's KATO/4 looks for any KATO of a second or more.
    pub const REPORT_INTERVAL: Duration = Duration::from_millis(100);

    /// Add commands submitted and completed since the last report.
    pub fn add(&self, submitted: u64, completed: u64) {
        self.submitted.fetch_add(submitted, Ordering::Relaxed);
        self.completed.fetch_add(completed, Ordering::Relaxed);
    }

    fn counts(&self) -> (u64, u64) {
        (self.submitted.load(Ordering::Relaxed), self.completed.load(Ordering::Relaxed))
    }
}

impl Inner {
    /// I/O commands submitted and completed on every I/O queue so far, bare ones included (the Keep Alive's
    /// traffic check).
    pub(super) fn io_counts(&self) -> (u64, u64) {
        self.io.iter().map(|q| q.stats()).fold(self.bare_io.counts(), |(s, c), m| (s + m.submitted, c + m.completed))
    }

    pub(super) fn queues(&self) -> impl Iterator<Item = &QueueHandle> {
        std::iter::once(&self.admin).chain(&self.io)
    }

    /// The first failure among the queues of the current association.
    fn failure(&self) -> Option<HostError> {
        self.queues().find_map(QueueHandle::failure)
    }

    /// One reconnect attempt: a new association with as many I/O queues as before, put in place.
    pub(super) fn reconnect(&self) -> Result<(), HostError> {
        let want = u16::try_from(self.io.len()).unwrap_or(u16::MAX);
        let assoc = associate(self.addr, &self.subnqn, &self.options, want)?;
        if assoc.io.len() != self.io.len() {
            return Err(HostError::Controller(format!(
                "the new association has {} I/O queues, the controller had {}",
                assoc.io.len(),
                self.io.len()
            )));
        }
        let sup = &self.supervision;
        let epoch = sup.lock().epoch + 1;
        self.tls.set(assoc.tls);
        self.admin.replace(assoc.admin, epoch);
        for (q, new) in self.io.iter().zip(assoc.io) {
            q.replace(new, epoch);
        }
        self.cntlid.store(assoc.info.cntlid, Ordering::Relaxed);
        self.traffic_based_keep_alive.store(assoc.info.traffic_based_keep_alive, Ordering::Relaxed);
        {
            let mut status = sup.lock();
            status.epoch = epoch;
            sup.reconnects.store(epoch, Ordering::Relaxed);
            // Unless the controller was deleted meanwhile (that state must stand: the deleter waits for us).
            if matches!(status.state, ControllerState::Reconnecting { .. }) {
                status.lost_at = None;
                sup.set(&mut status, ControllerState::Live);
            }
        }
        tracing::info!(traddr = %self.addr, subnqn = self.subnqn, cntlid = assoc.info.cntlid, epoch, "reconnected");
        if self.subnqn != DISCOVERY_NQN {
            match self.scan_namespaces() {
                Ok((_, true)) => self.bump_namespace_generation(),
                Ok((_, false)) => {}
                Err(e) => tracing::warn!(error = %e, "namespace scan after reconnect"),
            }
            self.enable_events(assoc.info.oaes);
            self.refresh_ana_logged();
        }
        self.arm_aers(self.aers);
        Ok(())
    }
}

/// The supervisor thread (see the module docs): runs until the controller is deleted or fails. It sleeps until a
/// [`Wake`] or its next deadline: the next Keep Alive while live; the next attempt, the `fast_io_fail_tmo` (to
/// wake awaited held commands) or the `ctrl_loss_tmo` while reconnecting.
pub(super) fn supervise(inner: &Inner, wakes: &Receiver<Wake>) {
    let sup = &inner.supervision;
    let o = &inner.options;
    let keep_alive = (!o.keep_alive_tmo.is_zero()).then_some(o.keep_alive_tmo);
    // A Keep Alive every KATO/2. To a controller with Traffic Based Keep Alive (any command it receives restarts its
    // timer) the supervisor looks every KATO/4, as Linux does, and sends none if since its last look I/O commands
    // were submitted (so the controller's timer restarted since then) and some completed (it is alive): the
    // next Keep Alive then goes out at most two looks, KATO/2, after the last I/O, as without TBKAS.
    let tbkas = || inner.traffic_based_keep_alive.load(Ordering::Relaxed);
    let interval = |kato: Duration| if tbkas() { kato / 4 } else { kato / 2 };
    let mut next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
    // I/O commands submitted and completed as of the last look.
    let mut io_seen = inner.io_counts();
    let mut next_attempt: Option<Instant> = None;
    // Whether the held commands were woken at this loss's fast-fail deadline.
    let mut fast_failed = false;
    let mut wake_at = next_keep_alive;
    loop {
        let wake = match wake_at {
            Some(t) => wakes.recv_timeout(t.saturating_duration_since(Instant::now())).ok(),
            // The sender lives in the supervision this thread holds: recv only returns with a wake.
            None => wakes.recv().ok(),
        };
        match wake {
            Some(Wake::Event(completed)) => {
                if let Some(reply) = completed.settle() {
                    inner.on_event(&reply);
                }
            }
            Some(Wake::AnaRefresh) => {
                sup.ana_refresh_requested.store(false, Ordering::Release);
                if sup.lock().state == ControllerState::Live {
                    inner.refresh_ana_logged();
                }
            }
            Some(Wake::Look) | None => {}
        }
        let (state, epoch, lost_at) = {
            let s = sup.lock();
            (s.state, s.epoch, s.lost_at)
        };
        match state {
            ControllerState::Deleting | ControllerState::Failed => return,
            ControllerState::Live => {
                if let Some(e) = inner.failure() {
                    // Wakes this loop again (a Look), now Reconnecting.
                    sup.lose(&mut sup.lock(), epoch, &e);
                } else if next_keep_alive.is_some_and(|t| Instant::now() >= t) {
                    next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
                    let counts = inner.io_counts();
                    let traffic = tbkas() && counts.0 != io_seen.0 && counts.1 != io_seen.1;
                    io_seen = counts;
                    if !traffic {
                        let sqe = KeepAlive.to_sqe();
                        let sub = inner.admin.submitter();
                        if let Err(e) = run(&sub, "Keep Alive", sqe, DataDirection::None, Vec::new(), o.keep_alive_tmo)
                        {
                            sup.lose(&mut sup.lock(), epoch, &e);
                        }
                    }
                }
                wake_at = next_keep_alive;
            }
            ControllerState::Reconnecting { attempts } => {
                let lost_at = lost_at.unwrap_or_else(Instant::now);
                let give_up = o.ctrl_loss_tmo.map(|t| lost_at + t);
                // Held commands fail from the fast-fail deadline on; an awaited one learns it when woken.
                let fast_fail = o.fast_io_fail_tmo.map(|t| lost_at + t).filter(|_| !fast_failed);
                if fast_fail.is_some_and(|t| Instant::now() >= t) {
                    sup.wake_held(&mut sup.lock());
                    fast_failed = true;
                }
                let fast_fail = fast_fail.filter(|_| !fast_failed);
                let deadline = |attempt| earliest(earliest(attempt, give_up), fast_fail);
                let Some(at) = next_attempt else {
                    // Just lost: drop every connection now (outstanding commands complete and are held).
                    for q in inner.queues() {
                        q.abort();
                    }
                    next_attempt = Some(lost_at + o.reconnect_delay);
                    wake_at = deadline(next_attempt);
                    continue;
                };
                let now = Instant::now();
                if give_up.is_some_and(|t| now >= t) {
                    tracing::error!(traddr = %inner.addr, subnqn = inner.subnqn, attempts, "controller lost: giving up");
                    let mut s = sup.lock();
                    if matches!(s.state, ControllerState::Reconnecting { .. }) {
                        sup.set(&mut s, ControllerState::Failed);
                    }
                    return;
                }
                if now < at {
                    wake_at = deadline(Some(at));
                    continue;
                }
                match inner.reconnect() {
                    Ok(()) => {
                        next_attempt = None;
                        fast_failed = false;
                        next_keep_alive = keep_alive.map(|k| Instant::now() + interval(k));
                        wake_at = next_keep_alive;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, attempt = attempts + 1, "reconnect failed");
                        next_attempt = Some(Instant::now() + o.reconnect_delay);
                        wake_at = deadline(next_attempt);
                        let mut s = sup.lock();
                        if s.state == (ControllerState::Reconnecting { attempts }) {
                            sup.set(&mut s, ControllerState::Reconnecting { attempts: attempts + 1 });
                        }
                    }
                }
            }
        }
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
