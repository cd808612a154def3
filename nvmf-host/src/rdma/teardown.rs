//! [`DetachedTeardown`]: an [`RdmaQueue`] whose teardown runs on a thread of its own when it is dropped, as a
//! controller's queues use it. Destroying the RDMA CM id of a connection whose peer vanished can wait for the
//! CM's retransmissions (about 50 s on Soft-RoCE), and a controller aborting its lost association's queues must
//! not wait for that before it reconnects. The teardown thread is detached: nothing waits for it.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use mio::Waker;

use super::RdmaQueue;
use crate::error::HostError;
use crate::queue::{BareQueue, Completion, QueueStats, Rejected, Request};

/// An [`RdmaQueue`] torn down (queue pair, RDMA CM id, registered memory) on a thread of its own when dropped.
#[derive(Debug)]
pub struct DetachedTeardown<T: Send + 'static>(Option<RdmaQueue<T>>);

impl<T: Send + 'static> DetachedTeardown<T> {
    /// Wrap `queue`.
    pub fn new(queue: RdmaQueue<T>) -> Self {
        DetachedTeardown(Some(queue))
    }
}

impl<T: Send + 'static> Drop for DetachedTeardown<T> {
    fn drop(&mut self) {
        if let Some(q) = self.0.take() {
            // If no thread can be made, the closure (and the queue) is dropped here instead.
            let _ = std::thread::Builder::new().name(format!("nvmf-q{}-down", q.qid())).spawn(move || drop(q));
        }
    }
}

/// The error of a wrapper whose queue is gone (only while it is being dropped).
fn gone() -> HostError {
    HostError::ShutDown { qid: 0 }
}

impl<T: Send + 'static> BareQueue<T> for DetachedTeardown<T> {
    fn qid(&self) -> u16 {
        self.0.as_ref().map_or(0, RdmaQueue::qid)
    }
    fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        match &mut self.0 {
            Some(q) => q.submit(request),
            None => Err(Box::new(Rejected { error: gone(), request })),
        }
    }
    fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        self.0.as_mut().map_or_else(|| Err(gone()), |q| q.poll(timeout))
    }
    fn next_completion(&mut self) -> Option<Completion<T>> {
        self.0.as_mut().and_then(RdmaQueue::next_completion)
    }
    fn close(&mut self) {
        if let Some(q) = &mut self.0 {
            q.close();
        }
    }
    fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        self.0.as_mut().map_or_else(|| Err(gone()), RdmaQueue::waker)
    }
    fn free_slots(&self) -> usize {
        self.0.as_ref().map_or(0, RdmaQueue::free_slots)
    }
    fn outstanding(&self) -> usize {
        self.0.as_ref().map_or(0, RdmaQueue::outstanding)
    }
    fn timed_outstanding(&self) -> bool {
        self.0.as_ref().is_some_and(RdmaQueue::timed_outstanding)
    }
    fn failure(&self) -> Option<&HostError> {
        self.0.as_ref().and_then(RdmaQueue::failure)
    }
    fn stats(&self) -> QueueStats {
        self.0.as_ref().map_or_else(QueueStats::default, RdmaQueue::stats)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        self.0.as_ref().and_then(BareQueue::poll_fd)
    }
    fn prepare_wait(&mut self) -> Result<bool, HostError> {
        self.0.as_mut().map_or_else(|| Err(gone()), RdmaQueue::prepare_wait)
    }
}
