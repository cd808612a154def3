//! DH-HMAC-CHAP_Reply (NVMe Base 2.0 Figure 445): the host's response R1, and for bidirectional authentication
//! its challenge C2 with sequence number S2, and its DH public value.

use super::{auth_id, encode, expect, slice, AUTH_TYPE_DHCHAP};
use crate::wire::{fixed, le16, le32, WireError};

const STRUCTURE: &str = "DH-HMAC-CHAP_Reply";

/// DH-HMAC-CHAP_Reply, borrowing its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    /// Transaction identifier.
    pub t_id: u16,
    /// The response R1 (HL bytes).
    pub rval: &'a [u8],
    /// The challenge C2 for the controller, when the host authenticates it (`cvalid`); `None` leaves the slot
    /// zeroed, as Linux sends it.
    pub cval: Option<&'a [u8]>,
    /// Sequence number S2 (0 without bidirectional authentication).
    pub seqnum: u32,
    /// The host's DH public value (empty for the NULL group).
    pub dhv: &'a [u8],
}

impl<'a> Reply<'a> {
    /// Parse: 16 header bytes, then HL response bytes, HL challenge bytes (always present) and DHVLEN DH value
    /// bytes; HL must be 1..=64.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = expect(buf, STRUCTURE, AUTH_TYPE_DHCHAP, auth_id::REPLY)?;
        let b = fixed::<16>(buf, STRUCTURE)?;
        let hl = usize::from(b[6]);
        if !(1..=64).contains(&hl) {
            return Err(WireError::invalid(STRUCTURE, "hl", b[6], "1..=64"));
        }
        let dhvlen = usize::from(le16(b, 10));
        let cval = slice(buf, 16 + hl, hl, STRUCTURE)?;
        Ok(Reply {
            t_id: h.t_id,
            rval: slice(buf, 16, hl, STRUCTURE)?,
            cval: (b[8] & 1 != 0).then_some(cval),
            seqnum: le32(b, 12),
            dhv: slice(buf, 16 + 2 * hl, dhvlen, STRUCTURE)?,
        })
    }

    /// The message (16 + 2 × HL + DHVLEN bytes). Errors if C2's length is not R1's or a length does not fit.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WireError> {
        let hl = self.rval.len();
        let hl8 = u8::try_from(hl).map_err(|_| WireError::invalid(STRUCTURE, "hl", hl as u64, "1..=64"))?;
        if self.cval.is_some_and(|c| c.len() != hl) {
            return Err(WireError::invalid(STRUCTURE, "cval", self.cval.map_or(0, <[u8]>::len) as u64, "HL bytes"));
        }
        let dhvlen = u16::try_from(self.dhv.len())
            .map_err(|_| WireError::invalid(STRUCTURE, "dhvlen", self.dhv.len() as u64, "0..=65535"))?;
        let mut b = encode(AUTH_TYPE_DHCHAP, auth_id::REPLY, self.t_id, 16 + 2 * hl + self.dhv.len());
        b[6] = hl8;
        b[8] = u8::from(self.cval.is_some());
        b[10..12].copy_from_slice(&dhvlen.to_le_bytes());
        b[12..16].copy_from_slice(&self.seqnum.to_le_bytes());
        b[16..16 + hl].copy_from_slice(self.rval);
        if let Some(c) = self.cval {
            b[16 + hl..16 + 2 * hl].copy_from_slice(c);
        }
        b[16 + 2 * hl..].copy_from_slice(self.dhv);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_nvmf_auth_dhchap_reply_data() {
        // t_id @4, hl @6, cvalid @8, dhvlen @10, seqnum @12, rval @16, then C2 and the DH value.
        let r = Reply { t_id: 3, rval: &[0xAA; 32], cval: Some(&[0xBB; 32]), seqnum: 0x1234_5678, dhv: &[0xCC; 8] };
        let b = r.to_bytes().unwrap();
        assert_eq!(b.len(), 16 + 64 + 8);
        assert_eq!(&b[..16], &[1, 2, 0, 0, 3, 0, 32, 0, 1, 0, 8, 0, 0x78, 0x56, 0x34, 0x12]);
        assert_eq!((b[16], b[48], b[80]), (0xAA, 0xBB, 0xCC));
        assert_eq!(Reply::parse(&b).unwrap(), r);
        // Unidirectional: C2's slot is sent zeroed, S2 is 0.
        let u = Reply { t_id: 3, rval: &[0xAA; 32], cval: None, seqnum: 0, dhv: &[] };
        let b = u.to_bytes().unwrap();
        assert_eq!(b.len(), 80);
        assert!(b[48..].iter().all(|&x| x == 0));
        assert_eq!(Reply::parse(&b).unwrap(), u);
        assert!(Reply { cval: Some(&[1; 31]), ..r }.to_bytes().is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(r) = Reply::parse(&bytes) {
                let again = r.to_bytes().unwrap();
                prop_assert_eq!(Reply::parse(&again).unwrap(), r);
            }
        }
    }
}
