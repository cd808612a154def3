//! The ublk export (`nvmf-host ublk`) in the test VM: our `nvmf-target` (a 256 MiB memory namespace) on the
//! guest's 127.0.0.1, the host library connected to it and serving the namespace as `/dev/ublkb0` through the
//! kernel's ublk_drv; the kernel block layer, fio, mkfs/mount/fsck are its clients.
//!
//! - `ublk_export_serves_fio_and_a_filesystem`: the device has the namespace's size and block size; fio
//!   randwrite + randread with crc32c verification at 4 KiB QD 32 and 128 KiB QD 8; write zeroes reads back
//!   zeroes, discard succeeds; ext4 made, mounted, written, unmounted, `fsck -n` clean, remounted with the
//!   files' checksums intact; SIGTERM deletes the device (`/dev/ublkb0`, `/dev/ublkc0` gone) and the host
//!   exits 0; the data is still on the target (read back through a second export).
//! - `ublk_export_randread_vs_perf` (measurement, no timed assertion): fio 4 KiB randread QD 32 on
//!   `/dev/ublkb0` and `nvmf-host perf` with the same workload on the same namespace; prints both IOPS. With
//!   `$NVMF_HOST_BASELINE_BIN` (another build of `nvmf-host`, e.g. before a change) the fio run is made with
//!   that one too, in the same guest, and printed as `ublk fio (baseline)`.
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs (the daemons', fio's,
//! dmesg) land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_ublk -- --nocapture --test-threads 1
//!
//! `$NVMF_TARGET_BIN` and `$NVMF_HOST_BIN` replace the cargo-built daemons (release builds for the
//! measurement).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-ublk";

/// Our target on 127.0.0.1:4420 with one 256 MiB memory namespace of 512-byte blocks.
const TARGET_TOML: &str = r#"
[target]
mdts = "1MiB"
max_queue_size = 128
[reactors]
threads = 2
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = 4420
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-ublk"
[[subsystem.namespace]]
memory = "256MiB"
"#;

/// Guest helpers: start the target, start/stop a ublk export and wait for its device.
const HELPERS: &str = r#"
ublk_start() {
  start_daemon host timeout 900 "${1:-$NVMF_HOST_BIN}" ublk -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" -i 2 -Q 128
  wait_until 60 _ublk_ready || { cat "$(daemon_log host)" >&2; fail "no ublk device"; return 1; }
  DEV=$(grep -m1 '^/dev/ublkb' "$(daemon_log host)")
  log "ublk device $DEV"
}
_ublk_ready() { grep -q '^/dev/ublkb' "$(daemon_log host)" && [ -b "$(grep -m1 '^/dev/ublkb' "$(daemon_log host)")" ]; }
"#;

/// Runs `script` with the target started, `$NVMF_HOST_BIN`, `$NQN` and the helpers above.
fn run(name: &str, script: &str) -> Option<VmOutput> {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).modules(["ublk_drv"]).deadline(Duration::from_secs(900));
    let vm = match vm::enabled() {
        Ok(()) => {
            let target = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            // `$NVMF_HOST_BIN` (e.g. a release build for the measurement) or the cargo build.
            let host = match std::env::var_os("NVMF_HOST_BIN") {
                Some(path) => PathBuf::from(path),
                None => nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                    .unwrap_or_else(|e| panic!("nvmf-host binary: {e}")),
            };
            let baseline = std::env::var("NVMF_HOST_BASELINE_BIN").unwrap_or_default();
            vm.env("NVMF_TARGET_BIN", target.to_string_lossy())
                .env("NVMF_HOST_BIN", host.to_string_lossy())
                .env("NVMF_HOST_BASELINE_BIN", baseline)
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let script = format!(
        "set -eu\nNQN={NQN}\ncat > /tmp/target.toml <<'EOF'\n{TARGET_TOML}\nEOF\n{HELPERS}\n\
         nvmf_target_start target /tmp/target.toml\n{script}"
    );
    let start = Instant::now();
    let out = vm.run_or_skip(&script)?;
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    Some(out)
}

#[test]
fn ublk_export_serves_fio_and_a_filesystem() {
    let Some(out) = run(
        "ublk_export_serves_fio_and_a_filesystem",
        r#"
log "== device"
ublk_start
echo "size: $(blockdev --getsize64 "$DEV")"
echo "logical block size: $(blockdev --getss "$DEV")"
echo "max_sectors_kb: $(cat /sys/block/ublkb0/queue/max_sectors_kb)"
[ "$(blockdev --getsize64 "$DEV")" = 268435456 ] || fail "size"
[ "$(blockdev --getss "$DEV")" = 512 ] || fail "logical block size"

log "== fio verify"
step fio_rw_verify "$DEV" 4K 32 32M
step fio_rw_verify "$DEV" 128K 8 64M

log "== write zeroes and discard"
dd if=/dev/urandom of=/tmp/pattern bs=1M count=2 2>/dev/null
dd if=/tmp/pattern of="$DEV" bs=1M seek=100 oflag=direct conv=fsync 2>/dev/null
blkdiscard -z -o $((100 << 20)) -l $((1 << 20)) "$DEV"
dd if="$DEV" bs=1M skip=100 count=2 iflag=direct of=/tmp/back 2>/dev/null
cmp -n $((1 << 20)) /tmp/back /dev/zero || fail "write zeroes did not read back zeroes"
cmp -i $((1 << 20)) -n $((1 << 20)) /tmp/back /tmp/pattern || fail "write zeroes went past its range"
echo "write zeroes: exact"
blkdiscard -o $((64 << 20)) -l $((8 << 20)) "$DEV"
echo "discard: ok"

log "== filesystem"
mkfs.ext4 -q -F "$DEV"
mkdir -p /mnt/u
mount "$DEV" /mnt/u
for i in 1 2 3 4; do dd if=/dev/urandom of=/mnt/u/f$i bs=1M count=$((i * 3)) 2>/dev/null; done
(cd /mnt/u && sha256sum f1 f2 f3 f4) > /tmp/sums
umount /mnt/u
fsck.ext4 -n -f "$DEV"
echo "fsck: clean"
mount "$DEV" /mnt/u
(cd /mnt/u && sha256sum -c /tmp/sums)
umount /mnt/u

log "== stop"
stop_daemon host 30
[ ! -e /dev/ublkb0 ] && [ ! -e /dev/ublkc0 ] || { ls -l /dev/ublk* >&2; fail "device still present after stop"; }
echo "device removed"

log "== data persisted on the target"
ublk_start
fsck.ext4 -n -f "$DEV"
mount -o ro "$DEV" /mnt/u
(cd /mnt/u && sha256sum -c /tmp/sums)
umount /mnt/u
stop_daemon host 30
stop_daemon target
dmesg > "$NVMF_VM_LOGS/dmesg.txt"
"#,
    ) else {
        return;
    };
    out.assert_success();
    for needle in [
        "size: 268435456",
        "fio bs=4K qd=32: wrote 8192, verified 8192 after writing, 8192 on randread",
        "fio bs=128K qd=8: wrote 512, verified 512 after writing, 512 on randread",
        "write zeroes: exact",
        "fsck: clean",
        "f4: OK",
        "device removed",
    ] {
        assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
    }
}

#[test]
fn ublk_export_randread_vs_perf() {
    let Some(out) = run(
        "ublk_export_randread_vs_perf",
        r#"
randread() {
  timeout 120 fio --name=ublk --filename="$DEV" --ioengine=libaio --direct=1 --rw=randread --bs=4k --iodepth=32 \
    --size=64M --time_based --runtime=10 --group_reporting > "$NVMF_VM_LOGS/fio-ublk$1.log"
  echo "ublk fio$1: $(grep -m1 'IOPS=' "$NVMF_VM_LOGS/fio-ublk$1.log")"
}
ublk_start
# Fill the range read so every read returns data.
fio --name=fill --filename="$DEV" --ioengine=libaio --direct=1 --rw=write --bs=1M --iodepth=4 --size=64M >/dev/null
randread ""
stop_daemon host 30
if [ -n "${NVMF_HOST_BASELINE_BIN:-}" ]; then
  ublk_start "$NVMF_HOST_BASELINE_BIN"
  randread " (baseline)"
  stop_daemon host 30
fi
timeout 120 "$NVMF_HOST_BIN" perf -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" -q 32 -o 4096 -w randread -T 10 -c 1 \
  > "$NVMF_VM_LOGS/perf.log" 2>&1
echo "perf: $(grep -m1 "^Total" "$NVMF_VM_LOGS/perf.log")"
cat "$NVMF_VM_LOGS/perf.log"
stop_daemon target
"#,
    ) else {
        return;
    };
    out.assert_success();
    assert!(out.stdout.contains("ublk fio: ") && out.stdout.contains("IOPS="), "{}", out.report());
    eprintln!(
        "{}",
        out.stdout
            .lines()
            .filter(|l| l.starts_with("ublk fio") || l.starts_with("perf"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
