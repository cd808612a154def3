//! Our target (`nvmf-target`) served to the Linux 6.12 kernel host in the test VM: discovery, connect with 1, 2
//! and 4 I/O queues, the admin commands nvme-cli sends (with exact Identify fields), fio with crc32c
//! verification at 4 KiB and 128 KiB × QD 1 and 32, discard, ext4 across a reconnect, header and data digests,
//! keep-alive expiry when the host vanishes, a passthrough namespace on an emulated NVMe drive, namespaces
//! added and removed live by a SIGHUP reload, and subsystems named as Linux lets them be (over TCP and RDMA).
//!
//! The daemon runs in the guest from the cargo build: [`nvmf_tests::workspace_bin::nvmf_target`] runs
//! `cargo build -p nvmf-target` with this test's profile and target folder once per test process (a no-op when
//! up to date) and passes the binary's path as `$NVMF_TARGET_BIN` (set it yourself to use another build).
//!
//! Each test boots one guest (the harness serialises them). Opt-in like every VM scenario: `NVMF_VM=1`
//! (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs (the daemon's, fio's, dmesg) land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_tcp -- --test-threads 1
//!
//! Past 800 lines because each scenario carries its guest script inline, next to what it asserts; they share the
//! launcher and the target configuration below, and one test binary builds the daemon once for all of them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-target";
const NQN2: &str = "nqn.2024-01.io.nvmf-rs:vm-second";
const UUID: &str = "6f1b6c0e-2a4d-4b8e-9c3f-0d1e2f3a4b5c";
const NGUID: &str = "0123456789abcdef0123456789abcdef";
const EUI64: &str = "00a0b0c0d0e0f001";

fn vm(name: &str) -> Vm {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    Vm::new(name).logs(logs).modules(["nvme_tcp"])
}

/// Runs `script` in `vm` with `$NVMF_TARGET_BIN` set (the daemon is built first, only when the VM will run),
/// `$CONFIG` written from `config` (TOML), and prints the scenario's time.
fn run(name: &str, vm: Vm, config: &str, script: &str) -> Option<VmOutput> {
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    let script = format!("CONFIG=/tmp/nvmf-target.toml\ncat > $CONFIG <<'EOF'\n{config}\nEOF\n{script}");
    let start = Instant::now();
    let out = vm.run_or_skip(&script)?;
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    Some(out)
}

/// The usual target: limits pinned so that Identify fields are known, metrics on 127.0.0.1:9420, `listen` on
/// port 4420, subsystem [`NQN`] with the namespaces in `namespaces` (TOML tables), any host.
fn config(listen: &str, namespaces: &str, extra: &str) -> String {
    format!(
        r#"
[target]
mdts = "1MiB"
max_queue_size = 128
keep_alive_granularity_ms = 1000
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[logging]
level = "info"
{extra}
[[listener]]
address = "{listen}"
port = 4420
[[subsystem]]
nqn = "{NQN}"
serial = "NVMFVM0001"
model = "nvmf-rs vm test"
{namespaces}
"#
    )
}

#[track_caller]
fn assert_stdout_has(out: &VmOutput, needle: &str) {
    assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
}

/// Discovery lists both subsystems; connect with 1, 2 and 4 I/O queues gets exactly that many; Identify
/// Controller/Namespace fields, list-subsys, SMART counters after a known amount of I/O, the commands supported
/// log, and an unsupported log page's status.
#[test]
fn kernel_host_basics() {
    let namespaces = format!(
        r#"
[[subsystem.namespace]]
memory = "64MiB"
block_size = 4096
uuid = "{UUID}"
nguid = "{NGUID}"
eui64 = "{EUI64}"
[[subsystem]]
nqn = "{NQN2}"
[[subsystem.namespace]]
null = "1GiB"
"#
    );
    let config = config("127.0.0.1", &namespaces, "");
    // 4 vCPUs: the kernel host creates at most one I/O queue per CPU.
    let vm = vm("kernel_host_basics").cpus(4).deadline(Duration::from_secs(240));
    let Some(out) = run(
        "kernel_host_basics",
        vm,
        &config,
        &format!(
            r#"
set -eu
nvmf_target_start target $CONFIG
nvme discover -t tcp -a 127.0.0.1 -s 4420 > /tmp/discover.txt
cat /tmp/discover.txt
echo "discovery records: $(grep -c '^subnqn:' /tmp/discover.txt)"

head -c 262144 /dev/urandom > /tmp/pattern
for q in 1 2 4; do
  dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i $q)
  ctrl=$(ctrl_of {NQN})
  echo "queues -i $q: $(cat /sys/class/nvme/$ctrl/queue_count) (connections $(metric 'nvmf_target_connections{{transport="tcp"}}'))"
  dd if=/tmp/pattern of=$dev bs=64k oflag=direct status=none
  cmp -n 262144 /tmp/pattern $dev && echo "read back -i $q: ok"
  host_disconnect {NQN}
done

dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
ctrl=$(ctrl_of {NQN})
echo "sysfs cntlid: $(cat /sys/class/nvme/$ctrl/cntlid)"
nvme id-ctrl /dev/$ctrl -o json | jq -r 'to_entries[] | select(.key | IN("vid","ssvid","sn","mn","fr","mdts","cntlid","ver","ctratt","cntrltype","oaes","aerl","elpe","lpa","kas","sqes","cqes","maxcmd","nn","oncs","vwc","sgls","subnqn","ioccsz","iorcsz","icdoff","msdbd","cmic","ofcs")) | "id-ctrl \(.key)=\(.value|tostring|sub(" +$";""))"'
nvme id-ns $dev -o json | jq -r '"id-ns nsze=\(.nsze) ncap=\(.ncap) nuse=\(.nuse) flbas=\(.flbas) nlbaf=\(.nlbaf) dlfeat=\(.dlfeat) nmic=\(.nmic) ds=\(.lbafs[0].ds) nguid=\(.nguid) eui64=\(.eui64)"'
b=$(basename $dev)
echo "sysfs ids: uuid=$(cat /sys/block/$b/uuid) nguid=$(cat /sys/block/$b/nguid) eui=$(cat /sys/block/$b/eui)"
echo "size: $(blockdev --getsize64 $dev) logical-block: $(blockdev --getss $dev)"
nvme list-subsys | tee /tmp/list-subsys.txt
grep -q "{NQN}" /tmp/list-subsys.txt

# SMART: the subsystem's totals, every association's as nvmet reports its devices': the 3 x 4 writes of 64 KiB above
# and 8 of 128 KiB here make 20 writes and 1.75 MiB (3584 sectors: 4 data units, thousands rounded up); reads include
# the partition scans.
dd if=/dev/urandom of=$dev bs=128k count=8 oflag=direct status=none
dd if=$dev of=/dev/null bs=128k count=8 iflag=direct status=none
nvme smart-log /dev/$ctrl -o json | jq -r '"smart host_write_commands=\(.host_write_commands) data_units_written=\(.data_units_written) reads_at_least_8=\(.host_read_commands >= 8) critical_warning=\(.critical_warning) avail_spare=\(.avail_spare)"'

# Commands Supported and Effects (log 05h): admin Identify (06h), I/O Write (01h) and Read (02h).
nvme get-log /dev/$ctrl --log-id=5 --log-len=4096 -b > /tmp/effects.bin
echo "effects: admin-identify=$(od -An -tx4 -j $((4 * 6)) -N4 /tmp/effects.bin | tr -d ' ') io-write=$(od -An -tx4 -j $((1024 + 4)) -N4 /tmp/effects.bin | tr -d ' ') io-read=$(od -An -tx4 -j $((1024 + 8)) -N4 /tmp/effects.bin | tr -d ' ')"
nvme error-log /dev/$ctrl -e 1 > /dev/null && echo "error-log: ok"
if nvme get-log /dev/$ctrl --log-id=0xc0 --log-len=512 > /tmp/bad-log.txt 2>&1; then echo "log c0h: accepted"; else echo "log c0h: $(cat /tmp/bad-log.txt)"; fi
host_disconnect {NQN}
echo "controllers after disconnect: $(metric 'nvmf_target_controllers{{subsystem="{NQN}"}}')"
stop_daemon target
echo "basics: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    // Discovery: both subsystems, over TCP at our address.
    for nqn in [NQN, NQN2] {
        assert_stdout_has(&out, &format!("subnqn:  {nqn}"));
    }
    // ... and the discovery subsystem's own entry (current discovery subsystem): 3 records.
    assert_stdout_has(&out, "subnqn:  nqn.2014-08.org.nvmexpress.discovery");
    assert_stdout_has(&out, "discovery records: 3");
    assert_stdout_has(&out, "trtype:  tcp");
    assert_stdout_has(&out, "traddr:  127.0.0.1");
    // Queue count = I/O queues + the admin queue; one TCP connection each.
    for (q, total) in [(1, 2), (2, 3), (4, 5)] {
        assert_stdout_has(&out, &format!("queues -i {q}: {total} (connections {total})"));
        assert_stdout_has(&out, &format!("read back -i {q}: ok"));
    }
    let cntlid = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("sysfs cntlid: "))
        .unwrap_or_else(|| panic!("no cntlid\n{}", out.report()))
        .to_owned();
    let expected_ctrl = [
        format!("cntlid={cntlid}"),
        format!("subnqn={NQN}"),
        "sn=NVMFVM0001".into(),
        "mn=nvmf-rs vm test".into(),
        "mdts=8".into(),    // 1 MiB / 4 KiB (CAP.MPSMIN) = 2^8
        "ver=66304".into(), // 1.3.0
        "ctratt=65".into(), // 128-bit host identifier, Traffic Based Keep Alive
        "cntrltype=1".into(),
        "oaes=2304".into(), // namespace attribute and ANA change notices
        "aerl=3".into(),
        "elpe=15".into(),
        "lpa=6".into(),      // command effects log, extended data
        "kas=10".into(),     // 1000 ms granularity
        "sqes=102".into(),   // 0x66
        "cqes=68".into(),    // 0x44
        "maxcmd=128".into(), // max_queue_size
        "nn=1024".into(),
        "oncs=45".into(),      // compare, dataset management, write zeroes, reservations
        "vwc=0".into(),        // memory: no volatile write cache
        "sgls=3145729".into(), // byte-aligned SGLs, offset addressing, transport data block
        "ioccsz=1028".into(),  // (64 + 16 KiB in-capsule) / 16
        "iorcsz=1".into(),
        "icdoff=0".into(),
        "msdbd=1".into(),
        "cmic=11".into(), // multi-port, multi-controller, ANA reporting
        "ofcs=1".into(),  // Disconnect supported
    ];
    for field in &expected_ctrl {
        assert_stdout_has(&out, &format!("id-ctrl {field}\n"));
    }
    // 64 MiB of 4 KiB blocks; read-zeroes after deallocate + write zeroes with deallocate; shared namespace.
    assert_stdout_has(
        &out,
        &format!(
            "id-ns nsze=16384 ncap=16384 nuse=16384 flbas=0 nlbaf=0 dlfeat=9 nmic=1 ds=12 nguid={NGUID} eui64={EUI64}"
        ),
    );
    let dashed_nguid =
        format!("{}-{}-{}-{}-{}", &NGUID[0..8], &NGUID[8..12], &NGUID[12..16], &NGUID[16..20], &NGUID[20..32]);
    let spaced_eui: Vec<&str> = (0..8).map(|i| &EUI64[2 * i..2 * i + 2]).collect();
    assert_stdout_has(&out, &format!("sysfs ids: uuid={UUID} nguid={dashed_nguid} eui={}", spaced_eui.join(" ")));
    assert_stdout_has(&out, "size: 67108864 logical-block: 4096");
    assert_stdout_has(&out, "tcp traddr=127.0.0.1,trsvcid=4420");
    assert_stdout_has(&out, "live");
    // The subsystem's totals: 12 writes of 64 KiB and 8 of 128 KiB, 3584 sectors = ceil(3584 / 1000) data units.
    assert_stdout_has(
        &out,
        "smart host_write_commands=20 data_units_written=4 reads_at_least_8=true critical_warning=0 avail_spare=100",
    );
    // CSUPP; Write also LBCC (logical block content change).
    assert_stdout_has(&out, "effects: admin-identify=00000001 io-write=00000003 io-read=00000001");
    assert_stdout_has(&out, "error-log: ok");
    assert!(
        out.stdout.contains("log c0h: ") && out.stdout.to_lowercase().contains("invalid log page"),
        "an unsupported log page must fail with Invalid Log Page\n{}",
        out.report()
    );
    assert_stdout_has(&out, "controllers after disconnect: 0");
    assert_stdout_has(&out, "basics: ok");
}

/// fio randwrite with crc32c verification, then randread verifying the same blocks, at 4 KiB and 128 KiB ×
/// QD 1 and 32, over 2 I/O queues; then QD 32 again against a target whose sockets run on io_uring
/// (`socket_io = "io_uring"`, on an address off loopback: its 128 KiB reads go zero copy), and against one whose reactors are pinned and take each queue at its Connect from
/// the reactor the listener dealt it to (`placement = "incoming_cpu"`).
#[test]
fn fio_verify() {
    let config = config("127.0.0.1", "[[subsystem.namespace]]\nmemory = \"128MiB\"\n", "");
    let vm = vm("fio_verify").modules(["dummy"]).deadline(Duration::from_secs(300));
    let Some(out) = run(
        "fio_verify",
        vm,
        &config,
        &format!(
            r#"
set -eu
nvmf_target_start target $CONFIG
dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
step fio_rw_verify $dev 4K 1 4M
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 1 16M
step fio_rw_verify $dev 128K 32 32M
# The read pass really verifies: one 128 KiB block zeroed behind fio's back fails it.
dd if=/dev/zero of=$dev bs=128k count=1 seek=100 oflag=direct status=none
if fio --name=read --filename=$dev --ioengine=libaio --direct=1 --bs=128K --iodepth=32 --size=32M \
    --verify=crc32c --verify_fatal=1 --rw=randread > $NVMF_VM_LOGS/fio-negative.log 2>&1; then
  echo "corrupted block: not detected"
else
  echo "corrupted block: detected"
fi
host_disconnect {NQN}
curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_errors_total' || true
stop_daemon target
# The same target with its sockets on the reactors' io_uring, on an address off loopback (a dummy link's), so
# that its 128 KiB reads go zero copy (the kernel still copies them on local delivery, but the sends, their
# notifications and the buffers held until then are the real ones).
ip link add zc0 type dummy && ip addr add 10.66.0.1/24 dev zc0 && ip link set zc0 up
sed -e 's/^port = 4420/port = 4421/' -e 's/^address = "127.0.0.1"/address = "10.66.0.1"/' \
  -e 's/^threads = 2/threads = 2\nsocket_io = "io_uring"/' $CONFIG > /tmp/uring.toml
nvmf_target_start uring /tmp/uring.toml
curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_tcp_socket_io' | sed 's/^/socket path: /'
dev=$(host_connect tcp 10.66.0.1 4421 {NQN} -i 2)
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 32M
host_disconnect {NQN}
echo "zero-copy sends: $(curl -sf http://127.0.0.1:9420/metrics |
  awk '/^nvmf_target_tcp_zero_copy_sends_total/ {{ n += $2 }} END {{ print n + 0 }}')"
stop_daemon uring
# The same target with each queue served by the reactor on the vCPU the kernel host's queue sends from.
sed -e 's/^port = 4420/port = 4422/' -e 's/^threads = 2/cpus = [0, 1]\nplacement = "incoming_cpu"/' $CONFIG > /tmp/placed.toml
nvmf_target_start placed /tmp/placed.toml
dev=$(host_connect tcp 127.0.0.1 4422 {NQN} -i 2)
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 32M
host_disconnect {NQN}
curl -sf http://127.0.0.1:9420/metrics | grep '^nvmf_target_tcp_connections_moved' | sed 's/^/placement: /'
stop_daemon placed
echo "host I/O errors: $(dmesg | grep -c 'I/O error' || true)"
echo "fio: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    for (bs, qd, blocks) in [("4K", 1, 1024), ("4K", 32, 2048), ("128K", 1, 128), ("128K", 32, 256)] {
        assert_stdout_has(
            &out,
            &format!(
                "fio bs={bs} qd={qd}: wrote {blocks}, verified {blocks} after writing, {blocks} on randread (of {blocks})"
            ),
        );
    }
    assert_stdout_has(&out, "corrupted block: detected");
    assert_stdout_has(&out, r#"socket path: nvmf_target_tcp_socket_io{reactor="0",path="io_uring"} 1"#);
    // 256 reads of 128 KiB (and the write pass's verify reads), each over `send_zero_copy_bytes`.
    let zero_copy =
        out.stdout.lines().find_map(|l| l.strip_prefix("zero-copy sends: ")).and_then(|n| n.trim().parse::<u64>().ok());
    assert!(zero_copy.is_some_and(|n| n >= 256), "zero-copy sends: {zero_copy:?}\n{}", out.report());
    for (bs, blocks) in [("4K", 2048), ("128K", 256)] {
        let line = format!("fio bs={bs} qd=32: wrote {blocks}, verified {blocks} after writing, {blocks} on randread");
        assert_eq!(out.stdout.matches(&line).count(), 3, "{line:?} on both socket paths and placed\n{}", out.report());
    }
    // The kernel host sends each of its two I/O queues from its own vCPU, and the listener deals the I/O queues to
    // the reactors in turn after the admin queue: at least one I/O queue lands on the other vCPU's reactor.
    let moved = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("placement: nvmf_target_tcp_connections_moved_total "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(moved.is_some_and(|n| n >= 1), "queues moved at Connect: {moved:?}\n{}", out.report());
    assert_stdout_has(&out, "host I/O errors: 0");
    assert_stdout_has(&out, "fio: ok");
}

/// Discard reads back zeroes; ext4 made, filled, unmounted; disconnect, reconnect; `fsck -n` clean and every
/// file's checksum intact.
#[test]
fn filesystem_across_reconnect() {
    let config = config("127.0.0.1", "[[subsystem.namespace]]\nmemory = \"256MiB\"\n", "");
    let vm = vm("filesystem_across_reconnect").modules(["nvme_tcp", "ext4"]).deadline(Duration::from_secs(300));
    let Some(out) = run(
        "filesystem_across_reconnect",
        vm,
        &config,
        &format!(
            r#"
set -eu
nvmf_target_start target $CONFIG
dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
echo "discard granularity: $(cat /sys/block/$(basename $dev)/queue/discard_granularity)"
head -c 1048576 /dev/urandom > /tmp/mib
dd if=/tmp/mib of=$dev bs=1M oflag=direct status=none
cmp -s /tmp/mib $dev -n 1048576 && echo "pattern written"
step blkdiscard $dev
cmp -n 1048576 /dev/zero $dev && echo "after discard: zeroes"
step mkfs.ext4 -q -F $dev
mkdir -p /mnt/t
mount $dev /mnt/t
head -c 5000000 /dev/urandom > /mnt/t/big
mkdir /mnt/t/dir
for i in $(seq 1 20); do head -c $((i * 4097)) /dev/urandom > /mnt/t/dir/f$i; done
(cd /mnt/t && find . -type f | sort | xargs sha256sum) > /tmp/manifest
echo "files: $(wc -l < /tmp/manifest)"
umount /mnt/t
host_disconnect {NQN}
dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 1)
step fsck.ext4 -n -f $dev && echo "fsck: clean"
mount -o ro $dev /mnt/t
(cd /mnt/t && sha256sum -c --quiet /tmp/manifest) && echo "files intact: $(wc -l < /tmp/manifest)"
umount /mnt/t
host_disconnect {NQN}
stop_daemon target
echo "filesystem: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "pattern written");
    assert_stdout_has(&out, "after discard: zeroes");
    assert_stdout_has(&out, "files: 21");
    assert_stdout_has(&out, "fsck: clean");
    assert_stdout_has(&out, "files intact: 21");
    assert_stdout_has(&out, "filesystem: ok");
}

/// `nvme connect -g -G`: the target grants header and data digests on every queue, and fio verifies through
/// them at 4 KiB and 128 KiB (in-capsule data, R2T/H2CData and C2HData all carry a data digest).
#[test]
fn header_and_data_digests() {
    let config = config("127.0.0.1", "[[subsystem.namespace]]\nmemory = \"64MiB\"\n", "")
        .replace("level = \"info\"", "level = \"info,nvmf_target::tcp=debug\"");
    let vm = vm("header_and_data_digests").deadline(Duration::from_secs(240));
    let Some(out) = run(
        "header_and_data_digests",
        vm,
        &config,
        &format!(
            r#"
set -eu
nvmf_target_start target $CONFIG
dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2 -g -G)
echo "digest connections: $(grep 'connection initialized' $(daemon_log target) | grep -c 'hdgst: true, ddgst: true')"
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 16M
echo "digest errors: $(grep -c 'digest error' $(daemon_log target) || true)"
host_disconnect {NQN}
stop_daemon target
echo "digests: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "digest connections: 3");
    assert_stdout_has(&out, "fio bs=4K qd=32: wrote 2048, verified 2048 after writing, 2048 on randread");
    assert_stdout_has(&out, "fio bs=128K qd=32: wrote 128, verified 128 after writing, 128 on randread");
    assert_stdout_has(&out, "digest errors: 0");
    assert_stdout_has(&out, "digests: ok");
}

/// The target reports Traffic Based Keep Alive, so the kernel host (KATO 2 s) sends no Keep Alive while its I/O
/// completes, and the target's timer restarts on that I/O: 6 s of reads leave the association as it was. Then the
/// host vanishes (its veth is deleted under a live association): the target's keep-alive timer expires, the
/// association ends (no controller, no connection left), and a new host connects afresh.
#[test]
fn keep_alive_expiry_when_the_host_vanishes() {
    let config = config("10.78.0.2", "[[subsystem.namespace]]\nmemory = \"16MiB\"\n", "");
    let vm =
        vm("keep_alive_expiry_when_the_host_vanishes").modules(["nvme_tcp", "veth"]).deadline(Duration::from_secs(240));
    let m = |series: &str| format!("$(metric '{series}' 127.0.0.1:9420 tgt)");
    let controllers = m(&format!("nvmf_target_controllers{{subsystem=\"{NQN}\"}}"));
    let connections = m("nvmf_target_connections{transport=\"tcp\"}");
    let expiries = m(&format!("nvmf_target_keep_alive_expiries_total{{subsystem=\"{NQN}\"}}"));
    let keep_alives =
        m(&format!("nvmf_target_commands_total{{subsystem=\"{NQN}\",namespace=\"0\",opcode=\"keep_alive\"}}"));
    let Some(out) = run(
        "keep_alive_expiry_when_the_host_vanishes",
        vm,
        &config,
        &format!(
            r#"
set -eu
link_up() {{
  ip link add vh type veth peer name vt
  ip link set vt netns tgt
  ip addr add 10.78.0.1/24 dev vh
  ip link set vh up
  ip netns exec tgt ip addr add 10.78.0.2/24 dev vt
  ip netns exec tgt ip link set vt up
}}
ip netns add tgt
ip netns exec tgt ip link set lo up
link_up
nvmf_target_start target $CONFIG tgt
dev=$(host_connect tcp 10.78.0.2 4420 {NQN} -i 1 --keep-alive-tmo=2 --ctrl-loss-tmo=600 --reconnect-delay=1)
ctrl=$(ctrl_of {NQN})
echo "first cntlid: $(cat /sys/class/nvme/$ctrl/cntlid)"
echo "before: controllers {controllers} connections {connections}"
dd if=/dev/urandom of=$dev bs=4k count=16 oflag=direct status=none
# While the host lives, its keep-alives hold the association (2.5 × KATO of idle time).
sleep 5
echo "alive: expiries {expiries} controllers {controllers}"
echo "ctratt: $(nvme id-ctrl /dev/$ctrl | awk '$1 == "ctratt" {{ print $3 }}')"
# Idle, the host sends a Keep Alive every KATO/4 (TBKAS); counted from 2 s into the run, once reads flow.
fio --name=tbkas --filename=$dev --ioengine=io_uring --direct=1 --rw=randread --bs=4k --iodepth=4 --time_based \
  --runtime=9 > /dev/null &
fio_pid=$!
sleep 2
ka0={keep_alives}
sleep 6
ka1={keep_alives}
wait $fio_pid
echo "during I/O: keep-alives $((ka1 - ka0)) expiries {expiries} cntlid $(cat /sys/class/nvme/$ctrl/cntlid)"
t0=$SECONDS
ip link del vh
if wait_until 30 grep -q 'keep alive timeout expired' $(daemon_log target); then
  echo "expired after $((SECONDS - t0)) s"
else
  echo "no keep-alive expiry within 30 s"
fi
no_controllers() {{ [ "{controllers}" = 0 ]; }}
wait_until 10 no_controllers || true
echo "after: controllers {controllers} connections {connections} expiries {expiries}"
timeout 30 nvme disconnect -n {NQN} >&2 || true
link_up
dev=$(host_connect tcp 10.78.0.2 4420 {NQN} -i 1)
ctrl=$(ctrl_of {NQN})
echo "second cntlid: $(cat /sys/class/nvme/$ctrl/cntlid)"
dd if=$dev of=/dev/null bs=4k count=16 iflag=direct status=none && echo "second association: reads ok"
echo "again: controllers {controllers}"
host_disconnect {NQN}
stop_daemon target
echo "keep-alive: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "before: controllers 1 connections 2");
    assert_stdout_has(&out, "alive: expiries 0 controllers 1");
    let first = out.stdout.lines().find_map(|l| l.strip_prefix("first cntlid: ")).expect("first cntlid");
    let during = out.stdout.lines().find_map(|l| l.strip_prefix("during I/O: keep-alives ")).expect("I/O phase");
    let (sent, rest) = during.split_once(' ').expect("keep-alive count");
    // Without TBKAS the host sends one every second (KATO/2); it may send one at the start of the run.
    assert!(sent.parse::<u32>().is_ok_and(|n| n <= 1), "Keep Alives during 6 s of I/O: {sent}\n{}", out.report());
    assert_eq!(rest, format!("expiries 0 cntlid {first}"), "the association lived through the I/O\n{}", out.report());
    let expired = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("expired after ")?.strip_suffix(" s")?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the target logged no keep-alive expiry\n{}", out.report()));
    // KATO 2 s; the timer checks at its 1 s granularity, and TCG is slow: well under the host's own timeouts.
    assert!(expired <= 10, "keep-alive expiry took {expired} s\n{}", out.report());
    assert_stdout_has(&out, "after: controllers 0 connections 0 expiries 1");
    assert_stdout_has(&out, "second association: reads ok");
    assert_stdout_has(&out, "again: controllers 1");
    assert_stdout_has(&out, "keep-alive: ok");
}

/// A namespace of the emulated NVMe drive exported through the passthrough backend (`/dev/ng0n1`): fio verify
/// over it, and the data is on the drive (read back through the local block device after disconnecting).
#[test]
fn passthrough_namespace_of_an_nvme_drive() {
    let config = config("127.0.0.1", "[[subsystem.namespace]]\npath = \"/dev/ng0n1\"\n", "");
    let vm = vm("passthrough_namespace_of_an_nvme_drive").nvme_drive(1 << 30).deadline(Duration::from_secs(300));
    let Some(out) = run(
        "passthrough_namespace_of_an_nvme_drive",
        vm,
        &config,
        &format!(
            r#"
set -eu
test -c /dev/ng0n1 || {{ fail "no /dev/ng0n1"; exit 1; }}
echo "drive: $(blockdev --getsize64 /dev/nvme0n1) bytes, $(blockdev --getss /dev/nvme0n1) B blocks"
if ! nvmf_target_start target $CONFIG; then
  if grep -q nvme-generic "$NVMF_TARGET_BIN"; then exit 1; fi
  echo "SKIPPED: the passthrough backend is not in this build of nvmf-target"
  exit 0
fi
dev=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
echo "exported: $(blockdev --getsize64 $dev) bytes, $(blockdev --getss $dev) B blocks"
nvme id-ctrl /dev/$(ctrl_of {NQN}) -o json | jq -r '"passthrough mdts=\(.mdts) vwc=\(.vwc)"'
step fio_rw_verify $dev 4K 32 8M
step fio_rw_verify $dev 128K 32 32M
head -c 1048576 /dev/urandom > /tmp/mib
dd if=/tmp/mib of=$dev bs=1M seek=100 oflag=direct status=none
host_disconnect {NQN}
stop_daemon target
cmp -n 1048576 /tmp/mib <(dd if=/dev/nvme0n1 bs=1M skip=100 count=1 iflag=direct status=none) && echo "on the drive: ok"
echo "passthrough: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    if out.stdout.contains("SKIPPED: the passthrough backend") {
        vm::note("SKIPPED: passthrough_namespace_of_an_nvme_drive: the passthrough backend is not in this build");
        return;
    }
    assert_stdout_has(&out, "exported: 1073741824 bytes");
    assert_stdout_has(&out, "fio bs=4K qd=32: wrote 2048, verified 2048 after writing, 2048 on randread");
    assert_stdout_has(&out, "fio bs=128K qd=32: wrote 256, verified 256 after writing, 256 on randread");
    assert_stdout_has(&out, "on the drive: ok");
    assert_stdout_has(&out, "passthrough: ok");
}

/// SIGHUP re-reads `--config` under a live association: a namespace added to the file appears on the kernel
/// host (the changed-namespace AEN makes it rescan) on the same controller and TCP connections, and serves I/O;
/// an invalid file is rejected with its `file:line` and changes nothing; the namespace removed from the file
/// disappears from the host, while namespace 1's data stays intact throughout.
#[test]
fn reload_adds_and_removes_namespaces_live() {
    let ns1 = "[[subsystem.namespace]]\nnsid = 1\nmemory = \"64MiB\"\n";
    let ns2 = "[[subsystem.namespace]]\nnsid = 2\nmemory = \"32MiB\"\nblock_size = 4096\n";
    let without_ns2 = config("127.0.0.1", ns1, "");
    let with_ns2 = config("127.0.0.1", &format!("{ns1}{ns2}"), "");
    let invalid = with_ns2.replace("block_size = 4096", "block_size = 1000");
    // The heredoc writes the text as is: line numbers in the file are those of the string.
    let invalid_line = invalid.lines().position(|l| l == "block_size = 1000").expect("the invalid key") + 1;
    let vm = vm("reload_adds_and_removes_namespaces_live").deadline(Duration::from_secs(180));
    let Some(out) = run(
        "reload_adds_and_removes_namespaces_live",
        vm,
        &without_ns2,
        &format!(
            r#"
set -eu
cat > /tmp/with-ns2.toml <<'EOF'
{with_ns2}
EOF
cat > /tmp/invalid.toml <<'EOF'
{invalid}
EOF
cp $CONFIG /tmp/without-ns2.toml
nvmf_target_start target $CONFIG
dev1=$(host_connect tcp 127.0.0.1 4420 {NQN} -i 2)
ctrl=$(ctrl_of {NQN})
# The host's ends of the association's TCP connections (admin + 2 I/O queues).
conns() {{ ss -Htn state established '( dport = :4420 )' | awk '{{ print $3 }}' | sort | tr '\n' ' '; }}
active_ns() {{ nvme list-ns /dev/$ctrl | sed -n 's/.*:0x\([0-9a-f]*\)$/\1/p' | tr '\n' ' '; }}
association() {{ echo "ctrl $(ctrl_of {NQN}) cntlid $(cat /sys/class/nvme/$ctrl/cntlid) connections $(conns)"; }}
first=$(association)
echo "before: $first; active namespaces: $(active_ns); block devices: $(namespaces_of {NQN} | tr '\n' ' ')"
head -c 1048576 /dev/urandom > /tmp/d1
dd if=/tmp/d1 of=$dev1 bs=1M oflag=direct status=none

# Namespace 2 is added.
cp /tmp/with-ns2.toml $CONFIG
t0=$SECONDS
echo "reload 1: $(nvmf_target_reload target)"
new_ns() {{ local n; for n in $(namespaces_of {NQN}); do [ "/dev/$n" != "$dev1" ] && [ -b /dev/$n ] && {{ echo "/dev/$n"; return 0; }}; done; return 1; }}
wait_until 15 new_ns > /dev/null || {{ fail "no second namespace within 15 s"; nvme list >&2; exit 1; }}
dev2=$(new_ns)
echo "added: $dev2 after $((SECONDS - t0)) s, nsid $(cat /sys/block/${{dev2#/dev/}}/nsid)"
echo "active namespaces: $(active_ns)"
nvme list > $NVMF_VM_LOGS/nvme-list-added.txt
grep -qw "$dev2" $NVMF_VM_LOGS/nvme-list-added.txt && echo "nvme list shows ns2: yes"
echo "ns2 size: $(blockdev --getsize64 $dev2) logical-block: $(blockdev --getss $dev2)"
[ "$(association)" = "$first" ] && echo "after add: same association"
head -c 1048576 /dev/urandom > /tmp/d2
dd if=/tmp/d2 of=$dev2 bs=1M oflag=direct status=none
cmp -n 1048576 /tmp/d2 $dev2 && echo "ns2 read back: ok"
cmp -n 1048576 /tmp/d1 $dev1 && echo "ns1 after add: ok"

# An invalid file: rejected with its location, the running configuration stays.
cp /tmp/invalid.toml $CONFIG
echo "reload 2: $(nvmf_target_reload target)"
sleep 1
echo "after invalid: active namespaces: $(active_ns); block devices: $(namespaces_of {NQN} | wc -l)"
cmp -n 1048576 /tmp/d1 $dev1 && cmp -n 1048576 /tmp/d2 $dev2 && echo "after invalid: both read back"
head -c 65536 /dev/urandom > /tmp/d3
dd if=/tmp/d3 of=$dev2 bs=64k seek=100 oflag=direct status=none
cmp -n 65536 /tmp/d3 <(dd if=$dev2 bs=64k skip=100 count=1 iflag=direct status=none) && echo "after invalid: ns2 writes"
[ "$(association)" = "$first" ] && echo "after invalid: same association"

# Namespace 2 is removed.
cp /tmp/without-ns2.toml $CONFIG
t0=$SECONDS
echo "reload 3: $(nvmf_target_reload target)"
gone() {{ [ ! -e "$dev2" ]; }}
wait_until 15 gone || {{ fail "$dev2 still there after 15 s"; exit 1; }}
echo "removed: $dev2 after $((SECONDS - t0)) s"
echo "active namespaces: $(active_ns); block devices: $(namespaces_of {NQN} | tr '\n' ' ')"
nvme list > $NVMF_VM_LOGS/nvme-list-removed.txt
grep -qw "$dev2" $NVMF_VM_LOGS/nvme-list-removed.txt || echo "nvme list shows ns2: no"
cmp -n 1048576 /tmp/d1 $dev1 && echo "ns1 after remove: ok"
[ "$(association)" = "$first" ] && echo "after remove: same association"
# The kernel logs "rescanning namespaces" when a Namespace Attribute Changed AEN completes.
echo "AEN rescans: $(dmesg | grep -c "nvme $ctrl: rescanning namespaces" || true)"
echo "host connects: $(dmesg | grep -c 'new ctrl: NQN "{NQN}"') error recoveries: $(dmesg | grep -ciE 'nvme.*(error recovery|reconnect)' || true)"
host_disconnect {NQN}
stop_daemon target
echo "reload: ok"
"#
        ),
    ) else {
        return;
    };
    out.assert_success();
    assert!(out.stdout.contains("before: ctrl nvme"), "{}", out.report());
    assert_stdout_has(&out, "; active namespaces: 1 ; block devices: nvme");
    // Added: namespace 2, 32 MiB of 4 KiB blocks, on the running association.
    assert_stdout_has(&out, "reload 1: ");
    assert!(
        out.stdout.lines().any(|l| l.starts_with("reload 1: ") && l.contains("configuration reloaded")),
        "{}",
        out.report()
    );
    assert!(
        out.stdout.lines().any(|l| l.starts_with("added: /dev/nvme") && l.ends_with(", nsid 2")),
        "{}",
        out.report()
    );
    assert_stdout_has(&out, "active namespaces: 1 2 \n");
    assert_stdout_has(&out, "nvme list shows ns2: yes");
    assert_stdout_has(&out, "ns2 size: 33554432 logical-block: 4096");
    assert_stdout_has(&out, "after add: same association");
    assert_stdout_has(&out, "ns2 read back: ok");
    assert_stdout_has(&out, "ns1 after add: ok");
    // Rejected with the file, the line and the key.
    let rejected = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("reload 2: "))
        .unwrap_or_else(|| panic!("no second reload\n{}", out.report()));
    let location = format!("/tmp/nvmf-target.toml:{invalid_line}:");
    assert!(
        rejected.contains("configuration rejected") && rejected.contains(&location) && rejected.contains("block_size"),
        "expected a rejection at {location} naming block_size: {rejected}\n{}",
        out.report()
    );
    assert_stdout_has(&out, "after invalid: active namespaces: 1 2 ; block devices: 2");
    assert_stdout_has(&out, "after invalid: both read back");
    assert_stdout_has(&out, "after invalid: ns2 writes");
    assert_stdout_has(&out, "after invalid: same association");
    // Removed: gone from the host; namespace 1 untouched.
    assert!(
        out.stdout.lines().any(|l| l.starts_with("reload 3: ") && l.contains("configuration reloaded")),
        "{}",
        out.report()
    );
    assert!(out.stdout.contains("removed: /dev/nvme"), "{}", out.report());
    let remaining = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("active namespaces: 1 ; block devices: "))
        .unwrap_or_else(|| panic!("namespace 1 alone is not active after the removal\n{}", out.report()));
    assert_eq!(remaining.split_whitespace().count(), 1, "block devices left: {remaining}\n{}", out.report());
    assert_stdout_has(&out, "nvme list shows ns2: no");
    assert_stdout_has(&out, "ns1 after remove: ok");
    assert_stdout_has(&out, "after remove: same association");
    assert_stdout_has(&out, "AEN rescans: 2");
    assert_stdout_has(&out, "host connects: 1 error recoveries: 0");
    assert_stdout_has(&out, "reload: ok");
}

/// Two subsystems named as Linux nvmet lets them be named (not in the NQN format), one memory namespace each,
/// on NVMe/TCP (4420) and NVMe/RDMA (4421) listeners of the guest's rxe address.
const TWO_SUBSYSTEMS_TCP_AND_RDMA: &str = r#"
[reactors]
threads = 2
[[listener]]
transport = "tcp"
address = "10.77.0.1"
port = 4420
[[listener]]
transport = "rdma"
address = "10.77.0.1"
port = 4421
[[subsystem]]
nqn = "testnqn"
[[subsystem.namespace]]
memory = "64MiB"
[[subsystem]]
nqn = "storage-subsystem-1"
[[subsystem.namespace]]
memory = "64MiB"
"#;

/// Subsystems named as Linux nvmet lets them be named, not in the NQN format (`testnqn`, `storage-subsystem-1`):
/// served with a warning at start, listed by discovery over both transports, and the kernel host connects to each
/// (one over NVMe/TCP, one over NVMe/RDMA) and verifies its data.
#[test]
fn subsystem_names_linux_accepts() {
    let config = TWO_SUBSYSTEMS_TCP_AND_RDMA;
    let vm = vm("subsystem_names_linux_accepts").rxe(true).modules(["nvme_tcp", "nvme_rdma"]);
    let Some(out) = run(
        "subsystem_names_linux_accepts",
        vm.deadline(Duration::from_secs(300)),
        config,
        r#"
set -eu
nvmf_target_start target $CONFIG
echo "format warnings: $(grep -c 'is not in the NQN format' $NVMF_VM_LOGS/target.log || true)"
for t in "tcp 4420" "rdma 4421"; do
  set -- $t
  modprobe nvme_$1
  timeout 60 nvme discover -t $1 -a $NVMF_RDMA_ADDR -s $2 -o json > /tmp/discovery-$1.json
  echo "discovered over $1: $(jq -r '.records[].subnqn' /tmp/discovery-$1.json | sort -u | tr '\n' ' ')"
done
dev=$(host_connect tcp $NVMF_RDMA_ADDR 4420 testnqn)
fio_rw_verify $dev 4K 16 4M
host_disconnect testnqn
dev=$(host_connect rdma $NVMF_RDMA_ADDR 4421 storage-subsystem-1)
fio_rw_verify $dev 4K 16 4M
host_disconnect storage-subsystem-1
stop_daemon target
"#,
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "format warnings: 2");
    for transport in ["tcp", "rdma"] {
        // The log also lists the discovery subsystem itself (its own entries, as nvmet's).
        let line =
            format!("discovered over {transport}: nqn.2014-08.org.nvmexpress.discovery storage-subsystem-1 testnqn \n");
        assert_stdout_has(&out, &line);
    }
    let verified = "fio bs=4K qd=16: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)";
    assert_eq!(out.stdout.matches(verified).count(), 2, "{}", out.report());
}

/// `nvmf-target list` and `disconnect` with the kernel host connected over NVMe/TCP (two I/O queues) and NVMe/RDMA
/// (one): the listing shows each association with its transport, queues, host and traffic; ending the TCP one by
/// controller ID makes the kernel reconnect with a new controller (and its data still verifies); ending the RDMA
/// one by host NQN, from a host that gives up at once (`--ctrl-loss-tmo 0`), removes the kernel's controller.
#[test]
fn list_and_disconnect_kernel_hosts() {
    let config = TWO_SUBSYSTEMS_TCP_AND_RDMA;
    let vm = vm("list_and_disconnect_kernel_hosts").rxe(true).modules(["nvme_tcp", "nvme_rdma"]);
    let Some(out) = run(
        "list_and_disconnect_kernel_hosts",
        vm.deadline(Duration::from_secs(300)),
        config,
        r#"
set -eu
nvmf_target_start target $CONFIG
hostnqn=$(cat /etc/nvme/hostnqn)
dev=$(host_connect tcp $NVMF_RDMA_ADDR 4420 testnqn -i 2 --reconnect-delay 1)
host_connect rdma $NVMF_RDMA_ADDR 4421 storage-subsystem-1 -i 1 --ctrl-loss-tmo 0 > /dev/null
fio_rw_verify $dev 4K 16 4M
$NVMF_TARGET_BIN list -o json > $NVMF_VM_LOGS/list.json
$NVMF_TARGET_BIN list > $NVMF_VM_LOGS/list.txt
jq -r --arg h "$hostnqn" '.subsystems[] | select(.subtype == "nvm") | .nqn as $n | .controllers[] |
  "listed: \($n) \(.transport) queues=\(.queues | length) ours=\(.hostnqn == $h) written=\(.bytes_written > 0) ready=\(.ready)"' \
  $NVMF_VM_LOGS/list.json
echo "text controllers: $(grep -c '^  controller ' $NVMF_VM_LOGS/list.txt)"
cntlid() { $NVMF_TARGET_BIN list -o json | jq -r --arg n "$1" '.subsystems[] | select(.nqn == $n) | .controllers[0].cntlid // empty'; }
old=$(cntlid testnqn)
$NVMF_TARGET_BIN disconnect --cntlid $old --nqn testnqn
renewed() { local c; c=$(cntlid testnqn); [ -n "$c" ] && [ "$c" != "$old" ] && ctrl_of testnqn > /dev/null; }
if wait_until 60 renewed; then echo "testnqn: reconnected with a new controller"; fi
fio_rw_verify $dev 4K 16 4M
$NVMF_TARGET_BIN disconnect --host "$hostnqn" --nqn storage-subsystem-1
gone() { ! ctrl_of storage-subsystem-1 > /dev/null && [ -z "$(cntlid storage-subsystem-1)" ]; }
if wait_until 60 gone; then echo "storage-subsystem-1: the host gave the controller up"; fi
host_disconnect testnqn
stop_daemon target
echo "disconnects logged: $(grep -c 'disconnect requested on the control socket' $NVMF_VM_LOGS/target.log || true)"
"#,
    ) else {
        return;
    };
    out.assert_success();
    assert_stdout_has(&out, "disconnects logged: 2\n");
    assert_stdout_has(&out, "listed: storage-subsystem-1 rdma queues=2 ours=true written=false ready=true\n");
    assert_stdout_has(&out, "listed: testnqn tcp queues=3 ours=true written=true ready=true\n");
    assert_stdout_has(&out, "text controllers: 2\n");
    assert_stdout_has(&out, "testnqn: reconnected with a new controller\n");
    assert_stdout_has(&out, "storage-subsystem-1: the host gave the controller up\n");
    let verified = "fio bs=4K qd=16: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)";
    assert_eq!(out.stdout.matches(verified).count(), 2, "{}", out.report());
}
