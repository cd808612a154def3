//! NVM subsystems and their namespaces.
//!
//! A [`Subsystem`] is shared (`Arc`) by every queue of every association that connected to it. Its namespace
//! table is an immutable [`NamespaceTable`] snapshot behind an `RwLock<Arc<_>>` plus an `AtomicU64`
//! generation: a queue caches the `Arc`, compares the generation per command (one relaxed-cost atomic load,
//! never written on the data path) and takes the read lock only when it changed. Adding or removing a
//! namespace (control plane, any thread) builds a new table, bumps the generation and tells every live
//! controller of the subsystem (Changed Namespace List log, asynchronous event).
//!
//! The controller registry (cntlid → controller) is a `Mutex` touched at Connect, at teardown and on
//! namespace changes only.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use nvmf_common::fabrics::nqn::{check_nqn_format, validate_nqn, DISCOVERY_NQN};

use super::ana::{valid_group, DEFAULT_ANA_GROUP};
use super::association::Controller;
use super::authentication::{HostKeys, SubsystemAuth};
use super::reservation::{Reservations, DEFAULT_MAX_REGISTRANTS};
use super::reservation_file;
use crate::backend::Storage;
use crate::counters::CounterSnapshot;
use crate::counters::SubsystemMetrics;

/// The controller IDs a dynamic controller may get (NVMe Base 2.0 §3.1.2: 0xFFF0..=0xFFFF are reserved).
pub const CNTLID_RANGE: RangeInclusive<u16> = 1..=0xFFEF;

/// Default Number of Namespaces (NN) a subsystem reports: the largest NSID it may ever use.
pub const DEFAULT_MAX_NAMESPACES: u32 = 1024;

/// A subsystem or namespace could not be created or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubsystemError {
    /// The subsystem NQN is not a valid NQN.
    #[error("subsystem NQN {nqn:?} is invalid: {reason}")]
    InvalidNqn {
        /// The NQN given.
        nqn: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A host NQN in the allow-list is not a valid NQN.
    #[error("host NQN {nqn:?} in subsystem {subsystem} is invalid: {reason}")]
    InvalidHostNqn {
        /// The subsystem.
        subsystem: String,
        /// The host NQN given.
        nqn: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Serial number or model number does not fit its Identify field or is not printable ASCII.
    #[error("subsystem {subsystem}: {field} {value:?} must be 1..={max} printable ASCII characters")]
    InvalidText {
        /// The subsystem.
        subsystem: String,
        /// `serial` or `model`.
        field: &'static str,
        /// The value given.
        value: String,
        /// The field width.
        max: usize,
    },
    /// The controller ID range is empty or leaves 1..=0xFFEF.
    #[error("subsystem {subsystem}: controller ID range {start}..={end} must be a non-empty part of 1..=65519")]
    InvalidCntlidRange {
        /// The subsystem.
        subsystem: String,
        /// First ID.
        start: u16,
        /// Last ID.
        end: u16,
    },
    /// The Number of Namespaces is 0 or 0xFFFFFFFF.
    #[error("subsystem {subsystem}: max namespaces {value} must be 1..=4294967294")]
    InvalidMaxNamespaces {
        /// The subsystem.
        subsystem: String,
        /// The value given.
        value: u32,
    },
    /// The NSID is 0, 0xFFFFFFFF or above the subsystem's Number of Namespaces.
    #[error("subsystem {subsystem}: NSID {nsid} is outside 1..={max}")]
    InvalidNsid {
        /// The subsystem.
        subsystem: String,
        /// The NSID given.
        nsid: u32,
        /// The subsystem's Number of Namespaces.
        max: u32,
    },
    /// Another namespace already has this NSID.
    #[error("subsystem {subsystem}: NSID {nsid} is already in use")]
    DuplicateNsid {
        /// The subsystem.
        subsystem: String,
        /// The NSID.
        nsid: u32,
    },
    /// No namespace has this NSID.
    #[error("subsystem {subsystem}: no namespace with NSID {nsid}")]
    UnknownNsid {
        /// The subsystem.
        subsystem: String,
        /// The NSID.
        nsid: u32,
    },
    /// The discovery subsystem has no namespaces.
    #[error("the discovery subsystem has no namespaces")]
    DiscoveryNamespace,
    /// The namespace's ANA group ID is outside 1..=ANAGRPMAX.
    #[error("subsystem {subsystem}: NSID {nsid}: ANA group {group} is outside 1..=128")]
    InvalidAnaGroup {
        /// The subsystem.
        subsystem: String,
        /// The NSID.
        nsid: u32,
        /// The group given.
        group: u32,
    },
}

/// What to build a [`Namespace`] from. Identifiers left `None` are derived from the subsystem NQN and NSID, so
/// they stay the same across restarts (Linux uses them for `/dev/disk/by-id` and multipath).
#[derive(Debug, Clone)]
pub struct NamespaceParams {
    /// Namespace ID (1..=the subsystem's Number of Namespaces).
    pub nsid: u32,
    /// The opened storage.
    pub storage: Arc<Storage>,
    /// Namespace Globally Unique Identifier; derived when `None`.
    pub nguid: Option<[u8; 16]>,
    /// Namespace UUID; derived when `None`.
    pub uuid: Option<[u8; 16]>,
    /// IEEE EUI-64; none reported when `None` (it needs an IEEE OUI we do not have).
    pub eui64: Option<[u8; 8]>,
    /// ANA group ID (1..=[`ANAGRPMAX`](super::ana::ANAGRPMAX)).
    pub ana_group: u32,
    /// The target's state directory (`[target] state_dir`): where the namespace's reservations persist when
    /// a host enables Persist Through Power Loss. `None`: they never persist (PTPL cannot be enabled).
    pub state_dir: Option<std::path::PathBuf>,
    /// The most reservation registrants (`[target] max_registrants`).
    pub max_registrants: usize,
}

impl NamespaceParams {
    /// A namespace `nsid` on `storage` with derived identifiers.
    pub fn new(nsid: u32, storage: Arc<Storage>) -> Self {
        NamespaceParams {
            nsid,
            storage,
            nguid: None,
            uuid: None,
            eui64: None,
            ana_group: DEFAULT_ANA_GROUP,
            state_dir: None,
            max_registrants: DEFAULT_MAX_REGISTRANTS,
        }
    }
}

/// One namespace: an NSID and the storage behind it, with its identifiers.
#[derive(Debug)]
pub struct Namespace {
    nsid: u32,
    storage: Arc<Storage>,
    nguid: [u8; 16],
    uuid: [u8; 16],
    eui64: [u8; 8],
    block_shift: u8,
    /// Changes when the namespace moves to another ANA group ([`Subsystem::set_namespace_ana_group`]).
    ana_group: AtomicU32,
    reservations: Reservations,
}

impl Namespace {
    fn new(params: NamespaceParams, subnqn: &str) -> Self {
        let NamespaceParams { nsid, storage, nguid, uuid, eui64, ana_group, state_dir, max_registrants } = params;
        let file = state_dir.map(|dir| reservation_file::path_for(&dir, subnqn, nsid));
        let reservations = Reservations::new(file, max_registrants);
        // Storage::open only accepts power-of-two block sizes (512..=4096).
        let block_shift = u8::try_from(storage.block_size().trailing_zeros()).unwrap_or(9);
        let uuid = uuid.unwrap_or_else(|| {
            let mut id = derived_id(subnqn, nsid, b"uuid");
            // RFC 9562 version 8 (custom), variant 10.
            id[6] = (id[6] & 0x0f) | 0x80;
            id[8] = (id[8] & 0x3f) | 0x80;
            id
        });
        Namespace {
            nsid,
            storage,
            nguid: nguid.unwrap_or_else(|| derived_id(subnqn, nsid, b"nguid")),
            uuid,
            eui64: eui64.unwrap_or([0; 8]),
            block_shift,
            ana_group: AtomicU32::new(ana_group),
            reservations,
        }
    }

    /// The namespace's reservations.
    #[inline]
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The storage behind the namespace.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_shift
    }

    /// log2 of the logical block size (Identify Namespace LBADS).
    pub fn block_shift(&self) -> u8 {
        self.block_shift
    }

    /// Capacity in logical blocks (NSZE).
    pub fn num_blocks(&self) -> u64 {
        self.storage.num_blocks()
    }

    /// Namespace Globally Unique Identifier.
    pub fn nguid(&self) -> [u8; 16] {
        self.nguid
    }

    /// Namespace UUID.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// ANA group ID (Identify Namespace ANAGRPID).
    #[inline]
    pub fn ana_group(&self) -> u32 {
        self.ana_group.load(Ordering::Acquire)
    }

    /// IEEE EUI-64 (all zeros: none).
    pub fn eui64(&self) -> [u8; 8] {
        self.eui64
    }

    /// Deallocated blocks read as zeros (Identify Namespace DLFEAT 001b). Only claimed for storage we know
    /// zero-fills: memory and null (neither has a volatile cache nor bypasses the page cache). Files zero-fill
    /// too, but the backend does not tell files from block devices, which may not; claiming nothing is truthful.
    pub fn deallocate_reads_zeroes(&self) -> bool {
        self.storage.supports_discard() && !self.storage.volatile_write_cache() && !self.storage.is_direct()
    }
}

/// A stable 16-byte identifier from the subsystem NQN, NSID and a label: two FNV-1a 64-bit hashes.
fn derived_id(subnqn: &str, nsid: u32, label: &[u8]) -> [u8; 16] {
    let hash = |seed: u64| {
        let mut h = seed;
        for &b in subnqn.as_bytes().iter().chain(&nsid.to_le_bytes()).chain(label) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&hash(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&hash(0x6c62_272e_07bb_0142).to_be_bytes());
    id
}

/// An immutable snapshot of a subsystem's namespaces, sorted by NSID.
#[derive(Debug, Default)]
pub struct NamespaceTable {
    namespaces: Vec<Arc<Namespace>>,
}

impl NamespaceTable {
    /// The active namespace `nsid`, if any.
    pub fn get(&self, nsid: u32) -> Option<&Arc<Namespace>> {
        self.namespaces.binary_search_by_key(&nsid, |ns| ns.nsid).ok().map(|i| &self.namespaces[i])
    }

    /// The namespace at `index` in NSID order.
    pub fn at(&self, index: usize) -> Option<&Arc<Namespace>> {
        self.namespaces.get(index)
    }

    /// Active namespaces in NSID order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Namespace>> {
        self.namespaces.iter()
    }

    /// Number of active namespaces.
    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    /// True when no namespace is active.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// The ANA groups of the namespaces, ascending, without repeats.
    pub fn ana_groups(&self) -> Vec<u32> {
        let mut groups: Vec<u32> = self.namespaces.iter().map(|ns| ns.ana_group()).collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// True if any namespace's storage has a volatile write cache (Identify Controller VWC).
    pub fn any_volatile_write_cache(&self) -> bool {
        self.namespaces.iter().any(|ns| ns.storage.volatile_write_cache())
    }
}

/// Whether a subsystem serves I/O or is the discovery subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubsystemKind {
    /// An NVM subsystem with namespaces.
    Nvm,
    /// The discovery subsystem (`nqn.2014-08.org.nvmexpress.discovery`).
    Discovery,
}

/// What to build a [`Subsystem`] from.
#[derive(Debug, Clone)]
pub struct SubsystemParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Serial number (Identify Controller SN, at most 20 ASCII characters).
    pub serial: String,
    /// Model number (Identify Controller MN, at most 40 ASCII characters).
    pub model: String,
    /// Any host may connect; `hosts` is ignored.
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false.
    pub hosts: Vec<String>,
    /// Controller IDs to allocate from (within 1..=0xFFEF).
    pub cntlid_range: RangeInclusive<u16>,
    /// Number of Namespaces (NN): the largest NSID the subsystem may use.
    pub max_namespaces: u32,
    /// Namespaces at start.
    pub namespaces: Vec<NamespaceParams>,
    /// In-band authentication: the hosts' keys, and whether a host without one is refused.
    pub auth: SubsystemAuth,
}

impl SubsystemParams {
    /// A subsystem `nqn` open to any host, without namespaces, with default serial/model and ranges.
    pub fn new(nqn: impl Into<String>) -> Self {
        SubsystemParams {
            nqn: nqn.into(),
            serial: "nvmf-rs".to_owned(),
            model: "nvmf-rs".to_owned(),
            allow_any_host: true,
            hosts: Vec::new(),
            cntlid_range: CNTLID_RANGE,
            max_namespaces: DEFAULT_MAX_NAMESPACES,
            namespaces: Vec::new(),
            auth: SubsystemAuth::default(),
        }
    }
}

/// The live controllers of a subsystem and the next controller ID to try.
#[derive(Debug)]
struct Registry {
    controllers: BTreeMap<u16, Weak<Controller>>,
    /// The SMART counters of the associations that ended.
    retired: CounterSnapshot,
    next_cntlid: u16,
}

/// Which hosts may connect to a subsystem.
#[derive(Debug, Clone)]
struct HostAccess {
    allow_any_host: bool,
    hosts: Vec<String>,
    auth: SubsystemAuth,
    /// The host ID each host with keys but no configured `hostid` first authenticated with (bounded by the hosts
    /// with keys; entries of hosts that lose their keys go with them).
    learned_host_ids: HashMap<String, [u8; 16]>,
}

impl HostAccess {
    /// The host ID `hostnqn` is bound to: configured, or learned from its first authentication.
    fn bound_host_id(&self, hostnqn: &str) -> Option<[u8; 16]> {
        let keys = self.auth.hosts.get(hostnqn)?;
        keys.hostid.or_else(|| self.learned_host_ids.get(hostnqn).copied())
    }
}

/// An NVM subsystem (or the discovery subsystem): identity, host access, controller IDs and namespaces.
#[derive(Debug)]
pub struct Subsystem {
    nqn: String,
    serial: String,
    model: String,
    kind: SubsystemKind,
    /// Host access (`allow_any_host`, allowed host NQNs): read at Connect and discovery log reads, replaced by
    /// a reload ([`Subsystem::set_host_access`]).
    access: RwLock<HostAccess>,
    cntlid_range: RangeInclusive<u16>,
    max_namespaces: u32,
    namespaces: RwLock<Arc<NamespaceTable>>,
    generation: AtomicU64,
    registry: Mutex<Registry>,
    /// Counters of the subsystem's queues (metrics); never touched per command.
    metrics: Arc<SubsystemMetrics>,
}

fn check_text(subsystem: &str, field: &'static str, value: &str, max: usize) -> Result<(), SubsystemError> {
    if value.is_empty() || value.len() > max || !value.bytes().all(|c| (0x20..0x7f).contains(&c)) {
        return Err(SubsystemError::InvalidText {
            subsystem: subsystem.to_owned(),
            field,
            value: value.to_owned(),
            max,
        });
    }
    Ok(())
}

/// Validate an allow-list's host NQNs as Linux takes them; warn about those not in the NQN format.
fn check_host_nqns(subnqn: &str, hosts: &[String]) -> Result<(), SubsystemError> {
    for host in hosts {
        validate_nqn(host).map_err(|e| SubsystemError::InvalidHostNqn {
            subsystem: subnqn.to_owned(),
            nqn: host.clone(),
            reason: e.reason(),
        })?;
        if let Err(e) = check_nqn_format(host) {
            tracing::warn!(subnqn, hostnqn = %host, reason = e.reason(), "allowed host name is not in the NQN format \
                (NVMe Base 2.0 §4.5); accepted, as Linux nvmet accepts it");
        }
    }
    Ok(())
}

impl Subsystem {
    /// Build and validate an NVM subsystem.
    pub fn new(params: SubsystemParams) -> Result<Arc<Self>, SubsystemError> {
        let SubsystemParams {
            nqn,
            serial,
            model,
            allow_any_host,
            hosts,
            cntlid_range,
            max_namespaces,
            namespaces,
            auth,
        } = params;
        validate_nqn(&nqn).map_err(|e| SubsystemError::InvalidNqn { nqn: nqn.clone(), reason: e.reason() })?;
        if nqn == DISCOVERY_NQN {
            return Err(SubsystemError::InvalidNqn { nqn, reason: "reserved for the discovery subsystem" });
        }
        if let Err(e) = check_nqn_format(&nqn) {
            tracing::warn!(subnqn = %nqn, reason = e.reason(), "subsystem name is not in the NQN format (NVMe Base \
                2.0 §4.5); served anyway, as Linux nvmet serves it");
        }
        check_text(&nqn, "serial", &serial, 20)?;
        check_text(&nqn, "model", &model, 40)?;
        check_host_nqns(&nqn, &hosts)?;
        let (start, end) = (*cntlid_range.start(), *cntlid_range.end());
        if start > end || !CNTLID_RANGE.contains(&start) || !CNTLID_RANGE.contains(&end) {
            return Err(SubsystemError::InvalidCntlidRange { subsystem: nqn, start, end });
        }
        if max_namespaces == 0 || max_namespaces == u32::MAX {
            return Err(SubsystemError::InvalidMaxNamespaces { subsystem: nqn, value: max_namespaces });
        }
        let subsystem = Subsystem {
            serial,
            model,
            kind: SubsystemKind::Nvm,
            access: RwLock::new(HostAccess { allow_any_host, hosts, auth, learned_host_ids: HashMap::new() }),
            cntlid_range,
            max_namespaces,
            namespaces: RwLock::new(Arc::new(NamespaceTable::default())),
            generation: AtomicU64::new(0),
            registry: Mutex::new(Registry {
                controllers: BTreeMap::new(),
                retired: CounterSnapshot::default(),
                next_cntlid: start,
            }),
            metrics: Arc::default(),
            nqn,
        };
        let mut table = Vec::with_capacity(namespaces.len());
        for ns in namespaces {
            subsystem.check_new_namespace(&table, &ns)?;
            let pos = table.partition_point(|t: &Arc<Namespace>| t.nsid < ns.nsid);
            table.insert(pos, Arc::new(Namespace::new(ns, &subsystem.nqn)));
        }
        *subsystem.namespaces.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(NamespaceTable { namespaces: table });
        Ok(Arc::new(subsystem))
    }

    /// The discovery subsystem: any host, no namespaces.
    pub(crate) fn discovery(serial: String) -> Arc<Self> {
        Arc::new(Subsystem {
            nqn: DISCOVERY_NQN.to_owned(),
            serial,
            model: "nvmf-rs discovery".to_owned(),
            kind: SubsystemKind::Discovery,
            access: RwLock::new(HostAccess {
                allow_any_host: true,
                hosts: Vec::new(),
                auth: SubsystemAuth::default(),
                learned_host_ids: HashMap::new(),
            }),
            cntlid_range: CNTLID_RANGE,
            max_namespaces: 0,
            namespaces: RwLock::new(Arc::new(NamespaceTable::default())),
            generation: AtomicU64::new(0),
            registry: Mutex::new(Registry {
                controllers: BTreeMap::new(),
                retired: CounterSnapshot::default(),
                next_cntlid: *CNTLID_RANGE.start(),
            }),
            metrics: Arc::default(),
        })
    }

    /// An association ended: its counters stay in the subsystem's SMART totals.
    pub(crate) fn retire_counters(&self, counters: CounterSnapshot) {
        self.registry().retired += counters;
    }

    /// The SMART counters of every association the subsystem has had, live and ended: what the SMART / Health log
    /// reports, as Linux nvmet reports its devices' totals rather than one association's.
    pub fn counters(&self) -> CounterSnapshot {
        let mut total = self.registry().retired;
        for controller in self.controllers() {
            total += controller.counters();
        }
        total
    }

    /// The subsystem's metrics (counters of its queues, live and ended).
    pub fn metrics(&self) -> &Arc<SubsystemMetrics> {
        &self.metrics
    }

    /// Subsystem NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Serial number.
    pub fn serial(&self) -> &str {
        &self.serial
    }

    /// Model number.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// NVM or discovery.
    pub fn kind(&self) -> SubsystemKind {
        self.kind
    }

    /// True for the discovery subsystem.
    pub fn is_discovery(&self) -> bool {
        self.kind == SubsystemKind::Discovery
    }

    /// Number of Namespaces (NN): the largest NSID this subsystem may use.
    pub fn max_namespaces(&self) -> u32 {
        self.max_namespaces
    }

    /// Whether `hostnqn` may connect (and see this subsystem in the discovery log).
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let access = self.access.read().unwrap_or_else(|e| e.into_inner());
        access.allow_any_host || access.hosts.iter().any(|h| h == hostnqn)
    }

    /// Host access now: whether any host may connect, and the allowed host NQNs.
    pub fn host_access(&self) -> (bool, Vec<String>) {
        let access = self.access.read().unwrap_or_else(|e| e.into_inner());
        (access.allow_any_host, access.hosts.clone())
    }

    /// The DH-HMAC-CHAP keys of `hostnqn` here: given, each of its queues must authenticate after Connect.
    pub fn host_keys(&self, hostnqn: &str) -> Option<Arc<HostKeys>> {
        let access = self.access.read().unwrap_or_else(|e| e.into_inner());
        access.auth.hosts.get(hostnqn).cloned()
    }

    /// Whether a Connect of `hostnqn` with `hostid` breaks a host ID binding: the host NQN is bound to another host
    /// ID, or the host ID to another host NQN. Reservations know hosts by host ID, so without this an allowed host
    /// could act as another's registrant by sending its host ID (which Reservation Report shows). Linux nvmet binds
    /// none. A configured binding always holds; a learned one only while its host has a live controller here or
    /// its host ID is a registrant of a namespace here (the kernel host itself refuses one host ID under two host
    /// NQNs at once, but a machine may change its host NQN): a stale one is forgotten.
    pub fn host_id_refused(&self, hostnqn: &str, hostid: &[u8; 16]) -> bool {
        let learned: Vec<(String, [u8; 16])> = {
            let access = self.access.read().unwrap_or_else(|e| e.into_inner());
            if let Some(keys) = access.auth.hosts.get(hostnqn) {
                if keys.hostid.is_some_and(|bound| bound != *hostid) {
                    return true;
                }
            }
            if access.auth.hosts.iter().any(|(nqn, k)| k.hostid.as_ref() == Some(hostid) && nqn != hostnqn) {
                return true;
            }
            let conflicts = |(nqn, id): (&String, &[u8; 16])| (nqn == hostnqn) != (id == hostid);
            access.learned_host_ids.iter().filter(|&b| conflicts(b)).map(|(n, id)| (n.clone(), *id)).collect()
        };
        let (live, stale): (Vec<_>, Vec<_>) = learned.into_iter().partition(|(nqn, id)| self.host_active(nqn, id));
        if !stale.is_empty() {
            let mut access = self.access.write().unwrap_or_else(|e| e.into_inner());
            for (nqn, id) in &stale {
                if access.learned_host_ids.get(nqn) == Some(id) {
                    tracing::debug!(subnqn = %self.nqn, hostnqn = nqn.as_str(), "stale host ID binding forgotten");
                    access.learned_host_ids.remove(nqn);
                }
            }
        }
        !live.is_empty()
    }

    /// Whether host `hostnqn` of `hostid` has a live controller here, or `hostid` is a registrant of a namespace.
    fn host_active(&self, hostnqn: &str, hostid: &[u8; 16]) -> bool {
        self.controllers().iter().any(|c| c.hostnqn() == hostnqn)
            || self.namespaces().iter().any(|ns| ns.reservations().read().registrants.contains(hostid))
    }

    /// `hostnqn` authenticated a queue with `hostid`: bind them, if the host has keys and no binding yet. Controllers
    /// of other host NQNs that connected with that host ID before end.
    pub fn bind_host_id(&self, hostnqn: &str, hostid: [u8; 16]) {
        {
            let mut access = self.access.write().unwrap_or_else(|e| e.into_inner());
            if access.bound_host_id(hostnqn).is_some() || !access.auth.hosts.contains_key(hostnqn) {
                return;
            }
            access.learned_host_ids.insert(hostnqn.to_owned(), hostid);
        }
        tracing::debug!(subnqn = %self.nqn, hostnqn, "host ID bound to the host NQN");
        for c in self.controllers() {
            if c.hostid() == hostid && c.hostnqn() != hostnqn {
                tracing::info!(subnqn = %self.nqn, hostnqn = c.hostnqn(), cntlid = c.cntlid(),
                    "association ended: its host ID is bound to another host NQN");
                c.terminate();
            }
        }
    }

    /// Whether a host without keys here is refused.
    pub fn auth_required(&self) -> bool {
        self.access.read().unwrap_or_else(|e| e.into_inner()).auth.required
    }

    /// Replace the authentication settings (a reload, or the discovery subsystem's at start): the next
    /// transactions use the new keys; associations already authenticated continue.
    pub fn set_auth(&self, auth: SubsystemAuth) {
        let mut access = self.access.write().unwrap_or_else(|e| e.into_inner());
        if access.auth != auth {
            tracing::info!(subnqn = %self.nqn, hosts_with_keys = auth.hosts.len(), required = auth.required,
                "authentication settings changed");
            access.auth = auth;
            let HostAccess { auth, learned_host_ids, .. } = &mut *access;
            learned_host_ids.retain(|nqn, _| auth.hosts.get(nqn).is_some_and(|k| k.hostid.is_none()));
        }
    }

    /// The controller ID range.
    pub fn cntlid_range(&self) -> RangeInclusive<u16> {
        self.cntlid_range.clone()
    }

    /// Replace the host access list (a reload). New Connects see it, and the associations of hosts it no longer
    /// allows end (their queues close, as when the subsystem is removed): how many.
    pub fn set_host_access(&self, allow_any_host: bool, hosts: Vec<String>) -> Result<usize, SubsystemError> {
        check_host_nqns(&self.nqn, &hosts)?;
        {
            let mut access = self.access.write().unwrap_or_else(|e| e.into_inner());
            access.allow_any_host = allow_any_host;
            access.hosts = hosts;
        }
        tracing::info!(subnqn = %self.nqn, allow_any_host, "host access changed");
        let revoked: Vec<_> = self.controllers().into_iter().filter(|c| !self.host_allowed(c.hostnqn())).collect();
        for controller in &revoked {
            tracing::info!(subnqn = %self.nqn, cntlid = controller.cntlid(), hostnqn = controller.hostnqn(),
                "host no longer allowed: association ended");
            controller.terminate();
        }
        Ok(revoked.len())
    }

    /// The current namespace table.
    pub fn namespaces(&self) -> Arc<NamespaceTable> {
        Arc::clone(&self.namespaces.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The namespace table generation; it changes whenever a namespace is added or removed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The table and the generation it belongs to, read together.
    pub(crate) fn namespaces_with_generation(&self) -> (Arc<NamespaceTable>, u64) {
        let guard = self.namespaces.read().unwrap_or_else(|e| e.into_inner());
        // The generation is bumped while the write lock is held, so under the read lock it matches the table.
        (Arc::clone(&guard), self.generation.load(Ordering::Acquire))
    }

    fn check_new_namespace(&self, table: &[Arc<Namespace>], ns: &NamespaceParams) -> Result<(), SubsystemError> {
        if !valid_group(ns.ana_group) {
            return Err(SubsystemError::InvalidAnaGroup {
                subsystem: self.nqn.clone(),
                nsid: ns.nsid,
                group: ns.ana_group,
            });
        }
        self.check_new_nsid(table, ns.nsid)
    }

    fn check_new_nsid(&self, table: &[Arc<Namespace>], nsid: u32) -> Result<(), SubsystemError> {
        if nsid == 0 || nsid > self.max_namespaces {
            return Err(SubsystemError::InvalidNsid { subsystem: self.nqn.clone(), nsid, max: self.max_namespaces });
        }
        if table.iter().any(|ns| ns.nsid == nsid) {
            return Err(SubsystemError::DuplicateNsid { subsystem: self.nqn.clone(), nsid });
        }
        Ok(())
    }

    /// Add a namespace: publish a new table, then report the change to every live controller (Changed
    /// Namespace List log and a Namespace Attribute Changed event).
    pub fn add_namespace(&self, params: NamespaceParams) -> Result<Arc<Namespace>, SubsystemError> {
        if self.is_discovery() {
            return Err(SubsystemError::DiscoveryNamespace);
        }
        let nsid = params.nsid;
        let ns = {
            let mut guard = self.namespaces.write().unwrap_or_else(|e| e.into_inner());
            self.check_new_namespace(&guard.namespaces, &params)?;
            let ns = Arc::new(Namespace::new(params, &self.nqn));
            let mut table = guard.namespaces.clone();
            let pos = table.partition_point(|t| t.nsid < nsid);
            table.insert(pos, Arc::clone(&ns));
            *guard = Arc::new(NamespaceTable { namespaces: table });
            self.generation.fetch_add(1, Ordering::AcqRel);
            ns
        };
        tracing::info!(subnqn = %self.nqn, nsid, storage = %ns.storage.describe(), "namespace added");
        self.notify_namespace_changed(nsid);
        Ok(ns)
    }

    /// Remove namespace `nsid`: publish a new table, then report the change. Commands already executing on it
    /// finish (their queues hold the old table until they refresh).
    pub fn remove_namespace(&self, nsid: u32) -> Result<Arc<Namespace>, SubsystemError> {
        let ns = {
            let mut guard = self.namespaces.write().unwrap_or_else(|e| e.into_inner());
            let pos = guard
                .namespaces
                .iter()
                .position(|ns| ns.nsid == nsid)
                .ok_or(SubsystemError::UnknownNsid { subsystem: self.nqn.clone(), nsid })?;
            let mut table = guard.namespaces.clone();
            let ns = table.remove(pos);
            *guard = Arc::new(NamespaceTable { namespaces: table });
            self.generation.fetch_add(1, Ordering::AcqRel);
            ns
        };
        tracing::info!(subnqn = %self.nqn, nsid, "namespace removed");
        self.notify_namespace_changed(nsid);
        Ok(ns)
    }

    /// Move namespace `nsid` to ANA group `group`, live: its commands follow the new group's state on each listener
    /// from the next one, Identify Namespace reports the new ANAGRPID, and controllers get a Namespace Attribute
    /// Changed event (the caller raises the ANA Change event with the log's new change counts). Returns the group
    /// it left, `None` when it was in `group` already.
    pub fn set_namespace_ana_group(&self, nsid: u32, group: u32) -> Result<Option<u32>, SubsystemError> {
        if !valid_group(group) {
            return Err(SubsystemError::InvalidAnaGroup { subsystem: self.nqn.clone(), nsid, group });
        }
        let table = self.namespaces();
        let ns = table.get(nsid).ok_or(SubsystemError::UnknownNsid { subsystem: self.nqn.clone(), nsid })?;
        let old = ns.ana_group.swap(group, Ordering::AcqRel);
        if old == group {
            return Ok(None);
        }
        tracing::info!(subnqn = %self.nqn, nsid, from = old, to = group, "namespace moved to another ANA group");
        self.notify_namespace_changed(nsid);
        Ok(Some(old))
    }

    /// Namespace `nsid`'s capacity changed (its storage was resized): hosts are told as for an added namespace.
    pub fn namespace_resized(&self, nsid: u32) {
        self.notify_namespace_changed(nsid);
    }

    fn notify_namespace_changed(&self, nsid: u32) {
        for controller in self.controllers() {
            controller.namespace_changed(nsid);
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocate a controller ID in the subsystem's range (round-robin, skipping live ones) and register the
    /// controller `make` builds with it; refused when `hostnqn` has `per_host` live controllers here or every ID is
    /// taken.
    pub(crate) fn register_controller(
        &self,
        hostnqn: &str,
        per_host: u16,
        make: impl FnOnce(u16) -> Arc<Controller>,
    ) -> Result<Arc<Controller>, RegisterRefusal> {
        let mut registry = self.registry();
        registry.controllers.retain(|_, c| c.strong_count() > 0);
        let live = |c: &Weak<Controller>| c.upgrade().is_some_and(|c| !c.is_terminated() && c.hostnqn() == hostnqn);
        if registry.controllers.values().filter(|c| live(c)).count() >= usize::from(per_host) {
            return Err(RegisterRefusal::HostLimit);
        }
        let (start, end) = (*self.cntlid_range.start(), *self.cntlid_range.end());
        let span = u32::from(end - start) + 1;
        let mut candidate = registry.next_cntlid.clamp(start, end);
        for _ in 0..span {
            if let Entry::Vacant(slot) = registry.controllers.entry(candidate) {
                let controller = make(candidate);
                slot.insert(Arc::downgrade(&controller));
                registry.next_cntlid = if candidate == end { start } else { candidate + 1 };
                return Ok(controller);
            }
            candidate = if candidate == end { start } else { candidate + 1 };
        }
        Err(RegisterRefusal::NoCntlid)
    }

    /// Forget controller `cntlid` (its association ended).
    pub(crate) fn unregister_controller(&self, cntlid: u16) {
        self.registry().controllers.remove(&cntlid);
    }

    /// The live controller `cntlid`.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.registry().controllers.get(&cntlid).and_then(Weak::upgrade).filter(|c| !c.is_terminated())
    }

    /// Every live controller.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.registry().controllers.values().filter_map(Weak::upgrade).filter(|c| !c.is_terminated()).collect()
    }
}

/// Why [`Subsystem::register_controller`] refused a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegisterRefusal {
    /// Every controller ID of the subsystem's range is taken.
    NoCntlid,
    /// The host NQN has its most live controllers here.
    HostLimit,
}
