//! The transport-agnostic NVMe-oF controller: the target's model (Target, Subsystem, Namespace, Controller,
//! the discovery controller) and [`Queue`], the per-connection command state machine every transport drives.
//!
//! What lives where:
//! - [`target`]: [`Target`] (subsystems by NQN, the discovery subsystem, the listeners the discovery log
//!   reports) and its plain constructor parameters.
//! - [`subsystem`]: [`Subsystem`] and [`Namespace`]; the namespace table is an `Arc<NamespaceTable>` snapshot
//!   plus an `AtomicU64` generation that queues compare per command and refresh on change.
//! - [`ana`]: Asymmetric Namespace Access: the [`AnaTable`](ana::AnaTable) of every listener's state per ANA
//!   group, a snapshot plus generation like the namespace table, checked per I/O command.
//! - [`association`]: [`Controller`], the state an association's queues share (CC/CSTS, features, keep-alive
//!   timeout, asynchronous events, changed-namespace and error logs, SMART counters summed from its queues'
//!   [`QueueCounters`](crate::counters::QueueCounters)).
//! - [`reservation`]: a namespace's reservations (registrants, the reservation held, generation, PTPL) and the
//!   per-I/O reservation check; [`reservation_file`]: their state file for Persist Through Power Loss.
//! - `admin`: Identify, Get Log Page and Get/Set Features, answered into byte buffers.
//! - `discovery`: the Discovery Log Page the discovery controller serves.
//! - `io`: validation of I/O commands (NSID, LBA range, SGL vs. transfer length, MDTS).
//! - [`queue`]: [`Queue`], [`Step`], [`SlotId`], [`QueueError`].
//!
//! Threading: a [`Queue`] is owned by one reactor thread and never blocks; the data path touches no lock (the
//! namespace table is cached per queue; counters are single-writer atomics written with plain load/store).
//! The [`Controller`]'s `Mutex` is taken by admin commands, at Connect and on namespace changes, never per I/O.
//! Control-plane calls ([`Subsystem::add_namespace`], [`Target::add_subsystem`], …) run on any thread; they
//! notify the queues concerned through the callback registered with [`Queue::set_event_notifier`], after
//! which the reactor calls [`Queue::poll`].

pub mod ana;
pub mod association;
pub mod authentication;
pub mod generated_psks;
pub mod queue;
pub mod reservation;
pub mod reservation_file;
pub mod subsystem;
pub mod target;

mod admin;
mod discovery;
mod io;

#[cfg(test)]
mod tests;

pub use association::{Controller, QueueSnapshot};
pub use generated_psks::GeneratedPsks;
pub use queue::{split_storage_tag, storage_tag, Queue, QueueError, SlotId, Step};
pub use subsystem::{Namespace, NamespaceParams, NamespaceTable, Subsystem, SubsystemError, SubsystemParams};
pub use target::{
    ConnectLimit, KatoMinimum, ListenerParams, SecureChannel, Stalled, Target, TargetError, TargetParams,
    TransportInfo, DISCOVERY_KATO_MS,
};

/// A callback that wakes the reactor owning a queue (e.g. `mio::Waker::wake`). Called from any thread, with
/// no controller lock held, when the queue has something to do in [`Queue::poll`]: an asynchronous event to
/// deliver, or its association torn down.
pub type EventNotifier = std::sync::Arc<dyn Fn() + Send + Sync>;
