//! The transmission phase of one NBD client, on one thread: it reads and checks requests, submits their NVMe
//! commands, hosts the I/O queue it submits to (see [`crate::queue::handle::LinkHost`]) and writes the replies as
//! the commands complete, all from one [`mio::Poll`] over the client's socket (non-blocking), a waker for
//! completions that come from another thread, and the hosted links' poller descriptors.
//!
//! A request is a [`Job`] in one of [`MAX_IN_FLIGHT`] job slots. Its commands go out through the export's
//! [`crate::multipath::NamespaceHead`] on the session's export queue (sessions take the export's queues in
//! turn: a client that opens several connections, as `NBD_FLAG_CAN_MULTI_CONN` invites, gets one queue and
//! one thread per connection), tagged with the slot and the piece, and complete into the session's
//! [`CompletionSink`]. A request is answered as soon as its last command completes (completion order: the
//! protocol matches replies by cookie); a trim with FUA gets a Flush once its Dataset Management completed. A
//! command that failed on its path or that a lost association had in flight goes again to a path from there
//! ([`crate::multipath::NamespaceHead::settle`]).
//!
//! Replies leave with `writev` straight from the jobs' buffers (a read's data is not copied again), several
//! replies per call. A job, its slot and its share of the in-flight budget ([`MAX_IN_FLIGHT`] requests,
//! [`IN_FLIGHT_BYTES`]) are freed only once its reply is written, so a client that sends without reading its
//! replies stops being read: the socket's buffer holds it back, and it costs only its own connection. Jobs
//! and data buffers are reused, so the steady state allocates nothing per request or command.
//!
//! A client that breaks the framing (bad magic, a write payload over the maximum) is answered where it can be,
//! then nothing more is read from it; anything else gets an NBD error and the session goes on. Once nothing
//! more is read (`NBD_CMD_DISC`, end of stream, or the export stopping, which shuts the socket's read side),
//! the session answers what is in flight and closes. Once no more requests can come (that, or the read side
//! closed while the limits hold the rest back), a client that does not read its replies is cut off after
//! [`STOP_WRITE_TIMEOUT`] without progress.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::mem;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_common::nvme::SubmissionQueueEntry;

use super::job::{Job, Pool};
use super::proto::{self, check_request, errno, Action, RequestHeader};
use super::{Export, LimitCounters, Stream, IN_FLIGHT_BYTES, MAX_IN_FLIGHT, STOP_WRITE_TIMEOUT};
use crate::block::{nvm_command, BlockOp, MAX_NLB_BLOCKS};
use crate::multipath::{caller_tag, PathCursor};
use crate::queue::handle::{Completed, CompletionSink, LinkHost};
use crate::queue::{DataDirection, Request};

const CLIENT: Token = Token(0);
const WAKE: Token = Token(1);
/// A hosted link's token is this plus its id.
const LINK: usize = 2;
/// Bytes read from the socket at once: many request headers, or small write payloads with theirs.
const RECEIVE_BUFFER: usize = 64 << 10;
/// Buffers one `writev` takes (a header and its read's pieces, for several replies).
const MAX_IOV: usize = 64;

/// Serve the transmission phase on `stream` until the client is done or the export stops; closes the socket.
pub(super) fn run(stream: Stream, x: &Export) -> io::Result<()> {
    let close = |e: io::Error| {
        let _ = stream.shutdown(Shutdown::Both);
        e
    };
    stream.set_read_timeout(None).map_err(close)?;
    stream.set_nonblocking(true).map_err(close)?;
    let poll = Poll::new().map_err(close)?;
    poll.registry()
        .register(&mut SourceFd(&stream.as_raw_fd()), CLIENT, Interest::READABLE | Interest::WRITABLE)
        .map_err(close)?;
    let waker = Waker::new(poll.registry(), WAKE).map_err(close)?;
    let (finished, done) = channel();
    let sink: Arc<dyn CompletionSink> = Arc::new(Sink { finished, waker, owner: std::thread::current().id() });
    let q = x.next_queue.fetch_add(1, Ordering::Relaxed);
    let piece = usize::try_from(x.piece_blocks * u64::from(x.geometry.block_size)).unwrap_or(usize::MAX);
    let max_buffers = usize::try_from(IN_FLIGHT_BYTES).unwrap_or(usize::MAX) / piece.max(1) + MAX_IN_FLIGHT;
    tracing::debug!(nsid = x.nsid, queue = q, "NBD client in transmission phase");
    let mut t = Transmission {
        x,
        host: LinkHost::new(Arc::clone(&sink)),
        sink,
        done,
        q,
        paths: PathCursor::new(q),
        piece,
        pool: Pool::new(max_buffers),
        slots: (0..MAX_IN_FLIGHT).map(|_| None).collect(),
        rx: Receive { buf: vec![0; RECEIVE_BUFFER].into_boxed_slice(), start: 0, end: 0 },
        reading: Reading::Header,
        replies: VecDeque::with_capacity(MAX_IN_FLIGHT),
        written: 0,
        stream,
        readable: true,
        writable: true,
        broken: false,
        held_back: false,
        read_closed: false,
        stalled_since: None,
        registered: Vec::new(),
        hosted_now: Vec::new(),
    };
    t.serve(poll);
    // Hosted links go back to their I/O threads before the socket closes.
    drop(t.host);
    let _ = t.stream.shutdown(Shutdown::Both);
    Ok(())
}

/// The session's [`CompletionSink`]: finished commands wait in a channel; the session thread is woken when
/// they come from another thread (driving a link it hosts, it takes what it pushed before it sleeps).
#[derive(Debug)]
struct Sink {
    finished: Sender<Completed>,
    waker: Waker,
    owner: ThreadId,
}

impl CompletionSink for Sink {
    fn push(&self, completed: Completed) {
        // The session has ended: nobody waits for the reply.
        let _ = self.finished.send(completed);
    }

    fn wake(&self) {
        if std::thread::current().id() != self.owner {
            // Fails only when the session's poller is gone: then nothing waits.
            let _ = self.waker.wake();
        }
    }
}

/// A command's sink tag: its job slot and its piece of the request.
fn tag(slot: usize, piece: usize) -> u64 {
    (slot as u64) << 32 | piece as u64
}

/// The job slot and piece of a tag (`None` for a tag this session never made).
fn untag(tag: u64) -> Option<(usize, usize)> {
    let slot = usize::try_from(tag >> 32).ok().filter(|&s| s < MAX_IN_FLIGHT)?;
    Some((slot, usize::try_from(tag & u64::from(u32::MAX)).ok()?))
}

/// Bytes read from the socket and not yet taken.
struct Receive {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Receive {
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Read what the socket has into the free space (moving what is pending to the front first): `Ok(false)`
    /// at end of stream.
    fn fill(&mut self, s: &mut Stream) -> io::Result<bool> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let n = s.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n > 0)
    }
}

/// Where the request reader is.
#[derive(Debug)]
enum Reading {
    /// At a request header.
    Header,
    /// In a write's payload: `left` bytes to go into the job's buffers, then its commands are submitted.
    Payload { job: Job, action: Result<Action, u32>, left: usize },
    /// Nothing more is read: answer what is in flight, then close.
    Ended,
}

struct Transmission<'x> {
    x: &'x Export,
    host: LinkHost,
    sink: Arc<dyn CompletionSink>,
    done: Receiver<Completed>,
    /// The session's export queue.
    q: usize,
    paths: PathCursor,
    /// Bytes per NVMe command of a read or write.
    piece: usize,
    pool: Pool,
    /// Jobs whose commands are out, by slot.
    slots: Vec<Option<Job>>,
    rx: Receive,
    reading: Reading,
    /// Finished jobs whose replies are being written, and how much of the first one is.
    replies: VecDeque<Job>,
    written: usize,
    stream: Stream,
    /// The socket may have bytes to read / room to write (edge-triggered: cleared at `WouldBlock`).
    readable: bool,
    writable: bool,
    /// Writing failed: replies are dropped, the session ends once its commands are done.
    broken: bool,
    /// The request at the head of the receive buffer waits for the in-flight limits (counted once per wait).
    held_back: bool,
    /// The socket's read side is closed: what it holds is the last of the requests.
    read_closed: bool,
    /// Since when, with no more requests to come, replies wait for a client that does not read them.
    stalled_since: Option<Instant>,
    /// Hosted links registered with the poller: their id and descriptor.
    registered: Vec<(u64, RawFd)>,
    /// The links hosted now (kept to reuse its allocation on every wait).
    hosted_now: Vec<(u64, RawFd)>,
}

impl Transmission<'_> {
    fn serve(&mut self, mut poll: Poll) {
        let mut events = Events::with_capacity(64);
        // A hosted link had work when asked to get ready for the wait: the poller is only looked at.
        let mut busy = false;
        loop {
            self.x.head.host_queues(self.q, &mut self.paths, &self.host);
            let timeout = if busy { Some(Duration::ZERO) } else { self.wait_bound() };
            if let Err(e) = poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "NBD session poll failed; closing the client");
                    return;
                }
            }
            for e in &events {
                if e.token() == CLIENT {
                    self.readable |= e.is_readable() || e.is_read_closed() || e.is_error();
                    self.writable |= e.is_writable() || e.is_write_closed() || e.is_error();
                    // The client sent its last request, or the export stops (it shuts the read side down).
                    self.read_closed |= e.is_read_closed() || e.is_error();
                }
            }
            while self.advance() {}
            if self.is_over() {
                return;
            }
            if let Some(since) = self.stalled_since {
                if since.elapsed() >= STOP_WRITE_TIMEOUT {
                    tracing::warn!("NBD client cut off at stop: its replies waited unread for {STOP_WRITE_TIMEOUT:?}");
                    LimitCounters::bump(&self.x.limits.stop_write_timeout);
                    self.fail_writes();
                }
            }
            busy = !self.host.prepare_wait();
            if let Err(e) = self.register_links(&poll) {
                tracing::error!(error = %e, "NBD session: registering a hosted queue; closing the client");
                return;
            }
        }
    }

    /// How long the poller may sleep: until a hosted command may have timed out, or a stalled client's time
    /// is up.
    fn wait_bound(&self) -> Option<Duration> {
        let stall = self.stalled_since.map(|s| STOP_WRITE_TIMEOUT.saturating_sub(s.elapsed()));
        match (self.host.wait_bound(), stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// One round of work: read and submit requests, turn the hosted links, take completions, write replies.
    /// True when something moved (another round may move more).
    fn advance(&mut self) -> bool {
        let mut moved = self.read_requests();
        // Send what was queued (hosted links take it in their turn), take what finished, and again while
        // settling sent commands again (after a reconnect or a path's failure).
        loop {
            self.paths.wake(self.q);
            self.host.turn();
            while let Ok(c) = self.done.try_recv() {
                self.complete(c);
                moved = true;
            }
            if !self.paths.noted() {
                break;
            }
        }
        self.write_replies() || moved
    }

    /// Whether the session is over: nothing more to read and every request answered (or dropped).
    fn is_over(&self) -> bool {
        matches!(self.reading, Reading::Ended) && self.pool.in_flight == 0
    }

    /// Read requests while the socket has them and the in-flight limits allow; true when any was taken.
    fn read_requests(&mut self) -> bool {
        let mut moved = false;
        loop {
            match mem::replace(&mut self.reading, Reading::Ended) {
                Reading::Ended => return moved,
                Reading::Header => {
                    // Still at a header unless the client is gone or out of step.
                    self.reading = Reading::Header;
                    let Some(hb) = self.rx.pending().get(..proto::REQUEST_LEN) else {
                        match self.receive() {
                            Some(true) => continue,
                            Some(false) => return moved,
                            None => {
                                self.reading = Reading::Ended;
                                return moved;
                            }
                        }
                    };
                    let h = match RequestHeader::parse(hb.try_into().expect("REQUEST_LEN bytes")) {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::warn!(error = %e, "NBD client out of step; disconnecting it");
                            self.reading = Reading::Ended;
                            return moved;
                        }
                    };
                    // `None`: held back by the in-flight limits; the header stays until a reply frees room.
                    let Some(next) = self.start_request(&h) else {
                        if !self.held_back {
                            self.held_back = true;
                            LimitCounters::bump(&self.x.limits.in_flight);
                        }
                        return moved;
                    };
                    self.held_back = false;
                    self.rx.consume(proto::REQUEST_LEN);
                    self.reading = next;
                    moved = true;
                }
                Reading::Payload { mut job, action, mut left } => match self.read_payload(&mut job, &mut left) {
                    Ok(()) if left == 0 => {
                        self.submit_request(job, action);
                        self.reading = Reading::Header;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.readable = false;
                        self.reading = Reading::Payload { job, action, left };
                        return moved;
                    }
                    // End of stream (`Ok` short of the payload) or a failed read.
                    end => {
                        tracing::debug!(error = ?end.err(), "NBD client gone during a write payload");
                        self.pool.reclaim(job);
                        return moved;
                    }
                },
            }
        }
    }

    /// Read from the socket into the receive buffer: `Some(true)` when bytes came, `Some(false)` when none
    /// are there yet, `None` at end of stream or on an error (reading has ended).
    fn receive(&mut self) -> Option<bool> {
        if !self.readable {
            return Some(false);
        }
        match self.rx.fill(&mut self.stream) {
            Ok(true) => Some(true),
            Ok(false) => {
                tracing::debug!("NBD client closed its side");
                None
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Some(false)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Some(true),
            Err(e) => {
                tracing::debug!(error = %e, "NBD client gone");
                None
            }
        }
    }

    /// What follows header `h`: its payload, the next header (the request was submitted or answered), or the
    /// end; `None` while the in-flight limits hold it back.
    fn start_request(&mut self, h: &RequestHeader) -> Option<Reading> {
        let checked = check_request(h, &self.x.geometry);
        if checked == Ok(Action::Disconnect) {
            tracing::debug!("NBD_CMD_DISC");
            return Some(Reading::Ended);
        }
        let payload = h.payload_len();
        if payload > self.x.geometry.max_payload {
            // The payload cannot be skipped without reading it all: answer, then read no more.
            tracing::warn!(length = payload, "NBD write over the maximum payload; disconnecting the client");
            let mut job = self.pool.acquire(0)?;
            job.cookie = h.cookie;
            job.error = errno::EINVAL;
            self.finish(job);
            return Some(Reading::Ended);
        }
        let bytes = match checked {
            Ok(Action::Block(BlockOp::Read { .. })) => u64::from(h.length),
            _ => u64::from(payload),
        };
        let mut job = self.pool.acquire(bytes)?;
        job.cookie = h.cookie;
        if payload > 0 {
            let left = usize::try_from(payload).unwrap_or(usize::MAX);
            return Some(Reading::Payload { job, action: checked, left });
        }
        self.submit_request(job, checked);
        Some(Reading::Header)
    }

    /// Move up to `left` payload bytes into piece-sized buffers of `job`: first what the receive buffer holds,
    /// then straight from the socket. `Ok` with `left > 0` means end of stream.
    fn read_payload(&mut self, job: &mut Job, left: &mut usize) -> io::Result<()> {
        while *left > 0 {
            if job.buffers.last().is_none_or(|b| b.len() == self.piece) {
                let b = self.pool.buffer();
                job.buffers.push(b);
            }
            let b = job.buffers.last_mut().expect("a buffer was just pushed");
            let want = (self.piece - b.len()).min(*left);
            let pending = self.rx.pending();
            if !pending.is_empty() {
                let n = pending.len().min(want);
                b.extend_from_slice(&pending[..n]);
                self.rx.consume(n);
                *left -= n;
                continue;
            }
            if !self.readable {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let before = b.len();
            // Into the buffer's spare capacity: no zero-fill of memory the socket overwrites anyway. What came
            // before an error (`WouldBlock`) stays in the buffer.
            let read = Read::by_ref(&mut self.stream).take(want as u64).read_to_end(b);
            *left -= b.len() - before;
            match read {
                Ok(_) if b.len() - before < want => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Submit a request's commands (or answer it now: a refused request, one with nothing to do).
    fn submit_request(&mut self, mut job: Job, action: Result<Action, u32>) {
        match action {
            Ok(action) => self.submit(&mut job, action),
            Err(e) => job.error = e,
        }
        if job.commands == 0 {
            self.finish(job);
        } else {
            let slot = job.slot;
            self.slots[slot] = Some(job);
        }
    }

    /// Queue one command of `job` (its next piece); a failed submission makes the job `EIO`.
    fn send(&mut self, job: &mut Job, sqe: SubmissionQueueEntry, data: Vec<u8>, direction: DataDirection) {
        if job.error != 0 {
            job.error = errno::EIO;
            return self.pool.give_back(data);
        }
        let request = Request { sqe, data, direction, context: () };
        let tag = tag(job.slot, job.commands);
        match self.x.head.queue_to_sink(self.q, request, &self.sink, tag, &mut self.paths) {
            Ok(()) => job.commands += 1,
            Err((e, data)) => {
                tracing::warn!(error = %e, "NBD request: submission failed");
                job.error = errno::EIO;
                self.pool.give_back(data);
            }
        }
    }

    /// One command per piece (at most MAX_NLB_BLOCKS, see `Export::piece_blocks`).
    fn send_piece(&mut self, job: &mut Job, op: BlockOp, data: Vec<u8>) {
        let (sqe, direction, _) = nvm_command(self.x.nsid, &op);
        self.send(job, sqe, data, direction);
    }

    /// Queue the NVMe commands for `action`, tagged with the job's slot and their piece.
    fn submit(&mut self, job: &mut Job, action: Action) {
        let bs = u64::from(self.x.geometry.block_size);
        let piece_blocks = self.x.piece_blocks;
        match action {
            Action::Nothing | Action::Disconnect => {}
            Action::Block(BlockOp::Read { slba, blocks }) => {
                job.read = true;
                let mut at = slba;
                while at < slba + blocks {
                    let n = (slba + blocks - at).min(piece_blocks);
                    let b = self.pool.read_buffer(usize::try_from(n * bs).unwrap_or(self.piece));
                    self.send_piece(job, BlockOp::Read { slba: at, blocks: n }, b);
                    at += n;
                }
            }
            Action::Block(BlockOp::Write { slba, fua, .. }) => {
                let mut buffers = mem::take(&mut job.buffers);
                let mut at = slba;
                for b in buffers.drain(..) {
                    let n = b.len() as u64 / bs;
                    self.send_piece(job, BlockOp::Write { slba: at, blocks: n, fua }, b);
                    at += n;
                }
                job.buffers = buffers;
            }
            Action::Block(BlockOp::Flush) => self.send_piece(job, BlockOp::Flush, Vec::new()),
            Action::Block(op @ BlockOp::Deallocate { fua, .. }) => {
                // One range covers the whole request: a u32 byte length is far fewer than 2^32 blocks.
                let (sqe, direction, range) = nvm_command(self.x.nsid, &op);
                let mut b = self.pool.buffer();
                if let Some(range) = range {
                    b.extend_from_slice(&range.to_bytes());
                }
                self.send(job, sqe, b, direction);
                job.flush_after = fua;
            }
            Action::Block(BlockOp::WriteZeroes { slba, blocks, fua, deallocate }) => {
                let mut at = slba;
                while at < slba + blocks {
                    let n = (slba + blocks - at).min(MAX_NLB_BLOCKS);
                    self.send_piece(job, BlockOp::WriteZeroes { slba: at, blocks: n, fua, deallocate }, Vec::new());
                    at += n;
                }
            }
        }
    }

    /// A command completed: settle it, and answer its request once it was the last.
    fn complete(&mut self, c: Completed) {
        let Some((s, piece)) = untag(caller_tag(c.tag())) else {
            tracing::error!(tag = c.tag(), "NBD: a completion for no request");
            return;
        };
        // `None`: sent again (after a reconnect, or on another path); its reply comes back later.
        let Some(reply) = self.x.head.settle(self.q, c, &mut self.paths) else { return };
        let Some(mut job) = self.slots[s].take() else {
            tracing::error!(slot = s, "NBD: a completion for a request not in flight");
            return;
        };
        job.complete(piece, reply);
        if job.completed < job.commands {
            self.slots[s] = Some(job);
            return;
        }
        if job.flush_after && job.error == 0 {
            job.flush_after = false;
            self.send_piece(&mut job, BlockOp::Flush, Vec::new());
            if job.completed < job.commands {
                self.slots[s] = Some(job);
                return;
            }
        }
        self.finish(job);
    }

    /// Queue `job`'s reply (or, with the socket broken, free it).
    fn finish(&mut self, mut job: Job) {
        if self.broken {
            return self.pool.reclaim(job);
        }
        job.header = proto::simple_reply(job.error, job.cookie);
        self.replies.push_back(job);
    }

    /// Write queued replies while the socket takes them; true when any byte went.
    fn write_replies(&mut self) -> bool {
        let mut moved = false;
        while self.writable && !self.replies.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = gather(&self.replies, self.written, &mut iov);
            match self.stream.write_vectored(&iov[..n]) {
                Ok(0) => {
                    self.fail_writes();
                    return moved;
                }
                Ok(written) => {
                    moved = true;
                    self.written += written;
                    while let Some(len) = self.replies.front().map(Job::reply_len).filter(|&l| l <= self.written) {
                        self.written -= len;
                        let job = self.replies.pop_front().expect("a front reply");
                        self.pool.reclaim(job);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "NBD client unreachable");
                    self.fail_writes();
                    return moved;
                }
            }
        }
        // Only once no more requests come (a client held back by the in-flight limits may not have been read
        // to its end yet): a client that still sends may be slow to read, and costs only its connection.
        let last = self.read_closed || matches!(self.reading, Reading::Ended);
        let stalled = last && !self.replies.is_empty();
        self.stalled_since = match (stalled, moved) {
            (true, false) => Some(self.stalled_since.unwrap_or_else(Instant::now)),
            (true, true) => Some(Instant::now()),
            (false, _) => None,
        };
        moved
    }

    /// The client cannot be written to: drop its replies and read nothing more; the session ends once the
    /// commands in flight are done.
    fn fail_writes(&mut self) {
        self.broken = true;
        self.stalled_since = None;
        let _ = self.stream.shutdown(Shutdown::Both);
        while let Some(job) = self.replies.pop_front() {
            self.pool.reclaim(job);
        }
        self.written = 0;
        if let Reading::Payload { job, .. } = mem::replace(&mut self.reading, Reading::Ended) {
            self.pool.reclaim(job);
        }
    }

    /// Register the descriptors of the links hosted now with `poll`, deregister those given back.
    fn register_links(&mut self, poll: &Poll) -> io::Result<()> {
        let mut now = mem::take(&mut self.hosted_now);
        now.clear();
        self.host.for_each_wait(|id, fd| now.push((id, fd)));
        // Deregistered first: a link given back may have left its descriptor number to a new one.
        for &(id, fd) in self.registered.iter().filter(|r| !now.contains(r)) {
            let _ = poll.registry().deregister(&mut SourceFd(&fd));
            tracing::trace!(id, "hosted link's descriptor deregistered");
        }
        self.registered.retain(|r| now.contains(r));
        for &(id, fd) in &now {
            if !self.registered.contains(&(id, fd)) {
                let token = Token(LINK + usize::try_from(id).unwrap_or(usize::MAX - LINK));
                // A failure ends the session: the list's allocation goes with it.
                poll.registry().register(&mut SourceFd(&fd), token, Interest::READABLE)?;
                self.registered.push((id, fd));
            }
        }
        self.hosted_now = now;
        Ok(())
    }
}

/// Fill `iov` with the queued replies from byte `skip` of the first one; returns how many slices it holds.
fn gather<'a>(replies: &'a VecDeque<Job>, mut skip: usize, iov: &mut [IoSlice<'a>; MAX_IOV]) -> usize {
    let mut n = 0;
    for job in replies {
        let parts = std::iter::once(&job.header[..]).chain(job.data().iter().map(Vec::as_slice));
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            iov[n] = IoSlice::new(&part[skip..]);
            skip = 0;
            n += 1;
            if n == MAX_IOV {
                return n;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::proto::SIMPLE_REPLY_LEN;

    fn finished(cookie: u64, error: u32, read: bool, data: &[&[u8]]) -> Job {
        let buffers = data.iter().map(|d| d.to_vec()).collect();
        Job { cookie, error, read, buffers, header: proto::simple_reply(error, cookie), ..Job::default() }
    }

    #[test]
    fn replies_are_gathered_from_where_the_last_write_stopped() {
        let replies: VecDeque<Job> = [
            finished(1, 0, true, &[b"abcd", b"efgh"]),
            finished(2, errno::EIO, true, &[b"never sent"]),
            finished(3, 0, false, &[b"a write's buffer"]),
        ]
        .into();
        let wire = |skip| {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = gather(&replies, skip, &mut iov);
            iov[..n].iter().flat_map(|s| s.to_vec()).collect::<Vec<u8>>()
        };
        let mut all = proto::simple_reply(0, 1).to_vec();
        all.extend_from_slice(b"abcdefgh");
        all.extend_from_slice(&proto::simple_reply(errno::EIO, 2));
        all.extend_from_slice(&proto::simple_reply(0, 3));
        assert_eq!(replies.iter().map(Job::reply_len).sum::<usize>(), all.len());
        for skip in [0, 5, SIMPLE_REPLY_LEN, SIMPLE_REPLY_LEN + 6, SIMPLE_REPLY_LEN + 8] {
            assert_eq!(wire(skip), all[skip..], "skip {skip}");
        }
    }

    #[test]
    fn gather_stops_at_the_iov_limit() {
        let replies: VecDeque<Job> = (0..MAX_IOV as u64).map(|c| finished(c, 0, true, &[b"x"])).collect();
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        assert_eq!(gather(&replies, 0, &mut iov), MAX_IOV);
        assert_eq!(&*iov[MAX_IOV - 1], b"x");
    }
}
