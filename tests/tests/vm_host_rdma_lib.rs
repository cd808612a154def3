//! Our NVMe/RDMA host (`nvmf_host::rdma`) against the Linux 6.12 kernel target (nvmet-rdma, a memory-backed
//! null_blk namespace) over Soft-RoCE in the test VM, the library itself run inside the guest. The CLI and daemon over
//! NVMe/RDMA, as a user drives them: `vm_host_rdma.rs`.
//!
//! | test | what it proves |
//! |---|---|
//! | `rdma_host_against_kernel_nvmet` | boots one guest and runs the `guest_*` tests below there, then `nvmf-host perf -t rdma -T 3 --json` reports nonzero IOPS with every command successful |
//! | `guest_admin_and_io` (in the guest) | admin queue: RDMA CM connect, Fabrics Connect, Property Get CAP, CC.EN → CSTS.RDY, Identify Controller and Namespace give the null_blk's geometry; one I/O queue with a memory window per command: writes of 512 B (in-capsule), 4 KiB, 128 KiB and 1 MiB (keyed SGL) submitted at once and read back byte-exact, also at once; the same on a second queue without memory windows (the fallback); a read past the end gets an error status and the queue goes on |
//! | `guest_controller_async_io` (in the guest) | the library's `Controller` over NVMe/RDMA, async: a gathered write of 2 MiB + 1.5 KiB (split at MDTS, buffer edges inside blocks) read back scattered into other buffers, byte-exact; 64 reads awaited together from one thread; flush |
//! | `guest_rejects` (in the guest) | a wrong subsystem NQN → Connect refused with Connect Invalid Parameters; an I/O queue ID the controller never granted → its Connect refused; an admin queue with HSQSIZE 64 (> 31) → the RDMA CM reject carrying NVMe/RDMA status Invalid HSQSIZE |
//!
//! The `guest_*` tests are `#[ignore]`d: they need the guest's rxe0 and nvmet-rdma, and the host test runs this
//! same test executable inside the guest with `--ignored`. Opt-in like every VM scenario (`NVMF_VM=1`); logs in
//! `target/tmp/vm-logs/<test>/`.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_host_rdma_lib -- --nocapture
//!
//! `NVMF_HOST_BIN` picks the `nvmf-host` binary (default: built with the test's profile); `RDMA_HOST_BENCH=1`
//! also runs `vm/host-bench.sh --guest` (`nvmf-host perf` vs the kernel host with fio over nvmet-tcp and
//! nvmet-rdma) in the same guest and prints its table.

use std::io::{IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use nvmf_common::fabrics::property::{Capabilities, Property};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::Status;
use nvmf_host::controller::NamespaceInfo;
use nvmf_host::queue::execute;
use nvmf_host::queue::{DataDirection, Request};
use nvmf_host::rdma::{RdmaQueue, RdmaQueueOptions};
use nvmf_host::{ConnectOptions, Controller, HostError, Transport};
use nvmf_tests::executor::{block_on, join_all};
use nvmf_tests::vm::{self, Vm};

const NQN: &str = "nqn.2024-01.io.nvmf-rs:vm-rdma-host";
/// nvmet's RDMA port in the guest (`$NVMF_RDMA_ADDR`).
const ADDR: &str = "10.77.0.1:4420";
/// The null_blk namespace: 256 MiB of 512-byte blocks.
const NS_BLOCKS: u64 = 256 << 11;

fn addr() -> SocketAddr {
    ADDR.parse().expect("address")
}

fn options() -> ConnectOptions {
    ConnectOptions {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:5e0a2a4f-0a36-4a41-9d6c-6b1f2b3c4d5e".into(),
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        ..ConnectOptions::default()
    }
}

/// An NVMe/RDMA association that drives bare I/O queues: a [`Controller`] connected over RDMA with no I/O queues
/// of its own, and I/O queues connected to it as bare [`RdmaQueue`]s polled by the test. Only this test uses it,
/// so it lives here rather than in the host library (which would then use its controller from `rdma`).
#[derive(Debug)]
struct BareAdmin {
    ctrl: Controller,
    cntlid: u16,
    cap: Capabilities,
    /// MDTS in bytes, `None` when unlimited.
    max_transfer: Option<u32>,
    /// In-capsule data bytes an I/O command may carry (IOCCSZ * 16 - 64).
    in_capsule_data: u32,
    nn: u32,
    /// Whether I/O queues connected from now on bind a memory window per command (when the device has them);
    /// false gives the fallback: one region per slot and direction, keyed for the queue's life.
    memory_windows: bool,
}

impl BareAdmin {
    /// Connect over NVMe/RDMA with no I/O queues and enable the controller.
    fn connect(addr: SocketAddr, subnqn: &str, options: &ConnectOptions) -> Result<Self, HostError> {
        let options = ConnectOptions { transport: Transport::Rdma, nr_io_queues: 0, ..options.clone() };
        let ctrl = Controller::connect(addr, subnqn, options)?;
        let info = ctrl.info();
        Ok(BareAdmin {
            cntlid: info.cntlid,
            cap: info.cap,
            max_transfer: info.max_transfer,
            in_capsule_data: info.in_capsule_data,
            nn: info.nn,
            memory_windows: true,
            ctrl,
        })
    }

    fn property_get(&self, p: Property) -> Result<u64, HostError> {
        self.ctrl.property_get(p)
    }

    fn namespaces(&self) -> Result<Vec<NamespaceInfo>, HostError> {
        self.ctrl.namespaces()
    }

    /// Set Features Number of Queues: how many of `count` I/O queue pairs are granted.
    fn set_io_queues(&self, count: u16) -> Result<u16, HostError> {
        self.ctrl.request_io_queues(count)
    }

    /// Connect I/O queue `qid` of this association as a bare queue of `depth` commands (SQSIZE `depth`).
    fn connect_io_queue<T: Default + Send>(&self, qid: u16, depth: u16) -> Result<RdmaQueue<T>, HostError> {
        let o = self.ctrl.options();
        let qopts = RdmaQueueOptions {
            qid,
            depth,
            in_capsule_limit: self.in_capsule_data,
            cntlid: self.cntlid,
            memory_windows: self.memory_windows,
            connect_timeout: o.connect_timeout,
            command_timeout: o.io_timeout,
        };
        let mut queue = RdmaQueue::connect(self.ctrl.addr(), &qopts)?;
        self.ctrl.fabrics_connect(&mut queue, depth)?;
        Ok(queue)
    }

    /// Shut the controller down (CC.SHN) and disconnect.
    fn close(self) {
        if let Err(e) = self.ctrl.disconnect() {
            eprintln!("disconnecting the bare admin's controller: {e}");
        }
    }
}

#[test]
fn rdma_host_against_kernel_nvmet() {
    let name = "rdma_host_against_kernel_nvmet";
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join(name);
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new(name).logs(logs).rxe(true).deadline(Duration::from_secs(300));
    let vm = match vm::enabled() {
        Ok(()) => {
            let host = match std::env::var_os("NVMF_HOST_BIN") {
                Some(bin) => PathBuf::from(bin),
                None => nvmf_tests::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
                    .unwrap_or_else(|e| panic!("nvmf-host binary: {e}")),
            };
            let exe = std::env::current_exe().expect("test executable");
            vm.env("NVMF_HOST_BIN", host.to_string_lossy()).env("RDMA_HOST_TESTS", exe.to_string_lossy())
        }
        Err(_) => vm, // run_or_skip says why and skips (or panics under NVMF_REQUIRE_VM=1)
    };
    // RDMA_HOST_BENCH=1: also measure nvmf-host perf against the kernel host (tests/vm/host-bench.sh).
    let vm = match std::env::var("RDMA_HOST_BENCH") {
        Ok(v) => vm.env("RDMA_HOST_BENCH", v).deadline(Duration::from_secs(420)),
        Err(_) => vm,
    };
    let manifest = env!("CARGO_MANIFEST_DIR");
    let script = format!(
        r#"
set -eu
nvmet_subsys_nullblk {NQN} 256
nvmet_rdma_port 1 "$NVMF_RDMA_ADDR" 4420 {NQN}
timeout 240 "$RDMA_HOST_TESTS" --ignored --exact --nocapture --test-threads 1 guest_admin_and_io guest_rejects \
  guest_controller_async_io
timeout 60 "$NVMF_HOST_BIN" perf -t rdma -a "$NVMF_RDMA_ADDR" -s 4420 -n {NQN} -q 32 -o 4096 -w randread -T 3 --json \
  > "$NVMF_VM_LOGS/perf.json" 2> "$NVMF_VM_LOGS/perf.log" || {{ cat "$NVMF_VM_LOGS/perf.log" >&2; fail "perf -t rdma"; exit 1; }}
echo "PERF $(cat "$NVMF_VM_LOGS/perf.json")"
if [ -n "${{RDMA_HOST_BENCH:-}}" ]; then
  nvmet_teardown
  {manifest}/vm/host-bench.sh --guest
fi
"#
    );
    let Some(out) = vm.run_or_skip(&script) else { return };
    out.assert_success();
    // --nocapture interleaves the guest tests' output with libtest's lines: count passes in its summary.
    assert!(out.stdout.contains("test result: ok. 3 passed; 0 failed"), "guest tests failed\n{}", out.report());
    let line = out.stdout.lines().find_map(|l| l.strip_prefix("PERF ")).unwrap_or_else(|| panic!("{}", out.report()));
    let perf: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("perf JSON {line}: {e}"));
    let iops = perf["iops"].as_f64().unwrap_or(0.0);
    assert!(iops > 0.0, "perf -t rdma: {perf}");
    assert_eq!(perf["reads"].as_u64().map(|r| r > 0), Some(true), "{perf}");
    assert_eq!(perf["io_size"], 4096, "{perf}");
    eprintln!("perf -t rdma 4k randread QD32: {iops:.0} IOPS, latency {}", perf["latency_us"]);
}

/// A recognisable pattern for the write at `slba` of `len` bytes.
fn pattern(slba: u64, len: usize) -> Vec<u8> {
    #[expect(clippy::cast_possible_truncation, reason = "a repeating byte pattern")]
    (0..len).map(|i| ((i as u64).wrapping_mul(31) ^ slba.wrapping_mul(7) ^ (i as u64 >> 9)) as u8).collect()
}

#[test]
#[ignore = "runs inside the test VM (rdma_host_against_kernel_nvmet starts it)"]
fn guest_admin_and_io() {
    let mut admin = BareAdmin::connect(addr(), NQN, &options()).expect("admin queue");
    assert_ne!(admin.cntlid, 0xFFFF);
    assert!(admin.cap.max_queue_entries() >= 32, "CAP {:?}", admin.cap);
    assert_eq!(admin.property_get(Property::Cap).unwrap(), admin.cap.to_u64());
    assert!(admin.nn >= 1, "NN {}", admin.nn);
    assert_eq!(admin.max_transfer, Some(1 << 20), "nvmet-rdma's MDTS is 1 MiB");
    assert!(admin.in_capsule_data >= 512, "IOCCSZ gives {} in-capsule bytes", admin.in_capsule_data);
    let ns = admin.namespaces().expect("namespaces");
    assert_eq!(ns.len(), 1, "{ns:?}");
    assert_eq!((ns[0].nsid, ns[0].block_size, ns[0].blocks), (1, 512, NS_BLOCKS));
    println!(
        "admin: cntlid {} MQES+1 {} in-capsule {} MDTS {:?}",
        admin.cntlid,
        admin.cap.max_queue_entries(),
        admin.in_capsule_data,
        admin.max_transfer
    );

    assert!(admin.set_io_queues(2).expect("Number of Queues") >= 2);
    let mut q: RdmaQueue<usize> = admin.connect_io_queue(1, 32).expect("I/O queue 1");
    assert!(q.memory_windows(), "rxe has type 2 memory windows");
    let slba = |i: usize| (i as u64) * 4096 + 8;
    round_trip(&mut q, admin.in_capsule_data, slba, "window per command");
    // A read beyond the namespace gets an error status, and the queue goes on.
    let sqe = Read { nsid: 1, slba: NS_BLOCKS, nlb: 0, ..Read::default() }.to_sqe();
    let request = Request { sqe, data: vec![0; 512], direction: DataDirection::ControllerToHost, context: 0 };
    let c = execute(&mut q, request, Duration::from_secs(20)).expect("read past the end");
    let status = c.result.expect("a completion").status;
    assert!(!status.is_success(), "read past the end: {status}");
    println!("read past the end: {status}");
    let sqe = Read { nsid: 1, slba: slba(0), nlb: 0, ..Read::default() }.to_sqe();
    let request = Request { sqe, data: vec![0; 512], direction: DataDirection::ControllerToHost, context: 0 };
    let c = execute(&mut q, request, Duration::from_secs(20)).expect("read after the error");
    assert!(c.result.expect("a completion").status.is_success());
    assert!(c.data == pattern(slba(0), 512));
    let stats = q.stats();
    // Fabrics Connect, 4 writes, 4 reads, 2 more reads.
    assert_eq!((stats.submitted, stats.completed), (11, 11), "{stats:?}");
    q.close();
    assert!(matches!(q.poll(Some(Duration::ZERO)), Err(HostError::ShutDown { qid: 1 })));

    // The fallback without memory windows: per-slot regions keyed for the queue's life.
    admin.memory_windows = false;
    let mut q2: RdmaQueue<usize> = admin.connect_io_queue(2, 16).expect("I/O queue 2");
    assert!(!q2.memory_windows());
    round_trip(&mut q2, admin.in_capsule_data, |i| 200_000 + (i as u64) * 4096, "no windows");
    q2.close();
    admin.close();
}

#[test]
#[ignore = "runs inside the test VM (rdma_host_against_kernel_nvmet starts it)"]
fn guest_controller_async_io() {
    let options = ConnectOptions { transport: Transport::Rdma, nr_io_queues: 2, ..options() };
    let ctrl = Controller::connect(addr(), NQN, options).expect("connect over RDMA");
    let within = Duration::from_secs(60);
    let mdts = 1usize << 20;
    let len = 2 * mdts + 3 * 512;
    let slba = 300_000;
    let data = pattern(slba, len);
    let cuts = [0, 1000, 1007, mdts - 5, mdts + 4096, len - 1, len];
    let gathered: Vec<IoSlice> = cuts.windows(2).map(|w| IoSlice::new(&data[w[0]..w[1]])).collect();
    block_on(ctrl.write_async(1, slba, &gathered), within).expect("gathered write");
    let mut back = vec![0u8; len];
    {
        let (a, rest) = back.split_at_mut(513);
        let (b, c) = rest.split_at_mut(mdts + 7);
        let mut bufs = [IoSliceMut::new(a), IoSliceMut::new(b), IoSliceMut::new(c)];
        block_on(ctrl.read_async(1, slba, &mut bufs), within).expect("scattered read");
    }
    assert!(back == data, "the scattered read returned the gathered write's bytes");

    let reads = (0..64u64)
        .map(|i| {
            let sqe = Read { nsid: 1, slba: slba + i * 8, nlb: 7, ..Read::default() }.to_sqe();
            let request = Request { sqe, data: vec![0; 4096], direction: DataDirection::ControllerToHost, context: () };
            ctrl.submit_io_async(request).expect("submitted")
        })
        .collect();
    for (i, reply) in block_on(join_all(reads), within).into_iter().enumerate() {
        let reply = reply.expect("read completes");
        assert!(reply.result.expect("a completion").status.is_success(), "read {i}");
        assert!(reply.data == data[i * 4096..(i + 1) * 4096], "read {i}");
    }
    block_on(ctrl.flush_async(1), within).expect("flush");
    println!("async over RDMA: {len} bytes gathered and scattered, 64 reads awaited together");
    ctrl.disconnect().expect("disconnect");
}

/// Write 512 B, 4 KiB, 128 KiB and 1 MiB at `slba(0..4)` all at once, read them back all at once, byte-exact.
fn round_trip(q: &mut RdmaQueue<usize>, in_capsule_data: u32, slba: impl Fn(usize) -> u64, label: &str) {
    let sizes = [512usize, 4096, 128 << 10, 1 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let nlb = u16::try_from(len / 512 - 1).unwrap();
        let sqe = Write { nsid: 1, slba: slba(i), nlb, ..Write::default() }.to_sqe();
        let request =
            Request { sqe, data: pattern(slba(i), len), direction: DataDirection::HostToController, context: i };
        q.submit(request).expect("submit write");
    }
    let done = drain(q, sizes.len());
    let mut how = [""; 4];
    for c in &done {
        let cqe = c.result.as_ref().expect("write");
        assert!(cqe.status.is_success(), "write of {} bytes: {}", sizes[c.context], cqe.status);
        let expect_in_capsule = sizes[c.context] <= in_capsule_data as usize;
        assert_eq!(c.in_capsule, expect_in_capsule, "write of {} bytes", sizes[c.context]);
        how[c.context] = if c.in_capsule { "in-capsule" } else { "keyed SGL" };
    }
    assert!(done.iter().any(|c| c.in_capsule) && done.iter().any(|c| !c.in_capsule));
    for (i, &len) in sizes.iter().enumerate() {
        let nlb = u16::try_from(len / 512 - 1).unwrap();
        let sqe = Read { nsid: 1, slba: slba(i), nlb, ..Read::default() }.to_sqe();
        let request = Request { sqe, data: vec![0; len], direction: DataDirection::ControllerToHost, context: i };
        q.submit(request).expect("submit read");
    }
    for c in drain(q, sizes.len()) {
        let len = sizes[c.context];
        let cqe = c.result.as_ref().expect("read");
        assert!(cqe.status.is_success(), "read of {len} bytes: {}", cqe.status);
        assert!(c.data == pattern(slba(c.context), len), "read of {len} bytes differs from what was written");
        println!("{label}: {len} bytes written ({}) and read back (keyed SGL): ok", how[c.context]);
    }
}

/// Poll until `n` commands completed.
fn drain(q: &mut RdmaQueue<usize>, n: usize) -> Vec<nvmf_host::queue::Completion<usize>> {
    let mut done = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done.len() < n {
        q.poll(Some(Duration::from_millis(100))).expect("poll");
        while let Some(c) = q.next_completion() {
            done.push(c);
        }
        assert!(std::time::Instant::now() < deadline, "{} of {n} commands completed", done.len());
    }
    done
}

#[test]
#[ignore = "runs inside the test VM (rdma_host_against_kernel_nvmet starts it)"]
fn guest_rejects() {
    // A subsystem the target does not have.
    let err = BareAdmin::connect(addr(), "nqn.2024-01.io.nvmf-rs:no-such-subsystem", &options()).unwrap_err();
    println!("wrong NQN: {err}");
    match &err {
        HostError::ConnectRejected { qid: 0, status, .. } => {
            assert!(status.same_code(Status::CONNECT_INVALID_PARAMETERS), "{status}")
        }
        other => panic!("wrong NQN: {other:?}"),
    }

    // A queue ID beyond any the controller has: nvmet-rdma's CM accepts it, Fabrics Connect refuses it.
    let admin = BareAdmin::connect(addr(), NQN, &options()).expect("admin queue");
    let err = admin.connect_io_queue::<u32>(u16::MAX, 8).unwrap_err();
    println!("I/O queue 65535: {err}");
    assert!(matches!(&err, HostError::ConnectRejected { status, .. } if !status.is_success()), "{err:?}");
    admin.close();

    // An admin queue deeper than NVMe's 32 entries: nvmet-rdma rejects the RDMA CM request itself.
    let qopts = RdmaQueueOptions { qid: 0, depth: 64, ..RdmaQueueOptions::default() };
    let err = RdmaQueue::<()>::connect(addr(), &qopts).unwrap_err();
    println!("admin HSQSIZE 64: {err}");
    match &err {
        HostError::RdmaRejected { qid: 0, reason, .. } => assert!(reason.contains("InvalidHsqsize"), "{reason}"),
        other => panic!("admin HSQSIZE 64: {other:?}"),
    }
}
