//! [`TcpQueue`]: one host-side NVMe/TCP queue pair as a poll-driven state machine over a non-blocking socket.
//!
//! The queue owns its socket, a [`mio::Poll`], the PDU decoder and a table of command slots. Whoever owns
//! the `TcpQueue` drives it from one thread — [`TcpQueue::submit`] queues commands,
//! [`TcpQueue::poll`] moves bytes and [`TcpQueue::next_completion`] hands back finished commands — so there
//! is no lock anywhere in it. [`crate::queue::handle::QueueHandle`] puts one on its own I/O thread for multi-threaded
//! callers; tests and single-threaded tools use it directly.
//!
//! Commands are pipelined up to the queue depth. Each slot has an explicit [`CommandState`]; a command
//! identifier is the slot index (low 12 bits) plus a 4-bit generation, so a response for a command that
//! already completed is caught as an unknown CID instead of completing a later command. Data is never copied
//! on the send side: PDU headers are encoded into the send queue and the data is written from the command's
//! own buffer with vectored writes (many PDUs per `writev`). Received C2HData is bounds-checked (CCCID of a
//! live read, in order, DATAO + DATAL within the command's buffer) and its data lands in that buffer: once a
//! C2HData header is in and its data is not, the rest is read from the socket straight into the command's buffer
//! (no assembly copy of PDUs that straddle reads); a PDU that arrived whole in one read, or one with a data digest or
//! padding, is copied from the receive buffer.
//!
//! Anything the controller sends that the protocol does not allow fails the whole queue with a typed
//! [`HostError`]: every outstanding command completes with that error, an H2CTermReq is sent where the
//! spec asks for one, and the socket is shut down. Outstanding commands older than the command timeout fail
//! the queue too (except Asynchronous Event Requests, which wait for an event by design), so nothing else waits
//! forever. A data digest error is not fatal (NVMe/TCP 1.0 §7.4.6.2): the
//! command completes with Transient Transport Error and the queue goes on. Nor is a success (CapsuleResp, or
//! C2HData with SUCCESS) for a read whose data did not all arrive: the stream is intact, but the command fails
//! with [`HostError::IncompleteData`] rather than completing with bytes the controller never sent.
//!
//! Never blocks except in [`TcpQueue::connect`] (TCP connect and ICReq/ICResp, bounded by the connect
//! timeout) and in [`TcpQueue::poll`] for at most the timeout the caller passes.

use std::collections::VecDeque;
use std::io::{IoSliceMut, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_common::transport::tcp::decoder::decode_header;
use nvmf_common::transport::tcp::pdu::{MIN_MAXH2CDATA, TERM_REQ_MAX_DATA_LEN};
use nvmf_common::transport::tcp::{
    decode, C2hData, CommonHeader, Decoded, DecoderConfig, DigestTypes, Direction, Framing, IcReq, Pdu, PduDecoder,
    PduError, PduType, TermReq,
};
use nvmf_common::transport::tls::{client_handshake, CipherSuite, HandshakePsk, RecordLayer, TlsError};

use super::commands::{CommandState, Commands, Slot};
use crate::error::HostError;
use crate::queue::{command_id, BareQueue, Completion, DataDirection, QueueStats, Rejected, Request};

const SOCKET: Token = Token(0);
const WAKER: Token = Token(1);

/// Settings of one queue.
#[derive(Debug, Clone)]
pub struct TcpQueueOptions {
    /// The queue identifier (0 = admin); used in errors and logs.
    pub qid: u16,
    /// Command identifiers available, i.e. the most commands outstanding at once (1..=4096). Keep it at
    /// most SQSIZE (0's based) from Connect so the controller's submission queue never overflows.
    pub depth: u16,
    /// Ask for header digests in ICReq (`--hdr-digest`).
    pub hdr_digest: bool,
    /// Ask for data digests in ICReq (`--data-digest`).
    pub data_digest: bool,
    /// Largest write sent as in-capsule data (from Identify IOCCSZ; Connect's 1024 bytes always are).
    pub in_capsule_limit: u32,
    /// Largest C2HData PDU accepted; longer is a fatal Data Transfer Limit Exceeded.
    pub max_c2h_data: u32,
    /// Bound on the TCP connect and the ICReq/ICResp exchange.
    pub connect_timeout: Duration,
    /// A command outstanding longer than this fails the queue.
    pub command_timeout: Duration,
    /// The network interface the connection leaves through (`--host-iface`, `SO_BINDTODEVICE`).
    pub host_iface: Option<String>,
    /// Secure the connection with TLS 1.3 and this PSK before the ICReq.
    pub tls: Option<Arc<HandshakePsk>>,
}

impl Default for TcpQueueOptions {
    fn default() -> Self {
        TcpQueueOptions {
            qid: 0,
            depth: 32,
            hdr_digest: false,
            data_digest: false,
            in_capsule_limit: 8192,
            max_c2h_data: 1 << 20,
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
            host_iface: None,
            tls: None,
        }
    }
}

/// A C2HData PDU whose data is being read from the socket straight into its command's buffer.
#[derive(Debug, Clone, Copy)]
struct DirectC2h {
    pdu: Pdu,
    c2h: C2hData,
    index: usize,
    /// The next byte of the command's buffer to fill.
    at: usize,
    /// Where the PDU's data ends in the command's buffer (the PDU ends there too: no data digest).
    end: usize,
}

/// A host NVMe/TCP queue pair (see the module docs).
#[derive(Debug)]
pub struct TcpQueue<T> {
    stream: mio::net::TcpStream,
    poll: Poll,
    events: Events,
    waker: Option<Arc<Waker>>,
    decoder: PduDecoder,
    rx: Vec<u8>,
    direct: Option<DirectC2h>,
    cmds: Commands<T>,
    failed: Option<HostError>,
    command_timeout: Duration,
    last_timeout_check: Instant,
}

/// What `rx` takes per read while large reads are outstanding: room for the PDUs between two C2HData payloads
/// (a CapsuleResp, the next C2HData header) and a little data.
const SMALL_RX_WINDOW: usize = 4096;

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// One `readv` from the socket: `Some(n)` bytes, `None` if it would block; end of stream and resets are
/// [`HostError::Closed`].
fn read_socket(stream: &mio::net::TcpStream, bufs: &mut [IoSliceMut], qid: u16) -> Result<Option<usize>, HostError> {
    loop {
        return match (&*stream).read_vectored(bufs) {
            Ok(0) => Err(HostError::Closed { qid }),
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err(HostError::Closed { qid }),
            Err(e) => Err(HostError::io(qid, "receiving", &e)),
        };
    }
}

/// The TCP connection to `addr`, through `options.host_iface` when given.
fn open_stream(addr: SocketAddr, options: &TcpQueueOptions) -> Result<std::net::TcpStream, HostError> {
    let failed = |e: std::io::Error| HostError::ConnectFailed { addr, kind: e.kind(), message: e.to_string() };
    let Some(iface) = &options.host_iface else {
        return std::net::TcpStream::connect_timeout(&addr, options.connect_timeout).map_err(failed);
    };
    let socket =
        socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).map_err(failed)?;
    socket
        .bind_device(Some(iface.as_bytes()))
        .map_err(|e| HostError::HostInterface { iface: iface.clone(), message: e.to_string() })?;
    socket.connect_timeout(&addr.into(), options.connect_timeout).map_err(failed)?;
    Ok(socket.into())
}

/// A connection to `addr`, blocking, its waits bounded by the connect timeout.
fn open_blocking(addr: SocketAddr, options: &TcpQueueOptions) -> Result<std::net::TcpStream, HostError> {
    let qid = options.qid;
    let io = |what| move |e: std::io::Error| HostError::io(qid, what, &e);
    let stream = open_stream(addr, options)?;
    stream.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    stream.set_read_timeout(Some(options.connect_timeout)).map_err(io("socket timeout"))?;
    stream.set_write_timeout(Some(options.connect_timeout)).map_err(io("socket timeout"))?;
    Ok(stream)
}

/// A connection to `addr` secured with `psk` (the plaintext end of the relay where the kernel has no kTLS). A
/// SHA-384 key is offered as Linux's `tlshd` takes it first (SHA-256 binder and suites), then, on a new connection,
/// as the NVMe/TCP specification pairs it (TLS_AES_256_GCM_SHA384).
fn open_secured(
    addr: SocketAddr,
    options: &TcpQueueOptions,
    psk: &HandshakePsk,
) -> Result<std::net::TcpStream, HostError> {
    let qid = options.qid;
    let io = |what| move |e: std::io::Error| HostError::io(qid, what, &e);
    let as_linux = (psk.suite == CipherSuite::Aes256GcmSha384)
        .then(|| HandshakePsk { suite: CipherSuite::Aes128GcmSha256, ..psk.clone() });
    let offers: Vec<&HandshakePsk> = as_linux.iter().chain(std::iter::once(psk)).collect();
    for (i, offer) in offers.iter().enumerate() {
        let stream = open_blocking(addr, options)?;
        match client_handshake(&stream, offer) {
            Ok(secured) => {
                let RecordLayer::UserSpace(plain) = secured.records else { return Ok(stream) };
                // No kTLS here: the queue speaks plaintext to the relay thread that carries the records.
                plain.set_read_timeout(Some(options.connect_timeout)).map_err(io("socket timeout"))?;
                plain.set_write_timeout(Some(options.connect_timeout)).map_err(io("socket timeout"))?;
                return Ok(plain);
            }
            Err(TlsError::Handshake(why)) if i + 1 < offers.len() => {
                tracing::debug!(qid, %why, "TLS with SHA-256 binders refused; offering the key with SHA-384 ones");
            }
            Err(error) => return Err(HostError::Tls { qid, error }),
        }
    }
    Err(HostError::Tls { qid, error: TlsError::Handshake("no offer was taken".into()) })
}

impl<T> TcpQueue<T> {
    /// Open a TCP connection to `addr` and exchange ICReq/ICResp (blocking, bounded by
    /// `options.connect_timeout`). Fails if a digest asked for is not granted (or one not asked for is).
    pub fn connect(addr: SocketAddr, options: &TcpQueueOptions) -> Result<Self, HostError> {
        let qid = options.qid;
        command_id::check_depth(options.depth)?;
        let io = |what| move |e: std::io::Error| HostError::io(qid, what, &e);
        let mut stream = match &options.tls {
            None => open_blocking(addr, options)?,
            Some(psk) => open_secured(addr, options, psk)?,
        };

        let dgst = DigestTypes { hdgst_enable: options.hdr_digest, ddgst_enable: options.data_digest };
        let icreq = Pdu::IcReq(IcReq { pfv: 0, hpda: 0, dgst, maxr2t: 0 });
        let bytes = icreq.to_bytes(&[], &Framing::default()).map_err(|e| HostError::wire("ICReq", e))?;
        stream.write_all(&bytes).map_err(io("sending ICReq"))?;

        // The ICResp (or a TermReq) is at most 128 + 128 bytes: `decode` refuses a longer PLEN up front.
        let config = DecoderConfig::new(Direction::ControllerToHost, len_u32(TERM_REQ_MAX_DATA_LEN));
        let mut buf = Vec::with_capacity(256);
        let pdu = loop {
            match decode(&buf, &config) {
                Ok(Decoded::Needed(n)) => {
                    let old = buf.len();
                    buf.resize(old + n, 0);
                    stream.read_exact(&mut buf[old..]).map_err(|e| match e.kind() {
                        std::io::ErrorKind::UnexpectedEof => HostError::Closed { qid },
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HostError::Timeout {
                            what: format!("ICResp on queue {qid}"),
                            after: options.connect_timeout,
                        },
                        _ => HostError::io(qid, "receiving ICResp", &e),
                    })?;
                }
                Ok(Decoded::Pdu { pdu, .. }) => break pdu,
                Err(error) => return Err(HostError::Pdu { qid, error }),
            }
        };
        let icresp = match pdu {
            Pdu::IcResp(r) => r,
            Pdu::TermReq(t) => return Err(HostError::TermReq { qid, fes: t.fes, fei: t.fei }),
            other => return Err(HostError::Negotiation { qid, reason: format!("expected ICResp, got {other:?}") }),
        };
        if icresp.dgst != dgst {
            return Err(HostError::Negotiation {
                qid,
                reason: format!("asked for digests {dgst:?}, controller granted {:?}", icresp.dgst),
            });
        }
        if icresp.maxh2cdata < MIN_MAXH2CDATA {
            return Err(HostError::Negotiation {
                qid,
                reason: format!("MAXH2CDATA {} below the minimum {MIN_MAXH2CDATA}", icresp.maxh2cdata),
            });
        }
        let framing = Framing { hdgst: dgst.hdgst_enable, ddgst: dgst.ddgst_enable, hpda: 0, cpda: icresp.cpda };

        stream.set_nonblocking(true).map_err(io("non-blocking mode"))?;
        let mut stream = mio::net::TcpStream::from_std(stream);
        let poll = Poll::new().map_err(io("creating the poller"))?;
        poll.registry()
            .register(&mut stream, SOCKET, Interest::READABLE | Interest::WRITABLE)
            .map_err(io("registering the socket"))?;
        let mut decoder = PduDecoder::new(DecoderConfig::new(
            Direction::ControllerToHost,
            options.max_c2h_data.max(len_u32(TERM_REQ_MAX_DATA_LEN)),
        ));
        decoder.set_framing(framing);
        let depth = usize::from(options.depth);
        let now = Instant::now();
        let slots = (0..depth)
            .map(|_| Slot {
                state: CommandState::Free,
                generation: 0,
                context: None,
                data: Vec::new(),
                direction: DataDirection::None,
                len: 0,
                unsent: 0,
                r2ts: 0,
                in_capsule: false,
                digest_error: false,
                submitted: now,
                timed: true,
            })
            .collect();
        tracing::debug!(qid, traddr = %addr, ?framing, maxh2cdata = icresp.maxh2cdata, "NVMe/TCP queue initialized");
        Ok(TcpQueue {
            stream,
            poll,
            events: Events::with_capacity(16),
            waker: None,
            decoder,
            rx: vec![0; 256 * 1024],
            direct: None,
            cmds: Commands {
                qid,
                framing,
                maxh2cdata: icresp.maxh2cdata,
                in_capsule_limit: options.in_capsule_limit,
                slots,
                free: (0..options.depth).rev().collect(),
                unstamped: Vec::with_capacity(depth),
                out: VecDeque::with_capacity(depth * 2),
                completed: VecDeque::with_capacity(depth),
                stats: QueueStats::default(),
                large_reads: 0,
            },
            failed: None,
            command_timeout: options.command_timeout,
            last_timeout_check: now,
        })
    }

    /// The queue identifier.
    pub fn qid(&self) -> u16 {
        self.cmds.qid
    }

    /// The framing negotiated in ICReq/ICResp.
    pub fn framing(&self) -> Framing {
        self.cmds.framing
    }

    /// MAXH2CDATA from ICResp.
    pub fn maxh2cdata(&self) -> u32 {
        self.cmds.maxh2cdata
    }

    /// Change the in-capsule data limit (after Identify told IOCCSZ).
    pub fn set_in_capsule_limit(&mut self, limit: u32) {
        self.cmds.in_capsule_limit = limit;
    }

    /// Counters.
    pub fn stats(&self) -> QueueStats {
        self.cmds.stats
    }

    /// Commands outstanding.
    pub fn outstanding(&self) -> usize {
        self.cmds.slots.len() - self.cmds.free.len()
    }

    /// Whether a command that can time out is outstanding: any but the admin queue's Asynchronous Event
    /// Requests, which wait for an event as long as it takes.
    pub fn timed_outstanding(&self) -> bool {
        // Only the admin queue has commands without a timeout: an I/O queue answers without a scan.
        self.outstanding() > 0
            && (self.cmds.qid != 0 || self.cmds.slots.iter().any(|s| s.state != CommandState::Free && s.timed))
    }

    /// Free command identifiers.
    pub fn free_slots(&self) -> usize {
        self.cmds.free.len()
    }

    /// The state of the command with identifier `cid` ([`CommandState::Free`] if none is outstanding).
    pub fn command_state(&self, cid: u16) -> CommandState {
        self.cmds.live(cid).map_or(CommandState::Free, |i| self.cmds.slots[i].state)
    }

    /// The error the queue failed with, if it did.
    pub fn failure(&self) -> Option<&HostError> {
        self.failed.as_ref()
    }

    /// A waker that makes a [`TcpQueue::poll`] in progress (or the next one) return; for other threads
    /// that hand this queue's owner work.
    pub fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        if let Some(w) = &self.waker {
            return Ok(Arc::clone(w));
        }
        let w = Arc::new(
            Waker::new(self.poll.registry(), WAKER)
                .map_err(|e| HostError::io(self.cmds.qid, "creating a waker", &e))?,
        );
        self.waker = Some(Arc::clone(&w));
        Ok(w)
    }

    /// Queue a command: allocate a CID, set SGL1 (in-capsule data block for writes up to the in-capsule
    /// limit, transport data block otherwise) and queue its capsule. Returns the CID. The capsule is sent by the
    /// next [`TcpQueue::poll`], before it waits, together with every other command submitted since: one `writev`
    /// for a whole batch instead of one per command.
    pub fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        if let Some(e) = &self.failed {
            return Err(Box::new(Rejected { error: e.clone(), request }));
        }
        self.cmds.start(request)
    }

    /// Send the commands submitted since the last poll, wait up to `timeout` (`None`: until something happens) for
    /// socket events or a wake-up, then send what can be sent and handle every PDU that arrived. Completions are
    /// then in [`TcpQueue::next_completion`]. Returns the queue's failure once it has failed.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.poll_inner(timeout);
        if let Err(e) = result {
            self.fail(e.clone());
            return Err(e);
        }
        Ok(())
    }

    fn poll_inner(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        let qid = self.cmds.qid;
        if !self.cmds.unstamped.is_empty() {
            let now = Instant::now();
            for index in self.cmds.unstamped.drain(..) {
                self.cmds.slots[usize::from(index)].submitted = now;
            }
        }
        // Send what `submit` queued before sleeping: the responses to wait for depend on it.
        if !self.cmds.out.is_empty() {
            self.cmds.flush(&mut self.stream).map_err(|e| HostError::io(qid, "sending", &e))?;
        }
        // A command that can time out bounds the wait by the command timeout (the I/O thread's own cap is shorter).
        let timeout = if self.timed_outstanding() {
            Some(timeout.map_or(self.command_timeout, |t| t.min(self.command_timeout)))
        } else {
            timeout
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(HostError::io(qid, "polling", &e)),
        }
        let (mut readable, mut closed, mut writable) = (false, false, false);
        for event in &self.events {
            if event.token() == SOCKET {
                readable |= event.is_readable();
                closed |= event.is_read_closed() || event.is_error();
                writable |= event.is_writable();
            }
        }
        if readable || closed {
            self.receive(closed)?;
        }
        if writable || readable || !self.cmds.out.is_empty() {
            self.cmds.flush(&mut self.stream).map_err(|e| HostError::io(qid, "sending", &e))?;
        }
        self.check_timeouts()
    }

    fn check_timeouts(&mut self) -> Result<(), HostError> {
        let now = Instant::now();
        if now.duration_since(self.last_timeout_check) < Duration::from_millis(50) {
            return Ok(());
        }
        self.last_timeout_check = now;
        if let Some(slot) = self.cmds.slots.iter().find(|s| {
            s.state != CommandState::Free && s.timed && now.duration_since(s.submitted) > self.command_timeout
        }) {
            return Err(HostError::Timeout {
                what: format!("command on queue {} in state {:?}", self.cmds.qid, slot.state),
                after: self.command_timeout,
            });
        }
        Ok(())
    }

    /// Read everything the socket has and handle each PDU.
    ///
    /// A read that fills less than it was given has emptied the socket's receive queue, so the loop stops there
    /// instead of paying one more `read` for its `WouldBlock`: bytes arriving later raise a new readiness edge
    /// (epoll reports each arrival on a TCP socket). Unless `closed` (the event said the peer hung up or the socket
    /// has an error): then the end of the stream or the error is already there behind the data, with no edge to
    /// come, so the loop reads until the read reports it.
    ///
    /// While large reads are outstanding `rx` takes only [`SMALL_RX_WINDOW`] bytes per read: a read into all of
    /// `rx` would take whole C2HData payloads there, to be copied again into their commands' buffers (where memcpy
    /// is slow, as in a guest, that second copy of a large payload costs more than the system calls the window
    /// adds); with the window, the next C2HData header arrives with little data behind it and the rest of the
    /// payload is read straight into its buffer.
    fn receive(&mut self, closed: bool) -> Result<(), HostError> {
        let qid = self.cmds.qid;
        loop {
            let window = if self.cmds.large_reads > 0 { SMALL_RX_WINDOW } else { self.rx.len() };
            if let Some(mut d) = self.direct {
                // Bounds checked by `start_direct`. Bytes past this PDU (the next ones) land in `rx` in the same read.
                let dst = &mut self.cmds.slots[d.index].data[d.at..d.end];
                let want = dst.len();
                let mut bufs = [IoSliceMut::new(dst), IoSliceMut::new(&mut self.rx[..window])];
                let Some(n) = read_socket(&self.stream, &mut bufs, qid)? else { return Ok(()) };
                d.at += n.min(want);
                if d.at == d.end {
                    self.direct = None;
                    self.cmds.c2h_done(&d.pdu, d.c2h, d.index)?;
                } else {
                    self.direct = Some(d);
                }
                if n > want {
                    self.handle_rx(n - want)?;
                }
                if n < want + window && !closed {
                    return Ok(());
                }
                continue;
            }
            let Some(n) = read_socket(&self.stream, &mut [IoSliceMut::new(&mut self.rx[..window])], qid)? else {
                return Ok(());
            };
            self.handle_rx(n)?;
            if n < window && !closed {
                return Ok(());
            }
        }
    }

    /// Handle the `n` bytes at the start of `rx`: every PDU in them, and the start of the next one.
    fn handle_rx(&mut self, n: usize) -> Result<(), HostError> {
        let qid = self.cmds.qid;
        let mut start = 0;
        while start < n {
            if self.decoder.buffered() == 0 && self.start_direct(start, n)? {
                break;
            }
            let step = self.decoder.feed(&self.rx[start..n]);
            start += step.consumed;
            match step.result {
                Ok(Some(p)) => self.cmds.on_pdu(p.pdu, p.data)?,
                Ok(None) => break,
                Err(PduError::DataDigest { pdu, mismatch, .. }) => {
                    tracing::warn!(qid, ?pdu, %mismatch, "data digest error");
                    self.cmds.on_data_digest_error(&pdu)?;
                }
                Err(error) => return Err(HostError::Pdu { qid, error }),
            }
        }
        Ok(())
    }

    /// If `rx[start..n]` begins a C2HData whose header is complete but whose data is not all there: check it against
    /// its command, copy the data that did arrive into the command's buffer and have [`TcpQueue::receive`] read the
    /// rest straight into it. Returns whether it did. PDUs with a data digest or padding before the data, and
    /// anything the header checks refuse, are left to the decoder (which reports errors with the TermReq data).
    fn start_direct(&mut self, start: usize, n: usize) -> Result<bool, HostError> {
        let buf = &self.rx[start..n];
        // Most PDUs arrive whole: a look at the common header spares them a second parse.
        match CommonHeader::parse(buf) {
            Ok(ch)
                if ch.pdu_type == PduType::C2hData && usize::try_from(ch.plen).is_ok_and(|plen| plen > buf.len()) => {}
            _ => return Ok(false),
        }
        let Ok(Some((pdu, layout))) = decode_header(buf, self.decoder.config()) else { return Ok(false) };
        let Pdu::C2hData(c2h) = pdu else { return Ok(false) };
        let data = layout.data_range();
        if layout.ddgst
            || buf.len() >= layout.plen
            || data.start != layout.header_end()
            || data.end != layout.plen
            || usize::try_from(c2h.datal) != Ok(data.len())
        {
            return Ok(false);
        }
        let (index, range) = self.cmds.c2h_target(&pdu, c2h, Some(data.len()))?;
        let arrived = &buf[data.start..];
        let at = range.start + arrived.len();
        self.cmds.slots[index].data[range.start..at].copy_from_slice(arrived);
        self.direct = Some(DirectC2h { pdu, c2h, index, at, end: range.end });
        Ok(true)
    }

    /// Fail the queue: complete every outstanding command with `error`, send an H2CTermReq if the error is
    /// one the host terminates for, and shut the socket down.
    fn fail(&mut self, error: HostError) {
        if self.failed.is_some() {
            return;
        }
        if matches!(error, HostError::ShutDown { .. }) {
            // Closed by this host: routine, not a warning.
            tracing::debug!(qid = self.cmds.qid, "queue closed");
        } else {
            tracing::warn!(qid = self.cmds.qid, %error, "queue failed");
        }
        if let Some(fes) = error.fes() {
            let fei = match &error {
                HostError::Pdu { error, .. } => error.fei(),
                _ => 0,
            };
            let term = Pdu::TermReq(TermReq { direction: Direction::HostToController, fes, fei });
            // Best effort: the connection is going away whatever happens to these bytes.
            if let Ok(bytes) = term.to_bytes(&[], &self.cmds.framing) {
                let _ = (&self.stream).write(&bytes);
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.cmds.out.clear();
        self.direct = None;
        for index in 0..self.cmds.slots.len() {
            if self.cmds.slots[index].state != CommandState::Free {
                self.cmds.slots[index].unsent = 0;
                self.cmds.complete(index, Err(error.clone()));
            }
        }
        self.failed = Some(error);
    }

    /// Fail the queue with [`HostError::ShutDown`] (outstanding commands complete with it) and close the socket.
    pub fn close(&mut self) {
        let qid = self.cmds.qid;
        self.fail(HostError::ShutDown { qid });
    }

    /// The next finished command, if any.
    pub fn next_completion(&mut self) -> Option<Completion<T>> {
        self.cmds.completed.pop_front()
    }
}

impl<T: Send> BareQueue<T> for TcpQueue<T> {
    fn qid(&self) -> u16 {
        TcpQueue::qid(self)
    }
    fn submit(&mut self, request: Request<T>) -> Result<u16, Box<Rejected<T>>> {
        TcpQueue::submit(self, request)
    }
    fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        TcpQueue::poll(self, timeout)
    }
    fn next_completion(&mut self) -> Option<Completion<T>> {
        TcpQueue::next_completion(self)
    }
    fn close(&mut self) {
        TcpQueue::close(self);
    }
    fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        TcpQueue::waker(self)
    }
    fn free_slots(&self) -> usize {
        TcpQueue::free_slots(self)
    }
    fn outstanding(&self) -> usize {
        TcpQueue::outstanding(self)
    }
    fn timed_outstanding(&self) -> bool {
        TcpQueue::timed_outstanding(self)
    }
    fn failure(&self) -> Option<&HostError> {
        TcpQueue::failure(self)
    }
    fn stats(&self) -> QueueStats {
        TcpQueue::stats(self)
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd as _;
        Some(self.poll.as_raw_fd())
    }
}
