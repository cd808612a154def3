//! `nvmf-host perf` as a process against the in-process target.

mod host_support;

use std::process::Command;

use host_support::{options, Target, SUBNQN};
use nvmf_host::Controller;

fn perf(target: &Target, args: &[&str]) -> std::process::Output {
    let port = target.addr.port().to_string();
    Command::new(host_support::nvmf_host())
        .args(["perf", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN])
        .args(args)
        .output()
        .expect("nvmf-host runs")
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "perf failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut v = v;
    for p in path {
        v = &v[p];
    }
    v.as_f64().unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

/// The whole of namespace 1 (16 MiB) through the library.
fn namespace_1(target: &Target) -> Vec<u8> {
    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    ctrl.namespaces().expect("namespaces");
    let mut data = vec![0u8; 16 << 20];
    ctrl.read(1, 0, &mut data).expect("read namespace 1");
    ctrl.disconnect().expect("disconnect");
    data
}

#[test]
fn randread_json_has_iops_and_ordered_percentiles_and_writes_nothing() {
    let target = Target::start();
    let out = perf(&target, &["-w", "randread", "-q", "16", "-o", "4096", "-T", "1", "--json"]);
    let j = json_of(&out);
    assert!(f(&j, &["iops"]) > 0.0, "{j}");
    assert!(f(&j, &["mib_per_s"]) > 0.0, "{j}");
    assert_eq!(j["writes"], 0, "{j}");
    assert_eq!(j["queue_depth"], 16);
    let (mean, p50, p99, p999) = (
        f(&j, &["latency_us", "mean"]),
        f(&j, &["latency_us", "p50"]),
        f(&j, &["latency_us", "p99"]),
        f(&j, &["latency_us", "p999"]),
    );
    assert!(mean > 0.0 && p50 > 0.0, "{j}");
    assert!(p50 <= p99 && p99 <= p999, "percentiles out of order: {j}");
    assert!(f(&j, &["latency_us", "min"]) <= p50 && p999 <= f(&j, &["latency_us", "max"]), "{j}");
    // A read workload never writes.
    assert!(namespace_1(&target).iter().all(|&b| b == 0), "randread changed the namespace");
}

#[test]
fn randwrite_writes_data() {
    let target = Target::start();
    let out = perf(&target, &["-w", "randwrite", "-q", "8", "-o", "4096", "-T", "1", "--json", "-c", "2"]);
    let j = json_of(&out);
    assert!(f(&j, &["iops"]) > 0.0, "{j}");
    assert_eq!(j["reads"], 0, "{j}");
    assert_eq!(j["per_queue"].as_array().map(Vec::len), Some(2), "{j}");
    let data = namespace_1(&target);
    let written = data.chunks(4096).filter(|c| c.iter().any(|&b| b != 0)).count();
    assert!(written > 0, "no 4 KiB block of namespace 1 was written");
    // perf's pattern has bit 0 set in every byte: a written block is entirely non-zero.
    let whole = data.chunks(4096).filter(|c| c.iter().all(|&b| b != 0)).count();
    assert_eq!(written, whole, "partially written blocks");
}

/// Busy polling (never sleeping in a poll; `--busy-poll` is `--poll busy`) runs the same workloads to the same
/// end: reads and writes completed, written blocks whole, the JSON says how it ran and how often it slept.
#[test]
fn busy_poll_reads_and_writes() {
    let target = Target::start();
    let j = json_of(&perf(&target, &["-w", "randwrite", "-q", "8", "-T", "1", "--json", "--busy-poll"]));
    assert_eq!((&j["poll"], &j["sleeps"]), (&"busy".into(), &0.into()), "{j}");
    assert!(f(&j, &["waits"]) > 0.0, "{j}");
    assert!(f(&j, &["writes"]) > 0.0, "{j}");
    let data = namespace_1(&target);
    let written = data.chunks(4096).filter(|c| c.iter().any(|&b| b != 0)).count();
    assert!(written > 0, "no 4 KiB block of namespace 1 was written");
    assert_eq!(written, data.chunks(4096).filter(|c| c.iter().all(|&b| b != 0)).count(), "partially written blocks");
    let j = json_of(&perf(&target, &["-w", "rw", "-M", "50", "-q", "8", "-T", "1", "--json", "--poll", "busy"]));
    assert!(f(&j, &["reads"]) > 0.0 && f(&j, &["writes"]) > 0.0, "{j}");
    let j = json_of(&perf(&target, &["-w", "randread", "-q", "8", "-T", "1", "--json"]));
    assert_eq!((&j["poll"], &j["poll_window_us"]), (&"adaptive".into(), &200.into()), "{j}");
    let j = json_of(&perf(&target, &["-w", "randread", "-q", "1", "-T", "1", "--json", "--poll", "sleep"]));
    assert_eq!(j["poll"], "sleep", "{j}");
    // QD1 sleeping: the poll after each completion finds nothing, so about every other wait sleeps.
    assert!(f(&j, &["sleeps"]) > 0.0 && f(&j, &["sleeps"]) <= f(&j, &["waits"]), "{j}");
    assert_eq!(j["per_queue"][0]["sleeps"], j["sleeps"], "{j}");
}

/// The CPUs (`Cpus_allowed_list`) of the running perf `child`'s worker for queue `qid`: once it shows `expected`
/// (a worker pins itself as it starts, having the process's CPUs before), else what it last showed.
fn worker_cpus(child: &std::process::Child, qid: u16, expected: &str) -> Option<String> {
    let tasks = format!("/proc/{}/task", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = None;
    while seen.as_deref() != Some(expected) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        for task in std::fs::read_dir(&tasks).into_iter().flatten().flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if status.lines().any(|l| l == format!("Name:\tnvmf-perf-q{qid}")) {
                seen = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:\t")).map(str::to_owned);
            }
        }
    }
    seen
}

/// Workers are pinned to the process's CPUs by default, to `--cpus` when given (round robin), not at all with
/// `--cpus none`; a list that is not one, or a CPU the machine lacks, is refused with the reason.
#[test]
fn workers_are_pinned_to_their_cpus() {
    let target = Target::start();
    let allowed = nvmf_service::cpus::allowed().unwrap();
    let j = json_of(&perf(&target, &["-w", "randread", "-q", "4", "-T", "1", "--json", "-c", "2"]));
    let expected: Vec<serde_json::Value> = allowed.iter().map(|&c| c.into()).collect();
    assert_eq!(j["cpus"].as_array(), Some(&expected), "{j}");
    let ran_on: Vec<serde_json::Value> = j["per_queue"].as_array().unwrap().iter().map(|q| q["cpu"].clone()).collect();
    assert_eq!(ran_on, [0, 1].map(|i| serde_json::Value::from(allowed[i % allowed.len()])), "{j}");
    let last = *allowed.last().unwrap();
    let port = target.addr.port().to_string();
    let child = Command::new(host_support::nvmf_host())
        .args(["perf", "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN, "-w", "randread", "-T", "2"])
        .args(["-c", "2", "--json", "--cpus", &last.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("nvmf-host runs");
    let cpu = last.to_string();
    let pinned = (worker_cpus(&child, 1, &cpu), worker_cpus(&child, 2, &cpu));
    let out = child.wait_with_output().unwrap();
    assert_eq!(pinned, (Some(cpu.clone()), Some(cpu)));
    let j = json_of(&out);
    assert_eq!(j["cpus"], serde_json::json!([last]));
    assert_eq!(j["per_queue"][1]["cpu"], serde_json::json!(last), "{j}");
    let j = json_of(&perf(&target, &["-w", "randread", "-q", "4", "-T", "1", "--json", "--cpus", "none"]));
    assert!(j["cpus"].is_null() && j["per_queue"][0]["cpu"].is_null() && f(&j, &["reads"]) > 0.0, "{j}");
    // A CPU the machine lacks: the one after its last possible CPU (none on a machine with all 1024 a mask names).
    let absent = nvmf_service::cpus::possible().unwrap().last().map(|c| c + 1).filter(|&c| c < 1024);
    let absent = absent.map(|c| (c.to_string(), format!("CPU {c}")));
    let cases = [("0,x".to_owned(), "bad CPU list".to_owned()), ("4095".to_owned(), "bad CPU list".to_owned())];
    for (list, says) in cases.into_iter().chain(absent) {
        let out = perf(&target, &["-w", "randread", "-T", "1", "--cpus", &list]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(&says), "--cpus {list}: {stderr}");
    }
}

#[test]
fn mixed_sequential_and_table_output() {
    let target = Target::start();
    let out = perf(&target, &["-w", "rw", "-M", "70", "-q", "4", "-o", "8192", "-T", "1", "--json", "--nsid", "2"]);
    let j = json_of(&out);
    assert_eq!(j["nsid"], 2);
    let (r, w) = (f(&j, &["reads"]), f(&j, &["writes"]));
    assert!(r > 0.0 && w > 0.0 && r > w, "70 % reads: {j}");
    let out = perf(&target, &["-w", "read", "-q", "2", "-T", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("IOPS") && table.contains("Total") && table.contains("99.90000%"), "{table}");
}

#[test]
fn bad_io_size_refused_and_rdma_fails_clearly() {
    let target = Target::start();
    let out = perf(&target, &["-w", "randread", "-o", "1000", "-T", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("block size"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(host_support::nvmf_host())
        .args(["perf", "-t", "rdma", "-a", "127.0.0.1", "-s", "4420", "-n", SUBNQN, "-w", "randread"])
        .output()
        .expect("runs");
    // perf runs over RDMA now: with no RDMA device (or none reaching 127.0.0.1) it fails saying so.
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RDMA") && !err.contains("panicked"), "{err}");
}

/// `connect`'s options, under the same names: the host interface binds every queue's connection (`lo` reaches
/// 127.0.0.1; an interface that does not exist is named in the error), and options a perf run cannot honour are
/// refused rather than ignored.
#[test]
fn connection_options_as_connect_takes_them() {
    let target = Target::start();
    let out = perf(&target, &["-w", "randread", "-T", "1", "--json", "-f", "lo", "-k", "10", "-g", "-G"]);
    let j = json_of(&out);
    assert!(f(&j, &["iops"]) > 0.0, "{j}");
    let out = perf(&target, &["-w", "randread", "-T", "1", "--host-iface", "nvmfnosuch0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("host interface nvmfnosuch0: No such device"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = perf(&target, &["-w", "randread", "--ctrl-loss-tmo", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("perf does not take --reconnect-delay, --ctrl-loss-tmo"), "{err}");
    let out = perf(&target, &["-w", "randread", "-T", "1", "--json", "-i", "2"]);
    let j = json_of(&out);
    assert_eq!((j["queues"].as_u64(), j["per_queue"].as_array().map(Vec::len)), (Some(2), Some(2)), "-i is -c");
}
