//! An RBD image exported by our target to the Linux kernel host, across two guests (`nvmf_tests::vm::Lab`): the
//! `host` node runs a one-node Ceph cluster on its link address (`tests/ceph/cluster.sh`) and the kernel host;
//! the `gw` node runs `nvmf-target` with the image as its namespace, reaching the cluster over the link. As a user
//! would: `rbd create`, `nvme connect`, `mkfs.ext4`, mount, files written and read back after a remount, `fsck`
//! clean, the file system's blocks in the image (`rbd du`), fio with crc32c verification on the device, and `rbd
//! resize` reaching the kernel host as the new device size.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_rbd -- --nocapture

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::{self, Lab, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-rbd";

#[test]
fn kernel_host_mounts_an_rbd_image_through_our_target() {
    let name = "vm_rbd";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let mut gw = Vm::new("gw").cpus(1).memory_mib(1536);
    if vm::enabled().is_ok() {
        let target = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
        gw = gw.env("NVMF_TARGET_BIN", target.to_string_lossy());
    }
    let cluster = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ceph/cluster.sh");
    let host = Vm::new("host").cpus(1).memory_mib(3072).modules(["nvme_tcp"]);
    let lab = Lab::new(name)
        .node("host", host)
        .node("gw", gw)
        .link("host", "gw")
        .logs(&logs)
        .deadline(Duration::from_secs(900));
    let Some(lab) = lab.start_or_skip() else { return };
    let gw_addr = lab.addr("gw", "host");

    // The cluster on the host node's link address, and the image.
    let ceph = lab.run(
        "host",
        &format!(
            "set -eu
             start=$(now_ms)
             CEPH_ADDR=$(link_addr gw) CEPH_MEMSTORE_BYTES=$((1024 << 20)) {cluster} start /tmp/ceph > /dev/null
             echo \"cluster up in $(( $(now_ms) - start )) ms\"
             rbd -c /tmp/ceph/ceph.conf create --size 256M rbd/disk
             echo 'image created'",
            cluster = cluster.display()
        ),
    );
    ceph.assert_success();
    ceph.assert_lines(&["image created"]);
    let files = lab.run("host", "cat /tmp/ceph/ceph.conf; echo '--- keyring'; cat /tmp/ceph/keyring");
    files.assert_success();
    let (conf, keyring) = files.stdout.split_once("--- keyring\n").expect("the configuration and the keyring");

    // The gateway: the cluster's files, then the target with the image as its namespace.
    let target = lab.run(
        "gw",
        &format!(
            "set -eu
             mkdir -p /tmp/ceph
             cat > /tmp/ceph/ceph.conf <<'EOF'\n{conf}EOF
             cat > /tmp/ceph/keyring <<'EOF'\n{keyring}EOF
             chmod 600 /tmp/ceph/keyring
             start_daemon gw timeout 900 \"$NVMF_TARGET_BIN\" --listen tcp://{gw_addr}:4420 --nqn {NQN} \
               --namespace rbd:rbd/disk,ceph-conf=/tmp/ceph/ceph.conf --control /tmp/gw.sock
             daemon_ready gw 'nvmf-target: ready' 120
             grep -o 'storage opened storage=rbd:rbd/disk[^ ]* block_size=512 capacity=[0-9]*' $(daemon_log gw)"
        ),
    );
    target.assert_success();
    target.assert_lines(&["storage opened storage=rbd:rbd/disk block_size=512 capacity=268435456"]);

    // The kernel host: a file system on the image, through our target.
    let out = lab.run(
        "host",
        &format!(
            "set -eu
             dev=$(host_connect tcp {gw_addr} 4420 {NQN} -i 1)
             echo \"size: $(( $(cat /sys/block/${{dev#/dev/}}/size) * 512 ))\"
             mkfs.ext4 -q $dev
             mkdir -p /mnt/rbd && mount $dev /mnt/rbd
             head -c 24M /dev/urandom > /tmp/data && cp /tmp/data /mnt/rbd/data && sync
             umount /mnt/rbd
             fsck.ext4 -fn $dev > /dev/null && echo 'fsck clean'
             mount $dev /mnt/rbd
             cmp /tmp/data /mnt/rbd/data && echo 'file read back after a remount'
             umount /mnt/rbd
             used=$(rbd -c /tmp/ceph/ceph.conf du --format json rbd/disk | jq '.images[0].used_size')
             [ \"$used\" -ge $((24 << 20)) ] && echo 'the blocks are in the image'
             fio_verify $dev 10 && echo 'fio verified'
             rbd -c /tmp/ceph/ceph.conf resize --size 384M rbd/disk > /dev/null 2>&1
             wait_until 30 eval \"[ \\$(cat /sys/block/${{dev#/dev/}}/size) -eq $((384 << 11)) ]\" && echo 'resize seen: 384 MiB'
             host_disconnect {NQN}
             on_node gw 'stop_daemon gw && echo gateway stopped cleanly'"
        ),
    );
    out.assert_success();
    out.assert_lines(&[
        "size: 268435456\n",
        "fsck clean\n",
        "file read back after a remount\n",
        "the blocks are in the image\n",
        "fio verified\n",
        "resize seen: 384 MiB\n",
        "gateway stopped cleanly",
    ]);
    let up = ceph.stdout.lines().find(|l| l.starts_with("cluster up in")).unwrap_or("cluster up in ?");
    vm::note(&format!("{name}: kernel {}, {up}", lab.kernel_release()));
}
