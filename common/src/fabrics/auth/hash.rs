//! The hash functions of DH-HMAC-CHAP (NVMe Base 2.0 Figure 443: 01h SHA-256, 02h SHA-384, 03h SHA-512) and
//! their HMAC, from RustCrypto's `sha2` and `hmac`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A DH-HMAC-CHAP hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashFunction {
    /// 01h.
    Sha256,
    /// 02h.
    Sha384,
    /// 03h.
    Sha512,
}

/// Every hash function, in the order a host offers them (Linux's).
pub const ALL_HASHES: [HashFunction; 3] = [HashFunction::Sha256, HashFunction::Sha384, HashFunction::Sha512];

impl HashFunction {
    /// The function with identifier `id`, if it is one.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0x01 => Some(HashFunction::Sha256),
            0x02 => Some(HashFunction::Sha384),
            0x03 => Some(HashFunction::Sha512),
            _ => None,
        }
    }

    /// Its identifier on the wire.
    pub fn id(self) -> u8 {
        match self {
            HashFunction::Sha256 => 0x01,
            HashFunction::Sha384 => 0x02,
            HashFunction::Sha512 => 0x03,
        }
    }

    /// Digest length in bytes (the messages' HL).
    pub fn digest_len(self) -> usize {
        match self {
            HashFunction::Sha256 => 32,
            HashFunction::Sha384 => 48,
            HashFunction::Sha512 => 64,
        }
    }

    /// As nvmet's `dhchap_hash` attribute names it (`hmac(sha256)`).
    pub fn name(self) -> &'static str {
        match self {
            HashFunction::Sha256 => "hmac(sha256)",
            HashFunction::Sha384 => "hmac(sha384)",
            HashFunction::Sha512 => "hmac(sha512)",
        }
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashFunction::Sha256 => Sha256::digest(data).to_vec(),
            HashFunction::Sha384 => Sha384::digest(data).to_vec(),
            HashFunction::Sha512 => Sha512::digest(data).to_vec(),
        })
    }

    /// HMAC(key, the concatenation of `parts`).
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashFunction::Sha256 => mac::<Hmac<Sha256>>(key, parts).finalize().into_bytes().to_vec(),
            HashFunction::Sha384 => mac::<Hmac<Sha384>>(key, parts).finalize().into_bytes().to_vec(),
            HashFunction::Sha512 => mac::<Hmac<Sha512>>(key, parts).finalize().into_bytes().to_vec(),
        })
    }

    /// Whether HMAC(key, the concatenation of `parts`) is `expected`, compared in constant time.
    pub fn verify_hmac(self, key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
        match self {
            HashFunction::Sha256 => mac::<Hmac<Sha256>>(key, parts).verify_slice(expected).is_ok(),
            HashFunction::Sha384 => mac::<Hmac<Sha384>>(key, parts).verify_slice(expected).is_ok(),
            HashFunction::Sha512 => mac::<Hmac<Sha512>>(key, parts).verify_slice(expected).is_ok(),
        }
    }
}

fn mac<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> M {
    // HMAC takes keys of any length (longer ones are hashed first), so this never falls back.
    let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| <M as KeyInit>::new(&Default::default()));
    for p in parts {
        m.update(p);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn identifiers_and_lengths() {
        for h in ALL_HASHES {
            assert_eq!(HashFunction::from_id(h.id()), Some(h));
            assert_eq!(h.hash(b"").len(), h.digest_len());
        }
        assert_eq!(HashFunction::from_id(0), None);
        assert_eq!(HashFunction::from_id(4), None);
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let parts: [&[u8]; 2] = [b"what do ya want ", b"for nothing?"];
        assert_eq!(
            *HashFunction::Sha256.hmac(b"Jefe", &parts),
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
        assert_eq!(
            *HashFunction::Sha384.hmac(b"Jefe", &parts),
            hex("af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649")
        );
        let tag = hex(
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
        );
        assert!(HashFunction::Sha512.verify_hmac(b"Jefe", &parts, &tag));
        let mut wrong = tag.clone();
        wrong[0] ^= 1;
        assert!(!HashFunction::Sha512.verify_hmac(b"Jefe", &parts, &wrong));
        assert!(!HashFunction::Sha512.verify_hmac(b"Jefe", &parts, &tag[..32]));
    }
}
