//! The counters behind the metrics: what a queue writes per command, and the per-subsystem totals the
//! collector sums at scrape time.
//!
//! Ownership: a [`QueueRecorder`] belongs to one connected queue and is written only by the reactor thread owning
//! that queue. Its counters are atomics updated with a plain `load` + `store` (`Relaxed`): a single writer cannot
//! lose an update that way, and no locked read-modify-write instruction runs per command. Other threads (the
//! scrape) only load. The recorder's counters live in an `Arc<QueueMetrics>` registered with the subsystem's
//! [`SubsystemMetrics`] at Connect; when the queue ends, the recorder is dropped and its counts are folded into
//! the subsystem's retired totals under the same lock a scrape takes, so a scrape never counts a queue twice
//! nor loses it.
//!
//! Per-namespace counters of a queue are created the first time the queue completes a command for that
//! namespace (one allocation and one uncontended lock per queue and namespace, never per command after that);
//! afterwards a command finds them by binary search in the queue's own sorted list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvmf_common::nvme::opcode::{admin as admin_op, fctype, io as io_op, FABRICS};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

/// Upper bounds of the latency histogram's buckets in nanoseconds (10 µs .. 10 s, 1-2.5-5 per decade); a last
/// bucket (+Inf) takes the rest.
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets of the latency histogram, +Inf included.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// What a command is, for the `opcode` label. The first [`IO_KINDS`] are the kinds a namespace's counters
/// keep (the NVM command set, plus `Other` for opcodes we do not serve).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum CommandKind {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Flush.
    Flush,
    /// Write Zeroes.
    WriteZeroes,
    /// Dataset Management.
    DatasetManagement,
    /// Compare.
    Compare,
    /// Any opcode not named here.
    Other,
    /// Identify.
    Identify,
    /// Get Log Page.
    GetLogPage,
    /// Get Features.
    GetFeatures,
    /// Set Features.
    SetFeatures,
    /// Keep Alive.
    KeepAlive,
    /// Asynchronous Event Request (held until an event: not in the latency histogram).
    AsyncEventRequest,
    /// Abort.
    Abort,
    /// Fabrics Connect.
    Connect,
    /// Fabrics Property Get.
    PropertyGet,
    /// Fabrics Property Set.
    PropertySet,
    /// Fabrics Disconnect.
    Disconnect,
}

/// Number of [`CommandKind`]s.
pub const ALL_KINDS: usize = 18;

/// Kinds a namespace's counters keep: `Read` ..= `Other`.
pub const IO_KINDS: usize = 7;

impl CommandKind {
    /// Every kind, in index order.
    pub const ALL: [CommandKind; ALL_KINDS] = [
        CommandKind::Read,
        CommandKind::Write,
        CommandKind::Flush,
        CommandKind::WriteZeroes,
        CommandKind::DatasetManagement,
        CommandKind::Compare,
        CommandKind::Other,
        CommandKind::Identify,
        CommandKind::GetLogPage,
        CommandKind::GetFeatures,
        CommandKind::SetFeatures,
        CommandKind::KeepAlive,
        CommandKind::AsyncEventRequest,
        CommandKind::Abort,
        CommandKind::Connect,
        CommandKind::PropertyGet,
        CommandKind::PropertySet,
        CommandKind::Disconnect,
    ];

    /// The kind of `sqe` on an I/O queue (`io`) or on an admin queue.
    pub fn of(sqe: &SubmissionQueueEntry, io: bool) -> Self {
        if sqe.opcode == FABRICS {
            return match sqe.fctype() {
                fctype::CONNECT => CommandKind::Connect,
                fctype::PROPERTY_GET => CommandKind::PropertyGet,
                fctype::PROPERTY_SET => CommandKind::PropertySet,
                fctype::DISCONNECT => CommandKind::Disconnect,
                _ => CommandKind::Other,
            };
        }
        if io {
            match sqe.opcode {
                io_op::READ => CommandKind::Read,
                io_op::WRITE => CommandKind::Write,
                io_op::FLUSH => CommandKind::Flush,
                io_op::WRITE_ZEROES => CommandKind::WriteZeroes,
                io_op::DATASET_MANAGEMENT => CommandKind::DatasetManagement,
                io_op::COMPARE => CommandKind::Compare,
                _ => CommandKind::Other,
            }
        } else {
            match sqe.opcode {
                admin_op::IDENTIFY => CommandKind::Identify,
                admin_op::GET_LOG_PAGE => CommandKind::GetLogPage,
                admin_op::GET_FEATURES => CommandKind::GetFeatures,
                admin_op::SET_FEATURES => CommandKind::SetFeatures,
                admin_op::KEEP_ALIVE => CommandKind::KeepAlive,
                admin_op::ASYNC_EVENT_REQUEST => CommandKind::AsyncEventRequest,
                admin_op::ABORT => CommandKind::Abort,
                _ => CommandKind::Other,
            }
        }
    }

    /// The `opcode` label value.
    pub fn label(self) -> &'static str {
        match self {
            CommandKind::Read => "read",
            CommandKind::Write => "write",
            CommandKind::Flush => "flush",
            CommandKind::WriteZeroes => "write_zeroes",
            CommandKind::DatasetManagement => "dataset_management",
            CommandKind::Compare => "compare",
            CommandKind::Other => "other",
            CommandKind::Identify => "identify",
            CommandKind::GetLogPage => "get_log_page",
            CommandKind::GetFeatures => "get_features",
            CommandKind::SetFeatures => "set_features",
            CommandKind::KeepAlive => "keep_alive",
            CommandKind::AsyncEventRequest => "async_event_request",
            CommandKind::Abort => "abort",
            CommandKind::Connect => "connect",
            CommandKind::PropertyGet => "property_get",
            CommandKind::PropertySet => "property_set",
            CommandKind::Disconnect => "disconnect",
        }
    }

    /// Index into the counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for the kinds a namespace's counters keep.
    pub fn is_io(self) -> bool {
        self.index() < IO_KINDS
    }

    /// False for commands whose completion waits for an event rather than for work (AER).
    pub fn has_latency(self) -> bool {
        self != CommandKind::AsyncEventRequest
    }
}

/// The histogram bucket of a latency.
pub fn latency_bucket(ns: u64) -> usize {
    LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Single-writer increment: the owning reactor is the only writer, so load + store cannot lose updates.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// One kind's counters.
#[derive(Debug)]
struct KindCounters {
    commands: AtomicU64,
    buckets: [AtomicU64; LATENCY_BUCKETS],
    latency_sum_ns: AtomicU64,
}

impl Default for KindCounters {
    fn default() -> Self {
        KindCounters {
            commands: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_sum_ns: AtomicU64::new(0),
        }
    }
}

/// Commands, latencies and bytes of `K` kinds (a namespace: [`IO_KINDS`]; commands without a namespace:
/// [`ALL_KINDS`]).
#[derive(Debug)]
pub struct CommandCounters<const K: usize> {
    kinds: [KindCounters; K],
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl<const K: usize> Default for CommandCounters<K> {
    fn default() -> Self {
        CommandCounters {
            kinds: std::array::from_fn(|_| KindCounters::default()),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }
    }
}

impl<const K: usize> CommandCounters<K> {
    fn record(&self, kind: CommandKind, latency: Option<Duration>, bytes_read: u64, bytes_written: u64) {
        // A kind this set does not keep counts as `Other` (an admin opcode number on an I/O queue cannot occur:
        // `CommandKind::of` maps by queue type).
        let k = self.kinds.get(kind.index()).unwrap_or(&self.kinds[CommandKind::Other.index()]);
        bump(&k.commands, 1);
        if let Some(latency) = latency {
            let ns = nanos(latency);
            bump(&k.buckets[latency_bucket(ns)], 1);
            bump(&k.latency_sum_ns, ns);
        }
        if bytes_read > 0 {
            bump(&self.bytes_read, bytes_read);
        }
        if bytes_written > 0 {
            bump(&self.bytes_written, bytes_written);
        }
    }

    /// Add the current values to `into`.
    fn add_to(&self, into: &mut CommandSnapshot) {
        for (i, k) in self.kinds.iter().enumerate() {
            let s = &mut into.kinds[i];
            s.commands = s.commands.wrapping_add(k.commands.load(Ordering::Relaxed));
            for (b, c) in s.buckets.iter_mut().zip(&k.buckets) {
                *b = b.wrapping_add(c.load(Ordering::Relaxed));
            }
            s.latency_sum_ns = s.latency_sum_ns.wrapping_add(k.latency_sum_ns.load(Ordering::Relaxed));
        }
        into.bytes_read = into.bytes_read.wrapping_add(self.bytes_read.load(Ordering::Relaxed));
        into.bytes_written = into.bytes_written.wrapping_add(self.bytes_written.load(Ordering::Relaxed));
    }
}

/// A namespace's counters in one queue.
pub type NamespaceCounters = CommandCounters<IO_KINDS>;

/// One kind's values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindSnapshot {
    /// Commands completed (any status).
    pub commands: u64,
    /// Latency histogram, per bucket (not cumulative); the last is +Inf.
    pub buckets: [u64; LATENCY_BUCKETS],
    /// Sum of the observed latencies in nanoseconds.
    pub latency_sum_ns: u64,
}

impl KindSnapshot {
    /// Observations in the latency histogram.
    pub fn latency_count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, &b| a.wrapping_add(b))
    }
}

/// Counter values of a namespace (or of the commands without one), summed over queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSnapshot {
    /// By [`CommandKind::index`].
    pub kinds: [KindSnapshot; ALL_KINDS],
    /// Bytes returned to hosts by successful Reads.
    pub bytes_read: u64,
    /// Bytes stored by successful Writes.
    pub bytes_written: u64,
}

impl Default for CommandSnapshot {
    fn default() -> Self {
        CommandSnapshot { kinds: [KindSnapshot::default(); ALL_KINDS], bytes_read: 0, bytes_written: 0 }
    }
}

impl CommandSnapshot {
    /// The values of `kind`.
    pub fn kind(&self, kind: CommandKind) -> &KindSnapshot {
        &self.kinds[kind.index()]
    }

    fn add(&mut self, o: &CommandSnapshot) {
        for (a, b) in self.kinds.iter_mut().zip(&o.kinds) {
            a.commands = a.commands.wrapping_add(b.commands);
            for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
                *x = x.wrapping_add(*y);
            }
            a.latency_sum_ns = a.latency_sum_ns.wrapping_add(b.latency_sum_ns);
        }
        self.bytes_read = self.bytes_read.wrapping_add(o.bytes_read);
        self.bytes_written = self.bytes_written.wrapping_add(o.bytes_written);
    }
}

/// Distinct error statuses one queue tells apart; more land in an overflow count (the target answers with
/// about 30 different statuses, a queue sees a handful).
const ERROR_SLOTS: usize = 32;

/// Marks a used error slot (status codes are 11 bits).
const USED: u16 = 0x8000;

/// Errors by status code (SCT and SC; CRD, More and DNR ignored), in a fixed table scanned linearly.
#[derive(Debug)]
struct ErrorCounters {
    codes: [AtomicU16; ERROR_SLOTS],
    counts: [AtomicU64; ERROR_SLOTS],
    overflow: AtomicU64,
}

impl Default for ErrorCounters {
    fn default() -> Self {
        ErrorCounters {
            codes: std::array::from_fn(|_| AtomicU16::new(0)),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
        }
    }
}

/// Status code kept for errors: SCT and SC.
fn error_code(status: Status) -> u16 {
    status.field() & 0x7ff
}

/// The status field for the status code an error table holds.
pub(crate) fn code_status(code: u16) -> Status {
    Status::from_field(code & 0x7ff)
}

/// Code under which errors beyond a queue's table are reported (not a valid status code: bit 11 set).
pub(crate) const OVERFLOW_CODE: u16 = 0x800;

impl ErrorCounters {
    fn record(&self, status: Status) {
        let code = error_code(status) | USED;
        for (c, n) in self.codes.iter().zip(&self.counts) {
            let current = c.load(Ordering::Relaxed);
            if current == code {
                bump(n, 1);
                return;
            }
            if current == 0 {
                // Publish the code after its (zero) count: a reader seeing the code reads a valid count.
                c.store(code, Ordering::Release);
                bump(n, 1);
                return;
            }
        }
        bump(&self.overflow, 1);
    }

    fn add_to(&self, into: &mut BTreeMap<u16, u64>) {
        for (c, n) in self.codes.iter().zip(&self.counts) {
            let code = c.load(Ordering::Acquire);
            if code == 0 {
                break;
            }
            let e = into.entry(code & !USED).or_default();
            *e = e.wrapping_add(n.load(Ordering::Relaxed));
        }
        let overflow = self.overflow.load(Ordering::Relaxed);
        if overflow > 0 {
            let e = into.entry(OVERFLOW_CODE).or_default();
            *e = e.wrapping_add(overflow);
        }
    }
}

/// What a queue's counters hold, shared with the scrape.
#[derive(Debug, Default)]
pub struct QueueMetrics {
    /// Commands that name no namespace of the subsystem (admin and fabrics commands, broadcast or invalid NSIDs).
    unattributed: CommandCounters<ALL_KINDS>,
    /// Per-namespace counters, by NSID; appended to at a namespace's first command on the queue.
    namespaces: Mutex<Vec<(u32, Arc<NamespaceCounters>)>>,
    errors: ErrorCounters,
}

impl QueueMetrics {
    fn add_to(&self, totals: &mut Totals) {
        self.unattributed.add_to(&mut totals.unattributed);
        for (nsid, counters) in lock(&self.namespaces).iter() {
            counters.add_to(totals.namespaces.entry(*nsid).or_default());
        }
        self.errors.add_to(&mut totals.errors);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counter values of a subsystem: every queue it has had, live or ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Commands that named no namespace (`namespace="0"`).
    pub unattributed: CommandSnapshot,
    /// By NSID.
    pub namespaces: BTreeMap<u32, CommandSnapshot>,
    /// Errors by status code (SCT << 8 | SC; `OVERFLOW_CODE` for codes beyond a queue's table).
    pub errors: BTreeMap<u16, u64>,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.unattributed.add(&o.unattributed);
        for (nsid, s) in &o.namespaces {
            self.namespaces.entry(*nsid).or_default().add(s);
        }
        for (code, n) in &o.errors {
            let e = self.errors.entry(*code).or_default();
            *e = e.wrapping_add(*n);
        }
    }
}

#[derive(Debug, Default)]
struct SubsystemState {
    live: Vec<Arc<QueueMetrics>>,
    retired: Totals,
}

/// A subsystem's metrics: the counters of its live queues and the totals of those that ended. Touched at
/// Connect, at a queue's end, at a keep-alive expiry and by the scrape; never per command.
#[derive(Debug, Default)]
pub struct SubsystemMetrics {
    state: Mutex<SubsystemState>,
    keep_alive_expiries: AtomicU64,
}

impl SubsystemMetrics {
    /// Values summed over every queue the subsystem has had.
    pub fn totals(&self) -> Totals {
        let state = lock(&self.state);
        let mut totals = state.retired.clone();
        for q in &state.live {
            q.add_to(&mut totals);
        }
        totals
    }

    /// Associations ended by the Keep Alive Timer.
    pub fn keep_alive_expiries(&self) -> u64 {
        self.keep_alive_expiries.load(Ordering::Relaxed)
    }

    /// An association of this subsystem ended because its Keep Alive Timer expired.
    pub(crate) fn keep_alive_expired(&self) {
        self.keep_alive_expiries.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues counted live now.
    pub fn live_queues(&self) -> usize {
        lock(&self.state).live.len()
    }

    fn register(&self, queue: Arc<QueueMetrics>) {
        lock(&self.state).live.push(queue);
    }

    fn retire(&self, queue: &Arc<QueueMetrics>) {
        let mut state = lock(&self.state);
        if let Some(pos) = state.live.iter().position(|q| Arc::ptr_eq(q, queue)) {
            let q = state.live.swap_remove(pos);
            let mut totals = Totals::default();
            q.add_to(&mut totals);
            state.retired.add(&totals);
        }
    }
}

/// A completed command, as a queue reports it to its [`QueueRecorder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    /// What the command was.
    pub kind: CommandKind,
    /// The NSID of a command of an I/O queue (`None` on the admin queue).
    pub nsid: Option<u32>,
    /// From the capsule's arrival to the response being queued (`None`: not observed).
    pub latency: Option<Duration>,
    /// Bytes a successful Read returned (else 0).
    pub bytes_read: u64,
    /// Bytes a successful Write stored (else 0).
    pub bytes_written: u64,
    /// The completion status.
    pub status: Status,
}

impl Completed {
    /// A command of `kind` that completed with `status`, no bytes, no latency observed.
    pub fn new(kind: CommandKind, status: Status) -> Self {
        Completed { kind, nsid: None, latency: None, bytes_read: 0, bytes_written: 0, status }
    }
}

/// The counting side of one connected queue, owned by it (its reactor thread alone writes). Dropping it — the
/// queue ended — folds its counts into the subsystem's totals.
#[derive(Debug)]
pub struct QueueRecorder {
    shared: Arc<QueueMetrics>,
    subsystem: Arc<SubsystemMetrics>,
    /// The same counters as `shared.namespaces`, sorted by NSID, for lookups without the lock.
    namespaces: Vec<(u32, Arc<NamespaceCounters>)>,
    io: bool,
}

impl QueueRecorder {
    /// Start counting a queue of the subsystem whose metrics are `subsystem`: an I/O queue (`io`) or an admin
    /// queue. Called at Connect.
    pub fn new(subsystem: &Arc<SubsystemMetrics>, io: bool) -> Self {
        let shared = Arc::new(QueueMetrics::default());
        subsystem.register(Arc::clone(&shared));
        QueueRecorder { shared, subsystem: Arc::clone(subsystem), namespaces: Vec::new(), io }
    }

    /// True for an I/O queue.
    pub fn is_io(&self) -> bool {
        self.io
    }

    /// A command completed. `exists` says whether the namespace `completed.nsid` names is active; it is only
    /// asked the first time the queue sees an NSID, so a hostile host cannot make us keep counters for
    /// namespaces that do not exist.
    pub fn record(&mut self, completed: &Completed, exists: impl FnOnce(u32) -> bool) {
        let Completed { kind, nsid, latency, bytes_read, bytes_written, status } = *completed;
        let latency = latency.filter(|_| kind.has_latency());
        match nsid.filter(|_| kind.is_io()).and_then(|nsid| self.namespace(nsid, exists)) {
            Some(ns) => ns.record(kind, latency, bytes_read, bytes_written),
            None => self.shared.unattributed.record(kind, latency, bytes_read, bytes_written),
        }
        if !status.is_success() {
            self.shared.errors.record(status);
        }
    }

    fn namespace(&mut self, nsid: u32, exists: impl FnOnce(u32) -> bool) -> Option<&NamespaceCounters> {
        match self.namespaces.binary_search_by_key(&nsid, |(n, _)| *n) {
            Ok(i) => Some(&self.namespaces[i].1),
            Err(i) => {
                if !exists(nsid) {
                    return None;
                }
                // First command of this queue for the namespace: allocate its counters once.
                let counters = Arc::new(NamespaceCounters::default());
                lock(&self.shared.namespaces).push((nsid, Arc::clone(&counters)));
                self.namespaces.insert(i, (nsid, counters));
                Some(&self.namespaces[i].1)
            }
        }
    }
}

impl Drop for QueueRecorder {
    fn drop(&mut self) {
        self.subsystem.retire(&self.shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_upper_bounds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(10_000), 0, "le is inclusive");
        assert_eq!(latency_bucket(10_001), 1);
        assert_eq!(latency_bucket(1_000_000), 6);
        assert_eq!(latency_bucket(10_000_000_000), LATENCY_BUCKETS - 2);
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn kinds_are_indexed_in_order() {
        for (i, k) in CommandKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(k.is_io(), i < IO_KINDS);
        }
        let labels: std::collections::BTreeSet<_> = CommandKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), ALL_KINDS);
    }

    #[test]
    fn opcode_numbers_are_read_by_queue_type() {
        let sqe = SubmissionQueueEntry { opcode: 0x02, ..Default::default() };
        assert_eq!(CommandKind::of(&sqe, true), CommandKind::Read);
        assert_eq!(CommandKind::of(&sqe, false), CommandKind::GetLogPage);
        let sqe = SubmissionQueueEntry { opcode: 0x42, ..Default::default() };
        assert_eq!(CommandKind::of(&sqe, true), CommandKind::Other);
    }

    #[test]
    fn ended_queues_are_folded_not_lost() {
        let subsystem = Arc::new(SubsystemMetrics::default());
        let mut a = QueueRecorder::new(&subsystem, true);
        let mut b = QueueRecorder::new(&subsystem, true);
        let lat = Some(Duration::from_micros(30));
        let read = Completed {
            nsid: Some(1),
            latency: lat,
            bytes_read: 4096,
            ..Completed::new(CommandKind::Read, Status::SUCCESS)
        };
        a.record(&read, |_| true);
        let write = Completed {
            nsid: Some(1),
            latency: lat,
            bytes_written: 512,
            ..Completed::new(CommandKind::Write, Status::SUCCESS)
        };
        b.record(&write, |_| true);
        let bad = Completed {
            nsid: Some(9),
            latency: lat,
            ..Completed::new(CommandKind::Read, Status::INVALID_NAMESPACE.with_dnr())
        };
        b.record(&bad, |_| false);
        assert_eq!(subsystem.live_queues(), 2);
        let before = subsystem.totals();
        drop(a);
        assert_eq!(subsystem.live_queues(), 1);
        assert_eq!(subsystem.totals(), before, "ending a queue keeps its counts");
        drop(b);
        let t = subsystem.totals();
        assert_eq!(t, before);
        let ns1 = &t.namespaces[&1];
        assert_eq!(ns1.kind(CommandKind::Read).commands, 1);
        assert_eq!(ns1.kind(CommandKind::Read).buckets[2], 1, "30 µs lands in le=50µs");
        assert_eq!(ns1.kind(CommandKind::Read).latency_sum_ns, 30_000);
        assert_eq!((ns1.bytes_read, ns1.bytes_written), (4096, 512));
        assert!(!t.namespaces.contains_key(&9), "no counters for a namespace that does not exist");
        assert_eq!(t.unattributed.kind(CommandKind::Read).commands, 1);
        assert_eq!(t.errors, BTreeMap::from([(error_code(Status::INVALID_NAMESPACE), 1)]));
    }

    #[test]
    fn error_table_overflows_into_one_count() {
        let subsystem = Arc::new(SubsystemMetrics::default());
        let mut q = QueueRecorder::new(&subsystem, false);
        for sc in 0..40u8 {
            let status = Status::new(nvmf_common::nvme::StatusCodeType::VendorSpecific, sc);
            q.record(&Completed::new(CommandKind::Other, status), |_| false);
        }
        let t = subsystem.totals();
        assert_eq!(t.errors.len(), ERROR_SLOTS + 1);
        assert_eq!(t.errors[&OVERFLOW_CODE], 40 - ERROR_SLOTS as u64);
        assert_eq!(t.unattributed.kind(CommandKind::Other).commands, 40);
        assert_eq!(t.unattributed.kind(CommandKind::Other).latency_count(), 0);
    }
}
