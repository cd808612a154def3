//! Shared plumbing for the wire codecs: the [`WireError`] every parser returns and little-endian field
//! accessors. Accessors index with offsets the caller has already bounds-checked (through [`fixed`] or
//! [`fixed_mut`]), so a parser checks a buffer's length once and then reads fields at the spec's offsets.
#![forbid(unsafe_code)]

/// A wire structure could not be parsed or encoded. Every variant names the structure (and field) so that
/// a log line says exactly what a peer got wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input holds fewer bytes than the structure needs.
    #[error("{structure}: {got} bytes received, at least {need} needed")]
    Short {
        /// The structure being parsed.
        structure: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// The output buffer is too small for the encoded structure.
    #[error("{structure}: output buffer holds {got} bytes, {need} needed")]
    OutputTooSmall {
        /// The structure being encoded.
        structure: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// A field holds a value the spec (or this implementation) does not allow.
    #[error("{structure}.{field}: value {value:#x} is invalid; allowed: {allowed}")]
    InvalidField {
        /// The structure being parsed or encoded.
        structure: &'static str,
        /// The spec's name of the field.
        field: &'static str,
        /// The offending value.
        value: u64,
        /// What would have been valid.
        allowed: &'static str,
    },
    /// A text field (NQN, serial, address) is malformed.
    #[error("{structure}.{field}: {reason}")]
    InvalidText {
        /// The structure being parsed or encoded.
        structure: &'static str,
        /// The spec's name of the field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl WireError {
    /// Shorthand for [`WireError::InvalidField`].
    pub fn invalid(structure: &'static str, field: &'static str, value: impl Into<u64>, allowed: &'static str) -> Self {
        WireError::InvalidField { structure, field, value: value.into(), allowed }
    }
}

/// The first `N` bytes of `buf` as an array, or [`WireError::Short`].
pub fn fixed<'a, const N: usize>(buf: &'a [u8], structure: &'static str) -> Result<&'a [u8; N], WireError> {
    buf.get(..N).and_then(|b| b.try_into().ok()).ok_or(WireError::Short { structure, need: N, got: buf.len() })
}

/// The first `N` bytes of `buf` as a mutable array, or [`WireError::OutputTooSmall`].
pub fn fixed_mut<'a, const N: usize>(buf: &'a mut [u8], structure: &'static str) -> Result<&'a mut [u8; N], WireError> {
    let got = buf.len();
    buf.get_mut(..N).and_then(|b| b.try_into().ok()).ok_or(WireError::OutputTooSmall { structure, need: N, got })
}

/// Little-endian `u16` at `off`. The caller guarantees `off + 2 <= b.len()`.
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Little-endian 24-bit value at `off` (keyed SGL lengths). The caller guarantees `off + 3 <= b.len()`.
#[inline]
pub fn le24(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], 0])
}

/// Little-endian `u32` at `off`. The caller guarantees `off + 4 <= b.len()`.
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Little-endian `u64` at `off`. The caller guarantees `off + 8 <= b.len()`.
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Store `v` little-endian at `off`. The caller guarantees the range is in bounds.
#[inline]
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Store the low 24 bits of `v` little-endian at `off`. The caller guarantees the range is in bounds.
#[inline]
pub fn put24(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 3].copy_from_slice(&v.to_le_bytes()[..3]);
}

/// Store `v` little-endian at `off`. The caller guarantees the range is in bounds.
#[inline]
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` little-endian at `off`. The caller guarantees the range is in bounds.
#[inline]
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Bits 7:0 of a dword.
pub fn low_byte(v: u32) -> u8 {
    v.to_le_bytes()[0]
}

/// Bits 31:24 of a dword.
pub fn top_byte(v: u32) -> u8 {
    v.to_le_bytes()[3]
}

/// Bits 15:0 of a dword.
pub fn low_half(v: u32) -> u16 {
    let b = v.to_le_bytes();
    u16::from_le_bytes([b[0], b[1]])
}

/// Bits 31:16 of a dword.
pub fn high_half(v: u32) -> u16 {
    let b = v.to_le_bytes();
    u16::from_le_bytes([b[2], b[3]])
}

/// Little-endian `u128` at `off` (16-byte counters). The caller guarantees `off + 16 <= b.len()`.
pub fn le128(b: &[u8], off: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    u128::from_le_bytes(a)
}

/// Store `v` little-endian at `off`. The caller guarantees the range is in bounds.
pub fn put128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Read a fixed-width ASCII text field (NQN, serial number, model, address): the bytes up to the first
/// NUL, which must be printable ASCII. Space padding (Identify strings) is kept; callers trim if they want.
pub fn ascii_field<'a>(b: &'a [u8], structure: &'static str, field: &'static str) -> Result<&'a str, WireError> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let text = &b[..end];
    if !text.iter().all(|c| (0x20..0x7f).contains(c)) {
        return Err(WireError::InvalidText { structure, field, reason: "not printable ASCII" });
    }
    // Printable ASCII is valid UTF-8.
    std::str::from_utf8(text).map_err(|_| WireError::InvalidText { structure, field, reason: "not UTF-8" })
}

/// Write `text` into the fixed-width field `b`, padded with `pad` (NUL for NQNs and addresses, space for
/// Identify strings). Errors if the text does not fit or is not printable ASCII.
pub fn put_ascii_field(
    b: &mut [u8],
    text: &str,
    pad: u8,
    structure: &'static str,
    field: &'static str,
) -> Result<(), WireError> {
    if text.len() > b.len() {
        return Err(WireError::InvalidText { structure, field, reason: "too long for the field" });
    }
    if !text.bytes().all(|c| (0x20..0x7f).contains(&c)) {
        return Err(WireError::InvalidText { structure, field, reason: "not printable ASCII" });
    }
    b[..text.len()].copy_from_slice(text.as_bytes());
    b[text.len()..].fill(pad);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_reports_short_input() {
        let e = fixed::<4>(&[1, 2], "Thing").unwrap_err();
        assert_eq!(e, WireError::Short { structure: "Thing", need: 4, got: 2 });
        assert_eq!(fixed::<2>(&[1, 2, 3], "Thing").unwrap(), &[1, 2]);
    }

    #[test]
    fn little_endian_round_trip() {
        let mut b = [0u8; 17];
        put16(&mut b, 0, 0x1234);
        put24(&mut b, 2, 0xabcdef);
        put32(&mut b, 5, 0xdead_beef);
        put64(&mut b, 9, 0x0102_0304_0506_0708);
        assert_eq!(b[0], 0x34);
        assert_eq!(le16(&b, 0), 0x1234);
        assert_eq!(le24(&b, 2), 0xabcdef);
        assert_eq!(le32(&b, 5), 0xdead_beef);
        assert_eq!(le64(&b, 9), 0x0102_0304_0506_0708);
        assert_eq!(b[9], 0x08);
    }

    #[test]
    fn ascii_fields() {
        let mut b = [0xffu8; 8];
        put_ascii_field(&mut b, "abc", 0, "S", "f").unwrap();
        assert_eq!(&b, b"abc\0\0\0\0\0");
        assert_eq!(ascii_field(&b, "S", "f").unwrap(), "abc");
        assert!(put_ascii_field(&mut b, "123456789", 0, "S", "f").is_err());
        assert!(ascii_field(&[0x41, 0x80], "S", "f").is_err());
    }
}
