//! One NBD client: the handshake, then the transmission phase split over two threads — this session thread
//! reads and checks requests and submits their NVMe commands, the reply thread writes the replies as the
//! commands complete (see the parent module for what each blocks on).
//!
//! A request is a [`Job`] in one of [`MAX_IN_FLIGHT`] job slots. Its commands go out through the export's
//! [`crate::multipath::NamespaceHead`] (a path chosen per command, spread round-robin over the I/O queues),
//! tagged with the slot and the piece, and complete into the session's [`CompletionSink`]: the same channel
//! that carries the submitted jobs to the reply thread, so that thread sleeps in one place and answers each
//! request as soon as its last command completes (completion order; the protocol matches replies by cookie). A
//! command that failed on its path or that a lost association had in flight goes again to a path from there
//! ([`crate::multipath::NamespaceHead::settle`]).
//! Jobs and their data buffers go round between the two threads (reader → reply thread → reader) so the
//! steady state allocates nothing per request or command. A client that breaks the framing (bad magic, a
//! write payload over the maximum) is answered where it can be and then disconnected; anything else gets an
//! NBD error and the session goes on.

use std::cell::RefCell;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::mem;
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use nvmf_common::nvme::SubmissionQueueEntry;

use super::proto::{self, check_request, errno, info, opt, rep, Action, RequestHeader};
use super::{Export, Stream, HANDSHAKE_TIMEOUT, IN_FLIGHT_BYTES, MAX_IN_FLIGHT};
use crate::block::{nvm_command, BlockOp, MAX_NLB_BLOCKS};
use crate::multipath::{caller_tag, PathCursor};
use crate::queue::handle::{Completed, CompletionSink, Reply};
use crate::queue::Request;

/// Option data longer than this is refused (`NBD_OPT_GO` with a 4096-byte name is about 4 KiB).
const MAX_OPTION_LEN: u32 = 16 << 10;
/// Oversized option data up to this much is read and dropped; beyond, the client is disconnected.
const MAX_OPTION_DISCARD: u32 = 1 << 20;
/// Options one client may send before entering transmission; more is treated as a denial of service.
const MAX_OPTIONS: usize = 64;
/// The reply thread's write buffer: a header and a 4 KiB read go out in one `write`.
const REPLY_BUFFER: usize = 256 << 10;

/// Serve one client until it disconnects, breaks the protocol or the export stops.
pub(super) fn run(mut stream: Stream, x: &Arc<Export>) {
    let go = handshake(&mut stream, x).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "NBD handshake ended");
        false
    });
    if go {
        if let Err(e) = transmission(stream, x) {
            tracing::warn!(error = %e, "NBD session could not start transmission");
        }
    } else {
        // The acceptor holds a clone of the socket: close it for the client now.
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// The transmission phase: this thread reads, a reply thread answers.
fn transmission(stream: Stream, x: &Arc<Export>) -> io::Result<()> {
    let close = |e: io::Error| {
        let _ = stream.shutdown(Shutdown::Both);
        e
    };
    stream.set_read_timeout(None).map_err(close)?;
    let writer = stream.try_clone().map_err(close)?;
    let (events, events_rx) = channel::<Event>();
    let (recycle, recycled) = channel::<Job>();
    let sink: Arc<dyn CompletionSink> = Arc::new(Sink(events.clone()));
    let rx = Arc::clone(x);
    let replier = std::thread::Builder::new()
        .name("nbd-reply".into())
        .spawn(move || reply_loop(writer, &events_rx, &recycle, &rx))
        .map_err(close)?;
    tracing::debug!(nsid = x.nsid, "NBD client in transmission phase");
    read_loop(
        BufReader::new(stream),
        &Session { jobs: events, sink, next_queue: AtomicUsize::new(0), paths: RefCell::new(PathCursor::new(0)) },
        &recycled,
        x,
    );
    // With the session's senders gone, the reply thread answers what is in flight (the commands' tickets
    // hold the last senders), then closes the socket.
    let _ = replier.join();
    Ok(())
}

/// What the reply thread waits for: a submitted job, or a command of one completing.
#[derive(Debug)]
enum Event {
    Job(Job),
    Done(Completed),
}

/// The session's [`CompletionSink`]: completions join the jobs on the reply thread's channel (whose receiver
/// is woken by the send, so `wake` has nothing left to do).
#[derive(Debug)]
struct Sink(Sender<Event>);

impl CompletionSink for Sink {
    fn push(&self, completed: Completed) {
        // The reply thread outlives every command (it waits for all of them): a send cannot fail.
        let _ = self.0.send(Event::Done(completed));
    }

    fn wake(&self) {}
}

/// The reader's side of the session: where jobs go, where their commands complete, and the next I/O queue.
struct Session {
    jobs: Sender<Event>,
    sink: Arc<dyn CompletionSink>,
    next_queue: AtomicUsize,
    /// The session thread's place among the export's paths.
    paths: RefCell<PathCursor>,
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

#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Proto(#[from] proto::ProtoError),
    #[error("option {option} with {length} bytes of data")]
    TooBig { option: u32, length: u32 },
    #[error("more than {MAX_OPTIONS} options")]
    TooMany,
}

/// The fixed newstyle handshake; `Ok(true)` when the client enters transmission.
fn handshake(s: &mut Stream, x: &Export) -> Result<bool, HandshakeError> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.write_all(&proto::greeting())?;
    let mut flags = [0; 4];
    s.read_exact(&mut flags)?;
    let no_zeroes = proto::parse_client_flags(flags)?;
    let g = &x.geometry;
    for _ in 0..MAX_OPTIONS {
        let mut h = [0; proto::OPTION_HEADER_LEN];
        s.read_exact(&mut h)?;
        let h = proto::parse_option_header(&h)?;
        let reply = |s: &mut Stream, r: u32, data: &[u8]| s.write_all(&proto::option_reply(h.option, r, data));
        if h.length > MAX_OPTION_LEN {
            if h.option == opt::EXPORT_NAME || h.length > MAX_OPTION_DISCARD {
                return Err(HandshakeError::TooBig { option: h.option, length: h.length });
            }
            io::copy(&mut s.take(u64::from(h.length)), &mut io::sink())?;
            reply(s, rep::ERR_TOO_BIG, b"option data too long")?;
            continue;
        }
        let mut data = vec![0; usize::try_from(h.length).unwrap_or(0)];
        s.read_exact(&mut data)?;
        let known = |name: &[u8]| name.is_empty() || name == x.name.as_bytes();
        match h.option {
            opt::EXPORT_NAME => {
                if !known(&data) {
                    // No way to report an error to NBD_OPT_EXPORT_NAME: the spec says close.
                    return Ok(false);
                }
                let mut r = Vec::with_capacity(134);
                r.extend_from_slice(&g.size().to_be_bytes());
                r.extend_from_slice(&g.transmission_flags().to_be_bytes());
                if !no_zeroes {
                    r.resize(r.len() + 124, 0);
                }
                s.write_all(&r)?;
                return Ok(true);
            }
            opt::ABORT => {
                // The client may already have gone: nothing to do about a failed ACK.
                let _ = reply(s, rep::ACK, &[]);
                return Ok(false);
            }
            opt::LIST if !data.is_empty() => reply(s, rep::ERR_INVALID, b"NBD_OPT_LIST takes no data")?,
            opt::LIST => {
                reply(s, rep::SERVER, &proto::rep_server(&x.name))?;
                reply(s, rep::ACK, &[])?;
            }
            opt::INFO | opt::GO => {
                let Some(request) = proto::parse_info_request(&data) else {
                    reply(s, rep::ERR_INVALID, b"malformed information request")?;
                    continue;
                };
                if !known(request.name) {
                    reply(s, rep::ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                reply(s, rep::INFO, &proto::info_export(g.size(), g.transmission_flags()))?;
                // Sent whether asked or not: the minimum is the LBA size, which clients must honour.
                let preferred = g.block_size.max(4096);
                reply(s, rep::INFO, &proto::info_block_size(g.block_size, preferred, g.max_payload))?;
                if request.requests.contains(&info::NAME) {
                    let mut name = info::NAME.to_be_bytes().to_vec();
                    name.extend_from_slice(x.name.as_bytes());
                    reply(s, rep::INFO, &name)?;
                }
                reply(s, rep::ACK, &[])?;
                if h.option == opt::GO {
                    return Ok(true);
                }
            }
            // Structured replies, metadata contexts, TLS, extended headers: not offered (simple replies only).
            _ => reply(s, rep::ERR_UNSUP, b"option not supported")?,
        }
    }
    Err(HandshakeError::TooMany)
}

/// One request on its way through the pipeline.
#[derive(Debug, Default)]
struct Job {
    /// Its slot among the session's jobs in flight (the high half of its commands' tags).
    slot: usize,
    cookie: u64,
    /// The NBD error decided before submission (0: see the completions).
    error: u32,
    /// Reply data follows the header (a successful read).
    read: bool,
    /// Flush after the commands complete (trim with FUA: Dataset Management has no FUA bit).
    flush_after: bool,
    /// Bytes charged to the in-flight budget.
    bytes: u64,
    /// NVMe commands submitted (pieces `0..commands`, in block order).
    commands: usize,
    /// Data buffers: the write payload before submission; on the reply thread, each command's buffer at its
    /// piece's index (the read data, in block order).
    buffers: Vec<Vec<u8>>,
}

/// The reader's reusable jobs and buffers, and what is in flight.
#[derive(Debug)]
struct Pool {
    jobs: Vec<Job>,
    /// Job slots not in flight.
    slots: Vec<usize>,
    buffers: Vec<Vec<u8>>,
    max_buffers: usize,
    in_flight: usize,
    bytes: u64,
}

impl Pool {
    fn new(max_buffers: usize) -> Pool {
        let slots = (0..MAX_IN_FLIGHT).rev().collect();
        Pool { jobs: Vec::new(), slots, buffers: Vec::new(), max_buffers, in_flight: 0, bytes: 0 }
    }

    fn reclaim(&mut self, mut job: Job) {
        self.in_flight -= 1;
        self.bytes -= job.bytes;
        self.slots.push(job.slot);
        for b in job.buffers.drain(..) {
            self.give_back(b);
        }
        self.jobs.push(job);
    }

    fn give_back(&mut self, b: Vec<u8>) {
        if self.buffers.len() < self.max_buffers && b.capacity() > 0 {
            self.buffers.push(b);
        }
    }

    /// A job charged with `bytes`, waiting for finished ones while the limits are reached; `None` when the
    /// reply thread is gone.
    fn acquire(&mut self, bytes: u64, recycled: &Receiver<Job>) -> Option<Job> {
        while let Ok(j) = recycled.try_recv() {
            self.reclaim(j);
        }
        while self.in_flight >= MAX_IN_FLIGHT || (self.in_flight > 0 && self.bytes + bytes > IN_FLIGHT_BYTES) {
            let j = recycled.recv().ok()?;
            self.reclaim(j);
        }
        // Fewer than MAX_IN_FLIGHT jobs are out, so a slot is free.
        let slot = self.slots.pop()?;
        self.in_flight += 1;
        self.bytes += bytes;
        let mut job = self.jobs.pop().unwrap_or_default();
        job.slot = slot;
        job.commands = 0;
        job.bytes = bytes;
        job.error = 0;
        job.read = false;
        job.flush_after = false;
        Some(job)
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// A buffer of `len` bytes for a read to fill: its stale bytes stay, only growth beyond its last length
    /// is zeroed (not the whole piece on every read).
    fn read_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }
}

fn read_loop(mut r: BufReader<Stream>, session: &Session, recycled: &Receiver<Job>, x: &Export) {
    let jobs = &session.jobs;
    let piece = usize::try_from(x.piece_blocks * u64::from(x.geometry.block_size)).unwrap_or(usize::MAX);
    let max_buffers = usize::try_from(IN_FLIGHT_BYTES).unwrap_or(usize::MAX) / piece.max(1) + MAX_IN_FLIGHT;
    let mut pool = Pool::new(max_buffers);
    loop {
        let mut hb = [0; proto::REQUEST_LEN];
        if let Err(e) = r.read_exact(&mut hb) {
            tracing::debug!(error = %e, "NBD client gone");
            return;
        }
        let h = match RequestHeader::parse(&hb) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "NBD client out of step; disconnecting it");
                return;
            }
        };
        let checked = check_request(&h, &x.geometry);
        if checked == Ok(Action::Disconnect) {
            tracing::debug!("NBD_CMD_DISC");
            return;
        }
        let payload = h.payload_len();
        if payload > x.geometry.max_payload {
            // The payload cannot be skipped without reading it all: answer, then disconnect.
            tracing::warn!(length = payload, "NBD write over the maximum payload; disconnecting the client");
            if let Some(mut job) = pool.acquire(0, recycled) {
                job.cookie = h.cookie;
                job.error = errno::EINVAL;
                let _ = jobs.send(Event::Job(job));
            }
            return;
        }
        let bytes = match checked {
            Ok(Action::Block(BlockOp::Read { .. })) => u64::from(h.length),
            _ => u64::from(payload),
        };
        let Some(mut job) = pool.acquire(bytes, recycled) else { return };
        job.cookie = h.cookie;
        if payload > 0 {
            if let Err(e) = read_payload(&mut r, &mut job, payload, piece, &mut pool) {
                tracing::debug!(error = %e, "NBD client gone during a write payload");
                return;
            }
        }
        match checked {
            Ok(action) => submit(&mut job, action, session, x, piece, &mut pool),
            Err(e) => job.error = e,
        }
        if jobs.send(Event::Job(job)).is_err() {
            return;
        }
    }
}

/// Read a write's payload into piece-sized pool buffers.
fn read_payload(r: &mut impl Read, job: &mut Job, len: u32, piece: usize, pool: &mut Pool) -> io::Result<()> {
    let mut left = usize::try_from(len).unwrap_or(usize::MAX);
    while left > 0 {
        let n = left.min(piece);
        let mut b = pool.buffer();
        // Into the buffer's spare capacity: no zero-fill of memory the socket overwrites anyway.
        r.take(n as u64).read_to_end(&mut b)?;
        if b.len() != n {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        job.buffers.push(b);
        left -= n;
    }
    Ok(())
}

/// Submit the NVMe commands for `action` (a piece per command, tagged with the job's slot and the piece);
/// a failed submission makes the job `EIO` and submits no more of it.
fn submit(job: &mut Job, action: Action, session: &Session, x: &Export, piece: usize, pool: &mut Pool) {
    let nsid = x.nsid;
    let bs = u64::from(x.geometry.block_size);
    let send = |job: &mut Job, pool: &mut Pool, sqe: SubmissionQueueEntry, data: Vec<u8>, direction| {
        if job.error != 0 {
            job.error = errno::EIO;
            return pool.give_back(data);
        }
        let q = session.next_queue.fetch_add(1, Ordering::Relaxed);
        let request = Request { sqe, data, direction, context: () };
        let mut cursor = session.paths.borrow_mut();
        let submitted = x.head.queue_to_sink(q, request, &session.sink, tag(job.slot, job.commands), &mut cursor);
        cursor.wake(q);
        match submitted {
            Ok(()) => job.commands += 1,
            Err((e, data)) => {
                tracing::warn!(error = %e, "NBD request: submission failed");
                job.error = errno::EIO;
                pool.give_back(data);
            }
        }
    };
    // Pieces are at most MAX_NLB_BLOCKS (see `Export::piece_blocks`): one command each.
    let piece_of = |job: &mut Job, pool: &mut Pool, op: BlockOp, data: Vec<u8>| {
        let (sqe, direction, _) = nvm_command(nsid, &op);
        send(job, pool, sqe, data, direction);
    };
    match action {
        Action::Nothing | Action::Disconnect => {}
        Action::Block(BlockOp::Read { slba, blocks }) => {
            job.read = true;
            let mut at = slba;
            while at < slba + blocks {
                let n = (slba + blocks - at).min(x.piece_blocks);
                let b = pool.read_buffer(usize::try_from(n * bs).unwrap_or(piece));
                piece_of(job, pool, BlockOp::Read { slba: at, blocks: n }, b);
                at += n;
            }
        }
        Action::Block(BlockOp::Write { slba, fua, .. }) => {
            let mut buffers = mem::take(&mut job.buffers);
            let mut at = slba;
            for b in buffers.drain(..) {
                let n = b.len() as u64 / bs;
                piece_of(job, pool, BlockOp::Write { slba: at, blocks: n, fua }, b);
                at += n;
            }
            job.buffers = buffers;
        }
        Action::Block(BlockOp::Flush) => piece_of(job, pool, BlockOp::Flush, Vec::new()),
        Action::Block(op @ BlockOp::Deallocate { fua, .. }) => {
            // One range covers the whole request: a u32 byte length is far fewer than 2^32 blocks.
            let (sqe, direction, range) = nvm_command(nsid, &op);
            let mut b = pool.buffer();
            if let Some(range) = range {
                b.extend_from_slice(&range.to_bytes());
            }
            send(job, pool, sqe, b, direction);
            job.flush_after = fua;
        }
        Action::Block(BlockOp::WriteZeroes { slba, blocks, fua, deallocate }) => {
            let mut at = slba;
            while at < slba + blocks {
                let n = (slba + blocks - at).min(MAX_NLB_BLOCKS);
                piece_of(job, pool, BlockOp::WriteZeroes { slba: at, blocks: n, fua, deallocate }, Vec::new());
                at += n;
            }
        }
    }
}

/// A job slot on the reply thread: the job once it arrived, and what its commands brought back so far
/// (completions may arrive before the job itself).
#[derive(Debug, Default)]
struct Slot {
    job: Option<Job>,
    done: usize,
    error: u32,
    buffers: Vec<Vec<u8>>,
}

impl Slot {
    /// A command of this slot's job finished with `reply`.
    fn complete(&mut self, piece: usize, reply: Reply) {
        self.done += 1;
        match &reply.result {
            Ok(cqe) if cqe.status.is_success() => {}
            Ok(cqe) => {
                tracing::warn!(status = %cqe.status, "NBD request: NVMe error");
                self.error = errno::EIO;
            }
            Err(e) => {
                tracing::warn!(error = %e, "NBD request: queue failed");
                self.error = errno::EIO;
            }
        }
        if self.buffers.len() <= piece {
            self.buffers.resize_with(piece + 1, Vec::new);
        }
        self.buffers[piece] = reply.data;
    }

    /// The job, once it arrived and all its commands completed; its NBD error (0 for success) and its
    /// buffers (the read data in block order) moved into it.
    fn finished(&mut self, x: &Export) -> Option<(Job, u32)> {
        if self.job.as_ref()?.commands != self.done {
            return None;
        }
        let mut job = self.job.take()?;
        let mut error = if job.error != 0 { job.error } else { self.error };
        if error == 0 && job.flush_after {
            let flushed = x.head.usable_controller().map(|c| c.flush(x.nsid));
            if let Some(Err(e)) = flushed {
                tracing::warn!(error = %e, "NBD request: flush after trim");
                error = errno::EIO;
            }
        }
        job.buffers.clear();
        mem::swap(&mut job.buffers, &mut self.buffers);
        (self.done, self.error) = (0, 0);
        Some((job, error))
    }
}

fn reply_loop(stream: Stream, events: &Receiver<Event>, recycle: &Sender<Job>, x: &Export) {
    let control = stream.try_clone().ok();
    let mut w = BufWriter::with_capacity(REPLY_BUFFER, stream);
    let mut broken = false;
    let fail = |e: io::Error, broken: &mut bool| {
        // Keep draining so the reader is never left waiting for its jobs; it sees the shutdown.
        tracing::debug!(error = %e, "NBD client unreachable");
        *broken = true;
        if let Some(c) = &control {
            let _ = c.shutdown(Shutdown::Both);
        }
    };
    let mut slots: Vec<Slot> = (0..MAX_IN_FLIGHT).map(|_| Slot::default()).collect();
    let mut cursor = PathCursor::new(0);
    let mut next = events.recv().ok();
    while let Some(event) = next.take() {
        let slot = match event {
            Event::Job(job) => {
                let s = job.slot;
                slots[s].job = Some(job);
                s
            }
            Event::Done(completed) => {
                let Some((s, piece)) = untag(caller_tag(completed.tag())) else {
                    tracing::error!(tag = completed.tag(), "NBD: a completion for no request");
                    next = events.recv().ok();
                    continue;
                };
                // `None`: sent again (after a reconnect, or on another path); its reply comes back later.
                let reply = x.head.settle(s, completed, &mut cursor);
                // A command sent again waits in its queue's channel until the queue's I/O thread is woken.
                cursor.wake(s);
                if let Some(reply) = reply {
                    slots[s].complete(piece, reply);
                }
                s
            }
        };
        if let Some((job, error)) = slots[slot].finished(x) {
            if !broken {
                let written = w.write_all(&proto::simple_reply(error, job.cookie)).and_then(|()| {
                    if error == 0 && job.read {
                        job.buffers.iter().try_for_each(|b| w.write_all(b))
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = written {
                    fail(e, &mut broken);
                }
            }
            let _ = recycle.send(job);
        }
        // Replies gather in the write buffer while more events are ready, and go out in one write when none is.
        next = match events.try_recv() {
            Ok(e) => Some(e),
            Err(TryRecvError::Empty) => {
                if !broken {
                    if let Err(e) = w.flush() {
                        fail(e, &mut broken);
                    }
                }
                events.recv().ok()
            }
            Err(TryRecvError::Disconnected) => None,
        };
    }
    let _ = w.flush();
    if let Some(c) = &control {
        let _ = c.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_bounds_requests_and_bytes_in_flight() {
        let (tx, rx) = channel();
        let mut pool = Pool::new(2);
        // The first request always goes, however large; the budget then holds the next back.
        let big = pool.acquire(IN_FLIGHT_BYTES, &rx).unwrap();
        assert_eq!(pool.bytes, IN_FLIGHT_BYTES);
        let mut big = big;
        big.buffers = vec![vec![0; 8], vec![0; 8], vec![0; 8]];
        tx.send(big).unwrap();
        let small = pool.acquire(4096, &rx).unwrap();
        assert_eq!((pool.in_flight, pool.bytes), (1, 4096));
        // Buffers kept for reuse stop at the cap.
        assert_eq!(pool.buffers.len(), 2);
        assert_eq!(small.bytes, 4096);
        let mut held = vec![small];
        for _ in 1..MAX_IN_FLIGHT {
            held.push(pool.acquire(0, &rx).unwrap());
        }
        // At the request limit with the reply side gone: no job, rather than a hang.
        drop(tx);
        assert!(pool.acquire(0, &rx).is_none());
    }
}
