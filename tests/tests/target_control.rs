//! `nvmf-target list`, `disconnect` and `log-level` against a running daemon (the binary, started from
//! quick-start flags), with associations from the NVMe/TCP test host: what `list` shows matches what is connected,
//! `disconnect` ends exactly the associations it names, the log filter changes at run time, and mistakes get one
//! clear line.

mod target_support;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use nvmf_common::nvme::io::Write;
use nvmf_tests::nvme_tcp_client::TEST_HOSTNQN;
use serde_json::Value;
use target_support::{expect_closed, ok, options, pattern, wait_log, Association, TargetProcess, SUBNQN};

fn nvmf_target(args: &[&str], socket: &Path) -> Output {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    Command::new(bin).args(args).arg("--control").arg(socket).env("RUST_BACKTRACE", "1").output().unwrap()
}

/// Run a client command that must succeed; its stdout.
#[track_caller]
fn succeeds(args: &[&str], socket: &Path) -> String {
    let out = nvmf_target(args, socket);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Run a client command that must fail with exactly `line` on stderr.
#[track_caller]
fn fails_with(args: &[&str], socket: &Path, line: &str) {
    let out = nvmf_target(args, socket);
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{line}\n"));
}

fn list_json(socket: &Path) -> Value {
    serde_json::from_str(&succeeds(&["list", "-o", "json"], socket)).expect("list -o json prints JSON")
}

/// The controllers `list` shows for the test subsystem.
fn controllers(listing: &Value) -> Vec<Value> {
    let subsystems = listing["subsystems"].as_array().unwrap();
    let ours = subsystems.iter().find(|s| s["nqn"] == SUBNQN).expect("the subsystem is listed");
    ours["controllers"].as_array().unwrap().clone()
}

#[test]
fn list_disconnect_and_log_level_over_the_control_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let log_path = dir.path().join("stderr.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listen = format!("tcp://127.0.0.1:{port}");
    let args = ["--listen", &listen, "--nqn", SUBNQN, "--namespace", "memory:8MiB", "--control"];
    let mut args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    args.push(socket.as_os_str());
    let _daemon = TargetProcess::spawn(&args, None, &log_path);
    wait_log(&log_path, "control socket ready");

    // Nothing connected yet: the subsystem, its namespace and the listener.
    let listing = list_json(&socket);
    assert!(controllers(&listing).is_empty());
    let ours = listing["subsystems"].as_array().unwrap().iter().find(|s| s["nqn"] == SUBNQN).unwrap().clone();
    assert_eq!(ours["namespaces"][0]["size"], 8 << 20);
    assert_eq!(ours["namespaces"][0]["backend"], "memory");
    assert_eq!(listing["listeners"][0]["trsvcid"], port.to_string());
    assert_eq!(listing["subsystems"][0]["subtype"], "discovery");

    // Two associations of the same host, with 2 and 1 I/O queues; the first writes 8 KiB.
    let mut first = Association::new(addr, options(), 2);
    let mut second = Association::new(addr, options(), 1);
    let write = Write { nsid: 1, slba: 0, nlb: 15, ..Write::default() };
    ok(first.io().command(write.to_sqe(), Some(&pattern(8192, 1)), 0));
    let listing = list_json(&socket);
    let live = controllers(&listing);
    assert_eq!(live.len(), 2, "{listing:#}");
    let c = live.iter().find(|c| c["cntlid"] == first.cntlid).unwrap();
    assert_eq!(c["hostnqn"], TEST_HOSTNQN);
    assert_eq!(c["transport"], "tcp");
    assert_eq!(c["traddr"], "127.0.0.1");
    assert_eq!(c["bytes_written"], 8192);
    assert_eq!(c["ready"], true);
    let queues: Vec<(u64, u64)> = c["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["qid"].as_u64().unwrap(), q["depth"].as_u64().unwrap()))
        .collect();
    assert_eq!(queues, [(0, 32), (1, 32), (2, 32)], "the admin queue and two I/O queues of 32 entries");
    let text = succeeds(&["list"], &socket);
    assert!(text.contains(&format!("  controller {}: host {TEST_HOSTNQN}", first.cntlid)), "{text}");
    assert!(text.contains(&format!("listeners\n  tcp 127.0.0.1:{port}")), "{text}");

    // One controller by ID: its connections close, the other association keeps working.
    let ended = succeeds(&["disconnect", "--cntlid", &first.cntlid.to_string()], &socket);
    assert_eq!(ended, format!("{SUBNQN}: controller {} (host {TEST_HOSTNQN}) disconnected\n", first.cntlid));
    expect_closed(&mut first.admin, Duration::from_secs(10));
    expect_closed(first.io(), Duration::from_secs(10));
    ok(second.io().command(write.to_sqe(), Some(&pattern(8192, 2)), 0));
    let live = controllers(&list_json(&socket));
    assert_eq!(live.iter().map(|c| c["cntlid"].as_u64().unwrap()).collect::<Vec<_>>(), [u64::from(second.cntlid)]);

    // Every controller of a host.
    let ended = succeeds(&["disconnect", "--host", TEST_HOSTNQN], &socket);
    assert_eq!(ended.lines().count(), 1, "{ended}");
    expect_closed(&mut second.admin, Duration::from_secs(10));
    assert!(controllers(&list_json(&socket)).is_empty());

    // Mistakes: one line each.
    let cntlid = first.cntlid.to_string();
    fails_with(
        &["disconnect", "--cntlid", &cntlid],
        &socket,
        &format!("nvmf-target: no live controller matches --cntlid {cntlid}"),
    );
    fails_with(
        &["disconnect", "--host", "h", "--nqn", "nqn.2024-01.io.nvmf-rs:absent"],
        &socket,
        "nvmf-target: no subsystem nqn.2024-01.io.nvmf-rs:absent",
    );
    let gone = dir.path().join("gone.sock");
    fails_with(
        &["list"],
        &gone,
        &format!(
            "nvmf-target: no nvmf-target daemon at {} (is it running, with this --control socket?): start it with \
             `nvmf-target --config …` or `systemctl start nvmf-target`",
            gone.display()
        ),
    );

    // The log filter changes while the daemon runs: a new connection's debug line appears only after.
    assert_eq!(succeeds(&["log-level"], &socket), "info\n");
    assert!(!std::fs::read_to_string(&log_path).unwrap().contains("connection accepted"));
    assert_eq!(succeeds(&["log-level", "debug"], &socket), "debug\n");
    let _third = Association::new(addr, options(), 1);
    wait_log(&log_path, "connection accepted");
    fails_with(
        &["log-level", "verbose"],
        &socket,
        "nvmf-target: log filter \"verbose\": not one of off, error, warn, info, debug, trace (expected a level such as \
         debug, or RUST_LOG syntax such as info,nvmf_target=debug)",
    );
    assert_eq!(succeeds(&["log-level"], &socket), "debug\n");
}
