//! The ublk export where ublk_drv is not loaded (this machine, CI): against the in-process target, the
//! library refuses an unknown namespace first, then says the driver is missing and points at the NBD
//! export; the `nvmf-host ublk` command exits non-zero with that message. The export itself runs in the test
//! VM (`tests/tests/vm_host_ublk.rs`). Skips (with a note) where `/dev/ublk-control` exists.

mod host_support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use host_support::{options, Target, SUBNQN};
use nvmf_host::ublk::{UblkError, UblkExport, UblkOptions};
use nvmf_host::Controller;

const MISSING: &str = "ublk_drv is not loaded (modprobe ublk_drv); use the NBD export (`--nbd`) instead";

fn driver_loaded() -> bool {
    let loaded = Path::new("/dev/ublk-control").exists();
    if loaded {
        eprintln!("skipped: /dev/ublk-control exists here (the VM scenarios cover the loaded driver)");
    }
    loaded
}

#[test]
fn start_without_the_driver_names_it_and_the_nbd_alternative() {
    if driver_loaded() {
        return;
    }
    let target = Target::start();
    let ctrl = Arc::new(Controller::connect(target.addr, SUBNQN, options(2)).expect("connect"));
    let err = UblkExport::start(Arc::clone(&ctrl), 9, UblkOptions::default()).unwrap_err();
    assert!(matches!(err, UblkError::UnknownNamespace(9)), "{err}");
    let err = UblkExport::start(Arc::clone(&ctrl), 1, UblkOptions::default()).unwrap_err();
    assert!(matches!(err, UblkError::DriverNotLoaded), "{err}");
    assert_eq!(err.to_string(), MISSING);
    // Nothing of the export is left holding the controller.
    Arc::try_unwrap(ctrl).expect("no other owner").disconnect().expect("disconnect");
}

#[test]
fn the_command_fails_with_the_message() {
    if driver_loaded() {
        return;
    }
    let target = Target::start();
    let port = target.addr.port().to_string();
    let out = Command::new(host_support::nvmf_host())
        .args(["ublk", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "--nsid", "1"])
        .output()
        .expect("nvmf-host runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exited 0: {stderr}");
    assert!(stderr.contains(MISSING), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "printed a device: {}", String::from_utf8_lossy(&out.stdout));
}
