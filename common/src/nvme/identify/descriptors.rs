//! The Namespace Identification Descriptor list (CNS 03h; Base 2.0 Figure 278, Linux `struct
//! nvme_ns_id_desc`): EUI-64, NGUID, UUID and CSI descriptors of a namespace.

use super::IDENTIFY_DATA_SIZE;
use crate::wire::{fixed_mut, WireError};

const DESC_LIST: &str = "NamespaceIdentificationDescriptor";

/// Namespace Identifier Type (NIDT) values (Base 2.0 Figure 279, Linux `NVME_NIDT_*`).
pub mod nidt {
    /// IEEE Extended Unique Identifier, 8 bytes.
    pub const EUI64: u8 = 0x01;
    /// Namespace Globally Unique Identifier, 16 bytes.
    pub const NGUID: u8 = 0x02;
    /// Namespace UUID, 16 bytes.
    pub const UUID: u8 = 0x03;
    /// Command Set Identifier, 1 byte.
    pub const CSI: u8 = 0x04;
}

/// One Namespace Identification Descriptor (Base 2.0 Figure 278, Linux `struct nvme_ns_id_desc`):
/// a 4-byte header (NIDT, NIDL, 2 reserved bytes) followed by NIDL bytes of identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceIdentificationDescriptor<'a> {
    /// NIDT 1: IEEE EUI-64 (NIDL 8).
    Eui64([u8; 8]),
    /// NIDT 2: NGUID (NIDL 16).
    Nguid([u8; 16]),
    /// NIDT 3: UUID (NIDL 16).
    Uuid([u8; 16]),
    /// NIDT 4: Command Set Identifier (NIDL 1).
    Csi(u8),
    /// A type this crate does not know (NIDT other than 0..=4), kept as read.
    Other {
        /// Namespace Identifier Type.
        nidt: u8,
        /// The identifier (NIDL bytes).
        nid: &'a [u8],
    },
}

impl<'a> NamespaceIdentificationDescriptor<'a> {
    /// Namespace Identifier Type.
    pub fn nidt(&self) -> u8 {
        match self {
            Self::Eui64(_) => nidt::EUI64,
            Self::Nguid(_) => nidt::NGUID,
            Self::Uuid(_) => nidt::UUID,
            Self::Csi(_) => nidt::CSI,
            Self::Other { nidt, .. } => *nidt,
        }
    }

    /// The identifier bytes (NIDL of them).
    pub fn nid(&self) -> &[u8] {
        match self {
            Self::Eui64(id) => id,
            Self::Nguid(id) | Self::Uuid(id) => id,
            Self::Csi(csi) => std::slice::from_ref(csi),
            Self::Other { nid, .. } => nid,
        }
    }

    /// Bytes this descriptor takes on the wire (header included).
    pub fn encoded_len(&self) -> usize {
        4 + self.nid().len()
    }

    /// The NIDL a known type must carry.
    fn expected_nidl(nidt: u8) -> Option<usize> {
        match nidt {
            nidt::EUI64 => Some(8),
            nidt::NGUID | nidt::UUID => Some(16),
            nidt::CSI => Some(1),
            _ => None,
        }
    }

    fn from_parts(nidt: u8, nid: &'a [u8]) -> Option<Self> {
        Some(match nidt {
            nidt::EUI64 => Self::Eui64(nid.try_into().ok()?),
            nidt::NGUID => Self::Nguid(nid.try_into().ok()?),
            nidt::UUID => Self::Uuid(nid.try_into().ok()?),
            nidt::CSI => Self::Csi(*nid.first()?),
            _ => Self::Other { nidt, nid },
        })
    }

    /// Encode the whole list (CNS 03h) into the first 4096 bytes of `buf`, zero-filled after the last
    /// descriptor (the zero NIDT that ends the list). Errors if the descriptors need more than 4096
    /// bytes, or an `Other` descriptor uses NIDT 0, a known NIDT, or more than 255 identifier bytes.
    pub fn encode_list(descriptors: &[NamespaceIdentificationDescriptor<'_>], buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, DESC_LIST)?;
        b.fill(0);
        let mut pos = 0usize;
        for d in descriptors {
            let nidt = d.nidt();
            if let NamespaceIdentificationDescriptor::Other { nid, .. } = d {
                if nidt == 0 || Self::expected_nidl(nidt).is_some() {
                    return Err(WireError::invalid(DESC_LIST, "nidt", nidt, "an unknown type other than 0"));
                }
                if nid.len() > usize::from(u8::MAX) {
                    return Err(WireError::invalid(
                        DESC_LIST,
                        "nidl",
                        u64::try_from(nid.len()).unwrap_or(u64::MAX),
                        "0..=255",
                    ));
                }
            }
            let nid = d.nid();
            let end = pos + d.encoded_len();
            let entry = b.get_mut(pos..end).ok_or(WireError::OutputTooSmall {
                structure: DESC_LIST,
                need: end,
                got: IDENTIFY_DATA_SIZE,
            })?;
            entry[0] = nidt;
            // Checked above: every identifier is at most 255 bytes.
            entry[1] = u8::try_from(nid.len()).unwrap_or(u8::MAX);
            entry[4..].copy_from_slice(nid);
            pos = end;
        }
        Ok(())
    }

    /// Parse a descriptor list (CNS 03h) from `buf` (normally 4096 bytes; any length is accepted). The
    /// list ends at the first zero NIDT or at the end of `buf`. Errors on a known type with the wrong
    /// NIDL and on a header or identifier running past the end of `buf`.
    pub fn parse_list(buf: &'a [u8]) -> Result<NamespaceIdentificationDescriptorList<'a>, WireError> {
        let mut pos = 0usize;
        while let Some(&nidt) = buf.get(pos) {
            if nidt == 0 {
                break;
            }
            let header = buf.get(pos..pos + 4).ok_or(WireError::Short {
                structure: DESC_LIST,
                need: pos + 4,
                got: buf.len(),
            })?;
            let nidl = usize::from(header[1]);
            if let Some(expected) = Self::expected_nidl(nidt) {
                if nidl != expected {
                    return Err(WireError::invalid(
                        DESC_LIST,
                        "nidl",
                        header[1],
                        "8 for EUI-64, 16 for NGUID/UUID, 1 for CSI",
                    ));
                }
            }
            let end = pos + 4 + nidl;
            if end > buf.len() {
                return Err(WireError::Short { structure: DESC_LIST, need: end, got: buf.len() });
            }
            pos = end;
        }
        Ok(NamespaceIdentificationDescriptorList { bytes: &buf[..pos] })
    }
}

/// A validated Namespace Identification Descriptor list, borrowed from the input. Iterate with
/// [`iter`](Self::iter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIdentificationDescriptorList<'a> {
    /// The descriptors' bytes, up to (not including) the terminator.
    bytes: &'a [u8],
}

impl<'a> NamespaceIdentificationDescriptorList<'a> {
    /// The descriptors in list order.
    pub fn iter(&self) -> NamespaceIdentificationDescriptorIter<'a> {
        NamespaceIdentificationDescriptorIter { rest: self.bytes }
    }
}

impl<'a> IntoIterator for NamespaceIdentificationDescriptorList<'a> {
    type Item = NamespaceIdentificationDescriptor<'a>;
    type IntoIter = NamespaceIdentificationDescriptorIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over a validated [`NamespaceIdentificationDescriptorList`]; it never allocates.
#[derive(Debug, Clone)]
pub struct NamespaceIdentificationDescriptorIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NamespaceIdentificationDescriptorIter<'a> {
    type Item = NamespaceIdentificationDescriptor<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // The list was validated by `parse_list`; `get` keeps this panic-free regardless.
        let nidt = *self.rest.first()?;
        let nidl = usize::from(*self.rest.get(1)?);
        let nid = self.rest.get(4..4 + nidl)?;
        self.rest = self.rest.get(4 + nidl..).unwrap_or(&[]);
        NamespaceIdentificationDescriptor::from_parts(nidt, nid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::identify::csi;
    use proptest::prelude::*;

    #[test]
    fn descriptor_list_layout() {
        // Linux struct nvme_ns_id_desc: nidt, nidl, reserved[2], then the id; NVME_NIDT_* lengths 8/16/16/1.
        let list = [
            NamespaceIdentificationDescriptor::Eui64([1; 8]),
            NamespaceIdentificationDescriptor::Nguid([2; 16]),
            NamespaceIdentificationDescriptor::Uuid([3; 16]),
            NamespaceIdentificationDescriptor::Csi(csi::NVM),
            NamespaceIdentificationDescriptor::Other { nidt: 0x7f, nid: &[9, 9] },
        ];
        let mut b = [0xaau8; IDENTIFY_DATA_SIZE];
        NamespaceIdentificationDescriptor::encode_list(&list, &mut b).unwrap();
        assert_eq!(&b[0..4], &[1, 8, 0, 0]);
        assert_eq!(&b[4..12], &[1; 8]);
        assert_eq!(&b[12..16], &[2, 16, 0, 0]);
        assert_eq!(&b[16..32], &[2; 16]);
        assert_eq!(&b[32..36], &[3, 16, 0, 0]);
        assert_eq!(&b[36..52], &[3; 16]);
        assert_eq!(&b[52..57], &[4, 1, 0, 0, 0]);
        assert_eq!(&b[57..63], &[0x7f, 2, 0, 0, 9, 9]);
        assert!(b[63..].iter().all(|&c| c == 0));
        let parsed = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
        assert!(parsed.iter().eq(list));
    }

    #[test]
    fn descriptor_list_rejections() {
        // Wrong NIDL for a known type.
        let mut b = [0u8; 64];
        b[..4].copy_from_slice(&[nidt::UUID, 8, 0, 0]);
        assert!(matches!(
            NamespaceIdentificationDescriptor::parse_list(&b),
            Err(WireError::InvalidField { field: "nidl", value: 8, .. })
        ));
        b[..4].copy_from_slice(&[nidt::CSI, 0, 0, 0]);
        assert!(NamespaceIdentificationDescriptor::parse_list(&b).is_err());
        // An identifier running past the buffer.
        b[..4].copy_from_slice(&[nidt::NGUID, 16, 0, 0]);
        assert!(matches!(
            NamespaceIdentificationDescriptor::parse_list(&b[..19]),
            Err(WireError::Short { need: 20, got: 19, .. })
        ));
        // A header cut short.
        assert!(matches!(NamespaceIdentificationDescriptor::parse_list(&b[..2]), Err(WireError::Short { .. })));
        // Unknown types of any length are skipped over but must fit.
        b[..4].copy_from_slice(&[0x80, 200, 0, 0]);
        assert!(NamespaceIdentificationDescriptor::parse_list(&b).is_err());
        // A list filling the buffer exactly needs no terminator.
        let full = [0x80u8, 60, 0, 0].iter().copied().chain([0u8; 60]).collect::<Vec<_>>();
        assert_eq!(NamespaceIdentificationDescriptor::parse_list(&full).unwrap().iter().count(), 1);

        let mut out = [0u8; IDENTIFY_DATA_SIZE];
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: nidt::EUI64, nid: &[0; 8] }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: 0, nid: &[] }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let big = [0u8; 256];
        let bad = [NamespaceIdentificationDescriptor::Other { nidt: 0x80, nid: &big }];
        assert!(NamespaceIdentificationDescriptor::encode_list(&bad, &mut out).is_err());
        let many = [NamespaceIdentificationDescriptor::Uuid([1; 16]); 205];
        assert!(matches!(
            NamespaceIdentificationDescriptor::encode_list(&many, &mut out),
            Err(WireError::OutputTooSmall { .. })
        ));
        assert!(NamespaceIdentificationDescriptor::encode_list(&many[..204], &mut out).is_ok());
    }

    proptest! {
        #[test]
        fn descriptor_round_trip(kinds in proptest::collection::vec((0u8..5, any::<[u8; 16]>()), 0..20)) {
            let other = [0xabu8; 5];
            let list: Vec<_> = kinds.iter().map(|(k, id)| match k {
                0 => NamespaceIdentificationDescriptor::Eui64(id[..8].try_into().unwrap()),
                1 => NamespaceIdentificationDescriptor::Nguid(*id),
                2 => NamespaceIdentificationDescriptor::Uuid(*id),
                3 => NamespaceIdentificationDescriptor::Csi(id[0]),
                _ => NamespaceIdentificationDescriptor::Other { nidt: 0x80 | id[0], nid: &other[..usize::from(id[1] % 6)] },
            }).collect();
            let mut b = [0u8; IDENTIFY_DATA_SIZE];
            NamespaceIdentificationDescriptor::encode_list(&list, &mut b).unwrap();
            let parsed = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
            prop_assert!(parsed.iter().eq(list.iter().copied()));
        }

        #[test]
        fn descriptor_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(list) = NamespaceIdentificationDescriptor::parse_list(&bytes) {
                let items: Vec<_> = list.iter().collect();
                let mut b = [0u8; IDENTIFY_DATA_SIZE];
                // Unknown types with NIDT 0 cannot occur (0 ends the list), so every item re-encodes.
                NamespaceIdentificationDescriptor::encode_list(&items, &mut b).unwrap();
                let again = NamespaceIdentificationDescriptor::parse_list(&b).unwrap();
                prop_assert!(again.iter().eq(items.iter().copied()));
            }
        }
    }
}
