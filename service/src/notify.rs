//! The service manager's readiness protocol (`sd_notify`): datagrams like `READY=1`, `STATUS=…`, `STOPPING=1` and
//! `WATCHDOG=1` sent to the socket named by `$NOTIFY_SOCKET` (a path, or an abstract name starting with `@`). Without
//! the variable (not started by systemd with `Type=notify`) every call does nothing. Runs on the control threads
//! (main and the watchdog thread), never on a data-path thread.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The longest a notification waits for room in the service manager's socket queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to the service manager's notification socket, if there is one.
#[derive(Debug)]
pub struct ServiceNotifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl ServiceNotifier {
    /// From `$NOTIFY_SOCKET`; inert when unset or empty. An unusable value is an error (systemd set it, so it
    /// should work).
    pub fn from_env() -> io::Result<Self> {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(v) if !v.is_empty() => Self::to(&v.to_string_lossy()),
            _ => Ok(ServiceNotifier { target: None }),
        }
    }

    /// Notifications to the socket `address` (a path, or `@name` for the abstract namespace).
    pub fn to(address: &str) -> io::Result<Self> {
        Self::with_send_timeout(address, SEND_TIMEOUT)
    }

    fn with_send_timeout(address: &str, timeout: Duration) -> io::Result<Self> {
        let addr = match address.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(address)?,
        };
        let socket = UnixDatagram::unbound()?;
        // A manager that stops reading (its queue holds only a few datagrams) must not stall the daemon: a send
        // waits at most this long, then the notification is dropped with a warning.
        socket.set_write_timeout(Some(timeout))?;
        Ok(ServiceNotifier { target: Some((socket, addr)) })
    }

    /// Whether a service manager listens.
    pub fn is_active(&self) -> bool {
        self.target.is_some()
    }

    /// Send `state` (newline-separated `KEY=VALUE` assignments). Failures are logged, not returned: the daemon
    /// must not stop serving because the service manager went away.
    pub fn notify(&self, state: &str) {
        if let Some((socket, addr)) = &self.target {
            if let Err(e) = socket.send_to_addr(state.as_bytes(), addr) {
                tracing::warn!(error = %e, state, "sd_notify failed");
            }
        }
    }
}

/// `RELOADING=1` with the `MONOTONIC_USEC=` timestamp systemd ≥ 253 uses to match the notification to the reload
/// job it started (a `Type=notify-reload` unit ignores `RELOADING=1` without it). Send it before re-reading the
/// configuration and `READY=1` after, whether the reload was applied or rejected.
pub fn reloading() -> String {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(now.tv_nsec / 1000).unwrap_or(0);
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

/// The watchdog interval the service manager asked for (`$WATCHDOG_USEC`, for this process when `$WATCHDOG_PID`
/// is set), if any.
pub fn watchdog_interval() -> Option<Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
        if pid.to_string_lossy().parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// A thread that tells the service manager how the daemon is doing: `STATUS=` with what `status` says, and
/// `WATCHDOG=1` at half the watchdog interval when one is set (else every 5 s). Ends when dropped.
#[derive(Debug)]
pub struct StatusReporter {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusReporter {
    /// Start reporting through `notifier` (nothing is started when no service manager listens). `status` is
    /// called on the reporter thread and must not block for long: a late watchdog ping restarts the service.
    pub fn start(
        notifier: std::sync::Arc<ServiceNotifier>,
        status: impl Fn() -> String + Send + 'static,
    ) -> io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        if !notifier.is_active() {
            return Ok(StatusReporter { stop, thread: None });
        }
        let watchdog = watchdog_interval();
        let period = watchdog.map_or(Duration::from_secs(5), |w| (w / 2).min(Duration::from_secs(5)));
        let thread = std::thread::Builder::new().name("nvmf-sd-notify".into()).spawn(move || loop {
            let watchdog_ping = if watchdog.is_some() { "WATCHDOG=1\n" } else { "" };
            notifier.notify(&format!("{watchdog_ping}STATUS={}", status()));
            match stopped.recv_timeout(period) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        })?;
        Ok(StatusReporter { stop, thread: Some(thread) })
    }
}

impl Drop for StatusReporter {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let notifier = ServiceNotifier::to(path.to_str().unwrap()).unwrap();
        assert!(notifier.is_active());
        notifier.notify("READY=1\nSTATUS=serving");
        assert_eq!(received(&listener), "READY=1\nSTATUS=serving");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("nvmf-rs-notify-test-{}", std::process::id());
        let listener = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        listener.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ServiceNotifier::to(&format!("@{name}")).unwrap().notify("STOPPING=1");
        assert_eq!(received(&listener), "STOPPING=1");
    }

    #[test]
    fn a_manager_that_stops_reading_does_not_stall_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let notifier = ServiceNotifier::with_send_timeout(path.to_str().unwrap(), Duration::from_millis(5)).unwrap();
        // More than a unix datagram queue holds (net.unix.max_dgram_qlen, 10 by default): without the send
        // timeout the first notification past the queue's capacity would block forever.
        for i in 0..100 {
            notifier.notify(&format!("WATCHDOG=1\nSTATUS={i}"));
        }
        listener.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(received(&listener), "WATCHDOG=1\nSTATUS=0");
    }

    #[test]
    fn inert_without_a_socket_and_survives_a_vanished_one() {
        let notifier = ServiceNotifier { target: None };
        assert!(!notifier.is_active());
        notifier.notify("READY=1");
        // A socket path nobody listens on: the send fails, is logged, and nothing panics.
        let dir = tempfile::tempdir().unwrap();
        ServiceNotifier::to(dir.path().join("gone").to_str().unwrap()).unwrap().notify("READY=1");
    }
}
