//! The lab itself (`nvmf_tests::vm::Lab`): two guests on a link carry NVMe/TCP and NVMe/RDMA (discovery, and fio
//! with crc32c verification) between two kernels;
//! a node's script runs jobs on the other (`on_node`); a cut link stops the traffic and its restoration brings it
//! back; a killed node is seen as dead. Kernel nvmet on node `a`, the kernel host on node `b`, on Linux 7.x (the
//! kernel the other lab scenarios boot; the single-guest scenarios cover 6.12's nvmet and hosts).
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_lab -- --nocapture

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::{self, GuestStatus, KernelLine, Lab, Vm};

fn lab(name: &str) -> Lab {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let node = |n: &str| Vm::new(n).cpus(1).memory_mib(2048).rxe(true);
    Lab::new(name)
        .node("a", node("a").modules(["nvmet", "nvmet_tcp", "nvmet_rdma", "null_blk"]))
        .node("b", node("b").modules(["nvme_tcp", "nvme_rdma"]))
        .link("a", "b")
        .kernel(KernelLine::Backports)
        .logs(logs)
        .deadline(Duration::from_secs(600))
}

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-lab";

#[test]
fn two_nodes_carry_nvme_over_tcp_and_rdma_and_survive_a_cut_link() {
    let name = "vm_lab";
    let Some(lab) = lab(name).start_or_skip() else { return };
    let a = lab.addr("a", "b");
    assert_eq!((a.as_str(), lab.addr("b", "a").as_str()), ("10.88.1.1", "10.88.1.2"));

    // nvmet on a, both transports, on its link address; the kernel host on b through each.
    let target = lab.run(
        "a",
        &format!(
            "set -eu
             nvmet_subsys_nullblk {NQN} 256
             nvmet_tcp_port 1 {a} 4420 {NQN}
             nvmet_rdma_port 2 {a} 4421 {NQN}
             echo \"rxe: state $(rdma link show rxe0/1 | awk '{{print $4}}') on $(link_if b)\""
        ),
    );
    target.assert_success();
    target.assert_lines(&["rxe: state ACTIVE on eth0"]);
    let host = lab.run(
        "b",
        &format!(
            "set -eu
             echo \"peer: $(node_addr a) self: $(link_addr a) a resolves to: $(getent hosts a | cut -d' ' -f1)\"
             echo \"a is: $(on_node a hostname)\"
             for t in tcp:4420 rdma:4421; do
               nvme discover -t ${{t%:*}} -a {a} -s ${{t#*:}} | grep -q 'subnqn: *{NQN}'
               echo \"${{t%:*}}: discovered\"
               dev=$(host_connect ${{t%:*}} {a} ${{t#*:}} {NQN} -i 1)
               fio_verify $dev 4
               echo \"${{t%:*}}: verified\"
               host_disconnect {NQN}
             done"
        ),
    );
    host.assert_success();
    host.assert_lines(&[
        "peer: 10.88.1.1 self: 10.88.1.2 a resolves to: 10.88.1.1",
        "a is: a\n",
        "tcp: discovered",
        "tcp: verified",
        "rdma: discovered",
        "rdma: verified",
    ]);

    // A cut at a's end: a's NIC has no carrier, nothing crosses; restored, it does again.
    let reach = format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{a}/4420' && echo reached || echo unreachable");
    lab.cut("a", "b").expect("cut");
    let carrier = lab.run("a", "cat /sys/class/net/eth0/carrier");
    assert_eq!(carrier.stdout.trim(), "0", "{}", carrier.report());
    let cut = lab.run("b", &reach);
    assert_eq!(cut.stdout.trim(), "unreachable", "{}", cut.report());
    lab.restore("a", "b").expect("restore");
    let restored = lab.run("b", &format!("wait_until 10 bash -c 'exec 3<>/dev/tcp/{a}/4420'; {reach}"));
    assert_eq!(restored.stdout.trim(), "reached", "{}", restored.report());

    // A killed node: gone, and a job handed to it ends without a status.
    lab.run("a", "nvmet_teardown").assert_success();
    lab.kill("a");
    assert!(!lab.is_alive("a"));
    assert_eq!(lab.run("a", "true").status, GuestStatus::NoStatus);
    assert!(lab.is_alive("b"));
    vm::note(&format!("{name}: kernel {}: done", lab.kernel_release()));
}
