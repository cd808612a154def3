//! Durability of a file-backed namespace across `kill -9` of the target: data written and flushed, written with
//! FUA, or written while the volatile write cache is disabled reads back the same after a restart, and the
//! namespace identifiers do not change. Identify and Get Features report the file's volatile write cache.
//!
//! The target runs in a child process that is this test binary re-executed to run only [`durability_child`],
//! which starts the target with `nvmf_target::daemon::start` — the code the `nvmf-target` binary runs — on an
//! ephemeral port and writes the bound address to a file. Re-executing the test binary needs no separately built
//! (and possibly stale) `nvmf-target` executable. Note what `kill -9` can show: the process dies, the kernel's
//! page cache does not, so this checks that acknowledged writes reached the kernel and the restart reads them
//! back; it does not simulate power loss.

mod target_support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nvmf_common::nvme::features::{fid, Feature, GetFeatures, SetFeatures, VolatileWriteCache};
use nvmf_common::nvme::identify::{cns, IdentifyController, NamespaceIdentificationDescriptor};
use nvmf_common::nvme::io::Flush;
use nvmf_common::nvme::Status;
use nvmf_config::TargetConfig;
use nvmf_tests::nvme_tcp_client::TcpTestClient;
use target_support::*;

const CHILD_CONFIG_ENV: &str = "NVMF_DURABILITY_CHILD_CONFIG";
const CHILD_ADDR_ENV: &str = "NVMF_DURABILITY_CHILD_ADDR_FILE";
const BLOCK: usize = 4096;

/// The target process of [`file_namespace_survives_kill_9`]; does nothing when run without its environment
/// (e.g. by `cargo test -- --ignored`).
#[test]
#[ignore = "the target child process of file_namespace_survives_kill_9, run by it"]
fn durability_child() {
    let (Some(config), Some(addr_file)) = (std::env::var_os(CHILD_CONFIG_ENV), std::env::var_os(CHILD_ADDR_ENV)) else {
        return;
    };
    let mut config = TargetConfig::from_file(config).expect("child: configuration");
    for l in &mut config.listeners {
        l.address.set_port(0);
    }
    let running = nvmf_target::daemon::start(&config).expect("child: target starts");
    // Write then rename, so the parent never reads a partial address.
    let addr_file = PathBuf::from(addr_file);
    let tmp = addr_file.with_extension("tmp");
    std::fs::write(&tmp, running.local_addrs()[0].to_string()).expect("child: address file");
    std::fs::rename(&tmp, &addr_file).expect("child: address file rename");
    loop {
        std::thread::park();
    }
}

/// A target child process, killed with SIGKILL on drop.
struct ChildTarget {
    child: Child,
    addr: std::net::SocketAddr,
}

impl ChildTarget {
    fn spawn(dir: &Path, run: usize) -> ChildTarget {
        let exe = std::env::current_exe().expect("the test binary's path");
        let addr_file = dir.join(format!("addr-{run}"));
        let log = dir.join(format!("child-{run}.log"));
        let child = Command::new(exe)
            .args(["durability_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_CONFIG_ENV, dir.join("target.toml"))
            .env(CHILD_ADDR_ENV, &addr_file)
            .stdin(Stdio::null())
            .stdout(File::create(&log).expect("child log"))
            .stderr(File::create(dir.join(format!("child-{run}.err"))).expect("child log"))
            .spawn()
            .expect("spawn the target child");
        let mut target = ChildTarget { child, addr: "0.0.0.0:0".parse().unwrap() };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = std::fs::read_to_string(&addr_file) {
                target.addr = text.trim().parse().expect("child wrote an address");
                return target;
            }
            if let Some(status) = target.child.try_wait().expect("child status") {
                let err = std::fs::read_to_string(dir.join(format!("child-{run}.err"))).unwrap_or_default();
                panic!("the target child exited ({status}) before listening:\n{err}");
            }
            assert!(Instant::now() < deadline, "the target child did not report its address within 20 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and reap.
    fn kill_9(mut self) {
        self.child.kill().expect("SIGKILL the target");
        let status = self.child.wait().expect("reap the target");
        assert!(!status.success(), "the target was killed, not exited: {status}");
    }
}

impl Drop for ChildTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(image: &Path) -> String {
    format!(
        r#"
[reactors]
threads = 2

[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "{SUBNQN}"

[[subsystem.namespace]]
path = "{}"
block_size = {BLOCK}
"#,
        image.display()
    )
}

fn namespace_ids(admin: &mut TcpTestClient) -> Vec<Vec<u8>> {
    let c = identify(admin, cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 1);
    assert_status(&c, Status::SUCCESS);
    NamespaceIdentificationDescriptor::parse_list(&c.data).unwrap().iter().map(|d| d.nid().to_vec()).collect()
}

fn write_cache(admin: &mut TcpTestClient) -> bool {
    let c = ok(admin.command(GetFeatures::new(fid::VOLATILE_WRITE_CACHE).to_sqe(), None, 0));
    VolatileWriteCache::from_dword(c.cqe.dw0).unwrap().wce
}

#[test]
fn file_namespace_survives_kill_9() {
    // A real file system (not tmpfs): /var/tmp.
    let dir = tempfile::Builder::new().prefix("nvmf-durability-").tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let image = dir.path().join("ns1.img");
    File::create(&image).and_then(|f| f.set_len(16 << 20)).expect("namespace image");
    std::fs::write(dir.path().join("target.toml"), config(&image)).unwrap();

    let flushed = pattern(256 << 10, 21); // LBA 0..64, written through R2T, then Flush
    let fua = pattern(64 << 10, 22); // LBA 1000..1016, FUA, no flush
    let fua_in_capsule = pattern(BLOCK, 23); // LBA 2000, in-capsule, FUA
    let cache_off = pattern(32 << 10, 24); // LBA 3000..3008, written with the write cache disabled

    let target = ChildTarget::spawn(dir.path(), 1);
    let mut a = Association::new(target.addr, options(), 1);
    // A file has a volatile write cache (the page cache): Identify says so, and it is enabled.
    let c = identify(&mut a.admin, cns::CONTROLLER, 0);
    let id = IdentifyController::parse(&c.data).unwrap();
    assert!(id.vwc_present(), "VWC present for a file-backed namespace (vwc {:#x})", id.vwc);
    assert!(write_cache(&mut a.admin), "the write cache starts enabled");
    let ids = namespace_ids(&mut a.admin);

    ok(Ok(write(a.io(), 1, BLOCK, 0, &flushed, false)));
    ok(a.io().command(Flush { nsid: 1 }.to_sqe(), None, 0));
    ok(Ok(write(a.io(), 1, BLOCK, 1000, &fua, true)));
    ok(Ok(write(a.io(), 1, BLOCK, 2000, &fua_in_capsule, true)));
    // With the cache disabled every write is durable when acknowledged.
    ok(a.admin.command(SetFeatures::new(&VolatileWriteCache { wce: false }).to_sqe(), None, 0));
    assert!(!write_cache(&mut a.admin), "the write cache reads back disabled");
    ok(Ok(write(a.io(), 1, BLOCK, 3000, &cache_off, false)));
    target.kill_9();

    let target = ChildTarget::spawn(dir.path(), 2);
    let mut a = Association::new(target.addr, options(), 1);
    for (what, slba, data) in [
        ("written and flushed", 0, &flushed),
        ("written with FUA", 1000, &fua),
        ("written in-capsule with FUA", 2000, &fua_in_capsule),
        ("written with the write cache disabled", 3000, &cache_off),
    ] {
        let c = ok(Ok(read(a.io(), 1, BLOCK, slba, data.len())));
        assert!(c.data == *data, "{what} at LBA {slba}: different bytes after kill -9 and restart");
    }
    assert_eq!(namespace_ids(&mut a.admin), ids, "namespace identifiers are stable across a restart");
    // The file holds the bytes too, at the offsets the LBAs name.
    let on_disk = std::fs::read(&image).unwrap();
    assert!(on_disk[..flushed.len()] == flushed[..]);
    assert!(on_disk[1000 * BLOCK..1000 * BLOCK + fua.len()] == fua[..]);
    target.kill_9();
}
