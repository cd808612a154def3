//! DH-HMAC-CHAP_Success1 (Figure 446: the controller accepted the host, with its own response R2 when the host
//! asked to authenticate it) and DH-HMAC-CHAP_Success2 (Figure 447: the host accepted R2).

use super::{auth_id, encode, expect, slice, AUTH_TYPE_DHCHAP};
use crate::wire::{fixed, WireError};

const SUCCESS1: &str = "DH-HMAC-CHAP_Success1";
const SUCCESS2: &str = "DH-HMAC-CHAP_Success2";

/// DH-HMAC-CHAP_Success1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Success1<'a> {
    /// Transaction identifier.
    pub t_id: u16,
    /// HL: the hash length of the transaction.
    pub hl: u8,
    /// The controller's response R2 (`rvalid`), HL bytes.
    pub rval: Option<&'a [u8]>,
}

impl<'a> Success1<'a> {
    /// Parse: 16 header bytes, then HL response bytes when `rvalid` is set.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = expect(buf, SUCCESS1, AUTH_TYPE_DHCHAP, auth_id::SUCCESS1)?;
        let b = fixed::<16>(buf, SUCCESS1)?;
        let rval = if b[8] & 1 != 0 { Some(slice(buf, 16, usize::from(b[6]), SUCCESS1)?) } else { None };
        Ok(Success1 { t_id: h.t_id, hl: b[6], rval })
    }

    /// The message (16 bytes, + HL with a response).
    pub fn to_bytes(&self) -> Vec<u8> {
        let extra = self.rval.map_or(0, <[u8]>::len);
        let mut b = encode(AUTH_TYPE_DHCHAP, auth_id::SUCCESS1, self.t_id, 16 + extra);
        b[6] = self.hl;
        if let Some(r) = self.rval {
            b[8] = 1;
            b[16..].copy_from_slice(r);
        }
        b
    }
}

/// DH-HMAC-CHAP_Success2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Success2 {
    /// Transaction identifier.
    pub t_id: u16,
}

impl Success2 {
    /// Parse (16 bytes).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h = expect(buf, SUCCESS2, AUTH_TYPE_DHCHAP, auth_id::SUCCESS2)?;
        fixed::<16>(buf, SUCCESS2)?;
        Ok(Success2 { t_id: h.t_id })
    }

    /// The message (16 bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(AUTH_TYPE_DHCHAP, auth_id::SUCCESS2, self.t_id, 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        // Success1: hl @6, rvalid @8, rval @16.
        let s = Success1 { t_id: 9, hl: 48, rval: Some(&[0x5A; 48]) };
        let mut b = s.to_bytes();
        assert_eq!(b.len(), 64);
        assert_eq!(&b[..9], &[1, 3, 0, 0, 9, 0, 48, 0, 1]);
        b.resize(4096, 0);
        assert_eq!(Success1::parse(&b).unwrap(), s);
        let plain = Success1 { t_id: 9, hl: 32, rval: None };
        assert_eq!(Success1::parse(&plain.to_bytes()).unwrap(), plain);
        assert!(matches!(Success1::parse(&s.to_bytes()[..40]), Err(WireError::Short { need: 64, .. })));

        let s2 = Success2 { t_id: 0x0203 };
        assert_eq!(s2.to_bytes(), [1, 4, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Success2::parse(&s2.to_bytes()).unwrap(), s2);
        assert!(Success2::parse(&s.to_bytes()).is_err());
    }
}
