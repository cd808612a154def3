//! The guest kernel: Debian's 6.12 kernel package, fetched through apt once and prepared for fast boots.
//!
//! The package is what the meta package `linux-image-6.12-amd64` depends on, resolved through this machine's
//! own apt sources (never a hard-coded mirror), preferring its `-unsigned` twin (the same kernel without the
//! shim dependency). It is `apt-get download`ed by exact name into the cache, unpacked with `dpkg-deb -x`,
//! its `.ko.xz` modules are decompressed once here (kmod decompressing them under TCG costs about 10 s a
//! boot) and `depmod -b` writes the `modules.dep` the `.deb` does not ship. The prepared tree is renamed into
//! place only when complete, under a cross-process lock, so concurrent test processes never see half of one.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use super::error::VmError;
use super::lock::DirLock;
use super::note;

/// The meta package whose dependency is the kernel to boot, unless `NVMF_VM_KERNEL_META` says otherwise.
pub const DEFAULT_META_PACKAGE: &str = "linux-image-6.12-amd64";

/// A kernel tree ready to boot: `boot/vmlinuz-RELEASE` and `lib/modules/RELEASE` with `modules.dep`.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Root of the unpacked package.
    pub dir: PathBuf,
    /// `uname -r` of the guest, e.g. `6.12.117+deb12-amd64`.
    pub release: String,
    /// The kernel image QEMU boots.
    pub vmlinuz: PathBuf,
}

/// Where the harness keeps kernels: `$NVMF_VM_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/nvmf-rs/vm`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = env::var_os("NVMF_VM_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| env::temp_dir().join("cache"));
    base.join("nvmf-rs").join("vm")
}

impl Kernel {
    /// The kernel to boot: `NVMF_VM_KERNEL_DIR` (an unpacked tree) if set, else the cached package
    /// `NVMF_VM_KERNEL_PACKAGE` or the one the meta package resolves to, fetched and prepared on first use.
    pub fn obtain() -> Result<Self, VmError> {
        if let Some(dir) = env::var_os("NVMF_VM_KERNEL_DIR").filter(|d| !d.is_empty()) {
            return Self::from_dir(Path::new(&dir));
        }
        let cache = cache_dir();
        fs::create_dir_all(cache.join("kernels")).map_err(VmError::io("creating the cache", &cache))?;
        let package = match env::var("NVMF_VM_KERNEL_PACKAGE").ok().filter(|p| !p.is_empty()) {
            Some(package) => package,
            None => match resolve_package(&meta_package()) {
                Ok(package) => package,
                Err(e) => match newest_prepared(&cache) {
                    Some(dir) => {
                        note(&format!("{e}; using the cached kernel {}", dir.display()));
                        return Self::from_dir(&dir);
                    }
                    None => return Err(e),
                },
            },
        };
        let dir = cache.join("kernels").join(&package);
        if !dir.is_dir() {
            let _lock = DirLock::acquire(&cache.join("kernel.lock"))?;
            if !dir.is_dir() {
                prepare(&package, &cache, &dir)?;
            }
        }
        Self::from_dir(&dir)
    }

    /// A kernel tree unpacked elsewhere (it must already have `modules.dep`).
    pub fn from_dir(dir: &Path) -> Result<Self, VmError> {
        let modules = dir.join("lib/modules");
        let releases = list_dir(&modules)?;
        let release = releases
            .into_iter()
            .find(|r| dir.join("boot").join(format!("vmlinuz-{r}")).is_file())
            .ok_or_else(|| VmError::Kernel(format!("{}: no lib/modules/R with a boot/vmlinuz-R", dir.display())))?;
        if !modules.join(&release).join("modules.dep").is_file() {
            return Err(VmError::Kernel(format!(
                "{}: no modules.dep (run depmod -b {} {release})",
                modules.join(&release).display(),
                dir.display()
            )));
        }
        Ok(Self { vmlinuz: dir.join("boot").join(format!("vmlinuz-{release}")), dir: dir.to_owned(), release })
    }

    /// `lib/modules/RELEASE` of this kernel.
    pub fn modules_dir(&self) -> PathBuf {
        self.dir.join("lib/modules").join(&self.release)
    }
}

fn meta_package() -> String {
    env::var("NVMF_VM_KERNEL_META").ok().filter(|m| !m.is_empty()).unwrap_or_else(|| DEFAULT_META_PACKAGE.into())
}

/// The exact kernel package `meta` depends on (its `-unsigned` twin when apt knows one).
fn resolve_package(meta: &str) -> Result<String, VmError> {
    let lookup = || -> Result<Option<String>, VmError> {
        let out = run(Command::new("apt-cache").args(["depends", meta])).unwrap_or_default();
        Ok(out.lines().find_map(|l| l.trim().strip_prefix("Depends: linux-image-")).map(|p| format!("linux-image-{p}")))
    };
    let package = match lookup()? {
        Some(p) => p,
        None => {
            note(&format!("apt does not know {meta}: running apt-get update"));
            run(Command::new("apt-get").args(["update", "-qq"]))?;
            lookup()?.ok_or_else(|| {
                VmError::Unavailable(format!(
                    "apt cannot resolve {meta} to a kernel package (are Debian 12's bookworm-security sources configured?)"
                ))
            })?
        }
    };
    let unsigned = format!("{package}-unsigned");
    let known = Command::new("apt-cache")
        .args(["show", &unsigned])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    Ok(if known { unsigned } else { package })
}

/// The most recently prepared kernel in the cache, for a machine whose apt cannot answer right now.
fn newest_prepared(cache: &Path) -> Option<PathBuf> {
    let kernels = cache.join("kernels");
    let mut dirs: Vec<_> = fs::read_dir(&kernels)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, p)| p)
}

/// Download `package`, unpack it into `dir` (through a temporary sibling), decompress its modules, depmod.
fn prepare(package: &str, cache: &Path, dir: &Path) -> Result<(), VmError> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs).map_err(VmError::io("creating", &debs))?;
    let deb = match find_deb(&debs, package)? {
        Some(deb) => deb,
        None => {
            note(&format!("fetching {package} through apt (once; about 100 MB)"));
            if run(Command::new("apt-get").args(["download", "-qq", package]).current_dir(&debs)).is_err() {
                run(Command::new("apt-get").args(["update", "-qq"]))?;
                run(Command::new("apt-get").args(["download", "-qq", package]).current_dir(&debs))?;
            }
            find_deb(&debs, package)?.ok_or_else(|| {
                VmError::Kernel(format!("apt-get download {package} left no .deb in {}", debs.display()))
            })?
        }
    };
    let partial = dir.with_file_name(format!(".{package}.partial"));
    match fs::remove_dir_all(&partial) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(VmError::io("removing", &partial)(e)),
        _ => {}
    }
    note(&format!("unpacking {} and decompressing its modules (once)", deb.display()));
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    if !partial.join("lib/modules").is_dir() && partial.join("usr/lib/modules").is_dir() {
        std::os::unix::fs::symlink("usr/lib", partial.join("lib")).map_err(VmError::io("linking lib", &partial))?;
    }
    let modules = partial.join("lib/modules");
    let release = list_dir(&modules)?
        .into_iter()
        .next()
        .ok_or_else(|| VmError::Kernel(format!("{}: no lib/modules/RELEASE", deb.display())))?;
    decompress_modules(&modules.join(&release))?;
    run(Command::new("depmod").arg("-b").arg(&partial).arg(&release))?;
    fs::rename(&partial, dir).map_err(VmError::io("moving the prepared kernel to", dir))
}

fn find_deb(debs: &Path, package: &str) -> Result<Option<PathBuf>, VmError> {
    let prefix = format!("{package}_");
    Ok(list_dir(debs)?
        .into_iter()
        .filter(|f| f.starts_with(&prefix) && f.ends_with(".deb"))
        .max()
        .map(|f| debs.join(f)))
}

/// Decompress every `.ko.xz` / `.ko.zst` under `dir` in place, on all cores.
fn decompress_modules(dir: &Path) -> Result<(), VmError> {
    let mut xz = Vec::new();
    let mut zst = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).map_err(VmError::io("listing", &d))? {
            let path = entry.map_err(VmError::io("listing", &d))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension() == Some(OsStr::new("xz")) {
                xz.push(path);
            } else if path.extension() == Some(OsStr::new("zst")) {
                zst.push(path);
            }
        }
    }
    let workers = thread::available_parallelism().map_or(2, |n| n.get());
    let jobs: Vec<(&str, Vec<PathBuf>)> = [("xz", xz), ("zstd", zst)]
        .into_iter()
        .flat_map(|(tool, files)| {
            let chunk = files.len().div_ceil(workers).max(1);
            files.chunks(chunk).map(|c| (tool, c.to_vec())).collect::<Vec<_>>()
        })
        .collect();
    thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(tool, files)| {
                s.spawn(move || {
                    let mut cmd = Command::new(tool);
                    if *tool == "xz" {
                        cmd.args(["-d", "--"]);
                    } else {
                        cmd.args(["-q", "-d", "--rm", "--"]);
                    }
                    run(cmd.args(files))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("decompression thread panicked").map(drop))
    })
}

fn list_dir(dir: &Path) -> Result<Vec<String>, VmError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(VmError::io("listing", dir))? {
        names.push(entry.map_err(VmError::io("listing", dir))?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Run a host tool to completion; its stdout on success. A tool that is not installed is
/// [`VmError::Unavailable`], naming the Debian package that has it.
pub(crate) fn run(cmd: &mut Command) -> Result<String, VmError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let line = std::iter::once(program.clone())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .take(6)
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            VmError::Unavailable(format!("`{program}` not found (apt-get install {})", debian_package_of(&program)))
        } else {
            VmError::Tool { command: line.clone(), detail: e.to_string() }
        }
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<_> = stderr.lines().rev().take(5).collect();
        let tail: Vec<_> = tail.into_iter().rev().collect();
        Err(VmError::Tool { command: line, detail: format!("{}: {}", out.status, tail.join(" | ")) })
    }
}

/// The Debian package that ships a host tool the harness runs.
pub(crate) fn debian_package_of(program: &str) -> &'static str {
    match program {
        "apt-get" | "apt-cache" => "apt",
        "dpkg-deb" => "dpkg",
        "depmod" | "modprobe" => "kmod",
        "xz" => "xz-utils",
        "zstd" => "zstd",
        p if p.starts_with("qemu-system") => "qemu-system-x86",
        "busybox" => "busybox-static",
        _ => "the package that provides it",
    }
}
