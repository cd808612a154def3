//! The guest's initramfs: static busybox, the four modules that mount the root, and `init`.
//!
//! Written directly in the kernel's `newc` cpio format (uncompressed, about 3 MB, built per boot in a few
//! milliseconds), so device nodes need no root and no `cpio` tool. `init` (`tests/vm/init.sh`) mounts the
//! host's `/` read-only over 9p under a tmpfs overlay and hands over to the per-run `stage2.sh`.
//! Its `/sbin/modprobe` chroots into that overlay: the kernel's module autoload runs `/sbin/modprobe` in
//! PID 1's root, and rdma_rxe needs crc32 that way.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::error::VmError;
use super::kernel::Kernel;

/// The initramfs's `/init`.
const INIT: &str = include_str!("../../vm/init.sh");
/// Forwards the kernel's module requests to the host's kmod inside the overlay root.
const MODPROBE: &str = "#!/bin/sh\nexec /bin/chroot /mnt/root /sbin/modprobe \"$@\"\n";
/// What `init` needs to reach the root file system; everything else loads later from the 9p root.
const BOOT_MODULES: [&str; 4] = ["virtio_pci", "9pnet_virtio", "9p", "overlay"];

/// Write the initramfs for `kernel` to `out`, with `busybox` (which must be statically linked).
pub fn build(kernel: &Kernel, busybox: &Path, out: &Path) -> Result<(), VmError> {
    let mut cpio = Newc::default();
    for dir in ["bin", "sbin", "dev", "proc", "sys", "mnt", "mnt/lower", "mnt/rw", "mnt/root", "lib", "lib/modules"] {
        cpio.entry(dir, 0o040_755, (0, 0), &[]);
    }
    cpio.entry("dev/console", 0o020_600, (5, 1), &[]);
    cpio.entry("dev/null", 0o020_666, (1, 3), &[]);
    let busybox_bytes = fs::read(busybox).map_err(VmError::io("reading", busybox))?;
    cpio.entry("bin/busybox", 0o100_755, (0, 0), &busybox_bytes);
    cpio.entry("init", 0o100_755, (0, 0), INIT.as_bytes());
    cpio.entry("sbin/modprobe", 0o100_755, (0, 0), MODPROBE.as_bytes());
    for (i, module) in boot_modules(kernel)?.iter().enumerate() {
        let bytes = fs::read(module).map_err(VmError::io("reading", module))?;
        let name = module.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        cpio.entry(&format!("lib/modules/{i:02}-{name}"), 0o100_644, (0, 0), &bytes);
    }
    fs::write(out, cpio.finish()).map_err(VmError::io("writing the initramfs", out))
}

/// The `.ko` files for [`BOOT_MODULES`] and their dependencies, each after what it depends on; modules built
/// into the kernel are left out.
fn boot_modules(kernel: &Kernel) -> Result<Vec<PathBuf>, VmError> {
    let dir = kernel.modules_dir();
    let dep_file = dir.join("modules.dep");
    let deps = fs::read_to_string(&dep_file).map_err(VmError::io("reading", &dep_file))?;
    let builtin = fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
    let name_of = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split(".ko").next().unwrap_or(file).replace('-', "_")
    };
    let graph: HashMap<String, (String, Vec<String>)> = deps
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| (name_of(m), (m.to_owned(), d.split_whitespace().map(name_of).collect())))
        .collect();
    let builtin: HashSet<String> = builtin.lines().map(name_of).collect();
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    fn visit(
        m: &str,
        graph: &HashMap<String, (String, Vec<String>)>,
        seen: &mut HashSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(m.to_owned()) {
            return;
        }
        if let Some((path, deps)) = graph.get(m) {
            for d in deps {
                visit(d, graph, seen, order);
            }
            order.push(path.clone());
        }
    }
    for m in BOOT_MODULES {
        if !graph.contains_key(m) && !builtin.contains(m) {
            return Err(VmError::Kernel(format!("{}: no module {m} (and it is not built in)", dep_file.display())));
        }
        visit(m, &graph, &mut seen, &mut order);
    }
    Ok(order.into_iter().map(|p| dir.join(p)).collect())
}

/// A `newc` ("070701") cpio archive being written.
#[derive(Debug, Default)]
struct Newc {
    out: Vec<u8>,
    ino: u32,
}

impl Newc {
    /// Append one entry: `mode` includes the file type bits, `rdev` is (major, minor) for device nodes.
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let size = u32::try_from(data.len()).expect("initramfs entries are far below 4 GiB");
        let namesize = u32::try_from(name.len() + 1).expect("short names");
        let nlink = if mode & 0o170_000 == 0o040_000 { 2 } else { 1 };
        let fields = [self.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, namesize, 0];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::Newc;

    #[test]
    fn newc_layout() {
        let mut c = Newc::default();
        c.entry("init", 0o100_755, (0, 0), b"abc");
        let out = c.finish();
        // 110-byte header, "init\0" padded to a 4-byte boundary (115 -> 116), 3 data bytes padded to 4.
        assert_eq!(&out[..6], b"070701");
        assert_eq!(&out[6..14], b"00000001");
        assert_eq!(&out[14..22], b"000081ED");
        assert_eq!(&out[54..62], b"00000003");
        assert_eq!(&out[94..102], b"00000005");
        assert_eq!(&out[110..116], b"init\0\0");
        assert_eq!(&out[116..120], b"abc\0");
        assert_eq!(&out[120..126], b"070701");
        assert!(out.len() % 4 == 0);
    }
}
