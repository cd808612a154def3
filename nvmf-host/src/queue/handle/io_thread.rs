//! The I/O thread of one queue link: it owns the queue and is the only thread that touches it (but for a host it
//! lends it to, below). Callers hand it requests through a bounded channel ([`Submitter`]) and wake it with a
//! `mio::Waker` in the queue's own poller; it takes every queued request, submits them all (one doorbell or one
//! write for the batch), polls, and posts each completion to its waiter (`ReplyTo`: a [`super::Pending`]'s
//! channel or a completion sink), publishing counters and the failure through atomics (`Published`). Asked to, it
//! lends its whole loop ([`IoLoop`]) to a thread that hosts the link and waits until it comes back (see
//! [`super::hosting`]).
//!
//! What blocks: the thread blocks only in the queue's `poll` — at most `TIMEOUT_CHECK` at a time while
//! commands that can time out are outstanding, until woken while none is. Whether a `poll` may block at all is
//! its [`Poller`]'s call (the `[host]` `poll` mode): adaptive polls without blocking for a while after work when
//! commands are outstanding (yielding the CPU between empty polls), busy never blocks, sleep always may; with no
//! command to wait for, only busy keeps polling. [`Submitter::submit`] blocks only while the request channel is
//! full (backpressure).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SendError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use mio::Waker;
use nvmf_common::nvme::opcode::admin::ASYNC_EVENT_REQUEST;
use nvmf_config::PollMode;
use nvmf_service::poll::{Poller, Wait};

use super::hosting::Lender;
use super::in_flight::{InFlight, ReplyTo};
use super::metrics::{bump, Meter};
use super::pending::{reply_port, Pending};
use super::recovery::Recovery;
use super::sink::Wakes;
use crate::error::HostError;
use crate::queue::{BareQueue, Completion, Rejected, Request};

#[expect(
    clippy::large_enum_variant,
    reason = "a request is moved once into the channel's slot; boxing it would allocate per command"
)]
pub(super) enum Message {
    Submit(Request<InFlight>),
    /// Let outstanding commands finish, then stop.
    Shutdown,
    /// Fail outstanding commands now ([`HostError::ShutDown`]) and stop: the connection is being replaced.
    Abort,
    /// Hand the link to the thread behind this lender, which drives it between its own work (see
    /// [`super::hosting`]); refused (dropped) when the link has failed or is stopping, or its queue has no
    /// poller descriptor to wait on.
    Lend(Lender),
}

/// State the I/O thread publishes for other threads (atomics and a set-once cell: no lock).
#[derive(Debug, Default)]
pub(super) struct Published {
    pub(super) submitted: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) r2ts: AtomicU64,
    pub(super) max_outstanding: AtomicU16,
    /// `poll`s that could block (the rest returned at once), counted by the I/O thread alone.
    pub(super) sleeps: AtomicU64,
    pub(super) meter: Meter,
    pub(super) failure: OnceLock<HostError>,
    /// Told when `failure` is set (a recovering queue's [`Recovery`]; locked once per link and once on its
    /// failure, never per command).
    pub(super) watch: Mutex<Option<Arc<dyn Recovery>>>,
}

impl Published {
    /// Record the link's failure and tell the watcher, the first time.
    fn fail(&self, e: &HostError) {
        if self.failure.set(e.clone()).is_ok() {
            if let Some(w) = self.watch.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                w.link_failed();
            }
        }
    }

    /// Tell `recovery` when this link fails (now, if it already has). The failure is set before the I/O thread
    /// takes the lock, so at least one of the two sees the other: no failure goes unreported (one may be
    /// reported twice).
    pub(super) fn watch(&self, recovery: &Arc<dyn Recovery>) {
        let mut w = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        *w = Some(Arc::clone(recovery));
        if self.failure.get().is_some() {
            recovery.link_failed();
        }
    }
}

/// A cloneable way to submit to a queue from any thread.
#[derive(Clone)]
pub struct Submitter {
    pub(super) qid: u16,
    pub(super) tx: SyncSender<Message>,
    pub(super) waker: Arc<Waker>,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitter").field("qid", &self.qid).finish_non_exhaustive()
    }
}

impl Submitter {
    /// Submit `sqe` with `data` moving in `direction`; returns the pending completion.
    pub fn submit(&self, request: Request<()>) -> Result<Pending, HostError> {
        let (port, pending) = reply_port(self.qid, None);
        self.send(request, ReplyTo::Channel(port), true).map_err(|(e, _)| e)?;
        Ok(pending)
    }

    /// Submit with the completion posted to `reply`, waking the I/O thread if `wake` (else only when the
    /// request channel is full). On failure the request's buffer comes back with the error (and nothing is
    /// posted).
    pub(super) fn send(&self, request: Request<()>, reply: ReplyTo, wake: bool) -> Result<(), (HostError, Vec<u8>)> {
        let Request { sqe, data, direction, context: () } = request;
        let timed = !(self.qid == 0 && sqe.opcode == ASYNC_EVENT_REQUEST);
        let context = InFlight { reply, submitted: None, direction, timed };
        let request = Request { sqe, data, direction, context };
        let message = Message::Submit(request);
        let sent = match self.tx.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => {
                // A sleeping I/O thread must take some before this one fits; links this thread hosts go back
                // first (this may be one of them).
                super::hosting::release_all();
                let _ = self.waker.wake();
                self.tx.send(message)
            }
            Err(TrySendError::Disconnected(message)) => Err(SendError(message)),
        };
        if let Err(e) = sent {
            let data = match e.0 {
                Message::Submit(mut r) => {
                    r.context.reply.disarm();
                    r.data
                }
                Message::Shutdown | Message::Abort | Message::Lend(_) => Vec::new(),
            };
            return Err((HostError::ShutDown { qid: self.qid }, data));
        }
        // The request is queued; if the wake fails the I/O thread is gone and the request completes with
        // ShutDown when the channel drops.
        if wake {
            let _ = self.waker.wake();
        }
        Ok(())
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.qid
    }
}

fn reply(completion: Completion<InFlight>, meter: &Meter, now: Instant, wakes: &mut Wakes) {
    let Completion { context, result, data, r2ts, in_capsule } = completion;
    meter.record(&context, &result, data.len(), now);
    context.reply.deliver(Completion { context: (), result, data, r2ts, in_capsule }, wakes);
}

fn reject(rejected: Rejected<InFlight>, meter: &Meter) {
    let Rejected { error, request } = rejected;
    bump(&meter.errors, 1);
    let reply = Completion { context: (), result: Err(error), data: request.data, r2ts: 0, in_capsule: false };
    request.context.reply.deliver(reply, &mut Wakes::default());
}

/// Hand every finished command to its waiter (one clock read and one wake-up per sink for the batch), the
/// queue's counters published first: a waiter holding its reply finds its command counted in
/// [`QueueHandle::stats`] (as it finds it in the meter, recorded before each delivery). Returns whether it
/// published (there was something to deliver).
fn reply_all<Q: BareQueue<InFlight>>(queue: &mut Q, shared: &Published) -> bool {
    let Some(first) = queue.next_completion() else { return false };
    publish(queue, shared);
    let meter = &shared.meter;
    let now = Instant::now();
    let mut wakes = Wakes::default();
    reply(first, meter, now, &mut wakes);
    while let Some(c) = queue.next_completion() {
        reply(c, meter, now, &mut wakes);
    }
    true
}

/// How long the I/O thread sleeps at most while commands are outstanding: how late a command timeout may be seen.
pub(super) const TIMEOUT_CHECK: Duration = Duration::from_millis(100);

/// The timeout of the next `poll` after the poller said `wait`: none (poll and return) when it says poll and a
/// command may complete — an Asynchronous Event Request waits for an event, not worth a spin — or always in busy
/// mode; else block, at most [`TIMEOUT_CHECK`] while commands that can time out are outstanding, until woken
/// while none is.
pub(super) fn poll_timeout(wait: Wait, mode: PollMode, timed_outstanding: bool) -> Option<Duration> {
    match wait {
        Wait::Poll if timed_outstanding || mode == PollMode::Busy => Some(Duration::ZERO),
        _ => timed_outstanding.then_some(TIMEOUT_CHECK),
    }
}

/// What the I/O thread owns while it serves a link: the queue, the request channel, the backlog and where it
/// publishes. It moves as a whole to a thread that hosts the link ([`super::hosting`]) and back.
pub(super) struct IoLoop<Q> {
    pub(super) queue: Q,
    rx: Receiver<Message>,
    pub(super) shared: Arc<Published>,
    backlog: VecDeque<Request<InFlight>>,
    /// Told to stop (or every submitter is gone): outstanding commands finish, then the thread ends.
    pub(super) stopping: bool,
}

impl<Q: BareQueue<InFlight>> IoLoop<Q> {
    /// Take every queued message; returns whether it took a request, and a lend asked for (the last).
    fn take_messages(&mut self) -> (bool, Option<Lender>) {
        let (mut took, mut lend) = (false, None);
        let mut now = None;
        loop {
            match self.rx.try_recv() {
                Ok(Message::Submit(mut r)) => {
                    took = true;
                    r.context.submitted = Some(*now.get_or_insert_with(Instant::now));
                    self.backlog.push_back(r);
                }
                Ok(Message::Lend(l)) => lend = Some(l),
                Ok(Message::Shutdown) | Err(TryRecvError::Disconnected) => {
                    self.stopping = true;
                    break;
                }
                Ok(Message::Abort) => {
                    self.queue.close();
                    self.stopping = true;
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        (took, lend)
    }

    /// Submit from the backlog while command identifiers are free (a failed queue rejects them all).
    fn submit_backlog(&mut self) {
        while self.queue.free_slots() > 0 || self.queue.failure().is_some() {
            let Some(request) = self.backlog.pop_front() else { break };
            if let Err(rejected) = self.queue.submit(request) {
                reject(*rejected, &self.shared.meter);
            }
        }
    }

    /// One turn that never blocks, on a thread hosting the link: take requests, submit, move the queue along and
    /// deliver completions. Returns whether the link goes back to its I/O thread (it was told to stop, or it
    /// failed: its I/O thread handles both). A lend asked for by another thread meanwhile is refused.
    pub(super) fn hosted_turn(&mut self) -> bool {
        let (_, lend) = self.take_messages();
        // Another thread asked too: the link stays where it is, and that thread submits through the channel.
        drop(lend);
        if self.stopping {
            return true;
        }
        self.submit_backlog();
        reply_all(&mut self.queue, &self.shared);
        if self.queue.failure().is_none() {
            let _ = self.queue.poll(Some(Duration::ZERO));
            if !reply_all(&mut self.queue, &self.shared) {
                publish(&self.queue, &self.shared);
            }
        }
        self.queue.failure().is_some()
    }

    /// Before its host sleeps on the queue's poller descriptor: get the queue ready to wake it
    /// ([`BareQueue::prepare_wait`]), then take the requests whose wake-up that (or the turn's zero poll)
    /// consumed — each request is queued before its wake-up, so none is left behind. False when there is
    /// something to turn first (a failure too: the next turn gives the link back).
    pub(super) fn prepare_wait(&mut self) -> bool {
        let ready = self.queue.failure().is_none() && self.queue.prepare_wait().unwrap_or(false);
        let (took, lend) = self.take_messages();
        drop(lend);
        ready && !took && !self.stopping
    }
}

/// The I/O thread.
pub(super) fn run<Q: BareQueue<InFlight> + 'static>(
    queue: Q,
    rx: Receiver<Message>,
    shared: Arc<Published>,
    mut poller: Poller,
) {
    let qid = queue.qid();
    let mut lp = Box::new(IoLoop { queue, rx, shared, backlog: VecDeque::new(), stopping: false });
    // Whether the last `poll` brought completions: with requests taken and replies delivered, what the poller
    // calls work.
    let mut worked = false;
    loop {
        let (took, lend) = lp.take_messages();
        worked |= took;
        lp.submit_backlog();
        worked |= reply_all(&mut lp.queue, &lp.shared);
        if let Some(lender) = lend {
            if lp.queue.failure().is_none() && !lp.stopping {
                let Some(back) = super::hosting::lend(lp, lender) else { return };
                lp = back;
                worked = true;
                continue;
            }
        }
        if lp.queue.failure().is_some() {
            publish(&lp.queue, &lp.shared);
            if lp.stopping {
                break;
            }
            // Nothing to poll any more: answer later requests with the failure until told to stop.
            match lp.rx.recv() {
                Ok(Message::Submit(r)) => lp.backlog.push_back(r),
                Ok(Message::Lend(_)) => {}
                Ok(Message::Shutdown | Message::Abort) | Err(_) => break,
            }
            continue;
        }
        if lp.stopping && lp.queue.outstanding() == 0 && lp.backlog.is_empty() {
            break;
        }
        // Outstanding commands have timeouts to check; with none (an Asynchronous Event Request has none), only a
        // submission (the waker), the peer or a transport event has anything for this thread, and each of those
        // ends the wait.
        let wait = poller.after_turn(worked, Instant::now());
        let timeout = poll_timeout(wait, poller.mode(), lp.queue.timed_outstanding());
        if timeout == Some(Duration::ZERO) {
            poller.yield_if_idle(worked);
        } else {
            bump(&lp.shared.sleeps, 1);
        }
        let _ = lp.queue.poll(timeout);
        worked = reply_all(&mut lp.queue, &lp.shared);
        // Submissions and a failure are published even when no command finished.
        if !worked {
            publish(&lp.queue, &lp.shared);
        }
    }
    let IoLoop { mut queue, shared, backlog, .. } = *lp;
    publish(&queue, &shared);
    queue.close();
    reply_all(&mut queue, &shared);
    for request in backlog {
        reject(Rejected { error: HostError::ShutDown { qid }, request }, &shared.meter);
    }
    tracing::debug!(qid, "I/O thread stopped");
}

fn publish<T, Q: BareQueue<T>>(queue: &Q, shared: &Published) {
    let stats = queue.stats();
    shared.submitted.store(stats.submitted, Ordering::Relaxed);
    shared.completed.store(stats.completed, Ordering::Relaxed);
    shared.r2ts.store(stats.r2ts, Ordering::Relaxed);
    shared.max_outstanding.store(stats.max_outstanding, Ordering::Relaxed);
    if let Some(e) = queue.failure() {
        shared.fail(e);
    }
}
