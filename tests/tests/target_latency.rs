//! The target's command latency is true: over an `nvmf-host perf` run against the in-process target, the mean of
//! `nvmf_target_command_latency_seconds` for reads is positive (a command that completes in the reactor turn it
//! arrived in does not record 0) and below the mean the host measured end to end.

mod target_support;

use std::process::Command;

use target_support::{scrape, start_with_metrics, SUBNQN};

/// The sum of the values of `family`'s series for read commands.
fn read_series_total(body: &str, family: &str) -> f64 {
    let prefix = format!("{family}{{");
    body.lines()
        .filter(|l| l.starts_with(&prefix) && l.contains("opcode=\"read\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[test]
fn target_latency_is_positive_and_below_the_hosts() {
    let running = start_with_metrics();
    let port = running.local_addrs()[0].port().to_string();
    let metrics = running.metrics_addr().expect("metrics endpoint");

    let host = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host").expect("nvmf-host binary");
    let out = Command::new(host)
        .args(["perf", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN])
        .args(["-w", "randread", "-q", "16", "-o", "4096", "-T", "2", "--json"])
        .output()
        .expect("nvmf-host runs");
    assert!(out.status.success(), "perf failed: {}", String::from_utf8_lossy(&out.stderr));
    let perf: serde_json::Value = serde_json::from_slice(&out.stdout).expect("perf prints JSON");
    let host_mean_us = perf["latency_us"]["mean"].as_f64().expect("perf's mean latency");

    let body = scrape(metrics);
    let count = read_series_total(&body, "nvmf_target_command_latency_seconds_count");
    let sum = read_series_total(&body, "nvmf_target_command_latency_seconds_sum");
    assert!(count > 0.0, "no read counted:\n{body}");
    let target_mean_us = sum / count * 1e6;
    eprintln!("reads: {count}; mean latency {target_mean_us:.1} us at the target, {host_mean_us:.1} us at the host");
    assert!(target_mean_us > 0.0, "the target's mean read latency is 0 over {count} reads");
    assert!(target_mean_us < host_mean_us, "target {target_mean_us} us >= host {host_mean_us} us");
    running.shutdown();
}
