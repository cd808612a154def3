//! The guest kernel: one of two Debian kernel lines, fetched through apt once and prepared for fast boots.
//!
//! [`KernelLine::Lts`] is what Debian 12's meta package `linux-image-6.12-amd64` depends on (bookworm-security),
//! resolved through this machine's own apt sources and preferring its `-unsigned` twin (the same kernel without
//! the shim dependency). [`KernelLine::Backports`] is the newest `linux-image-amd64` of Debian's trixie-backports
//! (Linux 7.x), resolved through a private apt state on this machine's mirror (`apt.rs`); since 7.x the image
//! package carries nothing itself and depends on `linux-binary-R` (vmlinuz under `usr/lib/modules/R/`),
//! `linux-modules-R` and `linux-base-R` (`modules.builtin`, the config), which are fetched with it. Never a
//! hard-coded mirror or version.
//!
//! The packages are `apt-get download`ed by exact name into the cache and unpacked with `dpkg-deb -x`; the
//! `.ko.xz`/`.ko.zst` modules are decompressed once here (kmod decompressing them under TCG costs about 10 s a
//! boot) and `depmod -b` writes the `modules.dep` the packages do not ship. The prepared tree is renamed into
//! place only when complete, under a cross-process lock, so concurrent test processes never see half of one.
//!
//! A scenario says which kernel it needs ([`KernelNeed`]: [`Kernel::at_least`], or a line); the harness boots the
//! oldest line that meets it, so a scenario that can run on 6.12 keeps running there.

use std::env;
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use super::apt::Apt;
use super::error::VmError;
use super::lock::DirLock;
use super::note;

/// The meta package of [`KernelLine::Lts`], unless `NVMF_VM_KERNEL_META` says otherwise.
pub const DEFAULT_META_PACKAGE: &str = "linux-image-6.12-amd64";
/// The Debian suite of [`KernelLine::Backports`] and the meta package resolved there.
const BACKPORTS_SUITE: &str = "trixie-backports";
const BACKPORTS_META: &str = "linux-image-amd64";

/// A Linux version, major and minor: `7.3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion(pub u32, pub u32);

impl KernelVersion {
    /// The version at the start of a release or package name: `6.12.117+deb12-amd64`, `linux-image-7.3.4+deb13-amd64`.
    pub fn of(name: &str) -> Option<Self> {
        let s = name.trim_start_matches(|c: char| !c.is_ascii_digit());
        let mut parts = s.split(|c: char| !c.is_ascii_digit());
        Some(Self(parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Where a guest kernel comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelLine {
    /// Debian 12's Linux 6.12 (`linux-image-6.12-amd64`, bookworm-security): the default.
    Lts,
    /// The newest `linux-image-amd64` of Debian's trixie-backports (Linux 7.x).
    Backports,
}

impl KernelLine {
    /// Every line, oldest first.
    pub const ALL: [Self; 2] = [Self::Lts, Self::Backports];

    /// `lts` / `backports`, as `NVMF_VM_KERNEL` spells them (`6.12` and `7` are taken too).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "lts" | "6.12" | "6" => Some(Self::Lts),
            "backports" | "trixie-backports" | "current" | "7" => Some(Self::Backports),
            _ => None,
        }
    }

    /// `lts` / `backports`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lts => "lts",
            Self::Backports => "backports",
        }
    }

    /// This line's version: the LTS meta package names it; the backports one is resolved through apt.
    pub fn version(self) -> Result<KernelVersion, VmError> {
        match self {
            Self::Lts => KernelVersion::of(&meta_package())
                .ok_or_else(|| VmError::Kernel(format!("{}: no version in the name", meta_package()))),
            Self::Backports => {
                let cache = cache_dir();
                let package = Apt::private(&cache, BACKPORTS_SUITE)
                    .and_then(|apt| resolve_package(&apt, BACKPORTS_META))
                    .or_else(|e| newest_prepared(&cache, self).map(|d| file_name(&d)).ok_or(e))?;
                KernelVersion::of(&package).ok_or_else(|| VmError::Kernel(format!("{package}: no version in the name")))
            }
        }
    }
}

/// Which kernel a guest needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelNeed {
    /// Any: `NVMF_VM_KERNEL` (`lts` or `backports`) if set, else [`KernelLine::Lts`].
    #[default]
    Any,
    /// This line.
    Line(KernelLine),
    /// The oldest line at this version or later (`Kernel::at_least(6, 15)`).
    AtLeast(KernelVersion),
}

impl From<KernelLine> for KernelNeed {
    fn from(line: KernelLine) -> Self {
        Self::Line(line)
    }
}

impl KernelNeed {
    /// The line to boot; [`VmError::Unavailable`] when no line meets the need.
    pub fn line(self) -> Result<KernelLine, VmError> {
        match self {
            Self::Any => {
                Ok(env::var("NVMF_VM_KERNEL").ok().and_then(|k| KernelLine::parse(&k)).unwrap_or(KernelLine::Lts))
            }
            Self::Line(line) => Ok(line),
            Self::AtLeast(min) => {
                let mut seen = Vec::new();
                for line in KernelLine::ALL {
                    let version = line.version()?;
                    if version >= min {
                        return Ok(line);
                    }
                    seen.push(format!("{} is {version}", line.name()));
                }
                Err(VmError::Unavailable(format!("no kernel line is Linux {min} or later ({})", seen.join(", "))))
            }
        }
    }
}

/// A kernel tree ready to boot: `lib/modules/RELEASE` with `modules.dep`, and its image.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Root of the unpacked packages.
    pub dir: PathBuf,
    /// `uname -r` of the guest, e.g. `6.12.117+deb12-amd64`.
    pub release: String,
    /// The kernel image QEMU boots.
    pub vmlinuz: PathBuf,
    /// The kernel's build configuration, if its packages ship one (the guest finds it at `/boot/config-RELEASE`).
    pub config: Option<PathBuf>,
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
    /// A need for this version or later, for [`super::Vm::kernel`]: `Kernel::at_least(6, 15)`.
    pub const fn at_least(major: u32, minor: u32) -> KernelNeed {
        KernelNeed::AtLeast(KernelVersion(major, minor))
    }

    /// The kernel to boot for `need`: `NVMF_VM_KERNEL_DIR` (an unpacked tree) if set and it meets the need, else
    /// the line's cached packages (for the LTS line `NVMF_VM_KERNEL_PACKAGE` if set), fetched and prepared on first
    /// use.
    pub fn obtain(need: KernelNeed) -> Result<Self, VmError> {
        if let Some(dir) = env::var_os("NVMF_VM_KERNEL_DIR").filter(|d| !d.is_empty()) {
            let kernel = Self::from_dir(Path::new(&dir))?;
            if let KernelNeed::AtLeast(min) = need {
                if kernel.version().is_none_or(|v| v < min) {
                    return Err(VmError::Unavailable(format!(
                        "NVMF_VM_KERNEL_DIR is Linux {} and the scenario needs {min} or later",
                        kernel.release
                    )));
                }
            }
            return Ok(kernel);
        }
        let line = need.line()?;
        let cache = cache_dir();
        fs::create_dir_all(cache.join("kernels")).map_err(VmError::io("creating the cache", &cache))?;
        let resolved = match line {
            KernelLine::Lts => match env::var("NVMF_VM_KERNEL_PACKAGE").ok().filter(|p| !p.is_empty()) {
                Some(package) => Ok((Apt::system(), package)),
                None => {
                    let apt = Apt::system();
                    resolve_package(&apt, &meta_package()).map(|p| (apt, p))
                }
            },
            KernelLine::Backports => Apt::private(&cache, BACKPORTS_SUITE)
                .and_then(|apt| resolve_package(&apt, BACKPORTS_META).map(|p| (apt, p))),
        };
        let (apt, package) = match resolved {
            Ok(found) => found,
            Err(e) => match newest_prepared(&cache, line) {
                Some(dir) => {
                    note(&format!("{e}; using the cached kernel {}", dir.display()));
                    return Self::from_dir(&dir);
                }
                None => return Err(e),
            },
        };
        let dir = cache.join("kernels").join(&package);
        if !dir.is_dir() {
            let _lock = DirLock::acquire(&cache.join("kernel.lock"))?;
            if !dir.is_dir() {
                prepare(&apt, &package, &cache, &dir)?;
            }
        }
        Self::from_dir(&dir)
    }

    /// A kernel tree unpacked elsewhere (it must already have `modules.dep`): the image at `boot/vmlinuz-R` or
    /// `lib/modules/R/vmlinuz`.
    pub fn from_dir(dir: &Path) -> Result<Self, VmError> {
        let modules = dir.join("lib/modules");
        let image_of = |r: &str| {
            [dir.join("boot").join(format!("vmlinuz-{r}")), modules.join(r).join("vmlinuz")]
                .into_iter()
                .find(|p| p.is_file())
        };
        let (release, vmlinuz) = list_dir(&modules)?
            .into_iter()
            .find_map(|r| image_of(&r).map(|v| (r, v)))
            .ok_or_else(|| VmError::Kernel(format!("{}: no lib/modules/R with a boot/vmlinuz-R", dir.display())))?;
        if !modules.join(&release).join("modules.dep").is_file() {
            return Err(VmError::Kernel(format!(
                "{}: no modules.dep (run depmod -b {} {release})",
                modules.join(&release).display(),
                dir.display()
            )));
        }
        let config = [dir.join("boot").join(format!("config-{release}")), modules.join(&release).join("config")]
            .into_iter()
            .find(|p| p.is_file());
        Ok(Self { vmlinuz, dir: dir.to_owned(), release, config })
    }

    /// `lib/modules/RELEASE` of this kernel.
    pub fn modules_dir(&self) -> PathBuf {
        self.dir.join("lib/modules").join(&self.release)
    }

    /// Its version, from the release.
    pub fn version(&self) -> Option<KernelVersion> {
        KernelVersion::of(&self.release)
    }
}

fn meta_package() -> String {
    env::var("NVMF_VM_KERNEL_META").ok().filter(|m| !m.is_empty()).unwrap_or_else(|| DEFAULT_META_PACKAGE.into())
}

/// The exact kernel package `meta` depends on (its `-unsigned` twin when apt knows one).
fn resolve_package(apt: &Apt, meta: &str) -> Result<String, VmError> {
    let lookup = || apt.depends(meta).into_iter().find(|d| d.starts_with("linux-image-"));
    let package = match lookup() {
        Some(p) => p,
        None => {
            note(&format!("apt does not know {meta}: running apt-get update ({})", apt.label()));
            apt.update()?;
            lookup().ok_or_else(|| {
                VmError::Unavailable(format!("apt cannot resolve {meta} to a kernel package ({})", apt.label()))
            })?
        }
    };
    let unsigned = format!("{package}-unsigned");
    Ok(if apt.knows(&unsigned) { unsigned } else { package })
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The most recently prepared kernel of `line` in the cache, for a machine whose apt cannot answer right now.
fn newest_prepared(cache: &Path, line: KernelLine) -> Option<PathBuf> {
    let kernels = cache.join("kernels");
    let lts = KernelVersion::of(&meta_package());
    let mut dirs: Vec<_> = fs::read_dir(&kernels)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| (KernelVersion::of(&e.file_name().to_string_lossy()) == lts) == (line == KernelLine::Lts))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, p)| p)
}

/// Download `package` and the parts it depends on (7.x: `linux-binary-R`, `linux-modules-R`, `linux-base-R`),
/// unpack them into `dir` (through a temporary sibling), decompress the modules, depmod.
fn prepare(apt: &Apt, package: &str, cache: &Path, dir: &Path) -> Result<(), VmError> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs).map_err(VmError::io("creating", &debs))?;
    let release = package.trim_start_matches("linux-image-").trim_end_matches("-unsigned");
    let mut packages = vec![package.to_owned()];
    packages.extend(apt.depends(package).into_iter().filter(|d| {
        ["linux-binary-", "linux-modules-", "linux-base-"].iter().any(|p| d.strip_prefix(p) == Some(release))
    }));
    let missing: Vec<String> =
        packages.iter().filter(|p| find_deb(&debs, p).ok().flatten().is_none()).cloned().collect();
    if !missing.is_empty() {
        note(&format!("fetching {} through apt (once; about 100 MB)", missing.join(" ")));
        if apt.download(&missing, &debs).is_err() {
            apt.update()?;
            apt.download(&missing, &debs)?;
        }
    }
    let partial = dir.with_file_name(format!(".{package}.partial"));
    match fs::remove_dir_all(&partial) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(VmError::io("removing", &partial)(e)),
        _ => {}
    }
    for p in &packages {
        let deb = find_deb(&debs, p)?
            .ok_or_else(|| VmError::Kernel(format!("apt-get download {p} left no .deb in {}", debs.display())))?;
        note(&format!("unpacking {} (once)", deb.display()));
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    }
    if !partial.join("lib/modules").is_dir() && partial.join("usr/lib/modules").is_dir() {
        std::os::unix::fs::symlink("usr/lib", partial.join("lib")).map_err(VmError::io("linking lib", &partial))?;
    }
    let modules = partial.join("lib/modules");
    let release = list_dir(&modules)?
        .into_iter()
        .next()
        .ok_or_else(|| VmError::Kernel(format!("{package}: no lib/modules/RELEASE")))?;
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

#[cfg(test)]
mod tests {
    use super::{KernelLine, KernelVersion};

    #[test]
    fn versions_from_releases_and_packages() {
        assert_eq!(KernelVersion::of("6.12.117+deb12-amd64"), Some(KernelVersion(6, 12)));
        assert_eq!(KernelVersion::of("linux-image-7.3.4+deb13-amd64"), Some(KernelVersion(7, 3)));
        assert_eq!(KernelVersion::of("linux-image-6.12-amd64"), Some(KernelVersion(6, 12)));
        assert_eq!(KernelVersion::of("linux-image-amd64"), None);
        assert!(KernelVersion(7, 3) >= KernelVersion(6, 15) && KernelVersion(6, 12) < KernelVersion(6, 15));
        assert_eq!(KernelLine::parse("backports"), Some(KernelLine::Backports));
        assert_eq!(KernelLine::parse("6.12"), Some(KernelLine::Lts));
        assert_eq!(KernelLine::parse("5.10"), None);
    }
}
