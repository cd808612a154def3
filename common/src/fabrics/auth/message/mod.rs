//! The DH-HMAC-CHAP messages (NVMe Base 2.0 §8.13.5; Linux `struct nvmf_auth_dhchap_*_data` in
//! `include/linux/nvme.h`), each a view that parses from the bytes of an Authentication Send or Receive and
//! encodes into a new buffer. Little-endian; every message starts with `auth_type` (00h common, 01h DH-HMAC-CHAP),
//! `auth_id`, two reserved bytes and the transaction identifier `t_id` at byte 4.
//!
//! | message | type/id | body after byte 6 |
//! |---|---|---|
//! | AUTH_Negotiate | 00h/00h | `sc_c` @6, `napd` @7, `napd` 64-byte protocol descriptors @8 |
//! | DH-HMAC-CHAP_Challenge | 01h/01h | `hl` @6, `hashid` @8, `dhgid` @9, `dhvlen` @10, `seqnum` @12, C1 @16, DH value |
//! | DH-HMAC-CHAP_Reply | 01h/02h | `hl` @6, `cvalid` @8, `dhvlen` @10, `seqnum` @12, response @16, C2, DH value |
//! | DH-HMAC-CHAP_Success1 | 01h/03h | `hl` @6, `rvalid` @8, response @16 when `rvalid` |
//! | DH-HMAC-CHAP_Success2 | 01h/04h | reserved to byte 16 |
//! | AUTH_Failure2 / Failure1 | 00h/F0h, F1h | `rescode` @6, `rescode_exp` @7 |
//!
//! A received buffer may be longer than its message (nvmet answers with the whole allocation length, zero
//! padded): parsers read what the header says and ignore the rest. Borrowed views, no allocation on the parse
//! path.

mod challenge;
mod failure;
mod negotiate;
mod reply;
mod success;

pub use challenge::Challenge;
pub use failure::{Failure, FailureKind};
pub use negotiate::{Negotiate, ProtocolDescriptor, DESCRIPTOR_LEN};
pub use reply::Reply;
pub use success::{Success1, Success2};

use crate::wire::{fixed, le16, WireError};

/// `auth_type` of AUTH_Negotiate and AUTH_Failure1/2.
pub const AUTH_TYPE_COMMON: u8 = 0x00;
/// `auth_type` of the DH-HMAC-CHAP messages.
pub const AUTH_TYPE_DHCHAP: u8 = 0x01;

/// `auth_id` values (Linux `NVME_AUTH_DHCHAP_MESSAGE_*`).
pub mod auth_id {
    /// AUTH_Negotiate (common type).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (common type).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (common type).
    pub const FAILURE1: u8 = 0xF1;
}

/// The first six bytes every message has: type, identifier and transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `auth_type`.
    pub auth_type: u8,
    /// `auth_id`.
    pub auth_id: u8,
    /// Transaction identifier.
    pub t_id: u16,
}

impl Header {
    /// The header of a received message.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<6>(buf, "AuthMessage")?;
        Ok(Header { auth_type: b[0], auth_id: b[1], t_id: le16(b, 4) })
    }

    /// Whether this is AUTH_Failure1 (the controller ends the transaction).
    pub fn is_failure1(&self) -> bool {
        self.auth_type == AUTH_TYPE_COMMON && self.auth_id == auth_id::FAILURE1
    }

    /// The message's name, for errors (`DH-HMAC-CHAP_Challenge`, or the raw type and identifier).
    pub fn name(&self) -> String {
        let known = match (self.auth_type, self.auth_id) {
            (AUTH_TYPE_COMMON, auth_id::NEGOTIATE) => "AUTH_Negotiate",
            (AUTH_TYPE_COMMON, auth_id::FAILURE1) => "AUTH_Failure1",
            (AUTH_TYPE_COMMON, auth_id::FAILURE2) => "AUTH_Failure2",
            (AUTH_TYPE_DHCHAP, auth_id::CHALLENGE) => "DH-HMAC-CHAP_Challenge",
            (AUTH_TYPE_DHCHAP, auth_id::REPLY) => "DH-HMAC-CHAP_Reply",
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS1) => "DH-HMAC-CHAP_Success1",
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS2) => "DH-HMAC-CHAP_Success2",
            _ => return format!("message type {:#04x} id {:#04x}", self.auth_type, self.auth_id),
        };
        known.to_owned()
    }
}

/// Check the type and identifier of a message about to be parsed as `structure`.
fn expect(buf: &[u8], structure: &'static str, auth_type: u8, id: u8) -> Result<Header, WireError> {
    let h = Header::parse(buf).map_err(|_| WireError::Short { structure, need: 6, got: buf.len() })?;
    if h.auth_type != auth_type {
        return Err(WireError::invalid(
            structure,
            "auth_type",
            h.auth_type,
            if auth_type == 0 { "0x00" } else { "0x01" },
        ));
    }
    if h.auth_id != id {
        return Err(WireError::invalid(structure, "auth_id", h.auth_id, "this message's identifier"));
    }
    Ok(h)
}

/// A message's bytes: `header` then `body` in a buffer of `len` bytes.
fn encode(auth_type: u8, id: u8, t_id: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[0] = auth_type;
    b[1] = id;
    b[4..6].copy_from_slice(&t_id.to_le_bytes());
    b
}

/// `len` bytes of `buf` from `off`, or a `Short` error naming `structure`.
fn slice<'a>(buf: &'a [u8], off: usize, len: usize, structure: &'static str) -> Result<&'a [u8], WireError> {
    buf.get(off..off + len).ok_or(WireError::Short { structure, need: off + len, got: buf.len() })
}
