//! DH-HMAC-CHAP secrets and TLS pre-shared keys in configuration files, as both daemons take them: inline (`name = "DHHC-1:…:"`) or from
//! a file (`name_file = "…"`, relative to the configuration file), never both; a file must be its owner's alone,
//! mode 0600 or 0400 and owned by the daemon's user or root (as ssh insists of its keys: [`private_file_problem`]),
//! and no error quotes a secret. The text read is wiped once parsed.

use std::path::{Path, PathBuf};

use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::tls::ConfiguredPsk;

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

/// A secret's text, where it was found (for errors) and the file it came from (`None`: inline).
type SecretText = (zeroize::Zeroizing<String>, KeyPath, Option<PathBuf>);

/// The text of `name` (inline) or `name_file`, where it was found (for errors) and the file it came from.
fn secret_text(
    inline: Option<&RawSecret>,
    file: Option<&str>,
    key: &KeyPath,
    name: &str,
    base: Option<&Path>,
) -> Result<Option<SecretText>, Problem> {
    let file_key = key.key(&format!("{name}_file"));
    match (inline, file) {
        (Some(_), Some(_)) => {
            Err(Problem::new(file_key, format!("both {name} and {name}_file are set"), "one of them"))
        }
        (Some(s), None) => Ok(Some((zeroize::Zeroizing::new(s.0.clone()), key.key(name), None))),
        (None, Some(path)) => {
            if path.is_empty() {
                return Err(Problem::new(file_key, "the path is empty", "a file holding the secret"));
            }
            let path = match base {
                Some(dir) if Path::new(path).is_relative() => dir.join(path),
                _ => PathBuf::from(path),
            };
            Ok(Some((read_secret_file(&path, &file_key)?, file_key, Some(path))))
        }
        (None, None) => Ok(None),
    }
}

/// The secret of `name` (inline) or `name_file`, with the file it came from.
pub(crate) fn secret_with_source(
    inline: Option<&RawSecret>,
    file: Option<&str>,
    key: &KeyPath,
    name: &str,
    base: Option<&Path>,
) -> Result<Option<(DhchapSecret, Option<PathBuf>)>, Problem> {
    let Some((text, at, path)) = secret_text(inline, file, key, name, base)? else { return Ok(None) };
    let secret = DhchapSecret::parse(&text).map_err(|e| Problem::new(at, e.to_string(), SECRET_ALLOWED))?;
    Ok(Some((secret, path)))
}

const TLS_KEY_ALLOWED: &str = "a PSK in the interchange format, as `nvmf-host gen-tls-key` (or `nvme gen-tls-key`) \
                               prints it: \"NVMeTLSkey-1:01:<base64>:\"";

/// The TLS PSK of `name` (inline) or `name_file` (the interchange format), with the file it came from.
pub(crate) fn tls_key_with_source(
    inline: Option<&RawSecret>,
    file: Option<&str>,
    key: &KeyPath,
    name: &str,
    base: Option<&Path>,
) -> Result<Option<(ConfiguredPsk, Option<PathBuf>)>, Problem> {
    let Some((text, at, path)) = secret_text(inline, file, key, name, base)? else { return Ok(None) };
    let psk = ConfiguredPsk::parse(text.trim()).map_err(|e| Problem::new(at, e.to_string(), TLS_KEY_ALLOWED))?;
    Ok(Some((psk, path)))
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

/// Why the file `meta` describes cannot hold a secret, if it cannot: its group or others may read or write it, or
/// it is executable (anything but mode 0600, 0400 or 0200), or it belongs to neither this process's user nor root
/// (another user could rewrite it). The text names the mode or the owner; the fix is `chmod 600` / `chown`.
pub fn private_file_problem(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o177 != 0 {
        return Some(format!("has mode {mode:04o}, not its owner's alone (0600 or 0400): chmod 600 it"));
    }
    // The owner of /proc/self is this process's effective user.
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    let owner = meta.uid();
    (owner != me && owner != 0).then(|| {
        format!("belongs to uid {owner}, neither this user (uid {me}) nor root: chown it to the daemon's user")
    })
}

/// A secret file's text; refused when it is not its owner's alone ([`private_file_problem`]).
fn read_secret_file(path: &Path, key: &KeyPath) -> Result<zeroize::Zeroizing<String>, Problem> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| Problem::new(key.clone(), format!("cannot read {shown}: {e}"), "a file holding the secret"))?;
    if let Some(problem) = private_file_problem(&meta) {
        return Err(Problem::new(key.clone(), format!("{shown} {problem}"), "a file only its owner can read"));
    }
    std::fs::read_to_string(path)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| Problem::new(key.clone(), format!("cannot read {shown}: {e}"), "a file holding the secret"))
}
