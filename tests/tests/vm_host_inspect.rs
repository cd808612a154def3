//! `nvmf-host`'s inspection commands against nvme-cli in the test VM: the kernel host connects (`nvme connect`)
//! to a kernel target (nvmet-tcp, a null_blk namespace) and to ours (`nvmf-target`, a memory namespace), and for
//! each target `nvme id-ctrl`, `id-ns`, `list-ns`, `smart-log`, `error-log` and `list-subsys` with `-o json` (the
//! guest's nvme-cli, Debian 12's 2.3) are compared field by field with `nvmf-host`'s answers over its own
//! association to the same controller; `get-log` of the Commands Supported and Effects log must be byte-identical.
//!
//! Fields allowed to differ, and why:
//! - id-ctrl `cntlid`: each association is its own controller.
//! - smart-log: none. Both targets report the subsystem's totals, the same for every controller (nvmet its
//!   namespaces' block-layer counts, ours every association's I/O); ours is read between two reads of the
//!   kernel's and must equal one of them.
//! - error-log: the entries belong to each controller; the number of entries and their keys must match.
//! - list-subsys: the path `Name` (the kernel's device; ours is no device: `cntlid=N`), the kernel's `Address`
//!   ends with `,src_addr=…` (its socket's source, which ours does not report: it must be a prefix), and the
//!   host-level keys (nvme-cli's from /etc/nvme, ours from the same files, but a missing hostid is derived).
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_inspect -- --nocapture

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Vm, VmOutput};
use serde_json::Value;

const KERNEL_NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-inspect-nvmet";
const OUR_NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-inspect-ours";

/// One JSON answer: (target, command, who) → the value.
type Answers = BTreeMap<(String, String, String), Value>;

/// The `prefix` lines of the scenario's output: `JSON` (the answers) or `KEYS` (their top-level keys in the order
/// printed, which a parsed `Value` does not keep).
fn answers(out: &VmOutput, prefix: &str) -> Answers {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let mut next = || parts.next().unwrap_or_default().to_owned();
            let (target, command, who, json) = (next(), next(), next(), next());
            let v = serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("{target} {command} {who}: not JSON ({e}): {json}"));
            ((target, command, who), v)
        })
        .collect()
}

fn get<'a>(a: &'a Answers, out: &VmOutput, target: &str, command: &str, who: &str) -> &'a Value {
    a.get(&(target.to_owned(), command.to_owned(), who.to_owned()))
        .unwrap_or_else(|| panic!("no {target} {command} {who} answer\n{}", out.report()))
}

/// Where two JSON objects disagree: keys only one has, and values that differ outside `may_differ`.
fn differences(kernel: &Value, ours: &Value, may_differ: &[&str]) -> Vec<String> {
    let (Some(k), Some(o)) = (kernel.as_object(), ours.as_object()) else {
        return vec![format!("not both objects: {kernel} / {ours}")];
    };
    let mut diffs = Vec::new();
    for key in k.keys().filter(|key| !o.contains_key(*key)) {
        diffs.push(format!("{key}: only nvme-cli has it ({})", k[key]));
    }
    for key in o.keys().filter(|key| !k.contains_key(*key)) {
        diffs.push(format!("{key}: only nvmf-host has it ({})", o[key]));
    }
    for (key, kv) in k.iter().filter(|(key, _)| !may_differ.contains(&key.as_str())) {
        if let Some(ov) = o.get(key).filter(|ov| *ov != kv) {
            diffs.push(format!("{key}: nvme-cli {kv}, nvmf-host {ov}"));
        }
    }
    diffs
}

/// Records in `failures` where `kernel` and `ours` disagree (see [`differences`]).
fn check(failures: &mut Vec<String>, what: &str, kernel: &Value, ours: &Value, may_differ: &[&str]) {
    failures.extend(differences(kernel, ours, may_differ).into_iter().map(|d| format!("{what}: {d}")));
}

/// The first path of `nqn`'s subsystem in a `list-subsys -o json` answer, and the subsystem.
fn subsystem_path<'a>(list: &'a Value, nqn: &str) -> Option<(&'a Value, &'a Value)> {
    let subsystem =
        list.as_array()?.iter().find_map(|host| host["Subsystems"].as_array()?.iter().find(|s| s["NQN"] == nqn))?;
    Some((subsystem, subsystem["Paths"].get(0)?))
}

#[test]
fn inspection_commands_answer_as_nvme_cli() {
    let name = "inspection_commands_answer_as_nvme_cli";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .logs(logs.clone())
        .modules(["nvmet", "nvmet_tcp", "null_blk", "nvme_tcp"])
        .deadline(Duration::from_secs(300));
    let vm = vm.with_our_daemons();
    let script = format!(
        r#"
set -eu
nvmet_subsys_nullblk {KERNEL_NQN} 64
nvmet_tcp_port 1 127.0.0.1 4420 {KERNEL_NQN}
cat > /tmp/target.toml <<'EOF'
[[listener]]
address = "127.0.0.1"
port = 4421
[[subsystem]]
nqn = "{OUR_NQN}"
[[subsystem.namespace]]
memory = "64MiB"
EOF
nvmf_target_start target /tmp/target.toml

# One answer a line: JSON <target> <command> <who> <compact JSON>.
emit() {{
  local t=$1 cmd=$2 who=$3 out
  shift 3
  out=$("$@") || {{ fail "$*"; return 1; }}
  echo "JSON $t $cmd $who $(printf '%s' "$out" | jq -c .)"
  echo "KEYS $t $cmd $who $(printf '%s' "$out" | jq -c 'if type == "object" then keys_unsorted else [] end')"
}}

inspect() {{
  local t=$1 port=$2 nqn=$3 dev ctrl
  dev=$(host_connect tcp 127.0.0.1 "$port" "$nqn" -i 1)
  ctrl=/dev/$(ctrl_of "$nqn")
  set -- -t tcp -a 127.0.0.1 -s "$port" -n "$nqn"
  emit "$t" id-ctrl kernel nvme id-ctrl "$ctrl" -o json
  emit "$t" id-ctrl ours "$NVMF_HOST_BIN" id-ctrl "$@" -o json
  emit "$t" id-ns kernel nvme id-ns "$dev" -o json
  emit "$t" id-ns ours "$NVMF_HOST_BIN" id-ns "$@" -N 1 -o json
  emit "$t" list-ns kernel nvme list-ns "$ctrl" -o json
  emit "$t" list-ns ours "$NVMF_HOST_BIN" list-ns "$@" -o json
  emit "$t" smart-log kernel nvme smart-log "$ctrl" -o json
  emit "$t" smart-log ours "$NVMF_HOST_BIN" smart-log "$@" -o json
  emit "$t" smart-log kernel-again nvme smart-log "$ctrl" -o json
  emit "$t" error-log kernel nvme error-log "$ctrl" -e 4 -o json
  emit "$t" error-log ours "$NVMF_HOST_BIN" error-log "$@" -e 4 -o json
  emit "$t" list-subsys kernel nvme list-subsys -o json
  emit "$t" list-subsys ours "$NVMF_HOST_BIN" list-subsys "$@" -o json
  nvme get-log "$ctrl" --log-id=5 --log-len=4096 -b > /tmp/$t-effects-kernel.bin
  "$NVMF_HOST_BIN" get-log "$@" --log-id 5 --log-len 4096 -b > /tmp/$t-effects-ours.bin
  cmp /tmp/$t-effects-kernel.bin /tmp/$t-effects-ours.bin && echo "$t get-log 5: identical"
  host_disconnect "$nqn"
}}

inspect nvmet 4420 {KERNEL_NQN}
inspect ours 4421 {OUR_NQN}
stop_daemon target
echo "inspect: ok"
"#
    );
    let start = Instant::now();
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: scenario took {:.1} s", start.elapsed().as_secs_f64()));
    out.assert_success();
    assert!(out.stdout.contains("inspect: ok"), "{}", out.report());
    // Every answer beside the other logs, for reading a difference.
    let _ = std::fs::write(logs.join("answers.txt"), &out.stdout);
    let a = answers(&out, "JSON ");
    let keys = answers(&out, "KEYS ");
    // 13 answers a target; id-ctrl has nvme-cli's ~90 fields, so a comparison of near-empty objects cannot pass.
    assert_eq!(a.len(), 26, "{}", out.report());
    let id_ctrl_fields = get(&a, &out, "nvmet", "id-ctrl", "kernel").as_object().map_or(0, serde_json::Map::len);
    assert!(id_ctrl_fields > 80, "{}", out.report());
    vm::note(&format!("{name}: {} answers, {id_ctrl_fields} id-ctrl fields each", a.len()));
    let mut failures = Vec::new();
    for (target, nqn) in [("nvmet", KERNEL_NQN), ("ours", OUR_NQN)] {
        let f = &mut failures;
        let answer = |command: &str, who: &str| get(&a, &out, target, command, who);
        // nvme-cli's key order too, where the answer is an object.
        for command in ["id-ctrl", "id-ns", "list-ns", "smart-log", "error-log"] {
            let (k, o) = (get(&keys, &out, target, command, "kernel"), get(&keys, &out, target, command, "ours"));
            if k != o {
                f.push(format!("{target} {command}: keys in order nvme-cli {k}, nvmf-host {o}"));
            }
        }
        check(f, &format!("{target} id-ctrl"), answer("id-ctrl", "kernel"), answer("id-ctrl", "ours"), &["cntlid"]);
        check(f, &format!("{target} id-ns"), answer("id-ns", "kernel"), answer("id-ns", "ours"), &[]);
        check(f, &format!("{target} list-ns"), answer("list-ns", "kernel"), answer("list-ns", "ours"), &[]);

        let (kernel, again, ours) =
            (answer("smart-log", "kernel"), answer("smart-log", "kernel-again"), answer("smart-log", "ours"));
        // Both reads of the kernel's controller bracket ours: with no I/O between, ours equals either (both
        // targets report the subsystem's totals, the same for every controller).
        let (before, after) = (differences(kernel, ours, &[]), differences(again, ours, &[]));
        if !before.is_empty() && !after.is_empty() {
            check(f, &format!("{target} smart-log"), again, ours, &[]);
        }

        let (kernel, ours) = (answer("error-log", "kernel"), answer("error-log", "ours"));
        let (k, o) = (kernel["errors"].as_array(), ours["errors"].as_array());
        match (k, o) {
            (Some(k), Some(o)) if k.len() == o.len() => {
                for (ke, oe) in k.iter().zip(o) {
                    let all: Vec<&str> =
                        ke.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
                    check(f, &format!("{target} error-log entry"), ke, oe, &all);
                }
            }
            _ => f.push(format!("{target} error-log: nvme-cli {kernel}, nvmf-host {ours}")),
        }

        let (kernel, ours) = (answer("list-subsys", "kernel"), answer("list-subsys", "ours"));
        match (subsystem_path(kernel, nqn), subsystem_path(ours, nqn)) {
            (Some((ks, kp)), Some((os, op))) => {
                check(
                    f,
                    &format!("{target} list-subsys subsystem"),
                    &serde_json::json!({"NQN": ks["NQN"]}),
                    &serde_json::json!({"NQN": os["NQN"]}),
                    &[],
                );
                check(f, &format!("{target} list-subsys path"), kp, op, &["Name", "Address"]);
                let (ka, oa) = (kp["Address"].as_str().unwrap_or_default(), op["Address"].as_str().unwrap_or("?"));
                if !ka.starts_with(oa) {
                    f.push(format!("{target} list-subsys: address {oa:?} is not the start of the kernel's {ka:?}"));
                }
            }
            _ => f.push(format!("{target} list-subsys: no {nqn} in nvme-cli {kernel} or nvmf-host {ours}")),
        }
        if !out.stdout.contains(&format!("{target} get-log 5: identical")) {
            f.push(format!("{target} get-log 5: the bytes differ"));
        }
    }
    assert!(failures.is_empty(), "nvmf-host differs from nvme-cli:\n{}\n{}", failures.join("\n"), out.report());
}

/// The comparison itself (no VM): a key only one side has and a differing value are found, unless allowed.
#[test]
fn differences_finds_missing_keys_and_other_values() {
    let kernel = serde_json::json!({"sn": "A", "cntlid": 1, "nn": 1024, "lbafs": [{"ds": 9}]});
    let ours = serde_json::json!({"sn": "A", "cntlid": 2, "mdts": 8, "lbafs": [{"ds": 12}]});
    let all = differences(&kernel, &ours, &[]);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.iter().any(|d| d.starts_with("nn: only nvme-cli")), "{all:?}");
    assert!(all.iter().any(|d| d.starts_with("mdts: only nvmf-host")), "{all:?}");
    assert_eq!(differences(&kernel, &ours, &["cntlid", "lbafs"]).len(), 2);
    assert!(differences(&kernel, &kernel, &[]).is_empty());
}
