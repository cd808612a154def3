//! Our target's NVMe/RDMA transport served to the Linux 6.12 kernel host (nvme-rdma) over Soft-RoCE in the test
//! VM: `nvme discover -t rdma` lists the subsystem with the RDMA transport fields, `nvme connect -t rdma` with 2 I/O
//! queues, fio randwrite + randread with crc32c verification at 512 B, 4 KiB (in-capsule data), 128 KiB and 1 MiB
//! (keyed SGL: RDMA READ / RDMA WRITE + SEND), then `nvme disconnect`: the kernel's QP table holds none of ours
//! again and the target's QP gauge is 0; a disconnect under fio load frees every QP too and the next association
//! reads back what it wrote; a listener on an address without an RDMA device fails the start with the verb's error;
//! stopping the target under load drains every queue pair and exits cleanly.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_rdma -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-rdma";

#[track_caller]
fn assert_stdout_has(out: &VmOutput, needle: &str) {
    assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
}

#[test]
fn kernel_host_fio_verify_over_rdma() {
    let name = "kernel_host_fio_verify_over_rdma";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).rxe(true).modules(["nvme_rdma"]).deadline(Duration::from_secs(420));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let config = format!(
        r#"
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
nqn = "{NQN}"
[[subsystem.namespace]]
memory = "128MiB"
"#
    );
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
{config}
EOF
our_qps() {{ rdma resource show qp 2>/dev/null | grep -c 'comm nvmf-' || true; }}
no_qps() {{ [ "$(our_qps)" = 0 ]; }}
# An address of a netdev without an RDMA device: the target refuses to start, naming the address, verb and errno.
ip link add dummy1 type dummy && ip addr add 10.78.0.1/24 dev dummy1 && ip link set dummy1 up
if timeout 30 $NVMF_TARGET_BIN --listen rdma://10.78.0.1:4420 --namespace memory:16M > $NVMF_VM_LOGS/no-device.log 2>&1; then
  echo "listener without RDMA device: started"
else
  echo "listener without RDMA device: $(grep -m1 -o 'cannot listen on rdma://10.78.0.1:4420: rdma_bind_addr failed.*' $NVMF_VM_LOGS/no-device.log)"
fi
nvmf_target_start target $CONFIG
timeout 60 nvme discover -t rdma -a $NVMF_RDMA_ADDR -s 4420 > /tmp/discover.txt
cat /tmp/discover.txt
echo "discovery: $(grep -c "subnqn: *{NQN}" /tmp/discover.txt) subsystem, trtype $(grep -m1 '^trtype:' /tmp/discover.txt | tr -s ' ' | cut -d' ' -f2), qptype $(grep -m1 'qptype:' /tmp/discover.txt | tr -s ' ' | cut -d' ' -f2-), cms $(grep -m1 'cms:' /tmp/discover.txt | tr -s ' ' | cut -d' ' -f2-)"
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 {NQN} -i 2)
ctrl=$(ctrl_of {NQN})
echo "transport: $(cat /sys/class/nvme/$ctrl/transport), queues: $(cat /sys/class/nvme/$ctrl/queue_count), target qps: $(our_qps), gauge: $(metric nvmf_target_rdma_queue_pairs), connections: $(metric 'nvmf_target_connections{{transport="rdma"}}')"
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 32M
step fio_rw_verify $dev 512 16 1M
step fio_rw_verify $dev 1M 4 32M
host_disconnect {NQN}
wait_until 20 no_qps || true
echo "after disconnect: target qps $(our_qps), gauge $(metric nvmf_target_rdma_queue_pairs)"
echo "host I/O errors before the load test: $(dmesg | grep -c 'I/O error' || true)"
# Disconnect under load: fio is cut off; the target drains, frees every QP and serves the next association.
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 {NQN} -i 2)
fio --name=load --filename=$dev --ioengine=libaio --direct=1 --bs=64K --iodepth=32 --rw=randrw --size=64M \
    --time_based --runtime=10 > $NVMF_VM_LOGS/fio-load.log 2>&1 &
fio_pid=$!
sleep 3
host_disconnect {NQN}
wait $fio_pid || true
wait_until 20 no_qps || true
echo "after disconnect under load: target qps $(our_qps), gauge $(metric nvmf_target_rdma_queue_pairs)"
# (Connected by hand: on a loaded machine the kernel's namespace scan can take longer than host_connect waits.)
timeout 60 nvme connect -t rdma -a $NVMF_RDMA_ADDR -s 4420 -n {NQN} -i 1 >&2
wait_until 60 _has_namespace {NQN}
dev=/dev/$(_namespace_of {NQN})
step fio_rw_verify $dev 16K 8 4M
host_disconnect {NQN}
wait_until 20 no_qps || true
echo "after reconnect and disconnect: target qps $(our_qps), gauge $(metric nvmf_target_rdma_queue_pairs)"
curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_rdma' || true
inv=$(metric 'nvmf_target_rdma_work_requests_total{{opcode="send_with_invalidate"}}' || echo 0)
echo "send with invalidate used: $([ "$inv" -gt 0 ] && echo yes || echo no)"
# Target shutdown under load: every queue pair drains and the daemon exits by itself (no SIGKILL).
timeout 60 nvme connect -t rdma -a $NVMF_RDMA_ADDR -s 4420 -n {NQN} -i 2 >&2
wait_until 60 _has_namespace {NQN}
fio --name=shutdown --filename=/dev/$(_namespace_of {NQN}) --ioengine=libaio --direct=1 --bs=64K --iodepth=32 \
    --rw=randrw --size=64M --time_based --runtime=10 > $NVMF_VM_LOGS/fio-shutdown.log 2>&1 &
sleep 3
rc=0
stop_daemon target 30 || rc=$?
echo "shutdown with live connections: status $rc"
timeout 60 nvme disconnect -n {NQN} >&2 || true
wait || true
# (No control socket directory in the guest: that warning is expected.)
echo "target log warnings: $(grep -E 'WARN|ERROR' $(daemon_log target) | grep -vc 'control socket' || true)"
grep -E 'WARN|ERROR' $(daemon_log target) || true
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    assert_stdout_has(&out, "discovery: 1 subsystem, trtype rdma, qptype connected, cms rdma-cm");
    assert_stdout_has(&out, "transport: rdma, queues: 3, target qps: 3, gauge: 3, connections: 3");
    for (bs, qd, blocks) in [("4K", 32, 2048), ("128K", 32, 256), ("512", 16, 2048), ("1M", 4, 32)] {
        assert_stdout_has(
            &out,
            &format!(
                "fio bs={bs} qd={qd}: wrote {blocks}, verified {blocks} after writing, {blocks} on randread (of {blocks})"
            ),
        );
    }
    assert_stdout_has(&out, "after disconnect: target qps 0, gauge 0");
    assert_stdout_has(&out, "after disconnect under load: target qps 0, gauge 0");
    assert_stdout_has(&out, "fio bs=16K qd=8: wrote 256, verified 256 after writing, 256 on randread (of 256)");
    assert_stdout_has(&out, "after reconnect and disconnect: target qps 0, gauge 0");
    assert_stdout_has(
        &out,
        "listener without RDMA device: cannot listen on rdma://10.78.0.1:4420: rdma_bind_addr failed (10.78.0.1:4420): ENODEV",
    );
    // The kernel host asks for remote invalidation (keyed SGL subtype Fh) and rxe can send with invalidate.
    assert_stdout_has(&out, "send with invalidate used: yes");
    assert_stdout_has(&out, "host I/O errors before the load test: 0");
    assert_stdout_has(&out, "shutdown with live connections: status 0");
    assert_stdout_has(&out, "target log warnings: 0");
}

/// `[listener.rdma] srq = true`: every queue pair of a reactor receives through its shared receive queue; the
/// kernel host's fio verifies at 4 KiB (in-capsule) and 128 KiB (keyed SGL), and disconnecting frees every queue
/// pair (the connections' teardown does not wait for receives they do not own).
#[test]
fn kernel_host_fio_verify_over_rdma_with_srq() {
    let name = "kernel_host_fio_verify_over_rdma_with_srq";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).rxe(true).modules(["nvme_rdma"]).deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm,
    };
    let config = format!(
        r#"
[target]
mdts = "1MiB"
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
[listener.rdma]
srq = true
[[subsystem]]
nqn = "{NQN}"
[[subsystem.namespace]]
memory = "128MiB"
"#
    );
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
{config}
EOF
our_qps() {{ rdma resource show qp 2>/dev/null | grep -c 'comm nvmf-' || true; }}
nvmf_target_start target $CONFIG
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 {NQN} -i 2)
echo "connected: target qps $(our_qps), gauge $(metric nvmf_target_rdma_queue_pairs), shared receive queues: $(grep -c 'shared receive queue created' $(daemon_log target) || true)"
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 32M
host_disconnect {NQN}
wait_until 20 no_qps || true
echo "after disconnect: target qps $(our_qps), gauge $(metric nvmf_target_rdma_queue_pairs)"
curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_rdma' || true
rc=0
stop_daemon target 30 || rc=$?
echo "target stopped: status $rc"
echo "target log warnings: $(grep -E 'WARN|ERROR' $(daemon_log target) | grep -vc 'control socket' || true)"
grep -E 'WARN|ERROR' $(daemon_log target) || true
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    // The admin and the two I/O queues land on two reactors, each with its own shared receive queue (one when
    // round robin put all on one).
    assert!(
        out.stdout.contains("connected: target qps 3, gauge 3, shared receive queues: 1")
            || out.stdout.contains("connected: target qps 3, gauge 3, shared receive queues: 2"),
        "{}",
        out.report()
    );
    for (bs, qd, blocks) in [("4K", 32, 2048), ("128K", 32, 256)] {
        assert_stdout_has(
            &out,
            &format!(
                "fio bs={bs} qd={qd}: wrote {blocks}, verified {blocks} after writing, {blocks} on randread (of {blocks})"
            ),
        );
    }
    assert_stdout_has(&out, "after disconnect: target qps 0, gauge 0");
    assert_stdout_has(&out, "target stopped: status 0");
    assert_stdout_has(&out, "target log warnings: 0");
}
