//! `show-hostnqn` and `gen-hostnqn` as nvme-cli has them: the host NQN every command uses is the same on every
//! run (the system's `/etc/nvme/hostnqn`, else derived from the machine, else generated once and kept for the user),
//! and `gen-hostnqn` prints a UUID-form NQN.

use std::process::Command;

fn nvmf_host(args: &[&str], state: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nvmf-host")).args(args).env("XDG_STATE_HOME", state).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_host_nqn_is_the_same_on_every_run() {
    let state = tempfile::tempdir().unwrap();
    let first = nvmf_host(&["show-hostnqn"], state.path());
    assert_eq!(nvmf_host(&["show-hostnqn"], state.path()), first);
    let nqn = first.trim_end();
    assert!(nvmf_common::fabrics::nqn::validate_nqn(nqn).is_ok(), "{nqn}");
    match std::fs::read_to_string("/etc/nvme/hostnqn") {
        Ok(system) => assert_eq!(nqn, system.trim(), "the system's host NQN, as nvme-cli's"),
        // No system identity: one derived from the machine needs nothing kept; a generated one is kept.
        Err(_) => {
            let kept = std::fs::read_to_string(state.path().join("nvmf-host/hostnqn")).ok();
            assert!(kept.as_deref().is_none_or(|k| k.trim() == nqn), "{kept:?} vs {nqn}");
        }
    }
    let generated = nvmf_host(&["gen-hostnqn"], state.path());
    let uuid = generated.trim_end().strip_prefix("nqn.2014-08.org.nvmexpress:uuid:").expect("UUID form");
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{generated}");
}
