//! The io_uring socket path of a [`TcpConnection`] ([`SocketIo::IoUring`]): the multishot receive armed for the
//! connection's life, its chunks decoded in place or kept while reading is paused, and one `sendmsg` at a time of
//! what the send queue holds. The epoll path reads and writes in the parent module.

use std::io;
use std::os::fd::AsRawFd;

use super::{ConnectionError, Phase, SocketIo, TcpConnection, MAX_RING_BACKLOG};
use crate::backend::{IoEngine, NetCompletion, NetKind, SendPiece, MAX_SEND_PIECES};
use crate::tcp::send::Piece;

impl TcpConnection {
    /// Start receiving (a connection on the ring: queue its first receive).
    pub fn start(&mut self, engine: &mut IoEngine) {
        self.queue_receive(engine);
    }

    /// A socket op of this connection completed (on the ring). Same return values as
    /// [`TcpConnection::on_readable`].
    pub fn net_completed(&mut self, engine: &mut IoEngine, c: NetCompletion) -> Result<bool, ConnectionError> {
        match c.kind {
            NetKind::Recv if !c.more => {
                self.ring.recv = None;
                self.ring.recv_cancelled = false;
            }
            NetKind::Recv => {}
            NetKind::Send => self.ring.send_in_flight = false,
        }
        if let Some(chunk) = c.received {
            let taken = self.take_chunk(engine, &chunk);
            engine.recycle_received(chunk);
            if let Err(e) = taken {
                self.close(engine);
                return Err(e);
            }
        }
        if self.session.phase == Phase::Closed {
            return Ok(false);
        }
        let n = match c.result {
            Ok(0) if c.kind == NetKind::Recv => {
                self.close(engine);
                return Ok(false);
            }
            Ok(0) => {
                self.close(engine);
                return Err(ConnectionError::Io(io::Error::new(io::ErrorKind::WriteZero, "socket accepted no bytes")));
            }
            Ok(n) => n as usize,
            // The receive ended without a failure of the socket: arm it again (at the next poll, when the engine's
            // buffers ran out, for they come back as this turn's chunks are taken).
            Err(e) if c.kind == NetKind::Recv && e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.ring.retry = true;
                0
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR | libc::ECANCELED)) => 0,
            Err(e) => {
                tracing::debug!(error = %e, op = ?c.kind, "NVMe/TCP connection socket op failed");
                self.close(engine);
                return Err(ConnectionError::Io(e));
            }
        };
        match c.kind {
            NetKind::Recv => return self.resume_ring_receive(engine),
            NetKind::Send => {
                let s = &mut self.session;
                s.send.sent(n, &mut s.done);
                s.release_done(engine);
            }
        }
        self.on_writable(engine)
    }

    /// Handle what a receive brought: decoded in place when nothing waits before it and reading is not paused; what
    /// is left (reading paused) is kept in the receive buffer.
    fn take_chunk(&mut self, engine: &mut IoEngine, chunk: &[u8]) -> Result<(), ConnectionError> {
        if self.is_closed() {
            return Ok(());
        }
        let consumed = if self.rstart == self.rend && !self.reading_held() { self.decode(engine, chunk)? } else { 0 };
        if self.is_closed() {
            return Ok(());
        }
        self.keep_undecoded(&chunk[consumed..])
    }

    /// Append received bytes to what waits undecoded.
    pub(super) fn keep_undecoded(&mut self, bytes: &[u8]) -> Result<(), ConnectionError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        if self.rend + bytes.len() > self.rbuf.len() {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
            let needed = self.rend + bytes.len();
            if needed > MAX_RING_BACKLOG {
                return Err(ConnectionError::Io(io::Error::other("the host sent too much while reading was paused")));
            }
            if needed > self.rbuf.len() {
                self.rbuf.resize(needed.max(self.rbuf.len() * 2).min(MAX_RING_BACKLOG), 0);
            }
        }
        self.rbuf[self.rend..self.rend + bytes.len()].copy_from_slice(bytes);
        self.rend += bytes.len();
        Ok(())
    }

    /// Decode what the receive buffer holds, keep the receive armed unless reading paused (cancel it if it did),
    /// and send the output.
    pub(super) fn resume_ring_receive(&mut self, engine: &mut IoEngine) -> Result<bool, ConnectionError> {
        self.decode_buffered(engine)?;
        if self.session.phase == Phase::Closed {
            return Ok(false);
        }
        self.queue_receive(engine);
        self.flush(engine)?;
        Ok(true)
    }

    /// On the ring: arm the multishot receive once everything received is decoded and reading is not paused, or
    /// cancel it when reading paused (the kernel keeps the rest in the socket, so backpressure reaches the host as
    /// with `read`).
    pub(super) fn queue_receive(&mut self, engine: &mut IoEngine) {
        let SocketIo::IoUring(tag) = self.io else { return };
        if self.is_closed() {
            return;
        }
        match self.ring.recv {
            Some(id) if self.reading_held() && !self.ring.recv_cancelled => match engine.cancel_net_op(id) {
                Ok(()) => self.ring.recv_cancelled = true,
                Err(_) => self.ring.retry = true,
            },
            Some(_) => {}
            None if self.reading_held() || self.rstart < self.rend => {}
            None => match engine.recv_multishot(tag, self.stream.as_raw_fd()) {
                Ok(id) => self.ring.recv = Some(id),
                Err(_) => self.ring.retry = true,
            },
        }
    }

    /// On the ring: queue one send of what is queued, unless one is in flight (its completion sends the rest).
    pub(super) fn queue_send(&mut self, engine: &mut IoEngine, tag: u64) -> Result<(), ConnectionError> {
        if self.ring.send_in_flight {
            return Ok(());
        }
        let fd = self.stream.as_raw_fd();
        let zero_copy = self.ring.zero_copy;
        let s = &mut self.session;
        let (queued, result) = {
            let mut pieces = s
                .send
                .pieces(MAX_SEND_PIECES, &mut s.done)
                .map(|piece| match piece {
                    Piece::Bytes(bytes) => SendPiece::Bytes(bytes),
                    Piece::Data { buffer, start, len } => SendPiece::Data { buffer, start, len },
                })
                .peekable();
            let queued = pieces.peek().is_some();
            (queued, if queued { engine.send(tag, fd, pieces, zero_copy) } else { Ok(()) })
        };
        s.release_done(engine);
        match result {
            Ok(()) => {
                self.ring.send_in_flight = queued;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.ring.retry = true;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "NVMe/TCP send could not be queued");
                self.close(engine);
                Err(ConnectionError::Io(e))
            }
        }
    }
}
