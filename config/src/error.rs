//! Configuration errors: where (file, line, column, key path), what is wrong and what is allowed.
//!
//! Validation code produces a [`Problem`] (a key path, a description and the allowed values) without knowing
//! where the key sits in the file; the loader places it with the document's span index and returns a
//! [`ConfigError`]. Quick-start flags place it on the flag that produced the key instead.

use std::fmt;
use std::path::PathBuf;

/// One step of a [`KeyPath`]: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySegment {
    /// A key of a table (`block_size`).
    Key(String),
    /// An element of an array or array of tables (`[1]`).
    Index(usize),
}

/// The path of a key from the document root, shown as `subsystem[1].namespace[0].block_size`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(Vec<KeySegment>);

impl KeyPath {
    /// The document root (shown as `(top level)`).
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    /// This path extended by a table key.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(KeySegment::Key(key.to_owned()));
        KeyPath(segments)
    }

    /// This path extended by an array index.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(KeySegment::Index(index));
        KeyPath(segments)
    }

    /// The segments from the root.
    pub fn segments(&self) -> &[KeySegment] {
        &self.0
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                KeySegment::Key(key) if i == 0 => f.write_str(key)?,
                KeySegment::Key(key) => write!(f, ".{key}")?,
                KeySegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A position in a configuration text: its origin (a file path or a name such as `<string>`), 1-based line and
/// 1-based column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file path or the name given to [`crate::TargetConfig::from_str`].
    pub origin: String,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` of `text` (clamped to the text's length).
    pub fn at(origin: &str, text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { origin: origin.to_owned(), line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.origin, self.line, self.column)
    }
}

/// A validation failure not yet placed in a file: the key, what is wrong and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The offending key (or, for a missing key, the table that lacks it).
    pub key: KeyPath,
    /// What is wrong, naming the value found.
    pub problem: String,
    /// What is allowed instead.
    pub allowed: String,
}

impl Problem {
    /// A problem at `key`.
    pub fn new(key: KeyPath, problem: impl Into<String>, allowed: impl Into<String>) -> Self {
        Problem { key, problem: problem.into(), allowed: allowed.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; allowed: {}", self.key, self.problem, self.allowed)
    }
}

/// What is wrong with one value, before it is tied to a key or a flag (size strings, identifiers, addresses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}; allowed: {allowed}")]
pub struct ValueError {
    /// What is wrong, naming the value found.
    pub problem: String,
    /// What is allowed instead.
    pub allowed: String,
}

impl ValueError {
    /// A value error.
    pub fn new(problem: impl Into<String>, allowed: impl Into<String>) -> Self {
        ValueError { problem: problem.into(), allowed: allowed.into() }
    }

    /// Tie this error to `key`.
    pub fn at(self, key: KeyPath) -> Problem {
        Problem { key, problem: self.problem, allowed: self.allowed }
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("{}: cannot read the configuration file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not TOML, or a value has the wrong type, or a key is unknown or missing (reported by the TOML
    /// parser; its message says what was expected).
    #[error("{location}: {}{message}", key.as_ref().map(|key| format!("{key}: ")).unwrap_or_default())]
    Syntax {
        /// Where.
        location: Location,
        /// The key the error is in, when the document could be parsed far enough to tell.
        key: Option<KeyPath>,
        /// The parser's description, including what it expected.
        message: String,
    },
    /// A value is well-typed but not valid (out of range, inconsistent with another key, a duplicate).
    #[error("{location}: {key}: {problem}; allowed: {allowed}")]
    Invalid {
        /// Where the key (or the table lacking it) is.
        location: Location,
        /// The key path.
        key: KeyPath,
        /// What is wrong.
        problem: String,
        /// What is allowed.
        allowed: String,
    },
    /// A quick-start command-line flag is not valid.
    #[error("{flag} {value:?}: {problem}; allowed: {allowed}")]
    Flag {
        /// The flag, e.g. `--namespace`.
        flag: &'static str,
        /// The value given to the flag (empty for a flag without value).
        value: String,
        /// What is wrong.
        problem: String,
        /// What is allowed.
        allowed: String,
    },
}

impl ConfigError {
    /// The location in the file, for errors that come from a file's text.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Syntax { location, .. } | ConfigError::Invalid { location, .. } => Some(location),
            ConfigError::Read { .. } | ConfigError::Flag { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_path_display() {
        let path = KeyPath::root().key("subsystem").index(1).key("namespace").index(0).key("block_size");
        assert_eq!(path.to_string(), "subsystem[1].namespace[0].block_size");
        assert_eq!(KeyPath::root().to_string(), "(top level)");
    }

    #[test]
    fn location_counts_lines_and_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(Location::at("f", text, 0).to_string(), "f:1:1");
        let offset = text.find('2').unwrap();
        assert_eq!(Location::at("f", text, offset).to_string(), "f:2:6");
        // Past the end and inside a multi-byte character are clamped, never panic.
        assert_eq!(Location::at("f", text, 1000).line, 3);
        assert_eq!(Location::at("f", text, 8).column, 2);
    }
}
