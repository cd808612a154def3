//! The host's Grafana dashboard (`contrib/grafana/nvmf-host.json`) against the host daemon's real `/metrics`: a
//! templated dashboard (Prometheus data source, `instance` and `controller` variables that every query follows,
//! a unit and a query on every panel), and every metric and label its queries use exported by `nvmf-host run`
//! with a controller connected to an in-process target.

mod dashboard_support;
mod target_support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dashboard_support::{exported, expr_problems, parse_expr, queries};
use serde_json::Value;
use target_support::start_with_metrics;

const DASHBOARD: &str = include_str!("../../contrib/grafana/nvmf-host.json");
const PREFIX: &str = "nvmf_host_";

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scrape(addr: SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("the host's metrics endpoint accepts");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

#[test]
fn host_dashboard_is_templated_and_every_metric_it_uses_is_exported() {
    let d: Value = serde_json::from_str(DASHBOARD).expect("dashboard is JSON");
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 36);
    let vars: BTreeMap<&str, &Value> =
        d["templating"]["list"].as_array().unwrap().iter().map(|v| (v["name"].as_str().unwrap(), v)).collect();
    for name in ["instance", "controller"] {
        let v = vars.get(name).unwrap_or_else(|| panic!("variable {name} missing"));
        assert_eq!((v["type"].as_str(), v["datasource"]["uid"].as_str()), (Some("query"), Some("${DS_PROMETHEUS}")));
    }
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().expect("panel id")), "duplicate panel id {}", p["id"]);
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().filter(|t| !t.is_empty()).expect("panel title");
        assert!(p["fieldConfig"]["defaults"]["unit"].is_string(), "{title}: unit");
        assert!(p["targets"].as_array().is_some_and(|t| !t.is_empty()), "{title}: targets");
    }
    // Every selector but the instance variable's own follows the picked instance and controller.
    for (place, expr, _) in queries(&d).into_iter().filter(|q| q.0 != "variable \"instance\"") {
        for u in parse_expr(&expr, PREFIX).0 {
            assert!(u.selector_labels.contains("instance"), "{place}: {} not filtered by instance", u.metric);
            if place != "variable \"controller\"" {
                assert!(u.selector_labels.contains("controller"), "{place}: {} not filtered by controller", u.metric);
            }
        }
    }

    // The host daemon, with one controller of an in-process target, its metrics on a free port.
    let target = start_with_metrics();
    let addr = target.local_addrs()[0];
    let dir = tempfile::tempdir().unwrap();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = dir.path().join("host.toml");
    std::fs::write(
        &config,
        format!(
            "[host]\nstate_dir = \"{dir}\"\ncontrol_socket = \"{dir}/control.sock\"\n[metrics]\nlisten = \"{metrics}\"\n\
             [[controller]]\naddress = \"{ip}\"\nport = {port}\nnqn = \"{nqn}\"\nnr_io_queues = 1\n",
            dir = dir.path().display(),
            ip = addr.ip(),
            port = addr.port(),
            nqn = target_support::SUBNQN,
        ),
    )
    .unwrap();
    let bin = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host").expect("nvmf-host binary");
    let _daemon = Daemon(
        Command::new(bin)
            .args(["run", "--config"])
            .arg(&config)
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = std::net::TcpStream::connect(metrics).ok().map(|_| scrape(metrics)).unwrap_or_default();
        if body.contains("state=\"live\"} 1") && body.contains("qid=\"1\"") {
            break body;
        }
        assert!(Instant::now() < deadline, "the host's controller never went live:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let exported = exported(&body);
    let problems = expr_problems(queries(&d), &exported, PREFIX);
    assert!(problems.is_empty(), "dashboard vs /metrics:\n{}\n\nscrape:\n{body}", problems.join("\n"));
    for family in [
        "nvmf_host_controller_state",
        "nvmf_host_controller_reconnects_total",
        "nvmf_host_queue_commands_total",
        "nvmf_host_queue_bytes_total",
        "nvmf_host_queue_command_latency_seconds_bucket",
        "nvmf_host_queue_errors_total",
    ] {
        assert!(DASHBOARD.contains(family), "the dashboard does not show {family}");
    }
    // The check can fail: a renamed metric and a label the host does not export are caught.
    for (from, to, want) in [
        ("nvmf_host_queue_bytes_total", "nvmf_host_bytes_total", "metric nvmf_host_bytes_total not exported"),
        ("sum by (controller, qid)", "sum by (controller, queue)", "label \"queue\""),
    ] {
        let broken: Value = serde_json::from_str(&DASHBOARD.replace(from, to)).unwrap();
        let problems = expr_problems(queries(&broken), &exported, PREFIX);
        assert!(problems.iter().any(|p| p.contains(want)), "{from} -> {to} not caught: {problems:?}");
    }
    target.shutdown();
}
