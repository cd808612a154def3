//! The control socket: a unix stream socket where the daemon answers the CLI, one JSON line per request and per
//! reply ([`super::protocol`]); and [`request`], the CLI's side.
//!
//! Threads: [`ControlServer`] accepts on its own thread and serves each connection on a thread of its own (at
//! most [`MAX_CLIENTS`] at once; more are answered with an error and closed), so a slow `connect` does not hold
//! up a `list`. A request line longer than [`MAX_LINE`] or not valid JSON gets an error reply; a client silent
//! for [`IDLE_TIMEOUT`] is closed. The socket file is mode 0600 (the daemon's user, root under systemd); a stale
//! socket file from a dead daemon is replaced, a live daemon's is not.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nvmf_service::unix_socket::{bind_owner_only, SocketPathError};

use super::protocol::{ControlReply, ControlRequest, MAX_LINE};

/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// A connection with no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the CLI waits for a reply (`connect-all` connects several controllers in turn).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// What answers a request.
pub type Handler = Arc<dyn Fn(ControlRequest) -> ControlReply + Send + Sync>;

/// The CLI could not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nothing listens at the path.
    #[error(
        "no nvmf-host daemon at {}: start it with `nvmf-host run --config …` or `systemctl start nvmf-host`",
        path.display()
    )]
    NoDaemon {
        /// The socket path.
        path: PathBuf,
    },
    /// The exchange failed.
    #[error("talking to the nvmf-host daemon at {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The daemon's reply did not parse.
    #[error("the nvmf-host daemon at {} sent an invalid reply: {reason}", path.display())]
    BadReply {
        /// The socket path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// Send `request` to the daemon at `path` and wait for its reply.
pub fn request(path: &Path, request: &ControlRequest) -> Result<ControlReply, ControlError> {
    let io_err = |source| ControlError::Io { path: path.to_owned(), source };
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ControlError::NoDaemon { path: path.to_owned() },
        _ => io_err(e),
    })?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io_err)?;
    let mut line = serde_json::to_string(request)
        .map_err(|e| ControlError::BadReply { path: path.to_owned(), reason: e.to_string() })?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io_err)?;
    let mut reply = String::new();
    BufReader::new(stream.take(MAX_LINE as u64)).read_line(&mut reply).map_err(io_err)?;
    if reply.is_empty() {
        return Err(ControlError::BadReply { path: path.to_owned(), reason: "connection closed".into() });
    }
    serde_json::from_str(&reply).map_err(|e| ControlError::BadReply { path: path.to_owned(), reason: e.to_string() })
}

/// The running control socket.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Bind `path` (replacing a dead daemon's socket file) and serve `handler`.
    pub fn start(path: &Path, handler: Handler) -> io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let listener = bind_owner_only(path).map_err(|e| match e {
            SocketPathError::InUse(_) => {
                io::Error::new(io::ErrorKind::AddrInUse, "another nvmf-host daemon answers there")
            }
            SocketPathError::NotASocket(_) => {
                io::Error::new(io::ErrorKind::AlreadyExists, "the path exists and is not a socket")
            }
            SocketPathError::Io { source, .. } => source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nvmf-control".into())
            .spawn(move || accept_loop(&listener, &handler, &thread_stop))?;
        tracing::info!(path = %path.display(), "control socket listening");
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

fn accept_loop(listener: &UnixListener, handler: &Handler, stop: &AtomicBool) {
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
            let busy = ControlReply::Error { message: format!("busy: {MAX_CLIENTS} control connections open") };
            let _ = write_reply(&mut stream, &busy);
            continue;
        }
        let handler = Arc::clone(handler);
        let count = Arc::clone(&clients);
        let spawned = std::thread::Builder::new().name("nvmf-control-client".into()).spawn(move || {
            if let Err(e) = serve(stream, &handler) {
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

fn write_reply(stream: &mut UnixStream, reply: &ControlReply) -> io::Result<()> {
    let mut line = serde_json::to_string(reply).map_err(io::Error::other)?;
    line.push('\n');
    stream.write_all(line.as_bytes())
}

/// Serve requests on one connection until it closes, idles out or sends an oversize line.
fn serve(stream: UnixStream, handler: &Handler) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
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
            let reply = ControlReply::Error { message: format!("request longer than {MAX_LINE} bytes") };
            return write_reply(&mut writer, &reply);
        }
        let reply = match serde_json::from_slice::<ControlRequest>(&line) {
            Ok(request) => {
                tracing::debug!(?request, "control request");
                handler(request)
            }
            Err(e) => ControlReply::Error { message: format!("invalid request: {e}") },
        };
        write_reply(&mut writer, &reply)?;
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn server(dir: &Path) -> ControlServer {
        let handler: Handler = Arc::new(|r| match r {
            ControlRequest::List => ControlReply::List { controllers: Vec::new() },
            _ => ControlReply::Error { message: "no".into() },
        });
        ControlServer::start(&dir.join("c.sock"), handler).unwrap()
    }

    #[test]
    fn answers_requests_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        assert_eq!(request(s.path(), &ControlRequest::List).unwrap(), ControlReply::List { controllers: Vec::new() });
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut raw = UnixStream::connect(s.path()).unwrap();
        raw.write_all(b"{not json\n\"list\"\n").unwrap();
        let mut lines = BufReader::new(raw).lines();
        let first: ControlReply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(matches!(first, ControlReply::Error { message } if message.starts_with("invalid request:")));
        let second: ControlReply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(second, ControlReply::List { controllers: Vec::new() }, "the connection survives a bad line");
    }

    #[test]
    fn oversize_request_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let mut raw = UnixStream::connect(s.path()).unwrap();
        let big = vec![b'x'; MAX_LINE + 10];
        let _ = raw.write_all(&big);
        let mut reply = String::new();
        BufReader::new(raw).read_line(&mut reply).unwrap();
        assert!(reply.contains("request longer than"), "{reply}");
    }

    #[test]
    fn a_second_daemon_is_refused_and_a_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let handler: Handler = Arc::new(|_| ControlReply::Error { message: String::new() });
        let err = ControlServer::start(s.path(), Arc::clone(&handler)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let path = s.path().to_owned();
        s.stop();
        assert!(!path.exists(), "socket removed on stop");
        let err = request(&path, &ControlRequest::List).unwrap_err().to_string();
        assert!(err.starts_with(&format!("no nvmf-host daemon at {}: start it with", path.display())), "{err}");
        // A stale socket file (bound, never served) is replaced.
        drop(UnixListener::bind(&path).unwrap());
        let again = ControlServer::start(&path, Arc::clone(&handler)).unwrap();
        assert!(request(again.path(), &ControlRequest::List).is_ok());
        // A file that is not a socket is left alone.
        let file = dir.path().join("precious");
        std::fs::write(&file, "data").unwrap();
        let err = ControlServer::start(&file, handler).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
    }
}
