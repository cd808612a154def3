//! The configuration reference (`docs/config-reference.md`), generated so that it cannot drift from the code.
//!
//! Each key's words live in one place, the annotated examples (`config/examples/target.toml`, `host.toml`: the
//! comment lines above a key document it, a "Default …" sentence gives its default). Everything else comes from
//! the schema itself, by asking the real loader ([`TargetConfig::from_str`], [`HostConfig::from_str`]):
//! - the keys of each table: the loader's answer to an unknown key lists every key it accepts, so a schema key
//!   missing from the example (or a documented key the schema lacks) is an error, not a silently stale page;
//! - each key's type: the example cut off at the key, with the value replaced by an inline table, is rejected
//!   with the type the schema expects ("expected an integer", "a size", …), and enumerations with a probe string
//!   list their allowed values; a key that takes the table is a table, its values' type probed the same way.
//!
//! Runs at test time and in tools, never in a daemon.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::host::HostConfig;
use crate::target::TargetConfig;

/// The generated reference could not be built: the example and the schema disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The example does not load (so it cannot vouch for the keys it shows).
    #[error("{file} does not load: {message}")]
    ExampleInvalid {
        /// The example file.
        file: &'static str,
        /// The loader's error.
        message: String,
    },
    /// A key the schema accepts has no entry in the example.
    #[error("{file}: schema key `{key}` is not documented (add it, with a comment, to the example)")]
    Undocumented {
        /// The example file.
        file: &'static str,
        /// The key path.
        key: String,
    },
    /// A key in the example is not in the schema (only possible for commented-out keys).
    #[error("{file}: `{key}` is documented but the schema has no such key")]
    Unknown {
        /// The example file.
        file: &'static str,
        /// The key path.
        key: String,
    },
    /// A probe was not answered as expected.
    #[error("{file}: probing `{key}` gave no usable answer: {message}")]
    Probe {
        /// The example file.
        file: &'static str,
        /// The key path.
        key: String,
        /// The loader's answer.
        message: String,
    },
}

/// One configuration file's schema: its example and its loader.
#[derive(Debug, Clone, Copy)]
struct FileSchema {
    /// Heading.
    title: &'static str,
    /// Where the daemon reads it.
    installed: &'static str,
    /// The example's path in the repository.
    file: &'static str,
    /// The example's text.
    example: &'static str,
    /// The loader, reduced to its error message.
    load: fn(&str) -> Result<(), String>,
}

const TARGET: FileSchema = FileSchema {
    title: "nvmf-target",
    installed: "/etc/nvmf/target.toml",
    file: "config/examples/target.toml",
    example: include_str!("../examples/target.toml"),
    load: |text| TargetConfig::from_str(text, "probe").map(drop).map_err(|e| e.to_string()),
};

const HOST: FileSchema = FileSchema {
    title: "nvmf-host",
    installed: "/etc/nvmf/host.toml",
    file: "config/examples/host.toml",
    example: include_str!("../examples/host.toml"),
    load: |text| HostConfig::from_str(text, "probe").map(drop).map_err(|e| e.to_string()),
};

/// A table of the example: `[path]` or `[[path]]`.
#[derive(Debug)]
struct Table {
    path: String,
    array: bool,
    doc: String,
    keys: Vec<Key>,
}

/// A key of the example, with its comment and the line it is on.
#[derive(Debug)]
struct Key {
    name: String,
    doc: String,
    line: usize,
    /// `# key = value`: shown commented out (no sensible example value).
    commented: bool,
}

/// The whole reference: every file's tables and keys, as Markdown.
pub fn markdown() -> Result<String, ReferenceError> {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the annotated examples in `config/examples/` and checked against the configuration schema \
         by `nvmf_config::reference::markdown()`; do not edit. Regenerate with \
         `UPDATE_DOCS=1 cargo test -p nvmf-tests --test config_reference`.\n\n\
         Every key is checked when the file is loaded: unknown keys are errors, and every error names the file, \
         line, column and key path, what is wrong and what is allowed. `nvmf-target --check` prints the effective \
         configuration with every default written out.\n",
    );
    for schema in [TARGET, HOST] {
        out.push('\n');
        out.push_str(&file_reference(&schema)?);
    }
    Ok(out)
}

fn file_reference(schema: &FileSchema) -> Result<String, ReferenceError> {
    let file = schema.file;
    (schema.load)(schema.example).map_err(|message| ReferenceError::ExampleInvalid { file, message })?;
    let (intro, tables) = parse_example(schema.example);
    let lines: Vec<&str> = schema.example.lines().collect();
    check_coverage(schema, &tables, &lines)?;

    let mut out =
        format!("## {} (`{}`)\n\n{}\n\nExample: [`{file}`](../{file}).\n", schema.title, schema.installed, intro);
    for table in &tables {
        let header = if table.array { format!("[[{}]]", table.path) } else { format!("[{}]", table.path) };
        let _ = write!(out, "\n### `{header}`\n\n");
        if !table.doc.is_empty() {
            let _ = write!(out, "{}\n\n", table.doc);
        }
        if table.keys.is_empty() {
            out.push_str("No keys of its own.\n");
            continue;
        }
        out.push_str("| Key | Type | Default | Description |\n|---|---|---|---|\n");
        for key in &table.keys {
            let path = format!("{}.{}", table.path, key.name);
            let kind = probe_type(schema, &lines, key, &path)?;
            let (default, description) = split_default(&key.doc);
            let default = if default.is_empty() { "—".to_owned() } else { default };
            let note = if key.commented { " (shown commented out in the example)" } else { "" };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {}{note} |",
                key.name,
                cell(&kind),
                cell(&default),
                cell(&description)
            );
        }
    }
    Ok(out)
}

/// Escape a Markdown table cell (`<UUID>` must not read as an HTML tag).
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;")
}

/// The example's opening comment (its first paragraph of comments) and its tables in order of first appearance.
fn parse_example(example: &str) -> (String, Vec<Table>) {
    let mut intro = Vec::new();
    let mut in_intro = true;
    let mut tables: Vec<Table> = Vec::new();
    let mut current: Option<usize> = None;
    let mut repeat = false;
    let mut pending: Vec<&str> = Vec::new();
    let mut previous_doc: Option<String> = None;
    let mut skip_until_bracket = false;
    for (line_no, raw) in example.lines().enumerate() {
        let line = raw.trim_end();
        if skip_until_bracket {
            skip_until_bracket = !line.trim_start().starts_with(']');
            continue;
        }
        if line.trim().is_empty() {
            if in_intro && !intro.is_empty() {
                in_intro = false;
            }
            pending.clear();
            previous_doc = None;
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            if in_intro {
                intro.push(comment.to_owned());
                continue;
            }
            if let (Some(t), Some((name, _))) = (current, key_line(comment)) {
                add_key(&mut tables[t], repeat, name, &pending, None, line_no, true);
                pending.clear();
                previous_doc = None;
                continue;
            }
            pending.push(comment);
            previous_doc = None;
            continue;
        }
        in_intro = false;
        if let Some(header) = line.strip_prefix('[') {
            let array = header.starts_with('[');
            let path = header.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            repeat = tables.iter().any(|t| t.path == path);
            current = Some(match tables.iter().position(|t| t.path == path) {
                Some(i) => i,
                None => {
                    tables.push(Table { path, array, doc: pending.join(" "), keys: Vec::new() });
                    tables.len() - 1
                }
            });
            pending.clear();
            previous_doc = None;
            continue;
        }
        if let (Some(t), Some((name, value))) = (current, key_line(line)) {
            skip_until_bracket = value.starts_with('[') && !value.contains(']');
            let doc = add_key(&mut tables[t], repeat, name, &pending, previous_doc.as_deref(), line_no, false);
            previous_doc = Some(doc);
            pending.clear();
        }
    }
    // A key without a comment of its own that another key's comment names (`memory` under `path`'s) shares it.
    for table in &mut tables {
        let docs: Vec<String> = table.keys.iter().map(|k| k.doc.clone()).collect();
        for key in table.keys.iter_mut().filter(|k| k.doc.is_empty()) {
            let mention = format!("`{}`", key.name);
            if let Some(doc) = docs.iter().find(|d| d.contains(&mention)) {
                key.doc.clone_from(doc);
            }
        }
    }
    // Empty comment lines separate the opening comment's paragraphs.
    let paragraphs: Vec<String> =
        intro.split(String::is_empty).map(|p| p.join(" ")).filter(|p| !p.is_empty()).collect();
    (paragraphs.join("\n\n"), tables)
}

/// `name = value` with a bare key name.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let bare = !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    bare.then(|| (name, value.trim()))
}

/// Record key `name` of `table` (once: repeated tables only add keys not seen yet, and their comments are notes
/// about the example, not documentation). A key right below another without a comment shares its doc. Returns
/// the doc recorded.
fn add_key(
    table: &mut Table,
    repeat: bool,
    name: &str,
    pending: &[&str],
    previous_doc: Option<&str>,
    line: usize,
    commented: bool,
) -> String {
    if let Some(key) = table.keys.iter().find(|k| k.name == name) {
        return key.doc.clone();
    }
    let doc = match (repeat, pending.is_empty(), previous_doc) {
        (false, false, _) => pending.join(" "),
        (false, true, Some(previous)) => previous.to_owned(),
        _ => String::new(),
    };
    table.keys.push(Key { name: name.to_owned(), doc: doc.clone(), line, commented });
    doc
}

/// Every key and sub-table the schema accepts in each table is documented, and nothing else.
fn check_coverage(schema: &FileSchema, tables: &[Table], lines: &[&str]) -> Result<(), ReferenceError> {
    let file = schema.file;
    let mut paths: Vec<(String, Option<usize>)> = vec![(String::new(), None)];
    for table in tables {
        let header = lines.iter().position(|l| {
            let l = l.trim();
            l == format!("[{}]", table.path) || l == format!("[[{}]]", table.path)
        });
        paths.push((table.path.clone(), header));
    }
    for (path, header) in paths {
        let mut text: String = header.map_or(String::new(), |h| lines[..=h].join("\n"));
        text.push_str("\n__probe__ = 1\n");
        let message = (schema.load)(&text).err().unwrap_or_default();
        let accepted = expected_names(&message, "unknown field").ok_or_else(|| ReferenceError::Probe {
            file,
            key: if path.is_empty() { "(top level)".to_owned() } else { path.clone() },
            message: message.clone(),
        })?;
        let mut documented: BTreeSet<String> = BTreeSet::new();
        for table in tables {
            match (&path, table.path.rsplit_once('.')) {
                (p, Some((parent, child))) if parent == p => documented.insert(child.to_owned()),
                (p, None) if p.is_empty() => documented.insert(table.path.clone()),
                _ => false,
            };
            if table.path == path {
                documented.extend(table.keys.iter().filter(|k| !k.doc.is_empty()).map(|k| k.name.clone()));
            }
        }
        let full = |name: &str| if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
        if let Some(missing) = accepted.iter().find(|name| !documented.contains(*name)) {
            return Err(ReferenceError::Undocumented { file, key: full(missing) });
        }
        if let Some(extra) = documented.iter().find(|name| !accepted.contains(*name)) {
            return Err(ReferenceError::Unknown { file, key: full(extra) });
        }
    }
    Ok(())
}

/// The backquoted names after "expected" in a loader message that contains `marker`.
fn expected_names(message: &str, marker: &str) -> Option<BTreeSet<String>> {
    let at = message.find(marker)?;
    let rest = &message[at..];
    if rest.contains("there are no fields") {
        return Some(BTreeSet::new());
    }
    let rest = &rest[rest.find("expected")?..];
    Some(rest.split('`').skip(1).step_by(2).map(str::to_owned).collect())
}

/// The key's type as the schema states it: the example up to the key with its value replaced by a table.
fn probe_type(schema: &FileSchema, lines: &[&str], key: &Key, path: &str) -> Result<String, ReferenceError> {
    let probe = |value: &str| {
        let mut text = lines[..key.line].join("\n");
        let _ = write!(text, "\n{} = {value}\n", key.name);
        (schema.load)(&text).err().unwrap_or_default()
    };
    let expected = |message: &str| {
        let at = message.find("invalid type: table, expected ")?;
        Some(message[at + "invalid type: table, expected ".len()..].trim().to_owned())
    };
    let message = probe("{}");
    if message.is_empty() {
        // `{}` is accepted: the key is a table of its own (keys chosen by the user); its values' type.
        let value = probe("{ __probe__ = {} }");
        return Ok(match expected(&value).as_deref() {
            Some("a string") => "table of strings".to_owned(),
            Some("an integer") => "table of integers".to_owned(),
            other => format!("table ({})", other.unwrap_or("mixed")),
        });
    }
    let kind = match expected(&message).as_deref() {
        Some("an integer") => "integer".to_owned(),
        Some("a boolean") => "boolean".to_owned(),
        Some("a string") => "string".to_owned(),
        Some(size) if size.starts_with("a size") => "size (`\"1GiB\"` or bytes)".to_owned(),
        Some("an array") => {
            let element = probe("[{}]");
            match expected(&element).as_deref() {
                Some("an integer") => "array of integers".to_owned(),
                Some("a string") => "array of strings".to_owned(),
                other => format!("array ({})", other.unwrap_or("mixed")),
            }
        }
        Some(other) => other.to_owned(),
        None => {
            let variant = probe("\"__probe__\"");
            let names = expected_names(&variant, "unknown variant").ok_or_else(|| ReferenceError::Probe {
                file: schema.file,
                key: path.to_owned(),
                message: message.clone(),
            })?;
            let names: Vec<String> = names.iter().map(|n| format!("`\"{n}\"`")).collect();
            format!("one of {}", names.join(", "))
        }
    };
    Ok(kind)
}

/// The "Default …" sentence of `doc` (without the word) and the rest of the doc.
fn split_default(doc: &str) -> (String, String) {
    let mut default = String::new();
    let mut rest = Vec::new();
    for sentence in sentences(doc) {
        let value = ["Defaults ", "Default: ", "Default "].iter().find_map(|p| sentence.strip_prefix(p));
        match value {
            Some(value) if default.is_empty() => default = value.trim_end_matches('.').trim().to_owned(),
            _ => rest.push(sentence),
        }
    }
    (default, rest.join(" "))
}

/// `doc` split after each ". " (a full stop followed by a space and a capital letter or quote).
fn sentences(doc: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = doc.as_bytes();
    for i in 0..bytes.len().saturating_sub(2) {
        let next = bytes[i + 2];
        let starts = next.is_ascii_uppercase() || next.is_ascii_digit() || next == b'"' || next == b'`';
        if bytes[i] == b'.' && bytes[i + 1] == b' ' && starts {
            out.push(doc[start..=i].trim());
            start = i + 2;
        }
    }
    out.push(doc[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_split_from_the_description() {
        let (default, rest) = split_default("A power of two from 4KiB to 16MiB. Default \"1MiB\". Pool buffers.");
        assert_eq!((default.as_str(), rest.as_str()), ("\"1MiB\"", "A power of two from 4KiB to 16MiB. Pool buffers."));
        let (default, _) = split_default("Number of reactors. Default: the length of `cpus`, else the CPUs.");
        assert_eq!(default, "the length of `cpus`, else the CPUs");
        assert_eq!(split_default("Required.").0, "");
    }

    #[test]
    fn example_comments_become_docs_and_shared_comments_are_shared() {
        let example =
            "# Intro line one,\n# line two.\n\n# The table.\n[t]\n# Lowest. Defaults 1 and 9.\nlo = 1\nhi = 9\n\
                       # One of `a` or `b`.\na = 1\n# comment = \"shown\"\n\n[[t.items]]\nx = [\n  1,\n]\n\n# A note.\n\
                       [[t.items]]\n# a note about the example, not a doc\nb = 2\n";
        let (intro, tables) = parse_example(example);
        assert_eq!(intro, "Intro line one, line two.");
        assert_eq!(tables.len(), 2);
        assert_eq!((tables[0].path.as_str(), tables[0].doc.as_str(), tables[0].array), ("t", "The table.", false));
        let keys: Vec<(&str, &str, bool)> =
            tables[0].keys.iter().map(|k| (k.name.as_str(), k.doc.as_str(), k.commented)).collect();
        assert_eq!(
            keys,
            [
                ("lo", "Lowest. Defaults 1 and 9.", false),
                ("hi", "Lowest. Defaults 1 and 9.", false),
                ("a", "One of `a` or `b`.", false),
                ("comment", "", true),
            ]
        );
        assert!(tables[1].array);
        let items: Vec<(&str, &str)> = tables[1].keys.iter().map(|k| (k.name.as_str(), k.doc.as_str())).collect();
        // `x` has no comment; `b`, in a repeated table, takes the doc of the key that names it.
        assert_eq!(items, [("x", ""), ("b", "")]);
    }

    #[test]
    fn loader_messages_name_the_keys() {
        let names = expected_names("t:1:1: unknown field `__probe__`, expected one of `a`, `b_c`", "unknown field");
        assert_eq!(names.unwrap().into_iter().collect::<Vec<_>>(), ["a", "b_c"]);
        let one = expected_names("unknown field `__probe__`, expected `only`", "unknown field").unwrap();
        assert_eq!(one.into_iter().collect::<Vec<_>>(), ["only"]);
        assert!(expected_names("unknown field `x`, there are no fields", "unknown field").unwrap().is_empty());
        assert!(expected_names("something else", "unknown field").is_none());
    }

    #[test]
    fn both_examples_are_covered_and_typed() {
        let text = markdown().unwrap();
        for row in [
            "| `mdts` | size (`\"1GiB\"` or bytes) | \"1MiB\" |",
            "| `transport` | one of `\"rdma\"`, `\"tcp\"` |",
            "| `cpus` | array of integers |",
            "| `header_digest` | boolean | true |",
            "| `ana_group_states` | table of strings | {} (every group in ana_state) |",
            "### `[[subsystem.namespace]]`",
            "| `rbd` | string | — |",
            "| `ceph_conf` | string | \"/etc/ceph/ceph.conf\" |",
            "## nvmf-host (`/etc/nvmf/host.toml`)",
        ] {
            assert!(text.contains(row), "{row} missing from:\n{text}");
        }
        // `memory` is documented by `path`'s comment, which names it.
        assert!(text.lines().any(|l| l.starts_with("| `memory` | size") && l.contains("exactly one of `path`")));
    }

    #[test]
    fn a_schema_key_missing_from_the_example_is_an_error() {
        let example = TARGET.example.replace("max_io_queues = 128\n", "");
        let schema = FileSchema { example: Box::leak(example.into_boxed_str()), ..TARGET };
        assert_eq!(
            file_reference(&schema).unwrap_err(),
            ReferenceError::Undocumented { file: TARGET.file, key: "target.max_io_queues".to_owned() }
        );
        let example = TARGET.example.replace("[target]\n", "[target]\n# Not a key.\n# frobnicate = 3\n");
        let schema = FileSchema { example: Box::leak(example.into_boxed_str()), ..TARGET };
        assert_eq!(
            file_reference(&schema).unwrap_err(),
            ReferenceError::Unknown { file: TARGET.file, key: "target.frobnicate".to_owned() }
        );
    }
}
