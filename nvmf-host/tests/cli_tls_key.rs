//! `gen-tls-key` and `check-tls-key` as a user runs them: nvme-cli's output on stdout, and a bad key as one line on
//! stderr with exit status 1, naming what is wrong and not the key.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn nvmf_host(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-host"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

// libnvme test/psk.c: its configured PSK, its NQNs and the version 1 identity of the key.
const HEX32: &str = "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03";
const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

#[test]
fn a_generated_key_checks_into_nvme_clis_identity() {
    let generated = nvmf_host(&["gen-tls-key", "--secret", HEX32], "");
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));
    assert_eq!(String::from_utf8(generated.stdout).unwrap(), format!("{KEY}\n"));

    let args = ["check-tls-key", "-n", "nqn.psk-test-host", "-c", "nqn.psk-test-subsys", "-I", "1"];
    let checked = nvmf_host(&args, &format!("{KEY}\n"));
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    assert_eq!(
        String::from_utf8(checked.stdout).unwrap(),
        "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=\n"
    );
}

#[test]
fn a_bad_key_is_one_line_on_stderr() {
    let typo = KEY.replace("VRLb", "VRLc");
    let out = nvmf_host(&["check-tls-key", "-d", &typo], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("check-tls-key") && stderr.contains("--keydata: the key's CRC-32 does not match"),
        "{stderr}"
    );
    assert!(!stderr.contains("VRL"), "{stderr}");

    let out = nvmf_host(&["gen-tls-key", "--insert", "-c", "nqn.s"], "");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--insert is not supported"), "{stderr}");
}
