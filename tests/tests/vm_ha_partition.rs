//! High availability across a real partition: three guests on links (`nvmf_tests::vm::Lab`, Linux 7.x), a host
//! node linked to two target nodes `a` and `b` (two fabrics, as multipath deployments have). Each target node runs
//! our `nvmf-target` exporting one subsystem from one shared file (a host folder shared into both: same
//! identifiers, serial and namespace IDs, CNTLIDs 1-99 on `a` and 100-199 on `b`), `a`'s listener optimized and
//! `b`'s non-optimized. The host connects through both links and runs fio randwrite with crc32c verification on
//! the one multipath device while:
//!
//! - (a) `a`'s link is cut (at `a`'s end: the host sees only silence): the host gives up on `a`'s path at its
//!   keep-alive timeout and the I/O goes on through `b`, which is then made optimized, as a cluster manager would;
//! - (b) the link comes back: the host reconnects `a`'s path (reconnect delay 1 s), `b` is set back to
//!   non-optimized, and the I/O returns to `a` (its controllers count commands, `b`'s nearly stop);
//! - (c) node `b`, the non-optimized one, is killed (its QEMU ends: a power loss): the I/O goes on through `a`.
//!
//! For the kernel host (`nvme connect`, native multipath) and for ours (`nvmf-host run`, two paths of one ublk
//! export). And as a gateway group on Ceph RBD (both hosts): the host node also runs a one-node Ceph cluster
//! (`tests/ceph/cluster.sh`, on an address of its own both target nodes route to through their link, watches
//! timing out after 5 s), and each target node exports the same RBD image instead of the shared file, with one
//! ANA group per node (`ana_group_states`); the image's exclusive lock moves with the writes, and node `a`, fenced
//! by the cluster while cut off (`b` broke its lock), reopens the image through a new client when it returns.
//! fio must end without an error (no I/O error, every block read back verified) and the kernel must log no
//! I/O error; the longest pause of each case (an interval without a completed I/O, from fio's per-I/O completion
//! log) is printed, not bounded: under TCG it depends on the machine's load.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_ha_partition -- --nocapture --include-ignored
//!
//! `NVMF_HA_KATO=SECONDS` connects the kernel host with `nvme connect -k SECONDS` (nvme-cli's default is 5 s): its
//! keep-alive timeout bounds how long it takes to give up on the cut path in case (a).

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, KernelLine, Lab, RunningLab, Transcript, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-ha-partition";

/// A target node's configuration: `{ADDR}`, `{STATE}` (group 1's, the namespace's), `{OTHER}` (group 2's), `{MIN}`,
/// `{MAX}`, `{BACKING}` are substituted.
const NODE_CONFIG: &str = r#"
[logging]
level = "info"
[[listener]]
address = "{ADDR}"
port = 4420
ana_state = "{STATE}"
ana_group_states = { 2 = "{OTHER}" }
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-ha-partition"
serial = "NVMFHAP001"
cntlid_min = {MIN}
cntlid_max = {MAX}
[[subsystem.namespace]]
{BACKING}
uuid = "7c2e5f40-ad31-4e8c-9f0f-4b3c5d6e7f80"
nguid = "7c2e5f40ad314e8c9f0f4b3c5d6e7f80"
"#;

/// A target node's helpers (`/tmp/node-lib.sh`): its ANA state, and the read and write commands its controllers
/// completed.
const NODE_LIB: &str = r#"
T() { "$NVMF_TARGET_BIN" "$@" --control /tmp/node.sock; }
io_of() { T list -o json | jq '[.subsystems[].controllers[]? | .read_commands + .write_commands] | add // 0'; }
ana() { T ana-state --listener tcp://$(link_addr host):4420 --state $1; }
"#;

/// The host node's helpers (`/tmp/ha-lib.sh`), after the flavor's `connect_paths` and `path_states`: `paths` is
/// "a STATE ANA;b STATE ANA;" (STATE live or not), `pause FROM TO LABEL` guest-lib's `fio_pause` between two marks.
const HOST_LIB: &str = r#"
mark() { now_ms > /tmp/mark-$1; }
paths() { path_states | sort | tr '\n' ';'; }
_paths_are() { [ "$(paths)" = "$1" ]; }
_path_down() { [[ $(paths) != *"$1 live "* ]]; }
_path_live() { [[ $(paths) == *"$1 live "* ]]; }
_optimized() { [[ $(paths) == *"$1 live optimized;"* ]]; }
pause() { fio_pause $(cat /tmp/mark-$1) $(cat /tmp/mark-$2) "$3"; }
"#;

/// The kernel host: `nvme connect` through both links (reconnect delay 1 s), the multipath head's device; each
/// path's controller state and ANA state from sysfs.
const KERNEL_HOST: &str = r#"
connect_paths() {
  modprobe nvme_tcp
  dev=$(host_connect tcp $A_ADDR 4420 {NQN} -c 1 {KATO})
  dev2=$(host_connect tcp $B_ADDR 4420 {NQN} -c 1 {KATO})
  echo "one device: $([ "$dev" = "$dev2" ] && echo yes || echo "no ($dev, $dev2)")"
  echo $dev > /tmp/dev
}
# Builtins only: the waits call it in a loop under fio's load.
path_states() {
  local p c addr ana state n dev
  read -r dev < /tmp/dev
  n=${dev##*n}
  for p in /sys/class/nvme/nvme*/nvme*c*n$n; do
    [ -e "$p/ana_state" ] || continue
    c=${p%/*}
    read -r addr < $c/address
    read -r ana < $p/ana_state
    read -r state < $c/state
    [[ $addr == *"traddr=$A_ADDR,"* ]] && echo "a $state $ana"
    [[ $addr == *"traddr=$B_ADDR,"* ]] && echo "b $state $ana"
  done
}
disconnect_paths() { host_disconnect {NQN}; }
"#;

/// Our host: the `nvmf-host run` daemon, both paths joined in one ublk export; each path's state from `list`.
const OUR_HOST: &str = r#"
H() { "$NVMF_HOST_BIN" "$@" --control /tmp/host/control.sock; }
connect_paths() {
  mkdir -p /tmp/host
  cat > /tmp/host/host.toml <<'HOST_TOML'
[host]
state_dir = "/tmp/host/state"
control_socket = "/tmp/host/control.sock"
[logging]
level = "info"
HOST_TOML
  start_daemon host "$NVMF_HOST_BIN" run --config /tmp/host/host.toml
  daemon_ready host 'nvmf_host::daemon: ready'
  echo "first: $(H connect -t tcp -a $A_ADDR -s 4420 -n {NQN} -i 1 -c 1 --ublk | tr '\n' ' ')"
  echo "second: $(H connect -t tcp -a $B_ADDR -s 4420 -n {NQN} -i 1 -c 1 --ublk | tr '\n' ' ')"
  H list -o json | jq -r '.controllers[0].exports[0].address' > /tmp/dev
  local n
  n=$(ls /dev/ublkb* | wc -w)
  echo "one device: $([ "$n" = 1 ] && echo yes || echo "no ($n)")"
}
# The export's paths: nvmf0 (connected first) is a's, nvmf1 b's.
path_states() {
  H list -o json | jq -r '.controllers[0].exports[0].paths[] | "\(.name) \(.state) \(.ana_state)"' |
    sed 's/^nvmf0 /a /; s/^nvmf1 /b /'
}
disconnect_paths() { H disconnect -n {NQN} >&2; stop_daemon host; }
"#;

/// fio on the multipath device, every completion logged with its Unix-epoch time, until /tmp/fio-stop appears (its
/// trigger file: fio then ends as at the end of its runtime, results and all).
const FIO: &str = r#"
. /tmp/ha-lib.sh
read -r dev < /tmp/dev
out=$NVMF_VM_LOGS/fio-ha
timeout 900 fio --trigger-file=/tmp/fio-stop --trigger=true --name=ha --filename=$dev --ioengine=libaio --direct=1 \
  --rw=randwrite --bs=4k --iodepth=16 --size=64M --time_based --runtime=800 --verify=crc32c --verify_backlog=256 \
  --verify_fatal=1 --do_verify=1 \
  --write_lat_log=/tmp/ha --log_unix_epoch=1 --output-format=json --output=$out.json > $out.log 2>&1
echo "fio rc=$?"
jq -r '.jobs[0] | "fio error=\(.error) writes=\(.write.total_ios) verify-reads=\(.read.total_ios)"' $out.json
"#;

/// Which host runs on the host node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Kernel,
    Ours,
}

/// What the namespace is on both target nodes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// One file shared into both.
    SharedFile,
    /// One RBD image, on the host node's Ceph cluster.
    Rbd,
}

/// The Ceph cluster's address on the host node (a dummy interface); the target nodes route to it via their link.
const CEPH_ADDR: &str = "10.99.0.1";

/// Not in CI's run: CI's time goes to the RBD gateway-group variant below, the same three cases through the kernel
/// host with a file system, a fence and a resize besides; this one is the same cases on a shared file.
#[test]
#[ignore = "about 4 min; CI runs the RBD gateway-group variant; run with --ignored"]
fn kernel_host_rides_out_a_partition_and_a_node_loss() {
    scenario("kernel_host_rides_out_a_partition", Flavor::Kernel, Backing::SharedFile);
}

#[test]
fn kernel_host_rides_out_a_partition_of_an_rbd_gateway_group() {
    scenario("kernel_host_rides_out_a_partition_rbd", Flavor::Kernel, Backing::Rbd);
}

/// Not in CI's run (`cargo test -- --ignored` runs it): CI's time goes to the kernel host's RBD variant; ours is
/// the same scenario through `nvmf-host run` and a ublk export.
#[test]
#[ignore = "about 4.5 min; run with --ignored (CI runs the kernel host's)"]
fn our_host_rides_out_a_partition_and_a_node_loss() {
    scenario("our_host_rides_out_a_partition", Flavor::Ours, Backing::SharedFile);
}

/// The RBD gateway group through our host (not in CI's run, as above). The resize is the kernel host's part only:
/// a ublk export keeps the size it was created with.
#[test]
#[ignore = "about 7 min; run with --ignored (CI runs the kernel host's)"]
fn our_host_rides_out_a_partition_of_an_rbd_gateway_group() {
    scenario("our_host_rides_out_a_partition_rbd", Flavor::Ours, Backing::Rbd);
}

fn scenario(name: &str, flavor: Flavor, backing: Backing) {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let logs = tmp.join("vm-logs").join(name);
    let shared = tmp.join("vm-shared").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let _ = std::fs::remove_dir_all(&shared);
    std::fs::create_dir_all(&shared).expect("shared folder");
    std::fs::File::create(shared.join("shared.img"))
        .and_then(|f| f.set_len(128 << 20))
        .expect("the shared namespace file");
    let mut target_node = Vm::new("target").cpus(1).memory_mib(1536).share_uncached(&shared);
    let memory = if backing == Backing::Rbd { 3072 } else { 2048 };
    let mut host_node = Vm::new("host").cpus(1).memory_mib(memory);
    host_node = match flavor {
        Flavor::Kernel => host_node.modules(["nvme_tcp"]),
        Flavor::Ours => host_node.modules(["ublk_drv"]),
    };
    if vm::enabled().is_ok() {
        let target = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
        target_node = target_node.env("NVMF_TARGET_BIN", target.to_string_lossy());
        if let Flavor::Ours = flavor {
            let host = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                .unwrap_or_else(|e| panic!("nvmf-host binary: {e}"));
            host_node = host_node.env("NVMF_HOST_BIN", host.to_string_lossy());
        }
    }
    let lab = Lab::new(name)
        .kernel(KernelLine::Backports)
        .node("host", host_node)
        .node("a", target_node.clone())
        .node("b", target_node)
        .link("host", "a")
        .link("host", "b")
        .logs(&logs)
        .deadline(Duration::from_secs(900));
    let started = Instant::now();
    let Some(lab) = lab.start_or_skip() else { return };
    let out = run_scenario(&lab, flavor, backing, &shared);
    vm::note(&format!(
        "{name}: kernel {}, scenario took {:.1} s",
        lab.kernel_release(),
        started.elapsed().as_secs_f64()
    ));
    check(name, &out);
    if backing == Backing::Rbd {
        out.assert_lines(&[
            "fsck clean\n",
            "file read back after a remount\n",
            "the blocks are in the image\n",
            "node a reopened the image: 1\n",
        ]);
        if flavor == Flavor::Kernel {
            out.assert_lines(&["resize seen: 192 MiB\n"]);
        }
        if let Some(up) = out.stdout.lines().find(|l| l.starts_with("ceph cluster up in")) {
            vm::note(&format!("{name}: {up}"));
        }
    }
}

/// Every line the scenario printed, node by node and step by step, as one output to check.
fn run_scenario(lab: &RunningLab, flavor: Flavor, backing: Backing, shared: &std::path::Path) -> VmOutput {
    let (a_addr, b_addr) = (lab.addr("a", "host"), lab.addr("b", "host"));
    let started = Instant::now();
    let mut transcript = Transcript::default();
    let (namespace, ceph_files) = match backing {
        Backing::SharedFile => (format!("path = \"{}/shared.img\"", shared.display()), String::new()),
        Backing::Rbd => {
            let (line, files) = start_ceph(lab, &mut transcript);
            (line, files)
        }
    };
    for (node, state, other, min, max) in
        [("a", "optimized", "non-optimized", "1", "99"), ("b", "non-optimized", "optimized", "100", "199")]
    {
        let config = NODE_CONFIG
            .replace("{ADDR}", &lab.addr(node, "host"))
            .replace("{STATE}", state)
            .replace("{OTHER}", other)
            .replace("{MIN}", min)
            .replace("{MAX}", max)
            .replace("{BACKING}", &namespace);
        transcript.step(lab.run(
            node,
            &format!(
                "set -eu\n{ceph_files}\ncat > /tmp/node.toml <<'EOF'\n{config}\nEOF\ncat > /tmp/node-lib.sh <<'EOF'\n{NODE_LIB}\nEOF
start_daemon node timeout 900 \"$NVMF_TARGET_BIN\" --config /tmp/node.toml --control /tmp/node.sock
daemon_ready node 'nvmf-target: ready' 120"
            ),
        ));
    }
    let host_lib = match flavor {
        Flavor::Kernel => KERNEL_HOST,
        Flavor::Ours => OUR_HOST,
    };
    // NVMF_HA_KATO=SECONDS: the kernel host's keep-alive timeout (`nvme connect -k`; default nvme-cli's 5 s), which
    // bounds how long it takes to give up on a cut path.
    let kato = std::env::var("NVMF_HA_KATO").ok().and_then(|k| k.parse::<u32>().ok()).map(|k| format!("-k {k}"));
    let host_lib = host_lib.replace("{NQN}", NQN).replace("{KATO}", kato.as_deref().unwrap_or(""));
    let host_lib = format!("A_ADDR={a_addr}\nB_ADDR={b_addr}\n{host_lib}{HOST_LIB}");
    let on_host = |script: &str| format!("set -eu\n. /tmp/ha-lib.sh\n{script}");
    transcript.step(lab.run(
        "host",
        &format!(
            "set -eu\ncat > /tmp/ha-lib.sh <<'EOF'\n{host_lib}\nEOF\n. /tmp/ha-lib.sh
connect_paths
wait_until 20 _paths_are 'a live optimized;b live non-optimized;' || true
echo \"paths: $(paths)\""
        ),
    ));
    let count = |node: &str| -> u64 {
        let out = lab.run(node, ". /tmp/node-lib.sh; io_of");
        out.stdout.trim().parse().unwrap_or_else(|_| panic!("{node}: no I/O count\n{}", out.report()))
    };
    // The I/O each target node completed over `secs` seconds (a dead node: 0).
    let delta = |label: &str, nodes: &[&str], secs: u64, t: &mut Transcript| {
        let before: Vec<u64> = nodes.iter().map(|n| count(n)).collect();
        thread::sleep(Duration::from_secs(secs));
        let after: Vec<u64> = nodes.iter().map(|n| count(n)).collect();
        let parts: Vec<String> =
            nodes.iter().zip(before.iter().zip(&after)).map(|(n, (b, a))| format!("{n} +{}", a - b)).collect();
        t.line(format!("{label} I/O: {}", parts.join(" ")));
    };

    if backing == Backing::Rbd {
        // As a user would first: a file system on the image, through the gateways.
        transcript.step(lab.run("host", &on_host(RBD_FILE_SYSTEM)));
    }
    transcript.step(lab.run("host", &on_host("mark start")));
    let fio = lab.spawn("host", FIO);
    thread::sleep(Duration::from_secs(10));
    delta("steady", &["a", "b"], 4, &mut transcript);

    // (a) The optimized node's link is cut; the host fails over to b, which is made optimized.
    transcript.step(lab.run("host", &on_host("mark a")));
    lab.cut("a", "host").expect("cut a's link");
    transcript.step(lab.run(
        "host",
        &on_host(
            "wait_until 60 _path_down a && echo \"host gave up on a after $(( $(now_ms) - $(cat /tmp/mark-a) )) ms\"
             echo \"paths after the cut: $(paths)\"",
        ),
    ));
    transcript.step(lab.run("b", ". /tmp/node-lib.sh; ana optimized"));
    transcript.step(
        lab.run("host", &on_host("wait_until 20 _optimized b || true; echo \"paths after the failover: $(paths)\"")),
    );
    delta("case (a)", &["b"], 5, &mut transcript);

    // (b) The link comes back: a's path reconnects, b goes back to non-optimized, the I/O returns to a.
    transcript.step(lab.run("host", &on_host("mark b")));
    lab.restore("a", "host").expect("restore a's link");
    transcript.step(lab.run(
        "host",
        &on_host(
            "wait_until 90 _path_live a && echo \"host reconnected a after $(( $(now_ms) - $(cat /tmp/mark-b) )) ms\"",
        ),
    ));
    transcript.step(lab.run("b", ". /tmp/node-lib.sh; ana non-optimized"));
    transcript.step(lab.run(
        "host",
        &on_host(
            "wait_until 30 _paths_are 'a live optimized;b live non-optimized;' || true
             echo \"paths after the return: $(paths)\"",
        ),
    ));
    thread::sleep(Duration::from_secs(1));
    if backing == Backing::Rbd {
        // a's first commands meet its fenced client (answered with a path status, retried through b) until it has
        // reopened the image and taken the lock back from b: measure once a completes I/O again.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut before = count("a");
        loop {
            thread::sleep(Duration::from_secs(2));
            let now = count("a");
            if now > before || Instant::now() > deadline {
                break;
            }
            before = now;
        }
    }
    delta("case (b)", &["a", "b"], 5, &mut transcript);

    // (c) The non-optimized node dies.
    transcript.step(lab.run("host", &on_host("mark c")));
    lab.kill("b");
    transcript
        .step(lab.run("host", &on_host("wait_until 60 _path_down b || true; echo \"paths after b's loss: $(paths)\"")));
    delta("case (c)", &["a"], 5, &mut transcript);
    transcript.line(format!("fio still running after the cases: {}", if fio_running(lab) { "yes" } else { "no" }));
    transcript.step(lab.run("host", "touch /tmp/fio-stop"));

    transcript.step(fio.wait());
    transcript.step(lab.run(
        "host",
        &on_host(&format!(
            "mark end
             fio_completions /tmp/ha_clat.1.log
             pause start a 'before the cut'
             pause a b 'case (a)'
             pause b c 'case (b)'
             pause c end 'case (c)'
             echo \"host I/O errors: $(dmesg | grep -c 'I/O error' || true)\"
             {resize}
             disconnect_paths",
            resize = if backing == Backing::Rbd && flavor == Flavor::Kernel { RBD_RESIZE } else { "" }
        )),
    ));
    if backing == Backing::Rbd {
        // a was cut off while b broke its lock: the cluster fenced a's client, and a reopened the image.
        transcript.step(lab.run(
            "a",
            "echo \"node a reopened the image: $(grep -c 'RBD image reopened through a new client' $(daemon_log node))\"",
        ));
    }
    // Closing an RBD image releases its lock and tells the image's other watchers, b's among them until its
    // watch times out (5 s here): a's shutdown may take that long.
    transcript.step(lab.run("a", "stop_daemon node 20 && echo 'node a stopped cleanly'"));
    transcript.into_output("ha partition", lab, started.elapsed())
}

/// The host node's Ceph cluster on [`CEPH_ADDR`] and the image; the namespace line of the target nodes'
/// configuration, and the script that gives a target node the route, the configuration file and the keyring.
fn start_ceph(lab: &RunningLab, transcript: &mut Transcript) -> (String, String) {
    let cluster = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ceph/cluster.sh");
    transcript.step(lab.run(
        "host",
        &format!(
            "set -eu
             ip link add ceph0 type dummy && ip addr add {CEPH_ADDR}/32 dev ceph0 && ip link set ceph0 up
             start=$(now_ms)
             CEPH_ADDR={CEPH_ADDR} CEPH_WATCH_TIMEOUT=5 CEPH_MEMSTORE_BYTES=$((768 << 20)) {} start /tmp/ceph >/dev/null
             echo \"ceph cluster up in $(( $(now_ms) - start )) ms\"
             rbd -c /tmp/ceph/ceph.conf create --size 128M rbd/shared",
            cluster.display()
        ),
    ));
    let files = lab.run("host", "cat /tmp/ceph/ceph.conf; echo '--- keyring'; cat /tmp/ceph/keyring");
    let (conf, keyring) = files.stdout.split_once("--- keyring\n").unwrap_or_default();
    let script = format!(
        "ip route add {CEPH_ADDR}/32 via $(node_addr host)
mkdir -p /tmp/ceph
cat > /tmp/ceph/ceph.conf <<'CEPH'\n{conf}CEPH
cat > /tmp/ceph/keyring <<'CEPH'\n{keyring}CEPH
chmod 600 /tmp/ceph/keyring"
    );
    transcript.step(files);
    ("rbd = \"rbd/shared\"\nceph_conf = \"/tmp/ceph/ceph.conf\"\nana_group = 1".to_owned(), script)
}

/// On the multipath device of the RBD image: a file system, a file read back after a remount, fsck clean.
const RBD_FILE_SYSTEM: &str = r#"
read -r dev < /tmp/dev
mkfs.ext4 -q $dev
mkdir -p /mnt/rbd && mount $dev /mnt/rbd
head -c 16M /dev/urandom > /tmp/data && cp /tmp/data /mnt/rbd/data && sync
umount /mnt/rbd
fsck.ext4 -fn $dev > /dev/null && echo 'fsck clean'
mount $dev /mnt/rbd
cmp /tmp/data /mnt/rbd/data && echo 'file read back after a remount'
umount /mnt/rbd
used=$(rbd -c /tmp/ceph/ceph.conf du --format json rbd/shared | jq '.images[0].used_size')
[ "$used" -ge $((16 << 20)) ] && echo 'the blocks are in the image'
"#;

/// `rbd resize` of the image reaches the kernel host as the device's new size (through node a, the one alive).
const RBD_RESIZE: &str = r#"read -r dev < /tmp/dev
             rbd -c /tmp/ceph/ceph.conf resize --size 192M rbd/shared > /dev/null 2>&1
             _resized() { [ $(cat /sys/block/${dev#/dev/}/size) -eq $((192 << 11)) ]; }
             wait_until 30 _resized && echo 'resize seen: 192 MiB'"#;

/// Whether fio still runs on the host node.
fn fio_running(lab: &RunningLab) -> bool {
    lab.run("host", "pgrep -x fio >/dev/null && echo yes || echo no").stdout.trim() == "yes"
}

fn check(name: &str, out: &VmOutput) {
    out.assert_lines(&[
        "one device: yes\n",
        "paths: a live optimized;b live non-optimized;\n",
        "host gave up on a after ",
        "host reconnected a after ",
        "paths after the return: a live optimized;b live non-optimized;\n",
        "fio still running after the cases: yes\n",
        "fio rc=0\n",
        "fio error=0 ",
        "host I/O errors: 0\n",
        "node a stopped cleanly",
    ]);
    let line = |prefix: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", out.report()))
    };
    let counts = |prefix: &str| -> Vec<u64> {
        line(prefix).split_whitespace().filter_map(|w| w.strip_prefix('+')?.parse().ok()).collect()
    };
    let steady = counts("steady I/O: ");
    assert!(steady[0] > 0 && steady[1] * 10 <= steady[0], "steady: the optimized node a takes the I/O: {steady:?}");
    let after_cut = line("paths after the cut: ");
    assert!(!after_cut.contains("a live") && after_cut.contains("b live"), "{after_cut}");
    let failover = line("paths after the failover: ");
    assert!(failover.contains("b live optimized;"), "{failover}");
    let a = counts("case (a) I/O: ");
    assert!(a[0] > 0, "(a): node b completed no I/O while a was cut off: {a:?}");
    let b = counts("case (b) I/O: ");
    assert!(b[0] > 0 && b[1] * 10 <= b[0], "(b): the I/O did not return to node a: {b:?}");
    let lost = line("paths after b's loss: ");
    assert!(lost.contains("a live optimized;") && !lost.contains("b live"), "{lost}");
    let c = counts("case (c) I/O: ");
    assert!(c[0] > 0, "(c): node a completed no I/O after b's loss: {c:?}");
    for case in ["before the cut", "case (a)", "case (b)", "case (c)"] {
        let pause = line(&format!("pause {case}: "));
        assert!(!pause.ends_with("; 0 I/Os completed in it)"), "no I/O completed in {case}: {pause}");
        vm::note(&format!("{name}: {pause}"));
    }
    for prefix in ["host gave up on a after ", "host reconnected a after "] {
        vm::note(&format!("{name}: {}", line(prefix)));
    }
}
