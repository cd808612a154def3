//! Scatter Gather List descriptors (NVMe Base 2.0 §4.1.2, Figures 114-121): the 16-byte descriptor that
//! fabrics commands carry in SGL1 (SQE bytes 24..40). Byte 15 is the SGL Identifier: descriptor type in
//! bits 7:4, sub type in bits 3:0.

use crate::wire::{fixed, fixed_mut, le24, le32, le64, put24, put32, put64, WireError};

const STRUCTURE: &str = "SglDescriptor";

/// SGL descriptor size in bytes.
pub const SGL_DESCRIPTOR_SIZE: usize = 16;

/// Largest length a Keyed SGL Data Block can describe (24-bit field).
pub const KEYED_MAX_LENGTH: u32 = 0x00ff_ffff;

/// Descriptor types (SGL Identifier bits 7:4).
pub mod descriptor_type {
    /// SGL Data Block.
    pub const DATA_BLOCK: u8 = 0x0;
    /// SGL Bit Bucket.
    pub const BIT_BUCKET: u8 = 0x1;
    /// SGL Segment.
    pub const SEGMENT: u8 = 0x2;
    /// SGL Last Segment.
    pub const LAST_SEGMENT: u8 = 0x3;
    /// Keyed SGL Data Block (RDMA).
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    /// Transport SGL Data Block (NVMe/TCP).
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}

/// SGL descriptor sub type (SGL Identifier bits 3:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SglSubtype {
    /// The Address field is a memory address (or, for keyed descriptors, a remote virtual address).
    Address = 0x0,
    /// The Address field is an offset into the capsule's in-capsule data.
    Offset = 0x1,
    /// Transport specific (NVMe/TCP uses 0xA for data moved by R2T/H2CData/C2HData).
    TransportSpecific = 0xA,
    /// Keyed: the controller shall invalidate the key when the command completes (send with invalidate).
    Invalidate = 0xF,
}

impl SglSubtype {
    fn from_bits(v: u8) -> Result<Self, WireError> {
        match v {
            0x0 => Ok(Self::Address),
            0x1 => Ok(Self::Offset),
            0xA => Ok(Self::TransportSpecific),
            0xF => Ok(Self::Invalidate),
            _ => Err(WireError::invalid(STRUCTURE, "sgl_identifier.subtype", v, "0x0, 0x1, 0xA or 0xF")),
        }
    }
}

/// One SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SglDescriptor {
    /// SGL Data Block: `subtype` is [`SglSubtype::Address`] or [`SglSubtype::Offset`] (in-capsule data).
    DataBlock {
        /// Address or in-capsule offset.
        address: u64,
        /// Length in bytes.
        length: u32,
        /// Address or Offset.
        subtype: SglSubtype,
    },
    /// SGL Bit Bucket: `length` bytes the host discards.
    BitBucket {
        /// Length in bytes.
        length: u32,
    },
    /// SGL Segment (points to a list of further descriptors).
    Segment {
        /// Address or offset of the next segment.
        address: u64,
        /// Length of the next segment in bytes.
        length: u32,
        /// Address or Offset.
        subtype: SglSubtype,
    },
    /// SGL Last Segment.
    LastSegment {
        /// Address or offset of the last segment.
        address: u64,
        /// Length of the last segment in bytes.
        length: u32,
        /// Address or Offset.
        subtype: SglSubtype,
    },
    /// Keyed SGL Data Block: remote memory the controller reaches with RDMA READ/WRITE.
    KeyedDataBlock {
        /// Remote virtual address.
        address: u64,
        /// Length in bytes (24 bits).
        length: u32,
        /// Remote key (rkey).
        key: u32,
        /// Address, or Invalidate to ask for remote invalidation of `key`.
        subtype: SglSubtype,
    },
    /// Transport SGL Data Block: data the transport moves by its own means (NVMe/TCP).
    TransportDataBlock {
        /// Length in bytes.
        length: u32,
        /// Usually [`SglSubtype::TransportSpecific`].
        subtype: SglSubtype,
    },
}

impl SglDescriptor {
    /// Parse the 16-byte descriptor at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<SGL_DESCRIPTOR_SIZE>(buf, STRUCTURE)?;
        let id = b[15];
        let (ty, sub) = (id >> 4, id & 0xf);
        let subtype = SglSubtype::from_bits(sub)?;
        let address = le64(b, 0);
        let address_or_offset = |allowed| match subtype {
            SglSubtype::Address | SglSubtype::Offset => Ok(subtype),
            _ => Err(WireError::invalid(STRUCTURE, "sgl_identifier.subtype", sub, allowed)),
        };
        Ok(match ty {
            descriptor_type::DATA_BLOCK => SglDescriptor::DataBlock {
                address,
                length: le32(b, 8),
                subtype: address_or_offset("0x0 (address) or 0x1 (offset) for a data block")?,
            },
            descriptor_type::BIT_BUCKET => SglDescriptor::BitBucket { length: le32(b, 8) },
            descriptor_type::SEGMENT => SglDescriptor::Segment {
                address,
                length: le32(b, 8),
                subtype: address_or_offset("0x0 (address) or 0x1 (offset) for a segment")?,
            },
            descriptor_type::LAST_SEGMENT => SglDescriptor::LastSegment {
                address,
                length: le32(b, 8),
                subtype: address_or_offset("0x0 (address) or 0x1 (offset) for a last segment")?,
            },
            descriptor_type::KEYED_DATA_BLOCK => {
                if !matches!(subtype, SglSubtype::Address | SglSubtype::Invalidate) {
                    return Err(WireError::invalid(
                        STRUCTURE,
                        "sgl_identifier.subtype",
                        sub,
                        "0x0 (address) or 0xF (invalidate) for a keyed data block",
                    ));
                }
                SglDescriptor::KeyedDataBlock { address, length: le24(b, 8), key: le32(b, 11), subtype }
            }
            descriptor_type::TRANSPORT_DATA_BLOCK => SglDescriptor::TransportDataBlock { length: le32(b, 8), subtype },
            _ => {
                return Err(WireError::invalid(STRUCTURE, "sgl_identifier.type", ty, "0x0-0x5"));
            }
        })
    }

    /// Encode into the first 16 bytes of `buf`. A keyed length above 24 bits is an error.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let mut tmp = [0u8; SGL_DESCRIPTOR_SIZE];
        let (ty, subtype) = match *self {
            SglDescriptor::DataBlock { address, length, subtype } => {
                put64(&mut tmp, 0, address);
                put32(&mut tmp, 8, length);
                (descriptor_type::DATA_BLOCK, subtype)
            }
            SglDescriptor::BitBucket { length } => {
                put32(&mut tmp, 8, length);
                (descriptor_type::BIT_BUCKET, SglSubtype::Address)
            }
            SglDescriptor::Segment { address, length, subtype } => {
                put64(&mut tmp, 0, address);
                put32(&mut tmp, 8, length);
                (descriptor_type::SEGMENT, subtype)
            }
            SglDescriptor::LastSegment { address, length, subtype } => {
                put64(&mut tmp, 0, address);
                put32(&mut tmp, 8, length);
                (descriptor_type::LAST_SEGMENT, subtype)
            }
            SglDescriptor::KeyedDataBlock { address, length, key, subtype } => {
                if length > KEYED_MAX_LENGTH {
                    return Err(WireError::invalid(STRUCTURE, "length", length, "at most 0xffffff (24 bits)"));
                }
                put64(&mut tmp, 0, address);
                put24(&mut tmp, 8, length);
                put32(&mut tmp, 11, key);
                (descriptor_type::KEYED_DATA_BLOCK, subtype)
            }
            SglDescriptor::TransportDataBlock { length, subtype } => {
                put32(&mut tmp, 8, length);
                (descriptor_type::TRANSPORT_DATA_BLOCK, subtype)
            }
        };
        tmp[15] = (ty << 4) | subtype as u8;
        fixed_mut::<SGL_DESCRIPTOR_SIZE>(buf, STRUCTURE)?.copy_from_slice(&tmp);
        Ok(())
    }

    /// The descriptor as its 16 bytes.
    pub fn to_bytes(&self) -> Result<[u8; SGL_DESCRIPTOR_SIZE], WireError> {
        let mut b = [0u8; SGL_DESCRIPTOR_SIZE];
        self.encode(&mut b)?;
        Ok(b)
    }

    /// Number of data bytes the descriptor describes.
    pub fn length(&self) -> u32 {
        match *self {
            SglDescriptor::DataBlock { length, .. }
            | SglDescriptor::BitBucket { length }
            | SglDescriptor::Segment { length, .. }
            | SglDescriptor::LastSegment { length, .. }
            | SglDescriptor::KeyedDataBlock { length, .. }
            | SglDescriptor::TransportDataBlock { length, .. } => length,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keyed_layout() {
        // Linux nvme-rdma: addr @0, length[3] @8, key[4] @11, type @15 (include/linux/nvme.h nvme_keyed_sgl_desc).
        let d = SglDescriptor::KeyedDataBlock {
            address: 0x1122_3344_5566_7788,
            length: 0x00ab_cdef,
            key: 0xdead_beef,
            subtype: SglSubtype::Invalidate,
        };
        let b = d.to_bytes().unwrap();
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..11], &[0xef, 0xcd, 0xab]);
        assert_eq!(&b[11..15], &0xdead_beefu32.to_le_bytes());
        assert_eq!(b[15], 0x4f);
        assert_eq!(SglDescriptor::parse(&b).unwrap(), d);
    }

    #[test]
    fn tcp_and_inline_identifiers() {
        // nvme-tcp: in-capsule data is 0x01 (data block, offset); R2T-moved data is 0x5A.
        let inline = SglDescriptor::DataBlock { address: 0, length: 4096, subtype: SglSubtype::Offset };
        assert_eq!(inline.to_bytes().unwrap()[15], 0x01);
        let t = SglDescriptor::TransportDataBlock { length: 8192, subtype: SglSubtype::TransportSpecific };
        let b = t.to_bytes().unwrap();
        assert_eq!(b[15], 0x5a);
        assert_eq!(&b[8..12], &8192u32.to_le_bytes());
    }

    #[test]
    fn rejects_bad_identifiers_and_lengths() {
        let mut b = [0u8; 16];
        b[15] = 0x60;
        assert!(matches!(SglDescriptor::parse(&b), Err(WireError::InvalidField { field: "sgl_identifier.type", .. })));
        b[15] = 0x03;
        assert!(matches!(
            SglDescriptor::parse(&b),
            Err(WireError::InvalidField { field: "sgl_identifier.subtype", .. })
        ));
        b[15] = 0x41;
        assert!(SglDescriptor::parse(&b).is_err(), "keyed descriptor with offset subtype");
        assert!(SglDescriptor::parse(&b[..15]).is_err());
        let too_long =
            SglDescriptor::KeyedDataBlock { address: 0, length: 1 << 24, key: 0, subtype: SglSubtype::Address };
        assert!(too_long.to_bytes().is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(bytes in proptest::array::uniform16(any::<u8>())) {
            if let Ok(d) = SglDescriptor::parse(&bytes) {
                let again = SglDescriptor::parse(&d.to_bytes().unwrap()).unwrap();
                prop_assert_eq!(again, d);
            }
        }
    }
}
