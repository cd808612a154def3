//! The Debian 13 (trixie) user space, for scenarios that need newer tools than this machine's Debian 12: NVMe/TCP
//! over TLS needs nvme-cli 2.13 (`--tls`, `gen-tls-key`, `check-tls-key`) and ktls-utils' `tlshd`, the agent that
//! does the kernel's TLS handshakes, neither of which Debian 12 has.
//!
//! `tests/vm/debian13-root.sh` builds it once with debootstrap (`--variant=minbase`: nvme-cli, ktls-utils, keyutils,
//! fio and a few basics; about a minute and 150 MB of downloads, 260 MB on disk) into `<cache>/debian13-root`, on
//! the Debian mirror this machine's apt sources name; it is rebuilt only when the script's package list changes.
//! Building needs root and `debootstrap` (`.ci/run` installs it); without them a scenario that asks for it is
//! skipped like any scenario this machine cannot run (a failure under `NVMF_REQUIRE_VM=1`).
//!
//! The guest needs no share of its own for it: the cache is on this machine's `/`, which the guest mounts over 9p
//! (read-only, `cache=loose`: the fastest mount there is under TCG) under its tmpfs overlay, so the root is at the
//! same path there and writable for the run (`/etc/nvme`, `/etc/tlshd.conf` land in the guest's tmpfs).
//! [`super::Vm::debian13_userspace`] exports its path as `$NVMF_DEBIAN13_ROOT`; `guest-lib.sh` then sources
//! `tests/vm/debian13-lib.sh` (the chroot's mounts, `nvme13`, `tlshd_start`, the TLS helpers) and `stage2.sh` sets
//! the chroot up before the scenario and tears it down after it.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::apt::system_mirror;
use super::error::VmError;
use super::kernel::cache_dir;
use super::note;

/// Builds the root (`tests/vm/debian13-root.sh ROOT MIRROR`); idempotent, locked against concurrent builds.
const BUILD_SCRIPT: &str = include_str!("../../vm/debian13-root.sh");

/// `<cache>/debian13-root`, built first if it is missing or was built from another package list.
pub fn root() -> Result<PathBuf, VmError> {
    let cache = cache_dir();
    fs::create_dir_all(&cache).map_err(VmError::io("creating the cache", &cache))?;
    let root = cache.join("debian13-root");
    let built_before = root.join(".ok").is_file();
    // Only a build needs it (the script finds one itself, or says it cannot).
    let mirror = system_mirror().ok();
    if !built_before {
        note(&format!("building the Debian 13 user space in {} (once; about a minute)", root.display()));
    }
    let started = Instant::now();
    let out = Command::new("bash")
        .arg("-c")
        .arg(BUILD_SCRIPT)
        .arg("debian13-root.sh")
        .arg(&root)
        .args(&mirror)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| VmError::Tool { command: "bash tests/vm/debian13-root.sh".into(), detail: e.to_string() })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        // The script's "cannot build here": not root, no debootstrap.
        Some(2) => return Err(VmError::Unavailable(stderr.trim().to_owned())),
        _ => {
            return Err(VmError::Tool {
                command: format!("tests/vm/debian13-root.sh {} {}", root.display(), mirror.unwrap_or_default()),
                detail: format!("{}: {}", out.status, stderr.trim()),
            })
        }
    }
    if !built_before || started.elapsed().as_secs() > 5 {
        note(&format!("Debian 13 user space ready in {:.0} s: {}", started.elapsed().as_secs_f64(), stderr.trim()));
    }
    Ok(root)
}
