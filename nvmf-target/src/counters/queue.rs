//! One queue's counters: [`QueueCounters`], shared with their readers, and [`QueueRecorder`], the queue's writing
//! side.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvmf_common::nvme::{Status, StatusCodeType};

use super::kind::{latency_bucket, CommandKind, ALL_KINDS, IO_KINDS, LATENCY_BUCKETS};
use super::subsystem::{CommandSnapshot, SubsystemMetrics, Totals};
use super::{bump, lock};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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

    /// Bytes read and written.
    fn bytes(&self) -> (u64, u64) {
        (self.bytes_read.load(Ordering::Relaxed), self.bytes_written.load(Ordering::Relaxed))
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

    /// Errors recorded, in the table and beyond it.
    fn total(&self) -> u64 {
        self.counts.iter().fold(self.overflow.load(Ordering::Relaxed), |a, n| a.wrapping_add(n.load(Ordering::Relaxed)))
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

/// The one counter set of a queue: by kind and namespace (commands, latencies, bytes), errors by status, the SMART
/// counts, and the commands it holds. Written by the queue's reactor alone; read by the scrape (through the
/// subsystem's [`SubsystemMetrics`]) and by the SMART log and `nvmf-target list` (through the controller's entry of
/// the queue: [`QueueCounters::snapshot`]).
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// Commands that name no namespace of the subsystem (admin and fabrics commands, broadcast or invalid NSIDs).
    unattributed: CommandCounters<ALL_KINDS>,
    /// Per-namespace counters, by NSID; appended to at a namespace's first command on the queue.
    namespaces: Mutex<Vec<(u32, Arc<NamespaceCounters>)>>,
    errors: ErrorCounters,
    /// Read and Compare commands completed successfully (SMART's Host Read Commands).
    read_commands: AtomicU64,
    /// Write and Write Zeroes commands completed successfully (SMART's Host Write Commands).
    write_commands: AtomicU64,
    /// Commands failed with a Media and Data Integrity Error status.
    media_errors: AtomicU64,
    /// Commands the queue holds now: arrived, their response not yet released by the transport.
    outstanding: AtomicU32,
}

impl QueueCounters {
    pub(super) fn add_to(&self, totals: &mut Totals) {
        self.unattributed.add_to(&mut totals.unattributed);
        for (nsid, counters) in lock(&self.namespaces).iter() {
            counters.add_to(totals.namespaces.entry(*nsid).or_default());
        }
        self.errors.add_to(&mut totals.errors);
    }

    /// Commands the queue holds now (arrived, response not yet released).
    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// The SMART and `list` view of the current values (takes the namespace list's lock: not for a reactor's I/O).
    pub fn snapshot(&self) -> CounterSnapshot {
        let (mut bytes_read, mut bytes_written) = self.unattributed.bytes();
        for (_, ns) in lock(&self.namespaces).iter() {
            let (r, w) = ns.bytes();
            bytes_read = bytes_read.wrapping_add(r);
            bytes_written = bytes_written.wrapping_add(w);
        }
        CounterSnapshot {
            read_commands: self.read_commands.load(Ordering::Relaxed),
            write_commands: self.write_commands.load(Ordering::Relaxed),
            bytes_read,
            bytes_written,
            media_errors: self.media_errors.load(Ordering::Relaxed),
            errors: self.errors.total(),
        }
    }
}

/// A copy of the SMART and `list` counters, summed over queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Read and Compare commands completed successfully.
    pub read_commands: u64,
    /// Write and Write Zeroes commands completed successfully.
    pub write_commands: u64,
    /// Bytes returned by Read.
    pub bytes_read: u64,
    /// Bytes stored by Write.
    pub bytes_written: u64,
    /// Commands failed by a storage error.
    pub media_errors: u64,
    /// Commands completed with any error status.
    pub errors: u64,
}

impl std::ops::AddAssign for CounterSnapshot {
    fn add_assign(&mut self, o: Self) {
        self.read_commands = self.read_commands.wrapping_add(o.read_commands);
        self.write_commands = self.write_commands.wrapping_add(o.write_commands);
        self.bytes_read = self.bytes_read.wrapping_add(o.bytes_read);
        self.bytes_written = self.bytes_written.wrapping_add(o.bytes_written);
        self.media_errors = self.media_errors.wrapping_add(o.media_errors);
        self.errors = self.errors.wrapping_add(o.errors);
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

/// The writing side of one queue's [`QueueCounters`], owned by the queue (its reactor thread alone writes). It counts
/// commands from the queue's Connect ([`QueueRecorder::connect`]) to its end ([`QueueRecorder::retire`], or the drop),
/// which folds the counts into the subsystem's totals.
#[derive(Debug, Default)]
pub struct QueueRecorder {
    shared: Arc<QueueCounters>,
    /// The subsystem counting the queue: set at Connect, taken at the queue's end.
    subsystem: Option<Arc<SubsystemMetrics>>,
    /// The same counters as `shared.namespaces`, sorted by NSID, for lookups without the lock.
    namespaces: Vec<(u32, Arc<NamespaceCounters>)>,
    io: bool,
}

impl QueueRecorder {
    /// The counters, for the controller's entry of the queue.
    pub fn counters(&self) -> &Arc<QueueCounters> {
        &self.shared
    }

    /// Start counting, as a queue of the subsystem whose counters are `subsystem`: an I/O queue (`io`) or an admin
    /// queue. Called at Connect (the counts of commands before it belong to no subsystem).
    pub fn connect(&mut self, subsystem: &Arc<SubsystemMetrics>, io: bool) {
        self.retire();
        subsystem.register(Arc::clone(&self.shared));
        self.subsystem = Some(Arc::clone(subsystem));
        self.io = io;
    }

    /// True for an I/O queue.
    pub fn is_io(&self) -> bool {
        self.io
    }

    /// The queue holds `commands` now.
    pub fn set_outstanding(&self, commands: usize) {
        self.shared.outstanding.store(u32::try_from(commands).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// A command completed. `exists` says whether the namespace `completed.nsid` names is active; it is only
    /// asked the first time the queue sees an NSID, so a hostile host cannot make us keep counters for
    /// namespaces that do not exist. Not counted before Connect or after the queue's end.
    pub fn record(&mut self, completed: &Completed, exists: impl FnOnce(u32) -> bool) {
        if self.subsystem.is_none() {
            return;
        }
        let Completed { kind, nsid, latency, bytes_read, bytes_written, status } = *completed;
        let latency = latency.filter(|_| kind.has_latency());
        match nsid.filter(|_| kind.is_io()).and_then(|nsid| self.namespace(nsid, exists)) {
            Some(ns) => ns.record(kind, latency, bytes_read, bytes_written),
            None => self.shared.unattributed.record(kind, latency, bytes_read, bytes_written),
        }
        let shared = &self.shared;
        if status.is_success() {
            // SMART's host commands: the read command group (Compare reads the media) and the write group.
            match kind {
                CommandKind::Read | CommandKind::Compare => bump(&shared.read_commands, 1),
                CommandKind::Write | CommandKind::WriteZeroes => bump(&shared.write_commands, 1),
                _ => {}
            }
        } else {
            shared.errors.record(status);
            if status.sct() == StatusCodeType::MediaError {
                bump(&shared.media_errors, 1);
            }
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

    /// The queue ended: fold its counts into the subsystem's totals and stop counting. Idempotent.
    pub fn retire(&mut self) {
        if let Some(subsystem) = self.subsystem.take() {
            subsystem.retire(&self.shared);
        }
    }
}

impl Drop for QueueRecorder {
    fn drop(&mut self) {
        self.retire();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder(subsystem: &Arc<SubsystemMetrics>, io: bool) -> QueueRecorder {
        let mut r = QueueRecorder::default();
        r.connect(subsystem, io);
        r
    }

    #[test]
    fn ended_queues_are_folded_not_lost() {
        let subsystem = Arc::new(SubsystemMetrics::default());
        let mut a = recorder(&subsystem, true);
        let mut b = recorder(&subsystem, true);
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
        let mut q = recorder(&subsystem, false);
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

    #[test]
    fn the_smart_view_counts_successful_host_commands_and_every_error() {
        let subsystem = Arc::new(SubsystemMetrics::default());
        let mut q = recorder(&subsystem, true);
        let io = |kind, status, bytes_read, bytes_written| Completed {
            nsid: Some(1),
            bytes_read,
            bytes_written,
            ..Completed::new(kind, status)
        };
        q.record(&io(CommandKind::Read, Status::SUCCESS, 4096, 0), |_| true);
        q.record(&io(CommandKind::Compare, Status::SUCCESS, 0, 0), |_| true);
        q.record(&io(CommandKind::Write, Status::SUCCESS, 0, 512), |_| true);
        q.record(&io(CommandKind::WriteZeroes, Status::SUCCESS, 0, 0), |_| true);
        q.record(&io(CommandKind::Flush, Status::SUCCESS, 0, 0), |_| true);
        q.record(&io(CommandKind::Read, Status::LBA_OUT_OF_RANGE.with_dnr(), 0, 0), |_| true);
        let media = Status::new(nvmf_common::nvme::StatusCodeType::MediaError, 0x81);
        q.record(&io(CommandKind::Write, media, 0, 0), |_| true);
        q.record(&Completed::new(CommandKind::Read, Status::SUCCESS), |_| false);
        q.set_outstanding(3);
        let want = CounterSnapshot {
            read_commands: 3,
            write_commands: 2,
            bytes_read: 4096,
            bytes_written: 512,
            media_errors: 1,
            errors: 2,
        };
        assert_eq!(q.counters().snapshot(), want);
        assert_eq!(q.counters().outstanding(), 3);
        q.retire();
        q.record(&io(CommandKind::Read, Status::SUCCESS, 512, 0), |_| true);
        assert_eq!(q.counters().snapshot(), want, "nothing counts after the queue's end");
        assert_eq!(subsystem.totals().namespaces[&1].bytes_read, 4096);
    }

    #[test]
    fn nothing_counts_before_connect() {
        let mut q = QueueRecorder::default();
        q.record(&Completed::new(CommandKind::Connect, Status::INVALID_FIELD), |_| true);
        assert_eq!(q.counters().snapshot(), CounterSnapshot::default());
    }
}
