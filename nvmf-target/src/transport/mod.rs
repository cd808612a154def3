//! The boundary between a reactor and the transports: [`PollGroup`], what every transport implements so that a
//! [`Reactor`](crate::reactor) can serve its queue pairs without knowing which transport they use.
//!
//! A reactor owns an io_uring engine, a `mio::Poll` and one poll group. A poll group owns the queue pairs handed to
//! this reactor (TCP connections, RDMA queue pairs), each with its controller [`Queue`]; it registers their file
//! descriptors in the reactor's poll under tokens it takes from its [`GroupContext`], creates their queues with the
//! queue keys the context gives (a storage completion comes back to the group by that key), and answers the
//! reactor's questions at the end of a turn: output to flush, queue pairs that ended, the next timer, whether it
//! must turn again before sleeping.
//!
//! [`TransportSet`] is the poll group the daemon runs: one member per transport built in, each in its own range of
//! tokens and queue keys (the *space*). It, with [`listeners`], is the one place that names the transports; the
//! reactor and the daemon do not.
//!
//! Everything here runs on the reactor thread that owns the group and must never block.

mod admission;
pub mod listeners;
pub mod set;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::{Registry, Token};

use crate::backend::{IoEngine, NetCompletion};
use crate::controller::{EventNotifier, Queue, SlotId, Target, TransportInfo};

pub use admission::{Admission, Admitted, Refusal};
pub use listeners::{BoundTransportListeners, ListenError, TransportListeners};
pub use set::{BufferGauge, NewQueuePair, TransportCounters, TransportSet};

/// Tokens below this are the reactor's own (its waker and its engine's eventfd); a poll group's begin here.
pub(crate) const FIRST_GROUP_TOKEN: usize = 2;

/// Bits of a token (above [`FIRST_GROUP_TOKEN`]) or of a queue key that a group numbers its own; the bits above
/// are its space.
const LOCAL_BITS: u32 = 32;
const LOCAL_MASK: u64 = (1 << LOCAL_BITS) - 1;

/// When a queue's waiting commands are retried at the latest (by every transport's poll group). They are retried at
/// the end of every turn, but what frees their buffer or ring space may come later in the turn (a response written;
/// on RDMA a send completion reaped) with no event after it.
pub const RETRY_AFTER: Duration = Duration::from_millis(10);

// Tokens carry a space above 32 local bits, and storage tags a 48-bit queue key: both need 64-bit words.
const _: () = assert!(usize::BITS >= 64);

/// One transport's queue pairs on one reactor (see the module docs). The reactor calls, in every turn: `ready` for
/// each readiness event of the group's tokens, `storage_completed` for each storage completion of its queues, `poll`,
/// then `end_turn`; before sleeping `next_timer`.
pub trait PollGroup: Send + 'static {
    /// What the transport's listener thread hands over: an accepted connection, a validated connect request.
    type QueuePair: Send + 'static;

    /// Serve `queue_pair` on this reactor (or refuse it, telling the peer where the transport can).
    fn accept(&mut self, queue_pair: Self::QueuePair, cx: &mut GroupContext<'_>);

    /// The reactor's engine is up (called once, before any queue pair): e.g. probe what its ring supports.
    fn started(&mut self, cx: &mut GroupContext<'_>) {
        let _ = cx;
    }

    /// A socket op the group queued on the engine with tag [`GroupContext::net_tag`] finished. Groups that queue
    /// none never get one.
    fn network_completed(&mut self, completion: NetCompletion, cx: &mut GroupContext<'_>) {
        let _ = cx;
        tracing::error!(tag = completion.tag, "socket completion for a group that queues no socket ops");
    }

    /// A readiness event for `token`, one the group registered through [`GroupContext::token`].
    fn ready(&mut self, token: u64, event: &Event, cx: &mut GroupContext<'_>);

    /// A storage operation of queue `queue_key` (one the group got from [`GroupContext::new_queue`]) completed.
    fn storage_completed(
        &mut self,
        queue_key: u64,
        slot: SlotId,
        result: Result<u32, io::Error>,
        cx: &mut GroupContext<'_>,
    );

    /// Poll the queues whose timers are due at `cx.now` and those with work waiting (commands that waited for a
    /// buffer or ring space), or every queue when `notified` (a queue's notifier fired: which one is not known);
    /// whether any queue was polled (its storage ops are then submitted before the turn ends).
    fn poll(&mut self, cx: &mut GroupContext<'_>, notified: bool) -> bool;

    /// End of a turn: send what is queued, drop queue pairs that ended and drained. True when the group found
    /// more work meanwhile and the reactor must turn again without sleeping.
    fn end_turn(&mut self, cx: &mut GroupContext<'_>) -> bool;

    /// The earliest timer still ahead of `now` (keep-alive deadlines, retries, a closing queue pair's bound).
    fn next_timer(&self, now: Instant) -> Option<Instant>;

    /// Target shutdown: end every queue pair (the group is dropped once [`PollGroup::is_empty`]).
    fn shutdown(&mut self, cx: &mut GroupContext<'_>);

    /// No queue pair left, not even one waiting for its storage operations.
    fn is_empty(&self) -> bool;

    /// The queue pairs left, one short description each (a stopping reactor reports what it waits for).
    fn remaining(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What a poll group may use during a call: the reactor's engine and poll registry, the turn's clock, and the
/// tokens, queue keys and queues of its space.
pub struct GroupContext<'a> {
    /// The reactor's storage engine (and buffer pool).
    pub engine: &'a mut IoEngine,
    /// The reactor's poll, to register the group's file descriptors under [`GroupContext::token`]s.
    pub registry: &'a Registry,
    /// The clock read when this turn's poll returned.
    pub now: Instant,
    target: &'a Arc<Target>,
    notifier: &'a EventNotifier,
    space: u64,
}

impl std::fmt::Debug for GroupContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupContext").field("now", &self.now).field("space", &self.space).finish_non_exhaustive()
    }
}

impl<'a> GroupContext<'a> {
    /// The context of a reactor's poll group (space 0).
    pub(crate) fn new(
        engine: &'a mut IoEngine,
        registry: &'a Registry,
        now: Instant,
        target: &'a Arc<Target>,
        notifier: &'a EventNotifier,
    ) -> Self {
        GroupContext { engine, registry, now, target, notifier, space: 0 }
    }

    /// The same context for the member of a [`TransportSet`] numbered `space`.
    fn within(&mut self, space: u64) -> GroupContext<'_> {
        GroupContext {
            engine: self.engine,
            registry: self.registry,
            now: self.now,
            target: self.target,
            notifier: self.notifier,
            space,
        }
    }

    /// The poll token for the group's `local` token (what [`PollGroup::ready`] gets back).
    pub fn token(&self, local: u32) -> Token {
        let t = join(self.space, local);
        Token(FIRST_GROUP_TOKEN + usize::try_from(t).unwrap_or(usize::MAX - FIRST_GROUP_TOKEN))
    }

    /// The tag of the group's socket ops for its `local` value (what [`PollGroup::network_completed`] gets back).
    pub fn net_tag(&self, local: u32) -> u64 {
        join(self.space, local)
    }

    /// A controller queue for a new queue pair whose storage completions come back with queue key `local`
    /// (what [`PollGroup::storage_completed`] gets back): it knows the target, and its notifier makes this
    /// reactor poll its queues.
    pub fn new_queue(&self, mut transport: TransportInfo, local: u32) -> Queue {
        transport.queue_key = join(self.space, local);
        let mut queue = Queue::new(Arc::clone(self.target), transport, self.engine.clock().turn());
        queue.set_event_notifier(Arc::clone(self.notifier));
        queue
    }
}

/// A token (less [`FIRST_GROUP_TOKEN`]) or queue key: the member's own value in the member's space.
fn join(space: u64, local: u32) -> u64 {
    (space << LOCAL_BITS) | u64::from(local)
}

/// Splits a token (less [`FIRST_GROUP_TOKEN`]) or queue key of a [`TransportSet`] into its member's space and the
/// member's own value.
fn split(value: u64) -> (u64, u64) {
    (value >> LOCAL_BITS, value & LOCAL_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{split_storage_tag, storage_tag};

    #[test]
    fn a_members_tokens_and_queue_keys_come_back_to_it() {
        for (space, local) in [(0, 0), (0, 7), (1, 0), (1, 7), (1, u32::MAX), (3, 12345)] {
            assert_eq!(split(join(space, local)), (space, u64::from(local)));
            // A queue key survives a storage tag with every slot.
            for slot in [0, 1, u16::MAX] {
                let tag = storage_tag(join(space, local), SlotId::new(slot));
                assert_eq!(split_storage_tag(tag), (join(space, local), SlotId::new(slot)));
            }
        }
    }
}
