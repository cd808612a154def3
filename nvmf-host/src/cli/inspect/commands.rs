//! Each inspection command: its arguments (nvme-cli's option names; `-N` for the namespace, since `-n` is the
//! subsystem NQN here) and its run: the admin commands it sends and which rendering prints the result.

use clap::Args;
use nvmf_common::nvme::identify::{cns, ActiveNamespaceIdList, IdentifyController, IdentifyNamespace, NSID_BROADCAST};
use nvmf_common::nvme::log_page::{lid, ErrorInformationEntry, SmartLog, ERROR_INFORMATION_ENTRY_SIZE, SMART_LOG_SIZE};

use super::{json, text, ControllerArgs, ControllerView, Format};
use crate::cli::{CliError, OutputFormat};
use crate::controller::Controller;
use crate::error::HostError;

/// `nvmf-host id-ctrl`, `list-ns`, `ns-rescan`, `list-subsys`: the controller and the output format.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Output format.
    #[command(flatten)]
    pub format: Format,
}

/// `nvmf-host id-ns`.
#[derive(Debug, Clone, Args)]
pub struct IdNsArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID.
    #[arg(short = 'N', long = "namespace-id")]
    pub nsid: u32,
    /// Output format.
    #[command(flatten)]
    pub format: Format,
}

/// `nvmf-host smart-log`.
#[derive(Debug, Clone, Args)]
pub struct SmartLogArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Namespace ID (default: the controller's log, 0xffffffff).
    #[arg(short = 'N', long = "namespace-id", default_value_t = NSID_BROADCAST)]
    pub nsid: u32,
    /// Output format.
    #[command(flatten)]
    pub format: Format,
}

/// `nvmf-host error-log`.
#[derive(Debug, Clone, Args)]
pub struct ErrorLogArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Entries to read (at most the controller's ELPE + 1).
    #[arg(short = 'e', long = "log-entries", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub entries: u32,
    /// Output format.
    #[command(flatten)]
    pub format: Format,
}

/// `nvmf-host get-log`.
#[derive(Debug, Clone, Args)]
pub struct GetLogArgs {
    /// The controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Log page identifier.
    #[arg(short = 'i', long = "log-id", value_parser = parse_u8)]
    pub log_id: u8,
    /// Bytes to read (a multiple of 4).
    #[arg(short = 'l', long = "log-len", value_parser = clap::value_parser!(u32).range(1..))]
    pub log_len: u32,
    /// Namespace ID (default: 0xffffffff).
    #[arg(short = 'N', long = "namespace-id", default_value_t = NSID_BROADCAST)]
    pub nsid: u32,
    /// The log's bytes as they are instead of the hex dump.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw_binary: bool,
}

/// A byte in decimal or `0x` hex (`--log-id 0xc0`, as nvme-cli takes it).
fn parse_u8(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?} is not a byte (0-255 or 0x00-0xff): {e}"))
}

fn wire(what: &'static str) -> impl FnOnce(nvmf_common::wire::WireError) -> CliError {
    move |e| CliError::Host(HostError::wire(what, e))
}

/// Run `nvmf-host id-ctrl`.
pub fn id_ctrl(a: &InspectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let data = a.controller.with_controller(|c| Ok(c.identify(cns::CONTROLLER, 0)?))?;
    let id = IdentifyController::parse(&data).map_err(wire("Identify Controller"))?;
    match a.format.output_format {
        OutputFormat::Normal => text::id_ctrl(&id, out)?,
        OutputFormat::Json => json::write(&json::id_ctrl(&id), out)?,
    }
    Ok(())
}

/// Run `nvmf-host id-ns`.
pub fn id_ns(a: &IdNsArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let data = a.controller.with_controller(|c| Ok(c.identify(cns::NAMESPACE, a.nsid)?))?;
    let ns = IdentifyNamespace::parse(&data).map_err(wire("Identify Namespace"))?;
    match a.format.output_format {
        OutputFormat::Normal => text::id_ns(a.nsid, &ns, out)?,
        OutputFormat::Json => json::write(&json::id_ns(&ns), out)?,
    }
    Ok(())
}

fn write_ns_list(nsids: &[u32], format: OutputFormat, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    match format {
        OutputFormat::Normal => text::ns_list(nsids, out)?,
        OutputFormat::Json => json::write(&json::ns_list(nsids), out)?,
    }
    Ok(())
}

/// Run `nvmf-host list-ns`: the Active Namespace ID list (Identify CNS 02h from NSID 0).
pub fn list_ns(a: &InspectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let data = a.controller.with_controller(|c| Ok(c.identify(cns::ACTIVE_NAMESPACE_ID_LIST, 0)?))?;
    let nsids: Vec<u32> =
        ActiveNamespaceIdList::parse(&data).map_err(wire("Active Namespace ID list"))?.iter().collect();
    write_ns_list(&nsids, a.format.output_format, out)
}

/// Run `nvmf-host ns-rescan`: the library's whole namespace scan (the list, then Identify Namespace and the
/// identification descriptors of each, as the kernel's rescan reads them), printed as `list-ns` prints.
pub fn ns_rescan(a: &InspectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let namespaces = a.controller.with_controller(|c| Ok(c.namespaces()?))?;
    let nsids: Vec<u32> = namespaces.iter().map(|n| n.nsid).collect();
    write_ns_list(&nsids, a.format.output_format, out)
}

/// The SMART / Health Information log of `c` for `nsid`.
pub fn read_smart_log(c: &Controller, nsid: u32) -> Result<SmartLog, CliError> {
    let data = c.get_log_page(lid::SMART_HEALTH_INFORMATION, nsid, SMART_LOG_SIZE)?;
    SmartLog::parse(&data).map_err(wire("SMART / Health Information log"))
}

/// Run `nvmf-host smart-log`.
pub fn smart_log(a: &SmartLogArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let log = a.controller.with_controller(|c| read_smart_log(c, a.nsid))?;
    match a.format.output_format {
        OutputFormat::Normal => text::smart_log(&a.controller.nqn, a.nsid, &log, out)?,
        OutputFormat::Json => json::write(&json::smart_log(&log), out)?,
    }
    Ok(())
}

/// Run `nvmf-host error-log`: `-e` entries, at most as many as the controller keeps (Identify ELPE + 1).
pub fn error_log(a: &ErrorLogArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let data = a.controller.with_controller(|c| {
        let id = c.identify(cns::CONTROLLER, 0)?;
        let elpe = IdentifyController::parse(&id).map_err(wire("Identify Controller"))?.elpe;
        let entries = (usize::from(elpe) + 1).min(usize::try_from(a.entries).unwrap_or(usize::MAX));
        Ok(c.get_log_page(lid::ERROR_INFORMATION, NSID_BROADCAST, entries * ERROR_INFORMATION_ENTRY_SIZE)?)
    })?;
    let entries: Vec<ErrorInformationEntry> = ErrorInformationEntry::parse_log(&data).collect();
    match a.format.output_format {
        OutputFormat::Normal => text::error_log(&a.controller.nqn, &entries, out)?,
        OutputFormat::Json => json::write(&json::error_log(&entries), out)?,
    }
    Ok(())
}

/// Run `nvmf-host get-log`: nvme-cli's header and hex dump, or the raw bytes with `-b`.
pub fn get_log(a: &GetLogArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let len = usize::try_from(a.log_len).unwrap_or(usize::MAX);
    let data = a.controller.with_controller(|c| Ok(c.get_log_page(a.log_id, a.nsid, len)?))?;
    if a.raw_binary {
        out.write_all(&data)?;
    } else {
        writeln!(out, "Device:{} log-id:{} namespace-id:{:#x}", a.controller.nqn, a.log_id, a.nsid)?;
        text::hex_dump(&data, out)?;
    }
    Ok(())
}

/// Run `nvmf-host list-subsys`.
pub fn list_subsys(a: &InspectArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let view = a.controller.with_controller(|c| Ok(ControllerView::of(c)))?;
    match a.format.output_format {
        OutputFormat::Normal => text::subsystem_list(&view, out)?,
        OutputFormat::Json => json::write(&json::subsystem_list(&view), out)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ids_in_decimal_or_hex() {
        assert_eq!(parse_u8("2"), Ok(2));
        assert_eq!(parse_u8("0xc0"), Ok(0xc0));
        assert!(parse_u8("256").is_err());
        assert!(parse_u8("0x1ff").is_err());
    }
}
