//! Secure channel concatenation with Linux (6.15 and later, here the backports line): DH-HMAC-CHAP on a plaintext
//! admin queue asking for a generated PSK (SC_C 02h), then every queue over TLS keyed by it, identity
//! `NVMe1G01 <hostnqn> <subnqn> <digest>`, both ways:
//!
//! - the kernel host (`nvme connect --dhchap-secret … --concat`, its `tlshd` in network namespace `host`) to our
//!   target (a `tls = "allowed"` listener, the host's `dhchap_key`): fio verifies through it, the kernel's
//!   controller names a generated key, our target counts the plaintext authentication and the TLS connections;
//!   `nvme reset` authenticates again, generates another key and fio verifies again (the reset reconnects from a
//!   kernel worker in the initial network namespace, so a second `tlshd` runs there);
//! - our host (`nvmf-host perf --dhchap-secret … --concat`) to nvmet (a `tls1.3` port with `addr_treq` "not
//!   required", the host's `dhchap_key` and `ffdhe2048`, its `tlshd` here): nvmet's `tlshd` selects the generated
//!   identity and perf writes and reads.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_tls_concat -- --nocapture

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::{Kernel, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-concat";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
const HOSTID: &str = "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
const TARGET_ADDR: &str = "10.99.0.1";
const HOST_ADDR: &str = "10.99.0.2";
/// 32 bytes 0x00..0x1f, not transformed (`DHHC-1:00:`).
const DHCHAP_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

const SCENARIO: &str = r#"
set -eu
say() { local s=$1; shift; echo "$s: $*"; }
netns_link host $TARGET_ADDR $HOST_ADDR
# The kernel host inserts the generated key into .nvme, where its tlshd looks.
tlshd_start tlshd-host host .nvme
tls() { metric "nvmf_target_tls_connections_total{result=\"$1\"}" || echo 0; }
ctrl_of() { local c; for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn)" = "$1" ] && basename $c; done; }
# The description (identity) of the TLS key the kernel's controller $1 uses.
tls_identity() {
  local serial
  serial=$(cat /sys/class/nvme/$1/tls_key 2>/dev/null) || { echo none; return; }
  keyctl13 rdescribe $((16#$serial)) | cut -d';' -f5-
}

# 1. The kernel host to our target.
cat > /tmp/target.toml <<EOF
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
address = "$TARGET_ADDR"
port = 4420
tls = "allowed"
[[subsystem]]
nqn = "$NQN"
[[subsystem.host]]
nqn = "$HOSTNQN"
dhchap_key = "$DHCHAP_KEY"
[[subsystem.namespace]]
memory = "64MiB"
EOF
nvmf_target_start ours /tmp/target.toml
# nvme connect in the host machine's namespace (host_connect_tls's way, without --tls: --concat excludes it).
kernel_connect() { local _NVME_CLI=(ip netns exec host chroot "$D13" nvme); host_connect tcp "$@"; }
dev=$(kernel_connect $TARGET_ADDR 4420 $NQN --hostnqn=$HOSTNQN --hostid=$HOSTID --dhchap-secret=$DHCHAP_KEY \
  --concat 2> /tmp/connect.err) ||
  { cat /tmp/connect.err >&2; fail "the kernel host did not connect with --concat"; exit 1; }
ctrl=$(ctrl_of $NQN)
ident=$(tls_identity $ctrl)
say kernel "identity $ident"
say kernel "$(fio13_rw_verify $dev 4K 8 4M)"
say kernel "secured $(tls secured) plaintext $(tls plaintext) failed $(tls failed)"
say kernel "generated $(grep -c 'generated PSK kept' "$(daemon_log ours)" || true)"
# A reset reconnects from a kernel worker, in this (the initial) network namespace: its handshakes go to a tlshd here.
tlshd_start tlshd-init "" .nvme
nvme13 reset /dev/$ctrl >&2 || true
wait_until 60 grep -qx live /sys/class/nvme/$ctrl/state ||
  { dmesg | tail -20 >&2; fail "no live controller after reset"; }
again=$(tls_identity $ctrl)
[ "$again" != "$ident" ] && [ "$again" != none ] && say kernel "reset: another generated key"
say kernel "after reset: generated $(grep -c 'generated PSK kept' "$(daemon_log ours)" || true)"
say kernel "after reset: $(fio13_rw_verify $dev 4K 8 4M)"
ip netns exec host chroot "$D13" nvme disconnect -n $NQN >&2
stop_daemon ours

# 2. Our host to nvmet.
nvmet_subsys_nullblk $NQN 64
nvmet_allow_host $NQN $HOSTNQN
echo "$DHCHAP_KEY" > $NVMET/hosts/$HOSTNQN/dhchap_key
echo "hmac(sha256)" > $NVMET/hosts/$HOSTNQN/dhchap_hash
echo ffdhe2048 > $NVMET/hosts/$HOSTNQN/dhchap_dhgroup
nvmet_tls_port 1 $TARGET_ADDR 4420
echo "not required" > $NVMET/ports/1/addr_treq
ln -s $NVMET/subsystems/$NQN $NVMET/ports/1/subsystems/$NQN
say port "addr_tsas $(cat $NVMET/ports/1/addr_tsas), addr_treq $(cat $NVMET/ports/1/addr_treq)"
TLSHD_TLS_DEBUG=4 tlshd_start tlshd-target
for w in randwrite randread; do
  timeout 120 ip netns exec host "$NVMF_HOST_BIN" perf -t tcp -a $TARGET_ADDR -s 4420 -n $NQN --hostnqn $HOSTNQN \
    --hostid $HOSTID --dhchap-secret $DHCHAP_KEY --concat -c 1 -q 4 -o 4096 -w $w -T 2 > /tmp/perf.out 2>&1 ||
    { cat /tmp/perf.out >&2; fail "our host: perf $w with --concat"; exit 1; }
  say ours "$w $(sed -n 's/^Total *: *\([0-9.]*\).*/\1/p' /tmp/perf.out) IOPS"
done
ids=$(grep -aoE 'NVMe1G0[12] [^ ]+ [^ ]+' "$(daemon_log tlshd-target)" | sort -u | tr '\n' ' ')
say nvmet "tlshd identities: $ids"
# Linux 7.x: "Created nvm controller N for subsystem S for NQN H, DH-HMAC-CHAP." (the plaintext authentication),
# then "…, TLS." (the association over TLS with the generated key).
say nvmet "controllers: $(dmesg | grep -cE 'nvmet: [Cc]reat(ed|ing) nvm controller' || true)"
say nvmet "TLS controllers: $(dmesg | grep -E 'nvmet: [Cc]reat(ed|ing) nvm controller' | grep -c 'TLS\.' || true)"
"#;

#[test]
fn secure_channel_concatenation_with_the_kernel() {
    let name = "secure_channel_concatenation_with_the_kernel";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .debian13_userspace()
        .kernel(Kernel::at_least(6, 15))
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "nvme_tcp", "null_blk", "tls", "veth"])
        .env("NQN", NQN)
        .env("HOSTNQN", HOSTNQN)
        .env("HOSTID", HOSTID)
        .env("TARGET_ADDR", TARGET_ADDR)
        .env("HOST_ADDR", HOST_ADDR)
        .env("DHCHAP_KEY", DHCHAP_KEY)
        .deadline(Duration::from_secs(900))
        .with_our_daemons();
    let Some(out) = vm.run_or_skip(SCENARIO) else { return };
    println!("{}", out.report());
    out.assert_success();
    out.assert_lines(&[
        &format!("kernel: identity NVMe1G01 {HOSTNQN} {NQN} "),
        "kernel: fio bs=4K qd=8: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)",
        "kernel: generated 1\n",
        "kernel: reset: another generated key",
        "kernel: after reset: generated 2\n",
        "kernel: after reset: fio bs=4K qd=8: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)",
        "ours: randwrite ",
        "ours: randread ",
        "nvmet: TLS controllers: 2\n",
    ]);
    let line = out.stdout.lines().find(|l| l.starts_with("kernel: secured ")).unwrap_or_default();
    let count = |label: &str| -> u64 {
        let mut words = line.split_whitespace();
        words.position(|w| w == label).and_then(|_| words.next()).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    // The authentication in the clear, then the admin queue and the I/O queues over TLS.
    assert_eq!(count("plaintext"), 1, "{line}");
    assert!(count("secured") >= 2, "{line}");
    assert_eq!(count("failed"), 0, "{line}");
}
