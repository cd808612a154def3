//! Loading and validation: every error message, with its line and column, and the effective configuration.

use super::*;

const BASE: &str = r#"[[listener]]
address = "127.0.0.1"

[[subsystem]]
nqn = "nqn.2024-01.io.example:disk"

[[subsystem.namespace]]
memory = "1GiB"
"#;

fn load(text: &str) -> Result<TargetConfig, ConfigError> {
    TargetConfig::from_str(text, "t.toml")
}

const CASES: &[(&str, &str, &str)] = &[
    // (name, text, message)
    ("syntax", "a = ",
        "t.toml:1:5: invalid TOML syntax here"),
    ("syntax_header", "[x\n",
        "t.toml:1:3: invalid table header; expected `.`, `]`"),
    ("duplicate_key", "[[listener]]\naddress = \"::1\"\naddress = \"::2\"\n",
        "t.toml:3:1: duplicate key `address` in table `listener`"),
    ("unknown_section", "[reactor]\nthreads = 1\n",
        "t.toml:1:2: reactor: unknown field `reactor`, expected one of `target`, `discovery`, `reactors`, `metrics`, `logging`, `listener`, `subsystem`"),
    ("unknown_key", "@[[subsystem.namespace]]@blocksize = 4096\n",
        "t.toml:9:1: subsystem[0].namespace[0].blocksize: unknown field `blocksize`, expected one of `nsid`, `path`, `memory`, `null`, `rbd`, `ceph_conf`, `ceph_id`, `block_size`, `buffered_io`, `uuid`, `nguid`, `eui64`, `ana_group`"),
    ("wrong_type", "@[[listener]]@port = \"4420\"\n",
        "t.toml:3:8: listener[0].port: invalid type: string \"4420\", expected an integer"),
    ("bad_variant", "@[[listener]]@transport = \"udp\"\n",
        "t.toml:3:13: listener[0].transport: unknown variant `udp`, expected `tcp` or `rdma`"),
    ("missing_field", "[[listener]]\nport = 1\n",
        "t.toml:1:1: listener[0]: missing field `address`"),
    ("size_type", "@[[subsystem.namespace]]@null = 1.5\n",
        "t.toml:9:8: subsystem[0].namespace[0].null: invalid type: floating point `1.5`, expected a size: a string such as \"1GiB\" or an integer number of bytes"),
    ("poll_mode", "[reactors]\npoll = \"spin\"\n@@",
        "t.toml:2:8: reactors.poll: \"spin\" is not a poll mode; allowed: adaptive, sleep or busy"),
    ("poll_window", "[reactors]\npoll_window_us = 0\n@@",
        "t.toml:2:18: reactors.poll_window_us: poll window 0 is out of range; allowed: 1..=100000 µs"),
    ("socket_io", "[reactors]\nsocket_io = \"uring\"\n@@",
        "t.toml:2:13: reactors.socket_io: \"uring\" is not a socket I/O mode; allowed: epoll or io_uring"),
    ("placement", "[reactors]\nplacement = \"napi\"\n@@",
        "t.toml:2:13: reactors.placement: \"napi\" is not a queue placement; allowed: round_robin or incoming_cpu"),
    ("placement_unpinned", "[reactors]\ncpus = [0]\nplacement = \"incoming_cpu\"\n@@",
        "t.toml:3:13: reactors.placement: \"incoming_cpu\" needs the reactors pinned to two or more CPUs; allowed: round_robin, or incoming_cpu with cpus listing two or more CPUs"),
    ("array_type", "[reactors]\ncpus = 3\n@@",
        "t.toml:2:8: reactors.cpus: invalid type: integer `3`, expected an array"),
    ("no_listener", "[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n",
        "t.toml:1:1: (top level): no [[listener]] is configured; allowed: one or more [[listener]] tables"),
    ("nothing_served", "[discovery]\nenabled = false\n[[listener]]\naddress = \"::\"\n",
        "t.toml:1:1: (top level): no [[subsystem]] is configured and discovery is disabled: nothing would be served; allowed: one or more [[subsystem]] tables, or [discovery] enabled = true"),
    ("mdts_not_pow2", "[target]\nmdts = \"3MiB\"\n@@",
        "t.toml:2:8: target.mdts: MDTS 3MiB is not allowed; allowed: a power of two from 4KiB to 16MiB"),
    ("mdts_bad_size", "[target]\nmdts = \"1 parsec\"\n@@",
        "t.toml:2:8: target.mdts: size \"1 parsec\" has an unknown unit \"parsec\"; allowed: a whole number of bytes with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"1GiB\""),
    ("mdts_negative", "[target]\nmdts = -4096\n@@",
        "t.toml:2:8: target.mdts: size -4096 is negative; allowed: a whole number of bytes with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"1GiB\""),
    ("max_queue_size", "[target]\nmax_queue_size = 16\n@@",
        "t.toml:2:18: target.max_queue_size: queue size 16 is out of range; allowed: 32..=65536"),
    ("max_io_queues", "[target]\nmax_io_queues = 0\n@@",
        "t.toml:2:17: target.max_io_queues: I/O queue count 0 is out of range; allowed: 1..=65534"),
    ("kas_range", "[target]\nkeep_alive_granularity_ms = 50\n@@",
        "t.toml:2:29: target.keep_alive_granularity_ms: granularity 50 is out of range; allowed: a multiple of 100 from 100 to 6553500"),
    ("kas_multiple", "[target]\nkeep_alive_granularity_ms = 150\n@@",
        "t.toml:2:29: target.keep_alive_granularity_ms: granularity 150 is not a multiple of 100; allowed: a multiple of 100 from 100 to 6553500"),
    ("kato_min", "[target]\nkeep_alive_max_ms = 60000\nkeep_alive_min_ms = 90000\n@@",
        "t.toml:3:21: target.keep_alive_min_ms: timeout 90000 is out of range; allowed: 0 (none) or 100..=60000 (the granularity to keep_alive_max_ms)"),
    ("kato_max", "[target]\nkeep_alive_granularity_ms = 1000\nkeep_alive_max_ms = 500\n@@",
        "t.toml:3:21: target.keep_alive_max_ms: timeout 500 is out of range; allowed: 1000..=4294967295 (at least keep_alive_granularity_ms)"),
    ("state_dir", "[target]\nstate_dir = \"var/lib\"\n@@",
        "t.toml:2:13: target.state_dir: \"var/lib\" is not an absolute path; allowed: an absolute directory path"),
    ("connect_timeout", "[target]\nconnect_timeout_ms = 50\n@@",
        "t.toml:2:22: target.connect_timeout_ms: timeout 50 is out of range; allowed: 100..=600000"),
    ("transfer_timeout", "[target]\ntransfer_timeout_ms = 999\n@@",
        "t.toml:2:23: target.transfer_timeout_ms: timeout 999 is out of range; allowed: 1000..=3600000"),
    ("queue_buffer_percent", "[target]\nqueue_buffer_percent = 0\n@@",
        "t.toml:2:24: target.queue_buffer_percent: percentage 0 is out of range; allowed: 1..=100"),
    ("anonymous_buffer_percent", "[target]\nanonymous_buffer_percent = 101\n@@",
        "t.toml:2:28: target.anonymous_buffer_percent: percentage 101 is out of range; allowed: 1..=100"),
    ("address", "[[listener]]\naddress = \"localhost\"\n",
        "t.toml:2:11: listener[0].address: \"localhost\" is not an IP address; allowed: an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\", \"::\" or \"::1\" (no host name, brackets or port)"),
    ("address_with_port", "[[listener]]\naddress = \"127.0.0.1:4420\"\n",
        "t.toml:2:11: listener[0].address: \"127.0.0.1:4420\" is not an IP address; allowed: an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\", \"::\" or \"::1\" (no host name, brackets or port)"),
    ("port", "@[[listener]]@port = 0\n",
        "t.toml:3:8: listener[0].port: port 0 is out of range; allowed: 1..=65535 (4420, or 8009 for discovery)"),
    ("listener_queue", "@[[listener]]@max_queue_size = 256\n",
        "t.toml:3:18: listener[0].max_queue_size: queue size 256 is out of range; allowed: 32..=128 ([target] max_queue_size)"),
    ("max_connections", "@[[listener]]@max_connections = 0\n",
        "t.toml:3:19: listener[0].max_connections: connection count 0 is out of range; allowed: 1..=1048576"),
    ("max_connections_per_address", "[target]\nmax_connections_per_address = 2000000\n@@",
        "t.toml:2:31: target.max_connections_per_address: connection count 2000000 is out of range; allowed: 1..=1048576"),
    ("address_prefix_v6", "[target]\naddress_prefix_v6 = 0\n@@",
        "t.toml:2:21: target.address_prefix_v6: prefix length 0 is out of range; allowed: 1..=128"),
    ("auth_threads", "[target]\nauth_threads = 0\n@@",
        "t.toml:2:16: target.auth_threads: thread count 0 is out of range; allowed: 1..=64"),
    ("auth_attempts_per_second", "[target]\nauth_attempts_per_second = 0\n@@",
        "t.toml:2:28: target.auth_attempts_per_second: attempt rate 0 is out of range; allowed: 1..=1000000"),
    ("target_dhgroups", "[target]\ndhchap_dhgroups = [\"ffdhe1024\"]\n@@",
        "t.toml:2:20: target.dhchap_dhgroups[0]: \"ffdhe1024\" is not known; allowed: null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192, each once"),
    ("max_controllers_per_host", "[target]\nmax_controllers_per_host = 65520\n@@",
        "t.toml:2:28: target.max_controllers_per_host: controller count 65520 is out of range; allowed: 1..=65519"),
    ("discovery_kato_max", "[target]\nkeep_alive_max_ms = 60000\n[discovery]\nkeep_alive_max_ms = 120000\n@@",
        "t.toml:4:21: discovery.keep_alive_max_ms: timeout 120000 is out of range; allowed: 1000..=60000 ([target] keep_alive_max_ms)"),
    ("tcp_keepalive", "[target]\ntcp_keepalive_ms = 5000\n@@",
        "t.toml:2:20: target.tcp_keepalive_ms: keepalive 5000 is out of range; allowed: 0 (off) or 10000..=86400000"),
    ("ceph_osd_timeout", "[target]\nceph_osd_timeout_ms = 10\n@@",
        "t.toml:2:23: target.ceph_osd_timeout_ms: timeout 10 is out of range; allowed: 1000..=600000"),
    ("tcp_send_backlog", "[target]\ntcp_send_backlog = \"4KiB\"\n@@",
        "t.toml:2:20: target.tcp_send_backlog: send backlog 4KiB is out of range; allowed: 64KiB..=1GiB"),
    ("in_capsule", "@[[listener]]@in_capsule_data_size = 100\n",
        "t.toml:3:24: listener[0].in_capsule_data_size: in-capsule data size 100 is not allowed; allowed: a multiple of 16 from 0 to 1MiB ([target] mdts)"),
    ("in_capsule_too_big", "@[[listener]]@in_capsule_data_size = \"2MiB\"\n",
        "t.toml:3:24: listener[0].in_capsule_data_size: in-capsule data size 2097152 is not allowed; allowed: a multiple of 16 from 0 to 1MiB ([target] mdts)"),
    ("tcp_on_rdma", "@[[listener]]@transport = \"rdma\"\ntcp = { header_digest = false }\n",
        "t.toml:4:1: listener[0].tcp: [listener.tcp] options on an rdma listener; allowed: a [listener.tcp] table only with transport = \"tcp\""),
    ("rdma_on_tcp", "@[[listener]]@[listener.rdma]\nsend_with_invalidate = false\n",
        "t.toml:3:11: listener[0].rdma: [listener.rdma] options on a tcp listener; allowed: a [listener.rdma] table only with transport = \"rdma\""),
    ("rdma_unknown_key", "@[[listener]]@transport = \"rdma\"\n[listener.rdma]\nshared = true\n",
        "t.toml:5:1: listener[0].rdma.shared: unknown field `shared`, expected `send_with_invalidate` or `srq`"),
    ("rdma_srq_not_bool", "@[[listener]]@transport = \"rdma\"\n[listener.rdma]\nsrq = \"yes\"\n",
        "t.toml:5:7: listener[0].rdma.srq: invalid type: string \"yes\", expected a boolean"),
    ("duplicate_listener", "[[listener]]\naddress = \"127.0.0.1\"\nport = 4420\n@@",
        "t.toml:4:1: listener[1]: tcp://127.0.0.1:4420 is also listener[0]; allowed: each transport, address and port once"),
    ("nqn", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"test\\tnqn\"\n",
        "t.toml:4:7: subsystem[0].nqn: \"test\\tnqn\" is not a valid NQN: NQN contains a control character; allowed: a name of 1 to 223 bytes without control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\""),
    ("nqn_empty", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"\"\n",
        "t.toml:4:7: subsystem[0].nqn: \"\" is not a valid NQN: NQN is empty; allowed: a name of 1 to 223 bytes without control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\""),
    ("discovery_nqn", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"nqn.2014-08.org.nvmexpress.discovery\"\n",
        "t.toml:4:7: subsystem[0].nqn: the discovery subsystem's NQN cannot name an NVM subsystem; allowed: any other NQN ([discovery] enables the discovery subsystem)"),
    ("duplicate_nqn", "@@[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n",
        "t.toml:10:7: subsystem[1].nqn: NQN \"nqn.2024-01.io.example:disk\" is also subsystem[0]'s; allowed: a different NQN for each subsystem"),
    ("serial_long", "@[[subsystem]]@serial = \"123456789012345678901\"\n",
        "t.toml:6:10: subsystem[0].serial: serial number \"123456789012345678901\" is 21 bytes long; allowed: 1 to 20 printable ASCII characters"),
    ("serial_empty", "@[[subsystem]]@serial = \"\"\n",
        "t.toml:6:10: subsystem[0].serial: serial number \"\" is 0 bytes long; allowed: 1 to 20 printable ASCII characters"),
    ("model_char", "@[[subsystem]]@model = \"disk\\u00e9\"\n",
        "t.toml:6:9: subsystem[0].model: model \"diské\" contains 'é'; allowed: 1 to 40 printable ASCII characters"),
    ("host_nqn", "@[[subsystem]]@hosts = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\n",
        "t.toml:6:10: subsystem[0].hosts[0]: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is not a valid NQN: NQN is 224 bytes long; at most 223 bytes are allowed; allowed: a name of 1 to 223 bytes without control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\""),
    ("host_twice", "@[[subsystem]]@hosts = [\"nqn.2024-01.io.example:h\", \"nqn.2024-01.io.example:h\"]\n",
        "t.toml:6:38: subsystem[0].hosts[1]: host \"nqn.2024-01.io.example:h\" is also hosts[0]; allowed: each host NQN once"),
    ("any_host_and_hosts", "@[[subsystem]]@allow_any_host = true\nhosts = [\"nqn.2024-01.io.example:h\"]\n",
        "t.toml:6:18: subsystem[0].allow_any_host: allow_any_host = true contradicts the hosts list; allowed: allow_any_host = false with hosts, or no hosts list"),
    ("no_host_at_all", "@[[subsystem]]@allow_any_host = false\n",
        "t.toml:6:18: subsystem[0].allow_any_host: allow_any_host = false with no hosts listed: no host could connect; allowed: hosts = [\"nqn...\"] with allow_any_host = false, or allow_any_host = true"),
    ("cntlid_range", "@[[subsystem]]@cntlid_min = 0\n",
        "t.toml:6:14: subsystem[0].cntlid_min: cntlid_min 0 is out of range; allowed: 1..=65519 (0xFFEF)"),
    ("cntlid_range_max", "@[[subsystem]]@cntlid_max = 65520\n",
        "t.toml:6:14: subsystem[0].cntlid_max: cntlid_max 65520 is out of range; allowed: 1..=65519 (0xFFEF)"),
    ("cntlid_order", "@[[subsystem]]@cntlid_min = 10\ncntlid_max = 9\n",
        "t.toml:7:14: subsystem[0].cntlid_max: cntlid_min 10 is greater than cntlid_max 9; allowed: cntlid_min <= cntlid_max"),
    ("cntlid_order_default_max", "@[[subsystem]]@cntlid_min = 65519\n",
        "accepted"),
    ("max_namespaces", "@[[subsystem]]@max_namespaces = 0\n",
        "t.toml:6:18: subsystem[0].max_namespaces: max_namespaces 0 is out of range; allowed: 1..=4294967294"),
    ("nsid_zero", "@[[subsystem.namespace]]@nsid = 0\n",
        "t.toml:9:8: subsystem[0].namespace[0].nsid: NSID 0 is out of range; allowed: 1..=1024 (max_namespaces), unique in the subsystem"),
    ("nsid_over_nn", "@[[subsystem]]@max_namespaces = 4\n@[[subsystem.namespace]]@nsid = 5\n",
        "t.toml:10:8: subsystem[0].namespace[0].nsid: NSID 5 is out of range; allowed: 1..=4 (max_namespaces), unique in the subsystem"),
    ("nsid_duplicate", "@@[[subsystem.namespace]]\nnsid = 1\nnull = \"1TiB\"\n",
        "t.toml:10:8: subsystem[0].namespace[1].nsid: NSID 1 is also namespace[0]'s; allowed: 1..=1024 (max_namespaces), unique in the subsystem"),
    ("nsid_duplicate_implicit", "@[[subsystem.namespace]]@nsid = 2\n[[subsystem.namespace]]\nnull = \"1G\"\nnsid = 1\n[[subsystem.namespace]]\nnull = \"1G\"\n",
        "t.toml:13:1: subsystem[0].namespace[2].nsid: NSID 2 (counted on from the previous namespace) is also namespace[0]'s; allowed: 1..=1024 (max_namespaces), unique in the subsystem"),
    ("no_backend", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n[[subsystem.namespace]]\nnsid = 1\n",
        "t.toml:5:1: subsystem[0].namespace[0]: the namespace has no backend; allowed: exactly one of path = \"/dev/...\" (block device or file), memory = \"SIZE\", null = \"SIZE\" or rbd = \"POOL/IMAGE\" (Ceph RBD image)"),
    ("two_backends", "@[[subsystem.namespace]]@path = \"/dev/null\"\n",
        "t.toml:8:10: subsystem[0].namespace[0].memory: the namespace has both path and memory; allowed: exactly one of path = \"/dev/...\" (block device or file), memory = \"SIZE\", null = \"SIZE\" or rbd = \"POOL/IMAGE\" (Ceph RBD image)"),
    ("empty_path", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n[[subsystem.namespace]]\npath = \"\"\n",
        "t.toml:6:8: subsystem[0].namespace[0].path: the path is empty; allowed: a block device or file path"),
    ("size_multiple", "@@[[subsystem.namespace]]\nblock_size = 4096\nnull = 6144\n",
        "t.toml:11:8: subsystem[0].namespace[1].null: size 6144 is not a positive multiple of the block size 4096; allowed: a positive multiple of 4096 bytes, e.g. \"1GiB\""),
    ("size_zero", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n[[subsystem.namespace]]\nnull = 0\n",
        "t.toml:6:8: subsystem[0].namespace[0].null: size 0 is not a positive multiple of the block size 512; allowed: a positive multiple of 512 bytes, e.g. \"1GiB\""),
    ("size_unit", "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.example:disk\"\n[[subsystem.namespace]]\nnull = \"1PB\"\n",
        "t.toml:6:8: subsystem[0].namespace[0].null: size \"1PB\" has an unknown unit \"pb\"; allowed: a whole number of bytes with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"1GiB\""),
    ("block_size", "@[[subsystem.namespace]]@block_size = 1024\n",
        "t.toml:9:14: subsystem[0].namespace[0].block_size: block size 1024 is not supported; allowed: 512 or 4096"),
    ("buffered_io_memory", "@[[subsystem.namespace]]@buffered_io = true\n",
        "t.toml:9:15: subsystem[0].namespace[0].buffered_io: buffered_io applies to path namespaces only; allowed: true with path, false (the default) with memory, null or rbd"),
    ("buffered_io_memory_false", "@[[subsystem.namespace]]@buffered_io = false\n",
        "accepted"),
    ("buffered_io_type", "@[[subsystem.namespace]]@buffered_io = 1\n",
        "t.toml:9:15: subsystem[0].namespace[0].buffered_io: invalid type: integer `1`, expected a boolean"),
    ("rbd_and_memory", "@[[subsystem.namespace]]@rbd = \"rbd/disk1\"\n",
        "t.toml:9:7: subsystem[0].namespace[0].rbd: the namespace has both memory and rbd; allowed: exactly one of path = \"/dev/...\" (block device or file), memory = \"SIZE\", null = \"SIZE\" or rbd = \"POOL/IMAGE\" (Ceph RBD image)"),
    ("path_and_rbd", "@@[[subsystem.namespace]]\npath = \"/dev/sda\"\nrbd = \"rbd/disk1\"\n",
        "t.toml:11:7: subsystem[0].namespace[1].rbd: the namespace has both path and rbd; allowed: exactly one of path = \"/dev/...\" (block device or file), memory = \"SIZE\", null = \"SIZE\" or rbd = \"POOL/IMAGE\" (Ceph RBD image)"),
    ("rbd", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\n", "accepted"),
    ("rbd_namespace", "@@[[subsystem.namespace]]\nrbd = \"rbd/nvmf/disk1\"\nceph_id = \"client.nvmf\"\n", "accepted"),
    ("rbd_type", "@@[[subsystem.namespace]]\nrbd = 1\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: invalid type: integer `1`, expected a string"),
    ("rbd_empty", "@@[[subsystem.namespace]]\nrbd = \"\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: the image name is empty; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_snapshot", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1@gold\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: \"rbd/disk1@gold\" names a snapshot: snapshots are read-only; export the image itself; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_no_pool", "@@[[subsystem.namespace]]\nrbd = \"disk1\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: image name \"disk1\" has no pool; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_four_parts", "@@[[subsystem.namespace]]\nrbd = \"rbd/a/b/disk1\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: image name \"rbd/a/b/disk1\" has 4 parts, at most 3; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_empty_pool", "@@[[subsystem.namespace]]\nrbd = \"/disk1\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: the pool of \"/disk1\" is empty; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_empty_namespace", "@@[[subsystem.namespace]]\nrbd = \"rbd//disk1\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: the RADOS namespace of \"rbd//disk1\" is empty; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_empty_image", "@@[[subsystem.namespace]]\nrbd = \"rbd/\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: the image of \"rbd/\" is empty; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_whitespace", "@@[[subsystem.namespace]]\nrbd = \"rbd/my disk\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: image name \"rbd/my disk\" contains ' '; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("rbd_control", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk\\u0001\"\n",
        "t.toml:10:7: subsystem[0].namespace[1].rbd: image name \"rbd/disk\\u{1}\" contains '\\u{1}'; allowed: POOL/IMAGE or POOL/NAMESPACE/IMAGE as the rbd command names an image (not a snapshot), each part 1 to 255 bytes without whitespace or control characters, e.g. \"rbd/disk1\""),
    ("ceph_conf_without_rbd", "@[[subsystem.namespace]]@ceph_conf = \"/etc/ceph/ceph.conf\"\n",
        "t.toml:9:13: subsystem[0].namespace[0].ceph_conf: ceph_conf applies to rbd namespaces only; allowed: ceph_conf and ceph_id with rbd = \"POOL/IMAGE\" only"),
    ("ceph_id_without_rbd", "@@[[subsystem.namespace]]\npath = \"/dev/sda\"\nceph_id = \"admin\"\n",
        "t.toml:11:11: subsystem[0].namespace[1].ceph_id: ceph_id applies to rbd namespaces only; allowed: ceph_conf and ceph_id with rbd = \"POOL/IMAGE\" only"),
    ("ceph_conf_empty", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\nceph_conf = \"\"\n",
        "t.toml:11:13: subsystem[0].namespace[1].ceph_conf: the path is empty; allowed: a Ceph configuration file path, e.g. \"/etc/ceph/ceph.conf\""),
    ("ceph_id_prefix_only", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\nceph_id = \"client.\"\n",
        "t.toml:11:11: subsystem[0].namespace[1].ceph_id: cephx user \"client.\" is empty; allowed: a cephx user such as \"admin\" or \"client.admin\": 1 to 255 bytes without whitespace or control characters"),
    ("ceph_id_empty", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\nceph_id = \"\"\n",
        "t.toml:11:11: subsystem[0].namespace[1].ceph_id: cephx user \"\" is empty; allowed: a cephx user such as \"admin\" or \"client.admin\": 1 to 255 bytes without whitespace or control characters"),
    ("ceph_id_whitespace", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\nceph_id = \"nvmf target\"\n",
        "t.toml:11:11: subsystem[0].namespace[1].ceph_id: cephx user \"nvmf target\" contains ' '; allowed: a cephx user such as \"admin\" or \"client.admin\": 1 to 255 bytes without whitespace or control characters"),
    ("buffered_io_rbd", "@@[[subsystem.namespace]]\nrbd = \"rbd/disk1\"\nbuffered_io = true\n",
        "t.toml:11:15: subsystem[0].namespace[1].buffered_io: buffered_io applies to path namespaces only; allowed: true with path, false (the default) with memory, null or rbd"),
    ("uuid", "@[[subsystem.namespace]]@uuid = \"not-a-uuid\"\n",
        "t.toml:9:8: subsystem[0].namespace[0].uuid: \"not-a-uuid\" is not a UUID; allowed: a UUID such as \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", not all zero"),
    ("nguid", "@[[subsystem.namespace]]@nguid = \"00\"\n",
        "t.toml:9:9: subsystem[0].namespace[0].nguid: NGUID \"00\" is not 32 hexadecimal digits; allowed: 32 hexadecimal digits, not all zero"),
    ("eui64", "@[[subsystem.namespace]]@eui64 = \"0000000000000000\"\n",
        "t.toml:9:9: subsystem[0].namespace[0].eui64: an all-zero EUI-64 means \"no EUI-64\" to a host; allowed: 16 hexadecimal digits, not all zero"),
    ("uuid_duplicate", "@[[subsystem.namespace]]@uuid = \"f81d4fae-7dec-11d0-a765-00a0c91e6bf6\"\n[[subsystem.namespace]]\nnull = \"1G\"\nuuid = \"F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6\"\n",
        "t.toml:12:8: subsystem[0].namespace[1].uuid: UUID f81d4fae-7dec-11d0-a765-00a0c91e6bf6 is also subsystem[0].namespace[0].uuid's; allowed: a UUID unique in the target (omit it to derive one)"),
    ("threads", "[reactors]\nthreads = 0\n@@",
        "t.toml:2:11: reactors.threads: thread count 0 is out of range; allowed: 1..=1024"),
    ("threads_vs_cpus", "[reactors]\nthreads = 3\ncpus = [0, 1]\n@@",
        "t.toml:2:11: reactors.threads: 3 threads but 2 CPUs in cpus; allowed: as many threads as CPUs listed (or omit threads)"),
    ("cpu_range", "[reactors]\ncpus = [0, 4096]\n@@",
        "t.toml:2:12: reactors.cpus[1]: CPU 4096 is out of range; allowed: CPU numbers 0..=1023, each once"),
    ("cpu_twice", "[reactors]\ncpus = [1, 1]\n@@",
        "t.toml:2:12: reactors.cpus[1]: CPU 1 is listed twice; allowed: CPU numbers 0..=1023, each once"),
    ("cpus_empty", "[reactors]\ncpus = []\n@@",
        "t.toml:2:8: reactors.cpus: the CPU list is empty; allowed: one or more CPU numbers, or no cpus key"),
    ("metrics", "[metrics]\nlisten = \"9420\"\n@@",
        "t.toml:2:10: metrics.listen: \"9420\" is not an address and port; allowed: ADDRESS:PORT such as \"127.0.0.1:9420\" or \"[::1]:9420\", port 1..=65535"),
    ("metrics_port_zero", "[metrics]\nlisten = \"127.0.0.1:0\"\n@@",
        "t.toml:2:10: metrics.listen: \"127.0.0.1:0\" is not an address and port; allowed: ADDRESS:PORT such as \"127.0.0.1:9420\" or \"[::1]:9420\", port 1..=65535"),
    ("log_level", "[logging]\nlevel = \"verbose\"\n@@",
        "t.toml:2:9: logging.level: log directive \"verbose\" is not understood; allowed: comma-separated LEVEL or TARGET=LEVEL directives, LEVEL one of trace, debug, info, warn, error, off; TARGET a Rust module path such as nvmf_target::tcp"),
    ("log_directive", "[logging]\nlevel = \"info,nvmf target=debug\"\n@@",
        "t.toml:2:9: logging.level: log directive \"nvmf target=debug\" is not understood; allowed: comma-separated LEVEL or TARGET=LEVEL directives, LEVEL one of trace, debug, info, warn, error, off; TARGET a Rust module path such as nvmf_target::tcp"),
    ("ana_state", "@[[listener]]@ana_state = \"standby\"\n",
        "t.toml:3:13: listener[0].ana_state: ANA state \"standby\" is unknown; allowed: optimized, non-optimized, inaccessible, persistent-loss or change"),
    ("ana_group_states_range", "@[[listener]]@ana_group_states = { 2 = \"optimized\", 129 = \"optimized\" }\n",
        "t.toml:3:45: listener[0].ana_group_states.129: ANA group 129 is out of range; allowed: ANA group IDs 1..=128 as keys, each once, e.g. ana_group_states = { 2 = \"non-optimized\" }"),
    ("ana_group_states_zero", "@[[listener]]@ana_group_states = { 0 = \"optimized\" }\n",
        "t.toml:3:26: listener[0].ana_group_states.0: ANA group 0 is out of range; allowed: ANA group IDs 1..=128 as keys, each once, e.g. ana_group_states = { 2 = \"non-optimized\" }"),
    ("ana_group_states_id", "@[[listener]]@ana_group_states = { group2 = \"optimized\" }\n",
        "t.toml:3:31: listener[0].ana_group_states.group2: \"group2\" is not an ANA group ID; allowed: ANA group IDs 1..=128 as keys, each once, e.g. ana_group_states = { 2 = \"non-optimized\" }"),
    ("ana_group_states_twice", "@[[listener]]@ana_group_states = { 2 = \"optimized\", \"02\" = \"inaccessible\" }\n",
        "t.toml:3:46: listener[0].ana_group_states.02: ANA group 2 is named twice (\"2\" and \"02\"); allowed: ANA group IDs 1..=128 as keys, each once, e.g. ana_group_states = { 2 = \"non-optimized\" }"),
    ("ana_group_states_state", "@[[listener]]@ana_group_states = { 3 = \"standby\" }\n",
        "t.toml:3:26: listener[0].ana_group_states.3: ANA state \"standby\" is unknown; allowed: optimized, non-optimized, inaccessible, persistent-loss or change"),
    ("ana_group_states_type", "@[[listener]]@ana_group_states = \"2:optimized\"\n",
        "t.toml:3:20: listener[0].ana_group_states: invalid type: string \"2:optimized\", expected a table"),
    ("ana_group_states_value_type", "@[[listener]]@ana_group_states = { 2 = 1 }\n",
        "t.toml:3:26: listener[0].ana_group_states.2: invalid type: integer `1`, expected a string"),
    ("ana_group", "@[[subsystem.namespace]]@ana_group = 129\n",
        "t.toml:9:13: subsystem[0].namespace[0].ana_group: ANA group 129 is out of range; allowed: 1..=128"),
    ("ana_group_zero", "@[[subsystem.namespace]]@ana_group = 0\n",
        "t.toml:9:13: subsystem[0].namespace[0].ana_group: ANA group 0 is out of range; allowed: 1..=128"),
    ("log_format", "[logging]\nformat = \"xml\"\n@@",
        "t.toml:2:10: logging.format: unknown variant `xml`, expected `text` or `json`"),
];

/// Expand a case: `@HEADER@EXTRA` appends EXTRA to BASE's table HEADER; a text ending in `@@` is prepended to
/// BASE; `@@TEXT` is appended to BASE.
fn expand(text: &str) -> String {
    if let Some(rest) = text.strip_prefix("@@") {
        format!("{BASE}{rest}")
    } else if let Some(prefix) = text.strip_suffix("@@") {
        format!("{prefix}{BASE}")
    } else if let Some(rest) = text.strip_prefix('@') {
        let mut out = BASE.to_owned();
        let mut rest = rest;
        loop {
            let (header, after) = rest.split_once('@').expect("@HEADER@EXTRA");
            let (extra, next) = after.split_once("\n@").map_or((after, None), |(e, n)| (e, Some(n)));
            out = with_text(&out, header, &format!("{}\n", extra.trim_end_matches('\n')));
            match next {
                Some(next) => rest = next,
                None => return out,
            }
        }
    } else {
        text.to_owned()
    }
}

fn with_text(base: &str, header: &str, extra: &str) -> String {
    let body = base.find(&format!("{header}\n")).expect("header in BASE") + header.len() + 1;
    // The end of that table's body: the next blank line or header, or the end.
    let end = base[body..].find("\n\n").map_or(base.len(), |at| body + at + 1);
    let end = base[body..end].find("\n[").map_or(end, |at| body + at + 1);
    format!("{}{extra}{}", &base[..end], &base[end..])
}

#[test]
fn every_error_message() {
    let mut failures = Vec::new();
    for &(name, text, expected) in CASES {
        let text = expand(text);
        let actual = match load(&text) {
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
    let config = load(BASE).unwrap();
    assert_eq!(
        config.limits,
        ControllerLimits {
            mdts: 1 << 20,
            max_queue_size: 128,
            max_io_queues: 128,
            keep_alive_granularity_ms: 100,
            keep_alive_max_ms: 3_600_000,
            keep_alive_min_ms: 0,
            connect_timeout_ms: 10_000,
            transfer_timeout_ms: 30_000,
            queue_buffer_percent: 50,
            anonymous_buffer_percent: 25,
            max_connections_per_address: 1024,
            address_prefix_v4: 32,
            address_prefix_v6: 64,
            max_controllers_per_host: 64,
            max_registrants: 1024,
            dhchap_dhgroups: vec![DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe3072, DhGroup::Ffdhe4096],
            auth_threads: 2,
            auth_queue_depth: 64,
            tls_threads: 2,
            tls_queue_depth: 64,
            auth_attempts_per_second: 256,
            tcp_keepalive_ms: 60_000,
            tcp_send_backlog: 8 << 20,
            ceph_mon_timeout_ms: 30_000,
            ceph_osd_timeout_ms: 30_000,
            state_dir: "/var/lib/nvmf-target".into(),
        }
    );
    assert_eq!((config.limits.kas(), config.limits.mqes()), (1, 127));
    let listener = &config.listeners[0];
    assert_eq!(listener.to_string(), "tcp://127.0.0.1:4420");
    assert_eq!(listener.max_queue_size, 128);
    assert_eq!(listener.in_capsule_data_size, 16384);
    assert_eq!(listener.max_connections, 4096);
    assert_eq!(listener.ana_state, AnaState::Optimized);
    assert_eq!(
        listener.transport,
        ListenerTransport::Tcp(TcpOptions { header_digest: true, data_digest: true, tls: TlsMode::None })
    );
    let subsystem = &config.subsystems[0];
    assert_eq!(subsystem.serial, crate::ids::derive_serial("nqn.2024-01.io.example:disk"));
    assert_eq!(subsystem.model, "nvmf-rs");
    assert!(subsystem.allow_any_host && subsystem.hosts.is_empty());
    assert_eq!((subsystem.cntlid_min, subsystem.cntlid_max, subsystem.max_namespaces), (1, 0xFFEF, 1024));
    let namespace = &subsystem.namespaces[0];
    assert_eq!(namespace.nsid, 1);
    assert_eq!(namespace.backend, NamespaceBackend::Memory { size: 1 << 30 });
    assert_eq!(namespace.block_size, 512);
    assert!(!namespace.buffered_io);
    assert_eq!(namespace.uuid, crate::ids::derive_uuid(&subsystem.nqn, 1));
    assert_eq!(namespace.nguid, crate::ids::derive_nguid(&subsystem.nqn, 1));
    assert_eq!(namespace.eui64, crate::ids::derive_eui64(&subsystem.nqn, 1));
    assert_eq!(namespace.ana_group, 1);
    assert!(config.discovery.enabled);
    assert_eq!(
        config.reactors,
        ReactorConfig {
            threads: available_cpus(),
            cpus: vec![],
            discard_queue_depth: 64,
            poll: PollMode::Adaptive,
            poll_window_us: 200,
            socket_io: SocketIoMode::Epoll,
            send_zero_copy_bytes: 32768,
            placement: QueuePlacement::RoundRobin,
        }
    );
    assert_eq!(config.metrics.listen, None);
    assert_eq!(config.logging, LoggingConfig { level: "info".into(), format: LogFormat::Text });
    // Loading twice gives the same identifiers: nothing is random.
    assert_eq!(load(BASE).unwrap(), config);
}

#[test]
fn nsids_count_on_from_the_previous_namespace() {
    let text = format!("{BASE}nsid = 5\n[[subsystem.namespace]]\nnull = \"1TiB\"\n[[subsystem.namespace]]\nnsid = 2\npath = \"/dev/null\"\n");
    let config = load(&text).unwrap();
    let nsids: Vec<u32> = config.subsystems[0].namespaces.iter().map(|ns| ns.nsid).collect();
    assert_eq!(nsids, [5, 6, 2]);
    let ids: Vec<_> = config.subsystems[0].namespaces.iter().map(|ns| ns.uuid).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
}

#[test]
fn hosts_rdma_pinning_and_explicit_values() {
    let text = r#"
[target]
mdts = 131072
max_queue_size = 1024
keep_alive_granularity_ms = 1000

[reactors]
cpus = [2, 3, 5]

[metrics]
listen = "[::1]:9420"

[logging]
level = "warn,nvmf_target::tcp=debug"
format = "json"

[[listener]]
transport = "rdma"
address = "::"
port = 8009
in_capsule_data_size = 0
[listener.rdma]
send_with_invalidate = false
srq = true

[[listener]]
address = "0.0.0.0"
max_queue_size = 64
[listener.tcp]
data_digest = false

[[subsystem]]
nqn = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
serial = "SN 1"
model = "Model ~ X"
hosts = ["nqn.2024-01.io.example:h1", "nqn.2024-01.io.example:h2"]
cntlid_min = 10
cntlid_max = 10
max_namespaces = 1

[[subsystem.namespace]]
nsid = 1
null = "1TB"
block_size = 4096
uuid = "{f81d4fae-7dec-11d0-a765-00a0c91e6bf6}"
nguid = "00112233445566778899aabbccddeeff"
eui64 = "0123456789ABCDEF"
"#;
    let config = load(text).unwrap();
    assert_eq!(config.limits.mdts, 128 << 10);
    assert_eq!(config.limits.kas(), 10);
    assert_eq!(config.limits.keep_alive_max_ms, 3_600_000);
    assert_eq!(
        config.reactors,
        ReactorConfig {
            threads: 3,
            cpus: vec![2, 3, 5],
            discard_queue_depth: 64,
            poll: PollMode::Adaptive,
            poll_window_us: 200,
            socket_io: SocketIoMode::Epoll,
            send_zero_copy_bytes: 32768,
            placement: QueuePlacement::RoundRobin,
        }
    );
    assert_eq!(config.metrics.listen, Some("[::1]:9420".parse().unwrap()));
    assert_eq!(config.logging.format, LogFormat::Json);
    assert_eq!(config.listeners[0].to_string(), "rdma://[::]:8009");
    assert_eq!(
        config.listeners[0].transport,
        ListenerTransport::Rdma(RdmaOptions { send_with_invalidate: false, srq: true })
    );
    assert_eq!(config.listeners[0].max_queue_size, 1024);
    assert_eq!(config.listeners[0].in_capsule_data_size, 0);
    assert_eq!(config.listeners[1].max_queue_size, 64);
    assert_eq!(
        config.listeners[1].transport,
        ListenerTransport::Tcp(TcpOptions { header_digest: true, data_digest: false, tls: TlsMode::None })
    );
    let subsystem = &config.subsystems[0];
    assert!(!subsystem.allow_any_host);
    assert_eq!(subsystem.hosts.len(), 2);
    assert_eq!((subsystem.serial.as_str(), subsystem.model.as_str()), ("SN 1", "Model ~ X"));
    assert_eq!((subsystem.cntlid_min, subsystem.cntlid_max), (10, 10));
    let namespace = &subsystem.namespaces[0];
    assert_eq!(namespace.backend, NamespaceBackend::Null { size: 1_000_000_000_000 });
    assert_eq!(namespace.block_size, 4096);
    assert_eq!(namespace.uuid.to_string(), "f81d4fae-7dec-11d0-a765-00a0c91e6bf6");
    assert_eq!(namespace.nguid.as_bytes()[15], 0xff);
    assert_eq!(namespace.eui64.to_string(), "0123456789abcdef");
}

#[test]
fn display_reads_back_as_the_same_configuration() {
    for text in [BASE.to_owned(), format!("[reactors]\ncpus = [1]\n[metrics]\nlisten = \"127.0.0.1:9420\"\n{BASE}")] {
        let config = load(&text).unwrap();
        let printed = config.to_string();
        assert!(printed.contains("[[subsystem.namespace]]\nnsid = 1\nmemory = \"1GiB\""), "{printed}");
        assert_eq!(load(&printed).unwrap(), config, "{printed}");
    }
    let rdma = load("[[listener]]\ntransport = \"rdma\"\naddress = \"::1\"\n").unwrap();
    assert!(!rdma.to_string().contains("[listener.tcp]"));
    assert!(rdma.to_string().contains("[listener.rdma]\nsend_with_invalidate = true\nsrq = false"), "{rdma}");
    assert_eq!(load(&rdma.to_string()).unwrap(), rdma);
}

#[test]
fn from_file_names_the_file_and_resolves_relative_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target.toml");
    std::fs::write(&path, BASE.replace("memory = \"1GiB\"", "path = \"disk.img\"")).unwrap();
    let config = TargetConfig::from_file(&path).unwrap();
    assert_eq!(config.subsystems[0].namespaces[0].backend, NamespaceBackend::Path(dir.path().join("disk.img")));

    std::fs::write(&path, format!("{BASE}block_size = 520\n")).unwrap();
    let message = TargetConfig::from_file(&path).unwrap_err().to_string();
    assert_eq!(
        message,
        format!(
            "{}:9:14: subsystem[0].namespace[0].block_size: block size 520 is not supported; allowed: 512 or 4096",
            path.display()
        )
    );

    let missing = dir.path().join("missing.toml");
    let error = TargetConfig::from_file(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    assert!(error.to_string().starts_with(&format!("{}: cannot read the configuration file: ", missing.display())));
    assert!(error.location().is_none());
}

#[test]
fn buffered_io_path_namespace_reads_back_from_display() {
    let config = load(&BASE.replace("memory = \"1GiB\"", "path = \"disk.img\"\nbuffered_io = true")).unwrap();
    assert!(config.subsystems[0].namespaces[0].buffered_io);
    let printed = config.to_string();
    assert!(printed.contains("buffered_io = true"), "{printed}");
    assert_eq!(load(&printed).unwrap(), config, "{printed}");
    // A path namespace prints its default; memory and null, where it can only be false, leave it out.
    let direct = load(&BASE.replace("memory = \"1GiB\"", "path = \"disk.img\"")).unwrap();
    assert!(!direct.subsystems[0].namespaces[0].buffered_io);
    assert!(direct.to_string().contains("buffered_io = false"), "{direct}");
    assert!(!load(BASE).unwrap().to_string().contains("buffered_io"));
}

#[test]
fn from_str_keeps_relative_paths() {
    let config = load(&BASE.replace("memory = \"1GiB\"", "path = \"disk.img\"")).unwrap();
    assert_eq!(config.subsystems[0].namespaces[0].backend, NamespaceBackend::Path("disk.img".into()));
}

#[test]
fn every_rejection_has_a_line() {
    for &(name, text, _) in CASES {
        if let Err(error) = load(&expand(text)) {
            let location = error.location().unwrap_or_else(|| panic!("{name}: no location"));
            assert!(location.line >= 1 && location.column >= 1, "{name}");
        }
    }
}

#[test]
fn datetime_values_are_type_errors_with_a_key() {
    let text = expand("@[[listener]]@port = 1979-05-27\n");
    assert_eq!(
        load(&text).unwrap_err().to_string(),
        "t.toml:3:8: listener[0].port: invalid type: date-time, expected an integer"
    );
    let text = expand("@[[listener]]@port = { number = 4420 }\n");
    assert_eq!(
        load(&text).unwrap_err().to_string(),
        "t.toml:3:8: listener[0].port: invalid type: table, expected an integer"
    );
    // A date-time elsewhere does not stop the index from placing a later error.
    let text = expand("@[[listener]]@tcp = { header_digest = 1979-05-27T07:32:00Z }\n");
    assert_eq!(
        load(&text).unwrap_err().to_string(),
        "t.toml:3:25: listener[0].tcp.header_digest: invalid type: date-time, expected a boolean"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any edit of a valid file loads or fails with a located error; nothing panics.
    #[test]
    fn edited_files_never_panic(at in 0usize..BASE.len(), insert in "[\\[\\]=\"a-z0-9.,\n :{}-]{0,12}") {
        let mut text = BASE.to_owned();
        let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.insert_str(at, &insert);
        if let Err(error) = load(&text) {
            let location = error.location().expect("file errors are located");
            proptest::prop_assert!(location.line <= text.lines().count() + 1);
        }
    }
}

#[test]
fn names_linux_nvmet_accepts_are_accepted() {
    let text = "[[listener]]\naddress = \"::\"\n[[subsystem]]\nnqn = \"testnqn\"\nhosts = [\"host1\"]\n\
                [[subsystem]]\nnqn = \"storage-subsystem-1\"\n";
    let config = load(text).unwrap();
    assert_eq!(config.subsystems[0].nqn, "testnqn");
    assert_eq!(config.subsystems[0].hosts, ["host1"]);
    assert_eq!(config.subsystems[1].nqn, "storage-subsystem-1");
}

#[test]
fn ana_states_and_groups_load_and_read_back() {
    let text = BASE
        .replace("address = \"127.0.0.1\"", "address = \"127.0.0.1\"\nana_state = \"non-optimized\"")
        .replace("memory = \"1GiB\"", "memory = \"1GiB\"\nana_group = 7");
    let config = load(&text).unwrap();
    assert_eq!(config.listeners[0].ana_state, AnaState::NonOptimized);
    assert!(config.listeners[0].ana_group_states.is_empty());
    assert_eq!(config.subsystems[0].namespaces[0].ana_group, 7);
    assert_eq!(load(&config.to_string()).unwrap(), config);
    assert!(!config.to_string().contains("ana_group_states"), "written only when set");
}

#[test]
fn ana_group_states_override_the_listeners_state() {
    // A gateway group's node A: group 1 optimized (the default), groups 2 and 10 not.
    let text = BASE.replace(
        "address = \"127.0.0.1\"",
        "address = \"127.0.0.1\"\nana_group_states = { \"2\" = \"non-optimized\", 10 = \"inaccessible\" }",
    );
    let config = load(&text).unwrap();
    let listener = &config.listeners[0];
    assert_eq!(listener.ana_state, AnaState::Optimized);
    let states: Vec<_> = listener.ana_group_states.iter().map(|(&g, &s)| (g, s)).collect();
    assert_eq!(states, [(2, AnaState::NonOptimized), (10, AnaState::Inaccessible)]);
    let by_group: Vec<_> = [1, 2, 3, 10, 128].into_iter().map(|g| listener.group_ana_state(g)).collect();
    use AnaState::*;
    assert_eq!(by_group, [Optimized, NonOptimized, Optimized, Inaccessible, Optimized]);
    // Printed (in group order) and read back as itself.
    let printed = config.to_string();
    assert!(
        printed.contains("[listener.ana_group_states]\n2 = \"non-optimized\"\n10 = \"inaccessible\"\n"),
        "{printed}"
    );
    assert_eq!(load(&printed).unwrap(), config);

    // A sub-table says the same; every group named with ana_state as the default.
    let table = format!(
        "{BASE}\n[[listener]]\naddress = \"127.0.0.2\"\nana_state = \"non-optimized\"\n\
         [listener.ana_group_states]\n1 = \"optimized\"\n128 = \"change\"\n"
    );
    let config = load(&table).unwrap();
    let second = &config.listeners[1];
    assert_eq!(second.group_ana_state(1), Optimized);
    assert_eq!(second.group_ana_state(2), NonOptimized);
    assert_eq!(second.group_ana_state(128), Change);
    assert_eq!(load(&config.to_string()).unwrap(), config);
    // Errors in the sub-table form name the line of the entry.
    let bad = table.replace("128 = \"change\"", "128 = \"standby\"");
    assert_eq!(
        load(&bad).unwrap_err().to_string(),
        "t.toml:15:7: listener[1].ana_group_states.128: ANA state \"standby\" is unknown; allowed: optimized, \
         non-optimized, inaccessible, persistent-loss or change"
    );
}

const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

#[test]
fn subsystem_hosts_with_keys() {
    let text = format!(
        "{BASE}[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ndhchap_key = \"{KEY}\"\ndhchap_ctrl_key = \"{KEY}\"\n\
         dhchap_hashes = [\"hmac(sha512)\", \"sha256\"]\ndhchap_dhgroups = [\"ffdhe2048\", \"null\"]\n"
    );
    let config = load(&text).unwrap();
    let s = &config.subsystems[0];
    assert!(!s.allow_any_host, "the hosts with keys are the allowed ones");
    assert!(!s.auth_required);
    assert_eq!(s.allowed_hosts(), ["nqn.2024-01.io.example:h1"]);
    let h = &s.host_keys[0];
    assert_eq!(h.dhchap_key.as_ref().unwrap().secret.len(), 32);
    assert!(h.dhchap_ctrl_key.is_some());
    use nvmf_common::fabrics::auth::{dh::DhGroup, hash::HashFunction};
    assert_eq!(h.dhchap_hashes, [HashFunction::Sha512, HashFunction::Sha256]);
    assert_eq!(h.dhchap_dhgroups, [DhGroup::Ffdhe2048, DhGroup::Null]);
    // The target-wide default for hosts that name no group, printed back as it reads.
    let wide = load(&format!("[target]\ndhchap_dhgroups = [\"ffdhe8192\"]\n{text}")).unwrap();
    assert_eq!(wide.limits.dhchap_dhgroups, [DhGroup::Ffdhe8192]);
    assert_eq!(load(&wide.to_string()).unwrap(), wide);
    assert!(!format!("{config:?}").contains("AAECAwQF"), "Debug prints no key");
    let printed = config.to_string();
    assert!(printed.contains("dhchap_hashes = [\"hmac(sha512)\", \"hmac(sha256)\"]"), "{printed}");
    assert_eq!(load(&printed).unwrap(), config);
    // What --check prints: the same, with the inline keys redacted.
    let redacted = config.to_string_redacted();
    assert!(!redacted.contains("AAECAwQF") && redacted.contains("dhchap_key = \"<redacted>\""), "{redacted}");
    assert!(redacted.contains("dhchap_ctrl_key = \"<redacted>\""), "{redacted}");
    assert_eq!(redacted.replace("<redacted>", KEY), printed);
    // Any host may connect, and this one must authenticate; auth_required refuses hosts without keys.
    let any = load(&text.replace(":disk\"\n", ":disk\"\nallow_any_host = true\nauth_required = true\n"));
    let any = any.unwrap();
    assert!(any.subsystems[0].allow_any_host && any.subsystems[0].auth_required);
}

#[test]
fn subsystem_host_key_errors() {
    let entry = |body: &str| load(&format!("{BASE}[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\n{body}"));
    let e = |body: &str| entry(body).unwrap_err().to_string();
    assert!(e("").contains("subsystem[0].host[0].dhchap_key: the host has no key"), "{}", e(""));
    let bad = e("dhchap_key = \"DHHC-1:00:AAAA:\"\n");
    assert!(
        bad.contains("subsystem[0].host[0].dhchap_key: the key field holds 3 bytes") && !bad.contains("AAAA"),
        "{bad}"
    );
    let both = e(&format!("dhchap_key = \"{KEY}\"\ndhchap_key_file = \"k\"\n"));
    assert!(both.contains("both dhchap_key and dhchap_key_file are set"), "{both}");
    let hash = e(&format!("dhchap_key = \"{KEY}\"\ndhchap_hashes = [\"md5\"]\n"));
    assert!(hash.contains("dhchap_hashes[0]: \"md5\" is not known; allowed: sha256, sha384, sha512"), "{hash}");
    let group = e(&format!("dhchap_key = \"{KEY}\"\ndhchap_dhgroups = [\"null\", \"null\"]\n"));
    assert!(group.contains("dhchap_dhgroups[1]: \"null\" is listed twice"), "{group}");
    let twice = load(&format!(
        "{BASE}hosts = [\"nqn.2024-01.io.example:h1\"]\n[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ndhchap_key = \"{KEY}\"\n"
    ));
    // `hosts` after the namespace table belongs to it: place it in the subsystem instead.
    assert!(twice.is_err());
    let twice = load(&format!(
        "[[listener]]\naddress = \"::1\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.example:d\"\nhosts = [\"nqn.2024-01.io.example:h1\"]\n\
         [[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ndhchap_key = \"{KEY}\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(twice.contains("host \"nqn.2024-01.io.example:h1\" is also hosts[0]"), "{twice}");
    let id = e(&format!("dhchap_key = \"{KEY}\"\nhostid = \"not-a-uuid\"\n"));
    assert!(id.contains("subsystem[0].host[0].hostid: \"not-a-uuid\" is not a UUID"), "{id}");
}

#[test]
fn a_host_id_belongs_to_one_host() {
    const ID: &str = "2b3c4d5e-6f70-4812-9a3b-4c5d6e7f8091";
    let host = |n: u8| {
        format!(
            "[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h{n}\"\ndhchap_key = \"{KEY}\"\nhostid = \"{ID}\"\n"
        )
    };
    let one = load(&format!("{BASE}{}", host(1))).unwrap();
    assert_eq!(one.subsystems[0].host_keys[0].hostid.unwrap().to_string(), ID);
    assert_eq!(load(&one.to_string()).unwrap(), one);
    let two = load(&format!("{BASE}{}{}", host(1), host(2))).unwrap_err().to_string();
    assert!(two.contains(&format!("subsystem[0].host[1].hostid: host ID {ID} is also host[0]'s")), "{two}");
}

#[test]
fn key_files_must_be_private_and_print_as_their_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("h1.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = dir.path().join("target.toml");
    std::fs::write(
        &path,
        format!("{BASE}[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ndhchap_key_file = \"h1.key\"\n"),
    )
    .unwrap();
    let e = TargetConfig::from_file(&path).unwrap_err().to_string();
    assert!(
        e.contains("has mode 0644, not its owner's alone (0600 or 0400): chmod 600 it; allowed: a file only its owner"),
        "{e}"
    );
    // Writable by others (or executable) is no better than readable.
    for mode in [0o622, 0o700] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = TargetConfig::from_file(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("has mode {mode:04o}, not its owner's alone")), "{e}");
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    TargetConfig::from_file(&path).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = TargetConfig::from_file(&path).unwrap();
    assert_eq!(config.subsystems[0].host_keys[0].dhchap_key.as_ref().unwrap().file.as_deref(), Some(key.as_path()));
    let printed = config.to_string();
    assert!(printed.contains(&format!("dhchap_key_file = \"{}\"", key.display())) && !printed.contains("AAEC"));
}

#[test]
fn discovery_auth_required_needs_a_host_with_a_key() {
    let e = load(&format!("[discovery]\nauth_required = true\n{BASE}")).unwrap_err().to_string();
    assert!(e.contains("discovery.auth_required: the discovery controller requires authentication but no host"), "{e}");
    let text = format!(
        "[discovery]\nauth_required = true\n{BASE}[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ndhchap_key = \"{KEY}\"\n"
    );
    let config = load(&text).unwrap();
    assert!(config.discovery.auth_required);
    assert_eq!(load(&config.to_string()).unwrap(), config);
}

fn rbd_backend(config: &TargetConfig) -> &RbdImage {
    match &config.subsystems[0].namespaces[0].backend {
        NamespaceBackend::Rbd(image) => image,
        other => panic!("not an rbd namespace: {other:?}"),
    }
}

#[test]
fn rbd_namespace_defaults_and_reads_back() {
    let config = load(&BASE.replace("memory = \"1GiB\"", "rbd = \"rbd/disk1\"")).unwrap();
    let image = rbd_backend(&config);
    let expected = RbdImage {
        pool: "rbd".to_owned(),
        rados_namespace: String::new(),
        image: "disk1".to_owned(),
        ceph_conf: PathBuf::from(DEFAULT_CEPH_CONF),
        ceph_id: DEFAULT_CEPH_ID.to_owned(),
    };
    assert_eq!(*image, expected);
    assert_eq!(image.to_string(), "rbd/disk1");
    assert!(!config.subsystems[0].namespaces[0].buffered_io);
    // The effective configuration writes the Ceph defaults out, and no buffered_io.
    let printed = config.to_string();
    assert!(
        printed.contains("rbd = \"rbd/disk1\"\nceph_conf = \"/etc/ceph/ceph.conf\"\nceph_id = \"admin\"\n"),
        "{printed}"
    );
    assert!(!printed.contains("buffered_io"), "{printed}");
    assert_eq!(load(&printed).unwrap(), config, "{printed}");
    // Writing the defaults out is the same configuration; so is the user with its `client.` prefix.
    let explicit = "rbd = \"rbd/disk1\"\nceph_conf = \"/etc/ceph/ceph.conf\"\nceph_id = \"client.admin\"";
    assert_eq!(load(&BASE.replace("memory = \"1GiB\"", explicit)).unwrap(), config);
}

#[test]
fn rbd_namespace_in_a_rados_namespace_with_its_own_user() {
    let text = "rbd = \"ssd/tenant-a/vm.disk_1\"\nceph_conf = \"/etc/ceph/lab.conf\"\nceph_id = \"client.nvmf\"\n\
                block_size = 4096";
    let config = load(&BASE.replace("memory = \"1GiB\"", text)).unwrap();
    let image = rbd_backend(&config);
    assert_eq!(
        (image.pool.as_str(), image.rados_namespace.as_str(), image.image.as_str()),
        ("ssd", "tenant-a", "vm.disk_1")
    );
    assert_eq!((image.ceph_conf.as_path(), image.ceph_id.as_str()), (Path::new("/etc/ceph/lab.conf"), "nvmf"));
    assert_eq!(image.to_string(), "ssd/tenant-a/vm.disk_1");
    assert_eq!(config.subsystems[0].namespaces[0].block_size, 4096);
    let printed = config.to_string();
    assert!(printed.contains("rbd = \"ssd/tenant-a/vm.disk_1\"\n"), "{printed}");
    assert!(printed.contains("ceph_id = \"nvmf\"\n"), "{printed}");
    assert_eq!(load(&printed).unwrap(), config, "{printed}");
}

#[test]
fn rbd_names_are_bounded() {
    let long = "x".repeat(255);
    for name in [format!("{long}/i"), format!("p/{long}/i"), format!("p/{long}")] {
        assert!(parse_rbd_image_name(&name).is_ok(), "{name}");
    }
    for (name, what) in
        [(format!("{long}x/i"), "pool"), (format!("p/{long}x/i"), "RADOS namespace"), (format!("p/{long}x"), "image")]
    {
        let error = parse_rbd_image_name(&name).unwrap_err();
        assert_eq!(error.problem, format!("the {what} of {name:?} is 256 bytes long"));
        assert_eq!(error.allowed, RBD_IMAGE_ALLOWED);
    }
    assert_eq!(parse_ceph_id(&long).unwrap(), long);
    assert_eq!(parse_ceph_id(&format!("client.{long}")).unwrap(), long);
    let error = parse_ceph_id(&format!("{long}x")).unwrap_err();
    assert!(error.problem.ends_with("is 256 bytes long"), "{error}");
    assert_eq!(error.allowed, CEPH_ID_ALLOWED);
    // Only a leading `client.` is the type prefix.
    assert_eq!(parse_ceph_id("nvmf.client.x").unwrap(), "nvmf.client.x");
    assert_eq!(parse_ceph_id("client.client.x").unwrap(), "client.x");
    let error = parse_ceph_id("nvmf\u{7f}").unwrap_err();
    assert_eq!(error.problem, "cephx user \"nvmf\\u{7f}\" contains '\\u{7f}'");
    // A snapshot anywhere, even where a part would be empty, is named as a snapshot.
    let error = parse_rbd_image_name("rbd/@snap").unwrap_err();
    assert!(error.problem.ends_with("names a snapshot: snapshots are read-only; export the image itself"));
}

#[test]
fn rbd_ceph_conf_is_relative_to_the_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target.toml");
    let relative = "rbd = \"rbd/disk1\"\nceph_conf = \"ceph/ceph.conf\"";
    std::fs::write(&path, BASE.replace("memory = \"1GiB\"", relative)).unwrap();
    let config = TargetConfig::from_file(&path).unwrap();
    assert_eq!(rbd_backend(&config).ceph_conf, dir.path().join("ceph/ceph.conf"));
    // The printed configuration names the resolved file, wherever it is loaded from.
    assert_eq!(load(&config.to_string()).unwrap(), config);
    // An absolute one is kept; from a string a relative one stays as written.
    std::fs::write(&path, BASE.replace("memory = \"1GiB\"", "rbd = \"rbd/disk1\"\nceph_conf = \"/etc/c.conf\""))
        .unwrap();
    assert_eq!(rbd_backend(&TargetConfig::from_file(&path).unwrap()).ceph_conf, Path::new("/etc/c.conf"));
    let config = load(&BASE.replace("memory = \"1GiB\"", relative)).unwrap();
    assert_eq!(rbd_backend(&config).ceph_conf, Path::new("ceph/ceph.conf"));
}

const TLS_KEY: &str = "NVMeTLSkey-1:01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:";

#[test]
fn tls_listeners_and_host_psks() {
    let text = BASE.replace("address = \"127.0.0.1\"\n", "address = \"127.0.0.1\"\ntls = \"required\"\n")
        + &format!("[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ntls_key = \"{TLS_KEY}\"\n");
    let config = load(&text).unwrap();
    assert_eq!(
        config.listeners[0].transport,
        ListenerTransport::Tcp(TcpOptions { tls: TlsMode::Required, ..TcpOptions::default() })
    );
    let h = &config.subsystems[0].host_keys[0];
    assert!(h.dhchap_key.is_none() && !h.tls_key_compat);
    assert_eq!(h.tls_key.as_ref().unwrap().key.interchange().as_str(), TLS_KEY);
    // Printed back (keys redacted) and read again: the same configuration.
    let printed = config.to_string();
    assert!(printed.contains("tls = \"required\"") && printed.contains(TLS_KEY), "{printed}");
    assert!(!config.to_string_redacted().contains("QEFC"), "a redacted print shows no key");
    assert_eq!(load(&printed).unwrap(), config);

    let e = |text: &str| load(text).unwrap_err().to_string();
    let mode = e(&BASE.replace("address = \"127.0.0.1\"\n", "address = \"127.0.0.1\"\ntls = \"on\"\n"));
    assert!(mode.contains("listener[0].tls: TLS mode \"on\" is unknown; allowed: none, allowed or required"), "{mode}");
    let rdma = e(&BASE
        .replace("address = \"127.0.0.1\"\n", "address = \"127.0.0.1\"\ntransport = \"rdma\"\ntls = \"allowed\"\n"));
    assert!(rdma.contains("listener[0].tls: TLS on an rdma listener"), "{rdma}");
    let bad = e(&format!(
        "{BASE}[[subsystem.host]]\nnqn = \"nqn.2024-01.io.example:h1\"\ntls_key = \"NVMeTLSkey-1:01:AAAA:\"\n"
    ));
    assert!(bad.contains("subsystem[0].host[0].tls_key: ") && !bad.contains("AAAA"), "{bad}");
}
