//! The Diffie-Hellman part of DH-HMAC-CHAP (NVMe Base 2.0 §8.13.5.4, Figure 444): the groups ([`DhGroup`]: NULL
//! and RFC 7919's ffdhe2048..8192), an ephemeral key pair ([`DhKeyPair`]) and the shared secret, with the modular
//! exponentiation of `crypto-bigint` (constant time in the private exponent).
//!
//! Public values and the shared secret are big-endian and as long as the prime (zero-padded), as the Linux
//! kernel's `dh` writes them; the session key the augmented challenge hashes is that padded shared secret.

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::Zeroizing;

use super::{ffdhe, AuthError, RandomSource};

/// A DH-HMAC-CHAP Diffie-Hellman group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DhGroup {
    /// 00h: no Diffie-Hellman exchange (the challenge is used as it is).
    Null,
    /// 01h: RFC 7919 ffdhe2048.
    Ffdhe2048,
    /// 02h: ffdhe3072.
    Ffdhe3072,
    /// 03h: ffdhe4096.
    Ffdhe4096,
    /// 04h: ffdhe6144.
    Ffdhe6144,
    /// 05h: ffdhe8192.
    Ffdhe8192,
}

/// Every group, in the order a host offers them (Linux's).
pub const ALL_GROUPS: [DhGroup; 6] =
    [DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe3072, DhGroup::Ffdhe4096, DhGroup::Ffdhe6144, DhGroup::Ffdhe8192];

impl DhGroup {
    /// The group with identifier `id`, if it is one.
    pub fn from_id(id: u8) -> Option<Self> {
        ALL_GROUPS.get(usize::from(id)).copied()
    }

    /// Its identifier on the wire.
    pub fn id(self) -> u8 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 1,
            DhGroup::Ffdhe3072 => 2,
            DhGroup::Ffdhe4096 => 3,
            DhGroup::Ffdhe6144 => 4,
            DhGroup::Ffdhe8192 => 5,
        }
    }

    /// As nvmet's `dhchap_dhgroup` attribute names it (`null`, `ffdhe2048` …).
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Bits of the prime (0 for NULL).
    pub fn bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 2048,
            DhGroup::Ffdhe3072 => 3072,
            DhGroup::Ffdhe4096 => 4096,
            DhGroup::Ffdhe6144 => 6144,
            DhGroup::Ffdhe8192 => 8192,
        }
    }

    /// Length of a public value and of the shared secret in bytes (DHVLEN; 0 for NULL).
    pub fn value_len(self) -> usize {
        self.bits() as usize / 8
    }

    /// Bits of the private exponent: at least twice the group's security strength, as RFC 7919 §5.2 asks
    /// (225, 275, 325, 375, 400), rounded up to 64-bit limbs.
    fn exponent_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 320,
            DhGroup::Ffdhe4096 => 384,
            DhGroup::Ffdhe6144 => 448,
            DhGroup::Ffdhe8192 => 512,
        }
    }

    fn prime_hex(self) -> Option<&'static str> {
        Some(match self {
            DhGroup::Null => return None,
            DhGroup::Ffdhe2048 => ffdhe::FFDHE2048,
            DhGroup::Ffdhe3072 => ffdhe::FFDHE3072,
            DhGroup::Ffdhe4096 => ffdhe::FFDHE4096,
            DhGroup::Ffdhe6144 => ffdhe::FFDHE6144,
            DhGroup::Ffdhe8192 => ffdhe::FFDHE8192,
        })
    }

    /// The prime as an integer of the group's precision.
    fn prime(self) -> Option<BoxedUint> {
        let hex = self.prime_hex()?;
        let bytes: Vec<u8> = hex
            .as_bytes()
            .chunks(2)
            .map(|pair| {
                let digit = |c: u8| char::from(c).to_digit(16).unwrap_or(0);
                u8::try_from(digit(pair[0]) * 16 + digit(pair[1])).unwrap_or(0)
            })
            .collect();
        BoxedUint::from_be_slice(&bytes, self.bits()).ok()
    }

    fn params(self) -> Option<BoxedMontyParams> {
        Odd::new(self.prime()?).into_option().map(BoxedMontyParams::new)
    }
}

/// An ephemeral Diffie-Hellman key pair of one transaction: the private exponent (wiped when dropped) and the
/// public value g^x mod p sent to the peer.
pub struct DhKeyPair {
    group: DhGroup,
    params: BoxedMontyParams,
    private: Zeroizing<BoxedUint>,
    public: Vec<u8>,
}

impl std::fmt::Debug for DhKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DhKeyPair {{ group: {}, private: <redacted> }}", self.group.name())
    }
}

impl DhKeyPair {
    /// A fresh key pair of `group` (not NULL) with a private exponent from `rng`.
    pub fn generate(group: DhGroup, rng: &mut dyn RandomSource) -> Result<Self, AuthError> {
        let mut bytes = Zeroizing::new(vec![0u8; group.exponent_bits() as usize / 8]);
        rng.fill(&mut bytes)?;
        // The top bit set keeps the exponent at its full size.
        if let Some(first) = bytes.first_mut() {
            *first |= 0x80;
        }
        Self::with_private(group, &bytes)
    }

    /// The key pair of a given private exponent (big-endian); for tests and known-answer checks.
    pub fn with_private(group: DhGroup, private: &[u8]) -> Result<Self, AuthError> {
        let unusable = |reason| AuthError::DhGroupUnusable { group: group.id(), reason };
        let params = group.params().ok_or(unusable("the NULL group has no key pair"))?;
        let bits = u32::try_from(private.len() * 8).map_err(|_| unusable("private exponent too long"))?;
        let private = Zeroizing::new(
            BoxedUint::from_be_slice(private, bits.max(64)).map_err(|_| unusable("private exponent too long"))?,
        );
        let two = BoxedUint::from_be_slice(&[2], group.bits()).map_err(|_| unusable("no generator"))?;
        let generator = BoxedMontyForm::new(two, &params);
        let public = value_bytes(&generator.pow(&private).retrieve(), group);
        Ok(DhKeyPair { group, params, private, public })
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The public value g^x mod p, as long as the prime.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret peer^x mod p (as long as the prime) for the peer's public value, which must be as long
    /// as the prime and within 2..=p-2.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, AuthError> {
        if peer.len() != self.group.value_len() {
            return Err(AuthError::DhGroupUnusable {
                group: self.group.id(),
                reason: "the DH value's length is not the group's",
            });
        }
        let y = BoxedUint::from_be_slice(peer, self.group.bits()).map_err(|_| AuthError::BadPublicValue)?;
        let p = self.params.modulus().as_ref();
        let one = BoxedUint::one_with_precision(self.group.bits());
        let p_minus_one = p.wrapping_sub(&one);
        // 0, 1 and p-1 (and anything ≥ p) would pin the shared secret to a value an attacker knows.
        if y <= one || y >= p_minus_one {
            return Err(AuthError::BadPublicValue);
        }
        let mut shared = BoxedMontyForm::new(y, &self.params).pow(&self.private).retrieve();
        let bytes = Zeroizing::new(value_bytes(&shared, self.group));
        zeroize::Zeroize::zeroize(&mut shared);
        Ok(bytes)
    }
}

/// `v` big-endian, as long as the group's prime.
fn value_bytes(v: &BoxedUint, group: DhGroup) -> Vec<u8> {
    let be = v.to_be_bytes();
    let len = group.value_len();
    // The precision is the prime's, a whole number of limbs: exactly `len` bytes for every group.
    be[be.len().saturating_sub(len)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::auth::random::tests::Counting;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn identifiers_names_and_sizes() {
        for g in ALL_GROUPS {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            if g != DhGroup::Null {
                let p = g.prime().unwrap().to_be_bytes();
                assert_eq!(p.len(), g.value_len(), "{}", g.name());
                // RFC 7919 primes: the top and the bottom 64 bits are all ones.
                assert!(p[..8].iter().chain(&p[p.len() - 8..]).all(|&b| b == 0xff), "{}", g.name());
            }
        }
        assert_eq!(DhGroup::from_id(6), None);
        assert_eq!(DhGroup::Ffdhe8192.value_len(), 1024);
        assert!(DhKeyPair::generate(DhGroup::Null, &mut Counting(0)).is_err());
    }

    #[test]
    fn ffdhe2048_prime_passes_fermat() {
        // 3^(p-1) ≡ 1 (mod p) for a prime p.
        let g = DhGroup::Ffdhe2048;
        let params = g.params().unwrap();
        let p = g.prime().unwrap();
        let exp = p.wrapping_sub(BoxedUint::one_with_precision(2048));
        let three = BoxedMontyForm::new(BoxedUint::from_be_slice(&[3], 2048).unwrap(), &params);
        assert_eq!(three.pow(&exp).retrieve(), BoxedUint::one_with_precision(2048));
    }

    #[test]
    fn public_value_and_shared_secret_match_python() {
        // Independently, in Python:
        //   x = int('01' * 32, 16); y = int('02' * 32, 16)
        //   pow(2, x, p).to_bytes(256, 'big').hex()[:32], pow(pow(2, y, p), x, p) …
        let g = DhGroup::Ffdhe2048;
        let a = DhKeyPair::with_private(g, &[0x01; 32]).unwrap();
        let b = DhKeyPair::with_private(g, &[0x02; 32]).unwrap();
        assert_eq!(a.public().len(), 256);
        assert_eq!(a.public()[..16], hex(PUBLIC_A_PREFIX));
        let ab = a.shared_secret(b.public()).unwrap();
        let ba = b.shared_secret(a.public()).unwrap();
        assert_eq!(*ab, *ba);
        assert_eq!(ab[..16], hex(SHARED_PREFIX));
    }

    #[test]
    fn generated_pairs_agree_and_differ() {
        let g = DhGroup::Ffdhe3072;
        let a = DhKeyPair::generate(g, &mut crate::fabrics::auth::OsRandom).unwrap();
        let b = DhKeyPair::generate(g, &mut crate::fabrics::auth::OsRandom).unwrap();
        assert_ne!(a.public(), b.public());
        assert_eq!(*a.shared_secret(b.public()).unwrap(), *b.shared_secret(a.public()).unwrap());
        assert!(!format!("{a:?}").contains("private: B"), "Debug shows no exponent");
    }

    #[test]
    fn degenerate_public_values_are_refused() {
        let g = DhGroup::Ffdhe2048;
        let a = DhKeyPair::with_private(g, &[0x01; 32]).unwrap();
        let mut v = vec![0u8; 256];
        assert_eq!(a.shared_secret(&v), Err(AuthError::BadPublicValue));
        v[255] = 1;
        assert_eq!(a.shared_secret(&v), Err(AuthError::BadPublicValue));
        let mut p_minus_one = g.prime().unwrap().to_be_bytes().to_vec();
        p_minus_one[255] -= 1;
        assert_eq!(a.shared_secret(&p_minus_one), Err(AuthError::BadPublicValue));
        assert_eq!(a.shared_secret(&[0xff; 256]), Err(AuthError::BadPublicValue));
        assert!(matches!(a.shared_secret(&[2; 255]), Err(AuthError::DhGroupUnusable { group: 1, .. })));
        v[255] = 2;
        assert!(a.shared_secret(&v).is_ok());
    }

    const PUBLIC_A_PREFIX: &str = "7fd27f6a8cf60517051bc259e3a8284d";
    const SHARED_PREFIX: &str = "b2ab46b69760eb6df512c5ae2ab44d3a";
}
