//! The daemon's life on its main thread: start the target from a validated configuration, tell the service manager it
//! is ready, then answer requests — from signals (SIGHUP reloads, SIGTERM/SIGINT stops) and from the control socket
//! (`list`, `disconnect`, `reload`, `config_path`, `log_level`, `ana_state`, `namespace_ana_group`) — one at a time
//! until told to stop; then shut down.
//! `main.rs` only parses the command line, loads the configuration and starts logging.
//!
//! Blocks only between requests and while a request (a reload: opening storage, binding listeners) runs; nothing
//! here is on the data path.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use nvmf_config::TargetConfig;

use crate::control::{self, listing, ControlServer, Request, TargetReply, TargetRequest, DEFAULT_CONTROL_SOCKET};
use crate::daemon::{RunningTarget, StartError};
use crate::notify::{ServiceNotifier, StatusReporter};
use crate::reload::Reloader;

/// How the daemon runs, besides its configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The configuration file the target runs from (`None`: quick-start flags), re-read by a reload.
    pub config_path: Option<PathBuf>,
    /// Where to serve the control socket (`None`: [`DEFAULT_CONTROL_SOCKET`] when it can be served there).
    pub control: Option<PathBuf>,
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The signal handlers could not be installed.
    #[error("installing signal handlers")]
    Signals(#[source] io::Error),
    /// The thread forwarding signals could not start.
    #[error("starting the signal thread")]
    SignalThread(#[source] io::Error),
    /// `$NOTIFY_SOCKET` names no usable socket.
    #[error("$NOTIFY_SOCKET")]
    Notify(#[source] io::Error),
    /// The target could not start.
    #[error("starting the target")]
    Start(#[source] StartError),
    /// The control socket named by the options could not be served.
    #[error(transparent)]
    Control(#[from] control::ServeError),
    /// The status reporter thread could not start.
    #[error("starting the status reporter")]
    Status(#[source] io::Error),
}

/// Run the target of `config` until SIGTERM/SIGINT (see the module docs).
pub fn serve(config: TargetConfig, options: &ServeOptions) -> Result<(), ServeError> {
    let (requests, received) = std::sync::mpsc::channel();
    let signals = crate::signals::Signals::new().map_err(ServeError::Signals)?;
    control::forward_signals(signals, requests.clone()).map_err(ServeError::SignalThread)?;
    let notifier = Arc::new(ServiceNotifier::from_env().map_err(ServeError::Notify)?);
    let mut running = crate::daemon::start(&config).map_err(ServeError::Start)?;
    let control = match start_control(options.control.as_deref(), requests) {
        Ok(control) => control,
        Err(e) => {
            running.shutdown();
            return Err(e);
        }
    };
    crate::daemon::print_ready(&config, &running);
    notifier.notify("READY=1");
    let status =
        StatusReporter::start(Arc::clone(&notifier), running.transport_counters(), Arc::clone(running.target()))
            .map_err(ServeError::Status);
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            running.shutdown();
            return Err(e);
        }
    };
    let mut reloader = Reloader::new(options.config_path.clone(), config);
    answer_requests(&received, &mut running, &mut reloader, &notifier);
    notifier.notify("STOPPING=1");
    drop(status);
    tracing::info!("shutting down");
    if let Some(control) = control {
        control.stop();
    }
    running.shutdown();
    Ok(())
}

/// Answer `requests` one at a time until a [`Request::Terminate`] (or until every sender is gone).
pub fn answer_requests(
    requests: &Receiver<Request>,
    running: &mut RunningTarget,
    reloader: &mut Reloader,
    notifier: &ServiceNotifier,
) {
    for request in requests {
        match request {
            Request::Terminate => return,
            Request::Reload => {
                let _ = reloader.reload(running, notifier);
            }
            Request::Control(request, reply) => {
                let _ = reply.send(answer(request, running, reloader, notifier));
            }
        }
    }
}

/// A control client's answer.
fn answer(
    request: TargetRequest,
    running: &mut RunningTarget,
    reloader: &mut Reloader,
    notifier: &ServiceNotifier,
) -> TargetReply {
    let error = |message: String| TargetReply::Error { message };
    // Operator actions go to the log; `list` may be polled by a monitor.
    if request == TargetRequest::List {
        tracing::debug!("control request: list");
    } else {
        tracing::info!(?request, "control request");
    }
    match request {
        TargetRequest::List => TargetReply::List(listing::listing(running.target())),
        TargetRequest::Disconnect(which) => match listing::disconnect(running.target(), &which) {
            Ok(controllers) => TargetReply::Disconnected { controllers },
            Err(message) => error(message),
        },
        TargetRequest::ConfigPath => TargetReply::ConfigPath { path: reloader.path().map(|p| p.display().to_string()) },
        TargetRequest::Reload => match reloader.reload(running, notifier) {
            Ok(summary) => TargetReply::Reloaded { changes: summary.to_string().lines().map(str::to_owned).collect() },
            Err(e) => error(e.to_string()),
        },
        TargetRequest::LogLevel(request) => {
            request.apply().map_or_else(|e| error(e.to_string()), |filter| TargetReply::LogLevel { filter })
        }
        TargetRequest::AnaState(request) => match listing::set_ana_state(running.target(), &request) {
            Ok((port_id, changed)) => TargetReply::AnaState { port_id, changed },
            Err(message) => error(message),
        },
        TargetRequest::NamespaceAnaGroup(r) => {
            match running.target().move_namespace_ana_group(&r.subnqn, r.nsid, r.group) {
                Ok(moved) => TargetReply::NamespaceAnaGroup { moved },
                Err(e) => error(e.to_string()),
            }
        }
    }
}

/// The control socket at `path`, or at the default path when it can be served there (a warning otherwise: SIGHUP
/// still reloads).
fn start_control(path: Option<&Path>, requests: Sender<Request>) -> Result<Option<ControlServer>, ServeError> {
    match path {
        Some(path) => Ok(Some(control::serve(path, requests)?)),
        None => match control::serve(Path::new(DEFAULT_CONTROL_SOCKET), requests) {
            Ok(server) => Ok(Some(server)),
            Err(e) => {
                tracing::warn!("no control socket ({e}); `nvmf-target list` and `reload` cannot reach this daemon (SIGHUP still reloads)");
                Ok(None)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    const NQN: &str = "nqn.2024-01.io.nvmf-rs:serve-unit";

    /// A target on `port` (a file cannot ask for port 0) with `namespaces` memory namespaces.
    fn config_text(port: u16, namespaces: usize) -> String {
        let mut text = format!(
            "[reactors]\nthreads = 1\n[[listener]]\naddress = \"127.0.0.1\"\nport = {port}\n\
             [[subsystem]]\nnqn = \"{NQN}\"\n"
        );
        for _ in 0..namespaces {
            text.push_str("[[subsystem.namespace]]\nmemory = \"1MiB\"\n");
        }
        text
    }

    #[test]
    fn signal_and_control_requests_are_answered_until_terminate() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("target.toml");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::fs::write(&file, config_text(port, 1)).unwrap();
        let config = TargetConfig::from_file(&file).unwrap();
        let manager = UnixDatagram::bind(dir.path().join("notify")).unwrap();
        manager.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let notifier = ServiceNotifier::to(&dir.path().join("notify").display().to_string()).unwrap();
        let mut running = crate::daemon::start(&config).unwrap();
        let mut reloader = Reloader::new(Some(file.clone()), config);
        let (requests, received) = mpsc::channel();
        let main = std::thread::spawn(move || {
            answer_requests(&received, &mut running, &mut reloader, &notifier);
            running
        });
        let ask = |request: TargetRequest| {
            let (reply, answer) = mpsc::channel();
            requests.send(Request::Control(request, reply)).unwrap();
            answer.recv_timeout(Duration::from_secs(30)).expect("the main thread answers")
        };

        let path = Some(file.display().to_string());
        assert_eq!(ask(TargetRequest::ConfigPath), TargetReply::ConfigPath { path });
        std::fs::write(&file, config_text(port, 2)).unwrap();
        let applied = ask(TargetRequest::Reload);
        assert!(
            matches!(&applied, TargetReply::Reloaded { changes } if changes[0].starts_with("namespaces: 1 added")),
            "{applied:?}"
        );
        let TargetReply::List(listing) = ask(TargetRequest::List) else { panic!("list answers a listing") };
        let subsystem = listing.subsystems.iter().find(|s| s.nqn == NQN).expect("the subsystem is listed");
        assert_eq!(subsystem.namespaces.len(), 2);
        assert_eq!(listing.listeners[0].trsvcid, port.to_string());
        let nobody = ask(TargetRequest::Disconnect(control::protocol::DisconnectRequest {
            cntlid: Some(1),
            ..Default::default()
        }));
        assert_eq!(nobody, TargetReply::Error { message: "no live controller matches --cntlid 1".into() });
        // ANA: a listener's state, by its URL; errors name what is wrong.
        let ana = |listener: String, group: Option<u32>, state: &str| {
            ask(TargetRequest::AnaState(control::protocol::AnaStateRequest { listener, group, state: state.into() }))
        };
        let url = format!("tcp://127.0.0.1:{port}");
        assert_eq!(ana(url.clone(), Some(1), "inaccessible"), TargetReply::AnaState { port_id: 1, changed: true });
        assert_eq!(ana(url.clone(), Some(1), "inaccessible"), TargetReply::AnaState { port_id: 1, changed: false });
        let TargetReply::List(listing) = ask(TargetRequest::List) else { panic!("list answers a listing") };
        let states: Vec<_> = listing.listeners[0].ana_states.iter().map(|a| (a.group, a.state.as_str())).collect();
        assert_eq!(states, [(1, "inaccessible")]);
        assert_eq!(listing.subsystems.iter().find(|s| s.nqn == NQN).unwrap().namespaces[0].ana_group, 1);
        for (listener, group, state, message) in [
            ("tcp://127.0.0.9:1", None, "optimized", "no listener tcp://127.0.0.9:1 (see `nvmf-target list`)"),
            (url.as_str(), Some(129), "optimized", "ANA group 129 is invalid; allowed: 1..=128"),
            (
                url.as_str(),
                None,
                "standby",
                "ANA state \"standby\" is unknown; allowed: optimized, non-optimized, \
                inaccessible, persistent-loss or change",
            ),
        ] {
            assert_eq!(
                ana(listener.into(), group, state),
                TargetReply::Error { message: message.into() },
                "{listener}"
            );
        }
        // A namespace moves to another ANA group, live; errors name what is wrong.
        let move_to = |nsid: u32, group: u32| {
            let request = control::protocol::NamespaceAnaGroupRequest { subnqn: NQN.into(), nsid, group };
            ask(TargetRequest::NamespaceAnaGroup(request))
        };
        assert_eq!(move_to(2, 3), TargetReply::NamespaceAnaGroup { moved: true });
        assert_eq!(move_to(2, 3), TargetReply::NamespaceAnaGroup { moved: false });
        let TargetReply::List(listing) = ask(TargetRequest::List) else { panic!("list answers a listing") };
        assert_eq!(listing.subsystems.iter().find(|s| s.nqn == NQN).unwrap().namespaces[1].ana_group, 3);
        assert!(matches!(move_to(2, 129), TargetReply::Error { message } if message.contains("129")));
        assert!(matches!(move_to(9, 1), TargetReply::Error { message } if message.contains('9')));
        let mut notice = [0u8; 256];
        let n = manager.recv(&mut notice).unwrap();
        assert!(String::from_utf8_lossy(&notice[..n]).contains("RELOADING=1"), "the service manager hears of it");
        // SIGHUP's reload has no client to answer; an invalid file changes nothing.
        std::fs::write(&file, "[[subsystem]]\nnqn = 7\n").unwrap();
        requests.send(Request::Reload).unwrap();
        requests.send(Request::Terminate).unwrap();
        let running = main.join().unwrap();
        let namespaces = running.target().subsystem(NQN).unwrap().namespaces().len();
        assert_eq!(namespaces, 2, "the rejected reload left the running configuration");
        running.shutdown();
    }
}
