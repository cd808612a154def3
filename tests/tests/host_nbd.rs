//! The NBD export against real clients: our target in-process, the host connected to it, one namespace
//! exported on a unix socket (once on TCP loopback), then `qemu-io`, `qemu-img` and fio's nbd engine with
//! verification, and a raw hostile client that must get the protocol's errors while other clients go on.
//!
//! Tests needing qemu-utils or fio skip with a printed reason when the tool is missing, unless
//! `NVMF_REQUIRE_TOOLS` is set (CI sets it), in which case they fail.

mod host_support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use host_support::{options, Target, SUBNQN};
use nvmf_host::nbd::proto::{cmd, cmd_flag, errno, opt, rep, IHAVEOPT, OPTION_REPLY_MAGIC, REQUEST_MAGIC};
use nvmf_host::nbd::{NbdExport, NbdLimitCounts, NbdListen, NbdOptions};
use nvmf_host::Controller;

/// Namespace 1 of the test target: 16 MiB of 512-byte blocks; namespace 2: 8 MiB of 4 KiB blocks.
const NS1_SIZE: u64 = 16 << 20;
const NS2_SIZE: u64 = 8 << 20;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Whether the tools are here; without them the test skips (or fails under `NVMF_REQUIRE_TOOLS`).
fn tools(names: &[&str]) -> bool {
    let missing: Vec<&str> = names.iter().copied().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("NVMF_REQUIRE_TOOLS").is_none(), "NVMF_REQUIRE_TOOLS is set but {missing:?} missing");
    eprintln!("skipped: {missing:?} not installed (qemu-utils, fio)");
    false
}

struct Setup {
    export: NbdExport,
    ctrl: Arc<Controller>,
    dir: tempfile::TempDir,
    _target: Target,
}

fn setup(nsid: u32, tcp: bool) -> Setup {
    setup_with(nsid, tcp, NbdOptions::default())
}

fn setup_with(nsid: u32, tcp: bool, nbd: NbdOptions) -> Setup {
    let target = Target::start();
    let ctrl = Arc::new(Controller::connect(target.addr, SUBNQN, options(2)).expect("connect"));
    let dir = tempfile::tempdir().unwrap();
    let listen = if tcp { "127.0.0.1:0".parse().unwrap() } else { NbdListen::Unix(dir.path().join("nbd.sock")) };
    let export = NbdExport::start(Arc::clone(&ctrl), nsid, listen, nbd).expect("export starts");
    Setup { export, ctrl, dir, _target: target }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("tool runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

/// qemu-io with the commands; every one must succeed (qemu-io reports failures on stdout).
fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", uri]);
    for command in commands {
        c.args(["-c", command]);
    }
    let out = run(&mut c);
    assert!(!out.contains("failed") && !out.contains("error"), "qemu-io {commands:?}:\n{out}");
    out
}

#[test]
fn qemu_io_writes_read_back_through_the_export_and_the_namespace() {
    if !tools(&["qemu-io"]) {
        return;
    }
    let s = setup(1, false);
    let uri = s.export.uri();
    assert!(uri.starts_with("nbd+unix:///?socket="), "{uri}");
    qemu_io(&uri, &["write -P 0xa5 0 1M", "read -P 0xa5 0 1M"]);
    // What qemu wrote is in the namespace: read it back with the host library, past the export.
    let mut buf = vec![0; 1 << 20];
    s.ctrl.read(1, 0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0xa5), "namespace holds the pattern qemu-io wrote");

    // At an unaligned-to-4K (but block-aligned) offset, near the end, with FUA, then write zeroes.
    qemu_io(&uri, &["write -P 0x5c 3584 7680", "read -P 0x5c 3584 7680", "read -P 0xa5 0 3584"]);
    qemu_io(&uri, &["write -f -P 0x11 15M 1M", "read -P 0x11 15M 1M"]);
    qemu_io(&uri, &["write -z 64k 128k", "read -P 0 64k 128k", "read -P 0xa5 192k 64k"]);
    s.ctrl.read(1, 128, &mut buf[..128 << 10]).unwrap();
    assert!(buf[..128 << 10].iter().all(|&b| b == 0), "write zeroes reached the namespace");
    // Trim is a hint: it must succeed and leave the neighbours alone; the trimmed range is unspecified.
    qemu_io(&uri, &["discard 256k 256k", "read -P 0xa5 512k 512k", "flush"]);
    // Out of range through the real client: an error, and the export still serves.
    let out = Command::new("qemu-io").args(["-f", "raw", &uri, "-c", "read 16M 512"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("fail") || text.contains("rror") || !out.status.success(), "{text}");
    qemu_io(&uri, &["read -P 0x11 15M 1M"]);
}

#[test]
fn qemu_img_sees_the_size_and_converts_and_compares() {
    if !tools(&["qemu-img"]) {
        return;
    }
    let s = setup(2, false);
    let uri = s.export.uri();
    let info = run(Command::new("qemu-img").args(["info", "--output=json", &uri]));
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["virtual-size"].as_u64(), Some(NS2_SIZE), "{info}");

    // Random data the size of the namespace (xorshift: reproducible, incompressible).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..NS2_SIZE / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    let file = s.dir.path().join("image.raw");
    std::fs::write(&file, &data).unwrap();
    let file = file.to_str().unwrap();
    run(Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw", file, &uri]));
    let out = run(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", file, &uri]));
    assert!(out.contains("Images are identical"), "{out}");
    // And the namespace itself holds the file.
    let mut back = vec![0; data.len()];
    s.ctrl.read(2, 0, &mut back).unwrap();
    assert!(back == data, "namespace 2 differs from the converted file");
    // A changed byte is seen by compare (the check can fail).
    qemu_io(&uri, &["write -P 0 4096 4096"]);
    let out = Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", file, &uri]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
}

/// fio randwrite + crc32c verify over `jobs` connections, each on its own `size`-byte region.
fn fio_verify(uri: &str, size: u64, jobs: u64) {
    let out = run(Command::new("fio").args([
        "--name=nbd-verify",
        &format!("--numjobs={jobs}"),
        &format!("--offset_increment={size}"),
        "--group_reporting",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        &format!("--size={size}"),
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--verify_state_save=0",
        "--output-format=json",
    ]));
    let start = out.find('{').expect("fio JSON");
    let v: serde_json::Value = serde_json::from_str(&out[start..]).unwrap();
    let job = &v["jobs"][0];
    assert_eq!(job["error"].as_u64(), Some(0), "{job}");
    assert_eq!(job["write"]["io_bytes"].as_u64(), Some(size * jobs), "fio wrote every range");
    assert_eq!(job["read"]["io_bytes"].as_u64(), Some(size * jobs), "fio read every range back to verify it");
}

#[test]
fn fio_nbd_engine_randwrite_verifies() {
    if !tools(&["fio"]) {
        return;
    }
    let s = setup(1, false);
    fio_verify(&s.export.uri(), NS1_SIZE, 1);
    // Four connections at once (CAN_MULTI_CONN), each verifying its own quarter.
    fio_verify(&s.export.uri(), NS1_SIZE / 4, 4);
}

#[test]
fn tcp_loopback_serves_qemu_and_fio() {
    if !tools(&["qemu-io", "fio"]) {
        return;
    }
    let s = setup(2, true);
    let NbdListen::Tcp(addr) = s.export.local_addr() else { panic!("TCP export") };
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let uri = s.export.uri();
    assert_eq!(uri, format!("nbd://{addr}"));
    qemu_io(&uri, &["write -P 0x3c 4k 64k", "read -P 0x3c 4k 64k"]);
    fio_verify(&uri, NS2_SIZE, 1);
}

// ---- A raw client, to send what real clients never do.

struct Raw(UnixStream);

fn request_bytes(flags: u16, command: u16, cookie: u64, offset: u64, length: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = REQUEST_MAGIC.to_be_bytes().to_vec();
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&command.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&offset.to_be_bytes());
    m.extend_from_slice(&length.to_be_bytes());
    m.extend_from_slice(payload);
    m
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        Raw(UnixStream::connect(path).unwrap())
    }

    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.0.read_exact(&mut b).unwrap();
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.read_n(4).try_into().unwrap())
    }

    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.read_n(8).try_into().unwrap())
    }

    /// Greeting in, client flags out.
    fn greet(&mut self, flags: u32) {
        assert_eq!(&self.read_n(16), b"NBDMAGICIHAVEOPT");
        assert_eq!(self.read_n(2), [0, 3]);
        self.0.write_all(&flags.to_be_bytes()).unwrap();
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&option.to_be_bytes());
        m.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        m.extend_from_slice(data);
        self.0.write_all(&m).unwrap();
    }

    /// One option reply: (type, data).
    fn option_reply(&mut self, option: u32) -> (u32, Vec<u8>) {
        assert_eq!(self.u64(), OPTION_REPLY_MAGIC);
        assert_eq!(self.u32(), option);
        let kind = self.u32();
        let len = self.u32();
        (kind, self.read_n(usize::try_from(len).unwrap()))
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = u32::try_from(name.len()).unwrap().to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&u16::try_from(infos.len()).unwrap().to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    /// Handshake to transmission with NBD_OPT_GO; returns (size, flags, block size info).
    fn go(&mut self) -> (u64, u16, [u32; 3]) {
        self.greet(1);
        self.option(opt::GO, &Raw::go_data("", &[3]));
        let (mut size, mut flags, mut bs) = (None, None, None);
        loop {
            match self.option_reply(opt::GO) {
                (rep::ACK, _) => break,
                (rep::INFO, d) if d[..2] == [0, 0] => {
                    size = Some(u64::from_be_bytes(d[2..10].try_into().unwrap()));
                    flags = Some(u16::from_be_bytes([d[10], d[11]]));
                }
                (rep::INFO, d) if d[..2] == [0, 3] => {
                    let w = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().unwrap());
                    bs = Some([w(2), w(6), w(10)]);
                }
                other => panic!("unexpected GO reply {other:?}"),
            }
        }
        (size.unwrap(), flags.unwrap(), bs.unwrap())
    }

    fn request(&mut self, flags: u16, command: u16, cookie: u64, offset: u64, length: u32, payload: &[u8]) {
        self.0.write_all(&request_bytes(flags, command, cookie, offset, length, payload)).unwrap();
    }

    /// A simple reply: (error, cookie).
    fn reply(&mut self) -> (u32, u64) {
        assert_eq!(self.u32(), 0x6744_6698, "simple reply magic");
        (self.u32(), self.u64())
    }

    /// The server closed the connection (EOF or reset), without sending anything more.
    fn assert_closed(&mut self) {
        let mut b = [0; 1];
        match self.0.read(&mut b) {
            Ok(0) | Err(_) => {}
            Ok(_) => panic!("server sent more instead of closing"),
        }
    }
}

fn socket(s: &Setup) -> std::path::PathBuf {
    let NbdListen::Unix(p) = s.export.local_addr() else { panic!("unix export") };
    p.clone()
}

#[test]
fn handshake_options_list_info_unsupported_and_unknown_export() {
    let s = setup(1, false);
    let path = socket(&s);
    let mut c = Raw::connect(&path);
    c.greet(3);
    c.option(opt::LIST, &[]);
    assert_eq!(c.option_reply(opt::LIST), (rep::SERVER, vec![0, 0, 0, 0]));
    assert_eq!(c.option_reply(opt::LIST).0, rep::ACK);
    c.option(opt::LIST, b"junk");
    assert_eq!(c.option_reply(opt::LIST).0, rep::ERR_INVALID);
    c.option(opt::STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply(opt::STRUCTURED_REPLY).0, rep::ERR_UNSUP);
    c.option(0x7777, &[1, 2, 3]);
    assert_eq!(c.option_reply(0x7777).0, rep::ERR_UNSUP);
    c.option(opt::INFO, &Raw::go_data("nope", &[]));
    assert_eq!(c.option_reply(opt::INFO).0, rep::ERR_UNKNOWN);
    c.option(opt::GO, &[0, 0, 0, 9, b'x']);
    assert_eq!(c.option_reply(opt::GO).0, rep::ERR_INVALID);
    // Option data over the limit but small enough to skip: refused, and the session goes on.
    c.option(opt::INFO, &vec![0; 20 << 10]);
    assert_eq!(c.option_reply(opt::INFO).0, rep::ERR_TOO_BIG);
    c.option(opt::INFO, &Raw::go_data("", &[1]));
    let mut replies = Vec::new();
    loop {
        let r = c.option_reply(opt::INFO);
        if r.0 == rep::ACK {
            break;
        }
        replies.push(r);
    }
    assert!(replies.iter().all(|r| r.0 == rep::INFO));
    assert!(replies.iter().any(|r| r.1[..2] == [0, 0] && r.1[2..10] == NS1_SIZE.to_be_bytes()));
    c.option(opt::ABORT, &[]);
    assert_eq!(c.option_reply(opt::ABORT).0, rep::ACK);
    c.assert_closed();

    // A client that never stops haggling is cut off.
    let mut c = Raw::connect(&path);
    c.greet(1);
    for _ in 0..64 {
        c.option(opt::LIST, &[]);
        assert_eq!(c.option_reply(opt::LIST).0, rep::SERVER);
        assert_eq!(c.option_reply(opt::LIST).0, rep::ACK);
    }
    c.assert_closed();

    // NBD_OPT_EXPORT_NAME with no zeroes: size and flags only.
    let mut c = Raw::connect(&path);
    c.greet(3);
    c.option(opt::EXPORT_NAME, &[]);
    assert_eq!(c.u64(), NS1_SIZE);
    let flags = u16::from_be_bytes(c.read_n(2).try_into().unwrap());
    assert_eq!(flags & 1, 1);
    c.request(0, cmd::DISC, 1, 0, 0, &[]);
    c.assert_closed();

    // Unknown client flags, an unknown export by name, and an absurd option length end the session.
    let mut c = Raw::connect(&path);
    c.greet(0x10);
    c.assert_closed();
    let mut c = Raw::connect(&path);
    c.greet(1);
    c.option(opt::EXPORT_NAME, b"nope");
    c.assert_closed();
    let mut c = Raw::connect(&path);
    c.greet(1);
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&opt::GO.to_be_bytes());
    m.extend_from_slice(&u32::MAX.to_be_bytes());
    c.0.write_all(&m).unwrap();
    c.assert_closed();
}

#[test]
fn hostile_requests_get_errors_and_the_server_keeps_serving() {
    let s = setup(1, false);
    let path = socket(&s);
    let mut c = Raw::connect(&path);
    let (size, flags, [min, preferred, max]) = c.go();
    assert_eq!(size, NS1_SIZE);
    // HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM, SEND_WRITE_ZEROES, CAN_MULTI_CONN; not read-only.
    assert_eq!(flags, 1 | 4 | 8 | 32 | 64 | 256, "{flags:#x}");
    assert_eq!((min, preferred, max), (512, 4096, 32 << 20));

    let data: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    c.request(cmd_flag::FUA, cmd::WRITE, 1, 8192, 4096, &data);
    assert_eq!(c.reply(), (0, 1));
    for (cookie, flags, command, offset, length) in [
        (2u64, 0u16, cmd::READ, 100u64, 512u32), // unaligned offset
        (3, 0, cmd::READ, 0, 100),               // unaligned length
        (4, 0, cmd::READ, NS1_SIZE - 512, 1024), // past the end
        (5, 0, cmd::READ, 0, u32::MAX),          // absurd length: no 4 GiB buffer, just EINVAL
        (6, 0, 99, 0, 512),                      // unknown command
        (7, 0x40, cmd::READ, 0, 512),            // unknown flag
        (8, 0, cmd::TRIM, NS1_SIZE, 512),        // trim past the end
        (9, 0, cmd::FLUSH, 512, 0),              // flush with an offset
        (10, 0, cmd::READ, u64::MAX - 511, 512), // offset overflow
    ] {
        c.request(flags, command, cookie, offset, length, &[]);
        assert_eq!(c.reply(), (errno::EINVAL, cookie), "request {cookie}");
    }
    // Writes with a payload that is refused: the payload is consumed and the stream stays in step.
    c.request(0, cmd::WRITE, 11, 100, 512, &[0xee; 512]);
    assert_eq!(c.reply(), (errno::EINVAL, 11));
    c.request(0, cmd::WRITE, 12, NS1_SIZE, 512, &[0xee; 512]);
    assert_eq!(c.reply(), (errno::ENOSPC, 12));
    c.request(0, cmd::WRITE_ZEROES, 13, NS1_SIZE - 512, 1024, &[]);
    assert_eq!(c.reply(), (errno::ENOSPC, 13));
    // Zero-length requests succeed without data.
    c.request(0, cmd::READ, 14, 0, 0, &[]);
    assert_eq!(c.reply(), (0, 14));
    // The data written first is intact, and pipelined reads all come back with their cookies.
    for cookie in 100..164u64 {
        c.request(0, cmd::READ, cookie, 8192, 4096, &[]);
    }
    let mut seen = Vec::new();
    for _ in 100..164 {
        let (e, cookie) = c.reply();
        assert_eq!(e, 0);
        assert_eq!(c.read_n(4096), data, "read {cookie}");
        seen.push(cookie);
    }
    seen.sort_unstable();
    assert_eq!(seen, (100..164).collect::<Vec<_>>());
    c.request(0, cmd::FLUSH, 15, 0, 0, &[]);
    assert_eq!(c.reply(), (0, 15));
    // Trim with FUA (Dataset Management, then Flush) and write zeroes with FUA and NO_HOLE (no DEAC).
    c.request(cmd_flag::FUA, cmd::TRIM, 19, 1 << 20, 1 << 20, &[]);
    assert_eq!(c.reply(), (0, 19));
    c.request(cmd_flag::FUA | cmd_flag::NO_HOLE, cmd::WRITE_ZEROES, 20, 8192, 1024, &[]);
    assert_eq!(c.reply(), (0, 20));
    c.request(0, cmd::READ, 21, 8192, 4096, &[]);
    assert_eq!(c.reply(), (0, 21));
    let mut want = data.clone();
    want[..1024].fill(0);
    assert_eq!(c.read_n(4096), want, "write zeroes cleared exactly its range");

    // A second client is unaffected by what the next one does.
    let mut other = Raw::connect(&path);
    other.go();
    // Bad magic: the server disconnects that client.
    let mut bad = Raw::connect(&path);
    bad.go();
    bad.0.write_all(&[0xde, 0xad, 0xbe, 0xef]).unwrap();
    bad.0.write_all(&[0; 24]).unwrap();
    bad.assert_closed();
    // A write payload over the maximum: answered with EINVAL, then disconnected (it cannot be skipped).
    c.request(0, cmd::WRITE, 16, 0, u32::MAX, &[]);
    assert_eq!(c.reply(), (errno::EINVAL, 16));
    c.assert_closed();
    other.request(0, cmd::READ, 17, 8192, 4096, &[]);
    assert_eq!(other.reply(), (0, 17));
    assert_eq!(other.read_n(4096), want);
    other.request(0, cmd::DISC, 18, 0, 0, &[]);
    other.assert_closed();
}

#[test]
fn requests_split_across_reads_are_reassembled() {
    let s = setup(1, false);
    let mut c = Raw::connect(&socket(&s));
    c.go();
    let data: Vec<u8> = (0..8192u32).map(|i| u8::try_from(i % 241).unwrap()).collect();
    let mut m = request_bytes(0, cmd::WRITE, 1, 4096, 8192, &data);
    m.extend_from_slice(&request_bytes(0, cmd::READ, 2, 4096, 8192, &[]));
    // Cut inside the first header, at its end, inside the payload, across the second header.
    let mut at = 0;
    for cut in [3, 27, 28, 29, 4000, 8219, 8220, 8230, m.len()] {
        c.0.write_all(&m[at..cut]).unwrap();
        at = cut;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(c.reply(), (0, 1));
    assert_eq!(c.reply(), (0, 2));
    assert_eq!(c.read_n(8192), data);
}

#[test]
fn a_client_that_does_not_read_its_replies_is_held_back_and_cut_off_at_stop() {
    const REQUESTS: u64 = 2048;
    const LEN: u32 = 64 << 10;
    let s = setup(1, false);
    let path = socket(&s);
    let mut c = Raw::connect(&path);
    c.go();
    // 128 MiB of reads asked for at once, twice the in-flight budget: the server stops reading requests
    // until the client takes replies, and serves it all once it does.
    let mut w = Raw(c.0.try_clone().unwrap());
    let sender = std::thread::spawn(move || {
        for cookie in 0..REQUESTS {
            w.request(0, cmd::READ, cookie, (cookie % 256) * u64::from(LEN), LEN, &[]);
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Meanwhile another client is served.
    let mut other = Raw::connect(&path);
    other.go();
    other.request(0, cmd::READ, 7, 0, 512, &[]);
    assert_eq!(other.reply(), (0, 7));
    other.read_n(512);
    let mut seen = vec![false; usize::try_from(REQUESTS).unwrap()];
    for _ in 0..REQUESTS {
        let (e, cookie) = c.reply();
        assert_eq!(e, 0, "read {cookie}");
        c.read_n(usize::try_from(LEN).unwrap());
        assert!(!std::mem::replace(&mut seen[usize::try_from(cookie).unwrap()], true), "cookie {cookie} twice");
    }
    sender.join().unwrap();
    let limits = s.export.limits();
    let held = limits.counts().in_flight;
    assert!(held >= 1, "the in-flight limit held the client back: {:?}", limits.counts());
    assert_eq!(limits.counts().stop_write_timeout, 0);

    // Again without reading: the export's stop still ends the session (the client is cut off).
    let mut w = c.0.try_clone().unwrap();
    std::thread::spawn(move || {
        for cookie in 0..REQUESTS {
            // Refused once the server cut the client off.
            if w.write_all(&request_bytes(0, cmd::READ, cookie, 0, LEN, &[])).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        s.export.stop();
        let _ = done_tx.send(());
    });
    done.recv_timeout(std::time::Duration::from_secs(60)).expect("stop returns with a client that does not read");
    // Replies already in the socket may come; then the connection ends.
    let mut rest = Vec::new();
    let _ = c.0.read_to_end(&mut rest);
    assert!(rest.len() < usize::try_from(REQUESTS).unwrap() * usize::try_from(LEN).unwrap());
    let counts = limits.counts();
    assert_eq!(counts.stop_write_timeout, 1, "cut off at stop, counted once: {counts:?}");
    assert!(counts.in_flight > held, "held back again: {counts:?}");
    assert_eq!((counts.clients, counts.handshake_timeout), (0, 0));
}

#[test]
fn a_client_over_the_limit_is_refused_and_counted() {
    let s = setup_with(1, false, NbdOptions { max_clients: 1, ..NbdOptions::default() });
    let path = socket(&s);
    let mut first = Raw::connect(&path);
    first.go();
    // The second is closed at accept: its greeting never comes.
    let mut second = std::os::unix::net::UnixStream::connect(&path).unwrap();
    second.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = second.read_to_end(&mut got);
    assert!(got.is_empty(), "no greeting for a client over the limit: {got:?}");
    // The first is still served.
    first.request(0, cmd::READ, 3, 0, 512, &[]);
    assert_eq!(first.reply(), (0, 3));
    first.read_n(512);
    assert_eq!(s.export.limits().counts(), NbdLimitCounts { clients: 1, ..NbdLimitCounts::default() });
}

#[test]
fn read_only_export_refuses_writes() {
    let s = setup_with(1, false, NbdOptions { read_only: true, export_name: "ns1".into(), ..NbdOptions::default() });
    let path = socket(&s);
    let mut c = Raw::connect(&path);
    let (_, flags, _) = c.go();
    assert_eq!(flags & 2, 2, "NBD_FLAG_READ_ONLY");
    c.request(0, cmd::WRITE, 1, 0, 512, &[1; 512]);
    assert_eq!(c.reply(), (errno::EPERM, 1));
    c.request(0, cmd::READ, 2, 0, 512, &[]);
    assert_eq!(c.reply(), (0, 2));
    c.read_n(512);
}

#[test]
fn stop_ends_sessions_and_removes_the_socket() {
    let s = setup(1, false);
    let path = socket(&s);
    let mut idle = Raw::connect(&path);
    idle.go();
    let mut mid_handshake = Raw::connect(&path);
    mid_handshake.greet(1);
    // A stale socket file is replaced, a live one refused.
    let err = NbdExport::start(Arc::clone(&s.ctrl), 1, NbdListen::Unix(path.clone()), NbdOptions::default());
    assert!(err.is_err(), "second export on a live socket");
    let limits = s.export.limits();
    s.export.stop();
    idle.assert_closed();
    mid_handshake.assert_closed();
    // Ended by the stop, not by a limit.
    assert_eq!(limits.counts(), NbdLimitCounts::default());
    assert!(!path.exists(), "socket removed");
    assert!(UnixStream::connect(&path).is_err());
    let again = NbdExport::start(Arc::clone(&s.ctrl), 2, NbdListen::Unix(path.clone()), NbdOptions::default()).unwrap();
    let mut c = Raw::connect(&path);
    assert_eq!(c.go().0, NS2_SIZE);
    drop(again);
}

#[test]
fn unknown_namespace_is_an_error() {
    let target = Target::start();
    let ctrl = Arc::new(Controller::connect(target.addr, SUBNQN, options(1)).expect("connect"));
    let err = NbdExport::start(ctrl, 9, "127.0.0.1:0".parse().unwrap(), NbdOptions::default()).unwrap_err();
    assert!(err.to_string().contains("namespace 9"), "{err}");
}

#[test]
fn cli_nbd_serves_until_sigterm() {
    if !tools(&["qemu-io"]) {
        return;
    }
    let target = Target::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cli.sock");
    let mut child = Command::new(host_support::nvmf_host())
        .args(["nbd", "-t", "tcp", "-a", "127.0.0.1", "-s", &target.addr.port().to_string(), "-n", SUBNQN])
        .args(["--nsid", "2", "--listen", &format!("unix:{}", sock.display()), "-i", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    assert_eq!(line.trim_end(), format!("{SUBNQN} namespace 2 exported at {uri}"));
    qemu_io(&uri, &["write -P 0x77 0 256k", "read -P 0x77 0 256k"]);
    run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let status = child.wait().unwrap();
    assert!(status.success(), "nvmf-host nbd exits cleanly on SIGTERM: {status}");
    assert!(!sock.exists(), "socket removed at exit");
}

#[test]
fn nvme_failures_become_eio_and_the_export_stays_up() {
    let target = Target::start();
    let mut o = options(1);
    // Fail held I/O soon after the association is lost (reconnecting goes on in the background).
    o.fast_io_fail_tmo = Some(std::time::Duration::from_millis(300));
    let ctrl = Arc::new(Controller::connect(target.addr, SUBNQN, o).expect("connect"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eio.sock");
    let export = NbdExport::start(ctrl, 1, NbdListen::Unix(path.clone()), NbdOptions::default()).unwrap();
    let mut c = Raw::connect(&path);
    c.go();
    c.request(0, cmd::WRITE, 1, 0, 512, &[0x42; 512]);
    assert_eq!(c.reply(), (0, 1));
    drop(target);
    c.request(0, cmd::READ, 2, 0, 512, &[]);
    assert_eq!(c.reply(), (errno::EIO, 2), "no data follows an error reply");
    c.request(cmd_flag::FUA, cmd::WRITE, 3, 0, 512, &[0x43; 512]);
    assert_eq!(c.reply(), (errno::EIO, 3));
    c.request(0, cmd::FLUSH, 4, 0, 0, &[]);
    assert_eq!(c.reply(), (errno::EIO, 4));
    // Still in step: a bad request gets its own error, and new clients still get through the handshake.
    c.request(0, cmd::READ, 5, 1, 512, &[]);
    assert_eq!(c.reply(), (errno::EINVAL, 5));
    let mut d = Raw::connect(&path);
    assert_eq!(d.go().0, NS1_SIZE);
    drop(export);
    d.assert_closed();
}
