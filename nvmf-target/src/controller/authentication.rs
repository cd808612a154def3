//! In-band authentication (DH-HMAC-CHAP) as the target configures and counts it: the keys of each host of a
//! subsystem ([`HostKeys`], [`SubsystemAuth`]), the counts of transactions by outcome, hash and group
//! ([`AuthCounters`]), the rate-limited log line of a failure ([`FailureLog`]) and the rate of AUTH_Negotiates per
//! peer address ([`AttemptRate`]). The transactions themselves run in each queue (`queue/authentication.rs`) with
//! [`nvmf_common::fabrics::auth::controller`].
//!
//! Keys are read at the start of each transaction, so a reload that rotates them applies to the next one (a
//! transaction under way finishes with the keys it started with). Keys live in zeroizing buffers and print as
//! their length.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvmf_common::fabrics::auth::controller::ControllerCredentials;
use nvmf_common::fabrics::auth::dh::{DhGroup, ALL_GROUPS};
use nvmf_common::fabrics::auth::hash::{HashFunction, ALL_HASHES};
use nvmf_common::fabrics::auth::secret::DhchapSecret;

/// The DH-HMAC-CHAP keys of one host for one subsystem, and what it may negotiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeys {
    /// The host's key (`dhchap_key`): the host proves it holds it.
    pub host_key: DhchapSecret,
    /// The controller's key (`dhchap_ctrl_key`), for a host that authenticates the controller too.
    pub controller_key: Option<DhchapSecret>,
    /// Hash functions allowed, in order of preference (empty: SHA-256, SHA-384, SHA-512).
    pub hashes: Vec<HashFunction>,
    /// DH groups allowed, in order of preference (empty: the target's, `[target] dhchap_dhgroups`).
    pub dh_groups: Vec<DhGroup>,
    /// The only host ID the host may connect with (`hostid`); `None`: the first one it authenticates with.
    pub hostid: Option<[u8; 16]>,
}

impl HostKeys {
    /// What a transaction of `hostnqn` with subsystem `subnqn` starts with.
    pub fn credentials(&self, hostnqn: &str, subnqn: &str) -> ControllerCredentials {
        ControllerCredentials {
            host_secret: self.host_key.clone(),
            controller_secret: self.controller_key.clone(),
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            hashes: self.hashes.clone(),
            dh_groups: self.dh_groups.clone(),
        }
    }
}

/// A subsystem's authentication settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubsystemAuth {
    /// Refuse the Connect of a host that has no key here (otherwise such a host connects without
    /// authentication, as with nvmet).
    pub required: bool,
    /// Keys by host NQN: a host listed here must authenticate every queue after its Connect.
    pub hosts: BTreeMap<String, Arc<HostKeys>>,
}

/// Transactions by outcome, hash and group (`nvmf_target_auth_total`).
#[derive(Debug, Default)]
pub struct AuthCounters {
    counts: [[[AtomicU64; 6]; 3]; 2],
    /// Failures before a hash and group were chosen (nothing in common, a malformed negotiate).
    unnegotiated_failures: AtomicU64,
}

/// One line of [`AuthCounters::snapshot`]: `(success, hash, group, count)`; `None` hash and group for failures
/// before the negotiation settled.
pub type AuthCount = (bool, Option<HashFunction>, Option<DhGroup>, u64);

impl AuthCounters {
    /// Count a transaction that ended.
    pub fn record(&self, success: bool, chosen: Option<(HashFunction, DhGroup)>) {
        let Some((hash, group)) = chosen else {
            self.unnegotiated_failures.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let h = ALL_HASHES.iter().position(|&x| x == hash).unwrap_or(0);
        let g = ALL_GROUPS.iter().position(|&x| x == group).unwrap_or(0);
        self.counts[usize::from(success)][h][g].fetch_add(1, Ordering::Relaxed);
    }

    /// Every count that is not zero.
    pub fn snapshot(&self) -> Vec<AuthCount> {
        let mut out = Vec::new();
        for (s, by_hash) in self.counts.iter().enumerate() {
            for (h, by_group) in by_hash.iter().enumerate() {
                for (g, count) in by_group.iter().enumerate() {
                    let n = count.load(Ordering::Relaxed);
                    if n > 0 {
                        out.push((s == 1, Some(ALL_HASHES[h]), Some(ALL_GROUPS[g]), n));
                    }
                }
            }
        }
        let n = self.unnegotiated_failures.load(Ordering::Relaxed);
        if n > 0 {
            out.push((false, None, None, n));
        }
        out
    }
}

/// At most one log line per host per this interval for authentication failures.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Hosts remembered by [`FailureLog`]; beyond this the oldest entries are forgotten.
const FAILURE_LOG_HOSTS: usize = 1024;

/// Rate limit of the failure log line: per host NQN, one line per [`FAILURE_LOG_INTERVAL`], with the count of the
/// lines suppressed since the last one. A host that keeps failing cannot flood the log.
#[derive(Debug, Default)]
pub struct FailureLog {
    hosts: Mutex<HashMap<String, (Instant, u64)>>,
}

impl FailureLog {
    /// Whether to log a failure of `hostnqn` now: `Some(suppressed since the last line)`, or `None` to stay quiet.
    pub fn admit(&self, hostnqn: &str, now: Instant) -> Option<u64> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((last, suppressed)) = hosts.get_mut(hostnqn) {
            if now.saturating_duration_since(*last) < FAILURE_LOG_INTERVAL {
                *suppressed += 1;
                return None;
            }
            let n = *suppressed;
            *last = now;
            *suppressed = 0;
            return Some(n);
        }
        if hosts.len() >= FAILURE_LOG_HOSTS {
            hosts.retain(|_, (last, _)| now.saturating_duration_since(*last) < FAILURE_LOG_INTERVAL);
            if hosts.len() >= FAILURE_LOG_HOSTS {
                // Every remembered host failed within the interval: a flood; stay quiet for new names too.
                return None;
            }
        }
        hosts.insert(hostnqn.to_owned(), (now, 0));
        Some(0)
    }
}

/// The address `peer` counts as for per-address limits: its prefix's first address (an IPv4 peer on a dual-stack
/// socket arrives as ::ffff:a.b.c.d: one address either way).
pub fn address_prefix(peer: IpAddr, prefix_v4: u8, prefix_v6: u8) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix_v4.min(32))).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix_v6.min(128))).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

/// Peer prefixes [`AttemptRate`] remembers; beyond this, those whose bucket is full again are forgotten, and while
/// none is, a new prefix is refused (a flood from that many prefixes at once).
const ATTEMPT_PREFIXES: usize = 16384;

/// The rate of authentication attempts (AUTH_Negotiates) per peer address prefix: a token bucket each, of
/// `per_second` tokens refilled at `per_second` a second. Each AUTH_Negotiate costs the target DH work (a key pair,
/// then a shared secret) whatever its outcome; this bounds one peer's share of the pool that does it. Taken once
/// per AUTH_Negotiate (a mutex), never per command.
#[derive(Debug)]
pub struct AttemptRate {
    per_second: u32,
    prefix_v4: u8,
    prefix_v6: u8,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
    refused: AtomicU64,
}

impl AttemptRate {
    /// `per_second` attempts a second (at least 1) per IPv4 `/prefix_v4` or IPv6 `/prefix_v6`.
    pub fn new(per_second: u32, prefix_v4: u8, prefix_v6: u8) -> Self {
        AttemptRate {
            per_second: per_second.max(1),
            prefix_v4,
            prefix_v6,
            buckets: Mutex::default(),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether `peer` (`None`: a transport without addresses, counted as one) may make an attempt at `now`;
    /// a refusal is counted.
    pub fn admit(&self, peer: Option<IpAddr>, now: Instant) -> bool {
        let key = address_prefix(peer.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED)), self.prefix_v4, self.prefix_v6);
        let rate = f64::from(self.per_second);
        let refill =
            |(tokens, at): (f64, Instant)| (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(rate);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= ATTEMPT_PREFIXES && !buckets.contains_key(&key) {
            buckets.retain(|_, bucket| refill(*bucket) < rate);
        }
        let room = buckets.len() < ATTEMPT_PREFIXES;
        let admitted = match buckets.get_mut(&key) {
            Some(bucket) => {
                let tokens = refill(*bucket);
                let ok = tokens >= 1.0;
                *bucket = (if ok { tokens - 1.0 } else { tokens }, now);
                ok
            }
            None if room => {
                buckets.insert(key, (rate - 1.0, now));
                true
            }
            None => false,
        };
        drop(buckets);
        if !admitted {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Attempts refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_log_admits_one_line_per_host_and_interval() {
        let log = FailureLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit("a", t0), Some(0));
        assert_eq!(log.admit("a", t0 + Duration::from_secs(1)), None);
        assert_eq!(log.admit("a", t0 + Duration::from_secs(2)), None);
        assert_eq!(log.admit("b", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.admit("a", t0 + Duration::from_secs(11)), Some(2));
        assert_eq!(log.admit("a", t0 + Duration::from_secs(12)), None);
    }

    #[test]
    fn counters_by_outcome_hash_and_group() {
        let c = AuthCounters::default();
        c.record(true, Some((HashFunction::Sha384, DhGroup::Ffdhe2048)));
        c.record(true, Some((HashFunction::Sha384, DhGroup::Ffdhe2048)));
        c.record(false, Some((HashFunction::Sha256, DhGroup::Null)));
        c.record(false, None);
        assert_eq!(
            c.snapshot(),
            vec![
                (false, Some(HashFunction::Sha256), Some(DhGroup::Null), 1),
                (true, Some(HashFunction::Sha384), Some(DhGroup::Ffdhe2048), 2),
                (false, None, None, 1),
            ]
        );
    }

    #[test]
    fn attempts_are_limited_per_address_prefix_and_refill() {
        let rate = AttemptRate::new(3, 24, 64);
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let same_prefix: IpAddr = "::ffff:192.0.2.200".parse().unwrap();
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(rate.admit(Some(a), t0) && rate.admit(Some(a), t0) && rate.admit(Some(same_prefix), t0));
        assert!(!rate.admit(Some(a), t0), "a burst of 3 per /24, mapped IPv4 included");
        assert!(rate.admit(Some(other), t0), "another prefix has its own");
        assert!(!rate.admit(Some(a), t0 + Duration::from_millis(300)), "0.9 tokens");
        assert!(rate.admit(Some(a), t0 + Duration::from_millis(400)), "1.2 tokens");
        assert!(rate.admit(None, t0), "no address: one bucket of its own");
        assert_eq!(rate.refused(), 2);
        // A second idle refills the whole burst and no more.
        let t1 = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| rate.admit(Some(a), t1)));
        assert!(!rate.admit(Some(a), t1));
    }
}
