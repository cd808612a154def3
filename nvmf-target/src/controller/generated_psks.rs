//! Secure channel concatenation's generated PSKs (NVMe Base 2.1 §8.3.5.5.9, TCP Transport §3.6.1.3), kept between
//! the DH-HMAC-CHAP transaction that makes one and the TLS connections that use it.
//!
//! A host that asks for concatenation (Linux `nvme connect --concat`, `nvmf-host --concat`) authenticates its admin
//! queue on a plaintext connection with SC_C 02h; once the transaction succeeds both sides hold the generated PSK
//! HMAC(KS, C1 || C2) and derive from it the identity `NVMe1G<hash> <hostnqn> <subnqn> <digest>` and its TLS PSK.
//! The host then closes that association and connects again, every queue over TLS with that identity; a
//! replacement (SC_C 03h, on an admin queue already secured with a generated PSK) makes a new one the same way.
//! nvmet keeps the TLS PSK in its `.nvme` keyring under the identity, where its TLS handshake daemon finds it; here
//! it is kept in this store, where the TLS gate looks up the identities of type `G` a host offers.
//!
//! Bounded: an entry expires [`GENERATED_PSK_IDLE`] after it was made or last used for a handshake, a host and
//! subsystem pair keeps at most [`MAX_PER_PAIR`] (its oldest goes), and the store at most [`MAX_GENERATED_PSKS`]
//! (expired entries go first, then the oldest). Keys are wiped when their entry goes and never logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::tls::{PskIdentity, PskType, TlsPsk};
use nvmf_common::transport::tls::HandshakePsk;

/// How long a generated PSK stays usable after it was made or last secured a connection.
pub const GENERATED_PSK_IDLE: Duration = Duration::from_secs(600);

/// Generated PSKs kept for one host and subsystem (a host with several controllers on one subsystem, e.g. one per
/// path, generates one per controller).
pub const MAX_PER_PAIR: usize = 8;

/// Generated PSKs kept in all.
pub const MAX_GENERATED_PSKS: usize = 4096;

struct Entry {
    hostnqn: String,
    subnqn: String,
    psk: TlsPsk,
    made: Instant,
    expires: Instant,
}

/// The generated PSKs by identity (see the module docs).
#[derive(Default)]
pub struct GeneratedPsks {
    entries: Mutex<HashMap<String, Entry>>,
    /// PSKs generated and kept (`nvmf_target_generated_psks_total{event="generated"}`).
    generated: AtomicU64,
    /// Handshakes keyed with one (`{event="used"}`).
    used: AtomicU64,
}

impl std::fmt::Debug for GeneratedPsks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedPsks").field("len", &self.len()).finish_non_exhaustive()
    }
}

impl GeneratedPsks {
    /// Keep `psk`, generated for host `hostnqn` and subsystem `subnqn` at `now`.
    pub fn insert(&self, hostnqn: &str, subnqn: &str, psk: TlsPsk, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| e.expires > now);
        let pair = |e: &Entry| e.hostnqn == hostnqn && e.subnqn == subnqn;
        while entries.values().filter(|e| pair(e)).count() >= MAX_PER_PAIR {
            evict_oldest(&mut entries, pair);
        }
        while entries.len() >= MAX_GENERATED_PSKS {
            evict_oldest(&mut entries, |_| true);
        }
        let entry = Entry {
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            made: now,
            expires: now + GENERATED_PSK_IDLE,
            psk,
        };
        entries.insert(entry.psk.identity.clone(), entry);
        self.generated.fetch_add(1, Ordering::Relaxed);
    }

    /// The handshake PSK for the identity a host offers, if it is a generated one kept here and not expired; its
    /// lifetime starts again.
    pub fn lookup(&self, offered: &[u8], now: Instant) -> Option<HandshakePsk> {
        let identity = PskIdentity::parse(offered).ok()?;
        if identity.psk_type() != PskType::Generated {
            return None;
        }
        let key = std::str::from_utf8(offered).ok()?;
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get_mut(key).filter(|e| e.expires > now)?;
        entry.expires = now + GENERATED_PSK_IDLE;
        self.used.fetch_add(1, Ordering::Relaxed);
        // The entry's identity is its key, the one offered.
        Some(HandshakePsk::from(entry.psk.clone()))
    }

    /// Entries kept now (expired ones included until the next insert).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// PSKs generated, and handshakes keyed with one, since start.
    pub fn counts(&self) -> (u64, u64) {
        (self.generated.load(Ordering::Relaxed), self.used.load(Ordering::Relaxed))
    }
}

fn evict_oldest(entries: &mut HashMap<String, Entry>, which: impl Fn(&Entry) -> bool) {
    let oldest = entries.iter().filter(|(_, e)| which(e)).min_by_key(|(_, e)| e.made).map(|(k, _)| k.clone());
    if let Some(k) = oldest {
        entries.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::fabrics::tls::{derive_generated_tls_psk, PskHash};

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:concat-host";
    const SUB: &str = "nqn.2026-12.io.nvmf-rs:concat";

    fn psk(byte: u8, hostnqn: &str) -> TlsPsk {
        derive_generated_tls_psk(PskHash::Sha256, &[byte; 32], hostnqn, SUB).unwrap()
    }

    #[test]
    fn kept_found_by_identity_and_expired() {
        let store = GeneratedPsks::default();
        let now = Instant::now();
        let p = psk(1, HOST);
        store.insert(HOST, SUB, p.clone(), now);
        let found = store.lookup(p.identity.as_bytes(), now).unwrap();
        assert_eq!((found.key, found.identity), (p.key.clone(), p.identity.clone().into_bytes()));
        // Another generated identity, a retained one, garbage: not found.
        assert!(store.lookup(psk(2, HOST).identity.as_bytes(), now).is_none());
        assert!(store.lookup(p.identity.replace("NVMe1G", "NVMe1R").as_bytes(), now).is_none());
        assert!(store.lookup(b"\xff", now).is_none());
        // A use restarts its lifetime; idle that long, it is gone.
        let later = now + GENERATED_PSK_IDLE - Duration::from_secs(1);
        assert!(store.lookup(p.identity.as_bytes(), later).is_some());
        assert!(store.lookup(p.identity.as_bytes(), later + GENERATED_PSK_IDLE - Duration::from_secs(1)).is_some());
        assert!(store.lookup(p.identity.as_bytes(), later + GENERATED_PSK_IDLE * 3).is_none());
        assert_eq!(store.counts(), (1, 3));
        assert!(format!("{store:?}").contains("len: 1"));
    }

    #[test]
    fn bounded_per_pair_and_in_all() {
        let store = GeneratedPsks::default();
        let now = Instant::now();
        let first = psk(0, HOST);
        for i in 0..u8::try_from(MAX_PER_PAIR).unwrap() + 2 {
            store.insert(HOST, SUB, psk(i, HOST), now + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(store.len(), MAX_PER_PAIR);
        assert!(store.lookup(first.identity.as_bytes(), now).is_none(), "the oldest went");
        assert!(store.lookup(psk(9, HOST).identity.as_bytes(), now).is_some());
        let t = now + Duration::from_secs(1);
        for i in 0..MAX_GENERATED_PSKS {
            let host = format!("nqn.2014-08.org.nvmexpress:uuid:h{i}");
            store.insert(&host, SUB, psk(1, &host), t);
        }
        assert_eq!(store.len(), MAX_GENERATED_PSKS);
        // Expired entries go first.
        store.insert(HOST, SUB, psk(200, HOST), t + GENERATED_PSK_IDLE * 2);
        assert_eq!(store.len(), 1);
    }
}
