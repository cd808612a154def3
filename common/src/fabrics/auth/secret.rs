//! DH-HMAC-CHAP secrets: the `DHHC-1:<hmac>:<base64>:` representation (NVMe Base 2.0 §8.13.5.8; nvme-cli's
//! `gen-dhchap-key`, the kernel's `nvme_auth_extract_key`) and the transformation of a secret with an NQN before
//! it keys an HMAC (the kernel's `nvme_auth_transform_key`).
//!
//! The representation: `DHHC-1:`, two hex digits naming the hash function the secret is transformed with
//! (`00` none, `01` SHA-256, `02` SHA-384, `03` SHA-512), `:`, the base64 of the 32, 48 or 64 secret bytes followed
//! by their CRC-32 (IEEE, little-endian), and a closing `:`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use zeroize::Zeroizing;

use super::hash::HashFunction;
use super::RandomSource;
use crate::fabrics::auth::AuthError;

const PREFIX: &str = "DHHC-1:";

/// The secret lengths the representation allows.
pub const SECRET_LENGTHS: [usize; 3] = [32, 48, 64];

/// What the transformation appends to the NQN (the kernel's and libnvme's seed).
const TRANSFORM_SEED: &[u8] = b"NVMe-over-Fabrics";

/// A secret could not be read from its representation, or made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The text does not start with `DHHC-1:`.
    #[error("a DH-HMAC-CHAP secret starts with \"DHHC-1:\"")]
    Prefix,
    /// The hash function field is not `00`..`03`.
    #[error("the hash function field {0:?} is not 00 (none), 01 (SHA-256), 02 (SHA-384) or 03 (SHA-512)")]
    Hmac(String),
    /// The key field is not base64.
    #[error("the key field is not base64")]
    Base64,
    /// The key field decodes to the wrong number of bytes.
    #[error("the key field holds {0} bytes; a secret of 32, 48 or 64 bytes and its 4-byte CRC-32 are 36, 52 or 68")]
    Length(usize),
    /// The CRC-32 does not match the key (a typo or a truncated copy). Neither CRC is kept: the one computed is a
    /// function of the secret, and errors are shown and logged.
    #[error("the key's CRC-32 does not match: the secret was mistyped or cut")]
    Crc,
    /// A secret of another length was asked for (nvme-cli: the length must be the hash's when one is named).
    #[error("a secret of {len} bytes{}; allowed: {allowed}", hash.map(|h| format!(" with {}", h.name())).unwrap_or_default())]
    KeyLength {
        /// The length asked for.
        len: usize,
        /// The hash function asked for.
        hash: Option<HashFunction>,
        /// What would do.
        allowed: &'static str,
    },
    /// The random number generator failed.
    #[error("{0}")]
    Random(String),
}

/// A DH-HMAC-CHAP secret: the key bytes and the hash function that transforms them. The bytes are wiped when
/// dropped and never printed (`Debug` shows the hash and the length).
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    hmac: Option<HashFunction>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DhchapSecret {{ hmac: {:02x}, key: <{} bytes> }}", self.hmac_id(), self.key.len())
    }
}

impl std::str::FromStr for DhchapSecret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, SecretError> {
        DhchapSecret::parse(text)
    }
}

impl DhchapSecret {
    /// A secret of `key` bytes (32, 48 or 64) transformed with `hmac` (`None`: used as it is).
    pub fn new(hmac: Option<HashFunction>, key: &[u8]) -> Result<Self, SecretError> {
        if !SECRET_LENGTHS.contains(&key.len()) {
            return Err(SecretError::KeyLength { len: key.len(), hash: None, allowed: "32, 48 or 64 bytes" });
        }
        Ok(DhchapSecret { hmac, key: Zeroizing::new(key.to_vec()) })
    }

    /// Read the `DHHC-1:NN:BASE64:` representation. Surrounding white space (a file's newline) is ignored, and so is
    /// a missing final `:`, as the kernel ignores it.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let rest = text.trim().strip_prefix(PREFIX).ok_or(SecretError::Prefix)?;
        let (hmac_field, encoded) = rest.split_once(':').ok_or(SecretError::Prefix)?;
        let hmac = match hmac_field {
            "00" => None,
            "01" | "02" | "03" => HashFunction::from_id(hmac_field.as_bytes()[1] - b'0'),
            _ => return Err(SecretError::Hmac(hmac_field.chars().take(8).collect())),
        };
        let encoded = encoded.strip_suffix(':').unwrap_or(encoded);
        let decoded = Zeroizing::new(STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?);
        let Some(len) = decoded.len().checked_sub(4).filter(|n| SECRET_LENGTHS.contains(n)) else {
            return Err(SecretError::Length(decoded.len()));
        };
        let (key, crc) = decoded.split_at(len);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32fast::hash(key);
        if stored != computed {
            return Err(SecretError::Crc);
        }
        Ok(DhchapSecret { hmac, key: Zeroizing::new(key.to_vec()) })
    }

    /// The `DHHC-1:NN:BASE64:` representation (itself a secret: wiped when dropped).
    pub fn representation(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + 4));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let mut text = Zeroizing::new(String::with_capacity(PREFIX.len() + 4 + raw.len() * 4 / 3 + 4));
        text.push_str(PREFIX);
        text.push_str(&format!("{:02x}:", self.hmac_id()));
        STANDARD.encode_string(&*raw, &mut text);
        text.push(':');
        text
    }

    /// The hash function the secret is transformed with (`None`: 00, as it is).
    pub fn hmac(&self) -> Option<HashFunction> {
        self.hmac
    }

    /// The representation's hash field: 0 for none, else the function's identifier.
    pub fn hmac_id(&self) -> u8 {
        self.hmac.map_or(0, HashFunction::id)
    }

    /// The secret's length in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Never: a secret has 32, 48 or 64 bytes (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The key an HMAC of the transaction is keyed with, for the side named by `nqn` (the host NQN for the host's
    /// response, the subsystem NQN for the controller's): the secret as it is (hash 00), else
    /// HMAC(secret, NQN || "NVMe-over-Fabrics") with the secret's hash function.
    pub fn transform(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.hmac {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), TRANSFORM_SEED]),
        }
    }

    /// A new secret as nvme-cli 2.x's `gen-dhchap-key` makes it: from `raw` (`len` bytes from the OS when `None`),
    /// and with a hash function, `raw` transformed with `hostnqn` already. `len` must be the hash's length when
    /// one is named (32, 48, 64), else 32, 48 or 64.
    pub fn generate(
        hmac: Option<HashFunction>,
        len: usize,
        raw: Option<&[u8]>,
        hostnqn: &str,
        rng: &mut dyn RandomSource,
    ) -> Result<Self, SecretError> {
        match hmac {
            Some(h) if len != h.digest_len() => {
                let allowed = match h {
                    HashFunction::Sha256 => "32 bytes for SHA-256",
                    HashFunction::Sha384 => "48 bytes for SHA-384",
                    HashFunction::Sha512 => "64 bytes for SHA-512",
                };
                return Err(SecretError::KeyLength { len, hash: hmac, allowed });
            }
            None if !SECRET_LENGTHS.contains(&len) => {
                return Err(SecretError::KeyLength { len, hash: None, allowed: "32, 48 or 64 bytes" })
            }
            _ => {}
        }
        let mut bytes = Zeroizing::new(vec![0u8; len]);
        match raw {
            Some(r) if r.len() == len => bytes.copy_from_slice(r),
            Some(r) => {
                return Err(SecretError::KeyLength {
                    len: r.len(),
                    hash: None,
                    allowed: "a secret as long as the key length (-l)",
                })
            }
            None => rng.fill(&mut bytes).map_err(|e: AuthError| SecretError::Random(e.to_string()))?,
        }
        let base = DhchapSecret { hmac, key: bytes };
        let key = base.transform(hostnqn);
        Ok(DhchapSecret { hmac, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:test";

    fn counting() -> Zeroizing<Vec<u8>> {
        Zeroizing::new((0u8..64).collect())
    }

    #[test]
    fn nvme_cli_representations_round_trip() {
        // `nvme gen-dhchap-key -s 000102…1f -m 0` (nvme-cli 2.3): the bytes 0..32 and their CRC-32.
        let text = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let s = DhchapSecret::parse(text).unwrap();
        assert_eq!((s.hmac(), s.len()), (None, 32));
        assert_eq!(*s.transform(NQN), counting()[..32]);
        assert_eq!(*s.representation(), text);
        assert_eq!(DhchapSecret::new(None, &counting()[..32]).unwrap(), s);
        // 48 bytes, with a file's newline and without the closing colon.
        let s48 = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";
        let parsed = DhchapSecret::parse(&format!("{}\n", &s48[..s48.len() - 1])).unwrap();
        assert_eq!(*parsed.representation(), s48);
    }

    #[test]
    fn the_transformation_is_hmac_of_the_nqn_and_the_seed() {
        // printf 'nqn.2014-08.org.nvmexpress:uuid:testNVMe-over-Fabrics' |
        //     openssl dgst -sha256 -mac HMAC -macopt hexkey:000102…1f
        let expected = "5ae9657820641b8a02b348880b70a2b7d8010c22d6899f4f357ba1ab2b569012";
        let s = DhchapSecret::new(Some(HashFunction::Sha256), &counting()[..32]).unwrap();
        let hex: String = s.transform(NQN).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        // nvme-cli 2.3 transforms at generation: `nvme gen-dhchap-key -s 000102…1f -m 1 -n NQN` prints this.
        let generated = DhchapSecret::generate(
            Some(HashFunction::Sha256),
            32,
            Some(&counting()[..32]),
            NQN,
            &mut super::super::OsRandom,
        )
        .unwrap();
        assert_eq!(*generated.representation(), "DHHC-1:01:WulleCBkG4oCs0iIC3Cit9gBDCLWiZ9PNXuhqytWkBIZkvGy:");
    }

    #[test]
    fn rejections_say_what_is_wrong() {
        let good = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        assert_eq!(DhchapSecret::parse("DHHC-2:00:AAAA:"), Err(SecretError::Prefix));
        assert_eq!(DhchapSecret::parse("00:AAAA:"), Err(SecretError::Prefix));
        assert_eq!(DhchapSecret::parse("DHHC-1:04:AAAA:"), Err(SecretError::Hmac("04".into())));
        assert_eq!(DhchapSecret::parse("DHHC-1:1:AAAA:"), Err(SecretError::Hmac("1".into())));
        assert_eq!(DhchapSecret::parse("DHHC-1:00:AA*A:"), Err(SecretError::Base64));
        assert_eq!(DhchapSecret::parse("DHHC-1:00:AAAA:"), Err(SecretError::Length(3)));
        let typo = good.replace("AAEC", "AAED");
        let e = DhchapSecret::parse(&typo).unwrap_err();
        assert_eq!(e, SecretError::Crc);
        assert_eq!(e.to_string(), "the key's CRC-32 does not match: the secret was mistyped or cut");
        assert!(DhchapSecret::new(None, &[0; 31]).is_err());
        let e =
            DhchapSecret::generate(Some(HashFunction::Sha256), 48, None, NQN, &mut super::super::OsRandom).unwrap_err();
        assert_eq!(e.to_string(), "a secret of 48 bytes with hmac(sha256); allowed: 32 bytes for SHA-256");
    }

    #[test]
    fn debug_prints_no_key_material() {
        let s = DhchapSecret::new(Some(HashFunction::Sha512), &[0xAB; 64]).unwrap();
        let d = format!("{s:?}");
        assert_eq!(d, "DhchapSecret { hmac: 03, key: <64 bytes> }");
        assert!(!d.to_lowercase().contains("ab,") && !d.contains("171"));
    }

    #[test]
    fn generated_secrets_are_random_and_parse_back() {
        let a = DhchapSecret::generate(None, 64, None, NQN, &mut super::super::OsRandom).unwrap();
        let b = DhchapSecret::generate(None, 64, None, NQN, &mut super::super::OsRandom).unwrap();
        assert_ne!(a, b);
        assert_eq!(DhchapSecret::parse(&a.representation()).unwrap(), a);
        assert_eq!(a.representation().len(), "DHHC-1:00:".len() + 92 + 1);
    }
}
