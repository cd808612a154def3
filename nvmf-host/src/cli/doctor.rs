//! `nvmf-host doctor`: what a host configuration needs of this machine, for the checks of `nvmf_service::doctor`:
//! RDMA for its RDMA controllers, locked memory for their queues' registered memory (an estimate: each command
//! slot's data buffer grows to the largest transfer), io_uring and `ublk_drv` for ublk exports, `nbd` for the
//! NBD exports' kernel clients. Without a configuration (none given and no /etc/nvmf/host.toml), every RDMA
//! check is information. Runs once on the operator's command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use nvmf_config::host::{ExportKind, HostConfig};
use nvmf_config::target::Transport;
use nvmf_config::ConfigError;
use nvmf_service::doctor::memory::size;
use nvmf_service::doctor::report::finish;
use nvmf_service::doctor::{self, Finding, Level, ModuleNeed, Needs, Pinned, RdmaUse, Report};

use super::{CliError, OutputFormat};

/// The configuration read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG: &str = "/etc/nvmf/host.toml";

/// The largest transfer a command slot's data buffer grows to: ublk's largest request.
const LARGEST_TRANSFER: u64 = 512 << 10;

/// A command slot's capsule and response buffers (SQE and CQE).
const SLOT_OVERHEAD: u64 = 64 + 16;

/// `nvmf-host doctor`.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The daemon's configuration [default: /etc/nvmf/host.toml when it exists; otherwise none].
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(short, long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
}

/// What `config` needs of the machine (`None`: no configuration).
pub fn needs(config: Option<&HostConfig>) -> Needs {
    let controllers = config.map_or(&[][..], |c| &c.controllers[..]);
    let rdma: Vec<_> = controllers.iter().filter(|c| c.transport == Transport::Rdma).collect();
    let exports = |kind: fn(&ExportKind) -> bool| controllers.iter().flat_map(|c| &c.exports).any(|e| kind(&e.kind));
    let ublk = exports(|k| matches!(k, ExportKind::Ublk));
    let nbd = exports(|k| matches!(k, ExportKind::Nbd(_)));
    let tls = controllers.iter().any(|c| c.tls_key.is_some());
    let slots: u64 = rdma.iter().map(|c| (u64::from(c.nr_io_queues) + 1) * u64::from(c.queue_size)).sum();
    let per_slot = SLOT_OVERHEAD + LARGEST_TRANSFER;
    Needs {
        program: "nvmf-host",
        rdma: if rdma.is_empty() { RdmaUse::None } else { RdmaUse::Controllers },
        cpus: None,
        pinned: (!rdma.is_empty()).then(|| Pinned {
            bytes: slots * per_slot,
            what: format!(
                "estimated: {} RDMA controller(s), {slots} command slots × {} (a transfer of up to {} each)",
                rdma.len(),
                size(per_slot),
                size(LARGEST_TRANSFER)
            ),
        }),
        hugepages: None,
        io_uring: (ublk, "ublk exports"),
        modules: vec![
            ModuleNeed {
                name: "ublk_drv",
                what: "ublk exports",
                missing: if ublk { Level::Fail } else { Level::Info },
            },
            ModuleNeed {
                name: "nbd",
                what: "NBD exports' kernel clients (nbd-client)",
                missing: if nbd { Level::Warn } else { Level::Info },
            },
            ModuleNeed {
                name: "tls",
                what: "kTLS for controllers over TLS (without it their records are relayed in user space, slower)",
                missing: if tls { Level::Warn } else { Level::Info },
            },
        ],
    }
}

/// The configuration `args` names, the default one when it exists, or none.
fn config(args: &DoctorArgs) -> Result<(Option<HostConfig>, Option<Finding>), ConfigError> {
    match &args.config {
        Some(path) => Ok((Some(HostConfig::from_file(path)?), None)),
        None if Path::new(DEFAULT_CONFIG).exists() => Ok((Some(HostConfig::from_file(DEFAULT_CONFIG)?), None)),
        None => {
            let why = format!("none ({DEFAULT_CONFIG} does not exist): RDMA and export checks are information");
            Ok((None, Some(Finding::info("config", why))))
        }
    }
}

/// Check the machine under `root` (`/`) for `args`' configuration.
pub fn report(args: &DoctorArgs, root: &Path) -> Result<Report, ConfigError> {
    let (config, note) = config(args)?;
    let mut report = doctor::diagnose(root, &needs(config.as_ref()), &doctor::io_uring::probe());
    if let Some(note) = note {
        report.findings.insert(0, note);
    }
    Ok(report)
}

/// The command: print the report, exit status 0 (nothing failed), 1 (a check failed) or 2 (cannot check).
pub fn run(args: &DoctorArgs) -> ExitCode {
    let json = args.output_format == OutputFormat::Json;
    match report(args, Path::new("/")) {
        Ok(report) => finish("nvmf-host", Ok(report), json),
        Err(e) => finish("nvmf-host", Err(&e), json),
    }
}

/// The report written to `out` (for callers of [`super::run`]; the exit status is [`run`]'s).
pub fn write(args: &DoctorArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let report = report(args, Path::new("/")).map_err(|e| CliError::Run(e.into()))?;
    match args.output_format {
        OutputFormat::Json => report.write_json(out)?,
        OutputFormat::Normal => report.write_text(out)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_follow_the_configuration() {
        let config = HostConfig::from_str(
            "[[controller]]\ntransport = \"rdma\"\naddress = \"10.77.0.1\"\nnqn = \"nqn.2024-01.io.x:a\"\n\
             nr_io_queues = 2\nqueue_size = 64\n[[controller.export]]\nnsid = 1\nublk = true\n\
             [[controller]]\naddress = \"127.0.0.1\"\nnqn = \"nqn.2024-01.io.x:b\"\n",
            "h.toml",
        )
        .unwrap();
        let n = needs(Some(&config));
        assert_eq!(n.rdma, RdmaUse::Controllers);
        assert_eq!(n.pinned.unwrap().bytes, 3 * 64 * (80 + (512 << 10)), "admin + 2 I/O queues of 64");
        assert_eq!(n.io_uring, (true, "ublk exports"));
        assert_eq!(n.modules[0].missing, Level::Fail);
        assert_eq!(n.modules[1].missing, Level::Info, "no NBD export");

        let none = needs(None);
        assert_eq!((none.rdma, none.pinned, none.io_uring.0), (RdmaUse::None, None, false));
    }
}
