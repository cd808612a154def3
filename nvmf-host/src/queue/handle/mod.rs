//! [`QueueHandle`]: a host queue pair of either transport ([`BareQueue`]: `TcpQueue` or `RdmaQueue`) on its own
//! I/O thread, usable from any number of threads.
//!
//! Threads: one I/O thread per queue owns the queue (socket or queue pair, slots) and is the only thread that
//! touches it. Callers hand it [`Request`]s through a bounded channel and wake it with a [`mio::Waker`]
//! registered in the queue's own poller (beside the socket on TCP, beside the completion channel and the RDMA
//! CM event channel on RDMA); each request carries a one-shot reply channel ([`Pending`]) on which the I/O
//! thread posts the [`Completion`]. The thread takes every queued request, submits them all (one doorbell or
//! one write for the batch), then polls: it sleeps in the queue's `poll` (RDMA arms the completion queue,
//! drains it once more and then sleeps) and never spins while idle. No lock is taken on this path: the
//! channel and the reply are lock-free queues, and the I/O thread publishes counters and the per-queue
//! metrics ([`QueueMetrics`]: bytes, errors, a latency histogram) through atomics. (A [`Pending`]'s reply
//! channel and waker are allocated per command; a completion sink, below, needs neither.)
//!
//! What blocks: [`Submitter::submit`] blocks only while the request channel is full (as many requests queued as the
//! queue is deep — backpressure); [`Pending::wait`] blocks for the completion, bounded by its timeout. A [`Pending`] is
//! also a `Future`: the I/O thread wakes the awaiting task after posting the reply (an `AtomicWaker` beside the reply
//! channel: no lock). The I/O thread blocks only in `poll`: at most 100 ms at a time while commands that can time out
//! are outstanding (their timeouts are checked in between), until woken while none is. Requests beyond the free command
//! identifiers wait in the I/O thread's backlog until a command completes.
//!
//! When the queue fails, every outstanding and later request completes with the failure; the handle stays
//! valid and reports it ([`QueueHandle::failure`]). Dropping the last handle (or [`QueueHandle::close`])
//! lets outstanding commands finish (bounded by the command timeout), closes the connection and joins the
//! thread.
//!
//! Reconnecting controllers: a handle's connection (its I/O thread and queue, the *link*) can be replaced
//! by a new one with the same QID (`QueueHandle::replace`), so the handle callers hold stays valid across
//! associations. The link sits behind an `RwLock` that only a replacement write-locks (once per
//! reconnect), so the read lock a submission takes is uncontended while the association is live. A handle
//! made with a `Recovery` holds I/O instead of failing it: a submission to a failed link waits in
//! `Recovery::hold` and goes to the replacement; a command the link lost completes in [`Pending::wait`]
//! by being resubmitted there — the [`Pending`] keeps the command's SQE (64 bytes, no allocation) and the
//! queue hands the owned data buffer back with the failed completion, so nothing is copied. The same code
//! serves both transports. [`QueueHandle::submit_async`] never holds: the [`Pending`] it returns holds the
//! command itself, blocking in [`Pending::wait`] or, awaited, as a task the `Recovery` wakes
//! (`Recovery::poll_hold`). A recovering handle's links also tell the `Recovery` when they fail
//! (`Recovery::link_failed`), a command in flight or not, so the controller needs no timer to notice.
//!
//! Completion sinks: a caller that multiplexes many commands on one thread (an export queue) submits with
//! [`QueueHandle::submit_to_sink`] instead: no reply channel is allocated; the I/O thread pushes each
//! [`Completed`] (the caller's tag and the reply) into the caller's [`CompletionSink`] and wakes it once
//! per batch of completions, so the caller waits for completions and its own work in one place (an
//! eventfd in its io_uring) and handles them in completion order. [`Completed::settle`] applies the same
//! recovery as [`Pending::wait`]: a command the lost association had in flight is held and resubmitted to
//! the same sink under the same tag.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SendError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use mio::Waker;
use nvmf_common::nvme::opcode::admin::ASYNC_EVENT_REQUEST;
use nvmf_common::nvme::{CompletionQueueEntry, SubmissionQueueEntry};

use crate::error::HostError;
use crate::queue::{BareQueue, Completion, DataDirection, Rejected, Request};

/// The result of one command from a [`QueueHandle`].
pub type Reply = Completion<()>;

type ReplySender = SyncSender<Reply>;

/// Where an export queue's commands complete ([`QueueHandle::submit_to_sink`]). Called on the queue's
/// I/O thread: neither method may block.
pub trait CompletionSink: Send + Sync + std::fmt::Debug {
    /// Take one finished command.
    fn push(&self, completed: Completed);
    /// Commands were pushed: wake the owner (once per batch of completions, after the pushes).
    fn wake(&self);
}

/// A command finished into a [`CompletionSink`]: its tag and reply.
#[derive(Debug)]
pub struct Completed {
    tag: u64,
    reply: Reply,
    /// On a recovering queue: how to resubmit the command, and the sink it goes back to.
    retry: Option<(Retry, Arc<dyn CompletionSink>)>,
}

impl Completed {
    /// The tag the command was submitted with.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The command's reply; or `None` when the connection lost it and it went to the controller's new
    /// association (its reply will come through the sink again, same tag) — held first while the controller
    /// reconnects, exactly as [`Pending::wait`] does. Blocks only in that hold. When the command must fail
    /// instead, the reply carries the error and the command's buffer.
    pub fn settle(self) -> Option<Reply> {
        let Some((retry, sink)) = self.retry else { return Some(self.reply) };
        let request = match retry.recover(self.reply) {
            Ok(request) => request,
            Err(reply) => return Some(reply),
        };
        match retry.slot.submit_to_sink(request, &sink, self.tag, true) {
            Ok(()) => None,
            Err((e, data)) => Some(Reply { context: (), result: Err(e), data, r2ts: 0, in_capsule: false }),
        }
    }
}

/// A command's place in a [`CompletionSink`]. Dropped undelivered (the I/O thread went away with the
/// request still queued to it), it completes the tag with [`HostError::ShutDown`] so the owner never
/// waits for it forever.
#[derive(Debug)]
struct Ticket {
    qid: u16,
    tag: u64,
    /// `None` once delivered (or disarmed).
    sink: Option<Arc<dyn CompletionSink>>,
    retry: Option<Retry>,
}

impl Ticket {
    fn deliver(mut self, reply: Reply, wakes: &mut Wakes) {
        let Some(sink) = self.sink.take() else { return };
        wakes.note(&sink);
        let retry = self.retry.take().map(|r| (r, sink.clone()));
        sink.push(Completed { tag: self.tag, reply, retry });
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            let reply = Reply {
                context: (),
                result: Err(HostError::ShutDown { qid: self.qid }),
                data: Vec::new(),
                r2ts: 0,
                in_capsule: false,
            };
            // Not resubmitted: the buffer went with the request.
            sink.push(Completed { tag: self.tag, reply, retry: None });
            sink.wake();
        }
    }
}

/// The sink to wake once the I/O thread has posted a batch (consecutive completions to one sink share a
/// wake-up); wakes it when dropped.
#[derive(Debug, Default)]
struct Wakes(Option<Arc<dyn CompletionSink>>);

impl Wakes {
    fn note(&mut self, sink: &Arc<dyn CompletionSink>) {
        if self.0.as_ref().is_some_and(|s| Arc::ptr_eq(s, sink)) {
            return;
        }
        if let Some(previous) = self.0.replace(Arc::clone(sink)) {
            previous.wake();
        }
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.wake();
        }
    }
}

/// Where the I/O thread posts a command's completion.
#[derive(Debug)]
enum ReplyTo {
    /// A [`Pending`]'s.
    Channel(ReplyPort),
    /// A completion sink.
    Sink(Ticket),
}

impl ReplyTo {
    fn deliver(self, reply: Reply, wakes: &mut Wakes) {
        match self {
            ReplyTo::Channel(port) => port.send(reply),
            ReplyTo::Sink(ticket) => ticket.deliver(reply, wakes),
        }
    }

    /// The request came back to the submitter, which reports the failure itself.
    fn disarm(&mut self) {
        if let ReplyTo::Sink(t) = self {
            t.sink = None;
        }
    }
}

/// Where a [`Pending`]'s reply goes: its channel, and the waker of a task awaiting it, woken once the reply is
/// sent — or once the channel is closed unsent (the request was dropped with the I/O thread), so the task sees
/// that too.
#[derive(Debug)]
struct ReplyPort {
    tx: Option<ReplySender>,
    waker: Arc<AtomicWaker>,
}

impl ReplyPort {
    fn send(mut self, reply: Reply) {
        if let Some(tx) = self.tx.take() {
            // The caller may have stopped waiting; nothing to do then.
            drop(tx.send(reply));
        }
        self.waker.wake();
    }
}

impl Drop for ReplyPort {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            drop(tx);
            self.waker.wake();
        }
    }
}

/// The I/O thread's context of one command: where its completion goes, and what its metrics need.
#[derive(Debug)]
pub struct InFlight {
    reply: ReplyTo,
    submitted: Instant,
    direction: DataDirection,
    /// Whether the latency counts (not for an Asynchronous Event Request, outstanding until an event).
    timed: bool,
}

// A request is moved once into the channel's slot; boxing it would allocate per command.
#[allow(clippy::large_enum_variant)]
enum Message {
    Submit(Request<InFlight>),
    /// Let outstanding commands finish, then stop.
    Shutdown,
    /// Fail outstanding commands now ([`HostError::ShutDown`]) and stop: the connection is being replaced.
    Abort,
}

/// Latency histogram buckets of [`QueueMetrics`]: bucket `i < LATENCY_BUCKETS - 1` counts commands that took
/// at most 2^i µs and more than the bucket before; the last bucket counts the slower ones (above 2^22 µs,
/// about 4.2 s).
pub const LATENCY_BUCKETS: usize = 24;

/// The bucket of a command that took `ns` nanoseconds (see [`LATENCY_BUCKETS`]).
fn latency_bucket(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    let b = if us <= 1 { 0 } else { 64 - (us - 1).leading_zeros() };
    usize::try_from(b).unwrap_or(usize::MAX).min(LATENCY_BUCKETS - 1)
}

/// The upper bound in seconds of latency bucket `b` (infinite for the last).
pub fn latency_bucket_bound(b: usize) -> f64 {
    if b + 1 >= LATENCY_BUCKETS {
        return f64::INFINITY;
    }
    f64::from(1u32 << b) * 1e-6
}

/// Bytes, errors and latency of the commands one link completed, written by its I/O thread only.
#[derive(Debug, Default)]
struct Meter {
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    errors: AtomicU64,
    latency_sum_ns: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS],
}

/// `v += d` by the counter's only writer (a load and a store: no locked instruction on the data path).
fn bump(v: &AtomicU64, d: u64) {
    v.store(v.load(Ordering::Relaxed).wrapping_add(d), Ordering::Relaxed);
}

impl Meter {
    fn record(&self, f: &InFlight, result: &Result<CompletionQueueEntry, HostError>, len: usize, now: Instant) {
        let len = len as u64;
        match result {
            Ok(cqe) if cqe.status.is_success() => match f.direction {
                DataDirection::ControllerToHost => bump(&self.read_bytes, len),
                DataDirection::HostToController => bump(&self.written_bytes, len),
                DataDirection::None => {}
            },
            _ => bump(&self.errors, 1),
        }
        if f.timed {
            let ns = u64::try_from(now.saturating_duration_since(f.submitted).as_nanos()).unwrap_or(u64::MAX);
            bump(&self.latency_sum_ns, ns);
            bump(&self.latency[latency_bucket(ns)], 1);
        }
    }

    /// Add `other`'s counts (a retired link's) to these. Not from an I/O thread: atomically.
    fn absorb(&self, other: &Meter) {
        let add = |to: &AtomicU64, from: &AtomicU64| to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        add(&self.read_bytes, &other.read_bytes);
        add(&self.written_bytes, &other.written_bytes);
        add(&self.errors, &other.errors);
        add(&self.latency_sum_ns, &other.latency_sum_ns);
        for (to, from) in self.latency.iter().zip(&other.latency) {
            add(to, from);
        }
    }
}

/// A queue's counters and metrics as a scrape sees them ([`QueueHandle::stats`]), summed over the connections
/// a reconnect replaced (except `max_outstanding`, the current connection's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueMetrics {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed (any status).
    pub completed: u64,
    /// The most commands outstanding at once.
    pub max_outstanding: u16,
    /// R2Ts served (NVMe/TCP).
    pub r2ts: u64,
    /// Data bytes moved from the controller by successful commands (reads; Identify and log pages on the
    /// admin queue).
    pub read_bytes: u64,
    /// Data bytes moved to the controller by successful commands (writes, DSM ranges, Connect data).
    pub written_bytes: u64,
    /// Commands that completed with a status other than success, or failed in the transport.
    pub errors: u64,
    /// Sum of the latencies counted in `latency`, in nanoseconds.
    pub latency_sum_ns: u64,
    /// Commands per latency bucket, submission to completion (see [`LATENCY_BUCKETS`]; Asynchronous Event
    /// Requests are not counted).
    pub latency: [u64; LATENCY_BUCKETS],
}

impl QueueMetrics {
    /// Commands in the latency histogram.
    pub fn latency_count(&self) -> u64 {
        self.latency.iter().sum()
    }
}

/// State the I/O thread publishes for other threads (atomics and a set-once cell: no lock).
#[derive(Debug, Default)]
struct Shared {
    submitted: AtomicU64,
    completed: AtomicU64,
    r2ts: AtomicU64,
    max_outstanding: AtomicU16,
    meter: Meter,
    failure: OnceLock<HostError>,
    /// Told when `failure` is set (a recovering queue's [`Recovery`]; locked once per link and once on its
    /// failure, never per command).
    watch: Mutex<Option<Arc<dyn Recovery>>>,
}

impl Shared {
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
    fn watch(&self, recovery: &Arc<dyn Recovery>) {
        let mut w = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        *w = Some(Arc::clone(recovery));
        if self.failure.get().is_some() {
            recovery.link_failed();
        }
    }
}

/// What a queue of a reconnecting controller does with I/O its connection cannot carry (see the module
/// docs). Implemented by the controller's supervision state.
pub(crate) trait Recovery: Send + Sync + std::fmt::Debug {
    /// The link of queue `qid` in association `epoch` failed with `cause`: block until a newer association
    /// is live (`Ok`: resubmit there) or the I/O must fail (the error to fail it with).
    fn hold(&self, qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError>;
    /// [`Recovery::hold`] without blocking: `Pending` after arranging for `cx`'s task to be woken when the
    /// answer may have changed.
    fn poll_hold(&self, qid: u16, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>>;
    /// A link of a recovering queue failed, whether or not a command was in flight (called on its I/O thread:
    /// must not block).
    fn link_failed(&self);
}

/// Whether `e` means the connection was lost (so the command may be resubmitted on a new one), as opposed
/// to something wrong with the command itself.
fn transport_loss(e: &HostError) -> bool {
    matches!(
        e,
        HostError::Io { .. }
            | HostError::Pdu { .. }
            | HostError::Protocol { .. }
            | HostError::TermReq { .. }
            | HostError::Closed { .. }
            | HostError::Timeout { .. }
            | HostError::ShutDown { .. }
            | HostError::Rdma { .. }
    )
}

/// Why the connection lost the command `reply` answers, if it did (a command it lost may go to a new one).
fn lost_cause(reply: &Reply) -> Option<HostError> {
    match &reply.result {
        Err(e) if transport_loss(e) => Some(e.clone()),
        _ => None,
    }
}

/// What a [`Pending`] (or a sink's [`Completed`]) of a recovering queue keeps to resubmit its command.
#[derive(Debug)]
struct Retry {
    slot: Arc<Slot>,
    epoch: u64,
    sqe: SubmissionQueueEntry,
    direction: DataDirection,
}

impl Retry {
    /// `reply` of this command: `Ok` with the command to resubmit when the connection lost it (after
    /// holding until a newer association is live), `Err` with the reply to deliver (the recovery's error in
    /// it when the command must fail).
    #[allow(clippy::result_large_err)] // the reply goes back to the caller by value either way
    fn recover(&self, reply: Reply) -> Result<Request<()>, Reply> {
        let Some(cause) = lost_cause(&reply) else { return Err(reply) };
        if let Err(e) = self.slot.hold(self.epoch, &cause) {
            return Err(Reply { result: Err(e), ..reply });
        }
        Ok(Request { sqe: self.sqe, data: reply.data, direction: self.direction, context: () })
    }
}

/// A command in flight: wait for its completion ([`Pending::wait`], blocking) or `.await` it (a [`Future`] with
/// the same result, for any executor: the I/O thread wakes the task).
#[derive(Debug)]
pub struct Pending {
    qid: u16,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Submitted: the reply comes on `rx`, and `waker` is woken after it is sent.
    Waiting { rx: Receiver<Reply>, waker: Arc<AtomicWaker>, retry: Option<Retry> },
    /// Not on a connection: the controller is reconnecting (association `epoch` failed with `cause`).
    /// Submitted once a newer association is live, or completed with the recovery's error.
    Holding { slot: Arc<Slot>, epoch: u64, cause: HostError, request: Request<()> },
    /// The result was handed out.
    Done,
}

impl Pending {
    /// Wait up to `timeout` for the completion. The queue's own command timeout fails a command the
    /// controller never answers, so this bound is a second line of defence.
    ///
    /// On a queue of a reconnecting controller, a command the connection lost is held until the controller
    /// has a new association and then resubmitted (the bound applies to each wait for a completion; the
    /// hold is bounded by the controller's fast-I/O-fail and controller-loss timeouts). If it must fail
    /// instead, the reply carries that error and the command's buffer.
    pub fn wait(mut self, timeout: Duration) -> Result<Reply, HostError> {
        loop {
            let done = match std::mem::replace(&mut self.stage, Stage::Done) {
                Stage::Waiting { rx, retry, .. } => match rx.recv_timeout(timeout) {
                    Ok(reply) => self.settle(retry, reply),
                    Err(RecvTimeoutError::Timeout) => {
                        return Err(HostError::Timeout {
                            what: format!("completion on queue {}", self.qid),
                            after: timeout,
                        })
                    }
                    Err(RecvTimeoutError::Disconnected) => return Err(HostError::ShutDown { qid: self.qid }),
                },
                Stage::Holding { slot, epoch, cause, request } => {
                    let held = slot.hold(epoch, &cause);
                    self.resubmit(slot, held, request)
                }
                Stage::Done => return Err(HostError::ShutDown { qid: self.qid }),
            };
            if let Some(reply) = done {
                return Ok(reply);
            }
        }
    }

    /// The command's `reply` came in: the result, or `None` with the command [`Stage::Holding`] (the
    /// connection lost it and the queue recovers: `retry`).
    fn settle(&mut self, retry: Option<Retry>, reply: Reply) -> Option<Reply> {
        let Some(Retry { slot, epoch, sqe, direction }) = retry else { return Some(reply) };
        let Some(cause) = lost_cause(&reply) else { return Some(reply) };
        let request = Request { sqe, data: reply.data, direction, context: () };
        self.stage = Stage::Holding { slot, epoch, cause, request };
        None
    }

    /// The hold ended with `held`: submit `request` again (this becomes the new command's wait, or a hold
    /// again if the new connection failed already), or the reply carrying the error and the buffer.
    fn resubmit(&mut self, slot: Arc<Slot>, held: Result<(), HostError>, request: Request<()>) -> Option<Reply> {
        let failed = |e, data| Some(Reply { context: (), result: Err(e), data, r2ts: 0, in_capsule: false });
        if let Err(e) = held {
            return failed(e, request.data);
        }
        match slot.try_submit(request) {
            Ok(next) => {
                *self = next;
                None
            }
            Err(Refused::Failed(e, data)) => failed(e, data),
            Err(Refused::Held { epoch, cause, request }) => {
                self.stage = Stage::Holding { slot, epoch, cause, request };
                None
            }
        }
    }
}

impl Future for Pending {
    type Output = Result<Reply, HostError>;

    /// As [`Pending::wait`] without its timeout (the queue's command timeout still applies) and without
    /// blocking: a held command waits for the controller's next state change as a registered task.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let done = match std::mem::replace(&mut this.stage, Stage::Done) {
                Stage::Waiting { rx, waker, retry } => {
                    let received = match rx.try_recv() {
                        Err(TryRecvError::Empty) => {
                            // Registered before looking again, so a reply sent in between is not missed.
                            waker.register(cx.waker());
                            rx.try_recv()
                        }
                        other => other,
                    };
                    match received {
                        Ok(reply) => this.settle(retry, reply),
                        Err(TryRecvError::Empty) => {
                            this.stage = Stage::Waiting { rx, waker, retry };
                            return Poll::Pending;
                        }
                        Err(TryRecvError::Disconnected) => {
                            return Poll::Ready(Err(HostError::ShutDown { qid: this.qid }))
                        }
                    }
                }
                Stage::Holding { slot, epoch, cause, request } => match slot.poll_hold(epoch, &cause, cx) {
                    Poll::Ready(held) => this.resubmit(slot, held, request),
                    Poll::Pending => {
                        this.stage = Stage::Holding { slot, epoch, cause, request };
                        return Poll::Pending;
                    }
                },
                Stage::Done => return Poll::Ready(Err(HostError::ShutDown { qid: this.qid })),
            };
            if let Some(reply) = done {
                return Poll::Ready(Ok(reply));
            }
        }
    }
}

/// A cloneable way to submit to a queue from any thread.
#[derive(Clone)]
pub struct Submitter {
    qid: u16,
    tx: SyncSender<Message>,
    waker: Arc<Waker>,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitter").field("qid", &self.qid).finish_non_exhaustive()
    }
}

impl Submitter {
    /// Submit `sqe` with `data` moving in `direction`; returns the pending completion.
    pub fn submit(&self, request: Request<()>) -> Result<Pending, HostError> {
        let (reply, pending) = reply_port(self.qid, None);
        self.send(request, reply, true).map_err(|(e, _)| e)?;
        Ok(pending)
    }

    /// Submit with the completion posted to `reply`, waking the I/O thread if `wake` (else only when the
    /// request channel is full). On failure the request's buffer comes back with the error (and nothing is
    /// posted).
    fn send(&self, request: Request<()>, reply: ReplyTo, wake: bool) -> Result<(), (HostError, Vec<u8>)> {
        let Request { sqe, data, direction, context: () } = request;
        let timed = !(self.qid == 0 && sqe.opcode == ASYNC_EVENT_REQUEST);
        let context = InFlight { reply, submitted: Instant::now(), direction, timed };
        let request = Request { sqe, data, direction, context };
        let message = Message::Submit(request);
        let sent = match self.tx.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => {
                // A sleeping I/O thread must take some before this one fits.
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
                Message::Shutdown | Message::Abort => Vec::new(),
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

/// One connection of a queue: its I/O thread and what it publishes.
#[derive(Debug)]
struct Link {
    submitter: Submitter,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The association this link belongs to (see [`Recovery::hold`]).
    epoch: u64,
}

impl Link {
    fn stop(&mut self, message: Message) {
        if let Some(thread) = self.thread.take() {
            let _ = self.submitter.tx.send(message);
            let _ = self.submitter.waker.wake();
            let _ = thread.join();
        }
    }
}

/// What a handle and its [`Pending`]s share: the current link, the recovery policy, and the counters of
/// links replaced so far.
#[derive(Debug)]
struct Slot {
    qid: u16,
    link: RwLock<Link>,
    recovery: Option<Arc<dyn Recovery>>,
    retired: [AtomicU64; 3],
    /// The metrics of the links replaced so far.
    retired_meter: Meter,
}

impl Slot {
    fn hold(&self, epoch: u64, cause: &HostError) -> Result<(), HostError> {
        match &self.recovery {
            Some(r) => r.hold(self.qid, epoch, cause),
            None => Err(cause.clone()),
        }
    }

    /// As [`Recovery::hold`], as a future's step: registers the task to be woken when it may end.
    fn poll_hold(&self, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        match &self.recovery {
            Some(r) => r.poll_hold(self.qid, epoch, cause, cx),
            None => Poll::Ready(Err(cause.clone())),
        }
    }

    /// Submit on the current link with a [`Pending`] to wait on.
    fn submit(self: &Arc<Self>, request: Request<()>) -> Result<Pending, (HostError, Vec<u8>)> {
        let qid = self.qid;
        self.submit_via(request, true, |retry| reply_port(qid, retry))
    }

    /// [`Slot::submit`] without holding: while the link is failed the request comes back to be held.
    #[allow(clippy::result_large_err)] // the request goes back by value: boxing it would allocate
    fn try_submit(self: &Arc<Self>, request: Request<()>) -> Result<Pending, Refused> {
        let qid = self.qid;
        self.try_submit_via(request, true, |retry| reply_port(qid, retry))
    }

    /// Submit on the current link with the completion going to `sink` under `tag`.
    fn submit_to_sink(
        self: &Arc<Self>,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
        wake: bool,
    ) -> Result<(), (HostError, Vec<u8>)> {
        let qid = self.qid;
        self.submit_via(request, wake, |retry| {
            (ReplyTo::Sink(Ticket { qid, tag, sink: Some(Arc::clone(sink)), retry }), ())
        })
    }

    /// Submit on the current link, the completion routed by `route` (given what resubmitting needs, on a
    /// recovering queue), waking the I/O thread if `wake`; with a recovery, hold while the link is failed.
    fn submit_via<R>(
        self: &Arc<Self>,
        request: Request<()>,
        wake: bool,
        mut route: impl FnMut(Option<Retry>) -> (ReplyTo, R),
    ) -> Result<R, (HostError, Vec<u8>)> {
        let mut request = request;
        loop {
            match self.try_submit_via(request, wake, &mut route) {
                Ok(routed) => return Ok(routed),
                Err(Refused::Failed(e, data)) => return Err((e, data)),
                Err(Refused::Held { epoch, cause, request: r }) => {
                    if let Err(e) = self.hold(epoch, &cause) {
                        return Err((e, r.data));
                    }
                    request = r;
                }
            }
        }
    }

    /// One try of [`Slot::submit_via`]: a recovering queue's request comes back [`Refused::Held`] when the link
    /// has failed (or the send to it did).
    #[allow(clippy::result_large_err)] // the request goes back by value: boxing it would allocate
    fn try_submit_via<R>(
        self: &Arc<Self>,
        request: Request<()>,
        wake: bool,
        route: impl FnOnce(Option<Retry>) -> (ReplyTo, R),
    ) -> Result<R, Refused> {
        let (sqe, direction) = (request.sqe, request.direction);
        let link = self.link.read().unwrap_or_else(PoisonError::into_inner);
        let held = |cause, data| {
            let request = Request { sqe, data, direction, context: () };
            match self.recovery {
                Some(_) => Refused::Held { epoch: link.epoch, cause, request },
                None => Refused::Failed(cause, request.data),
            }
        };
        if let Some(e) = self.recovery.as_ref().and_then(|_| link.shared.failure.get()) {
            return Err(held(e.clone(), request.data));
        }
        let retry = self.recovery.as_ref().map(|_| Retry { slot: Arc::clone(self), epoch: link.epoch, sqe, direction });
        let (reply, routed) = route(retry);
        match link.submitter.send(request, reply, wake) {
            Ok(()) => Ok(routed),
            Err((e, data)) => Err(held(e, data)),
        }
    }
}

/// Why [`Slot::try_submit_via`] did not submit.
#[derive(Debug)]
enum Refused {
    /// The command fails with this error; its buffer comes back.
    Failed(HostError, Vec<u8>),
    /// The controller is reconnecting: hold the request until association `epoch` (failed with `cause`) is
    /// replaced.
    Held { epoch: u64, cause: HostError, request: Request<()> },
}

/// A reply channel for one command and the [`Pending`] that waits on it.
fn reply_port(qid: u16, retry: Option<Retry>) -> (ReplyTo, Pending) {
    let (tx, rx) = sync_channel(1);
    let waker = Arc::new(AtomicWaker::new());
    let port = ReplyPort { tx: Some(tx), waker: Arc::clone(&waker) };
    (ReplyTo::Channel(port), Pending { qid, stage: Stage::Waiting { rx, waker, retry } })
}

/// A queue driven by its own I/O thread (see the module docs).
#[derive(Debug)]
pub struct QueueHandle {
    slot: Arc<Slot>,
}

impl QueueHandle {
    /// Move `queue` (either transport) onto a new I/O thread.
    pub fn spawn<Q: BareQueue<InFlight> + 'static>(mut queue: Q) -> Result<Self, HostError> {
        let qid = queue.qid();
        let waker = queue.waker()?;
        let depth = queue.free_slots().max(1);
        let (tx, rx) = sync_channel(depth);
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("nvmf-q{qid}"))
            .spawn(move || run(queue, &rx, &thread_shared))
            .map_err(|e| HostError::io(qid, "spawning the I/O thread", &e))?;
        let link = Link { submitter: Submitter { qid, tx, waker }, shared, thread: Some(thread), epoch: 0 };
        Ok(Self::with_link(qid, link, None))
    }

    fn with_link(qid: u16, link: Link, recovery: Option<Arc<dyn Recovery>>) -> Self {
        if let Some(r) = &recovery {
            link.shared.watch(r);
        }
        let retired = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        let slot = Slot { qid, link: RwLock::new(link), recovery, retired, retired_meter: Meter::default() };
        QueueHandle { slot: Arc::new(slot) }
    }

    /// This queue's connection as association `epoch` of a controller that holds I/O through `recovery`
    /// while it reconnects.
    pub(crate) fn recovering(self, epoch: u64, recovery: Arc<dyn Recovery>) -> Self {
        Self::with_link(self.qid(), self.take_link(epoch), Some(recovery))
    }

    /// Move the connection out (this handle is left without one), tagged with association `epoch`.
    fn take_link(&self, epoch: u64) -> Link {
        let mut link = self.slot.link.write().unwrap_or_else(PoisonError::into_inner);
        Link { submitter: link.submitter.clone(), shared: Arc::clone(&link.shared), thread: link.thread.take(), epoch }
    }

    /// Submit a command (see [`Submitter::submit`]); on a recovering queue, held while the controller
    /// reconnects (see the module docs).
    pub fn submit(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.slot.submit(request).map_err(|(e, _)| e)
    }

    /// Submit a command without blocking while the controller reconnects: the returned [`Pending`] holds it
    /// then (awaiting it waits for the new association; [`Pending::wait`] blocks for it). It may block briefly
    /// while the request channel is full (as many requests queued as the queue is deep), until the I/O thread
    /// takes them.
    pub fn submit_async(&self, request: Request<()>) -> Result<Pending, HostError> {
        match self.slot.try_submit(request) {
            Ok(pending) => Ok(pending),
            Err(Refused::Failed(e, _)) => Err(e),
            Err(Refused::Held { epoch, cause, request }) => {
                let slot = Arc::clone(&self.slot);
                Ok(Pending { qid: self.qid(), stage: Stage::Holding { slot, epoch, cause, request } })
            }
        }
    }

    /// Submit a command whose completion goes to `sink` under `tag` (see the module docs): nothing is
    /// allocated for it, and on a recovering queue it is held and resubmitted like [`QueueHandle::submit`]'s
    /// (through [`Completed::settle`]). On failure the request's buffer comes back with the error.
    pub fn submit_to_sink(
        &self,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
    ) -> Result<(), (HostError, Vec<u8>)> {
        self.slot.submit_to_sink(request, sink, tag, true)
    }

    /// [`QueueHandle::submit_to_sink`] without waking the I/O thread (unless the request channel is full):
    /// for a caller submitting a batch, which then calls [`QueueHandle::wake`] once.
    pub fn queue_to_sink(
        &self,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
    ) -> Result<(), (HostError, Vec<u8>)> {
        self.slot.submit_to_sink(request, sink, tag, false)
    }

    /// Wake the I/O thread to take what [`QueueHandle::queue_to_sink`] queued.
    pub fn wake(&self) {
        // A failed wake means the I/O thread is gone; its requests complete with ShutDown.
        let _ = self.link().submitter.waker.wake();
    }

    /// Submit on the current connection with the completion going to `sink` under `tag`; not held or resubmitted
    /// (the controller's supervisor: holding its commands would wait for the reconnect it runs itself).
    pub(crate) fn submit_unheld_to_sink(
        &self,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
    ) -> Result<(), HostError> {
        let ticket = Ticket { qid: self.qid(), tag, sink: Some(Arc::clone(sink)), retry: None };
        self.link().submitter.send(request, ReplyTo::Sink(ticket), true).map_err(|(e, _)| e)
    }

    fn link(&self) -> std::sync::RwLockReadGuard<'_, Link> {
        self.slot.link.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A cloneable submitter for other threads (of the current connection: it is not held or resubmitted
    /// across a reconnect).
    pub fn submitter(&self) -> Submitter {
        self.link().submitter.clone()
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.slot.qid
    }

    /// Counters and metrics, as of the I/O thread's last loop, and counting every command whose reply has been
    /// delivered (summed over the connections a reconnect replaced, except the high-water mark, which is the
    /// current connection's). Lock-free but for the uncontended read lock on the current link.
    pub fn stats(&self) -> QueueMetrics {
        let s = &self.link().shared;
        let r = &self.slot.retired;
        let (m, rm) = (&s.meter, &self.slot.retired_meter);
        let sum = |a: &AtomicU64, b: &AtomicU64| a.load(Ordering::Relaxed).wrapping_add(b.load(Ordering::Relaxed));
        let mut latency = [0; LATENCY_BUCKETS];
        for (i, l) in latency.iter_mut().enumerate() {
            *l = sum(&m.latency[i], &rm.latency[i]);
        }
        QueueMetrics {
            submitted: s.submitted.load(Ordering::Relaxed) + r[0].load(Ordering::Relaxed),
            completed: s.completed.load(Ordering::Relaxed) + r[1].load(Ordering::Relaxed),
            max_outstanding: s.max_outstanding.load(Ordering::Relaxed),
            r2ts: s.r2ts.load(Ordering::Relaxed) + r[2].load(Ordering::Relaxed),
            read_bytes: sum(&m.read_bytes, &rm.read_bytes),
            written_bytes: sum(&m.written_bytes, &rm.written_bytes),
            errors: sum(&m.errors, &rm.errors),
            latency_sum_ns: sum(&m.latency_sum_ns, &rm.latency_sum_ns),
            latency,
        }
    }

    /// The error the queue failed with, if it did.
    pub fn failure(&self) -> Option<HostError> {
        self.link().shared.failure.get().cloned()
    }

    /// Fail outstanding commands now and close the connection (a controller tearing its association down).
    pub(crate) fn abort(&self) {
        self.slot.link.write().unwrap_or_else(PoisonError::into_inner).stop(Message::Abort);
    }

    /// Put `new`'s connection (same QID, association `epoch`) in place of this handle's, aborting the old one.
    pub(crate) fn replace(&self, new: QueueHandle, epoch: u64) {
        let link = new.take_link(epoch);
        if let Some(r) = &self.slot.recovery {
            link.shared.watch(r);
        }
        let mut old = std::mem::replace(&mut *self.slot.link.write().unwrap_or_else(PoisonError::into_inner), link);
        old.stop(Message::Abort);
        let r = &self.slot.retired;
        r[0].fetch_add(old.shared.submitted.load(Ordering::Relaxed), Ordering::Relaxed);
        r[1].fetch_add(old.shared.completed.load(Ordering::Relaxed), Ordering::Relaxed);
        r[2].fetch_add(old.shared.r2ts.load(Ordering::Relaxed), Ordering::Relaxed);
        self.slot.retired_meter.absorb(&old.shared.meter);
    }

    /// Let outstanding commands finish, close the connection and join the I/O thread.
    pub fn close(self) {
        self.shutdown();
    }

    /// [`QueueHandle::close`] for a handle that others may still refer to.
    pub(crate) fn shutdown(&self) {
        self.slot.link.write().unwrap_or_else(PoisonError::into_inner).stop(Message::Shutdown);
    }
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        self.shutdown();
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
fn reply_all<Q: BareQueue<InFlight>>(queue: &mut Q, shared: &Shared) -> bool {
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
const TIMEOUT_CHECK: Duration = Duration::from_millis(100);

/// The I/O thread.
fn run<Q: BareQueue<InFlight>>(mut queue: Q, rx: &Receiver<Message>, shared: &Shared) {
    let qid = queue.qid();
    let meter = &shared.meter;
    let mut backlog: VecDeque<Request<InFlight>> = VecDeque::new();
    let mut stopping = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(Message::Submit(r)) => backlog.push_back(r),
                Ok(Message::Shutdown) | Err(TryRecvError::Disconnected) => {
                    stopping = true;
                    break;
                }
                Ok(Message::Abort) => {
                    queue.close();
                    stopping = true;
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        while queue.free_slots() > 0 || queue.failure().is_some() {
            let Some(request) = backlog.pop_front() else { break };
            if let Err(rejected) = queue.submit(request) {
                reject(*rejected, meter);
            }
        }
        reply_all(&mut queue, shared);
        if queue.failure().is_some() {
            publish(&queue, shared);
            if stopping {
                break;
            }
            // Nothing to poll any more: answer later requests with the failure until told to stop.
            match rx.recv() {
                Ok(Message::Submit(r)) => backlog.push_back(r),
                Ok(Message::Shutdown | Message::Abort) | Err(_) => break,
            }
            continue;
        }
        if stopping && queue.outstanding() == 0 && backlog.is_empty() {
            break;
        }
        // Outstanding commands have timeouts to check; with none (an Asynchronous Event Request has none), only a
        // submission (the waker), the peer or a transport event has anything for this thread, and each of those
        // ends the wait.
        let wait = queue.timed_outstanding().then_some(TIMEOUT_CHECK);
        let _ = queue.poll(wait);
        // Submissions and a failure are published even when no command finished.
        if !reply_all(&mut queue, shared) {
            publish(&queue, shared);
        }
    }
    publish(&queue, shared);
    queue.close();
    reply_all(&mut queue, shared);
    for request in backlog {
        reject(Rejected { error: HostError::ShutDown { qid }, request }, meter);
    }
    tracing::debug!(qid, "I/O thread stopped");
}

fn publish<T, Q: BareQueue<T>>(queue: &Q, shared: &Shared) {
    let stats = queue.stats();
    shared.submitted.store(stats.submitted, Ordering::Relaxed);
    shared.completed.store(stats.completed, Ordering::Relaxed);
    shared.r2ts.store(stats.r2ts, Ordering::Relaxed);
    shared.max_outstanding.store(stats.max_outstanding, Ordering::Relaxed);
    if let Some(e) = queue.failure() {
        shared.fail(e);
    }
}

#[cfg(test)]
mod tests {
    //! Resubmission of a command the connection lost, against a scripted controller on loopback: the first
    //! connection takes the command and hangs up, the second answers it.

    use std::io::{Read as _, Write as _};
    use std::net::{SocketAddr, TcpListener};
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::Mutex;

    use nvmf_common::nvme::io::Write;
    use nvmf_common::nvme::{CompletionQueueEntry, Status};
    use nvmf_common::transport::tcp::{CapsuleResponse, Framing, IcResp, Pdu};

    use super::*;
    use crate::tcp::{TcpQueue, TcpQueueOptions};

    const LEN: usize = 512;

    /// Tells the test about each hold, then answers with what the test sends back.
    #[derive(Debug)]
    struct Scripted {
        held: Mutex<Sender<(u64, HostError)>>,
        answer: Mutex<Receiver<Result<(), HostError>>>,
    }

    impl Recovery for Scripted {
        fn hold(&self, _qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError> {
            self.held.lock().unwrap().send((epoch, cause.clone())).unwrap();
            self.answer.lock().unwrap().recv().unwrap()
        }
        fn poll_hold(
            &self,
            qid: u16,
            epoch: u64,
            cause: &HostError,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), HostError>> {
            Poll::Ready(self.hold(qid, epoch, cause))
        }
        fn link_failed(&self) {}
    }

    /// Accept one connection, answer ICReq, read one Write capsule with `LEN` bytes in it, then hang up
    /// (`answer` false) or complete it successfully. Returns the capsule's SQE and data.
    fn controller(listener: &TcpListener, answer: bool) -> JoinHandle<(SubmissionQueueEntry, Vec<u8>)> {
        let listener = listener.try_clone().unwrap();
        std::thread::spawn(move || serve(&listener, answer))
    }

    /// Accept one connection and answer its ICReq.
    fn accept_and_answer_icreq(listener: &TcpListener) -> std::net::TcpStream {
        let (mut s, _) = listener.accept().unwrap();
        let mut icreq = [0u8; 128];
        s.read_exact(&mut icreq).unwrap();
        let icresp = Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: Default::default(), maxh2cdata: 8192 });
        s.write_all(&icresp.to_bytes(&[], &Framing::default()).unwrap()).unwrap();
        s
    }

    fn serve(listener: &TcpListener, answer: bool) -> (SubmissionQueueEntry, Vec<u8>) {
        let mut s = accept_and_answer_icreq(listener);
        let mut capsule = vec![0u8; 72 + LEN];
        s.read_exact(&mut capsule).unwrap();
        let sqe = SubmissionQueueEntry::parse(&capsule[8..72]).unwrap();
        if answer {
            let cqe = CompletionQueueEntry::new(sqe.cid, Status::SUCCESS);
            s.write_all(&Pdu::CapsuleResponse(CapsuleResponse { cqe }).to_bytes(&[], &Framing::default()).unwrap())
                .unwrap();
        }
        (sqe, capsule[72..].to_vec())
    }

    fn queue(addr: SocketAddr) -> QueueHandle {
        let opts = TcpQueueOptions { qid: 1, depth: 4, in_capsule_limit: 4096, ..TcpQueueOptions::default() };
        QueueHandle::spawn(TcpQueue::connect(addr, &opts).unwrap()).unwrap()
    }

    /// The test's side of a [`Scripted`] recovery: holds it was told of, and how it answers them.
    type Script = (Receiver<(u64, HostError)>, Sender<Result<(), HostError>>);

    /// A queue with a [`Scripted`] recovery, connected to a controller that hangs up after one command.
    fn setup() -> (TcpListener, QueueHandle, Script, JoinHandle<(SubmissionQueueEntry, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let first = controller(&listener, false);
        let (held_tx, held) = channel();
        let (answer, answer_rx) = channel();
        let recovery = Arc::new(Scripted { held: Mutex::new(held_tx), answer: Mutex::new(answer_rx) });
        let q = queue(listener.local_addr().unwrap()).recovering(0, recovery);
        (listener, q, (held, answer), first)
    }

    fn write_request() -> (Request<()>, Vec<u8>) {
        let data: Vec<u8> = (0..LEN).map(|i| u8::try_from(i % 251).unwrap()).collect();
        let sqe = Write { nsid: 1, slba: 77, nlb: 0, ..Write::default() }.to_sqe();
        (Request { sqe, data: data.clone(), direction: DataDirection::HostToController, context: () }, data)
    }

    #[test]
    fn a_command_the_connection_lost_is_resubmitted_on_the_replacement() {
        let (listener, q, (held, answer), first) = setup();
        let (request, data) = write_request();
        let pending = q.submit(request).unwrap();
        let (first, sent) = first.join().unwrap();
        assert_eq!(sent, data);

        let waiter = std::thread::spawn(move || pending.wait(Duration::from_secs(10)));
        let (epoch, cause) = held.recv().unwrap();
        assert_eq!(epoch, 0);
        assert!(transport_loss(&cause), "{cause:?}");
        let second = controller(&listener, true);
        q.replace(queue(listener.local_addr().unwrap()), 1);
        answer.send(Ok(())).unwrap();

        let reply = waiter.join().unwrap().unwrap();
        assert!(reply.result.unwrap().status.is_success());
        assert_eq!(reply.data, data, "the caller's buffer comes back");
        let (again, resent) = second.join().unwrap();
        assert_eq!((again.opcode, again.nsid, again.cdw10), (first.opcode, first.nsid, first.cdw10));
        assert_eq!(resent, data, "the same bytes were sent again");
    }

    /// Tells the test of each failed link; holds nothing.
    #[derive(Debug)]
    struct Watcher(Mutex<Sender<()>>);

    impl Recovery for Watcher {
        fn hold(&self, _qid: u16, _epoch: u64, cause: &HostError) -> Result<(), HostError> {
            Err(cause.clone())
        }
        fn poll_hold(&self, _: u16, _: u64, cause: &HostError, _: &mut Context<'_>) -> Poll<Result<(), HostError>> {
            Poll::Ready(Err(cause.clone()))
        }
        fn link_failed(&self) {
            self.0.lock().unwrap().send(()).unwrap();
        }
    }

    /// Accept one connection, answer its ICReq, and hang up when told to.
    fn hang_up_after_icresp(listener: &TcpListener) -> (Sender<()>, JoinHandle<()>) {
        let listener = listener.try_clone().unwrap();
        let (go, told) = channel();
        let controller = std::thread::spawn(move || {
            let _connection = accept_and_answer_icreq(&listener);
            told.recv().unwrap();
        });
        (go, controller)
    }

    /// Counts the wake-ups of a task.
    #[derive(Debug, Default)]
    struct WakeCount(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn an_awaiting_task_is_woken_by_its_reply_and_by_a_reply_dropped_unsent() {
        let count = Arc::new(WakeCount::default());
        let waker = std::task::Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let woken = || count.0.load(Ordering::SeqCst);

        let (port, mut pending) = reply_port(3, None);
        assert!(Pin::new(&mut pending).poll(&mut cx).is_pending());
        let ReplyTo::Channel(port) = port else { unreachable!("a reply port") };
        port.send(Reply {
            context: (),
            result: Err(HostError::Closed { qid: 3 }),
            data: vec![7],
            r2ts: 0,
            in_capsule: false,
        });
        assert_eq!(woken(), 1, "woken once the reply is sent");
        match Pin::new(&mut pending).poll(&mut cx) {
            Poll::Ready(Ok(reply)) => assert_eq!(reply.data, vec![7]),
            other => panic!("expected the reply, got {other:?}"),
        }

        // The I/O thread went away with the request still queued: the reply is dropped, never sent.
        let (port, mut pending) = reply_port(3, None);
        assert!(Pin::new(&mut pending).poll(&mut cx).is_pending());
        drop(port);
        assert_eq!(woken(), 2, "woken when the reply channel closes unsent");
        match Pin::new(&mut pending).poll(&mut cx) {
            Poll::Ready(Err(HostError::ShutDown { qid: 3 })) => {}
            other => panic!("expected ShutDown, got {other:?}"),
        }
    }

    #[test]
    fn an_idle_link_that_fails_tells_its_recovery_once() {
        // No command in flight, so no hold reports it: the I/O thread itself must (the controller's
        // supervisor sleeps until told).
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, failed) = channel();
        let recovery: Arc<dyn Recovery> = Arc::new(Watcher(Mutex::new(tx)));
        let (go, first) = hang_up_after_icresp(&listener);
        let q = queue(addr).recovering(0, Arc::clone(&recovery));
        assert!(failed.try_recv().is_err(), "nothing failed yet");
        go.send(()).unwrap();
        first.join().unwrap();
        failed.recv_timeout(Duration::from_secs(10)).expect("the first link's failure was reported");
        assert!(q.failure().is_some());

        // A replacement link is watched as well; the replaced one says nothing more.
        let (go, second) = hang_up_after_icresp(&listener);
        q.replace(queue(addr), 1);
        assert!(failed.try_recv().is_err(), "the first failure was reported once");
        go.send(()).unwrap();
        second.join().unwrap();
        failed.recv_timeout(Duration::from_secs(10)).expect("the replacement's failure was reported");
        assert!(q.failure().is_some());
    }

    #[test]
    fn only_commands_that_can_time_out_keep_the_io_thread_checking() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (go, controller) = hang_up_after_icresp(&listener);
        let opts = TcpQueueOptions { qid: 0, depth: 4, ..TcpQueueOptions::default() };
        let mut q: TcpQueue<()> = TcpQueue::connect(listener.local_addr().unwrap(), &opts).unwrap();
        let command = |sqe| Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () };
        q.submit(command(nvmf_common::nvme::admin::AsyncEventRequest.to_sqe())).unwrap();
        assert_eq!(q.outstanding(), 1);
        assert!(!q.timed_outstanding(), "an Asynchronous Event Request waits as long as it takes");
        q.submit(command(nvmf_common::nvme::admin::KeepAlive.to_sqe())).unwrap();
        assert!(q.timed_outstanding(), "a Keep Alive times out");
        go.send(()).unwrap();
        controller.join().unwrap();
    }

    /// A [`CompletionSink`] that hands completions to the test and counts wake-ups.
    #[derive(Debug)]
    pub(super) struct TestSink {
        tx: Mutex<Sender<Completed>>,
        pub(super) wakes: AtomicU64,
    }

    impl TestSink {
        pub(super) fn new() -> (Arc<TestSink>, Receiver<Completed>) {
            let (tx, rx) = channel();
            (Arc::new(TestSink { tx: Mutex::new(tx), wakes: AtomicU64::new(0) }), rx)
        }
    }

    impl CompletionSink for TestSink {
        fn push(&self, completed: Completed) {
            self.tx.lock().unwrap().send(completed).unwrap();
        }
        fn wake(&self) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_sink_command_the_connection_lost_is_resubmitted_under_its_tag() {
        let (listener, q, (held, answer), first) = setup();
        let (test_sink, rx) = TestSink::new();
        let sink: Arc<dyn CompletionSink> = test_sink.clone();
        let (request, data) = write_request();
        q.submit_to_sink(request, &sink, 42).unwrap();
        let (first, sent) = first.join().unwrap();
        assert_eq!(sent, data);

        let lost = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(lost.tag(), 42);
        // The I/O thread wakes the owner after pushing (bounded wait, not a timing assertion).
        let deadline = Instant::now() + Duration::from_secs(10);
        while test_sink.wakes.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the owner was never woken");
            std::thread::yield_now();
        }
        let settling = std::thread::spawn(move || lost.settle());
        let (epoch, cause) = held.recv().unwrap();
        assert_eq!(epoch, 0);
        assert!(transport_loss(&cause), "{cause:?}");
        let second = controller(&listener, true);
        q.replace(queue(listener.local_addr().unwrap()), 1);
        answer.send(Ok(())).unwrap();
        assert!(settling.join().unwrap().is_none(), "resubmitted: the reply comes through the sink");

        let done = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(done.tag(), 42, "the same tag");
        let reply = done.settle().expect("answered by the new association");
        assert!(reply.result.unwrap().status.is_success());
        assert_eq!(reply.data, data, "the caller's buffer comes back");
        let (again, resent) = second.join().unwrap();
        assert_eq!((again.opcode, again.nsid, again.cdw10), (first.opcode, first.nsid, first.cdw10));
        assert_eq!(resent, data, "the same bytes were sent again");
    }

    #[test]
    fn a_lost_sink_command_fails_with_the_recovery_error_and_keeps_its_buffer() {
        let (_listener, q, (held, answer), first) = setup();
        let (test_sink, rx) = TestSink::new();
        let sink: Arc<dyn CompletionSink> = test_sink;
        let (request, data) = write_request();
        q.submit_to_sink(request, &sink, 7).unwrap();
        first.join().unwrap();
        answer.send(Err(HostError::FastIoFail { after: Duration::from_millis(5) })).unwrap();
        let lost = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let reply = lost.settle().expect("failed, not resubmitted");
        assert!(matches!(reply.result, Err(HostError::FastIoFail { .. })), "{:?}", reply.result);
        assert_eq!(reply.data, data);
        assert!(held.try_recv().is_ok(), "the loss went through the recovery");
    }

    #[test]
    fn a_lost_command_fails_with_the_recovery_error_and_keeps_its_buffer() {
        let (_listener, q, (held, answer), first) = setup();
        let (request, data) = write_request();
        let pending = q.submit(request).unwrap();
        first.join().unwrap();
        answer.send(Err(HostError::FastIoFail { after: Duration::from_millis(5) })).unwrap();
        let reply = pending.wait(Duration::from_secs(10)).unwrap();
        assert!(matches!(reply.result, Err(HostError::FastIoFail { .. })), "{:?}", reply.result);
        assert_eq!(reply.data, data);
        assert!(held.try_recv().is_ok(), "the loss went through the recovery");
        // A new submission to the failed connection is held too, and fails the same way.
        answer.send(Err(HostError::ControllerLost { after: Duration::from_secs(1) })).unwrap();
        // (It is held in `submit` if the I/O thread already published the failure, else in `wait`.)
        let lost = match q.submit(write_request().0) {
            Err(e) => e,
            Ok(p) => p.wait(Duration::from_secs(10)).unwrap().result.unwrap_err(),
        };
        assert!(matches!(lost, HostError::ControllerLost { .. }), "{lost:?}");
    }
}

#[cfg(test)]
mod driver_tests {
    //! The I/O thread driven through [`BareQueue`] alone, against a queue without a wire ([`Loopback`]): what
    //! both transports rely on — batches beyond the depth wait in the backlog, completions reach their
    //! waiters, the metrics count bytes, errors and latency, a failed queue fails later requests, an idle
    //! thread sleeps in `poll` (never a zero timeout) and a waker ends that sleep.

    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    use mio::{Events, Poll, Token};
    use nvmf_common::nvme::io::{Read, Write};
    use nvmf_common::nvme::Status;

    use super::*;
    use crate::queue::QueueStats;

    const NSID_ERROR: u32 = 7;
    const NSID_FAIL_QUEUE: u32 = 9;

    /// What the test sees of a [`Loopback`] while the I/O thread owns it.
    #[derive(Debug, Default)]
    struct Probe {
        /// Timeouts of the `poll` calls made with nothing outstanding.
        idle_timeouts: Mutex<Vec<Option<Duration>>>,
        /// Set once a `poll` returned because of the waker.
        woken: AtomicBool,
    }

    /// Completes every outstanding command at the next `poll` (read data filled with 0xA5); a command for
    /// namespace [`NSID_ERROR`] gets Invalid Field, one for [`NSID_FAIL_QUEUE`] fails the whole queue.
    struct Loopback {
        poll: Poll,
        events: Events,
        waker: Option<Arc<Waker>>,
        depth: usize,
        outstanding: Vec<Request<InFlight>>,
        completed: VecDeque<Completion<InFlight>>,
        stats: QueueStats,
        failed: Option<HostError>,
        probe: Arc<Probe>,
    }

    impl Loopback {
        fn new(depth: usize) -> (Self, Arc<Probe>) {
            let probe = Arc::new(Probe::default());
            let q = Loopback {
                poll: Poll::new().unwrap(),
                events: Events::with_capacity(2),
                waker: None,
                depth,
                outstanding: Vec::new(),
                completed: VecDeque::new(),
                stats: QueueStats::default(),
                failed: None,
                probe: Arc::clone(&probe),
            };
            (q, probe)
        }

        fn complete(&mut self, request: Request<InFlight>, result: Result<CompletionQueueEntry, HostError>) {
            let Request { sqe, mut data, direction, context } = request;
            if direction == DataDirection::ControllerToHost && result.is_ok() {
                data.fill(0xA5);
            }
            let result = result.map(|mut c| {
                c.cid = sqe.cid;
                c
            });
            self.stats.completed += 1;
            self.completed.push_back(Completion { context, result, data, r2ts: 0, in_capsule: false });
        }
    }

    impl BareQueue<InFlight> for Loopback {
        fn qid(&self) -> u16 {
            1
        }
        fn submit(&mut self, request: Request<InFlight>) -> Result<u16, Box<Rejected<InFlight>>> {
            if let Some(e) = &self.failed {
                return Err(Box::new(Rejected { error: e.clone(), request }));
            }
            assert!(self.outstanding.len() < self.depth, "the I/O thread submitted beyond the free slots");
            self.stats.submitted += 1;
            self.outstanding.push(request);
            let n = u16::try_from(self.outstanding.len()).unwrap();
            self.stats.max_outstanding = self.stats.max_outstanding.max(n);
            Ok(n)
        }
        fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
            if self.outstanding.is_empty() {
                self.probe.idle_timeouts.lock().unwrap().push(timeout);
                self.poll.poll(&mut self.events, timeout).unwrap();
                if !self.events.is_empty() {
                    self.probe.woken.store(true, Ordering::SeqCst);
                }
                return Ok(());
            }
            for r in std::mem::take(&mut self.outstanding) {
                match r.sqe.nsid {
                    NSID_ERROR => self.complete(r, Ok(CompletionQueueEntry::new(0, Status::INVALID_FIELD))),
                    NSID_FAIL_QUEUE => {
                        let e = HostError::Closed { qid: 1 };
                        self.failed = Some(e.clone());
                        self.complete(r, Err(e));
                    }
                    _ => self.complete(r, Ok(CompletionQueueEntry::new(0, Status::SUCCESS))),
                }
            }
            Ok(())
        }
        fn next_completion(&mut self) -> Option<Completion<InFlight>> {
            self.completed.pop_front()
        }
        fn close(&mut self) {
            for r in std::mem::take(&mut self.outstanding) {
                self.complete(r, Err(HostError::ShutDown { qid: 1 }));
            }
            self.failed.get_or_insert(HostError::ShutDown { qid: 1 });
        }
        fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
            let w = Arc::new(Waker::new(self.poll.registry(), Token(0)).unwrap());
            self.waker = Some(Arc::clone(&w));
            Ok(w)
        }
        fn free_slots(&self) -> usize {
            self.depth - self.outstanding.len()
        }
        fn outstanding(&self) -> usize {
            self.outstanding.len()
        }
        fn timed_outstanding(&self) -> bool {
            !self.outstanding.is_empty()
        }
        fn failure(&self) -> Option<&HostError> {
            self.failed.as_ref()
        }
        fn stats(&self) -> QueueStats {
            self.stats
        }
    }

    fn read(nsid: u32, len: usize) -> Request<()> {
        let sqe = Read { nsid, slba: 0, nlb: 0, ..Read::default() }.to_sqe();
        Request { sqe, data: vec![0; len], direction: DataDirection::ControllerToHost, context: () }
    }

    fn write(nsid: u32, len: usize) -> Request<()> {
        let sqe = Write { nsid, slba: 0, nlb: 0, ..Write::default() }.to_sqe();
        Request { sqe, data: vec![1; len], direction: DataDirection::HostToController, context: () }
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_batch_beyond_the_depth_completes_and_is_metered() {
        let (q, _) = Loopback::new(4);
        let h = QueueHandle::spawn(q).unwrap();
        let mut pending = Vec::new();
        for i in 0..16 {
            pending.push(h.submit(if i % 2 == 0 { read(1, 4096) } else { write(1, 512) }).unwrap());
        }
        for (i, p) in pending.into_iter().enumerate() {
            let reply = p.wait(WAIT).unwrap();
            assert!(reply.result.unwrap().status.is_success());
            if i % 2 == 0 {
                assert!(reply.data.len() == 4096 && reply.data.iter().all(|&b| b == 0xA5), "read data came back");
            } else {
                assert_eq!(reply.data, vec![1; 512], "the write buffer came back");
            }
        }
        h.close_and_check(|m| {
            assert_eq!((m.submitted, m.completed), (16, 16));
            assert!(m.max_outstanding <= 4, "{m:?}");
            assert_eq!((m.read_bytes, m.written_bytes, m.errors), (8 * 4096, 8 * 512, 0));
            assert_eq!(m.latency_count(), 16);
        });
    }

    #[test]
    fn sink_completions_carry_their_tags_and_failures_reach_the_sink() {
        let (q, _) = Loopback::new(4);
        let h = QueueHandle::spawn(q).unwrap();
        let (test_sink, rx) = super::tests::TestSink::new();
        let sink: Arc<dyn CompletionSink> = test_sink;
        // Half one by one, half as a batch with one wake-up.
        for tag in 0..8u64 {
            h.submit_to_sink(read(1, 4096), &sink, tag).unwrap();
        }
        for tag in 8..16u64 {
            h.queue_to_sink(read(1, 4096), &sink, tag).unwrap();
        }
        h.wake();
        let mut tags: Vec<u64> = (0..16)
            .map(|_| {
                let c = rx.recv_timeout(WAIT).unwrap();
                let tag = c.tag();
                let reply = c.settle().expect("no recovery: the reply itself");
                assert!(reply.result.unwrap().status.is_success());
                assert!(reply.data.len() == 4096 && reply.data.iter().all(|&b| b == 0xA5), "read data came back");
                tag
            })
            .collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..16).collect::<Vec<_>>(), "every tag exactly once");
        // An error status, then a failed queue: both reach the sink under their tags.
        h.submit_to_sink(read(NSID_ERROR, 512), &sink, 100).unwrap();
        let c = rx.recv_timeout(WAIT).unwrap();
        assert_eq!((c.tag(), c.settle().unwrap().result.unwrap().status), (100, Status::INVALID_FIELD));
        h.submit_to_sink(write(NSID_FAIL_QUEUE, 512), &sink, 101).unwrap();
        let c = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(c.tag(), 101);
        assert!(matches!(c.settle().unwrap().result, Err(HostError::Closed { .. })));
        match h.submit_to_sink(write(1, 512), &sink, 102) {
            Err((e, data)) => assert!(matches!(e, HostError::Closed { .. }) && data == vec![1; 512], "{e:?}"),
            Ok(()) => {
                let c = rx.recv_timeout(WAIT).unwrap();
                let reply = c.settle().unwrap();
                assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
                assert_eq!(reply.data, vec![1; 512], "the buffer comes back with the failure");
            }
        }
        h.close_and_check(|m| assert_eq!((m.read_bytes, m.errors), (16 * 4096, 3), "{m:?}"));
    }

    #[test]
    fn error_statuses_and_a_failed_queue_count_as_errors() {
        let (q, _) = Loopback::new(4);
        let h = QueueHandle::spawn(q).unwrap();
        let reply = h.submit(read(NSID_ERROR, 512)).unwrap().wait(WAIT).unwrap();
        assert_eq!(reply.result.unwrap().status, Status::INVALID_FIELD);
        let reply = h.submit(write(NSID_FAIL_QUEUE, 512)).unwrap().wait(WAIT).unwrap();
        assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
        // Later requests fail with the queue's failure (rejected by the queue, or answered by the thread).
        let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
        assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
        assert!(matches!(h.failure(), Some(HostError::Closed { .. })));
        h.close_and_check(|m| {
            assert_eq!((m.errors, m.read_bytes, m.written_bytes), (3, 0, 0), "{m:?}");
        });
    }

    #[test]
    fn an_idle_thread_sleeps_in_poll_and_a_submission_wakes_it() {
        let (q, probe) = Loopback::new(4);
        let h = QueueHandle::spawn(q).unwrap();
        // Wait until the thread has gone to sleep at least once, then submit: the waker must end the sleep.
        while probe.idle_timeouts.lock().unwrap().is_empty() {
            std::thread::yield_now();
        }
        let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
        assert!(reply.result.unwrap().status.is_success());
        assert!(probe.woken.load(Ordering::SeqCst), "the submission woke the sleeping poll");
        h.close();
        let idle = probe.idle_timeouts.lock().unwrap();
        assert!(idle.iter().all(Option::is_none), "idle, it sleeps until woken (no timer, no busy polling): {idle:?}");
    }

    #[test]
    fn latency_buckets_are_log2_microseconds() {
        for (ns, bucket) in
            [(0, 0), (1000, 0), (1001, 1), (2000, 1), (2001, 2), (8000, 3), (4_194_304_000, 22), (u64::MAX, 23)]
        {
            assert_eq!(latency_bucket(ns), bucket, "{ns} ns");
        }
        assert!((latency_bucket_bound(0) - 1e-6).abs() < 1e-12);
        assert!((latency_bucket_bound(3) - 8e-6).abs() < 1e-12);
        assert!(latency_bucket_bound(LATENCY_BUCKETS - 1).is_infinite());
    }

    impl QueueHandle {
        /// Close, then check the metrics the closed handle reports.
        fn close_and_check(self, check: impl FnOnce(&QueueMetrics)) {
            self.shutdown();
            check(&self.stats());
        }
    }
}
