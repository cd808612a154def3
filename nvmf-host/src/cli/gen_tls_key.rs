//! `nvmf-host gen-tls-key`: a configured TLS PSK in the PSK interchange format (`NVMeTLSkey-1:01:…:`), with the
//! options, defaults and output of nvme-cli's `gen-tls-key` (2.16; `nvme keys gen-tls` in 3.x): random bytes from
//! the OS, or the given hex secret, as long as the hash (`-m 1`, SHA-256, 32 bytes, the default; `-m 2`, SHA-384,
//! 48 bytes). As nvme-cli prints it, the key is not derived: its hash field says how it becomes the retained PSK.
//!
//! nvme-cli's `--insert` derives the TLS PSK and adds it to the kernel keyring for the kernel host and tlshd.
//! nvmf-host reads TLS keys in this format from files and uses no keyring, so `--insert` (and `--keyfile`, which
//! needs it) are refused; `--keyring`, `--keytype`, `--hostnqn`, `--subsysnqn`, `--identity` and `--compat`, which
//! only matter to `--insert`, are accepted as nvme-cli accepts them, so scripts run unchanged.

use clap::Args;
use nvmf_common::fabrics::auth::OsRandom;
use nvmf_common::fabrics::tls::{ConfiguredPsk, IdentityVersion, PskHash};

use super::gen_dhchap_key::decode_hex;
use super::CliError;

/// `--insert`: why it is refused (shared with `check-tls-key`).
pub(super) const INSERT_UNSUPPORTED: &str =
    "--insert is not supported: nvmf-host uses no kernel keyring, it reads TLS keys in interchange format from files";

/// `nvmf-host gen-tls-key`.
#[derive(Debug, Clone, Args)]
pub struct GenTlsKeyArgs {
    /// The kernel keyring's options, accepted as nvme-cli takes them.
    #[command(flatten)]
    pub keyring: KeyringArgs,
    /// Host NQN for the retained key (with --insert only).
    #[arg(short = 'n', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Subsystem NQN for the retained key (with --insert only).
    #[arg(short = 'c', long = "subsysnqn")]
    pub subsysnqn: Option<String>,
    /// The key in hexadecimal characters (default: random bytes from the OS).
    #[arg(short = 's', long = "secret", value_name = "HEX")]
    pub secret: Option<String>,
    /// Hash of the key and of its cipher suite: 1 SHA-256 (32 bytes), 2 SHA-384 (48 bytes).
    #[arg(short = 'm', long = "hmac", default_value_t = 1)]
    pub hmac: u8,
    /// PSK identity version for --insert: 0 (NVMe/TCP 1.0c), 1 (TP 8018, with the PSK digest).
    #[arg(short = 'I', long = "identity", default_value_t = 0)]
    pub identity: u8,
    /// Derive as libnvme did before 1.16 (with --insert only).
    #[arg(short = 'C', long = "compat")]
    pub compat: bool,
}

/// Run `gen-tls-key`: print the key in interchange format.
pub fn run(a: &GenTlsKeyArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let hash = PskHash::from_id(a.hmac).ok_or_else(|| {
        CliError::Options(format!("invalid HMAC identifier {}; allowed: 1 (SHA-256), 2 (SHA-384)", a.hmac))
    })?;
    identity_version(a.identity)?;
    a.keyring.refuse()?;
    let psk = match &a.secret {
        Some(hex) => ConfiguredPsk::new(Some(hash), &decode_hex(hex, hash.digest_len())?),
        None => ConfiguredPsk::generate(hash, &mut OsRandom),
    }
    .map_err(|e| CliError::Options(e.to_string()))?;
    writeln!(out, "{}", psk.interchange().as_str())?;
    Ok(())
}

/// The options of nvme-cli's TLS key commands that concern the kernel keyring: accepted as nvme-cli spells them,
/// refused when they would act (nvmf-host reads keys from files, it keeps no keyring).
#[derive(Debug, Clone, Args)]
pub struct KeyringArgs {
    /// Keyring for the retained key (with --insert only).
    #[arg(short = 'k', long = "keyring", default_value = ".nvme")]
    pub keyring: String,
    /// Key type of the retained key (with --insert only).
    #[arg(short = 't', long = "keytype", default_value = "psk")]
    pub keytype: String,
    /// Key file to append the derived TLS PSK to (needs --insert).
    #[arg(short = 'f', long = "keyfile")]
    pub keyfile: Option<std::path::PathBuf>,
    /// Insert the derived key into the kernel keyring: not supported by nvmf-host.
    #[arg(short = 'i', long = "insert")]
    pub insert: bool,
}

impl KeyringArgs {
    /// One line of refusal when `--insert` or `--keyfile` is asked for.
    pub(super) fn refuse(&self) -> Result<(), CliError> {
        if self.insert {
            return Err(CliError::Options(INSERT_UNSUPPORTED.into()));
        }
        if self.keyfile.is_some() {
            return Err(CliError::Options("--keyfile needs --insert, which nvmf-host does not support".into()));
        }
        Ok(())
    }
}

/// `--identity`: 0 or 1, as nvme-cli checks it.
pub(super) fn identity_version(number: u8) -> Result<IdentityVersion, CliError> {
    IdentityVersion::from_number(number).ok_or_else(|| {
        CliError::Options(format!(
            "invalid TLS identity version {number}; allowed: 0 (NVMe/TCP 1.0c), 1 (TP 8018, with the PSK digest)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(args: &[&str]) -> Result<String, String> {
        super::super::run_args::<GenTlsKeyArgs>(args, run)
    }

    // libnvme test/psk.c's configured PSK, 32 and 48 bytes.
    const HEX32: &str = "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03";
    const HEX48: &str =
        "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03ffc344bcf442e2dd6d8bc4870b5d5b03";

    #[test]
    fn prints_what_nvme_cli_prints() {
        // nvme-cli exports the secret with nvme_export_tls_key: libnvme test/psk.c's expected strings.
        assert_eq!(gen(&["-s", HEX32]).unwrap(), "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\n");
        assert_eq!(
            gen(&["--secret", HEX48, "--hmac", "2"]).unwrap(),
            "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:\n"
        );
        // The options that only matter to --insert change nothing.
        let with_all = ["-s", HEX32, "-k", "other", "-t", "psk", "-n", "nqn.h", "-c", "nqn.s", "-I", "1", "-C"];
        assert_eq!(gen(&with_all).unwrap(), gen(&["-s", HEX32]).unwrap());
    }

    #[test]
    fn random_keys_have_the_hash_length_and_parse() {
        for (args, hash) in [(&[][..], PskHash::Sha256), (&["-m", "2"][..], PskHash::Sha384)] {
            let line = gen(args).unwrap();
            let psk = ConfiguredPsk::parse(&line).unwrap();
            assert_eq!((psk.hmac(), psk.len()), (Some(hash), hash.digest_len()), "{args:?}");
        }
        assert_ne!(gen(&[]).unwrap(), gen(&[]).unwrap());
    }

    #[test]
    fn refusals() {
        assert_eq!(gen(&["-m", "0"]).unwrap_err(), "invalid HMAC identifier 0; allowed: 1 (SHA-256), 2 (SHA-384)");
        assert!(gen(&["-m", "3"]).unwrap_err().contains("invalid HMAC identifier 3"));
        assert!(gen(&["-I", "2"]).unwrap_err().starts_with("invalid TLS identity version 2; allowed: 0"));
        assert_eq!(gen(&["-i", "-c", "nqn.s"]).unwrap_err(), INSERT_UNSUPPORTED);
        assert_eq!(
            gen(&["-f", "/tmp/keys"]).unwrap_err(),
            "--keyfile needs --insert, which nvmf-host does not support"
        );
        assert_eq!(gen(&["-s", HEX32, "-m", "2"]).unwrap_err(), "--secret: 64 hex digits for a 48-byte key, 96 needed");
        assert_eq!(gen(&["-s", &HEX32.replace("03", "0g")]).unwrap_err(), "--secret: not hexadecimal");
    }
}
