//! The Authentication Send and Authentication Receive fabrics commands (NVMe Base 2.0 §6.2, §6.3; fctype 05h and
//! 06h; Linux `struct nvmf_auth_send_command` / `nvmf_auth_receive_command`) that carry the messages.
//!
//! | SQE byte | field |
//! |---|---|
//! | 4 | fctype 0x05 (Send) / 0x06 (Receive) |
//! | 24..40 | SGL1: the message (Send) or the buffer for it (Receive) |
//! | 41 | SPSP0 (0x01 for DH-HMAC-CHAP) |
//! | 42 | SPSP1 (0x01) |
//! | 43 | SECP: security protocol, 0xE9 for NVMe in-band authentication |
//! | 44..48 | TL (Send: transfer length) / AL (Receive: allocation length) |

use crate::nvme::opcode::{fctype, FABRICS};
use crate::nvme::SubmissionQueueEntry;
use crate::wire::WireError;

/// SECP of DH-HMAC-CHAP (Linux `NVME_AUTH_DHCHAP_PROTOCOL_IDENTIFIER`).
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;

/// Which of the two commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Authentication Send (host to controller; the length is TL).
    Send,
    /// Authentication Receive (controller to host; the length is AL).
    Receive,
}

/// An Authentication Send or Receive command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthenticationCommand {
    /// Send or Receive.
    pub direction: Direction,
    /// Security protocol.
    pub secp: u8,
    /// SP Specific 0.
    pub spsp0: u8,
    /// SP Specific 1.
    pub spsp1: u8,
    /// Transfer length (Send) or allocation length (Receive) in bytes; the data SGL describes this many.
    pub length: u32,
}

impl AuthenticationCommand {
    /// A DH-HMAC-CHAP Send of `length` bytes.
    pub fn send(length: u32) -> Self {
        AuthenticationCommand { direction: Direction::Send, secp: SECP_DHCHAP, spsp0: 1, spsp1: 1, length }
    }

    /// A DH-HMAC-CHAP Receive into `length` bytes.
    pub fn receive(length: u32) -> Self {
        AuthenticationCommand { direction: Direction::Receive, ..Self::send(length) }
    }

    /// The view of a fabrics SQE with fctype 05h or 06h (the fields as found; a target checks SECP/SPSP).
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(FABRICS, "AuthenticationCommand", "0x7f (fabrics)")?;
        let direction = match sqe.fctype() {
            fctype::AUTHENTICATION_SEND => Direction::Send,
            fctype::AUTHENTICATION_RECEIVE => Direction::Receive,
            other => {
                return Err(WireError::invalid(
                    "AuthenticationCommand",
                    "fctype",
                    other,
                    "0x05 (Authentication Send) or 0x06 (Authentication Receive)",
                ))
            }
        };
        let [_, spsp0, spsp1, secp] = sqe.cdw10.to_le_bytes();
        Ok(AuthenticationCommand { direction, secp, spsp0, spsp1, length: sqe.cdw11 })
    }

    /// The SQE (command identifier 0; the queue sets SGL1 for the data).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(FABRICS);
        sqe.nsid = u32::from(match self.direction {
            Direction::Send => fctype::AUTHENTICATION_SEND,
            Direction::Receive => fctype::AUTHENTICATION_RECEIVE,
        });
        sqe.cdw10 = u32::from_le_bytes([0, self.spsp0, self.spsp1, self.secp]);
        sqe.cdw11 = self.length;
        sqe
    }

    /// Whether SECP, SPSP0 and SPSP1 name DH-HMAC-CHAP.
    pub fn is_dhchap(&self) -> bool {
        self.secp == SECP_DHCHAP && self.spsp0 == SPSP_DHCHAP && self.spsp1 == SPSP_DHCHAP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_nvmf_auth_send_and_receive_command() {
        let b = AuthenticationCommand::send(0x0102_0304).to_sqe().to_bytes();
        assert_eq!((b[0], b[4]), (0x7f, 0x05));
        assert_eq!(&b[40..48], &[0, 1, 1, 0xE9, 4, 3, 2, 1]);
        let r = AuthenticationCommand::receive(4096);
        let b = r.to_sqe().to_bytes();
        assert_eq!((b[4], b[43]), (0x06, 0xE9));
        assert_eq!(&b[44..48], &4096u32.to_le_bytes());
        let back = AuthenticationCommand::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(back.is_dhchap());
        let mut sqe = r.to_sqe();
        sqe.nsid = u32::from(fctype::CONNECT);
        assert!(matches!(AuthenticationCommand::from_sqe(&sqe), Err(WireError::InvalidField { field: "fctype", .. })));
    }
}
