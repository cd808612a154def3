//! nvme-cli's reservation commands (`resv-register`, `resv-acquire`, `resv-release`, `resv-report`) as a process
//! against the in-process target, for two hosts (two host NQNs and host IDs): both register, one acquires, the
//! other's write and acquire conflict, the report shows both, the release lets the other write.

mod host_support;

use std::process::{Command, Output};

use host_support::{options, Target, SUBNQN};
use nvmf_host::controller::reservation::is_reservation_conflict;
use nvmf_host::Controller;
use serde_json::Value;

const HOST_A: (&str, &str) =
    ("nqn.2014-08.org.nvmexpress:uuid:0d6c1a52-5b7c-4e43-9a4e-1f0a4b6c0001", "0d6c1a52-5b7c-4e43-9a4e-1f0a4b6c0001");
const HOST_B: (&str, &str) =
    ("nqn.2014-08.org.nvmexpress:uuid:7f3e2b91-2c4d-4a8e-b1f0-5e6d7c8b0002", "7f3e2b91-2c4d-4a8e-b1f0-5e6d7c8b0002");

fn nvmf_host(target: &Target, host: (&str, &str), command: &str, args: &[&str]) -> Output {
    let port = target.addr.port().to_string();
    Command::new(host_support::nvmf_host())
        .args([command, "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "-q", host.0, "-I", host.1])
        .args(["-N", "1"])
        .args(args)
        .output()
        .expect("nvmf-host runs")
}

#[track_caller]
fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

#[track_caller]
fn assert_conflict(out: &Output) {
    assert!(!out.status.success(), "succeeded: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("reservation conflict"), "{stderr}");
}

/// A library controller of `host`, with one I/O queue.
fn controller(target: &Target, host: (&str, &str)) -> Controller {
    let mut o = options(1);
    host.0.clone_into(&mut o.hostnqn);
    o.hostid = *uuid::Uuid::parse_str(host.1).unwrap().as_bytes();
    Controller::connect(target.addr, SUBNQN, o).expect("connect")
}

#[test]
fn two_hosts_register_acquire_conflict_report_release() {
    let target = Target::start();
    let a = HOST_A;
    let b = HOST_B;
    assert_eq!(
        stdout(&nvmf_host(&target, a, "resv-register", &["-k", "0xa", "-r", "0"])).trim(),
        "NVME Reservation Register success"
    );
    stdout(&nvmf_host(&target, b, "resv-register", &["--nrkey", "11", "--cptpl", "3"]));
    // A wrong current key is a conflict too.
    assert_conflict(&nvmf_host(&target, a, "resv-acquire", &["-c", "0xb", "--rtype", "1"]));
    assert_eq!(
        stdout(&nvmf_host(&target, a, "resv-acquire", &["-c", "0xa", "--rtype", "1", "--racqa", "0"])).trim(),
        "NVME Reservation Acquire success"
    );

    // B is registered but the reservation is Write Exclusive: B reads, B's write conflicts, B cannot acquire.
    let ctrl_b = controller(&target, b);
    let mut block = vec![0u8; 512];
    ctrl_b.read(1, 0, &mut block).expect("a registrant reads under Write Exclusive");
    let err = ctrl_b.write(1, 0, &block).expect_err("the write conflicts");
    assert!(is_reservation_conflict(&err), "{err}");
    assert_conflict(&nvmf_host(&target, b, "resv-acquire", &["-c", "0xb", "--rtype", "1"]));

    // The report shows both (extended: whole host IDs), A holding.
    let out = nvmf_host(&target, b, "resv-report", &["--eds", "-o", "json"]);
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["rtype"], 1, "{j}");
    assert_eq!(j["regctl"], 2, "{j}");
    assert_eq!(j["ptpls"], 1, "{j}");
    let regs = j["regctlext"].as_array().expect("regctlext");
    assert_eq!(regs.len(), 2, "{j}");
    let of = |hostid: &str| {
        let hex = hostid.replace('-', "");
        regs.iter().find(|r| r["hostid"] == hex.as_str()).unwrap_or_else(|| panic!("{hostid} in {j}")).clone()
    };
    assert_eq!(of(a.1)["rkey"], 0xa);
    assert_eq!(of(a.1)["rcsts"], 1);
    assert_eq!(of(b.1)["rkey"], 11);
    assert_eq!(of(b.1)["rcsts"], 0);
    assert!(j["gen"].as_u64().unwrap() >= 2, "{j}");
    let text = stdout(&nvmf_host(&target, a, "resv-report", &["-e"]));
    assert!(text.contains("regctl    : 2") && text.contains("rtype     : 1"), "{text}");
    assert!(text.contains("regctlext[1] :") && text.contains("  rkey    : a"), "{text}");
    // Fabrics host IDs are 128-bit: the regular format is refused, as the spec and Linux nvmet say.
    let out = nvmf_host(&target, a, "resv-report", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOST_IDENTIFIER_INCONSISTENT_FORMAT"));

    // Only the holder releases it; then B writes.
    assert_conflict(&nvmf_host(&target, a, "resv-release", &["-c", "0xb", "--rtype", "1"]));
    assert_eq!(
        stdout(&nvmf_host(&target, a, "resv-release", &["-c", "0xa", "--rtype", "1"])).trim(),
        "NVME Reservation Release success"
    );
    ctrl_b.write(1, 0, &block).expect("no reservation is held");
    let j: Value = serde_json::from_str(&stdout(&nvmf_host(&target, a, "resv-report", &["-e", "-o", "json"]))).unwrap();
    assert_eq!(j["rtype"], 0, "{j}");

    // Clear drops every registration.
    stdout(&nvmf_host(&target, b, "resv-release", &["-c", "11", "--rrela", "1"]));
    let j: Value = serde_json::from_str(&stdout(&nvmf_host(&target, a, "resv-report", &["-e", "-o", "json"]))).unwrap();
    assert_eq!(j["regctl"], 0, "{j}");
    ctrl_b.disconnect().unwrap();
}

#[test]
fn hostile_arguments_are_refused_before_connecting() {
    let target = Target::start();
    for (command, args) in [
        ("resv-register", &["-p", "1"][..]),
        ("resv-register", &["-r", "3"]),
        ("resv-register", &["-k", "0x1ffffffffffffffff"]),
        ("resv-acquire", &["--rtype", "7"]),
        ("resv-acquire", &["--rtype", "1", "--racqa", "3"]),
        ("resv-release", &["--rrela", "2"]),
        ("resv-report", &["-d", "4"]),
        ("resv-report", &["-d", "4294967295"]),
    ] {
        let out = nvmf_host(&target, HOST_A, command, args);
        assert!(!out.status.success(), "{command} {args:?} succeeded");
    }
    assert!(target.subsystem().controllers().is_empty());
    // Beyond the MDTS (1 MiB by default): refused by the host, not sent.
    let out = nvmf_host(&target, HOST_A, "resv-report", &["-e", "-d", "524287"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("MDTS"), "{}", String::from_utf8_lossy(&out.stderr));
}
