//! `docs/config-reference.md` is exactly what `nvmf_config::reference::markdown()` generates from the annotated
//! examples and the schema (which fails when a schema key is undocumented). After changing the schema or an
//! example, regenerate it with `UPDATE_DOCS=1 cargo test -p nvmf-tests --test config_reference` and commit it.

use std::path::PathBuf;

fn reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/config-reference.md")
}

#[test]
fn config_reference_is_up_to_date() {
    let generated = nvmf_config::reference::markdown().expect("every schema key is documented in the examples");
    let path = reference_path();
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write docs/config-reference.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed.lines().zip(generated.lines()).position(|(a, b)| a != b);
        let line = first.unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{} is stale (first difference at line {}: {:?} should be {:?}); regenerate with \
             UPDATE_DOCS=1 cargo test -p nvmf-tests --test config_reference",
            path.display(),
            line + 1,
            committed.lines().nth(line).unwrap_or(""),
            generated.lines().nth(line).unwrap_or("")
        );
    }
}
