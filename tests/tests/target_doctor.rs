//! `nvmf-target doctor` on this machine, as an operator runs it: `-o json` parses, a TCP-only configuration fails
//! no RDMA check, and an RDMA listener on a machine without RDMA is one failing line and exit status 1; a
//! configuration that cannot be read is exit status 2; without a file it checks the quick-start configuration, as the
//! daemon runs without one. (With RDMA: `tests/vm_target_doctor.rs`.)

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn doctor(config: &Path, json: bool) -> Output {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let mut cmd = Command::new(bin);
    cmd.args(["doctor", "--config"]).arg(config);
    if json {
        cmd.args(["-o", "json"]);
    }
    cmd.output().expect("run nvmf-target doctor")
}

/// The JSON report, checked against the exit status.
#[track_caller]
fn report(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(report["program"], "nvmf-target");
    let findings = report["findings"].as_array().expect("findings");
    for f in findings {
        assert!(["ok", "info", "warn", "fail"].contains(&f["level"].as_str().unwrap()), "{f}");
        assert!(f["check"].as_str().is_some_and(|c| !c.is_empty()) && f["finding"].is_string(), "{f}");
        assert!(f["level"] == "ok" || f["fix"].is_string() || f["level"] == "info", "a problem without a fix: {f}");
    }
    let failed = findings.iter().any(|f| f["level"] == "fail");
    assert_eq!(report["ok"], !failed);
    assert_eq!(out.status.code(), Some(i32::from(failed)), "{text}");
    report
}

fn fails(report: &Value) -> Vec<String> {
    let findings = report["findings"].as_array().unwrap();
    findings.iter().filter(|f| f["level"] == "fail").map(|f| f["check"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn doctor_reports_in_json_with_its_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let tcp = dir.path().join("tcp.toml");
    std::fs::write(&tcp, "[reactors]\nthreads = 1\n[[listener]]\naddress = \"127.0.0.1\"\n").unwrap();
    let r = report(&doctor(&tcp, true));
    // The limit on locked memory is this shell's to fail; RDMA, whatever the machine has, is not the TCP target's.
    let failed = fails(&r);
    assert!(failed.iter().all(|c| c == "memlock"), "{r:#}");
    let checks: Vec<&str> = r["findings"].as_array().unwrap().iter().map(|f| f["check"].as_str().unwrap()).collect();
    for want in ["memlock", "hugepages", "io_uring"] {
        assert!(checks.contains(&want), "no {want} check: {r:#}");
    }

    let rdma = dir.path().join("rdma.toml");
    std::fs::write(&rdma, "[reactors]\nthreads = 1\n[[listener]]\naddress = \"10.77.0.1\"\ntransport = \"rdma\"\n")
        .unwrap();
    let out = doctor(&rdma, true);
    let r = report(&out);
    if Path::new("/sys/class/infiniband").exists() {
        eprintln!("this machine has RDMA: the no-RDMA outcome is left to machines without it");
    } else {
        let first = &r["findings"][0];
        assert_eq!((first["level"].as_str(), first["check"].as_str()), (Some("fail"), Some("rdma")), "{r:#}");
        let finding = first["finding"].as_str().unwrap();
        assert!(finding.starts_with("no RDMA on this machine") && finding.contains("10.77.0.1"), "{finding}");
        assert_eq!(out.status.code(), Some(1));
        // The same in words: one line per check, the failing one with its fix, then the summary.
        let text = String::from_utf8(doctor(&rdma, false).stdout).unwrap();
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("fail  rdma: no RDMA on this machine") && first.contains("; fix: "), "{text}");
        assert!(text.lines().last().unwrap().starts_with("nvmf-target doctor: "), "{text}");
    }

    let out = doctor(&dir.path().join("missing.toml"), true);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("nvmf-target doctor: cannot check: ") && stderr.lines().count() == 1, "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn doctor_without_a_file_checks_what_the_quick_start_flags_make() {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let run = |args: &[&str]| Command::new(&bin).arg("doctor").args(args).output().expect("run nvmf-target doctor");
    // An RDMA listener in the flags is checked as a file's would be (TCP-only flags: no RDMA check fails).
    let r = report(&run(&["--listen", "tcp://127.0.0.1:4420", "--namespace", "memory:64M", "-o", "json"]));
    assert!(fails(&r).iter().all(|c| c == "memlock"), "{r:#}");
    if !Path::new("/sys/class/infiniband").exists() {
        let r = report(&run(&["--listen", "rdma://10.77.0.1:4420", "-o", "json"]));
        assert!(fails(&r).contains(&"rdma".to_owned()), "{r:#}");
    }
    // Flags and a file at once: which one would the daemon run? One clear line, exit status 2.
    let out = run(&["--config", "/etc/nvmf/target.toml", "--namespace", "memory:1G"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--config cannot be combined with the quick-start flags") && stderr.lines().count() == 1);
}
