//! [`run`]: an SPDK-`perf`-like load generator over NVMe/TCP or NVMe/RDMA, and its [`LatencyHistogram`].
//!
//! The association is brought up by [`Controller::connect`] with the admin queue only (either transport). perf then
//! asks for its I/O queues itself ([`Controller::request_io_queues`]) and connects each as a bare queue (`TcpQueue`
//! or `RdmaQueue`, both behind [`BareQueue`]; [`Controller::fabrics_connect`]) driven by its own worker thread
//! through the poll API, so exactly `queue_depth` commands are outstanding per queue and nothing sits between the
//! measuring loop and the socket or completion queue.
//!
//! Threads: one worker per I/O queue; the caller's thread waits for them. The measuring loop never allocates: the
//! data buffers (one per outstanding command) and the submission timestamps are allocated up front and travel with
//! the commands, the histogram is a fixed array, offsets come from a xorshift generator. It blocks only in the
//! queue's `poll`, and only when its poller says to sleep ([`PerfOptions::poll`]: adaptive, sleep or busy); the
//! report counts the polls that could block. Every [`IoTraffic::REPORT_INTERVAL`] a worker adds its command
//! counts to the controller's ([`Controller::bare_io_traffic`]), so a controller with Traffic Based Keep Alive
//! gets no Keep Alive while perf runs, as with the controller's own queues.
//!
//! Nothing is written to the namespace unless the workload writes.
//!
//! Files: this one (options, the run: connect, plan, one worker per queue, the report), `worker` (one queue's
//! measuring loop), `histogram` ([`LatencyHistogram`]).

mod histogram;
mod worker;

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::property::Capabilities;

use crate::controller::{ConnectOptions, Controller, IoTraffic, NamespaceInfo, PollOptions, Transport};
use crate::error::HostError;
use crate::queue::{BareQueue, MAX_QUEUE_DEPTH};
#[cfg(feature = "rdma")]
use crate::rdma::{RdmaQueue, RdmaQueueOptions};
use crate::tcp::{TcpQueue, TcpQueueOptions};
pub use histogram::{LatencyHistogram, LatencySummary};
use worker::{worker, Job};

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
    /// How a worker waits for completions (`--poll`, `--poll-window-us`): adaptive polls without sleeping for a
    /// while after completions (as the gaps between them suggest, at most the window) then sleeps; sleep always
    /// sleeps in its poll until its socket or completion queue has news; busy never sleeps, as SPDK's perf (no
    /// wake-up latency, one CPU busy per queue). (`connect.poll` is the admin queue's.)
    pub poll: PollOptions,
    /// CPUs the workers are pinned to, the `i`-th queue's on `cpus[i % cpus.len()]` (`--cpus`); `None`: not
    /// pinned. Pinned, a queue's work stays on one CPU as the kernel's host keeps each queue's on its `io_cpu` and
    /// SPDK's perf its reactors on their cores: a worker that migrates pays cross-CPU wake-ups and drags the
    /// softirq work of its socket along.
    pub cpus: Option<Vec<usize>>,
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
    /// Polls of the queue over the run and its drain.
    pub waits: u64,
    /// Those that could block (the poller said sleep).
    pub sleeps: u64,
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

    /// Polls of all queues, and those that could block.
    pub fn waits_and_sleeps(&self) -> (u64, u64) {
        self.per_queue.iter().fold((0, 0), |(w, s), q| (w + q.waits, s + q.sleeps))
    }
}

/// `n` per second over `elapsed`, for display (a float's precision is plenty).
pub(crate) fn per_second(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
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
            // The association's: `--tls-key`'s, or the PSK `--concat` generated for it.
            let tls = ctrl.tls_psk();
            let queues = connect_queues(ctrl, options, |qid| {
                let qopts = TcpQueueOptions {
                    qid,
                    depth,
                    hdr_digest: o.hdr_digest,
                    data_digest: o.data_digest,
                    in_capsule_limit: info.in_capsule_data,
                    max_c2h_data: 16 << 20,
                    connect_timeout: o.connect_timeout,
                    command_timeout: o.io_timeout,
                    host_iface: o.host_iface.clone(),
                    tls: tls.clone(),
                };
                TcpQueue::connect(options.addr, &qopts)
            })?;
            drive(queues, options, &ns, plan, &ctrl.bare_io_traffic())
        }
        #[cfg(feature = "rdma")]
        Transport::Rdma => {
            o.check_host_iface()?;
            let queues = connect_queues(ctrl, options, |qid| {
                let qopts = RdmaQueueOptions {
                    qid,
                    depth,
                    in_capsule_limit: info.in_capsule_data,
                    cntlid: info.cntlid,
                    memory_windows: true,
                    connect_timeout: o.connect_timeout,
                    command_timeout: o.io_timeout,
                };
                RdmaQueue::connect(options.addr, &qopts)
            })?;
            drive(queues, options, &ns, plan, &ctrl.bare_io_traffic())
        }
        #[cfg(not(feature = "rdma"))]
        Transport::Rdma => Err(PerfError::Invalid("this build has no NVMe/RDMA (feature `rdma`)".into())),
    }
}

/// Connect I/O queues 1..=`options.queues` as bare queues with `connect` and Fabrics Connect each to `ctrl`'s
/// association (SQSIZE the queue depth), one after the other.
fn connect_queues<Q: BareQueue<u32>>(
    ctrl: &Controller,
    options: &PerfOptions,
    connect: impl Fn(u16) -> Result<Q, HostError>,
) -> Result<Vec<Q>, HostError> {
    let mut queues = Vec::with_capacity(usize::from(options.queues));
    for qid in 1..=options.queues {
        let mut q = connect(qid)?;
        ctrl.fabrics_connect(&mut q, options.queue_depth)?;
        queues.push(q);
    }
    Ok(queues)
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
            poll: options.poll,
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
                let ios = r.reads + r.writes;
                let (waits, sleeps) = (r.waits, r.sleeps);
                report.per_queue.push(QueueResult { qid, cpu, ios, histogram: r.histogram, waits, sleeps });
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
    fn workload_mix() {
        assert_eq!(Workload::RandRead.read_percent(30), 100);
        assert_eq!(Workload::Write.read_percent(30), 0);
        assert_eq!(Workload::Rw.read_percent(30), 30);
        assert!(!Workload::Read.is_random() && Workload::Rw.is_random());
    }
}
