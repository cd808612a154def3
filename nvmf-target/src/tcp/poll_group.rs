//! [`TcpPollGroup`]: one reactor's NVMe/TCP connections, the TCP side of the [`PollGroup`] boundary. A connection
//! handed over by the acceptor gets a slot of the connection table; the slot is its poll token and its queue key,
//! so readiness and storage completions find it without a lookup. A connection that ended leaves the poll at once
//! and the table once its storage ops have completed.
//!
//! Runs on its reactor thread only; never blocks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;
use mio::net::TcpStream;
use mio::Interest;

use super::{ConnectionError, TcpConnection, TcpTransportConfig};
use crate::backend::IoEngine;
use crate::controller::{SlotId, TransportInfo};
use crate::transport::{Admitted, GroupContext, PollGroup};

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
}

#[derive(Debug)]
struct Slot {
    tcp: TcpConnection,
    /// Still registered with the poll (removed when it closes).
    registered: bool,
    /// Given back when the slot is dropped, with the connection.
    _admitted: Admitted,
}

/// One reactor's NVMe/TCP connections (see the module docs).
#[derive(Debug)]
pub struct TcpPollGroup {
    index: usize,
    /// Connections by slot (token = queue key = slot).
    connections: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Connections served now (metrics and status read it).
    live: Arc<AtomicUsize>,
}

impl TcpPollGroup {
    /// The NVMe/TCP group of reactor `index`, counting its connections in `live`.
    pub fn new(index: usize, live: Arc<AtomicUsize>) -> Self {
        TcpPollGroup { index, connections: Vec::new(), free: Vec::new(), live }
    }

    /// Run `f` on a live connection; an error or a close ends the connection (its socket leaves the poll).
    fn with_connection(
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
                tracing::info!(reactor = self.index, error = %e, "connection ended");
                false
            }
        };
        if (!open || conn.tcp.is_closed()) && conn.registered {
            let _ = cx.registry.deregister(conn.tcp.stream_mut());
            conn.registered = false;
        }
    }
}

impl PollGroup for TcpPollGroup {
    type QueuePair = AcceptedConnection;

    fn accept(&mut self, accepted: AcceptedConnection, cx: &mut GroupContext<'_>) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        let local = accepted.stream.local_addr().ok().map(|a| a.ip());
        let mut stream = TcpStream::from_std(accepted.stream);
        let _ = stream.set_nodelay(true);
        let key = u32::try_from(slot).unwrap_or(u32::MAX);
        if let Err(e) = cx.registry.register(&mut stream, cx.token(key), Interest::READABLE | Interest::WRITABLE) {
            tracing::warn!(reactor = self.index, peer = %accepted.peer, error = %e, "cannot register connection");
            self.free.push(slot);
            return;
        }
        let mut info = TransportInfo::tcp(accepted.port_id, accepted.tcp.in_capsule_data_size, 0);
        info.local_address = local;
        let queue = cx.new_queue(info, key);
        tracing::debug!(reactor = self.index, peer = %accepted.peer, slot, "connection accepted");
        let tcp = TcpConnection::new(stream, queue, &accepted.tcp);
        self.connections[slot] = Some(Slot { tcp, registered: true, _admitted: accepted.admitted });
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    fn ready(&mut self, token: u64, event: &Event, cx: &mut GroupContext<'_>) {
        let Ok(slot) = usize::try_from(token) else { return };
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            self.with_connection(slot, cx, TcpConnection::on_readable);
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
        let Some(Some(conn)) = usize::try_from(queue_key).ok().and_then(|k| self.connections.get_mut(k)) else {
            tracing::error!(reactor = self.index, queue_key, "storage completion for no connection");
            return;
        };
        conn.tcp.io_completed(cx.engine, slot, result);
    }

    fn poll(&mut self, cx: &mut GroupContext<'_>, all: bool) -> bool {
        let now = cx.now;
        let mut polled = false;
        for slot in 0..self.connections.len() {
            if all || matches!(&self.connections[slot], Some(c) if c.tcp.wants_poll()) {
                self.with_connection(slot, cx, |c, engine| c.poll(engine, now).map(|()| true));
                polled = true;
            }
        }
        polled
    }

    /// Write queued output of every connection, run their transfer timers and drop connections that ended and
    /// have nothing in flight.
    fn end_turn(&mut self, cx: &mut GroupContext<'_>) -> bool {
        for slot in 0..self.connections.len() {
            let wants = matches!(&self.connections[slot], Some(c) if c.tcp.wants_write());
            if wants {
                self.with_connection(slot, cx, TcpConnection::on_writable);
            }
            if let Some(c) = self.connections[slot].as_mut() {
                c.tcp.note_turn(cx.now);
            }
            let done = matches!(&self.connections[slot], Some(c) if c.tcp.is_closed() && c.tcp.in_flight() == 0);
            if done {
                if let Some(mut c) = self.connections[slot].take() {
                    if c.registered {
                        let _ = cx.registry.deregister(c.tcp.stream_mut());
                    }
                    self.free.push(slot);
                    self.live.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        false
    }

    /// The earliest queue timer still ahead (one this turn ran and left behind waits for an event, such as the
    /// storage completions a closing queue needs); [`RETRY_AFTER`](crate::reactor::RETRY_AFTER) from now while a
    /// queue still has work waiting.
    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let live = self.connections.iter().flatten();
        let retry = live.clone().any(|c| c.tcp.wants_poll()).then_some(now + crate::reactor::RETRY_AFTER);
        live.filter_map(|c| c.tcp.next_timer()).filter(|&t| t > now).chain(retry).min()
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
}
