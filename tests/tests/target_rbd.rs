//! Ceph RBD images as namespaces, against a one-node cluster started for each test (`tests/ceph/cluster.sh`):
//! what a host writes through the target is in the image (read back through the target and with `rbd export`)
//! and survives a restart; flush, write zeroes, deallocate and a fused Compare and Write (two hosts racing on it
//! lose no update) answer as the spec says; a resize reaches hosts (Namespace Attribute Changed, the new size in
//! Identify Namespace); an image that is not there is one clear start error.

mod target_support;

use nvmf_common::nvme::identify::{cns, IdentifyNamespace};
use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, WriteZeroes};
use nvmf_common::nvme::{SglDescriptor, SglSubtype, Status};
use nvmf_common::transport::tcp::{CapsuleCommand, Pdu};
use nvmf_config::TargetConfig;
use nvmf_tests::ceph::CephCluster;
use target_support::*;

const MIB: u64 = 1 << 20;

/// A target exporting `rbd/a` (512-byte blocks) as namespace 1 and `rbd/b` (4 KiB blocks) as namespace 2.
fn config(cluster: &CephCluster) -> String {
    let conf = cluster.conf();
    let conf = conf.display();
    format!(
        r#"
[reactors]
threads = 2

[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "{SUBNQN}"

[[subsystem.namespace]]
rbd = "rbd/a"
ceph_conf = "{conf}"

[[subsystem.namespace]]
rbd = "rbd/b"
ceph_conf = "{conf}"
ceph_id = "client.admin"
block_size = 4096
"#
    )
}

/// A cluster with the two images [`config`] names: `rbd/a` of 64 MiB and `rbd/b` of 32 MiB.
fn cluster_with_images() -> CephCluster {
    let cluster = CephCluster::start();
    cluster.create_image("a", "64M");
    cluster.create_image("b", "32M");
    cluster
}

fn namespace_blocks(admin: &mut nvmf_tests::nvme_tcp_client::TcpTestClient, nsid: u32) -> u64 {
    let c = identify(admin, cns::NAMESPACE, nsid);
    assert_status(&c, Status::SUCCESS);
    let ns = IdentifyNamespace::parse(&c.data).unwrap();
    assert_eq!(ns.nsze, ns.ncap);
    ns.nsze
}

#[test]
fn data_written_through_the_target_is_in_the_image() {
    let cluster = cluster_with_images();
    let toml = config(&cluster);
    let t = Target::start(&toml);
    let mut a = Association::new(t.addr, options(), 1);
    assert_eq!(namespace_blocks(&mut a.admin, 1), 64 * MIB / 512);
    assert_eq!(namespace_blocks(&mut a.admin, 2), 32 * MIB / 4096);

    // 128 KiB at LBA 1000, and the last block of each namespace.
    let data = pattern(128 << 10, 3);
    assert_status(&write(a.io(), 1, 512, 1000, &data, false), Status::SUCCESS);
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 1000, data.len()))).data, data);
    let last1 = 64 * MIB / 512 - 1;
    let last2 = 32 * MIB / 4096 - 1;
    assert_status(&write(a.io(), 1, 512, last1, &pattern(512, 4), true), Status::SUCCESS);
    assert_status(&write(a.io(), 2, 4096, last2, &pattern(4096, 5), false), Status::SUCCESS);
    assert_eq!(ok(Ok(read(a.io(), 2, 4096, last2, 4096))).data, pattern(4096, 5));
    // One block past the end: LBA Out of Range, nothing sent to the cluster.
    assert_status(&read(a.io(), 2, 4096, last2 + 1, 4096), Status::LBA_OUT_OF_RANGE);
    ok(a.io().command(Flush { nsid: 1 }.to_sqe(), None, 0));

    // Write Zeroes over part of the 128 KiB; Deallocate another part (RBD may keep partial-object data: only
    // success is promised, as for a block device).
    let wz = WriteZeroes { nsid: 1, slba: 1008, nlb: 15, ..WriteZeroes::default() };
    ok(a.io().command(wz.to_sqe(), None, 0));
    let mut want = data.clone();
    want[8 * 512..24 * 512].fill(0);
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 1000, want.len()))).data, want);
    let range = DsmRange { cattr: 0, length: 8, slba: 4096 };
    let dsm = DatasetManagement { nsid: 1, nr: 0, ad: true, ..DatasetManagement::default() };
    ok(a.io().command(dsm.to_sqe(), Some(&range.to_bytes()), 0));

    // Fused Compare and Write, done by the OSD: one 512-byte block (librbd 16 compares within one sector only, so
    // two blocks are beyond the atomic unit, and a 4 KiB-block namespace has none).
    let (old, new) = (pattern(512, 6), pattern(512, 7));
    assert_status(&write(a.io(), 1, 512, 5000, &old, false), Status::SUCCESS);
    let [c, w] = compare_and_write(a.io(), 1, 512, 5000, &old, &new);
    assert_eq!((c.cqe.status, w.cqe.status), (Status::SUCCESS, Status::SUCCESS));
    let [c, w] = compare_and_write(a.io(), 1, 512, 5000, &old, &old);
    assert_eq!(
        (c.cqe.status, w.cqe.status),
        (Status::COMPARE_FAILURE.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr())
    );
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 5000, 512))).data, new);
    let two = pattern(1024, 8);
    let [c, w] = compare_and_write(a.io(), 1, 512, 5000, &two, &two);
    let failed_fused = Status::ABORTED_FAILED_FUSED.with_dnr();
    assert_eq!((c.cqe.status, w.cqe.status), (Status::ATOMIC_WRITE_UNIT_EXCEEDED.with_dnr(), failed_fused));
    let block = pattern(4096, 9);
    let [c, w] = compare_and_write(a.io(), 2, 4096, 10, &block, &block);
    assert_eq!((c.cqe.status, w.cqe.status), (Status::INVALID_FIELD.with_dnr(), failed_fused));
    let wins = race_compare_and_write(t.addr, 1, 512, 6000, 40);
    eprintln!("Compare and Write successes per host: {wins:?}");

    // The bytes are in the image, where the LBAs say.
    let image = cluster.export("a");
    assert_eq!(image.len() as u64, 64 * MIB);
    assert_eq!(&image[1000 * 512..1000 * 512 + want.len()], &want[..]);
    assert_eq!(&image[image.len() - 512..], &pattern(512, 4)[..]);

    // And they survive the target.
    drop(a);
    t.shutdown();
    let t = Target::start(&toml);
    let mut a = Association::new(t.addr, options(), 1);
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 1000, want.len()))).data, want);
    assert_eq!(ok(Ok(read(a.io(), 2, 4096, last2, 4096))).data, pattern(4096, 5));
}

#[test]
fn a_resized_image_reaches_hosts() {
    let cluster = cluster_with_images();
    let mut config = TargetConfig::from_str(&config(&cluster), "<test>").expect("valid configuration");
    config.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    config.listeners[0].address.set_port(0);
    let running = nvmf_target::daemon::start(&config).expect("target starts");
    let mut a = Association::new(running.local_addrs()[0], options(), 1);
    assert_eq!(namespace_blocks(&mut a.admin, 2), 32 * MIB / 4096);
    let cid = hold_aer(&mut a.admin);
    cluster.rbd(&["resize", "--size", "48M", "rbd/b"]);
    expect_namespace_notice(&mut a.admin, cid, 2);
    assert_eq!(namespace_blocks(&mut a.admin, 2), 48 * MIB / 4096);
    // The new blocks are usable at once.
    let last = 48 * MIB / 4096 - 1;
    assert_status(&write(a.io(), 2, 4096, last, &pattern(4096, 9), false), Status::SUCCESS);
    assert_eq!(ok(Ok(read(a.io(), 2, 4096, last, 4096))).data, pattern(4096, 9));

    // Each image's series: nothing in librbd once the commands completed, no failure.
    let page = scrape(running.metrics_addr().expect("metrics listening"));
    for image in ["a", "b"] {
        let ns = if image == "a" { 1 } else { 2 };
        let labels = format!("{{subsystem=\"{SUBNQN}\",namespace=\"{ns}\",image=\"rbd/{image}\"}}");
        assert!(page.contains(&format!("nvmf_target_rbd_ops_in_flight{labels} 0\n")), "{page}");
        assert!(page.contains(&format!("nvmf_target_rbd_errors_total{labels} 0\n")), "{page}");
        assert!(page.contains(&format!("nvmf_target_rbd_reopened_total{labels} 0\n")), "{page}");
    }
    drop(a);
    running.shutdown();
}

#[test]
fn a_fenced_gateway_reconnects_and_serves_again() {
    let cluster = cluster_with_images();
    let t = Target::start(&config(&cluster));
    let mut a = Association::new(t.addr, options(), 1);
    assert_status(&write(a.io(), 1, 512, 100, &pattern(4096, 1), false), Status::SUCCESS);

    // The cluster fences this target's client, as when another gateway breaks its lock.
    let status = cluster.rbd(&["status", "--format", "json", "rbd/a"]);
    let watcher = status.split("\"address\":\"").nth(1).and_then(|s| s.split('"').next()).expect("a watcher");
    cluster.ceph(&["osd", "blocklist", "add", watcher]);

    // Writes fail with a retryable path error (a multipath host retries them elsewhere) until the image is
    // reopened through a new client; then they succeed again and the data is all there.
    let mut write_until_served = |nsid: u32, block: usize, slba: u64, data: &[u8]| -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut refused = 0;
        loop {
            let c = write(a.io(), nsid, block, slba, data, false);
            if c.cqe.status.is_success() {
                return refused;
            }
            assert_eq!(c.cqe.status, Status::INTERNAL_PATH_ERROR, "a fenced write is a path error, without DNR");
            refused += 1;
            assert!(std::time::Instant::now() < deadline, "namespace {nsid}'s image was never reopened");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    assert!(write_until_served(1, 512, 200, &pattern(4096, 2)) >= 1, "the blocklisted client failed no write");
    // The other image shares the fenced client: it is reopened the same way, through the same new client.
    write_until_served(2, 4096, 0, &pattern(4096, 3));
    assert_eq!(ok(Ok(read(a.io(), 2, 4096, 0, 4096))).data, pattern(4096, 3));
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 100, 4096))).data, pattern(4096, 1));
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 200, 4096))).data, pattern(4096, 2));
    let subsystem = t.running().target().subsystem(SUBNQN).expect("the subsystem");
    let stats = subsystem.namespaces().get(1).expect("namespace 1").storage().rbd_stats().expect("an RBD image");
    assert_eq!(stats.reopened, 1);
}

#[test]
fn a_connection_closed_with_ops_in_the_cluster_goes_once_they_end() {
    let cluster = cluster_with_images();
    let t = Target::start(&config(&cluster));
    let mut a = Association::new(t.addr, options(), 1);
    assert_status(&write(a.io(), 1, 512, 0, &pattern(4096, 1), false), Status::SUCCESS);
    // The OSD stops answering: a write stays in librbd while its host goes away.
    let osd = cluster.osd_pid().to_string();
    let signal = |name: &str| {
        let ok = std::process::Command::new("kill").args([name, osd.as_str()]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill {name} {osd}");
    };
    signal("-STOP");
    let mut sqe = nvmf_common::nvme::io::Write { nsid: 1, slba: 8, nlb: nlb(4096, 512), ..Default::default() }.to_sqe();
    sqe.cid = a.io().next_cid();
    let in_capsule = SglDescriptor::DataBlock { address: 0, length: 4096, subtype: SglSubtype::Offset };
    sqe.set_sgl1(&in_capsule).unwrap();
    a.io().send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), &pattern(4096, 2)).expect("the write is sent");
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(a);
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal("-CONT");
    // Once the write ends, the closed connection leaves: nothing of it stays in the reactor.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while t.running().tcp_connections() > 0 {
        assert!(std::time::Instant::now() < deadline, "the closed connection never left the reactor");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An error and its sources, as the binary prints them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[test]
fn a_missing_image_is_one_clear_start_error() {
    let cluster = CephCluster::start();
    cluster.create_image("a", "64M");
    let config = TargetConfig::from_str(&config(&cluster), "<test>").expect("valid configuration");
    let error = nvmf_target::daemon::start(&config).expect_err("rbd/b does not exist");
    let message = chain(&error);
    assert!(message.contains("cannot open RBD image rbd/b"), "{message}");
    assert!(message.contains("No such file or directory"), "{message}");

    let mut config = config;
    config.subsystems[0].namespaces.truncate(1);
    let nvmf_config::target::NamespaceBackend::Rbd(image) = &mut config.subsystems[0].namespaces[0].backend else {
        panic!("namespace 1 is an RBD image")
    };
    image.ceph_conf = "/nonexistent/ceph.conf".into();
    let error = nvmf_target::daemon::start(&config).expect_err("no such configuration file");
    let message = chain(&error);
    assert!(message.contains("cannot read the Ceph configuration"), "{message}");
}

#[test]
fn doctor_and_reload_reach_the_cluster() {
    let cluster = cluster_with_images();
    let dir = tempfile::tempdir().unwrap();

    // doctor opens each image: rbd/a is there, rbd/missing is not (a failure naming it, with a fix).
    let with_missing = config(&cluster).replace("rbd/b", "rbd/missing");
    let report = nvmf_target::doctor::diagnose(
        &TargetConfig::from_str(&with_missing, "<test>").unwrap(),
        std::path::Path::new("/"),
    );
    let line = |image: &str| {
        report.findings.iter().find(|f| f.check.starts_with(&format!("rbd {image} "))).expect("a finding per image")
    };
    assert_eq!(line("rbd/a").level, nvmf_service::doctor::report::Level::Ok);
    assert_eq!(line("rbd/missing").level, nvmf_service::doctor::report::Level::Fail);
    assert!(line("rbd/missing").finding.contains("cannot open RBD image rbd/missing"));
    assert!(!report.ok);

    // A keyring its group or others may read holds no secret: refused, with the fix.
    use std::os::unix::fs::PermissionsExt;
    let keyring = cluster.conf().with_file_name("keyring");
    std::fs::set_permissions(&keyring, std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = nvmf_target::doctor::diagnose(
        &TargetConfig::from_str(&config(&cluster), "<test>").unwrap(),
        std::path::Path::new("/"),
    );
    std::fs::set_permissions(&keyring, std::fs::Permissions::from_mode(0o600)).unwrap();
    let refused = report.findings.iter().find(|f| f.check.starts_with("rbd rbd/a ")).expect("rbd/a's finding");
    assert_eq!(refused.level, nvmf_service::doctor::report::Level::Fail);
    let want = format!(
        "the Ceph keyring {} has mode 0644, not its owner's alone (0600 or 0400): chmod 600 it",
        keyring.display()
    );
    assert!(refused.finding.contains(&want), "{}", refused.finding);

    // A reload adds an RBD namespace and removes one.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let with_port =
        |text: String| text.replace("address = \"127.0.0.1\"", &format!("address = \"127.0.0.1\"\nport = {port}"));
    let only_a = {
        let full = config(&cluster);
        let cut = full.find("[[subsystem.namespace]]\nrbd = \"rbd/b\"").expect("namespace 2's table");
        full[..cut].to_owned()
    };
    let config_path = dir.path().join("target.toml");
    std::fs::write(&config_path, with_port(only_a.clone())).unwrap();
    let log = dir.path().join("stderr.log");
    let control = dir.path().join("control.sock");
    let args = [std::ffi::OsStr::new("--config"), config_path.as_os_str(), "--control".as_ref(), control.as_os_str()];
    let mut daemon = TargetProcess::spawn(&args, None, &log);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the target never listened:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut a = Association::new(addr, options(), 1);
    assert_status(&write(a.io(), 1, 512, 0, &pattern(4096, 1), false), Status::SUCCESS);
    let cid = hold_aer(&mut a.admin);
    std::fs::write(&config_path, with_port(config(&cluster))).unwrap();
    daemon.signal("HUP");
    expect_namespace_notice(&mut a.admin, cid, 2);
    assert_eq!(namespace_blocks(&mut a.admin, 2), 32 * MIB / 4096);
    assert_status(&write(a.io(), 2, 4096, 0, &pattern(4096, 2), false), Status::SUCCESS);
    wait_log(&log, "configuration reloaded");
    let cid = hold_aer(&mut a.admin);
    std::fs::write(&config_path, with_port(only_a)).unwrap();
    daemon.signal("HUP");
    expect_namespace_notice(&mut a.admin, cid, 2);
    assert!(!read(a.io(), 2, 4096, 0, 4096).cqe.status.is_success(), "namespace 2 is gone");
    assert_eq!(ok(Ok(read(a.io(), 1, 512, 0, 4096))).data, pattern(4096, 1));
    drop(a);
    daemon.signal("TERM");
    assert!(daemon.wait().success());
}
