//! `nvmf-host perf`: its arguments ([`PerfArgs`], nvme-cli and SPDK perf option names), the run on the caller's
//! thread ([`crate::perf::run`]), and its output: SPDK perf's table ([`write_perf_table`]) or one JSON object
//! ([`perf_json`]).

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use super::{CliError, Transport};
use crate::controller::{PollMode, PollOptions};
use crate::endpoint::Endpoint;
use crate::perf::{per_second, PerfOptions, PerfReport, Workload};

/// `-w`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random mix (`-M` percent reads).
    Rw,
}

impl From<WorkloadArg> for Workload {
    fn from(w: WorkloadArg) -> Self {
        match w {
            WorkloadArg::Randread => Workload::RandRead,
            WorkloadArg::Randwrite => Workload::RandWrite,
            WorkloadArg::Read => Workload::Read,
            WorkloadArg::Write => Workload::Write,
            WorkloadArg::Rw => Workload::Rw,
        }
    }
}

/// `nvmf-host perf`. SPDK perf's letters win where they meet nvme-cli's: `-q` is the queue depth and `-c` the
/// queue count, so the host NQN and the reconnect delay are long options only here.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("hostnqn", |a| a.short(None)), mut_arg("reconnect_delay", |a| a.short(None)))]
pub struct PerfArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Outstanding commands per I/O queue.
    #[arg(short = 'q', long = "queue-depth", default_value_t = 32)]
    pub queue_depth: u16,
    /// Bytes per command.
    #[arg(short = 'o', long = "io-size", default_value_t = 4096)]
    pub io_size: u32,
    /// I/O pattern.
    #[arg(short = 'w', long = "workload", value_enum)]
    pub workload: WorkloadArg,
    /// Percentage of reads for `-w rw`.
    #[arg(short = 'M', long = "rwmixread", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,
    /// Seconds to run.
    #[arg(short = 'T', long = "time", default_value_t = 10)]
    pub time: u64,
    /// I/O queues, one worker thread each (or `--nr-io-queues`).
    #[arg(short = 'c', long = "queues", default_value_t = 1, conflicts_with = "nr_io_queues")]
    pub queues: u16,
    /// Namespace ID (default: the first active one).
    #[arg(long = "nsid")]
    pub nsid: Option<u32>,
    /// Host identity, keep-alive, digests, interface: `connect`'s options.
    #[command(flatten)]
    pub connection: super::ForegroundConnection,
    /// How the workers wait for completions: adaptive (poll without sleeping, yielding the CPU between polls, for a
    /// while after completions, as the gaps between them suggest, at most --poll-window-us, then sleep), sleep
    /// (always sleep in the poll: a wake-up per burst of completions), busy (never sleep nor yield, as SPDK's perf:
    /// no wake-up latency, one CPU busy per queue).
    #[arg(long = "poll", value_name = "MODE", default_value = "adaptive", value_parser = poll_mode_parser())]
    pub poll: PollMode,
    /// `--poll busy` (older scripts' spelling).
    #[arg(long = "busy-poll", hide = true, conflicts_with = "poll")]
    pub busy_poll: bool,
    /// The longest an adaptive worker polls after completions before it sleeps, in microseconds.
    #[arg(
        long = "poll-window-us",
        value_name = "US",
        default_value_t = nvmf_config::host::DEFAULT_POLL_WINDOW_US,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(nvmf_config::host::MAX_POLL_WINDOW_US))
    )]
    pub poll_window_us: u32,
    /// CPUs to pin the workers to, as taskset -c writes them (0,2-3): queue i's worker on the i-th, round robin;
    /// `none`: not pinned. Default: the CPUs this process may run on.
    #[arg(long = "cpus", value_name = "LIST|none")]
    pub cpus: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `--poll`'s values, listed in the help and in an error.
fn poll_mode_parser() -> impl TypedValueParser<Value = PollMode> {
    PossibleValuesParser::new(PollMode::ALL.map(PollMode::name))
        .map(|name| PollMode::from_name(&name).unwrap_or_default())
}

impl PerfArgs {
    /// `--poll` (busy with `--busy-poll`) and `--poll-window-us`.
    pub fn poll(&self) -> PollOptions {
        let mode = if self.busy_poll { PollMode::Busy } else { self.poll };
        PollOptions { mode, window: Duration::from_micros(u64::from(self.poll_window_us)) }
    }
}

/// Run `nvmf-host perf`.
pub fn run(a: &PerfArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    let transport = match a.endpoint.transport {
        Transport::Tcp => crate::perf::PerfTransport::Tcp,
        Transport::Rdma => crate::perf::PerfTransport::Rdma,
    };
    let o = &a.connection.options;
    let unused = [
        (o.queue_size.is_some(), "--queue-size (perf sizes its queues by -q)"),
        (
            o.reconnect_delay.is_some() || o.ctrl_loss_tmo.is_some() || o.fast_io_fail_tmo.is_some(),
            "--reconnect-delay, --ctrl-loss-tmo and --fast-io-fail-tmo (a perf run does not reconnect)",
        ),
        (o.iopolicy.is_some(), "--iopolicy (perf drives one controller's queues)"),
    ];
    if let Some((_, what)) = unused.iter().find(|(given, _)| *given) {
        return Err(CliError::Options(format!("perf does not take {what}")));
    }
    let connect = a.connection.options(&a.endpoint)?;
    let queues = o.nr_io_queues.unwrap_or(a.queues);
    let options = PerfOptions {
        transport,
        addr,
        subnqn: a.nqn.clone(),
        connect,
        nsid: a.nsid,
        queue_depth: a.queue_depth,
        io_size: a.io_size,
        workload: a.workload.into(),
        mix: a.mix,
        duration: Duration::from_secs(a.time.max(1)),
        queues,
        poll: a.poll(),
        cpus: super::cpus_arg(a.cpus.as_deref())?,
    };
    let report = crate::perf::run(&options)?;
    if a.json {
        writeln!(out, "{}", perf_json(&report, &options))?;
    } else {
        write_perf_table(&report, &options, out)?;
    }
    Ok(())
}

/// The `--json` object of a perf run.
pub fn perf_json(r: &PerfReport, o: &PerfOptions) -> Value {
    let l = r.latency();
    let (waits, sleeps) = r.waits_and_sleeps();
    let queues: Vec<Value> = r
        .per_queue
        .iter()
        .map(|q| {
            let s = q.histogram.summary();
            json!({
                "qid": q.qid,
                "cpu": q.cpu,
                "ios": q.ios,
                "waits": q.waits,
                "sleeps": q.sleeps,
                "iops": per_second(q.ios, r.elapsed),
                "latency_us": {"mean": s.mean, "min": s.min, "max": s.max, "p50": s.p50, "p99": s.p99, "p999": s.p999},
            })
        })
        .collect();
    json!({
        "traddr": o.addr.ip().to_string(),
        "trsvcid": o.addr.port().to_string(),
        "subnqn": o.subnqn,
        "nsid": r.nsid,
        "workload": format!("{:?}", o.workload).to_lowercase(),
        "queue_depth": r.queue_depth,
        "io_size": r.io_size,
        "queues": o.queues,
        "poll": o.poll.mode.name(),
        "poll_window_us": o.poll.window.as_micros(),
        "waits": waits,
        "sleeps": sleeps,
        "cpus": o.cpus,
        "seconds": r.elapsed.as_secs_f64(),
        "reads": r.reads,
        "writes": r.writes,
        "iops": r.iops(),
        "mib_per_s": r.mib_per_s(),
        "latency_us": {"mean": l.mean, "min": l.min, "max": l.max, "p50": l.p50, "p99": l.p99, "p999": l.p999},
        "per_queue": queues,
    })
}

/// The SPDK-like table of a perf run.
pub fn write_perf_table(r: &PerfReport, o: &PerfOptions, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let device = format!("TCP (addr:{} subnqn:{}) NSID {}", o.addr, o.subnqn, r.nsid);
    // Label column as wide as the longest label, like SPDK's.
    let w = device.len() + " queue 65535".len();
    let rule = "=".repeat(w + 57);
    writeln!(
        out,
        "Initialization complete. Ran {:?} with {} B I/Os, queue depth {} on {} queue(s) for {:.1} s.",
        o.workload,
        r.io_size,
        r.queue_depth,
        o.queues,
        r.elapsed.as_secs_f64()
    )?;
    let (waits, sleeps) = r.waits_and_sleeps();
    writeln!(
        out,
        "Polling {} (window {} us): {sleeps} of {waits} polls could sleep.",
        o.poll.mode,
        o.poll.window.as_micros()
    )?;
    writeln!(out, "{rule}")?;
    writeln!(out, "{:>width$}", "Latency(us)", width = w + 57)?;
    writeln!(
        out,
        "{:<w$}: {:>10} {:>10} {:>10} {:>10} {:>10}",
        "Device Information", "IOPS", "MiB/s", "Average", "min", "max"
    )?;
    let bytes = f64::from(r.io_size) / f64::from(1u32 << 20);
    for q in &r.per_queue {
        let s = q.histogram.summary();
        let iops = per_second(q.ios, r.elapsed);
        let name = format!("{device} queue {}", q.qid);
        writeln!(
            out,
            "{name:<w$}: {iops:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            iops * bytes,
            s.mean,
            s.min,
            s.max
        )?;
    }
    writeln!(out, "{rule}")?;
    let l = r.latency();
    writeln!(
        out,
        "{:<w$}: {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
        "Total",
        r.iops(),
        r.mib_per_s(),
        l.mean,
        l.min,
        l.max
    )?;
    writeln!(out)?;
    writeln!(out, "Summary latency data for {device}:")?;
    writeln!(out, "{}", "=".repeat(80))?;
    for (name, v) in [("50.00000%", l.p50), ("99.00000%", l.p99), ("99.90000%", l.p999)] {
        writeln!(out, "{name:>10} : {v:>12.3}us")?;
    }
    writeln!(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn poll(extra: &[&str]) -> Result<PollOptions, clap::Error> {
        let args = ["nvmf-host", "perf", "-a", "127.0.0.1", "-n", "nqn.2024-01.io.nvmf-rs:default", "-w", "randread"];
        match Cli::try_parse_from(args.iter().chain(extra))?.command {
            Command::Perf(a) => Ok(a.poll()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn poll_is_adaptive_by_default_and_busy_poll_means_busy() {
        let us = |n| Duration::from_micros(n);
        assert_eq!(poll(&[]).unwrap(), PollOptions { mode: PollMode::Adaptive, window: us(200) });
        assert_eq!(poll(&["--poll", "sleep"]).unwrap().mode, PollMode::Sleep);
        assert_eq!(
            poll(&["--poll", "busy", "--poll-window-us", "7"]).unwrap(),
            PollOptions { mode: PollMode::Busy, window: us(7) }
        );
        assert_eq!(poll(&["--busy-poll"]).unwrap().mode, PollMode::Busy, "the older spelling");
        assert!(poll(&["--busy-poll", "--poll", "sleep"]).is_err(), "two answers to one question");
        let err = poll(&["--poll", "spin"]).unwrap_err().to_string();
        assert!(err.contains("[possible values: adaptive, sleep, busy]"), "{err}");
        for bad in ["0", "100001"] {
            let err = poll(&["--poll-window-us", bad]).unwrap_err().to_string();
            assert!(err.contains("1..=100000"), "{err}");
        }
    }
}
