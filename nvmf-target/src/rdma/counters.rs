//! [`RdmaCounters`]: one reactor's NVMe/RDMA counters — work requests posted and completed by opcode, error completions
//! by status, stale completions, live queue pairs. The reactor thread is the only writer; metrics read them at scrape
//! time.

use std::sync::atomic::{AtomicU64, Ordering};

use nvmf_common::transport::rdma::verbs::WcStatus;

use super::memory::Work;
use super::routing::WrKind;

/// Work completion status values counted one by one (higher ones are counted with the last).
const STATUS_SLOTS: usize = 24;

/// One reactor's NVMe/RDMA counters (single writer: the reactor; read at scrape time).
#[derive(Debug, Default)]
pub struct RdmaCounters {
    /// Posted work requests: RDMA READ, RDMA WRITE, SEND, receive, SEND with invalidate.
    posted: [AtomicU64; 5],
    /// Successful completions: receive, RDMA READ, SEND.
    completed: [AtomicU64; 3],
    /// Error completions by `ibv_wc_status` value.
    errors: [AtomicU64; STATUS_SLOTS],
    /// Live queue pairs.
    queue_pairs: AtomicU64,
    /// Completions whose queue pair was already gone (dropped, never delivered).
    stale: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl RdmaCounters {
    pub(crate) fn posted(&self, work: &Work) {
        let i = match work {
            Work::Read { .. } => 0,
            Work::Write { .. } => 1,
            Work::Send { invalidate: None, .. } => 2,
            Work::Send { invalidate: Some(_), .. } => 4,
        };
        bump(&self.posted[i], 1);
    }

    pub(crate) fn posted_receives(&self, n: usize) {
        bump(&self.posted[3], u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub(crate) fn completed(&self, kind: WrKind) {
        let i = match kind {
            WrKind::Recv | WrKind::SharedRecv => 0,
            WrKind::Read => 1,
            WrKind::Send => 2,
            // Signalled on Soft-iWARP only, not counted (`completions` has no RDMA WRITE).
            WrKind::Write => return,
        };
        bump(&self.completed[i], 1);
    }

    pub(crate) fn queue_pair_created(&self) {
        bump(&self.queue_pairs, 1);
    }

    pub(crate) fn queue_pair_destroyed(&self) {
        self.queue_pairs.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn completion_error(&self, status: WcStatus) {
        let i = usize::try_from(status.to_raw()).unwrap_or(usize::MAX).min(STATUS_SLOTS - 1);
        bump(&self.errors[i], 1);
    }

    pub(crate) fn stale_completion(&self) {
        bump(&self.stale, 1);
    }

    /// Posted work requests by opcode (`rdma_read`, `rdma_write`, `send`, `send_with_invalidate`, `recv`).
    pub fn work_requests(&self) -> [(&'static str, u64); 5] {
        let v = |i: usize| self.posted[i].load(Ordering::Relaxed);
        [("rdma_read", v(0)), ("rdma_write", v(1)), ("send", v(2)), ("send_with_invalidate", v(4)), ("recv", v(3))]
    }

    /// Successful completions by opcode (`recv`, `rdma_read`, `send`; RDMA WRITEs are unsignalled, except on
    /// Soft-iWARP, where their completions are not counted).
    pub fn completions(&self) -> [(&'static str, u64); 3] {
        let v = |i: usize| self.completed[i].load(Ordering::Relaxed);
        [("recv", v(0)), ("rdma_read", v(1)), ("send", v(2))]
    }

    /// Error completions by work completion status name (only statuses seen).
    pub fn completion_errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.errors.iter().enumerate().filter_map(|(i, c)| {
            let n = c.load(Ordering::Relaxed);
            let status = WcStatus::from_raw(u32::try_from(i).ok()?);
            (n > 0).then(|| (status.name(), n))
        })
    }

    /// Completions that arrived for a queue pair already destroyed, and were dropped.
    pub fn stale_completions(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Live queue pairs.
    pub fn queue_pairs(&self) -> u64 {
        self.queue_pairs.load(Ordering::Relaxed)
    }
}
