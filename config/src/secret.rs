//! DH-HMAC-CHAP secrets in configuration files, as both daemons take them: inline (`name = "DHHC-1:…:"`) or from
//! a file (`name_file = "…"`, relative to the configuration file), never both; a file must be readable by its owner
//! only (as ssh insists of its keys), and no error quotes a secret. The text read is wiped once parsed.

use std::path::{Path, PathBuf};

use nvmf_common::fabrics::auth::secret::DhchapSecret;

use crate::error::{KeyPath, Problem};

/// A secret as written in a file: `Debug` shows no part of it.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub(crate) struct RawSecret(pub String);

impl std::fmt::Debug for RawSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

impl Drop for RawSecret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

const SECRET_ALLOWED: &str = "a secret as `nvmf-host gen-dhchap-key` (or `nvme gen-dhchap-key`) prints it: \
                              \"DHHC-1:00:<base64>:\"";

/// The secret of `name` (inline) or `name_file`, with the file it came from.
pub(crate) fn secret_with_source(
    inline: Option<&RawSecret>,
    file: Option<&str>,
    key: &KeyPath,
    name: &str,
    base: Option<&Path>,
) -> Result<Option<(DhchapSecret, Option<PathBuf>)>, Problem> {
    let file_key = key.key(&format!("{name}_file"));
    let (text, at, path) = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err(Problem::new(file_key, format!("both {name} and {name}_file are set"), "one of them"))
        }
        (Some(s), None) => (zeroize::Zeroizing::new(s.0.clone()), key.key(name), None),
        (None, Some(path)) => {
            if path.is_empty() {
                return Err(Problem::new(file_key, "the path is empty", "a file holding the secret"));
            }
            let path = match base {
                Some(dir) if Path::new(path).is_relative() => dir.join(path),
                _ => PathBuf::from(path),
            };
            (read_secret_file(&path, &file_key)?, file_key, Some(path))
        }
        (None, None) => return Ok(None),
    };
    let secret = DhchapSecret::parse(&text).map_err(|e| Problem::new(at, e.to_string(), SECRET_ALLOWED))?;
    Ok(Some((secret, path)))
}

/// The secret of `name` (inline) or `name_file`.
pub(crate) fn secret(
    inline: Option<&RawSecret>,
    file: Option<&str>,
    key: &KeyPath,
    name: &str,
    base: Option<&Path>,
) -> Result<Option<DhchapSecret>, Problem> {
    Ok(secret_with_source(inline, file, key, name, base)?.map(|(s, _)| s))
}

/// A secret file's text; refused when its group or others may read it (the secret would not be one).
fn read_secret_file(path: &Path, key: &KeyPath) -> Result<zeroize::Zeroizing<String>, Problem> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| Problem::new(key.clone(), format!("cannot read {shown}: {e}"), "a file holding the secret"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        return Err(Problem::new(
            key.clone(),
            format!("{shown} is readable by its group or others (mode {mode:04o})"),
            "a file only its owner can read: chmod 600",
        ));
    }
    std::fs::read_to_string(path)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| Problem::new(key.clone(), format!("cannot read {shown}: {e}"), "a file holding the secret"))
}
