//! `nvmf-target systemd-devices`: the systemd drop-in that lets `nvmf-target.service` open the device nodes its
//! configuration names, and no others.
//!
//! The unit starts with `DevicePolicy=closed` and no block device allowed, and its user is in no device group:
//! memory, null and file namespaces need nothing more. For namespaces on block devices (or NVMe generic char
//! devices), systemd has two locks and no per-device key for the first: the file mode of the node (`root:disk
//! 0660`), opened by the `disk` group, and the unit's device cgroup, which takes exact nodes (`DeviceAllow=`). The
//! drop-in gives the service the group and allows exactly the nodes named, so the group reaches those only.
//! Runs once on the operator's command line; reads the configuration and `stat`s its paths, nothing else.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nvmf_config::target::NamespaceBackend;
use nvmf_config::TargetConfig;

/// Where the drop-in goes: systemd reads every `*.conf` of the unit's `.d` folder.
pub const DROP_IN_PATH: &str = "/etc/systemd/system/nvmf-target.service.d/devices.conf";

/// A namespace path that cannot be inspected.
#[derive(Debug, thiserror::Error)]
#[error("{subsystem} namespace {nsid}: {}: {source}", path.display())]
pub struct DevicesError {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The namespace.
    pub nsid: u32,
    /// Its `path`.
    pub path: PathBuf,
    /// Why `stat` failed.
    #[source]
    pub source: io::Error,
}

/// The drop-in for `config`, read from `file` (named in its header): `SupplementaryGroups=disk` and one
/// `DeviceAllow=` per device node a namespace names, as written in the configuration (a `/dev/disk/by-id/` name
/// stays one: systemd resolves it to the device's number when the service starts).
pub fn drop_in(config: &TargetConfig, file: &Path) -> Result<String, DevicesError> {
    let mut allow = String::new();
    for s in &config.subsystems {
        for ns in &s.namespaces {
            let NamespaceBackend::Path(path) = &ns.backend else { continue };
            let meta = std::fs::metadata(path).map_err(|source| DevicesError {
                subsystem: s.nqn.clone(),
                nsid: ns.nsid,
                path: path.clone(),
                source,
            })?;
            let kind = meta.file_type();
            if kind.is_block_device() || kind.is_char_device() {
                let _ = writeln!(allow, "# {} namespace {}\nDeviceAllow={} rw", s.nqn, ns.nsid, path.display());
            }
        }
    }
    let mut out = format!(
        "# {DROP_IN_PATH}: printed by `nvmf-target systemd-devices --config {}`.\n\
         # Print it again when a namespace moves to another device, then `systemctl daemon-reload` and\n\
         # `systemctl restart nvmf-target`: until then a reload that adds one fails to open it (EPERM).\n\
         [Service]\n",
        file.display()
    );
    if allow.is_empty() {
        out.push_str("# The configuration names no device node: the unit needs nothing more.\n");
    } else {
        out.push_str(
            "# Group \"disk\" may open block device nodes (root:disk 0660); the unit's device cgroup\n\
             # (DevicePolicy=closed) confines it to the nodes allowed here.\n\
             SupplementaryGroups=disk\n",
        );
        out.push_str(&allow);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block device node of this machine (loop devices exist as nodes even when unattached).
    fn some_block_device() -> Option<PathBuf> {
        std::fs::read_dir("/dev")
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device()))
    }

    fn config(namespaces: &str) -> TargetConfig {
        let text = format!("[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.nvmf-rs:devices\"\n{namespaces}");
        TargetConfig::from_str(&text, "t.toml").unwrap()
    }

    #[test]
    fn allows_exactly_the_device_nodes_the_configuration_names() {
        let Some(dev) = some_block_device() else {
            eprintln!("SKIPPED: no block device node in /dev");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ns.img");
        std::fs::write(&file, [0u8; 4096]).unwrap();
        let namespaces = format!(
            "[[subsystem.namespace]]\nmemory = \"1MiB\"\n[[subsystem.namespace]]\npath = \"{}\"\n\
             [[subsystem.namespace]]\npath = \"{}\"\n",
            file.display(),
            dev.display()
        );
        let text = drop_in(&config(&namespaces), Path::new("/etc/nvmf/target.toml")).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines, ["[Service]", "SupplementaryGroups=disk", &format!("DeviceAllow={} rw", dev.display())]);
        assert!(text.starts_with(&format!(
            "# {DROP_IN_PATH}: printed by `nvmf-target systemd-devices --config /etc/nvmf/target.toml`"
        )));
        assert!(text.contains("# nqn.2024-01.io.nvmf-rs:devices namespace 3\n"), "{text}");
    }

    #[test]
    fn no_device_node_no_group() {
        let text = drop_in(&config("[[subsystem.namespace]]\nnull = \"1GiB\"\n"), Path::new("t.toml")).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines, ["[Service]"]);
    }

    #[test]
    fn a_missing_path_is_named() {
        let err = drop_in(&config("[[subsystem.namespace]]\npath = \"/dev/nvmf-no-such\"\n"), Path::new("t.toml"))
            .unwrap_err();
        assert!(
            err.to_string().starts_with("nqn.2024-01.io.nvmf-rs:devices namespace 1: /dev/nvmf-no-such: "),
            "{err}"
        );
    }
}
