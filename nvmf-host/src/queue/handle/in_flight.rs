//! What the I/O thread keeps of a command in flight ([`InFlight`]): where its completion goes ([`ReplyTo`]) and
//! what its metrics need. Shared by the I/O thread, the metrics it records and the host it lends its loop to.

use std::time::Instant;

use super::pending::ReplyPort;
use super::sink::{Ticket, Wakes};
use super::Reply;
use crate::queue::DataDirection;

/// Where the I/O thread posts a command's completion.
#[derive(Debug)]
pub(super) enum ReplyTo {
    /// A [`Pending`](super::Pending)'s.
    Channel(ReplyPort),
    /// A completion sink.
    Sink(Ticket),
}

impl ReplyTo {
    pub(super) fn deliver(self, reply: Reply, wakes: &mut Wakes) {
        match self {
            ReplyTo::Channel(port) => port.send(reply),
            ReplyTo::Sink(ticket) => ticket.deliver(reply, wakes),
        }
    }

    /// The request came back to the submitter, which reports the failure itself.
    pub(super) fn disarm(&mut self) {
        if let ReplyTo::Sink(t) = self {
            t.sink = None;
        }
    }
}

/// The I/O thread's context of one command: where its completion goes, and what its metrics need.
#[derive(Debug)]
pub struct InFlight {
    pub(super) reply: ReplyTo,
    /// When the queue's thread took the request (one clock read for the batch it came in; a clock read per
    /// command costs a system call where the clock source has no vDSO).
    pub(super) submitted: Option<Instant>,
    pub(super) direction: DataDirection,
    /// Whether the latency counts (not for an Asynchronous Event Request, outstanding until an event).
    pub(super) timed: bool,
}
