//! Loading and validation of the host configuration: every rejection's exact message (with line and column),
//! the defaults, and the annotated example.

use super::*;

const BASE: &str = r#"[[controller]]
address = "127.0.0.1"
nqn = "nqn.2024-01.io.example:disk"
"#;

fn load(text: &str) -> Result<HostConfig, ConfigError> {
    HostConfig::from_str(text, "h.toml")
}

const CASES: &[(&str, &str, &str)] = &[
    // (name, text, message); `@@TEXT` appends TEXT to BASE.
    ("syntax", "a = ",
        "h.toml:1:5: invalid TOML syntax here"),
    ("unknown_section", "[hosts]\n",
        "h.toml:1:2: hosts: unknown field `hosts`, expected one of `host`, `metrics`, `logging`, `controller`"),
    ("unknown_key", "@@queue_depth = 3\n",
        "h.toml:4:1: controller[0].queue_depth: unknown field `queue_depth`, expected one of `transport`, `address`, `port`, `nqn`, `nr_io_queues`, `queue_size`, `keep_alive_tmo`, `reconnect_delay`, `ctrl_loss_tmo`, `fast_io_fail_tmo`, `iopolicy`, `path_retries`, `hdr_digest`, `data_digest`, `disable_sqflow`, `host_iface`, `dhchap_secret`, `dhchap_secret_file`, `dhchap_ctrl_secret`, `dhchap_ctrl_secret_file`, `tls`, `tls_key`, `tls_key_file`, `tls_identity_version`, `tls_compat`, `concat`, `export`, `path`"),
    ("missing_nqn", "[[controller]]\naddress = \"::1\"\n",
        "h.toml:1:1: controller[0]: missing field `nqn`"),
    ("bad_transport", "@@transport = \"fc\"\n",
        "h.toml:4:13: controller[0].transport: unknown variant `fc`, expected `tcp` or `rdma`"),
    ("wrong_type", "@@port = \"4420\"\n",
        "h.toml:4:8: controller[0].port: invalid type: string \"4420\", expected an integer"),
    ("hostnqn", "[host]\nhostnqn = \"host\\u0001\"\n",
        "h.toml:2:11: host.hostnqn: \"host\\u{1}\" is not a valid NQN: NQN contains a control character; allowed: a name of 1 to 223 bytes without control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\""),
    ("hostnqn_discovery", "[host]\nhostnqn = \"nqn.2014-08.org.nvmexpress.discovery\"\n",
        "h.toml:2:11: host.hostnqn: the discovery subsystem's NQN cannot name a host; allowed: this host's own NQN, e.g. nqn.2014-08.org.nvmexpress:uuid:<UUID>"),
    ("hostid", "[host]\nhostid = \"xyz\"\n",
        "h.toml:2:10: host.hostid: \"xyz\" is not a UUID; allowed: a UUID such as \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", not all zero"),
    ("state_dir_empty", "[host]\nstate_dir = \"\"\n",
        "h.toml:2:13: host.state_dir: the path is empty; allowed: a directory or file path"),
    ("control_socket_empty", "[host]\ncontrol_socket = \"\"\n",
        "h.toml:2:18: host.control_socket: the path is empty; allowed: a directory or file path"),
    ("poll", "[host]\npoll = \"spin\"\n",
        "h.toml:2:8: host.poll: \"spin\" is not a poll mode; allowed: adaptive, sleep or busy"),
    ("poll_type", "[host]\npoll = true\n",
        "h.toml:2:8: host.poll: invalid type: boolean `true`, expected a string"),
    ("poll_window_us", "[host]\npoll_window_us = 0\n",
        "h.toml:2:18: host.poll_window_us: poll window 0 is out of range; allowed: 1..=100000 microseconds (200)"),
    ("poll_window_us_high", "[host]\npoll_window_us = 100001\n",
        "h.toml:2:18: host.poll_window_us: poll window 100001 is out of range; allowed: 1..=100000 microseconds (200)"),
    ("poll_busy", "[host]\npoll = \"busy\"\npoll_window_us = 100000\n",
        "accepted"),
    ("cpus_twice", "[host]\ncpus = [0, 0]\n",
        "h.toml:2:12: host.cpus[1]: CPU 0 is listed twice; allowed: CPU numbers 0..=1023, each once"),
    ("cpus_range", "[host]\ncpus = [1024]\n",
        "h.toml:2:9: host.cpus[0]: CPU 1024 is out of range; allowed: CPU numbers 0..=1023, each once"),
    ("cpus_unpinned", "[host]\ncpus = []\n",
        "accepted"),
    ("metrics_listen", "[metrics]\nlisten = \"localhost\"\n",
        "h.toml:2:10: metrics.listen: \"localhost\" is not an address and port; allowed: ADDRESS:PORT such as \"127.0.0.1:9420\" or \"[::1]:9420\", port 1..=65535"),
    ("log_level", "[logging]\nlevel = \"loud\"\n",
        "h.toml:2:9: logging.level: log directive \"loud\" is not understood; allowed: comma-separated LEVEL or TARGET=LEVEL directives, LEVEL one of trace, debug, info, warn, error, off; TARGET a Rust module path such as nvmf_target::tcp"),
    ("address", "[[controller]]\naddress = \"target.example\"\nnqn = \"nqn.2024-01.io.example:disk\"\n",
        "h.toml:2:11: controller[0].address: \"target.example\" is not an IP address; allowed: an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\", \"::\" or \"::1\" (no host name, brackets or port)"),
    ("port", "@@port = 0\n",
        "h.toml:4:8: controller[0].port: port 0 is out of range; allowed: 1..=65535 (4420)"),
    ("nqn", "[[controller]]\naddress = \"::1\"\nnqn = \"\"\n",
        "h.toml:3:7: controller[0].nqn: \"\" is not a valid NQN: NQN is empty; allowed: a name of 1 to 223 bytes without control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\""),
    ("nqn_discovery", "[[controller]]\naddress = \"::1\"\nnqn = \"nqn.2014-08.org.nvmexpress.discovery\"\n",
        "h.toml:3:7: controller[0].nqn: the discovery subsystem holds no namespaces to keep connected; allowed: an NVM subsystem's NQN (use `nvmf-host connect-all` to connect what a discovery controller lists)"),
    ("duplicate_controller", "@@[[controller]]\naddress = \"127.0.0.1\"\nport = 4420\nnqn = \"nqn.2024-01.io.example:disk\"\n",
        "h.toml:7:7: controller[1].nqn: nqn.2024-01.io.example:disk at tcp://127.0.0.1:4420 is also controller[0]; allowed: each subsystem NQN, transport, address and port once"),
    ("path_address", "@@[[controller.path]]\naddress = \"10.0.0.300\"\n",
        "h.toml:5:11: controller[0].path[0].address: \"10.0.0.300\" is not an IP address; allowed: an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\", \"::\" or \"::1\" (no host name, brackets or port)"),
    ("path_duplicate", "@@[[controller.path]]\naddress = \"127.0.0.1\"\n",
        "h.toml:5:11: controller[0].path[0].address: nqn.2024-01.io.example:disk at tcp://127.0.0.1:4420 is also controller[0]; allowed: each subsystem NQN, transport, address and port once"),
    ("nr_io_queues", "@@nr_io_queues = 0\n",
        "h.toml:4:16: controller[0].nr_io_queues: I/O queue count 0 is out of range; allowed: 1..=65534"),
    ("queue_size", "@@queue_size = 4096\n",
        "h.toml:4:14: controller[0].queue_size: queue size 4096 is out of range; allowed: 2..=1024"),
    ("keep_alive_tmo", "@@keep_alive_tmo = -1\n",
        "h.toml:4:18: controller[0].keep_alive_tmo: timeout -1 is out of range; allowed: 0..=31536000 seconds"),
    ("reconnect_delay", "@@reconnect_delay = 0\n",
        "h.toml:4:19: controller[0].reconnect_delay: delay 0 is out of range; allowed: 1..=31536000 seconds"),
    ("ctrl_loss_tmo", "@@ctrl_loss_tmo = -2\n",
        "h.toml:4:17: controller[0].ctrl_loss_tmo: timeout -2 is out of range; allowed: -1 (never) or 0..=31536000 seconds"),
    ("fast_io_fail_tmo", "@@fast_io_fail_tmo = 99999999999\n",
        "h.toml:4:20: controller[0].fast_io_fail_tmo: timeout 99999999999 is out of range; allowed: -1 (never) or 0..=31536000 seconds"),
    ("path_retries", "@@path_retries = 16\n",
        "h.toml:4:16: controller[0].path_retries: retry count 16 is out of range; allowed: 0..=15"),
    ("iopolicy", "@@iopolicy = \"numa\"\n",
        "h.toml:4:12: controller[0].iopolicy: \"numa\" is not an I/O policy; allowed: round-robin or queue-depth"),
    ("host_iface", "@@host_iface = \"eth 1\"\n",
        "h.toml:4:14: controller[0].host_iface: \"eth 1\" is not an interface name; allowed: a name such as eth0 (1..=15 bytes)"),
    ("host_iface_rdma", "@@transport = \"rdma\"\nhost_iface = \"eth1\"\n",
        "h.toml:5:14: controller[0].host_iface: an interface for an NVMe/RDMA controller; allowed: host_iface on NVMe/TCP controllers only (for RDMA the address's route picks the device)"),
    ("host_iface_tcp", "@@host_iface = \"eth1\"\n",
        "accepted"),
    ("dhchap_secret", "@@dhchap_secret = \"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\"\n",
        "accepted"),
    ("dhchap_secret_crc", "@@dhchap_secret = \"DHHC-1:00:AAEDAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\"\n",
        "h.toml:4:17: controller[0].dhchap_secret: the key's CRC-32 does not match: the secret was mistyped or cut; allowed: a secret as `nvmf-host gen-dhchap-key` (or `nvme gen-dhchap-key`) prints it: \"DHHC-1:00:<base64>:\""),
    ("dhchap_secret_prefix", "@@dhchap_ctrl_secret = \"secret\"\n",
        "h.toml:4:22: controller[0].dhchap_ctrl_secret: a DH-HMAC-CHAP secret starts with \"DHHC-1:\"; allowed: a secret as `nvmf-host gen-dhchap-key` (or `nvme gen-dhchap-key`) prints it: \"DHHC-1:00:<base64>:\""),
    ("dhchap_both", "@@dhchap_secret = \"x\"\ndhchap_secret_file = \"/x\"\n",
        "h.toml:5:22: controller[0].dhchap_secret_file: both dhchap_secret and dhchap_secret_file are set; allowed: one of them"),
    ("dhchap_ctrl_alone", "@@dhchap_ctrl_secret = \"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\"\n",
        "h.toml:4:22: controller[0].dhchap_ctrl_secret: a controller secret without the host's; allowed: dhchap_secret (or dhchap_secret_file) as well: the controller is authenticated in the host's transaction"),
    ("dhchap_missing_file", "@@dhchap_secret_file = \"/nonexistent/host.key\"\n",
        "h.toml:4:22: controller[0].dhchap_secret_file: cannot read /nonexistent/host.key: No such file or directory (os error 2); allowed: a file holding the secret"),
    ("tls_key", "@@tls_key = \"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\"\ntls = true\n",
        "accepted"),
    ("tls_without_key", "@@tls = true\n",
        "h.toml:4:7: controller[0].tls: TLS without a key; allowed: tls_key = \"NVMeTLSkey-1:…\" or tls_key_file as well (nvmf-host reads its keys from its configuration, not from a kernel keyring)"),
    ("tls_false_with_key", "@@tls = false\ntls_key = \"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\"\n",
        "h.toml:4:7: controller[0].tls: tls = false with a TLS key; allowed: no tls_key for a plaintext controller (a key means TLS)"),
    ("tls_key_crc", "@@tls_key = \"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrA:\"\n",
        "h.toml:4:11: controller[0].tls_key: the key's CRC-32 does not match: the key was mistyped or cut; allowed: a PSK in the interchange format, as `nvmf-host gen-tls-key` (or `nvme gen-tls-key`) prints it: \"NVMeTLSkey-1:01:<base64>:\""),
    ("tls_key_short", "@@tls_key = \"NVMeTLSkey-1:01:AAAA:\"\n",
        "h.toml:4:11: controller[0].tls_key: the key field holds 3 bytes; a PSK of 32 or 48 bytes and its 4-byte CRC-32 are 36 or 52; allowed: a PSK in the interchange format, as `nvmf-host gen-tls-key` (or `nvme gen-tls-key`) prints it: \"NVMeTLSkey-1:01:<base64>:\""),
    ("tls_key_prefix", "@@tls_key = \"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\"\n",
        "h.toml:4:11: controller[0].tls_key: a TLS PSK in interchange format is \"NVMeTLSkey-1:<hash>:<base64 key and CRC-32>:\"; allowed: a PSK in the interchange format, as `nvmf-host gen-tls-key` (or `nvme gen-tls-key`) prints it: \"NVMeTLSkey-1:01:<base64>:\""),
    ("tls_key_both", "@@tls_key = \"x\"\ntls_key_file = \"/x\"\n",
        "h.toml:5:16: controller[0].tls_key_file: both tls_key and tls_key_file are set; allowed: one of them"),
    ("tls_key_missing_file", "@@tls_key_file = \"/nonexistent/host.tls\"\n",
        "h.toml:4:16: controller[0].tls_key_file: cannot read /nonexistent/host.tls: No such file or directory (os error 2); allowed: a file holding the secret"),
    ("tls_rdma", "@@transport = \"rdma\"\ntls_key = \"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\"\n",
        "h.toml:5:11: controller[0].tls_key: a TLS key for an NVMe/RDMA controller; allowed: TLS on NVMe/TCP controllers only"),
    ("tls_identity_version", "@@tls_identity_version = 2\n",
        "h.toml:4:24: controller[0].tls_identity_version: PSK identity version 2 is out of range; allowed: 0 (NVMe0R0x <hostnqn> <subnqn>) or 1 (NVMe1R0x <hostnqn> <subnqn> <digest>; the default)"),
    ("tls_identity_version_type", "@@tls_identity_version = \"1\"\n",
        "h.toml:4:24: controller[0].tls_identity_version: invalid type: string \"1\", expected an integer"),
    ("tls_compat_type", "@@tls_compat = \"yes\"\n",
        "h.toml:4:14: controller[0].tls_compat: invalid type: string \"yes\", expected a boolean"),
    ("tls_options_without_key", "@@tls_identity_version = 0\ntls_compat = true\n",
        "accepted"),
    ("digest_type", "@@hdr_digest = 1\n",
        "h.toml:4:14: controller[0].hdr_digest: invalid type: integer `1`, expected a boolean"),
    ("export_nsid", "@@[[controller.export]]\nnsid = 0\nnbd = \"unix:/run/a.sock\"\n",
        "h.toml:5:8: controller[0].export[0].nsid: NSID 0 is out of range; allowed: 1..=4294967294"),
    ("export_missing_nsid", "@@[[controller.export]]\nnbd = \"unix:/run/a.sock\"\n",
        "h.toml:4:1: controller[0].export[0]: missing field `nsid`"),
    ("export_nowhere", "@@[[controller.export]]\nnsid = 1\nublk = false\n",
        "h.toml:4:1: controller[0].export[0]: the export says nowhere to serve the namespace; allowed: exactly one of nbd = \"unix:/path\" or \"ADDRESS:PORT\" (an NBD server), or ublk = true (a /dev/ublkbN device)"),
    ("export_both", "@@[[controller.export]]\nnsid = 1\nnbd = \"unix:/run/a.sock\"\nublk = true\n",
        "h.toml:7:8: controller[0].export[0].ublk: the export has both nbd and ublk = true; allowed: exactly one of nbd = \"unix:/path\" or \"ADDRESS:PORT\" (an NBD server), or ublk = true (a /dev/ublkbN device)"),
    ("export_ublk", "@@[[controller.export]]\nnsid = 1\nublk = true\n[[controller.export]]\nnsid = 2\nublk = true\n",
        "accepted"),
    ("export_nbd", "@@[[controller.export]]\nnsid = 1\nnbd = \"localhost:10809\"\n",
        "h.toml:6:7: controller[0].export[0].nbd: \"localhost:10809\" is neither unix:PATH nor an address and port; allowed: \"unix:/absolute/or/relative/path\" or a loopback \"ADDRESS:PORT\" such as \"127.0.0.1:10809\" or \"[::1]:10809\""),
    ("export_nbd_not_loopback", "@@[[controller.export]]\nnsid = 1\nnbd = \"0.0.0.0:10809\"\n",
        "h.toml:6:7: controller[0].export[0].nbd: \"0.0.0.0:10809\" is not a loopback address (NBD has no authentication); allowed: \"unix:/absolute/or/relative/path\" or a loopback \"ADDRESS:PORT\" such as \"127.0.0.1:10809\" or \"[::1]:10809\""),
    ("export_nbd_empty_unix", "@@[[controller.export]]\nnsid = 1\nnbd = \"unix:\"\n",
        "h.toml:6:7: controller[0].export[0].nbd: \"unix:\" names no socket path; allowed: \"unix:/absolute/or/relative/path\" or a loopback \"ADDRESS:PORT\" such as \"127.0.0.1:10809\" or \"[::1]:10809\""),
    ("export_duplicate_nsid", "@@[[controller.export]]\nnsid = 1\nnbd = \"unix:/run/a.sock\"\n[[controller.export]]\nnsid = 1\nnbd = \"unix:/run/b.sock\"\n",
        "h.toml:8:8: controller[0].export[1].nsid: NSID 1 is also export[0]'s; allowed: each namespace of a controller exported once"),
    ("export_duplicate_endpoint", "@@[[controller.export]]\nnsid = 1\nnbd = \"127.0.0.1:10809\"\n[[controller]]\naddress = \"::1\"\nnqn = \"nqn.2024-01.io.example:other\"\n[[controller.export]]\nnsid = 1\nnbd = \"127.0.0.1:10809\"\n",
        "h.toml:12:7: controller[1].export[0].nbd: 127.0.0.1:10809 is also controller[0].export[0]'s; allowed: a different socket path or address for each export"),
];

fn expand(text: &str) -> String {
    match text.strip_prefix("@@") {
        Some(rest) => format!("{BASE}{rest}"),
        None => text.to_owned(),
    }
}

#[test]
fn every_error_message() {
    let mut failures = Vec::new();
    for &(name, text, expected) in CASES {
        let actual = match load(&expand(text)) {
            Ok(_) => "accepted".to_owned(),
            Err(error) => error.to_string(),
        };
        if actual != expected {
            failures.push(format!("    (\"{name}\", ..., {actual:?}),"));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn defaults_are_filled_in() {
    let config = load("").unwrap();
    assert_eq!(
        config.host,
        HostSection {
            hostnqn: None,
            hostid: None,
            state_dir: PathBuf::from("/var/lib/nvmf-host"),
            control_socket: PathBuf::from("/run/nvmf-host/control.sock"),
            poll: PollMode::Adaptive,
            poll_window: Duration::from_micros(200),
            cpus: None,
        }
    );
    assert!(config.controllers.is_empty() && config.metrics.listen.is_none());
    let c = &load(BASE).unwrap().controllers[0];
    assert_eq!(c.transport, Transport::Tcp);
    assert_eq!(c.socket_addr(), "127.0.0.1:4420".parse().unwrap());
    assert_eq!(usize::from(c.nr_io_queues), crate::target::available_cpus().min(65534));
    assert_eq!((c.queue_size, c.hdr_digest, c.data_digest), (128, false, false));
    assert_eq!(c.keep_alive_tmo, Duration::from_secs(5));
    assert_eq!(c.reconnect_delay, Duration::from_secs(10));
    assert_eq!(c.ctrl_loss_tmo, Some(Duration::from_secs(600)));
    assert_eq!(c.fast_io_fail_tmo, None);
    assert!(c.exports.is_empty());
}

#[test]
fn each_further_path_is_a_controller_with_the_tables_settings() {
    let text = format!(
        "{BASE}queue_size = 64\n[[controller.export]]\nnsid = 1\nublk = true\n\
         [[controller.path]]\naddress = \"10.0.0.2\"\n[[controller.path]]\naddress = \"10.0.0.3\"\nport = 4421\n"
    );
    let c = load(&text).unwrap().controllers;
    let at: Vec<String> = c.iter().map(|c| c.socket_addr().to_string()).collect();
    assert_eq!(at, ["127.0.0.1:4420", "10.0.0.2:4420", "10.0.0.3:4421"]);
    assert!(c
        .iter()
        .all(|p| p.queue_size == 64 && p.exports == c[0].exports && p.nqn == c[0].nqn && p.exports.len() == 1));
}

#[test]
fn explicit_values_and_never() {
    let text = format!(
        "{BASE}transport = \"rdma\"\nport = 4421\nnr_io_queues = 3\nqueue_size = 64\nkeep_alive_tmo = 0\n\
         reconnect_delay = 2\nctrl_loss_tmo = -1\nfast_io_fail_tmo = 7\nhdr_digest = true\ndata_digest = true\n\
         [[controller.export]]\nnsid = 2\nnbd = \"unix:disk.sock\"\n[[controller.export]]\nnsid = 1\nnbd = \"[::1]:10809\"\n"
    );
    let c = &load(&text).unwrap().controllers[0];
    assert_eq!((c.transport, c.port, c.nr_io_queues, c.queue_size), (Transport::Rdma, 4421, 3, 64));
    assert_eq!((c.keep_alive_tmo, c.reconnect_delay), (Duration::ZERO, Duration::from_secs(2)));
    assert_eq!((c.ctrl_loss_tmo, c.fast_io_fail_tmo), (None, Some(Duration::from_secs(7))));
    assert!(c.hdr_digest && c.data_digest);
    assert_eq!(c.exports[0], ExportConfig { nsid: 2, kind: ExportKind::Nbd(NbdEndpoint::Unix("disk.sock".into())) });
    assert_eq!(c.exports[1].kind, ExportKind::Nbd(NbdEndpoint::Tcp("[::1]:10809".parse().unwrap())));
    assert_eq!(NbdEndpoint::Tcp("[::1]:10809".parse().unwrap()).to_string(), "[::1]:10809");
    let ublk = load(&format!("{BASE}[[controller.export]]\nnsid = 3\nublk = true\n")).unwrap();
    assert_eq!(ublk.controllers[0].exports[0], ExportConfig { nsid: 3, kind: ExportKind::Ublk });
    assert_eq!(NbdEndpoint::parse("unix:/run/x.sock").unwrap().to_string(), "unix:/run/x.sock");
}

#[test]
fn poll_mode_and_window() {
    for (mode, want) in [("adaptive", PollMode::Adaptive), ("sleep", PollMode::Sleep), ("busy", PollMode::Busy)] {
        let host = load(&format!("[host]\npoll = \"{mode}\"\npoll_window_us = 50\n")).unwrap().host;
        assert_eq!((host.poll, host.poll_window), (want, Duration::from_micros(50)));
    }
    let host = load("[host]\npoll_window_us = 100000\n").unwrap().host;
    assert_eq!((host.poll, host.poll_window), (PollMode::Adaptive, Duration::from_millis(100)));
}

#[test]
fn from_file_resolves_relative_paths_against_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.toml");
    let text = format!("[host]\nstate_dir = \"state\"\ncontrol_socket = \"/run/c.sock\"\n{BASE}[[controller.export]]\nnsid = 1\nnbd = \"unix:d.sock\"\n");
    std::fs::write(&path, text).unwrap();
    let config = HostConfig::from_file(&path).unwrap();
    assert_eq!(config.host.state_dir, dir.path().join("state"));
    assert_eq!(config.host.control_socket, PathBuf::from("/run/c.sock"));
    assert_eq!(config.controllers[0].exports[0].kind, ExportKind::Nbd(NbdEndpoint::Unix(dir.path().join("d.sock"))));
    let err = HostConfig::from_file(dir.path().join("missing.toml")).unwrap_err().to_string();
    assert!(err.contains("missing.toml: cannot read the configuration file"), "{err}");
}

#[test]
fn the_example_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/host.toml");
    let config = HostConfig::from_file(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.host.state_dir, PathBuf::from("/var/lib/nvmf-host"));
    assert_eq!((config.host.poll, config.host.poll_window), (PollMode::Adaptive, Duration::from_micros(200)));
    assert_eq!(config.metrics.listen, Some(SUGGESTED_METRICS_LISTEN.parse().unwrap()));
    assert!(!config.controllers.is_empty());
    assert!(config.controllers.iter().any(|c| !c.exports.is_empty()));
}

#[test]
fn secret_files_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("host.key");
    std::fs::write(&key, "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\n").unwrap();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, format!("{BASE}dhchap_secret_file = \"host.key\"\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = HostConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("controller[0].dhchap_secret_file: "), "{err}");
    assert!(
        err.ends_with("host.key has mode 0640, not its owner's alone (0600 or 0400): chmod 600 it; allowed: a file only its owner can read"),
        "{err}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = HostConfig::from_file(&path).unwrap();
    let secret = config.controllers[0].dhchap_secret.as_ref().unwrap();
    assert_eq!((secret.hmac(), secret.len()), (None, 32));
    assert_eq!(config.controllers[0].dhchap_ctrl_secret, None);
}

const TLS_KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

#[test]
fn tls_keys_and_how_they_derive() {
    use nvmf_common::fabrics::tls::{IdentityVersion, PskDerivation, PskHash};
    let plain = &load(BASE).unwrap().controllers[0];
    assert_eq!(
        (plain.tls_key.as_ref(), plain.tls_identity_version, plain.tls_compat),
        (None, IdentityVersion::V1, false)
    );
    let c = &load(&format!("{BASE}tls_key = \"{TLS_KEY}\"\n")).unwrap().controllers[0];
    let key = c.tls_key.as_ref().unwrap();
    assert_eq!((key.hash(), key.interchange().as_str()), (PskHash::Sha256, TLS_KEY));
    assert_eq!((c.tls_identity_version, c.tls_derivation()), (DEFAULT_TLS_IDENTITY_VERSION, PskDerivation::Rfc8446));
    // What the daemon logs of a controller (its Debug) shows no key material.
    let shown = format!("{c:?}");
    assert!(!shown.contains("VRLbtnN9") && shown.contains("<32 bytes>"), "{shown}");
    let text = format!("{BASE}tls = true\ntls_key = \"{TLS_KEY}\"\ntls_identity_version = 0\ntls_compat = true\n");
    let c = &load(&text).unwrap().controllers[0];
    assert_eq!((c.tls_identity_version, c.tls_derivation()), (IdentityVersion::V0, PskDerivation::Compat));
    // Each further path takes the table's key.
    let paths = load(&format!("{text}[[controller.path]]\naddress = \"10.0.0.2\"\n")).unwrap().controllers;
    assert_eq!(paths[1].tls_key, paths[0].tls_key);
    // A rejected key is never quoted.
    let bad = load(&format!("{BASE}tls_key = \"{}\"\n", TLS_KEY.replace("LrZ", "LrA"))).unwrap_err().to_string();
    assert!(bad.starts_with("h.toml:4:11: controller[0].tls_key: ") && !bad.contains("VRLbtnN9"), "{bad}");
}

#[test]
fn tls_key_files_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("host.tls");
    std::fs::write(&key, format!("{TLS_KEY}\n")).unwrap();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, format!("{BASE}tls_key_file = \"host.tls\"\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = HostConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("controller[0].tls_key_file: ") && err.contains("has mode 0644"), "{err}");
    assert!(!err.contains("VRLbtnN9"), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    let config = HostConfig::from_file(&path).unwrap();
    assert_eq!(config.controllers[0].tls_key.as_ref().unwrap().interchange().as_str(), TLS_KEY);
}

#[test]
fn concatenation_needs_a_dhchap_secret_and_no_tls_key() {
    let secret = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let c = &load(&format!("{BASE}dhchap_secret = \"{secret}\"\nconcat = true\n")).unwrap().controllers[0];
    assert!(c.concat && c.tls_key.is_none());
    assert!(!load(&format!("{BASE}dhchap_secret = \"{secret}\"\n")).unwrap().controllers[0].concat);
    let e = |extra: &str| load(&format!("{BASE}{extra}concat = true\n")).unwrap_err().to_string();
    assert!(e("").contains("controller[0].concat: concatenation without dhchap_secret"), "{}", e(""));
    let with_key = e(&format!("dhchap_secret = \"{secret}\"\ntls_key = \"{TLS_KEY}\"\n"));
    assert!(with_key.contains("controller[0].concat: concatenation with a tls_key"), "{with_key}");
    let rdma = e(&format!("transport = \"rdma\"\ndhchap_secret = \"{secret}\"\n"));
    assert!(rdma.contains("controller[0].concat: concatenation over RDMA"), "{rdma}");
}
