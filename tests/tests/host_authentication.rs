//! DH-HMAC-CHAP end to end over NVMe/TCP on 127.0.0.1: our host against our target (in-process) with keys from
//! the target's configuration: one way and both ways, every hash, NULL and FFDHE groups, I/O on every queue after
//! authentication, the refusals (wrong host key, wrong controller key, no key at all), and a discovery controller
//! that requires authentication.

mod host_support;

use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::auth::AuthError;
use nvmf_config::TargetConfig;
use nvmf_host::{Controller, HostError};
use nvmf_target::daemon::RunningTarget;

use host_support::{options, pattern, SUBNQN};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:3a1f0c2e-5b6d-4e7f-8a9b-0c1d2e3f4a5b";
const HOST_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
/// A 48-byte key, transformed with SHA-384 (`DHHC-1:02:`).
const CTRL_KEY: &str = "DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";

/// Our target with HOSTNQN's keys (and `extra` lines in its [[subsystem.host]]), shut down on drop.
struct Target {
    running: Option<RunningTarget>,
    addr: std::net::SocketAddr,
}

impl Target {
    fn start(extra: &str) -> Target {
        Target::start_with("", extra)
    }

    /// With `top` (tables before the listener, e.g. `[discovery]`) too.
    fn start_with(top: &str, extra: &str) -> Target {
        let text = format!(
            "{top}\n[reactors]\nthreads = 2\n[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
             [[subsystem.host]]\nnqn = \"{HOSTNQN}\"\ndhchap_key = \"{HOST_KEY}\"\n{extra}\n\
             [[subsystem.namespace]]\nmemory = \"16MiB\"\n"
        );
        let mut config = TargetConfig::from_str(&text, "<test>").expect("test configuration is valid");
        for l in &mut config.listeners {
            l.address.set_port(0);
        }
        let running = nvmf_target::daemon::start(&config).expect("target starts");
        let addr = running.local_addrs()[0];
        Target { running: Some(running), addr }
    }

    fn counts(&self) -> Vec<(bool, Option<&'static str>, Option<&'static str>, u64)> {
        let target = self.running.as_ref().unwrap().target();
        let counts = target.auth_counters().snapshot();
        counts.into_iter().map(|(ok, h, g, n)| (ok, h.map(|h| h.name()), g.map(|g| g.name()), n)).collect()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

fn key(text: &str) -> DhchapSecret {
    text.parse().unwrap()
}

fn connect(target: &Target, host: Option<&str>, ctrl: Option<&str>) -> Result<Controller, HostError> {
    let mut o = options(2);
    o.hostnqn = HOSTNQN.to_owned();
    o.dhchap_secret = host.map(key);
    o.dhchap_ctrl_secret = ctrl.map(key);
    Controller::connect(target.addr, SUBNQN, o)
}

fn io_works(ctrl: &Controller) {
    for (i, len) in [4096usize, 256 * 1024].into_iter().enumerate() {
        let data = pattern(len, u8::try_from(i).unwrap() + 5);
        ctrl.write(1, 64, &data).expect("write after authentication");
        let mut back = vec![0u8; len];
        ctrl.read(1, 64, &mut back).expect("read after authentication");
        assert!(back == data, "{len} bytes read back differ");
    }
}

#[test]
fn sha256_null_one_way_authenticates_every_queue() {
    let target = Target::start("");
    let ctrl = connect(&target, Some(HOST_KEY), None).expect("authenticated connect");
    io_works(&ctrl);
    ctrl.disconnect().unwrap();
    // Admin queue and two I/O queues: nvmet's defaults, SHA-256 and no DH group.
    assert_eq!(target.counts(), [(true, Some("hmac(sha256)"), Some("null"), 3)]);
}

#[test]
fn every_hash_with_ffdhe_groups_both_ways() {
    for (hash, group) in [("sha256", "ffdhe2048"), ("sha384", "ffdhe3072"), ("hmac(sha512)", "ffdhe4096")] {
        let target = Target::start(&format!(
            "dhchap_ctrl_key = \"{CTRL_KEY}\"\ndhchap_hashes = [\"{hash}\"]\ndhchap_dhgroups = [\"{group}\"]"
        ));
        let ctrl = connect(&target, Some(HOST_KEY), Some(CTRL_KEY)).expect("bidirectional connect");
        io_works(&ctrl);
        ctrl.disconnect().unwrap();
        let name = format!("hmac({})", hash.trim_start_matches("hmac(").trim_end_matches(')'));
        let counts = target.counts();
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert_eq!((counts[0].0, counts[0].1.unwrap(), counts[0].2.unwrap(), counts[0].3), (true, &*name, group, 3));
    }
}

#[test]
fn wrong_keys_and_no_key_are_refused() {
    let target = Target::start(&format!("dhchap_ctrl_key = \"{CTRL_KEY}\""));
    let wrong = "DHHC-1:00:AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8ge/xg:";
    let e = connect(&target, Some(wrong), None).unwrap_err();
    assert!(matches!(e, HostError::Authentication { qid: 0, error: AuthError::HostNotAccepted }), "{e}");
    let e = connect(&target, Some(HOST_KEY), Some(HOST_KEY)).unwrap_err();
    assert!(matches!(e, HostError::Authentication { qid: 0, error: AuthError::ControllerNotAuthenticated }), "{e}");
    let e = connect(&target, None, None).unwrap_err();
    assert!(matches!(e, HostError::AuthenticationRequired { qid: 0, .. }), "{e}");
    // The right keys still work afterwards.
    connect(&target, Some(HOST_KEY), Some(CTRL_KEY)).expect("authenticated").disconnect().unwrap();
    let failures: u64 = target.counts().iter().filter(|c| !c.0).map(|c| c.3).sum();
    assert_eq!(failures, 2, "{:?}", target.counts());
}

#[test]
fn the_discovery_controller_may_require_authentication() {
    let target = Target::start_with("[discovery]\nauth_required = true\n", "");
    let mut o = options(0);
    o.hostnqn = HOSTNQN.to_owned();
    o.dhchap_secret = Some(key(HOST_KEY));
    let log = nvmf_host::discovery::discover(target.addr, o.clone()).expect("discovery with the host's key");
    assert!(log.records.iter().any(|r| r.subnqn == SUBNQN), "{:?}", log.records);
    o.dhchap_secret = None;
    let e = nvmf_host::discovery::discover(target.addr, o.clone()).unwrap_err();
    assert!(matches!(e, HostError::AuthenticationRequired { qid: 0, .. }), "{e}");
    o.hostnqn = "nqn.2024-01.io.nvmf-rs:nobody".to_owned();
    assert!(nvmf_host::discovery::discover(target.addr, o).is_err(), "a host with no key anywhere is refused");
}
