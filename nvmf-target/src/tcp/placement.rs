//! [`IncomingCpuPlacement`]: which reactor serves an NVMe/TCP connection once its queue's Connect arrives. The
//! host's queue sends from one CPU (the Linux host's `io_cpu`) and the kernel processes what arrives for the socket
//! there, so the reactor pinned to that CPU (`SO_INCOMING_CPU`) reads the socket without a wake-up on another CPU
//! and a cache miss per command; Linux nvmet runs its per-queue work there too. Accepting cannot place the queue:
//! the host opens every queue's socket, and sends ICReq, from the CPU that runs `nvme connect`. The queue's Connect
//! is the first PDU from its own CPU, so a connection is placed then, before its queue exists anywhere but in the
//! reactor that accepted it.
//!
//! Only with `[reactors] placement = "incoming_cpu"` and pinned reactors (`cpus`, two or more): an unpinned reactor
//! has no CPU to match.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::AcceptedConnection;

/// Hands a connection to a reactor by index; `false` when that reactor has ended (the target is stopping: the
/// connection closes).
pub type HandOff = Box<dyn Fn(usize, AcceptedConnection) -> bool + Send + Sync>;

/// The reactors' CPUs and the way to reach them (see the module docs). Shared by every reactor's TCP group.
pub struct IncomingCpuPlacement {
    /// Reactor index → the CPU it is pinned to.
    cpus: Vec<usize>,
    /// Set once every reactor runs.
    hand_off: OnceLock<HandOff>,
    /// Connections handed to another reactor.
    moved: AtomicU64,
}

impl std::fmt::Debug for IncomingCpuPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingCpuPlacement").field("cpus", &self.cpus).finish_non_exhaustive()
    }
}

impl IncomingCpuPlacement {
    /// Placement over reactors pinned to `cpus` (reactor `i` on `cpus[i]`); `None` when fewer than two are pinned.
    pub fn new(cpus: &[usize]) -> Option<Self> {
        (cpus.len() >= 2).then(|| IncomingCpuPlacement {
            cpus: cpus.to_vec(),
            hand_off: OnceLock::new(),
            moved: AtomicU64::new(0),
        })
    }

    /// Connect the reactors (once they all run).
    pub fn set_hand_off(&self, hand_off: HandOff) {
        let _ = self.hand_off.set(hand_off);
    }

    /// The reactor pinned to the CPU that processed what last arrived on `socket`, unless that is `here` or no
    /// reactor's CPU (or the kernel does not say, or the reactors are not connected yet).
    pub fn reactor_for(&self, socket: impl AsFd, here: usize) -> Option<usize> {
        self.hand_off.get()?;
        let cpu = socket2::SockRef::from(&socket).cpu_affinity().ok()?;
        self.cpus.iter().position(|&c| c == cpu).filter(|&r| r != here)
    }

    /// Hand `connection` to reactor `to` (see [`HandOff`]).
    pub fn hand_off(&self, to: usize, connection: AcceptedConnection) -> bool {
        let handed = self.hand_off.get().is_some_and(|hand_off| hand_off(to, connection));
        if handed {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
        handed
    }

    /// Connections handed to another reactor so far.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }
}
