//! `nvmf-host discover` as a process against the in-process target.

mod host_support;

use std::process::Command;

use host_support::{Target, SUBNQN};

fn discover(target: &Target, extra: &[&str]) -> std::process::Output {
    let port = target.addr.port().to_string();
    Command::new(host_support::nvmf_host())
        .args(["discover", "-t", "tcp", "-a", "127.0.0.1", "-s", &port])
        .args(extra)
        .output()
        .expect("nvmf-host runs")
}

#[test]
fn discover_lists_the_subsystem_with_its_port() {
    let target = Target::start();
    let out = discover(&target, &["-q", "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Discovery Log Number of Records"), "{text}");
    let port = target.addr.port().to_string();
    let entry = text
        .split("=====Discovery Log Entry")
        .find(|e| e.contains(&format!("subnqn:  {SUBNQN}")))
        .unwrap_or_else(|| panic!("{SUBNQN} not listed:\n{text}"));
    assert!(entry.contains(&format!("trsvcid: {port}\n")), "{entry}");
    assert!(entry.contains("trtype:  tcp\n") && entry.contains("traddr:  127.0.0.1\n"), "{entry}");
    assert!(entry.contains("subtype: nvme subsystem\n") && entry.contains("sectype: none"), "{entry}");
}

#[test]
fn discover_json_parses() {
    let target = Target::start();
    let out = discover(&target, &["-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(j["genctr"].is_u64(), "{j}");
    let records = j["records"].as_array().expect("records");
    let ours = records.iter().find(|r| r["subnqn"] == SUBNQN).unwrap_or_else(|| panic!("not listed: {j}"));
    assert_eq!(ours["trsvcid"], target.addr.port().to_string());
    assert_eq!(ours["trtype"], "tcp");
    assert_eq!(ours["adrfam"], "ipv4");
    assert_eq!(ours["traddr"], "127.0.0.1");
    assert!(ours["portid"].is_u64());
}

#[test]
fn rdma_discovery_without_a_device_fails_clearly() {
    let out = Command::new(host_support::nvmf_host())
        .args(["discover", "-t", "rdma", "-a", "127.0.0.1", "-s", "4420"])
        .output()
        .expect("runs");
    // Discovery goes over RDMA: with no RDMA device (or none reaching 127.0.0.1) it fails saying so.
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RDMA") && !err.contains("panicked"), "{err}");
}
