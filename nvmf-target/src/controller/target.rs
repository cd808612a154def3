//! The target: its subsystems by NQN, the discovery subsystem, the limits every controller advertises and the
//! listeners the discovery log reports.
//!
//! Shared by every reactor (`Arc<Target>`). The subsystem map is read at Connect and by discovery log reads
//! (an `RwLock`, never on the data path); adding or removing a subsystem bumps the discovery generation
//! counter and notifies discovery controllers. The ANA table (each listener's state per ANA group, see
//! [`ana`](super::ana)) is a snapshot with a generation that I/O queues compare per command.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use nvmf_common::fabrics::discovery::{AddressFamily, TransportType, Tsas};
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;

use nvmf_common::nvme::log_page::AnaState;

use super::ana::{AnaGroups, AnaTable, PortStates};
use super::authentication::{AttemptRate, AuthCounters, FailureLog};
use super::generated_psks::GeneratedPsks;
use super::subsystem::{Subsystem, SubsystemError, SubsystemParams};
use crate::backend::{BudgetLimit, DiscardCounters, WorkPool};
use nvmf_common::fabrics::auth::controller::DEFAULT_DH_GROUPS;
use nvmf_common::fabrics::auth::dh::DhGroup;

/// Default [`TargetParams::auth_threads`]: DH steps cost up to 8 ms each in the default groups (ffdhe4096).
pub const DEFAULT_AUTH_THREADS: usize = 2;
/// Default [`TargetParams::auth_queue_depth`].
pub const DEFAULT_AUTH_QUEUE_DEPTH: usize = 64;
/// Default [`TargetParams::auth_attempts_per_second`]: a host authenticates each queue (an admin queue and up to
/// 128 I/O queues per controller, some controllers per host), all at its connect.
pub const DEFAULT_AUTH_ATTEMPTS_PER_SECOND: u32 = 256;

/// Smallest MDTS a target may advertise, in bytes.
pub const MIN_MDTS: u32 = 4096;

/// Largest number of queue entries (`max_queue_entries`): a queue's slots are twice its entries and are
/// numbered with 16 bits.
pub const MAX_QUEUE_ENTRIES: u32 = 32768;

/// The target could not be built or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A subsystem is invalid.
    #[error(transparent)]
    Subsystem(#[from] SubsystemError),
    /// Two subsystems have the same NQN.
    #[error("subsystem {0} is defined twice")]
    DuplicateSubsystem(String),
    /// No subsystem has this NQN.
    #[error("no subsystem {0}")]
    UnknownSubsystem(String),
    /// An ANA group ID outside 1..=ANAGRPMAX.
    #[error("ANA group {0} is invalid; allowed: 1..=128")]
    InvalidAnaGroup(u32),
    /// A target parameter is out of range.
    #[error("target parameter {name} = {value} is invalid; allowed: {allowed}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: u64,
        /// What would be valid.
        allowed: &'static str,
    },
}

/// A transport address the target listens on, as the discovery log reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerParams {
    /// Port ID (the discovery log's PORTID; [`TransportInfo::port_id`] names it for a connection).
    pub port_id: u16,
    /// Transport type.
    pub trtype: TransportType,
    /// Address family.
    pub adrfam: AddressFamily,
    /// Transport address (for IP: the address; a wildcard is replaced by the connection's local address).
    pub traddr: String,
    /// Transport service ID (for IP: the port number).
    pub trsvcid: String,
    /// Transport specific address subtype (RDMA QP/provider/CM, TCP security type).
    pub tsas: Tsas,
    /// TREQ's secure channel field ([`nvmf_common::fabrics::discovery::treq`]): whether TLS is required.
    pub secure_channel: u8,
}

impl ListenerParams {
    /// The entry of an IP listener with port ID `port_id` bound at `local`.
    pub fn ip(port_id: u16, trtype: TransportType, local: SocketAddr, tsas: Tsas) -> Self {
        ListenerParams {
            port_id,
            trtype,
            adrfam: if local.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
            traddr: local.ip().to_string(),
            trsvcid: local.port().to_string(),
            tsas,
            secure_channel: nvmf_common::fabrics::discovery::treq::NOT_SPECIFIED,
        }
    }
}

/// Where a peer stalled when the target ended its connection (`nvmf_target_timeouts_total{state}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stalled {
    /// Before its Fabrics Connect completed (`connect_timeout_ms`).
    Connect,
    /// In a transfer: it read none of the data queued for it, or sent none it was asked for
    /// (`transfer_timeout_ms`).
    Transfer,
}

impl Stalled {
    /// Every state, in label order.
    pub const ALL: [Stalled; 2] = [Stalled::Connect, Stalled::Transfer];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Stalled::Connect => "connect",
            Stalled::Transfer => "transfer",
        }
    }
}

/// The default [`TargetParams::discovery_kato_max_ms`]: what Linux nvmet gives a discovery controller connected with
/// KATO 0 (`NVMET_DISC_KATO_MS`).
pub const DISCOVERY_KATO_MS: u32 = 120_000;

/// Reservation state writes queued for the state pool at most; one more parks its command until there is room
/// (`nvmf_target_reservation_write_queue_full_total`).
pub const STATE_WRITE_QUEUE_DEPTH: usize = 64;

/// Why a Connect was refused by a limit (`nvmf_target_refused_connects_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectLimit {
    /// The host NQN has `max_controllers_per_host` live controllers in the subsystem.
    ControllersPerHost,
    /// A discovery controller asked for a KATO above `discovery_kato_max_ms`.
    DiscoveryKato,
    /// The Connect's host ID breaks a binding of host ID and host NQN ([`Subsystem::host_id_refused`]).
    HostId,
}

impl ConnectLimit {
    /// Every limit, in label order.
    pub const ALL: [ConnectLimit; 3] =
        [ConnectLimit::ControllersPerHost, ConnectLimit::DiscoveryKato, ConnectLimit::HostId];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ConnectLimit::ControllersPerHost => "controllers_per_host",
            ConnectLimit::DiscoveryKato => "discovery_kato",
            ConnectLimit::HostId => "host_id",
        }
    }
}

/// Target-wide limits and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetParams {
    /// Maximum Data Transfer Size in bytes: a power of two, at least 4096 (and at most the I/O engine's
    /// buffer size). Advertised as Identify MDTS in 4 KiB units.
    pub mdts: u32,
    /// Maximum entries per queue (CAP.MQES + 1), 2..=32768.
    pub max_queue_entries: u32,
    /// Maximum I/O queues per controller (Number of Queues granted at most), 1..=65534.
    pub max_io_queues: u16,
    /// Largest Keep Alive Timeout a host may ask for, in milliseconds (Connect or Set Features).
    pub kato_max_ms: u32,
    /// Largest Keep Alive Timeout a host may ask a discovery controller for, and the one a discovery controller
    /// connected with KATO 0 runs with, in milliseconds (1..=`kato_max_ms`).
    pub discovery_kato_max_ms: u32,
    /// The most live controllers one host NQN may have in one subsystem (at least 1).
    pub max_controllers_per_host: u16,
    /// Smallest Keep Alive Timeout a controller runs with, in milliseconds; 0: none, KATO 0 (no keep-alive) is
    /// accepted. See [`Target::kato_with_minimum`].
    pub kato_min_ms: u32,
    /// How long a new queue may wait for its Fabrics Connect to complete, in milliseconds; then its transport
    /// connection ends ([`QueueError::ConnectTimeout`](super::QueueError::ConnectTimeout)).
    pub connect_timeout_ms: u32,
    /// How long a connected transport connection may wait on its peer without progress (the peer reads none of
    /// the data queued for it, or sends none of the data it was asked for), in milliseconds; then it ends.
    pub transfer_timeout_ms: u32,
    /// The most of each size class of a reactor's buffer pool one queue may hold, percent (1..=100).
    pub queue_buffer_percent: u8,
    /// The most of each size class of a reactor's buffer pool that queues of peers not admitted to an NVM subsystem
    /// (before Connect; discovery controllers) may hold together, percent (1..=100).
    pub anonymous_buffer_percent: u8,
    /// Keep Alive Support (Identify KAS): the keep-alive timer's granularity in 100 ms units, at least 1. The
    /// reactor must poll queues at least this often.
    pub kas: u16,
    /// Serve the discovery subsystem.
    pub discovery_enabled: bool,
    /// Listeners reported in the discovery log at start ([`Target::set_listeners`] replaces them; read them with
    /// [`Target::listeners`]).
    pub listeners: Vec<ListenerParams>,
    /// Serial number of the discovery controller.
    pub serial: String,
    /// The ANA states of the listeners (by port ID) at start: each listener's changes from every group optimized,
    /// made in order as by [`Target::set_ana_states`] (typically a state for [`AnaGroups::All`], then some groups'
    /// own); listeners not named have every group optimized. [`Target::set_ana_state`] changes them.
    pub ana_states: Vec<(u16, Vec<(AnaGroups, AnaState)>)>,
    /// The DH groups a host with keys may negotiate when its own keys name none, in order of preference.
    pub dhchap_dhgroups: Vec<DhGroup>,
    /// Threads of the pool that runs DH-HMAC-CHAP's DH steps off the reactors (at least 1).
    pub auth_threads: usize,
    /// DH steps the pool may have queued; one more waits on its queue's retry list, as on a full ring.
    pub auth_queue_depth: usize,
    /// AUTH_Negotiates one peer address prefix may send per second (bursts of as many); one more fails its
    /// transaction. At least 1.
    pub auth_attempts_per_second: u32,
    /// The prefix lengths under which peer addresses count as one (as for connection admission).
    pub address_prefix_v4: u8,
    /// The same for IPv6.
    pub address_prefix_v6: u8,
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams {
            mdts: 1 << 20,
            max_queue_entries: 128,
            max_io_queues: 64,
            kato_max_ms: 600_000,
            discovery_kato_max_ms: DISCOVERY_KATO_MS,
            max_controllers_per_host: 64,
            kato_min_ms: 0,
            connect_timeout_ms: 10_000,
            transfer_timeout_ms: 30_000,
            queue_buffer_percent: 50,
            anonymous_buffer_percent: 25,
            kas: super::association::DEFAULT_KAS,
            discovery_enabled: true,
            listeners: Vec::new(),
            serial: "nvmf-rs".to_owned(),
            ana_states: Vec::new(),
            dhchap_dhgroups: DEFAULT_DH_GROUPS.to_vec(),
            auth_threads: DEFAULT_AUTH_THREADS,
            auth_queue_depth: DEFAULT_AUTH_QUEUE_DEPTH,
            auth_attempts_per_second: DEFAULT_AUTH_ATTEMPTS_PER_SECOND,
            address_prefix_v4: 32,
            address_prefix_v6: 64,
        }
    }
}

impl TargetParams {
    fn validate(&self) -> Result<(), TargetError> {
        let invalid = |name, value: u64, allowed| Err(TargetError::InvalidParameter { name, value, allowed });
        if self.mdts < MIN_MDTS || !self.mdts.is_power_of_two() {
            return invalid("mdts", self.mdts.into(), "a power of two >= 4096");
        }
        if !(2..=MAX_QUEUE_ENTRIES).contains(&self.max_queue_entries) {
            return invalid("max_queue_entries", self.max_queue_entries.into(), "2..=32768");
        }
        if self.kato_min_ms > self.kato_max_ms {
            return invalid("kato_min_ms", self.kato_min_ms.into(), "at most kato_max_ms");
        }
        if self.discovery_kato_max_ms == 0 || self.discovery_kato_max_ms > self.kato_max_ms {
            return invalid("discovery_kato_max_ms", self.discovery_kato_max_ms.into(), "1..=kato_max_ms");
        }
        if self.max_controllers_per_host == 0 {
            return invalid("max_controllers_per_host", 0, "at least 1");
        }
        if self.kas == 0 {
            return invalid("kas", 0, "at least 1 (100 ms)");
        }
        if self.max_io_queues == 0 || self.max_io_queues == u16::MAX {
            return invalid("max_io_queues", self.max_io_queues.into(), "1..=65534");
        }
        if self.serial.is_empty() || self.serial.len() > 20 || !self.serial.bytes().all(|c| (0x20..0x7f).contains(&c)) {
            return invalid("serial", 0, "1..=20 printable ASCII characters");
        }
        if self.dhchap_dhgroups.is_empty() {
            return invalid("dhchap_dhgroups", 0, "at least one group");
        }
        if self.auth_threads == 0 || self.auth_queue_depth == 0 || self.auth_attempts_per_second == 0 {
            return invalid("auth_threads, auth_queue_depth, auth_attempts_per_second", 0, "at least 1");
        }
        if let Some(g) = invalid_ana_group(self.ana_states.iter().flat_map(|(_, changes)| changes)) {
            return Err(TargetError::InvalidAnaGroup(g));
        }
        Ok(())
    }

    /// Identify Controller MDTS: log2 of `mdts` in 4 KiB pages (CAP.MPSMIN = 0).
    pub fn mdts_field(&self) -> u8 {
        u8::try_from((self.mdts / MIN_MDTS).trailing_zeros()).unwrap_or(0)
    }
}

/// What a transport tells the controller about a connection, at [`Queue::new`](super::Queue::new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportInfo {
    /// Transport type: TCP accepts Transport SGL Data Blocks, RDMA Keyed SGL Data Blocks.
    pub trtype: TransportType,
    /// In-capsule data bytes the transport accepts on I/O queues (Identify IOCCSZ = (64 + this) / 16).
    pub in_capsule_data_size: u32,
    /// The listener ([`ListenerParams::port_id`]) the connection came through: the discovery log lists that
    /// port's entries.
    pub port_id: u16,
    /// The connection's local address, reported instead of a wildcard listener address in the discovery log.
    pub local_address: Option<IpAddr>,
    /// The host's address (`nvmf-target list`).
    pub peer_address: Option<SocketAddr>,
    /// The reactor's key for this queue: storage tags are `(queue_key << 16) | slot` (see
    /// [`storage_tag`](super::storage_tag)).
    pub queue_key: u64,
    /// The TLS session that secures the connection, if one does: its Connect commands must name its host.
    pub secure_channel: Option<Arc<SecureChannel>>,
}

/// A connection secured by TLS with a pre-shared key: the PSK identity names the host and the subsystem the key
/// was derived for, which binds the connection to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureChannel {
    /// The host NQN of the PSK identity.
    pub hostnqn: String,
    /// The subsystem NQN of the PSK identity.
    pub subnqn: String,
    /// The negotiated cipher suite's name.
    pub suite: &'static str,
    /// The PSK is a generated one (identity type `G`, secure channel concatenation): the host authenticated to
    /// make it, so its queues are not asked to authenticate again (as nvmet).
    pub generated: bool,
}

impl TransportInfo {
    /// A TCP connection through `port_id` with `in_capsule_data_size` bytes of in-capsule data.
    pub fn tcp(port_id: u16, in_capsule_data_size: u32, queue_key: u64) -> Self {
        TransportInfo {
            trtype: TransportType::Tcp,
            in_capsule_data_size,
            port_id,
            local_address: None,
            peer_address: None,
            queue_key,
            secure_channel: None,
        }
    }
}

/// What `kato_min_ms` did to a host's KATO below it (`nvmf_target_keep_alive_minimum_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KatoMinimum {
    /// A nonzero KATO, raised to the minimum.
    Raised,
    /// KATO 0 (no keep-alive), refused.
    Refused,
}

impl KatoMinimum {
    /// Every outcome, in label order.
    pub const ALL: [KatoMinimum; 2] = [KatoMinimum::Raised, KatoMinimum::Refused];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            KatoMinimum::Raised => "raised",
            KatoMinimum::Refused => "refused",
        }
    }
}

/// The NVMe-oF target.
#[derive(Debug)]
pub struct Target {
    params: TargetParams,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    discovery: Arc<Subsystem>,
    genctr: AtomicU64,
    /// Connections ended because their peer stalled, by [`Stalled`] state.
    timeouts: [AtomicU64; Stalled::ALL.len()],
    budget_waits: [AtomicU64; BudgetLimit::ALL.len()],
    /// NVMe/TCP connections that stopped reading because their send backlog passed its limit.
    send_backlog_pauses: AtomicU64,
    /// Commands failed with Reservation Conflict.
    reservation_conflicts: AtomicU64,
    /// Reservation Registers refused by `max_registrants`.
    registrant_limit: AtomicU64,
    /// Connects refused by a limit, by [`ConnectLimit`].
    connect_limits: [AtomicU64; ConnectLimit::ALL.len()],
    /// Host KATOs below `kato_min_ms`, by [`KatoMinimum`] outcome.
    kato_minimum: [AtomicU64; KatoMinimum::ALL.len()],
    /// The reactors' discard workers (`BLKDISCARD` fallback).
    discards: Arc<DiscardCounters>,
    /// The listeners now, replaced by a reload (read by discovery log reads, never on the data path).
    listeners: RwLock<Vec<ListenerParams>>,
    /// Every listener's ANA states; replaced whole under the write lock, with `ana_generation` bumped.
    ana: RwLock<Arc<AnaTable>>,
    ana_generation: AtomicU64,
    /// DH-HMAC-CHAP transactions by outcome, hash and group.
    auth_counters: AuthCounters,
    /// The rate limit of authentication failure log lines.
    auth_failures: FailureLog,
    /// The rate limit of refused Connects' log lines.
    refused_connects: FailureLog,
    /// Runs DH-HMAC-CHAP's DH steps off the reactors.
    auth_pool: WorkPool,
    /// Where reservation state files are written (PTPL), off the reactors.
    state_pool: WorkPool,
    /// AUTH_Negotiates by peer address prefix.
    auth_attempts: AttemptRate,
    /// Secure channel concatenation's generated PSKs, for the TLS gate.
    generated_psks: Arc<GeneratedPsks>,
}

impl Target {
    /// Build a target from its parameters and subsystems.
    pub fn new(mut params: TargetParams, subsystems: Vec<SubsystemParams>) -> Result<Arc<Self>, TargetError> {
        params.validate()?;
        let mut ana = AnaTable::default();
        for (port_id, changes) in &params.ana_states {
            if let Some(t) = ana.with_states(*port_id, changes) {
                ana = t;
            }
        }
        let listeners = RwLock::new(std::mem::take(&mut params.listeners));
        let mut map = BTreeMap::new();
        for s in subsystems {
            let subsystem = Subsystem::new(s)?;
            let nqn = subsystem.nqn().to_owned();
            if map.insert(nqn.clone(), subsystem).is_some() {
                return Err(TargetError::DuplicateSubsystem(nqn));
            }
        }
        Ok(Arc::new(Target {
            discovery: Subsystem::discovery(params.serial.clone()),
            subsystems: RwLock::new(map),
            genctr: AtomicU64::new(1),
            timeouts: Default::default(),
            budget_waits: Default::default(),
            send_backlog_pauses: AtomicU64::new(0),
            reservation_conflicts: AtomicU64::new(0),
            registrant_limit: AtomicU64::new(0),
            connect_limits: Default::default(),
            kato_minimum: Default::default(),
            discards: Arc::default(),
            listeners,
            ana: RwLock::new(Arc::new(ana)),
            ana_generation: AtomicU64::new(0),
            auth_counters: AuthCounters::default(),
            auth_failures: FailureLog::default(),
            refused_connects: FailureLog::default(),
            auth_pool: WorkPool::new("nvmf-auth", params.auth_threads, params.auth_queue_depth),
            state_pool: WorkPool::new("nvmf-state", 1, STATE_WRITE_QUEUE_DEPTH),
            auth_attempts: AttemptRate::new(
                params.auth_attempts_per_second,
                params.address_prefix_v4,
                params.address_prefix_v6,
            ),
            generated_psks: Arc::default(),
            params,
        }))
    }

    /// Secure channel concatenation's generated PSKs: the authentication that makes one keeps it here, the TLS
    /// gate looks up the identities hosts offer here.
    pub fn generated_psks(&self) -> &Arc<GeneratedPsks> {
        &self.generated_psks
    }

    /// The target's limits (its `listeners` are moved out at start: see [`Target::listeners`]).
    pub fn params(&self) -> &TargetParams {
        &self.params
    }

    /// The subsystem a Connect names: an NVM subsystem, or the discovery subsystem when enabled.
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN {
            return self.params.discovery_enabled.then(|| Arc::clone(&self.discovery));
        }
        self.subsystems.read().unwrap_or_else(|e| e.into_inner()).get(nqn).cloned()
    }

    /// Every NVM subsystem, by NQN.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.subsystems.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The discovery subsystem.
    pub fn discovery_subsystem(&self) -> &Arc<Subsystem> {
        &self.discovery
    }

    /// Discovery log generation counter (GENCTR).
    pub fn discovery_genctr(&self) -> u64 {
        self.genctr.load(Ordering::Acquire)
    }

    /// Add a subsystem; the discovery log changes.
    pub fn add_subsystem(&self, params: SubsystemParams) -> Result<Arc<Subsystem>, TargetError> {
        let subsystem = Subsystem::new(params)?;
        {
            let mut map = self.subsystems.write().unwrap_or_else(|e| e.into_inner());
            if map.contains_key(subsystem.nqn()) {
                return Err(TargetError::DuplicateSubsystem(subsystem.nqn().to_owned()));
            }
            map.insert(subsystem.nqn().to_owned(), Arc::clone(&subsystem));
        }
        tracing::info!(subnqn = %subsystem.nqn(), "subsystem added");
        self.discovery_changed();
        Ok(subsystem)
    }

    /// Remove a subsystem: its associations end (their queues close) and the discovery log changes.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        let subsystem = self
            .subsystems
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(nqn)
            .ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_owned()))?;
        for controller in subsystem.controllers() {
            controller.terminate();
        }
        tracing::info!(subnqn = %nqn, "subsystem removed");
        self.discovery_changed();
        Ok(subsystem)
    }

    /// DH-HMAC-CHAP transactions so far, by outcome, hash and group.
    pub fn auth_counters(&self) -> &AuthCounters {
        &self.auth_counters
    }

    /// The rate limit of authentication failure log lines.
    pub(crate) fn auth_failures(&self) -> &FailureLog {
        &self.auth_failures
    }

    /// The pool that runs DH-HMAC-CHAP's DH steps (its counters: metrics).
    pub fn auth_pool(&self) -> &WorkPool {
        &self.auth_pool
    }

    /// The pool that writes reservation state files (one thread: the writes of a namespace are cheap to order,
    /// and a later state makes an earlier write moot).
    pub fn state_pool(&self) -> &WorkPool {
        &self.state_pool
    }

    /// AUTH_Negotiates by peer address prefix (its refusals: metrics).
    pub fn auth_attempts(&self) -> &AttemptRate {
        &self.auth_attempts
    }

    /// The rate limit of refused Connects' log lines (per host NQN, as authentication failures').
    pub(crate) fn refused_connects(&self) -> &FailureLog {
        &self.refused_connects
    }

    /// Connects refused so far by `limit`.
    pub fn connect_limit_refusals(&self, limit: ConnectLimit) -> u64 {
        self.connect_limits[limit as usize].load(Ordering::Relaxed)
    }

    /// A Connect was refused by `limit`.
    pub(crate) fn count_connect_limit(&self, limit: ConnectLimit) {
        self.connect_limits[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections ended so far because their peer stalled in `state`.
    pub fn timeouts(&self, state: Stalled) -> u64 {
        self.timeouts[state as usize].load(Ordering::Relaxed)
    }

    /// A connection ended because its peer stalled in `state`.
    pub fn count_timeout(&self, state: Stalled) {
        self.timeouts[state as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An NVMe/TCP connection stopped reading new PDUs: its host has more than `[target] tcp_send_backlog` to read.
    pub fn count_send_backlog_pause(&self) {
        self.send_backlog_pauses.fetch_add(1, Ordering::Relaxed);
    }

    /// NVMe/TCP connections so far that stopped reading because their send backlog passed its limit.
    pub fn send_backlog_pauses(&self) -> u64 {
        self.send_backlog_pauses.load(Ordering::Relaxed)
    }

    /// Commands so far that waited for a buffer the pool had because `limit` refused it.
    pub fn budget_waits(&self, limit: BudgetLimit) -> u64 {
        self.budget_waits[limit as usize].load(Ordering::Relaxed)
    }

    /// Commands failed with Reservation Conflict (I/O commands against a reservation, reservation commands).
    pub fn reservation_conflicts(&self) -> u64 {
        self.reservation_conflicts.load(Ordering::Relaxed)
    }

    /// A command failed with Reservation Conflict.
    pub fn count_reservation_conflict(&self) {
        self.reservation_conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Reservation Registers refused because the namespace had `max_registrants` registrants.
    pub fn registrant_limit_refusals(&self) -> u64 {
        self.registrant_limit.load(Ordering::Relaxed)
    }

    /// A Reservation Register was refused with Insufficient Capacity.
    pub fn count_registrant_limit(&self) {
        self.registrant_limit.fetch_add(1, Ordering::Relaxed);
    }

    /// A command waits for a buffer because `limit` refused it.
    pub fn count_budget_wait(&self, limit: BudgetLimit) {
        self.budget_waits[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The KATO a controller runs with when its host asks for `asked` ms (Connect or Set Features), or `None`: a
    /// nonzero KATO below `kato_min_ms` is raised to it (the host's keep-alives then come more often than needed);
    /// KATO 0 is refused while a minimum is set, since a vanished host's controller would never end (an RDMA queue
    /// pair without traffic never notices its peer is gone). Counted by outcome.
    pub fn kato_with_minimum(&self, asked: u32) -> Option<u32> {
        let min = self.params.kato_min_ms;
        let outcome = match asked {
            _ if asked >= min => return Some(asked),
            0 => KatoMinimum::Refused,
            _ => KatoMinimum::Raised,
        };
        self.kato_minimum[outcome as usize].fetch_add(1, Ordering::Relaxed);
        tracing::info!(asked_ms = asked, keep_alive_min_ms = min, outcome = outcome.label(), "KATO below the minimum");
        (outcome == KatoMinimum::Raised).then_some(min)
    }

    /// Host KATOs so far that were below `kato_min_ms` and had `outcome`.
    pub fn kato_minimum(&self, outcome: KatoMinimum) -> u64 {
        self.kato_minimum[outcome as usize].load(Ordering::Relaxed)
    }

    /// What the reactors' discard workers did; each reactor's engine counts into it.
    pub fn discard_counters(&self) -> &Arc<DiscardCounters> {
        &self.discards
    }

    /// The listeners the discovery log reports now.
    pub fn listeners(&self) -> Vec<ListenerParams> {
        self.listeners.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the listeners (a reload added or removed some); the discovery log changes.
    pub fn set_listeners(&self, listeners: Vec<ListenerParams>) {
        *self.listeners.write().unwrap_or_else(|e| e.into_inner()) = listeners;
        self.discovery_changed();
    }

    /// Bump GENCTR and tell discovery controllers (Discovery Log Page Change notice).
    pub fn discovery_changed(&self) {
        self.genctr.fetch_add(1, Ordering::AcqRel);
        for controller in self.discovery.controllers() {
            controller.discovery_log_changed();
        }
    }

    /// The ANA table now.
    pub fn ana(&self) -> Arc<AnaTable> {
        Arc::clone(&self.ana.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The ANA table generation; it changes whenever a state changes (one atomic load: I/O queues compare it per
    /// command).
    #[inline]
    pub fn ana_generation(&self) -> u64 {
        self.ana_generation.load(Ordering::Acquire)
    }

    /// Port `port_id`'s ANA states and the generation they belong to, read together.
    pub(crate) fn ana_port_with_generation(&self, port_id: u16) -> (Arc<PortStates>, u64) {
        let guard = self.ana.read().unwrap_or_else(|e| e.into_inner());
        // The generation is bumped while the write lock is held, so under the read lock it matches the table.
        (Arc::clone(guard.port(port_id)), self.ana_generation.load(Ordering::Acquire))
    }

    /// Move namespace `nsid` of subsystem `nqn` to ANA group `group`, live (see
    /// [`Subsystem::set_namespace_ana_group`]): the ANA log's change counts of both groups move and every controller
    /// of the subsystem gets an ANA Change event. Returns whether it moved (`false`: it was in `group`).
    pub fn move_namespace_ana_group(&self, nqn: &str, nsid: u32, group: u32) -> Result<bool, TargetError> {
        let subsystem = self.subsystem(nqn).ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_owned()))?;
        let Some(old) = subsystem.set_namespace_ana_group(nsid, group)? else { return Ok(false) };
        {
            let mut guard = self.ana.write().unwrap_or_else(|e| e.into_inner());
            *guard = Arc::new(guard.with_groups_changed(&[old, group]));
            self.ana_generation.fetch_add(1, Ordering::AcqRel);
        }
        for controller in subsystem.controllers() {
            controller.ana_changed();
        }
        Ok(true)
    }

    /// Set `groups` of listener `port_id` to `state`. When anything changed, the groups' and the log's change
    /// counts move, I/O queues see the new state at their next command, and every controller connected through
    /// the listener gets an ANA Change event (unless disabled or masked): returns whether anything changed.
    pub fn set_ana_state(&self, port_id: u16, groups: AnaGroups, state: AnaState) -> Result<bool, TargetError> {
        self.set_ana_states(port_id, &[(groups, state)])
    }

    /// Make `changes` to listener `port_id`'s ANA states in order, as one change (see [`Target::set_ana_state`]):
    /// I/O queues never see a state between them, and controllers get one ANA Change event. Returns whether any
    /// group ended in another state.
    pub fn set_ana_states(&self, port_id: u16, changes: &[(AnaGroups, AnaState)]) -> Result<bool, TargetError> {
        if let Some(g) = invalid_ana_group(changes) {
            return Err(TargetError::InvalidAnaGroup(g));
        }
        {
            let mut guard = self.ana.write().unwrap_or_else(|e| e.into_inner());
            let Some(table) = guard.with_states(port_id, changes) else { return Ok(false) };
            *guard = Arc::new(table);
            self.ana_generation.fetch_add(1, Ordering::AcqRel);
        }
        match changes {
            [(groups, state)] => tracing::info!(port_id, ?groups, state = state.name(), "ANA state changed"),
            _ => tracing::info!(port_id, changes = %describe_ana_changes(changes), "ANA states changed"),
        }
        for subsystem in self.subsystems() {
            for controller in subsystem.controllers() {
                if controller.port_id() == port_id {
                    controller.ana_changed();
                }
            }
        }
        Ok(true)
    }
}

/// The first group of `changes` that is not a valid ANA group ID.
fn invalid_ana_group<'a>(changes: impl IntoIterator<Item = &'a (AnaGroups, AnaState)>) -> Option<u32> {
    changes.into_iter().find_map(|&(groups, _)| match groups {
        AnaGroups::One(g) if !super::ana::valid_group(g) => Some(g),
        _ => None,
    })
}

/// `changes` for a log line, runs of consecutive groups set to one state merged: `all=non-optimized 2=optimized`,
/// `1-127=optimized 128=inaccessible`.
fn describe_ana_changes(changes: &[(AnaGroups, AnaState)]) -> String {
    let mut runs: Vec<(Option<(u32, u32)>, AnaState)> = Vec::new();
    for &(groups, state) in changes {
        match (groups, runs.last_mut()) {
            (AnaGroups::One(g), Some((Some((_, last)), s))) if *s == state && last.checked_add(1) == Some(g) => {
                *last = g
            }
            (AnaGroups::One(g), _) => runs.push((Some((g, g)), state)),
            (AnaGroups::All, _) => runs.push((None, state)),
        }
    }
    let run = |(groups, state): &(Option<(u32, u32)>, AnaState)| match groups {
        None => format!("all={}", state.name()),
        Some((first, last)) if first == last => format!("{first}={}", state.name()),
        Some((first, last)) => format!("{first}-{last}={}", state.name()),
    };
    runs.iter().map(run).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ana_changes_are_logged_as_runs() {
        use AnaState::*;
        let changes = [
            (AnaGroups::All, NonOptimized),
            (AnaGroups::One(2), Optimized),
            (AnaGroups::One(3), Optimized),
            (AnaGroups::One(4), Inaccessible),
            (AnaGroups::One(6), Inaccessible),
        ];
        assert_eq!(describe_ana_changes(&changes), "all=non-optimized 2-3=optimized 4=inaccessible 6=inaccessible");
        let reload: Vec<_> = (1..=127).map(|g| (AnaGroups::One(g), Optimized)).collect();
        assert_eq!(describe_ana_changes(&reload), "1-127=optimized");
    }
}
