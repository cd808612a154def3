//! A one-node Ceph cluster for the RBD tests: `tests/ceph/cluster.sh` started in a temporary folder (one
//! monitor, one manager, one OSD on a memstore, pool `rbd`, its own ports), stopped and removed on drop, with
//! the `rbd` command line to create, resize and read images.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A running cluster; its daemons stop and its folder goes when it is dropped.
#[derive(Debug)]
pub struct CephCluster {
    /// `/var/tmp/nvmf-ceph-PID-N`.
    dir: PathBuf,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The script, from this crate's folder.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ceph/cluster.sh")
}

fn checked(what: &str, output: std::io::Result<Output>) -> Output {
    let output = output.unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl CephCluster {
    /// Start a cluster (about 10 s). Panics with the script's output when it cannot (Ceph's daemons are
    /// Debian's `ceph-mon ceph-mgr ceph-osd ceph-common`, which `.ci/run` installs).
    pub fn start() -> CephCluster {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/var/tmp/nvmf-ceph-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cluster = CephCluster { dir };
        checked("tests/ceph/cluster.sh start", Command::new(script()).arg("start").arg(cluster.folder()).output());
        cluster
    }

    /// The cluster's folder (the script's DIR).
    fn folder(&self) -> PathBuf {
        self.dir.join("cluster")
    }

    /// The cluster's Ceph configuration file (its keyring is the client.admin one next to it).
    pub fn conf(&self) -> PathBuf {
        self.folder().join("ceph.conf")
    }

    /// Run `rbd ARGS` against the cluster; its standard output.
    pub fn rbd(&self, args: &[&str]) -> String {
        let command = Command::new("rbd").arg("-c").arg(self.conf()).args(args).output();
        let output = checked(&format!("rbd {}", args.join(" ")), command);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The OSD's process ID (to stop and continue it: an OSD that does not answer).
    pub fn osd_pid(&self) -> u32 {
        let pid = std::fs::read_to_string(self.folder().join("run/osd.0.pid")).expect("the OSD's pid file");
        pid.trim().parse().expect("a process ID")
    }

    /// Run `ceph ARGS` against the cluster; its standard output.
    pub fn ceph(&self, args: &[&str]) -> String {
        let command = Command::new("ceph").arg("-c").arg(self.conf()).args(args).output();
        let output = checked(&format!("ceph {}", args.join(" ")), command);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Create image `name` in pool `rbd` of `size` (`rbd create --size`, e.g. `64M`).
    pub fn create_image(&self, name: &str, size: &str) {
        self.rbd(&["create", "--size", size, &format!("rbd/{name}")]);
    }

    /// `rbd export` of the image to bytes.
    pub fn export(&self, name: &str) -> Vec<u8> {
        let file = self.dir.join(format!("{name}.export"));
        let _ = std::fs::remove_file(&file);
        self.rbd(&["export", &format!("rbd/{name}"), &file.to_string_lossy()]);
        std::fs::read(&file).expect("the exported image")
    }
}

impl Drop for CephCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(self.folder()).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
