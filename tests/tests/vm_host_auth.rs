//! Our host's in-band authentication (DH-HMAC-CHAP) against the Linux 6.12 kernel target (nvmet-tcp on 127.0.0.1 and
//! nvmet-rdma on Soft-RoCE, a memory-backed null_blk namespace, the host allowed through a configfs host entry with
//! `dhchap_key`, `dhchap_ctrl_key`, `dhchap_hash` and `dhchap_dhgroup`).
//!
//! | test | what it proves |
//! |---|---|
//! | `null_group_sha256_unidirectional` | with a secret made by nvme-cli (`nvme gen-dhchap-key -m 1`), `nvmf-host perf` authenticates its admin and I/O queues (hmac(sha256), NULL group) and runs; the daemon's `connect --ublk` does too, and 1 MiB written through `/dev/ublkbN` reads back, there and straight from the target's null_blk; without `-S` perf stops with the error naming the missing secret |
//! | `ffdhe2048_sha384_bidirectional` | with secrets made by `nvmf-host gen-dhchap-key` (the host's in an owner-only `dhchap_secret_file`), the daemon's configured controller authenticates both ways (hmac(sha384), ffdhe2048) on every queue; data written reads back; the port goes away and comes back, and the reconnect authenticates again and reads the data back |
//! | `hashes_and_groups_over_tcp_and_rdma` | `nvmf-host perf` authenticates both ways (an nvme-cli key transformed with SHA-512, a 64-byte controller key) over nvmet-tcp and nvmet-rdma (Soft-RoCE) with every hash function and the NULL group and ffdhe2048, ffdhe3072 and ffdhe4096 over both, ffdhe6144 and ffdhe8192 over TCP |
//! | `wrong_secrets_are_refused` | a wrong host secret is refused by nvmet (its AUTH_Failure1, or its teardown that races it), a wrong controller secret is caught by the host: each ends perf with one clear line, and nothing reaches the namespace |
//!
//! Opt-in like every VM scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`); logs (the daemon's, dmesg, the
//! nvmet configfs tree) in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_auth -- --nocapture --test-threads 1

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-auth";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6a1f0a3e-9d2b-4c1e-8f5a-0b7e2d4c6a10";

/// Shell helpers (after guest-lib.sh): the subsystem, restricted to `$HOSTNQN` through its host entry, on port 1.
const HELPERS: &str = r#"
set -eu
H=/tmp/host
mkdir -p $H
HE=$NVMET/hosts/$HOSTNQN
# auth_target HASH DHGROUP KEY [CTRL_KEY]: the subsystem on 127.0.0.1:4420, allowing $HOSTNQN only, with its keys.
auth_target() {
  nvmet_subsys_nullblk $NQN 64
  mkdir -p "$HE"
  echo -n "$1" > "$HE/dhchap_hash"
  echo -n "$2" > "$HE/dhchap_dhgroup"
  echo -n "$3" > "$HE/dhchap_key"
  [ -z "${4:-}" ] || echo -n "$4" > "$HE/dhchap_ctrl_key"
  echo 0 > "$NVMET/subsystems/$NQN/attr_allow_any_host"
  ln -s "$HE" "$NVMET/subsystems/$NQN/allowed_hosts/$HOSTNQN"
  port_up
  log "nvmet host $HOSTNQN: $(cat "$HE/dhchap_hash") $(cat "$HE/dhchap_dhgroup")"
}
port_up() { nvmet_tcp_port 1 127.0.0.1 4420 $NQN; }
port_down() { rm "$NVMET/ports/1/subsystems/$NQN" && rmdir "$NVMET/ports/1"; log "nvmet port 1 removed"; }
perf() { timeout 60 "$NVMF_HOST_BIN" perf -t tcp -a 127.0.0.1 -s 4420 -n $NQN --hostnqn $HOSTNQN -c 2 -q 4 -o 4096 -w randread -T 1 "$@"; }
# The daemon, its `list`, and how often it logged an authentication.
host_list() { timeout 30 "$NVMF_HOST_BIN" list -o json --control $H/control.sock | jq -r "$1"; }
state_is() { [ "$(host_list '.controllers[0].state')" = "$1" ]; }
count() { grep -c "$1" "$(daemon_log host)" || true; }
# rw_check DEV: 1 MiB of random bytes at 4 MiB written through DEV reads back through it and from the target's
# null_blk (the namespace itself).
rw_check() {
  head -c 1048576 /dev/urandom > $H/pattern
  dd if=$H/pattern of="$1" bs=1M seek=4 oflag=direct status=none
  dd if="$1" of=$H/back bs=1M skip=4 count=1 iflag=direct status=none
  cmp $H/pattern $H/back && echo "read back: ok"
  dd if=/dev/nvmfnb1 of=$H/target bs=1M skip=4 count=1 iflag=direct status=none
  cmp $H/pattern $H/target && echo "on the target: ok"
}
"#;

/// The VM with nvmet-tcp, null_blk and ublk_drv, and `$NVMF_HOST_BIN`, `$NQN`, `$HOSTNQN` set.
fn vm(name: &str) -> Vm {
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "null_blk", "ublk_drv"])
        .env("NQN", NQN)
        .env("HOSTNQN", HOSTNQN)
        .deadline(Duration::from_secs(300));
    match vm::enabled() {
        Ok(()) => {
            let bin = nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                .unwrap_or_else(|e| panic!("nvmf-host binary: {e}"));
            vm.env("NVMF_HOST_BIN", bin.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    }
}

fn run(vm: &Vm, name: &str, scenario: &str) -> Option<VmOutput> {
    let start = Instant::now();
    let out = vm.run_or_skip(&format!("{HELPERS}\n{scenario}\ncollect_logs"))?;
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    Some(out)
}

#[test]
fn null_group_sha256_unidirectional() {
    let name = "null_group_sha256_unidirectional";
    let Some(out) = run(
        &vm(name),
        name,
        r#"
key=$(nvme gen-dhchap-key -m 1 -n $HOSTNQN)
auth_target "hmac(sha256)" null "$key"
if perf > $H/perf-nokey.out 2> $H/perf-nokey.err; then echo "without a secret: connected"; else
  echo "without a secret: $(tail -n 1 $H/perf-nokey.err)"; fi
perf -S "$key" > $H/perf.out
echo "perf IOPS line: $(grep -c IOPS $H/perf.out)"

cat > $H/host.toml <<EOF
[host]
hostnqn = "$HOSTNQN"
state_dir = "$H/state"
control_socket = "$H/control.sock"
[logging]
level = "info,nvmf_host::controller::authentication=debug"
EOF
start_daemon host "$NVMF_HOST_BIN" run --config $H/host.toml
daemon_ready host 'nvmf_host::daemon: ready'
timeout 60 "$NVMF_HOST_BIN" connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN -i 2 --ublk -S "$key" --control $H/control.sock
ublk=$(host_list '.controllers[0].exports[0].address')
rw_check "$ublk"
echo "admin queue authentications: $(count 'DH-HMAC-CHAP: host authenticated with hmac(sha256) and null')"
echo "I/O queue authentications: $(count 'DH-HMAC-CHAP: queue authenticated')"
echo "I/O queues not asked: $(count 'DH-HMAC-CHAP: queue not asked to authenticate')"
echo "secret in the log: $(grep -c "${key:10:20}" "$(daemon_log host)" || true)"
stop_daemon host 30 && echo "daemon exit: 0"
"#,
    ) else {
        return;
    };
    out.assert_lines(&[
        "without a secret: nvmf-host: perf against 127.0.0.1:4420 nqn.2024-01.io.nvmf-rs:vm-auth: queue 0: the \
             controller requires DH-HMAC-CHAP authentication and no host secret is configured",
        "perf IOPS line: 1\n",
        "read back: ok\n",
        "on the target: ok\n",
        "admin queue authentications: 1\n",
        "secret in the log: 0\n",
        "daemon exit: 0\n",
    ]);
    // Unidirectional: the host authenticates a queue when its Connect response asks (AUTHREQ ATR). Linux 6.12's
    // nvmet asks on every queue; 7.x's on the admin queue only. Either way each of the two I/O queues did what it
    // was asked, and the data went through (a queue that skipped an asked authentication would have been refused).
    let count = |prefix: &str| -> u32 {
        let line = out.stdout.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix:?}"));
        line.trim().parse().unwrap_or_else(|_| panic!("{prefix}{line}"))
    };
    let (authenticated, not_asked) = (count("I/O queue authentications: "), count("I/O queues not asked: "));
    assert_eq!(authenticated + not_asked, 2, "{}", out.report());
    vm::note(&format!("{name}: {authenticated} I/O queues authenticated, {not_asked} not asked to"));
}

#[test]
fn ffdhe2048_sha384_bidirectional() {
    let name = "ffdhe2048_sha384_bidirectional";
    let Some(out) = run(
        &vm(name),
        name,
        r#"
key=$("$NVMF_HOST_BIN" gen-dhchap-key -m 2 -n $HOSTNQN)
ckey=$("$NVMF_HOST_BIN" gen-dhchap-key -l 48)
auth_target "hmac(sha384)" ffdhe2048 "$key" "$ckey"
(umask 077; echo "$key" > $H/host.key)
cat > $H/host.toml <<EOF
[host]
hostnqn = "$HOSTNQN"
state_dir = "$H/state"
control_socket = "$H/control.sock"
[logging]
level = "info,nvmf_host::controller::authentication=debug"
[[controller]]
address = "127.0.0.1"
nqn = "$NQN"
nr_io_queues = 2
reconnect_delay = 1
dhchap_secret_file = "host.key"
dhchap_ctrl_secret = "$ckey"
[[controller.export]]
nsid = 1
ublk = true
EOF
start_daemon host "$NVMF_HOST_BIN" run --config $H/host.toml
daemon_ready host 'nvmf_host::daemon: ready'
ublk=$(host_list '.controllers[0].exports[0].address')
rw_check "$ublk"
both='DH-HMAC-CHAP: host and controller authenticated with hmac(sha384) and ffdhe2048'
echo "authentications before the reconnect: $(count "$both")"
port_down
wait_until 30 state_is reconnecting || true
sleep 2
port_up
wait_until 60 state_is live && echo "live again"
echo "authentications after the reconnect: $(count "$both")"
dd if="$ublk" of=$H/again bs=1M skip=4 count=1 iflag=direct status=none
cmp $H/pattern $H/again && echo "read back after the reconnect: ok"
echo "I/O queue authentications: $(count 'DH-HMAC-CHAP: queue authenticated')"
stop_daemon host 30 && echo "daemon exit: 0"
"#,
    ) else {
        return;
    };
    out.assert_lines(&[
        "read back: ok\n",
        "on the target: ok\n",
        "authentications before the reconnect: 1\n",
        "live again\n",
        "authentications after the reconnect: 2\n",
        "read back after the reconnect: ok\n",
        "I/O queue authentications: 4\n",
        "daemon exit: 0\n",
    ]);
}

#[test]
fn wrong_secrets_are_refused() {
    let name = "wrong_secrets_are_refused";
    let Some(out) = run(
        &vm(name),
        name,
        r#"
key=$("$NVMF_HOST_BIN" gen-dhchap-key -n $HOSTNQN)
ckey=$("$NVMF_HOST_BIN" gen-dhchap-key)
other=$("$NVMF_HOST_BIN" gen-dhchap-key)
auth_target "hmac(sha256)" ffdhe3072 "$key" "$ckey"
try() { if perf "$@" > $H/perf.out 2> $H/perf.err; then echo connected; else tail -n 1 $H/perf.err; fi; }
echo "wrong host secret: $(try -S "$other")"
echo "wrong controller secret: $(try -S "$key" -C "$other")"
echo "right secrets: $(try -S "$key" -C "$ckey")"
c=${key:10:1}; [ "$c" = A ] && n=B || n=A
echo "mistyped secret: $(try -S "${key:0:10}$n${key:11}")"
"#,
    ) else {
        return;
    };
    let prefix =
        "nvmf-host: perf against 127.0.0.1:4420 nqn.2024-01.io.nvmf-rs:vm-auth: queue 0: DH-HMAC-CHAP authentication \
                  failed: ";
    // nvmet's AUTH_Failure1 races its teardown of the association: the host names either, and the secret.
    let wrong_host = out.stdout.lines().find(|l| l.starts_with("wrong host secret: ")).unwrap_or_default();
    assert!(
        wrong_host.starts_with(&format!("wrong host secret: {prefix}"))
            && wrong_host.ends_with("the secret is not the one it has for this host)"),
        "{wrong_host:?}\n{}",
        out.report()
    );
    out.assert_lines(&[
        &format!(
            "wrong controller secret: {prefix}the controller's response did not verify: it does not hold the \
                 controller secret given\n"
        ),
        "right secrets: connected\n",
        "mistyped secret: nvmf-host: perf against 127.0.0.1:4420 nqn.2024-01.io.nvmf-rs:vm-auth: --dhchap-secret: \
             the key's CRC-32 does not match",
    ]);
}

/// Every hash function with the NULL group and ffdhe2048, and each larger group once, over TCP and RDMA, both ways.
#[test]
fn hashes_and_groups_over_tcp_and_rdma() {
    let name = "hashes_and_groups_over_tcp_and_rdma";
    let vm = vm(name).rxe(true).modules(["nvmet_rdma"]).deadline(Duration::from_secs(900));
    let Some(out) = run(
        &vm,
        name,
        r#"
key=$(nvme gen-dhchap-key -m 3 -n $HOSTNQN)
ckey=$("$NVMF_HOST_BIN" gen-dhchap-key -l 64)
auth_target "hmac(sha256)" null "$key" "$ckey"
nvmet_rdma_port 2 "$NVMF_RDMA_ADDR" 4420 $NQN
# try TRANSPORT ADDRESS HASH GROUP: nvmet's host entry set to HASH and GROUP, then perf both ways over TRANSPORT.
try() {
  echo -n "hmac($3)" > "$HE/dhchap_hash"
  echo -n "$4" > "$HE/dhchap_dhgroup"
  if timeout 120 "$NVMF_HOST_BIN" perf -t $1 -a $2 -s 4420 -n $NQN --hostnqn $HOSTNQN -c 1 -q 4 -o 4096 -w randread \
       -T 1 -S "$key" -C "$ckey" > $H/perf.out 2> $H/perf.err && grep -q IOPS $H/perf.out; then
    echo "$1 $3 $4: ok"
  else
    echo "$1 $3 $4: $(tail -n 1 $H/perf.err)"
  fi
}
for t in "tcp 127.0.0.1" "rdma $NVMF_RDMA_ADDR"; do
  for h in sha256 sha384 sha512; do
    for g in null ffdhe2048; do try $t $h $g; done
  done
  try $t sha512 ffdhe3072
  try $t sha384 ffdhe4096
done
try tcp 127.0.0.1 sha256 ffdhe6144
try tcp 127.0.0.1 sha512 ffdhe8192
"#,
    ) else {
        return;
    };
    let mut expected = Vec::new();
    for t in ["tcp", "rdma"] {
        for h in ["sha256", "sha384", "sha512"] {
            for g in ["null", "ffdhe2048"] {
                expected.push(format!("{t} {h} {g}: ok\n"));
            }
        }
        expected.push(format!("{t} sha512 ffdhe3072: ok\n"));
        expected.push(format!("{t} sha384 ffdhe4096: ok\n"));
    }
    expected.push("tcp sha256 ffdhe6144: ok\n".to_owned());
    expected.push("tcp sha512 ffdhe8192: ok\n".to_owned());
    out.assert_lines(&expected.iter().map(String::as_str).collect::<Vec<_>>());
}
