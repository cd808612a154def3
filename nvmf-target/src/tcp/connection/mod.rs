//! [`TcpConnection`]: one NVMe/TCP connection (one queue pair) driven by its reactor.
//!
//! Receive path: bytes are read into a per-connection buffer and fed to the `PduDecoder`, which returns
//! whole, checked PDUs (header digests verified, lengths bounded). Before ICReq only ICReq is accepted;
//! after it CapsuleCmd and H2CData (and H2CTermReq). Each command is handed to the `Queue`, whose
//! [`Step`] says what the transport does next: solicit host data (R2T), send data and the response, or
//! nothing yet.
//!
//! Send path: PDUs are framed into the connection's `SendQueue` and written with vectored writes when the
//! reactor calls [`TcpConnection::on_writable`] (after a batch of events or when the socket drains). A
//! command's slot is released back to the queue only once every byte referencing its buffer was written.
//!
//! Socket I/O runs one of two ways, chosen per reactor ([`SocketIo`]): readiness from the reactor's epoll and
//! `read`/`writev` calls, or ops on the reactor's io_uring: one multishot receive armed for the connection's life
//! (each chunk it brings, in one of the engine's receive buffers, is decoded in place, or kept while reading is
//! paused: [`ring`]) and one `sendmsg` at a time of what is queued, both submitted with the turn's storage ops and
//! completed through [`TcpConnection::net_completed`]. Decoding, backpressure and release
//! are the same either way; on the ring, backpressure cancels the receive (the bytes the kernel delivered before
//! the cancel landed wait in the connection's buffer) and resuming arms it again.
//!
//! Errors: a malformed PDU or one the protocol state does not allow ends the connection with a C2HTermReq
//! (FES/FEI per NVMe/TCP 1.0); a data digest error fails only its command (Transient Transport Error); a
//! closed or reset socket, an H2CTermReq or a fatal queue error ends the connection. Ending always tells
//! the queue (`Queue::disconnect`); storage I/O still in flight completes through
//! [`TcpConnection::io_completed`] afterwards, and the reactor keeps the connection until
//! [`TcpConnection::in_flight`] is 0.
//!
//! Runs on its reactor thread only; never blocks. This module owns the socket, the receive buffer, the decoder and
//! the epoll path; [`session`] what a decoded PDU does, [`ring`] the io_uring path.

use std::io::{self, Read};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use nvmf_common::transport::tcp::pdu::MAX_ENCODED_HEADER_LEN;
use nvmf_common::transport::tcp::{
    DecoderConfig, Direction, FatalErrorStatus, Framing, IcReq, Pdu, PduDecoder, PduError,
};

use super::config::TcpTransportConfig;
use super::error::ConnectionError;
use super::outgoing::queue_term_req;
use super::send::SendQueue;
use super::transfer::{ProtocolViolation, TransferTable};
use crate::backend::{BufferId, IoEngine, NetOpId};
use crate::controller::{Queue, SlotId, Stalled, Step};

mod ring;
mod session;

/// Receive buffer of a connection until its queue is connected: an ICReq and a Connect capsule fit several times.
const PRECONNECT_RECEIVE_BUFFER: usize = 8 << 10;
/// Most bytes a connection on the ring holds undecoded: what a multishot receive may deliver between reading
/// pausing and its cancel landing is bounded by the socket's receive buffer (`tcp_rmem`, 6 MiB by default); a
/// peer that gets past this is ended.
const MAX_RING_BACKLOG: usize = 32 << 20;

/// How a connection's socket is read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketIo {
    /// Readiness from the reactor's epoll; `read` and `writev`.
    Epoll,
    /// Receive and send ops on the reactor's io_uring, completions tagged with this value.
    IoUring(u64),
}

/// The io_uring ops of a connection in [`SocketIo::IoUring`].
#[derive(Debug, Clone, Copy, Default)]
struct RingOps {
    /// The multishot receive, while armed.
    recv: Option<NetOpId>,
    /// Its cancel was queued (reading paused).
    recv_cancelled: bool,
    send_in_flight: bool,
    /// Large sends may go zero copy: the host is not on loopback (where the kernel copies them anyway) and the
    /// connection has no TLS ([`TcpConnection::copy_sends`]).
    zero_copy: bool,
    /// A receive or send could not be queued (the ring was full): try again at the next poll.
    retry: bool,
}

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the host's ICReq.
    AwaitingIcReq,
    /// ICResp sent: commands flow.
    Live,
    /// Ended; the queue was told. Only storage completions are still accepted.
    Closed,
}

/// Whether the connection waits for its reactor to decide where it is served ([`super::placement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Served where it is.
    Settled,
    /// Ask when the first bytes after ICReq (the queue's Connect) arrive.
    AtConnect,
    /// Asked: reading holds until [`TcpConnection::place_here`] or [`TcpConnection::into_initialized`].
    Asked,
}

/// A connection past ICReq on its way to another reactor: the ICReq it accepted and the bytes it received and did
/// not decode (the Connect capsule). [`TcpConnection::resume`] takes it up there.
#[derive(Debug)]
pub struct Initialized {
    icreq: IcReq,
    received: Vec<u8>,
}

/// What a received PDU asks of the connection beyond the session's own state.
enum Handled {
    /// Nothing more.
    Done,
    /// ICReq accepted: decode later PDUs with this framing.
    Negotiated(Framing),
}

/// A fatal error found while handling a PDU.
enum Fatal {
    /// Send a C2HTermReq for this violation (with the offending header), then close.
    Violation(ProtocolViolation, Pdu, usize),
    /// Close without a TermReq.
    Close(ConnectionError),
}

/// The state a PDU handler touches: everything but the socket, receive buffer and decoder.
#[derive(Debug)]
struct Session {
    config: TcpTransportConfig,
    queue: Queue,
    phase: Phase,
    framing: Framing,
    transfers: TransferTable<BufferId, SlotId>,
    send: SendQueue<BufferId, SlotId>,
    /// Reused by `poll`.
    steps: Vec<Step>,
    /// Slots whose bytes were all written, reused by `flush`.
    done: Vec<SlotId>,
    /// CID of a Connect asking to disable SQ flow control, until its response.
    connect_disabling_sq_flow: Option<u16>,
    /// The host disabled SQ flow control (C2HData SUCCESS may replace the CapsuleResp).
    sq_flow_control_disabled: bool,
    /// SQHD of the last completion the queue produced (used for completions the transport makes itself).
    last_sqhd: u16,
    /// Bytes of host data received so far (progress of a peer that was asked for data).
    h2c_received: u64,
    /// The ICReq accepted (kept for a move to another reactor).
    icreq: Option<IcReq>,
}

/// One NVMe/TCP connection: socket, queue, decoder, send queue and per-command transfer state (see the
/// module docs).
pub struct TcpConnection {
    stream: TcpStream,
    decoder: PduDecoder,
    /// Receive buffer; `rbuf[rstart..rend]` is read and not yet decoded.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Reading stopped because the send backlog is over the limit.
    read_paused: bool,
    placement: Placement,
    io: SocketIo,
    ring: RingOps,
    /// Since when the connection has waited on its peer without progress, and the progress mark then
    /// ([`TcpConnection::note_turn`]).
    stalled: Option<(Instant, u64)>,
    session: Session,
}

impl std::fmt::Debug for TcpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the buffers: a receive buffer is hundreds of KiB.
        f.debug_struct("TcpConnection")
            .field("peer", &self.stream.peer_addr().ok())
            .field("phase", &self.session.phase)
            .field("framing", &self.session.framing)
            .field("qid", &self.session.queue.qid())
            .field("buffered", &(self.rend - self.rstart))
            .field("send_backlog", &self.session.send.pending_bytes())
            .field("read_paused", &self.read_paused)
            .finish_non_exhaustive()
    }
}

impl TcpConnection {
    /// A connection on an accepted, non-blocking `stream`, serving `queue` (created for this connection,
    /// before Connect). Nothing is read or written until the reactor reports readiness.
    pub fn new(stream: TcpStream, queue: Queue, config: &TcpTransportConfig, io: SocketIo) -> Self {
        let config = config.normalized();
        // Until ICReq only a 128-byte ICReq is legitimate: accept no PDU data at all.
        let decoder = PduDecoder::new(DecoderConfig::new(Direction::HostToController, 0));
        let transfers = TransferTable::new(config.max_r2t_len, config.maxh2cdata);
        let zero_copy = stream.peer_addr().is_ok_and(|peer| !peer.ip().to_canonical().is_loopback());
        TcpConnection {
            stream,
            decoder,
            // A peer that has not connected yet gets a small buffer: a few thousand idle sockets then cost little.
            rbuf: vec![0; PRECONNECT_RECEIVE_BUFFER.min(config.receive_buffer_size)],
            rstart: 0,
            rend: 0,
            read_paused: false,
            placement: Placement::Settled,
            io,
            ring: RingOps { zero_copy, ..RingOps::default() },
            stalled: None,
            session: Session {
                config,
                queue,
                phase: Phase::AwaitingIcReq,
                framing: Framing::default(),
                transfers,
                send: SendQueue::new(),
                steps: Vec::new(),
                done: Vec::new(),
                connect_disabling_sq_flow: None,
                sq_flow_control_disabled: false,
                last_sqhd: 0,
                h2c_received: 0,
                icreq: None,
            },
        }
    }

    /// Hold reading when the first bytes after ICReq arrive, until the reactor decided where the connection is
    /// served ([`TcpConnection::awaits_placement`]).
    pub fn place_at_connect(&mut self) {
        self.placement = Placement::AtConnect;
    }

    /// Whether reading holds for the reactor to place the connection: [`TcpConnection::place_here`], or once
    /// [`TcpConnection::in_flight`] is 0, [`TcpConnection::into_initialized`].
    pub fn awaits_placement(&self) -> bool {
        self.placement == Placement::Asked && self.session.phase != Phase::Closed
    }

    /// Serve the connection here: decode what arrived and read on. Same return values as
    /// [`TcpConnection::on_readable`].
    pub fn place_here(&mut self, engine: &mut IoEngine) -> Result<bool, ConnectionError> {
        self.placement = Placement::Settled;
        match self.io {
            SocketIo::IoUring(_) => self.resume_ring_receive(engine),
            SocketIo::Epoll => self.on_readable(engine),
        }
    }

    /// Whether the connection can leave this reactor ([`TcpConnection::into_initialized`]): it awaits placement,
    /// its queue is not connected and it has nothing in flight.
    pub fn can_leave(&self) -> bool {
        self.awaits_placement() && self.in_flight() == 0 && self.queue().qid().is_none() && self.session.icreq.is_some()
    }

    /// Leave this reactor: the socket and what another reactor needs to take the connection up
    /// ([`TcpConnection::resume`]); its queue, never connected, ends. `None` (the connection ended) unless it
    /// [`TcpConnection::can_leave`].
    pub fn into_initialized(mut self, engine: &mut IoEngine) -> Option<(TcpStream, Initialized)> {
        let icreq = self.session.icreq.filter(|_| self.can_leave());
        self.session.queue.disconnect(engine);
        let received = self.rbuf[self.rstart..self.rend].to_vec();
        Some((self.stream, Initialized { icreq: icreq?, received }))
    }

    /// Never send zero copy (a connection secured by TLS).
    pub fn copy_sends(&mut self) {
        self.ring.zero_copy = false;
    }

    /// Take up a connection another reactor initialized (a connection made by [`TcpConnection::new`] here, on its
    /// socket): accept its ICReq without answering it again, and handle what it received. Same return values as
    /// [`TcpConnection::on_readable`].
    pub fn resume(&mut self, engine: &mut IoEngine, initialized: Initialized) -> Result<bool, ConnectionError> {
        let framing = self.session.initialize(&initialized.icreq);
        self.negotiated(framing);
        self.keep_undecoded(&initialized.received)?;
        self.place_here(engine)
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The socket, to register with (or deregister from) the reactor's `mio::Poll`.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Bytes of the receive buffer now (small until the queue is connected).
    #[cfg(test)]
    pub(super) fn receive_buffer_len(&self) -> usize {
        self.rbuf.len()
    }

    /// Whether reading paused for the send backlog.
    #[cfg(test)]
    pub(super) fn is_read_paused(&self) -> bool {
        self.read_paused
    }

    /// The connection's queue.
    pub fn queue(&self) -> &Queue {
        &self.session.queue
    }

    /// Whether the connection has ended (the reactor keeps it until [`TcpConnection::in_flight`] is 0).
    pub fn is_closed(&self) -> bool {
        self.session.phase == Phase::Closed
    }

    /// One line for a stopping reactor's report: phase, queue, what is in flight.
    pub fn describe(&self, registered: bool) -> String {
        format!(
            "tcp {:?} qid {:?} storage ops {} recv armed {} send in flight {} registered {registered}",
            self.session.phase,
            self.session.queue.qid(),
            self.session.queue.in_flight(),
            self.ring.recv.is_some(),
            self.ring.send_in_flight,
        )
    }

    /// Storage operations of this connection's queue, and its socket ops on the ring, still in flight.
    pub fn in_flight(&self) -> usize {
        self.session.queue.in_flight() + usize::from(self.ring.recv.is_some()) + usize::from(self.ring.send_in_flight)
    }

    /// Whether the queue has work for [`TcpConnection::poll`] at the end of this turn (`Queue::wants_poll`), or a
    /// socket op waits for ring space.
    pub fn wants_poll(&self) -> bool {
        self.session.phase != Phase::Closed && (self.session.queue.wants_poll() || self.ring.retry)
    }

    /// Whether the connection's peer is not admitted to an NVM subsystem yet ([`Queue::is_anonymous`]).
    pub fn is_anonymous(&self) -> bool {
        self.session.queue.is_anonymous()
    }

    /// When [`TcpConnection::poll`] is due next without an event, if ever: the queue's timers (its Connect
    /// deadline, then keep-alive) and the transfer timeout of a peer that stopped moving data.
    pub fn next_timer(&self) -> Option<Instant> {
        if self.session.phase == Phase::Closed {
            return None;
        }
        let queue = self.session.queue.next_deadline();
        self.transfer_deadline().into_iter().chain(queue).min()
    }

    /// End of a reactor turn at `now`: while the connection waits on its peer (output queued that the peer has
    /// not read, host data solicited and not all received), the transfer timer runs from the last turn the peer
    /// moved any bytes; otherwise it is off.
    pub fn note_turn(&mut self, now: Instant) {
        let s = &self.session;
        let waiting = s.phase != Phase::Closed && (!s.send.is_empty() || s.transfers.awaiting_data());
        if !waiting {
            self.stalled = None;
            return;
        }
        let progress = s.send.written() + s.h2c_received;
        if !matches!(self.stalled, Some((_, mark)) if mark == progress) {
            self.stalled = Some((now, progress));
        }
    }

    /// When the connection ends unless its peer moves data (see [`TcpConnection::note_turn`]).
    fn transfer_deadline(&self) -> Option<Instant> {
        let timeout = self.session.queue.target().params().transfer_timeout_ms;
        self.stalled.map(|(since, _)| since + Duration::from_millis(u64::from(timeout)))
    }

    /// Whether bytes wait to be written: the reactor should call [`TcpConnection::on_writable`] (now, after
    /// the batch of events it is handling, and when the socket becomes writable).
    pub fn wants_write(&self) -> bool {
        self.session.phase != Phase::Closed && !self.session.send.is_empty()
    }

    /// Socket readable: read what is there, decode PDUs, drive the queue, queue output and flush it.
    /// `Ok(true)`: the connection lives on; `Ok(false)`: the host closed it; `Err`: it was ended (after a
    /// C2HTermReq where the error calls for one). Once it returned anything but `Ok(true)` the connection
    /// is closed and later calls return `Ok(false)`.
    pub fn on_readable(&mut self, engine: &mut IoEngine) -> Result<bool, ConnectionError> {
        self.read_and_flush(engine, false)
    }

    /// A readiness event for the socket: as [`TcpConnection::on_readable`], except that a read filling less than
    /// its buffer ends the reading, since it emptied the socket's receive queue and bytes arriving later raise a
    /// new edge (epoll reports each arrival on a TCP socket): one `read` per event at low queue depth instead of
    /// two. Unless the event says the host hung up or the socket has an error (`hung_up`): the end of the stream
    /// or the error waits behind the data with no edge to come, so reading goes on until a read reports it.
    pub fn on_read_event(&mut self, engine: &mut IoEngine, hung_up: bool) -> Result<bool, ConnectionError> {
        self.read_and_flush(engine, !hung_up)
    }

    fn read_and_flush(&mut self, engine: &mut IoEngine, stop_at_short_read: bool) -> Result<bool, ConnectionError> {
        if self.session.phase == Phase::Closed {
            return Ok(false);
        }
        match self.receive(engine, stop_at_short_read) {
            Ok(open) => {
                if !open {
                    self.close(engine);
                    return Ok(false);
                }
                self.flush(engine)?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Socket writable, or output was queued: write as much as the socket takes, release the commands
    /// whose bytes are all out, and resume reading if it was paused for backpressure. Same return values
    /// as [`TcpConnection::on_readable`].
    pub fn on_writable(&mut self, engine: &mut IoEngine) -> Result<bool, ConnectionError> {
        if self.session.phase == Phase::Closed {
            return Ok(false);
        }
        self.flush(engine)?;
        if self.read_paused && !self.session.backlogged() {
            self.read_paused = false;
            if let SocketIo::IoUring(_) = self.io {
                return self.resume_ring_receive(engine);
            }
            return self.on_readable(engine);
        }
        Ok(true)
    }

    /// A storage completion for this connection's queue (`slot` from the completion's tag). Queues the
    /// resulting output; the reactor flushes it with [`TcpConnection::on_writable`] after its batch.
    pub fn io_completed(&mut self, engine: &mut IoEngine, slot: SlotId, result: Result<u32, io::Error>) {
        let step = self.session.queue.io_completed(engine, slot, result);
        if self.session.phase == Phase::Closed {
            // The queue released the slot itself (it is dead); nothing goes out.
            return;
        }
        if let Err(fatal) = self.session.apply(engine, step) {
            let _ = self.fail(engine, fatal);
        }
    }

    /// At the queue's timer, when its notifier fired, or at the end of a turn while it
    /// [`TcpConnection::wants_poll`]: let the queue complete held commands, run its keep-alive timer and retry
    /// commands that waited for a buffer; queue the output. An `Err` ends the connection.
    pub fn poll(&mut self, engine: &mut IoEngine, now: Instant) -> Result<(), ConnectionError> {
        if self.session.phase == Phase::Closed {
            return Ok(());
        }
        if self.transfer_deadline().is_some_and(|deadline| now >= deadline) {
            let timeout_ms = self.session.queue.target().params().transfer_timeout_ms;
            let peer = self.stream.peer_addr().ok();
            tracing::debug!(traddr = ?peer, timeout_ms, "the host stalled in a transfer: connection ended");
            self.session.queue.target().count_timeout(Stalled::Transfer);
            self.close(engine);
            return Err(ConnectionError::Stalled { timeout_ms });
        }
        if std::mem::take(&mut self.ring.retry) {
            self.queue_receive(engine);
            self.flush(engine)?;
        }
        let mut steps = std::mem::take(&mut self.session.steps);
        let polled = self.session.queue.poll(engine, now, &mut steps);
        let mut result = Ok(());
        for step in steps.drain(..) {
            if let Err(fatal) = self.session.apply(engine, step) {
                result = self.fail(engine, fatal);
                break;
            }
        }
        self.session.steps = steps;
        result?;
        if let Err(e) = polled {
            tracing::debug!(error = %e, "queue ended the connection");
            self.close(engine);
            return Err(ConnectionError::Queue(e));
        }
        Ok(())
    }

    /// End the connection now (target shutdown): write what the socket takes of the queued output, then
    /// close the socket and tell the queue. Storage I/O in flight still completes through
    /// [`TcpConnection::io_completed`].
    pub fn shutdown(&mut self, engine: &mut IoEngine) {
        if self.session.phase != Phase::Closed {
            let _ = self.write_now(engine);
            self.close(engine);
        }
    }

    /// Read and handle PDUs until the socket is drained (a read reports `WouldBlock`, or with
    /// `stop_at_short_read` fills less than its buffer) or reading pauses. `Ok(false)`: end of stream.
    fn receive(&mut self, engine: &mut IoEngine, stop_at_short_read: bool) -> Result<bool, ConnectionError> {
        let mut drained = false;
        loop {
            self.decode_buffered(engine)?;
            if self.session.phase == Phase::Closed {
                return Ok(false);
            }
            if self.reading_held() || drained {
                return Ok(true);
            }
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() < self.session.config.receive_buffer_size && self.session.queue.qid().is_some() {
                self.rbuf.resize(self.session.config.receive_buffer_size, 0);
            }
            match self.stream.read(&mut self.rbuf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.rend = n;
                    drained = stop_at_short_read && n < self.rbuf.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "NVMe/TCP connection read failed");
                    self.close(engine);
                    return Err(ConnectionError::Io(e));
                }
            }
        }
    }

    /// Decode and handle the PDUs in `rbuf[rstart..rend]`, stopping early when the send backlog is over
    /// its limit (the rest stays buffered).
    fn decode_buffered(&mut self, engine: &mut IoEngine) -> Result<(), ConnectionError> {
        let rbuf = std::mem::take(&mut self.rbuf);
        let decoded = self.decode(engine, &rbuf[self.rstart..self.rend]);
        self.rbuf = rbuf;
        self.rstart += decoded?;
        Ok(())
    }

    /// Decode and handle the PDUs in `input`, stopping early (reading paused) when the send backlog is over its
    /// limit; how many bytes were used.
    fn decode(&mut self, engine: &mut IoEngine, input: &[u8]) -> Result<usize, ConnectionError> {
        let mut at = 0;
        while at < input.len() {
            if self.placement == Placement::AtConnect && self.session.phase == Phase::Live {
                self.placement = Placement::Asked;
            }
            if self.placement == Placement::Asked {
                return Ok(at);
            }
            if self.session.backlogged() {
                if !self.read_paused {
                    self.session.queue.target().count_send_backlog_pause();
                }
                self.read_paused = true;
                return Ok(at);
            }
            let feed = self.decoder.feed(&input[at..]);
            at += feed.consumed;
            let handled = match feed.result {
                Ok(None) => continue,
                Ok(Some(received)) => self.session.handle(engine, received.pdu, received.data),
                Err(PduError::DataDigest { pdu, .. }) => {
                    self.session.data_digest_error(engine, &pdu).map(|()| Handled::Done)
                }
                Err(e) => {
                    let fes = e.fes().unwrap_or(FatalErrorStatus::InvalidPduHeaderField);
                    tracing::warn!(error = %e, "malformed NVMe/TCP PDU; terminating the connection");
                    let mut header = [0u8; 128];
                    let data = self.decoder.term_req_data();
                    header[..data.len()].copy_from_slice(data);
                    let n = data.len();
                    self.terminate(engine, fes, e.fei(), &header[..n]);
                    return Err(ConnectionError::Pdu(e));
                }
            };
            match handled {
                Ok(Handled::Done) => {}
                Ok(Handled::Negotiated(framing)) => self.negotiated(framing),
                Err(fatal) => return self.fail(engine, fatal).map(|()| at),
            }
        }
        Ok(at)
    }

    /// Decode the PDUs after ICReq with the `framing` it negotiated.
    fn negotiated(&mut self, framing: Framing) {
        self.decoder.set_framing(framing);
        let c = &self.session.config;
        self.decoder.set_max_data_len(c.in_capsule_data_size.max(c.maxh2cdata));
    }

    /// Reading stops: for the send backlog, or for the reactor to place the connection.
    fn reading_held(&self) -> bool {
        self.read_paused || self.placement == Placement::Asked
    }

    /// Write queued output (on the ring: queue its send) and release the commands whose bytes are all written.
    fn flush(&mut self, engine: &mut IoEngine) -> Result<(), ConnectionError> {
        match self.io {
            SocketIo::IoUring(tag) => self.queue_send(engine, tag),
            SocketIo::Epoll => self.write_now(engine),
        }
    }

    /// Write what the socket takes now, with `writev` (the epoll path, and a connection's last words: a TermReq
    /// or what is queued at shutdown, unless a send is in flight on the ring).
    fn write_now(&mut self, engine: &mut IoEngine) -> Result<(), ConnectionError> {
        if self.ring.send_in_flight {
            return Ok(());
        }
        let s = &mut self.session;
        let result = s.send.flush(&mut self.stream, |b| engine.buffer(b), &mut s.done);
        s.release_done(engine);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::debug!(error = %e, "NVMe/TCP connection write failed");
                self.close(engine);
                Err(ConnectionError::Io(e))
            }
        }
    }

    /// End the connection for `fatal`.
    fn fail(&mut self, engine: &mut IoEngine, fatal: Fatal) -> Result<(), ConnectionError> {
        match fatal {
            Fatal::Violation(v, pdu, data_len) => {
                tracing::warn!(violation = %v, pdu = pdu.pdu_type().name(), "NVMe/TCP protocol violation; terminating the connection");
                let mut header = [0u8; MAX_ENCODED_HEADER_LEN];
                let n = pdu
                    .encode_header(data_len, &self.session.framing, &mut header)
                    .map(|layout| layout.hlen)
                    .unwrap_or(0);
                self.terminate(engine, v.fes, v.fei, &header[..n]);
                Err(ConnectionError::Protocol(v))
            }
            Fatal::Close(e) => {
                self.close(engine);
                Err(e)
            }
        }
    }

    /// Send a C2HTermReq (best effort: whatever the socket takes now) and close.
    fn terminate(&mut self, engine: &mut IoEngine, fes: FatalErrorStatus, fei: u32, header: &[u8]) {
        if queue_term_req(&mut self.session.send, fes, fei, header).is_ok() {
            let _ = self.write_now(engine);
        }
        self.close(engine);
    }

    /// End the connection: release what was answered, tell the queue, shut the socket.
    fn close(&mut self, engine: &mut IoEngine) {
        let s = &mut self.session;
        if s.phase == Phase::Closed {
            return;
        }
        s.phase = Phase::Closed;
        s.send.clear(&mut s.done);
        s.release_done(engine);
        s.transfers.clear();
        s.queue.disconnect(engine);
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
