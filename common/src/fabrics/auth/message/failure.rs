//! AUTH_Failure1 (controller to host) and AUTH_Failure2 (host to controller) (NVMe Base 2.0 Figure 448): the
//! transaction failed, and why. Eight bytes, as Linux sends them.

use super::{auth_id, encode, expect, AUTH_TYPE_COMMON};
use crate::fabrics::auth::FailureReason;
use crate::wire::{fixed, WireError};

const STRUCTURE: &str = "AUTH_Failure";

/// Reason Code 01h: authentication failure (the only one defined).
const RESCODE_FAILED: u8 = 0x01;

/// Which failure message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// AUTH_Failure1: sent by the controller.
    Failure1,
    /// AUTH_Failure2: sent by the host.
    Failure2,
}

impl FailureKind {
    fn id(self) -> u8 {
        match self {
            FailureKind::Failure1 => auth_id::FAILURE1,
            FailureKind::Failure2 => auth_id::FAILURE2,
        }
    }
}

/// AUTH_Failure1 or AUTH_Failure2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Which one.
    pub kind: FailureKind,
    /// Transaction identifier.
    pub t_id: u16,
    /// Reason Code Explanation.
    pub reason: FailureReason,
}

impl Failure {
    /// Parse a failure message of `kind`.
    pub fn parse(buf: &[u8], kind: FailureKind) -> Result<Self, WireError> {
        let h = expect(buf, STRUCTURE, AUTH_TYPE_COMMON, kind.id())?;
        let b = fixed::<8>(buf, STRUCTURE)?;
        Ok(Failure { kind, t_id: h.t_id, reason: FailureReason::from_code(b[7]) })
    }

    /// The message (8 bytes: `rescode` 01h, `rescode_exp` the reason).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = encode(AUTH_TYPE_COMMON, self.kind.id(), self.t_id, 8);
        b[6] = RESCODE_FAILED;
        b[7] = self.reason.code();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_nvmf_auth_dhchap_failure_data() {
        let f = Failure { kind: FailureKind::Failure2, t_id: 5, reason: FailureReason::Failed };
        assert_eq!(f.to_bytes(), [0, 0xF0, 0, 0, 5, 0, 1, 1]);
        assert_eq!(Failure::parse(&f.to_bytes(), FailureKind::Failure2).unwrap(), f);
        let mut one = vec![0, 0xF1, 0, 0, 5, 0, 1, 0x06];
        one.resize(4096, 0);
        let parsed = Failure::parse(&one, FailureKind::Failure1).unwrap();
        assert_eq!(parsed.reason, FailureReason::IncorrectPayload);
        assert!(Failure::parse(&one, FailureKind::Failure2).is_err());
        assert_eq!(FailureReason::from_code(0x42), FailureReason::Other(0x42));
        assert_eq!(FailureReason::Other(0x42).code(), 0x42);
    }
}
