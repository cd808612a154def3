//! Reactors: the data-path threads. Each reactor owns one `mio::Poll`, one [`IoEngine`] (io_uring + buffer pool)
//! and the TCP connections handed to it; after the hand-over a connection's commands touch no lock and no other
//! thread. A reactor sleeps in `epoll_wait` on its sockets, its engine's eventfd and a waker (new connections,
//! asynchronous events from other threads, shutdown), and never blocks anywhere else.
//!
//! One turn: handle socket readiness (read, decode, execute, queue output), submit every storage op queued during the
//! turn with one `io_uring_enter`, reap completions and turn them into responses, poll the queues that have work
//! waiting (commands that waited for a buffer or ring space; again after `RETRY_AFTER` if they still wait), flush
//! output. The reactor sleeps until an event or its queues' earliest timer: a keep-alive deadline (KATO after an admin
//! queue's last command), on RDMA a closing queue pair's flush bound; at a timer, or when a queue's notifier fired (an
//! asynchronous event for a held AER, an association ended or reset by another reactor's queue), it polls every queue.
//! With no timer it sleeps until woken. A connection that ended stays until its storage ops have completed, so the
//! kernel never writes into a buffer we reused.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::backend::{EngineConfig, IoCompletion, IoEngine};
use crate::controller::{split_storage_tag, EventNotifier, Queue, Target, TransportInfo};
#[cfg(feature = "rdma")]
use crate::rdma::reactor::RdmaReactor;
#[cfg(feature = "rdma")]
use crate::rdma::{RdmaAccepted, RdmaCounters};
use crate::tcp::{TcpConnection, TcpTransportConfig};

const WAKER: Token = Token(0);
const ENGINE: Token = Token(1);
const FIRST_CONNECTION: usize = 2;

/// When a queue's waiting commands are retried at the latest. They are retried at the end of every turn, but what
/// frees their buffer or ring space may come later in the turn (a response written; on RDMA a send completion
/// reaped) with no event after it.
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(10);

/// Errors starting a reactor.
#[derive(Debug, thiserror::Error)]
pub enum ReactorError {
    /// The I/O engine could not be created.
    #[error("reactor {index}: I/O engine: {source}")]
    Engine {
        /// Reactor index.
        index: usize,
        /// Cause.
        #[source]
        source: crate::backend::BackendError,
    },
    /// epoll / eventfd / thread creation failed.
    #[error("reactor {index}: {what}: {source}")]
    Os {
        /// Reactor index.
        index: usize,
        /// What failed.
        what: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// What a reactor needs to know.
#[derive(Debug, Clone)]
pub struct ReactorConfig {
    /// Reactor index (thread name, logs).
    pub index: usize,
    /// CPU to pin the thread to.
    pub cpu: Option<usize>,
    /// The I/O engine's ring and buffer pool.
    pub engine: EngineConfig,
}

/// A TCP connection accepted on a listener.
#[derive(Debug)]
pub struct Accepted {
    /// The socket (non-blocking).
    pub stream: std::net::TcpStream,
    /// The peer.
    pub peer: SocketAddr,
    /// The listener's port ID (discovery log).
    pub port_id: u16,
    /// The listener's NVMe/TCP settings.
    pub tcp: Arc<TcpTransportConfig>,
}

enum Message {
    Accept(Accepted),
    #[cfg(feature = "rdma")]
    AcceptRdma(RdmaAccepted),
    Shutdown,
}

/// The control side of a running reactor.
#[derive(Debug)]
pub struct ReactorHandle {
    tx: Sender<Message>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    #[cfg(feature = "rdma")]
    rdma_counters: Arc<RdmaCounters>,
}

impl ReactorHandle {
    /// Start a reactor thread serving `target`. Returns once the thread's engine is up (so a configuration error
    /// surfaces here, not later).
    pub fn spawn(config: ReactorConfig, target: Arc<Target>) -> Result<Self, ReactorError> {
        let index = config.index;
        let os = |what| move |source| ReactorError::Os { index, what, source };
        let poll = Poll::new().map_err(os("epoll"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(os("waker"))?);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let thread_waker = Arc::clone(&waker);
        let thread_connections = Arc::clone(&connections);
        #[cfg(feature = "rdma")]
        let rdma_counters = Arc::new(RdmaCounters::default());
        #[cfg(feature = "rdma")]
        let thread_rdma = crate::rdma::reactor::RdmaReactor::new(index, Arc::clone(&rdma_counters));
        let thread = std::thread::Builder::new()
            .name(format!("nvmf-reactor-{index}"))
            .spawn(move || {
                if let Some(cpu) = config.cpu {
                    if let Err(error) = nvmf_service::cpus::pin_current_thread(cpu) {
                        tracing::warn!(cpu, %error, "could not pin reactor thread");
                    }
                }
                let engine = match IoEngine::new(&config.engine) {
                    Ok(engine) => engine,
                    Err(source) => {
                        let _ = ready_tx.send(Err(ReactorError::Engine { index, source }));
                        return;
                    }
                };
                let mut reactor = match Reactor::new(
                    index,
                    poll,
                    engine,
                    target,
                    rx,
                    thread_waker,
                    thread_connections,
                    #[cfg(feature = "rdma")]
                    thread_rdma,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                reactor.run();
            })
            .map_err(os("thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(ReactorError::Os { index, what: "thread", source: io::Error::other("reactor died") }),
        }
        Ok(ReactorHandle {
            tx,
            waker,
            thread: Some(thread),
            connections,
            #[cfg(feature = "rdma")]
            rdma_counters,
        })
    }

    /// Hand a validated NVMe/RDMA connect request to this reactor (it accepts or rejects it).
    #[cfg(feature = "rdma")]
    pub fn accept_rdma(&self, accepted: RdmaAccepted) {
        if self.tx.send(Message::AcceptRdma(accepted)).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// This reactor's NVMe/RDMA counters (metrics read them at scrape time).
    #[cfg(feature = "rdma")]
    pub fn rdma_counters(&self) -> Arc<RdmaCounters> {
        Arc::clone(&self.rdma_counters)
    }

    /// Hand an accepted connection to this reactor.
    pub fn accept(&self, accepted: Accepted) {
        if self.tx.send(Message::Accept(accepted)).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Connections this reactor serves now.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// The counter behind [`ReactorHandle::connections`] (metrics read it at scrape time).
    pub fn connection_counter(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        Arc::clone(&self.connections)
    }

    /// Close every connection, wait for storage ops in flight, and end the thread.
    pub fn shutdown(mut self) {
        let _ = self.tx.send(Message::Shutdown);
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Connection {
    tcp: TcpConnection,
    /// Still registered with the poll (removed when it closes).
    registered: bool,
}

struct Reactor {
    index: usize,
    poll: Poll,
    // Before `engine`: RDMA queue pairs and the pool's memory region are dropped before the pool.
    #[cfg(feature = "rdma")]
    rdma: RdmaReactor,
    engine: IoEngine,
    target: Arc<Target>,
    rx: Receiver<Message>,
    waker: Arc<Waker>,
    /// Connections by slot (token = FIRST_CONNECTION + slot, queue key = slot).
    connections: Vec<Option<Connection>>,
    free: Vec<usize>,
    live: Arc<std::sync::atomic::AtomicUsize>,
    /// Set by other threads (AER events) to make the next turn run every queue's `poll`.
    poll_queues: Arc<AtomicBool>,
    completions: Vec<IoCompletion>,
    shutting_down: bool,
}

impl Reactor {
    #[allow(clippy::too_many_arguments)] // the parts of a reactor, moved into it once
    fn new(
        index: usize,
        poll: Poll,
        engine: IoEngine,
        target: Arc<Target>,
        rx: Receiver<Message>,
        waker: Arc<Waker>,
        live: Arc<std::sync::atomic::AtomicUsize>,
        #[cfg(feature = "rdma")] rdma: RdmaReactor,
    ) -> Result<Self, ReactorError> {
        let fd = engine.event_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), ENGINE, Interest::READABLE)
            .map_err(|source| ReactorError::Os { index, what: "register eventfd", source })?;
        Ok(Reactor {
            index,
            poll,
            #[cfg(feature = "rdma")]
            rdma,
            engine,
            target,
            rx,
            waker,
            connections: Vec::new(),
            free: Vec::new(),
            live,
            poll_queues: Arc::new(AtomicBool::new(false)),
            completions: Vec::with_capacity(1024),
            shutting_down: false,
        })
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut now = Instant::now();
        // The earliest timer of any queue here (keep-alive deadlines; RDMA: a closing queue pair's flush bound).
        let mut next_timer: Option<Instant> = None;
        // The RDMA side found completions at the end of the last turn: turn again without sleeping.
        #[cfg_attr(not(feature = "rdma"), allow(unused_mut))] // only RDMA polls at the end of a turn
        let mut busy = false;
        loop {
            // The clock is read once per turn, when the poll returns (a syscall where the vDSO cannot read it, as
            // in TCG guests): the timers and the commands' latencies (`set_turn_time`) use that reading.
            let timeout = if busy {
                Some(Duration::ZERO)
            } else {
                // Without a timer only an event has work for this thread: a socket, a completion, or the waker
                // (a new connection, a queue's notifier, shutdown).
                next_timer.map(|t| t.saturating_duration_since(now))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(reactor = self.index, error = %e, "epoll failed; reactor stops");
                    return;
                }
            }
            now = Instant::now();
            crate::controller::queue::set_turn_time(now);
            for event in events.iter() {
                match event.token() {
                    WAKER => self.drain_messages(),
                    // mio polls edge-triggered: every completion the ring (or the engine) signals is a new edge
                    // whether or not the counter was read, so reading it would only cost a syscall per completion.
                    ENGINE => {}
                    #[cfg(feature = "rdma")]
                    token if RdmaReactor::owns_token(token) => self.rdma.ready(token, &mut self.engine),
                    Token(t) => {
                        let slot = t - FIRST_CONNECTION;
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.with_connection(slot, |c, engine| c.tcp.on_readable(engine));
                        }
                        if event.is_writable() {
                            self.with_connection(slot, |c, engine| c.tcp.on_writable(engine));
                        }
                    }
                }
            }
            self.complete_storage();
            // Every queue at a timer or when a notifier fired; otherwise only those with work waiting on this
            // turn (commands that waited for a buffer or ring space).
            let all = next_timer.is_some_and(|t| now >= t) | self.poll_queues.swap(false, Ordering::AcqRel);
            let mut polled = false;
            for slot in 0..self.connections.len() {
                if all || matches!(&self.connections[slot], Some(c) if c.tcp.wants_poll()) {
                    self.with_connection(slot, |c, engine| c.tcp.poll(engine, now).map(|()| true));
                    polled = true;
                }
            }
            #[cfg(feature = "rdma")]
            {
                polled |= self.rdma.poll(&mut self.engine, now, all);
            }
            if polled {
                self.complete_storage();
            }
            self.flush_and_reap();
            #[cfg(feature = "rdma")]
            {
                busy = self.rdma.flush_and_reap(&mut self.engine, now);
            }
            if self.shutting_down && !self.has_connections() {
                tracing::debug!(reactor = self.index, "reactor stopped");
                return;
            }
            next_timer = self.next_timer(now);
        }
    }

    /// The earliest timer of this reactor's queues still ahead (see [`Reactor::run`]; one this turn ran and left
    /// behind waits for an event, such as the storage completions a closing queue needs); [`RETRY_AFTER`] from
    /// now while a queue still has work waiting.
    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let live = self.connections.iter().flatten();
        let retry = live.clone().any(|c| c.tcp.wants_poll()).then_some(now + RETRY_AFTER);
        let tcp = live.filter_map(|c| c.tcp.next_timer()).filter(|&t| t > now).chain(retry).min();
        #[cfg(feature = "rdma")]
        let tcp = match (tcp, self.rdma.next_timer(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        #[cfg(not(feature = "rdma"))]
        let _ = now;
        tcp
    }

    /// Whether any connection (TCP or RDMA) is here (the shutdown waits for none).
    fn has_connections(&self) -> bool {
        #[cfg(feature = "rdma")]
        let rdma = !self.rdma.is_empty();
        #[cfg(not(feature = "rdma"))]
        let rdma = false;
        rdma || self.connections.iter().any(Option::is_some)
    }

    /// Submit queued storage ops, then turn completions into responses until no more arrive without waiting.
    fn complete_storage(&mut self) {
        loop {
            if let Err(e) = self.engine.submit() {
                tracing::error!(reactor = self.index, error = %e, "io_uring submit failed");
            }
            let mut completions = std::mem::take(&mut self.completions);
            self.engine.reap(|c| completions.push(c));
            if completions.is_empty() {
                self.completions = completions;
                return;
            }
            for c in completions.drain(..) {
                let (key, slot) = split_storage_tag(c.tag);
                #[cfg(feature = "rdma")]
                if RdmaReactor::owns_key(key) {
                    self.rdma.io_completed(key, slot, c.result, &mut self.engine);
                    continue;
                }
                let Some(Some(conn)) = usize::try_from(key).ok().and_then(|k| self.connections.get_mut(k)) else {
                    tracing::error!(reactor = self.index, tag = c.tag, "storage completion for no connection");
                    continue;
                };
                conn.tcp.io_completed(&mut self.engine, slot, c.result);
            }
            self.completions = completions;
        }
    }

    /// Write queued output of every connection and drop connections that ended and have nothing in flight.
    fn flush_and_reap(&mut self) {
        for slot in 0..self.connections.len() {
            let wants = matches!(&self.connections[slot], Some(c) if c.tcp.wants_write());
            if wants {
                self.with_connection(slot, |c, engine| c.tcp.on_writable(engine));
            }
            let done = matches!(&self.connections[slot], Some(c) if c.tcp.is_closed() && c.tcp.in_flight() == 0);
            if done {
                if let Some(mut c) = self.connections[slot].take() {
                    if c.registered {
                        let _ = self.poll.registry().deregister(c.tcp.stream_mut());
                    }
                    self.free.push(slot);
                    self.live.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Run `f` on a live connection; an error or a close ends the connection (its socket leaves the poll).
    fn with_connection(
        &mut self,
        slot: usize,
        f: impl FnOnce(&mut Connection, &mut IoEngine) -> Result<bool, crate::tcp::ConnectionError>,
    ) {
        let Some(Some(conn)) = self.connections.get_mut(slot) else { return };
        if conn.tcp.is_closed() && !conn.registered {
            return;
        }
        let open = match f(conn, &mut self.engine) {
            Ok(open) => open,
            Err(e) => {
                tracing::info!(reactor = self.index, error = %e, "connection ended");
                false
            }
        };
        if (!open || conn.tcp.is_closed()) && conn.registered {
            let _ = self.poll.registry().deregister(conn.tcp.stream_mut());
            conn.registered = false;
        }
    }

    fn drain_messages(&mut self) {
        while let Ok(message) = self.rx.try_recv() {
            match message {
                Message::Accept(accepted) => self.add_connection(accepted),
                #[cfg(feature = "rdma")]
                Message::AcceptRdma(accepted) => {
                    if self.shutting_down {
                        continue;
                    }
                    let notifier = self.event_notifier();
                    self.rdma.accept(accepted, &mut self.engine, self.poll.registry(), &self.target, notifier);
                }
                Message::Shutdown => self.begin_shutdown(),
            }
        }
    }

    fn add_connection(&mut self, accepted: Accepted) {
        if self.shutting_down {
            return;
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        let local = accepted.stream.local_addr().ok().map(|a| a.ip());
        let mut stream = TcpStream::from_std(accepted.stream);
        let _ = stream.set_nodelay(true);
        let token = Token(FIRST_CONNECTION + slot);
        if let Err(e) = self.poll.registry().register(&mut stream, token, Interest::READABLE | Interest::WRITABLE) {
            tracing::warn!(reactor = self.index, peer = %accepted.peer, error = %e, "cannot register connection");
            self.free.push(slot);
            return;
        }
        let mut info = TransportInfo::tcp(
            accepted.port_id,
            accepted.tcp.in_capsule_data_size,
            u64::try_from(slot).unwrap_or(u64::MAX),
        );
        info.local_address = local;
        let mut queue = Queue::new(Arc::clone(&self.target), info);
        queue.set_event_notifier(self.event_notifier());
        tracing::debug!(reactor = self.index, peer = %accepted.peer, slot, "connection accepted");
        self.connections[slot] =
            Some(Connection { tcp: TcpConnection::new(stream, queue, &accepted.tcp), registered: true });
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// What a queue calls (from any thread) to have this reactor run every queue's `poll` soon.
    fn event_notifier(&self) -> EventNotifier {
        let flag = Arc::clone(&self.poll_queues);
        let waker = Arc::clone(&self.waker);
        Arc::new(move || {
            flag.store(true, Ordering::Release);
            let _ = waker.wake();
        })
    }

    /// Stop accepting, end every connection (their queues tear down their associations); the loop ends once
    /// every storage op in flight has completed.
    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        for slot in 0..self.connections.len() {
            self.with_connection(slot, |c, engine| {
                c.tcp.shutdown(engine);
                Ok(false)
            });
        }
        #[cfg(feature = "rdma")]
        self.rdma.shutdown(&mut self.engine);
    }
}
