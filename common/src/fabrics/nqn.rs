//! NVMe Qualified Names: validation and the well-known discovery NQN.
//!
//! NVMe Base Specification 2.0 §4.5 ("NVMe Qualified Names"): an NQN is a UTF-8 string of at most 223
//! bytes, carried in 256-byte NUL-terminated fields (Connect data `subnqn`/`hostnqn`, discovery log
//! entries, Identify Controller `subnqn`). Two forms are defined:
//!
//! - `nqn.yyyy-mm.reverse.domain.name` optionally followed by `:` and any string the owner of the
//!   domain chooses (e.g. `nqn.2016-06.io.spdk:cnode1`);
//! - `nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555` for entities without a
//!   domain name.
//!
//! The discovery subsystem's NQN, [`DISCOVERY_NQN`], is of the first form. Linux's
//! `include/linux/nvme.h` names the limits `NVMF_NQN_SIZE` (223) and `NVMF_NQN_FIELD_LEN` (256).
//!
//! Linux nvmet, SPDK and nvme-cli do not hold names to that grammar: subsystems named `testnqn` or
//! `storage-subsystem-1` are common in existing setups and test suites. [`validate_nqn`] accepts what
//! they accept (1 to 223 bytes of UTF-8 without control characters) and [`Nqn`] is a name so
//! validated; [`check_nqn_format`] is the spec's grammar, for warning about a name that does not follow
//! it. [`nqn_field_text`] reads a field's text without judging it at all (a peer's name to show).

use std::fmt;

/// The well-known NQN of a discovery subsystem (NVMe Base 2.0 §4.5, Linux `NVME_DISC_SUBSYS_NAME`).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The prefix of the UUID-based NQN form (NVMe Base 2.0 §4.5).
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// Longest NQN in bytes, not counting the NUL terminator (NVMe Base 2.0 §4.5, Linux `NVMF_NQN_SIZE`).
pub const NQN_MAX_LEN: usize = 223;

/// Size of the fixed field an NQN travels in (Linux `NVMF_NQN_FIELD_LEN`).
pub const NQN_FIELD_LEN: usize = 256;

/// What is wrong with a would-be NQN (NVMe Base 2.0 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NqnError {
    /// The 256-byte field holds no NUL terminator.
    #[error("NQN field has no NUL terminator within its 256 bytes")]
    NotTerminated,
    /// The text is longer than 223 bytes.
    #[error("NQN is {len} bytes long; at most 223 bytes are allowed")]
    TooLong {
        /// Length in bytes.
        len: usize,
    },
    /// The bytes are not UTF-8.
    #[error("NQN is not valid UTF-8")]
    NotUtf8,
    /// The text holds a control character (below 0x20, or DEL).
    #[error("NQN contains a control character")]
    ControlCharacter,
    /// The name is empty.
    #[error("NQN is empty")]
    Empty,
    /// The text does not start with `nqn.`.
    #[error("NQN does not start with \"nqn.\"")]
    MissingPrefix,
    /// The date after `nqn.` is not `yyyy-mm.`.
    #[error("NQN date is not of the form yyyy-mm followed by '.'")]
    BadDate,
    /// The month is not 01 to 12.
    #[error("NQN date month {month} is not 01..12")]
    BadMonth {
        /// The month as written.
        month: u8,
    },
    /// Nothing follows the date where the reverse domain name belongs.
    #[error("NQN reverse domain name is empty")]
    EmptyDomain,
    /// The reverse domain name has an empty label or a character other than letters, digits and `-`.
    #[error("NQN reverse domain name has an empty label or a character other than letters, digits and '-'")]
    BadDomainLabel,
    /// The UUID form's UUID is not 8-4-4-4-12 hexadecimal digits.
    #[error("NQN UUID is not 8-4-4-4-12 hexadecimal digits")]
    BadUuid,
}

impl NqnError {
    /// A fixed description, for embedding in [`crate::WireError::InvalidText`].
    pub fn reason(&self) -> &'static str {
        match self {
            NqnError::NotTerminated => "NQN field has no NUL terminator within its 256 bytes",
            NqnError::Empty => "NQN is empty",
            NqnError::TooLong { .. } => "NQN is longer than 223 bytes",
            NqnError::NotUtf8 => "NQN is not valid UTF-8",
            NqnError::ControlCharacter => "NQN contains a control character",
            NqnError::MissingPrefix => "NQN does not start with \"nqn.\"",
            NqnError::BadDate => "NQN date is not of the form yyyy-mm followed by '.'",
            NqnError::BadMonth { .. } => "NQN date month is not 01..12",
            NqnError::EmptyDomain => "NQN reverse domain name is empty",
            NqnError::BadDomainLabel => "NQN reverse domain name has an empty label or an invalid character",
            NqnError::BadUuid => "NQN UUID is not 8-4-4-4-12 hexadecimal digits",
        }
    }
}

/// An NVMe Qualified Name borrowed from its source, valid as Linux takes it ([`validate_nqn`]; whether it
/// follows the spec's grammar is [`check_nqn_format`]'s question).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nqn<'a>(&'a str);

impl<'a> Nqn<'a> {
    /// Validate `text` as an NQN ([`validate_nqn`]).
    pub fn new(text: &'a str) -> Result<Self, NqnError> {
        validate_nqn(text)?;
        Ok(Nqn(text))
    }

    /// Read and validate the NQN in a 256-byte field: the text before the first NUL, which must be
    /// present within the field.
    pub fn from_field(field: &'a [u8; NQN_FIELD_LEN]) -> Result<Self, NqnError> {
        Nqn::new(nqn_field_text(field)?)
    }

    /// The name.
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    /// True for [`DISCOVERY_NQN`].
    pub fn is_discovery(&self) -> bool {
        self.0 == DISCOVERY_NQN
    }

    /// True for the `nqn.2014-08.org.nvmexpress:uuid:` form.
    pub fn is_uuid_form(&self) -> bool {
        self.0.starts_with(UUID_NQN_PREFIX)
    }

    /// Write the name NUL-padded into a 256-byte field.
    pub fn write_field(&self, field: &mut [u8; NQN_FIELD_LEN]) {
        // A valid NQN is at most 223 bytes, so it always fits with room for the terminator.
        let bytes = self.0.as_bytes();
        field[..bytes.len()].copy_from_slice(bytes);
        field[bytes.len()..].fill(0);
    }
}

impl fmt::Display for Nqn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl AsRef<str> for Nqn<'_> {
    fn as_ref(&self) -> &str {
        self.0
    }
}

/// The text of a 256-byte NQN field without judging its grammar: the bytes before the first NUL
/// (required within the field), at most 223 of them, UTF-8 without control characters.
pub fn nqn_field_text(field: &[u8; NQN_FIELD_LEN]) -> Result<&str, NqnError> {
    let end = field.iter().position(|&b| b == 0).ok_or(NqnError::NotTerminated)?;
    let text = std::str::from_utf8(&field[..end]).map_err(|_| NqnError::NotUtf8)?;
    check_text(text)?;
    Ok(text)
}

/// Write `text` NUL-padded into a 256-byte NQN field without judging its grammar (the counterpart of
/// [`nqn_field_text`]): at most 223 bytes, no control characters.
pub fn write_nqn_field_text(field: &mut [u8; NQN_FIELD_LEN], text: &str) -> Result<(), NqnError> {
    check_text(text)?;
    let bytes = text.as_bytes();
    field[..bytes.len()].copy_from_slice(bytes);
    field[bytes.len()..].fill(0);
    Ok(())
}

fn check_text(text: &str) -> Result<(), NqnError> {
    if text.len() > NQN_MAX_LEN {
        return Err(NqnError::TooLong { len: text.len() });
    }
    if text.chars().any(char::is_control) {
        return Err(NqnError::ControlCharacter);
    }
    Ok(())
}

/// Check `text` as a name Linux nvmet and nvme-cli take for an NQN: 1 to 223 bytes of UTF-8 without control
/// characters (see the module documentation).
pub fn validate_nqn(text: &str) -> Result<(), NqnError> {
    if text.is_empty() {
        return Err(NqnError::Empty);
    }
    check_text(text)
}

/// Check `text` against the NQN grammar of NVMe Base 2.0 §4.5 (see the module documentation).
pub fn check_nqn_format(text: &str) -> Result<(), NqnError> {
    check_text(text)?;
    if let Some(uuid) = text.strip_prefix(UUID_NQN_PREFIX) {
        return validate_uuid(uuid);
    }
    let rest = text.strip_prefix("nqn.").ok_or(NqnError::MissingPrefix)?;
    let date = rest.as_bytes().get(..8).ok_or(NqnError::BadDate)?;
    let digits_at = |range: std::ops::Range<usize>| date[range].iter().all(u8::is_ascii_digit);
    if !(digits_at(0..4) && date[4] == b'-' && digits_at(5..7) && date[7] == b'.') {
        return Err(NqnError::BadDate);
    }
    let month = (date[5] - b'0') * 10 + (date[6] - b'0');
    if !(1..=12).contains(&month) {
        return Err(NqnError::BadMonth { month });
    }
    // The date was 8 ASCII bytes, so index 8 is a character boundary.
    let after_date = &rest[8..];
    let domain = after_date.split_once(':').map_or(after_date, |(domain, _)| domain);
    if domain.is_empty() {
        return Err(NqnError::EmptyDomain);
    }
    let valid_label = |label: &str| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !domain.split('.').all(valid_label) {
        return Err(NqnError::BadDomainLabel);
    }
    Ok(())
}

fn validate_uuid(uuid: &str) -> Result<(), NqnError> {
    let b = uuid.as_bytes();
    if b.len() != 36 {
        return Err(NqnError::BadUuid);
    }
    let ok = b.iter().enumerate().all(|(i, &c)| match i {
        8 | 13 | 18 | 23 => c == b'-',
        _ => c.is_ascii_hexdigit(),
    });
    if ok {
        Ok(())
    } else {
        Err(NqnError::BadUuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field(text: &str) -> [u8; NQN_FIELD_LEN] {
        let mut f = [0u8; NQN_FIELD_LEN];
        f[..text.len()].copy_from_slice(text.as_bytes());
        f
    }

    #[test]
    fn accepts_real_world_names() {
        for name in [
            DISCOVERY_NQN,
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
            "nqn.2014-08.org.nvmexpress:uuid:F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6",
            "nqn.2014-08.com.example:nvme:nvm-subsystem-sn-d78432",
            "nqn.2024-12.example-corp.com:disk ü 1",
        ] {
            assert_eq!(check_nqn_format(name), Ok(()), "{name}");
            assert_eq!(validate_nqn(name), Ok(()), "{name}");
        }
        let n = Nqn::new(DISCOVERY_NQN).unwrap();
        assert!(n.is_discovery() && !n.is_uuid_form());
        assert!(Nqn::new("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
            .unwrap()
            .is_uuid_form());
    }

    #[test]
    fn rejects_each_grammar_error() {
        let cases: &[(&str, NqnError)] = &[
            ("testnqn", NqnError::MissingPrefix),
            ("", NqnError::MissingPrefix),
            ("nqn.2014-8.org.x", NqnError::BadDate),
            ("nqn.2014-08", NqnError::BadDate),
            ("nqn.20a4-08.org.x", NqnError::BadDate),
            ("nqn.2014-08org.x", NqnError::BadDate),
            ("nqn.2014-13.org.x", NqnError::BadMonth { month: 13 }),
            ("nqn.2014-00.org.x", NqnError::BadMonth { month: 0 }),
            ("nqn.2014-08.", NqnError::EmptyDomain),
            ("nqn.2014-08.:foo", NqnError::EmptyDomain),
            ("nqn.2014-08.org..x:foo", NqnError::BadDomainLabel),
            ("nqn.2014-08.org.x.:foo", NqnError::BadDomainLabel),
            ("nqn.2014-08.org_x:foo", NqnError::BadDomainLabel),
            ("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf", NqnError::BadUuid),
            ("nqn.2014-08.org.nvmexpress:uuid:f81d4fae_7dec-11d0-a765-00a0c91e6bf6", NqnError::BadUuid),
            ("nqn.2014-08.org.nvmexpress:uuid:g81d4fae-7dec-11d0-a765-00a0c91e6bf6", NqnError::BadUuid),
            ("nqn.2014-08.org.x:a\tb", NqnError::ControlCharacter),
        ];
        for (name, err) in cases {
            assert_eq!(check_nqn_format(name), Err(*err), "{name:?}");
        }
    }

    #[test]
    fn accepts_the_names_linux_nvmet_accepts() {
        for name in ["testnqn", "storage-subsystem-1", "nqn.2014-08.org_x:foo", "nqn.2014-13.org.x", "a"] {
            assert_eq!(validate_nqn(name), Ok(()), "{name}");
            assert_eq!(Nqn::from_field(&field(name)).unwrap().as_str(), name);
        }
        assert_eq!(validate_nqn(""), Err(NqnError::Empty));
        assert_eq!(Nqn::from_field(&[0; NQN_FIELD_LEN]), Err(NqnError::Empty));
        assert_eq!(validate_nqn("test\nnqn"), Err(NqnError::ControlCharacter));
        assert_eq!(validate_nqn(&"a".repeat(224)), Err(NqnError::TooLong { len: 224 }));
    }

    #[test]
    fn length_limit_is_223_bytes() {
        let base = "nqn.2014-08.org.example:";
        let ok = format!("{base}{}", "a".repeat(NQN_MAX_LEN - base.len()));
        assert_eq!(ok.len(), 223);
        assert_eq!(validate_nqn(&ok), Ok(()));
        let long = format!("{ok}a");
        assert_eq!(validate_nqn(&long), Err(NqnError::TooLong { len: 224 }));
        assert_eq!(Nqn::from_field(&field(&long)), Err(NqnError::TooLong { len: 224 }));
    }

    #[test]
    fn field_parsing() {
        let f = field(DISCOVERY_NQN);
        assert_eq!(Nqn::from_field(&f).unwrap().as_str(), DISCOVERY_NQN);
        assert_eq!(Nqn::from_field(&[b'a'; NQN_FIELD_LEN]), Err(NqnError::NotTerminated));
        let mut bad = field("nqn.2014-08.org.x:");
        bad[18] = 0xff;
        assert_eq!(Nqn::from_field(&bad), Err(NqnError::NotUtf8));
        // Lenient reading keeps names that are not NQNs by the grammar.
        assert_eq!(nqn_field_text(&field("testnqn")).unwrap(), "testnqn");
        let mut out = [0xaau8; NQN_FIELD_LEN];
        write_nqn_field_text(&mut out, "testnqn").unwrap();
        assert_eq!(out, field("testnqn"));
        assert_eq!(write_nqn_field_text(&mut out, &"a".repeat(224)), Err(NqnError::TooLong { len: 224 }));
        assert_eq!(write_nqn_field_text(&mut out, "a\nb"), Err(NqnError::ControlCharacter));
        let mut out = [0xaau8; NQN_FIELD_LEN];
        Nqn::new(DISCOVERY_NQN).unwrap().write_field(&mut out);
        assert_eq!(out, f);
    }

    proptest! {
        #[test]
        fn field_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), NQN_FIELD_LEN)) {
            let f: [u8; NQN_FIELD_LEN] = bytes.try_into().unwrap();
            if let Ok(n) = Nqn::from_field(&f) {
                let mut out = [0u8; NQN_FIELD_LEN];
                n.write_field(&mut out);
                prop_assert_eq!(Nqn::from_field(&out).unwrap(), n);
            }
        }

        #[test]
        fn generated_names_validate(
            year in 1000u32..10000, month in 1u32..13,
            labels in proptest::collection::vec("[a-z0-9-]{1,12}", 1..5),
            suffix in proptest::option::of("[ -~]{0,80}"),
        ) {
            let mut name = format!("nqn.{year:04}-{month:02}.{}", labels.join("."));
            if let Some(s) = suffix { name.push(':'); name.push_str(&s); }
            prop_assert_eq!(check_nqn_format(&name), Ok(()));
            let f = field(&name);
            prop_assert_eq!(Nqn::from_field(&f).unwrap().as_str(), name.as_str());
        }

        #[test]
        fn validate_never_panics(text in "\\PC{0,300}") {
            let _ = validate_nqn(&text);
        }
    }
}
