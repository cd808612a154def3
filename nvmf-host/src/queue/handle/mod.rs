//! [`QueueHandle`]: a host queue pair of either transport ([`BareQueue`]: `TcpQueue` or `RdmaQueue`) on its own I/O
//! thread (`io_thread`, [`Submitter`]), usable from any number of threads: they hand it [`Request`]s through a
//! bounded channel and wait on a [`Pending`] (`pending`: blocking, or as a `Future`), or have the completions pushed
//! into a [`CompletionSink`] (`sink`); across a reconnect the handle's link is replaced and, with a `Recovery`, held
//! I/O goes to the new one (`recovery`); a caller's thread can drive the link itself (`hosting`, [`LinkHost`]); and
//! [`QueueMetrics`] counts what it completed (`metrics`). Threads, what blocks, failure, reconnects and sinks:
//! `docs/architecture.md`, "A queue handle".

mod hosting;
mod in_flight;
mod io_thread;
#[cfg(test)]
mod io_thread_tests;
mod metrics;
mod pending;
mod recovery;
mod sink;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use nvmf_config::PollMode;
use nvmf_service::poll::{Poller, DEFAULT_WINDOW};

use crate::error::HostError;
use crate::queue::{BareQueue, Completion, Request};
pub(crate) use hosting::release_all;
pub use hosting::LinkHost;
pub use in_flight::InFlight;
use in_flight::ReplyTo;
pub use io_thread::Submitter;
use io_thread::{run, Message, Published};
use metrics::Meter;
pub use metrics::{latency_bucket_bound, QueueMetrics, LATENCY_BUCKETS};
pub use pending::Pending;
use pending::{reply_port, Stage};
pub(crate) use recovery::{transport_loss, Recovery};
use recovery::{Refused, Retry};
use sink::Ticket;
pub use sink::{Completed, CompletionSink};

/// Why [`QueueHandle::try_queue_to_sink`] did not submit.
#[derive(Debug)]
pub enum SinkRefused {
    /// The command fails with this error; its buffer comes back.
    Failed(HostError, Vec<u8>),
    /// The controller is reconnecting: the request comes back untouched.
    Unavailable(Request<()>),
}

/// The result of one command from a [`QueueHandle`].
pub type Reply = Completion<()>;

/// One connection of a queue: its I/O thread and what it publishes.
#[derive(Debug)]
struct Link {
    submitter: Submitter,
    shared: Arc<Published>,
    thread: Option<JoinHandle<()>>,
    /// The association this link belongs to (see [`Recovery::hold`]).
    epoch: u64,
}

impl Link {
    fn stop(&mut self, message: Message) {
        // This thread may host the link (or another whose host it will wait for): joining blocks.
        hosting::release_all();
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
    /// Submitted, completed, R2Ts and sleeps of the links replaced so far.
    retired: [AtomicU64; 4],
    /// The metrics of the links replaced so far.
    retired_meter: Meter,
}

/// A command's reply channel as the I/O thread posts to it, and the [`Pending`] that waits on it.
fn pending_reply(qid: u16, retry: Option<Retry>) -> (ReplyTo, Pending) {
    let (port, pending) = reply_port(qid, retry);
    (ReplyTo::Channel(port), pending)
}

impl Slot {
    pub(super) fn hold(&self, epoch: u64, cause: &HostError) -> Result<(), HostError> {
        // The reconnect this waits for stops the old link, which must not wait for this thread.
        hosting::release_all();
        match &self.recovery {
            Some(r) => r.hold(self.qid, epoch, cause),
            None => Err(cause.clone()),
        }
    }

    /// As [`Recovery::hold`], as a future's step: registers the task to be woken when it may end.
    pub(super) fn poll_hold(&self, epoch: u64, cause: &HostError, cx: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        match &self.recovery {
            Some(r) => r.poll_hold(self.qid, epoch, cause, cx),
            None => Poll::Ready(Err(cause.clone())),
        }
    }

    /// Submit on the current link with a [`Pending`] to wait on.
    fn submit(self: &Arc<Self>, request: Request<()>) -> Result<Pending, (HostError, Vec<u8>)> {
        let qid = self.qid;
        self.submit_via(request, true, |retry| pending_reply(qid, retry))
    }

    /// [`Slot::submit`] without holding: while the link is failed the request comes back to be held.
    #[expect(clippy::result_large_err, reason = "the request goes back by value: boxing it would allocate")]
    pub(super) fn try_submit(self: &Arc<Self>, request: Request<()>) -> Result<Pending, Refused> {
        let qid = self.qid;
        self.try_submit_via(request, true, |retry| pending_reply(qid, retry))
    }

    /// Submit on the current link with the completion going to `sink` under `tag`.
    pub(super) fn submit_to_sink(
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
    #[expect(clippy::result_large_err, reason = "the request goes back by value: boxing it would allocate")]
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

/// A queue driven by its own I/O thread (see the module docs).
#[derive(Debug)]
pub struct QueueHandle {
    slot: Arc<Slot>,
}

impl QueueHandle {
    /// Move `queue` (either transport) onto a new I/O thread that polls adaptively with the default window.
    pub fn spawn<Q: BareQueue<InFlight> + 'static>(queue: Q) -> Result<Self, HostError> {
        Self::spawn_with(queue, Poller::new(PollMode::Adaptive, DEFAULT_WINDOW), None)
    }

    /// Move `queue` onto a new I/O thread that waits as `poller` says (see the module docs), pinned to `cpu` if
    /// given (a CPU it may not run on leaves it unpinned, with a warning: placement is an optimisation).
    pub fn spawn_with<Q: BareQueue<InFlight> + 'static>(
        mut queue: Q,
        poller: Poller,
        cpu: Option<usize>,
    ) -> Result<Self, HostError> {
        let qid = queue.qid();
        let waker = queue.waker()?;
        let depth = queue.free_slots().max(1);
        let (tx, rx) = sync_channel(depth);
        let shared = Arc::new(Published::default());
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("nvmf-q{qid}"))
            .spawn(move || {
                nvmf_service::cpus::place_current_thread(cpu);
                run(queue, rx, thread_shared, poller)
            })
            .map_err(|e| HostError::io(qid, "spawning the I/O thread", &e))?;
        let link = Link { submitter: Submitter { qid, tx, waker }, shared, thread: Some(thread), epoch: 0 };
        Ok(Self::with_link(qid, link, None))
    }

    fn with_link(qid: u16, link: Link, recovery: Option<Arc<dyn Recovery>>) -> Self {
        if let Some(r) = &recovery {
            link.shared.watch(r);
        }
        let retired = std::array::from_fn(|_| AtomicU64::new(0));
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

    /// [`QueueHandle::queue_to_sink`] that never holds: while the controller reconnects the request comes back
    /// ([`SinkRefused::Unavailable`]) for the caller to send elsewhere (a multipath head's other paths).
    pub fn try_queue_to_sink(
        &self,
        request: Request<()>,
        sink: &Arc<dyn CompletionSink>,
        tag: u64,
    ) -> Result<(), SinkRefused> {
        let qid = self.qid();
        let route = |retry| (ReplyTo::Sink(Ticket { qid, tag, sink: Some(Arc::clone(sink)), retry }), ());
        match self.slot.try_submit_via(request, false, route) {
            Ok(()) => Ok(()),
            Err(Refused::Failed(e, data)) => Err(SinkRefused::Failed(e, data)),
            Err(Refused::Held { request, .. }) => Err(SinkRefused::Unavailable(request)),
        }
    }

    /// Commands submitted on the current connection and not completed yet, as of the I/O thread's last loop
    /// (a multipath head's queue-depth policy).
    pub fn outstanding(&self) -> u64 {
        let s = &self.link().shared;
        s.submitted.load(Ordering::Relaxed).saturating_sub(s.completed.load(Ordering::Relaxed))
    }

    /// Wake the I/O thread to take what [`QueueHandle::queue_to_sink`] queued.
    pub fn wake(&self) {
        let link = self.link();
        // A link this thread hosts takes its requests at the host's next turn.
        if !hosting::hosted_here(&link.shared) {
            // A failed wake means the I/O thread is gone; its requests complete with ShutDown.
            let _ = link.submitter.waker.wake();
        }
    }

    /// Ask for this queue's current link to be hosted by the calling thread (see [`LinkHost`]); once per link.
    pub fn host_here(&self, host: &LinkHost) {
        host.ask(self);
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
            sleeps: s.sleeps.load(Ordering::Relaxed) + r[3].load(Ordering::Relaxed),
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
        self.stop(Message::Abort);
    }

    /// Stop the current link's I/O thread without holding the link's lock while joining it: a thread hosting
    /// the link gives it back at its next turn, which may first need the lock to submit.
    fn stop(&self, message: Message) {
        // The epoch of a link being stopped matters to nobody.
        self.take_link(0).stop(message);
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
        r[3].fetch_add(old.shared.sleeps.load(Ordering::Relaxed), Ordering::Relaxed);
        self.slot.retired_meter.absorb(&old.shared.meter);
    }

    /// Let outstanding commands finish, close the connection and join the I/O thread.
    pub fn close(self) {
        self.shutdown();
    }

    /// [`QueueHandle::close`] for a handle that others may still refer to.
    pub(crate) fn shutdown(&self) {
        self.stop(Message::Shutdown);
    }
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
