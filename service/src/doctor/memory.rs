//! Memory the daemon pins: `RLIMIT_MEMLOCK` (and `CAP_IPC_LOCK`, which lifts it) against what the buffers
//! registered with io_uring and the RDMA NICs will pin, and free huge pages against what the pools map.

use std::path::Path;

use super::report::Finding;

/// `CAP_IPC_LOCK`'s bit in the capability sets.
const CAP_IPC_LOCK: u32 = 14;

/// Memory a daemon will pin, and what it is (`2 reactors × 64 MiB buffer pool`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// Bytes.
    pub bytes: u64,
    /// What they are, for the finding.
    pub what: String,
}

/// Huge pages the buffer pools map, when free: `regions` regions (one per reactor) of `bytes` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugePagesWanted {
    /// Pools.
    pub regions: u64,
    /// Bytes of each.
    pub bytes: u64,
}

/// Bytes as `64 MiB`, `8 KiB`, `1.5 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024 << 10 && unit + 1 < UNITS.len() {
        value >>= 10;
        unit += 1;
    }
    let whole = value / 1024;
    let tenths = (value % 1024) * 10 / 1024;
    if tenths == 0 {
        format!("{whole} {}", UNITS[unit])
    } else {
        format!("{whole}.{tenths} {}", UNITS[unit])
    }
}

/// The soft `Max locked memory` of `/proc/self/limits` (`None`: unlimited).
fn memlock_limit(root: &Path) -> Result<Option<u64>, String> {
    let path = root.join("proc/self/limits");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = text.lines().find_map(|l| l.strip_prefix("Max locked memory")).ok_or("no Max locked memory line")?;
    match line.split_whitespace().next() {
        Some("unlimited") => Ok(None),
        Some(n) => n.parse().map(Some).map_err(|_| format!("Max locked memory {n:?}")),
        None => Err("empty Max locked memory line".into()),
    }
}

/// Whether `/proc/self/status` has `CAP_IPC_LOCK` in the effective set (pinning is then not limited).
fn has_ipc_lock(root: &Path) -> bool {
    std::fs::read_to_string(root.join("proc/self/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:")).map(|v| v.trim().to_owned()))
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// `RLIMIT_MEMLOCK` against `pinned`; `program`'s unit is named in the fix.
pub fn memlock(root: &Path, pinned: &Pinned, program: &str) -> Finding {
    let check = "memlock";
    let limit = match memlock_limit(root) {
        Ok(None) => return Finding::ok(check, format!("unlimited ({} to pin: {})", size(pinned.bytes), pinned.what)),
        Ok(Some(limit)) => limit,
        Err(e) => return Finding::info(check, format!("RLIMIT_MEMLOCK not readable ({e})")),
    };
    if limit >= pinned.bytes {
        return Finding::ok(
            check,
            format!("RLIMIT_MEMLOCK {} covers {} ({})", size(limit), size(pinned.bytes), pinned.what),
        );
    }
    let below = format!("RLIMIT_MEMLOCK {} is below the {} to pin ({})", size(limit), size(pinned.bytes), pinned.what);
    let fix = format!("ulimit -l unlimited, or LimitMEMLOCK=infinity in {program}.service (the shipped unit sets it)");
    if has_ipc_lock(root) {
        // The kernel does not count pinned memory against the limit of a process with CAP_IPC_LOCK (root).
        Finding::warn(check, format!("{below}; fine while run with CAP_IPC_LOCK (root), not without"), fix)
    } else {
        Finding::fail(check, format!("{below}: registering the buffers fails with ENOMEM"), fix)
    }
}

/// `HugePages_Free` against what the pools map: without them a pool falls back to 4 KiB pages.
pub fn hugepages(root: &Path, wanted: HugePagesWanted) -> Finding {
    let check = "hugepages";
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).unwrap_or_default();
    let field = |name: &str| -> Option<u64> {
        meminfo.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
    };
    let (Some(free), Some(total), Some(page_kib)) =
        (field("HugePages_Free"), field("HugePages_Total"), field("Hugepagesize"))
    else {
        return Finding::info(check, "no huge page counts in /proc/meminfo: the pools use 4 KiB pages");
    };
    let page = page_kib.max(1) << 10;
    let needed = wanted.regions * wanted.bytes.div_ceil(page);
    if free >= needed {
        return Finding::ok(check, format!("{free} free of {} pages, the pools take {needed}", size(page)));
    }
    Finding::warn(
        check,
        format!(
            "{free} free {} pages, the pools would take {needed}: they fall back to 4 KiB pages (more TLB misses)",
            size(page)
        ),
        format!("echo {} > /proc/sys/vm/nr_hugepages", total + needed - free),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Level;
    use crate::rdma_sysfs::tests::tree;

    fn limits(mem: &str) -> String {
        format!(
            "Limit Soft Limit Hard Limit Units\nMax locked memory {mem} {mem} bytes\nMax open files 1024 4096 files\n"
        )
    }

    #[test]
    fn memlock_against_the_pools() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pinned = Pinned { bytes: 128 << 20, what: "2 reactors × 64 MiB buffer pool".into() };
        assert_eq!(memlock(root, &pinned, "nvmf-target").level, Level::Info, "nothing to read");
        tree(root, &[("proc/self/limits", &limits("unlimited"))]);
        assert_eq!(memlock(root, &pinned, "nvmf-target").level, Level::Ok);
        tree(root, &[("proc/self/limits", &limits("8388608")), ("proc/self/status", "CapEff:\t0000000000000000\n")]);
        let f = memlock(root, &pinned, "nvmf-target");
        assert_eq!(f.level, Level::Fail);
        assert!(f.finding.starts_with("RLIMIT_MEMLOCK 8 MiB is below the 128 MiB to pin (2 reactors"), "{f:?}");
        assert!(f.fix.unwrap().contains("LimitMEMLOCK=infinity in nvmf-target.service"));
        tree(root, &[("proc/self/status", "CapEff:\t000001ffffffffff\n")]);
        assert_eq!(memlock(root, &pinned, "nvmf-target").level, Level::Warn, "root pins past the limit");
        tree(root, &[("proc/self/limits", &limits("134217728"))]);
        assert_eq!(memlock(root, &pinned, "nvmf-target").level, Level::Ok);
    }

    #[test]
    fn hugepages_for_every_pool() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let wanted = HugePagesWanted { regions: 2, bytes: 65 << 20 };
        assert_eq!(hugepages(root, wanted).level, Level::Info);
        let meminfo = |free: u32| {
            format!("MemTotal: 1 kB\nHugePages_Total:    80\nHugePages_Free:    {free}\nHugepagesize:    2048 kB\n")
        };
        tree(root, &[("proc/meminfo", &meminfo(10))]);
        let f = hugepages(root, wanted);
        assert_eq!(f.level, Level::Warn);
        assert!(f.finding.starts_with("10 free 2 MiB pages, the pools would take 66"), "{f:?}");
        assert_eq!(f.fix.as_deref(), Some("echo 136 > /proc/sys/vm/nr_hugepages"));
        tree(root, &[("proc/meminfo", &meminfo(66))]);
        assert_eq!(hugepages(root, wanted).level, Level::Ok);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(8 << 10), "8 KiB");
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(3 << 29), "1.5 GiB");
    }
}
