//! [`QueueHandle`]: a [`TcpQueue`] on its own I/O thread, usable from any number of threads.
//!
//! Threads: one I/O thread per queue owns the queue (socket, decoder, slots) and is the only thread that
//! touches it. Callers hand it [`Request`]s through a bounded channel and wake it with a [`mio::Waker`];
//! each request carries a one-shot reply channel ([`Pending`]) on which the I/O thread posts the
//! [`Completion`]. No lock is taken on this path: the channel and the reply are lock-free queues, and the I/O thread
//! publishes counters through atomics. (The reply channel is allocated per command; a pool of completion
//! slots indexed by CID would remove that allocation.)
//!
//! What blocks: [`Submitter::submit`] blocks only while the request channel is full (as many requests
//! queued as the queue is deep — backpressure); [`Pending::wait`] blocks for the completion, bounded by
//! its timeout. The I/O thread blocks only in `poll`, at most 100 ms at a time. Requests beyond the free
//! command identifiers wait in the I/O thread's backlog until a command completes.
//!
//! When the queue fails, every outstanding and later request completes with the failure; the handle stays
//! valid and reports it ([`QueueHandle::failure`]). Dropping the last handle (or [`QueueHandle::close`])
//! lets outstanding commands finish (bounded by the command timeout), closes the socket and joins the thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::Waker;

use super::queue::{Completion, QueueStats, Rejected, Request, TcpQueue};
use crate::error::HostError;

/// The result of one command from a [`QueueHandle`].
pub type Reply = Completion<()>;

type ReplySender = SyncSender<Reply>;

enum Message {
    Submit(Request<ReplySender>),
    Shutdown,
}

/// State the I/O thread publishes for other threads (atomics and a set-once cell: no lock).
#[derive(Debug, Default)]
struct Shared {
    submitted: AtomicU64,
    completed: AtomicU64,
    r2ts: AtomicU64,
    max_outstanding: AtomicU16,
    failure: OnceLock<HostError>,
}

/// A command in flight: wait for its completion.
#[derive(Debug)]
pub struct Pending {
    qid: u16,
    rx: Receiver<Reply>,
}

impl Pending {
    /// Wait up to `timeout` for the completion. The queue's own command timeout fails a command the
    /// controller never answers, so this bound is a second line of defence.
    pub fn wait(self, timeout: Duration) -> Result<Reply, HostError> {
        match self.rx.recv_timeout(timeout) {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => {
                Err(HostError::Timeout { what: format!("completion on queue {}", self.qid), after: timeout })
            }
            Err(RecvTimeoutError::Disconnected) => Err(HostError::ShutDown { qid: self.qid }),
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
        let (reply_tx, reply_rx) = sync_channel(1);
        let request = Request { sqe: request.sqe, data: request.data, direction: request.direction, context: reply_tx };
        self.tx.send(Message::Submit(request)).map_err(|_| HostError::ShutDown { qid: self.qid })?;
        self.waker.wake().map_err(|e| HostError::io(self.qid, "waking the I/O thread", &e))?;
        Ok(Pending { qid: self.qid, rx: reply_rx })
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.qid
    }
}

/// A queue driven by its own I/O thread (see the module docs).
#[derive(Debug)]
pub struct QueueHandle {
    submitter: Submitter,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl QueueHandle {
    /// Move `queue` onto a new I/O thread.
    pub fn spawn(mut queue: TcpQueue<ReplySender>) -> Result<Self, HostError> {
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
        Ok(QueueHandle { submitter: Submitter { qid, tx, waker }, shared, thread: Some(thread) })
    }

    /// Submit a command (see [`Submitter::submit`]).
    pub fn submit(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.submitter.submit(request)
    }

    /// A cloneable submitter for other threads.
    pub fn submitter(&self) -> Submitter {
        self.submitter.clone()
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.submitter.qid
    }

    /// Counters, as of the I/O thread's last loop.
    pub fn stats(&self) -> QueueStats {
        let s = &self.shared;
        QueueStats {
            submitted: s.submitted.load(Ordering::Relaxed),
            completed: s.completed.load(Ordering::Relaxed),
            max_outstanding: s.max_outstanding.load(Ordering::Relaxed),
            r2ts: s.r2ts.load(Ordering::Relaxed),
        }
    }

    /// The error the queue failed with, if it did.
    pub fn failure(&self) -> Option<HostError> {
        self.shared.failure.get().cloned()
    }

    /// Let outstanding commands finish, close the connection and join the I/O thread.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.submitter.tx.send(Message::Shutdown);
            let _ = self.submitter.waker.wake();
            let _ = thread.join();
        }
    }
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

fn reply(completion: Completion<ReplySender>) {
    let Completion { context, result, data, r2ts, in_capsule } = completion;
    // The caller may have stopped waiting; nothing to do then.
    let _ = context.send(Completion { context: (), result, data, r2ts, in_capsule });
}

fn reject(rejected: Rejected<ReplySender>) {
    let Rejected { error, request } = rejected;
    let _ = request.context.send(Completion {
        context: (),
        result: Err(error),
        data: request.data,
        r2ts: 0,
        in_capsule: false,
    });
}

/// The I/O thread.
fn run(mut queue: TcpQueue<ReplySender>, rx: &Receiver<Message>, shared: &Shared) {
    let qid = queue.qid();
    let mut backlog: VecDeque<Request<ReplySender>> = VecDeque::new();
    let mut stopping = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(Message::Submit(r)) => backlog.push_back(r),
                Ok(Message::Shutdown) | Err(TryRecvError::Disconnected) => {
                    stopping = true;
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        while queue.free_slots() > 0 || queue.failure().is_some() {
            let Some(request) = backlog.pop_front() else { break };
            if let Err(rejected) = queue.submit(request) {
                reject(*rejected);
            }
        }
        while let Some(c) = queue.next_completion() {
            reply(c);
        }
        if queue.failure().is_some() {
            publish(&queue, shared);
            if stopping {
                break;
            }
            // Nothing to poll any more: answer later requests with the failure until told to stop.
            match rx.recv() {
                Ok(Message::Submit(r)) => backlog.push_back(r),
                Ok(Message::Shutdown) | Err(_) => break,
            }
            continue;
        }
        if stopping && queue.outstanding() == 0 && backlog.is_empty() {
            break;
        }
        let _ = queue.poll(Some(Duration::from_millis(100)));
        while let Some(c) = queue.next_completion() {
            reply(c);
        }
        publish(&queue, shared);
    }
    publish(&queue, shared);
    queue.close();
    while let Some(c) = queue.next_completion() {
        reply(c);
    }
    for request in backlog {
        reject(Rejected { error: HostError::ShutDown { qid }, request });
    }
    tracing::debug!(qid, "I/O thread stopped");
}

fn publish<T>(queue: &TcpQueue<T>, shared: &Shared) {
    let stats = queue.stats();
    shared.submitted.store(stats.submitted, Ordering::Relaxed);
    shared.completed.store(stats.completed, Ordering::Relaxed);
    shared.r2ts.store(stats.r2ts, Ordering::Relaxed);
    shared.max_outstanding.store(stats.max_outstanding, Ordering::Relaxed);
    if let Some(e) = queue.failure() {
        let _ = shared.failure.set(e.clone());
    }
}
