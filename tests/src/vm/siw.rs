//! Soft-iWARP (`siw`) for the guest kernel, built once per kernel release and cached.
//!
//! Debian builds its kernels without `CONFIG_RDMA_SIW`, so the guest has no `siw.ko`. The harness builds it as an
//! out-of-tree module from the kernel's own packages, through this machine's apt (the LTS line's kernel comes from
//! the same sources): `linux-headers-RELEASE` with its `-common` and `linux-kbuild-…` parts (the build tree and
//! `Module.symvers`), and `drivers/infiniband/sw/siw/` of `linux-source-X.Y` at the kernel's package version. The
//! module goes to `<cache>/siw/RELEASE/siw.ko`; the packages and the build tree are removed once it is there. It
//! needs `make` and the compiler the kernel was built with (`gcc-12` for Debian 12's 6.12), about 170 MB of
//! downloads and a minute or two, once. The module is unsigned: it taints the guest kernel, which loads it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::apt::Apt;
use super::error::VmError;
use super::kernel::{cache_dir, run, Kernel, KernelVersion};
use super::lock::DirLock;
use super::note;

/// `<cache>/siw/RELEASE/siw.ko` for `kernel`, built first if it is not there.
pub fn module(kernel: &Kernel) -> Result<PathBuf, VmError> {
    let release = &kernel.release;
    if let Some(builtin) = shipped(kernel) {
        return Ok(builtin);
    }
    let cache = cache_dir();
    let dir = cache.join("siw").join(release);
    let ko = dir.join("siw.ko");
    if ko.is_file() {
        return Ok(ko);
    }
    fs::create_dir_all(&dir).map_err(VmError::io("creating", &dir))?;
    let _lock = DirLock::acquire(&cache.join("siw.lock"))?;
    if ko.is_file() {
        return Ok(ko);
    }
    let work = cache.join("siw").join(format!(".{release}.build"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(VmError::io("creating", &work))?;
    let built = build(kernel, &work)
        .and_then(|module| fs::copy(&module, &ko).map(drop).map_err(VmError::io("copying siw.ko to", &ko)));
    let _ = fs::remove_dir_all(&work);
    built?;
    note(&format!("siw: built {}", ko.display()));
    Ok(ko)
}

/// The kernel's own `siw.ko`, where its packages ship one (a kernel built with `CONFIG_RDMA_SIW=m`).
fn shipped(kernel: &Kernel) -> Option<PathBuf> {
    let ko = kernel.modules_dir().join("kernel/drivers/infiniband/sw/siw/siw.ko");
    ko.is_file().then_some(ko)
}

/// Download, unpack and build in `work`; the built module's path (inside `work`).
fn build(kernel: &Kernel, work: &Path) -> Result<PathBuf, VmError> {
    let release = &kernel.release;
    let apt = Apt::system();
    let headers = format!("linux-headers-{release}");
    if !apt.knows(&headers) {
        return Err(VmError::Unavailable(format!(
            "Soft-iWARP: Linux {release} has no siw module (Debian builds without CONFIG_RDMA_SIW) and {} does \
             not know {headers} to build one",
            apt.label()
        )));
    }
    let mut packages = vec![headers.clone()];
    packages.extend(
        apt.depends(&headers)
            .into_iter()
            .filter(|d| d.starts_with("linux-headers-") && d.ends_with("-common") || d.starts_with("linux-kbuild-")),
    );
    note(&format!("siw: Linux {release} has no siw module; building one (once): fetching {}", packages.join(" ")));
    apt.download(&packages, work)?;
    let deb_of = |package: &str| -> Result<PathBuf, VmError> {
        let prefix = format!("{package}_");
        fs::read_dir(work)
            .map_err(VmError::io("listing", work))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|f| f.starts_with(&prefix) && f.ends_with(".deb"))
            .map(|f| work.join(f))
            .ok_or_else(|| VmError::Kernel(format!("apt-get download {package} left no .deb in {}", work.display())))
    };
    // `linux-headers-R_VERSION_ARCH.deb`: the source at that same version.
    let headers_deb = deb_of(&headers)?;
    let version = headers_deb
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('_').nth(1))
        .map(str::to_owned)
        .ok_or_else(|| VmError::Kernel(format!("{}: no version in the name", headers_deb.display())))?;
    let KernelVersion(major, minor) =
        kernel.version().ok_or_else(|| VmError::Kernel(format!("{release}: no version in the release")))?;
    let source = format!("linux-source-{major}.{minor}");
    note(&format!("siw: fetching {source} {version} (about 150 MB) for drivers/infiniband/sw/siw"));
    apt.download(&[format!("{source}={version}")], work)?;

    let root = work.join("root");
    for p in &packages {
        run(Command::new("dpkg-deb").arg("-x").arg(deb_of(p)?).arg(&root))?;
    }
    // The headers' Makefile includes the `-common` tree by its installed path; point it at the unpacked one.
    let tree = root.join("usr/src").join(&headers);
    let makefile = tree.join("Makefile");
    let text = fs::read_to_string(&makefile).map_err(VmError::io("reading", &makefile))?;
    let unpacked = format!("{}/", root.join("usr/src").display());
    fs::write(&makefile, text.replace("/usr/src/", &unpacked)).map_err(VmError::io("writing", &makefile))?;
    // Only siw's folder out of the source tarball (inside the .deb).
    let src = work.join("src");
    fs::create_dir_all(&src).map_err(VmError::io("creating", &src))?;
    run(Command::new("bash")
        .arg("-o")
        .arg("pipefail")
        .arg("-c")
        .arg(r#"dpkg-deb --fsys-tarfile "$1" | tar -xO "./usr/src/$2.tar.xz" | tar -xJ -C "$3" --strip-components 5 "$2/drivers/infiniband/sw/siw""#)
        .arg("bash")
        .arg(deb_of(&source)?)
        .arg(&source)
        .arg(&src))?;
    // BTF of the module would need pahole; the guest loads it without.
    run(Command::new("make").arg("-C").arg(&tree).arg(format!("M={}", src.display())).args([
        "CONFIG_RDMA_SIW=m",
        "CONFIG_DEBUG_INFO_BTF_MODULES=",
        "modules",
    ]))?;
    let ko = src.join("siw.ko");
    if !ko.is_file() {
        return Err(VmError::Kernel(format!("building siw for {release} left no {}", ko.display())));
    }
    Ok(ko)
}
