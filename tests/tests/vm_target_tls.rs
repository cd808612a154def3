//! NVMe/TCP over TLS 1.3 with pre-shared keys between our host and our target, in a guest (kTLS needs the kernel's
//! `tls` module, which the machine running the tests may lack): listeners with `tls = "required"` and `"allowed"`,
//! two hosts with keys in `[[subsystem.host]]` (SHA-256 and SHA-384, identity versions 0 and 1), `nvmf-host perf`
//! with `--tls-key` writing and reading over each (with header and data digests once), refusals (a wrong key,
//! plaintext on the required port, a key of another host's NQN), and `nvmf_target_tls_connections_total` counting
//! each outcome; on both socket paths (`[reactors] socket_io = "epoll"` and `"io_uring"`, one target each). A capture
//! of one TLS connection (tcpdump on lo) shows nothing in the clear after the hellos: only TLS records, and neither
//! NQN past the ClientHello (`tests/vm/tls-records.py`).
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_tls -- --nocapture

use std::path::PathBuf;
use std::time::Duration;

use nvmf_tests::vm::Vm;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-tls";
const H1: &str = "nqn.2024-01.io.nvmf-rs:tls-host-sha256";
const H2: &str = "nqn.2024-01.io.nvmf-rs:tls-host-sha384";
/// 32 bytes 0x40..0x5f, hash 01 (SHA-256).
const K1: &str = "NVMeTLSkey-1:01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:";
/// 48 bytes 0x40..0x6f, hash 02 (SHA-384).
const K2: &str = "NVMeTLSkey-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:";

fn config(socket_io: &str) -> String {
    format!(
        r#"
[reactors]
threads = 2
socket_io = "{socket_io}"
[metrics]
listen = "127.0.0.1:9420"
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = 4420
tls = "required"
[[listener]]
address = "127.0.0.1"
port = 4421
tls = "allowed"
[[subsystem]]
nqn = "{NQN}"
[[subsystem.host]]
nqn = "{H1}"
tls_key = "{K1}"
[[subsystem.host]]
nqn = "{H2}"
tls_key_file = "/tmp/h2.tls"
[[subsystem.namespace]]
memory = "64MiB"
"#
    )
}

#[test]
fn our_host_and_target_over_tls() {
    let name = "our_host_and_target_over_tls";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vm");
    let vm = Vm::new(name)
        .logs(logs)
        .modules(["tls"])
        .cpus(2)
        .env("VM_SCRIPTS", scripts.to_string_lossy())
        .deadline(Duration::from_secs(900))
        .with_our_daemons();
    let script = format!(
        r#"
set -eu
cat > /tmp/epoll.toml <<'EOF'
{epoll}
EOF
cat > /tmp/io_uring.toml <<'EOF'
{io_uring}
EOF
printf '%s\n' '{K2}' > /tmp/h2.tls
chmod 600 /tmp/h2.tls
# perf PORT HOSTNQN [OPTIONS]: a write pass then a read pass of 1 s each; prints the passes' IOPS.
perf() {{
  local port=$1 host=$2; shift 2
  for w in randwrite randread; do
    timeout 60 "$NVMF_HOST_BIN" perf -t tcp -a 127.0.0.1 -s $port -n {NQN} --hostnqn $host -c 1 -q 4 -o 4096 \
      -w $w -T 1 "$@" > /tmp/perf.out 2>&1 || {{ cat /tmp/perf.out; return 1; }}
    printf '%s %s IOPS ' $w "$(sed -n 's/^Total *: *\([0-9.]*\).*/\1/p' /tmp/perf.out)"
  done
}}
tls() {{ metric "nvmf_target_tls_connections_total{{result=\"$1\"}}" || echo 0; }}
refused() {{
  if perf "$@" > /tmp/refused.out 2>&1; then fail "perf $* succeeded"; exit 1; fi
  echo "refused: $(grep -m1 -iE 'error|fail|refused|closed' /tmp/refused.out | cut -c1-160)"
}}
round() {{
  local io=$1
  nvmf_target_start tls-$io /tmp/$io.toml
  echo "$io h1 v0 sha256 (required): $(perf 4420 {H1} --tls-key '{K1}' --tls-identity-version 0)"
  echo "$io h1 v1 sha256 (required): $(perf 4420 {H1} --tls-key '{K1}')"
  echo "$io h2 v1 sha384 (allowed): $(perf 4421 {H2} --tls-key '{K2}' --tls-identity-version 1)"
  echo "$io h2 v0 sha384 digests (allowed): $(perf 4421 {H2} --tls-key '{K2}' --tls-identity-version 0 -g -G)"
  echo "$io plaintext (allowed): $(perf 4421 {H1})"
  echo "$io wrong key: $(refused 4420 {H1} --tls-key '{K2}')"
  echo "$io another host's key: $(refused 4420 {H2} --tls-key '{K1}')"
  echo "$io plaintext (required): $(refused 4420 {H1})"
  echo "$io counts secured=$(tls secured) plaintext=$(tls plaintext) failed=$(tls failed) plaintext_refused=$(tls plaintext_refused)"
  echo "$io refusal log lines: $(grep -c 'TLS: ' "$(daemon_log tls-$io)")"
  if [ $io = epoll ]; then
    tcpdump -i lo -s 0 -U -w /tmp/tls.pcap tcp port 4420 2>/tmp/tcpdump.log & tp=$!
    sleep 1.5
    perf 4420 {H1} --tls-key '{K1}' > /dev/null
    sleep 0.5; kill -INT $tp; wait $tp || true
    mkdir -p /tmp/streams
    python3 "$VM_SCRIPTS/pcap-streams.py" /tmp/tls.pcap /tmp/streams tls --port 4420
    for f in /tmp/streams/tls-*.bin; do
      echo "capture: $(python3 "$VM_SCRIPTS/tls-records.py" "$f" --forbid {NQN} --forbid {H1})"
    done
  fi
  stop_daemon tls-$io
}}
round epoll
round io_uring
collect_logs || true
"#,
        epoll = config("epoll"),
        io_uring = config("io_uring"),
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    println!("{}", out.report());
    out.assert_success();
    for io in ["epoll", "io_uring"] {
        out.assert_lines(&[
            &format!("{io} wrong key: refused: "),
            &format!("{io} another host's key: refused: "),
            &format!("{io} plaintext (required): refused: "),
        ]);
        let line = out.stdout.lines().find(|l| l.starts_with(&format!("{io} counts "))).unwrap_or_default();
        let count = |label: &str| -> u64 {
            let key = format!("{label}=");
            line.split_whitespace().find_map(|w| w.strip_prefix(&key)).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        // Each perf pass connects an admin queue and one I/O queue: 4 TLS runs of 2 passes.
        assert!(count("secured") >= 16, "{io}: secured connections: {line}");
        assert!(count("plaintext") >= 4, "{io}: plaintext connections on the allowed port: {line}");
        assert!(count("failed") >= 2, "{io}: failed handshakes (a wrong key, another host's key): {line}");
        assert!(count("plaintext_refused") >= 1, "{io}: plaintext refused on the required port: {line}");
    }
    // Two connections (admin, I/O) per pass, two passes, both directions.
    let captured = out.stdout.lines().filter(|l| l.starts_with("capture: ")).count();
    assert!(captured >= 8, "a stream per connection and direction: {}", out.stdout);
}

const CONCAT_NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-concat";
/// A host with a DH-HMAC-CHAP key at the target, which asks for secure channel concatenation.
const HC: &str = "nqn.2024-01.io.nvmf-rs:concat-host";
/// A host allowed without keys: nothing to authenticate, so nothing to generate a PSK from.
const HP: &str = "nqn.2024-01.io.nvmf-rs:plain-host";
/// 32 bytes 0x00..0x1f, not transformed (`DHHC-1:00:`).
const DHCHAP_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
/// Another 32 bytes: a secret the target does not hold.
const WRONG_KEY: &str = "DHHC-1:00:AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8ge/xg:";

/// Secure channel concatenation ours↔ours (`--concat`, as Linux 6.15's `nvme connect --concat`): the host
/// authenticates a plaintext admin queue asking for a generated PSK, then connects every queue again over TLS with
/// the `NVMe1G01` identity the target keeps for it; `nvmf-host perf` writes and reads over that. Refused: a host
/// without a key at the target, a wrong secret, a listener without TLS (concatenation mismatch) and one that
/// requires TLS from the first byte (the plaintext authentication cannot happen).
///
///     NVMF_VM=1 cargo test -p nvmf-tests --test vm_target_tls -- --nocapture secure_channel_concatenation
#[test]
fn our_host_and_target_with_secure_channel_concatenation() {
    let name = "our_host_and_target_with_secure_channel_concatenation";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).modules(["tls"]).cpus(2).deadline(Duration::from_secs(600)).with_our_daemons();
    let config = format!(
        r#"
[reactors]
threads = 2
[metrics]
listen = "127.0.0.1:9420"
[logging]
level = "info"
[[listener]]
address = "127.0.0.1"
port = 4420
tls = "allowed"
[[listener]]
address = "127.0.0.1"
port = 4421
[[listener]]
address = "127.0.0.1"
port = 4422
tls = "required"
[[subsystem]]
nqn = "{CONCAT_NQN}"
hosts = ["{HP}"]
[[subsystem.host]]
nqn = "{HC}"
dhchap_key = "{DHCHAP_KEY}"
[[subsystem.namespace]]
memory = "64MiB"
"#
    );
    let script = format!(
        r#"
set -eu
cat > /tmp/concat.toml <<'EOF'
{config}
EOF
perf() {{
  local port=$1 host=$2; shift 2
  for w in randwrite randread; do
    timeout 60 "$NVMF_HOST_BIN" perf -t tcp -a 127.0.0.1 -s $port -n {CONCAT_NQN} --hostnqn $host -c 1 -q 4 \
      -o 4096 -w $w -T 1 "$@" > /tmp/perf.out 2>&1 || {{ cat /tmp/perf.out; return 1; }}
    printf '%s %s IOPS ' $w "$(sed -n 's/^Total *: *\([0-9.]*\).*/\1/p' /tmp/perf.out)"
  done
}}
tls() {{ metric "nvmf_target_tls_connections_total{{result=\"$1\"}}" || echo 0; }}
refused() {{
  if perf "$@" > /tmp/refused.out 2>&1; then fail "perf $* succeeded"; exit 1; fi
  echo "refused: $(grep -m1 -iE 'error|fail|refused|closed|concat' /tmp/refused.out | cut -c1-200)"
}}
nvmf_target_start concat /tmp/concat.toml
echo "concat: $(perf 4420 {HC} --dhchap-secret '{DHCHAP_KEY}' --concat)"
echo "concat counts secured=$(tls secured) plaintext=$(tls plaintext) failed=$(tls failed)"
echo "generated PSKs logged: $(grep -c 'generated PSK kept' "$(daemon_log concat)" || true)"
echo "dhchap without concat: $(perf 4420 {HC} --dhchap-secret '{DHCHAP_KEY}')"
echo "no key at the target: $(refused 4420 {HP} --dhchap-secret '{DHCHAP_KEY}' --concat)"
echo "listener without TLS: $(refused 4421 {HC} --dhchap-secret '{DHCHAP_KEY}' --concat)"
echo "mismatch at the host: $(grep -ci 'concatenation mismatch' /tmp/refused.out || true)"
echo "mismatch logged: $(grep -c 'sc_c 0x02' "$(daemon_log concat)" || true)"
echo "wrong secret: $(refused 4420 {HC} --dhchap-secret '{WRONG_KEY}' --concat)"
echo "listener requiring TLS: $(refused 4422 {HC} --dhchap-secret '{DHCHAP_KEY}' --concat)"
echo "without a secret: $(refused 4420 {HC} --concat)"
stop_daemon concat
collect_logs || true
"#
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    println!("{}", out.report());
    out.assert_success();
    out.assert_lines(&[
        "concat: randwrite ",
        "dhchap without concat: randwrite ",
        "no key at the target: refused: ",
        "wrong secret: refused: ",
        "listener without TLS: refused: ",
        "listener requiring TLS: refused: ",
        "without a secret: refused: ",
    ]);
    let line = |prefix: &str| out.stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_owned();
    let concat = line("concat: ");
    assert!(concat.contains("randread ") && !concat.contains("randwrite  IOPS"), "{concat}");
    let counts = line("concat counts ");
    let count = |label: &str| -> u64 {
        let key = format!("{label}=");
        counts.split_whitespace().find_map(|w| w.strip_prefix(&key)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    // Each pass: a plaintext admin queue that authenticates, then the admin queue and one I/O queue over TLS.
    assert!(count("secured") >= 4, "TLS connections with the generated PSKs: {counts}");
    assert_eq!(count("plaintext"), 2, "only the authentications in the clear: {counts}");
    assert_eq!(count("failed"), 0, "{counts}");
    let generated: u64 = line("generated PSKs logged: ").rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(generated >= 2, "a generated PSK per pass: {}", out.stdout);
    assert!(line("without a secret: ").contains("--dhchap-secret"), "{}", out.stdout);
    // The listener without TLS refuses concatenation with AUTH_Failure1 reason 03h, and says why in its log.
    for what in ["mismatch at the host: ", "mismatch logged: "] {
        let n: u64 = line(what).rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(n >= 1, "{what}{n}: {}", out.stdout);
    }
}
