//! One perf worker: a thread that owns one bare I/O queue and keeps `queue_depth` commands in flight on it for
//! the run, then drains it. Its measuring loop never allocates (buffers and timestamps are made up front and
//! travel with the commands, offsets come from a xorshift generator) and blocks only in the queue's `poll`, when
//! its [`Poller`](nvmf_service::poll::Poller) says to sleep (the `--poll` mode); otherwise it polls again at once.
//! Every `IoTraffic::REPORT_INTERVAL` it adds its command counts to the controller's keep-alive traffic.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nvmf_common::nvme::io::{Read, Write};
use nvmf_service::poll::Wait;

use super::histogram::LatencyHistogram;
use super::PerfError;
use crate::controller::{IoTraffic, PollOptions};
use crate::error::HostError;
use crate::queue::{BareQueue, DataDirection, Request};

/// xorshift64*: cheap offsets, no allocation.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What one worker needs.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub(super) qid: u16,
    pub(super) nsid: u32,
    /// Blocks per command.
    pub(super) blocks: u64,
    /// Command-sized slots in the namespace.
    pub(super) slots: u64,
    /// First sequential slot of this queue.
    pub(super) start_slot: u64,
    pub(super) io_size: usize,
    pub(super) depth: u16,
    pub(super) random: bool,
    pub(super) read_percent: u8,
    pub(super) duration: Duration,
    pub(super) drain_timeout: Duration,
    /// When a poll may block (see [`SLEEP`]).
    pub(super) poll: PollOptions,
    /// The CPU to pin the worker to.
    pub(super) cpu: Option<usize>,
    /// Where the worker reports its commands to the controller's keep-alive (every `IoTraffic::REPORT_INTERVAL`).
    pub(super) traffic: Arc<IoTraffic>,
}

/// The longest one poll blocks when the poller says sleep: a socket or completion queue with news ends it
/// sooner, so this only bounds how late the run's end and the keep-alive report are seen.
const SLEEP: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub(super) struct WorkerResult {
    pub(super) reads: u64,
    pub(super) writes: u64,
    pub(super) histogram: LatencyHistogram,
    /// Polls of the queue, and those that could block.
    pub(super) waits: u64,
    pub(super) sleeps: u64,
}

fn submit_one(
    queue: &mut impl BareQueue<u32>,
    job: &Job,
    rng: &mut Rng,
    cursor: &mut u64,
    slot: u32,
    data: Vec<u8>,
) -> Result<(u64, bool), HostError> {
    let index = if job.random {
        rng.next() % job.slots
    } else {
        let i = *cursor;
        *cursor = (*cursor + 1) % job.slots;
        i
    };
    let slba = index * job.blocks;
    let read = job.read_percent >= 100 || (job.read_percent > 0 && rng.next() % 100 < u64::from(job.read_percent));
    // blocks <= 65536 (checked in `run`), so NLB fits 16 bits.
    let nlb = u16::try_from(job.blocks - 1).unwrap_or(u16::MAX);
    let (sqe, direction) = if read {
        (Read { nsid: job.nsid, slba, nlb, ..Read::default() }.to_sqe(), DataDirection::ControllerToHost)
    } else {
        (Write { nsid: job.nsid, slba, nlb, ..Write::default() }.to_sqe(), DataDirection::HostToController)
    };
    queue.submit(Request { sqe, data, direction, context: slot }).map_err(|r| r.error)?;
    Ok((slba, read))
}

/// One worker: keep `depth` commands in flight for `duration`, then drain.
pub(super) fn worker(mut queue: impl BareQueue<u32>, job: Job, start: &Barrier) -> Result<WorkerResult, PerfError> {
    // Pinned before the first allocation, so the buffers are the pinned CPU's memory. A failure still waits at
    // the barrier, which counts every worker.
    let pinned = job.cpu.map_or(Ok(()), nvmf_service::cpus::pin_current_thread);
    if let Err(source) = pinned {
        start.wait();
        return Err(PerfError::Pin { qid: job.qid, source });
    }
    let depth = usize::from(job.depth);
    let mut result = WorkerResult::default();
    // Everything the loop touches is allocated here.
    let mut buffers: Vec<Vec<u8>> = (0..depth)
        .map(|i| {
            // A non-zero pattern that differs per slot, so written data is recognisable.
            #[expect(clippy::cast_possible_truncation, reason = "a repeating byte pattern")]
            (0..job.io_size).map(|b| (b as u8).wrapping_mul(7).wrapping_add(i as u8) | 1).collect()
        })
        .collect();
    let mut started = vec![Instant::now(); depth];
    let mut slbas = vec![(0u64, true); depth];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(job.qid) << 32) ^ u64::from(job.nsid) | 1);
    let mut cursor = job.start_slot;
    start.wait();
    let begin = Instant::now();
    let end = begin + job.duration;
    for slot in 0..depth {
        let data = std::mem::take(&mut buffers[slot]);
        started[slot] = Instant::now();
        #[expect(clippy::cast_possible_truncation, reason = "slot < depth <= 4096")]
        let s = slot as u32;
        slbas[slot] = submit_one(&mut queue, &job, &mut rng, &mut cursor, s, data)?;
    }
    let mut outstanding = depth;
    let mut drain_deadline = None;
    // Commands not yet reported to the controller's keep-alive, and when it was last told.
    let (mut submitted, mut completed) = (depth as u64, 0u64);
    let mut reported_at = begin;
    let mut poller = job.poll.poller();
    // The first wait follows a burst of submissions: poll for their completions as after work.
    let mut timeout = Duration::ZERO;
    while outstanding > 0 {
        queue.poll(Some(timeout))?;
        result.waits += 1;
        // One clock read per poll, shared by the completions it brought (they arrived together): in a guest whose
        // clock has no vDSO each read is a system call.
        let now = Instant::now();
        let mut worked = false;
        while let Some(c) = queue.next_completion() {
            worked = true;
            let slot = c.context as usize;
            if slot >= depth {
                continue;
            }
            outstanding -= 1;
            completed += 1;
            let cqe = c.result?;
            let (slba, read) = slbas[slot];
            if !cqe.status.is_success() {
                let command = if read { "Read" } else { "Write" };
                return Err(PerfError::Command { qid: job.qid, command, slba, status: cqe.status });
            }
            if now <= end {
                result.histogram.record(now - started[slot]);
                if read {
                    result.reads += 1;
                } else {
                    result.writes += 1;
                }
                started[slot] = now;
                #[expect(clippy::cast_possible_truncation, reason = "slot < depth <= 4096")]
                let s = slot as u32;
                slbas[slot] = submit_one(&mut queue, &job, &mut rng, &mut cursor, s, c.data)?;
                outstanding += 1;
                submitted += 1;
            } else {
                buffers[slot] = c.data;
            }
        }
        timeout = match poller.after_turn(worked, now) {
            Wait::Poll => {
                poller.yield_if_idle(worked);
                Duration::ZERO
            }
            Wait::Sleep => SLEEP,
        };
        if now.duration_since(reported_at) >= IoTraffic::REPORT_INTERVAL {
            job.traffic.add(submitted, completed);
            (submitted, completed, reported_at) = (0, 0, now);
        }
        if now > end {
            let deadline = *drain_deadline.get_or_insert(now + job.drain_timeout);
            if now > deadline {
                return Err(PerfError::Host(HostError::Timeout {
                    what: format!("{outstanding} commands on queue {} after the run", job.qid),
                    after: job.drain_timeout,
                }));
            }
        }
    }
    queue.close();
    result.sleeps = poller.counts().1;
    Ok(result)
}
