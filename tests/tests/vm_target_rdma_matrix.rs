//! Our target (`nvmf-target`) over NVMe/RDMA (Soft-RoCE `rxe0` on 10.77.0.1 in the test VM), driven by the Linux
//! 6.12 kernel host (nvme-rdma, nvme-cli, fio) and by `nvmf-rdma-probe`, a raw RDMA CM + verbs host that sends
//! what a well-behaved host never would.
//!
//! | test | what it proves |
//! |---|---|
//! | `rdma_discovery_and_fio_matrix` | `nvme discover -t rdma` lists the subsystem with trtype rdma and the RDMA TSAS fields; `nvme connect -t rdma` with 1 I/O queue × queue size 32 and 4 × 128 gets exactly that; fio randwrite + randread with crc32c verification at 512 B, 4 KiB (in-capsule), 128 KiB (one keyed SGL) and 1 MiB (split transfers) on the first, 4 KiB and 1 MiB on the second |
//! | `rdma_filesystem_and_disconnect_under_load` | ext4 written, fsck clean, checksums across a reconnect; `nvme disconnect` while fio writes, reconnect, verify again; every RDMA resource released after each disconnect |
//! | `kernel_nvmet_rdma_answers_the_probe` | the probe against Linux nvmet-rdma gets the answers the kernel gives (so a failure below is the target's, not the probe's); needs no transport of ours |
//! | `rdma_bad_input_and_leaks` | each malformed connect request rejected with its NVMe/RDMA code; commands before Connect, bad keyed SGL rkeys and lengths, oversize capsules answered with the right status or that QP torn down; an I/O queue of a keyed host's controller that never authenticates holds no QID and its failure ends only its queue pair; queue pairs that never send Connect disconnected at the connect timeout, one that never takes its response at the transfer timeout; a kernel-host connection made before the attack keeps verifying; a probe killed with SIGKILL mid-command, 1000 probe connect cycles and 50 `nvme connect`/`disconnect` cycles leave no RDMA resource, fd or memory behind |
//!
//! The daemon is built like `vm_target_tcp`'s ([`nvmf_tests::workspace_bin::nvmf_target`]); the probe is this package's
//! `nvmf-rdma-probe`. Guest helpers: `vm/guest-lib.sh` and `vm/rdma-lib.sh`. Opt-in like every VM scenario
//! (`NVMF_VM=1`; `.ci/run`: `NVMF_REQUIRE_VM=1`); logs in `target/tmp/vm-logs/<test>/`. About 6 minutes of VM time
//! in all, 2 of them the 1000 probe cycles.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_rdma_matrix -- --test-threads 1

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};
use serde_json::Value;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-rdma";

fn vm(name: &str) -> Vm {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    Vm::new(name).logs(logs).rxe(true).modules(["nvme_rdma"])
}

/// Our target on rxe0: limits pinned, metrics on 127.0.0.1:9420, one RDMA listener on port 4420, subsystem [`NQN`]
/// with one 128 MiB memory namespace of 512-byte blocks.
const CONFIG: &str = r#"
[target]
mdts = "1MiB"
max_queue_size = 128
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[logging]
level = "info"
[[listener]]
transport = "rdma"
address = "10.77.0.1"
port = 4420
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-rdma"
serial = "NVMFRDMA01"
model = "nvmf-rs rdma vm test"
allow_any_host = true
[[subsystem.host]]
nqn = "nqn.2014-08.org.nvmexpress:uuid:6c1f2e3d-4b5a-4978-8a6b-5c4d3e2f1a0b"
dhchap_key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
[[subsystem.namespace]]
memory = "128MiB"
block_size = 512
"#;

/// Runs `script` in `vm` with `$NVMF_TARGET_BIN`, `$NVMF_RDMA_PROBE`, `$NQN` and `$CONFIG` (a file holding
/// [`CONFIG`]) set and `vm/rdma-lib.sh` sourced; prints the scenario's time.
fn run(name: &str, vm: Vm, script: &str) -> Option<VmOutput> {
    run_with(name, vm, true, script)
}

/// [`run`], building and passing our target only `with_target`.
fn run_with(name: &str, vm: Vm, with_target: bool, script: &str) -> Option<VmOutput> {
    let vm = match vm::enabled() {
        Ok(()) if !with_target => vm,
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let vm = vm.env("NVMF_RDMA_PROBE", env!("CARGO_BIN_EXE_nvmf-rdma-probe")).env("NQN", NQN);
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("vm/rdma-lib.sh");
    let script =
        format!("CONFIG=/tmp/nvmf-target.toml\ncat > $CONFIG <<'EOF'\n{CONFIG}\nEOF\n. {}\n{script}", lib.display());
    let start = Instant::now();
    let out = vm.run_or_skip(&script)?;
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    Some(out)
}

#[track_caller]
fn assert_stdout_has(out: &VmOutput, needle: &str) {
    assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
}

/// The text after `"{prefix} {label}: "` on the first stdout line that starts so.
#[track_caller]
fn line_value<'a>(out: &'a VmOutput, prefix: &str, label: &str) -> &'a str {
    let head = format!("{prefix} {label}: ");
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .unwrap_or_else(|| panic!("no {head:?} line\n{}", out.report()))
}

/// "k1 v1 k2 v2 ..." as a map.
fn pairs(text: &str) -> BTreeMap<String, u64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.chunks(2).filter_map(|p| Some((p.first()?.to_string(), p.get(1)?.parse().ok()?))).collect()
}

#[track_caller]
fn totals(out: &VmOutput, label: &str) -> BTreeMap<String, u64> {
    let t = pairs(line_value(out, "totals", label));
    assert!(t.contains_key("qp"), "totals {label}: no qp count\n{}", out.report());
    t
}

#[track_caller]
fn probe(out: &VmOutput, label: &str) -> Value {
    let text = line_value(out, "probe", label);
    serde_json::from_str(text).unwrap_or_else(|e| panic!("probe {label}: {e}: {text}\n{}", out.report()))
}

/// (sct, sc) of a probe's `status` (or `cap_status`) field.
fn status_of(v: &Value, field: &str) -> Option<(u64, u64)> {
    Some((v[field]["sct"].as_u64()?, v[field]["sc"].as_u64()?))
}

/// `nvme discover -t rdma` lists the subsystem with the RDMA transport fields; connect with 1 I/O queue of 32
/// entries and 4 of 128 gets exactly that, and fio verifies every block at 512 B, 4 KiB, 128 KiB and 1 MiB (4 KiB
/// and 1 MiB on the second connection).
#[test]
fn rdma_discovery_and_fio_matrix() {
    // 4 vCPUs: the kernel host creates at most one I/O queue per CPU.
    let vm = vm("rdma_discovery_and_fio_matrix").cpus(4).deadline(Duration::from_secs(420));
    let Some(out) = run(
        "rdma_discovery_and_fio_matrix",
        vm,
        r#"
set -eu
nvmf_target_start target $CONFIG
echo "discover-json: $(nvme discover -t rdma -a $NVMF_RDMA_ADDR -s 4420 -o json | jq -c .)"
# bs qd size: in-capsule (512 B, 4 KiB), one keyed SGL (128 KiB), a transfer the target splits (1 MiB).
fio_bs() {
  case $1 in
    512) fio_rw_verify $dev 512 32 1M ;;
    4K) fio_rw_verify $dev 4K 32 4M ;;
    128K) fio_rw_verify $dev 128K 16 8M ;;
    1M) fio_rw_verify $dev 1M 4 16M ;;
  esac
}
for spec in "1 32 512 4K 128K 1M" "4 128 4K 1M"; do
  set -- $spec
  q=$1 qs=$2
  shift 2
  dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i $q --queue-size $qs)
  ctrl=$(ctrl_of $NQN)
  echo "controller -i $q -Q $qs: transport $(cat /sys/class/nvme/$ctrl/transport) queue_count $(cat /sys/class/nvme/$ctrl/queue_count) sqsize $(cat /sys/class/nvme/$ctrl/sqsize)"
  for bs in "$@"; do fio_bs $bs; done
  host_disconnect $NQN
done
stop_daemon target
"#,
    ) else {
        return;
    };
    out.assert_success();

    let text = out.stdout.lines().find_map(|l| l.strip_prefix("discover-json: ")).unwrap_or_default();
    let discover: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("discover JSON: {e}: {text}\n{}", out.report()));
    let records = discover["records"].as_array().unwrap_or_else(|| panic!("no records\n{}", out.report()));
    let ours = records
        .iter()
        .find(|r| r["subnqn"] == NQN)
        .unwrap_or_else(|| panic!("discovery does not list {NQN}: {discover}\n{}", out.report()));
    for (field, want) in [
        ("trtype", "rdma"),
        ("adrfam", "ipv4"),
        ("traddr", "10.77.0.1"),
        ("trsvcid", "4420"),
        ("rdma_qptype", "connected"),
        ("rdma_prtype", "not specified"),
        ("rdma_cms", "rdma-cm"),
    ] {
        assert_eq!(ours[field].as_str().map(str::trim), Some(want), "discovery {field}: {ours}\n{}", out.report());
    }

    // queue_count counts the admin queue; sqsize is the I/O queues' 0's based size.
    assert_stdout_has(&out, "controller -i 1 -Q 32: transport rdma queue_count 2 sqsize 31");
    assert_stdout_has(&out, "controller -i 4 -Q 128: transport rdma queue_count 5 sqsize 127");
    // Every size on the first connection, 4 KiB and 1 MiB on the second too.
    for (bs, qd, blocks, times) in [("512", 32, 2048, 1), ("4K", 32, 1024, 2), ("128K", 16, 64, 1), ("1M", 4, 16, 2)] {
        let line =
            format!("fio bs={bs} qd={qd}: wrote {blocks}, verified {blocks} after writing, {blocks} on randread");
        assert_eq!(out.stdout.matches(&line).count(), times, "{line:?} {times} time(s)\n{}", out.report());
    }
}

/// ext4 across a reconnect; `nvme disconnect` while fio writes, then reconnect and verify; every RDMA resource
/// (the host's and the target's) released after each disconnect.
#[test]
fn rdma_filesystem_and_disconnect_under_load() {
    let vm = vm("rdma_filesystem_and_disconnect_under_load").deadline(Duration::from_secs(360));
    let Some(out) = run(
        "rdma_filesystem_and_disconnect_under_load",
        vm,
        r#"
set -eu
nvmf_target_start target $CONFIG
qp0=$(rdma_count qp)
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i 2)
mkfs.ext4 -q -F $dev
mkdir -p /mnt/rdma
mount $dev /mnt/rdma
for i in 1 2 3; do head -c $((i * 1048576 + 4096 * i)) /dev/urandom > /mnt/rdma/file$i; done
mkdir /mnt/rdma/dir && cp /mnt/rdma/file2 /mnt/rdma/dir/copy
(cd /mnt/rdma && sha256sum file1 file2 file3 dir/copy) > /tmp/sums
umount /mnt/rdma
fsck.ext4 -n -f $dev && echo "fsck: clean"
host_disconnect $NQN
# The baseline: every queue pair gone; each reactor keeps its device context (PD, CQ, pool region) from now on.
rdma_settle_count qp $qp0
idle=$(rdma_totals)
report_totals idle
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i 2)
mount $dev /mnt/rdma
(cd /mnt/rdma && sha256sum -c --quiet /tmp/sums) && echo "checksums after reconnect: ok"
umount /mnt/rdma

# Disconnect under load: fio fails (its device goes away); the target must drain and free everything.
timeout 120 fio --name=load --filename=$dev --ioengine=libaio --direct=1 --rw=randwrite --bs=64k --iodepth=32 \
  --size=32M --time_based --runtime=60 > $NVMF_VM_LOGS/fio-load.log 2>&1 &
fio=$!
b=$(basename $dev)
wait_until 30 awk '$5 > 200 { ok = 1 } END { exit !ok }' /sys/block/$b/stat
echo "writes before disconnect: $(awk '{ print $5 }' /sys/block/$b/stat)"
host_disconnect $NQN
rc=0; wait $fio || rc=$?
echo "fio under disconnect: rc $rc"
rdma_settle "$idle" > /dev/null
report_totals after-disconnect-under-load
report_gauge after-disconnect-under-load

dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i 2)
fio_rw_verify $dev 4K 32 8M
host_disconnect $NQN
rdma_settle "$idle" > /dev/null
report_totals end
stop_daemon target
"#,
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "fsck: clean");
    assert_stdout_has(&out, "checksums after reconnect: ok");
    assert_stdout_has(&out, "fio bs=4K qd=32: wrote 2048, verified 2048 after writing, 2048 on randread");
    let fio_rc = line_value(&out, "fio under", "disconnect");
    assert_ne!(fio_rc, "rc 0", "fio survived a disconnect of its device?\n{}", out.report());
    let idle = totals(&out, "idle");
    for label in ["after-disconnect-under-load", "end"] {
        assert_eq!(totals(&out, label), idle, "RDMA resources {label} differ from before the first connect");
    }
    assert_eq!(line_value(&out, "gauge", "after-disconnect-under-load"), "0", "QP gauge\n{}", out.report());
}

/// Hostile input from `nvmf-rdma-probe` while a kernel host is connected: every malformed request gets the right
/// answer, the kernel host's I/O still verifies, and nothing leaks across a SIGKILLed probe, 1000 probe connect
/// cycles and 50 `nvme connect`/`disconnect` cycles.
#[test]
fn rdma_bad_input_and_leaks() {
    let vm = vm("rdma_bad_input_and_leaks").deadline(Duration::from_secs(600));
    let Some(out) = run(
        "rdma_bad_input_and_leaks",
        vm,
        r#"
set -eu
nvmf_target_start target $CONFIG
pid=$(nvmf_target_pid target)
qp0=$(rdma_count qp)
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i 1)
fio_rw_verify $dev 4K 16 4M

for c in recfmt qid hsqsize hrqsize short; do probe reject-$c reject --case $c; done
probe admin-connect admin-connect
probe io-before-connect io --before-connect
probe admin-before-connect io --before-connect --qid 0
for c in rkey rkey-read length write-length; do probe sgl-$c bad-keyed-sgl --case $c; done
probe oversize oversize-capsule
# A peer that knows the keyed host's NQN, host ID and CNTLID but not its key, on the RDMA transport.
probe impostor --hostnqn nqn.2014-08.org.nvmexpress:uuid:6c1f2e3d-4b5a-4978-8a6b-5c4d3e2f1a0b impostor \
  --key DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:
# Queue pairs that never send their Fabrics Connect: disconnected at the connect timeout (10 s by default).
probe silent-io silent --qid 1 --seconds 50
probe silent-admin silent --qid 0 --seconds 50
echo "connect timeouts: $(metric 'nvmf_target_timeouts_total{state="connect"}')"
# A host that posts no receive buffers: our response SEND meets RNR NAKs, retried forever (the host asked for
# rnr_retry_count 7), until the transfer timeout (30 s by default). The kernel host's I/O runs meanwhile.
PROBE_TIMEOUT=90 probe stall stall --seconds 60 > /tmp/stall.out &
stall=$!
echo "target alive after the attacks: $(kill -0 $pid && echo yes)"
fio_rw_verify $dev 4K 16 4M
wait $stall
cat /tmp/stall.out
echo "transfer timeouts: $(metric 'nvmf_target_timeouts_total{state="transfer"}')"

# A host that dies mid-command: an Asynchronous Event Request outstanding, then SIGKILL.
connected=$(rdma_totals)
report_totals connected
report_gauge connected
timeout 120 $NVMF_RDMA_PROBE --subnqn $NQN hold --seconds 100 > /tmp/hold.json &
wait_until 30 grep -q holding /tmp/hold.json
echo "probe hold: $(head -1 /tmp/hold.json)"
report_totals holding
kill -9 $(pgrep -x nvmf-rdma-probe)
rdma_settle "$connected" > /dev/null
report_totals after-kill
report_gauge after-kill

# 1000 connect cycles (after 50 to warm allocator and caches up).
probe warmup cycles 50
rdma_settle "$connected" > /dev/null
report_usage before-cycles $pid
PROBE_TIMEOUT=400 probe cycles cycles 1000
rdma_settle "$connected" > /dev/null
report_totals after-cycles
report_usage after-cycles $pid
fio_rw_verify $dev 4K 16 4M
host_disconnect $NQN

# 50 kernel-host connect/disconnect cycles, from every queue pair gone (the reactors keep their device contexts).
rdma_settle_count qp $qp0
idle=$(rdma_totals)
report_totals idle
report_usage before-nvme-cycles $pid
ok=0
for i in $(seq 50); do
  timeout 60 nvme connect -t rdma -a $NVMF_RDMA_ADDR -s 4420 -n $NQN -i 1 > /dev/null &&
    timeout 60 nvme disconnect -n $NQN > /dev/null && ok=$((ok + 1))
done
echo "nvme connect/disconnect cycles: $ok of 50"
rdma_settle "$idle" > /dev/null
report_totals after-nvme-cycles
report_usage after-nvme-cycles $pid
report_gauge after-nvme-cycles
stop_daemon target
"#,
    ) else {
        return;
    };
    out.assert_success();

    // Malformed private data: the NVMe/RDMA reject code the transport spec names (a consumer reject, CM status
    // 28). RoCE CM pads private data to 56 bytes with zeros, so an empty request reaches the target as a zeroed one
    // (recfmt 0, hsqsize 0, hrqsize 0): any of the three codes that describe it is right.
    for (case, codes) in
        [("recfmt", &[2][..]), ("qid", &[3]), ("hsqsize", &[4]), ("hrqsize", &[5]), ("short", &[1, 4, 5])]
    {
        let v = probe(&out, &format!("reject-{case}"));
        assert_eq!(v["outcome"], "rejected", "reject --case {case}: {v}\n{}", out.report());
        assert_eq!(v["cm_status"], 28, "reject --case {case}: not a consumer reject: {v}");
        assert_eq!(v["reject_recfmt"], 0, "reject --case {case}: {v}");
        let sts = v["reject_sts"].as_u64().unwrap_or(0);
        assert!(codes.contains(&sts), "reject --case {case}: status {sts}, want one of {codes:?}: {v}");
    }

    // Positive control: the same probe connects and reads CAP (MQES 127: max_queue_size 128).
    let v = probe(&out, "admin-connect");
    assert_eq!((v["outcome"].as_str(), status_of(&v, "status")), (Some("completed"), Some((0, 0))), "{v}");
    assert_eq!((status_of(&v, "cap_status"), v["cap_mqes"].as_u64()), (Some((0, 0)), Some(127)), "{v}");
    assert!(v["cntlid"].as_u64().is_some_and(|c| (1..0xfff0).contains(&c)), "{v}");

    // Commands before Connect: Command Sequence Error (as our TCP transport answers; Linux nvmet says Invalid
    // Opcode), or the queue torn down.
    for label in ["io-before-connect", "admin-before-connect"] {
        let v = probe(&out, label);
        let answered =
            v["outcome"] == "completed" && matches!(status_of(&v, "status"), Some((0, 0x0c)) | Some((0, 0x01)));
        assert!(answered || v["outcome"] == "broken", "{label}: {v}\n{}", out.report());
        assert_ne!(status_of(&v, "status"), Some((0, 0)), "{label} succeeded: {v}");
    }

    // A wrong rkey makes the target's RDMA WRITE/READ fail: that QP is torn down (or the command fails with a
    // data transfer error); a short keyed SGL is Data SGL Length Invalid, as nvmet answers.
    for case in ["rkey", "rkey-read"] {
        let v = probe(&out, &format!("sgl-{case}"));
        let torn_down = v["outcome"] == "broken";
        let transfer_error = v["outcome"] == "completed" && status_of(&v, "status") == Some((0, 0x04));
        assert!(torn_down || transfer_error, "bad-keyed-sgl --case {case}: {v}\n{}", out.report());
    }
    // An Identify SGL shorter than the structure: the start of it (as SPDK answers) or Data SGL Length Invalid (as
    // nvmet does), never a byte past the SGL. A Write whose SGL is shorter than its blocks: Data SGL Length Invalid.
    let v = probe(&out, "sgl-length");
    assert_eq!(v["wrote_beyond_sgl"], false, "the target wrote past the keyed SGL: {v}");
    assert_eq!(v["outcome"], "completed", "{v}");
    assert!(matches!(status_of(&v, "status"), Some((0, 0)) | Some((0, 0x0f))), "{v}");
    let v = probe(&out, "sgl-write-length");
    assert_eq!((v["outcome"].as_str(), status_of(&v, "status")), (Some("completed"), Some((0, 0x0f))), "{v}");

    // A SEND larger than every receive buffer fails at the target's receive: that QP is torn down.
    let v = probe(&out, "oversize");
    assert_eq!(v["outcome"], "broken", "oversize capsule: {v}\n{}", out.report());
    // A queue pair that stays silent after the RDMA CM connect holds its CQ entries and pinned buffers only until
    // the connect timeout (10 s by default; not before it, and long before the probe's 50 s).
    for label in ["silent-io", "silent-admin"] {
        let v = probe(&out, label);
        assert_eq!(v["outcome"], "disconnected", "{label}: {v}\n{}", out.report());
        let after = v["seconds"].as_f64().unwrap_or(0.0);
        assert!((10.0..50.0).contains(&after), "{label}: disconnected after {after} s: {v}");
    }
    assert_stdout_has(&out, "connect timeouts: 2\n");
    // A queue pair whose response SEND the host never takes holds it (and its buffers) only until the transfer
    // timeout (30 s by default; not before it, and long before the probe's 60 s).
    // The impostor holds no QID (the real I/O queue 1 connects and authenticates meanwhile) and its failed
    // authentication ends only its own queue pair: the real queues read and keep alive.
    let v = probe(&out, "impostor");
    let expect = serde_json::json!({
        "outcome": "done", "admin_authenticated": true, "impostor_connect": "SUCCESS", "real_connect": "SUCCESS",
        "real_authenticated": "", "impostor_failure1": true, "impostor_disconnected": true, "real_read": "SUCCESS",
        "keep_alive": "SUCCESS",
    });
    assert_eq!(v, expect, "impostor\n{}", out.report());
    let v = probe(&out, "stall");
    assert_eq!(v["outcome"], "disconnected", "stall: {v}\n{}", out.report());
    let after = v["seconds"].as_f64().unwrap_or(0.0);
    assert!((28.0..60.0).contains(&after), "stall: disconnected after {after} s: {v}");
    assert_stdout_has(&out, "transfer timeouts: 1\n");
    assert_stdout_has(&out, "target alive after the attacks: yes");
    assert_eq!(
        out.stdout.matches("fio bs=4K qd=16: wrote 1024, verified 1024 after writing, 1024 on randread").count(),
        3,
        "the kernel host's I/O before the attacks, after them and after the cycles\n{}",
        out.report()
    );

    // The SIGKILLed probe: its connection (two QPs: the probe's and the target's) came and went.
    let connected = totals(&out, "connected");
    let holding = totals(&out, "holding");
    assert!(holding["qp"] > connected["qp"], "the held connection shows no QP: {holding:?} vs {connected:?}");
    assert_eq!(totals(&out, "after-kill"), connected, "RDMA resources after the probe was killed");
    // The kernel host's admin and I/O queue.
    assert_eq!(line_value(&out, "gauge", "connected"), "2", "QP gauge with one kernel host\n{}", out.report());
    assert_eq!(line_value(&out, "gauge", "after-kill"), "2", "QP gauge after the kill\n{}", out.report());

    // 1000 cycles: all succeeded, nothing leaked.
    let v = probe(&out, "cycles");
    assert_eq!((v["ok"].as_u64(), v["failures"].as_u64()), (Some(1000), Some(0)), "{v}\n{}", out.report());
    assert_eq!(totals(&out, "after-cycles"), connected, "RDMA resources after 1000 cycles");
    assert_no_growth(&out, "before-cycles", "after-cycles");

    assert_stdout_has(&out, "nvme connect/disconnect cycles: 50 of 50");
    assert_eq!(totals(&out, "after-nvme-cycles"), totals(&out, "idle"), "RDMA resources after nvme cycles");
    assert_no_growth(&out, "before-nvme-cycles", "after-nvme-cycles");
    assert_eq!(line_value(&out, "gauge", "after-nvme-cycles"), "0", "QP gauge after the nvme cycles\n{}", out.report());
}

/// A witness under attack over NVMe/RDMA: the kernel host reads (fio, 4 KiB, QD16) while 80 raw queue pairs (40 per
/// reactor, from two probe processes) connect through RDMA CM and never send a Fabrics Connect. Each silent queue
/// pair holds its CQ entries and pinned receive buffers until the connect timeout (10 s), or is rejected when its
/// reactor has no CQ entries left; none outlives the deadline, the witness keeps at least half of its unattacked
/// IOPS (one run, same guest) and sees no error, the pools are whole afterwards (queue pair gauge, data buffers)
/// and its data verifies.
#[test]
fn rdma_witness_under_silent_queue_pairs() {
    let vm = vm("rdma_witness_under_silent_queue_pairs").deadline(Duration::from_secs(420));
    let Some(out) = run(
        "rdma_witness_under_silent_queue_pairs",
        vm,
        r#"
set -eu
nvmf_target_start target $CONFIG
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 $NQN -i 1)
fio_rw_verify $dev 4K 16 4M
read_iops() {
  fio --name=witness --filename=$dev --ioengine=libaio --direct=1 --bs=4K --iodepth=16 --size=4M --rw=randread \
    --time_based --runtime=8 --minimal | awk -F';' '{ print int($8) }'
}
echo "witness unattacked: $(read_iops)"
probes=""
for i in 1 2; do
  (timeout 120 $NVMF_RDMA_PROBE --subnqn $NQN silent --qid 1 --seconds 40 --count 40 > /tmp/silent-$i.json || true) &
  probes="$probes $!"
done
sleep 1
echo "witness attacked: $(read_iops)"
# The probes only: a bare `wait` would also wait for the target daemon.
wait $probes
for i in 1 2; do echo "silent $i: $(cat /tmp/silent-$i.json)"; done
echo "connect timeouts: $(metric 'nvmf_target_timeouts_total{state="connect"}')"
report_gauge after-attack
echo "buffers after-attack: $(curl -sf --max-time 10 http://127.0.0.1:9420/metrics |
  awk '$1 ~ /^nvmf_target_data_buffers[{].*state="free"/ { f += $2 } $1 ~ /^nvmf_target_data_buffers[{].*state="total"/ { t += $2 }
    END { print "free " f " total " t }')"
echo "host errors: $(dmesg | grep -c -E 'nvme nvme[0-9]+: (starting error recovery|.*timeout|Reconnecting)' || true)"
fio_rw_verify $dev 4K 16 4M
"#,
    ) else {
        return;
    };
    out.assert_success();
    let iops = |label: &str| -> u64 {
        line_value(&out, "witness", label).trim().parse().unwrap_or_else(|e| panic!("{label}: {e}\n{}", out.report()))
    };
    let (unattacked, attacked) = (iops("unattacked"), iops("attacked"));
    eprintln!("witness over RDMA: {unattacked} IOPS unattacked, {attacked} under 80 silent queue pairs");
    assert!(attacked * 2 >= unattacked, "the witness kept {attacked} of {unattacked} IOPS under attack");
    assert_eq!(line_value(&out, "host", "errors").trim(), "0", "the kernel host saw errors\n{}", out.report());
    let (mut disconnected, mut refused) = (0, 0);
    for i in ["1", "2"] {
        let text = line_value(&out, "silent", i);
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("silent {i}: {e}: {text}"));
        assert_eq!(v["other"], serde_json::json!([]), "silent {i}: a queue pair outlived the connect timeout: {v}");
        // The probe's clock starts when it sees its connect established, after the target's accept started the
        // target's: under this load that can be a second or two later.
        let (fastest, slowest) = (v["fastest"].as_f64().unwrap_or(0.0), v["slowest"].as_f64().unwrap_or(0.0));
        assert!(fastest >= 7.0 && slowest < 40.0, "silent {i}: disconnected after {fastest}..{slowest} s: {v}");
        disconnected += v["disconnected"].as_u64().unwrap_or(0);
        // Rejected at the RDMA CM connect: the reactor's completion queue had no entries left.
        refused += v["refused"].as_u64().unwrap_or(0);
    }
    eprintln!("silent queue pairs: {disconnected} disconnected at the connect timeout, {refused} refused at connect");
    assert_eq!(disconnected + refused, 80, "{}", out.report());
    assert!(disconnected > 0, "no silent queue pair was ever accepted\n{}", out.report());
    let timeouts = out.stdout.lines().find_map(|l| l.strip_prefix("connect timeouts: ")).unwrap_or("absent");
    assert_eq!(timeouts.trim(), disconnected.to_string(), "{}", out.report());
    // The pools are whole: only the witness's admin and I/O queue pairs are left, and it holds no buffer while idle.
    assert_eq!(line_value(&out, "gauge", "after-attack"), "2", "QP gauge after the attack\n{}", out.report());
    let buffers = pairs(line_value(&out, "buffers", "after-attack"));
    let (free, total) = (buffers.get("free"), buffers.get("total"));
    assert!(total.is_some_and(|&t| t > 0), "no data buffer counted\n{}", out.report());
    assert_eq!(free, total, "data buffers after the attack\n{}", out.report());
    assert_eq!(
        out.stdout.matches("fio bs=4K qd=16: wrote 1024, verified 1024 after writing, 1024 on randread").count(),
        2,
        "{}",
        out.report()
    );
}

/// The target's fds are back where they were and its RSS grew by at most 8 MiB (allocator noise).
#[track_caller]
fn assert_no_growth(out: &VmOutput, before: &str, after: &str) {
    let (b, a) = (pairs(line_value(out, "usage", before)), pairs(line_value(out, "usage", after)));
    assert_eq!(a["fds"], b["fds"], "fds {before} → {after}\n{}", out.report());
    assert!(a["rss_kib"] <= b["rss_kib"] + 8192, "RSS {before} {} KiB → {after} {} KiB", b["rss_kib"], a["rss_kib"]);
}

/// `nvmf-rdma-probe` against the kernel's nvmet-rdma: the answers Linux 6.12 gives, measured. Proves the probe's
/// requests are well-formed where they should be (its positive controls succeed against a reference target) and
/// records where nvmet is more lenient than ours (it accepts qid 65535, hrqsize 0 and a zeroed request).
#[test]
fn kernel_nvmet_rdma_answers_the_probe() {
    let vm = vm("kernel_nvmet_rdma_answers_the_probe")
        .modules(["nvmet", "nvmet_rdma", "null_blk"])
        .deadline(Duration::from_secs(240));
    let Some(out) = run_with(
        "kernel_nvmet_rdma_answers_the_probe",
        vm,
        false,
        r#"
set -eu
nvmet_subsys_nullblk $NQN 64 > /dev/null
nvmet_rdma_port 1 $NVMF_RDMA_ADDR 4420 $NQN
for c in recfmt qid hsqsize hrqsize short; do probe reject-$c reject --case $c; done
probe admin-connect admin-connect
probe io-before-connect io --before-connect
for c in rkey rkey-read length write-length; do probe sgl-$c bad-keyed-sgl --case $c; done
probe oversize oversize-capsule
# A peer that knows the keyed host's NQN, host ID and CNTLID but not its key, on the RDMA transport.
probe impostor --hostnqn nqn.2014-08.org.nvmexpress:uuid:6c1f2e3d-4b5a-4978-8a6b-5c4d3e2f1a0b impostor \
  --key DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:
probe cycles cycles 20
"#,
    ) else {
        return;
    };
    out.assert_success();
    for (case, sts) in [("recfmt", 2), ("hsqsize", 4)] {
        let v = probe(&out, &format!("reject-{case}"));
        assert_eq!((v["outcome"].as_str(), v["reject_sts"].as_u64()), (Some("rejected"), Some(sts)), "{case}: {v}");
    }
    for case in ["qid", "hrqsize", "short"] {
        let v = probe(&out, &format!("reject-{case}"));
        assert_eq!(v["outcome"], "accepted", "nvmet rejects {case} now: {v}");
    }
    let v = probe(&out, "admin-connect");
    assert_eq!((status_of(&v, "status"), status_of(&v, "cap_status")), (Some((0, 0)), Some((0, 0))), "{v}");
    let v = probe(&out, "io-before-connect");
    assert_eq!(status_of(&v, "status"), Some((0, 0x01)), "nvmet: Invalid Opcode before Connect: {v}");
    for case in ["rkey", "rkey-read"] {
        let v = probe(&out, &format!("sgl-{case}"));
        assert_eq!(v["outcome"], "broken", "{case}: {v}");
    }
    for case in ["length", "write-length"] {
        let v = probe(&out, &format!("sgl-{case}"));
        assert_eq!(status_of(&v, "status"), Some((0, 0x0f)), "{case}: {v}");
        assert_ne!(v["wrote_beyond_sgl"], true, "{case}: {v}");
    }
    let v = probe(&out, "oversize");
    assert_eq!(v["outcome"], "broken", "{v}");
    let v = probe(&out, "cycles");
    assert_eq!((v["ok"].as_u64(), v["failures"].as_u64()), (Some(20), Some(0)), "{v}");
}
