//! The NVMe/TCP acceptor: one thread that accepts connections on every TCP listener and hands each over (to the
//! reactors, round robin: the daemon decides). It is the only code that accepts on the listening sockets; it sleeps
//! in `epoll_wait` and never blocks elsewhere. Once a connection is handed over the acceptor forgets it.
//!
//! A reload changes the listeners while the acceptor runs: the control thread binds and registers new sockets
//! first (so a failure changes nothing), then hands the acceptor thread the new set through a channel and waits
//! until it has switched. Closing a listener never touches the connections it accepted (as Linux nvmet does).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use socket2::{SockRef, TcpKeepalive};

use nvmf_common::fabrics::discovery::{treq, TcpSecurityType, TransportType, Tsas};
use nvmf_config::target::{ControllerLimits, ListenerConfig, ListenerTransport, TlsMode};

use super::tls_gate::{HandOver, TlsCounters, TlsGate, TlsKeyring};
use super::{AcceptedConnection, TcpTransportConfig};
use crate::controller::{GeneratedPsks, ListenerParams};
use crate::transport::Admission;

/// The waker's token; listeners use their port ID as token, which never reaches it.
const WAKER: Token = Token(usize::MAX);

/// A TCP listener to open.
#[derive(Debug, Clone)]
pub struct TcpListenerSpec {
    /// Address to bind.
    pub address: SocketAddr,
    /// Discovery log port ID (unique among the acceptor's listeners).
    pub port_id: u16,
    /// The listener's NVMe/TCP settings.
    pub tcp: Arc<TcpTransportConfig>,
    /// The most connections it holds at once.
    pub max_connections: u32,
}

impl TcpListenerSpec {
    /// The spec of TCP listener `l` with discovery port ID `port_id` in a target with `limits` (`None` for another
    /// transport).
    pub fn from_config(l: &ListenerConfig, port_id: u16, limits: &ControllerLimits) -> Option<Self> {
        let ListenerTransport::Tcp(options) = l.transport else { return None };
        let tcp = TcpTransportConfig {
            in_capsule_data_size: l.in_capsule_data_size,
            header_digest: options.header_digest,
            data_digest: options.data_digest,
            keepalive_ms: limits.tcp_keepalive_ms,
            max_send_backlog: usize::try_from(limits.tcp_send_backlog).unwrap_or(usize::MAX),
            tls: options.tls,
            ..TcpTransportConfig::default()
        };
        Some(TcpListenerSpec { address: l.address, port_id, tcp: Arc::new(tcp), max_connections: l.max_connections })
    }

    /// The discovery log's entry for this listener, bound at `local`.
    pub fn discovery_entry(&self, local: SocketAddr) -> ListenerParams {
        let (sectype, secure_channel) = match self.tcp.tls {
            TlsMode::None => (TcpSecurityType::None, treq::NOT_SPECIFIED),
            TlsMode::Allowed => (TcpSecurityType::Tls13, treq::NOT_REQUIRED),
            TlsMode::Required => (TcpSecurityType::Tls13, treq::REQUIRED),
        };
        ListenerParams {
            secure_channel,
            ..ListenerParams::ip(self.port_id, TransportType::Tcp, local, Tsas::Tcp { sectype })
        }
    }
}

/// Errors opening listeners.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// bind/listen failed.
    #[error("cannot listen on tcp://{address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// epoll or thread creation failed.
    #[error("acceptor: {0}")]
    Os(#[source] io::Error),
    /// The acceptor thread has ended (it failed earlier; see the log).
    #[error("acceptor: its thread has ended")]
    Stopped,
}

/// A listening socket, bound and registered for readiness, not yet served.
#[derive(Debug)]
pub struct BoundListener {
    listener: TcpListener,
    spec: TcpListenerSpec,
    local: SocketAddr,
}

impl BoundListener {
    fn bind(spec: &TcpListenerSpec, registry: &Registry) -> Result<Self, ListenerError> {
        let bind_error = |source| ListenerError::Bind { address: spec.address, source };
        let mut listener = TcpListener::bind(spec.address).map_err(bind_error)?;
        registry.register(&mut listener, Token(usize::from(spec.port_id)), Interest::READABLE).map_err(bind_error)?;
        let local = listener.local_addr().map_err(ListenerError::Os)?;
        Ok(BoundListener { listener, spec: spec.clone(), local })
    }

    /// The address the socket got (a port 0 in the spec is replaced by the port chosen).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Listening sockets bound but not yet accepting: binding first lets the discovery log report the ports the
/// sockets really got (a spec may ask for port 0).
#[derive(Debug)]
pub struct BoundListeners {
    poll: Poll,
    waker: Arc<Waker>,
    listeners: Vec<BoundListener>,
    local: Vec<SocketAddr>,
}

impl BoundListeners {
    /// Bind every listener, failing if any cannot be bound.
    pub fn bind(specs: &[TcpListenerSpec]) -> Result<Self, ListenerError> {
        let poll = Poll::new().map_err(ListenerError::Os)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(ListenerError::Os)?);
        let listeners =
            specs.iter().map(|spec| BoundListener::bind(spec, poll.registry())).collect::<Result<Vec<_>, _>>()?;
        let local = listeners.iter().map(BoundListener::local_addr).collect();
        Ok(BoundListeners { poll, waker, listeners, local })
    }

    /// The bound addresses, in the order of the specs (a port 0 in a spec is replaced by the port chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }
}

/// One listener of a reconfigured set.
#[derive(Debug)]
pub enum ListenerSlot {
    /// A listener the acceptor serves now (same port ID), with possibly new settings for the connections it
    /// accepts from now on.
    Keep(TcpListenerSpec),
    /// A new listener, bound with [`Acceptor::bind`].
    Open(BoundListener),
}

/// What the control thread asks of the acceptor thread.
enum Command {
    /// Serve exactly these listeners: keep (with new settings) the ones named, add the new ones, close the rest;
    /// then say so on `done`.
    Reconfigure { keep: Vec<TcpListenerSpec>, open: Vec<(TcpListener, TcpListenerSpec)>, done: Sender<()> },
    /// Close every listener and end.
    Stop,
}

/// The running acceptor.
#[derive(Debug)]
pub struct Acceptor {
    waker: Arc<Waker>,
    registry: Registry,
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
    listeners: Vec<(TcpListenerSpec, SocketAddr)>,
    local: Vec<SocketAddr>,
    gate: Arc<TlsGate>,
}

/// What the TLS gate starts with.
#[derive(Debug)]
pub struct TlsGateParams {
    /// The hosts' PSKs.
    pub keyring: TlsKeyring,
    /// Bound on a handshake (`connect_timeout_ms`).
    pub timeout: Duration,
    /// Handshake threads (`[target] tls_threads`).
    pub threads: usize,
    /// Connections waiting for one (`[target] tls_queue_depth`).
    pub queue_depth: usize,
    /// Its counters (metrics).
    pub counters: Arc<TlsCounters>,
    /// Where secure channel concatenation keeps its generated PSKs ([`TlsGate::set_generated_psks`]).
    pub generated: Arc<GeneratedPsks>,
}

impl Acceptor {
    /// Start accepting on `bound`, handing every connection to `hand_over` (which gives it back when nobody can take
    /// it: the connection is then closed).
    pub fn start(
        bound: BoundListeners,
        admission: Arc<Admission>,
        tls: TlsGateParams,
        hand_over: impl FnMut(AcceptedConnection) -> Result<(), AcceptedConnection> + Send + 'static,
    ) -> Result<Self, ListenerError> {
        let BoundListeners { poll, waker, listeners, local } = bound;
        let registry = poll.registry().try_clone().map_err(ListenerError::Os)?;
        let served = listeners.iter().map(|l| (l.spec.clone(), l.local)).collect();
        let sockets: HashMap<Token, (TcpListener, TcpListenerSpec)> =
            listeners.into_iter().map(|l| (Token(usize::from(l.spec.port_id)), (l.listener, l.spec))).collect();
        // The acceptor and the TLS gate's threads both hand connections over, one at a time.
        let hand_over: Arc<Mutex<HandOver>> = Arc::new(Mutex::new(Box::new(hand_over)));
        let gate = Arc::new(
            TlsGate::start(
                tls.keyring,
                tls.timeout,
                (tls.threads, tls.queue_depth),
                tls.counters,
                Arc::clone(&hand_over),
            )
            .map_err(ListenerError::Os)?,
        );
        gate.set_generated_psks(tls.generated);
        let (commands, received) = mpsc::channel();
        let acceptor_gate = Arc::clone(&gate);
        let thread = std::thread::Builder::new()
            .name("nvmf-acceptor".into())
            .spawn(move || accept_loop(poll, sockets, &received, &admission, &acceptor_gate, &hand_over))
            .map_err(ListenerError::Os)?;
        Ok(Acceptor { waker, registry, commands, thread: Some(thread), listeners: served, local, gate })
    }

    /// The TLS gate (a reload gives it new keys).
    pub fn tls_gate(&self) -> &TlsGate {
        &self.gate
    }

    /// The bound addresses, in configuration order (a port 0 in a spec is replaced by the port chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// The listeners served, in configuration order, with their bound addresses.
    pub fn listeners(&self) -> &[(TcpListenerSpec, SocketAddr)] {
        &self.listeners
    }

    /// Bind and register a new listener without serving it yet (a failure changes nothing; dropping the result
    /// closes the socket).
    pub fn bind(&self, spec: &TcpListenerSpec) -> Result<BoundListener, ListenerError> {
        BoundListener::bind(spec, &self.registry)
    }

    /// Serve exactly `slots`, in this order: kept listeners (matched by port ID) take their new settings, new ones
    /// start accepting, every other listener is closed. Connections already accepted are not touched. Returns
    /// once the acceptor thread has switched.
    pub fn reconfigure(&mut self, slots: Vec<ListenerSlot>) -> Result<(), ListenerError> {
        let mut keep = Vec::new();
        let mut open = Vec::new();
        let mut served = Vec::with_capacity(slots.len());
        for slot in slots {
            match slot {
                ListenerSlot::Keep(spec) => {
                    let local = self
                        .listeners
                        .iter()
                        .find(|(s, _)| s.port_id == spec.port_id)
                        .map_or(spec.address, |(_, local)| *local);
                    served.push((spec.clone(), local));
                    keep.push(spec);
                }
                ListenerSlot::Open(bound) => {
                    served.push((bound.spec.clone(), bound.local));
                    open.push((bound.listener, bound.spec));
                }
            }
        }
        let (done, switched) = mpsc::channel();
        self.commands.send(Command::Reconfigure { keep, open, done }).map_err(|_| ListenerError::Stopped)?;
        self.waker.wake().map_err(ListenerError::Os)?;
        // The acceptor thread only ever waits in epoll_wait, which the waker ends: this wait is short.
        switched.recv().map_err(|_| ListenerError::Stopped)?;
        self.local = served.iter().map(|(_, local)| *local).collect();
        self.listeners = served;
        Ok(())
    }

    /// Stop accepting and close the listening sockets.
    pub fn stop(mut self) {
        let _ = self.commands.send(Command::Stop);
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(
    mut poll: Poll,
    mut listeners: HashMap<Token, (TcpListener, TcpListenerSpec)>,
    commands: &Receiver<Command>,
    admission: &Arc<Admission>,
    gate: &TlsGate,
    hand_over: &Mutex<HandOver>,
) {
    let mut events = Events::with_capacity(64);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "acceptor: epoll failed");
            return;
        }
        for event in events.iter() {
            if event.token() == WAKER {
                while let Ok(command) = commands.try_recv() {
                    match command {
                        Command::Stop => return,
                        Command::Reconfigure { keep, open, done } => {
                            let added: Vec<Token> = open.iter().map(|(_, s)| Token(usize::from(s.port_id))).collect();
                            reconfigure(&mut listeners, keep, open);
                            // A connection that arrived between registration and now raised its (edge-triggered)
                            // readiness already: accept what is queued.
                            for token in added {
                                if let Some((listener, spec)) = listeners.get(&token) {
                                    accept_all(listener, spec, admission, gate, hand_over);
                                }
                            }
                            let _ = done.send(());
                        }
                    }
                }
                continue;
            }
            let Some((listener, spec)) = listeners.get(&event.token()) else { continue };
            accept_all(listener, spec, admission, gate, hand_over);
        }
    }
}

/// Switch `listeners` to the kept ones (with their new settings) plus `open`; dropping the others closes them.
fn reconfigure(
    listeners: &mut HashMap<Token, (TcpListener, TcpListenerSpec)>,
    keep: Vec<TcpListenerSpec>,
    open: Vec<(TcpListener, TcpListenerSpec)>,
) {
    let mut next: HashMap<Token, (TcpListener, TcpListenerSpec)> = HashMap::with_capacity(keep.len() + open.len());
    for spec in keep {
        let token = Token(usize::from(spec.port_id));
        if let Some((listener, _)) = listeners.remove(&token) {
            next.insert(token, (listener, spec));
        }
    }
    for (_, (_, spec)) in listeners.drain() {
        tracing::info!(listener = %spec.address, "listener closed; its connections keep running");
    }
    for (listener, spec) in open {
        tracing::info!(listener = %spec.address, port_id = spec.port_id, "listener opened");
        next.insert(Token(usize::from(spec.port_id)), (listener, spec));
    }
    *listeners = next;
}

/// Accept every queued connection on `listener`, handing over each that `admission` admits (closing the others).
fn accept_all(
    listener: &TcpListener,
    spec: &TcpListenerSpec,
    admission: &Arc<Admission>,
    gate: &TlsGate,
    hand_over: &Mutex<HandOver>,
) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                // mio hands out non-blocking sockets; the reactor re-wraps it.
                let stream = std::net::TcpStream::from(stream);
                let Ok(admitted) = admission.admit(spec.port_id, spec.max_connections, peer.ip()) else {
                    // Dropping the stream closes it: no reactor ever sees it.
                    continue;
                };
                tracing::debug!(traddr = %peer, listener = %spec.address, "host connected");
                if let Err(e) = set_keepalive(&stream, spec.tcp.keepalive_ms) {
                    tracing::warn!(traddr = %peer, error = %e, "cannot set TCP keepalive");
                }
                let tcp = Arc::clone(&spec.tcp);
                let connection = AcceptedConnection {
                    stream,
                    peer,
                    port_id: spec.port_id,
                    tcp,
                    admitted,
                    initialized: None,
                    tls: None,
                };
                if spec.tcp.tls != TlsMode::None {
                    gate.admit(connection);
                    continue;
                }
                let mut hand_over = hand_over.lock().unwrap_or_else(|e| e.into_inner());
                if hand_over(connection).is_err() {
                    tracing::warn!(traddr = %peer, listener = %spec.address, "no reactor takes connections; closed");
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: log and try again on the next readiness event.
                tracing::warn!(listener = %spec.address, error = %e, "accept failed");
                return;
            }
        }
    }
}

/// Probe a peer silent `ms` milliseconds (TCP keepalive), closing after three unanswered probes `ms / 10` apart; 0
/// leaves keepalive off. A host that vanished without a FIN then costs its connection only that long.
fn set_keepalive(stream: &std::net::TcpStream, ms: u32) -> io::Result<()> {
    if ms == 0 {
        return Ok(());
    }
    let idle = Duration::from_millis(u64::from(ms));
    let keepalive = TcpKeepalive::new().with_time(idle).with_interval(idle / 10).with_retries(3);
    SockRef::from(stream).set_tcp_keepalive(&keepalive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_probes_a_silent_peer_after_the_configured_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let socket = SockRef::from(&stream);
        set_keepalive(&stream, 0).unwrap();
        assert!(!socket.keepalive().unwrap(), "0 leaves keepalive off");
        set_keepalive(&stream, 60_000).unwrap();
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(60));
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), Duration::from_secs(6));
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 3);
    }
}
