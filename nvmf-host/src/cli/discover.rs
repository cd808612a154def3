//! `nvmf-host discover`: its arguments ([`DiscoverArgs`]), reading the discovery controller's log on the caller's
//! thread ([`crate::discovery::discover`]), and printing it as `nvme discover` does ([`write_discovery_log`]) or
//! as its JSON ([`discovery_json`]).

use clap::Args;
use nvmf_common::fabrics::discovery::{
    eflags, treq, AddressFamily, SubsystemType, TcpSecurityType, TransportType, Tsas,
};
use serde_json::{json, Value};

use super::{connect_options, CliError, DhchapArgs, OutputFormat};
use crate::discovery::{DiscoveryLog, DiscoveryRecord};
use crate::endpoint::Endpoint;

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
    /// DH-HMAC-CHAP secrets, for a discovery controller that asks for authentication.
    #[command(flatten)]
    pub dhchap: DhchapArgs,
}

/// Run `nvmf-host discover`.
pub fn run(a: &DiscoverArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let addr = a.endpoint.resolve()?;
    let mut options = connect_options(a.hostnqn.as_ref());
    options.transport = a.endpoint.transport;
    a.dhchap.apply(&mut options)?;
    let log = crate::discovery::discover(addr, options)?;
    match a.output_format {
        OutputFormat::Normal => write_discovery_log(&log, out)?,
        OutputFormat::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&discovery_json(&log)).unwrap_or_default())?
        }
    }
    Ok(())
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
        writeln!(out, "trtype:  {}", TransportType::name(r.trtype))?;
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
        "trtype": TransportType::name(r.trtype),
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
