//! The control socket: a Unix stream socket (default [`DEFAULT_CONTROL_SOCKET`]) on which the daemon answers
//! `nvmf-target reload` and other local clients, like SPDK's RPC socket or a service manager's `ExecReload`. Unlike
//! SIGHUP, the client learns the outcome: what the reload changed, or the precise error that rejected it.
//!
//! Protocol: one request line per connection (`reload` or `config-path`); the reply is `ok` or `error` on its own
//! line, then free text, then the daemon closes the connection. Access is the socket file's permissions (0600:
//! the daemon's user and root).
//!
//! One thread (`nvmf-control`) accepts and reads requests, one client at a time; it hands each to the main thread
//! as a [`Request`] and writes the reply back. It never touches the target itself, and a client that stalls is cut
//! off by a timeout rather than blocking the next one.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_service::unix_socket::{bind_owner_only, SocketPathError};

/// Where the daemon serves its control socket unless told otherwise (systemd's `RuntimeDirectory=nvmf-target`).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/nvmf-target/control.sock";

/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request line.
const MAX_REQUEST: u64 = 256;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// What the daemon's main thread is asked to do, by a signal or a control client.
#[derive(Debug)]
pub enum Request {
    /// Stop (SIGTERM, SIGINT).
    Terminate,
    /// Re-read the configuration and apply it; the outcome goes to the control client, if one asked.
    Reload(Option<Sender<Reply>>),
    /// Say which configuration file the daemon re-reads.
    ConfigPath(Sender<Reply>),
}

/// The daemon's answer to a control request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The request succeeded.
    pub ok: bool,
    /// What happened (a reload summary, a path, or the error).
    pub text: String,
}

impl Reply {
    /// A success saying `text`.
    pub fn ok(text: impl Into<String>) -> Self {
        Reply { ok: true, text: text.into() }
    }

    /// A failure saying `text`.
    pub fn error(text: impl Into<String>) -> Self {
        Reply { ok: false, text: text.into() }
    }
}

/// Errors serving or using the control socket.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another live daemon serves this socket.
    #[error("control socket {0}: another nvmf-target serves it")]
    InUse(PathBuf),
    /// Something other than a socket is at the path: it is left alone.
    #[error("control socket {0}: the path exists and is not a socket (refusing to replace it)")]
    NotASocket(PathBuf),
    /// The socket could not be created.
    #[error("control socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// epoll or thread creation failed.
    #[error("control socket: {0}")]
    Os(#[source] io::Error),
    /// A client could not reach the daemon.
    #[error("cannot reach nvmf-target at {path} (is it running, with this --control socket?): {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A client's exchange with the daemon failed.
    #[error("control socket {path}: {source}")]
    Exchange {
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The daemon's reply is not `ok` or `error` and text.
    #[error("control socket {0}: malformed reply")]
    Malformed(PathBuf),
}

/// The running control socket; removed when stopped.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Serve the control socket at `path`, handing requests to `requests`. A stale socket file (no daemon behind
    /// it) is replaced; a live one is an error, and so is anything else at the path (a mistyped `--control` never
    /// deletes a file).
    pub fn start(path: &Path, requests: Sender<Request>) -> Result<Self, ControlError> {
        let bind_error = |source| ControlError::Bind { path: path.to_owned(), source };
        let listener = bind_owner_only(path).map_err(|e| match e {
            SocketPathError::InUse(path) => ControlError::InUse(path),
            SocketPathError::NotASocket(path) => ControlError::NotASocket(path),
            SocketPathError::Io { source, .. } => bind_error(source),
        })?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let poll = Poll::new().map_err(ControlError::Os)?;
        poll.registry()
            .register(&mut SourceFd(&listener.as_raw_fd()), LISTENER, Interest::READABLE)
            .map_err(ControlError::Os)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(ControlError::Os)?);
        let thread = std::thread::Builder::new()
            .name("nvmf-control".into())
            .spawn(move || serve(poll, &listener, &requests))
            .map_err(ControlError::Os)?;
        tracing::info!(path = %path.display(), "control socket ready");
        Ok(ControlServer { path: path.to_owned(), waker, thread: Some(thread) })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop serving and remove the socket file.
    pub fn stop(mut self) {
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(mut poll: Poll, listener: &UnixListener, requests: &Sender<Request>) {
    let mut events = Events::with_capacity(4);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "control socket: epoll failed");
            return;
        }
        if events.iter().any(|e| e.token() == WAKER) {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = answer(stream, requests) {
                        tracing::warn!(error = %e, "control client");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: accept failed");
                    break;
                }
            }
        }
    }
}

/// Read one request from `stream`, have the main thread answer it, write the reply.
fn answer(stream: UnixStream, requests: &Sender<Request>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_REQUEST)).read_line(&mut line)?;
    let command = line.trim();
    if command.is_empty() {
        // A liveness probe (a starting daemon checking whether the socket is taken): nothing to answer.
        return Ok(());
    }
    let (reply, answered) = mpsc::channel();
    let request = match command {
        "reload" => Request::Reload(Some(reply)),
        "config-path" => Request::ConfigPath(reply),
        _ => {
            let shown: String = command.chars().take(64).collect();
            return write_reply(
                &stream,
                &Reply::error(format!("unknown request {shown:?}; known: reload, config-path")),
            );
        }
    };
    tracing::info!(request = command, "control request");
    let reply = match requests.send(request) {
        Ok(()) => answered.recv().unwrap_or_else(|_| Reply::error("the daemon is stopping")),
        Err(_) => Reply::error("the daemon is stopping"),
    };
    write_reply(&stream, &reply)
}

fn write_reply(mut stream: &UnixStream, reply: &Reply) -> io::Result<()> {
    let status = if reply.ok { "ok" } else { "error" };
    write!(stream, "{status}\n{}\n", reply.text.trim_end())
}

/// Send `request` (`reload`, `config-path`) to the daemon serving `path` and return its reply.
pub fn request(path: &Path, request: &str) -> Result<Reply, ControlError> {
    let exchange = |source| ControlError::Exchange { path: path.to_owned(), source };
    let mut stream =
        UnixStream::connect(path).map_err(|source| ControlError::Connect { path: path.to_owned(), source })?;
    stream.write_all(format!("{request}\n").as_bytes()).map_err(exchange)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(exchange)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(exchange)?;
    let (status, rest) = text.split_once('\n').ok_or_else(|| ControlError::Malformed(path.to_owned()))?;
    let rest = rest.trim_end().to_owned();
    match status {
        "ok" => Ok(Reply::ok(rest)),
        "error" => Ok(Reply::error(rest)),
        _ => Err(ControlError::Malformed(path.to_owned())),
    }
}

/// What `nvmf-target reload` learned.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The daemon applied the file; what changed.
    Applied(String),
    /// The file is invalid here (its location and what is wrong): it was not sent, the daemon keeps running as it
    /// was.
    Invalid(nvmf_config::ConfigError),
    /// The daemon rejected the file, and keeps running as it was; why.
    Rejected(String),
}

/// Why `nvmf-target reload` could not ask.
#[derive(Debug, thiserror::Error)]
pub enum ReloadRequestError {
    /// The control socket could not be used.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The daemon has no file to reload (it runs from quick-start flags), or could not say which.
    #[error("{0}")]
    NoFile(String),
    /// The file named is not the one the daemon runs from.
    #[error("the daemon reloads {daemon}, not {named}")]
    OtherFile {
        /// The daemon's file.
        daemon: PathBuf,
        /// The file named on the command line.
        named: PathBuf,
    },
}

/// `nvmf-target reload`: ask the daemon at `socket` which file it runs from (it must be `file`, when given),
/// validate that file here, so that a typo is reported with its location and never reaches the daemon, then have
/// the daemon apply it.
pub fn request_reload(socket: &Path, file: Option<&Path>) -> Result<ReloadOutcome, ReloadRequestError> {
    let named = request(socket, "config-path")?;
    if !named.ok {
        return Err(ReloadRequestError::NoFile(named.text));
    }
    let daemon_file = PathBuf::from(&named.text);
    if let Some(file) = file {
        let same = match (file.canonicalize(), daemon_file.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => file == daemon_file,
        };
        if !same {
            return Err(ReloadRequestError::OtherFile { daemon: daemon_file, named: file.to_owned() });
        }
    }
    if let Err(e) = nvmf_config::TargetConfig::from_file(&daemon_file) {
        return Ok(ReloadOutcome::Invalid(e));
    }
    let reply = request(socket, "reload")?;
    Ok(if reply.ok { ReloadOutcome::Applied(reply.text) } else { ReloadOutcome::Rejected(reply.text) })
}

/// Forward the daemon's signals to `requests` (a thread that ends after forwarding a termination).
pub fn forward_signals(mut signals: crate::signals::Signals, requests: Sender<Request>) -> io::Result<()> {
    std::thread::Builder::new().name("nvmf-signals".into()).spawn(move || loop {
        let request = match signals.wait() {
            crate::signals::Request::Reload => Request::Reload(None),
            crate::signals::Request::Terminate => Request::Terminate,
        };
        let terminate = matches!(request, Request::Terminate);
        if requests.send(request).is_err() || terminate {
            return;
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A daemon stand-in: answers each request on `requests` like the main thread would.
    fn main_thread(requests: mpsc::Receiver<Request>) -> JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for request in requests {
                match request {
                    Request::Reload(Some(reply)) => {
                        seen.push("reload".to_owned());
                        reply.send(Reply::error("t.toml:3:1: bad\nsecond line")).unwrap();
                    }
                    Request::ConfigPath(reply) => {
                        seen.push("config-path".to_owned());
                        reply.send(Reply::ok("/etc/nvmf/target.toml")).unwrap();
                    }
                    other => seen.push(format!("{other:?}")),
                }
            }
            seen
        })
    }

    #[test]
    fn requests_reach_the_main_thread_and_replies_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let (tx, rx) = mpsc::channel();
        let main = main_thread(rx);
        let server = ControlServer::start(&path, tx).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only the daemon's user may reload");

        assert_eq!(request(&path, "config-path").unwrap(), Reply::ok("/etc/nvmf/target.toml"));
        assert_eq!(request(&path, "reload").unwrap(), Reply::error("t.toml:3:1: bad\nsecond line"));
        let unknown = request(&path, "format-disk").unwrap();
        assert!(!unknown.ok && unknown.text.contains("unknown request \"format-disk\""), "{unknown:?}");
        // A second daemon on the same socket is refused; the first keeps serving.
        let (tx2, _rx2) = mpsc::channel();
        assert!(matches!(ControlServer::start(&path, tx2), Err(ControlError::InUse(_))));
        assert!(request(&path, "config-path").unwrap().ok);

        server.stop();
        assert!(!path.exists(), "the socket file is removed at stop");
        assert!(matches!(request(&path, "reload"), Err(ControlError::Connect { .. })));
        assert_eq!(main.join().unwrap(), ["config-path", "reload", "config-path"]);
    }

    #[test]
    fn a_stale_socket_file_is_replaced_and_a_silent_client_does_not_block_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        drop(UnixListener::bind(&path).unwrap()); // a crashed daemon's leftover
        let (tx, rx) = mpsc::channel();
        let main = main_thread(rx);
        let server = ControlServer::start(&path, tx).unwrap();
        // A client that connects and sends nothing holds the thread at most CLIENT_TIMEOUT; closing ends it.
        let silent = UnixStream::connect(&path).unwrap();
        drop(silent);
        assert!(request(&path, "config-path").unwrap().ok);
        server.stop();
        assert_eq!(main.join().unwrap(), ["config-path"]);
    }

    #[test]
    fn reload_is_sent_only_for_the_daemons_file_once_it_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let file = dir.path().join("target.toml");
        let (tx, rx) = mpsc::channel();
        let daemon_file = file.display().to_string();
        let main = std::thread::spawn(move || {
            let mut reloads = 0;
            for request in rx {
                match request {
                    Request::ConfigPath(reply) => reply.send(Reply::ok(daemon_file.clone())).unwrap(),
                    Request::Reload(Some(reply)) => {
                        reloads += 1;
                        reply.send(Reply::ok("namespaces: 1 added, 0 removed")).unwrap();
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            reloads
        });
        let server = ControlServer::start(&path, tx).unwrap();

        std::fs::write(&file, "[[subsystem]]\nnqn = 7\n").unwrap();
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "").unwrap();
        let err = request_reload(&path, Some(&other)).unwrap_err();
        assert!(matches!(err, ReloadRequestError::OtherFile { .. }), "{err}");
        match request_reload(&path, None).unwrap() {
            ReloadOutcome::Invalid(e) => assert!(e.to_string().contains("target.toml:2"), "{e}"),
            outcome => panic!("an invalid file is not sent: {outcome:?}"),
        }
        let valid =
            "[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.nvmf-rs:control-unit\"\n";
        std::fs::write(&file, valid).unwrap();
        match request_reload(&path, Some(&file)).unwrap() {
            ReloadOutcome::Applied(changes) => assert_eq!(changes, "namespaces: 1 added, 0 removed"),
            outcome => panic!("a valid file is applied: {outcome:?}"),
        }
        server.stop();
        assert_eq!(main.join().unwrap(), 1, "only the valid file reached the daemon");
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("target.toml");
        std::fs::write(&file, "precious").unwrap();
        let (tx, _rx) = mpsc::channel();
        let err = ControlServer::start(&file, tx.clone()).unwrap_err();
        assert!(matches!(err, ControlError::NotASocket(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
        let link = dir.path().join("control.sock");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(ControlServer::start(&link, tx), Err(ControlError::NotASocket(_))));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    }

    #[test]
    fn an_unusable_path_is_a_bind_error() {
        let (tx, _rx) = mpsc::channel();
        let err = ControlServer::start(Path::new("/nonexistent-dir/control.sock"), tx).unwrap_err();
        assert!(matches!(err, ControlError::Bind { .. }), "{err}");
    }
}
