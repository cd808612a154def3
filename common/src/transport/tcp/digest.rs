//! NVMe/TCP header and data digests (CRC32C).
//!
//! NVMe/TCP Transport Specification 1.0, "PDU Header and Data Digests": when negotiated in
//! ICReq/ICResp, a PDU's header is followed by HDGST, the CRC32C (Castagnoli) of the header bytes
//! `[0, HLEN)`, and its data by DDGST, the CRC32C of the data bytes only (not the padding before them).
//! Each digest is 4 bytes, stored little-endian (Linux `NVME_TCP_DIGEST_LENGTH`,
//! `put_unaligned_le32(crc, pdu + hlen)`). The CRC is computed by the `crc32c` crate, which uses the SSE4.2
//! or ARMv8 CRC instructions when the CPU has them.
//!
//! Data often arrives (or is sent) in pieces — a scatter list, a partial socket read — so [`DataDigest`]
//! accumulates the CRC over consecutive slices.

/// Length of HDGST and DDGST in bytes (Linux `NVME_TCP_DIGEST_LENGTH`).
pub const DIGEST_LEN: usize = 4;

/// CRC32C (Castagnoli, reflected, initial and final XOR `0xFFFF_FFFF`) of `bytes`: the digest NVMe/TCP
/// uses for HDGST and DDGST.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// HDGST of a PDU header: the CRC32C of the header bytes `[0, HLEN)`. `header` must be exactly
/// those bytes (common header and PDU-specific header, without padding).
#[inline]
pub fn header_digest(header: &[u8]) -> u32 {
    crc32c(header)
}

/// A digest as read from the wire: the 4 bytes after the header (HDGST) or the data (DDGST), little-endian.
#[inline]
pub fn digest_from_bytes(bytes: [u8; DIGEST_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// A digest as it goes on the wire: 4 bytes, little-endian.
#[inline]
pub fn digest_to_bytes(digest: u32) -> [u8; DIGEST_LEN] {
    digest.to_le_bytes()
}

/// A computed digest differs from the one received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("digest mismatch: received {received:#010x}, computed {computed:#010x}")]
pub struct DigestMismatch {
    /// The digest that came over the wire.
    pub received: u32,
    /// The CRC32C of the bytes that came over the wire.
    pub computed: u32,
}

/// Check `bytes` against the little-endian digest `received` (HDGST or DDGST).
pub fn verify(bytes: &[u8], received: [u8; DIGEST_LEN]) -> Result<(), DigestMismatch> {
    let received = digest_from_bytes(received);
    let computed = crc32c(bytes);
    if received == computed {
        Ok(())
    } else {
        Err(DigestMismatch { received, computed })
    }
}

/// DDGST over PDU data that is sent or received in pieces. Feeding the data in any split gives
/// the same digest as [`crc32c()`] over all of it.
///
/// ```
/// # use nvmf_common::transport::tcp::digest::{crc32c, DataDigest};
/// let mut d = DataDigest::new();
/// d.update(b"1234");
/// d.update(b"56789");
/// assert_eq!(d.value(), crc32c(b"123456789"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataDigest {
    crc: u32,
}

impl DataDigest {
    /// The digest of no data yet.
    pub fn new() -> Self {
        DataDigest { crc: 0 }
    }

    /// Add the next piece of data.
    #[inline]
    pub fn update(&mut self, piece: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, piece);
    }

    /// The CRC32C of all data fed so far.
    #[inline]
    pub fn value(&self) -> u32 {
        self.crc
    }

    /// The digest as it goes on the wire (4 bytes, little-endian).
    #[inline]
    pub fn to_bytes(&self) -> [u8; DIGEST_LEN] {
        digest_to_bytes(self.crc)
    }

    /// Compare with a received DDGST.
    pub fn verify(&self, received: [u8; DIGEST_LEN]) -> Result<(), DigestMismatch> {
        let received = digest_from_bytes(received);
        if received == self.crc {
            Ok(())
        } else {
            Err(DigestMismatch { received, computed: self.crc })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bitwise CRC32C (reflected polynomial 0x82F63B78), independent of the `crc32c` crate.
    fn reference_crc32c(bytes: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
            }
        }
        !crc
    }

    #[test]
    fn check_value() {
        // The CRC-32C catalogue check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(reference_crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn rfc3720_vectors() {
        // RFC 3720 (iSCSI) Appendix B.4: the same CRC32C, with the digest bytes as sent on the wire.
        let ascending: Vec<u8> = (0u8..32).collect();
        let descending: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(digest_to_bytes(crc32c(&[0u8; 32])), [0xaa, 0x36, 0x91, 0x8a]);
        assert_eq!(digest_to_bytes(crc32c(&[0xffu8; 32])), [0x43, 0xab, 0xa8, 0x62]);
        assert_eq!(digest_to_bytes(crc32c(&ascending)), [0x4e, 0x79, 0xdd, 0x46]);
        assert_eq!(digest_to_bytes(crc32c(&descending)), [0x5c, 0xdb, 0x3f, 0x11]);
        // An iSCSI SCSI Read (10) command PDU.
        let pdu = [
            0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(digest_to_bytes(crc32c(&pdu)), [0x56, 0x3a, 0x96, 0xd9]);
    }

    #[test]
    fn nvme_tcp_capsule_response_header_digest() {
        // The first CapsuleResp Linux 6.12 nvmet-tcp sent with header digests on (the Connect response of the
        // discovery connection in tests/fixtures/kernel-tcp/digest-discovery.controller-to-host.bin, byte
        // 128): type 5, flags HDGSTF, hlen 24, pdo 0, plen 28; CQE dw0 1 (cntlid), sqhd 1, cid 0, status 0;
        // then the kernel's HDGST.
        let pdu = [
            0x05, 0x01, 0x18, 0x00, 0x1c, 0x00, 0x00, 0x00, // common header
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // dw0, dw1
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sqhd, sqid, cid, status
            0x42, 0x62, 0x33, 0x32, // HDGST
        ];
        let (header, hdgst) = pdu.split_at(24);
        let hdgst: [u8; 4] = hdgst.try_into().unwrap();
        assert_eq!(header_digest(header), 0x3233_6242);
        assert_eq!(reference_crc32c(header), 0x3233_6242);
        assert!(verify(header, hdgst).is_ok());
        let mut corrupt = [0u8; 24];
        corrupt.copy_from_slice(header);
        corrupt[20] ^= 0x01;
        let e = verify(&corrupt, hdgst).unwrap_err();
        assert_eq!(e.received, 0x3233_6242);
        assert_ne!(e.computed, 0x3233_6242);
    }

    #[test]
    fn data_digest_mismatch_reports_both_values() {
        let mut d = DataDigest::new();
        d.update(b"abc");
        assert!(d.verify(d.to_bytes()).is_ok());
        let e = d.verify([0, 0, 0, 0]).unwrap_err();
        assert_eq!(e, DigestMismatch { received: 0, computed: crc32c(b"abc") });
    }

    proptest! {
        #[test]
        fn streaming_matches_one_shot(data in proptest::collection::vec(any::<u8>(), 0..2048), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut points: Vec<usize> = cuts.iter().map(|c| if data.is_empty() { 0 } else { c % (data.len() + 1) }).collect();
            points.sort_unstable();
            let mut d = DataDigest::new();
            let mut start = 0;
            for p in points {
                d.update(&data[start..p]);
                start = p;
            }
            d.update(&data[start..]);
            prop_assert_eq!(d.value(), crc32c(&data));
            prop_assert_eq!(d.value(), reference_crc32c(&data));
        }
    }
}
