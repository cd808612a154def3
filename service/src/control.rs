//! The control socket both daemons serve (`nvmf-target list`, `nvmf-host connect`, …): a unix stream socket, mode
//! 0600, carrying one JSON object per line each way. A daemon names its requests and replies in a [`Protocol`];
//! this module owns the framing, the server and the client, so that both daemons behave alike
//! (`docs/control-protocol.md` documents the protocol).
//!
//! Server: one thread accepts, and each connection is served on a thread of its own (at most [`MAX_CLIENTS`]
//! at once; more get an error reply and are closed), so a slow request (a host's `connect`, a target's reload)
//! does not hold up a `list`. A connection may send several requests, each answered in order. A line longer
//! than [`MAX_LINE`] gets an error reply and ends the connection; a line that is not a request gets an error
//! reply; a client silent for [`IDLE_TIMEOUT`] is closed. A stale socket file from a dead daemon is replaced, a
//! live daemon's is not, and neither is anything that is not a socket.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::unix_socket::{bind_owner_only, SocketPathError};

/// Longest request or reply line (a `list` of many controllers fits easily).
pub const MAX_LINE: usize = 1 << 20;
/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// A connection with no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client waits for a reply (a host's `connect-all` connects several controllers in turn).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// One daemon's requests and replies.
pub trait Protocol: 'static {
    /// What a client asks.
    type Request: Serialize + DeserializeOwned + std::fmt::Debug + Send + 'static;
    /// What the daemon answers.
    type Reply: Serialize + DeserializeOwned + Send + 'static;
    /// The daemon's name in messages (`nvmf-target`).
    const DAEMON: &'static str;
    /// How to start the daemon, for a client that finds none (`systemctl start nvmf-target`).
    const START_HINT: &'static str;
    /// The reply saying a request failed (`{"error": {"message": …}}` in both daemons).
    fn error(message: String) -> Self::Reply;
}

/// What answers a request, on the connection's thread.
pub type Handler<P> = Arc<dyn Fn(<P as Protocol>::Request) -> <P as Protocol>::Reply + Send + Sync>;

/// The request both daemons answer the same way: read the log filter (`filter: null`) or replace it
/// (`{"log_level": {"filter": "debug"}}`); the reply names the filter in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLevelRequest {
    /// The new filter (`RUST_LOG` syntax: `debug`, `info,nvmf_target=trace`), or `None` to only read it.
    #[serde(default)]
    pub filter: Option<String>,
}

impl LogLevelRequest {
    /// Answer it: replace the filter when one is given; the filter in force.
    pub fn apply(&self) -> Result<String, crate::logging::LogFilterError> {
        match &self.filter {
            Some(spec) => crate::logging::set_log_filter(spec),
            None => crate::logging::log_filter().ok_or(crate::logging::LogFilterError::NotInstalled),
        }
    }
}

/// The control socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another live daemon serves this socket.
    #[error("control socket {}: another {daemon} serves it", path.display())]
    InUse {
        /// The socket path.
        path: PathBuf,
        /// The daemon's name.
        daemon: &'static str,
    },
    /// Something other than a socket is at the path: it is left alone.
    #[error("control socket {}: the path exists and is not a socket (refusing to replace it)", .0.display())]
    NotASocket(PathBuf),
    /// The socket or its directory could not be created.
    #[error("control socket {}: {source}", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The accepting thread could not start.
    #[error("control socket: starting its thread: {0}")]
    Thread(#[source] io::Error),
}

/// A client could not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nothing serves the path.
    #[error("no {daemon} daemon at {} (is it running, with this --control socket?): start it with {hint}", path.display())]
    NoDaemon {
        /// The socket path.
        path: PathBuf,
        /// The daemon's name.
        daemon: &'static str,
        /// How to start it.
        hint: &'static str,
    },
    /// The exchange failed.
    #[error("talking to {daemon} at {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The daemon's name.
        daemon: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The daemon's reply did not parse.
    #[error("{daemon} at {} sent an invalid reply: {reason}", path.display())]
    BadReply {
        /// The socket path.
        path: PathBuf,
        /// The daemon's name.
        daemon: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// Send `request` to the daemon at `path` and wait for its reply.
pub fn request<P: Protocol>(path: &Path, request: &P::Request) -> Result<P::Reply, ControlError> {
    let daemon = P::DAEMON;
    let io_err = |source| ControlError::Io { path: path.to_owned(), daemon, source };
    let bad = |reason: String| ControlError::BadReply { path: path.to_owned(), daemon, reason };
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ControlError::NoDaemon { path: path.to_owned(), daemon, hint: P::START_HINT }
        }
        _ => io_err(e),
    })?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io_err)?;
    let mut line = serde_json::to_string(request).map_err(|e| bad(e.to_string()))?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io_err)?;
    let mut reply = String::new();
    BufReader::new(stream.take(MAX_LINE as u64)).read_line(&mut reply).map_err(io_err)?;
    if reply.is_empty() {
        return Err(bad("connection closed".into()));
    }
    serde_json::from_str(&reply).map_err(|e| bad(e.to_string()))
}

/// The running control socket; stopped (and its file removed) when dropped.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Bind `path` (creating its directory; replacing a dead daemon's socket file) and answer with `handler`.
    pub fn start<P: Protocol>(path: &Path, handler: Handler<P>) -> Result<Self, ServeError> {
        let bind_error = |source| ServeError::Bind { path: path.to_owned(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(bind_error)?;
        }
        let listener = bind_owner_only(path).map_err(|e| match e {
            SocketPathError::InUse(path) => ServeError::InUse { path, daemon: P::DAEMON },
            SocketPathError::NotASocket(path) => ServeError::NotASocket(path),
            SocketPathError::Io { source, .. } => bind_error(source),
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nvmf-control".into())
            .spawn(move || accept_loop::<P>(&listener, &handler, &thread_stop))
            .map_err(ServeError::Thread)?;
        tracing::info!(path = %path.display(), "control socket ready");
        Ok(ControlServer { path: path.to_owned(), stop, thread: Some(thread) })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting (connections being served finish their request) and remove the socket file.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            // Wake the blocking accept.
            let _ = UnixStream::connect(&self.path);
            let _ = thread.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop<P: Protocol>(listener: &UnixListener, handler: &Handler<P>, stop: &AtomicBool) {
    let clients = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket: accept failed");
                continue;
            }
        };
        if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::SeqCst);
            let _ = write_reply::<P>(&mut stream, &P::error(format!("busy: {MAX_CLIENTS} control connections open")));
            continue;
        }
        let handler = Arc::clone(handler);
        let count = Arc::clone(&clients);
        let spawned = std::thread::Builder::new().name("nvmf-control-client".into()).spawn(move || {
            if let Err(e) = serve::<P>(stream, &handler) {
                tracing::debug!(error = %e, "control connection ended");
            }
            count.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            clients.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(error = %e, "control socket: cannot spawn a client thread");
        }
    }
}

fn write_reply<P: Protocol>(stream: &mut UnixStream, reply: &P::Reply) -> io::Result<()> {
    let mut line = serde_json::to_string(reply).map_err(io::Error::other)?;
    line.push('\n');
    stream.write_all(line.as_bytes())
}

/// Serve requests on one connection until it closes, idles out or sends an oversize line.
fn serve<P: Protocol>(stream: UnixStream, handler: &Handler<P>) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            return write_reply::<P>(&mut writer, &P::error(format!("request longer than {MAX_LINE} bytes")));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let reply = match serde_json::from_slice::<P::Request>(&line) {
            Ok(request) => {
                tracing::debug!(?request, "control request");
                handler(request)
            }
            Err(e) => P::error(format!("invalid request: {e}")),
        };
        write_reply::<P>(&mut writer, &reply)?;
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A protocol for the tests: requests are strings, replies echo them.
    struct Echo;

    #[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum EchoReply {
        Said(String),
        Error { message: String },
    }

    impl Protocol for Echo {
        type Request = String;
        type Reply = EchoReply;
        const DAEMON: &'static str = "echo";
        const START_HINT: &'static str = "`echo run`";
        fn error(message: String) -> EchoReply {
            EchoReply::Error { message }
        }
    }

    fn server(dir: &Path) -> ControlServer {
        ControlServer::start::<Echo>(&dir.join("run/c.sock"), Arc::new(EchoReply::Said)).unwrap()
    }

    #[test]
    fn answers_requests_in_order_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        assert_eq!(request::<Echo>(s.path(), &"hi".to_owned()).unwrap(), EchoReply::Said("hi".into()));
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the daemon's user (root under systemd) may connect");
        let mut raw = UnixStream::connect(s.path()).unwrap();
        raw.write_all(b"{not json\n\n\"two\"\n").unwrap();
        let mut lines = BufReader::new(raw).lines();
        let first: EchoReply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(matches!(first, EchoReply::Error { message } if message.starts_with("invalid request:")));
        let second: EchoReply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(
            second,
            EchoReply::Said("two".into()),
            "the connection survives a bad line; blank lines are skipped"
        );
    }

    #[test]
    fn an_oversize_request_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let mut raw = UnixStream::connect(s.path()).unwrap();
        let _ = raw.write_all(&vec![b'x'; MAX_LINE + 10]);
        let mut reply = String::new();
        BufReader::new(raw).read_line(&mut reply).unwrap();
        assert!(reply.contains("request longer than"), "{reply}");
    }

    #[test]
    fn a_second_daemon_is_refused_and_a_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let err = ControlServer::start::<Echo>(s.path(), Arc::new(EchoReply::Said)).unwrap_err();
        assert!(matches!(err, ServeError::InUse { daemon: "echo", .. }), "{err}");
        let path = s.path().to_owned();
        s.stop();
        assert!(!path.exists(), "socket removed on stop");
        let err = request::<Echo>(&path, &"x".to_owned()).unwrap_err().to_string();
        assert!(err.starts_with(&format!("no echo daemon at {}", path.display())) && err.ends_with("`echo run`"));
        // A stale socket file (bound, never served) is replaced.
        drop(UnixListener::bind(&path).unwrap());
        let again = ControlServer::start::<Echo>(&path, Arc::new(EchoReply::Said)).unwrap();
        assert!(request::<Echo>(again.path(), &"x".to_owned()).is_ok());
        // A file that is not a socket is left alone.
        let file = dir.path().join("precious");
        std::fs::write(&file, "data").unwrap();
        let err = ControlServer::start::<Echo>(&file, Arc::new(EchoReply::Said)).unwrap_err();
        assert!(matches!(err, ServeError::NotASocket(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
    }

    #[test]
    fn a_silent_client_does_not_block_others() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let _silent = UnixStream::connect(s.path()).unwrap();
        assert_eq!(request::<Echo>(s.path(), &"next".to_owned()).unwrap(), EchoReply::Said("next".into()));
    }

    #[test]
    fn log_level_requests_read_as_documented() {
        let r: LogLevelRequest = serde_json::from_str(r#"{"filter":"debug"}"#).unwrap();
        assert_eq!(r.filter.as_deref(), Some("debug"));
        let r: LogLevelRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(r.filter, None);
    }
}
