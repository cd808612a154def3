//! The counters a queue bumps per command, below the controller: one set per queue ([`QueueCounters`], written
//! through its [`QueueRecorder`]) that every reader sums in its own way — the subsystem's totals for the metrics
//! ([`SubsystemMetrics`], read by `metrics/` at scrape time), and the controller's entries of its queues for the
//! SMART / Health log and `nvmf-target list` ([`QueueCounters::snapshot`]).
//!
//! Layering: the controller records into this module and `metrics/` reads it; this module imports neither, so the
//! metrics sit above the controller only (`docs/architecture.md`, issue 48).
//!
//! - `kind.rs`: [`CommandKind`] (the `opcode` label) and the latency histogram's buckets.
//! - `queue.rs`: [`QueueCounters`], [`QueueRecorder`], [`Completed`], [`CounterSnapshot`].
//! - `subsystem.rs`: [`SubsystemMetrics`] and what it sums to ([`Totals`], [`CommandSnapshot`], [`KindSnapshot`]).
//!
//! Ownership: a [`QueueRecorder`] belongs to one queue and only that queue's reactor writes its counters, with a
//! plain `Relaxed` load + store: a single writer cannot lose an update that way, and no locked read-modify-write
//! runs per command. Other threads (the scrape, an admin command's SMART log, the control socket) only load. At
//! Connect the queue's counters join its subsystem's live queues; when the queue ends they are folded into the
//! subsystem's ended totals under the lock a scrape takes, so a scrape never counts a queue twice nor loses it.
//!
//! A queue's counters of a namespace are created at the queue's first command for it (one allocation and one
//! uncontended lock per queue and namespace, never per command after that); afterwards a command finds them by
//! binary search in the queue's own sorted list.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

mod kind;
mod queue;
mod subsystem;

pub use kind::{latency_bucket, CommandKind, ALL_KINDS, IO_KINDS, LATENCY_BOUNDS_NS, LATENCY_BUCKETS};
pub(crate) use queue::{code_status, OVERFLOW_CODE};
pub use queue::{Completed, CounterSnapshot, QueueCounters, QueueRecorder};
pub use subsystem::{CommandSnapshot, KindSnapshot, SubsystemMetrics, Totals};

/// Single-writer increment: the owning reactor is the only writer, so load + store cannot lose updates.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
