//! A span index of a TOML document: which byte range each key and value occupies.
//!
//! Serde's typed structs forget where their values came from, so the loader parses the text a second time into
//! this small tree of spans. It answers two questions: "which key path holds this byte offset?" (to name the key
//! in a TOML type error, whose span the parser gives) and "where is this key path?" (to put a line on a
//! semantic validation error). A key that is absent (a defaulted value) is placed at its nearest present
//! ancestor, so every error carries a line.

use std::fmt;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

use crate::error::{KeyPath, KeySegment};

/// A parsed value with only its shape kept.
#[derive(Debug)]
enum Node {
    Table(Vec<(Key, Spanned<Node>)>),
    Array(Vec<Spanned<Node>>),
    Leaf,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            if key.span.is_none() {
                // Only a datetime's private field has no span: the value is a leaf.
                let _ = map.next_value::<serde::de::IgnoredAny>()?;
                return Ok(Node::Leaf);
            }
            let value = map.next_value::<Spanned<Node>>()?;
            entries.push((key, value));
        }
        Ok(Node::Table(entries))
    }
}

/// A table key with its span. `toml::Spanned<String>` cannot be used: toml hands a datetime to serde as a map
/// whose one key has no span, and `Spanned` fails on it. So this speaks `Spanned`'s protocol (a struct with these
/// reserved names, which toml's key deserializer recognises) and also accepts a plain string (span `None`). The
/// span tests below catch any change of the protocol.
#[derive(Debug)]
struct Key {
    name: String,
    span: Option<Range<usize>>,
}

impl Key {
    fn get_ref(&self) -> &String {
        &self.name
    }

    fn span(&self) -> Range<usize> {
        self.span.clone().unwrap_or(0..0)
    }
}

const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const SPANNED_FIELDS: &[&str] =
    &["$__serde_spanned_private_start", "$__serde_spanned_private_end", "$__serde_spanned_private_value"];

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table key")
            }
            fn visit_str<E>(self, name: &str) -> Result<Key, E> {
                Ok(Key { name: name.to_owned(), span: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
                let (mut start, mut end, mut name) = (None, None, None);
                while let Some(field) = map.next_key::<String>()? {
                    match field.as_str() {
                        f if f == SPANNED_FIELDS[0] => start = Some(map.next_value::<usize>()?),
                        f if f == SPANNED_FIELDS[1] => end = Some(map.next_value::<usize>()?),
                        _ => name = Some(map.next_value::<String>()?),
                    }
                }
                let missing = || serde::de::Error::custom("spanned key without its span");
                Ok(Key {
                    name: name.ok_or_else(missing)?,
                    span: Some(start.ok_or_else(missing)?..end.ok_or_else(missing)?),
                })
            }
        }
        deserializer.deserialize_struct(SPANNED_NAME, SPANNED_FIELDS, KeyVisitor)
    }
}

/// The span index of one document.
#[derive(Debug)]
pub(crate) struct SpanIndex {
    root: Node,
}

impl SpanIndex {
    /// Index `text`; `None` when it is not valid TOML (the typed parse reports that error itself).
    pub(crate) fn parse(text: &str) -> Option<SpanIndex> {
        toml::from_str::<Node>(text).ok().map(|root| SpanIndex { root })
    }

    /// The byte range of `path`: the value's span when the full path is present, else the span of the nearest
    /// present ancestor (a table element's span, or the key of a table). The root is placed at offset 0.
    pub(crate) fn span_of(&self, path: &KeyPath) -> Range<usize> {
        let mut node = &self.root;
        let mut best = 0..0;
        for segment in path.segments() {
            let next = match (node, segment) {
                (Node::Table(entries), KeySegment::Key(name)) => {
                    entries.iter().find(|(key, _)| key.get_ref() == name).map(|(key, value)| {
                        // A table's own span may cover its whole body; its key is a more precise place.
                        let span = if matches!(value.get_ref(), Node::Leaf | Node::Array(_)) {
                            value.span()
                        } else {
                            key.span()
                        };
                        (value.get_ref(), span)
                    })
                }
                (Node::Array(items), KeySegment::Index(index)) => {
                    items.get(*index).map(|item| (item.get_ref(), item.span()))
                }
                _ => None,
            };
            match next {
                Some((child, span)) => {
                    node = child;
                    best = span;
                }
                None => break,
            }
        }
        best
    }

    /// The deepest key path whose key or value contains byte `offset` (the root when none does).
    pub(crate) fn path_at(&self, offset: usize) -> KeyPath {
        deepest_at(&self.root, offset, &KeyPath::root()).unwrap_or_default()
    }
}

/// A table's span does not cover its sub-tables (`[[subsystem.namespace]]` comes after `[[subsystem]]`'s body), so
/// every child is searched, deepest match first.
fn deepest_at(node: &Node, offset: usize, path: &KeyPath) -> Option<KeyPath> {
    match node {
        Node::Table(entries) => entries.iter().find_map(|(key, value)| {
            let child = path.key(key.get_ref());
            deepest_at(value.get_ref(), offset, &child)
                .or_else(|| (contains(&key.span(), offset) || contains(&value.span(), offset)).then_some(child))
        }),
        Node::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            let child = path.index(index);
            deepest_at(item.get_ref(), offset, &child).or_else(|| contains(&item.span(), offset).then_some(child))
        }),
        Node::Leaf => None,
    }
}

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.start <= offset && offset < span.end.max(span.start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[target]
mdts = "1MiB"

[[subsystem]]
nqn = "nqn.2024-01.io.example:a"

[[subsystem]]
nqn = "nqn.2024-01.io.example:b"
hosts = ["h1", "h2"]

[[subsystem.namespace]]
memory = "1GiB"
block_size = 1024
"#;

    fn line_of(offset: usize) -> usize {
        TEXT[..offset].matches('\n').count() + 1
    }

    #[test]
    fn locates_present_keys_at_their_value() {
        let index = SpanIndex::parse(TEXT).unwrap();
        let path = KeyPath::root().key("subsystem").index(1).key("namespace").index(0).key("block_size");
        let span = index.span_of(&path);
        assert_eq!(&TEXT[span.clone()], "1024");
        assert_eq!(line_of(span.start), 14);
        let hosts = index.span_of(&KeyPath::root().key("subsystem").index(1).key("hosts").index(1));
        assert_eq!(&TEXT[hosts], "\"h2\"");
    }

    #[test]
    fn absent_keys_fall_back_to_the_nearest_ancestor() {
        let index = SpanIndex::parse(TEXT).unwrap();
        let absent = KeyPath::root().key("subsystem").index(1).key("namespace").index(0).key("nsid");
        let element = KeyPath::root().key("subsystem").index(1).key("namespace").index(0);
        assert_eq!(index.span_of(&absent), index.span_of(&element));
        assert_eq!(line_of(index.span_of(&element).start), 12, "the [[subsystem.namespace]] header");
        let sub0 = index.span_of(&KeyPath::root().key("subsystem").index(0).key("serial"));
        assert_eq!(line_of(sub0.start), 5, "the first [[subsystem]] header");
        assert_eq!(index.span_of(&KeyPath::root().key("reactors").key("threads")), 0..0);
    }

    #[test]
    fn finds_the_path_at_an_offset() {
        let index = SpanIndex::parse(TEXT).unwrap();
        let at = TEXT.find("1024").unwrap() + 1;
        assert_eq!(index.path_at(at).to_string(), "subsystem[1].namespace[0].block_size");
        let at = TEXT.find("\"h2\"").unwrap();
        assert_eq!(index.path_at(at).to_string(), "subsystem[1].hosts[1]");
        let at = TEXT.find("mdts").unwrap();
        assert_eq!(index.path_at(at).to_string(), "target.mdts");
    }

    #[test]
    fn invalid_toml_has_no_index() {
        assert!(SpanIndex::parse("a = ").is_none());
    }
}
