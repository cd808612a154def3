//! The host's identity: Host NQN and Host Identifier, as nvme-cli finds them.
//!
//! `/etc/nvme/hostnqn` and `/etc/nvme/hostid` when present (what nvme-cli and the kernel host use, so the
//! target sees one host whichever tool connects), otherwise a generated UUID-form NQN with the same UUID as
//! the host ID. Files that do not parse are ignored with a warning. Nothing here writes files. Runs on the
//! caller's thread; reads two small files.

use std::path::Path;

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

impl HostIdentity {
    /// From `/etc/nvme` (see [`HostIdentity::from_dir`]).
    pub fn from_system() -> Self {
        Self::from_dir(Path::new("/etc/nvme"))
    }

    /// From `dir/hostnqn` and `dir/hostid`. A missing or invalid file is replaced: the host ID by the UUID
    /// of a UUID-form host NQN (else a new UUID), the host NQN by the UUID form of the host ID.
    pub fn from_dir(dir: &Path) -> Self {
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
        let nqn_uuid =
            nqn.as_deref().and_then(|n| n.strip_prefix(UUID_NQN_PREFIX)).and_then(|u| Uuid::parse_str(u).ok());
        let id = id.or(nqn_uuid).unwrap_or_else(Uuid::new_v4);
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
        assert!(validate_nqn(&a.hostnqn).is_ok());
        assert_eq!(a.hostnqn, format!("{UUID_NQN_PREFIX}{}", Uuid::from_bytes(a.hostid)));
        std::fs::write(dir.path().join("hostnqn"), "not an nqn").unwrap();
        std::fs::write(dir.path().join("hostid"), "zzz").unwrap();
        let b = HostIdentity::from_dir(dir.path());
        assert!(b.hostnqn.starts_with(UUID_NQN_PREFIX));
        assert_ne!(a.hostid, b.hostid);
        assert_ne!(HostIdentity::generate(), HostIdentity::generate());
    }
}
