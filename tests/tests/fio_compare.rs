//! `fio-jobs/compare --quick --native` end to end: nvmf-host perf against our target (its namespace O_DIRECT, then
//! with buffered_io; perf sleeping and with `--busy-poll`), iscsi-perf against tgtd and local fio, all on a small
//! scratch file. Checks that `results.json` holds every job × target, that every run of our target and local fio
//! produced numbers for every job (iSCSI where its tools and root are there), and that `results.md` and
//! `results.png` are a table and a PNG.
//! About a minute.
//!
//! Needs python3-matplotlib (`/usr/bin/python3`) and fio: without them the test prints `SKIPPED` and passes,
//! unless `NVMF_REQUIRE_VM=1`, `NVMF_REQUIRE_TOOLS=1` or `CI` is set.

use std::env;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const JOBS: [&str; 7] = [
    "randread-4k-qd1",
    "randread-4k-qd32",
    "randwrite-4k-qd1",
    "randwrite-4k-qd32",
    "seqread-128k",
    "seqwrite-128k",
    "randrw-70-30-4k",
];
const OURS: &str = "nvmf-rs O_DIRECT (nvmf-host perf)";
const OURS_BUFFERED: &str = "nvmf-rs buffered_io (nvmf-host perf)";
const OURS_BUSY: &str = "nvmf-rs O_DIRECT (nvmf-host perf --busy-poll)";
const OURS_BUFFERED_BUSY: &str = "nvmf-rs buffered_io (nvmf-host perf --busy-poll)";
/// Every target of a native run.
const TARGETS: usize = 6;
const ISCSI: &str = "tgtd iSCSI (iscsi-perf)";
const LOCAL: &str = "local fio io_uring";

fn flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Whether `check` holds; otherwise print `SKIPPED` (or fail when tools are required).
fn available(what: &str, check: bool) -> bool {
    let required = env::var("NVMF_REQUIRE_VM").is_ok_and(|v| v == "1") || flag("NVMF_REQUIRE_TOOLS") || flag("CI");
    if !check {
        assert!(!required, "fio_compare: {what} is missing, and NVMF_REQUIRE_VM/NVMF_REQUIRE_TOOLS/CI requires it");
        eprintln!("SKIPPED: fio_compare: {what} is missing");
    }
    check
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

fn number(row: &Value, key: &str) -> Option<f64> {
    row[key].as_f64()
}

#[test]
fn compare_quick_native_writes_json_markdown_and_png() {
    if !available("python3-matplotlib", succeeds(Command::new("/usr/bin/python3").args(["-c", "import matplotlib"])))
        || !available("fio", succeeds(Command::new("fio").arg("--version")))
    {
        return;
    }
    let target = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let host = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host").expect("nvmf-host binary");
    let bins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&target, bins.path().join("nvmf-target")).unwrap();
    std::os::unix::fs::symlink(&host, bins.path().join("nvmf-host")).unwrap();
    let out = tempfile::tempdir().unwrap();
    // /tmp may be a tmpfs, where fio's O_DIRECT fails.
    let work = tempfile::tempdir_in("/var/tmp").unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fio-jobs/compare");
    let run = Command::new(&script)
        .args(["--quick", "--native", "--bin-dir"])
        .arg(bins.path())
        .arg("--out")
        .arg(out.path())
        .arg("--workdir")
        .arg(work.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "compare failed:\n{stderr}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap()).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), JOBS.len() * TARGETS, "every job × target");
    let row = |job: &str, target: &str| {
        results.iter().find(|r| r["job"] == job && r["target"] == target).unwrap_or_else(|| panic!("{job} × {target}"))
    };
    for job in JOBS {
        for target in [OURS, OURS_BUFFERED, OURS_BUSY, OURS_BUFFERED_BUSY, LOCAL] {
            let r = row(job, target);
            assert!(number(r, "iops").is_some_and(|v| v > 0.0), "{job} × {target}: {r}");
            assert!(number(r, "mib_s").is_some_and(|v| v > 0.0), "{job} × {target}: {r}");
            assert!(number(r, "p99_us").is_some_and(|v| v > 0.0), "{job} × {target}: {r}");
        }
        let iscsi = row(job, ISCSI);
        let reads = job.contains("read") && !job.contains("randrw");
        if !reads {
            assert!(iscsi["iops"].is_null() && iscsi["note"] == "iscsi-perf only reads", "{iscsi}");
        } else if number(iscsi, "iops").is_none() {
            // tgtd or libiscsi missing, or not root: said why.
            assert!(!iscsi["note"].as_str().unwrap_or_default().is_empty(), "{iscsi}");
        }
    }
    // The same MiB/s as IOPS × block size for our target (perf's own figures, consistent).
    let seq = row("seqread-128k", OURS);
    let ratio = number(seq, "mib_s").unwrap() * 8.0 / number(seq, "iops").unwrap();
    assert!((ratio - 1.0).abs() < 0.01, "128 KiB per I/O: {seq}");
    for key in ["mode", "cpu", "cores", "kernel", "date"] {
        assert!(!doc["environment"][key].is_null(), "environment.{key}");
    }

    let md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(md.contains("| job | target | IOPS | MiB/s | p99 (µs) | note |"), "{md}");
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| ") && l.contains(" | ")).count(),
        1 + JOBS.len() * TARGETS,
        "{md}"
    );
    let png = std::fs::read(out.path().join("results.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "a PNG chart");
}
