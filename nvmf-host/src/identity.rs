//! The host's identity: Host NQN and Host Identifier, as nvme-cli finds them.
//!
//! `/etc/nvme/hostnqn` and `/etc/nvme/hostid` when present (what nvme-cli and the kernel host use, so the
//! target sees one host whichever tool connects). Otherwise the identity libnvme derives: a UUID-form NQN whose
//! UUID, also the host ID, is the machine's (`/sys/class/dmi/id/product_uuid`, else the device tree's
//! `ibm,partition-uuid`). Where the machine has none (or it is unreadable: DMI's is root's only), a UUID is
//! generated once and kept (mode 0600) in a state directory: the daemon's ([`HostIdentity::persistent`]), or the
//! user's `$XDG_STATE_HOME/nvmf-host` (`~/.local/state/nvmf-host`) for the other commands. So a target's allowed
//! hosts and its logs see the same host on every run. Files that do not parse are ignored with a warning. Runs on
//! the caller's thread; reads a few small files and at most once writes two.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nvmf_common::fabrics::nqn::{validate_nqn, UUID_NQN_PREFIX};
use uuid::Uuid;

/// A Host NQN and Host Identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host NQN.
    pub hostnqn: String,
    /// Host Identifier (128-bit).
    pub hostid: [u8; 16],
}

/// Why the daemon's identity could not be stored.
#[derive(Debug, thiserror::Error)]
#[error("storing the generated host identity in {}: {source}", path.display())]
pub struct IdentityError {
    /// The file or directory.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: std::io::Error,
}

/// The valid host NQN and host ID files of `dir`, each `None` when missing or invalid (invalid ones warned).
fn read_dir(dir: &Path) -> (Option<String>, Option<Uuid>) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_string());
    let nqn = read("hostnqn").filter(|n| match validate_nqn(n) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(path = %dir.join("hostnqn").display(), error = %e, "ignoring invalid host NQN");
            false
        }
    });
    let id = read("hostid").and_then(|s| match Uuid::parse_str(&s) {
        Ok(u) => Some(u),
        Err(e) => {
            tracing::warn!(path = %dir.join("hostid").display(), error = %e, "ignoring invalid host ID");
            None
        }
    });
    (nqn, id)
}

fn uuid_of(nqn: Option<&str>) -> Option<Uuid> {
    nqn.and_then(|n| n.strip_prefix(UUID_NQN_PREFIX)).and_then(|u| Uuid::parse_str(u).ok())
}

/// Write `dir/name` = `text` atomically, mode 0600: a temporary file in the same directory, synced, renamed
/// over the name (a reader sees the old file or the whole new one, never a part).
fn store(dir: &Path, name: &str, text: &str) -> Result<(), IdentityError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| IdentityError { path, source }
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err(dir))?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err(&tmp))?;
    f.write_all(format!("{text}\n").as_bytes()).and_then(|()| f.sync_all()).map_err(err(&tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(err(&path))?;
    tracing::info!(path = %path.display(), value = text, "stored the generated host identity");
    Ok(())
}

/// Where the machine's UUID is read, in order (libnvme's sources but `/sys/firmware/dmi/entries`).
#[derive(Debug, Clone)]
pub struct MachineUuid {
    /// The SMBIOS system UUID (`/sys/class/dmi/id/product_uuid`, readable by root only).
    pub dmi_product_uuid: PathBuf,
    /// POWER's partition UUID (`/proc/device-tree/ibm,partition-uuid`).
    pub device_tree_uuid: PathBuf,
}

impl MachineUuid {
    /// This machine's sources.
    pub fn system() -> Self {
        MachineUuid {
            dmi_product_uuid: PathBuf::from("/sys/class/dmi/id/product_uuid"),
            device_tree_uuid: PathBuf::from("/proc/device-tree/ibm,partition-uuid"),
        }
    }

    /// The machine's UUID, if a source has one. The nil and all-ones UUIDs (firmware that sets none) are not
    /// one: every such machine would be the same host.
    pub fn read(&self) -> Option<Uuid> {
        let read = |path: &Path| {
            let text = std::fs::read_to_string(path).ok()?;
            let uuid = Uuid::parse_str(text.trim_matches(|c: char| c == '\0' || c.is_whitespace())).ok()?;
            (!uuid.is_nil() && uuid != Uuid::from_bytes([0xFF; 16])).then_some(uuid)
        };
        read(&self.dmi_product_uuid).or_else(|| read(&self.device_tree_uuid))
    }
}

/// The user's state directory for a generated identity: `$XDG_STATE_HOME/nvmf-host`, else
/// `$HOME/.local/state/nvmf-host`.
fn user_state_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".local/state"),
    };
    Some(base.join("nvmf-host"))
}

impl HostIdentity {
    /// The daemon's identity: `system_dir`'s files (`/etc/nvme`) where present and valid, else the ones in
    /// `state_dir`, else the machine's UUID (`machine`), else generated now and stored in `state_dir/hostnqn` and
    /// `state_dir/hostid` (mode 0600, written atomically) so that every later start reuses them. A UUID-form host
    /// NQN supplies the host ID.
    pub fn persistent(system_dir: &Path, state_dir: &Path) -> Result<Self, IdentityError> {
        Self::persistent_with(system_dir, &MachineUuid::system(), state_dir)
    }

    /// [`HostIdentity::persistent`] with the machine's UUID read from `machine`.
    pub fn persistent_with(system_dir: &Path, machine: &MachineUuid, state_dir: &Path) -> Result<Self, IdentityError> {
        let (sys_nqn, sys_id) = read_dir(system_dir);
        let (state_nqn, state_id) = read_dir(state_dir);
        let nqn = sys_nqn.or(state_nqn);
        let found = sys_id.or(state_id).or_else(|| uuid_of(nqn.as_deref()));
        let (id, generated) = match found.or_else(|| machine.read()) {
            Some(id) => (id, false),
            None => {
                let id = Uuid::new_v4();
                store(state_dir, "hostid", &id.to_string())?;
                (id, true)
            }
        };
        // A NQN derived from a found UUID is derived the same way next time; a generated one is kept with its ID.
        let hostnqn = match nqn {
            Some(n) => n,
            None => {
                let n = format!("{UUID_NQN_PREFIX}{id}");
                if generated {
                    store(state_dir, "hostnqn", &n)?;
                }
                n
            }
        };
        Ok(HostIdentity { hostnqn, hostid: *id.as_bytes() })
    }

    /// The identity every command uses (see the module docs): `/etc/nvme`, else the machine's UUID, else one
    /// generated once for this user. Only when no state directory can be written is it random (with a warning).
    pub fn from_system() -> Self {
        let system = Path::new("/etc/nvme");
        match user_state_dir() {
            Some(state) => Self::persistent_with(system, &MachineUuid::system(), &state).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot keep a generated host identity: this run's is random");
                Self::from_dir(system)
            }),
            None => Self::from_dir(system),
        }
    }

    /// What nvme-cli's `gen-hostnqn` prints: the machine's UUID-form NQN, else a random one.
    pub fn generate_hostnqn(machine: &MachineUuid) -> String {
        format!("{UUID_NQN_PREFIX}{}", machine.read().unwrap_or_else(Uuid::new_v4))
    }

    /// From `dir/hostnqn` and `dir/hostid`. A missing or invalid file is replaced: the host ID by the UUID
    /// of a UUID-form host NQN (else a new UUID), the host NQN by the UUID form of the host ID.
    pub fn from_dir(dir: &Path) -> Self {
        let (nqn, id) = read_dir(dir);
        let id = id.or_else(|| uuid_of(nqn.as_deref())).unwrap_or_else(Uuid::new_v4);
        let hostnqn = nqn.unwrap_or_else(|| format!("{UUID_NQN_PREFIX}{id}"));
        HostIdentity { hostnqn, hostid: *id.as_bytes() }
    }

    /// A new random identity (UUID-form NQN).
    pub fn generate() -> Self {
        let id = Uuid::new_v4();
        HostIdentity { hostnqn: format!("{UUID_NQN_PREFIX}{id}"), hostid: *id.as_bytes() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::fabrics::nqn::check_nqn_format;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:3f1c2a9e-7b40-4c1d-9a55-0d6e8f2b1c33";
    const ID: &str = "3f1c2a9e-7b40-4c1d-9a55-0d6e8f2b1c33";

    #[test]
    fn reads_both_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hostnqn"), format!("{NQN}\n")).unwrap();
        std::fs::write(dir.path().join("hostid"), "11111111-2222-3333-4444-555555555555\n").unwrap();
        let h = HostIdentity::from_dir(dir.path());
        assert_eq!(h.hostnqn, NQN);
        assert_eq!(h.hostid, *Uuid::parse_str("11111111-2222-3333-4444-555555555555").unwrap().as_bytes());
    }

    #[test]
    fn hostid_from_uuid_nqn() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hostnqn"), NQN).unwrap();
        let h = HostIdentity::from_dir(dir.path());
        assert_eq!((h.hostnqn.as_str(), h.hostid), (NQN, *Uuid::parse_str(ID).unwrap().as_bytes()));
    }

    #[test]
    fn nqn_from_hostid() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hostid"), ID).unwrap();
        let h = HostIdentity::from_dir(dir.path());
        assert_eq!(h.hostnqn, NQN);
        assert_eq!(h.hostid, *Uuid::parse_str(ID).unwrap().as_bytes());
    }

    #[test]
    fn generated_when_missing_or_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let a = HostIdentity::from_dir(dir.path());
        assert!(check_nqn_format(&a.hostnqn).is_ok());
        assert_eq!(a.hostnqn, format!("{UUID_NQN_PREFIX}{}", Uuid::from_bytes(a.hostid)));
        std::fs::write(dir.path().join("hostnqn"), "a\u{1}b").unwrap();
        std::fs::write(dir.path().join("hostid"), "zzz").unwrap();
        let b = HostIdentity::from_dir(dir.path());
        assert!(b.hostnqn.starts_with(UUID_NQN_PREFIX));
        assert_ne!(a.hostid, b.hostid);
        assert_ne!(HostIdentity::generate(), HostIdentity::generate());
    }

    /// No machine UUID: the sources do not exist.
    fn no_machine(dir: &Path) -> MachineUuid {
        MachineUuid { dmi_product_uuid: dir.join("absent"), device_tree_uuid: dir.join("absent2") }
    }

    #[test]
    fn the_machine_uuid_names_the_host_when_no_file_does() {
        let system = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let machine = MachineUuid { dmi_product_uuid: system.path().join("product_uuid"), ..no_machine(system.path()) };
        std::fs::write(&machine.dmi_product_uuid, format!("{ID}\n")).unwrap();
        let a = HostIdentity::persistent_with(system.path(), &machine, &state.path().join("s")).unwrap();
        assert_eq!((a.hostnqn.as_str(), a.hostid), (NQN, *Uuid::parse_str(ID).unwrap().as_bytes()));
        assert!(!state.path().join("s").exists(), "nothing to store: the machine's UUID is stable");
        assert_eq!(HostIdentity::generate_hostnqn(&machine), NQN);
        // The device tree's (NUL-terminated), when DMI has none; a nil UUID is no identity.
        std::fs::write(&machine.dmi_product_uuid, "00000000-0000-0000-0000-000000000000\n").unwrap();
        assert_eq!(machine.read(), None);
        let tree = MachineUuid { device_tree_uuid: system.path().join("partition-uuid"), ..machine.clone() };
        std::fs::write(&tree.device_tree_uuid, format!("{ID}\0")).unwrap();
        assert_eq!(tree.read(), Some(Uuid::parse_str(ID).unwrap()));
        // /etc/nvme wins over the machine.
        std::fs::write(system.path().join("hostnqn"), "nqn.2024-01.io.example:host-a\n").unwrap();
        let b = HostIdentity::persistent_with(system.path(), &tree, &state.path().join("s")).unwrap();
        assert_eq!(b.hostnqn, "nqn.2024-01.io.example:host-a");
    }

    #[test]
    fn persistent_identity_is_generated_once_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let system = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().join("nvmf-host");
        let machine = no_machine(system.path());
        let a = HostIdentity::persistent_with(system.path(), &machine, &dir).unwrap();
        assert_eq!(a.hostnqn, format!("{UUID_NQN_PREFIX}{}", Uuid::from_bytes(a.hostid)));
        for name in ["hostnqn", "hostid"] {
            let meta = std::fs::metadata(dir.join(name)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
        assert_eq!(std::fs::read_to_string(dir.join("hostnqn")).unwrap(), format!("{}\n", a.hostnqn));
        let modified = std::fs::metadata(dir.join("hostid")).unwrap().modified().unwrap();
        let b = HostIdentity::persistent_with(system.path(), &machine, &dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::metadata(dir.join("hostid")).unwrap().modified().unwrap(), modified, "not rewritten");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no temporary file left");
    }

    #[test]
    fn persistent_identity_prefers_the_system_files() {
        let system = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        std::fs::write(system.path().join("hostnqn"), format!("{NQN}\n")).unwrap();
        let h = HostIdentity::persistent_with(system.path(), &no_machine(system.path()), state.path()).unwrap();
        assert_eq!((h.hostnqn.as_str(), h.hostid), (NQN, *Uuid::parse_str(ID).unwrap().as_bytes()));
        assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0, "nothing stored");
        // A non-UUID system NQN without a host ID: the ID is generated once and kept.
        std::fs::write(system.path().join("hostnqn"), "nqn.2024-01.io.example:host-a\n").unwrap();
        let a = HostIdentity::persistent_with(system.path(), &no_machine(system.path()), state.path()).unwrap();
        let b = HostIdentity::persistent_with(system.path(), &no_machine(system.path()), state.path()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.hostnqn, "nqn.2024-01.io.example:host-a");
        assert!(!state.path().join("hostnqn").exists());
    }

    #[test]
    fn persistent_identity_reports_an_unwritable_state_dir() {
        let system = tempfile::tempdir().unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = HostIdentity::persistent_with(system.path(), &no_machine(system.path()), &file.path().join("sub"))
            .unwrap_err();
        assert!(err.to_string().starts_with("storing the generated host identity in "), "{err}");
    }
}
