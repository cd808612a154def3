//! `nvmf-host gen-dhchap-key`: a DH-HMAC-CHAP secret in the `DHHC-1:NN:…:` representation, with nvme-cli's options
//! and output (`nvme gen-dhchap-key`), from the OS's random number generator or a given hex secret. As nvme-cli 2.x
//! does, with a hash function (`-m 1..3`) the secret is transformed with the host NQN before it is encoded, so
//! `-s`, `-m` and `-n` give the same string both tools print.

use clap::Args;
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::auth::OsRandom;
use zeroize::Zeroizing;

use super::CliError;
use crate::identity::HostIdentity;

/// `nvmf-host gen-dhchap-key`.
#[derive(Debug, Clone, Args)]
pub struct GenDhchapKeyArgs {
    /// The secret in hexadecimal characters (default: random bytes from the OS).
    #[arg(short = 's', long = "secret", value_name = "HEX")]
    pub secret: Option<String>,
    /// Length of the key in bytes: 32, 48 or 64 (default: the hash function's, else 32).
    #[arg(short = 'l', long = "key-length", value_name = "BYTES")]
    pub key_length: Option<usize>,
    /// Hash function the key is transformed with: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.
    #[arg(short = 'm', long = "hmac", default_value_t = 0)]
    pub hmac: u8,
    /// Host NQN for the transformation (default: this host's, as `show-hostnqn` prints it).
    #[arg(short = 'n', long = "nqn")]
    pub nqn: Option<String>,
}

/// Run `gen-dhchap-key`: print the representation.
pub fn run(a: &GenDhchapKeyArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let hmac = match a.hmac {
        0 => None,
        id => Some(HashFunction::from_id(id).ok_or_else(|| {
            CliError::Options(format!(
                "invalid HMAC identifier {id}; allowed: 0 (none), 1 (SHA-256), 2 (SHA-384), 3 (SHA-512)"
            ))
        })?),
    };
    let len = a.key_length.unwrap_or_else(|| hmac.map_or(32, HashFunction::digest_len));
    let raw = a.secret.as_deref().map(|hex| decode_hex(hex, len)).transpose()?;
    let nqn = match &a.nqn {
        Some(n) => n.clone(),
        None => HostIdentity::from_system().hostnqn,
    };
    let secret = DhchapSecret::generate(hmac, len, raw.as_deref().map(Vec::as_slice), &nqn, &mut OsRandom)
        .map_err(|e| CliError::Options(e.to_string()))?;
    writeln!(out, "{}", secret.representation().as_str())?;
    Ok(())
}

/// `len` bytes from exactly `2 * len` hex digits (also `gen-tls-key`'s `--secret`).
pub(super) fn decode_hex(hex: &str, len: usize) -> Result<Zeroizing<Vec<u8>>, CliError> {
    let bad = |why: String| CliError::Options(format!("--secret: {why}"));
    if hex.len() != 2 * len {
        return Err(bad(format!("{} hex digits for a {len}-byte key, {} needed", hex.len(), 2 * len)));
    }
    let mut bytes = Zeroizing::new(Vec::with_capacity(len));
    for pair in hex.as_bytes().chunks(2) {
        let digits = std::str::from_utf8(pair).ok().and_then(|d| u8::from_str_radix(d, 16).ok());
        bytes.push(digits.ok_or_else(|| bad("not hexadecimal".into()))?);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(args: &[&str]) -> Result<String, String> {
        super::super::run_args::<GenDhchapKeyArgs>(args, run)
    }

    const HEX32: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn prints_what_nvme_cli_prints() {
        // nvme-cli 2.3: `nvme gen-dhchap-key -s 000102…1f -m 0` and `… -m 1 -n nqn.2014-08.org.nvmexpress:uuid:test`.
        assert_eq!(gen(&["-s", HEX32]).unwrap(), "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\n");
        assert_eq!(
            gen(&["--secret", HEX32, "--hmac", "1", "--nqn", "nqn.2014-08.org.nvmexpress:uuid:test"]).unwrap(),
            "DHHC-1:01:WulleCBkG4oCs0iIC3Cit9gBDCLWiZ9PNXuhqytWkBIZkvGy:\n"
        );
    }

    #[test]
    fn random_keys_have_the_asked_length_and_parse() {
        for (args, len) in [(&["-m", "2"][..], 48), (&["-l", "64"][..], 64), (&[][..], 32)] {
            let line = gen(args).unwrap();
            let s = DhchapSecret::parse(&line).unwrap();
            assert_eq!(s.len(), len, "{args:?}");
        }
        assert_ne!(gen(&[]).unwrap(), gen(&[]).unwrap());
    }

    #[test]
    fn refusals_match_nvme_cli() {
        assert!(gen(&["-m", "4"]).unwrap_err().contains("invalid HMAC identifier 4"));
        assert!(gen(&["-m", "1", "-l", "48"]).unwrap_err().contains("48 bytes with hmac(sha256)"));
        assert!(gen(&["-l", "40"]).unwrap_err().contains("32, 48 or 64"));
        assert!(gen(&["-s", "0011"]).unwrap_err().contains("4 hex digits for a 32-byte key, 64 needed"));
        assert!(gen(&["-s", &HEX32.replace("1f", "1g")]).unwrap_err().contains("not hexadecimal"));
    }
}
