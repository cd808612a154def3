//! The target's service-manager notifications: `nvmf_service::notify` (sd_notify), with a status line that counts
//! the queue pairs served (NVMe/TCP connections, NVMe/RDMA queue pairs) and the I/O commands per second since the
//! previous line.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

pub use nvmf_service::notify::{watchdog_interval, ServiceNotifier};

use crate::controller::Target;
use crate::counters::CommandKind;
use crate::transport::TransportCounters;

/// The reporter thread (`STATUS=serving, N connection(s), X IOPS`, watchdog pings); ends when dropped.
#[derive(Debug)]
pub struct StatusReporter(#[expect(dead_code, reason = "held for its Drop")] nvmf_service::notify::StatusReporter);

/// I/O commands completed so far in every subsystem (live queues and ended ones), from the subsystems' metrics.
/// Takes each subsystem's metrics lock once: for the status line every few seconds, never per command.
pub fn io_commands(target: &Target) -> u64 {
    let mut total = 0u64;
    for subsystem in target.subsystems() {
        for snapshot in subsystem.metrics().totals().namespaces.values() {
            for kind in CommandKind::ALL.iter().filter(|k| k.is_io()) {
                total = total.wrapping_add(snapshot.kind(*kind).commands);
            }
        }
    }
    total
}

impl StatusReporter {
    /// Start reporting through `notifier`, summing the reactors' queue pairs (NVMe/TCP connections and NVMe/RDMA
    /// queue pairs) and the I/O commands of `target`'s subsystems for the status line.
    pub fn start(
        notifier: Arc<ServiceNotifier>,
        reactors: Vec<TransportCounters>,
        target: Arc<Target>,
    ) -> io::Result<Self> {
        // The previous sample, to turn the command count into a rate (only the reporter thread touches it).
        let previous = Mutex::new((Instant::now(), io_commands(&target)));
        let status = move || {
            let live: usize = reactors.iter().map(TransportCounters::queue_pairs).sum();
            let now = Instant::now();
            let commands = io_commands(&target);
            let mut previous = previous.lock().unwrap_or_else(PoisonError::into_inner);
            let seconds = now.duration_since(previous.0).as_secs_f64();
            // A subsystem removed by a reload takes its counts along: never report a negative rate.
            let done = commands.saturating_sub(previous.1);
            *previous = (now, commands);
            #[expect(clippy::cast_precision_loss, reason = "a rate for humans")]
            let iops = if seconds > 0.0 { done as f64 / seconds } else { 0.0 };
            format!("serving, {live} connection(s), {iops:.0} IOPS")
        };
        nvmf_service::notify::StatusReporter::start(notifier, status).map(StatusReporter)
    }
}
