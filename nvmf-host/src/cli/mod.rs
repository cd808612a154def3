//! The `nvmf-host` command line: clap definitions with nvme-cli's option names, the `perf` and `discover`
//! commands (run on the caller's thread, output to stdout), `nbd` ([`nbd`]), and the daemon's commands in
//! [`control`] (`run`, `connect`, `connect-all`, `disconnect`, `disconnect-all`, `list`, `reload`). The CLI
//! calls the daemon (its control protocol, `run`), never the other way round.
//!
//! Every command takes `-t tcp` or `-t rdma` ([`Transport`]); the address is an IP address on both.
pub mod control;
pub mod nbd;
#[cfg(feature = "ublk")]
pub mod ublk;

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nvmf_common::fabrics::discovery::{
    eflags, treq, AddressFamily, SubsystemType, TcpSecurityType, TransportType, Tsas,
};
use serde_json::{json, Value};

use crate::controller::ConnectOptions;
use crate::discovery::{DiscoveryLog, DiscoveryRecord};
use crate::endpoint::{Endpoint, ResolveError};
use crate::error::HostError;
use crate::perf::{per_second, PerfError, PerfOptions, PerfReport, Workload};

/// What went wrong in a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The address did not resolve.
    #[error(transparent)]
    Address(#[from] ResolveError),
    /// The host library failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// perf failed.
    #[error(transparent)]
    Perf(#[from] PerfError),
    /// `--cpus` is not a CPU list, or the process's CPUs could not be read.
    #[error(transparent)]
    Cpus(#[from] nvmf_service::cpus::CpuError),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// The NBD export failed to start.
    #[error(transparent)]
    Nbd(#[from] crate::nbd::NbdError),
    /// The ublk export failed.
    #[cfg(feature = "ublk")]
    #[error(transparent)]
    Ublk(#[from] crate::ublk::UblkError),
    /// The daemon could not be reached.
    #[error(transparent)]
    Control(#[from] crate::daemon::control::ControlError),
    /// The daemon refused the request.
    #[error("{0}")]
    Daemon(String),
    /// `run` failed.
    #[error("{0:#}")]
    Run(anyhow::Error),
}

/// NVMe over Fabrics host tools.
#[derive(Debug, Parser)]
#[command(name = "nvmf-host", version, about)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure IOPS, bandwidth and latency against a namespace (like SPDK's perf).
    Perf(PerfArgs),
    /// Print a discovery controller's Discovery Log Page (like `nvme discover`).
    Discover(DiscoverArgs),
    /// Serve a namespace over NBD (unix socket or TCP) until SIGINT/SIGTERM.
    Nbd(nbd::NbdArgs),
    /// Serve a namespace as a /dev/ublkbN block device until SIGINT/SIGTERM.
    #[cfg(feature = "ublk")]
    Ublk(ublk::UblkArgs),
    /// Run the daemon: keep the configured controllers connected and exported, answer the commands below.
    Run(control::RunArgs),
    /// Connect a controller through the daemon (like `nvme connect`); prints its name.
    Connect(control::ConnectArgs),
    /// Connect every NVM subsystem a discovery controller lists that is not connected yet.
    ConnectAll(control::ConnectAllArgs),
    /// Disconnect the controllers of a subsystem (`-n`) or one controller (`-d nvmf0`).
    Disconnect(control::DisconnectArgs),
    /// Disconnect every controller.
    DisconnectAll(control::ControlArgs),
    /// List the daemon's controllers, their state, namespaces and exports.
    List(control::ListArgs),
    /// Validate the daemon's configuration file here, then have the daemon re-read it and apply the difference
    /// (as SIGHUP does); prints what changed.
    Reload(control::ControlArgs),
}

/// `-t/--transport`.
pub use crate::controller::Transport;

/// `-o/--output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable, like nvme-cli.
    #[default]
    Normal,
    /// JSON, with nvme-cli's field names.
    Json,
}

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

/// `nvmf-host perf`.
#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Host NQN (default: /etc/nvme/hostnqn or generated).
    #[arg(long = "hostnqn")]
    pub hostnqn: Option<String>,
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
    /// I/O queues, one worker thread each.
    #[arg(short = 'c', long = "queues", default_value_t = 1)]
    pub queues: u16,
    /// Namespace ID (default: the first active one).
    #[arg(long = "nsid")]
    pub nsid: Option<u32>,
    /// Header digests.
    #[arg(long = "hdr-digest")]
    pub hdr_digest: bool,
    /// Data digests.
    #[arg(long = "data-digest")]
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (NVMe/TCP reads then end without a response capsule).
    #[arg(long = "disable-sqflow")]
    pub disable_sqflow: bool,
    /// Poll without sleeping, as SPDK's perf does: no wake-up latency, one CPU busy per queue.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,
    /// CPUs to pin the workers to, as taskset -c writes them (0,2-3): queue i's worker on the i-th, round robin;
    /// `none`: not pinned. Default: the CPUs this process may run on.
    #[arg(long = "cpus", value_name = "LIST|none")]
    pub cpus: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `nvmf-host discover`.
#[derive(Debug, Clone, Args)]
pub struct DiscoverArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Host NQN (default: /etc/nvme/hostnqn or generated).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
}

/// The connection options of the foreground export commands (`nbd`, `ublk`), in nvme-cli's words.
#[derive(Debug, Clone, Args)]
pub struct ForegroundConnection {
    /// Host NQN (default: /etc/nvme/hostnqn or generated).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// I/O queues to ask for (default: one per CPU).
    #[arg(short = 'i', long = "nr-io-queues")]
    pub nr_io_queues: Option<u16>,
    /// Header digests.
    #[arg(long = "hdr-digest")]
    pub hdr_digest: bool,
    /// Data digests.
    #[arg(long = "data-digest")]
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (NVMe/TCP reads then end without a response capsule).
    #[arg(long = "disable-sqflow")]
    pub disable_sqflow: bool,
}

impl ForegroundConnection {
    /// The library's options for these flags, connecting over `endpoint`'s transport.
    pub fn options(&self, endpoint: &Endpoint) -> ConnectOptions {
        let mut o = connect_options(self.hostnqn.as_ref());
        o.transport = endpoint.transport;
        o.hdr_digest = self.hdr_digest;
        o.data_digest = self.data_digest;
        o.disable_sqflow = self.disable_sqflow;
        if let Some(n) = self.nr_io_queues {
            o.nr_io_queues = n;
        }
        o
    }
}

fn connect_options(hostnqn: Option<&String>) -> ConnectOptions {
    let mut o = ConnectOptions::default();
    // The default identity is the system's (/etc/nvme) or a generated one; `--hostnqn` overrides the NQN.
    if let Some(n) = hostnqn {
        n.clone_into(&mut o.hostnqn);
    }
    o
}

/// Run a parsed command line, writing to `out`.
pub fn run(cli: &Cli, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    match &cli.command {
        Command::Perf(a) => perf(a, out),
        Command::Discover(a) => discover(a, out),
        Command::Nbd(a) => nbd::run(a, out),
        #[cfg(feature = "ublk")]
        Command::Ublk(a) => ublk::run(a, out),
        Command::Run(a) if a.check => crate::daemon::check(&a.config, out).map_err(CliError::Run),
        Command::Run(a) => crate::daemon::run(&a.config).map_err(CliError::Run),
        Command::Reload(a) => control::reload(a, out),
        Command::Connect(a) => control::connect(a, out),
        Command::ConnectAll(a) => control::connect_all(a, out),
        Command::Disconnect(a) => control::disconnect(a, out),
        Command::DisconnectAll(a) => control::disconnect_all(a, out),
        Command::List(a) => control::list(a, out),
    }
}

fn perf(a: &PerfArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    let transport = match a.endpoint.transport {
        Transport::Tcp => crate::perf::PerfTransport::Tcp,
        Transport::Rdma => crate::perf::PerfTransport::Rdma,
    };
    let mut connect = connect_options(a.hostnqn.as_ref());
    connect.hdr_digest = a.hdr_digest;
    connect.data_digest = a.data_digest;
    connect.disable_sqflow = a.disable_sqflow;
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
        queues: a.queues,
        busy_poll: a.busy_poll,
        cpus: match a.cpus.as_deref() {
            Some("none") => None,
            Some(list) => Some(nvmf_service::cpus::parse_list(list)?),
            None => Some(nvmf_service::cpus::allowed()?),
        },
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
    let queues: Vec<Value> = r
        .per_queue
        .iter()
        .map(|q| {
            let s = q.histogram.summary();
            json!({
                "qid": q.qid,
                "cpu": q.cpu,
                "ios": q.ios,
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
        "busy_poll": o.busy_poll,
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

fn discover(a: &DiscoverArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    let mut options = connect_options(a.hostnqn.as_ref());
    options.transport = a.endpoint.transport;
    let log = crate::discovery::discover(addr, options)?;
    match a.output_format {
        OutputFormat::Normal => write_discovery_log(&log, out)?,
        OutputFormat::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&discovery_json(&log)).unwrap_or_default())?
        }
    }
    Ok(())
}

fn trtype_str(t: TransportType) -> &'static str {
    match t {
        TransportType::Rdma => "rdma",
        TransportType::Fc => "fc",
        TransportType::Tcp => "tcp",
        TransportType::Loop => "loop",
    }
}

fn adrfam_str(a: AddressFamily) -> &'static str {
    match a {
        AddressFamily::Pci => "pci",
        AddressFamily::Ipv4 => "ipv4",
        AddressFamily::Ipv6 => "ipv6",
        AddressFamily::Ib => "infiniband",
        AddressFamily::Fc => "fibre-channel",
        AddressFamily::Loop => "loop",
    }
}

fn subtype_str(s: SubsystemType) -> &'static str {
    match s {
        SubsystemType::Referral => "referral",
        SubsystemType::Nvm => "nvme subsystem",
        SubsystemType::CurrentDiscovery => "current discovery subsystem",
    }
}

fn treq_str(t: u8) -> String {
    let mut s = match t & treq::SECURE_CHANNEL_MASK {
        treq::NOT_SPECIFIED => "not specified",
        treq::REQUIRED => "required",
        treq::NOT_REQUIRED => "not required",
        _ => "reserved",
    }
    .to_string();
    if t & treq::DISABLE_SQFLOW != 0 {
        s.push_str(", sq flow control disable supported");
    }
    s
}

fn eflags_str(f: u16) -> String {
    let names: Vec<&str> = [
        (eflags::DUPRETINFO, "duplicate discovery information"),
        (eflags::EPCSD, "explicit discovery connections"),
        (eflags::NCC, "no cdc connectivity"),
    ]
    .into_iter()
    .filter(|(bit, _)| f & bit != 0)
    .map(|(_, n)| n)
    .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn sectype_str(t: &Tsas) -> &'static str {
    match t {
        Tsas::Tcp { sectype: TcpSecurityType::None } | Tsas::Rdma { .. } | Tsas::None => "none",
        Tsas::Tcp { sectype: TcpSecurityType::Tls12 } => "tls1.2",
        Tsas::Tcp { sectype: TcpSecurityType::Tls13 } => "tls1.3",
    }
}

/// The log as `nvme discover` prints it.
pub fn write_discovery_log(log: &DiscoveryLog, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Discovery Log Number of Records {}, Generation counter {}", log.records.len(), log.genctr)?;
    for (i, r) in log.records.iter().enumerate() {
        writeln!(out, "=====Discovery Log Entry {i}======")?;
        writeln!(out, "trtype:  {}", trtype_str(r.trtype))?;
        writeln!(out, "adrfam:  {}", adrfam_str(r.adrfam))?;
        writeln!(out, "subtype: {}", subtype_str(r.subtype))?;
        writeln!(out, "treq:    {}", treq_str(r.treq))?;
        writeln!(out, "portid:  {}", r.portid)?;
        writeln!(out, "trsvcid: {}", r.trsvcid)?;
        writeln!(out, "subnqn:  {}", r.subnqn)?;
        writeln!(out, "traddr:  {}", r.traddr)?;
        writeln!(out, "eflags:  {}", eflags_str(r.eflags))?;
        if let Tsas::Rdma { qptype, prtype, cms, pkey } = r.tsas {
            writeln!(out, "rdma_prtype: {prtype:?}")?;
            writeln!(out, "rdma_qptype: {qptype:?}")?;
            writeln!(out, "rdma_cms:    {cms:?}")?;
            writeln!(out, "rdma_pkey: {pkey:#06x}")?;
        } else {
            writeln!(out, "sectype: {}", sectype_str(&r.tsas))?;
        }
    }
    Ok(())
}

fn record_json(r: &DiscoveryRecord) -> Value {
    json!({
        "trtype": trtype_str(r.trtype),
        "adrfam": adrfam_str(r.adrfam),
        "subtype": subtype_str(r.subtype),
        "treq": treq_str(r.treq),
        "portid": r.portid,
        "trsvcid": r.trsvcid,
        "subnqn": r.subnqn,
        "traddr": r.traddr,
        "eflags": eflags_str(r.eflags),
        "sectype": sectype_str(&r.tsas),
    })
}

/// The log as `nvme discover -o json` prints it (`genctr`, `records`).
pub fn discovery_json(log: &DiscoveryLog) -> Value {
    json!({
        "genctr": log.genctr,
        "records": log.records.iter().map(record_json).collect::<Vec<_>>(),
    })
}
