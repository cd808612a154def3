//! `doctor`: checks of the machine a daemon is about to run on, against what its configuration needs ([`Needs`]),
//! shared by `nvmf-target doctor` and `nvmf-host doctor`. Each check is a small function over a root folder
//! (`/` on a live system; a fake `/sys`, `/proc` and `/dev` tree in tests) that returns [`Finding`]s:
//!
//! - [`modules`]: the RDMA modules (`ib_uverbs`, `rdma_ucm`, a provider) and the exports' (`ublk_drv`, `nbd`);
//! - [`rdma`]: devices and `/dev/infiniband` nodes, port state and RoCE MTU vs the netdev's MTU, a RoCEv2 GID
//!   for each configured address, ECN where readable;
//! - [`memory`]: `RLIMIT_MEMLOCK` vs the memory the buffers pin, free huge pages vs the pools;
//! - [`numa`]: the NIC's NUMA node vs the data path's CPUs;
//! - [`io_uring`]: whether a ring can be created.
//!
//! [`diagnose`] runs them in that order and gives the [`Report`] (exit status 0: no failure; 1: a failure). A
//! machine without RDMA gets one line saying so: a failure when the configuration uses RDMA, information when
//! it does not. RDMA findings of a configuration that uses no RDMA are information at most.

pub mod io_uring;
pub mod memory;
pub mod modules;
pub mod numa;
pub mod rdma;
pub mod report;

use std::net::IpAddr;
use std::path::Path;

pub use memory::{HugePagesWanted, Pinned};
pub use modules::ModuleNeed;
pub use numa::Cpus;
pub use report::{Finding, Level, Report};

use crate::rdma_sysfs::RdmaSysfs;
use crate::rnic_metrics::Devices;

/// How the configuration uses RDMA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaUse {
    /// Not at all.
    None,
    /// Listeners on these local addresses (the target).
    Listeners(Vec<IpAddr>),
    /// Controllers reached over RDMA from whichever local device routes to them (the host).
    Controllers,
}

/// What a daemon's configuration needs of the machine.
#[derive(Debug, Clone)]
pub struct Needs {
    /// The daemon (`nvmf-target`), for the report and the fixes.
    pub program: &'static str,
    /// RDMA.
    pub rdma: RdmaUse,
    /// The data path's configured CPUs (`None`: not configurable).
    pub cpus: Option<Cpus>,
    /// Memory it pins, when known.
    pub pinned: Option<Pinned>,
    /// Huge pages its pools map, when it uses them.
    pub hugepages: Option<HugePagesWanted>,
    /// io_uring: required, and what needs it.
    pub io_uring: (bool, &'static str),
    /// Further modules (the host's exports).
    pub modules: Vec<ModuleNeed>,
}

/// Run every check under `root`; `io_uring` is the probe's result ([`io_uring::probe`] on a live system).
pub fn diagnose(root: &Path, needs: &Needs, io_uring: &std::io::Result<()>) -> Report {
    let mut findings = rdma_findings(root, needs);
    if let Some(pinned) = &needs.pinned {
        findings.push(memory::memlock(root, pinned, needs.program));
    }
    if let Some(wanted) = needs.hugepages {
        findings.push(memory::hugepages(root, wanted));
    }
    findings.push(io_uring::io_uring(io_uring, needs.io_uring.0, needs.io_uring.1));
    findings.extend(needs.modules.iter().map(|m| modules::module(root, m)));
    Report::new(needs.program, findings)
}

fn rdma_findings(root: &Path, needs: &Needs) -> Vec<Finding> {
    let sysfs = RdmaSysfs::new(root);
    let used = needs.rdma != RdmaUse::None;
    if !modules::any_rdma(root) {
        let none = "no RDMA on this machine: no ib_uverbs or rdma_ucm module, no /sys/class/infiniband";
        return vec![match &needs.rdma {
            RdmaUse::None => Finding::info("rdma", format!("{none}; the configuration uses none")),
            RdmaUse::Listeners(addrs) => Finding::fail(
                "rdma",
                format!("{none}, but the configuration has RDMA listeners on {}", join(addrs)),
                "load the NIC's RDMA driver, ib_uverbs and rdma_ucm (or Soft-RoCE: modprobe rdma_rxe), or listen on tcp",
            ),
            RdmaUse::Controllers => Finding::fail(
                "rdma",
                format!("{none}, but the configuration has RDMA controllers"),
                "load the NIC's RDMA driver, ib_uverbs and rdma_ucm (or Soft-RoCE: modprobe rdma_rxe), or use tcp",
            ),
        }];
    }
    let mut findings = vec![modules::rdma_modules(root), rdma::devices(&sysfs)];
    let devices = match &needs.rdma {
        RdmaUse::Listeners(addrs) => match Devices::serving(&sysfs, addrs) {
            Devices::All => sysfs.devices(),
            Devices::Named(named) => named,
        },
        RdmaUse::None | RdmaUse::Controllers => sysfs.devices(),
    };
    findings.extend(rdma::ports(&sysfs, &devices));
    match &needs.rdma {
        RdmaUse::Listeners(addrs) => findings.extend(rdma::listener_gids(&sysfs, addrs)),
        RdmaUse::Controllers => findings.push(rdma::any_gid(&sysfs)),
        RdmaUse::None => {}
    }
    findings.extend(devices.iter().map(|d| numa::numa(&sysfs, d, needs.cpus.as_ref())));
    findings.extend(rdma::ecn(&sysfs, &devices));
    if !used {
        findings = findings
            .into_iter()
            .map(|f| {
                let mut f = f.at_most(Level::Info);
                f.finding.push_str(" (the configuration uses no RDMA)");
                f
            })
            .collect();
    }
    findings
}

fn join(addrs: &[IpAddr]) -> String {
    addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma_sysfs::tests::{rxe, tree};

    fn needs(rdma: RdmaUse) -> Needs {
        Needs {
            program: "nvmf-target",
            rdma,
            cpus: Some(Cpus { cpus: Vec::new(), key: "[reactors] cpus" }),
            pinned: Some(Pinned { bytes: 64 << 20, what: "1 reactor × 64 MiB buffer pool".into() }),
            hugepages: None,
            io_uring: (true, "storage I/O"),
            modules: Vec::new(),
        }
    }

    #[test]
    fn without_rdma_one_line_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(root, &[("proc/self/limits", "Max locked memory unlimited unlimited bytes\n")]);
        let report = diagnose(root, &needs(RdmaUse::None), &Ok(()));
        assert_eq!(report.findings[0].level, Level::Info);
        assert!(report.findings[0].finding.starts_with("no RDMA on this machine"));
        assert_eq!(report.exit_status(), 0, "{report:?}");
        let report = diagnose(root, &needs(RdmaUse::Listeners(vec!["10.77.0.1".parse().unwrap()])), &Ok(()));
        assert_eq!(report.findings.iter().filter(|f| f.check == "rdma").count(), 1);
        assert!(report.findings[0].finding.contains("RDMA listeners on 10.77.0.1"), "{report:?}");
        assert_eq!(report.exit_status(), 1);
    }

    #[test]
    fn a_soft_roce_machine_passes_and_unused_rdma_never_fails() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        rxe(root, 9000);
        tree(
            root,
            &[
                ("proc/modules", "ib_uverbs 1 0 - Live 0\nrdma_ucm 1 0 - Live 0\nrdma_rxe 1 0 - Live 0\n"),
                ("dev/infiniband/uverbs0", ""),
                ("dev/infiniband/rdma_cm", ""),
                ("proc/self/limits", "Max locked memory unlimited unlimited bytes\n"),
            ],
        );
        let report = diagnose(root, &needs(RdmaUse::Listeners(vec!["10.77.0.1".parse().unwrap()])), &Ok(()));
        let checks: Vec<(&str, Level)> = report.findings.iter().map(|f| (f.check.as_str(), f.level)).collect();
        assert_eq!(
            checks,
            [
                ("rdma modules", Level::Ok),
                ("rdma devices", Level::Ok),
                ("port rxe0/1", Level::Ok),
                ("gid 10.77.0.1", Level::Ok),
                ("numa rxe0", Level::Info),
                ("ecn dummy0", Level::Info),
                ("memlock", Level::Ok),
                ("io_uring", Level::Ok),
            ]
        );
        assert_eq!(report.exit_status(), 0);

        tree(root, &[("sys/class/infiniband/rxe0/ports/1/state", "1: DOWN\n")]);
        let report = diagnose(root, &needs(RdmaUse::Listeners(vec!["10.77.0.1".parse().unwrap()])), &Ok(()));
        assert_eq!(report.exit_status(), 1);
        let report = diagnose(root, &needs(RdmaUse::None), &Ok(()));
        assert_eq!(report.exit_status(), 0, "{report:?}");
        let port = report.findings.iter().find(|f| f.check == "port rxe0/1").unwrap();
        assert_eq!(port.level, Level::Info);
        assert!(port.finding.ends_with("(the configuration uses no RDMA)"));
    }
}
