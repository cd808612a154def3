//! NVMe/TCP TLS 1.3 pre-shared keys (NVMe TCP Transport §3.6.1, TP 8011 and TP 8018): the key material only,
//! no handshake and no I/O. This module owns
//!
//! - [`psk`]: the configured PSK and its interchange format `NVMeTLSkey-1:<hash>:<base64 key + CRC-32>:` (what
//!   nvme-cli's `gen-tls-key` prints and `nvme connect --tls-key` reads);
//! - [`derive`](mod@derive): the derivations, as libnvme and the Linux kernel compute them: configured PSK →
//!   retained PSK (HKDF-Extract, then HKDF-Expand-Label "HostNQN" with the host NQN), the PSK digest, retained
//!   PSK → TLS PSK (HKDF-Expand-Label "nvme-tls-psk"), and libnvme's `--compat` variant of both;
//! - [`identity`]: PSK identities, `NVMe0R0h <hostnqn> <subnqn>` (version 0) and `NVMe1R0h <hostnqn> <subnqn>
//!   <digest>` (version 1), made and parsed (a target parses the one a host offers).
//!
//! [`derive_tls_psk`] is what both sides of a handshake call: from a configured PSK and the two NQNs it gives the
//! identity to offer (or to expect) and the TLS PSK to key TLS with. For both identity versions the PSK given to
//! TLS is the derived TLS PSK, never the configured or the retained one: libnvme's `nvme_insert_tls_key_versioned`
//! stores the derived TLS PSK in the `.nvme` keyring under the identity as description, the kernel hands that key
//! to tlshd, and tlshd gives its payload to the TLS library as the external PSK with the description as identity.
//!
//! The hash is that of the cipher suite ([`PskHash`]): SHA-256 for `TLS_AES_128_GCM_SHA256`, SHA-384 for
//! `TLS_AES_256_GCM_SHA384`. The TLS session must be restricted to that suite, as the PSK is bound to its hash.
//!
//! Defaults elsewhere, for interoperability: nvme-cli's `gen-tls-key`/`check-tls-key` make version 0 identities
//! unless `--identity 1`; `nvme connect --tls-key <interchange key>` without `--tls-key-identity` makes a version 1
//! identity (libnvme passes the interchange format's version, 1, as the identity version); libnvme derives as
//! RFC 8446 says ([`PskDerivation::Rfc8446`]) unless `--compat`, since 1.16 (before, it only had the compat
//! derivation). A Linux host without `--tls-key` looks its PSK up in the `.nvme` keyring by identity: since Linux
//! 6.12 it tries retained version 1 identities first (matched without the digest), SHA-384 before SHA-256, then
//! version 0, which the specification now calls obsolete; before 6.12 it tried version 0 only.
//!
//! Keys live in [`zeroize::Zeroizing`] buffers, wiped when dropped, and no `Debug` here prints key material.
#![forbid(unsafe_code)]

pub mod derive;
pub mod identity;
pub mod psk;

use zeroize::Zeroizing;

use crate::fabrics::auth::hash::HashFunction;

pub use identity::{IdentityError, IdentityVersion, PskIdentity, PskType};
pub use psk::{ConfiguredPsk, PskError};

/// The hash of a PSK: the interchange format's and the identity's hash field, and the hash of the TLS 1.3 cipher
/// suite the PSK may be used with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PskHash {
    /// `01`: SHA-256, `TLS_AES_128_GCM_SHA256`, 32-byte keys.
    Sha256,
    /// `02`: SHA-384, `TLS_AES_256_GCM_SHA384`, 48-byte keys.
    Sha384,
}

impl PskHash {
    /// The hash with field value `id` (1 or 2).
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(PskHash::Sha256),
            2 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    /// Its field value: 1 or 2 (written `01`, `02`).
    pub fn id(self) -> u8 {
        match self {
            PskHash::Sha256 => 1,
            PskHash::Sha384 => 2,
        }
    }

    /// Digest length in bytes, which is also the length of every PSK of this hash.
    pub fn digest_len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }

    /// The TLS 1.3 cipher suite (RFC 8446 name, as OpenSSL's `SSL_CTX_set_ciphersuites` takes it).
    pub fn cipher_suite(self) -> &'static str {
        match self {
            PskHash::Sha256 => "TLS_AES_128_GCM_SHA256",
            PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The hash with this digest length: the cipher of a PSK whose hash field is `00` (libnvme's `default_hmac`).
    pub fn for_len(len: usize) -> Option<Self> {
        match len {
            32 => Some(PskHash::Sha256),
            48 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    /// The same function as DH-HMAC-CHAP knows it, for its HMAC.
    fn function(self) -> HashFunction {
        match self {
            PskHash::Sha256 => HashFunction::Sha256,
            PskHash::Sha384 => HashFunction::Sha384,
        }
    }
}

/// How the retained and TLS PSKs are derived: libnvme offers both, chosen by nvme-cli's `--compat`, and the two
/// give different keys (and, for version 1 identities, different digests), so both ends must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PskDerivation {
    /// HKDF-Expand-Label as RFC 8446 §7.1 defines it (length, then label and context each after its length byte):
    /// libnvme's default and what the kernel uses for generated PSKs.
    #[default]
    Rfc8446,
    /// libnvme's `--compat` derivation, its only one before libnvme 1.16 (nvme-cli 2.16), so that of keys set up
    /// with older tools: the info is the length (little-endian), `tls13 `, the label and the context, without
    /// length bytes.
    Compat,
}

/// What a handshake needs from a configured PSK: the identity and the TLS PSK for it.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPsk {
    /// The PSK identity a host offers (and a target expects) in its ClientHello.
    pub identity: String,
    /// The hash: restrict the handshake to [`PskHash::cipher_suite`].
    pub hash: PskHash,
    /// The TLS PSK (the external PSK given to TLS), [`PskHash::digest_len`] bytes.
    pub key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPsk")
            .field("identity", &self.identity)
            .field("hash", &self.hash)
            .field("key", &format_args!("<{} bytes>", self.key.len()))
            .finish()
    }
}

/// The PSK identity and TLS PSK for `configured` between host `hostnqn` and subsystem `subnqn`, as libnvme
/// derives them (`nvme_generate_tls_key_identity[_compat]`, `nvme_insert_tls_key_versioned`): the retained PSK
/// from the configured one and the host NQN, then for version 1 the PSK digest, then the TLS PSK from the retained
/// PSK and the identity.
///
/// A host offers `identity` with `key`. A target parses the identity it receives ([`PskIdentity::parse`]), finds
/// the configured PSK for its NQNs, derives with the identity's version and accepts only if `identity` is the one
/// received (for version 1 that checks the digest, so a key derived the other [`PskDerivation`] is told apart; for
/// version 0 the derivation is not visible in the identity and must be configured).
pub fn derive_tls_psk(
    configured: &ConfiguredPsk,
    hostnqn: &str,
    subnqn: &str,
    version: IdentityVersion,
    derivation: PskDerivation,
) -> Result<TlsPsk, PskError> {
    let hash = configured.hash();
    let retained = match derivation {
        PskDerivation::Rfc8446 => derive::retained_psk(configured, hostnqn)?,
        PskDerivation::Compat => derive::retained_psk_compat(configured, hostnqn)?,
    };
    let digest = match version {
        IdentityVersion::V0 => None,
        IdentityVersion::V1 => Some(derive::psk_digest(hash, &retained, hostnqn, subnqn)),
    };
    let identity = PskIdentity::new(version, PskType::Retained, hash, hostnqn, subnqn, digest.as_deref())?;
    let key = match derivation {
        PskDerivation::Rfc8446 => derive::tls_psk(&retained, &identity)?,
        PskDerivation::Compat => derive::tls_psk_compat(&retained, &identity)?,
    };
    Ok(TlsPsk { identity: identity.to_string(), hash, key })
}

/// The PSK identity and TLS PSK of secure channel concatenation, from the `generated` PSK of a DH-HMAC-CHAP
/// transaction ([`derive::generated_psk`]) between host `hostnqn` and subsystem `subnqn`, as both Linux sides make
/// them (`nvme_auth_generate_digest`, `nvme_auth_derive_tls_psk`, `nvme_tls_psk_refresh`): the PSK digest of the
/// generated PSK, the version 1 identity `NVMe1G<hash> <hostnqn> <subnqn> <digest>`, and the TLS PSK
/// HKDF-Expand-Label(HKDF-Extract(0, generated PSK), "nvme-tls-psk", `"<hash> <digest>"`, L).
pub fn derive_generated_tls_psk(
    hash: PskHash,
    generated: &[u8],
    hostnqn: &str,
    subnqn: &str,
) -> Result<TlsPsk, PskError> {
    let digest = derive::psk_digest(hash, generated, hostnqn, subnqn);
    let identity = PskIdentity::new(IdentityVersion::V1, PskType::Generated, hash, hostnqn, subnqn, Some(&digest))?;
    let key = derive::tls_psk(generated, &identity)?;
    Ok(TlsPsk { identity: identity.to_string(), hash, key })
}
