//! NVMe/TCP over TLS 1.3 with pre-shared keys between our host and our target, in a guest (kTLS needs the kernel's
//! `tls` module, which the machine running the tests may lack): listeners with `tls = "required"` and `"allowed"`,
//! two hosts with keys in `[[subsystem.host]]` (SHA-256 and SHA-384, identity versions 0 and 1), `nvmf-host perf`
//! with `--tls-key` writing and reading over each, refusals (a wrong key, plaintext on the required port, a key of
//! another host's NQN), and `nvmf_target_tls_connections_total` counting each outcome.
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

fn config() -> String {
    format!(
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
    let vm = Vm::new(name).logs(logs).modules(["tls"]).cpus(2).deadline(Duration::from_secs(600)).with_our_daemons();
    let script = format!(
        r#"
set -eu
CONFIG=/tmp/nvmf-target.toml
cat > $CONFIG <<'EOF'
{config}
EOF
printf '%s\n' '{K2}' > /tmp/h2.tls
chmod 600 /tmp/h2.tls
nvmf_target_start target $CONFIG
# perf PORT HOSTNQN [OPTIONS]: a write pass then a read pass of 2 s each.
perf() {{
  local port=$1 host=$2; shift 2
  for w in randwrite randread; do
    timeout 60 "$NVMF_HOST_BIN" perf -t tcp -a 127.0.0.1 -s $port -n {NQN} --hostnqn $host -c 1 -q 4 -o 4096 \
      -w $w -T 2 "$@" > /tmp/perf.out 2>&1 || {{ cat /tmp/perf.out; return 1; }}
    tail -1 /tmp/perf.out | tr -s ' '
  done
}}
tls() {{ metric "nvmf_target_tls_connections_total{{result=\"$1\"}}" || echo 0; }}
echo "h1 v0 sha256 (required): $(perf 4420 {H1} --tls-key '{K1}' --tls-identity-version 0 | tr '\n' ' ')"
echo "h1 v1 sha256 (required): $(perf 4420 {H1} --tls-key '{K1}' | tr '\n' ' ')"
echo "h2 v1 sha384 (allowed): $(perf 4421 {H2} --tls-key '{K2}' --tls-identity-version 1 | tr '\n' ' ')"
echo "h2 v0 sha384 (allowed): $(perf 4421 {H2} --tls-key '{K2}' --tls-identity-version 0 | tr '\n' ' ')"
echo "plaintext (allowed): $(perf 4421 {H1} | tr '\n' ' ')"
echo "count secured=$(tls secured) plaintext=$(tls plaintext)"
refused() {{
  if perf "$@" > /tmp/refused.out 2>&1; then fail "perf $* succeeded"; exit 1; fi
  echo "refused: $(grep -m1 -iE 'error|fail|refused|closed' /tmp/refused.out | cut -c1-160)"
}}
echo "wrong key: $(refused 4420 {H1} --tls-key '{K2}')"
echo "another host's key: $(refused 4420 {H2} --tls-key '{K1}')"
echo "plaintext (required): $(refused 4420 {H1})"
echo "count failed=$(tls failed) plaintext_refused=$(tls plaintext_refused)"
echo "refusal log lines: $(grep -c 'TLS: ' "$(daemon_log target)")"
collect_logs || true
"#,
        config = config()
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    println!("{}", out.report());
    out.assert_success();
    out.assert_lines(&["wrong key: refused: ", "another host's key: refused: ", "plaintext (required): refused: "]);
    let count = |label: &str| -> u64 {
        let key = format!("{label}=");
        out.stdout
            .split_whitespace()
            .filter_map(|w| w.strip_prefix(&key))
            .filter_map(|v| v.parse().ok())
            .next_back()
            .unwrap_or(0)
    };
    // Each perf run connects an admin queue and one I/O queue: 4 TLS hosts, 2 passes each.
    assert!(count("secured") >= 16, "secured connections: {}", out.stdout);
    assert!(count("plaintext") >= 4, "plaintext connections on the allowed port: {}", out.stdout);
    assert!(count("failed") >= 2, "failed handshakes (a wrong key, another host's key): {}", out.stdout);
    assert!(count("plaintext_refused") >= 1, "plaintext refused on the required port: {}", out.stdout);
}
