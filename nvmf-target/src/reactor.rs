//! Reactors: the data-path threads. Each reactor owns one `mio::Poll`, one [`IoEngine`] (io_uring + buffer pool)
//! and one [`PollGroup`] holding the queue pairs handed to it (the daemon's is a
//! [`TransportSet`](crate::transport::TransportSet): TCP connections and RDMA queue pairs); after the hand-over a
//! queue pair's commands touch no lock and no other thread. A reactor sleeps in `epoll_wait` on the group's file
//! descriptors, its engine's eventfd and a waker (new queue pairs, asynchronous events from other threads,
//! shutdown), and never blocks anywhere else. It knows no transport. When the group drives its sockets through
//! the engine's ring, the reactor waits in the ring instead ([`IoEngine::wait_in_ring`]): one `io_uring_enter`
//! submits the turn's ops and waits for storage and socket completions, the epoll descriptor polled through the
//! ring, and `epoll_wait` runs (without blocking) only in a turn after that poll fired.
//!
//! One turn: hand the group each readiness event (read, decode, execute, queue output), submit every storage op
//! queued during the turn with one `io_uring_enter`, reap completions and route each to the group by its queue key,
//! poll the queues that have work waiting (commands that waited for a buffer or ring space; again after
//! [`RETRY_AFTER`] if they still wait), end the turn (flush output; drop queue pairs that ended). The reactor sleeps
//! until an event or the group's earliest timer (a queue's Connect or keep-alive deadline, on RDMA a closing queue
//! pair's flush bound); at a timer, or when a queue's notifier fired (an asynchronous event for a held AER, an
//! association ended or reset by another reactor's queue), it polls every queue. With no timer it sleeps until
//! woken; when the group found work at the end of the turn it turns again without sleeping, and after a turn that
//! found nothing its [`Poller`] may first have it poll for a while (`[reactors] poll`). A queue pair that ended
//! stays until its storage ops have completed, so the kernel never writes into a buffer we reused.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_config::PollMode;
use nvmf_service::poll::{Poller, Wait};

use crate::backend::{EngineConfig, IoCompletion, IoEngine, NetCompletion};
use crate::controller::{split_storage_tag, EventNotifier, Target};
#[cfg(doc)]
use crate::transport::RETRY_AFTER;
use crate::transport::{GroupContext, PollGroup, FIRST_GROUP_TOKEN};

const WAKER: Token = Token(0);
const ENGINE: Token = Token(1);
const _: () = assert!(ENGINE.0 < FIRST_GROUP_TOKEN);

/// New queue pairs a reactor takes per turn. Setting one up costs system calls (an RDMA queue pair: its memory
/// registered, the queue pair created, the CM accept), so a burst of connects is spread over turns that also serve
/// the queues already here, instead of stalling them for the whole burst.
const ACCEPTS_PER_TURN: usize = 1;

/// Errors starting a reactor.
#[derive(Debug, thiserror::Error)]
pub enum ReactorError {
    /// The I/O engine could not be created.
    #[error("reactor {index}: I/O engine: {source}")]
    Engine {
        /// Reactor index.
        index: usize,
        /// Cause.
        #[source]
        source: crate::backend::BackendError,
    },
    /// epoll / eventfd / thread creation failed.
    #[error("reactor {index}: {what}: {source}")]
    Os {
        /// Reactor index.
        index: usize,
        /// What failed.
        what: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// What a reactor needs to know.
#[derive(Debug, Clone)]
pub struct ReactorConfig {
    /// Reactor index (thread name, logs).
    pub index: usize,
    /// CPU to pin the thread to.
    pub cpu: Option<usize>,
    /// The I/O engine's ring and buffer pool.
    pub engine: EngineConfig,
    /// How the reactor waits when a turn found nothing to do, and the longest it polls after work when adaptive.
    pub poll: PollMode,
    /// See `poll`.
    pub poll_window: Duration,
    /// Where the reactor counts its waits (published once per turn).
    pub waits: Arc<WaitCounters>,
}

/// How a reactor waited: turns that found nothing and polled again without sleeping, and sleeps. Stored once per
/// turn, never per command.
#[derive(Debug, Default)]
pub struct WaitCounters {
    /// Turns that found nothing and polled again at once.
    pub empty_polls: AtomicU64,
    /// Times the reactor slept (waited in `epoll_wait` with a timeout other than zero).
    pub sleeps: AtomicU64,
}

enum Message<Q> {
    Accept(Q),
    Shutdown,
}

/// The control side of a running reactor whose poll group takes queue pairs of type `Q`.
#[derive(Debug)]
pub struct ReactorHandle<Q> {
    tx: Sender<Message<Q>>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

/// How long a stopping reactor waits before it says what it waits for.
const SHUTDOWN_REPORT_AFTER: Duration = Duration::from_secs(5);

impl<Q: Send + 'static> ReactorHandle<Q> {
    /// Start a reactor thread serving `target` with poll group `group`. Returns once the thread's engine is up (so a
    /// configuration error surfaces here, not later).
    pub fn spawn<G: PollGroup<QueuePair = Q>>(
        config: ReactorConfig,
        target: Arc<Target>,
        group: G,
    ) -> Result<Self, ReactorError> {
        let index = config.index;
        let os = |what| move |source| ReactorError::Os { index, what, source };
        let poll = Poll::new().map_err(os("epoll"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(os("waker"))?);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_waker = Arc::clone(&waker);
        let thread = std::thread::Builder::new()
            .name(format!("nvmf-reactor-{index}"))
            .spawn(move || {
                nvmf_service::cpus::place_current_thread(config.cpu);
                let counters = Arc::clone(target.discard_counters());
                let engine = match IoEngine::with_discard_counters(&config.engine, counters) {
                    Ok(engine) => engine,
                    Err(source) => {
                        let _ = ready_tx.send(Err(ReactorError::Engine { index, source }));
                        return;
                    }
                };
                let poller = Poller::new(config.poll, config.poll_window);
                let waits = Arc::clone(&config.waits);
                let mut reactor = match Reactor::new(index, poll, engine, group, target, rx, thread_waker) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                // The group decides how it runs (its socket path) before the reactor counts as up.
                reactor.start();
                let _ = ready_tx.send(Ok(()));
                reactor.run(poller, &waits);
            })
            .map_err(os("thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(ReactorError::Os { index, what: "thread", source: io::Error::other("reactor died") }),
        }
        Ok(ReactorHandle { tx, waker, thread: Some(thread) })
    }

    /// Hand a new queue pair to this reactor (its poll group accepts or refuses it).
    pub fn accept(&self, queue_pair: Q) {
        let _ = self.inlet().accept(queue_pair);
    }

    /// A way to hand this reactor queue pairs that does not keep it running (for other reactors).
    pub fn inlet(&self) -> ReactorInlet<Q> {
        ReactorInlet { tx: self.tx.clone(), waker: Arc::clone(&self.waker) }
    }

    /// End every queue pair, wait for storage ops in flight, and end the thread.
    pub fn shutdown(mut self) {
        let _ = self.tx.send(Message::Shutdown);
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reactor a queue pair was handed to has ended.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the reactor has ended")]
pub struct ReactorEnded;

/// Hands queue pairs to a reactor ([`ReactorHandle::inlet`]).
#[derive(Debug)]
pub struct ReactorInlet<Q> {
    tx: Sender<Message<Q>>,
    waker: Arc<Waker>,
}

impl<Q> ReactorInlet<Q> {
    /// Hand `queue_pair` to the reactor; `Err` (the queue pair dropped) if the reactor has ended.
    pub fn accept(&self, queue_pair: Q) -> Result<(), ReactorEnded> {
        self.tx.send(Message::Accept(queue_pair)).map_err(|_| ReactorEnded)?;
        let _ = self.waker.wake();
        Ok(())
    }
}

struct Reactor<G: PollGroup> {
    index: usize,
    poll: Poll,
    // Before `engine`: queue pairs (RDMA ones name the pool's memory region) are dropped before the pool.
    group: G,
    engine: IoEngine,
    target: Arc<Target>,
    rx: Receiver<Message<G::QueuePair>>,
    /// What a queue calls (from any thread) to have this reactor poll every queue soon.
    notifier: EventNotifier,
    /// Set by the notifier to make the next turn poll every queue.
    poll_queues: Arc<AtomicBool>,
    completions: Vec<IoCompletion>,
    net_completions: Vec<NetCompletion>,
    /// The channel may hold messages: the waker fired, or the last drain stopped at [`ACCEPTS_PER_TURN`].
    messages_waiting: bool,
    shutting_down: bool,
    /// When the shutdown began, until the reactor said what it still waits for (once, after a few seconds).
    shutdown_since: Option<Instant>,
}

impl<G: PollGroup> Reactor<G> {
    fn new(
        index: usize,
        poll: Poll,
        engine: IoEngine,
        group: G,
        target: Arc<Target>,
        rx: Receiver<Message<G::QueuePair>>,
        waker: Arc<Waker>,
    ) -> Result<Self, ReactorError> {
        let fd = engine.event_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), ENGINE, Interest::READABLE)
            .map_err(|source| ReactorError::Os { index, what: "register eventfd", source })?;
        let poll_queues = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&poll_queues);
        let notifier: EventNotifier = Arc::new(move || {
            flag.store(true, Ordering::Release);
            let _ = waker.wake();
        });
        Ok(Reactor {
            index,
            poll,
            group,
            engine,
            target,
            rx,
            notifier,
            poll_queues,
            completions: Vec::with_capacity(1024),
            net_completions: Vec::with_capacity(1024),
            messages_waiting: false,
            shutting_down: false,
            shutdown_since: None,
        })
    }

    fn run(&mut self, mut poller: Poller, waits: &WaitCounters) {
        let mut events = Events::with_capacity(1024);
        let mut now = Instant::now();
        // The earliest timer of any queue here.
        let mut next_timer: Option<Instant> = None;
        let ring_wait = self.engine.waits_in_ring();
        // The group found work at the end of the last turn: turn again without sleeping.
        let mut busy = false;
        // The last turn handled an event or a completion.
        let mut worked = false;
        loop {
            // The clock is read once per turn, when the poll returns (a syscall where the vDSO cannot read it, as
            // in TCG guests): the timers and the commands' arrival times (the engine's `TurnClock::start_turn`) use
            // that reading; a command's completion time is read once per batch of completions (`new_batch`).
            let wait = if busy || self.messages_waiting { Wait::Poll } else { poller.after_turn(worked, now) };
            let timeout = match wait {
                Wait::Poll => {
                    poller.yield_if_idle(worked || busy);
                    Some(Duration::ZERO)
                }
                // Without a timer only an event has work for this thread: a file descriptor of the group, a
                // storage completion, or the waker (a new queue pair, a queue's notifier, shutdown).
                Wait::Sleep => {
                    let timer = next_timer.map(|t| t.saturating_duration_since(now));
                    // A stopping reactor wakes to say what it still waits for.
                    let report = self.shutdown_since.map(|_| Duration::from_secs(1));
                    let engine = match (self.engine.turn_within(), report) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    match (timer, engine) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                }
            };
            let (empty_polls, sleeps) = poller.counts();
            waits.empty_polls.store(empty_polls, Ordering::Relaxed);
            waits.sleeps.store(sleeps, Ordering::Relaxed);
            let polled = if ring_wait {
                self.wait_and_poll(&mut events, timeout, &mut now)
            } else {
                let polled = self.poll.poll(&mut events, timeout);
                now = Instant::now();
                self.engine.clock_mut().start_turn(now);
                polled.map(|()| false)
            };
            match polled {
                Ok(completed) => worked = completed,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => worked = false,
                Err(e) => {
                    tracing::error!(reactor = self.index, error = %e, "reactor wait failed; reactor stops");
                    return;
                }
            }
            worked |= !events.is_empty();
            for event in events.iter() {
                match event.token() {
                    WAKER => self.messages_waiting = true,
                    // mio polls edge-triggered: every completion the ring (or the engine) signals is a new edge
                    // whether or not the counter was read, so reading it would only cost a syscall per completion.
                    ENGINE => {}
                    Token(t) => {
                        self.engine.clock_mut().new_batch();
                        let token = u64::try_from(t - FIRST_GROUP_TOKEN).unwrap_or(u64::MAX);
                        let (group, mut cx) = self.group_in_context(now);
                        group.ready(token, event, &mut cx);
                    }
                }
            }
            if self.messages_waiting {
                self.drain_messages(now);
            }
            worked |= self.complete_storage(now);
            // Every queue when a notifier fired; otherwise the group polls those whose timers are due and those
            // with work waiting (commands that waited for a buffer or ring space).
            let notified = self.poll_queues.swap(false, Ordering::AcqRel);
            self.engine.clock_mut().new_batch();
            let (group, mut cx) = self.group_in_context(now);
            if group.poll(&mut cx, notified) {
                worked = true;
                self.complete_storage(now);
            }
            let (group, mut cx) = self.group_in_context(now);
            busy = group.end_turn(&mut cx);
            // What the end of the turn queued on the ring (sends of the turn's output) goes before the wait.
            if let Err(e) = self.engine.submit() {
                tracing::error!(reactor = self.index, error = %e, "io_uring submit failed");
            }
            if self.shutting_down && self.group.is_empty() {
                tracing::debug!(reactor = self.index, "reactor stopped");
                return;
            }
            if self.shutdown_since.is_some_and(|t| now.duration_since(t) > SHUTDOWN_REPORT_AFTER) {
                self.shutdown_since = None;
                tracing::warn!(
                    reactor = self.index,
                    storage_ops = self.engine.in_flight(),
                    queue_pairs = ?self.group.remaining(),
                    "reactor still stopping: its queue pairs wait for their storage ops or their peers"
                );
            }
            next_timer = self.group.next_timer(now);
        }
    }

    /// Tell the group the reactor runs, and have the engine wait in its ring when the group's sockets are there.
    fn start(&mut self) {
        let (group, mut cx) = self.group_in_context(Instant::now());
        group.started(&mut cx);
        if !self.engine.socket_io_started() {
            return;
        }
        match self.engine.wait_in_ring(self.poll.as_raw_fd()) {
            Ok(()) => tracing::info!(reactor = self.index, "reactor waits in io_uring_enter"),
            Err(error) => tracing::info!(reactor = self.index, %error, "reactor waits in epoll_wait"),
        }
    }

    /// Waiting in the ring: submit, wait up to `timeout`, route the completions (so the poll of the epoll
    /// descriptor is seen), then take epoll's events without blocking if that poll fired. Whether any completion
    /// came.
    fn wait_and_poll(&mut self, events: &mut Events, timeout: Option<Duration>, now: &mut Instant) -> io::Result<bool> {
        self.engine.wait(timeout)?;
        *now = Instant::now();
        self.engine.clock_mut().start_turn(*now);
        let completed = self.complete_storage(*now);
        events.clear();
        if self.engine.take_epoll_ready() {
            self.poll.poll(events, Some(Duration::ZERO))?;
            // A full batch may have left events behind that no new wake-up of the poll will announce.
            if events.iter().count() == events.capacity() {
                self.engine.mark_epoll_ready();
            }
        }
        Ok(completed)
    }

    /// The poll group, and the context it is called with.
    fn group_in_context(&mut self, now: Instant) -> (&mut G, GroupContext<'_>) {
        let cx = GroupContext::new(&mut self.engine, self.poll.registry(), now, &self.target, &self.notifier);
        (&mut self.group, cx)
    }

    /// Submit queued storage and socket ops, then route completions to the group until no more arrive without
    /// waiting; whether any did.
    fn complete_storage(&mut self, now: Instant) -> bool {
        let mut completed = false;
        loop {
            if let Err(e) = self.engine.submit() {
                tracing::error!(reactor = self.index, error = %e, "io_uring submit failed");
            }
            let mut completions = std::mem::take(&mut self.completions);
            let mut net_completions = std::mem::take(&mut self.net_completions);
            self.engine.reap(|c| completions.push(c));
            self.engine.take_net_completions(&mut net_completions);
            if completions.is_empty() && net_completions.is_empty() {
                self.completions = completions;
                self.net_completions = net_completions;
                return completed;
            }
            completed = true;
            self.engine.clock_mut().new_batch();
            let (group, mut cx) = self.group_in_context(now);
            // Socket ops first: a receive's commands then join this batch's storage ops.
            for c in net_completions.drain(..) {
                group.network_completed(c, &mut cx);
            }
            for c in completions.drain(..) {
                let (queue_key, slot) = split_storage_tag(c.tag);
                group.storage_completed(queue_key, slot, c.result, &mut cx);
            }
            self.completions = completions;
            self.net_completions = net_completions;
        }
    }

    /// Handle the channel's messages, taking at most [`ACCEPTS_PER_TURN`] new queue pairs (the rest wait for the
    /// next turn, which comes without sleeping).
    fn drain_messages(&mut self, now: Instant) {
        self.messages_waiting = false;
        let mut accepted = 0;
        while let Ok(message) = self.rx.try_recv() {
            match message {
                // Dropping a queue pair during shutdown refuses it (a socket closes, an RDMA CM id is destroyed).
                Message::Accept(_) if self.shutting_down => {}
                Message::Accept(queue_pair) => {
                    let (group, mut cx) = self.group_in_context(now);
                    group.accept(queue_pair, &mut cx);
                    accepted += 1;
                    if accepted == ACCEPTS_PER_TURN {
                        self.messages_waiting = true;
                        return;
                    }
                }
                Message::Shutdown => {
                    // Stop accepting, end every queue pair (their queues tear down their associations); the loop
                    // ends once every storage op in flight has completed.
                    self.shutting_down = true;
                    self.shutdown_since = Some(now);
                    let (group, mut cx) = self.group_in_context(now);
                    group.shutdown(&mut cx);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
