//! `nvmf-host check-tls-key`: check a TLS PSK in interchange format and print the PSK identity it gives between a
//! host and a subsystem, with nvme-cli's `check-tls-key` options and output: with `--subsysnqn`, the identity
//! alone, as nvme-cli 2.x prints it (`NVMe0R01 <hostnqn> <subsysnqn>`, or version 1 with `-I 1`, derived as RFC 8446
//! says or with `--compat` as libnvme did before 1.16); without, the line nvme-cli 3.x prints, `Key is valid (HMAC
//! <hash field>, length <bytes>)`, where 2.x asked for a subsystem NQN. The key comes from `--keydata`, else from
//! the first line of standard input (3.x). The host NQN defaults to this host's, as `show-hostnqn` prints it.
//!
//! A bad key is one line saying what is wrong, never the key. `--insert` (the kernel keyring) is refused as in
//! `gen-tls-key`.

use std::io::BufRead;

use clap::Args;
use nvmf_common::fabrics::tls::{derive_tls_psk, ConfiguredPsk, PskDerivation};

use super::gen_tls_key::{identity_version, KeyringArgs};
use super::CliError;
use crate::identity::HostIdentity;

/// `nvmf-host check-tls-key`.
#[derive(Debug, Clone, Args)]
pub struct CheckTlsKeyArgs {
    /// The kernel keyring's options, accepted as nvme-cli takes them.
    #[command(flatten)]
    pub keyring: KeyringArgs,
    /// Host NQN of the identity (default: this host's, as `show-hostnqn` prints it).
    #[arg(short = 'n', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Subsystem NQN of the identity; without it only the key is checked.
    #[arg(short = 'c', long = "subsysnqn")]
    pub subsysnqn: Option<String>,
    /// The TLS key in interchange format (`NVMeTLSkey-1:…:`; default: the first line of standard input).
    #[arg(short = 'd', long = "keydata", value_name = "KEY")]
    pub keydata: Option<String>,
    /// PSK identity version: 0 (NVMe/TCP 1.0c), 1 (TP 8018, with the PSK digest).
    #[arg(short = 'I', long = "identity", default_value_t = 0)]
    pub identity: u8,
    /// Derive as libnvme did before 1.16 (its `--compat`; changes version 1 digests).
    #[arg(short = 'C', long = "compat")]
    pub compat: bool,
}

/// Run `check-tls-key`, reading the key from standard input when `--keydata` is not given.
pub fn run(a: &CheckTlsKeyArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    check(a, &mut std::io::stdin().lock(), out)
}

/// `check-tls-key` with the key from `input` when `--keydata` is not given.
fn check(a: &CheckTlsKeyArgs, input: &mut dyn BufRead, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let version = identity_version(a.identity)?;
    a.keyring.refuse()?;
    let text = match &a.keydata {
        Some(k) => zeroize::Zeroizing::new(k.clone()),
        None => {
            let mut line = zeroize::Zeroizing::new(String::new());
            input.read_line(&mut line)?;
            line
        }
    };
    if text.trim().is_empty() {
        return Err(CliError::Options("no key data: give --keydata or a key on standard input".into()));
    }
    let psk = ConfiguredPsk::parse(&text).map_err(|e| CliError::Options(format!("--keydata: {e}")))?;
    let Some(subnqn) = &a.subsysnqn else {
        writeln!(out, "Key is valid (HMAC {}, length {})", psk.hmac_id(), psk.len())?;
        return Ok(());
    };
    let hostnqn = match &a.hostnqn {
        Some(n) => n.clone(),
        None => HostIdentity::from_system().hostnqn,
    };
    let derivation = if a.compat { PskDerivation::Compat } else { PskDerivation::Rfc8446 };
    let tls =
        derive_tls_psk(&psk, &hostnqn, subnqn, version, derivation).map_err(|e| CliError::Options(e.to_string()))?;
    writeln!(out, "{}", tls.identity)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_with(args: &[&str], stdin: &str) -> Result<String, String> {
        let mut argv = vec!["check"];
        argv.extend_from_slice(args);
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: CheckTlsKeyArgs,
        }
        let p = <P as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        check(&p.a, &mut stdin.as_bytes(), &mut out).map_err(|e| e.to_string())?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn check_key(args: &[&str]) -> Result<String, String> {
        check_with(args, "")
    }

    // libnvme test/psk.c: its configured PSK in interchange format, its NQNs, and the version 1 identities
    // nvme_generate_tls_key_identity and its _compat variant give.
    const K01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
    const NQNS: [&str; 4] = ["-n", "nqn.psk-test-host", "-c", "nqn.psk-test-subsys"];

    fn with_nqns<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut v = args.to_vec();
        v.extend_from_slice(&NQNS);
        v
    }

    #[test]
    fn prints_the_identity_as_nvme_cli_does() {
        assert_eq!(check_key(&with_nqns(&["-d", K01])).unwrap(), "NVMe0R01 nqn.psk-test-host nqn.psk-test-subsys\n");
        assert_eq!(
            check_key(&with_nqns(&["--keydata", K02, "--identity", "1"])).unwrap(),
            "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys \
             QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a\n"
        );
        assert_eq!(
            check_key(&with_nqns(&["-d", K01, "-I", "1", "--compat"])).unwrap(),
            "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys 66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=\n"
        );
        // The key on standard input, as nvme-cli 3.x reads it.
        assert_eq!(
            check_with(&with_nqns(&["-I", "1"]), &format!("{K01}\n")).unwrap(),
            "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=\n"
        );
    }

    #[test]
    fn without_a_subsystem_only_the_key_is_checked() {
        assert_eq!(check_key(&["-d", K02]).unwrap(), "Key is valid (HMAC 2, length 48)\n");
        let k00 = K01.replace(":01:", ":00:");
        assert_eq!(check_key(&["-d", &k00]).unwrap(), "Key is valid (HMAC 0, length 32)\n");
    }

    #[test]
    fn a_bad_key_is_one_line_without_the_key() {
        let typo = K01.replace("VRLb", "VRLc");
        assert_eq!(
            check_key(&with_nqns(&["-d", &typo])).unwrap_err(),
            "--keydata: the key's CRC-32 does not match: the key was mistyped or cut"
        );
        assert_eq!(
            check_key(&["-d", &K01.replace(":01:", ":02:")]).unwrap_err(),
            "--keydata: a 32-byte PSK with hash field 02: SHA-384 keys have 48 bytes"
        );
        assert_eq!(
            check_key(&["-d", "DHHC-1:00:AAAA:"]).unwrap_err(),
            "--keydata: a TLS PSK in interchange format is \"NVMeTLSkey-1:<hash>:<base64 key and CRC-32>:\""
        );
        assert_eq!(check_key(&[]).unwrap_err(), "no key data: give --keydata or a key on standard input");
        assert!(check_key(&["-d", K01, "-I", "2"]).unwrap_err().starts_with("invalid TLS identity version 2"));
        assert_eq!(check_key(&["-d", K01, "-i"]).unwrap_err(), super::super::gen_tls_key::INSERT_UNSUPPORTED);
        assert_eq!(
            check_key(&["-d", K01, "-n", "nqn.a b", "-c", "nqn.s"]).unwrap_err(),
            "the PSK identity's host NQN: NQN contains a space, which separates the identity's fields"
        );
    }
}
