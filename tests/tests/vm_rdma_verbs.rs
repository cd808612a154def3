//! The RDMA verbs and RDMA CM wrappers (`nvmf_common::transport::rdma::verbs`) over Soft-RoCE in the test VM.
//!
//! `rdma_verbs_over_rxe` boots a guest with `rxe0` on 10.77.0.1 and runs this same test binary there with
//! `--ignored --exact guest_verbs_loopback`: a listener and a client in one process (three event channels: the
//! listener's, the accepted connection's after `migrate`, the client's) connect with NVMe/RDMA private data
//! (request and accept checked), then, as an NVMe/RDMA command would: the client SENDs a capsule, the target
//! RDMA READs the host's buffer (two SGEs), RDMA WRITEs it back and SENDs a response in one chained post (the
//! client sleeps on its completion channel for it), and, where the device has type 2 memory windows and
//! send with invalidate, the client binds a window that the target writes through and invalidates with
//! SEND_WITH_INVALIDATE (a later write through it fails with a remote access error). Disconnect flushes the
//! outstanding receives. Then 100 connect/SEND/disconnect cycles, after which `rdma resource show` (PDs, CQs,
//! QPs, cm_ids, MRs, SRQs) and the process's open fds are back where they were.
//!
//!     NVMF_VM=1 cargo test -p nvmf-tests --test vm_rdma_verbs -- --nocapture

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvmf_common::transport::rdma::private_data::{RdmaCmAccept, RdmaCmRequest};
use nvmf_common::transport::rdma::verbs::{
    AccessFlags, CmEvent, CmEventKind, CmId, CompletionChannel, CompletionQueue, ConnParam, DeviceAttributes,
    EventChannel, MemoryRegion, ProtectionDomain, QpCapabilities, QpInitAttr, QueuePair, RecvWr, SendOpcode, SendWr,
    SharedReceiveQueue, WcOpcode, WcStatus, WorkCompletion,
};
use nvmf_tests::vm::Vm;

/// Set in the guest: the `#[ignore]`d half runs only there.
const GUEST_ENV: &str = "NVMF_RDMA_VERBS_GUEST";
const CYCLES: usize = 100;

#[test]
fn rdma_verbs_over_rxe() {
    let exe = std::env::current_exe().expect("test binary path");
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-logs").join("rdma_verbs_over_rxe");
    let _ = std::fs::remove_dir_all(&logs);
    let vm = Vm::new("rdma_verbs_over_rxe").rxe(true).logs(logs).env(GUEST_ENV, "1").deadline(Duration::from_secs(300));
    let Some(out) = vm.run_or_skip(&format!(
        r#"
set -u
rdma link show rxe0/1
timeout 240 {exe} --ignored --exact guest_verbs_loopback --nocapture --test-threads 1
"#,
        exe = exe.display()
    )) else {
        return;
    };
    out.assert_success();
    for needle in
        ["rxe0/1 state ACTIVE", "nvme private data: ok", "rdma read: ok", "rdma write + send: ok", "flushed: ok"]
    {
        assert!(out.stdout.contains(needle), "stdout lacks {needle:?}\n{}", out.report());
    }
    assert!(out.stdout.contains(&format!("cycles: {CYCLES}, resources released")), "{}", out.report());
    assert!(out.stdout.contains("send with invalidate: "), "{}", out.report());
}

#[test]
#[ignore = "runs inside the test VM (rdma_verbs_over_rxe)"]
fn guest_verbs_loopback() {
    if std::env::var_os(GUEST_ENV).is_none() {
        eprintln!("SKIPPED: guest_verbs_loopback runs inside the test VM (rdma_verbs_over_rxe sets {GUEST_ENV})");
        return;
    }
    let ip: IpAddr = std::env::var("NVMF_RDMA_ADDR").unwrap_or_else(|_| "10.77.0.1".into()).parse().unwrap();

    // The first exchange opens librdmacm's device contexts (they stay open); count from after it.
    exchange(ip, true);
    let (res_before, fds_before) = (rdma_resources(), open_fds());
    println!("resources before the cycles: {res_before:?}, {fds_before} fds");
    let start = Instant::now();
    for _ in 0..CYCLES {
        exchange(ip, false);
    }
    let elapsed = start.elapsed();
    // The kernel may release a queue pair a moment after destroy returns: allow it a few seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut res_after = rdma_resources();
    while res_after != res_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        res_after = rdma_resources();
    }
    assert_eq!(res_after, res_before, "RDMA resources leaked across {CYCLES} cycles");
    assert_eq!(open_fds(), fds_before, "fds leaked across {CYCLES} cycles");
    println!("cycles: {CYCLES}, resources released ({:.1} ms per cycle)", elapsed.as_secs_f64() * 1e3 / CYCLES as f64);
}

const TIMEOUT: Duration = Duration::from_secs(10);
const SLOT: usize = 1024;
const SLOTS: usize = 8;
const SLOTS_U16: u16 = 8;
const DATA: usize = 16 * 1024;

fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap()
}

/// Wait for an event of `kind` on `ch` (skipping time-wait exits of earlier connections).
fn expect_event(ch: &EventChannel, kind: CmEventKind) -> CmEvent {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out waiting for {kind:?}");
        if let Some(ev) = ch.wait(left).unwrap() {
            if ev.kind == CmEventKind::TimewaitExit && kind != CmEventKind::TimewaitExit {
                continue;
            }
            assert_eq!(ev.kind, kind, "unexpected RDMA CM event {ev:?}");
            return ev;
        }
    }
}

/// Poll `cq` until `n` completions arrived.
fn poll_n(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while got.len() < n {
        let k = cq.poll(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        if k == 0 {
            assert!(Instant::now() < deadline, "timed out: {} of {n} completions: {got:?}", got.len());
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    assert_eq!(got.len(), n, "more completions than expected: {got:?}");
    got
}

/// Sleep on `channel` until `cq` reports, then poll its `n` completions.
fn wait_on_channel(channel: &CompletionChannel, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = [WorkCompletion::default(); 16];
    while got.len() < n {
        cq.req_notify(false).unwrap();
        // Completions that arrived before arming raise no event: poll once after arming.
        let k = cq.poll(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        if k > 0 {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no completion event");
        if let Some(key) = channel.wait(left).unwrap() {
            assert_eq!(key, cq.key(), "event for another CQ");
        }
    }
    got
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_mul(31).wrapping_add(i.to_le_bytes()[0] % 251) ^ i.to_le_bytes()[1]).collect()
}

fn read(mr: &MemoryRegion, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.read_at(offset, &mut v).unwrap();
    v
}

fn region(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> MemoryRegion {
    pd.register(vec![0u8; len].into_boxed_slice(), access).unwrap()
}

fn post_recv_slots(qp: Option<&mut QueuePair>, srq: Option<&mut SharedReceiveQueue>, mr: &MemoryRegion) {
    let sges: Vec<_> = (0..SLOTS).map(|i| [mr.sge(i * SLOT, u32_of(SLOT)).unwrap()]).collect();
    let wrs: Vec<_> = sges.iter().enumerate().map(|(i, s)| RecvWr { wr_id: i as u64, sges: s }).collect();
    // SAFETY: `mr` outlives the queue (the caller drops the QP/SRQ first) and is only read after a receive's
    // completion says it was written.
    unsafe {
        match (qp, srq) {
            (_, Some(srq)) => srq.post_recv(&wrs).unwrap(),
            (Some(qp), None) => qp.post_recv(&wrs).unwrap(),
            (None, None) => unreachable!(),
        }
    }
}

/// One connection between a client and a listener in this process; with `detailed`, every operation and
/// check, otherwise connect, one SEND, disconnect.
fn exchange(ip: IpAddr, detailed: bool) {
    let listen_ch = EventChannel::new().unwrap();
    let conn_ch = EventChannel::new().unwrap();
    let client_ch = EventChannel::new().unwrap();
    let mut listener = CmId::new(&listen_ch).unwrap();
    listener.bind_addr(SocketAddr::new(ip, 0)).unwrap();
    listener.listen(8).unwrap();
    let port = listener.local_addr().expect("bound address").port();
    assert_ne!(port, 0);
    let dst = SocketAddr::new(ip, port);

    // Client: resolve address and route, then its resources on the device RDMA CM chose.
    let mut cid = CmId::new(&client_ch).unwrap();
    cid.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
    assert_eq!(expect_event(&client_ch, CmEventKind::AddrResolved).id, cid.key());
    cid.resolve_route(Duration::from_secs(2)).unwrap();
    assert_eq!(expect_event(&client_ch, CmEventKind::RouteResolved).status, 0);
    let dev = cid.device().unwrap();
    let attrs = dev.query().unwrap();
    if detailed {
        print_device(&dev.name(), &attrs);
    }
    let cpd = dev.alloc_pd().unwrap();
    let c_chan = dev.create_comp_channel().unwrap();
    let c_scq = dev.create_cq(64, None, 0).unwrap();
    let c_rcq = dev.create_cq(64, Some(&c_chan), 0).unwrap();
    let caps =
        QpCapabilities { max_send_wr: 32, max_recv_wr: 32, max_send_sge: 4, max_recv_sge: 1, max_inline_data: 64 };
    let init = QpInitAttr { send_cq: &c_scq, recv_cq: &c_rcq, srq: None, caps, sq_sig_all: false };
    let mut cqp = QueuePair::create(cid, &cpd, &init).map_err(|(_, e)| e).unwrap();
    assert!(cqp.caps().max_send_wr >= 32 && cqp.caps().max_inline_data >= 64, "{:?}", cqp.caps());
    let c_recv = region(&cpd, SLOTS * SLOT, AccessFlags::LOCAL_WRITE);
    let mut c_send = region(&cpd, SLOT, AccessFlags::NONE);
    let host_access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
    let mut c_data = region(&cpd, DATA, host_access);
    post_recv_slots(Some(&mut cqp), None, &c_recv);

    let rd = u8::try_from(attrs.max_qp_rd_atom.min(attrs.max_qp_init_rd_atom).min(4)).unwrap();
    let request = RdmaCmRequest { qid: 1, hrqsize: SLOTS_U16, hsqsize: SLOTS_U16 - 1, cntlid: 5 };
    let param = ConnParam { responder_resources: rd, initiator_depth: rd, ..ConnParam::default() };
    cqp.cm_id_mut().connect_nvme(&request, param).unwrap();

    // Target: the connect request, its NVMe/RDMA private data, the new id moved to the connection's channel.
    let mut ev = expect_event(&listen_ch, CmEventKind::ConnectRequest);
    assert_eq!(ev.listen_id, Some(listener.key()));
    assert_eq!(ev.nvme_request().unwrap(), request, "request private data");
    let peer = ev.peer.expect("connect request parameters");
    assert_eq!((peer.responder_resources, peer.initiator_depth), (rd, rd));
    let mut sid = ev.take_id().expect("a connect request brings an id");
    assert_eq!(sid.key(), ev.id);
    drop(ev);
    sid.migrate(&conn_ch).unwrap();
    let sdev = sid.device().unwrap();
    assert_eq!(sdev, dev, "one device, one verbs context");
    let spd = sdev.alloc_pd().unwrap();
    let s_cq = sdev.create_cq(128, None, 0).unwrap();
    let mut srq = (attrs.max_srq > 0).then(|| spd.create_srq(32, 1).unwrap());
    let init = QpInitAttr { send_cq: &s_cq, recv_cq: &s_cq, srq: srq.as_ref(), caps, sq_sig_all: false };
    let mut sqp = QueuePair::create(sid, &spd, &init).map_err(|(_, e)| e).unwrap();
    let s_recv = region(&spd, SLOTS * SLOT, AccessFlags::LOCAL_WRITE);
    let mut s_buf = region(&spd, DATA, AccessFlags::LOCAL_WRITE);
    let mut s_resp = region(&spd, SLOT, AccessFlags::NONE);
    post_recv_slots(Some(&mut sqp), srq.as_mut(), &s_recv);
    let accept_param = ConnParam {
        responder_resources: peer.initiator_depth.min(u8::try_from(attrs.max_qp_rd_atom.min(255)).unwrap()),
        initiator_depth: peer.responder_resources.min(u8::try_from(attrs.max_qp_init_rd_atom.min(255)).unwrap()),
        ..ConnParam::default()
    };
    sqp.cm_id_mut().accept_nvme(&RdmaCmAccept { crqsize: SLOTS_U16 }, accept_param).unwrap();

    let ev = expect_event(&client_ch, CmEventKind::Established);
    assert_eq!(ev.id, cqp.cm_id().key());
    assert_eq!(ev.nvme_accept().unwrap(), RdmaCmAccept { crqsize: SLOTS_U16 }, "accept private data");
    assert_eq!(expect_event(&conn_ch, CmEventKind::Established).id, sqp.cm_id().key());
    assert_eq!(cqp.cm_id().peer_addr(), Some(dst));
    assert_eq!(sqp.cm_id().peer_addr(), cqp.cm_id().local_addr());
    assert_eq!(sqp.cm_id().local_addr().map(|a| a.port()), Some(port));
    if detailed {
        println!("nvme private data: ok (request {request:?}, accept crqsize {SLOTS})");
    }

    // 1. The host SENDs a 64-byte "command capsule" naming its data buffer.
    let mut capsule = [0u8; 64];
    capsule[0] = 0x01; // Write
    capsule[24..32].copy_from_slice(&c_data.addr().to_le_bytes());
    capsule[32..36].copy_from_slice(&c_data.rkey().to_le_bytes());
    c_send.write_at(0, &capsule).unwrap();
    let sge = [c_send.sge(0, 64).unwrap()];
    // SAFETY: c_send outlives the QP (dropped after it below) and is not written until the completion.
    unsafe { cqp.post_send(&[SendWr::new(100, SendOpcode::Send, &sge)]) }.unwrap();
    let wc = poll_n(&c_scq, 1)[0];
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (100, WcStatus::Success, WcOpcode::Send), "{wc:?}");
    let wc = poll_n(&s_cq, 1)[0];
    assert_eq!((wc.status, wc.opcode, wc.byte_len, wc.qp_num), (WcStatus::Success, WcOpcode::Recv, 64, sqp.qp_num()));
    let slot = usize::try_from(wc.wr_id).unwrap();
    assert_eq!(read(&s_recv, slot * SLOT, 64), capsule, "received capsule");
    let remote_addr = u64::from_le_bytes(capsule[24..32].try_into().unwrap());
    let rkey = u32::from_le_bytes(capsule[32..36].try_into().unwrap());

    if detailed {
        // 2. RDMA READ of the host's buffer into two SGEs.
        let a = pattern(1, DATA);
        c_data.write_at(0, &a).unwrap();
        let sges = [s_buf.sge(0, 4096).unwrap(), s_buf.sge(4096, u32_of(DATA - 4096)).unwrap()];
        // SAFETY: s_buf outlives the QP and is read only after the completion.
        unsafe { sqp.post_send(&[SendWr::new(200, SendOpcode::RdmaRead { remote_addr, rkey }, &sges)]) }.unwrap();
        let wc = poll_n(&s_cq, 1)[0];
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (200, WcStatus::Success, WcOpcode::RdmaRead), "{wc:?}");
        assert_eq!(read(&s_buf, 0, DATA), a, "RDMA READ data");
        println!("rdma read: ok ({DATA} bytes, 2 SGEs)");

        // 3. RDMA WRITE (unsignaled) and the response SEND (inline, signaled) in one chained post; the host sleeps
        // on its completion channel.
        let b = pattern(2, DATA);
        s_buf.write_at(0, &b).unwrap();
        let response = [0x5au8; 16];
        s_resp.write_at(0, &response).unwrap();
        let data = [s_buf.sge(0, u32_of(DATA)).unwrap()];
        let resp = [s_resp.sge(0, 16).unwrap()];
        let wrs = [
            SendWr { signaled: false, ..SendWr::new(201, SendOpcode::RdmaWrite { remote_addr, rkey }, &data) },
            SendWr { inline: true, ..SendWr::new(202, SendOpcode::Send, &resp) },
        ];
        // SAFETY: s_buf and s_resp outlive the QP and are not written until the completions.
        unsafe { sqp.post_send(&wrs) }.unwrap();
        let wc = poll_n(&s_cq, 1)[0];
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (202, WcStatus::Success, WcOpcode::Send), "{wc:?}");
        let wc = wait_on_channel(&c_chan, &c_rcq, 1)[0];
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len, wc.invalidated_rkey),
            (WcStatus::Success, WcOpcode::Recv, 16, None)
        );
        assert_eq!(read(&c_recv, usize::try_from(wc.wr_id).unwrap() * SLOT, 16), response);
        assert_eq!(read(&c_data, 0, DATA), b, "RDMA WRITE data before the response");
        println!("rdma write + send: ok (one post, write ordered before the send)");

        // 4. A type 2 memory window over the host's first 4 KiB, written through and invalidated by the target.
        let caps = attrs.device_cap_flags;
        if caps.memory_windows_type_2() && caps.send_with_invalidate() {
            let mw = cpd.alloc_mw().unwrap();
            let bind = mw.bind(&c_data, 0, 4096, AccessFlags::REMOTE_WRITE).unwrap();
            let (mw_addr, mw_rkey) = (bind.addr(), bind.rkey());
            // SAFETY: the window and c_data outlive the QP.
            unsafe { cqp.post_send(&[SendWr::new(101, SendOpcode::BindMw(bind), &[])]) }.unwrap();
            let wc = poll_n(&c_scq, 1)[0];
            assert_eq!((wc.wr_id, wc.status, wc.opcode), (101, WcStatus::Success, WcOpcode::BindMw), "{wc:?}");
            assert_eq!(mw.rkey(), mw_rkey);

            let c = pattern(3, 4096);
            s_buf.write_at(0, &c).unwrap();
            let data = [s_buf.sge(0, 4096).unwrap()];
            let wrs = [
                SendWr {
                    signaled: false,
                    ..SendWr::new(203, SendOpcode::RdmaWrite { remote_addr: mw_addr, rkey: mw_rkey }, &data)
                },
                SendWr::new(204, SendOpcode::SendWithInvalidate(mw_rkey), &resp),
            ];
            // SAFETY: as above.
            unsafe { sqp.post_send(&wrs) }.unwrap();
            let wc = poll_n(&s_cq, 1)[0];
            assert_eq!((wc.wr_id, wc.status), (204, WcStatus::Success), "{wc:?}");
            let wc = poll_n(&c_rcq, 1)[0];
            assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, 16), "{wc:?}");
            assert_eq!(wc.invalidated_rkey, Some(mw_rkey), "{wc:?}");
            assert_eq!(read(&c_data, 0, 4096), c, "RDMA WRITE through the window");

            // The invalidated key no longer grants access (this breaks the connection; it is the last step).
            // SAFETY: as above.
            unsafe {
                sqp.post_send(&[SendWr::new(205, SendOpcode::RdmaWrite { remote_addr: mw_addr, rkey: mw_rkey }, &data)])
            }
            .unwrap();
            let wc = poll_n(&s_cq, 1)[0];
            assert_eq!(
                (wc.wr_id, wc.status),
                (205, WcStatus::RemAccessErr),
                "write through an invalidated window: {wc:?}"
            );
            println!("send with invalidate: ok (rkey {mw_rkey:#x} invalidated, then refused)");
        } else {
            println!("send with invalidate: not supported by {} (device_cap_flags {:#x})", dev.name(), caps.0);
        }
    } else {
        // The target answers with a SEND so both directions carry data in every cycle.
        s_resp.write_at(0, &[7u8; 16]).unwrap();
        let resp = [s_resp.sge(0, 16).unwrap()];
        // SAFETY: s_resp outlives the QP.
        unsafe { sqp.post_send(&[SendWr::new(300, SendOpcode::Send, &resp)]) }.unwrap();
        assert_eq!(poll_n(&s_cq, 1)[0].status, WcStatus::Success);
        let wc = poll_n(&c_rcq, 1)[0];
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
        assert_eq!(read(&c_recv, usize::try_from(wc.wr_id).unwrap() * SLOT, 16), [7u8; 16]);
    }

    // Disconnect as the NVMe/RDMA transports do: one side disconnects (the target after the refused write,
    // else the host), the other hears it and disconnects too (its DREP ends the first side's wait). The
    // client's receives still posted complete as flushed.
    let (first, first_ch, second, second_ch) =
        if detailed { (&mut sqp, &conn_ch, &mut cqp, &client_ch) } else { (&mut cqp, &client_ch, &mut sqp, &conn_ch) };
    first.cm_id_mut().disconnect().unwrap();
    assert_eq!(expect_event(second_ch, CmEventKind::Disconnected).id, second.cm_id().key());
    second.cm_id_mut().disconnect().unwrap();
    assert_eq!(expect_event(first_ch, CmEventKind::Disconnected).id, first.cm_id().key());
    // Receives consumed: the response, and the send with invalidate where the device has it.
    let caps = attrs.device_cap_flags;
    let consumed = if detailed && caps.memory_windows_type_2() && caps.send_with_invalidate() { 2 } else { 1 };
    let flushed = poll_n(&c_rcq, SLOTS - consumed);
    if detailed {
        // After the refused write the host's QP may be in error already (a responder access error); each
        // remaining receive still completes exactly once, unsuccessfully.
        assert!(flushed.iter().all(|wc| wc.status != WcStatus::Success), "{flushed:?}");
        let n = flushed.iter().filter(|wc| wc.status == WcStatus::WrFlushErr).count();
        println!("flushed: ok ({} receives, {n} WR_FLUSH_ERR)", flushed.len());
    } else {
        assert!(flushed.iter().all(|wc| wc.status == WcStatus::WrFlushErr), "{flushed:?}");
    }

    // Queue pairs (and their ids) first, then the memory they named; the Arcs keep PDs and CQs alive as needed.
    drop(sqp);
    drop(srq);
    drop(cqp);
    drop((c_recv, c_send, c_data, s_recv, s_buf, s_resp));
    drop(listener);
}

fn print_device(name: &str, a: &DeviceAttributes) {
    let c = a.device_cap_flags;
    println!(
        "device {name}: vendor {:#x} max_qp_wr {} max_sge {} max_cqe {} max_qp_rd_atom {} max_qp_init_rd_atom {} \
         max_srq {} max_mw {} memory windows {} (type 2 {}) send with invalidate {}",
        a.vendor_id,
        a.max_qp_wr,
        a.max_sge,
        a.max_cqe,
        a.max_qp_rd_atom,
        a.max_qp_init_rd_atom,
        a.max_srq,
        a.max_mw,
        c.memory_windows(),
        c.memory_windows_type_2(),
        c.send_with_invalidate()
    );
}

/// `rdma resource show`: per device, the count of each resource (pd, cq, qp, cm_id, mr, ctx, srq).
fn rdma_resources() -> BTreeMap<String, u64> {
    let out = std::process::Command::new("rdma").args(["resource", "show"]).output().expect("run rdma resource show");
    assert!(out.status.success(), "rdma resource show: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // "0: rxe0: pd 1 cq 2 qp 1 cm_id 0 mr 0 ctx 0 srq 0"
        let mut words = line.split_whitespace();
        let (Some(_), Some(dev)) = (words.next(), words.next()) else { continue };
        let rest: Vec<&str> = words.collect();
        for pair in rest.chunks(2) {
            if let [k, v] = pair {
                if let Ok(v) = v.parse() {
                    counts.insert(format!("{}{k}", dev), v);
                }
            }
        }
    }
    assert!(!counts.is_empty(), "rdma resource show printed nothing usable: {text}");
    counts
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}
