//! The acceptor: one thread that accepts connections on every TCP listener and hands each to a reactor, round
//! robin. It is the only code that touches the listening sockets; it sleeps in `epoll_wait` and never blocks
//! elsewhere. Once a connection is handed over the acceptor forgets it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::reactor::{Accepted, ReactorHandle};
use crate::tcp::TcpTransportConfig;

const WAKER: Token = Token(usize::MAX);

/// A TCP listener to open.
#[derive(Debug, Clone)]
pub struct TcpListenerSpec {
    /// Address to bind.
    pub address: SocketAddr,
    /// Discovery log port ID.
    pub port_id: u16,
    /// The listener's NVMe/TCP settings.
    pub tcp: Arc<TcpTransportConfig>,
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
}

/// The running acceptor.
#[derive(Debug)]
pub struct Acceptor {
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    local: Vec<SocketAddr>,
}

/// Listening sockets bound but not yet accepting: binding first lets the discovery log report the ports the
/// sockets really got (a spec may ask for port 0).
#[derive(Debug)]
pub struct BoundListeners {
    poll: Poll,
    waker: Arc<Waker>,
    listeners: Vec<(TcpListener, TcpListenerSpec)>,
    local: Vec<SocketAddr>,
}

impl BoundListeners {
    /// Bind every listener, failing if any cannot be bound.
    pub fn bind(specs: &[TcpListenerSpec]) -> Result<Self, ListenerError> {
        let poll = Poll::new().map_err(ListenerError::Os)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(ListenerError::Os)?);
        let mut listeners = Vec::with_capacity(specs.len());
        let mut local = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let mut listener = TcpListener::bind(spec.address)
                .map_err(|source| ListenerError::Bind { address: spec.address, source })?;
            poll.registry()
                .register(&mut listener, Token(i), Interest::READABLE)
                .map_err(|source| ListenerError::Bind { address: spec.address, source })?;
            local.push(listener.local_addr().map_err(ListenerError::Os)?);
            listeners.push((listener, spec.clone()));
        }
        Ok(BoundListeners { poll, waker, listeners, local })
    }

    /// The bound addresses, in the order of the specs (a port 0 in a spec is replaced by the port chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }
}

impl Acceptor {
    /// Start accepting on `bound` for `reactors`.
    pub fn start(bound: BoundListeners, reactors: Arc<Vec<ReactorHandle>>) -> Result<Self, ListenerError> {
        let BoundListeners { poll, waker, listeners, local } = bound;
        let thread = std::thread::Builder::new()
            .name("nvmf-acceptor".into())
            .spawn(move || accept_loop(poll, listeners, &reactors))
            .map_err(ListenerError::Os)?;
        Ok(Acceptor { waker, thread: Some(thread), local })
    }

    /// The bound addresses, in the order of the specs (a port 0 in a spec is replaced by the port chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// Stop accepting and close the listening sockets.
    pub fn stop(mut self) {
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(mut poll: Poll, listeners: Vec<(TcpListener, TcpListenerSpec)>, reactors: &[ReactorHandle]) {
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
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
                return;
            }
            let Some((listener, spec)) = listeners.get(event.token().0) else { continue };
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        // mio hands out non-blocking sockets; the reactor re-wraps it.
                        let stream = std::net::TcpStream::from(stream);
                        if reactors.is_empty() {
                            return;
                        }
                        let reactor = &reactors[next % reactors.len()];
                        next = next.wrapping_add(1);
                        tracing::info!(%peer, listener = %spec.address, "host connected");
                        reactor.accept(Accepted { stream, peer, port_id: spec.port_id, tcp: Arc::clone(&spec.tcp) });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // EMFILE and friends: log and try again on the next readiness event.
                        tracing::warn!(listener = %spec.address, error = %e, "accept failed");
                        break;
                    }
                }
            }
        }
    }
}
