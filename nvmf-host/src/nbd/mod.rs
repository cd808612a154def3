//! [`NbdExport`]: one namespace of a connected [`Controller`] served over the NBD protocol (fixed newstyle,
//! simple replies) on a unix socket or a TCP address, for `qemu-img`/`qemu-io`, fio's nbd engine and
//! `nbd-client`.
//!
//! Access: NBD has no authentication, so whoever reaches the socket reads and writes the namespace. A unix
//! socket (the default, [`DEFAULT_NBD_SOCKET`]) is created mode 0600 — the exporting user (and root) only — and
//! never replaces a path that is not a socket ([`nvmf_service::unix_socket`]); TCP only on a loopback address,
//! when asked for (any local user can connect to it).
//!
//! Threads: one acceptor thread (a [`mio::Poll`] over the listener and a waker, so [`NbdExport::stop`] never
//! waits on a blocked `accept`), and one thread per client: it runs the handshake (blocking reads, each step
//! bounded by a timeout), then the transmission phase from one poller (module `transmission`): it reads requests,
//! submits their commands to its export queue (clients take the export's I/O queues in turn), hosts that queue's
//! link ([`crate::queue::handle::LinkHost`]: no hop to the queue's I/O thread and back) and writes each reply as its
//! request's last command completes (completion order: the protocol matches replies by cookie).
//!
//! What a session thread may block on: handshake reads and writes; in transmission only its poller (an idle
//! client is legitimate), a submission while a queue is full or the controller reconnects, and holding a command
//! the lost association had in flight until it can be resubmitted (a command the controller never answers is
//! failed by the queue's own command timeout). Memory per client is bounded: at most [`MAX_IN_FLIGHT`] requests
//! and [`IN_FLIGHT_BYTES`] of data from a request's header to the end of its reply, buffers reused from a
//! per-client pool. See [`proto`] for how each request is checked.
//!
//! Limits that fire are counted ([`NbdExport::limits`], `nvmf_host_nbd_limits_total`): a client refused over
//! `max_clients`, one cut off in the handshake by its timeout or at stop for not reading its replies, and a
//! client's requests held back by its in-flight limits.

mod job;
pub mod proto;
mod session;
mod transmission;

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_common::nvme::identify::IdentifyController;
use nvmf_service::unix_socket::{bind_owner_only, SocketPathError};

use crate::block::MAX_NLB_BLOCKS;
use crate::controller::Controller;
use crate::error::HostError;
use crate::multipath::{IoPolicy, NamespaceHead, PathError};
use proto::Geometry;

/// Where `nvmf-host nbd` serves unless told otherwise (`--listen`); the daemon's exports name their own.
pub const DEFAULT_NBD_SOCKET: &str = "/run/nvmf-host/nbd.sock";

/// Requests one client may have in flight; more wait in the socket (backpressure).
pub const MAX_IN_FLIGHT: usize = 128;
/// Data bytes one client may have in flight (a request larger than what is left waits for the others).
pub const IN_FLIGHT_BYTES: u64 = 64 << 20;
/// The largest read/write payload advertised (the protocol's interoperable maximum).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// The largest piece of a request sent as one NVMe command (further limited by MDTS and the 16-bit NLB).
const MAX_PIECE: u64 = 1 << 20;
/// A client has this long for each handshake step.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// On stop, a client that does not read its replies is cut off after this long.
const STOP_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How soon the acceptor tries again after a failed accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);

/// Why an export could not start.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// The listen address did not parse.
    #[error("invalid NBD listen address '{0}': expected unix:/path, /path or ADDR:PORT")]
    InvalidListen(String),
    /// A TCP address that other machines could reach: NBD has no authentication.
    #[error(
        "NBD over TCP listens on a loopback address only (NBD has no authentication), not {0}; use \
         unix:/path or 127.0.0.1:PORT / [::1]:PORT"
    )]
    NotLoopback(SocketAddr),
    /// The unix socket path is taken (a live export, or something that is not a socket).
    #[error("NBD socket {0}")]
    SocketPath(#[from] SocketPathError),
    /// The namespace is not active on the controller.
    #[error("namespace {0} is not active on this controller")]
    UnknownNamespace(u32),
    /// The namespace's block size cannot be an NBD minimum block size (a power of two up to 64 KiB).
    #[error("namespace {nsid}: {block_size}-byte blocks cannot be exported over NBD")]
    BlockSize {
        /// The namespace.
        nsid: u32,
        /// Its logical block size.
        block_size: u32,
    },
    /// Listening failed.
    #[error("{what} {listen}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        listen: String,
        /// The error.
        source: io::Error,
    },
    /// The controller failed (identifying the namespace).
    #[error(transparent)]
    Host(#[from] HostError),
}

/// Where an export listens: `unix:/path` (or an absolute path) or a loopback `ADDR:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NbdListen {
    /// A unix socket at this path, mode 0600 (created on start, removed on stop).
    Unix(PathBuf),
    /// A loopback TCP address (port 0 picks one; see [`NbdExport::local_addr`]); others are refused at start.
    Tcp(SocketAddr),
}

impl NbdListen {
    /// The NBD URI a client connects with (`nbd+unix:///?socket=/path`, `nbd://127.0.0.1:10809`).
    pub fn uri(&self) -> String {
        match self {
            NbdListen::Unix(p) => format!("nbd+unix:///?socket={}", p.display()),
            NbdListen::Tcp(a) => format!("nbd://{a}"),
        }
    }
}

impl Default for NbdListen {
    /// [`DEFAULT_NBD_SOCKET`].
    fn default() -> Self {
        NbdListen::Unix(PathBuf::from(DEFAULT_NBD_SOCKET))
    }
}

/// NBD over TCP is for this machine only.
fn loopback_only(addr: SocketAddr) -> Result<SocketAddr, NbdError> {
    if addr.ip().is_loopback() {
        Ok(addr)
    } else {
        Err(NbdError::NotLoopback(addr))
    }
}

impl fmt::Display for NbdListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NbdListen::Unix(p) => write!(f, "unix:{}", p.display()),
            NbdListen::Tcp(a) => write!(f, "{a}"),
        }
    }
}

impl FromStr for NbdListen {
    type Err = NbdError;

    fn from_str(s: &str) -> Result<Self, NbdError> {
        let bad = || NbdError::InvalidListen(s.to_string());
        if let Some(path) = s.strip_prefix("unix:") {
            return if path.is_empty() { Err(bad()) } else { Ok(NbdListen::Unix(PathBuf::from(path))) };
        }
        if s.starts_with('/') {
            return Ok(NbdListen::Unix(PathBuf::from(s)));
        }
        let addr = s.parse().map_err(|_| bad())?;
        loopback_only(addr).map(NbdListen::Tcp)
    }
}

/// How to export.
#[derive(Debug, Clone)]
pub struct NbdOptions {
    /// The export's name (`NBD_OPT_LIST`); the empty default name is accepted too.
    pub export_name: String,
    /// Refuse writes (`NBD_FLAG_READ_ONLY`, `EPERM`).
    pub read_only: bool,
    /// Largest read/write payload to advertise and accept (clamped to [`MAX_PAYLOAD`]).
    pub max_payload: u32,
    /// Clients served at once; more are closed at accept.
    pub max_clients: usize,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions { export_name: String::new(), read_only: false, max_payload: MAX_PAYLOAD, max_clients: 64 }
    }
}

/// How often each of an export's limits fired since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NbdLimitCounts {
    /// Clients closed at accept because `max_clients` were being served.
    pub clients: u64,
    /// Clients cut off in the handshake: a step took longer than its timeout.
    pub handshake_timeout: u64,
    /// Clients cut off at stop: their replies waited unread for the stop's write timeout.
    pub stop_write_timeout: u64,
    /// Times a client's requests were held back because its requests or bytes in flight were at the limit.
    pub in_flight: u64,
}

impl NbdLimitCounts {
    /// `(limit, count)` pairs, with the names `nvmf_host_nbd_limits_total` labels them with.
    pub fn by_name(&self) -> [(&'static str, u64); 4] {
        [
            ("clients", self.clients),
            ("handshake_timeout", self.handshake_timeout),
            ("stop_write_timeout", self.stop_write_timeout),
            ("in_flight", self.in_flight),
        ]
    }
}

/// The counters behind [`NbdLimitCounts`], bumped by the acceptor and session threads.
#[derive(Debug, Default)]
pub(crate) struct LimitCounters {
    clients: AtomicU64,
    handshake_timeout: AtomicU64,
    stop_write_timeout: AtomicU64,
    in_flight: AtomicU64,
}

impl LimitCounters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> NbdLimitCounts {
        NbdLimitCounts {
            clients: self.clients.load(Ordering::Relaxed),
            handshake_timeout: self.handshake_timeout.load(Ordering::Relaxed),
            stop_write_timeout: self.stop_write_timeout.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
        }
    }
}

/// A handle on an export's limit counters that outlives the export (to read them after [`NbdExport::stop`]).
#[derive(Debug, Clone)]
pub struct NbdLimits(Arc<LimitCounters>);

impl NbdLimits {
    /// The counts now.
    pub fn counts(&self) -> NbdLimitCounts {
        self.0.counts()
    }
}

/// A client connection (either kind).
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What every session of one export shares.
#[derive(Debug)]
pub(crate) struct Export {
    head: Arc<NamespaceHead>,
    nsid: u32,
    geometry: Geometry,
    name: String,
    /// Blocks per NVMe command.
    piece_blocks: u64,
    /// The export queue the next session takes.
    next_queue: AtomicUsize,
    limits: Arc<LimitCounters>,
}

enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener, PathBuf),
}

impl Listener {
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let s = TcpStream::from(l.accept()?.0);
                s.set_nonblocking(false)?;
                // Replies are written whole; waiting to coalesce them only adds latency.
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => {
                let s = UnixStream::from(l.accept()?.0);
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Listener::Tcp(l) => l,
            Listener::Unix(l, _) => l,
        }
    }
}

/// Bind `listen`: a loopback TCP address, or an owner-only unix socket (its missing directory is created mode
/// 0700; a stale socket is replaced, a live one or a path that is not a socket is an error).
fn bind(listen: &NbdListen) -> Result<(Listener, NbdListen), NbdError> {
    let err = |what, source| NbdError::Io { what, listen: listen.to_string(), source };
    match listen {
        NbdListen::Tcp(addr) => {
            let l = mio::net::TcpListener::bind(loopback_only(*addr)?).map_err(|e| err("binding", e))?;
            let local = l.local_addr().map_err(|e| err("reading the address of", e))?;
            Ok((Listener::Tcp(l), NbdListen::Tcp(local)))
        }
        NbdListen::Unix(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| err("creating the directory of", e))?;
            }
            let l = bind_owner_only(path)?;
            l.set_nonblocking(true).map_err(|e| err("binding", e))?;
            Ok((Listener::Unix(mio::net::UnixListener::from_std(l), path.clone()), listen.clone()))
        }
    }
}

/// A running NBD server for one namespace (see the module docs). Dropping it stops it.
#[derive(Debug)]
pub struct NbdExport {
    local: NbdListen,
    name: String,
    limits: NbdLimits,
    stopping: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl NbdExport {
    /// Export namespace `nsid` of `ctrl` (its only path) on `listen`; the server runs until [`NbdExport::stop`] or
    /// drop.
    pub fn start(
        ctrl: Arc<Controller>,
        nsid: u32,
        listen: NbdListen,
        options: NbdOptions,
    ) -> Result<NbdExport, NbdError> {
        // The namespace as it is now (the head takes the controller's last scan).
        ctrl.namespaces()?;
        let name = ctrl.addr().to_string();
        let head = NamespaceHead::new(ctrl, &name, nsid, IoPolicy::default()).map_err(|e| match e {
            PathError::UnknownNamespace(n) => NbdError::UnknownNamespace(n),
            e => NbdError::Host(HostError::InvalidRequest(e.to_string())),
        })?;
        Self::start_head(Arc::new(head), listen, options)
    }

    /// Export the namespace of `head` (over its paths) on `listen`; the server runs until [`NbdExport::stop`] or
    /// drop.
    pub fn start_head(head: Arc<NamespaceHead>, listen: NbdListen, options: NbdOptions) -> Result<NbdExport, NbdError> {
        let nsid = head.nsid();
        let ctrl = head.first_controller().ok_or(NbdError::UnknownNamespace(nsid))?;
        let (bs, blocks) = head.geometry();
        if !bs.is_power_of_two() || bs > 65536 {
            return Err(NbdError::BlockSize { nsid, block_size: bs });
        }
        let info = ctrl.info();
        let by_mdts = info.max_transfer.map_or(u64::MAX, |m| u64::from(m / bs));
        let piece_blocks = by_mdts.min(MAX_NLB_BLOCKS).min(MAX_PIECE / u64::from(bs)).max(1);
        // A whole number of blocks, at least one preferred block, at most the protocol's interoperable limit.
        let max_payload = options.max_payload.clamp(bs.max(4096), MAX_PAYLOAD) / bs * bs;
        let geometry = Geometry {
            block_size: bs,
            blocks,
            max_payload,
            read_only: options.read_only,
            trim: info.oncs & IdentifyController::ONCS_DATASET_MANAGEMENT != 0,
            write_zeroes: info.oncs & IdentifyController::ONCS_WRITE_ZEROES != 0,
        };
        let export = Arc::new(Export {
            head,
            nsid,
            geometry,
            name: options.export_name.clone(),
            piece_blocks,
            next_queue: AtomicUsize::new(0),
            limits: Arc::default(),
        });
        let limits = NbdLimits(Arc::clone(&export.limits));

        let (mut listener, local) = bind(&listen)?;
        let io_err = |what, source| NbdError::Io { what, listen: listen.to_string(), source };
        let poll = Poll::new().map_err(|e| io_err("creating the poller for", e))?;
        poll.registry()
            .register(listener.source(), LISTENER, Interest::READABLE)
            .map_err(|e| io_err("registering", e))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(|e| io_err("creating the waker for", e))?);
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopping);
        let max_clients = options.max_clients.max(1);
        let thread = std::thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(poll, listener, &export, &flag, max_clients))
            .map_err(|e| io_err("spawning the acceptor for", e))?;
        tracing::info!(uri = local.uri(), nsid, block_size = bs, blocks, "NBD export started");
        Ok(NbdExport { local, name: options.export_name, limits, stopping, waker, thread: Some(thread) })
    }

    /// Where the export listens (the bound port when started with port 0).
    pub fn local_addr(&self) -> &NbdListen {
        &self.local
    }

    /// The URI clients connect with.
    pub fn uri(&self) -> String {
        self.local.uri()
    }

    /// The export's name (`NbdOptions::export_name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often the export's limits fired (see the module docs).
    pub fn limits(&self) -> NbdLimits {
        self.limits.clone()
    }

    /// Stop accepting, end every session (in-flight requests finish; a client that does not read its
    /// replies is cut off after a few seconds), remove the unix socket.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stopping.store(true, Ordering::SeqCst);
            if let Err(e) = self.waker.wake() {
                tracing::error!(error = %e, "waking the NBD acceptor; it stops at its next connection");
            }
            let _ = thread.join();
        }
    }
}

impl Drop for NbdExport {
    fn drop(&mut self) {
        self.halt();
    }
}

struct Session {
    thread: JoinHandle<()>,
    stream: Stream,
}

fn accept_loop(mut poll: Poll, listener: Listener, export: &Arc<Export>, stopping: &AtomicBool, max: usize) {
    let mut events = Events::with_capacity(8);
    let mut sessions: Vec<Session> = Vec::new();
    let mut next_id = 0u64;
    // After a failed accept, look again soon: the listener is edge-triggered and the connection still waits.
    let mut retry = None;
    while !stopping.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, retry.take()) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "NBD acceptor poll failed; export stopped");
            break;
        }
        sessions.retain(|s| !s.thread.is_finished());
        loop {
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: the listener itself is fine.
                    tracing::warn!(error = %e, "NBD accept failed");
                    retry = Some(ACCEPT_RETRY);
                    break;
                }
            };
            if sessions.len() >= max {
                tracing::warn!(max, "NBD client refused: too many clients");
                LimitCounters::bump(&export.limits.clients);
                continue;
            }
            next_id += 1;
            let control = match stream.try_clone() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "NBD client dropped: cannot clone its socket");
                    continue;
                }
            };
            let x = Arc::clone(export);
            match std::thread::Builder::new().name(format!("nbd-{next_id}")).spawn(move || session::run(stream, &x)) {
                Ok(thread) => sessions.push(Session { thread, stream: control }),
                Err(e) => tracing::warn!(error = %e, "NBD client dropped: cannot spawn its thread"),
            }
        }
    }
    for s in &sessions {
        // The session sees end of stream and finishes like NBD_CMD_DISC (a client that does not read its
        // replies is cut off after STOP_WRITE_TIMEOUT); a handshake's blocked write gives up after it too.
        let _ = s.stream.set_write_timeout(Some(STOP_WRITE_TIMEOUT));
        let _ = s.stream.shutdown(Shutdown::Read);
    }
    for s in sessions {
        let _ = s.thread.join();
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("NBD export stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_parses_unix_and_tcp() {
        assert_eq!("unix:/run/x.sock".parse::<NbdListen>().unwrap(), NbdListen::Unix("/run/x.sock".into()));
        assert_eq!("/tmp/y".parse::<NbdListen>().unwrap(), NbdListen::Unix("/tmp/y".into()));
        assert_eq!(
            "127.0.0.1:10809".parse::<NbdListen>().unwrap(),
            NbdListen::Tcp(SocketAddr::from(([127, 0, 0, 1], 10809)))
        );
        assert_eq!("[::1]:1".parse::<NbdListen>().unwrap().uri(), "nbd://[::1]:1");
        for bad in ["unix:", "localhost", "127.0.0.1", "nbd://x", ""] {
            assert!(matches!(bad.parse::<NbdListen>(), Err(NbdError::InvalidListen(_))), "{bad}");
        }
        assert_eq!(NbdListen::default().uri(), "nbd+unix:///?socket=/run/nvmf-host/nbd.sock");
        assert_eq!(NbdListen::Unix("/a b".into()).uri(), "nbd+unix:///?socket=/a b");
    }

    #[test]
    fn tcp_is_loopback_only() {
        for bad in ["0.0.0.0:10809", "192.168.1.5:10809", "[::]:10809", "[2001:db8::1]:1"] {
            let err = bad.parse::<NbdListen>().unwrap_err();
            assert!(matches!(err, NbdError::NotLoopback(_)), "{bad}: {err}");
        }
        assert!("[::1]:10809".parse::<NbdListen>().is_ok());
        assert!("127.0.0.2:10809".parse::<NbdListen>().is_ok());
        // Built directly (the library's callers), a non-loopback address is refused at bind.
        let wide = NbdListen::Tcp(SocketAddr::from(([0, 0, 0, 0], 0)));
        assert!(matches!(bind(&wide), Err(NbdError::NotLoopback(_))));
    }

    #[test]
    fn a_unix_socket_is_owner_only_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/nvmf-host/disk.sock");
        let (_listener, _) = bind(&NbdListen::Unix(path.clone())).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let file = dir.path().join("disk.img");
        std::fs::write(&file, "data").unwrap();
        let err = bind(&NbdListen::Unix(file.clone())).err().unwrap();
        assert!(matches!(err, NbdError::SocketPath(SocketPathError::NotASocket(_))), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
    }
}
