//! AUTH_Negotiate (NVMe Base 2.0 Figure 441): the host's offer, the first message of a transaction.

use super::{auth_id, encode, expect, slice, AUTH_TYPE_COMMON};
use crate::fabrics::auth::dh::DhGroup;
use crate::fabrics::auth::hash::HashFunction;
use crate::wire::{fixed, WireError};

const STRUCTURE: &str = "AUTH_Negotiate";

/// Size of one protocol descriptor.
pub const DESCRIPTOR_LEN: usize = 64;

/// `authid` of the DH-HMAC-CHAP protocol descriptor.
pub const AUTH_ID_DHCHAP: u8 = 0x01;

/// Where the DH group identifiers start in a descriptor's `idlist` (the hash identifiers take bytes 0..30).
const DH_IDS_AT: usize = 30;

/// The DH-HMAC-CHAP protocol descriptor (Figure 442): the hash functions and DH groups offered, in preference
/// order. Identifiers this side does not know are kept out (a target takes the first it supports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolDescriptor {
    /// Hash functions offered (`halen` identifiers at `idlist[0..]`).
    pub hashes: Vec<HashFunction>,
    /// DH groups offered (`dhlen` identifiers at `idlist[30..]`).
    pub dh_groups: Vec<DhGroup>,
}

/// AUTH_Negotiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiate {
    /// Transaction identifier.
    pub t_id: u16,
    /// Secure channel concatenation (`sc_c`, 0: none; this implementation asks for none).
    pub sc_c: u8,
    /// The DH-HMAC-CHAP descriptor (the only protocol defined).
    pub dhchap: ProtocolDescriptor,
}

impl Negotiate {
    /// Parse; the first descriptor must be DH-HMAC-CHAP's, with at most 30 hash and 30 group identifiers.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h = expect(buf, STRUCTURE, AUTH_TYPE_COMMON, auth_id::NEGOTIATE)?;
        let b = fixed::<8>(buf, STRUCTURE)?;
        let (sc_c, napd) = (b[6], b[7]);
        if napd == 0 {
            return Err(WireError::invalid(STRUCTURE, "napd", napd, "1..=255"));
        }
        let d = slice(buf, 8, DESCRIPTOR_LEN, STRUCTURE)?;
        if d[0] != AUTH_ID_DHCHAP {
            return Err(WireError::invalid(STRUCTURE, "authid", d[0], "0x01 (DH-HMAC-CHAP)"));
        }
        let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
        if halen > DH_IDS_AT || dhlen > DH_IDS_AT {
            return Err(WireError::invalid(STRUCTURE, "halen/dhlen", u8::max(d[2], d[3]), "0..=30"));
        }
        let ids = &d[4..];
        let hashes = ids[..halen].iter().filter_map(|&id| HashFunction::from_id(id)).collect();
        let dh_groups = ids[DH_IDS_AT..DH_IDS_AT + dhlen].iter().filter_map(|&id| DhGroup::from_id(id)).collect();
        Ok(Negotiate { t_id: h.t_id, sc_c, dhchap: ProtocolDescriptor { hashes, dh_groups } })
    }

    /// The message: header, one descriptor (72 bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = encode(AUTH_TYPE_COMMON, auth_id::NEGOTIATE, self.t_id, 8 + DESCRIPTOR_LEN);
        b[6] = self.sc_c;
        b[7] = 1;
        let d = &mut b[8..];
        d[0] = AUTH_ID_DHCHAP;
        let hashes = &self.dhchap.hashes[..self.dhchap.hashes.len().min(DH_IDS_AT)];
        let groups = &self.dhchap.dh_groups[..self.dhchap.dh_groups.len().min(DH_IDS_AT)];
        d[2] = u8::try_from(hashes.len()).unwrap_or(0);
        d[3] = u8::try_from(groups.len()).unwrap_or(0);
        for (slot, h) in d[4..].iter_mut().zip(hashes) {
            *slot = h.id();
        }
        for (slot, g) in d[4 + DH_IDS_AT..].iter_mut().zip(groups) {
            *slot = g.id();
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::auth::dh::ALL_GROUPS;
    use crate::fabrics::auth::hash::ALL_HASHES;

    #[test]
    fn layout_matches_what_linux_sends() {
        // nvme_auth_set_dhchap_negotiate_data: 8 + 64 bytes, napd 1, authid 1, halen 3, dhlen 6, hash ids 1,2,3 at
        // idlist[0..3], group ids 0..=5 at idlist[30..36].
        let n = Negotiate {
            t_id: 0x0102,
            sc_c: 0,
            dhchap: ProtocolDescriptor { hashes: ALL_HASHES.to_vec(), dh_groups: ALL_GROUPS.to_vec() },
        };
        let b = n.to_bytes();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 0x02, 0x01, 0, 1]);
        assert_eq!(&b[8..12], &[1, 0, 3, 6]);
        assert_eq!(&b[12..15], &[1, 2, 3]);
        assert!(b[15..42].iter().all(|&x| x == 0));
        assert_eq!(&b[42..48], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(Negotiate::parse(&b).unwrap(), n);
    }

    #[test]
    fn rejections() {
        let good = Negotiate {
            t_id: 1,
            sc_c: 0,
            dhchap: ProtocolDescriptor { hashes: vec![HashFunction::Sha256], dh_groups: vec![DhGroup::Null] },
        }
        .to_bytes();
        assert!(matches!(Negotiate::parse(&good[..40]), Err(WireError::Short { need: 72, .. })));
        let mut b = good.clone();
        b[7] = 0;
        assert!(matches!(Negotiate::parse(&b), Err(WireError::InvalidField { field: "napd", .. })));
        let mut b = good.clone();
        b[8] = 2;
        assert!(matches!(Negotiate::parse(&b), Err(WireError::InvalidField { field: "authid", .. })));
        let mut b = good.clone();
        b[10] = 31;
        assert!(matches!(Negotiate::parse(&b), Err(WireError::InvalidField { field: "halen/dhlen", .. })));
        let mut b = good;
        b[0] = 1;
        assert!(matches!(Negotiate::parse(&b), Err(WireError::InvalidField { field: "auth_type", .. })));
    }
}
