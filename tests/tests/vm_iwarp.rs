//! NVMe/RDMA over iWARP: Soft-iWARP (`siw0` on the guest's `dummy0`, 10.77.0.1; no Soft-RoCE beside it) in the
//! test VM, both our sides against the kernel's. Debian's kernels have no `siw`, so the harness builds it once per
//! kernel from the kernel's headers and source packages (`tests/src/vm/siw.rs`, `Vm::siw`).
//!
//! One guest, Linux 6.12:
//! - (a) the kernel host (nvme-rdma) → our target (an RDMA listener on 10.77.0.1:4420, a memory namespace): fio
//!   randwrite + verify (crc32c) and a verifying randread at 4 KiB (in-capsule data) and 128 KiB (a keyed SGL: the
//!   target RDMA READs the host's data into its buffer pool, whose region an iWARP device must let the peer
//!   write, and RDMA WRITEs the reads back);
//! - (b) our host (`nvmf-host nbd -t rdma`, no memory windows on siw) → the kernel target (nvmet-rdma on
//!   10.77.0.1:4421, a null_blk namespace): the same fio through `/dev/nbd0`;
//! - (c) our host → our target: `nvmf-host perf -t rdma` 128 KiB writes and 4 KiB reads.
//!
//! Then no QP of ours is left and neither daemon logged a warning beyond the expected ones.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_iwarp -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, KernelLine, Vm};

const ONQN: &str = "nqn.2024-01.io.nvmf-rs:vm-iwarp-ours";
const KNQN: &str = "nqn.2024-01.io.nvmf-rs:vm-iwarp-kernel";

#[test]
fn nvme_rdma_over_soft_iwarp_both_ways() {
    let name = "nvme_rdma_over_soft_iwarp_both_ways";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    // The LTS line: its headers and source come through this machine's apt, from which siw is built.
    let vm = Vm::new(name)
        .kernel(KernelLine::Lts)
        .logs(logs)
        .siw(true)
        .modules(["nvme_rdma", "nvmet_rdma", "null_blk", "nbd"])
        .deadline(Duration::from_secs(300));
    let vm = vm.with_our_daemons();
    let script = format!(
        r#"
set -eu
echo "devices: $(rdma link show | awk '{{ print $2 }}' | tr '\n' ' ')"
echo "siw0 transport: $(ibv_devinfo -d siw0 | sed -n 's/.*transport:[[:space:]]*//p')"
our_qps() {{ rdma resource show qp 2>/dev/null | grep -c 'comm nvmf-' || true; }}
no_qps() {{ [ "$(our_qps)" = 0 ]; }}
cat > /tmp/target.toml <<'EOF'
[target]
mdts = "1MiB"
[reactors]
threads = 1
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
transport = "rdma"
address = "10.77.0.1"
port = 4420
[[subsystem]]
nqn = "{ONQN}"
[[subsystem.namespace]]
memory = "64MiB"
EOF
nvmf_target_start target /tmp/target.toml

# (a) the kernel host -> our target
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4420 {ONQN} -i 1)
step fio_rw_verify $dev 4K 16 4M
step fio_rw_verify $dev 128K 8 16M
host_disconnect {ONQN}

# (b) our host -> nvmet-rdma
nvmet_subsys_nullblk {KNQN} 64
nvmet_rdma_port 1 $NVMF_RDMA_ADDR 4421 {KNQN}
start_daemon nbd timeout 600 "$NVMF_HOST_BIN" nbd -t rdma -a $NVMF_RDMA_ADDR -s 4421 -n {KNQN} -i 1
daemon_ready nbd 'exported at nbd+unix:///?socket=/run/nvmf-host/nbd.sock'
nbd-client -u /run/nvmf-host/nbd.sock /dev/nbd0 >&2
step fio_rw_verify /dev/nbd0 4K 16 4M
step fio_rw_verify /dev/nbd0 128K 8 16M
nbd-client -d /dev/nbd0 >&2
stop_daemon nbd 30
nvmet_teardown

# (c) our host -> our target
# perf WORKLOAD SIZE: fails on an I/O error; prints the I/O done.
perf() {{
  timeout 120 "$NVMF_HOST_BIN" perf -t rdma -a $NVMF_RDMA_ADDR -s 4420 -n {ONQN} -q 8 -T 2 --json -w $1 -o $2 \
    > "$NVMF_VM_LOGS/perf-$1-$2.json" 2> "$NVMF_VM_LOGS/perf-$1-$2.log" ||
    {{ cat "$NVMF_VM_LOGS/perf-$1-$2.log" >&2; fail "perf -t rdma -w $1 -o $2"; return 1; }}
  echo "perf $1 $2: $(jq -r '"\(.reads) reads, \(.writes) writes"' "$NVMF_VM_LOGS/perf-$1-$2.json")"
}}
perf randwrite 131072
perf randread 4096

wait_until 20 no_qps || true
echo "qps left: $(our_qps), target gauge $(metric nvmf_target_rdma_queue_pairs)"
stop_daemon target 30
echo "target warnings: $(grep -cE 'WARN|ERROR' $(daemon_log target) | head -1)"
grep -E 'WARN|ERROR' $(daemon_log target) >&2 || true
echo "kernel RDMA errors: $(dmesg | grep -ciE '(siw|nvme|nbd|rdma).*error' || true)"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    out.assert_lines(&["devices: siw0/1 \n", "siw0 transport: iWARP (1)\n"]);
    for (bs, qd, blocks) in [("4K", 16, 1024), ("128K", 8, 128)] {
        let line =
            format!("fio bs={bs} qd={qd}: wrote {blocks}, verified {blocks} after writing, {blocks} on randread");
        assert_eq!(out.stdout.matches(&line).count(), 2, "fio {bs} through both sides\n{}", out.report());
    }
    for (what, field) in [("randwrite 131072", 2), ("randread 4096", 0)] {
        let line = out.stdout.lines().find(|l| l.starts_with(&format!("perf {what}: "))).unwrap_or_default();
        let count = line.split([':', ' ']).filter(|w| !w.is_empty()).nth(3 + field).and_then(|n| n.parse::<u64>().ok());
        assert!(count.is_some_and(|n| n > 0), "perf {what}: {line:?}\n{}", out.report());
    }
    out.assert_lines(&["qps left: 0, target gauge 0\n", "target warnings: 0\n", "kernel RDMA errors: 0\n"]);
}
