//! [`RdmaReactor`]: a reactor's NVMe/RDMA side: its RDMA CM event channel (created at the first connection; the
//! ids handed over by the CM thread are migrated to it), its per-device contexts (completion channel fds in the
//! reactor's poll) and its connections. The reactor thread calls it from its loop; nothing here blocks.
//!
//! Completion handling: on a completion channel's readiness its one event is read and acknowledged (an armed CQ
//! raises one event, and is armed again only after that event was read, so one read per readiness suffices and
//! no `EAGAIN` read is spent) and the CQ is drained. At the end of every turn, after this turn's work requests
//! were posted, the CQ is polled again (completions of those posts are often there already, with Soft-RoCE
//! always for a loopback peer); only a CQ found empty is re-armed (a system call with most providers) and polled
//! once more (completions that arrived before the re-arm raise no event). While those end-of-turn polls find
//! completions the reactor turns again without sleeping; an idle reactor sleeps on armed CQs, spinning never.
//! Each completion is routed to its connection by the `wr_id`'s connection key (no lookup), or, for a receive of
//! a shared receive queue, by its queue pair number (a map filled at accept; the buffer is reposted to the shared
//! queue at the end of the turn, after its command went to the queue).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::transport::rdma::private_data::{RdmaCmAccept, RdmaCmRejectStatus};
use nvmf_common::transport::rdma::verbs::{
    AccessFlags, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, QpCapabilities, QpInitAttr, QueuePair, WcStatus,
    WorkCompletion,
};

use super::connection::{split_wr_id, ConnectionSetup, RdmaConnection, RdmaConnectionError, WrKind};
use super::device::DeviceContext;
use super::listener::{reject, RdmaAccepted};
use super::memory::Work;
use crate::backend::IoEngine;
use crate::controller::{EventNotifier, Queue, SlotId, Target, TransportInfo};
use crate::reactor::RETRY_AFTER;

/// Token of the reactor's RDMA CM event channel.
const CM_TOKEN: usize = usize::MAX - 1;
/// Token of device context `i`'s completion channel: `LAST_DEVICE_TOKEN - i`.
const LAST_DEVICE_TOKEN: usize = usize::MAX - 2;
/// Devices one reactor serves at most.
const MAX_DEVICES: usize = 64;

/// Queue keys of RDMA connections start here (TCP connections use their slot), so storage completions find
/// their transport by the key alone.
pub(crate) const QUEUE_KEY_BASE: u64 = 1 << 32;

/// Completions read per `ibv_poll_cq` batch.
const POLL_BATCH: usize = 64;
/// How soon the reactor tries again to arm a completion queue whose arming failed.
const ARM_RETRY: Duration = Duration::from_millis(50);

/// Work completion status values counted one by one (higher ones are counted with the last).
const STATUS_SLOTS: usize = 24;

/// One reactor's NVMe/RDMA counters (single writer: the reactor; read at scrape time).
#[derive(Debug, Default)]
pub struct RdmaCounters {
    /// Posted work requests: RDMA READ, RDMA WRITE, SEND, receive, SEND with invalidate.
    posted: [AtomicU64; 5],
    /// Successful completions: receive, RDMA READ, SEND.
    completed: [AtomicU64; 3],
    /// Error completions by `ibv_wc_status` value.
    errors: [AtomicU64; STATUS_SLOTS],
    /// Live queue pairs.
    queue_pairs: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl RdmaCounters {
    pub(crate) fn posted(&self, work: &Work) {
        let i = match work {
            Work::Read { .. } => 0,
            Work::Write { .. } => 1,
            Work::Send { invalidate: None, .. } => 2,
            Work::Send { invalidate: Some(_), .. } => 4,
        };
        bump(&self.posted[i], 1);
    }

    pub(crate) fn posted_receives(&self, n: usize) {
        bump(&self.posted[3], u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub(crate) fn completed(&self, kind: WrKind) {
        let i = match kind {
            WrKind::Recv | WrKind::SharedRecv => 0,
            WrKind::Read => 1,
            WrKind::Send => 2,
        };
        bump(&self.completed[i], 1);
    }

    pub(crate) fn completion_error(&self, status: WcStatus) {
        let i = usize::try_from(status.to_raw()).unwrap_or(usize::MAX).min(STATUS_SLOTS - 1);
        bump(&self.errors[i], 1);
    }

    /// Posted work requests by opcode (`rdma_read`, `rdma_write`, `send`, `send_with_invalidate`, `recv`).
    pub fn work_requests(&self) -> [(&'static str, u64); 5] {
        let v = |i: usize| self.posted[i].load(Ordering::Relaxed);
        [("rdma_read", v(0)), ("rdma_write", v(1)), ("send", v(2)), ("send_with_invalidate", v(4)), ("recv", v(3))]
    }

    /// Successful completions by opcode (`recv`, `rdma_read`, `send`; RDMA WRITEs are unsignalled).
    pub fn completions(&self) -> [(&'static str, u64); 3] {
        let v = |i: usize| self.completed[i].load(Ordering::Relaxed);
        [("recv", v(0)), ("rdma_read", v(1)), ("send", v(2))]
    }

    /// Error completions by work completion status name (only statuses seen).
    pub fn completion_errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.errors.iter().enumerate().filter_map(|(i, c)| {
            let n = c.load(Ordering::Relaxed);
            let status = WcStatus::from_raw(u32::try_from(i).ok()?);
            (n > 0).then(|| (status.name(), n))
        })
    }

    /// Live queue pairs.
    pub fn queue_pairs(&self) -> u64 {
        self.queue_pairs.load(Ordering::Relaxed)
    }
}

/// A reactor's RDMA side (see the module docs).
#[derive(Debug)]
pub(crate) struct RdmaReactor {
    index: usize,
    // Dropped before the device contexts: queue pairs go before the pool's region they name.
    connections: Vec<Option<RdmaConnection>>,
    free: Vec<usize>,
    devices: Vec<DeviceContext>,
    cm: Option<EventChannel>,
    counters: Arc<RdmaCounters>,
    wcs: Vec<WorkCompletion>,
}

impl RdmaReactor {
    pub(crate) fn new(index: usize, counters: Arc<RdmaCounters>) -> Self {
        RdmaReactor {
            index,
            connections: Vec::new(),
            free: Vec::new(),
            devices: Vec::new(),
            cm: None,
            counters,
            wcs: vec![WorkCompletion::default(); POLL_BATCH],
        }
    }

    /// Whether `token` is one of ours.
    pub(crate) fn owns_token(token: Token) -> bool {
        token.0 > LAST_DEVICE_TOKEN - MAX_DEVICES
    }

    /// Whether storage completions with queue key `key` are ours.
    pub(crate) fn owns_key(key: u64) -> bool {
        key >= QUEUE_KEY_BASE
    }

    /// No connection left (shutdown may end).
    pub(crate) fn is_empty(&self) -> bool {
        self.connections.iter().all(Option::is_none)
    }

    /// Accept a connect request the CM thread validated: migrate its id here, size and create the queue pair,
    /// post the receives and accept; reject with No Resources if any of that fails.
    pub(crate) fn accept(
        &mut self,
        accepted: RdmaAccepted,
        engine: &mut IoEngine,
        registry: &Registry,
        target: &Arc<Target>,
        notifier: EventNotifier,
    ) {
        let RdmaAccepted { mut id, request, peer, depth, port_id, rdma } = accepted;
        let peer_addr = id.peer_addr();
        let local = id.local_addr();
        let dev = match self.prepare(&mut id, engine, registry) {
            Ok(dev) => dev,
            Err(e) => {
                tracing::warn!(reactor = self.index, peer = ?peer_addr, error = %e, "cannot serve NVMe/RDMA connection");
                reject(&mut id, RdmaCmRejectStatus::NoResources);
                return;
            }
        };
        let d = &mut self.devices[dev];
        let depth = depth.min(u16::try_from(d.attrs.max_qp_wr / 3).unwrap_or(u16::MAX)).max(1);
        let max_send_wr = 3 * u32::from(depth);
        // Receives of the shared receive queue have their completion queue entries reserved with it.
        let shared = rdma.srq && d.shared_receive(rdma.receive_buffer_size());
        let cq_entries = max_send_wr + if shared { 0 } else { u32::from(depth) };
        if !d.reserve_cq(cq_entries) {
            tracing::warn!(reactor = self.index, peer = ?peer_addr, depth, "completion queue full; rejecting");
            reject(&mut id, RdmaCmRejectStatus::NoResources);
            return;
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        let setup = ConnectionSetup {
            key: u32::try_from(slot).unwrap_or(u32::MAX),
            device: dev,
            depth,
            receive_size: rdma.receive_buffer_size(),
            cq_entries,
            // The event reports the host's depths from our side (see listener::validate_request).
            max_reads: u32::from(peer.initiator_depth).min(d.attrs.max_qp_init_rd_atom).max(1),
            invalidate: rdma.send_with_invalidate && d.attrs.device_cap_flags.send_with_invalidate(),
            peer: peer_addr,
        };
        let responder_resources = u32::from(peer.responder_resources).min(d.attrs.max_qp_rd_atom);
        let info = TransportInfo {
            trtype: TransportType::Rdma,
            in_capsule_data_size: rdma.in_capsule_data_size,
            port_id,
            local_address: local.map(|a: SocketAddr| a.ip()),
            queue_key: QUEUE_KEY_BASE + u64::from(setup.key),
        };
        let mut queue = Queue::new(Arc::clone(target), info);
        queue.set_event_notifier(notifier);
        let max_reads = setup.max_reads;
        match self.create(id, dev, depth, max_send_wr, queue, setup, shared) {
            Ok(mut conn) => {
                conn.flush(engine, &self.devices[dev], &self.counters);
                // The first connection's shared buffers must be posted before the host may send.
                if let Some(shared) = self.devices[dev].shared.as_mut() {
                    shared.flush(&self.counters);
                }
                let param = ConnParam {
                    responder_resources: u8::try_from(responder_resources).unwrap_or(u8::MAX),
                    initiator_depth: u8::try_from(max_reads).unwrap_or(u8::MAX),
                    ..ConnParam::default()
                };
                let accepted = if conn.is_closing() {
                    Err("posting the receive buffers failed".to_owned())
                } else {
                    conn.qp_mut()
                        .cm_id_mut()
                        .accept_nvme(&RdmaCmAccept { crqsize: depth }, param)
                        .map_err(|e| e.to_string())
                };
                if let Err(e) = accepted {
                    tracing::warn!(reactor = self.index, peer = ?peer_addr, error = %e, "NVMe/RDMA accept failed");
                    reject(conn.qp_mut().cm_id_mut(), RdmaCmRejectStatus::NoResources);
                    conn.finish(engine);
                    self.devices[dev].unreserve_cq(cq_entries);
                    self.free.push(slot);
                    return;
                }
                tracing::debug!(reactor = self.index, peer = ?peer_addr, qid = request.qid, depth, slot, srq = shared,
                    qp = conn.qp().qp_num(), "NVMe/RDMA connection accepted");
                if let Some(map) = self.devices[dev].shared.as_mut().filter(|_| shared) {
                    map.connections.insert(conn.qp().qp_num(), conn.setup().key);
                }
                self.connections[slot] = Some(conn);
                bump(&self.counters.queue_pairs, 1);
            }
            Err((id, e)) => {
                tracing::warn!(reactor = self.index, peer = ?peer_addr, error = %e, "cannot create NVMe/RDMA queue pair");
                if let Some(mut id) = id {
                    reject(&mut id, RdmaCmRejectStatus::NoResources);
                }
                self.devices[dev].unreserve_cq(cq_entries);
                self.free.push(slot);
            }
        }
    }

    /// The CM channel exists and `id` is on it; the device context of `id`'s device exists: its index.
    fn prepare(&mut self, id: &mut CmId, engine: &IoEngine, registry: &Registry) -> Result<usize, String> {
        if self.cm.is_none() {
            let cm = EventChannel::new().map_err(|e| e.to_string())?;
            registry
                .register(&mut SourceFd(&cm.as_raw_fd()), Token(CM_TOKEN), Interest::READABLE)
                .map_err(|e| format!("registering the RDMA CM channel: {e}"))?;
            self.cm = Some(cm);
        }
        if let Some(cm) = &self.cm {
            id.migrate(cm).map_err(|e| e.to_string())?;
        }
        let device = id.device().map_err(|e| e.to_string())?;
        if let Some(i) = self.devices.iter().position(|d| d.device == device) {
            return Ok(i);
        }
        if self.devices.len() >= MAX_DEVICES {
            return Err(format!("more than {MAX_DEVICES} RDMA devices"));
        }
        let ctx = DeviceContext::open(device, engine).map_err(|e| e.to_string())?;
        let token = Token(LAST_DEVICE_TOKEN - self.devices.len());
        registry
            .register(&mut SourceFd(&ctx.channel.as_raw_fd()), token, Interest::READABLE)
            .map_err(|e| format!("registering a completion channel: {e}"))?;
        self.devices.push(ctx);
        Ok(self.devices.len() - 1)
    }

    /// Create the queue pair and its regions.
    /// Create the queue pair and its regions (`shared`: on the device's shared receive queue, without receive
    /// buffers of its own).
    #[allow(clippy::type_complexity)] // the id comes back with the error only when the queue pair was not made
    #[allow(clippy::too_many_arguments)] // all of them describe the one queue pair made here
    fn create(
        &self,
        id: CmId,
        dev: usize,
        depth: u16,
        max_send_wr: u32,
        queue: Queue,
        setup: ConnectionSetup,
        shared: bool,
    ) -> Result<RdmaConnection, (Option<CmId>, String)> {
        let d = &self.devices[dev];
        let srq = d.shared.as_ref().filter(|_| shared).map(|s| s.queue());
        let slots = usize::from(depth) * 2;
        let receive = match srq {
            Some(_) => Ok(None),
            None => {
                d.pd.register(
                    vec![0u8; usize::from(depth) * setup.receive_size].into_boxed_slice(),
                    AccessFlags::LOCAL_WRITE,
                )
                .map(Some)
            }
        };
        let responses = d.pd.register(vec![0u8; slots.max(4) * 16].into_boxed_slice(), AccessFlags::NONE);
        let (receive, responses) = match (receive, responses) {
            (Ok(r), Ok(s)) => (r, s),
            (Err(e), _) | (_, Err(e)) => return Err((Some(id), e.to_string())),
        };
        let caps = QpCapabilities {
            max_send_wr,
            max_recv_wr: u32::from(depth),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        };
        let attr = QpInitAttr { send_cq: &d.cq, recv_cq: &d.cq, srq, caps, sq_sig_all: false };
        let qp = match QueuePair::create(id, &d.pd, &attr) {
            Ok(qp) => qp,
            // Some devices cannot inline: retry without (the CQE is then sent from the response region).
            Err((id, _)) => QueuePair::create(
                id,
                &d.pd,
                &QpInitAttr { caps: QpCapabilities { max_inline_data: 0, ..caps }, ..attr },
            )
            .map_err(|(id, e)| (Some(id), e.to_string()))?,
        };
        Ok(RdmaConnection::new(qp, receive, responses, queue, setup))
    }

    /// One of our fds is readable.
    pub(crate) fn ready(&mut self, token: Token, engine: &mut IoEngine) {
        if token.0 == CM_TOKEN {
            self.cm_events(engine);
        } else if let Some(dev) = LAST_DEVICE_TOKEN.checked_sub(token.0).filter(|&d| d < self.devices.len()) {
            self.completions(dev, engine);
        }
    }

    fn cm_events(&mut self, engine: &mut IoEngine) {
        let Some(cm) = self.cm.clone() else { return };
        loop {
            match cm.get_event() {
                Ok(Some(event)) => self.cm_event(&event, engine),
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(reactor = self.index, error = %e, "reading an RDMA CM event failed");
                    return;
                }
            }
        }
    }

    fn cm_event(&mut self, event: &CmEvent, engine: &mut IoEngine) {
        let conn = self.connections.iter_mut().flatten().find(|c| c.qp().cm_id().key() == event.id);
        match (event.kind, conn) {
            // An accepted connection the host never established (it timed out or went away) ends like one it
            // disconnected, or it would hold its queue pair forever.
            (
                CmEventKind::Disconnected
                | CmEventKind::DeviceRemoval
                | CmEventKind::ConnectError
                | CmEventKind::Unreachable
                | CmEventKind::Rejected,
                Some(conn),
            ) => {
                if event.kind != CmEventKind::Disconnected {
                    tracing::info!(reactor = self.index, kind = ?event.kind, status = event.status, "NVMe/RDMA connection failed");
                }
                conn.peer_disconnected(engine);
            }
            (kind, _) => tracing::debug!(reactor = self.index, ?kind, status = event.status, "RDMA CM event"),
        }
    }

    /// `dev`'s completion channel is readable: read its event (the CQ is disarmed now) and drain the CQ.
    fn completions(&mut self, dev: usize, engine: &mut IoEngine) {
        match self.devices[dev].channel.get_event() {
            Ok(Some(_)) => self.devices[dev].armed = false,
            Ok(None) => {}
            Err(e) => {
                // Arming again at the end of the turn is harmless if it still is armed.
                tracing::error!(reactor = self.index, error = %e, "reading a completion event failed");
                self.devices[dev].armed = false;
            }
        }
        self.drain(dev, engine);
    }

    /// End of a turn, after its posts: poll each CQ; re-arm the ones found empty and not armed, then poll those
    /// once more. Whether any completion was found (the reactor then turns again instead of sleeping).
    fn poll_before_sleep(&mut self, engine: &mut IoEngine) -> bool {
        let mut found = false;
        for dev in 0..self.devices.len() {
            let mut n = self.drain(dev, engine);
            if n == 0 && !self.devices[dev].armed {
                match self.devices[dev].cq.req_notify(false) {
                    Ok(()) => self.devices[dev].armed = true,
                    // Not armed: the reactor polls it again after ARM_RETRY.
                    Err(e) => tracing::error!(reactor = self.index, error = %e, "arming the completion queue failed"),
                }
                n = self.drain(dev, engine);
            }
            found |= n > 0;
        }
        found
    }

    /// Poll `dev`'s CQ until empty, routing each completion; how many there were.
    fn drain(&mut self, dev: usize, engine: &mut IoEngine) -> usize {
        let mut wcs = std::mem::take(&mut self.wcs);
        let mut total = 0;
        loop {
            let n = match self.devices[dev].cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(reactor = self.index, error = %e, "polling the completion queue failed");
                    0
                }
            };
            for wc in &wcs[..n] {
                let Some((key, kind, index)) = split_wr_id(wc.wr_id) else {
                    // Unsignalled RDMA WRITEs (wr_id 0) complete only when a queue pair's teardown flushes them.
                    if wc.wr_id == 0 && !wc.is_success() {
                        tracing::debug!(reactor = self.index, status = wc.status.name(), "RDMA WRITE flushed");
                    } else {
                        tracing::warn!(reactor = self.index, wr_id = wc.wr_id, "completion of an unknown work request");
                    }
                    continue;
                };
                if kind == WrKind::SharedRecv {
                    let Some(shared) = self.devices[dev].shared.as_mut() else {
                        tracing::warn!(reactor = self.index, "shared receive completion without a shared queue");
                        continue;
                    };
                    let key = shared.connections.get(&wc.qp_num).copied();
                    let conn =
                        key.and_then(|k| self.connections.get_mut(usize::try_from(k).ok()?)).and_then(Option::as_mut);
                    match conn {
                        Some(conn) => conn.completion(engine, wc, kind, index, Some(shared), &self.counters),
                        None => {
                            tracing::debug!(reactor = self.index, qp = wc.qp_num, "shared receive for no connection")
                        }
                    }
                    // Whatever became of the command (or its connection), the buffer goes back to the shared queue.
                    shared.reposts.push(index);
                    continue;
                }
                let conn = usize::try_from(key).ok().and_then(|k| self.connections.get_mut(k)).and_then(Option::as_mut);
                match conn {
                    Some(conn) => conn.completion(engine, wc, kind, index, None, &self.counters),
                    None => tracing::warn!(reactor = self.index, key, "completion for no connection"),
                }
            }
            total += n;
            if n < wcs.len() {
                break;
            }
        }
        self.wcs = wcs;
        total
    }

    /// A storage completion for queue `key` (≥ [`QUEUE_KEY_BASE`]).
    pub(crate) fn io_completed(
        &mut self,
        key: u64,
        slot: SlotId,
        result: Result<u32, std::io::Error>,
        engine: &mut IoEngine,
    ) {
        let conn = usize::try_from(key - QUEUE_KEY_BASE)
            .ok()
            .and_then(|k| self.connections.get_mut(k))
            .and_then(Option::as_mut);
        match conn {
            Some(conn) => conn.io_completed(engine, slot, result),
            None => tracing::error!(reactor = self.index, key, "storage completion for no RDMA connection"),
        }
    }

    /// Poll every queue (`all`: a timer is due or a notifier fired) or those with work waiting on this turn;
    /// whether any was polled.
    pub(crate) fn poll(&mut self, engine: &mut IoEngine, now: Instant, all: bool) -> bool {
        let mut polled = false;
        for conn in self.connections.iter_mut().flatten().filter(|c| all || c.wants_poll()) {
            conn.poll(engine, now);
            polled = true;
        }
        polled
    }

    /// The earliest of the connections' timers still ahead of `now`; soon, while a completion queue could not be
    /// armed (its completion channel would not wake the reactor) or a queue has work waiting (`RETRY_AFTER`).
    pub(crate) fn next_timer(&self, now: Instant) -> Option<Instant> {
        let unarmed = self.devices.iter().any(|d| !d.armed).then_some(now + ARM_RETRY);
        let live = self.connections.iter().flatten();
        let retry = live.clone().any(|c| c.wants_poll()).then_some(now + RETRY_AFTER);
        let ahead = live.filter_map(RdmaConnection::next_timer).filter(|&t| t > now);
        ahead.chain(unarmed).chain(retry).min()
    }

    /// End of a turn: post each connection's batch; drop connections that ended and drained; poll the CQs (see
    /// the module docs). True if completions were found: the reactor must turn again before it sleeps (their
    /// storage ops are not submitted and their responses not posted yet).
    pub(crate) fn flush_and_reap(&mut self, engine: &mut IoEngine, now: Instant) -> bool {
        for slot in 0..self.connections.len() {
            let Some(conn) = self.connections[slot].as_mut() else { continue };
            let dev = conn.setup().device;
            conn.flush(engine, &self.devices[dev], &self.counters);
            if conn.is_drained(now) {
                if let Some(mut conn) = self.connections[slot].take() {
                    conn.finish(engine);
                    let entries = conn.setup().cq_entries;
                    tracing::debug!(
                        reactor = self.index,
                        slot,
                        qp = conn.qp().qp_num(),
                        "NVMe/RDMA queue pair destroyed"
                    );
                    if let Some(shared) = self.devices[dev].shared.as_mut().filter(|_| conn.uses_shared_receive()) {
                        shared.connections.remove(&conn.qp().qp_num());
                    }
                    drop(conn);
                    self.devices[dev].unreserve_cq(entries);
                    self.free.push(slot);
                    self.counters.queue_pairs.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        for shared in self.devices.iter_mut().filter_map(|d| d.shared.as_mut()) {
            shared.flush(&self.counters);
        }
        self.poll_before_sleep(engine)
    }

    /// Target shutdown: end every connection (they are dropped once drained).
    pub(crate) fn shutdown(&mut self, engine: &mut IoEngine) {
        for conn in self.connections.iter_mut().flatten() {
            conn.close(engine, &RdmaConnectionError::Protocol("target shutting down"));
        }
    }
}
