//! Our target's in-band authentication (DH-HMAC-CHAP) with the Linux 6.12 kernel host (`nvme connect
//! --dhchap-secret … [--dhchap-ctrl-secret …]`): three hosts with keys in `[[subsystem.host]]`, over NVMe/TCP and
//! NVMe/RDMA (Soft-RoCE), I/O read back after authentication, refusals, and re-authentication under I/O after a key
//! rotation (reload, then the controller's `dhchap_secret` rewritten in sysfs); `[discovery] auth_required`: a
//! discovery controller created with `dhchap_secret` authenticates and reads the log, without a key it is refused.
//!
//! | host | hash, group | keys |
//! |---|---|---|
//! | H1 | hmac(sha256), null | host key (`DHHC-1:00:`), one way; rotated under fio |
//! | H2 | hmac(sha384), ffdhe2048 | host key transformed with SHA-384 (`DHHC-1:02:`) and a controller key: both ways, TCP and RDMA |
//! | H3 | hmac(sha512), ffdhe4096 | host key transformed with SHA-512 (`DHHC-1:03:`) and a controller key: both ways |
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`); logs (the daemon's, fio's, dmesg)
//! in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_auth -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-auth-target";
const H1: &str = "nqn.2024-01.io.nvmf-rs:vm-host-sha256";
const H2: &str = "nqn.2024-01.io.nvmf-rs:vm-host-sha384";
const H3: &str = "nqn.2024-01.io.nvmf-rs:vm-host-sha512";
const K1: &str = "DHHC-1:00:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOeXryU:";
/// H1's key after the rotation.
const K1B: &str = "DHHC-1:00:lpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLUKJ8sL:";
const K2: &str = "DHHC-1:02:CgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5iJSlyA==:";
const C2: &str = "DHHC-1:00:PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWlt83S2n:";
const K3: &str =
    "DHHC-1:03:RkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhaAieDI=:";
const C3: &str = "DHHC-1:00:yMnKy8zNzs/Q0dLT1NXW19jZ2tvc3d7f4OHi4+Tl5ufLkDyH:";

fn config() -> String {
    format!(
        r#"
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[logging]
level = "info"
[discovery]
auth_required = true
[[listener]]
transport = "tcp"
address = "10.77.0.1"
port = 4420
[[listener]]
transport = "rdma"
address = "10.77.0.1"
port = 4421
[[subsystem]]
nqn = "{NQN}"
[[subsystem.host]]
nqn = "{H1}"
dhchap_key = "{K1}"
dhchap_hashes = ["sha256"]
dhchap_dhgroups = ["null"]
[[subsystem.host]]
nqn = "{H2}"
dhchap_key = "{K2}"
dhchap_ctrl_key = "{C2}"
dhchap_hashes = ["hmac(sha384)"]
dhchap_dhgroups = ["ffdhe2048"]
[[subsystem.host]]
nqn = "{H3}"
dhchap_key = "{K3}"
dhchap_ctrl_key = "{C3}"
dhchap_hashes = ["sha512"]
dhchap_dhgroups = ["ffdhe4096"]
[[subsystem.namespace]]
memory = "64MiB"
"#
    )
}

/// Everything in one guest (a boot under TCG costs more than the scenario's steps): see the module docs.
#[test]
fn kernel_host_authenticates_to_our_target() {
    let name = "kernel_host_authenticates_to_our_target";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .logs(logs)
        .rxe(true)
        .modules(["nvme_tcp", "nvme_rdma"])
        .cpus(2)
        .deadline(Duration::from_secs(900));
    let vm = match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
            vm.env("NVMF_TARGET_BIN", bin.to_string_lossy())
        }
        Err(_) => vm,
    };
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
{config}
EOF
A=$NVMF_RDMA_ADDR
nvmf_target_start target $CONFIG
head -c 1048576 /dev/urandom > /tmp/pattern
# rw DEV MIB: 1 MiB written at MIB MiB reads back.
rw() {{
  dd if=/tmp/pattern of="$1" bs=1M seek="$2" oflag=direct status=none
  dd if="$1" of=/tmp/back bs=1M skip="$2" count=1 iflag=direct status=none
  cmp /tmp/pattern /tmp/back
}}
successes() {{ metric "nvmf_target_auth_total{{result=\"success\",hash=\"$1\",dhgroup=\"$2\"}}" || echo 0; }}

# H1: SHA-256, no DH group, one way.
dev=$(host_connect tcp $A 4420 {NQN} --hostnqn {H1} --dhchap-secret '{K1}' -i 2)
rw "$dev" 1
echo "h1 tcp: ok, $(successes 'hmac(sha256)' null) transactions"
host_disconnect {NQN}

# H2: SHA-384 + ffdhe2048, both ways, over TCP and RDMA.
for t in "tcp 4420" "rdma 4421"; do
  set -- $t
  dev=$(host_connect $1 $A $2 {NQN} --hostnqn {H2} --dhchap-secret '{K2}' --dhchap-ctrl-secret '{C2}' -i 1)
  rw "$dev" 2
  echo "h2 $1: ok, $(successes 'hmac(sha384)' ffdhe2048) transactions"
  host_disconnect {NQN}
done

# H3: SHA-512 + ffdhe4096, both ways.
dev=$(host_connect tcp $A 4420 {NQN} --hostnqn {H3} --dhchap-secret '{K3}' --dhchap-ctrl-secret '{C3}' -i 1)
rw "$dev" 3
echo "h3 tcp: ok, $(successes 'hmac(sha512)' ffdhe4096) transactions"
host_disconnect {NQN}

# Refusals: another host's key; a controller key the target does not hold; no key at all.
refused() {{
  if timeout 60 nvme connect -t tcp -a $A -s 4420 -n {NQN} "$@" > /tmp/refused.txt 2>&1; then
    fail "nvme connect $* succeeded"; nvme list >&2; exit 1
  fi
  echo "refused ($(tr '\n' ' ' < /tmp/refused.txt | cut -c1-120))"
}}
echo "wrong host key: $(refused --hostnqn {H1} --dhchap-secret '{K3}')"
echo "wrong controller key: $(refused --hostnqn {H2} --dhchap-secret '{K2}' --dhchap-ctrl-secret '{C3}')"
echo "no key: $(refused --hostnqn {H1})"
ctrl_of {NQN} && {{ fail "a refused host has a live controller"; exit 1; }}
echo "failures: $(metric 'nvmf_target_auth_total{{result="failure",hash="hmac(sha256)",dhgroup="null"}}' || echo 0) sha256"
grep -c 'authentication failed' "$(daemon_log target)" | sed 's/^/failure log lines: /'

# The discovery controller requires authentication: H1 with its key connects to it and reads the subsystem's
# records; without a key, or as a host with no key anywhere, it cannot connect. (Straight through /dev/nvme-fabrics:
# nvme-cli 2.3's `discover --dhchap-secret` does not hand the key to the kernel.)
DISC=nqn.2014-08.org.nvmexpress.discovery
fabrics() {{
  local reply rc=0
  exec 3<>/dev/nvme-fabrics
  # A host ID of its own: the kernel refuses one host ID under two host NQNs (its default host has one).
  echo -n "transport=tcp,traddr=$A,trsvcid=4420,nqn=$DISC,hostid=$(cat /proc/sys/kernel/random/uuid),$1" >&3 || rc=$?
  [ $rc = 0 ] && read -r reply <&3
  exec 3>&-
  [ $rc = 0 ] && echo "$reply"
  return $rc
}}
reply=$(fabrics "hostnqn={H1},dhchap_secret={K1}")
inst=$(echo "$reply" | sed -n 's/.*instance=\([0-9]*\).*/\1/p')
timeout 60 nvme discover -d nvme$inst > /tmp/discover.txt
records=$(grep -c '^subnqn: *{NQN}' /tmp/discover.txt || true)
[ "$records" -ge 1 ] || {{ cat /tmp/discover.txt >&2; fail "the discovery log lacks {NQN}"; exit 1; }}
echo "discovery with a key: $records record(s) of the subsystem ($reply)"
timeout 60 nvme disconnect -d nvme$inst >&2
if fabrics "hostnqn={H1}" 2>/dev/null; then fail "discovery without a key succeeded"; exit 1; fi
echo "discovery without a key: refused"
if fabrics "hostnqn=nqn.2024-01.io.nvmf-rs:vm-nobody" 2>/dev/null; then
  fail "discovery by a host with no key anywhere succeeded"; exit 1
fi
echo "discovery by a host with no key: refused"

# Re-authentication under I/O: H1's key is rotated in the target (reload), then in the host (sysfs).
dev=$(host_connect tcp $A 4420 {NQN} --hostnqn {H1} --dhchap-secret '{K1}' -i 2)
ctrl=$(ctrl_of {NQN})
before=$(successes 'hmac(sha256)' null)
timeout 120 fio --name=reauth --filename="$dev" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=8 \
  --size=16M --time_based --runtime=20 --verify=crc32c --verify_backlog=64 --verify_fatal=1 --do_verify=1 \
  > $NVMF_VM_LOGS/fio-reauth.log 2>&1 &
fio_pid=$!
sleep 4
sed -i 's|{K1}|{K1B}|' $CONFIG
echo "reload: $(nvmf_target_reload target)"
echo -n '{K1B}' > /sys/class/nvme/$ctrl/dhchap_secret
reauthenticated() {{ [ "$(successes 'hmac(sha256)' null)" -gt "$before" ]; }}
wait_until 30 reauthenticated ||
  {{ fail "no re-authentication within 30 s"; dmesg | tail -20 >&2; exit 1; }}
wait $fio_pid || {{ cat $NVMF_VM_LOGS/fio-reauth.log >&2; fail "fio across the re-authentication"; exit 1; }}
grep -E 'issued rwts|err=' $NVMF_VM_LOGS/fio-reauth.log >&2
echo "re-authenticated under I/O: $before -> $(successes 'hmac(sha256)' null) transactions, state $(cat /sys/class/nvme/$ctrl/state)"
dmesg | grep -iE 'authenticat' | tail -5 >&2 || true
host_disconnect {NQN}
# The old key no longer does.
echo "old key: $(refused --hostnqn {H1} --dhchap-secret '{K1}')"
echo "all: ok"
"#,
        config = config()
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    assert!(out.success(), "{}", out.report());
    out.assert_lines(&[
        "h1 tcp: ok",
        "h2 tcp: ok",
        "h2 rdma: ok",
        "h3 tcp: ok",
        "wrong host key: refused",
        "wrong controller key: refused",
        "no key: refused",
        "discovery with a key: ",
        "discovery without a key: refused",
        "discovery by a host with no key: refused",
        "re-authenticated under I/O",
        "old key: refused",
        "all: ok",
    ]);
}
