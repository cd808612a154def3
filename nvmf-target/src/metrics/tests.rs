//! Tests of the metrics: queues driven through reads, writes and errors against a memory namespace, the
//! exported values, the exposition format (a small parser; `promtool check metrics` too when installed), and
//! the daemon's HTTP endpoint scraped over TCP.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{Connect, ConnectData, ConnectResponse, CNTLID_DYNAMIC};
use nvmf_common::fabrics::discovery::{AddressFamily, TcpSecurityType, TransportType, Tsas};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{ControllerConfiguration, PropertySet, PropertySize};
use nvmf_common::nvme::identify::{cns, Identify};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SglSubtype, Status, SubmissionQueueEntry};

use super::*;
use crate::backend::{EngineConfig, IoEngine, Storage, StorageSpec};
use crate::controller::{
    split_storage_tag, ListenerParams, NamespaceParams, Queue, Step, SubsystemParams, Target, TargetParams,
    TransportInfo,
};
use nvmf_service::rnic_metrics::RnicCollector;

const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:metrics";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const HOSTID: [u8; 16] = [7; 16];
const BLOCK: u32 = 512;

fn engine() -> IoEngine {
    IoEngine::new(&EngineConfig {
        ring_entries: 32,
        buffer_size: 1 << 20,
        buffer_count: 8,
        small_buffer_size: 64 << 10,
        small_buffer_count: 0,
        max_files: 4,
        ..EngineConfig::default()
    })
    .expect("io_uring engine")
}

fn target() -> Arc<Target> {
    let listener = ListenerParams {
        port_id: 1,
        trtype: TransportType::Tcp,
        adrfam: AddressFamily::Ipv4,
        traddr: "127.0.0.1".to_owned(),
        trsvcid: "4420".to_owned(),
        tsas: Tsas::Tcp { sectype: TcpSecurityType::None },
        secure_channel: 0,
    };
    let storage = |size| Arc::new(Storage::open(&StorageSpec::Memory { size, block_size: BLOCK }).unwrap());
    let subsystem = SubsystemParams {
        namespaces: vec![NamespaceParams::new(1, storage(1 << 20)), NamespaceParams::new(2, storage(1 << 20))],
        ..SubsystemParams::new(SUBNQN)
    };
    Target::new(TargetParams { mdts: 128 << 10, listeners: vec![listener], ..TargetParams::default() }, vec![subsystem])
        .unwrap()
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// One queue and the host side of it.
struct Host {
    queue: Queue,
    cid: u16,
}

impl Host {
    fn new(target: &Arc<Target>) -> Self {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        Host { queue: Queue::new(Arc::clone(target), TransportInfo::tcp(1, 8192, key), Instant::now()), cid: 0 }
    }

    /// Run a command to its completion; `host_data` answers a data fetch.
    fn run(
        &mut self,
        engine: &mut IoEngine,
        mut sqe: SubmissionQueueEntry,
        in_capsule: &[u8],
        host_data: &[u8],
    ) -> (CompletionQueueEntry, Vec<u8>) {
        self.cid = self.cid.wrapping_add(1);
        sqe.cid = self.cid;
        // A reactor turn per command: its latency runs from here to its completion.
        engine.clock_mut().start_turn(Instant::now());
        let mut step = self.queue.command(engine, &sqe, in_capsule).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "command never completed");
            match step {
                Step::FetchData { slot, buffer, len, .. } => {
                    let len = len as usize;
                    engine.buffer_mut(buffer)[..len].copy_from_slice(&host_data[..len]);
                    step = self.queue.data_received(engine, slot).unwrap();
                }
                Step::Respond { slot, cqe, data } => {
                    let data = data.map(|(b, n)| engine.buffer(b)[..n as usize].to_vec()).unwrap_or_default();
                    self.queue.release(engine, slot);
                    return (cqe, data);
                }
                Step::Pending => {
                    engine.submit().unwrap();
                    let mut completions = Vec::new();
                    engine.reap(|c| completions.push(c));
                    for c in completions {
                        let (_, slot) = split_storage_tag(c.tag);
                        let s = self.queue.io_completed(engine, slot, c.result);
                        if s != Step::Pending {
                            step = s;
                        }
                    }
                }
            }
        }
    }

    fn connect(&mut self, engine: &mut IoEngine, qid: u16, cntlid: u16, kato: u32) -> u16 {
        let sgl = SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset };
        let connect = Connect { qid, sqsize: 31, cattr: 0, kato, sgl1: sgl };
        let data = ConnectData {
            hostid: HOSTID,
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Nqn::new(HOSTNQN).unwrap(),
        };
        let (cqe, _) = self.run(engine, connect.to_sqe().unwrap(), &data.to_bytes(), &[]);
        assert!(cqe.status.is_success(), "Connect: {}", cqe.status);
        ConnectResponse::from_dw0(cqe.dw0).cntlid
    }

    fn io(&mut self, engine: &mut IoEngine, sqe: SubmissionQueueEntry, len: u32, data: &[u8]) -> (Status, Vec<u8>) {
        let mut sqe = sqe;
        sqe.set_sgl1(&SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific })
            .unwrap();
        let (cqe, data) = self.run(engine, sqe, &[], data);
        (cqe.status, data)
    }
}

/// An enabled controller with one I/O queue.
fn associate(target: &Arc<Target>, engine: &mut IoEngine, kato: u32) -> (Host, Host) {
    let mut admin = Host::new(target);
    let cntlid = admin.connect(engine, 0, CNTLID_DYNAMIC, kato);
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..Default::default() };
    let set = PropertySet { size: PropertySize::Four, offset: 0x14, value: cc.to_u32().into() };
    assert!(admin.run(engine, set.to_sqe(), &[], &[]).0.status.is_success());
    let mut io = Host::new(target);
    io.connect(engine, 1, cntlid, 0);
    (admin, io)
}

fn read(nsid: u32, slba: u64, blocks: u16) -> SubmissionQueueEntry {
    Read { nsid, slba, nlb: blocks - 1, ..Default::default() }.to_sqe()
}

fn write(nsid: u32, slba: u64, blocks: u16) -> SubmissionQueueEntry {
    Write { nsid, slba, nlb: blocks - 1, ..Default::default() }.to_sqe()
}

fn scrape(target: &Arc<Target>, connections: usize, format: Format) -> String {
    scrape_with(target, connections, format, None)
}

fn scrape_with(target: &Arc<Target>, connections: usize, format: Format, rnic: Option<RnicCollector>) -> String {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(connections));
    let collector = TargetCollector::new(Arc::clone(target), vec![ConnectionCounter { transport: "tcp", count }]);
    render(&registry(collector, rnic), format).unwrap()
}

/// A fake sysfs with Soft-RoCE `rxe0` on `dummy0` (10.77.0.1 as a RoCEv2 GID) and an unrelated `mlx5_0`; the
/// RNIC collector of a configuration with an RDMA listener on `listen`.
fn rnic(root: &std::path::Path, listen: &str) -> Option<RnicCollector> {
    let files = [
        ("sys/class/infiniband/rxe0/ports/1/state", "4: ACTIVE"),
        ("sys/class/infiniband/rxe0/ports/1/link_layer", "Ethernet"),
        ("sys/class/infiniband/rxe0/ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:0a4d:0001"),
        ("sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1", "RoCE v2"),
        ("sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "dummy0"),
        ("sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_rnr_err", "3"),
        ("sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts", "120"),
        ("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN"),
        ("sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "1"),
        ("sys/class/net/dummy0/mtu", "9000"),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{text}\n")).unwrap();
    }
    let config = nvmf_config::TargetConfig::from_str(
        &format!("[[listener]]\naddress = \"{listen}\"\ntransport = \"rdma\"\n"),
        "test.toml",
    )
    .unwrap();
    rnic::rnic_collector_in(nvmf_service::rdma_sysfs::RdmaSysfs::new(root), &config)
}

/// Samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no series {series}; have {:#?}", samples.keys()))
}

fn ns_series(name: &str, nsid: &str, label: &str, v: &str) -> String {
    format!("{name}{{subsystem=\"{SUBNQN}\",namespace=\"{nsid}\",{label}=\"{v}\"}}")
}

#[test]
fn queue_commands_bytes_latency_and_errors_are_exported() {
    let target = target();
    let mut engine = engine();
    let (mut admin, mut io) = associate(&target, &mut engine, 0);

    let data: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    assert_eq!(io.io(&mut engine, write(1, 0, 8), 4096, &data).0, Status::SUCCESS);
    assert_eq!(io.io(&mut engine, write(1, 8, 1), 512, &data[..512]).0, Status::SUCCESS);
    let (status, back) = io.io(&mut engine, read(1, 0, 8), 4096, &[]);
    assert_eq!((status, back), (Status::SUCCESS, data.clone()));
    assert_eq!(io.io(&mut engine, read(2, 0, 2), 1024, &[]).0, Status::SUCCESS);
    // Errors: a read beyond the namespace, a namespace that does not exist, an opcode we do not serve.
    let beyond = io.io(&mut engine, read(1, 2047, 2), 1024, &[]).0;
    assert!(beyond.same_code(Status::LBA_OUT_OF_RANGE), "{beyond}");
    assert!(io.io(&mut engine, read(9, 0, 1), 512, &[]).0.same_code(Status::INVALID_NAMESPACE));
    let bogus = SubmissionQueueEntry { opcode: 0x7c, nsid: 1, ..Default::default() };
    let bogus = io.io(&mut engine, bogus, 0, &[]).0;
    assert!(bogus.same_code(Status::INVALID_OPCODE), "{bogus}");
    let identify = admin.io(&mut engine, Identify::new(cns::CONTROLLER, 0).to_sqe(), 4096, &[]).0;
    assert_eq!(identify, Status::SUCCESS);

    let text = scrape(&target, 2, Format::Prometheus);
    let s = samples(&text);
    let commands = |ns: &str, op: &str| value(&s, &ns_series("nvmf_target_commands_total", ns, "opcode", op));
    assert_eq!(commands("1", "write"), 2.0);
    assert_eq!(commands("1", "read"), 2.0, "the failed read counts as a command too");
    assert_eq!(commands("1", "other"), 1.0);
    assert_eq!(commands("2", "read"), 1.0);
    assert_eq!(commands("1", "flush"), 0.0, "active namespaces export their NVM opcodes at 0");
    assert_eq!(commands("0", "read"), 1.0, "NSID 9 names no namespace");
    assert_eq!(commands("0", "identify"), 1.0);
    assert_eq!(commands("0", "connect"), 2.0);
    assert_eq!(commands("0", "property_set"), 1.0);
    let bytes = |ns: &str, dir: &str| value(&s, &ns_series("nvmf_target_bytes_total", ns, "direction", dir));
    assert_eq!(bytes("1", "write"), 4608.0);
    assert_eq!(bytes("1", "read"), 4096.0, "a failed read moves no bytes");
    assert_eq!(bytes("2", "read"), 1024.0);
    assert!(!s.keys().any(|k| k.contains("namespace=\"9\"")), "no series for a namespace that does not exist");
    let errors =
        |status: &str| value(&s, &format!("nvmf_target_errors_total{{subsystem=\"{SUBNQN}\",status=\"{status}\"}}"));
    assert_eq!(errors("LBA_OUT_OF_RANGE"), 1.0);
    assert_eq!(errors("INVALID_NAMESPACE"), 1.0);
    assert_eq!(errors("INVALID_OPCODE"), 1.0);
    assert_eq!(s.keys().filter(|k| k.starts_with("nvmf_target_errors_total")).count(), 3);
    let latency = ns_series("nvmf_target_command_latency_seconds_count", "1", "opcode", "read");
    assert_eq!(value(&s, &latency), 2.0);
    let inf = ns_series("nvmf_target_command_latency_seconds_bucket", "1", "opcode", "write");
    let inf = format!("{},le=\"+Inf\"}}", inf.strip_suffix('}').unwrap());
    assert_eq!(value(&s, &inf), 2.0);
    let sum = value(&s, &ns_series("nvmf_target_command_latency_seconds_sum", "1", "opcode", "write"));
    assert!(sum > 0.0 && sum < 10.0, "latency sum {sum}");
    assert_eq!(value(&s, &format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}")), 1.0);
    assert_eq!(value(&s, "nvmf_target_connections{transport=\"tcp\"}"), 2.0);
    assert_eq!(value(&s, &format!("nvmf_target_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))), 1.0);
    assert_eq!(value(&s, &format!("nvmf_target_keep_alive_expiries_total{{subsystem=\"{SUBNQN}\"}}")), 0.0);
    assert_eq!(value(&s, "nvmf_target_timeouts_total{state=\"connect\"}"), 0.0);
    assert_eq!(value(&s, "nvmf_target_blkdiscard_total"), 0.0);
    assert_eq!(value(&s, "nvmf_target_blkdiscard_queue_full_total"), 0.0);
    for family in ["dh_steps", "queue_full", "rate_limited"] {
        assert_eq!(value(&s, &format!("nvmf_target_auth_{family}_total")), 0.0);
    }

    // Queues end: their counts stay (folded into the subsystem), the controller is gone.
    io.queue.disconnect(&mut engine);
    admin.queue.disconnect(&mut engine);
    assert_eq!(target.subsystem(SUBNQN).unwrap().metrics().live_queues(), 0);
    let after = samples(&scrape(&target, 0, Format::Prometheus));
    for (series, v) in &s {
        if series.starts_with("nvmf_target_command")
            || series.starts_with("nvmf_target_bytes")
            || series.starts_with("nvmf_target_errors")
        {
            assert_eq!(after.get(series), Some(v), "{series} after the queues ended");
        }
    }
    assert_eq!(value(&after, &format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}")), 0.0);
}

#[test]
fn keep_alive_expiry_is_counted() {
    let target = target();
    let mut engine = engine();
    let (mut admin, _io) = associate(&target, &mut engine, 1000);
    let mut out = Vec::new();
    let now = Instant::now();
    admin.queue.poll(&mut engine, now, &mut out).unwrap();
    let err = admin.queue.poll(&mut engine, now + Duration::from_secs(5), &mut out).unwrap_err();
    assert!(matches!(err, crate::controller::QueueError::KeepAliveExpired { .. }), "{err}");
    let s = samples(&scrape(&target, 0, Format::Prometheus));
    assert_eq!(value(&s, &format!("nvmf_target_keep_alive_expiries_total{{subsystem=\"{SUBNQN}\"}}")), 1.0);
    assert_eq!(value(&s, &format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}")), 0.0);
}

/// Check a Prometheus (0.0.4) or OpenMetrics text exposition: every line is a comment, blank, or
/// `name{labels} value`; each family has HELP and TYPE before its samples; histogram buckets are cumulative,
/// end with +Inf, and +Inf equals `_count`. Returns the number of families.
fn check_exposition(text: &str, openmetrics: bool) -> usize {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps = std::collections::BTreeSet::new();
    // Histogram series (name + labels without le) → (last le, last cumulative count).
    let mut buckets: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    let lines: Vec<&str> = text.lines().collect();
    assert!(text.ends_with('\n'));
    for (i, line) in lines.iter().enumerate() {
        if line.is_empty() {
            assert!(!openmetrics, "OpenMetrics has no blank lines");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), Some(_)) => assert!(helps.insert(name.to_owned()), "second HELP {name}"),
                (Some("TYPE"), Some(name), Some(t)) => {
                    assert!(name_ok(name));
                    assert!(helps.contains(name), "TYPE {name} before its HELP");
                    assert!(types.insert(name.to_owned(), t.to_owned()).is_none(), "second TYPE {name}");
                }
                (Some("EOF"), None, None) => assert!(openmetrics && i == lines.len() - 1, "EOF must end the text"),
                _ => panic!("line {i}: unexpected comment {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("line {i}: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("line {i}: value {v:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or_else(|| panic!("line {i}: labels {line:?}"))),
            None => (series, ""),
        };
        assert!(name_ok(name), "line {i}: name {name:?}");
        let mut label_pairs = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("line {i}: label in {line:?}"));
            assert!(name_ok(key), "line {i}: label name {key:?}");
            let end = after.find('"').unwrap_or_else(|| panic!("line {i}: unterminated label value"));
            label_pairs.push((key, &after[..end]));
            rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
        }
        let family = types
            .keys()
            .filter(|f| name == f.as_str() || name.strip_prefix(f.as_str()).is_some_and(|s| s.starts_with('_')))
            .max_by_key(|f| f.len())
            .unwrap_or_else(|| panic!("line {i}: sample {name} of no TYPE'd family"))
            .clone();
        let others: Vec<String> =
            label_pairs.iter().filter(|(k, _)| *k != "le").map(|(k, v)| format!("{k}={v}")).collect();
        let key = format!("{family}{{{}}}", others.join(","));
        if types[&family] == "histogram" {
            if name.ends_with("_bucket") {
                let le = label_pairs.iter().find(|(k, _)| *k == "le").expect("bucket has le").1;
                let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
                let (prev_le, prev) = buckets.get(&key).copied().unwrap_or((f64::NEG_INFINITY, 0.0));
                assert!(le > prev_le, "line {i}: le not increasing");
                assert!(value >= prev, "line {i}: buckets not cumulative");
                buckets.insert(key, (le, value));
            } else if name.ends_with("_count") {
                counts.insert(key, value);
            } else {
                assert!(name.ends_with("_sum"), "line {i}: {name}");
            }
        }
    }
    for (key, (le, n)) in &buckets {
        assert_eq!(*le, f64::INFINITY, "{key}: last bucket must be +Inf");
        assert_eq!(counts.get(key), Some(n), "{key}: +Inf bucket equals _count");
    }
    assert_eq!(helps.len(), types.len());
    if openmetrics {
        assert_eq!(lines.last(), Some(&"# EOF"));
    }
    types.len()
}

/// Run `promtool check metrics` on `text` when promtool is installed. Returns whether it ran.
fn promtool(text: &str) -> bool {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else { return false };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && report.trim().is_empty(), "promtool check metrics:\n{report}\n---\n{text}");
    true
}

#[test]
fn exposition_is_well_formed_in_both_formats() {
    let target = target();
    let mut engine = engine();
    let (_admin, mut io) = associate(&target, &mut engine, 0);
    assert_eq!(io.io(&mut engine, write(1, 0, 1), 512, &[5; 512]).0, Status::SUCCESS);
    for _ in 0..3 {
        assert_eq!(io.io(&mut engine, read(1, 0, 1), 512, &[]).0, Status::SUCCESS);
    }
    let _ = io.io(&mut engine, read(1, 1 << 40, 1), 512, &[]);

    let text = scrape(&target, 1, Format::Prometheus);
    assert_eq!(check_exposition(&text, false), 29, "{text}");
    // With an RDMA listener, the four RNIC families of the devices behind it.
    let sysfs = tempfile::tempdir().unwrap();
    let text = scrape_with(&target, 1, Format::Prometheus, rnic(sysfs.path(), "10.77.0.1"));
    assert_eq!(check_exposition(&text, false), 33, "{text}");
    assert!(text.contains("# TYPE nvmf_target_commands_total counter\n"));
    assert!(text.contains("# TYPE nvmf_target_command_latency_seconds histogram\n"));
    assert!(text.contains("# TYPE nvmf_target_rnic_hw_counters_total counter\n"));
    let om = scrape_with(&target, 1, Format::OpenMetrics, rnic(sysfs.path(), "10.77.0.1"));
    assert_eq!(check_exposition(&om, true), 33, "{om}");
    assert!(om.contains("# TYPE nvmf_target_commands counter\n"));
    assert!(om.contains("# TYPE nvmf_target_build info\n"));
    if !promtool(&text) {
        eprintln!("promtool not installed: skipped `promtool check metrics`");
    }
}

#[test]
fn rnic_counters_of_the_devices_behind_the_rdma_listeners() {
    let target = target();
    let sysfs = tempfile::tempdir().unwrap();
    let s = samples(&scrape_with(&target, 0, Format::Prometheus, rnic(sysfs.path(), "10.77.0.1")));
    let rxe = |name: &str, extra: &str| format!("{name}{{device=\"rxe0\",port=\"1\"{extra}}}");
    assert_eq!(value(&s, &rxe("nvmf_target_rnic_hw_counters_total", ",counter=\"sent_pkts\"")), 120.0);
    assert_eq!(value(&s, &rxe("nvmf_target_rnic_hw_counters_total", ",counter=\"rcvd_rnr_err\"")), 3.0);
    assert_eq!(value(&s, &rxe("nvmf_target_rnic_port_state_id", "")), 4.0);
    assert_eq!(value(&s, &rxe("nvmf_target_rnic_port_active_mtu_bytes", "")), 4096.0);
    assert!(!s.keys().any(|k| k.contains("mlx5_0")), "mlx5_0 serves no listener: {s:#?}");

    // A wildcard listener: every device; no RDMA listener: no RNIC families.
    let s = samples(&scrape_with(&target, 0, Format::Prometheus, rnic(sysfs.path(), "0.0.0.0")));
    let down = "nvmf_target_rnic_port_state_id{device=\"mlx5_0\",port=\"1\"}";
    assert_eq!(value(&s, down), 1.0);
    let link_downed = "nvmf_target_rnic_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"link_downed\"}";
    assert_eq!(value(&s, link_downed), 1.0);
    let tcp = nvmf_config::TargetConfig::from_str("[[listener]]\naddress = \"10.77.0.1\"\n", "t.toml").unwrap();
    assert!(rnic::rnic_collector_in(nvmf_service::rdma_sysfs::RdmaSysfs::new(sysfs.path()), &tcp).is_none());
}

#[test]
fn exposition_checker_rejects_broken_text() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n";
    assert_eq!(check_exposition(ok, false), 1);
    let broken = [
        "a_total 1\n",                                                                                 // no TYPE
        "# HELP a A.\n# TYPE a counter\na{x=1} 1\n",                                                   // unquoted label
        "# HELP a A.\n# TYPE a gauge\na one\n",                                                        // not a number
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", // not cumulative
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\n",                          // no +Inf
    ];
    for text in broken {
        assert!(std::panic::catch_unwind(|| check_exposition(text, false)).is_err(), "accepted {text:?}");
    }
}

/// `GET path` over HTTP/1.1; returns (status line, headers, body).
fn http_get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let length: usize =
        headers.lines().find_map(|l| l.strip_prefix("Content-Length: ")).expect("Content-Length").parse().unwrap();
    assert_eq!(length, body.len());
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

#[test]
fn daemon_serves_metrics_over_http() {
    let toml = format!(
        "[reactors]\nthreads = 1\n[metrics]\nlisten = \"127.0.0.1:9420\"\n[[listener]]\ntransport = \"tcp\"\n\
         address = \"127.0.0.1\"\nport = 4420\n[[subsystem]]\nnqn = \"{SUBNQN}\"\nallow_any_host = true\n\
         [[subsystem.namespace]]\nmemory = \"1MiB\"\n"
    );
    let mut config = nvmf_config::TargetConfig::from_str(&toml, "metrics-test.toml").unwrap();
    // Port 0 (any free port) is not a valid configuration, but it is what a test needs.
    config.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    config.listeners[0].address = "127.0.0.1:0".parse().unwrap();
    let running = crate::daemon::start(&config).unwrap();
    let addr = running.metrics_addr().expect("metrics endpoint");
    assert_ne!(addr.port(), 0);

    // A transport connection shows in the connections gauge once a reactor took it.
    let _nvme = TcpStream::connect(running.local_addrs()[0]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, headers, body) = http_get(addr, "/metrics", None);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(headers.contains("Content-Type: text/plain; version=0.0.4"), "{headers}");
        if body.contains("nvmf_target_connections{transport=\"tcp\"} 1\n") {
            break body;
        }
        assert!(Instant::now() < deadline, "connection never counted:\n{body}");
        std::thread::sleep(Duration::from_millis(20));
    };
    check_exposition(&body, false);
    let s = samples(&body);
    assert_eq!(value(&s, &ns_series("nvmf_target_commands_total", "1", "opcode", "read")), 0.0);
    assert_eq!(value(&s, &format!("nvmf_target_controllers{{subsystem=\"{SUBNQN}\"}}")), 0.0);
    assert_eq!(
        value(&s, "nvmf_target_controllers{subsystem=\"nqn.2014-08.org.nvmexpress.discovery\"}"),
        0.0,
        "the discovery subsystem is listed"
    );

    let (status, headers, body) = http_get(addr, "/metrics", Some("application/openmetrics-text;version=1.0.0"));
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains("Content-Type: application/openmetrics-text"), "{headers}");
    check_exposition(&body, true);
    assert_eq!(http_get(addr, "/healthz", None).2, "ok\n");
    assert_eq!(http_get(addr, "/nope", None).0, "HTTP/1.1 404 Not Found");

    // An oversized request head is refused, not buffered.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = stream.write_all(format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_REQUEST)).as_bytes());
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 431"), "{response:?}");

    running.shutdown();
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "endpoint closed at shutdown");
}

#[test]
fn the_module_doc_lists_every_family_exported() {
    let target = target();
    let sysfs = tempfile::tempdir().unwrap();
    let text = scrape_with(&target, 1, Format::OpenMetrics, rnic(sysfs.path(), "10.77.0.1"));
    let doc: String =
        include_str!("mod.rs").lines().filter_map(|l| l.strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    let listed =
        |name: &str| ["`", "{", "_total", "_info", "_seconds"].iter().any(|end| doc.contains(&format!("`{name}{end}")));
    let missing: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| !listed(name))
        .collect();
    assert!(missing.is_empty(), "families exported but not listed in metrics/mod.rs: {missing:?}");
}
