//! Kernel modules: which are loaded or built in (`/proc/modules`, `/sys/module/<name>`), the RDMA stack's
//! (`ib_uverbs`, `rdma_ucm`, a provider), and the ones an export needs (`ublk_drv`, `nbd`).

use std::path::Path;

use super::report::{Finding, Level};

/// RDMA provider (driver) modules: one must be loaded for a device to exist.
pub const RDMA_PROVIDERS: [&str; 16] = [
    "rdma_rxe",
    "siw",
    "mlx5_ib",
    "mlx4_ib",
    "irdma",
    "i40iw",
    "bnxt_re",
    "qedr",
    "efa",
    "erdma",
    "mana_ib",
    "hns_roce_hw_v2",
    "ocrdma",
    "vmw_pvrdma",
    "iw_cxgb4",
    "hfi1",
];

/// A module the configuration may need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleNeed {
    /// Module name (`ublk_drv`).
    pub name: &'static str,
    /// What needs it (`ublk exports`).
    pub what: &'static str,
    /// How bad its absence is: a failure when the configuration cannot work without it, a warning when a
    /// companion needs it (`nbd-client`), information when nothing configured uses it.
    pub missing: Level,
}

/// Whether module `name` is loaded or built in: `/sys/module/<name>` (loaded modules, and built-in ones with
/// parameters) or a line of `/proc/modules`.
pub fn loaded(root: &Path, name: &str) -> bool {
    if root.join("sys/module").join(name).is_dir() {
        return true;
    }
    std::fs::read_to_string(root.join("proc/modules"))
        .is_ok_and(|text| text.lines().any(|l| l.split_whitespace().next() == Some(name)))
}

/// Whether the kernel shows any sign of RDMA: the core modules or the device class.
pub fn any_rdma(root: &Path) -> bool {
    ["ib_core", "ib_uverbs", "rdma_ucm"].iter().any(|m| loaded(root, m))
        || root.join(crate::rdma_sysfs::CLASS_DIR).is_dir()
}

/// `ib_uverbs`, `rdma_ucm` and a provider.
pub fn rdma_modules(root: &Path) -> Finding {
    let check = "rdma modules";
    let missing: Vec<&str> = ["ib_uverbs", "rdma_ucm"].into_iter().filter(|m| !loaded(root, m)).collect();
    let providers: Vec<&str> = RDMA_PROVIDERS.into_iter().filter(|m| loaded(root, m)).collect();
    if !missing.is_empty() {
        return Finding::fail(
            check,
            format!("{} not loaded (userspace verbs and RDMA CM need them)", missing.join(", ")),
            format!("modprobe {}", missing.join(" ")),
        );
    }
    if providers.is_empty() {
        return Finding::fail(
            check,
            "ib_uverbs and rdma_ucm loaded, but no RDMA provider module (rdma_rxe, mlx5_ib, irdma, bnxt_re, …)",
            "modprobe your NIC's RDMA driver (mlx5_ib, irdma, …), or for Soft-RoCE: modprobe rdma_rxe",
        );
    }
    Finding::ok(check, format!("ib_uverbs, rdma_ucm, {} loaded", providers.join(", ")))
}

/// A module an export needs.
pub fn module(root: &Path, need: &ModuleNeed) -> Finding {
    let check = format!("module {}", need.name);
    if loaded(root, need.name) {
        return Finding::ok(check, format!("loaded ({})", need.what));
    }
    let fix = format!("modprobe {}", need.name);
    match need.missing {
        Level::Ok | Level::Info => Finding::info(check, format!("not loaded; needed only for {}", need.what)),
        Level::Warn => Finding::warn(check, format!("not loaded; {} need it", need.what), fix),
        Level::Fail => Finding::fail(check, format!("not loaded; the configuration has {}", need.what), fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma_sysfs::tests::tree;

    #[test]
    fn modules_from_sys_module_or_proc_modules() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(!any_rdma(root));
        assert_eq!(rdma_modules(root).level, Level::Fail);
        tree(root, &[("sys/module/ib_uverbs/refcnt", "1\n"), ("proc/modules", "rdma_ucm 40960 0 - Live 0x0\n")]);
        let f = rdma_modules(root);
        assert_eq!(f.level, Level::Fail);
        assert!(f.finding.contains("no RDMA provider"), "{f:?}");
        tree(root, &[("proc/modules", "rdma_ucm 40960 0 - Live 0x0\nrdma_rxe 1 0 - Live 0x0\n")]);
        let f = rdma_modules(root);
        assert_eq!((f.level, f.finding.as_str()), (Level::Ok, "ib_uverbs, rdma_ucm, rdma_rxe loaded"));
        assert!(any_rdma(root));

        let ublk = ModuleNeed { name: "ublk_drv", what: "ublk exports", missing: Level::Fail };
        assert_eq!(module(root, &ublk).level, Level::Fail);
        assert_eq!(module(root, &ModuleNeed { missing: Level::Warn, ..ublk.clone() }).level, Level::Warn);
        assert_eq!(module(root, &ModuleNeed { missing: Level::Info, ..ublk.clone() }).level, Level::Info);
        tree(root, &[("sys/module/ublk_drv/refcnt", "0\n")]);
        assert_eq!(module(root, &ublk).level, Level::Ok);
    }
}
