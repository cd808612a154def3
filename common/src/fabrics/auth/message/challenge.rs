//! DH-HMAC-CHAP_Challenge (NVMe Base 2.0 Figure 444): the controller's choice of hash and group, its challenge C1
//! with sequence number S1, and its DH public value.

use super::{auth_id, encode, expect, slice, AUTH_TYPE_DHCHAP};
use crate::wire::{fixed, le16, le32, WireError};

const STRUCTURE: &str = "DH-HMAC-CHAP_Challenge";

/// DH-HMAC-CHAP_Challenge, borrowing the challenge and DH value from the received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge<'a> {
    /// Transaction identifier.
    pub t_id: u16,
    /// Hash function identifier (`hashid`; HL is the length of `cval`).
    pub hashid: u8,
    /// DH group identifier (`dhgid`).
    pub dhgid: u8,
    /// Sequence number S1.
    pub seqnum: u32,
    /// The challenge C1 (HL bytes).
    pub cval: &'a [u8],
    /// The controller's DH public value (DHVLEN bytes; empty for the NULL group).
    pub dhv: &'a [u8],
}

impl<'a> Challenge<'a> {
    /// Parse: 16 header bytes, then HL challenge bytes and DHVLEN DH value bytes; HL must be 1..=64.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = expect(buf, STRUCTURE, AUTH_TYPE_DHCHAP, auth_id::CHALLENGE)?;
        let b = fixed::<16>(buf, STRUCTURE)?;
        let hl = usize::from(b[6]);
        if !(1..=64).contains(&hl) {
            return Err(WireError::invalid(STRUCTURE, "hl", b[6], "1..=64"));
        }
        let dhvlen = usize::from(le16(b, 10));
        Ok(Challenge {
            t_id: h.t_id,
            hashid: b[8],
            dhgid: b[9],
            seqnum: le32(b, 12),
            cval: slice(buf, 16, hl, STRUCTURE)?,
            dhv: slice(buf, 16 + hl, dhvlen, STRUCTURE)?,
        })
    }

    /// The message (16 + HL + DHVLEN bytes). Errors if HL or DHVLEN do not fit their fields.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WireError> {
        let hl = u8::try_from(self.cval.len())
            .map_err(|_| WireError::invalid(STRUCTURE, "hl", self.cval.len() as u64, "1..=64"))?;
        let dhvlen = u16::try_from(self.dhv.len())
            .map_err(|_| WireError::invalid(STRUCTURE, "dhvlen", self.dhv.len() as u64, "0..=65535"))?;
        let mut b = encode(AUTH_TYPE_DHCHAP, auth_id::CHALLENGE, self.t_id, 16 + self.cval.len() + self.dhv.len());
        b[6] = hl;
        b[8] = self.hashid;
        b[9] = self.dhgid;
        b[10..12].copy_from_slice(&dhvlen.to_le_bytes());
        b[12..16].copy_from_slice(&self.seqnum.to_le_bytes());
        b[16..16 + self.cval.len()].copy_from_slice(self.cval);
        b[16 + self.cval.len()..].copy_from_slice(self.dhv);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_nvmf_auth_dhchap_challenge_data() {
        // t_id @4, hl @6, hashid @8, dhgid @9, dhvlen @10, seqnum @12, cval @16 then the DH value.
        let c = Challenge { t_id: 7, hashid: 2, dhgid: 1, seqnum: 0x0A0B_0C0D, cval: &[0x11; 48], dhv: &[0x22; 256] };
        let mut b = c.to_bytes().unwrap();
        assert_eq!(b.len(), 16 + 48 + 256);
        assert_eq!(&b[..16], &[1, 1, 0, 0, 7, 0, 48, 0, 2, 1, 0x00, 0x01, 0x0D, 0x0C, 0x0B, 0x0A]);
        // nvmet answers with the whole allocation length: trailing zeros are not part of the message.
        b.resize(4096, 0);
        assert_eq!(Challenge::parse(&b).unwrap(), c);
    }

    #[test]
    fn rejections() {
        let c = Challenge { t_id: 1, hashid: 1, dhgid: 0, seqnum: 1, cval: &[1; 32], dhv: &[] };
        let b = c.to_bytes().unwrap();
        assert!(matches!(Challenge::parse(&b[..40]), Err(WireError::Short { need: 48, .. })));
        let mut z = b.clone();
        z[6] = 0;
        assert!(matches!(Challenge::parse(&z), Err(WireError::InvalidField { field: "hl", .. })));
        let mut d = b.clone();
        d[10] = 1; // a DH value byte beyond the buffer
        assert!(matches!(Challenge::parse(&d), Err(WireError::Short { need: 49, .. })));
        let mut r = b;
        r[1] = 2;
        assert!(matches!(Challenge::parse(&r), Err(WireError::InvalidField { field: "auth_id", .. })));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(c) = Challenge::parse(&bytes) {
                let again = c.to_bytes().unwrap();
                prop_assert_eq!(Challenge::parse(&again).unwrap(), c);
            }
        }
    }
}
