//! Binaries of *other* workspace packages for the VM scenarios, built by cargo on demand.
//!
//! Cargo sets `CARGO_BIN_EXE_<name>` only for binaries of the package under test, and builds other packages'
//! binaries for integration tests only in a `cargo test --workspace` run. A scenario that runs the `nvmf-target`
//! daemon in the guest therefore asks [`workspace_bin`] for it: that runs `cargo build -p PACKAGE --bin BIN` once
//! per test process, with the running test's profile and target folder (found from the test executable's own
//! path, `<target>/[<triple>/]<profile>/deps/<test>-<hash>`), so an up-to-date binary costs one no-op cargo call
//! and a stale one is rebuilt exactly as the test itself was. `NVMF_TARGET_BIN`-style overrides belong to the
//! caller ([`nvmf_target`] honours `NVMF_TARGET_BIN`).
//!
//! Cargo releases its build lock before it runs the test binaries, so the nested build does not wait on the
//! outer `cargo test`.

use std::collections::HashMap;
use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// Why a workspace binary is not available.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceBinError {
    /// The test executable's path does not look like `<target>/<profile>/deps/<exe>`.
    #[error("cannot tell the cargo target folder from the test executable {0}")]
    Layout(PathBuf),
    /// `current_exe` or running cargo failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `cargo build` failed.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Build {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The tail of its stderr.
        stderr: String,
    },
    /// Cargo succeeded but the binary is not where it should be.
    #[error("cargo built {0} but it does not exist")]
    Missing(PathBuf),
}

/// Where cargo puts the running test's artifacts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    target_dir: PathBuf,
    triple: Option<String>,
    profile_dir: PathBuf,
    profile: String,
}

impl Layout {
    /// From `<target>/[<triple>/]<profile>/deps/<exe>`. A triple folder is told from the target folder itself by
    /// the `CACHEDIR.TAG` cargo writes only in the latter.
    fn of_exe(exe: &Path) -> Option<Layout> {
        let deps = exe.parent()?;
        if deps.file_name()? != "deps" {
            return None;
        }
        let profile_dir = deps.parent()?.to_path_buf();
        let dir_name = profile_dir.file_name()?.to_str()?;
        let profile = match dir_name {
            "debug" => "dev".to_owned(),
            other => other.to_owned(),
        };
        let parent = profile_dir.parent()?;
        let (target_dir, triple) = if parent.join("CACHEDIR.TAG").exists() || parent.parent().is_none() {
            (parent.to_path_buf(), None)
        } else {
            (parent.parent()?.to_path_buf(), Some(parent.file_name()?.to_str()?.to_owned()))
        };
        Some(Layout { target_dir, triple, profile_dir, profile })
    }
}

static BUILT: Mutex<Option<HashMap<(String, String), PathBuf>>> = Mutex::new(None);

/// The path of binary `bin` of workspace package `package`, built (once per process) with the running test's
/// profile and target folder.
pub fn workspace_bin(package: &str, bin: &str) -> Result<PathBuf, WorkspaceBinError> {
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (package.to_owned(), bin.to_owned());
    if let Some(path) = built.as_ref().and_then(|m| m.get(&key)) {
        return Ok(path.clone());
    }
    let exe = env::current_exe().map_err(|source| WorkspaceBinError::Io { what: "current_exe".into(), source })?;
    let layout = Layout::of_exe(&exe).ok_or_else(|| WorkspaceBinError::Layout(exe.clone()))?;
    let cargo = env::var_os("CARGO").or_else(|| option_env!("CARGO").map(OsString::from)).unwrap_or("cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("."));
    let mut command = Command::new(&cargo);
    command.current_dir(workspace).env("CARGO_TARGET_DIR", &layout.target_dir).args([
        "build",
        "--quiet",
        "-p",
        package,
        "--bin",
        bin,
        "--profile",
        &layout.profile,
    ]);
    if let Some(triple) = &layout.triple {
        command.args(["--target", triple]);
    }
    let line = format!("CARGO_TARGET_DIR={} {command:?}", layout.target_dir.display());
    crate::vm::note(&format!("building {package}'s {bin} ({} profile)", layout.profile));
    let output = command.output().map_err(|source| WorkspaceBinError::Io { what: line.clone(), source })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        return Err(WorkspaceBinError::Build {
            command: line,
            status: output.status,
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    let path = layout.profile_dir.join(bin);
    if !path.is_file() {
        return Err(WorkspaceBinError::Missing(path));
    }
    built.get_or_insert_with(HashMap::new).insert(key, path.clone());
    Ok(path)
}

/// The `nvmf-target` daemon: `$NVMF_TARGET_BIN` when set (e.g. a release build for a benchmark), else
/// [`workspace_bin`]`("nvmf-target", "nvmf-target")`.
pub fn nvmf_target() -> Result<PathBuf, WorkspaceBinError> {
    match env::var_os("NVMF_TARGET_BIN") {
        Some(path) => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(path)
            } else {
                Err(WorkspaceBinError::Missing(path))
            }
        }
        None => workspace_bin("nvmf-target", "nvmf-target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_a_native_test_executable() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("CACHEDIR.TAG"), "").unwrap();
        let exe = dir.path().join("debug/deps/vm_target_tcp-0123abcd");
        let layout = Layout::of_exe(&exe).unwrap();
        assert_eq!(layout.target_dir, dir.path());
        assert_eq!(layout.triple, None);
        assert_eq!(layout.profile, "dev");
        assert_eq!(layout.profile_dir, dir.path().join("debug"));
    }

    #[test]
    fn layout_of_a_cross_test_executable_and_a_custom_profile() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("CACHEDIR.TAG"), "").unwrap();
        let exe = dir.path().join("x86_64-unknown-linux-gnu/bench/deps/vm_target_tcp-0123abcd");
        let layout = Layout::of_exe(&exe).unwrap();
        assert_eq!(layout.target_dir, dir.path());
        assert_eq!(layout.triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(layout.profile, "bench");
    }

    #[test]
    fn not_a_cargo_layout() {
        assert_eq!(Layout::of_exe(Path::new("/usr/bin/true")), None);
    }

    #[test]
    fn the_running_test_finds_its_layout() {
        let exe = env::current_exe().unwrap();
        let layout = Layout::of_exe(&exe).unwrap();
        assert!(exe.starts_with(&layout.profile_dir), "{layout:?}");
        assert!(layout.target_dir.join("CACHEDIR.TAG").is_file(), "{layout:?}");
    }
}
