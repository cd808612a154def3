//! The control socket: where `nvmf-target list`, `disconnect`, `reload`, `log-level`, `ana-state` and
//! `ns-ana-group` reach the running daemon, like SPDK's RPC socket (default [`DEFAULT_CONTROL_SOCKET`], mode 0600:
//! the daemon's user and root). Unlike SIGHUP, a client learns the outcome: what a reload changed, or the precise
//! error that rejected it.
//!
//! The framing and the server are [`nvmf_service::control`]'s (JSON lines, shared with `nvmf-host`); the messages
//! are [`protocol`]'s. A client connection's thread hands each request to the daemon's main thread as a
//! [`Request`] and waits for the reply, so requests are answered one at a time, in order with reloads and signals;
//! the main thread reads the target ([`listing`]) and never touches a queue.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

pub use nvmf_service::control::{ControlError, ControlServer, ServeError};

pub mod listing;
pub mod protocol;
pub mod show;

pub use protocol::{TargetProtocol, TargetReply, TargetRequest, DEFAULT_CONTROL_SOCKET};

/// What the daemon's main thread is asked to do, by a signal or a control client.
#[derive(Debug)]
pub enum Request {
    /// Stop (SIGTERM, SIGINT).
    Terminate,
    /// Re-read the configuration and apply it (SIGHUP: nobody to answer).
    Reload,
    /// A control client's request, and where its reply goes.
    Control(TargetRequest, Sender<TargetReply>),
}

/// Serve the control socket at `path`, handing its requests to the main thread through `requests`.
pub fn serve(path: &Path, requests: Sender<Request>) -> Result<ControlServer, ServeError> {
    ControlServer::start::<TargetProtocol>(
        path,
        Arc::new(move |request| {
            let (reply, answered) = mpsc::channel();
            match requests.send(Request::Control(request, reply)) {
                Ok(()) => answered.recv().unwrap_or_else(|_| stopping()),
                Err(_) => stopping(),
            }
        }),
    )
}

fn stopping() -> TargetReply {
    TargetReply::Error { message: "the daemon is stopping".into() }
}

/// Send `request` to the daemon serving `path` and return its reply.
pub fn request(path: &Path, request: &TargetRequest) -> Result<TargetReply, ControlError> {
    nvmf_service::control::request::<TargetProtocol>(path, request)
}

/// What `nvmf-target reload` learned.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The daemon applied the file; what changed, one line each.
    Applied(Vec<String>),
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
    /// The daemon answered something else.
    #[error("unexpected reply from nvmf-target: {0}")]
    Unexpected(String),
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
    let daemon_file = match request(socket, &TargetRequest::ConfigPath)? {
        TargetReply::ConfigPath { path: Some(path) } => PathBuf::from(path),
        TargetReply::ConfigPath { path: None } => {
            return Err(ReloadRequestError::NoFile(
                "the target runs from quick-start flags, not a configuration file".into(),
            ))
        }
        TargetReply::Error { message } => return Err(ReloadRequestError::NoFile(message)),
        other => return Err(ReloadRequestError::Unexpected(format!("{other:?}"))),
    };
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
    match request(socket, &TargetRequest::Reload)? {
        TargetReply::Reloaded { changes } => Ok(ReloadOutcome::Applied(changes)),
        TargetReply::Error { message } => Ok(ReloadOutcome::Rejected(message)),
        other => Err(ReloadRequestError::Unexpected(format!("{other:?}"))),
    }
}

/// Forward the daemon's signals to `requests` (a thread that ends after forwarding a termination).
pub fn forward_signals(mut signals: crate::signals::Signals, requests: Sender<Request>) -> io::Result<()> {
    std::thread::Builder::new().name("nvmf-signals".into()).spawn(move || loop {
        let request = match signals.wait() {
            crate::signals::Request::Reload => Request::Reload,
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
    use std::thread::JoinHandle;

    use super::*;

    /// A daemon stand-in: answers each control request like the main thread would; returns what it saw.
    fn main_thread(requests: mpsc::Receiver<Request>, daemon_file: String) -> JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for request in requests {
                let Request::Control(request, reply) = request else { continue };
                seen.push(format!("{request:?}"));
                let answer = match request {
                    TargetRequest::ConfigPath => TargetReply::ConfigPath { path: Some(daemon_file.clone()) },
                    TargetRequest::Reload => TargetReply::Reloaded { changes: vec!["namespaces: 1 added".into()] },
                    _ => TargetReply::Error { message: "t.toml:3:1: bad".into() },
                };
                reply.send(answer).unwrap();
            }
            seen
        })
    }

    #[test]
    fn requests_reach_the_main_thread_and_replies_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let (tx, rx) = mpsc::channel();
        let main = main_thread(rx, "/etc/nvmf/target.toml".into());
        let server = serve(&path, tx).unwrap();
        let reply = request(&path, &TargetRequest::ConfigPath).unwrap();
        assert_eq!(reply, TargetReply::ConfigPath { path: Some("/etc/nvmf/target.toml".into()) });
        assert_eq!(
            request(&path, &TargetRequest::List).unwrap(),
            TargetReply::Error { message: "t.toml:3:1: bad".into() }
        );
        server.stop();
        assert!(!path.exists(), "the socket file is removed at stop");
        let err = request(&path, &TargetRequest::List).unwrap_err().to_string();
        assert!(err.starts_with("no nvmf-target daemon at"), "{err}");
        assert_eq!(main.join().unwrap(), ["ConfigPath", "List"]);
    }

    #[test]
    fn reload_is_sent_only_for_the_daemons_file_once_it_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let file = dir.path().join("target.toml");
        let (tx, rx) = mpsc::channel();
        let main = main_thread(rx, file.display().to_string());
        let server = serve(&path, tx).unwrap();

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
            ReloadOutcome::Applied(changes) => assert_eq!(changes, ["namespaces: 1 added"]),
            outcome => panic!("a valid file is applied: {outcome:?}"),
        }
        server.stop();
        let seen = main.join().unwrap();
        assert_eq!(
            seen.iter().filter(|r| *r == "Reload").count(),
            1,
            "only the valid file reached the daemon: {seen:?}"
        );
    }
}
