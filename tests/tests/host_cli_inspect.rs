//! nvme-cli's inspection commands (`id-ctrl`, `id-ns`, `list-ns`, `ns-rescan`, `smart-log`, `error-log`,
//! `get-log`, `list-subsys`) as a process against the in-process target: exit status, JSON with nvme-cli's keys,
//! values equal to what the target holds, and the controller gone afterwards (a clean disconnect).

mod host_support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use host_support::{options, Target, SUBNQN};
use nvmf_common::nvme::log_page::SmartLog;
use nvmf_host::Controller;
use serde_json::Value;

fn nvmf_host(target: &Target, command: &str, args: &[&str]) -> Output {
    let port = target.addr.port().to_string();
    Command::new(host_support::nvmf_host())
        .args([command, "-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", SUBNQN])
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
fn json_of(out: &Output) -> Value {
    let text = stdout(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The command's controller is gone from the target within 5 s: it disconnected rather than dropped.
#[track_caller]
fn assert_controllers(target: &Target, expected: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live: Vec<u16> = target.subsystem().controllers().iter().map(|c| c.cntlid()).collect();
        if live == expected {
            return;
        }
        assert!(Instant::now() < deadline, "live controllers {live:?}, expected {expected:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn id_ctrl_reports_the_targets_identity() {
    let target = Target::start();
    let held = Controller::connect(target.addr, SUBNQN, options(0)).expect("connect");
    let j = json_of(&nvmf_host(&target, "id-ctrl", &["-o", "json"]));
    let subsystem = target.subsystem();
    // nvme-cli prints the whole space-padded fields.
    assert_eq!(j["sn"], format!("{:<20}", subsystem.serial()), "{j}");
    assert_eq!(j["mn"], format!("{:<40}", subsystem.model()), "{j}");
    assert_eq!(j["subnqn"], SUBNQN);
    // The target hands out controller IDs in turn: the command's is the one after the held controller's.
    assert_eq!(j["cntlid"], held.cntlid() + 1, "{j}");
    assert_eq!(j["nn"], held.info().nn);
    assert_eq!(j["mdts"].as_u64(), Some(8), "{j}");
    assert_eq!(j["ver"], 0x10300);
    assert_eq!(j["ioccsz"].as_u64().map(|n| n > 4), Some(true), "{j}");
    // NPSS is 0's based: one power state descriptor per state.
    let npss = j["npss"].as_u64().expect("npss");
    assert_eq!(j["psds"].as_array().map(|p| p.len() as u64), Some(npss + 1), "{j}");
    assert_eq!(j["tnvmcap"], "0", "128-bit fields are decimal strings");
    assert_controllers(&target, &[held.cntlid()]);

    let text = stdout(&nvmf_host(&target, "id-ctrl", &[]));
    assert!(text.starts_with("NVME Identify Controller:\nvid       : 0\n"), "{text}");
    assert!(text.contains(&format!("\nsubnqn    : {SUBNQN}\n")), "{text}");
    assert!(text.contains("\nver       : 0x10300\n"), "{text}");
    assert!(text.contains("\nps    0 : mp:"), "{text}");
    held.disconnect().expect("disconnect");
    assert_controllers(&target, &[]);
}

#[test]
fn id_ns_reports_each_namespaces_size_and_identifiers() {
    let target = Target::start();
    let ctrl = Controller::connect(target.addr, SUBNQN, options(0)).expect("connect");
    let namespaces = ctrl.namespaces().expect("namespaces");
    ctrl.disconnect().expect("disconnect");
    // Namespace 1: 16 MiB of 512-byte blocks; namespace 2: 8 MiB of 4 KiB blocks.
    for (nsid, blocks, lbads) in [(1u32, 32768u64, 9u64), (2, 2048, 12)] {
        let j = json_of(&nvmf_host(&target, "id-ns", &["-N", &nsid.to_string(), "-o", "json"]));
        assert_eq!(j["nsze"], blocks, "{j}");
        assert_eq!(j["ncap"], blocks, "{j}");
        assert_eq!(j["nuse"], blocks, "{j}");
        assert_eq!(j["flbas"], 0, "{j}");
        assert_eq!(j["lbafs"][0]["ds"], lbads, "{j}");
        assert_eq!(j["lbafs"][0]["ms"], 0, "{j}");
        assert_eq!(j["nvmcap"], "0", "{j}");
        let ns = namespaces.iter().find(|n| n.nsid == nsid).expect("scanned");
        let nguid: String = ns.nguid.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(j["nguid"], nguid, "{j}");
        assert_eq!(j["eui64"].as_str().map(str::len), Some(16), "{j}");
    }
    let text = stdout(&nvmf_host(&target, "id-ns", &["-N", "2"]));
    assert!(text.starts_with("NVME Identify Namespace 2:\nnsze    : 0x800\n"), "{text}");
    assert!(text.contains("\nlbaf  0 : ms:0   lbads:12 rp:0 (in use)\n"), "{text}");
    assert_controllers(&target, &[]);
}

#[test]
fn list_ns_and_ns_rescan_list_the_active_namespaces() {
    let target = Target::start();
    for command in ["list-ns", "ns-rescan"] {
        let j = json_of(&nvmf_host(&target, command, &["-o", "json"]));
        assert_eq!(j, serde_json::json!({"nsid_list": [{"nsid": 1}, {"nsid": 2}]}), "{command}");
        assert_eq!(stdout(&nvmf_host(&target, command, &[])), "[   0]:0x1\n[   1]:0x2\n", "{command}");
    }
    assert_controllers(&target, &[]);
}

/// The SMART counters are the subsystem's (as nvmet's are its devices'): what one association did shows in the
/// log another association reads, after the first has ended.
#[test]
fn smart_log_counters_move_with_io() {
    let target = Target::start();
    let j = json_of(&nvmf_host(&target, "smart-log", &["-o", "json"]));
    for key in ["data_units_read", "data_units_written", "host_read_commands", "host_write_commands"] {
        assert_eq!(j[key], "0", "no I/O yet: {j}");
    }
    assert_eq!(j["avail_spare"], 100, "{j}");
    assert_eq!(j["spare_thresh"], 10, "{j}");
    assert_eq!(j["critical_warning"], 0, "{j}");

    let ctrl = Controller::connect(target.addr, SUBNQN, options(1)).expect("connect");
    ctrl.namespaces().expect("namespaces");
    // 8 writes of 64 KiB (512 KiB: 2 data units of 512 000 bytes, rounded up) and 3 reads of 4 KiB.
    for i in 0..8u64 {
        ctrl.write(1, i * 128, &host_support::pattern(64 << 10, 1)).expect("write");
    }
    let mut buf = vec![0u8; 4096];
    for i in 0..3u64 {
        ctrl.read(1, i * 8, &mut buf).expect("read");
    }
    ctrl.disconnect().expect("disconnect");
    let after = json_of(&nvmf_host(&target, "smart-log", &["-o", "json"]));
    assert_eq!(after["host_write_commands"], "8", "{after}");
    assert_eq!(after["data_units_written"], "2", "{after}");
    assert_eq!(after["host_read_commands"], "3", "{after}");
    assert_eq!(after["data_units_read"], "1", "{after}");

    let text = stdout(&nvmf_host(&target, "smart-log", &[]));
    assert!(text.contains("\navailable_spare                         : 100%\n"), "{text}");
    assert_controllers(&target, &[]);
}

#[test]
fn error_log_reads_at_most_the_entries_asked() {
    let target = Target::start();
    let j = json_of(&nvmf_host(&target, "error-log", &["-e", "4", "-o", "json"]));
    let errors = j["errors"].as_array().unwrap_or_else(|| panic!("no errors array: {j}"));
    assert_eq!(errors.len(), 4, "{j}");
    // A fresh controller has recorded no error: every entry is empty (error count 0).
    assert!(errors.iter().all(|e| e["error_count"] == 0 && e.get("trtype_spec_info").is_some()), "{j}");
    let text = stdout(&nvmf_host(&target, "error-log", &["-e", "1"]));
    assert!(text.starts_with(&format!("Error Log Entries for device:{SUBNQN} entries:1\n")), "{text}");
    assert_controllers(&target, &[]);
}

#[test]
fn get_log_prints_raw_bytes_or_a_hex_dump() {
    let target = Target::start();
    let raw = nvmf_host(&target, "get-log", &["--log-id", "2", "--log-len", "512", "-b"]);
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    assert_eq!(raw.stdout.len(), 512);
    let log = SmartLog::parse(&raw.stdout).expect("a SMART log");
    assert_eq!((log.available_spare, log.available_spare_threshold), (100, 10));

    let text = stdout(&nvmf_host(&target, "get-log", &["-i", "0x02", "-l", "32"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("Device:{SUBNQN} log-id:2 namespace-id:0xffffffff"));
    assert_eq!(lines[1], "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f");
    assert_eq!(lines[2], "0000: 00 00 00 64 0a 00 00 00 00 00 00 00 00 00 00 00 \"...d............\"");
    assert_eq!(lines.len(), 4, "{text}");
    assert_controllers(&target, &[]);
}

#[test]
fn list_subsys_shows_the_controller_as_nvme_cli_does() {
    let target = Target::start();
    let j = json_of(&nvmf_host(&target, "list-subsys", &["-o", "json", "-q", "nqn.2014-08.org.nvmexpress:uuid:test"]));
    let host = &j[0];
    assert_eq!(host["HostNQN"], "nqn.2014-08.org.nvmexpress:uuid:test", "{j}");
    assert_eq!(host["HostID"].as_str().map(str::len), Some(36), "{j}");
    let subsystem = &host["Subsystems"][0];
    assert_eq!(subsystem["NQN"], SUBNQN, "{j}");
    let path = &subsystem["Paths"][0];
    assert_eq!(path["Transport"], "tcp", "{j}");
    assert_eq!(path["Address"], format!("traddr=127.0.0.1,trsvcid={}", target.addr.port()), "{j}");
    assert_eq!(path["State"], "live", "{j}");
    assert!(path["Name"].as_str().is_some_and(|n| n.starts_with("cntlid=")), "{j}");
    assert_controllers(&target, &[]);
}

#[test]
fn an_unknown_subsystem_fails_with_one_line() {
    let target = Target::start();
    let port = target.addr.port().to_string();
    let out = Command::new(host_support::nvmf_host())
        .args(["id-ctrl", "-a", "127.0.0.1", "-s", &port, "-n", "nqn.2024-01.io.nvmf-rs:nobody"])
        .output()
        .expect("nvmf-host runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("id-ctrl of nqn.2024-01.io.nvmf-rs:nobody at 127.0.0.1:"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty());
}
