//! The host daemon (`nvmf-host run`) against the Linux 6.12 kernel target (nvmet-tcp, a memory-backed null_blk
//! namespace) in the test VM, the way a boot-time mount uses it: the configured controller is connected at
//! start (SQ flow control disabled: nvmet-tcp ends successful reads with their last data PDU), its namespace is
//! exported over NBD on a unix socket, the kernel's nbd driver attaches it with
//! `nbd-client`, fio verifies data through it, ext4 is made, mounted, written, remounted and checked (then
//! `nvmf-host nbd` in the foreground serves the same namespace on its default owner-only unix socket, where
//! `nbd-client -u` finds the file system); a second
//! subsystem's namespace is exported as `/dev/ublkbN` (ublk_drv) and gets the same treatment; the CLI lists both
//! controllers; SIGTERM removes the devices and ends both associations with CC.SHN acknowledged by the kernel
//! target.
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs (the daemon's, fio's,
//! dmesg) land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_daemon -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-host-daemon";
const NQN2: &str = "nqn.2024-01.io.nvmf-rs:vm-host-daemon-ublk";

#[test]
fn host_daemon_exports_a_kernel_target_namespace_for_a_mount() {
    let name = "host_daemon_exports_a_kernel_target_namespace_for_a_mount";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "null_blk", "nbd", "ublk_drv"])
        .deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                .unwrap_or_else(|e| panic!("nvmf-host binary: {e}"));
            vm.env("NVMF_HOST_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let script = format!(
        r#"
set -eu
nvmet_subsys_nullblk {NQN} 256
nvmet_subsys_nullblk {NQN2} 128
nvmet_tcp_port 1 127.0.0.1 4420 {NQN} {NQN2}
mkdir -p /tmp/host
cat > /tmp/host/host.toml <<'HOST_TOML'
[host]
state_dir = "/tmp/host/state"
control_socket = "/tmp/host/control.sock"
[logging]
level = "info"
[[controller]]
address = "127.0.0.1"
nqn = "{NQN}"
nr_io_queues = 2
disable_sqflow = true
[[controller.export]]
nsid = 1
nbd = "unix:/tmp/host/disk.sock"
[[controller]]
address = "127.0.0.1"
nqn = "{NQN2}"
nr_io_queues = 2
[[controller.export]]
nsid = 1
ublk = true
HOST_TOML
start_daemon host "$NVMF_HOST_BIN" run --config /tmp/host/host.toml
daemon_ready host 'nvmf_host::daemon: ready'
"$NVMF_HOST_BIN" list --control /tmp/host/control.sock
"$NVMF_HOST_BIN" list -o json --control /tmp/host/control.sock > /tmp/host/list.json
echo "state: $(jq -r '.controllers[0].state' /tmp/host/list.json)"
echo "size: $(jq -r '.controllers[0].namespaces[0].size' /tmp/host/list.json)"
echo "ublk state: $(jq -r '.controllers[1].state' /tmp/host/list.json)"
ublk=$(jq -r '.controllers[1].exports[0].address' /tmp/host/list.json)
echo "ublk device: $ublk"
echo "ublk size: $(blockdev --getsize64 $ublk)"
fio_verify $ublk 5
mkfs.ext4 -q -F $ublk
mkdir -p /tmp/mnt2
mount $ublk /tmp/mnt2
head -c 4194304 /dev/urandom > /tmp/host/payload2
cp /tmp/host/payload2 /tmp/mnt2/payload
umount /tmp/mnt2
echo 3 > /proc/sys/vm/drop_caches
mount $ublk /tmp/mnt2
cmp /tmp/host/payload2 /tmp/mnt2/payload && echo "ublk payload read back: ok"
umount /tmp/mnt2
fsck.ext4 -n -f $ublk >&2 && echo "ublk fsck: clean"

echo "nbd socket: $(stat -c '%F %a' /tmp/host/disk.sock)"
nbd-client -N nvmf0n1 -u /tmp/host/disk.sock /dev/nbd0 >&2
echo "nbd0 size: $(blockdev --getsize64 /dev/nbd0)"
fio_verify /dev/nbd0 5

mkfs.ext4 -q -F /dev/nbd0
mkdir -p /tmp/mnt
mount /dev/nbd0 /tmp/mnt
head -c 8388608 /dev/urandom > /tmp/host/payload
cp /tmp/host/payload /tmp/mnt/payload
umount /tmp/mnt
echo 3 > /proc/sys/vm/drop_caches
mount /dev/nbd0 /tmp/mnt
cmp /tmp/host/payload /tmp/mnt/payload && echo "payload read back: ok"
umount /tmp/mnt
fsck.ext4 -n -f /dev/nbd0 >&2 && echo "fsck: clean"
nbd-client -d /dev/nbd0 >&2

# `nvmf-host nbd` in the foreground serves by default on an owner-only unix socket under /run/nvmf-host.
start_daemon fg "$NVMF_HOST_BIN" nbd -a 127.0.0.1 -n {NQN} -i 1
daemon_ready fg 'exported at nbd+unix:///?socket=/run/nvmf-host/nbd.sock'
echo "fg socket: $(stat -c '%F %a' /run/nvmf-host/nbd.sock), directory $(stat -c %a /run/nvmf-host)"
nbd-client -u /run/nvmf-host/nbd.sock /dev/nbd1 >&2
echo "fg file system: $(blkid -o value -s TYPE /dev/nbd1)"
nbd-client -d /dev/nbd1 >&2
stop_daemon fg 30 && echo "fg exit: 0"
echo "fg socket after exit: $(test -e /run/nvmf-host/nbd.sock && echo present || echo removed)"

stop_daemon host 30 && echo "daemon exit: 0"
echo "ublk device after exit: $(test -e "$ublk" && echo present || echo removed)"
grep -E 'disconnect' "$(daemon_log host)" >&2 || true
echo "unclean disconnects: $(grep -c 'disconnect was not clean' "$(daemon_log host)" || true)"
echo "clean disconnects: $(grep -c 'INFO nvmf_host::daemon::table: disconnected name=nvmf' "$(daemon_log host)" || true)"
echo "kernel keep-alive expiries: $(dmesg | grep -c 'keep-alive timer' || true)"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    for needle in [
        "state: live\n",
        "size: 268435456\n",
        "nbd socket: socket 600\n",
        "nbd0 size: 268435456\n",
        "fg socket: socket 600, directory 700\n",
        "fg file system: ext4\n",
        "fg exit: 0\n",
        "fg socket after exit: removed\n",
        "payload read back: ok\n",
        "fsck: clean\n",
        "daemon exit: 0\n",
        "unclean disconnects: 0\n",
        "clean disconnects: 2\n",
        "ublk state: live\n",
        "ublk device: /dev/ublkb0\n",
        "ublk size: 134217728\n",
        "ublk payload read back: ok\n",
        "ublk fsck: clean\n",
        "ublk device after exit: removed\n",
        "kernel keep-alive expiries: 0\n",
    ] {
        assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
    }
}
