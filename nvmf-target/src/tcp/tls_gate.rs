//! TLS on NVMe/TCP listeners (`tls = "allowed"|"required"`): the connections those listeners accept pass through
//! here before any reactor sees them. A gate thread reads the first byte (a TLS handshake record, or an ICReq),
//! runs the TLS 1.3 handshake with the PSK the host's identity names ([`TlsKeyring`]), moves the records into the
//! kernel (kTLS) and hands the connection over; the reactors then read and write plaintext as on any connection.
//! The handshake is blocking and bounded by `connect_timeout_ms`, on a few threads of its own, so a slow or silent
//! peer costs one of them at most that long and never a reactor; connections beyond the gate's queue are closed.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::fabrics::tls::{derive_tls_psk, ConfiguredPsk, IdentityVersion, PskDerivation, PskIdentity, PskType};
use nvmf_common::transport::tls::{server_handshake, HandshakePsk, RecordLayer, Secured, TlsError};
use nvmf_config::target::{SubsystemConfig, TlsMode};

use super::AcceptedConnection;
use crate::controller::authentication::FailureLog;
use crate::controller::{GeneratedPsks, SecureChannel};

/// Whether the warning that records go through user space was logged (once per process).
static USER_SPACE_RECORDS_LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The first byte of a TLS handshake record (ContentType handshake).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The hosts' configured PSKs, by subsystem NQN and host NQN, with the derivation each uses.
#[derive(Debug, Default)]
pub struct TlsKeyring {
    keys: HashMap<(String, String), (ConfiguredPsk, PskDerivation)>,
    /// For the discovery subsystem: a host's key of any subsystem (its first).
    discovery: HashMap<String, (ConfiguredPsk, PskDerivation)>,
}

impl TlsKeyring {
    /// The keys of `subsystems`' `[[subsystem.host]] tls_key` entries.
    pub fn from_config(subsystems: &[SubsystemConfig]) -> Self {
        let mut ring = TlsKeyring::default();
        for s in subsystems {
            for h in &s.host_keys {
                let Some(key) = &h.tls_key else { continue };
                let derivation = if h.tls_key_compat { PskDerivation::Compat } else { PskDerivation::Rfc8446 };
                let entry = (key.key.clone(), derivation);
                ring.discovery.entry(h.nqn.clone()).or_insert_with(|| entry.clone());
                ring.keys.insert((s.nqn.clone(), h.nqn.clone()), entry);
            }
        }
        ring
    }

    /// Whether no host has a key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The TLS PSK for the identity a host offers: known host and subsystem, the key's hash, and (version 1) the
    /// digest the key gives.
    pub fn lookup(&self, offered: &[u8]) -> Option<HandshakePsk> {
        let identity = PskIdentity::parse(offered).ok()?;
        if identity.psk_type() != PskType::Retained {
            return None;
        }
        let (configured, derivation) = if identity.subnqn() == DISCOVERY_NQN {
            self.discovery.get(identity.hostnqn())?
        } else {
            self.keys.get(&(identity.subnqn().to_owned(), identity.hostnqn().to_owned()))?
        };
        if configured.hash() != identity.hash() {
            return None;
        }
        // A version 1 identity's digest tells the derivations apart: the configured one first, then the other
        // (nvme-cli before 2.16 knows only the compat one). Version 0 takes the configured one.
        let other = match derivation {
            PskDerivation::Rfc8446 => PskDerivation::Compat,
            PskDerivation::Compat => PskDerivation::Rfc8446,
        };
        let tries: &[PskDerivation] =
            if identity.version() == IdentityVersion::V1 { &[*derivation, other] } else { &[*derivation] };
        let derived = tries.iter().find_map(|&d| {
            derive_tls_psk(configured, identity.hostnqn(), identity.subnqn(), identity.version(), d)
                .ok()
                .filter(|derived| derived.identity.as_bytes() == offered)
        })?;
        // The identity derived is the one offered (checked above).
        Some(HandshakePsk::from(derived))
    }
}

/// How the gate's connections ended (`nvmf_target_tls_connections_total{result}`).
#[derive(Debug, Default)]
pub struct TlsCounters {
    /// Secured and handed over.
    pub secured: AtomicU64,
    /// Plaintext on an `allowed` listener, handed over.
    pub plaintext: AtomicU64,
    /// Plaintext on a `required` listener: closed.
    pub plaintext_refused: AtomicU64,
    /// The handshake failed (unknown identity, wrong key, a protocol error, no kTLS): closed.
    pub failed: AtomicU64,
    /// The peer did not finish within `connect_timeout_ms`: closed.
    pub timed_out: AtomicU64,
    /// The gate's queue was full: closed.
    pub queue_full: AtomicU64,
    /// Secured, the records in user space (no kTLS), and handed over.
    pub user_space: AtomicU64,
}

impl TlsCounters {
    /// Every result with its label, in label order.
    pub fn by_result(&self) -> [(&'static str, u64); 7] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("failed", get(&self.failed)),
            ("plaintext", get(&self.plaintext)),
            ("plaintext_refused", get(&self.plaintext_refused)),
            ("queue_full", get(&self.queue_full)),
            ("secured", get(&self.secured)),
            ("secured_user_space", get(&self.user_space)),
            ("timed_out", get(&self.timed_out)),
        ]
    }
}

/// Where the acceptor and the gate hand connections over (the reactors, round robin).
pub type HandOver = Box<dyn FnMut(AcceptedConnection) -> Result<(), AcceptedConnection> + Send>;

/// The gate: its queue and what its threads share.
pub struct TlsGate {
    /// `None` once dropping: the threads see the queue closed and end.
    queue: Option<SyncSender<AcceptedConnection>>,
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for TlsGate {
    /// Close the queue and wait for the threads (a handshake in flight ends within its timeout): once the gate is
    /// gone nothing holds the reactors' hand-over, so the daemon can stop them.
    fn drop(&mut self) {
        self.queue = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for TlsGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsGate").finish_non_exhaustive()
    }
}

struct Shared {
    keyring: RwLock<Arc<TlsKeyring>>,
    generated: RwLock<Arc<GeneratedPsks>>,
    counters: Arc<TlsCounters>,
    hand_over: Arc<Mutex<HandOver>>,
    timeout: Duration,
    refusals: FailureLog,
}

impl TlsGate {
    /// Start the gate threads; connections they secure go to `hand_over` (shared with the acceptor).
    pub fn start(
        keyring: TlsKeyring,
        timeout: Duration,
        (threads, depth): (usize, usize),
        counters: Arc<TlsCounters>,
        hand_over: Arc<Mutex<HandOver>>,
    ) -> std::io::Result<Self> {
        let (queue, waiting) = mpsc::sync_channel(depth);
        let waiting = Arc::new(Mutex::new(waiting));
        let shared = Arc::new(Shared {
            keyring: RwLock::new(Arc::new(keyring)),
            generated: RwLock::default(),
            counters,
            hand_over,
            timeout,
            refusals: FailureLog::default(),
        });
        let count = threads;
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let (waiting, shared) = (Arc::clone(&waiting), Arc::clone(&shared));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nvmf-tls-{i}"))
                    .spawn(move || gate_loop(&waiting, &shared))?,
            );
        }
        Ok(TlsGate { queue: Some(queue), shared, threads })
    }

    /// Queue `connection` for its handshake; closed (dropped) when the queue is full.
    pub fn admit(&self, connection: AcceptedConnection) {
        let Some(queue) = &self.queue else { return };
        match queue.try_send(connection) {
            Ok(()) => {}
            Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => {
                self.shared.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                self.shared.refuse(&c, "closed: too many TLS handshakes at once");
            }
        }
    }

    /// New connections use `keyring` (a reload); connections already secured keep their keys.
    pub fn set_keyring(&self, keyring: TlsKeyring) {
        *self.shared.keyring.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keyring);
    }

    /// Look generated identities (type `G`) up in `store`, where secure channel concatenation keeps its PSKs
    /// ([`Target::generated_psks`](crate::controller::Target::generated_psks)); by default the gate's own, empty.
    pub fn set_generated_psks(&self, store: Arc<GeneratedPsks>) {
        *self.shared.generated.write().unwrap_or_else(|e| e.into_inner()) = store;
    }

    /// The TLS PSK the next handshake would find for the identity `offered` ([`TlsKeyring::lookup`]).
    pub fn lookup(&self, offered: &[u8]) -> Option<HandshakePsk> {
        self.shared.keyring().lookup(offered)
    }
}

impl Shared {
    /// The keys in force: a handshake holds on to the ones it started with while a reload swaps them.
    fn keyring(&self) -> Arc<TlsKeyring> {
        Arc::clone(&self.keyring.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// One rate-limited line per peer address.
    fn refuse(&self, c: &AcceptedConnection, why: &str) {
        if let Some(suppressed) = self.refusals.admit(&c.peer.ip().to_string(), Instant::now()) {
            tracing::warn!(traddr = %c.peer, suppressed, "TLS: {why}");
        }
    }
}

fn gate_loop(waiting: &Mutex<Receiver<AcceptedConnection>>, shared: &Shared) {
    loop {
        // The lock is held only while waiting for the next connection; the handshake runs without it.
        let next = waiting.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(mut connection) = next else { return };
        match secure(&mut connection, shared) {
            Ok(()) => {
                let mut hand_over = shared.hand_over.lock().unwrap_or_else(|e| e.into_inner());
                if hand_over(connection).is_err() {
                    tracing::warn!("no reactor takes connections; closed");
                }
            }
            Err(why) => {
                // Dropping the connection closes it.
                shared.refuse(&connection, &why);
            }
        }
    }
}

/// Secure `c` (or let it through as plaintext where allowed); the reason it is refused otherwise.
fn secure(c: &mut AcceptedConnection, shared: &Shared) -> Result<(), String> {
    let stream: &TcpStream = &c.stream;
    let io = |e: std::io::Error| format!("socket: {e}");
    stream.set_nonblocking(false).map_err(io)?;
    stream.set_read_timeout(Some(shared.timeout)).map_err(io)?;
    stream.set_write_timeout(Some(shared.timeout)).map_err(io)?;
    let mut first = [0u8; 1];
    let peeked = stream.peek(&mut first);
    let counters = &shared.counters;
    let result = match peeked {
        Ok(0) => Err("the peer closed the connection".to_owned()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            counters.timed_out.fetch_add(1, Ordering::Relaxed);
            return Err("the peer sent nothing within connect_timeout_ms".into());
        }
        Err(e) => Err(io(e)),
        Ok(_) if first[0] != TLS_HANDSHAKE_RECORD => {
            if c.tcp.tls == TlsMode::Required {
                counters.plaintext_refused.fetch_add(1, Ordering::Relaxed);
                return Err("a plaintext connection on a listener that requires TLS; closed".into());
            }
            counters.plaintext.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
        Ok(_) => {
            let keyring = shared.keyring();
            // A configured PSK's identity (type R), or one secure channel concatenation generated (type G).
            let mut lookup = |offered: &[u8]| {
                keyring.lookup(offered).or_else(|| {
                    let generated = Arc::clone(&shared.generated.read().unwrap_or_else(|e| e.into_inner()));
                    generated.lookup(offered, Instant::now())
                })
            };
            match server_handshake(stream, &mut lookup) {
                Ok(secured) => Ok(Some(secured)),
                Err(TlsError::TimedOut) => {
                    counters.timed_out.fetch_add(1, Ordering::Relaxed);
                    return Err("the handshake did not finish within connect_timeout_ms".into());
                }
                Err(e) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(e.to_string());
                }
            }
        }
    };
    let secured = result?;
    stream.set_read_timeout(None).map_err(io)?;
    stream.set_write_timeout(None).map_err(io)?;
    stream.set_nonblocking(true).map_err(io)?;
    if let Some(Secured { identity, suite, records }) = secured {
        let user_space = matches!(records, RecordLayer::UserSpace(_));
        if let RecordLayer::UserSpace(plain) = records {
            plain.set_nonblocking(true).map_err(io)?;
            if !USER_SPACE_RECORDS_LOGGED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "TLS: no kTLS in this kernel (modprobe tls): records are relayed in user space (slower)"
                );
            }
            counters.user_space.fetch_add(1, Ordering::Relaxed);
            c.stream = plain;
        }
        let identity = PskIdentity::parse(&identity).map_err(|e| e.to_string())?;
        tracing::debug!(traddr = %c.peer, hostnqn = identity.hostnqn(), suite = suite.name(), "TLS secured");
        if !user_space {
            counters.secured.fetch_add(1, Ordering::Relaxed);
        }
        c.tls = Some(Arc::new(SecureChannel {
            hostnqn: identity.hostnqn().to_owned(),
            subnqn: identity.subnqn().to_owned(),
            suite: suite.name(),
            generated: identity.psk_type() == PskType::Generated,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nvmf_common::fabrics::tls::{IdentityVersion, PskHash, TlsPsk};
    use nvmf_common::transport::tls::CipherSuite;
    use nvmf_config::TargetConfig;

    use super::*;

    const H1: &str = "nqn.2024-01.io.example:host-1";
    const H2: &str = "nqn.2024-01.io.example:host-2";
    const S1: &str = "nqn.2024-01.io.example:disk-1";
    const S2: &str = "nqn.2024-01.io.example:disk-2";
    // libnvme test/psk.c's configured PSKs: SHA-256 and SHA-384.
    const K01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";

    /// A subsystem's hosts: `(host NQN, TLS key, tls_key_compat)`.
    type Hosts<'a> = &'a [(&'a str, &'a str, bool)];

    /// A hand-over that takes every connection (and closes it).
    fn take_all<T>() -> impl FnMut(T) -> Result<(), T> + Send {
        |_| Ok(())
    }

    /// `[[subsystem]]`s with their hosts' TLS keys.
    fn subsystems(entries: &[(&str, Hosts<'_>)]) -> Vec<SubsystemConfig> {
        let mut text = String::from("[[listener]]\naddress = \"127.0.0.1\"\n");
        for (nqn, hosts) in entries {
            text += &format!("[[subsystem]]\nnqn = \"{nqn}\"\n[[subsystem.namespace]]\nmemory = \"1MiB\"\n");
            for (host, key, compat) in *hosts {
                text +=
                    &format!("[[subsystem.host]]\nnqn = \"{host}\"\ntls_key = \"{key}\"\ntls_key_compat = {compat}\n");
            }
        }
        TargetConfig::from_str(&text, "<test>").unwrap().subsystems
    }

    /// The identity a host offers with `key` (and the TLS PSK it keys TLS with).
    fn offered(key: &str, host: &str, sub: &str, version: IdentityVersion, derivation: PskDerivation) -> TlsPsk {
        derive_tls_psk(&ConfiguredPsk::parse(key).unwrap(), host, sub, version, derivation).unwrap()
    }

    /// Whether `ring` finds the host's key for `psk`'s identity: the same TLS PSK, restricted to the key's suite.
    fn finds(ring: &TlsKeyring, psk: &TlsPsk) -> bool {
        let Some(found) = ring.lookup(psk.identity.as_bytes()) else { return false };
        assert_eq!(found.identity, psk.identity.as_bytes());
        assert_eq!((found.key, found.suite), (psk.key.clone(), CipherSuite::from(psk.hash)));
        true
    }

    #[test]
    fn lookup_finds_only_the_key_the_identity_names() {
        use IdentityVersion::{V0, V1};
        use PskDerivation::{Compat, Rfc8446};
        let ring = TlsKeyring::from_config(&subsystems(&[
            (S1, &[(H1, K01, false), (H2, K02, true)]),
            (S2, &[(H1, K02, false)]),
        ]));
        assert!(!ring.is_empty());
        // The right identity, either version, and each subsystem's own key and derivation.
        for version in [V0, V1] {
            assert!(finds(&ring, &offered(K01, H1, S1, version, Rfc8446)), "{version:?}");
            assert!(finds(&ring, &offered(K02, H2, S1, version, Compat)), "{version:?}");
            assert!(finds(&ring, &offered(K02, H1, S2, version, Rfc8446)), "{version:?}");
        }
        assert_eq!(
            ring.lookup(offered(K02, H1, S2, V1, Rfc8446).identity.as_bytes()).unwrap().suite.name(),
            PskHash::Sha384.cipher_suite()
        );
        // An unknown host, an unknown subsystem, the other key's hash.
        assert!(!finds(&ring, &offered(K01, "nqn.2024-01.io.example:host-3", S1, V1, Rfc8446)));
        assert!(!finds(&ring, &offered(K01, H1, "nqn.2024-01.io.example:disk-3", V1, Rfc8446)));
        assert!(!finds(&ring, &offered(K02, H1, S1, V1, Rfc8446)));
        assert!(!finds(&ring, &offered(K01, H2, S1, V0, Compat)));
        // Version 1 with the other derivation: its digest says so, and the key it gives is the one found.
        for (key, host, derivation) in [(K01, H1, Compat), (K02, H2, Rfc8446)] {
            let other = offered(key, host, S1, V1, derivation);
            assert_eq!(ring.lookup(other.identity.as_bytes()).map(|p| p.key), Some(other.key.clone()));
        }
        // A digest neither derivation gives.
        let mut forged = offered(K01, H1, S1, V1, Rfc8446).identity;
        forged.truncate(forged.len() - 4);
        forged.push_str("AAA=");
        assert!(ring.lookup(forged.as_bytes()).is_none());
        // A generated PSK's identity (secure channel concatenation) names no configured key.
        let retained = offered(K01, H1, S1, V1, Rfc8446);
        let digest = retained.identity.rsplit(' ').next().unwrap();
        let generated = PskIdentity::new(V1, PskType::Generated, PskHash::Sha256, H1, S1, Some(digest)).unwrap();
        assert!(ring.lookup(generated.to_string().as_bytes()).is_none());
        assert!(ring.lookup(b"NVMe1R01 not an identity").is_none());
        // The discovery subsystem takes the host's first key: H1's of S1 (SHA-256), not its S2 one.
        for version in [V0, V1] {
            assert!(finds(&ring, &offered(K01, H1, DISCOVERY_NQN, version, Rfc8446)), "{version:?}");
            assert!(finds(&ring, &offered(K02, H2, DISCOVERY_NQN, version, Compat)), "{version:?}");
        }
        assert!(!finds(&ring, &offered(K02, H1, DISCOVERY_NQN, V1, Rfc8446)));
        assert!(TlsKeyring::from_config(&subsystems(&[(S1, &[])])).is_empty());
    }

    #[test]
    fn a_new_keyring_serves_the_next_handshakes() {
        use IdentityVersion::V1;
        let hand_over: Arc<Mutex<HandOver>> = Arc::new(Mutex::new(Box::new(take_all())));
        let counters = Arc::new(TlsCounters::default());
        let before = TlsKeyring::from_config(&subsystems(&[(S1, &[(H1, K01, false)])]));
        let gate = TlsGate::start(before, Duration::from_secs(1), (2, 64), counters, hand_over).unwrap();
        let old = offered(K01, H1, S1, V1, PskDerivation::Rfc8446);
        let new = offered(K02, H1, S1, V1, PskDerivation::Compat);
        let added = offered(K01, H2, S2, V1, PskDerivation::Rfc8446);
        assert_eq!(gate.lookup(old.identity.as_bytes()).map(|p| p.key), Some(old.key.clone()));
        assert!(gate.lookup(new.identity.as_bytes()).is_none() && gate.lookup(added.identity.as_bytes()).is_none());
        // Rotated (another key, its other derivation) and a host added: the old key opens nothing any more.
        gate.set_keyring(TlsKeyring::from_config(&subsystems(&[(S1, &[(H1, K02, true)]), (S2, &[(H2, K01, false)])])));
        assert!(gate.lookup(old.identity.as_bytes()).is_none());
        assert_eq!(gate.lookup(new.identity.as_bytes()).map(|p| p.key), Some(new.key.clone()));
        assert_eq!(gate.lookup(added.identity.as_bytes()).map(|p| p.suite), Some(CipherSuite::from(PskHash::Sha256)));
        // Every key removed: TLS connections are refused at the handshake.
        gate.set_keyring(TlsKeyring::default());
        assert!(gate.lookup(new.identity.as_bytes()).is_none());
    }
}
