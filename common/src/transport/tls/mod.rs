//! TLS 1.3 with an external pre-shared key on an NVMe/TCP connection (NVMe/TCP transport specification §3.6,
//! TP 8011), as Linux (`tlshd` + kTLS) and SPDK do it: the handshake in user space with OpenSSL, then the record
//! layer moved into the kernel (kTLS), so that both socket paths (epoll and io_uring) read and write plaintext on
//! the same descriptor as before, and the kernel encrypts.
//!
//! - [`client_handshake`], [`server_handshake`]: each end's handshake on a connected, blocking socket (the caller
//!   bounds it with socket timeouts), offering or looking up the PSK by its identity;
//! - `openssl`: the only code here that calls OpenSSL (`openssl-sys`, plus the TLS 1.3 PSK session calls it does not
//!   bind), which is why it holds `unsafe`;
//! - `ktls`: the traffic keys derived from the handshake's secrets and given to the kernel (`TCP_ULP` "tls",
//!   `TLS_TX`/`TLS_RX`).
//!
//! What the PSK is and how it is derived from a configured key is [`crate::fabrics::tls`]'s business: here a PSK
//! is an identity, key bytes and the cipher suite they belong to. Keys and traffic secrets live in
//! [`zeroize::Zeroizing`] buffers and are never formatted.

mod handshake;
mod ktls;
mod openssl;

pub use handshake::{client_handshake, server_handshake, RecordLayer, Secured};
pub use ktls::ktls_available;

use zeroize::Zeroizing;

/// The TLS 1.3 cipher suites of NVMe/TCP; kTLS takes all three. The NVMe/TCP specification pairs a PSK's hash with
/// one (SHA-256 → AES-128-GCM, SHA-384 → AES-256-GCM). Linux's `tlshd` (GnuTLS) takes every external PSK to be a
/// SHA-256 one, whatever its length, and ends up with ChaCha20-Poly1305 for SHA-384 keys; so a server here follows
/// the hash of the binder the client sent, and a host offers SHA-384 keys both ways ([`CipherSuite::Aes128GcmSha256`]
/// first, as Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// `TLS_AES_128_GCM_SHA256` (0x1301).
    Aes128GcmSha256,
    /// `TLS_AES_256_GCM_SHA384` (0x1302).
    Aes256GcmSha384,
    /// `TLS_CHACHA20_POLY1305_SHA256` (0x1303): what GnuTLS negotiates for a SHA-384 PSK.
    Chacha20Poly1305Sha256,
}

impl CipherSuite {
    /// The IANA name, as OpenSSL and the logs spell it.
    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            CipherSuite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
            CipherSuite::Chacha20Poly1305Sha256 => "TLS_CHACHA20_POLY1305_SHA256",
        }
    }

    /// The suites offered (client) or taken (server) with a PSK of this suite's hash, in order of preference.
    fn with_same_hash(self) -> &'static str {
        match self.hash_len() {
            32 => "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256",
            _ => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The suite of this two-byte identifier.
    fn from_id(id: u16) -> Option<Self> {
        [CipherSuite::Aes128GcmSha256, CipherSuite::Aes256GcmSha384, CipherSuite::Chacha20Poly1305Sha256]
            .into_iter()
            .find(|s| u16::from_be_bytes(s.id()) == id)
    }

    /// The suite's two-byte identifier.
    fn id(self) -> [u8; 2] {
        match self {
            CipherSuite::Aes128GcmSha256 => [0x13, 0x01],
            CipherSuite::Aes256GcmSha384 => [0x13, 0x02],
            CipherSuite::Chacha20Poly1305Sha256 => [0x13, 0x03],
        }
    }

    /// The length of its hash (and so of its binders and traffic secrets).
    pub fn hash_len(self) -> usize {
        match self {
            CipherSuite::Aes128GcmSha256 | CipherSuite::Chacha20Poly1305Sha256 => 32,
            CipherSuite::Aes256GcmSha384 => 48,
        }
    }
}

impl From<crate::fabrics::tls::PskHash> for CipherSuite {
    /// The suite a PSK of this hash belongs to.
    fn from(hash: crate::fabrics::tls::PskHash) -> Self {
        match hash {
            crate::fabrics::tls::PskHash::Sha256 => CipherSuite::Aes128GcmSha256,
            crate::fabrics::tls::PskHash::Sha384 => CipherSuite::Aes256GcmSha384,
        }
    }
}

/// A pre-shared key as the handshake uses it: the identity sent in the ClientHello, the TLS PSK and its suite.
#[derive(Clone)]
pub struct HandshakePsk {
    /// The PSK identity (`NVMe0R01 …` or `NVMe1R0x …`).
    pub identity: Vec<u8>,
    /// The TLS PSK (as many bytes as the suite's hash).
    pub key: Zeroizing<Vec<u8>>,
    /// The suite of the PSK's session, whose hash is the binder's: [`CipherSuite::Aes128GcmSha256`] or
    /// [`CipherSuite::Aes256GcmSha384`] (a server follows the client's binder instead).
    pub suite: CipherSuite,
}

impl From<crate::fabrics::tls::TlsPsk> for HandshakePsk {
    /// A derived PSK (configured or generated) as the handshake offers or expects it, with its hash's suite.
    fn from(psk: crate::fabrics::tls::TlsPsk) -> Self {
        HandshakePsk { identity: psk.identity.into_bytes(), key: psk.key, suite: CipherSuite::from(psk.hash) }
    }
}

impl std::fmt::Debug for HandshakePsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandshakePsk")
            .field("identity", &String::from_utf8_lossy(&self.identity))
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

/// Why a handshake or the move to kTLS failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The peer offered no identity we hold a key for (server), or refused ours (client).
    #[error("no pre-shared key in common with the peer{}", identity_suffix(.0))]
    UnknownIdentity(Option<String>),
    /// The handshake failed: OpenSSL's reason, or the socket's error.
    #[error("TLS handshake: {0}")]
    Handshake(String),
    /// The handshake did not end within the socket's timeouts.
    #[error("TLS handshake: the peer stopped answering")]
    TimedOut,
    /// The kernel refused the keys of its TLS layer.
    #[error("kTLS: {0}")]
    Ktls(String),
    /// The kernel has no TLS layer (the `tls` module): the records go through user space.
    #[error("kTLS: the kernel has no TLS support (modprobe tls)")]
    NoKtls,
    /// A PSK of another length than NVMe/TCP's (32 or 48 bytes).
    #[error("a TLS PSK must be 32 or 48 bytes, not {0}")]
    KeyLength(usize),
}

fn identity_suffix(identity: &Option<String>) -> String {
    identity.as_ref().map(|i| format!(" (it offered \"{i}\")")).unwrap_or_default()
}
