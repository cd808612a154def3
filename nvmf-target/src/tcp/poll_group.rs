//! [`TcpPollGroup`]: one reactor's NVMe/TCP connections, the TCP side of the [`PollGroup`] boundary. A connection
//! handed over by the acceptor gets a slot of the connection table; the slot is its poll token and its queue key,
//! so readiness and storage completions find it without a lookup. A connection that ended leaves the poll at once
//! and the table once its storage ops (and, on the ring, its socket ops) have completed. With `[reactors] placement =
//! "incoming_cpu"` a connection whose queue's Connect arrived on another reactor's CPU leaves for that reactor
//! ([`IncomingCpuPlacement`]) once its socket ops have completed.
//!
//! Sockets are driven through the reactor's io_uring when the configuration allows it and the kernel has the ops
//! (decided once, when the reactor starts, and published in [`TcpSocketPath`]); else through epoll readiness.
//!
//! Runs on its reactor thread only; never blocks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;
use mio::net::TcpStream;
use mio::Interest;

use nvmf_config::target::SocketIoMode;

use super::placement::IncomingCpuPlacement;
use super::{ConnectionError, Initialized, SocketIo, TcpConnection, TcpTransportConfig};
use crate::backend::{IoEngine, NetCompletion, NetKind, SocketOps};
use crate::controller::{SlotId, TransportInfo};
use crate::transport::{Admitted, GroupContext, PollGroup, RETRY_AFTER};

/// A TCP connection accepted on a listener, on its way to a reactor.
#[derive(Debug)]
pub struct AcceptedConnection {
    /// The socket (non-blocking).
    pub stream: std::net::TcpStream,
    /// The peer.
    pub peer: SocketAddr,
    /// The listener's port ID (discovery log).
    pub port_id: u16,
    /// The listener's NVMe/TCP settings.
    pub tcp: Arc<TcpTransportConfig>,
    /// Its place among the listener's and the peer address's connections.
    pub admitted: Admitted,
    /// Past ICReq on another reactor, which placed it here ([`IncomingCpuPlacement`]); `None` from the listener.
    pub initialized: Option<Initialized>,
    /// Secured by TLS: the PSK identity's host and subsystem, which its Connect commands must name.
    pub tls: Option<Arc<crate::controller::SecureChannel>>,
}

/// Which way a reactor drives its NVMe/TCP sockets, for metrics: unknown until the reactor starts; and how many of
/// its sends went zero copy.
#[derive(Debug, Default)]
pub struct TcpSocketPath {
    path: AtomicU8,
    zero_copy_sends: AtomicU64,
}

impl TcpSocketPath {
    const EPOLL: u8 = 1;
    const IO_URING: u8 = 2;

    /// `io_uring`, `epoll`, or `None` before the reactor started.
    pub fn name(&self) -> Option<&'static str> {
        match self.path.load(Ordering::Relaxed) {
            Self::EPOLL => Some("epoll"),
            Self::IO_URING => Some("io_uring"),
            _ => None,
        }
    }

    fn set(&self, ring: bool) {
        self.path.store(if ring { Self::IO_URING } else { Self::EPOLL }, Ordering::Relaxed);
    }

    /// Sends that went zero copy (`[reactors] send_zero_copy_bytes`).
    pub fn zero_copy_sends(&self) -> u64 {
        self.zero_copy_sends.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct Slot {
    tcp: TcpConnection,
    /// Still registered with the poll (removed when it closes).
    registered: bool,
    /// Given back when the slot is dropped, with the connection (or handed on with it).
    admitted: Admitted,
    peer: SocketAddr,
    port_id: u16,
    config: Arc<TcpTransportConfig>,
    /// The TLS session securing it, kept for a move to another reactor.
    tls: Option<Arc<crate::controller::SecureChannel>>,
    /// The reactor it leaves for once its socket ops completed.
    moving_to: Option<usize>,
    /// Tells this connection's timer entries from those of the slot's earlier occupants.
    id: u64,
    /// The timer of its live entry in the timer heap (entries for other instants are stale).
    timer: Option<Instant>,
    /// Listed in `touched` this turn.
    touched: bool,
    /// Listed in `waiting` or `waiting_anonymous`.
    waiting: bool,
}

/// One reactor's NVMe/TCP connections (see the module docs).
///
/// A turn costs what it touches, not what the group holds: the end of a turn visits the connections this turn
/// touched (readiness, storage completions, polls), timers wait in a heap, and queued commands waiting for buffers
/// are retried every turn for admitted hosts but only every [`RETRY_AFTER`] for anonymous peers. So a thousand idle
/// or stalled peers cost a host's I/O nothing but their own timers.
#[derive(Debug)]
pub struct TcpPollGroup {
    index: usize,
    /// Connections by slot (token = queue key = slot).
    connections: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Connections served now (metrics and status read it).
    live: Arc<AtomicUsize>,
    next_id: u64,
    /// Slots touched this turn (the end of the turn writes their output, runs their transfer timers, reschedules
    /// them, drops the ones that ended).
    touched: Vec<usize>,
    /// Timers by instant: (when, connection id, slot); an entry whose connection moved its timer is stale.
    timers: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Slots whose queue has commands waiting (for a buffer or ring space): admitted hosts, retried every turn.
    waiting: Vec<usize>,
    /// The same for anonymous peers, retried every [`RETRY_AFTER`].
    waiting_anonymous: Vec<usize>,
    /// When the anonymous peers' waiting commands were last retried.
    anonymous_retried: Option<Instant>,
    /// Slots to poll this turn (reused).
    due: Vec<usize>,
    /// What the configuration allows.
    socket_io: SocketIoMode,
    /// Sockets go through the reactor's io_uring (decided in `started`).
    ring: bool,
    path: Arc<TcpSocketPath>,
    placement: Option<Arc<IncomingCpuPlacement>>,
}

impl TcpPollGroup {
    /// The NVMe/TCP group of reactor `index`, counting its connections in `live`, driving its sockets as
    /// `socket_io` allows (the choice published in `path` once the reactor starts), placing connections at Connect
    /// by `placement` if given.
    pub fn new(
        index: usize,
        live: Arc<AtomicUsize>,
        socket_io: SocketIoMode,
        path: Arc<TcpSocketPath>,
        placement: Option<Arc<IncomingCpuPlacement>>,
    ) -> Self {
        TcpPollGroup {
            index,
            connections: Vec::new(),
            free: Vec::new(),
            live,
            next_id: 0,
            touched: Vec::new(),
            timers: BinaryHeap::new(),
            waiting: Vec::new(),
            waiting_anonymous: Vec::new(),
            anonymous_retried: None,
            due: Vec::new(),
            socket_io,
            ring: false,
            path,
            placement,
        }
    }

    /// Run `f` on a live connection (touched: the end of the turn visits it); an error or a close ends the
    /// connection (its socket leaves the poll).
    fn with_connection(
        &mut self,
        slot: usize,
        cx: &mut GroupContext<'_>,
        f: impl FnOnce(&mut TcpConnection, &mut IoEngine) -> Result<bool, ConnectionError>,
    ) {
        let Some(Some(conn)) = self.connections.get_mut(slot) else { return };
        if !conn.touched {
            conn.touched = true;
            self.touched.push(slot);
        }
        self.run(slot, cx, f);
    }

    /// Run `f` on a live connection without touching it (see [`TcpPollGroup::with_connection`]).
    fn run(
        &mut self,
        slot: usize,
        cx: &mut GroupContext<'_>,
        f: impl FnOnce(&mut TcpConnection, &mut IoEngine) -> Result<bool, ConnectionError>,
    ) {
        let Some(Some(conn)) = self.connections.get_mut(slot) else { return };
        if conn.tcp.is_closed() && !conn.registered {
            return;
        }
        let open = match f(&mut conn.tcp, cx.engine) {
            Ok(open) => open,
            Err(e) => {
                tracing::debug!(reactor = self.index, error = %e, "connection ended");
                false
            }
        };
        if (!open || conn.tcp.is_closed()) && conn.registered {
            let _ = cx.registry.deregister(conn.tcp.stream_mut());
            conn.registered = false;
        }
    }

    /// Slots in `list` whose connection still waits, moved to `self.due` (flags cleared: a poll re-lists them).
    fn take_waiting(connections: &mut [Option<Slot>], list: &mut Vec<usize>, due: &mut Vec<usize>) {
        for slot in list.drain(..) {
            if let Some(Some(conn)) = connections.get_mut(slot) {
                if conn.waiting {
                    conn.waiting = false;
                    due.push(slot);
                }
            }
        }
    }

    /// End of turn for one touched connection: output, transfer timer, reschedule; drop it if it ended and drained.
    fn settle(&mut self, slot: usize, cx: &mut GroupContext<'_>) {
        let wants = matches!(&self.connections[slot], Some(c) if c.tcp.wants_write());
        if wants {
            // What the socket does not take now waits for its writable event.
            self.run(slot, cx, TcpConnection::on_writable);
        }
        self.place(slot, cx);
        let Some(conn) = self.connections[slot].as_mut() else { return };
        conn.touched = false;
        conn.tcp.note_turn(cx.now);
        if conn.tcp.is_closed() && conn.tcp.in_flight() == 0 {
            if let Some(mut c) = self.connections[slot].take() {
                if c.registered {
                    let _ = cx.registry.deregister(c.tcp.stream_mut());
                }
                self.free.push(slot);
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
            return;
        }
        // A timer already due was just polled and waits for an event (a closing queue's storage completions). One
        // scheduled earlier than the connection's timer stays: it fires, polls in vain and reschedules, so a
        // deadline that moves later each turn (a transfer in progress, keep-alive) costs no heap push.
        match (conn.timer, conn.tcp.next_timer().filter(|&t| t > cx.now)) {
            (Some(scheduled), Some(t)) if scheduled <= t => {}
            (_, Some(t)) => {
                conn.timer = Some(t);
                self.timers.push(Reverse((t, conn.id, slot)));
            }
            (_, None) => {}
        }
        if conn.tcp.wants_poll() && !conn.waiting {
            conn.waiting = true;
            match conn.tcp.is_anonymous() {
                true => self.waiting_anonymous.push(slot),
                false => self.waiting.push(slot),
            }
        }
        // Stale entries (connections gone, or rescheduled earlier) leave the heap when they reach its top; bound
        // them anyway.
        if self.timers.len() > 2 * self.connections.len() + 64 {
            let connections = &self.connections;
            self.timers.retain(
                |&Reverse((t, id, s))| matches!(connections.get(s), Some(Some(c)) if c.id == id && c.timer == Some(t)),
            );
        }
    }

    /// A connection whose Connect arrived: served here, or handed to the reactor on the CPU it arrived on once its
    /// socket ops have completed (until then it waits, reading held; the last completion touches it again).
    fn place(&mut self, slot: usize, cx: &mut GroupContext<'_>) {
        let Some(conn) = self.connections[slot].as_mut() else { return };
        if !conn.tcp.awaits_placement() {
            return;
        }
        if conn.moving_to.is_none() {
            let to = self.placement.as_ref().and_then(|p| p.reactor_for(conn.tcp.stream(), self.index));
            match to {
                Some(to) => conn.moving_to = Some(to),
                None => return self.run(slot, cx, TcpConnection::place_here),
            }
        }
        let Some(placement) = self.placement.clone().filter(|_| conn.tcp.can_leave()) else { return };
        let Some(mut c) = self.connections[slot].take() else { return };
        if c.registered {
            let _ = cx.registry.deregister(c.tcp.stream_mut());
        }
        self.free.push(slot);
        self.live.fetch_sub(1, Ordering::Relaxed);
        let to = c.moving_to.unwrap_or(self.index);
        let Some((stream, initialized)) = c.tcp.into_initialized(cx.engine) else { return };
        let moved = AcceptedConnection {
            stream: stream.into(),
            peer: c.peer,
            port_id: c.port_id,
            tcp: c.config,
            admitted: c.admitted,
            initialized: Some(initialized),
            tls: c.tls,
        };
        tracing::debug!(reactor = self.index, to, traddr = %moved.peer, "connection moves to the reactor on its CPU");
        if !placement.hand_off(to, moved) {
            tracing::debug!(reactor = self.index, to, "connection closed: the reactor on its CPU has stopped");
        }
    }

    /// The earliest live timer entry, dropping stale ones from the top of the heap.
    fn earliest_timer(&mut self) -> Option<(Instant, usize)> {
        while let Some(&Reverse((t, id, slot))) = self.timers.peek() {
            match self.connections.get(slot) {
                Some(Some(c)) if c.id == id && c.timer == Some(t) => return Some((t, slot)),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }
}

impl PollGroup for TcpPollGroup {
    type QueuePair = AcceptedConnection;

    fn started(&mut self, cx: &mut GroupContext<'_>) {
        let why_not = match self.socket_io {
            SocketIoMode::Epoll => Some("socket_io = \"epoll\""),
            SocketIoMode::IoUring => match cx.engine.start_socket_io() {
                SocketOps::Missing(op) => Some(op),
                SocketOps::Supported => None,
            },
        };
        self.ring = why_not.is_none();
        self.path.set(self.ring);
        match why_not {
            None => tracing::info!(
                reactor = self.index,
                zero_copy_sends = cx.engine.zero_copy_supported(),
                "NVMe/TCP sockets through io_uring"
            ),
            Some(reason) => tracing::info!(reactor = self.index, reason, "NVMe/TCP sockets through epoll"),
        }
    }

    fn network_completed(&mut self, completion: NetCompletion, cx: &mut GroupContext<'_>) {
        let Ok(slot) = usize::try_from(completion.tag) else { return };
        let Some(Some(conn)) = self.connections.get_mut(slot) else {
            tracing::error!(reactor = self.index, slot, "socket completion for no connection");
            if let Some(chunk) = completion.received {
                cx.engine.recycle_received(chunk);
            }
            return;
        };
        if !conn.touched {
            conn.touched = true;
            self.touched.push(slot);
        }
        if completion.kind == NetKind::Send {
            // The reactor's own counter, published for the metrics (one writer: a plain store).
            self.path.zero_copy_sends.store(cx.engine.zero_copy_sends(), Ordering::Relaxed);
        }
        // Not through `run`: a closed connection still takes its last completions (and its buffer back).
        if let Err(e) = conn.tcp.net_completed(cx.engine, completion) {
            tracing::debug!(reactor = self.index, error = %e, "connection ended");
        }
    }

    fn accept(&mut self, accepted: AcceptedConnection, cx: &mut GroupContext<'_>) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        let local = accepted.stream.local_addr().ok().map(|a| a.ip());
        let mut stream = TcpStream::from_std(accepted.stream);
        let _ = stream.set_nodelay(true);
        let key = u32::try_from(slot).unwrap_or(u32::MAX);
        let io = if self.ring { SocketIo::IoUring(cx.net_tag(key)) } else { SocketIo::Epoll };
        let registered = match self.ring {
            true => Ok(()),
            false => cx.registry.register(&mut stream, cx.token(key), Interest::READABLE | Interest::WRITABLE),
        };
        if let Err(e) = registered {
            tracing::warn!(reactor = self.index, traddr = %accepted.peer, error = %e, "cannot register connection");
            self.free.push(slot);
            return;
        }
        let mut info = TransportInfo::tcp(accepted.port_id, accepted.tcp.in_capsule_data_size, 0);
        info.local_address = local;
        info.peer_address = Some(accepted.peer);
        info.secure_channel.clone_from(&accepted.tls);
        let queue = cx.new_queue(info, key);
        tracing::debug!(reactor = self.index, traddr = %accepted.peer, slot, "connection accepted");
        let mut tcp = TcpConnection::new(stream, queue, &accepted.tcp, io);
        if accepted.tls.is_some() {
            // kTLS encrypts into records of its own: a zero-copy send would save nothing, and is not its to take.
            tcp.copy_sends();
        }
        let resumed = match accepted.initialized {
            Some(initialized) => tcp.resume(cx.engine, initialized),
            None => {
                if self.placement.is_some() {
                    tcp.place_at_connect();
                }
                tcp.start(cx.engine);
                Ok(true)
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let conn = Slot {
            tcp,
            registered: !self.ring,
            admitted: accepted.admitted,
            peer: accepted.peer,
            port_id: accepted.port_id,
            config: accepted.tcp,
            tls: accepted.tls,
            moving_to: None,
            id,
            timer: None,
            touched: true,
            waiting: false,
        };
        self.connections[slot] = Some(conn);
        // Touched: the end of this turn schedules its Connect deadline.
        self.touched.push(slot);
        self.live.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = resumed {
            tracing::debug!(reactor = self.index, error = %e, "connection ended");
            self.run(slot, cx, |_, _| Ok(false));
        }
    }

    fn ready(&mut self, token: u64, event: &Event, cx: &mut GroupContext<'_>) {
        let Ok(slot) = usize::try_from(token) else { return };
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            let hung_up = event.is_read_closed() || event.is_error();
            self.with_connection(slot, cx, |c, engine| c.on_read_event(engine, hung_up));
        }
        if event.is_writable() {
            self.with_connection(slot, cx, TcpConnection::on_writable);
        }
    }

    fn storage_completed(
        &mut self,
        queue_key: u64,
        slot: SlotId,
        result: Result<u32, std::io::Error>,
        cx: &mut GroupContext<'_>,
    ) {
        let Ok(key) = usize::try_from(queue_key) else { return };
        if !matches!(self.connections.get(key), Some(Some(_))) {
            tracing::error!(reactor = self.index, queue_key, "storage completion for no connection");
            return;
        }
        // Not through `run`: a connection closed while its storage ops were in flight (the peer went away, the
        // association ended) is deregistered, and still needs their completions to free its slots and leave.
        let Some(Some(conn)) = self.connections.get_mut(key) else { return };
        if !conn.touched {
            conn.touched = true;
            self.touched.push(key);
        }
        conn.tcp.io_completed(cx.engine, slot, result);
        if conn.tcp.is_closed() && conn.registered {
            let _ = cx.registry.deregister(conn.tcp.stream_mut());
            conn.registered = false;
        }
    }

    fn poll(&mut self, cx: &mut GroupContext<'_>, notified: bool) -> bool {
        let now = cx.now;
        let mut due = std::mem::take(&mut self.due);
        if notified {
            due.extend((0..self.connections.len()).filter(|&s| self.connections[s].is_some()));
        } else {
            while let Some((t, slot)) = self.earliest_timer() {
                if t > now {
                    break;
                }
                self.timers.pop();
                if let Some(Some(c)) = self.connections.get_mut(slot) {
                    c.timer = None;
                }
                due.push(slot);
            }
            Self::take_waiting(&mut self.connections, &mut self.waiting, &mut due);
            if self.anonymous_retried.is_none_or(|at| now >= at + RETRY_AFTER) && !self.waiting_anonymous.is_empty() {
                self.anonymous_retried = Some(now);
                Self::take_waiting(&mut self.connections, &mut self.waiting_anonymous, &mut due);
            }
        }
        let polled = !due.is_empty();
        for &slot in &due {
            self.with_connection(slot, cx, |c, engine| c.poll(engine, now).map(|()| true));
        }
        due.clear();
        self.due = due;
        polled
    }

    /// Write queued output of the connections touched this turn, run their transfer timers, reschedule them and
    /// drop those that ended and have nothing in flight.
    fn end_turn(&mut self, cx: &mut GroupContext<'_>) -> bool {
        let mut touched = std::mem::take(&mut self.touched);
        for &slot in &touched {
            self.settle(slot, cx);
        }
        touched.clear();
        self.touched = touched;
        false
    }

    /// The earliest queue timer; [`RETRY_AFTER`] from now while an admitted host's commands wait, and from the
    /// last retry while an anonymous peer's do.
    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let timer = self.timers.peek().map(|&Reverse((t, _, _))| t.max(now));
        let retry = (!self.waiting.is_empty()).then_some(now + RETRY_AFTER);
        let anonymous =
            (!self.waiting_anonymous.is_empty()).then(|| self.anonymous_retried.map_or(now, |at| at + RETRY_AFTER));
        timer.into_iter().chain(retry).chain(anonymous).min()
    }

    fn shutdown(&mut self, cx: &mut GroupContext<'_>) {
        for slot in 0..self.connections.len() {
            self.with_connection(slot, cx, |c, engine| {
                c.shutdown(engine);
                Ok(false)
            });
        }
    }

    fn is_empty(&self) -> bool {
        self.connections.iter().all(Option::is_none)
    }

    fn remaining(&self) -> Vec<String> {
        let described = self.connections.iter().flatten().map(|c| c.tcp.describe(c.registered));
        described.collect()
    }
}
