//! The transport-neutral queue layer: what a host queue pair of either transport takes and gives back
//! ([`Request`], [`Completion`], [`Rejected`], [`QueueStats`]), how its owner drives it ([`BareQueue`],
//! implemented by [`crate::tcp::TcpQueue`] and the NVMe/RDMA `RdmaQueue`), its command identifiers (`command_id`), and
//! [`handle::QueueHandle`], which puts a queue on its own I/O thread for any number of callers.
//!
//! Threading: a bare queue is single-owner and poll-driven (its owner calls `submit`, `poll` and
//! `next_completion` from one thread; nothing in it locks); see [`handle`] for the I/O thread.

pub(crate) mod command_id;
pub mod handle;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Waker;
use nvmf_common::nvme::{CompletionQueueEntry, SubmissionQueueEntry};

use crate::error::HostError;
pub use command_id::MAX_QUEUE_DEPTH;

/// Which way a command's data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    /// No data.
    None,
    /// Host to controller (writes): sent in the capsule, or fetched by the controller (NVMe/TCP: H2CData PDUs on
    /// R2T; NVMe/RDMA: RDMA READs of the command's keyed buffer).
    HostToController,
    /// Controller to host (reads): NVMe/TCP C2HData PDUs, NVMe/RDMA RDMA WRITEs.
    ControllerToHost,
}

/// A command to submit. The queue owns `data` while the command is outstanding and gives it back in the
/// [`Completion`].
#[derive(Debug)]
pub struct Request<T> {
    /// The command; its CID and SGL1 are set by the queue.
    pub sqe: SubmissionQueueEntry,
    /// The data buffer: the bytes to send, or the buffer to receive into (its length is the transfer length).
    pub data: Vec<u8>,
    /// Which way `data` moves.
    pub direction: DataDirection,
    /// The caller's token, returned with the completion.
    pub context: T,
}

/// A submission the queue refused, with the request handed back.
#[derive(Debug)]
pub struct Rejected<T> {
    /// Why.
    pub error: HostError,
    /// The request, untouched.
    pub request: Request<T>,
}

/// A finished command.
#[derive(Debug)]
pub struct Completion<T> {
    /// The caller's token from the request.
    pub context: T,
    /// The completion queue entry (on NVMe/TCP synthesised for a C2HData with SUCCESS), or the queue failure that
    /// ended the command.
    pub result: Result<CompletionQueueEntry, HostError>,
    /// The request's buffer; for reads, the data received.
    pub data: Vec<u8>,
    /// R2Ts the controller sent for the command (NVMe/TCP; 0 on NVMe/RDMA).
    pub r2ts: u16,
    /// Whether the write data travelled in the capsule.
    pub in_capsule: bool,
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed (any status).
    pub completed: u64,
    /// The most commands outstanding at once.
    pub max_outstanding: u16,
    /// R2Ts served (NVMe/TCP; 0 on NVMe/RDMA).
    pub r2ts: u64,
}

/// A host queue pair as its owner drives it, the same on both transports: a thin forwarding trait over
/// [`crate::tcp::TcpQueue`] and `RdmaQueue` (static dispatch: the I/O thread and perf's workers are generic over
/// it).
pub trait BareQueue<T>: Send {
    /// The queue identifier.
    fn qid(&self) -> u16;
    /// Queue a command; hands the request back when refused.
    fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>>;
    /// Move work along, waiting up to `timeout` when there is nothing to do (a [`BareQueue::waker`] ends the
    /// wait early).
    fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError>;
    /// The next finished command.
    fn next_completion(&mut self) -> Option<Completion<T>>;
    /// Fail outstanding commands with a shutdown error and close the connection.
    fn close(&mut self);
    /// A waker that ends a `poll` wait from another thread (registered in the queue's poller).
    fn waker(&mut self) -> Result<Arc<Waker>, HostError>;
    /// Command identifiers free for `submit`.
    fn free_slots(&self) -> usize;
    /// Commands submitted and not completed yet.
    fn outstanding(&self) -> usize;
    /// Whether a command that can time out is outstanding: any but the admin queue's Asynchronous Event
    /// Requests, which wait for an event as long as it takes.
    fn timed_outstanding(&self) -> bool;
    /// The error the queue failed with, if it did.
    fn failure(&self) -> Option<&HostError>;
    /// The queue's own counters.
    fn stats(&self) -> QueueStats;
    /// A descriptor that turns readable when `poll` has work (the queue's epoll instance), for a thread that
    /// waits on it among its own (a hosting thread, see [`handle::LinkHost`]) after [`BareQueue::prepare_wait`];
    /// `None` when the queue cannot be waited on that way.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }
    /// Before the owner sleeps on [`BareQueue::poll_fd`]: consume the readiness already seen and arm what must be
    /// armed, so that the descriptor turns readable on anything new. False when work arrived meanwhile (`poll`
    /// again first). A queue whose `poll(Some(ZERO))` leaves nothing behind (NVMe/TCP: the socket read until it
    /// would block) has nothing to do.
    fn prepare_wait(&mut self) -> Result<bool, HostError> {
        Ok(true)
    }
}

/// Submit `request` on a bare `queue` and poll it until that command completes (bounded by `timeout`); the
/// completion, whatever its status. For the queue's owner while nothing else is outstanding on it (its Fabrics
/// Connect, tests). Blocks the calling thread in the queue's `poll`, 100 ms at a time.
pub fn execute<T, Q: BareQueue<T>>(
    queue: &mut Q,
    request: Request<T>,
    timeout: Duration,
) -> Result<Completion<T>, HostError> {
    let qid = queue.qid();
    queue.submit(request).map_err(|r| r.error)?;
    let deadline = Instant::now() + timeout;
    loop {
        queue.poll(Some(Duration::from_millis(100)))?;
        if let Some(c) = queue.next_completion() {
            return Ok(c);
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout { what: format!("a command on queue {qid}"), after: timeout });
        }
    }
}
