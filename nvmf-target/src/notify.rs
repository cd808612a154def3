//! The target's service-manager notifications: `nvmf_service::notify` (sd_notify), with a status line that counts
//! the transport connections served.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use nvmf_service::notify::{watchdog_interval, ServiceNotifier};

/// The reporter thread (`STATUS=serving, N connection(s)`, watchdog pings); ends when dropped.
#[derive(Debug)]
pub struct StatusReporter(#[allow(dead_code)] nvmf_service::notify::StatusReporter); // held for its Drop

impl StatusReporter {
    /// Start reporting through `notifier`, summing `connections` for the status line.
    pub fn start(notifier: Arc<ServiceNotifier>, connections: Vec<Arc<AtomicUsize>>) -> io::Result<Self> {
        let status = move || {
            let live: usize = connections.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            format!("serving, {live} connection(s)")
        };
        nvmf_service::notify::StatusReporter::start(notifier, status).map(StatusReporter)
    }
}
