//! The configured PSK and the PSK interchange format (NVMe TCP Transport §3.6.1.5; libnvme's
//! `nvme_export_tls_key_versioned` and `nvme_import_tls_key_versioned`):
//!
//! `NVMeTLSkey-1:` (format version 1, the only one), two hex digits naming how the configured PSK becomes the
//! retained PSK (`00` it is used as it is, `01` HKDF with SHA-256, `02` HKDF with SHA-384), `:`, the base64 of the
//! key followed by its CRC-32 (IEEE, little-endian), and a closing `:`. A key is 32 or 48 bytes; with `01` it must
//! be 32 and with `02` 48, and with `00` its length picks the cipher suite's hash.
//!
//! nvme-cli's key files (`--keyfile`, `nvme tls-key --export`) hold already derived TLS PSKs in this same format,
//! after their identity; such a key is not a configured PSK and is not to be derived again.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use zeroize::Zeroizing;

use super::PskHash;
use crate::fabrics::auth::RandomSource;

const PREFIX: &str = "NVMeTLSkey-1:";

/// A PSK could not be read from the interchange format, made, or derived from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    /// The text is not `NVMeTLSkey-1:<hash>:<key>:`.
    #[error("a TLS PSK in interchange format is \"NVMeTLSkey-1:<hash>:<base64 key and CRC-32>:\"")]
    Format,
    /// The hash field is not `00`, `01` or `02`.
    #[error("the hash field {0:?} is not 00 (no transformation), 01 (SHA-256) or 02 (SHA-384)")]
    Hash(String),
    /// The key field is not base64.
    #[error("the key field is not base64")]
    Base64,
    /// The key field decodes to the wrong number of bytes.
    #[error("the key field holds {0} bytes; a PSK of 32 or 48 bytes and its 4-byte CRC-32 are 36 or 52")]
    Length(usize),
    /// The key's length is not the one of the hash the hash field names.
    #[error("a {len}-byte PSK with hash field {:02}: {} keys have {} bytes", hash.id(), hash_name(*hash),
        hash.digest_len())]
    HashLength {
        /// The hash named.
        hash: PskHash,
        /// The key's length.
        len: usize,
    },
    /// The CRC-32 does not match the key (a typo or a truncated copy). Neither CRC is kept: the one computed is a
    /// function of the key, and errors are shown and logged.
    #[error("the key's CRC-32 does not match: the key was mistyped or cut")]
    Crc,
    /// A key of another length was given.
    #[error("a TLS PSK has 32 or 48 bytes, not {0}")]
    KeyLength(usize),
    /// The random number generator failed.
    #[error("{0}")]
    Random(String),
    /// An NQN cannot go into a PSK identity, or the identity is too long to derive with.
    #[error(transparent)]
    Identity(#[from] super::IdentityError),
    /// A version 0 identity, the context of the TLS PSK's derivation, is longer than the derivation takes.
    #[error(
        "the version 0 PSK identity is {len} bytes, longer than the {max} bytes its TLS PSK derivation takes; \
         use identity version 1"
    )]
    ContextTooLong {
        /// The identity's length.
        len: usize,
        /// The longest the derivation takes (libnvme's limit).
        max: usize,
    },
    /// A retained PSK of another length than its hash's.
    #[error("a retained PSK of {len} bytes for {}: it has {} bytes", hash_name(*hash), hash.digest_len())]
    RetainedLength {
        /// The identity's hash.
        hash: PskHash,
        /// The retained PSK's length.
        len: usize,
    },
}

fn hash_name(hash: PskHash) -> &'static str {
    match hash {
        PskHash::Sha256 => "SHA-256",
        PskHash::Sha384 => "SHA-384",
    }
}

/// A configured PSK: the key bytes and how they become the retained PSK (`None`: as they are, hash field `00`).
/// The bytes are wiped when dropped and never printed (`Debug` shows the hash field and the length).
#[derive(Clone, PartialEq, Eq)]
pub struct ConfiguredPsk {
    hmac: Option<PskHash>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfiguredPsk {{ hmac: {:02}, key: <{} bytes> }}", self.hmac_id(), self.key.len())
    }
}

impl std::str::FromStr for ConfiguredPsk {
    type Err = PskError;

    fn from_str(text: &str) -> Result<Self, PskError> {
        ConfiguredPsk::parse(text)
    }
}

impl ConfiguredPsk {
    /// A PSK of `key` bytes, turned into the retained PSK with `hmac` (`None`: used as it is). 32 or 48 bytes, the
    /// hash's length when one is named.
    pub fn new(hmac: Option<PskHash>, key: &[u8]) -> Result<Self, PskError> {
        match hmac {
            Some(hash) if key.len() != hash.digest_len() => Err(PskError::HashLength { hash, len: key.len() }),
            None if PskHash::for_len(key.len()).is_none() => Err(PskError::KeyLength(key.len())),
            _ => Ok(ConfiguredPsk { hmac, key: Zeroizing::new(key.to_vec()) }),
        }
    }

    /// A new random PSK for `hash`, with that hash field, as nvme-cli's `gen-tls-key` makes one.
    pub fn generate(hash: PskHash, rng: &mut dyn RandomSource) -> Result<Self, PskError> {
        let mut key = Zeroizing::new(vec![0u8; hash.digest_len()]);
        rng.fill(&mut key).map_err(|e| PskError::Random(e.to_string()))?;
        Ok(ConfiguredPsk { hmac: Some(hash), key })
    }

    /// Read the interchange format. Surrounding white space (a file's newline) is ignored, and so is a missing
    /// final `:` (libnvme skips that character without looking at it).
    pub fn parse(text: &str) -> Result<Self, PskError> {
        let rest = text.trim().strip_prefix(PREFIX).ok_or(PskError::Format)?;
        let (hmac_field, encoded) = rest.split_once(':').ok_or(PskError::Format)?;
        let hmac = match hmac_field {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            _ => return Err(PskError::Hash(hmac_field.chars().take(8).collect())),
        };
        let encoded = encoded.strip_suffix(':').unwrap_or(encoded);
        let decoded = Zeroizing::new(STANDARD.decode(encoded).map_err(|_| PskError::Base64)?);
        let Some(len) = decoded.len().checked_sub(4).filter(|&n| PskHash::for_len(n).is_some()) else {
            return Err(PskError::Length(decoded.len()));
        };
        if let Some(hash) = hmac.filter(|h| h.digest_len() != len) {
            return Err(PskError::HashLength { hash, len });
        }
        let (key, crc) = decoded.split_at(len);
        if u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) != crc32fast::hash(key) {
            return Err(PskError::Crc);
        }
        Ok(ConfiguredPsk { hmac, key: Zeroizing::new(key.to_vec()) })
    }

    /// The interchange format (itself a secret: wiped when dropped).
    pub fn interchange(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + 4));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let mut text = Zeroizing::new(String::with_capacity(PREFIX.len() + 4 + raw.len().div_ceil(3) * 4));
        text.push_str(PREFIX);
        text.push_str(&format!("{:02}:", self.hmac_id()));
        STANDARD.encode_string(&*raw, &mut text);
        text.push(':');
        text
    }

    /// How the key becomes the retained PSK: `None` as it is (`00`), else HKDF with this hash.
    pub fn hmac(&self) -> Option<PskHash> {
        self.hmac
    }

    /// The hash field: 0, 1 or 2.
    pub fn hmac_id(&self) -> u8 {
        self.hmac.map_or(0, PskHash::id)
    }

    /// The cipher suite's hash: the hash field's, or for `00` the one of the key's length (libnvme's).
    pub fn hash(&self) -> PskHash {
        match (self.hmac, self.key.len()) {
            (Some(hash), _) => hash,
            (None, 48) => PskHash::Sha384,
            (None, _) => PskHash::Sha256,
        }
    }

    /// The key's length in bytes (32 or 48).
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Never: a PSK has 32 or 48 bytes (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The key bytes, for the derivations.
    pub(super) fn key(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::auth::{AuthError, OsRandom};

    /// The configured PSK of libnvme's `test/psk.c`; its 48-byte key repeats the last 16 bytes.
    fn libnvme_key(len: usize) -> Vec<u8> {
        let mut k = vec![
            0x55, 0x12, 0xDB, 0xB6, 0x73, 0x7D, 0x01, 0x06, 0xF6, 0x59, 0x75, 0xB7, 0x73, 0xDF, 0xB0, 0x11, 0xFF, 0xC3,
            0x44, 0xBC, 0xF4, 0x42, 0xE2, 0xDD, 0x6D, 0x8B, 0xC4, 0x87, 0x0B, 0x5D, 0x5B, 0x03,
        ];
        k.extend_from_within(16..32);
        k.truncate(len);
        k
    }

    // libnvme test/psk.c, test_data_psk: nvme_export_tls_key_versioned of the key above.
    const K00: &str = "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";

    #[test]
    fn libnvme_interchange_keys_round_trip() {
        for (text, hmac, len) in [(K00, None, 32), (K01, Some(PskHash::Sha256), 32), (K02, Some(PskHash::Sha384), 48)] {
            let psk = ConfiguredPsk::parse(text).unwrap();
            assert_eq!((psk.hmac(), psk.len()), (hmac, len), "{text}");
            assert_eq!(psk.key(), libnvme_key(len), "{text}");
            assert_eq!(*psk.interchange(), text);
            assert_eq!(ConfiguredPsk::new(hmac, &libnvme_key(len)).unwrap(), psk);
            assert_eq!(text.parse::<ConfiguredPsk>().unwrap(), psk);
        }
        // A file's newline and a missing closing colon, as libnvme reads them.
        assert_eq!(*ConfiguredPsk::parse(&format!("  {}\n", &K02[..K02.len() - 1])).unwrap().interchange(), K02);
    }

    #[test]
    fn hash_field_00_takes_the_hash_of_the_length() {
        let p32 = ConfiguredPsk::new(None, &libnvme_key(32)).unwrap();
        let p48 = ConfiguredPsk::new(None, &libnvme_key(48)).unwrap();
        assert_eq!((p32.hash(), p48.hash()), (PskHash::Sha256, PskHash::Sha384));
        assert_eq!(ConfiguredPsk::parse(&p48.interchange()).unwrap(), p48);
        assert_eq!(p48.interchange().len(), PREFIX.len() + 3 + 72 + 1);
        assert_eq!(PskHash::Sha384.cipher_suite(), "TLS_AES_256_GCM_SHA384");
        assert_eq!(PskHash::Sha256.cipher_suite(), "TLS_AES_128_GCM_SHA256");
    }

    #[test]
    fn every_malformed_key_is_refused_with_its_reason() {
        let cases: &[(&str, PskError)] = &[
            ("", PskError::Format),
            ("NVMeTLSkey-2:01:AAAA:", PskError::Format),
            ("DHHC-1:01:AAAA:", PskError::Format),
            ("NVMeTLSkey-1:01", PskError::Format),
            ("NVMeTLSkey-1:03:AAAA:", PskError::Hash("03".into())),
            ("NVMeTLSkey-1:1:AAAA:", PskError::Hash("1".into())),
            ("NVMeTLSkey-1:0123456789ab:AAAA:", PskError::Hash("01234567".into())),
            ("NVMeTLSkey-1:01:AA*A:", PskError::Base64),
            ("NVMeTLSkey-1:01:AAAA:x", PskError::Base64),
            ("NVMeTLSkey-1:01:AAAA:", PskError::Length(3)),
            // 64 bytes and a CRC: a DH-HMAC-CHAP length, not a TLS one.
            (&format!("NVMeTLSkey-1:00:{}:", STANDARD.encode([0u8; 68])), PskError::Length(68)),
            (&K02.replace(":02:", ":01:"), PskError::HashLength { hash: PskHash::Sha256, len: 48 }),
            (&K01.replace(":01:", ":02:"), PskError::HashLength { hash: PskHash::Sha384, len: 32 }),
            (&K01.replace("VRLb", "VRLc"), PskError::Crc),
        ];
        for (text, expected) in cases {
            assert_eq!(ConfiguredPsk::parse(text).as_ref(), Err(expected), "{text:?}");
        }
        assert_eq!(
            PskError::HashLength { hash: PskHash::Sha256, len: 48 }.to_string(),
            "a 48-byte PSK with hash field 01: SHA-256 keys have 32 bytes"
        );
        assert_eq!(ConfiguredPsk::new(None, &[0; 64]), Err(PskError::KeyLength(64)));
        assert_eq!(
            ConfiguredPsk::new(Some(PskHash::Sha384), &[0; 32]),
            Err(PskError::HashLength { hash: PskHash::Sha384, len: 32 })
        );
    }

    #[test]
    fn errors_and_debug_show_no_key_material() {
        let psk = ConfiguredPsk::new(Some(PskHash::Sha384), &[0xAB; 48]).unwrap();
        assert_eq!(format!("{psk:?}"), "ConfiguredPsk { hmac: 02, key: <48 bytes> }");
        let typo = K01.replace("VRLb", "VRLc");
        let message = ConfiguredPsk::parse(&typo).unwrap_err().to_string();
        assert!(!message.contains("VRL") && !message.contains("Nf9"), "{message}");
    }

    #[test]
    fn generated_keys_are_random_and_parse_back() {
        let a = ConfiguredPsk::generate(PskHash::Sha256, &mut OsRandom).unwrap();
        let b = ConfiguredPsk::generate(PskHash::Sha256, &mut OsRandom).unwrap();
        assert_ne!(a, b);
        assert_eq!((a.hmac(), a.len()), (Some(PskHash::Sha256), 32));
        assert_eq!(ConfiguredPsk::parse(&a.interchange()).unwrap(), a);
        let c = ConfiguredPsk::generate(PskHash::Sha384, &mut OsRandom).unwrap();
        assert!(c.interchange().starts_with("NVMeTLSkey-1:02:") && c.len() == 48);

        struct Broken;
        impl RandomSource for Broken {
            fn fill(&mut self, _: &mut [u8]) -> Result<(), AuthError> {
                Err(AuthError::Random("no entropy".into()))
            }
        }
        assert!(matches!(ConfiguredPsk::generate(PskHash::Sha256, &mut Broken), Err(PskError::Random(_))));
    }
}
