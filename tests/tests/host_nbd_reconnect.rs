//! The NBD export across a target restart, in-process on 127.0.0.1: its commands complete through a
//! completion sink ([`nvmf_host::queue::handle::CompletionSink`]), and a write the client sends while the
//! target is down is held and then completes on the new association — qemu-io, the client, sees no error and
//! reads its data back, and the namespace (a file, so it survives the restart) holds it.
//! Skips with a printed reason when qemu-io is missing, unless `NVMF_REQUIRE_TOOLS=1`.

mod host_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_support::{options, SUBNQN};
use nvmf_config::TargetConfig;
use nvmf_host::nbd::{NbdExport, NbdListen, NbdOptions};
use nvmf_host::{Controller, ControllerState};
use nvmf_target::daemon::RunningTarget;

const MIB: usize = 1 << 20;

/// Our target serving `image` (a file namespace) on 127.0.0.1:`port` (0: any).
fn start(image: &Path, port: u16) -> RunningTarget {
    let text = format!(
        "[reactors]\nthreads = 1\n[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
         [[subsystem.namespace]]\npath = \"{}\"\n",
        image.display()
    );
    let mut config = TargetConfig::from_str(&text, "<test>").expect("test configuration is valid");
    config.listeners[0].address.set_port(port);
    nvmf_target::daemon::start(&config).expect("target starts")
}

fn have_qemu_io() -> bool {
    let ok = Command::new("qemu-io").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("NVMF_REQUIRE_TOOLS").is_none(), "qemu-io is required");
        eprintln!("skipped: qemu-io not installed (qemu-utils)");
    }
    ok
}

/// Wait (bounded generously, not a timing assertion) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_write_sent_while_the_target_restarts_completes_and_reads_back() {
    if !have_qemu_io() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image: PathBuf = dir.path().join("ns1.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(16 << 20)).unwrap();
    let target = start(&image, 0);
    let addr = target.local_addrs()[0];
    let mut o = options(2);
    o.reconnect_delay = Duration::from_millis(300);
    o.ctrl_loss_tmo = Some(Duration::from_secs(60));
    let ctrl = Arc::new(Controller::connect(addr, SUBNQN, o).expect("connect"));
    let listen = NbdListen::Unix(dir.path().join("nbd.sock"));
    let export = NbdExport::start(Arc::clone(&ctrl), 1, listen, NbdOptions::default()).expect("export starts");
    let uri = export.uri();

    // qemu-io writes 4 MiB, pauses (the target stops meanwhile), writes 8 MiB of another pattern over the
    // same range while the target is down (held), then reads the 8 MiB back checking the pattern.
    let client = {
        std::thread::spawn(move || {
            Command::new("qemu-io")
                .args(["-f", "raw", &uri, "-c", "write -P 0x11 0 4M", "-c", "sleep 2000"])
                .args(["-c", "write -P 0x5a 0 8M", "-c", "read -P 0x5a 0 8M"])
                .output()
                .expect("qemu-io runs")
        })
    };
    let written = || ctrl.io_queues().iter().map(|q| q.stats().written_bytes).sum::<u64>();
    wait_for("the first write", || written() >= 4 << 20);
    target.shutdown();
    wait_for("the controller to notice", || matches!(ctrl.state(), ControllerState::Reconnecting { .. }));
    // The pause ends and the second write goes out while the target is down: it is held, not failed.
    std::thread::sleep(Duration::from_millis(3000));
    assert!(!client.is_finished(), "the write is held while the target is down");
    assert!(written() < 8 << 20, "nothing of the second write completed yet");

    let target = start(&image, addr.port());
    let out = client.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "qemu-io: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("failed") && !stdout.contains("error"), "qemu-io saw an error:\n{stdout}");
    assert!(stdout.contains("wrote 8388608/8388608 bytes"), "{stdout}");
    assert!(stdout.contains("read 8388608/8388608 bytes"), "the pattern read back:\n{stdout}");
    assert_eq!(ctrl.state(), ControllerState::Live);
    assert_eq!(ctrl.reconnects(), 1);

    // The namespace itself holds the held write.
    let mut back = vec![0; 8 * MIB];
    ctrl.read(1, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5a), "the held write reached the namespace");
    export.stop();
    drop(Arc::into_inner(ctrl).expect("the export is stopped").disconnect());
    target.shutdown();
}
