//! NVMe reservations against the Linux kernel, in the test VM: our host's CLI against the kernel target (nvmet)
//! and ours side by side, and our target under two kernel hosts on two lab nodes.
//!
//! `our_host_cli_reserves_on_kernel_nvmet`: one guest (Linux 6.13 or later: nvmet takes reservations on a
//! namespace with `resv_enable`) runs nvmet-tcp (a null_blk namespace) and our target; `nvmf-host resv-register`,
//! `resv-acquire`, `resv-release`, `resv-report` and `perf` (the reads and writes), each command its own association,
//! play three hosts (three host NQN / host ID pairs: A the holder, B a registrant, C never registered) through the
//! same sequence against each: every reservation type, with what a read and a write of each host get; the
//! conflicts of an Acquire by another host; Release naming the wrong type; preempt and preempt-and-abort; release
//! and clear; the report in both formats (the regular one, EDS=0, is refused on NVMe-oF: the host IDs are 128-bit)
//! and our CLI's text and JSON output. Every outcome is asserted for both targets against the NVMe Base
//! Specification, every report is asserted and must be the same from both; where nvmet departs from the
//! specification its own behaviour is asserted, and the comments at those assertions say so.
//!
//! `kernel_hosts_reserve_preempt_and_persist`: a lab of three nodes (one vCPU each, the backports kernel): `target`
//! runs our target (a TCP listener on each of its link addresses, a state directory), `a` and `b` each run the
//! kernel host (nvme-cli, each node's own host NQN and host ID) on their link to it. A registers key 1 with PTPL
//! on (`--cptpl=3`) and acquires Write Exclusive; B (key 2) gets Reservation Conflict on a write and reads; the
//! report shows both registrants and the holder; B's Acquire conflicts; B preempts A, whose write then conflicts; B
//! releases; A registers again (key 5) and holds Write Exclusive; the target restarts with the same state
//! directory and both kernel hosts reconnect by themselves: the report and B's conflict are as before (persist
//! through power loss); A clears. The reports are asserted whole, with the host IDs read from each node's
//! `/etc/nvme/hostid`.
//!
//! The binaries run in the guests from the cargo build ([`nvmf_tests::workspace_bin`]). Opt-in like every VM
//! scenario: `NVMF_VM=1` (`.ci/run`: `NVMF_REQUIRE_VM=1`). Logs land in `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_reservations -- --nocapture

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_tests::vm::{self, Kernel, KernelLine, Lab, RunningLab, Vm, VmOutput};
use serde_json::{json, Value};

const HOSTID_A: &str = "0a0a0a0a-0000-4000-8000-00000000000a";
const HOSTID_B: &str = "0b0b0b0b-0000-4000-8000-00000000000b";
const HOSTID_C: &str = "0c0c0c0c-0000-4000-8000-00000000000c";

/// Reservation types (Base 2.1 Figure 645 / 2.2 Figure 572), by their encoding.
const TYPES: [(u8, &str); 6] = [
    (1, "Write Exclusive"),
    (2, "Exclusive Access"),
    (3, "Write Exclusive - Registrants Only"),
    (4, "Exclusive Access - Registrants Only"),
    (5, "Write Exclusive - All Registrants"),
    (6, "Exclusive Access - All Registrants"),
];

/// Base 2.1 Figure 645, "Command Behavior in the Presence of a Reservation": whether a read and a write are
/// allowed under reservation type `rtype` for the holder, a registrant and a non-registrant.
fn allowed(rtype: u8, host: Role) -> (bool, bool) {
    let (registrant, non_registrant) = match rtype {
        1 => ((true, false), (true, false)),
        2 => ((false, false), (false, false)),
        3 | 5 => ((true, true), (true, false)),
        4 | 6 => ((true, true), (false, false)),
        _ => unreachable!("reservation type {rtype}"),
    };
    match host {
        Role::Holder => (true, true),
        Role::Registrant => registrant,
        Role::NonRegistrant => non_registrant,
    }
}

#[derive(Debug, Clone, Copy)]
enum Role {
    Holder,
    Registrant,
    NonRegistrant,
}

/// What a step of `our_host_cli_reserves_on_kernel_nvmet` got, from its `LABEL: rc=N OUTPUT` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Conflict,
    InvalidField,
    HostIdFormat,
    Other,
}

fn outcome_of(line: &str) -> Outcome {
    let l = line.to_lowercase();
    if line.starts_with("rc=0 ") {
        Outcome::Ok
    } else if l.contains("reservation conflict") || l.contains("reservation_conflict") {
        Outcome::Conflict
    } else if l.contains("host_identifier_inconsistent_format") {
        Outcome::HostIdFormat
    } else if l.contains("invalid_field") {
        Outcome::InvalidField
    } else {
        Outcome::Other
    }
}

/// The lines one target's sequence printed (`TARGET LABEL: …`), and the mismatches found so far.
struct Steps<'a> {
    out: &'a VmOutput,
    target: &'static str,
    wrong: Vec<String>,
}

impl<'a> Steps<'a> {
    fn new(out: &'a VmOutput, target: &'static str) -> Self {
        Self { out, target, wrong: Vec::new() }
    }

    fn line(&self, label: &str) -> &'a str {
        let prefix = format!("{} {label}: ", self.target);
        self.out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", self.out.report()))
    }

    /// Step `label` got `want`.
    fn expect(&mut self, label: &str, want: Outcome) {
        let line = self.line(label);
        let got = outcome_of(line);
        if got != want {
            self.wrong.push(format!("{} {label}: expected {want:?}, got {got:?}: {line}", self.target));
        }
    }

    /// The JSON of report `label` (`TARGET report LABEL: JSON`).
    fn report(&self, label: &str) -> Value {
        let json = self.line(&format!("report {label}"));
        serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("{} report {label}: not JSON ({e}): {json}\n{}", self.target, self.out.report()))
    }

    /// Report `label` is `want` (generation, type, and the registrants in registration order: host, key, holds).
    fn expect_report(&mut self, label: &str, gen: u32, rtype: u8, regs: &[(&str, u64, bool)]) {
        let want = extended_report(gen, rtype, false, regs);
        let got = self.report(label);
        if got != want {
            self.wrong.push(format!("{} report {label}:\n  expected {want}\n  got      {got}", self.target));
        }
    }
}

/// nvme-cli's and our CLI's `resv-report --eds -o json` for a dynamic-controller subsystem (CNTLID FFFFh).
fn extended_report(gen: u32, rtype: u8, ptpls: bool, regs: &[(&str, u64, bool)]) -> Value {
    let regs: Vec<Value> = regs
        .iter()
        .map(|&(hostid, rkey, holds)| {
            json!({"cntlid": 65535, "rcsts": u8::from(holds), "hostid": hostid.replace('-', "").to_lowercase(), "rkey": rkey})
        })
        .collect();
    json!({"gen": gen, "rtype": rtype, "regctl": regs.len(), "ptpls": u8::from(ptpls), "regctlext": regs})
}

/// The guest side of `our_host_cli_reserves_on_kernel_nvmet`: `sequence TARGET PORT NQN` runs every step against
/// one target and prints `TARGET LABEL: rc=N OUTPUT` per step and `TARGET report LABEL: JSON` per report (C's,
/// extended).
const CLI_SEQUENCE: &str = r#"
H() { timeout 60 "$NVMF_HOST_BIN" "$@"; }
# LABEL CMD...: "LABEL: rc=N OUTPUT" (its stdout and stderr on one line).
run() {
  local label=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  echo "$label: rc=$rc $(echo "$out" | tr '\n' ' ' | head -c 400)"
}
sequence() {
  local t=$1 start=$SECONDS rt other h op
  local c=(-t tcp -a 127.0.0.1 -s $2 -n $3)
  local a=("${c[@]}" -q $A -I $HA) b=("${c[@]}" -q $B -I $HB) x=("${c[@]}" -q $C -I $HC)
  # perf: one queue, one command at a time, 512-byte I/O, one second (or until the first error).
  local p=(-a 127.0.0.1 -s $2 -n $3 -T 1 -q 1 -c 1 -o 512)
  io() { # HOST read|write LABEL
    local n=$1 i
    case $1 in A) n=$A i=$HA ;; B) n=$B i=$HB ;; C) n=$C i=$HC ;; esac
    run "$t $3" H perf "${p[@]}" --hostnqn $n -I $i -w rand$2
  }
  report() {
    local out rc=0
    out=$(H resv-report "${x[@]}" -N 1 --eds -o json 2>&1) || rc=$?
    if [ $rc = 0 ]; then echo "$t report $1: $(echo "$out" | jq -c .)"; else echo "$t report $1: rc=$rc $(echo "$out" | tr '\n' ' ')"; fi
  }

  H id-ctrl "${x[@]}" -o json | jq -r --arg t $t '"\($t) oncs: \(.oncs)"'
  H id-ns "${x[@]}" -N 1 -o json | jq -r --arg t $t '"\($t) rescap: \(.rescap)"'
  report none
  run "$t A register" H resv-register "${a[@]}" -N 1 --nrkey 0xa1
  run "$t B register" H resv-register "${b[@]}" -N 1 --nrkey 0xb2
  run "$t A register again" H resv-register "${a[@]}" -N 1 --nrkey 0xa1
  run "$t A register another key" H resv-register "${a[@]}" -N 1 --nrkey 0xa9
  run "$t C unregister" H resv-register "${x[@]}" -N 1 --rrega 1
  report registered
  run "$t regular report" H resv-report "${x[@]}" -N 1 -o json

  for rt in 1 2 3 4 5 6; do
    other=$((rt % 6 + 1))
    run "$t A acquire $rt" H resv-acquire "${a[@]}" -N 1 --crkey 0xa1 --rtype $rt
    run "$t B acquire $rt" H resv-acquire "${b[@]}" -N 1 --crkey 0xb2 --rtype $rt
    run "$t C acquire $rt" H resv-acquire "${x[@]}" -N 1 --rtype $rt
    run "$t A acquire another type $rt" H resv-acquire "${a[@]}" -N 1 --crkey 0xa1 --rtype $other
    for h in A B C; do
      for op in read write; do io $h $op "$h $op $rt"; done
    done
    report held-$rt
    if [ $rt = 1 ]; then echo "$t report-text held-1: $(H resv-report "${x[@]}" -N 1 --eds 2>&1 | tr '\n' '|')"; fi
    run "$t A release type $other $rt" H resv-release "${a[@]}" -N 1 --crkey 0xa1 --rtype $other
    if [ $rt -le 4 ]; then run "$t B release $rt" H resv-release "${b[@]}" -N 1 --crkey 0xb2 --rtype $rt; fi
    report after-wrong-releases-$rt
    run "$t A release $rt" H resv-release "${a[@]}" -N 1 --crkey 0xa1 --rtype $rt
    report released-$rt
  done

  run "$t A acquire for preempt" H resv-acquire "${a[@]}" -N 1 --crkey 0xa1 --rtype 1
  run "$t B preempt" H resv-acquire "${b[@]}" -N 1 --crkey 0xb2 --prkey 0xa1 --rtype 3 --racqa 1
  report preempted
  io A write "A write after preempt"
  io A read "A read after preempt"
  run "$t A register after preempt" H resv-register "${a[@]}" -N 1 --nrkey 0xa1
  run "$t A preempt and abort" H resv-acquire "${a[@]}" -N 1 --crkey 0xa1 --prkey 0xb2 --rtype 2 --racqa 2
  report aborted
  io B read "B read after abort"
  io A read "A read after abort"
  run "$t C preempt" H resv-acquire "${x[@]}" -N 1 --prkey 0xa1 --rtype 2 --racqa 1
  run "$t B release unregistered" H resv-release "${b[@]}" -N 1 --crkey 0xb2 --rtype 2
  run "$t B register again" H resv-register "${b[@]}" -N 1 --nrkey 0xb2
  run "$t B clear" H resv-release "${b[@]}" -N 1 --crkey 0xb2 --rrela 1
  report cleared
  io C write "C write after clear"
  echo "$t sequence took $((SECONDS - start)) s"
}
"#;

/// Our host's CLI (`nvmf-host resv-*`, `perf` for the I/O) as three hosts against the kernel target (nvmet-tcp,
/// null_blk, `resv_enable`) and against ours in the same guest, the same sequence against each (see the module
/// doc); every step's outcome and every report asserted for both.
#[test]
fn our_host_cli_reserves_on_kernel_nvmet() {
    let name = "our_host_cli_reserves_on_kernel_nvmet";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name)
        .kernel(Kernel::at_least(6, 13))
        .logs(logs)
        .modules(["nvmet", "nvmet_tcp", "null_blk"])
        .deadline(Duration::from_secs(900));
    let vm = vm.with_our_daemons();
    let script = format!(
        r#"
set -eu
KNQN=nqn.2024-01.io.nvmf-rs:vm-resv-nvmet
ONQN=nqn.2024-01.io.nvmf-rs:vm-resv-ours
HA={HOSTID_A} HB={HOSTID_B} HC={HOSTID_C}
A=nqn.2014-08.org.nvmexpress:uuid:$HA
B=nqn.2014-08.org.nvmexpress:uuid:$HB
C=nqn.2014-08.org.nvmexpress:uuid:$HC

# nvmet: a null_blk namespace (a file in the guest's overlay root would get a 1-byte LBA format from nvmet, which
# nvmf-host refuses) with reservations: resv_enable (Linux 6.13+) is set before the namespace is enabled.
nb=$(nullblk_create resvnb 64)
s=$NVMET/subsystems/$KNQN
mkdir -p $s
echo 1 > $s/attr_allow_any_host
mkdir $s/namespaces/1
echo -n $nb > $s/namespaces/1/device_path
echo 1 > $s/namespaces/1/resv_enable
echo 1 > $s/namespaces/1/enable
nvmet_tcp_port 1 127.0.0.1 4420 $KNQN

cat > /tmp/target.toml <<'EOF'
[[listener]]
address = "127.0.0.1"
port = 4421
[[subsystem]]
nqn = "nqn.2024-01.io.nvmf-rs:vm-resv-ours"
[[subsystem.namespace]]
memory = "64MiB"
block_size = 512
EOF
nvmf_target_start target /tmp/target.toml
{CLI_SEQUENCE}
# The two targets' sequences at once (each its own hosts' associations; the guest has two vCPUs), printed in turn.
sequence ours 4421 $ONQN > /tmp/sequence-ours.out 2>&1 &
ours=$!
sequence nvmet 4420 $KNQN > /tmp/sequence-nvmet.out 2>&1 &
nvmet_rc=0; wait $! || nvmet_rc=$?
ours_rc=0; wait $ours || ours_rc=$?
cat /tmp/sequence-ours.out /tmp/sequence-nvmet.out # before a failure ends the script, so its report shows them
[ "$ours_rc$nvmet_rc" = 00 ] # one test: under set -e it ends the script
echo "kernel: $(uname -r)"
stop_daemon target
nvmet_teardown
echo "reservations via nvmf-host: done"
"#
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    vm::note(&format!("{name}: {}", out.timing()));
    for t in ["ours", "nvmet"] {
        if let Some(l) = out.stdout.lines().find(|l| l.starts_with(&format!("{t} sequence took"))) {
            vm::note(&format!("{name}: {l}"));
        }
    }
    out.assert_success();
    out.assert_lines(&["reservations via nvmf-host: done\n"]);
    check_cli(&out);
    let kernel = out.stdout.lines().find_map(|l| l.strip_prefix("kernel: ")).unwrap_or("?");
    vm::note(&format!("{name}: nvmet (Linux {kernel}) and ours took the whole sequence"));
}

/// Every step and report of both targets' sequences.
fn check_cli(out: &VmOutput) {
    let mut all_wrong = Vec::new();
    let mut reports = Vec::new();
    for target in ["ours", "nvmet"] {
        let mut s = Steps::new(out, target);
        spec_outcomes(&mut s);
        // Where nvmet departs from the specification (or the specification leaves room), each its own.
        for rtype in [5, 6] {
            // All Registrants: every registrant is a reservation holder (Base 2.1 Figure 645: "All Registrants are
            // Reservation Holders"), and a holder acquiring the type it already holds is not an error (Base 2.1
            // §8.1.22.5, Acquiring a Reservation). nvmet keeps one registrant as "the" holder (pr.c) and answers
            // every other registrant Reservation Conflict.
            let b_acquires = if target == "ours" { Outcome::Ok } else { Outcome::Conflict };
            s.expect(&format!("B acquire {rtype}"), b_acquires);
        }
        for (rtype, _) in TYPES {
            // Reservation Release naming another type than the one held: "the controller should return a status
            // code of Invalid Field in Command" (Base 2.2 Figure 577, RTYPE); nvmet answers Reservation Conflict.
            let wrong_type = if target == "ours" { Outcome::InvalidField } else { Outcome::Conflict };
            s.expect(&format!("A release type {} {rtype}", rtype % 6 + 1), wrong_type);
        }
        // Identify: ONCS bit 5 (reservations) and RESCAP: every type and IEKEY per 1.3 (bits 7:1); persist through
        // power loss (bit 0) ours with its state directory (by default /var/lib/nvmf-target), not nvmet.
        let field = |what: &str| s.line(what).trim().parse::<u64>().unwrap_or(u64::MAX);
        let (oncs, rescap) = (field("oncs"), field("rescap"));
        if oncs & 1 << 5 == 0 {
            s.wrong.push(format!("{target}: ONCS {oncs} lacks reservations"));
        }
        let want = if target == "ours" { 0xff } else { 0xfe };
        if rescap != want {
            s.wrong.push(format!("{target}: RESCAP {rescap} (expected {want})"));
        }
        // Our CLI's text report (nvme-cli's layout), the holder first.
        let text = s.line("report-text held-1");
        let hex = |h: &str| h.replace('-', "");
        for want in [
            "|gen       : 3|rtype     : 1|regctl    : 2|ptpls     : 0|".to_owned(),
            format!("|regctlext[0] :|  cntlid  : ffff|  rcsts   : 1|  hostid  : {}|  rkey    : a1|", hex(HOSTID_A)),
            format!("|regctlext[1] :|  cntlid  : ffff|  rcsts   : 0|  hostid  : {}|  rkey    : b2|", hex(HOSTID_B)),
        ] {
            if !text.contains(&want) {
                s.wrong.push(format!("{target} report-text held-1 lacks {want:?}: {text}"));
            }
        }
        all_wrong.extend(s.wrong);
        reports.push(out.stdout.lines().filter(|l| l.starts_with(&format!("{target} report "))).count());
    }
    // Every report is the same from both targets (the same sequence of states: the steps where they answer
    // differently change nothing on either).
    let labels: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ours report "))
        .filter_map(|l| l.split(": ").next())
        .collect();
    assert_eq!(reports, vec![labels.len(), labels.len()], "both targets printed every report\n{}", out.report());
    for label in labels {
        let (ours, nvmet) = (Steps::new(out, "ours").report(label), Steps::new(out, "nvmet").report(label));
        if ours != nvmet {
            all_wrong.push(format!("report {label} differs:\n  ours  {ours}\n  nvmet {nvmet}"));
        }
    }
    assert!(all_wrong.is_empty(), "{}\n\n{}", all_wrong.join("\n"), out.report());
}

/// The outcomes the specification leaves no choice about, the same for both targets.
fn spec_outcomes(s: &mut Steps) {
    use Outcome::*;
    // Register: new hosts succeed; a registrant registering again with its key succeeds (and moves the generation:
    // Base 2.2 Figure 582, GEN), with another key conflicts; a host that is not registered cannot unregister.
    s.expect("A register", Ok);
    s.expect("B register", Ok);
    s.expect("A register again", Ok);
    s.expect("A register another key", Conflict);
    s.expect("C unregister", Conflict);
    s.expect_report("none", 0, 0, &[]);
    s.expect_report("registered", 3, 0, &[(HOSTID_A, 0xa1, false), (HOSTID_B, 0xb2, false)]);
    // Reservation Report with EDS cleared: "If a 128-bit Host Identifier has been specified and the Extended Data
    // Structure bit is cleared to '0' … the controller shall abort the command with the status code of Host
    // Identifier Inconsistent Format" (Base 2.2 §7.8); an NVMe-oF host's ID is always 128-bit (Connect).
    s.expect("regular report", HostIdFormat);

    for (rtype, _) in TYPES {
        s.expect(&format!("A acquire {rtype}"), Ok);
        // Figure 646: Reservation Acquire by a host that does not hold the reservation conflicts, registered or
        // not; (for the All Registrants types, B holds it too: see the caller).
        if rtype <= 4 {
            s.expect(&format!("B acquire {rtype}"), Conflict);
        }
        s.expect(&format!("C acquire {rtype}"), Conflict);
        // The holder acquiring another type: conflict.
        s.expect(&format!("A acquire another type {rtype}"), Conflict);
        for (host, role) in [("A", Role::Holder), ("B", Role::Registrant), ("C", Role::NonRegistrant)] {
            let (read, write) = allowed(rtype, role);
            let want = |ok: bool| if ok { Ok } else { Conflict };
            s.expect(&format!("{host} read {rtype}"), want(read));
            s.expect(&format!("{host} write {rtype}"), want(write));
        }
        let all_registrants = rtype >= 5;
        let held = [(HOSTID_A, 0xa1, true), (HOSTID_B, 0xb2, all_registrants)];
        s.expect_report(&format!("held-{rtype}"), 3, rtype, &held);
        // Figure 646: Reservation Release by a registrant that does not hold the reservation is allowed, and
        // releases nothing.
        if rtype <= 4 {
            s.expect(&format!("B release {rtype}"), Ok);
        }
        s.expect_report(&format!("after-wrong-releases-{rtype}"), 3, rtype, &held);
        s.expect(&format!("A release {rtype}"), Ok);
        s.expect_report(&format!("released-{rtype}"), 3, 0, &[(HOSTID_A, 0xa1, false), (HOSTID_B, 0xb2, false)]);
    }

    // Preempt: B takes the reservation (another type, Write Exclusive - Registrants Only) and A's registration
    // goes (generation +1); A, no longer registered, may read but not write.
    s.expect("A acquire for preempt", Ok);
    s.expect("B preempt", Ok);
    s.expect_report("preempted", 4, 3, &[(HOSTID_B, 0xb2, true)]);
    s.expect("A write after preempt", Conflict);
    s.expect("A read after preempt", Ok);
    // Preempt and abort: A registers again (+1) and takes the reservation from B as Exclusive Access (+1); B, gone,
    // may not even read.
    s.expect("A register after preempt", Ok);
    s.expect("A preempt and abort", Ok);
    s.expect_report("aborted", 6, 2, &[(HOSTID_A, 0xa1, true)]);
    s.expect("B read after abort", Conflict);
    s.expect("A read after abort", Ok);
    // A host that is not registered can neither preempt nor release (Figure 646: Non-Registrant, C).
    s.expect("C preempt", Conflict);
    s.expect("B release unregistered", Conflict);
    // Clear: every registration and the reservation go (+1, after B's registration +1); anyone may write again.
    s.expect("B register again", Ok);
    s.expect("B clear", Ok);
    s.expect_report("cleared", 8, 0, &[]);
    s.expect("C write after clear", Ok);
}

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-reservations";

/// What every host job of `kernel_hosts_reserve_preempt_and_persist` starts with: nvme-cli on the controller's
/// character device (`/dev/nvmeX -n 1`), one 512-byte block at LBA 0 for the I/O.
const HOST_LIB: &str = r#"
set -eu
NQN=nqn.2024-01.io.nvmf-rs:vm-reservations
dev() { echo /dev/$(ctrl_of $NQN); }
io_write() { nvme io-passthru $(dev) -n 1 --opcode=0x01 --data-len=512 --write --input-file=/tmp/block --cdw10=0 --cdw12=0; }
io_read() { nvme io-passthru $(dev) -n 1 --opcode=0x02 --data-len=512 --read --cdw10=0 --cdw12=0 > /dev/null; }
try() {
  local label=$1 out
  shift
  if out=$("$@" 2>&1); then echo "$label: ok"; else echo "$label: failed: $(echo "$out" | tr '\n' ' ' | head -c 300)"; fi
}
resv() { nvme "resv-$1" $(dev) -n 1 "${@:2}"; }
report() { echo "report $1: $(nvme resv-report $(dev) -n 1 --eds -o json | jq -c .)"; }
"#;

/// Our target with reservations under two kernel hosts on two lab nodes, PTPL across a restart (module doc).
#[test]
fn kernel_hosts_reserve_preempt_and_persist() {
    let name = "kernel_hosts_reserve_preempt_and_persist";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let mut target = Vm::new("target").cpus(1).memory_mib(1536);
    if vm::enabled().is_ok() {
        let bin = nvmf_tests::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
        target = target.env("NVMF_TARGET_BIN", bin.to_string_lossy());
    }
    let host = |n: &str| Vm::new(n).cpus(1).memory_mib(1024).modules(["nvme_tcp"]);
    let lab = Lab::new(name)
        .kernel(KernelLine::Backports)
        .node("target", target)
        .node("a", host("a"))
        .node("b", host("b"))
        .link("target", "a")
        .link("target", "b")
        .logs(&logs)
        .deadline(Duration::from_secs(600));
    let Some(lab) = lab.start_or_skip() else { return };
    let started = Instant::now();
    let t = Transcript::new(&lab);
    let ids = persist_scenario(&lab, &t);
    vm::note(&format!(
        "{name}: kernel {}, scenario took {:.1} s after the boot",
        lab.kernel_release(),
        started.elapsed().as_secs_f64()
    ));
    check_persist(&t, &ids);
}

/// Every job's output of a lab scenario, in order, each asserted to have succeeded.
struct Transcript<'a> {
    lab: &'a RunningLab,
    stdout: std::cell::RefCell<String>,
}

impl<'a> Transcript<'a> {
    fn new(lab: &'a RunningLab) -> Self {
        Self { lab, stdout: std::cell::RefCell::new(String::new()) }
    }

    /// Run `script` on `node` (after [`HOST_LIB`] on a host node); its stdout, each line prefixed `NODE `.
    fn run(&self, node: &str, script: &str) -> String {
        let script = if node == "target" { format!("set -eu\n{script}") } else { format!("{HOST_LIB}\n{script}") };
        let out = self.lab.run(node, &script);
        out.assert_success();
        let mut all = self.stdout.borrow_mut();
        for l in out.stdout.lines() {
            all.push_str(&format!("{node} {l}\n"));
        }
        out.stdout
    }

    /// The rest of the line that starts with `prefix`.
    fn line(&self, prefix: &str) -> String {
        let all = self.stdout.borrow();
        all.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in\n{all}"))
            .to_owned()
    }
}

/// The lab scenario's steps; the host IDs of `a` and `b`.
fn persist_scenario(lab: &RunningLab, t: &Transcript) -> (String, String) {
    let (to_a, to_b) = (lab.addr("target", "a"), lab.addr("target", "b"));
    let config = format!(
        r#"
[target]
state_dir = "/tmp/nvmf-state"
[reactors]
threads = 1
[metrics]
listen = "127.0.0.1:9420"
[[listener]]
address = "{to_a}"
port = 4420
[[listener]]
address = "{to_b}"
port = 4420
[[subsystem]]
nqn = "{NQN}"
[[subsystem.namespace]]
memory = "16MiB"
block_size = 512
"#
    );
    t.run(
        "target",
        &format!(
            "cat > /tmp/nvmf-target.toml <<'EOF'\n{config}\nEOF\nmkdir -p /tmp/nvmf-state\n\
             nvmf_target_start target /tmp/nvmf-target.toml"
        ),
    );
    // Each host (its own identity: each lab node has one) connects to the target's address on its own link,
    // reconnecting a second after a loss.
    let connect = r#"
head -c 512 /dev/urandom > /tmp/block
host_connect tcp $(node_addr target) 4420 $NQN --nr-io-queues=1 --reconnect-delay=1 > /dev/null
c=$(ctrl_of $NQN)
echo "hostid: $(cat /etc/nvme/hostid)"
echo "hostnqn: $(cat /etc/nvme/hostnqn)"
echo "controller: hostid $(cat /sys/class/nvme/$c/hostid) hostnqn $(cat /sys/class/nvme/$c/hostnqn) address $(cat /sys/class/nvme/$c/address)"
nvme id-ctrl $(dev) -o json | jq -r '"oncs=\(.oncs)"'
nvme id-ns $(dev) -n 1 -o json | jq -r '"rescap=\(.rescap)"'
"#;
    let (ja, jb) =
        (lab.spawn("a", &format!("{HOST_LIB}\n{connect}")), lab.spawn("b", &format!("{HOST_LIB}\n{connect}")));
    for (node, job) in [("a", ja), ("b", jb)] {
        let out = job.wait();
        out.assert_success();
        let mut all = t.stdout.borrow_mut();
        for l in out.stdout.lines() {
            all.push_str(&format!("{node} {l}\n"));
        }
    }
    let ids = (t.line("a hostid: "), t.line("b hostid: "));

    t.run("a", r#"try "A register" resv register --nrkey=1 --rrega=0 --cptpl=3"#);
    t.run("b", r#"try "B register" resv register --nrkey=2 --rrega=0"#);
    t.run("a", "try \"A acquire\" resv acquire --crkey=1 --rtype=1 --racqa=0\ntry \"A write\" io_write");
    t.run("b", "try \"B write\" io_write\ntry \"B read\" io_read\nreport held-by-A");
    t.run(
        "b",
        "try \"B acquire\" resv acquire --crkey=2 --rtype=1 --racqa=0\n\
         try \"B preempt\" resv acquire --crkey=2 --prkey=1 --rtype=1 --racqa=1",
    );
    t.run("a", "try \"A write after preempt\" io_write\nreport held-by-B");
    t.run("b", "try \"B write after preempt\" io_write\ntry \"B release\" resv release --crkey=2 --rtype=1 --rrela=0");
    t.run(
        "a",
        "try \"A write after release\" io_write\n\
         try \"A register again\" resv register --nrkey=5 --rrega=0 --cptpl=3\n\
         try \"A acquire again\" resv acquire --crkey=5 --rtype=1 --racqa=0",
    );
    t.run(
        "target",
        "echo \"state files: $(ls /tmp/nvmf-state/reservations/)\"\n\
         echo \"conflicts: $(metric nvmf_target_reservation_conflicts_total)\"\n\
         stop_daemon target || true\n\
         nvmf_target_start target /tmp/nvmf-target.toml",
    );
    // Both hosts reconnect by themselves (reconnect delay 1 s).
    let reconnected =
        "wait_until 60 ctrl_of $NQN > /dev/null && echo \"reconnected: $(cat /sys/class/nvme/$(ctrl_of $NQN)/state)\"";
    t.run("a", reconnected);
    t.run("b", &format!("{reconnected}\nreport after-restart\ntry \"B write after restart\" io_write"));
    t.run(
        "a",
        "try \"A write after restart\" io_write\ntry \"A clear\" resv release --crkey=5 --rrela=1\nreport cleared",
    );
    t.run("b", "try \"B write after clear\" io_write\nhost_disconnect $NQN");
    t.run("a", "host_disconnect $NQN");
    t.run(
        "target",
        "echo \"conflicts at the end: $(metric nvmf_target_reservation_conflicts_total)\"\nstop_daemon target",
    );
    ids
}

fn check_persist(t: &Transcript, (ha, hb): &(String, String)) {
    let all = t.stdout.borrow().clone();
    let has = |needle: &str| assert!(all.contains(needle), "the scenario's output lacks {needle:?}\n{all}");
    // Two hosts: each node's own host NQN and ID, the ones its kernel connected with.
    assert_ne!(ha, hb, "{all}");
    assert_ne!(t.line("a hostnqn: "), t.line("b hostnqn: "), "{all}");
    for node in ["a", "b"] {
        let (id, nqn) = (t.line(&format!("{node} hostid: ")), t.line(&format!("{node} hostnqn: ")));
        has(&format!("{node} controller: hostid {id} hostnqn {nqn} address "));
    }
    has("a oncs=45");
    has("a rescap=255");
    let conflict = |label: &str| {
        let line = all
            .lines()
            .find_map(|l| l.split_once(' ').map(|(_, rest)| rest).filter(|r| r.starts_with(&format!("{label}: "))))
            .unwrap_or_else(|| panic!("no {label:?}\n{all}"));
        let l = line.to_lowercase();
        let is_conflict =
            ["reservation_conflict", "reservation conflict", "0x83", "0x4083"].iter().any(|s| l.contains(s));
        assert!(l.contains("failed") && is_conflict, "{label}: expected a reservation conflict: {line}\n{all}");
    };
    for ok in ["a A register", "b B register", "a A acquire", "a A write", "b B read", "b B preempt"] {
        has(&format!("{ok}: ok"));
    }
    for ok in ["b B write after preempt", "b B release", "a A write after release", "a A register again"] {
        has(&format!("{ok}: ok"));
    }
    for ok in ["a A acquire again", "a A write after restart", "a A clear", "b B write after clear"] {
        has(&format!("{ok}: ok"));
    }
    conflict("B write");
    conflict("B acquire");
    conflict("A write after preempt");
    conflict("B write after restart");
    has("a reconnected: live");
    has("b reconnected: live");
    has(&format!("target state files: {NQN}.ns1.json"));
    // B's write, B's acquire, A's write after the preempt; after the restart the counter starts again: B's write.
    has("target conflicts: 3\n");
    has("target conflicts at the end: 1\n");
    // The extended reports, whole: the 128-bit host IDs (dynamic controllers: CNTLID FFFFh), PTPL on, the
    // generation moving with register, register, preempt, register (and back from the state file after the
    // restart), registrants in registration order.
    let report = |node: &str, label: &str| -> Value {
        let json = t.line(&format!("{node} report {label}: "));
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("report {label}: not JSON ({e}): {json}\n{all}"))
    };
    let (a, b) = (ha.as_str(), hb.as_str());
    assert_eq!(report("b", "held-by-A"), extended_report(2, 1, true, &[(a, 1, true), (b, 2, false)]), "{all}");
    assert_eq!(report("a", "held-by-B"), extended_report(3, 1, true, &[(b, 2, true)]), "{all}");
    assert_eq!(report("b", "after-restart"), extended_report(4, 1, true, &[(b, 2, false), (a, 5, true)]), "{all}");
    let cleared = report("a", "cleared");
    assert_eq!((&cleared["gen"], &cleared["rtype"], &cleared["regctl"]), (&json!(5), &json!(0), &json!(0)), "{all}");
}
