//! NVMe/TCP over TLS 1.3 with pre-shared keys end to end on 127.0.0.1: our host against our target (in-process),
//! keys from the target's configuration. Where this machine has no kTLS (the `tls` module) the records go through
//! the user-space relay on both sides, otherwise through the kernel: either way data written reads back over every
//! queue, for both hashes and both identity versions, and a wrong key, another host's key, a key for another
//! subsystem and plaintext on a listener that requires TLS are refused. `tests/vm_target_tls.rs` runs the same
//! with kTLS in a guest, on both socket paths.

mod host_support;

use nvmf_common::fabrics::tls::{ConfiguredPsk, IdentityVersion, PskDerivation};
use nvmf_config::TargetConfig;
use nvmf_host::controller::TlsKeyOptions;
use nvmf_host::{Controller, HostError};
use nvmf_target::daemon::RunningTarget;

use host_support::{options, pattern, SUBNQN};

const H1: &str = "nqn.2024-01.io.nvmf-rs:tls-host-1";
const H2: &str = "nqn.2024-01.io.nvmf-rs:tls-host-2";
/// 32 bytes 0x40..0x5f, hash 01 (SHA-256).
const K1: &str = "NVMeTLSkey-1:01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:";
/// 48 bytes 0x40..0x6f, hash 02 (SHA-384).
const K2: &str = "NVMeTLSkey-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:";

/// Our target: a `tls = "required"` listener, then a plaintext one; H1 with K1, H2 with K2. Shut down on drop.
struct Target {
    running: Option<RunningTarget>,
    tls: std::net::SocketAddr,
    plaintext: std::net::SocketAddr,
}

impl Target {
    fn start() -> Target {
        let text = format!(
            "[reactors]\nthreads = 2\n[[listener]]\naddress = \"127.0.0.1\"\ntls = \"required\"\n\
             [[listener]]\naddress = \"127.0.0.1\"\nport = 4421\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
             [[subsystem.host]]\nnqn = \"{H1}\"\ntls_key = \"{K1}\"\n[[subsystem.host]]\nnqn = \"{H2}\"\n\
             tls_key = \"{K2}\"\n[[subsystem.namespace]]\nmemory = \"16MiB\"\n"
        );
        let mut config = TargetConfig::from_str(&text, "<test>").expect("test configuration is valid");
        for l in &mut config.listeners {
            l.address.set_port(0);
        }
        let running = nvmf_target::daemon::start(&config).expect("target starts");
        let (tls, plaintext) = (running.local_addrs()[0], running.local_addrs()[1]);
        Target { running: Some(running), tls, plaintext }
    }

    fn tls_result(&self, result: &str) -> u64 {
        let counters = self.running.as_ref().unwrap().tls_counters();
        counters.by_result().iter().find(|(r, _)| *r == result).map_or(0, |(_, n)| *n)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

fn connect(
    addr: std::net::SocketAddr,
    subnqn: &str,
    host: &str,
    key: Option<(&str, IdentityVersion)>,
) -> Result<Controller, HostError> {
    let mut o = options(2);
    o.hostnqn = host.to_owned();
    o.tls = key.map(|(text, identity_version)| TlsKeyOptions {
        key: text.parse::<ConfiguredPsk>().unwrap(),
        identity_version,
        derivation: PskDerivation::Rfc8446,
    });
    Controller::connect(addr, subnqn, o)
}

#[test]
fn data_crosses_tls_both_hashes_both_identity_versions() {
    let target = Target::start();
    let mut n = 0u8;
    for (host, key) in [(H1, K1), (H2, K2)] {
        for version in [IdentityVersion::V0, IdentityVersion::V1] {
            let ctrl = connect(target.tls, SUBNQN, host, Some((key, version)))
                .unwrap_or_else(|e| panic!("{host} {version:?}: {e}"));
            assert!(ctrl.info().io_queues >= 1);
            for len in [4096usize, 256 * 1024] {
                n += 1;
                let data = pattern(len, n);
                ctrl.write(1, 128, &data).expect("write over TLS");
                let mut back = vec![0u8; len];
                ctrl.read(1, 128, &mut back).expect("read over TLS");
                assert!(back == data, "{host} {version:?}: {len} bytes read back differ");
            }
        }
    }
    let secured = target.tls_result("secured") + target.tls_result("secured_user_space");
    assert!(secured >= 4 * 3, "an admin and two I/O queues per connect: {secured}");
}

#[test]
fn wrong_keys_and_plaintext_are_refused() {
    let target = Target::start();
    let refused = |what: &str, result: Result<Controller, HostError>| match result {
        Ok(_) => panic!("{what}: connected"),
        Err(e) => eprintln!("{what}: {e}"),
    };
    refused("another host's key", connect(target.tls, SUBNQN, H1, Some((K2, IdentityVersion::V1))));
    refused(
        "an unknown host",
        connect(target.tls, SUBNQN, "nqn.2024-01.io.nvmf-rs:stranger", Some((K1, IdentityVersion::V1))),
    );
    refused(
        "another subsystem",
        connect(target.tls, "nqn.2024-01.io.nvmf-rs:other", H1, Some((K1, IdentityVersion::V0))),
    );
    refused("plaintext on the TLS listener", connect(target.tls, SUBNQN, H1, None));
    assert!(target.tls_result("failed") >= 3, "failed handshakes counted");
    assert!(target.tls_result("plaintext_refused") >= 1, "plaintext refused counted");
    // The plaintext listener still serves plaintext.
    let ctrl = connect(target.plaintext, SUBNQN, H1, None).expect("plaintext on the plaintext listener");
    let data = pattern(4096, 9);
    ctrl.write(1, 0, &data).unwrap();
}
