//! NVMe/TCP over TLS 1.3 with pre-shared keys between the Linux kernel's host and target (nvme-tcp and nvmet-tcp,
//! their handshakes done by ktls-utils' `tlshd`, keys made by nvme-cli 2.13): the baseline that our target and our
//! host are held to, with the exact keys, identities, PSKs and cipher suites printed (and asserted) for them.
//!
//! Two machines in one guest: the target (nvmet: a memory-backed null_blk, one allowed host NQN, TLS port 1 at
//! 10.99.0.1:4420 with `addr_tsas` tls1.3, its `tlshd` with the `.nvme` keyring, GnuTLS logging at level 4) in the
//! guest's own network namespace, and the host in network namespace `host` (10.99.0.2, a veth link) with a keyring of
//! its own (`nvmf-host`) and its own `tlshd`: the kernel hands each handshake to the `tlshd` of the socket's
//! namespace, and each side has only its own copy of a key. The host names its key by serial (`--tls-key`): nvme-cli
//! 2.13 does not pass `--keyring` to the kernel. The user space is Debian 13's (`Vm::debian13_userspace`); the guest
//! helpers are in `tests/vm/debian13-lib.sh` (`tls_host_machine`, `tls_psk_insert`, `host_connect_tls`, …) and
//! `tests/vm/guest-lib.sh` (`nvmet_tls_port`, `nvmet_allow_host`). One boot, these steps:
//!
//! - `keys`: `nvme gen-tls-key --secret=HEX --hmac=N` makes the interchange keys below from their secrets.
//! - `v0-sha256`, `v0-sha384`, `v1-sha256`, `v1-sha384`: the same interchange key inserted on both sides
//!   (`nvme check-tls-key --insert`, identity version 0 or 1 with `--identity`, HMAC SHA-256 or SHA-384 as the key's
//!   `01`/`02` says) gives the identity and PSK of [`EXPECTED`]; the host's `nvme connect --tls` handshakes every
//!   queue with it (both `tlshd`s log the identity; nvmet logs "… TLS." on 7.x), and fio writes 4 MiB and reads it
//!   back with crc32c verification.
//! - `v0-sha256-lookup`: the same without `--tls-key`: the kernel finds the key by identity in `.nvme`.
//! - `refused-other-psk`: the host's key is another PSK under the same identity (version 0): the target's `tlshd` fails
//!   the handshake, the connect fails, nvmet creates no controller.
//! - `refused-unknown-identity`: the host's other PSK with identity version 1 (whose identity carries the PSK's
//!   digest): the target has no key of that identity.
//! - `refused-plain`: a host without TLS: the port requires it.
//!
//! Each step prints its keys, identities and PSKs (the keyring's payload: what TLS uses), the dmesg lines of the step
//! and both `tlshd`s' lines about the PSK, the group and the cipher suite. How nvme-cli derives the PSKs and what
//! GnuTLS negotiates (ChaCha20-Poly1305 for SHA-384 PSKs): `tests/README.md`. Debian's 6.12 and 7.x are both built
//! with `CONFIG_NVME_TCP_TLS` and `CONFIG_NVME_TARGET_TCP_TLS`; the scenario boots 6.12 unless `NVMF_VM_KERNEL` says
//! otherwise; it runs when `NVMF_TLS_BASELINE=1` asks (a reference for the lab, not a test of ours).
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`); the Debian 13 user space is built
//! once on first use (root and debootstrap; about 70 s). Logs (both `tlshd`s, fio, dmesg, the nvmet configfs tree)
//! in `target/tmp/vm-logs/tls_kernel_host_and_nvmet/`.
//!
//! `our_target_and_our_host_with_the_kernel` (another boot) holds ours to that baseline, with the same keys made by
//! the same nvme-cli (whose 2.13 derives PSKs the compat way only): the kernel host (`nvme connect --tls`, its own
//! keyring and `tlshd`) connects to our target (`tls = "required"`, each host key in a `[[subsystem.host]]`) with
//! identity versions 0 and 1 and both hashes, and fio verifies through it; another PSK is refused; then our host
//! (`nvmf-host ublk --tls-key … --tls-compat`, in the host machine's namespace) connects to nvmet with the keys
//! `nvme check-tls-key --insert` put in `.nvme`, and data written through `/dev/ublkbN` reads back there and from
//! nvmet's null_blk.
//!
//!     NVMF_VM=1 NVMF_TLS_BASELINE=1 cargo test -p nvmf-tests --test vm_tls -- --nocapture        # ~7 min
//!     NVMF_VM=1 NVMF_VM_KERNEL=backports cargo test -p nvmf-tests --test vm_tls -- --nocapture   # both on Linux 7.x

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, KernelLine, KernelVersion, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-tls";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5f8e3a52-6c1d-4b7e-9a20-3d4c5b6a7e81";
const HOSTID: &str = "5f8e3a52-6c1d-4b7e-9a20-3d4c5b6a7e81";
const TARGET_ADDR: &str = "10.99.0.1";
const HOST_ADDR: &str = "10.99.0.2";

/// The configured PSKs: `nvme gen-tls-key --secret=HEX --hmac=N` of the secrets below (the interchange format: the
/// secret and its CRC-32, base64).
const SECRET_SHA256: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const KEY_SHA256: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const SECRET_SHA384: &str =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f";
const KEY_SHA384: &str = "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";
/// The host's PSK in the refusals.
const SECRET_OTHER: &str = "fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0efeeedecebeae9e8e7e6e5e4e3e2e1e0";
const KEY_OTHER: &str = "NVMeTLSkey-1:01://79/Pv6+fj39vX08/Lx8O/u7ezr6uno5+bl5OPi4eAsgEB3:";

/// What each step must print: (step, identity, PSK in the keyring). The identities of version 1 end with the PSK
/// digest; the PSKs are what nvme-cli 2.13 (libnvme 1.13) derives and inserts, the TLS PSK itself (see the module
/// docs).
const EXPECTED: [(&str, &str, &str); 4] = [
    ("v0-sha256", "NVMe0R01", "be2ff922d98c0f8d4cf5bc55ddfe6b982452e98b461710eb789a91b6f3a5d37e"),
    (
        "v0-sha384",
        "NVMe0R02",
        "3a3b62dcd643875e98702da9caebbfbc7915d5edf98e8086e0bcf2e55918c5b3d3100a5d5e2210d7b5f8169befcc1695",
    ),
    (
        "v1-sha256",
        "NVMe1R01 MJ7/dQWBBwgiFQcA6pMtknmOZO2QLkv3sQwkTJ3eyu4=",
        "27f3310c8db5e13abadc6083f9036db28612ae71a85bf33692002f0dfb93165f",
    ),
    (
        "v1-sha384",
        "NVMe1R02 AbYtPwbd59SJPiBa8Ckgpyych+rGXjtGfE5QP7gwB8K7hzyMIImXNjuD4JS6dQ3Z",
        "3b7c1c3a78f0383c10d469a9c32bd425eb715f366b073e309edb6b208b4df9d4f5c2bebce4acdadd177b9ce419e90a29",
    ),
];
/// The host's identity in `refused-unknown-identity` (another PSK, another digest).
const OTHER_V1_DIGEST: &str = "A/i8MAjpNj32Vgit1VFYVZfailBxrWYw7fM3MAgzoqs=";

/// `NVMe0R01 HOSTNQN NQN` from `NVMe0R01`, `NVMe1R01 HOSTNQN NQN DIGEST` from `NVMe1R01 DIGEST`.
fn identity(short: &str) -> String {
    match short.split_once(' ') {
        Some((prefix, digest)) => format!("{prefix} {HOSTNQN} {NQN} {digest}"),
        None => format!("{short} {HOSTNQN} {NQN}"),
    }
}

/// What every step does, after guest-lib.sh and debian13-lib.sh (`$NQN`, `$HOSTNQN`, … from the environment).
const HELPERS: &str = r#"
set -eu
# The kernel host on the host machine; ARGS after (--tls-key=SERIAL: a key of its own keyring, nvmf-host).
kernel_host_connect() {
  DEB13_NETNS=host host_connect_tls $TARGET_ADDR 4420 $NQN --hostnqn=$HOSTNQN --hostid=$HOSTID "$@"
}
# Lines of a log (or dmesg) from line $2 + 1 on.
since() { sed -n "$(($2 + 1)),\$p" "$1"; }
lines() { wc -l < "$1"; }
# Controllers nvmet created for the host: "Created nvm controller N for subsystem S for NQN H, TLS." since Linux 7.x
# (6.12: "creating nvm controller N for subsystem S for NQN H.", TLS or not).
created() { dmesg | grep -cE "nvmet: [Cc]reat(ed|ing) nvm controller .* for subsystem $NQN for NQN $HOSTNQN" || true; }
TLOG=$(daemon_log tlshd-target)
HLOG=$(daemon_log tlshd-host)
# say STEP WHAT...: one line of the step's record on stdout.
say() { local s=$1; shift; echo "$s: $*"; }
# The PSK-related lines both tlshds logged since the marks $tmark and $hmark.
tlshd_lines() {
  since "$HLOG" "$hmark" | grep -aE 'psk|PSK|Session description|Handshake|alert|fail|error' |
    sed 's/^tlshd\[[0-9]*\]: //' | sort -u | sed "s/^/$1: host tlshd: /"
  since "$TLOG" "$tmark" |
    grep -aE -e 'selected PSK identity|Selected (cipher suite|group)|compatibility|Session description' \
      -e 'Handshake|alert|fail|error|search' |
    sed -e 's/^tlshd\[[0-9]*\]: //' -e 's/gnutls([0-9]*): [A-Z]*\[0x[0-9a-f]*\]: //' | sort -u |
    sed "s/^/$1: target tlshd: /"
}
# psk_both TARGET_KEY HOST_KEY V: the target's keyring (.nvme) holds only TARGET_KEY, the host's (nvmf-host) only
# HOST_KEY, both with identity version V; prints "HOST_SERIAL TARGET_PSK HOST_PSK" (the PSKs in hex), and the two
# identities on the next lines.
psk_both() {
  local v=$3 tserial tident hserial hident
  tls_keyring_clear
  tls_keyring_clear nvmf-host
  read -r tserial tident <<< "$(tls_psk_insert "$1" $HOSTNQN $NQN --identity=$v)"
  read -r hserial hident <<< "$(tls_psk_insert "$2" $HOSTNQN $NQN --identity=$v --keyring=nvmf-host)"
  echo "$hserial $(tls_psk_hex "$tserial") $(tls_psk_hex "$hserial" nvmf-host)"
  echo "$tident"
  echo "$hident"
}
"#;

/// One guest boot for all of it (a boot under TCG costs more than the steps).
const SCENARIO: &str = r#"
# Keys from the secrets.
k256=$(nvme13 gen-tls-key --secret=$SECRET_SHA256 --hmac=1)
k384=$(nvme13 gen-tls-key --secret=$SECRET_SHA384 --hmac=2)
kother=$(nvme13 gen-tls-key --secret=$SECRET_OTHER --hmac=1)
say keys "$k256 $k384 $kother"

# The target: nvmet and its tlshd here; the host machine in network namespace "host".
nvmet_subsys_nullblk $NQN 64
nvmet_allow_host $NQN $HOSTNQN
tls_host_machine host $HOST_ADDR $TARGET_ADDR nvmf-host
nvmet_tls_port 1 $TARGET_ADDR 4420 $NQN
say port "addr_tsas $(cat $NVMET/ports/1/addr_tsas), addr_treq $(cat $NVMET/ports/1/addr_treq)"
TLSHD_TLS_DEBUG=4 tlshd_start tlshd-target

# tls_step NAME TARGET_KEY HOST_KEY V [HOW]: both keyrings, then the host machine connects with its key named by
# serial (HOW "lookup": with the key the kernel finds by identity in .nvme; "plain": without TLS); prints what each
# side did. Sets $dev (empty: refused).
tls_step() {
  local name=$1 hserial tpsk hpsk tident hident tmark hmark dmark before args _NVME_CLI=()
  log "--- $name"
  { read -r hserial tpsk hpsk; read -r tident; read -r hident; } <<< "$(psk_both "$2" "$3" "$4")"
  say $name "target key $2"
  say $name "target identity $tident"
  say $name "target psk $tpsk"
  say $name "host key $3"
  say $name "host identity $hident"
  say $name "host psk $hpsk"
  args=(--tls-key=$((16#$hserial)))
  [ "${5:-}" != lookup ] || args=()
  tmark=$(lines "$TLOG"); hmark=$(lines "$HLOG"); dmark=$(dmesg | wc -l); before=$(created)
  if [ "${5:-}" = plain ]; then
    _NVME_CLI=(ip netns exec host chroot "$D13" nvme)
    dev=$(host_connect tcp $TARGET_ADDR 4420 $NQN --hostnqn=$HOSTNQN --hostid=$HOSTID 2> /tmp/connect.err) || dev=
  else
    dev=$(kernel_host_connect "${args[@]}" 2> /tmp/connect.err) || dev=
  fi
  if [ -n "$dev" ]; then
    say $name "connected $dev, host tls_key $(cat /sys/class/nvme/$(ctrl_of $NQN)/tls_key)"
  else
    say $name "connect failed: $(grep -v '^\[' /tmp/connect.err | tr '\n' ' ')"
  fi
  say $name "controllers created $(($(created) - before))"
  dmesg | sed -n "$((dmark + 1)),\$p" | sed 's/^\[[ 0-9.]*\] //' | sed "s/^/$name: dmesg: /"
  tlshd_lines $name
}

for variant in "v0-sha256 $KEY_SHA256 0" "v0-sha384 $KEY_SHA384 0" \
  "v1-sha256 $KEY_SHA256 1" "v1-sha384 $KEY_SHA384 1"; do
  read -r name key v <<< "$variant"
  tls_step $name $key $key $v
  [ -n "$dev" ] || { fail "$name: the kernel host did not connect"; exit 1; }
  verified=$(fio13_rw_verify $dev 4K 8 4M)
  say $name "$verified"
  DEB13_NETNS=host nvme13 disconnect -n $NQN >&2
done

# The recipe of a single machine: nvme connect --tls finds the key by identity in .nvme.
tls_step v0-sha256-lookup $KEY_SHA256 $KEY_SHA256 0 lookup
[ -n "$dev" ] || { fail "v0-sha256-lookup: the kernel host did not connect"; exit 1; }
DEB13_NETNS=host nvme13 disconnect -n $NQN >&2

# Refusals: the host machine's key is another PSK.
tls_step refused-other-psk $KEY_SHA256 $KEY_OTHER 0
if [ -n "$dev" ]; then DEB13_NETNS=host nvme13 disconnect -n $NQN >&2; fi
tls_step refused-unknown-identity $KEY_SHA256 $KEY_OTHER 1
if [ -n "$dev" ]; then DEB13_NETNS=host nvme13 disconnect -n $NQN >&2; fi
# And a host without TLS: the port requires it.
tls_step refused-plain $KEY_SHA256 $KEY_SHA256 0 plain
if [ -n "$dev" ]; then DEB13_NETNS=host nvme13 disconnect -n $NQN >&2; fi
"#;

#[test]
fn tls_kernel_host_and_nvmet() {
    let name = "tls_kernel_host_and_nvmet";
    // The kernel with itself: a reference for the lab, not a test of ours (the next scenario holds ours to it), so
    // it runs when asked; `.ci/run`'s time goes to ours.
    if std::env::var_os("NVMF_TLS_BASELINE").is_none() {
        vm::note(&format!("{name}: skipped (the kernel-only baseline runs with NVMF_TLS_BASELINE=1)"));
        return;
    }
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .debian13_userspace()
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "nvme_tcp", "null_blk", "tls", "veth"])
        .env("NQN", NQN)
        .env("HOSTNQN", HOSTNQN)
        .env("HOSTID", HOSTID)
        .env("TARGET_ADDR", TARGET_ADDR)
        .env("HOST_ADDR", HOST_ADDR)
        .env("SECRET_SHA256", SECRET_SHA256)
        .env("SECRET_SHA384", SECRET_SHA384)
        .env("SECRET_OTHER", SECRET_OTHER)
        .env("KEY_SHA256", KEY_SHA256)
        .env("KEY_SHA384", KEY_SHA384)
        .env("KEY_OTHER", KEY_OTHER)
        .deadline(Duration::from_secs(600));
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&format!("{HELPERS}\n{SCENARIO}")) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    println!("{}", out.stdout);
    out.assert_success();
    out.assert_lines(&[
        &format!("keys: {KEY_SHA256} {KEY_SHA384} {KEY_OTHER}"),
        "port: addr_tsas tls1.3, addr_treq required",
    ]);
    // nvmet says whether a controller's queues use TLS since Linux 7.x (6.12 does not).
    let nvmet_says_tls = KernelVersion::of(&out.kernel_release).is_some_and(|v| v >= KernelVersion(7, 0));
    for (step, short, psk) in EXPECTED {
        let id = identity(short);
        let sha384 = short.starts_with("NVMe0R02") || short.starts_with("NVMe1R02");
        out.assert_lines(&[
            &format!("{step}: target identity {id}\n"),
            &format!("{step}: host identity {id}\n"),
            &format!("{step}: target psk {psk}\n"),
            &format!("{step}: host psk {psk}\n"),
            &format!("{step}: controllers created 1\n"),
            &format!("{step}: host tlshd: Using psk identity {id}\n"),
            &format!("{step}: target tlshd: selected PSK identity: {id} (0)\n"),
            &format!("{step}: fio bs=4K qd=8: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)"),
        ]);
        // GnuTLS takes an external PSK's hash to be SHA-256 whatever the identity says, and tlshd offers only
        // AES-256-GCM and ChaCha20-Poly1305 for a SHA-384 one: ChaCha20-Poly1305 (SHA-256) it is.
        let suite = if sha384 { "GNUTLS_CHACHA20_POLY1305_SHA256" } else { "GNUTLS_AES_128_GCM_SHA256" };
        out.assert_lines(&[&format!("{step}: target tlshd: Selected cipher suite: {suite}\n")]);
        if nvmet_says_tls {
            let created = format!("for subsystem {NQN} for NQN {HOSTNQN}, TLS.");
            let prefix = format!("{step}: dmesg: nvmet: Created nvm controller ");
            let said = out.stdout.lines().any(|l| l.strip_prefix(&prefix).is_some_and(|l| l.ends_with(&created)));
            assert!(said, "nvmet did not log a controller {created} in {step}\n{}", out.report());
        }
    }
    let v0 = identity(EXPECTED[0].1);
    out.assert_lines(&[
        &format!("v0-sha256-lookup: target tlshd: selected PSK identity: {v0} (0)\n"),
        "v0-sha256-lookup: controllers created 1\n",
        &format!("refused-other-psk: host identity {v0}\n"),
        "refused-other-psk: connect failed: ",
        "refused-other-psk: controllers created 0\n",
        "refused-other-psk: target tlshd: Handshake with 'unknown' (10.99.0.2) failed\n",
        &format!("refused-unknown-identity: host identity {}\n", identity(&format!("NVMe1R01 {OTHER_V1_DIGEST}"))),
        "refused-unknown-identity: connect failed: ",
        "refused-unknown-identity: controllers created 0\n",
        &format!(
            "refused-unknown-identity: target tlshd: failed to search 'psk' key '{}'",
            identity(&format!("NVMe1R01 {OTHER_V1_DIGEST}"))
        ),
        "refused-plain: connect failed: ",
        "refused-plain: controllers created 0\n",
    ]);
}

/// Our target on the target machine (the guest's namespace), the kernel host on the host machine.
const OUR_TARGET: &str = r#"
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
address = "10.99.0.1"
port = 4420
tls = "required"
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-tls"
[[subsystem.host]]
nqn = "nqn.2014-08.org.nvmexpress:uuid:5f8e3a52-6c1d-4b7e-9a20-3d4c5b6a7e81"
tls_key = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
tls_key_compat = true
[[subsystem.namespace]]
memory = "64MiB"
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-tls-sha384"
[[subsystem.host]]
nqn = "nqn.2014-08.org.nvmexpress:uuid:5f8e3a52-6c1d-4b7e-9a20-3d4c5b6a7e81"
tls_key = "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:"
tls_key_compat = true
[[subsystem.namespace]]
memory = "64MiB"
"#;

const WITH_OURS: &str = r#"
tls_host_machine host $HOST_ADDR $TARGET_ADDR nvmf-host
NQN384=nqn.2024-01.io.nvmf-rs:vm-tls-sha384
cat > /tmp/target.toml <<EOF
$OUR_TARGET
EOF
nvmf_target_start ours /tmp/target.toml
tls() { metric "nvmf_target_tls_connections_total{result=\"$1\"}" || echo 0; }

# The kernel host to our target: its key in its own keyring, named by serial.
for variant in "v0-sha256 $NQN $KEY_SHA256 0" "v1-sha256 $NQN $KEY_SHA256 1" \
  "v0-sha384 $NQN384 $KEY_SHA384 0" "v1-sha384 $NQN384 $KEY_SHA384 1"; do
  read -r name sub key v <<< "$variant"
  tls_keyring_clear nvmf-host
  read -r serial ident <<< "$(tls_psk_insert $key $HOSTNQN $sub --identity=$v --keyring=nvmf-host)"
  dev=$(DEB13_NETNS=host host_connect_tls $TARGET_ADDR 4420 $sub --hostnqn=$HOSTNQN --hostid=$HOSTID \
    --tls-key=$((16#$serial)) 2> /tmp/connect.err) || { cat /tmp/connect.err >&2; fail "$name: no connect"; exit 1; }
  say "ours-$name" "identity $ident"
  say "ours-$name" "$(fio13_rw_verify $dev 4K 8 4M)"
  DEB13_NETNS=host nvme13 disconnect -n $sub >&2
done
say ours "secured $(tls secured) failed $(tls failed)"
tls_keyring_clear nvmf-host
read -r serial ident <<< "$(tls_psk_insert $KEY_OTHER $HOSTNQN $NQN --identity=0 --keyring=nvmf-host)"
if DEB13_NETNS=host host_connect_tls $TARGET_ADDR 4420 $NQN --hostnqn=$HOSTNQN --hostid=$HOSTID \
  --tls-key=$((16#$serial)) > /dev/null 2>&1; then
  fail "ours: another PSK connected"; exit 1
fi
say ours "another psk refused, failed $(tls failed)"
stop_daemon ours

# Our host to nvmet: nvmet's key in .nvme (nvme-cli's compat derivation), our host with --tls-compat.
nvmet_subsys_nullblk $NQN 64
nvmet_allow_host $NQN $HOSTNQN
nvmet_tls_port 1 $TARGET_ADDR 4420 $NQN
tlshd_start tlshd-target
nb=$(cat $NVMET/subsystems/$NQN/namespaces/1/device_path)
for variant in "v0-sha256 $KEY_SHA256 0" "v1-sha256 $KEY_SHA256 1" "v0-sha384 $KEY_SHA384 0" "v1-sha384 $KEY_SHA384 1"; do
  read -r name key v <<< "$variant"
  tls_keyring_clear
  tls_psk_insert $key $HOSTNQN $NQN --identity=$v > /dev/null
  start_daemon host-$name timeout 300 ip netns exec host "$NVMF_HOST_BIN" ublk -t tcp -a $TARGET_ADDR -s 4420 -n $NQN \
    --hostnqn $HOSTNQN --hostid $HOSTID --tls-key $key --tls-identity-version $v --tls-compat -i 1
  wait_until 90 grep -q '^/dev/ublkb' "$(daemon_log host-$name)" ||
    { cat "$(daemon_log host-$name)" >&2; fail "nvmet-$name: no ublk device"; exit 1; }
  ublk=$(grep -m1 '^/dev/ublkb' "$(daemon_log host-$name)")
  wait_until 30 test -b $ublk
  head -c 1048576 /dev/urandom > /tmp/pattern
  dd if=/tmp/pattern of=$ublk bs=1M seek=$v oflag=direct status=none
  dd if=$ublk of=/tmp/back bs=1M skip=$v count=1 iflag=direct status=none
  dd if=$nb of=/tmp/nvmet bs=1M skip=$v count=1 iflag=direct status=none
  cmp /tmp/pattern /tmp/back && cmp /tmp/pattern /tmp/nvmet && say "nvmet-$name" "1 MiB read back through ublk and from nvmet"
  stop_daemon host-$name || true
done
"#;

#[test]
fn our_target_and_our_host_with_the_kernel() {
    let name = "our_target_and_our_host_with_the_kernel";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    // Linux 7.x, the kernel users take TLS up with (the baseline above runs on 6.12; both pass on either).
    let vm = Vm::new(name)
        .kernel(KernelLine::Backports)
        .debian13_userspace()
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "nvme_tcp", "null_blk", "tls", "veth", "ublk_drv"])
        .env("NQN", NQN)
        .env("HOSTNQN", HOSTNQN)
        .env("HOSTID", HOSTID)
        .env("TARGET_ADDR", TARGET_ADDR)
        .env("HOST_ADDR", HOST_ADDR)
        .env("KEY_SHA256", KEY_SHA256)
        .env("KEY_SHA384", KEY_SHA384)
        .env("KEY_OTHER", KEY_OTHER)
        .deadline(Duration::from_secs(900))
        .with_our_daemons();
    let start = Instant::now();
    let script = format!("{HELPERS}\n{}", WITH_OURS.replace("$OUR_TARGET", OUR_TARGET.trim()));
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    println!("{}", out.stdout);
    out.assert_success();
    for (step, short, _) in EXPECTED {
        // The SHA-384 key is our target's for another subsystem (a key per host and subsystem): its identity names
        // that one, and a version 1 digest differs from the baseline's.
        let prefix = short.split(' ').next().unwrap_or(short);
        let sub = if step.ends_with("sha384") { "nqn.2024-01.io.nvmf-rs:vm-tls-sha384" } else { NQN };
        out.assert_lines(&[
            &format!("ours-{step}: identity {prefix} {HOSTNQN} {sub}"),
            &format!(
                "ours-{step}: fio bs=4K qd=8: wrote 1024, verified 1024 after writing, 1024 on randread (of 1024)"
            ),
            &format!("nvmet-{step}: 1 MiB read back through ublk and from nvmet"),
        ]);
    }
    out.assert_lines(&["ours: another psk refused"]);
}
