//! The Grafana dashboard (`contrib/grafana/nvmf-target.json`) and the alert rules
//! (`contrib/prometheus/nvmf-target-alerts.yml`) against the target's real `/metrics`: the JSON is a well-formed
//! dashboard (templated Prometheus data source, `instance`/`subsystem`/`namespace` variables, every query filtered
//! by instance, every panel with a title, data source, unit and query), `promtool check rules` accepts the rules,
//! and every metric and label the queries and rules use is one the target exports.
//! The target runs in-process with its metrics endpoint on an ephemeral port; a few commands (one of them an
//! error) make the per-namespace and per-status series exist before the scrape.

mod dashboard_support;
mod target_support;

use std::collections::{BTreeMap, BTreeSet};

use dashboard_support::{exported, expr_problems, parse_expr, queries, Exported};
use nvmf_common::nvme::Status;
use serde_json::Value;
use target_support::{
    assert_status, options, pattern, read, scrape, start_with_metrics, write, Association, NS1_BLOCKS,
};

/// The target's metric names.
const PREFIX: &str = "nvmf_target_";
const DASHBOARD: &str = include_str!("../../contrib/grafana/nvmf-target.json");
const ALERTS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/prometheus/nvmf-target-alerts.yml");
const ALERTS: &str = include_str!("../../contrib/prometheus/nvmf-target-alerts.yml");
/// The sources of the families a target without RBD namespaces or RDMA listeners does not export: their names.
const RBD: &str = include_str!("../../nvmf-target/src/metrics/storage.rs");
const RDMA: &str = include_str!("../../nvmf-target/src/metrics/rdma.rs");
const RNIC: &str = include_str!("../../nvmf-target/src/metrics/rnic.rs");

/// Every problem of the dashboard's queries against `exported`: unknown metrics and labels.
fn query_problems(dashboard: &Value, exported: &Exported) -> Vec<String> {
    expr_problems(queries(dashboard), exported, PREFIX)
}

/// The `expr` of every alert rule: (alert name, expression).
fn alert_exprs(rules: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut alert = String::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("- alert: ") {
            alert = name.trim().to_owned();
        } else if let Some(rest) = t.strip_prefix("expr: ") {
            let mut expr = rest.trim().to_owned();
            if expr == "|" {
                let indent = line.len() - t.len();
                expr.clear();
                while let Some(next) = lines.next_if(|l| l.len() - l.trim_start().len() > indent) {
                    expr.push_str(next.trim());
                    expr.push(' ');
                }
            }
            out.push((alert.clone(), expr.trim().to_owned()));
        }
    }
    out
}

#[test]
fn dashboard_is_a_templated_grafana_dashboard() {
    let d: Value = serde_json::from_str(DASHBOARD).expect("dashboard is JSON");
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 36, "schemaVersion too old");
    assert!(d["uid"].is_string() && d["title"].is_string());
    let inputs = d["__inputs"].as_array().expect("__inputs for import");
    assert!(inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"), "{inputs:?}");

    let vars: BTreeMap<&str, &Value> = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .map(|v| (v["name"].as_str().expect("variable name"), v))
        .collect();
    for name in ["instance", "subsystem", "namespace"] {
        let v = vars.get(name).unwrap_or_else(|| panic!("variable {name} missing"));
        assert_eq!(v["type"], "query");
        assert_eq!(v["datasource"]["uid"], "${DS_PROMETHEUS}");
        assert!(v["includeAll"].as_bool().unwrap_or(false), "{name}: All option");
    }

    let mut ids = BTreeSet::new();
    let mut units = BTreeSet::new();
    let mut titles = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        assert!(ids.insert(p["id"].as_u64().expect("panel id")), "duplicate panel id {}", p["id"]);
        assert!(p["gridPos"]["w"].as_u64().is_some_and(|w| (1..=24).contains(&w)), "gridPos of {}", p["title"]);
        let title = p["title"].as_str().filter(|t| !t.is_empty()).expect("panel title");
        if p["type"] == "row" {
            continue;
        }
        titles.push(title);
        assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}: data source");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: targets"));
        for t in targets {
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()), "{title}: empty expr");
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}: target data source");
        }
        if p["type"] == "timeseries" {
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or_else(|| panic!("{title}: unit"));
            units.insert(unit);
        }
        // Selectors filter on the variables, so the dashboard follows the picked subsystem.
        for t in targets {
            let e = t["expr"].as_str().unwrap_or_default();
            if e.contains("nvmf_target_commands_total") || e.contains("nvmf_target_bytes_total") {
                assert!(e.contains("subsystem=~\"$subsystem\"") && e.contains("namespace=~\"$namespace\""), "{e}");
            }
        }
    }
    for unit in ["iops", "Bps", "s"] {
        assert!(units.contains(unit), "no panel with unit {unit}: {units:?}");
    }
    for want in ["IOPS by opcode", "Throughput", "Command latency percentiles", "Errors by status"] {
        assert!(titles.contains(&want), "panel {want:?} missing: {titles:?}");
    }
    // Every selector but the instance variable's own follows the picked instance (several targets, one dashboard).
    for (place, expr, _) in queries(&d).into_iter().filter(|q| q.0 != "variable \"instance\"") {
        for u in parse_expr(&expr, PREFIX).0 {
            assert!(u.selector_labels.contains("instance"), "{place}: {} not filtered by instance", u.metric);
        }
    }
    let exprs: Vec<String> = queries(&d).into_iter().map(|q| q.1).collect();
    for q in ["histogram_quantile(0.5,", "histogram_quantile(0.99,", "histogram_quantile(0.999,"] {
        let used = exprs.iter().any(|e| e.starts_with(q) && e.contains("nvmf_target_command_latency_seconds_bucket"));
        assert!(used, "{q} of the latency histogram missing");
    }
}

#[test]
fn every_dashboard_metric_and_label_is_exported_by_the_target() {
    let running = start_with_metrics();
    let addr = running.local_addrs()[0];
    let metrics = running.metrics_addr().expect("metrics endpoint");

    // Reads and writes on namespace 1, and one LBA Out of Range so an errors series exists.
    let mut a = Association::new(addr, options(), 1);
    let data = pattern(4096, 3);
    assert_status(&write(a.io(), 1, 512, 0, &data, false), Status::SUCCESS);
    let back = read(a.io(), 1, 512, 0, data.len());
    assert_status(&back, Status::SUCCESS);
    assert_eq!(back.data, data);
    assert_status(&read(a.io(), 1, 512, NS1_BLOCKS, 512), Status::LBA_OUT_OF_RANGE);

    let body = scrape(metrics);
    let mut exported = exported(&body);
    // The RBD families (a target without RBD namespaces has none; tests/target_rbd.rs scrapes them live), against
    // the code that exports them.
    let image = ["subsystem", "namespace", "image"];
    for (family, suffix) in [
        ("nvmf_target_rbd_ops_in_flight", ""),
        ("nvmf_target_rbd_errors", "_total"),
        ("nvmf_target_rbd_reopened", "_total"),
    ] {
        assert!(RBD.contains(&format!("\"{family}\"")), "the target exports no {family}");
        exported.entry(format!("{family}{suffix}")).or_default().extend(image.iter().map(|l| (*l).to_owned()));
    }
    let d: Value = serde_json::from_str(DASHBOARD).expect("dashboard is JSON");
    let problems = query_problems(&d, &exported);
    assert!(problems.is_empty(), "dashboard vs /metrics:\n{}\n\nscrape:\n{body}", problems.join("\n"));
    let problems = alert_problems(&exported);
    assert!(problems.is_empty(), "alert rules vs /metrics:\n{}\n\nscrape:\n{body}", problems.join("\n"));
    // Every family the issue asks the dashboard to show is used.
    for family in [
        "nvmf_target_commands_total",
        "nvmf_target_bytes_total",
        "nvmf_target_command_latency_seconds_bucket",
        "nvmf_target_errors_total",
        "nvmf_target_connections",
        "nvmf_target_controllers",
        "nvmf_target_keep_alive_expiries_total",
    ] {
        assert!(DASHBOARD.contains(family), "dashboard does not show {family}");
    }

    // The check can fail: a renamed metric, a misspelt label and an unknown grouping label are each caught.
    for (from, to, want) in [
        ("nvmf_target_bytes_total", "nvmf_target_byte_total", "metric nvmf_target_byte_total not exported"),
        ("namespace=~", "nsid=~", "no label \"nsid\""),
        ("sum by (status)", "sum by (code)", "label \"code\""),
        ("nvmf_target_command_latency_seconds_bucket", "nvmf_target_command_latency_bucket", "not exported"),
    ] {
        let broken: Value = serde_json::from_str(&DASHBOARD.replace(from, to)).unwrap();
        let problems = query_problems(&broken, &exported);
        assert!(problems.iter().any(|p| p.contains(want)), "{from} -> {to} not caught: {problems:?}");
    }
    drop(a);
    running.shutdown();
}

#[test]
fn alert_rules_pass_promtool() {
    let out = std::process::Command::new("promtool")
        .args(["check", "rules", ALERTS_PATH])
        .output()
        .expect("promtool is installed (Debian's prometheus package)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool check rules: {text}");
    let names: Vec<String> = alert_exprs(ALERTS).into_iter().map(|(name, _)| name).collect();
    for want in [
        "NvmfTargetKeepAliveExpired",
        "NvmfTargetControllersGone",
        "NvmfTargetCommandErrors",
        "NvmfTargetRdmaCompletionErrors",
        "NvmfTargetRdmaRetriesExhausted",
        "NvmfTargetRnicPortNotActive",
        "NvmfTargetRnicRetransmissions",
        "NvmfTargetRnicRetriesExhausted",
        "NvmfTargetRnicRnrNaks",
        "NvmfTargetRnicCongestion",
    ] {
        assert!(names.iter().any(|n| n == want), "alert {want} missing: {names:?}");
    }
}

/// The metrics and labels of the alert rules, against a live scrape; the RDMA families (a target without an RDMA
/// listener has none) against the code that exports them.
fn alert_problems(exported: &Exported) -> Vec<String> {
    let mut exported = exported.clone();
    let rnic = ["device", "port", "counter"];
    let rdma: [(&str, &str, &str, &[&str]); 5] = [
        (RDMA, "nvmf_target_rdma_completion_errors", "_total", &["status"]),
        (RNIC, "nvmf_target_rnic_counters", "_total", &rnic),
        (RNIC, "nvmf_target_rnic_hw_counters", "_total", &rnic),
        (RNIC, "nvmf_target_rnic_port_state_id", "", &rnic[..2]),
        (RNIC, "nvmf_target_rnic_port_active_mtu_bytes", "", &rnic[..2]),
    ];
    for (source, family, suffix, labels) in rdma {
        assert!(source.contains(&format!("\"{family}\"")), "the target exports no {family}");
        exported.entry(format!("{family}{suffix}")).or_default().extend(labels.iter().map(|l| (*l).to_owned()));
    }
    let queries = alert_exprs(ALERTS)
        .into_iter()
        .filter(|(_, expr)| expr.contains("nvmf_target_"))
        .map(|(name, expr)| (format!("alert {name}"), expr, BTreeSet::new()))
        .collect();
    expr_problems(queries, &exported, PREFIX)
}
