//! In-band authentication with DH-HMAC-CHAP (NVMe Base 2.0 §8.13, NVMe-oF 1.1 §6.3): what the host and the
//! controller share, so that both sides of the transaction are built from the same parts.
//!
//! - [`secret`]: the `DHHC-1:<hmac>:<base64 key + CRC-32>:` representation (nvme-cli's `gen-dhchap-key`, the
//!   kernel's `dhchap_key`) and the secret's transformation with an NQN;
//! - [`hash`]: the hash functions (SHA-256/384/512) and their HMAC;
//! - [`dh`] (with the RFC 7919 groups in `ffdhe`): the NULL group and ffdhe2048..8192, ephemeral key pairs and
//!   the shared secret;
//! - [`response`]: the response values (the host's `HostHost` one, the controller's `Controller` one) and the
//!   augmented challenge, computed and verified as the Linux host and nvmet do;
//! - [`message`]: AUTH_Negotiate, DH-HMAC-CHAP_Challenge, _Reply, _Success1, _Success2, AUTH_Failure1/2;
//! - [`command`]: the Authentication Send and Receive fabrics commands that carry them;
//! - [`host`]: the host's side of one transaction as a state machine without I/O ([`host::HostTransaction`]);
//! - [`controller`]: the controller's side, its mirror ([`controller::ControllerTransaction`]), for a target.
//!
//! Secrets and everything derived from them (transformed keys, DH private exponents, session keys) live in
//! [`zeroize::Zeroizing`] buffers, wiped when dropped; their `Debug` prints no key material. No I/O here: the
//! caller sends and receives the messages (the host over its queue, a target in its controller).
#![forbid(unsafe_code)]

pub mod command;
pub mod controller;
pub mod dh;
mod error;
mod ffdhe;
pub mod hash;
pub mod host;
pub mod message;
mod random;
pub mod response;
pub mod secret;

pub use error::{AuthError, FailureReason};

/// AUTH_Negotiate's SC_C field (secure channel concatenation), as Linux names its values (`NVME_AUTH_SECP_*`).
pub mod secure_channel {
    /// 00h: no secure channel concatenation.
    pub const NONE: u8 = 0x00;
    /// 02h: generate a PSK for a new TLS connection (on a plaintext admin queue).
    pub const NEW_TLS_PSK: u8 = 0x02;
    /// 03h: generate a PSK to replace the one securing this connection (on an admin queue secured with TLS).
    pub const REPLACE_TLS_PSK: u8 = 0x03;
}
pub use random::{OsRandom, RandomSource, SequenceNumbers};
