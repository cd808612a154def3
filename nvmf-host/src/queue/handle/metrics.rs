//! Per-queue metrics: bytes, errors and a latency histogram of the commands a queue completed ([`QueueMetrics`]),
//! counted by the link's I/O thread alone (`Meter`: relaxed loads and stores, no locked instruction on the data
//! path) and summed over the links a reconnect replaced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nvmf_common::nvme::CompletionQueueEntry;

use super::in_flight::InFlight;
use crate::error::HostError;
use crate::queue::DataDirection;

/// Latency histogram buckets of [`QueueMetrics`]: bucket `i < LATENCY_BUCKETS - 1` counts commands that took
/// at most 2^i µs and more than the bucket before; the last bucket counts the slower ones (above 2^22 µs,
/// about 4.2 s).
pub const LATENCY_BUCKETS: usize = 24;

/// The bucket of a command that took `ns` nanoseconds (see [`LATENCY_BUCKETS`]).
pub(super) fn latency_bucket(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    let b = if us <= 1 { 0 } else { 64 - (us - 1).leading_zeros() };
    usize::try_from(b).unwrap_or(usize::MAX).min(LATENCY_BUCKETS - 1)
}

/// The upper bound in seconds of latency bucket `b` (infinite for the last).
pub fn latency_bucket_bound(b: usize) -> f64 {
    if b + 1 >= LATENCY_BUCKETS {
        return f64::INFINITY;
    }
    f64::from(1u32 << b) * 1e-6
}

/// Bytes, errors and latency of the commands one link completed, written by its I/O thread only.
#[derive(Debug, Default)]
pub(super) struct Meter {
    pub(super) read_bytes: AtomicU64,
    pub(super) written_bytes: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) latency_sum_ns: AtomicU64,
    pub(super) latency: [AtomicU64; LATENCY_BUCKETS],
}

/// `v += d` by the counter's only writer (a load and a store: no locked instruction on the data path).
pub(super) fn bump(v: &AtomicU64, d: u64) {
    v.store(v.load(Ordering::Relaxed).wrapping_add(d), Ordering::Relaxed);
}

impl Meter {
    pub(super) fn record(
        &self,
        f: &InFlight,
        result: &Result<CompletionQueueEntry, HostError>,
        len: usize,
        now: Instant,
    ) {
        let len = len as u64;
        match result {
            Ok(cqe) if cqe.status.is_success() => match f.direction {
                DataDirection::ControllerToHost => bump(&self.read_bytes, len),
                DataDirection::HostToController => bump(&self.written_bytes, len),
                DataDirection::None => {}
            },
            _ => bump(&self.errors, 1),
        }
        if let Some(submitted) = f.submitted.filter(|_| f.timed) {
            let ns = u64::try_from(now.saturating_duration_since(submitted).as_nanos()).unwrap_or(u64::MAX);
            bump(&self.latency_sum_ns, ns);
            bump(&self.latency[latency_bucket(ns)], 1);
        }
    }

    /// Add `other`'s counts (a retired link's) to these. Not from an I/O thread: atomically.
    pub(super) fn absorb(&self, other: &Meter) {
        let add = |to: &AtomicU64, from: &AtomicU64| to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        add(&self.read_bytes, &other.read_bytes);
        add(&self.written_bytes, &other.written_bytes);
        add(&self.errors, &other.errors);
        add(&self.latency_sum_ns, &other.latency_sum_ns);
        for (to, from) in self.latency.iter().zip(&other.latency) {
            add(to, from);
        }
    }
}

/// A queue's counters and metrics as a scrape sees them ([`super::QueueHandle::stats`]), summed over the connections
/// a reconnect replaced (except `max_outstanding`, the current connection's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueMetrics {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed (any status).
    pub completed: u64,
    /// The most commands outstanding at once.
    pub max_outstanding: u16,
    /// R2Ts served (NVMe/TCP).
    pub r2ts: u64,
    /// Times the I/O thread waited in a `poll` that could block (the others returned at once: polling).
    pub sleeps: u64,
    /// Data bytes moved from the controller by successful commands (reads; Identify and log pages on the
    /// admin queue).
    pub read_bytes: u64,
    /// Data bytes moved to the controller by successful commands (writes, DSM ranges, Connect data).
    pub written_bytes: u64,
    /// Commands that completed with a status other than success, or failed in the transport.
    pub errors: u64,
    /// Sum of the latencies counted in `latency`, in nanoseconds.
    pub latency_sum_ns: u64,
    /// Commands per latency bucket, submission (taken by the queue's thread) to completion (see
    /// [`LATENCY_BUCKETS`]; Asynchronous Event Requests are not counted).
    pub latency: [u64; LATENCY_BUCKETS],
}

impl QueueMetrics {
    /// Commands in the latency histogram.
    pub fn latency_count(&self) -> u64 {
        self.latency.iter().sum()
    }
}
