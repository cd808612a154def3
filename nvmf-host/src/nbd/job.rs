//! An NBD request's state from its header to the end of its reply ([`Job`]), and the session's pool of jobs and
//! data buffers that bounds what one client has in flight ([`Pool`]: [`MAX_IN_FLIGHT`] requests,
//! [`IN_FLIGHT_BYTES`]).

use super::proto::{errno, SIMPLE_REPLY_LEN};
use super::{IN_FLIGHT_BYTES, MAX_IN_FLIGHT};
use crate::queue::handle::Reply;

/// One request from its header to its reply.
#[derive(Debug, Default)]
pub(super) struct Job {
    /// Its slot among the session's jobs in flight (the high half of its commands' tags).
    pub(super) slot: usize,
    pub(super) cookie: u64,
    /// The NBD error (0: success so far).
    pub(super) error: u32,
    /// Reply data follows the header (a read).
    pub(super) read: bool,
    /// Flush once the commands completed (trim with FUA: Dataset Management has no FUA bit).
    pub(super) flush_after: bool,
    /// Bytes charged to the in-flight budget.
    pub(super) bytes: u64,
    /// NVMe commands submitted (pieces `0..commands`, in block order) and completed.
    pub(super) commands: usize,
    pub(super) completed: usize,
    /// Data buffers: a write's payload as it is read; then each command's buffer at its piece's index (a
    /// read's data in block order).
    pub(super) buffers: Vec<Vec<u8>>,
    /// The reply header, once the job finished.
    pub(super) header: [u8; SIMPLE_REPLY_LEN],
}

impl Job {
    /// The reply's length on the wire.
    pub(super) fn reply_len(&self) -> usize {
        SIMPLE_REPLY_LEN + self.data().iter().map(Vec::len).sum::<usize>()
    }

    /// The reply's data: a successful read's buffers.
    pub(super) fn data(&self) -> &[Vec<u8>] {
        if self.read && self.error == 0 {
            &self.buffers
        } else {
            &[]
        }
    }

    /// A command of this job finished with `reply`.
    pub(super) fn complete(&mut self, piece: usize, reply: Reply) {
        self.completed += 1;
        match &reply.result {
            Ok(cqe) if cqe.status.is_success() => {}
            Ok(cqe) => {
                tracing::warn!(status = %cqe.status, "NBD request: NVMe error");
                self.error = errno::EIO;
            }
            Err(e) => {
                tracing::warn!(error = %e, "NBD request: queue failed");
                self.error = errno::EIO;
            }
        }
        if self.buffers.len() <= piece {
            self.buffers.resize_with(piece + 1, Vec::new);
        }
        self.buffers[piece] = reply.data;
    }
}

/// The session's reusable jobs and buffers, and what is in flight (from a request's header to the end of its
/// reply).
#[derive(Debug)]
pub(super) struct Pool {
    jobs: Vec<Job>,
    /// Job slots not in flight.
    slots: Vec<usize>,
    buffers: Vec<Vec<u8>>,
    max_buffers: usize,
    pub(super) in_flight: usize,
    bytes: u64,
}

impl Pool {
    pub(super) fn new(max_buffers: usize) -> Pool {
        let slots = (0..MAX_IN_FLIGHT).rev().collect();
        Pool { jobs: Vec::new(), slots, buffers: Vec::new(), max_buffers, in_flight: 0, bytes: 0 }
    }

    pub(super) fn reclaim(&mut self, mut job: Job) {
        self.in_flight -= 1;
        self.bytes -= job.bytes;
        self.slots.push(job.slot);
        for b in job.buffers.drain(..) {
            self.give_back(b);
        }
        self.jobs.push(job);
    }

    pub(super) fn give_back(&mut self, b: Vec<u8>) {
        if self.buffers.len() < self.max_buffers && b.capacity() > 0 {
            self.buffers.push(b);
        }
    }

    /// A job charged with `bytes`, or `None` while the limits are reached (the first job always goes).
    pub(super) fn acquire(&mut self, bytes: u64) -> Option<Job> {
        if self.in_flight >= MAX_IN_FLIGHT || (self.in_flight > 0 && self.bytes + bytes > IN_FLIGHT_BYTES) {
            return None;
        }
        // Fewer than MAX_IN_FLIGHT jobs are out, so a slot is free.
        let slot = self.slots.pop()?;
        self.in_flight += 1;
        self.bytes += bytes;
        let mut job = self.jobs.pop().unwrap_or_default();
        job.slot = slot;
        (job.commands, job.completed, job.bytes, job.error) = (0, 0, bytes, 0);
        (job.read, job.flush_after) = (false, false);
        Some(job)
    }

    pub(super) fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// A buffer of `len` bytes for a read to fill: its stale bytes stay, only growth beyond its last length
    /// is zeroed (not the whole piece on every read).
    pub(super) fn read_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_bounds_requests_and_bytes_in_flight() {
        let mut pool = Pool::new(2);
        // The first request always goes, however large; the budget then holds the next back.
        let mut big = pool.acquire(IN_FLIGHT_BYTES).unwrap();
        assert_eq!(pool.bytes, IN_FLIGHT_BYTES);
        assert!(pool.acquire(4096).is_none());
        big.buffers = vec![vec![0; 8], vec![0; 8], vec![0; 8]];
        pool.reclaim(big);
        let small = pool.acquire(4096).unwrap();
        assert_eq!((pool.in_flight, pool.bytes), (1, 4096));
        // Buffers kept for reuse stop at the cap.
        assert_eq!(pool.buffers.len(), 2);
        let mut held = vec![small];
        for _ in 1..MAX_IN_FLIGHT {
            held.push(pool.acquire(0).unwrap());
        }
        // At the request limit: no job until one is reclaimed.
        assert!(pool.acquire(0).is_none());
        pool.reclaim(held.pop().unwrap());
        assert!(pool.acquire(0).is_some());
    }
}
