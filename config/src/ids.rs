//! Namespace identifiers (UUID, NGUID, EUI-64) and the subsystem serial number: parsing, and stable derivation.
//!
//! A host tells namespaces apart, and multipath matches paths, by these identifiers (NVMe Base 2.0 §4.7.1,
//! "Namespace Identification Descriptor"), so they must not change across restarts. When the configuration does
//! not set them they are derived from the subsystem NQN and the NSID only, never from randomness:
//!
//! - every identifier starts from a name-based (SHA-1, version 5) UUID, RFC 9562 §5.5, in the namespace
//!   [`ID_NAMESPACE`] (itself `UUIDv5(NAMESPACE_DNS, "nvmf-rs.invalid")`), of the name
//!   `"<kind>\n<subsystem NQN>\n<nsid in decimal>"` with kind `uuid`, `nguid` or `eui64` (`serial\n<NQN>` for the
//!   serial number). NQNs hold no control characters, so the newline separators make names unambiguous, and the
//!   three kinds give unrelated values;
//! - **UUID**: that UUID as is (version 5, RFC variant bits set);
//! - **NGUID** (16 bytes, in Identify order): the UUID's 16 bytes, with byte 8 — the first octet of the NGUID's
//!   IEEE OUI field (bytes 8..=10, NVMe Base 2.0 Figure "NGUID") — set to the IEEE "Administratively Assigned
//!   Identifier" quadrant of local addresses (low nibble `0x2`: individual, locally administered, SLAP AAI), so the
//!   value can never collide with a vendor's registered OUI;
//! - **EUI-64** (8 bytes): the UUID's first 8 bytes with byte 0 given the same locally administered AAI pattern;
//! - **serial** (20 ASCII characters): 20 lowercase hexadecimal digits of the UUID, skipping its version and
//!   variant digits.
//!
//! Configured identifiers are written as: UUID in any form `uuid` parses (hyphenated is canonical), NGUID as 32
//! hexadecimal digits, EUI-64 as 16, bytes in the order Identify carries them (as `nvme id-ns` prints them). An
//! all-zero value is rejected: in Identify, zero means "not reported".

use std::fmt;

pub use uuid::Uuid;

use crate::error::ValueError;

/// The UUID namespace of derived identifiers: `UUIDv5(NAMESPACE_DNS, "nvmf-rs.invalid")`.
pub const ID_NAMESPACE: Uuid = Uuid::from_u128(0xb21e_d7a0_b812_519f_91e9_1e05_3ef8_595e);

/// Low nibble of a locally administered, individual IEEE identifier in the SLAP "Administratively Assigned" (AAI)
/// quadrant: U/L bit set, I/G bit clear, the two SLAP bits clear.
const LOCAL_AAI_NIBBLE: u8 = 0x2;

fn name_based(kind: &str, subnqn: &str, nsid: Option<u32>) -> Uuid {
    let name = match nsid {
        Some(nsid) => format!("{kind}\n{subnqn}\n{nsid}"),
        None => format!("{kind}\n{subnqn}"),
    };
    Uuid::new_v5(&ID_NAMESPACE, name.as_bytes())
}

/// The derived namespace UUID of (`subnqn`, `nsid`).
pub fn derive_uuid(subnqn: &str, nsid: u32) -> Uuid {
    name_based("uuid", subnqn, Some(nsid))
}

/// The derived namespace NGUID of (`subnqn`, `nsid`).
pub fn derive_nguid(subnqn: &str, nsid: u32) -> Nguid {
    let mut bytes = name_based("nguid", subnqn, Some(nsid)).into_bytes();
    bytes[8] = (bytes[8] & 0xF0) | LOCAL_AAI_NIBBLE;
    Nguid(bytes)
}

/// The derived namespace EUI-64 of (`subnqn`, `nsid`).
pub fn derive_eui64(subnqn: &str, nsid: u32) -> Eui64 {
    let uuid = name_based("eui64", subnqn, Some(nsid)).into_bytes();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&uuid[..8]);
    bytes[0] = (bytes[0] & 0xF0) | LOCAL_AAI_NIBBLE;
    Eui64(bytes)
}

/// The derived serial number (Identify Controller SN) of subsystem `subnqn`: 20 hexadecimal digits.
pub fn derive_serial(subnqn: &str) -> String {
    let hex = name_based("serial", subnqn, None).simple().to_string();
    // Digit 12 is the version, digit 16 holds the variant bits: leave both out.
    format!("{}{}", &hex[..12], &hex[17..25])
}

/// Parse a namespace UUID (any form the `uuid` crate reads; not the nil UUID).
pub fn parse_uuid(text: &str) -> Result<Uuid, ValueError> {
    const ALLOWED: &str = "a UUID such as \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", not all zero";
    let uuid = Uuid::try_parse(text).map_err(|_| ValueError::new(format!("{text:?} is not a UUID"), ALLOWED))?;
    if uuid.is_nil() {
        return Err(ValueError::new("the nil UUID means \"no UUID\" to a host", ALLOWED));
    }
    Ok(uuid)
}

fn parse_hex<const N: usize>(text: &str, what: &str) -> Result<[u8; N], ValueError> {
    let allowed = format!("{} hexadecimal digits, not all zero", 2 * N);
    if text.len() != 2 * N || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(ValueError::new(format!("{what} {text:?} is not {} hexadecimal digits", 2 * N), allowed));
    }
    let mut bytes = [0u8; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        // Checked above: 2N ASCII hex digits.
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
            .map_err(|_| ValueError::new(format!("{what} {text:?} is not hexadecimal"), allowed.clone()))?;
    }
    if bytes.iter().all(|&byte| byte == 0) {
        return Err(ValueError::new(format!("an all-zero {what} means \"no {what}\" to a host"), allowed));
    }
    Ok(bytes)
}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
}

/// A Namespace Globally Unique Identifier (16 bytes, Identify Namespace NGUID, in Identify order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nguid(pub [u8; 16]);

impl Nguid {
    /// Parse 32 hexadecimal digits (not all zero).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        parse_hex(text, "NGUID").map(Nguid)
    }

    /// The bytes, as Identify Namespace carries them.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for Nguid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// An IEEE Extended Unique Identifier (8 bytes, Identify Namespace EUI64, in Identify order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Eui64(pub [u8; 8]);

impl Eui64 {
    /// Parse 16 hexadecimal digits (not all zero).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        parse_hex(text, "EUI-64").map(Eui64)
    }

    /// The bytes, as Identify Namespace carries them.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }
}

impl fmt::Display for Eui64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2024-01.io.nvmf-rs:default";

    #[test]
    fn id_namespace_is_what_the_docs_say() {
        assert_eq!(ID_NAMESPACE, Uuid::new_v5(&Uuid::NAMESPACE_DNS, b"nvmf-rs.invalid"));
    }

    #[test]
    fn derived_ids_are_stable() {
        // Pinned values: a change here changes every host's view of existing namespaces.
        assert_eq!(derive_uuid(NQN, 1), derive_uuid(NQN, 1));
        assert_eq!(derive_uuid(NQN, 1).to_string(), PINNED_UUID);
        assert_eq!(derive_nguid(NQN, 1).to_string(), PINNED_NGUID);
        assert_eq!(derive_eui64(NQN, 1).to_string(), PINNED_EUI64);
        assert_eq!(derive_serial(NQN), PINNED_SERIAL);
    }

    // Computed independently with Python's uuid.uuid5 from the scheme in the module docs.
    const PINNED_UUID: &str = "44496040-53be-5cd5-be11-6df02c920a65";
    const PINNED_NGUID: &str = "7ed81510aebe526492d196e6470ca518";
    const PINNED_EUI64: &str = "a2b5988810ab5648";
    const PINNED_SERIAL: &str = "baa6f7b16e3177017eee";

    #[test]
    fn derived_ids_differ_by_nsid_and_nqn_and_kind() {
        let other = "nqn.2024-01.io.nvmf-rs:other";
        assert_ne!(derive_uuid(NQN, 1), derive_uuid(NQN, 2));
        assert_ne!(derive_uuid(NQN, 1), derive_uuid(other, 1));
        assert_ne!(derive_nguid(NQN, 1), derive_nguid(NQN, 2));
        assert_ne!(derive_nguid(NQN, 1), derive_nguid(other, 1));
        assert_ne!(derive_eui64(NQN, 1), derive_eui64(NQN, 2));
        assert_ne!(derive_eui64(NQN, 1), derive_eui64(other, 1));
        assert_ne!(derive_serial(NQN), derive_serial(other));
        assert_ne!(derive_nguid(NQN, 1).0, derive_uuid(NQN, 1).into_bytes(), "kinds are unrelated");
        // "a\n1" + "2" must not equal "a" + "\n12": the separator is in every name.
        assert_ne!(derive_uuid("nqn.2024-01.io.x:a1", 2), derive_uuid("nqn.2024-01.io.x:a", 12));
    }

    #[test]
    fn derived_ids_have_the_documented_format() {
        for nsid in [1, 2, 0xFFFF_FFFE] {
            let uuid = derive_uuid(NQN, nsid);
            assert_eq!(uuid.get_version_num(), 5);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
            let nguid = derive_nguid(NQN, nsid);
            assert_eq!(nguid.0[8] & 0x0F, 0x2, "NGUID OUI octet is locally administered, individual, AAI");
            let eui = derive_eui64(NQN, nsid);
            assert_eq!(eui.0[0] & 0x0F, 0x2, "EUI-64 first octet is locally administered, individual, AAI");
        }
        let serial = derive_serial(NQN);
        assert_eq!(serial.len(), 20);
        assert!(serial.bytes().all(|byte| byte.is_ascii_hexdigit()));
    }

    #[test]
    fn parses_configured_ids() {
        let uuid = parse_uuid("F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6").unwrap();
        assert_eq!(uuid.to_string(), "f81d4fae-7dec-11d0-a765-00a0c91e6bf6");
        let nguid = Nguid::parse("00112233445566778899AABBCCDDEEFF").unwrap();
        assert_eq!(nguid.0[0], 0x00);
        assert_eq!(nguid.0[15], 0xFF);
        assert_eq!(nguid.to_string(), "00112233445566778899aabbccddeeff");
        let eui = Eui64::parse("0123456789abcdef").unwrap();
        assert_eq!(eui.0, [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(eui.to_string(), "0123456789abcdef");
    }

    #[test]
    fn rejects_bad_ids_with_reasons() {
        let err = parse_uuid("nope").unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"nope\" is not a UUID; allowed: a UUID such as \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", not all zero"
        );
        let err = parse_uuid("00000000-0000-0000-0000-000000000000").unwrap_err();
        assert_eq!(err.problem, "the nil UUID means \"no UUID\" to a host");
        let err = Nguid::parse("0011").unwrap_err();
        assert_eq!(
            err.to_string(),
            "NGUID \"0011\" is not 32 hexadecimal digits; allowed: 32 hexadecimal digits, not all zero"
        );
        let err = Nguid::parse(&"0".repeat(32)).unwrap_err();
        assert_eq!(err.problem, "an all-zero NGUID means \"no NGUID\" to a host");
        let err = Eui64::parse("0123456789abcdeg").unwrap_err();
        assert_eq!(err.problem, "EUI-64 \"0123456789abcdeg\" is not 16 hexadecimal digits");
        assert!(Eui64::parse("+123456789abcdef").is_err(), "from_str_radix's sign is not a digit");
        assert!(Eui64::parse("é123456789abcde").is_err());
        assert_eq!(
            Eui64::parse("0000000000000000").unwrap_err().problem,
            "an all-zero EUI-64 means \"no EUI-64\" to a host"
        );
    }
}
