//! [`Pending`]: one command in flight on a queue handle, waited for ([`Pending::wait`], blocking) or awaited (a
//! `Future` for any executor), and its reply channel (`ReplyPort`): a one-shot channel and an `AtomicWaker`
//! the I/O thread wakes after posting the reply (no lock). On a recovering queue a command the connection lost
//! is held here and resubmitted on the next association, its SQE kept (64 bytes) and its buffer handed back
//! with the failed completion, so nothing is copied.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use atomic_waker::AtomicWaker;

use super::recovery::{lost_cause, Refused, Retry};
use super::{Reply, Slot};
use crate::error::HostError;
use crate::queue::Request;

type ReplySender = SyncSender<Reply>;

/// Where a [`Pending`]'s reply goes: its channel, and the waker of a task awaiting it, woken once the reply is
/// sent — or once the channel is closed unsent (the request was dropped with the I/O thread), so the task sees
/// that too.
#[derive(Debug)]
pub(super) struct ReplyPort {
    tx: Option<ReplySender>,
    waker: Arc<AtomicWaker>,
}

impl ReplyPort {
    pub(super) fn send(mut self, reply: Reply) {
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

/// A command in flight: wait for its completion ([`Pending::wait`], blocking) or `.await` it (a [`Future`] with
/// the same result, for any executor: the I/O thread wakes the task).
#[derive(Debug)]
pub struct Pending {
    pub(super) qid: u16,
    pub(super) stage: Stage,
}

#[derive(Debug)]
pub(super) enum Stage {
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

/// A reply channel for one command and the [`Pending`] that waits on it.
pub(super) fn reply_port(qid: u16, retry: Option<Retry>) -> (ReplyPort, Pending) {
    let (tx, rx) = sync_channel(1);
    let waker = Arc::new(AtomicWaker::new());
    let port = ReplyPort { tx: Some(tx), waker: Arc::clone(&waker) };
    (port, Pending { qid, stage: Stage::Waiting { rx, waker, retry } })
}
