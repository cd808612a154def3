//! Native multipath: a [`NamespaceHead`] is one namespace reached through several controllers of one subsystem
//! (its paths), grouped by the namespace's NGUID (else UUID), as Linux groups controllers under an
//! `nvme_ns_head`. The block exports (ublk, NBD) submit through a head; with one path it behaves as that
//! controller's queues do.
//!
//! Path selection, per command: a path serves I/O when its controller is live and its ANA state for the namespace
//! is optimized, else non-optimized (a controller that does not report ANA counts as optimized); never
//! inaccessible, persistent loss or change. Among the paths of the best state, [`IoPolicy::RoundRobin`] takes each
//! command to the next one and [`IoPolicy::QueueDepth`] to the one with the fewest commands outstanding on the
//! export queue's I/O queue (Linux's `round-robin` and `queue-depth` iopolicies).
//!
//! Failover: a command that completes with its connection lost, or with a path-related status (SCT 3h) without
//! DNR, goes again to a usable path with the same buffer (nothing copied); an ANA status also marks its path with
//! that state and has its controller read the ANA log again. At most `path_retries` times per command (the first
//! controller's option): the first at once, each later one [`RETRY_STEP`] per retry so far later, so a target that
//! answers path errors forever costs a bounded time; then the command settles with its last failure, counted on
//! the path as retries exhausted. While no path serves I/O, submitting waits (the
//! export queue's thread, as a reconnecting controller's hold does), looking again every 10 ms, until a path does
//! (a reconnect, an ANA change) or none can any more: every controller failed or deleted or in persistent loss,
//! every reconnecting one past its `fast_io_fail_tmo`, or the longest `ctrl_loss_tmo` of the paths has passed.
//!
//! Tags: the head keeps the path a command went to in bits 63:48 of its sink tag and the times it was sent again in
//! bits 47:44; callers' tags stay below [`MAX_TAG`] and read them back with [`caller_tag`].
//!
//! Locks: the path list is behind an `RwLock` that only adding or removing a path write-locks. Each submitting thread
//! (an export queue) keeps its own [`PathCursor`]: a snapshot of the list, taken again only when the head's
//! generation moves, and its own round-robin turn; per command it loads that generation, the controllers' state and
//! ANA generation (atomics, read-shared), and re-reads a path's ANA state from its controller (a read lock) only
//! after the controller read its ANA log again. The queue-depth policy also reads each best path's queue counters.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use nvmf_common::nvme::log_page::AnaState;
use nvmf_common::nvme::status::StatusCodeType;
use nvmf_common::nvme::Status;

use crate::controller::{Controller, ControllerState, NamespaceInfo};
use crate::error::HostError;
use crate::queue::handle::{transport_loss, Completed, CompletionSink, LinkHost, QueueHandle, Reply, SinkRefused};
use crate::queue::Request;

mod select;

pub use crate::controller::IoPolicy;
use select::{choose, Candidate, Choice};

/// Most paths a head takes.
pub const MAX_PATHS: usize = 16;
/// Callers' sink tags must be below this (the head uses bits 63:44).
pub const MAX_TAG: u64 = 1 << RETRY_SHIFT;
const PATH_SHIFT: u32 = 48;
/// Where a command's retry count (4 bits) sits in its tag.
const RETRY_SHIFT: u32 = 44;
/// The most `path_retries` a tag can count.
pub const MAX_PATH_RETRIES: u8 = 15;
/// The wait before a command's second and later retries, per retry so far.
pub const RETRY_STEP: Duration = Duration::from_millis(10);
/// How often a waiting submission looks at the paths again.
const WAIT_STEP: Duration = Duration::from_millis(10);

/// The caller's part of a tag the head submitted with.
pub fn caller_tag(tag: u64) -> u64 {
    tag & (MAX_TAG - 1)
}

/// What identifies a namespace across controllers: its NGUID, else its UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamespaceId {
    /// The NGUID.
    Nguid([u8; 16]),
    /// The UUID (the NGUID being zero).
    Uuid([u8; 16]),
}

impl NamespaceId {
    /// The namespace's identifier, if it reports one (a namespace with neither cannot be told apart from
    /// another controller's and is never grouped).
    pub fn of(ns: &NamespaceInfo) -> Option<Self> {
        if ns.nguid != [0; 16] {
            return Some(NamespaceId::Nguid(ns.nguid));
        }
        ns.uuid.filter(|u| *u != [0; 16]).map(NamespaceId::Uuid)
    }
}

/// One path: a controller and the namespace's ANA state through it.
#[derive(Debug)]
pub struct Path {
    id: u16,
    name: String,
    ctrl: Arc<Controller>,
    nsid: u32,
    /// `generation << 8 | state`: the ANA state as of the controller's ANA generation (state 0: not reported).
    ana: AtomicU64,
    /// Commands that failed on this path and were sent to a path again.
    failovers: AtomicU64,
    /// Commands that failed on this path with no retry left.
    retries_exhausted: AtomicU64,
}

impl Path {
    /// The namespace's ANA state through this path (`None`: the controller does not report ANA).
    fn ana_state(&self) -> Option<AnaState> {
        let generation = self.ctrl.ana_generation();
        let word = self.ana.load(Ordering::Acquire);
        if word >> 8 == generation && word != 0 {
            return decode_ana(word);
        }
        let state = self.ctrl.ana_state(self.nsid);
        self.ana.store(generation << 8 | u64::from(state.map_or(0xff, AnaState::to_u8)), Ordering::Release);
        state
    }

    /// An ANA status said the state is `state` until the controller's log says otherwise.
    fn mark(&self, state: AnaState) {
        let generation = self.ctrl.ana_generation();
        self.ana.store(generation << 8 | u64::from(state.to_u8()), Ordering::Release);
        self.ctrl.request_ana_refresh();
    }

    fn queue(&self, q: usize) -> Option<&QueueHandle> {
        let queues = self.ctrl.io_queues();
        (!queues.is_empty()).then(|| &queues[q % queues.len()])
    }

    fn candidate(&self, q: usize, policy: IoPolicy) -> Candidate {
        let state = self.ctrl.state();
        let ana = self.ana_state();
        Candidate {
            live: state == ControllerState::Live && self.queue(q).is_some(),
            ana,
            may_return: match state {
                ControllerState::Failed | ControllerState::Deleting => false,
                ControllerState::Reconnecting { .. } => {
                    let fast_fail = self.ctrl.options().fast_io_fail_tmo;
                    fast_fail.is_none_or(|t| self.ctrl.lost_for().is_none_or(|lost| lost < t))
                }
                ControllerState::Live => ana != Some(AnaState::PersistentLoss),
            },
            // Read only where the policy uses it: it takes the queue's link lock.
            outstanding: match policy {
                IoPolicy::QueueDepth => self.queue(q).map_or(u64::MAX, QueueHandle::outstanding),
                IoPolicy::RoundRobin => 0,
            },
        }
    }
}

fn decode_ana(word: u64) -> Option<AnaState> {
    AnaState::from_u8((word & 0xff) as u8).ok()
}

/// What `list` shows of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathView {
    /// The controller's name.
    pub name: String,
    /// Its state (`live`, `reconnecting`, …).
    pub state: &'static str,
    /// The namespace's ANA state through it (`optimized` …; `none` when not reported).
    pub ana_state: &'static str,
    /// Commands that failed on it and were sent to a path again.
    pub failovers: u64,
    /// Commands that failed on it after `path_retries` retries, and failed.
    pub retries_exhausted: u64,
}

/// One namespace over its paths (see the module docs).
#[derive(Debug)]
pub struct NamespaceHead {
    subnqn: String,
    nsid: u32,
    id: Option<NamespaceId>,
    block_size: u32,
    blocks: u64,
    policy: IoPolicy,
    /// How many times a command that failed on a path goes again (the first controller's `path_retries`).
    retries: u8,
    paths: RwLock<Vec<Arc<Path>>>,
    /// Moves each time a path is added or removed: a [`PathCursor`] takes a new snapshot of the paths then.
    generation: AtomicU64,
    next_path_id: AtomicU16,
}

/// Why a path cannot join a head.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The namespace is not active on the controller.
    #[error("namespace {0} is not active on this controller")]
    UnknownNamespace(u32),
    /// The controller is of another subsystem or reports another namespace.
    #[error("{0}")]
    Mismatch(String),
    /// The controller's namespace matches, but the controller is not of the same subsystem as the paths (see
    /// [`NamespaceHead::add_path`]).
    #[error("not a path of the same subsystem: {0}")]
    NotOneSubsystem(String),
    /// The head has [`MAX_PATHS`] paths.
    #[error("namespace {0} already has {MAX_PATHS} paths")]
    Full(u32),
}

impl NamespaceHead {
    /// A head for namespace `nsid` of `ctrl` (named `name`), with that controller as its only path.
    pub fn new(ctrl: Arc<Controller>, name: &str, nsid: u32, policy: IoPolicy) -> Result<Self, PathError> {
        let ns = namespace(&ctrl, nsid)?;
        let head = NamespaceHead {
            subnqn: ctrl.subnqn().to_owned(),
            nsid,
            id: NamespaceId::of(&ns),
            block_size: ns.block_size,
            blocks: ns.blocks,
            policy,
            retries: ctrl.options().path_retries.min(MAX_PATH_RETRIES),
            paths: RwLock::new(Vec::new()),
            generation: AtomicU64::new(1),
            next_path_id: AtomicU16::new(0),
        };
        head.add_path(ctrl, name)?;
        Ok(head)
    }

    /// Whether namespace `ns` of a controller of `subnqn` is this head's namespace (same subsystem, NSID and
    /// identifier; a namespace without an identifier matches none).
    pub fn matches(&self, subnqn: &str, ns: &NamespaceInfo) -> bool {
        self.id.is_some() && subnqn == self.subnqn && ns.nsid == self.nsid && NamespaceId::of(ns) == self.id
    }

    /// Add `ctrl` (named `name`) as a path. As the Linux host, only a subsystem that may have several
    /// controllers (CMIC bit 1), each with its own CNTLID, is reached over several paths: two targets that merely
    /// share a subsystem NQN are not one subsystem ([`PathError::NotOneSubsystem`]).
    pub fn add_path(&self, ctrl: Arc<Controller>, name: &str) -> Result<(), PathError> {
        {
            let paths = self.paths();
            if !paths.is_empty() && !ctrl.info().multi_controller {
                let why = "the subsystem does not report several controllers (CMIC bit 1)".to_owned();
                return Err(PathError::NotOneSubsystem(why));
            }
            let cntlid = ctrl.cntlid();
            if let Some(p) = paths.iter().find(|p| p.ctrl.cntlid() == cntlid) {
                return Err(PathError::NotOneSubsystem(format!("its CNTLID {cntlid} is also {}'s", p.name)));
            }
        }
        let ns = namespace(&ctrl, self.nsid)?;
        if ctrl.subnqn() != self.subnqn {
            return Err(PathError::Mismatch(format!(
                "{name} is a controller of {}, not {}",
                ctrl.subnqn(),
                self.subnqn
            )));
        }
        if (ns.block_size, ns.blocks) != (self.block_size, self.blocks) || NamespaceId::of(&ns) != self.id {
            return Err(PathError::Mismatch(format!(
                "namespace {} through {name} is not the same namespace (identifier, block size or size differ)",
                self.nsid
            )));
        }
        let mut paths = self.paths.write().unwrap_or_else(PoisonError::into_inner);
        if paths.len() >= MAX_PATHS {
            return Err(PathError::Full(self.nsid));
        }
        let id = self.next_path_id.fetch_add(1, Ordering::Relaxed);
        let path = Path {
            id,
            name: name.to_owned(),
            ctrl,
            nsid: self.nsid,
            ana: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            retries_exhausted: AtomicU64::new(0),
        };
        tracing::info!(subnqn = %self.subnqn, nsid = self.nsid, path = name, paths = paths.len() + 1, "path added");
        paths.push(Arc::new(path));
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Remove the path named `name`; the paths left.
    pub fn remove_path(&self, name: &str) -> usize {
        let mut paths = self.paths.write().unwrap_or_else(PoisonError::into_inner);
        paths.retain(|p| p.name != name);
        self.generation.fetch_add(1, Ordering::Release);
        paths.len()
    }

    fn paths(&self) -> RwLockReadGuard<'_, Vec<Arc<Path>>> {
        self.paths.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The namespace ID.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The namespace's logical block size and size in blocks.
    pub fn geometry(&self) -> (u32, u64) {
        (self.block_size, self.blocks)
    }

    /// The I/O policy.
    pub fn policy(&self) -> IoPolicy {
        self.policy
    }

    /// The first path's controller (what the exports size themselves by: queue count, MDTS, ONCS, VWC).
    pub fn first_controller(&self) -> Option<Arc<Controller>> {
        self.paths().first().map(|p| Arc::clone(&p.ctrl))
    }

    /// A controller that serves I/O now (for a caller's blocking command, a flush), else the first path's.
    pub fn usable_controller(&self) -> Option<Arc<Controller>> {
        let paths = self.paths();
        let candidates: Vec<Candidate> = paths.iter().map(|p| p.candidate(0, self.policy)).collect();
        match choose(&candidates, self.policy, 0) {
            Choice::Path(i) => Some(Arc::clone(&paths[i].ctrl)),
            _ => paths.first().map(|p| Arc::clone(&p.ctrl)),
        }
    }

    /// Each path's name, controller state, ANA state and failovers.
    pub fn view(&self) -> Vec<PathView> {
        self.paths()
            .iter()
            .map(|p| PathView {
                name: p.name.clone(),
                state: p.ctrl.state().name(),
                ana_state: p.ana_state().map_or("none", AnaState::name),
                failovers: p.failovers.load(Ordering::Relaxed),
                retries_exhausted: p.retries_exhausted.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Queue `request` (its completion to `sink` under `tag` < [`MAX_TAG`]) on export queue `q`'s I/O queue of
    /// a path that serves I/O, without waking its I/O thread (`cursor` notes it: [`PathCursor::wake`]); waits
    /// while none does (see the module docs). On failure the request's buffer comes back with the error.
    pub fn queue_to_sink(
        &self,
        q: usize,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
        cursor: &mut PathCursor,
    ) -> Result<(), (HostError, Vec<u8>)> {
        debug_assert!(tag < MAX_TAG);
        self.send(q, request, sink, tag, cursor)
    }

    /// [`NamespaceHead::queue_to_sink`] with `tag`'s retry count (bits 47:44) set.
    fn send(
        &self,
        q: usize,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
        cursor: &mut PathCursor,
    ) -> Result<(), (HostError, Vec<u8>)> {
        let mut request = request;
        let mut refused = [false; MAX_PATHS];
        let mut waiting_since: Option<Instant> = None;
        loop {
            self.refresh(cursor);
            let paths = &cursor.paths;
            let mut candidates = [Candidate::NONE; MAX_PATHS];
            for (i, p) in paths.iter().enumerate() {
                candidates[i] = if refused[i] { Candidate::NONE.may_return() } else { p.candidate(q, self.policy) };
            }
            cursor.turn = cursor.turn.wrapping_add(1);
            match choose(&candidates[..paths.len()], self.policy, cursor.turn) {
                Choice::Path(i) => {
                    let path = Arc::clone(&paths[i]);
                    let Some(queue) = path.queue(q) else {
                        refused[i] = true;
                        continue;
                    };
                    match queue.try_queue_to_sink(request, sink, u64::from(path.id) << PATH_SHIFT | tag) {
                        Ok(()) => {
                            cursor.note(path);
                            return Ok(());
                        }
                        Err(SinkRefused::Failed(e, data)) => return Err((e, data)),
                        // Its connection failed: the controller is about to say it is reconnecting.
                        Err(SinkRefused::Unavailable(r)) => {
                            refused[i] = true;
                            request = r;
                        }
                    }
                }
                Choice::Wait => {
                    let since = *waiting_since.get_or_insert_with(Instant::now);
                    if let Some(limit) = wait_limit(paths) {
                        if since.elapsed() >= limit {
                            let reason = format!("no path served I/O for {limit:?} (ctrl_loss_tmo)");
                            return Err((HostError::NoPath { nsid: self.nsid, reason }, request.data));
                        }
                    }
                    crate::queue::handle::release_all();
                    std::thread::sleep(WAIT_STEP);
                    refused = [false; MAX_PATHS];
                }
                Choice::None => {
                    let reason = if paths.is_empty() {
                        "it has no paths".to_owned()
                    } else {
                        "every path's controller failed, was deleted, is in ANA persistent loss or past \
                         fast_io_fail_tmo"
                            .to_owned()
                    };
                    return Err((HostError::NoPath { nsid: self.nsid, reason }, request.data));
                }
            }
        }
    }

    /// Ask every path's I/O queue for export queue `q` to be hosted by the calling thread (see
    /// [`QueueHandle::host_here`]; each link is asked for once).
    pub fn host_queues(&self, q: usize, cursor: &mut PathCursor, host: &LinkHost) {
        self.refresh(cursor);
        for p in &cursor.paths {
            if let Some(queue) = p.queue(q) {
                queue.host_here(host);
            }
        }
    }

    /// Give `cursor` the current paths if they changed since its snapshot (one atomic load otherwise).
    fn refresh(&self, cursor: &mut PathCursor) {
        let generation = self.generation.load(Ordering::Acquire);
        if cursor.generation != generation {
            cursor.paths.clone_from(&self.paths());
            cursor.generation = generation;
        }
    }

    /// A completion of a command this head queued for export queue `q`: its reply, or `None` when it went
    /// again to a path (its reply comes through the sink later, same tag). A command that failed on its path
    /// (see the module docs) is sent again; any other completion settles as the queue's own
    /// ([`Completed::settle`]).
    pub fn settle(&self, q: usize, completed: Completed, cursor: &mut PathCursor) -> Option<Reply> {
        let path_id = u16::try_from(completed.tag() >> PATH_SHIFT).unwrap_or(u16::MAX);
        let failed_path = match &completed.reply().result {
            Err(e) => transport_loss(e),
            Ok(cqe) => path_failure(cqe.status),
        };
        if !failed_path {
            return completed.settle();
        }
        self.refresh(cursor);
        let retries = u8::try_from((completed.tag() >> RETRY_SHIFT) & 0xf).unwrap_or(u8::MAX);
        let path = cursor.paths.iter().find(|p| p.id == path_id);
        if let Some(p) = path {
            if let Ok(cqe) = &completed.reply().result {
                if let Some(state) = ana_status(cqe.status) {
                    tracing::debug!(path = %p.name, nsid = self.nsid, state = state.name(), "ANA status");
                    p.mark(state);
                }
            }
        }
        let Some(delay) = retry_delay(retries, self.retries) else {
            if let Some(p) = path {
                p.retries_exhausted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %p.name, nsid = self.nsid, retries, "command failed on its path: no retry left");
            }
            return completed.settle();
        };
        if let Some(p) = path {
            p.failovers.fetch_add(1, Ordering::Relaxed);
        }
        if !delay.is_zero() {
            crate::queue::handle::release_all();
            std::thread::sleep(delay);
        }
        let tag = caller_tag(completed.tag()) | u64::from(retries + 1) << RETRY_SHIFT;
        let (request, sink) = match completed.into_request() {
            Ok(r) => r,
            Err(c) => return c.settle(),
        };
        match self.send(q, request, &sink, tag, cursor) {
            Ok(()) => None,
            Err((e, data)) => Some(Reply { context: (), result: Err(e), data, r2ts: 0, in_capsule: false }),
        }
    }
}

/// How long before a command that failed on a path `retries` times already goes again, or `None` when `max` retries
/// are spent. The first retry is a failover and goes at once; a command that keeps failing meets a path (or a target)
/// that keeps failing it, and waits longer each time.
fn retry_delay(retries: u8, max: u8) -> Option<Duration> {
    (retries < max).then(|| RETRY_STEP * u32::from(retries))
}

/// The longest `ctrl_loss_tmo` of `paths` (`None`: one waits forever).
fn wait_limit(paths: &[Arc<Path>]) -> Option<Duration> {
    paths.iter().try_fold(Duration::ZERO, |m, p| p.ctrl.options().ctrl_loss_tmo.map(|t| t.max(m)))
}

fn namespace(ctrl: &Controller, nsid: u32) -> Result<NamespaceInfo, PathError> {
    ctrl.known_namespaces().into_iter().find(|n| n.nsid == nsid).ok_or(PathError::UnknownNamespace(nsid))
}

/// A path-related status the command may be retried elsewhere after (Linux's `nvme_is_path_error`, and no DNR).
fn path_failure(status: Status) -> bool {
    !status.is_success() && status.sct() == StatusCodeType::Path && !status.dnr()
}

/// The ANA state an ANA status says the path is in.
fn ana_status(status: Status) -> Option<AnaState> {
    [
        (Status::ANA_INACCESSIBLE, AnaState::Inaccessible),
        (Status::ANA_PERSISTENT_LOSS, AnaState::PersistentLoss),
        (Status::ANA_TRANSITION, AnaState::Change),
    ]
    .into_iter()
    .find_map(|(s, state)| status.same_code(s).then_some(state))
}

/// One submitting thread's place among a head's paths, kept across commands: its snapshot of the paths (taken
/// again only when one is added or removed), its round-robin turn, and the paths a batch of
/// [`NamespaceHead::queue_to_sink`] calls queued to, to wake each once when the batch is done
/// ([`PathCursor::wake`]). Per thread, so that choosing a path shares no cache line between the export's queues.
#[derive(Debug)]
pub struct PathCursor {
    paths: Vec<Arc<Path>>,
    /// The head's generation of `paths` (0: none taken yet).
    generation: u64,
    turn: usize,
    to_wake: Vec<Arc<Path>>,
}

impl PathCursor {
    /// A cursor whose round-robin starts at `turn` (a caller spreading over queues passes its queue index).
    pub fn new(turn: usize) -> Self {
        PathCursor { paths: Vec::new(), generation: 0, turn, to_wake: Vec::new() }
    }

    fn note(&mut self, path: Arc<Path>) {
        if !self.to_wake.iter().any(|p| Arc::ptr_eq(p, &path)) {
            self.to_wake.push(path);
        }
    }

    /// Whether a path was queued to since the last [`PathCursor::wake`].
    pub fn noted(&self) -> bool {
        !self.to_wake.is_empty()
    }

    /// Wake export queue `q`'s I/O queue on every path queued to since the last call.
    pub fn wake(&mut self, q: usize) {
        for p in self.to_wake.drain(..) {
            if let Some(queue) = p.queue(q) {
                queue.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_statuses_fail_over_unless_dnr() {
        assert!(path_failure(Status::ANA_INACCESSIBLE));
        assert!(path_failure(Status::HOST_PATHING_ERROR));
        assert!(!path_failure(Status::ANA_INACCESSIBLE.with_dnr()));
        assert!(!path_failure(Status::SUCCESS));
        assert!(!path_failure(Status::INVALID_FIELD));
        assert_eq!(ana_status(Status::ANA_TRANSITION), Some(AnaState::Change));
        assert_eq!(ana_status(Status::ANA_PERSISTENT_LOSS.with_dnr()), Some(AnaState::PersistentLoss));
        assert_eq!(ana_status(Status::HOST_PATHING_ERROR), None);
    }

    #[test]
    fn retries_are_bounded_and_slow_down() {
        let delays: Vec<_> = (0..=3).map(|n| retry_delay(n, 3)).collect();
        assert_eq!(delays, [Some(Duration::ZERO), Some(RETRY_STEP), Some(RETRY_STEP * 2), None]);
        assert_eq!(retry_delay(0, 0), None, "path_retries 0: no retry");
        // The count rides in the tag without touching the caller's part.
        let tag = (MAX_TAG - 1) | u64::from(MAX_PATH_RETRIES) << RETRY_SHIFT | 7 << PATH_SHIFT;
        assert_eq!((caller_tag(tag), (tag >> RETRY_SHIFT) & 0xf), (MAX_TAG - 1, 15));
    }

    #[test]
    fn tags_keep_the_callers_part() {
        let tag = 7u64 << PATH_SHIFT | 1234;
        assert_eq!(caller_tag(tag), 1234);
        assert_eq!(caller_tag(MAX_TAG - 1), MAX_TAG - 1);
    }

    #[test]
    fn namespaces_are_identified_by_nguid_then_uuid() {
        let ns = NamespaceInfo { nsid: 1, block_size: 512, blocks: 8, nguid: [0; 16], uuid: None, anagrpid: 1 };
        assert_eq!(NamespaceId::of(&ns), None);
        let with_uuid = NamespaceInfo { uuid: Some([2; 16]), ..ns };
        assert_eq!(NamespaceId::of(&with_uuid), Some(NamespaceId::Uuid([2; 16])));
        let with_nguid = NamespaceInfo { nguid: [1; 16], ..with_uuid };
        assert_eq!(NamespaceId::of(&with_nguid), Some(NamespaceId::Nguid([1; 16])));
    }
}
