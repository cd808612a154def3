//! [`run`]: an SPDK-`perf`-like load generator over NVMe/TCP or NVMe/RDMA, and its [`LatencyHistogram`].
//!
//! The association is brought up by [`Controller::connect`] with the admin queue only (either transport). perf
//! then asks for its I/O queues itself ([`Controller::request_io_queues`]) and connects each as a bare queue
//! (`TcpQueue` or `RdmaQueue`, both behind [`BareQueue`]; [`Controller::fabrics_connect`]) driven by its own worker thread
//! through the poll API, so exactly `queue_depth` commands are outstanding per queue and nothing sits between
//! the measuring loop and the socket or completion queue.
//!
//! Threads: one worker per I/O queue; the caller's thread waits for them. The measuring loop never
//! allocates: the data buffers (one per outstanding command) and the submission timestamps are allocated
//! up front and travel with the commands, the histogram is a fixed array, offsets come from a xorshift
//! generator. It blocks only in the queue's `poll`. Every [`IoTraffic::REPORT_INTERVAL`] a worker adds its
//! command counts to the controller's ([`Controller::bare_io_traffic`]), so a controller with Traffic Based Keep
//! Alive gets no Keep Alive while perf runs, as with the controller's own queues.
//!
//! Nothing is written to the namespace unless the workload writes.

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nvmf_common::nvme::io::{Read, Write};

use nvmf_common::fabrics::property::Capabilities;

use crate::controller::{ConnectOptions, Controller, IoTraffic, NamespaceInfo, Transport};
use crate::error::HostError;
use crate::queue::{BareQueue, DataDirection, Request, MAX_QUEUE_DEPTH};
#[cfg(feature = "rdma")]
use crate::rdma::{RdmaQueue, RdmaQueueOptions};
use crate::tcp::{TcpQueue, TcpQueueOptions};

/// What went wrong running perf.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The host library failed (connect, a queue, a command).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The options cannot be run against this controller/namespace.
    #[error("{0}")]
    Invalid(String),
    /// An I/O command completed with an error status.
    #[error("queue {qid}: {command} at LBA {slba} failed: {status}")]
    Command {
        /// The queue.
        qid: u16,
        /// Read or Write.
        command: &'static str,
        /// Where.
        slba: u64,
        /// The completion status.
        status: nvmf_common::nvme::Status,
    },
    /// A worker thread panicked.
    #[error("perf worker for queue {0} panicked")]
    Worker(u16),
    /// A worker could not be pinned to its CPU.
    #[error("perf worker for queue {qid}: {source}")]
    Pin {
        /// The worker's queue.
        qid: u16,
        /// Why.
        #[source]
        source: nvmf_service::cpus::CpuError,
    },
}

/// The I/O pattern (`-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random mix of reads and writes (`read_percent` reads).
    Rw,
}

impl Workload {
    /// Random offsets (otherwise sequential).
    pub fn is_random(self) -> bool {
        matches!(self, Workload::RandRead | Workload::RandWrite | Workload::Rw)
    }

    /// Percentage of reads, given the `-M` mix for [`Workload::Rw`].
    pub fn read_percent(self, mix: u8) -> u8 {
        match self {
            Workload::RandRead | Workload::Read => 100,
            Workload::RandWrite | Workload::Write => 0,
            Workload::Rw => mix.min(100),
        }
    }
}

/// The transport perf connects with (`-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerfTransport {
    /// NVMe/TCP.
    #[default]
    Tcp,
    /// NVMe/RDMA (needs the `rdma` feature).
    Rdma,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct PerfOptions {
    /// Transport.
    pub transport: PerfTransport,
    /// Target address.
    pub addr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host identity, digests, timeouts (`nr_io_queues` and `queue_size` are ignored: see `queues`).
    pub connect: ConnectOptions,
    /// Namespace; `None`: the first active one.
    pub nsid: Option<u32>,
    /// Outstanding commands per I/O queue (`-q`).
    pub queue_depth: u16,
    /// Bytes per command (`-o`), a multiple of the block size.
    pub io_size: u32,
    /// Pattern (`-w`).
    pub workload: Workload,
    /// Read percentage for [`Workload::Rw`] (`-M`).
    pub mix: u8,
    /// How long to measure (`-T`).
    pub duration: Duration,
    /// I/O queues, one worker thread each (`-c`).
    pub queues: u16,
    /// Poll the queues without ever sleeping, as SPDK's perf does (`--busy-poll`): no wake-up latency, one CPU
    /// busy per queue. Otherwise a worker sleeps in its poll until its socket or completion queue has news.
    pub busy_poll: bool,
    /// CPUs the workers are pinned to, the `i`-th queue's on `cpus[i % cpus.len()]` (`--cpus`); `None`: not
    /// pinned. Pinned, a queue's work stays on one CPU as the kernel's host keeps each queue's on its `io_cpu` and
    /// SPDK's perf its reactors on their cores: a worker that migrates pays cross-CPU wake-ups and drags the
    /// softirq work of its socket along.
    pub cpus: Option<Vec<usize>>,
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencySummary {
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Results of one queue (one worker).
#[derive(Debug, Clone)]
pub struct QueueResult {
    /// QID.
    pub qid: u16,
    /// The CPU its worker was pinned to, `None`: not pinned.
    pub cpu: Option<usize>,
    /// Commands completed within the measured time.
    pub ios: u64,
    /// Their latencies.
    pub histogram: LatencyHistogram,
}

/// Results of a run.
#[derive(Debug, Clone)]
pub struct PerfReport {
    /// Namespace measured.
    pub nsid: u32,
    /// Its block size.
    pub block_size: u32,
    /// Queue depth per queue.
    pub queue_depth: u16,
    /// Bytes per command.
    pub io_size: u32,
    /// Measured time.
    pub elapsed: Duration,
    /// Reads completed.
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
    /// Per queue.
    pub per_queue: Vec<QueueResult>,
    /// All queues merged.
    pub histogram: LatencyHistogram,
}

impl PerfReport {
    /// Commands per second over the measured time.
    pub fn iops(&self) -> f64 {
        per_second(self.reads + self.writes, self.elapsed)
    }

    /// MiB per second over the measured time.
    pub fn mib_per_s(&self) -> f64 {
        self.iops() * f64::from(self.io_size) / f64::from(1u32 << 20)
    }

    /// Latency of all commands.
    pub fn latency(&self) -> LatencySummary {
        self.histogram.summary()
    }
}

#[allow(clippy::cast_precision_loss)] // rates for display
fn per_second(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// Linear sub-buckets per power of two (2^5 = 32: under 3.2 % error).
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Buckets for every `u64` nanosecond value.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A fixed-size log-linear histogram of nanosecond latencies: values below 32 ns are exact, above that each
/// power of two is split in 32 equal buckets. Recording is a few arithmetic operations, no allocation.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("total", &self.total)
            .field("min_ns", &self.min_ns)
            .field("max_ns", &self.max_ns)
            .finish_non_exhaustive()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { counts: Box::new([0; BUCKETS]), total: 0, sum_ns: 0, min_ns: u64::MAX, max_ns: 0 }
    }
}

impl LatencyHistogram {
    fn bucket(ns: u64) -> usize {
        if ns < SUB as u64 {
            // ns < 32.
            return usize::try_from(ns).unwrap_or(0);
        }
        let e = 63 - ns.leading_zeros(); // >= SUB_BITS
        let sub = usize::try_from((ns >> (e - SUB_BITS)) & (SUB as u64 - 1)).unwrap_or(0);
        (e - SUB_BITS + 1) as usize * SUB + sub
    }

    /// Lowest value and width of bucket `b`.
    fn bucket_range(b: usize) -> (u64, u64) {
        if b < SUB {
            return (b as u64, 1);
        }
        let shift = u32::try_from(b / SUB - 1).unwrap_or(0);
        let sub = (b % SUB) as u64;
        ((SUB as u64 + sub) << shift, 1u64 << shift)
    }

    /// Record one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1) in nanoseconds: the middle of its bucket, clamped to the
    /// recorded minimum and maximum. 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        // q in 0..=1 times a count: a non-negative rank no larger than the count
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = Self::bucket_range(b);
                return (low + width / 2).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// Mean, min, max and percentiles in microseconds.
    #[allow(clippy::cast_precision_loss)] // for display
    pub fn summary(&self) -> LatencySummary {
        if self.total == 0 {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            mean: self.sum_ns as f64 / self.total as f64 / 1000.0,
            min: us(self.min_ns),
            max: us(self.max_ns),
            p50: us(self.quantile_ns(0.50)),
            p99: us(self.quantile_ns(0.99)),
            p999: us(self.quantile_ns(0.999)),
        }
    }
}

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
struct Job {
    qid: u16,
    nsid: u32,
    /// Blocks per command.
    blocks: u64,
    /// Command-sized slots in the namespace.
    slots: u64,
    /// First sequential slot of this queue.
    start_slot: u64,
    io_size: usize,
    depth: u16,
    random: bool,
    read_percent: u8,
    duration: Duration,
    drain_timeout: Duration,
    /// How long one poll may wait: zero when busy polling.
    poll_timeout: Duration,
    /// The CPU to pin the worker to.
    cpu: Option<usize>,
    /// Where the worker reports its commands to the controller's keep-alive (every `IoTraffic::REPORT_INTERVAL`).
    traffic: Arc<IoTraffic>,
}

#[derive(Debug, Default)]
struct WorkerResult {
    reads: u64,
    writes: u64,
    histogram: LatencyHistogram,
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
fn worker(mut queue: impl BareQueue<u32>, job: Job, start: &Barrier) -> Result<WorkerResult, PerfError> {
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
            #[allow(clippy::cast_possible_truncation)] // repeating byte pattern
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
        #[allow(clippy::cast_possible_truncation)] // slot < depth <= 4096
        let s = slot as u32;
        slbas[slot] = submit_one(&mut queue, &job, &mut rng, &mut cursor, s, data)?;
    }
    let mut outstanding = depth;
    let mut drain_deadline = None;
    // Commands not yet reported to the controller's keep-alive, and when it was last told.
    let (mut submitted, mut completed) = (depth as u64, 0u64);
    let mut reported_at = begin;
    while outstanding > 0 {
        queue.poll(Some(job.poll_timeout))?;
        // One clock read per poll, shared by the completions it brought (they arrived together): in a guest whose
        // clock has no vDSO each read is a system call.
        let now = Instant::now();
        while let Some(c) = queue.next_completion() {
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
                #[allow(clippy::cast_possible_truncation)] // slot < depth <= 4096
                let s = slot as u32;
                slbas[slot] = submit_one(&mut queue, &job, &mut rng, &mut cursor, s, c.data)?;
                outstanding += 1;
                submitted += 1;
            } else {
                buffers[slot] = c.data;
            }
        }
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
    Ok(result)
}

/// Connect, run the workload on every queue for the duration, disconnect, and report.
pub fn run(options: &PerfOptions) -> Result<PerfReport, PerfError> {
    if options.queue_depth == 0 || options.queue_depth > MAX_QUEUE_DEPTH - 1 {
        return Err(PerfError::Invalid(format!("queue depth must be 1..={}", MAX_QUEUE_DEPTH - 1)));
    }
    if options.queues == 0 {
        return Err(PerfError::Invalid("at least one I/O queue is needed".into()));
    }
    if options.cpus.as_ref().is_some_and(Vec::is_empty) {
        return Err(PerfError::Invalid("the CPU list to pin workers to is empty".into()));
    }
    let mut admin_opts = options.connect.clone();
    admin_opts.nr_io_queues = 0;
    admin_opts.transport = match options.transport {
        PerfTransport::Tcp => Transport::Tcp,
        PerfTransport::Rdma => Transport::Rdma,
    };
    let ctrl = Controller::connect(options.addr, &options.subnqn, admin_opts)?;
    let result = run_on(&ctrl, options);
    let disconnected = ctrl.disconnect();
    let report = result?;
    if let Err(e) = disconnected {
        tracing::warn!(error = %e, "disconnect after perf failed");
    }
    Ok(report)
}

fn pick_namespace(namespaces: Vec<NamespaceInfo>, nsid: Option<u32>) -> Result<NamespaceInfo, PerfError> {
    match nsid {
        Some(n) => namespaces
            .into_iter()
            .find(|ns| ns.nsid == n)
            .ok_or_else(|| PerfError::Invalid(format!("namespace {n} is not active on the controller"))),
        None => namespaces
            .into_iter()
            .next()
            .ok_or_else(|| PerfError::Invalid("the controller has no active namespace".into())),
    }
}

/// Blocks per command and command-sized slots of the namespace, after checking the options against the
/// namespace and controller.
#[derive(Debug, Clone, Copy)]
struct Plan {
    blocks: u64,
    slots: u64,
}

fn plan(
    options: &PerfOptions,
    ns: &NamespaceInfo,
    max_transfer: Option<u32>,
    cap: &Capabilities,
) -> Result<Plan, PerfError> {
    let bs = ns.block_size;
    if options.io_size == 0 || options.io_size % bs != 0 {
        return Err(PerfError::Invalid(format!(
            "I/O size {} is not a multiple of namespace {}'s block size {bs}",
            options.io_size, ns.nsid
        )));
    }
    if max_transfer.is_some_and(|m| options.io_size > m) || options.io_size / bs > 65536 {
        return Err(PerfError::Invalid(format!(
            "I/O size {} is above the controller's largest transfer ({max_transfer:?} bytes, 65536 blocks)",
            options.io_size
        )));
    }
    let blocks = u64::from(options.io_size / bs);
    let slots = ns.blocks / blocks;
    if slots == 0 {
        return Err(PerfError::Invalid(format!("namespace {} is smaller than one I/O", ns.nsid)));
    }
    let entries = u32::from(options.queue_depth) + 1;
    if entries > cap.max_queue_entries() {
        return Err(PerfError::Invalid(format!(
            "queue depth {} needs {entries} queue entries; the controller allows {} (CAP.MQES)",
            options.queue_depth,
            cap.max_queue_entries()
        )));
    }
    Ok(Plan { blocks, slots })
}

fn run_on(ctrl: &Controller, options: &PerfOptions) -> Result<PerfReport, PerfError> {
    let info = ctrl.info().clone();
    let ns = pick_namespace(ctrl.namespaces()?, options.nsid)?;
    let plan = plan(options, &ns, info.max_transfer, &info.cap)?;

    // Ask for the I/O queues ourselves: the controller was connected with none.
    let granted = ctrl.request_io_queues(options.queues)?;
    if granted < options.queues {
        return Err(PerfError::Invalid(format!(
            "asked for {} I/O queues, the controller grants {granted}",
            options.queues
        )));
    }
    let o = &options.connect;
    let depth = options.queue_depth;
    match ctrl.transport() {
        Transport::Tcp => {
            let mut queues = Vec::with_capacity(usize::from(options.queues));
            for qid in 1..=options.queues {
                let qopts = TcpQueueOptions {
                    qid,
                    depth,
                    hdr_digest: o.hdr_digest,
                    data_digest: o.data_digest,
                    in_capsule_limit: info.in_capsule_data,
                    max_c2h_data: 16 << 20,
                    connect_timeout: o.connect_timeout,
                    command_timeout: o.io_timeout,
                };
                let mut q = TcpQueue::connect(options.addr, &qopts)?;
                ctrl.fabrics_connect(&mut q, depth)?;
                queues.push(q);
            }
            drive(queues, options, &ns, plan, &ctrl.bare_io_traffic())
        }
        #[cfg(feature = "rdma")]
        Transport::Rdma => {
            let mut queues = Vec::with_capacity(usize::from(options.queues));
            for qid in 1..=options.queues {
                let qopts = RdmaQueueOptions {
                    qid,
                    depth,
                    in_capsule_limit: info.in_capsule_data,
                    cntlid: info.cntlid,
                    memory_windows: true,
                    connect_timeout: o.connect_timeout,
                    command_timeout: o.io_timeout,
                };
                let mut q = RdmaQueue::connect(options.addr, &qopts)?;
                ctrl.fabrics_connect(&mut q, depth)?;
                queues.push(q);
            }
            drive(queues, options, &ns, plan, &ctrl.bare_io_traffic())
        }
        #[cfg(not(feature = "rdma"))]
        Transport::Rdma => Err(PerfError::Invalid("this build has no NVMe/RDMA (feature `rdma`)".into())),
    }
}

/// Run the workload on connected I/O queues, one worker thread each, and gather the report.
fn drive<Q: BareQueue<u32> + 'static>(
    queues: Vec<Q>,
    options: &PerfOptions,
    ns: &NamespaceInfo,
    plan: Plan,
    traffic: &Arc<IoTraffic>,
) -> Result<PerfReport, PerfError> {
    let Plan { blocks, slots } = plan;
    let bs = ns.block_size;
    let start = Arc::new(Barrier::new(queues.len() + 1));
    let nqueues = u64::from(options.queues);
    let mut threads = Vec::with_capacity(queues.len());
    for (i, queue) in queues.into_iter().enumerate() {
        let qid = queue.qid();
        let job = Job {
            qid,
            nsid: ns.nsid,
            blocks,
            slots,
            start_slot: slots / nqueues * (i as u64),
            io_size: usize::try_from(options.io_size).unwrap_or(usize::MAX),
            depth: options.queue_depth,
            random: options.workload.is_random(),
            read_percent: options.workload.read_percent(options.mix),
            duration: options.duration,
            drain_timeout: options.connect.io_timeout,
            poll_timeout: if options.busy_poll { Duration::ZERO } else { Duration::from_millis(10) },
            cpu: options.cpus.as_ref().map(|cpus| cpus[i % cpus.len()]),
            traffic: Arc::clone(traffic),
        };
        let cpu = job.cpu;
        let start = Arc::clone(&start);
        let handle = std::thread::Builder::new()
            .name(format!("nvmf-perf-q{qid}"))
            .spawn(move || worker(queue, job, &start))
            .map_err(|e| PerfError::Invalid(format!("spawning a worker thread: {e}")))?;
        threads.push((qid, cpu, handle));
    }
    start.wait();
    let begin = Instant::now();
    let mut report = PerfReport {
        nsid: ns.nsid,
        block_size: bs,
        queue_depth: options.queue_depth,
        io_size: options.io_size,
        elapsed: Duration::ZERO,
        reads: 0,
        writes: 0,
        per_queue: Vec::new(),
        histogram: LatencyHistogram::default(),
    };
    let mut first_error = None;
    for (qid, cpu, handle) in threads {
        match handle.join() {
            Ok(Ok(r)) => {
                report.reads += r.reads;
                report.writes += r.writes;
                report.histogram.merge(&r.histogram);
                report.per_queue.push(QueueResult { qid, cpu, ios: r.reads + r.writes, histogram: r.histogram });
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(PerfError::Worker(qid));
            }
        }
    }
    // Commands completing after the deadline are not counted, so the measured time is the duration.
    report.elapsed = options.duration.min(begin.elapsed());
    first_error.map_or(Ok(report), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = LatencyHistogram::bucket(ns);
            assert!(b >= last || ns > 100_000 - 1, "bucket of {ns} went down");
            last = b;
            let (low, width) = LatencyHistogram::bucket_range(b);
            assert!(low <= ns && ns - low < width, "{ns} not in bucket {b} = [{low}, +{width})");
            assert!(b < BUCKETS);
        }
    }

    #[test]
    fn percentiles_are_close_and_ordered() {
        let mut h = LatencyHistogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary();
        assert!((s.mean - 500.5).abs() < 0.01, "{s:?}");
        assert!((s.p50 - 500.0).abs() / 500.0 < 0.04, "{s:?}");
        assert!((s.p99 - 990.0).abs() / 990.0 < 0.04, "{s:?}");
        assert!(s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max, "{s:?}");
        let mut other = LatencyHistogram::default();
        other.record(Duration::from_secs(1));
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert!((h.summary().max - 1e6).abs() < 1.0);
    }

    #[test]
    fn workload_mix() {
        assert_eq!(Workload::RandRead.read_percent(30), 100);
        assert_eq!(Workload::Write.read_percent(30), 0);
        assert_eq!(Workload::Rw.read_percent(30), 30);
        assert!(!Workload::Read.is_random() && Workload::Rw.is_random());
    }
}
