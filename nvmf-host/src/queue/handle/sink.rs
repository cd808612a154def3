//! Completion sinks: how a caller that multiplexes many commands on one thread (an export queue) takes their
//! completions without a reply channel per command ([`CompletionSink`], [`Completed`]), and the I/O thread's side
//! of it: a command's place in a sink (`Ticket`, which completes the tag even when its request is dropped
//! undelivered) and one wake-up per sink per batch (`Wakes`).
//!
//! [`CompletionSink::push`] and [`CompletionSink::wake`] run on the queue's I/O thread and must not block;
//! [`Completed::settle`] runs on the caller's and blocks only while it holds a command for a reconnect.

use std::sync::Arc;

use super::recovery::Retry;
use super::Reply;
use crate::error::HostError;
use crate::queue::Request;

/// Where an export queue's commands complete ([`super::QueueHandle::submit_to_sink`]). Called on the queue's
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

    /// The reply as it came from the queue (before any recovery).
    pub fn reply(&self) -> &Reply {
        &self.reply
    }

    /// The command back as a request to submit elsewhere (a multipath head's other path), with the sink it
    /// completes to, when the queue kept what resubmitting needs (a controller's queue, which recovers); else
    /// `self`.
    #[expect(clippy::result_large_err, reason = "the completion goes back by value: boxing it would allocate")]
    pub fn into_request(self) -> Result<(Request<()>, Arc<dyn CompletionSink>), Self> {
        match self.retry {
            Some((retry, sink)) => {
                let request =
                    Request { sqe: retry.sqe, data: self.reply.data, direction: retry.direction, context: () };
                Ok((request, sink))
            }
            None => Err(self),
        }
    }

    /// The command's reply; or `None` when the connection lost it and it went to the controller's new
    /// association (its reply will come through the sink again, same tag) — held first while the controller
    /// reconnects, exactly as [`super::Pending::wait`] does. Blocks only in that hold. When the command must fail
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
pub(super) struct Ticket {
    pub(super) qid: u16,
    pub(super) tag: u64,
    /// `None` once delivered (or disarmed).
    pub(super) sink: Option<Arc<dyn CompletionSink>>,
    pub(super) retry: Option<Retry>,
}

impl Ticket {
    pub(super) fn deliver(mut self, reply: Reply, wakes: &mut Wakes) {
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
pub(super) struct Wakes(Option<Arc<dyn CompletionSink>>);

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
