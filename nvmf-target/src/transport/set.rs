//! [`TransportSet`]: the poll group a daemon's reactor runs, one member per transport built in (NVMe/TCP always,
//! NVMe/RDMA with the `rdma` feature), and [`NewQueuePair`], what the transports' listener threads hand to a
//! reactor. Routing by space is a `match` over the closed set of transports: no dynamic dispatch per event or per
//! storage completion.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;

use super::{split, GroupContext, PollGroup};
use crate::backend::NetCompletion;
use crate::controller::SlotId;
#[cfg(feature = "rdma")]
use crate::rdma::{RdmaAccepted, RdmaCounters, RdmaPollGroup};
use crate::reactor::ReactorHandle;
use crate::tcp::placement::IncomingCpuPlacement;
use crate::tcp::{AcceptedConnection, TcpPollGroup, TcpSocketPath};
use nvmf_config::target::SocketIoMode;

/// The space of NVMe/TCP's tokens and queue keys.
const TCP: u64 = 0;
/// The space of NVMe/RDMA's tokens and queue keys.
#[cfg(feature = "rdma")]
const RDMA: u64 = 1;

/// A queue pair on its way from a transport's listener thread to a reactor.
#[derive(Debug)]
pub enum NewQueuePair {
    /// A TCP connection the acceptor accepted.
    Tcp(AcceptedConnection),
    /// An RDMA CM connect request the CM thread validated.
    #[cfg(feature = "rdma")]
    Rdma(RdmaAccepted),
}

impl From<AcceptedConnection> for NewQueuePair {
    fn from(connection: AcceptedConnection) -> Self {
        NewQueuePair::Tcp(connection)
    }
}

#[cfg(feature = "rdma")]
impl From<RdmaAccepted> for NewQueuePair {
    fn from(request: RdmaAccepted) -> Self {
        NewQueuePair::Rdma(request)
    }
}

/// One reactor's transport counters (single writer: the reactor; read by metrics and status at any time).
#[derive(Debug, Clone, Default)]
pub struct TransportCounters {
    /// NVMe/TCP connections served now.
    pub tcp_connections: Arc<AtomicUsize>,
    /// How the reactor's NVMe/TCP sockets are driven, once it has started ([`TcpSocketPath`]).
    pub tcp_socket_path: Arc<TcpSocketPath>,
    /// The reactor's data buffers: (free, total) at the end of its last turn.
    pub buffers: Arc<BufferGauge>,
    /// NVMe/RDMA work requests, completions and queue pairs.
    #[cfg(feature = "rdma")]
    pub rdma: Arc<RdmaCounters>,
}

impl TransportCounters {
    /// Queue pairs served now: NVMe/TCP connections and NVMe/RDMA queue pairs.
    pub fn queue_pairs(&self) -> usize {
        let pairs = self.tcp_connections.load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(feature = "rdma")]
        let pairs = pairs.saturating_add(usize::try_from(self.rdma.queue_pairs()).unwrap_or(usize::MAX));
        pairs
    }
}

/// A reactor's data buffers, published once per turn (one relaxed store; never per command).
#[derive(Debug, Default)]
pub struct BufferGauge {
    /// Buffers free in the pool.
    pub free: AtomicUsize,
    /// Buffers in the pool.
    pub total: AtomicUsize,
}

/// Every transport's poll group of one reactor (see the module docs).
#[derive(Debug)]
pub struct TransportSet {
    buffers: Arc<BufferGauge>,
    tcp: TcpPollGroup,
    // Dropped before the engine with the reactor: its queue pairs name the pool's memory region.
    #[cfg(feature = "rdma")]
    rdma: RdmaPollGroup,
}

impl TransportSet {
    /// The poll groups of reactor `index`, counting into `counters`; NVMe/TCP sockets on the ring when `socket_io`
    /// says so (and the kernel has the ops), NVMe/TCP connections placed at Connect by `placement` if given.
    pub fn new(
        index: usize,
        counters: &TransportCounters,
        socket_io: SocketIoMode,
        placement: Option<Arc<IncomingCpuPlacement>>,
    ) -> Self {
        TransportSet {
            buffers: Arc::clone(&counters.buffers),
            tcp: TcpPollGroup::new(
                index,
                Arc::clone(&counters.tcp_connections),
                socket_io,
                Arc::clone(&counters.tcp_socket_path),
                placement,
            ),
            #[cfg(feature = "rdma")]
            rdma: RdmaPollGroup::new(index, Arc::clone(&counters.rdma)),
        }
    }
}

impl PollGroup for TransportSet {
    type QueuePair = NewQueuePair;

    fn accept(&mut self, queue_pair: NewQueuePair, cx: &mut GroupContext<'_>) {
        match queue_pair {
            NewQueuePair::Tcp(connection) => self.tcp.accept(connection, &mut cx.within(TCP)),
            #[cfg(feature = "rdma")]
            NewQueuePair::Rdma(request) => self.rdma.accept(request, &mut cx.within(RDMA)),
        }
    }

    fn started(&mut self, cx: &mut GroupContext<'_>) {
        self.tcp.started(&mut cx.within(TCP));
    }

    fn network_completed(&mut self, mut completion: NetCompletion, cx: &mut GroupContext<'_>) {
        match split(completion.tag) {
            (TCP, local) => {
                completion.tag = local;
                self.tcp.network_completed(completion, &mut cx.within(TCP));
            }
            (space, local) => tracing::error!(space, local, "socket completion for no transport"),
        }
    }

    fn ready(&mut self, token: u64, event: &Event, cx: &mut GroupContext<'_>) {
        match split(token) {
            (TCP, local) => self.tcp.ready(local, event, &mut cx.within(TCP)),
            #[cfg(feature = "rdma")]
            (RDMA, local) => self.rdma.ready(local, event, &mut cx.within(RDMA)),
            (space, local) => tracing::error!(space, local, "readiness for no transport"),
        }
    }

    fn storage_completed(
        &mut self,
        queue_key: u64,
        slot: SlotId,
        result: Result<u32, io::Error>,
        cx: &mut GroupContext<'_>,
    ) {
        match split(queue_key) {
            (TCP, key) => self.tcp.storage_completed(key, slot, result, &mut cx.within(TCP)),
            #[cfg(feature = "rdma")]
            (RDMA, key) => self.rdma.storage_completed(key, slot, result, &mut cx.within(RDMA)),
            (space, key) => tracing::error!(space, key, "storage completion for no transport"),
        }
    }

    fn poll(&mut self, cx: &mut GroupContext<'_>, notified: bool) -> bool {
        let polled = self.tcp.poll(&mut cx.within(TCP), notified);
        #[cfg(feature = "rdma")]
        let polled = self.rdma.poll(&mut cx.within(RDMA), notified) | polled;
        polled
    }

    fn end_turn(&mut self, cx: &mut GroupContext<'_>) -> bool {
        let busy = self.tcp.end_turn(&mut cx.within(TCP));
        #[cfg(feature = "rdma")]
        let busy = self.rdma.end_turn(&mut cx.within(RDMA)) | busy;
        let pool = cx.engine.pool();
        self.buffers.free.store(pool.available(), Ordering::Relaxed);
        self.buffers.total.store(pool.capacity(), Ordering::Relaxed);
        busy
    }

    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let tcp = self.tcp.next_timer(now);
        #[cfg(feature = "rdma")]
        let tcp = tcp.into_iter().chain(self.rdma.next_timer(now)).min();
        tcp
    }

    fn shutdown(&mut self, cx: &mut GroupContext<'_>) {
        self.tcp.shutdown(&mut cx.within(TCP));
        #[cfg(feature = "rdma")]
        self.rdma.shutdown(&mut cx.within(RDMA));
    }

    fn is_empty(&self) -> bool {
        #[cfg(feature = "rdma")]
        if !self.rdma.is_empty() {
            return false;
        }
        self.tcp.is_empty()
    }

    fn remaining(&self) -> Vec<String> {
        #[cfg_attr(not(feature = "rdma"), expect(unused_mut, reason = "only RDMA adds to the list"))]
        let mut left = self.tcp.remaining();
        #[cfg(feature = "rdma")]
        left.extend(self.rdma.remaining());
        left
    }
}

/// What a listener thread calls with each new queue pair: hands it to the next of `reactors` in turn, or gives it
/// back when there is none.
pub fn round_robin<T: Into<NewQueuePair>>(
    reactors: &Arc<Vec<ReactorHandle<NewQueuePair>>>,
) -> impl FnMut(T) -> Result<(), T> + Send + 'static {
    let reactors = Arc::clone(reactors);
    let mut next = 0usize;
    move |queue_pair| {
        let Some(reactor) = reactors.get(next % reactors.len().max(1)) else { return Err(queue_pair) };
        next = next.wrapping_add(1);
        reactor.accept(queue_pair.into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::TransportCounters;

    #[test]
    fn queue_pairs_count_both_transports() {
        let counters = TransportCounters::default();
        counters.tcp_connections.store(2, Ordering::Relaxed);
        assert_eq!(counters.queue_pairs(), 2);
        #[cfg(feature = "rdma")]
        {
            counters.rdma.queue_pair_created();
            assert_eq!(counters.queue_pairs(), 3, "an RDMA-only target's status line counts its queue pairs");
        }
    }
}
