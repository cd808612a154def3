//! [`AuthError`]: why a DH-HMAC-CHAP transaction failed, and [`FailureReason`], the reason code explanation
//! an AUTH_Failure1/2 message carries.

use crate::WireError;

/// Reason Code Explanation of an AUTH_Failure1/AUTH_Failure2 message (NVMe Base 2.0 Figure 448; Linux
/// `NVME_AUTH_DHCHAP_FAILURE_*`). The Reason Code itself is always 01h, authentication failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// 01h: authentication failed (a response did not verify).
    Failed,
    /// 02h: the authentication protocol is not usable.
    ProtocolUnusable,
    /// 03h: secure channel concatenation mismatch.
    ConcatenationMismatch,
    /// 04h: no hash function both sides support.
    HashUnusable,
    /// 05h: no Diffie-Hellman group both sides support.
    DhGroupUnusable,
    /// 06h: a message's payload is wrong.
    IncorrectPayload,
    /// 07h: a message arrived out of order.
    IncorrectMessage,
    /// Any other value, as received.
    Other(u8),
}

impl FailureReason {
    /// The value on the wire.
    pub fn code(self) -> u8 {
        match self {
            FailureReason::Failed => 0x01,
            FailureReason::ProtocolUnusable => 0x02,
            FailureReason::ConcatenationMismatch => 0x03,
            FailureReason::HashUnusable => 0x04,
            FailureReason::DhGroupUnusable => 0x05,
            FailureReason::IncorrectPayload => 0x06,
            FailureReason::IncorrectMessage => 0x07,
            FailureReason::Other(code) => code,
        }
    }

    /// The reason for a value on the wire.
    pub fn from_code(code: u8) -> Self {
        match code {
            0x01 => FailureReason::Failed,
            0x02 => FailureReason::ProtocolUnusable,
            0x03 => FailureReason::ConcatenationMismatch,
            0x04 => FailureReason::HashUnusable,
            0x05 => FailureReason::DhGroupUnusable,
            0x06 => FailureReason::IncorrectPayload,
            0x07 => FailureReason::IncorrectMessage,
            other => FailureReason::Other(other),
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::Failed => f.write_str("authentication failed"),
            FailureReason::ProtocolUnusable => f.write_str("authentication protocol not usable"),
            FailureReason::ConcatenationMismatch => f.write_str("secure channel concatenation mismatch"),
            FailureReason::HashUnusable => f.write_str("no usable hash function"),
            FailureReason::DhGroupUnusable => f.write_str("no usable DH group"),
            FailureReason::IncorrectPayload => f.write_str("incorrect payload"),
            FailureReason::IncorrectMessage => f.write_str("incorrect protocol message"),
            FailureReason::Other(code) => write!(f, "reason {code:#04x}"),
        }
    }
}

/// A DH-HMAC-CHAP transaction failed. Messages say which side and what, never a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The peer ended the transaction with AUTH_Failure1 (from the controller) or AUTH_Failure2 (from the host).
    #[error("the peer refused: {0}")]
    Refused(FailureReason),
    /// The host's response did not verify at the controller, which answered AUTH_Failure1 with reason 01h.
    #[error("the controller did not accept the host's response (the secret is not the one it has for this host)")]
    HostNotAccepted,
    /// The controller's response (bidirectional authentication) did not verify with the controller secret.
    #[error("the controller's response did not verify: it does not hold the controller secret given")]
    ControllerNotAuthenticated,
    /// A message did not parse or does not belong at this step of the transaction.
    #[error("{0}")]
    Message(#[from] WireError),
    /// A message arrived out of order (its type and identifier named).
    #[error("expected {expected}, received {received}")]
    UnexpectedMessage {
        /// The message expected at this step.
        expected: &'static str,
        /// What arrived (`auth_type`/`auth_id`).
        received: String,
    },
    /// The transaction identifier of a message is not this transaction's.
    #[error("transaction identifier {received} in a message of transaction {expected}")]
    TransactionId {
        /// This transaction's.
        expected: u16,
        /// The message's.
        received: u16,
    },
    /// The controller picked a hash function this side does not implement.
    #[error("hash function {0:#04x} is not one of SHA-256 (01h), SHA-384 (02h), SHA-512 (03h)")]
    HashUnusable(u8),
    /// The controller picked a DH group this side does not implement, or sent a DH value that does not fit it.
    #[error("DH group {group:#04x}: {reason}")]
    DhGroupUnusable {
        /// The group identifier.
        group: u8,
        /// What is wrong.
        reason: &'static str,
    },
    /// The peer's DH public value is outside 2..=p-2 (which would make the shared secret guessable).
    #[error("the peer's DH public value is out of range")]
    BadPublicValue,
    /// The host's offer names no hash function this controller allows (AUTH_Negotiate).
    #[error("the host offers no hash function this controller allows (offered: {offered})")]
    NoCommonHash {
        /// The host's offer, as names.
        offered: String,
    },
    /// The host's offer names no DH group this controller allows (AUTH_Negotiate).
    #[error("the host offers no DH group this controller allows (offered: {offered})")]
    NoCommonDhGroup {
        /// The host's offer, as names.
        offered: String,
    },
    /// The host asked for secure channel concatenation, which this controller does not do.
    #[error("the host asked for secure channel concatenation (sc_c {0:#04x}), which is not supported")]
    ConcatenationUnsupported(u8),
    /// The host asked for secure channel concatenation but sent no challenge C2 to generate the PSK from.
    #[error("the host asked for secure channel concatenation but its reply has no challenge")]
    NoConcatenationChallenge,
    /// The host's response did not verify with the host secret the controller holds for it.
    #[error("the host's response did not verify: the host does not hold the secret configured for it")]
    HostNotAuthenticated,
    /// The host asked to authenticate the controller, which has no controller secret for it.
    #[error("the host asked for bidirectional authentication but no controller secret is configured for it")]
    NoControllerSecret,
    /// The operating system's random number generator failed.
    #[error("random number generator: {0}")]
    Random(String),
}

impl AuthError {
    /// The reason an AUTH_Failure2 (host) or AUTH_Failure1 (controller) for this error carries; `None` when
    /// the peer already ended the transaction (it sent a failure message itself).
    pub fn failure_reason(&self) -> Option<FailureReason> {
        Some(match self {
            AuthError::Refused(_) | AuthError::HostNotAccepted => return None,
            AuthError::ControllerNotAuthenticated
            | AuthError::HostNotAuthenticated
            | AuthError::NoControllerSecret
            | AuthError::NoConcatenationChallenge => FailureReason::Failed,
            AuthError::NoCommonHash { .. } => FailureReason::HashUnusable,
            AuthError::NoCommonDhGroup { .. } => FailureReason::DhGroupUnusable,
            AuthError::ConcatenationUnsupported(_) => FailureReason::ConcatenationMismatch,
            AuthError::Message(_) | AuthError::BadPublicValue => FailureReason::IncorrectPayload,
            AuthError::UnexpectedMessage { .. } | AuthError::TransactionId { .. } => FailureReason::IncorrectMessage,
            AuthError::HashUnusable(_) => FailureReason::HashUnusable,
            AuthError::DhGroupUnusable { .. } => FailureReason::DhGroupUnusable,
            AuthError::Random(_) => FailureReason::Failed,
        })
    }
}
