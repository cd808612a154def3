//! A subsystem's counters ([`SubsystemMetrics`]): its live queues' [`QueueCounters`] and the [`Totals`] of those that
//! ended, which the metrics collector reads at scrape time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::kind::{CommandKind, ALL_KINDS, LATENCY_BUCKETS};
use super::lock;
use super::queue::QueueCounters;

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

    pub(super) fn add(&mut self, o: &CommandSnapshot) {
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
    live: Vec<Arc<QueueCounters>>,
    retired: Totals,
}

/// A subsystem's counters: those of its live queues and the totals of those that ended (what the metrics export).
/// Touched at Connect, at a queue's end, at a keep-alive expiry and by the scrape; never per command.
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

    pub(super) fn register(&self, queue: Arc<QueueCounters>) {
        lock(&self.state).live.push(queue);
    }

    pub(super) fn retire(&self, queue: &Arc<QueueCounters>) {
        let mut state = lock(&self.state);
        if let Some(pos) = state.live.iter().position(|q| Arc::ptr_eq(q, queue)) {
            let q = state.live.swap_remove(pos);
            let mut totals = Totals::default();
            q.add_to(&mut totals);
            state.retired.add(&totals);
        }
    }
}
