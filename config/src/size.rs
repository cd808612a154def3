//! Byte sizes written as text: `"4096"`, `"512KiB"`, `"1G"`, `"2 TiB"`, `"10GB"`.
//!
//! Units (case-insensitive): none or `B` = bytes; `K`, `M`, `G`, `T` and `KiB`, `MiB`, `GiB`, `TiB` are powers of
//! 1024; `KB`, `MB`, `GB`, `TB` are powers of 1000 (SI), as their names say. The number is a whole decimal number;
//! one space may separate it from the unit. [`format_size`] writes the largest binary unit that divides the
//! value exactly, so a size read back is the same number.

use crate::error::ValueError;

/// What [`parse_size`] accepts, for error messages.
pub const SIZE_SYNTAX: &str = "a whole number of bytes with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB (powers of \
                               1024) or KB, MB, GB, TB (powers of 1000), e.g. \"1GiB\"";

const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1 << 10),
    ("kib", 1 << 10),
    ("kb", 1_000),
    ("m", 1 << 20),
    ("mib", 1 << 20),
    ("mb", 1_000_000),
    ("g", 1 << 30),
    ("gib", 1 << 30),
    ("gb", 1_000_000_000),
    ("t", 1 << 40),
    ("tib", 1 << 40),
    ("tb", 1_000_000_000_000),
];

/// Parse a size string into bytes.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let trimmed = text.trim();
    let digits_end = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(ValueError::new(format!("size {text:?} does not start with a number"), SIZE_SYNTAX));
    }
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_lowercase();
    let Some(&(_, multiplier)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(ValueError::new(format!("size {text:?} has an unknown unit {unit:?}"), SIZE_SYNTAX));
    };
    let too_large = || ValueError::new(format!("size {text:?} does not fit in 64 bits"), "at most 16EiB - 1 byte");
    let number: u64 = number.parse().map_err(|_| too_large())?;
    number.checked_mul(multiplier).ok_or_else(too_large)
}

/// Write `bytes` with the largest binary unit that divides it (`1073741824` → `"1GiB"`, `1000` → `"1000"`).
pub fn format_size(bytes: u64) -> String {
    const BINARY: &[(&str, u64)] = &[("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for &(unit, multiplier) in BINARY {
        if bytes != 0 && bytes % multiplier == 0 {
            return format!("{}{unit}", bytes / multiplier);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_every_unit() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("512B", 512),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("4KB", 4000),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("1MB", 1_000_000),
            ("1G", 1 << 30),
            ("1 GiB", 1 << 30),
            ("10GB", 10_000_000_000),
            ("1T", 1 << 40),
            ("2TiB", 2 << 40),
            ("1TB", 1_000_000_000_000),
            (" 8g ", 8 << 30),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn rejects_with_a_reason() {
        let err = parse_size("GiB").unwrap_err();
        assert_eq!(err.problem, "size \"GiB\" does not start with a number");
        assert_eq!(err.allowed, SIZE_SYNTAX);
        let err = parse_size("1.5G").unwrap_err();
        assert_eq!(err.problem, "size \"1.5G\" has an unknown unit \".5g\"");
        let err = parse_size("1PiB").unwrap_err();
        assert_eq!(err.problem, "size \"1PiB\" has an unknown unit \"pib\"");
        assert!(parse_size("-1").is_err());
        assert!(parse_size("").is_err());
        let err = parse_size("16777216TiB").unwrap_err();
        assert_eq!(err.problem, "size \"16777216TiB\" does not fit in 64 bits");
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn formats_with_the_largest_exact_unit() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(512), "512");
        assert_eq!(format_size(4096), "4KiB");
        assert_eq!(format_size(1 << 20), "1MiB");
        assert_eq!(format_size(3 << 30), "3GiB");
        assert_eq!(format_size((1 << 30) + 512), "1073742336");
        assert_eq!(format_size((1 << 30) + 1024), "1048577KiB");
        assert_eq!(format_size(5 << 40), "5TiB");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(bytes in any::<u64>()) {
            prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }

        #[test]
        fn unit_multiplies(number in 0u64..(1 << 20), unit in 0usize..UNITS.len()) {
            let (name, multiplier) = UNITS[unit];
            prop_assert_eq!(parse_size(&format!("{number}{name}")), Ok(number * multiplier));
        }

        #[test]
        fn never_panics(text in "\\PC{0,24}") {
            let _ = parse_size(&text);
        }
    }
}
