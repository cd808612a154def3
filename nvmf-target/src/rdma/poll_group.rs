//! [`RdmaPollGroup`]: a reactor's NVMe/RDMA queue pairs, the RDMA side of the
//! [`PollGroup`] boundary: its RDMA CM event channel (created at the first connection; the
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
//! Each completion is routed to its connection by the `wr_id`'s connection key (an index and a generation
//! compare: `routing`), or, for a receive of a shared receive queue, by its queue pair number (a map to keys filled
//! at accept; the buffer is reposted to the shared queue at the end of the turn, after its command went to the
//! queue). A completion whose connection is gone is counted and dropped. The connection key is also the controller
//! queue's key (storage completions); the poll tokens are the group's own: 0 for the CM channel, 1 + i for device
//! context i.
//!
//! When a queue pair is destroyed (once drained, or after the flush timeout) its device's CQ is drained before
//! another queue pair is created there, so a shared receive of the old one cannot carry the number a new one got.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::unix::SourceFd;
use mio::Interest;
use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::transport::rdma::private_data::{RdmaCmAccept, RdmaCmRejectStatus};
use nvmf_common::transport::rdma::verbs::{
    AccessFlags, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, QpCapabilities, QpInitAttr, QueuePair,
    WorkCompletion,
};

use super::connection::{ConnectionSetup, RdmaConnection, RdmaConnectionError};
use super::counters::RdmaCounters;
use super::device::DeviceContext;
use super::listener::{reject, RdmaAccepted};
use super::routing::{split_wr_id, ConnectionKey, ConnectionTable, WrKind};
use crate::backend::IoEngine;
use crate::controller::{Queue, SlotId, TransportInfo};
use crate::transport::{Admitted, GroupContext, PollGroup, RETRY_AFTER};

/// The group's token of its RDMA CM event channel.
const CM_TOKEN: u32 = 0;
/// The group's token of device context `i`'s completion channel: `FIRST_DEVICE_TOKEN + i`.
const FIRST_DEVICE_TOKEN: u32 = 1;
/// Devices one reactor serves at most.
const MAX_DEVICES: usize = 64;

/// Completions read per `ibv_poll_cq` batch.
const POLL_BATCH: usize = 64;
/// How soon the reactor tries again to arm a completion queue whose arming failed.
const ARM_RETRY: Duration = Duration::from_millis(50);

/// A connection and its admission ticket (given back when the connection is dropped).
#[derive(Debug)]
struct Served {
    conn: RdmaConnection,
    admitted: Admitted,
}

/// A reactor's NVMe/RDMA queue pairs (see the module docs).
#[derive(Debug)]
pub struct RdmaPollGroup {
    index: usize,
    // Dropped before the device contexts: queue pairs go before the pool's region they name.
    connections: ConnectionTable<Served>,
    devices: Vec<DeviceContext>,
    cm: Option<EventChannel>,
    counters: Arc<RdmaCounters>,
    wcs: Vec<WorkCompletion>,
}

impl RdmaPollGroup {
    /// The NVMe/RDMA group of reactor `index`, counting into `counters`.
    pub fn new(index: usize, counters: Arc<RdmaCounters>) -> Self {
        RdmaPollGroup {
            index,
            connections: ConnectionTable::default(),
            devices: Vec::new(),
            cm: None,
            counters,
            wcs: vec![WorkCompletion::default(); POLL_BATCH],
        }
    }

    /// Accept a connect request the CM thread validated: migrate its id here, size and create the queue pair,
    /// post the receives and accept; reject with No Resources if any of that fails.
    fn accept_request(&mut self, accepted: RdmaAccepted, cx: &mut GroupContext<'_>) {
        let RdmaAccepted { mut id, request, peer, depth, port_id, rdma, admitted } = accepted;
        let peer_addr = id.peer_addr();
        let local = id.local_addr();
        let dev = match self.prepare(&mut id, cx) {
            Ok(dev) => dev,
            Err(e) => {
                tracing::warn!(reactor = self.index, traddr = ?peer_addr, error = %e, "cannot serve NVMe/RDMA connection");
                reject(&mut id, RdmaCmRejectStatus::NoResources);
                return;
            }
        };
        if self.devices[dev].unreaped {
            self.drain(dev, cx.engine);
            if self.devices[dev].unreaped {
                tracing::warn!(reactor = self.index, traddr = ?peer_addr, "completion queue not drained; rejecting");
                reject(&mut id, RdmaCmRejectStatus::NoResources);
                return;
            }
        }
        let d = &mut self.devices[dev];
        let depth = depth.min(u16::try_from(d.attrs.max_qp_wr / 3).unwrap_or(u16::MAX)).max(1);
        let max_send_wr = 3 * u32::from(depth);
        // Receives of the shared receive queue have their completion queue entries reserved with it.
        let shared = rdma.srq && d.shared_receive(rdma.receive_buffer_size());
        let cq_entries = max_send_wr + if shared { 0 } else { u32::from(depth) };
        if !d.reserve_cq(cq_entries) {
            tracing::warn!(reactor = self.index, traddr = ?peer_addr, depth, "completion queue full; rejecting");
            reject(&mut id, RdmaCmRejectStatus::NoResources);
            return;
        }
        let Some(key) = self.connections.reserve() else {
            tracing::warn!(reactor = self.index, traddr = ?peer_addr, "connection table full; rejecting");
            d.unreserve_cq(cq_entries);
            reject(&mut id, RdmaCmRejectStatus::NoResources);
            return;
        };
        let setup = ConnectionSetup {
            key,
            device: dev,
            depth,
            receive_size: rdma.receive_buffer_size(),
            cq_entries,
            // The event reports the host's depths from our side (see listener::validate_request).
            max_reads: u32::from(peer.initiator_depth).min(d.attrs.max_qp_init_rd_atom).max(1),
            invalidate: rdma.send_with_invalidate && d.attrs.device_cap_flags.send_with_invalidate(),
            inline_invalidate: !d.iwarp,
            signal_writes: d.soft_iwarp,
            peer: peer_addr,
        };
        let responder_resources = u32::from(peer.responder_resources).min(d.attrs.max_qp_rd_atom);
        let info = TransportInfo {
            trtype: TransportType::Rdma,
            in_capsule_data_size: rdma.in_capsule_data_size,
            port_id,
            local_address: local.map(|a: SocketAddr| a.ip()),
            peer_address: peer_addr,
            queue_key: 0,
            secure_channel: None,
        };
        let queue = cx.new_queue(info, key.to_raw());
        let max_reads = setup.max_reads;
        let engine = &mut *cx.engine;
        match self.create(id, dev, depth, max_send_wr, queue, setup, shared) {
            Ok(mut conn) => {
                conn.flush(engine, &self.devices[dev], &self.counters);
                // The first connection's shared buffers must be posted before the host may send.
                if let Some(shared) = self.devices[dev].shared.as_mut() {
                    shared.flush(&self.counters);
                }
                // rnr_retry_count here is the host's, for its SENDs into our receive queue (the CM's REP field);
                // ours is what the host's request asked (Linux: 7, forever), hence the transfer timeout.
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
                    tracing::warn!(reactor = self.index, traddr = ?peer_addr, error = %e, "NVMe/RDMA accept failed");
                    reject(conn.qp_mut().cm_id_mut(), RdmaCmRejectStatus::NoResources);
                    conn.finish(engine);
                    drop(conn);
                    self.devices[dev].unreserve_cq(cq_entries);
                    // Its receives were posted under this key: the release makes their flushes stale.
                    self.connections.release(key);
                    self.devices[dev].unreaped = true;
                    return;
                }
                tracing::debug!(reactor = self.index, traddr = ?peer_addr, qid = request.qid, depth, slot = key.slot(),
                    srq = shared, qp = conn.qp().qp_num(), "NVMe/RDMA connection accepted");
                if let Some(map) = self.devices[dev].shared.as_mut().filter(|_| shared) {
                    map.connections.insert(conn.qp().qp_num(), key);
                }
                self.connections.fill(key, Served { conn, admitted });
                self.counters.queue_pair_created();
            }
            Err((id, e)) => {
                tracing::warn!(reactor = self.index, traddr = ?peer_addr, error = %e, "cannot create NVMe/RDMA queue pair");
                if let Some(mut id) = id {
                    reject(&mut id, RdmaCmRejectStatus::NoResources);
                }
                self.devices[dev].unreserve_cq(cq_entries);
                self.connections.release(key);
            }
        }
    }

    /// The CM channel exists and `id` is on it; the device context of `id`'s device exists: its index.
    fn prepare(&mut self, id: &mut CmId, cx: &GroupContext<'_>) -> Result<usize, String> {
        if self.cm.is_none() {
            let cm = EventChannel::new().map_err(|e| e.to_string())?;
            cx.registry
                .register(&mut SourceFd(&cm.as_raw_fd()), cx.token(CM_TOKEN), Interest::READABLE)
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
        let ctx = DeviceContext::open(device, cx.engine).map_err(|e| e.to_string())?;
        let token = cx.token(FIRST_DEVICE_TOKEN + u32::try_from(self.devices.len()).unwrap_or(u32::MAX));
        cx.registry
            .register(&mut SourceFd(&ctx.channel.as_raw_fd()), token, Interest::READABLE)
            .map_err(|e| format!("registering a completion channel: {e}"))?;
        self.devices.push(ctx);
        Ok(self.devices.len() - 1)
    }

    /// Create the queue pair and its regions (`shared`: on the device's shared receive queue, without receive
    /// buffers of its own).
    #[expect(clippy::too_many_arguments, reason = "all of them describe the one queue pair made here")]
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
        let conn = self.connections.iter_mut().map(|s| &mut s.conn).find(|c| c.qp().cm_id().key() == event.id);
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
                    tracing::debug!(reactor = self.index, kind = ?event.kind, status = event.status, "NVMe/RDMA connection failed");
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
        let mut emptied = true;
        loop {
            let n = match self.devices[dev].cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(reactor = self.index, error = %e, "polling the completion queue failed");
                    emptied = false;
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
                    match key.and_then(|k| self.connections.get_mut(k)) {
                        Some(s) => s.conn.completion(engine, wc, kind, index, Some(shared), &self.counters),
                        None => {
                            self.counters.stale_completion();
                            tracing::debug!(reactor = self.index, qp = wc.qp_num, "shared receive for no connection");
                        }
                    }
                    // Whatever became of the command (or its connection), the buffer goes back to the shared queue.
                    shared.reposts.push(index);
                    continue;
                }
                match self.connections.get_mut(key) {
                    Some(s) => s.conn.completion(engine, wc, kind, index, None, &self.counters),
                    None => {
                        // Its connection was dropped (after the flush timeout) and the slot may serve another.
                        self.counters.stale_completion();
                        tracing::debug!(
                            reactor = self.index,
                            slot = key.slot(),
                            ?kind,
                            status = wc.status.name(),
                            "completion for a connection that is gone"
                        );
                    }
                }
            }
            total += n;
            if n < wcs.len() {
                break;
            }
        }
        self.wcs = wcs;
        if emptied {
            self.devices[dev].unreaped = false;
        }
        total
    }
}

impl PollGroup for RdmaPollGroup {
    type QueuePair = RdmaAccepted;

    fn accept(&mut self, request: RdmaAccepted, cx: &mut GroupContext<'_>) {
        self.accept_request(request, cx);
    }

    /// The CM channel or a device's completion channel is readable.
    fn ready(&mut self, token: u64, _event: &Event, cx: &mut GroupContext<'_>) {
        if token == u64::from(CM_TOKEN) {
            self.cm_events(cx.engine);
        } else if let Some(dev) = token
            .checked_sub(u64::from(FIRST_DEVICE_TOKEN))
            .and_then(|d| usize::try_from(d).ok())
            .filter(|&d| d < self.devices.len())
        {
            self.completions(dev, cx.engine);
        }
    }

    fn storage_completed(
        &mut self,
        queue_key: u64,
        slot: SlotId,
        result: Result<u32, std::io::Error>,
        cx: &mut GroupContext<'_>,
    ) {
        // A connection is dropped only with no storage op in flight, so this always finds it.
        let key = u32::try_from(queue_key).ok().map(ConnectionKey::from_raw);
        match key.and_then(|k| self.connections.get_mut(k)) {
            Some(s) => s.conn.io_completed(cx.engine, slot, result),
            None => tracing::error!(reactor = self.index, queue_key, "storage completion for no RDMA connection"),
        }
    }

    fn poll(&mut self, cx: &mut GroupContext<'_>, notified: bool) -> bool {
        let mut polled = false;
        let now = cx.now;
        let due = |c: &&mut RdmaConnection| notified || c.wants_poll() || c.next_timer().is_some_and(|t| t <= now);
        for conn in self.connections.iter_mut().map(|s| &mut s.conn).filter(due) {
            conn.poll(cx.engine, cx.now);
            polled = true;
        }
        polled
    }

    /// Post each connection's batch; drop connections that ended and drained; poll the CQs (see the module docs).
    /// True if completions were found: the reactor must turn again before it sleeps (their storage ops are not
    /// submitted and their responses not posted yet).
    fn end_turn(&mut self, cx: &mut GroupContext<'_>) -> bool {
        let engine = &mut *cx.engine;
        for slot in 0..self.connections.slots() {
            let Some((key, Served { conn, .. })) = self.connections.at_mut(slot) else { continue };
            let dev = conn.setup().device;
            conn.flush(engine, &self.devices[dev], &self.counters);
            conn.note_turn(cx.now);
            if !conn.is_drained(cx.now) {
                continue;
            }
            let Some(Served { mut conn, admitted }) = self.connections.release(key) else { continue };
            conn.finish(engine);
            let entries = conn.setup().cq_entries;
            tracing::debug!(reactor = self.index, slot, qp = conn.qp().qp_num(), "NVMe/RDMA queue pair destroyed");
            if let Some(shared) = self.devices[dev].shared.as_mut().filter(|_| conn.uses_shared_receive()) {
                shared.connections.remove(&conn.qp().qp_num());
            }
            drop(conn);
            drop(admitted);
            self.devices[dev].unreserve_cq(entries);
            self.devices[dev].unreaped = true;
            self.counters.queue_pair_destroyed();
        }
        for shared in self.devices.iter_mut().filter_map(|d| d.shared.as_mut()) {
            shared.flush(&self.counters);
        }
        self.poll_before_sleep(engine)
    }

    /// The earliest of the connections' timers still ahead of `now`; soon, while a completion queue could not be
    /// armed (its completion channel would not wake the reactor) or a queue has work waiting (`RETRY_AFTER`).
    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let unarmed = self.devices.iter().any(|d| !d.armed).then_some(now + ARM_RETRY);
        let live = self.connections.iter().map(|s| &s.conn);
        let retry = live.clone().any(|c| c.wants_poll()).then_some(now + RETRY_AFTER);
        let ahead = live.filter_map(RdmaConnection::next_timer).filter(|&t| t > now);
        ahead.chain(unarmed).chain(retry).min()
    }

    /// End every connection (they are dropped once drained).
    fn shutdown(&mut self, cx: &mut GroupContext<'_>) {
        for conn in self.connections.iter_mut().map(|s| &mut s.conn) {
            conn.close(cx.engine, &RdmaConnectionError::Protocol("target shutting down"));
        }
    }

    fn is_empty(&self) -> bool {
        self.connections.iter().next().is_none()
    }
}
