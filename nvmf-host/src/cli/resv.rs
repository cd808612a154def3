//! nvme-cli's reservation commands against one controller reached by address (`-t -a -s -n`, `-q`, `-S/-C`):
//! `resv-register`, `resv-acquire`, `resv-release`, `resv-report`, with nvme-cli's option names, except where
//! they clash with the connect options: the namespace is `-N/--namespace-id` (`-n` is the subsystem NQN, as in
//! the inspection commands), and `--rtype`, `--racqa`, `--rrela` have no short form (`-t`, `-a` are the
//! transport and the address). Reservations are I/O commands: each connects with one I/O queue and sends its
//! command there. A Reservation Conflict is [`CliError::ReservationConflict`]: one line, exit status 1.

use clap::Args;
use nvmf_common::nvme::reservation::{
    AcquireAction, Cptpl, RegisterAction, ReleaseAction, ReservationAcquire, ReservationKeys, ReservationRegister,
    ReservationRelease, ReservationReport, ReservationStatus, ReservationType,
};

use super::inspect::json::{self, Json};
use super::inspect::{ControllerArgs, Format};
use super::{CliError, OutputFormat};
use crate::controller::reservation::{is_reservation_conflict, MAX_REPORT_BYTES};
use crate::error::HostError;

/// `nvmf-host resv-register`.
#[derive(Debug, Clone, Args)]
pub struct ResvRegisterArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID.
    #[arg(short = 'N', long = "namespace-id")]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long = "crkey", default_value = "0", value_parser = parse_key)]
    pub crkey: u64,
    /// New reservation key.
    #[arg(short = 'k', long = "nrkey", default_value = "0", value_parser = parse_key)]
    pub nrkey: u64,
    /// Register action: 0 register, 1 unregister, 2 replace.
    #[arg(short = 'r', long = "rrega", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub rrega: u8,
    /// Change Persist Through Power Loss: 0 no change, 2 off, 3 on.
    #[arg(short = 'p', long = "cptpl", default_value_t = 0, value_parser = parse_cptpl)]
    pub cptpl: u8,
    /// Ignore existing key.
    #[arg(short = 'i', long = "iekey")]
    pub iekey: bool,
}

/// `nvmf-host resv-acquire`.
#[derive(Debug, Clone, Args)]
pub struct ResvAcquireArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID.
    #[arg(short = 'N', long = "namespace-id")]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long = "crkey", default_value = "0", value_parser = parse_key)]
    pub crkey: u64,
    /// Preempt reservation key.
    #[arg(short = 'p', long = "prkey", default_value = "0", value_parser = parse_key)]
    pub prkey: u64,
    /// Reservation type: 1 write exclusive, 2 exclusive access, 3/4 registrants only, 5/6 all registrants.
    #[arg(long = "rtype", value_parser = clap::value_parser!(u8).range(1..=6))]
    pub rtype: u8,
    /// Acquire action: 0 acquire, 1 preempt, 2 preempt and abort.
    #[arg(long = "racqa", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub racqa: u8,
    /// Ignore existing key.
    #[arg(short = 'i', long = "iekey")]
    pub iekey: bool,
}

/// `nvmf-host resv-release`.
#[derive(Debug, Clone, Args)]
pub struct ResvReleaseArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID.
    #[arg(short = 'N', long = "namespace-id")]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long = "crkey", default_value = "0", value_parser = parse_key)]
    pub crkey: u64,
    /// Reservation type (of the reservation released; a clear ignores it).
    #[arg(long = "rtype", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=6))]
    pub rtype: u8,
    /// Release action: 0 release, 1 clear.
    #[arg(long = "rrela", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub rrela: u8,
    /// Ignore existing key.
    #[arg(short = 'i', long = "iekey")]
    pub iekey: bool,
}

/// `nvmf-host resv-report`.
#[derive(Debug, Clone, Args)]
pub struct ResvReportArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID.
    #[arg(short = 'N', long = "namespace-id")]
    pub nsid: u32,
    /// Dwords to read, 0's based (default: 4 KiB).
    #[arg(short = 'd', long = "numd", default_value_t = 1023,
          value_parser = clap::value_parser!(u32).range(5..=(MAX_REPORT_BYTES / 4 - 1) as i64))]
    pub numd: u32,
    /// Extended data structure (128-bit host identifiers): fabrics hosts have those, so a target refuses the
    /// regular format (Host Identifier Inconsistent Format) once one is registered.
    #[arg(short = 'e', long = "eds")]
    pub eds: bool,
    /// Output format.
    #[command(flatten)]
    pub format: Format,
}

/// A reservation key in decimal or `0x` hex.
fn parse_key(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?} is not a 64-bit key (decimal or 0x hex): {e}"))
}

/// CPTPL: 0, 2 or 3 (1 is reserved).
fn parse_cptpl(s: &str) -> Result<u8, String> {
    match s.parse::<u8>() {
        Ok(v @ (0 | 2 | 3)) => Ok(v),
        _ => Err(format!("{s:?}: CPTPL is 0 (no change), 2 (off) or 3 (on)")),
    }
}

/// `error` as the command's error: a Reservation Conflict as its own.
fn conflict(command: &'static str) -> impl FnOnce(CliError) -> CliError {
    move |e| match e {
        CliError::Host(h) if is_reservation_conflict(&h) => CliError::ReservationConflict(command),
        other => other,
    }
}

fn host(e: HostError) -> CliError {
    CliError::Host(e)
}

/// Run `nvmf-host resv-register`.
pub fn register(a: &ResvRegisterArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let action = match a.rrega {
        0 => RegisterAction::Register,
        1 => RegisterAction::Unregister,
        _ => RegisterAction::Replace,
    };
    let cptpl = match a.cptpl {
        2 => Cptpl::Clear,
        3 => Cptpl::Persist,
        _ => Cptpl::NoChange,
    };
    let cmd = ReservationRegister { nsid: a.nsid, action, iekey: a.iekey, cptpl };
    let keys = ReservationKeys { crkey: a.crkey, second: a.nrkey };
    a.controller
        .with_io_controller(|c| c.reservation_register(&cmd, keys).map_err(host))
        .map_err(conflict("Reservation Register"))?;
    writeln!(out, "NVME Reservation Register success")?;
    Ok(())
}

/// Run `nvmf-host resv-acquire`.
pub fn acquire(a: &ResvAcquireArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let action = match a.racqa {
        0 => AcquireAction::Acquire,
        1 => AcquireAction::Preempt,
        _ => AcquireAction::PreemptAndAbort,
    };
    let rtype = ReservationType::from_u8(a.rtype)
        .ok_or_else(|| CliError::Options(format!("--rtype {}: a reservation type is 1..=6", a.rtype)))?;
    let cmd = ReservationAcquire { nsid: a.nsid, action, iekey: a.iekey, rtype };
    let keys = ReservationKeys { crkey: a.crkey, second: a.prkey };
    a.controller
        .with_io_controller(|c| c.reservation_acquire(&cmd, keys).map_err(host))
        .map_err(conflict("Reservation Acquire"))?;
    writeln!(out, "NVME Reservation Acquire success")?;
    Ok(())
}

/// Run `nvmf-host resv-release`.
pub fn release(a: &ResvReleaseArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let action = if a.rrela == 1 { ReleaseAction::Clear } else { ReleaseAction::Release };
    let cmd = ReservationRelease { nsid: a.nsid, action, iekey: a.iekey, rtype: a.rtype };
    a.controller
        .with_io_controller(|c| c.reservation_release(&cmd, a.crkey).map_err(host))
        .map_err(conflict("Reservation Release"))?;
    writeln!(out, "NVME Reservation Release success")?;
    Ok(())
}

/// Run `nvmf-host resv-report`.
pub fn report(a: &ResvReportArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let cmd = ReservationReport { nsid: a.nsid, numd: a.numd, eds: a.eds };
    let status = a
        .controller
        .with_io_controller(|c| c.reservation_report(&cmd).map_err(host))
        .map_err(conflict("Reservation Report"))?;
    match a.format.output_format {
        OutputFormat::Normal => report_text(&status, a.eds, out)?,
        OutputFormat::Json => json::write(&report_json(&status, a.eds), out)?,
    }
    Ok(())
}

fn hostid_hex(hostid: &[u8; 16], eds: bool) -> String {
    let bytes = if eds { &hostid[..] } else { &hostid[..8] };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// nvme-cli's `resv-report` text.
pub fn report_text(s: &ReservationStatus, eds: bool, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "\nNVME Reservation status:\n")?;
    writeln!(out, "gen       : {}", s.generation)?;
    writeln!(out, "rtype     : {}", s.rtype)?;
    writeln!(out, "regctl    : {}", s.registrants.len())?;
    writeln!(out, "ptpls     : {}", u8::from(s.ptpls))?;
    let name = if eds { "regctlext" } else { "regctl" };
    for (i, r) in s.registrants.iter().enumerate() {
        writeln!(out, "{name}[{i}] :")?;
        writeln!(out, "  cntlid  : {:x}", r.cntlid)?;
        writeln!(out, "  rcsts   : {:x}", u8::from(r.holds))?;
        writeln!(out, "  hostid  : {}", hostid_hex(&r.hostid, eds))?;
        writeln!(out, "  rkey    : {:x}", r.rkey)?;
    }
    writeln!(out)
}

/// nvme-cli's `resv-report -o json`: `gen`, `rtype`, `regctl`, `ptpls`, then `regctls` (or `regctlext` with
/// `--eds`), each `cntlid`, `rcsts`, `hostid` (hex), `rkey`.
pub fn report_json(s: &ReservationStatus, eds: bool) -> Json {
    let registrants = s
        .registrants
        .iter()
        .map(|r| {
            Json::Obj(vec![
                ("cntlid".to_owned(), Json::Num(u64::from(r.cntlid))),
                ("rcsts".to_owned(), Json::Num(u64::from(r.holds))),
                ("hostid".to_owned(), Json::Str(hostid_hex(&r.hostid, eds))),
                ("rkey".to_owned(), Json::Num(r.rkey)),
            ])
        })
        .collect();
    Json::Obj(vec![
        ("gen".to_owned(), Json::Num(u64::from(s.generation))),
        ("rtype".to_owned(), Json::Num(u64::from(s.rtype))),
        ("regctl".to_owned(), Json::Num(s.registrants.len() as u64)),
        ("ptpls".to_owned(), Json::Num(u64::from(s.ptpls))),
        ((if eds { "regctlext" } else { "regctls" }).to_owned(), Json::Arr(registrants)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_decimal_or_hex() {
        assert_eq!(parse_key("17"), Ok(17));
        assert_eq!(parse_key("0xdeadbeef"), Ok(0xdead_beef));
        assert!(parse_key("0x1ffffffffffffffff").is_err());
        assert!(parse_key("-1").is_err());
        assert_eq!(parse_cptpl("3"), Ok(3));
        assert!(parse_cptpl("1").is_err());
    }

    #[test]
    fn report_json_has_nvme_clis_keys() {
        use nvmf_common::nvme::reservation::RegisteredController;
        let s = ReservationStatus {
            generation: 3,
            rtype: 2,
            ptpls: false,
            registrants: vec![RegisteredController { cntlid: 5, holds: true, hostid: [0xab; 16], rkey: 9 }],
        };
        let regular = serde_json::to_value(report_json(&s, false)).unwrap();
        assert_eq!(
            regular,
            serde_json::json!({"gen": 3, "rtype": 2, "regctl": 1, "ptpls": 0,
                "regctls": [{"cntlid": 5, "rcsts": 1, "hostid": "abababababababab", "rkey": 9}]})
        );
        let ext = serde_json::to_value(report_json(&s, true)).unwrap();
        assert_eq!(ext["regctlext"][0]["hostid"], "ab".repeat(16));
        let mut text = Vec::new();
        report_text(&s, true, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("regctlext[0] :\n  cntlid  : 5\n  rcsts   : 1\n"), "{text}");
    }
}
