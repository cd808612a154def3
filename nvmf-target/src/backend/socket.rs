//! Socket I/O on the engine's io_uring: the memory a receive or a send lends the kernel, held until its CQE.
//!
//! A transport that drives its sockets through the reactor's ring (NVMe/TCP, when the kernel has the ops:
//! [`SocketOps::probe`]) queues a receive into a buffer it *moves* to the engine and gets back with the
//! completion, and a send of a gather list whose header bytes the engine copies (a few dozen bytes a PDU) and
//! whose data pieces point into pool buffers the engine marks in flight until the send completes. So nothing the
//! kernel may still read or write can be freed, resized or reused by safe code: a connection that ends with a
//! receive in flight only loses its buffer until the CQE brings it back.
//!
//! Each op is a slot of a slab (boxed, so the `msghdr` a send points the kernel at never moves); the CQE's user
//! data is [`NET_USER_DATA`] with the slot's index, and the slot's tag, kind and buffers make its
//! [`NetCompletion`]. Slots are reused: no allocation per op once the slab and its vectors have grown.
//!
//! `unsafe` here: building the SQEs (pointers into memory the slot owns or the pool reserves) and the `msghdr`.

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, types, Probe};

use super::pool::{BufferId, BufferPool};
use super::ring::Ring;

/// User data bit of socket ops (storage ops use small in-flight table indices).
pub(crate) const NET_USER_DATA: u64 = 1 << 63;
/// User data of the cancellations pushed at drop (their own CQEs are ignored).
const CANCEL_USER_DATA: u64 = NET_USER_DATA | (1 << 62);
/// Most pieces one send gathers (`sendmsg`'s iovecs).
pub const MAX_SEND_PIECES: usize = 64;

/// What a socket op was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// A receive ([`crate::backend::IoEngine::recv`]).
    Recv,
    /// A send ([`crate::backend::IoEngine::send`]).
    Send,
}

/// A finished socket op.
#[derive(Debug)]
pub struct NetCompletion {
    /// The tag it was queued with.
    pub tag: u64,
    /// Which op.
    pub kind: NetKind,
    /// Bytes received (0: the peer closed) or sent, or the error.
    pub result: io::Result<u32>,
    /// A receive's buffer, back to its owner (the bytes are at the offset it was queued with).
    pub buffer: Option<Vec<u8>>,
}

/// One piece of a send's gather list.
#[derive(Debug, Clone, Copy)]
pub enum SendPiece<'a> {
    /// Bytes to copy (headers, digests).
    Bytes(&'a [u8]),
    /// `len` bytes of pool buffer `buffer` at `start`, sent from the buffer in place.
    Data {
        /// The buffer.
        buffer: BufferId,
        /// Offset in it.
        start: usize,
        /// Length.
        len: usize,
    },
}

/// Whether the running kernel has the ring ops socket I/O needs, and if not which is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketOps {
    /// Receive, sendmsg and cancel are supported.
    Supported,
    /// This op is not (or the probe itself failed).
    Missing(&'static str),
}

impl SocketOps {
    /// Ask the ring which ops the kernel supports.
    pub(crate) fn probe(ring: &Ring) -> Self {
        let mut probe = Probe::new();
        if ring.register_probe(&mut probe).is_err() {
            return SocketOps::Missing("io_uring probe");
        }
        for (code, name) in [
            (opcode::Recv::CODE, "IORING_OP_RECV"),
            (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return SocketOps::Missing(name);
            }
        }
        SocketOps::Supported
    }
}

/// A socket op's slot.
struct NetSlot {
    in_use: bool,
    tag: u64,
    kind: NetKind,
    /// A receive's buffer while in flight.
    recv: Option<Vec<u8>>,
    /// A send's copied bytes, its iovecs and the `msghdr` naming them.
    stage: Vec<u8>,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
    /// Pool buffers a send's pieces point into, in flight until its CQE.
    buffers: Vec<BufferId>,
}

// SAFETY: the raw pointers in `iov` and `msg` point into this slot's own `stage`/`iov` or into the engine's pool,
// all owned by the one engine; a slot moves between threads only with its engine (before any op is queued).
unsafe impl Send for NetSlot {}

/// Every socket op of one engine (see the module docs).
#[derive(Default)]
pub(crate) struct NetOps {
    // Boxed: a send's SQE points at its slot's `msghdr`, which must not move when the slab grows.
    #[expect(clippy::vec_box, reason = "the kernel holds pointers into the slots")]
    slots: Vec<Box<NetSlot>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Finished ops, until the reactor takes them.
    done: Vec<NetCompletion>,
}

impl std::fmt::Debug for NetOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetOps").field("slots", &self.slots.len()).field("in_flight", &self.in_flight).finish()
    }
}

impl NetOps {
    /// Ops queued whose CQE has not been reaped.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn take_slot(&mut self) -> usize {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.slots.push(Box::new(NetSlot {
            in_use: false,
            tag: 0,
            kind: NetKind::Recv,
            recv: None,
            stage: Vec::new(),
            iov: Vec::with_capacity(MAX_SEND_PIECES),
            // SAFETY: `msghdr` is plain data; all-zero is its empty value.
            msg: unsafe { std::mem::zeroed() },
            buffers: Vec::new(),
        }));
        self.slots.len() - 1
    }

    /// Queue a receive of up to `buf.len() - start` bytes into `buf[start..]` on `fd`. `Err(buf)` when the SQ is
    /// full or `start` is past the end.
    pub(crate) fn recv(
        &mut self,
        ring: &mut Ring,
        tag: u64,
        fd: RawFd,
        mut buf: Vec<u8>,
        start: usize,
    ) -> Result<(), Vec<u8>> {
        if start >= buf.len() || ring.sq_full() {
            return Err(buf);
        }
        let len = u32::try_from(buf.len() - start).unwrap_or(u32::MAX);
        let i = self.take_slot();
        // The heap block of a Vec does not move when the Vec does: the pointer stays valid inside the slot.
        let ptr = buf[start..].as_mut_ptr();
        let entry = opcode::Recv::new(types::Fd(fd), ptr, len).build().user_data(NET_USER_DATA | i as u64);
        let slot = &mut self.slots[i];
        slot.recv = Some(buf);
        // SAFETY: the SQE points at `len` bytes of the buffer now owned by slot `i`, which keeps it (unread,
        // unresized) until this op's CQE is reaped in `complete`; the engine waits for or cancels every socket op
        // before the slab is dropped. `fd` is the caller's open socket; a closed one fails the op (EBADF), it does
        // not touch memory.
        match unsafe { ring.push_entry(&entry) } {
            Ok(()) => {
                self.started(i, tag, NetKind::Recv);
                Ok(())
            }
            Err(()) => {
                self.free.push(i);
                Err(self.slots[i].recv.take().unwrap_or_default())
            }
        }
    }

    /// Queue one `sendmsg` of `pieces` (at most [`MAX_SEND_PIECES`]) on `fd`. Data pieces must lie inside their
    /// pool buffers, which must be owned (not in flight for another op); `Err` names the problem, or says the SQ is
    /// full (`WouldBlock`).
    pub(crate) fn send<'a>(
        &mut self,
        ring: &mut Ring,
        pool: &mut BufferPool,
        tag: u64,
        fd: RawFd,
        pieces: impl IntoIterator<Item = SendPiece<'a>>,
    ) -> io::Result<()> {
        if ring.sq_full() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let i = self.take_slot();
        let slot = &mut self.slots[i];
        slot.stage.clear();
        slot.iov.clear();
        slot.buffers.clear();
        // First pass: copy the bytes and reserve the buffers; iovecs into the stage are made once it stops growing.
        // (start in stage or in buffer, len, which buffer) per piece.
        let mut layout: [(usize, usize, Option<BufferId>); MAX_SEND_PIECES] = [(0, 0, None); MAX_SEND_PIECES];
        let mut n = 0;
        let mut failed = None;
        for piece in pieces {
            if n == MAX_SEND_PIECES {
                failed = Some(io::Error::other("too many pieces for one send"));
                break;
            }
            match piece {
                SendPiece::Bytes(bytes) => {
                    layout[n] = (slot.stage.len(), bytes.len(), None);
                    slot.stage.extend_from_slice(bytes);
                }
                SendPiece::Data { buffer, start, len } => {
                    let fits = start.checked_add(len).is_some_and(|end| end <= pool.get(buffer).len());
                    let reserved = slot.buffers.contains(&buffer);
                    if !reserved && !fits {
                        failed = Some(io::Error::other("send piece outside its buffer (or the buffer is busy)"));
                        break;
                    }
                    if !reserved {
                        let whole = u32::try_from(pool.get(buffer).len()).unwrap_or(u32::MAX);
                        if pool.start_io(buffer, whole).is_err() {
                            failed = Some(io::Error::other("send piece's buffer is busy"));
                            break;
                        }
                        slot.buffers.push(buffer);
                    }
                    layout[n] = (start, len, Some(buffer));
                }
            }
            n += 1;
        }
        if let Some(e) = failed {
            self.abandon(i, pool);
            return Err(e);
        }
        for &(start, len, buffer) in &layout[..n] {
            let base = match buffer {
                // SAFETY (of the later use): the pool buffer is reserved in flight until `complete`.
                Some(b) => pool.region_ptr().wrapping_add(pool.buffer_offset(b).unwrap_or(0)),
                None => slot.stage.as_mut_ptr(),
            };
            slot.iov.push(libc::iovec { iov_base: base.wrapping_add(start).cast(), iov_len: len });
        }
        slot.msg.msg_iov = slot.iov.as_mut_ptr();
        slot.msg.msg_iovlen = slot.iov.len();
        let entry = opcode::SendMsg::new(types::Fd(fd), &raw const slot.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(NET_USER_DATA | i as u64);
        // SAFETY: the SQE names this slot's boxed `msghdr`, whose iovecs point into the slot's `stage` and `iov`
        // (not touched again until `complete`) and into pool buffers reserved in flight above (`start..start+len`
        // checked inside each); all stay valid until the CQE is reaped, and the engine waits for or cancels every
        // socket op before dropping the slab or unmapping the pool.
        match unsafe { ring.push_entry(&entry) } {
            Ok(()) => {
                self.started(i, tag, NetKind::Send);
                Ok(())
            }
            Err(()) => {
                self.abandon(i, pool);
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }

    /// Slot `i`'s op reached the ring.
    fn started(&mut self, i: usize, tag: u64, kind: NetKind) {
        let slot = &mut self.slots[i];
        slot.in_use = true;
        slot.tag = tag;
        slot.kind = kind;
        self.in_flight += 1;
    }

    /// Slot `i`'s send did not reach the ring: its buffers go back to their owner, the slot to the free list.
    fn abandon(&mut self, i: usize, pool: &mut BufferPool) {
        let slot = &mut self.slots[i];
        for &b in &slot.buffers {
            pool.finish_io(b);
        }
        slot.buffers.clear();
        self.free.push(i);
    }

    /// A CQE whose user data has [`NET_USER_DATA`]: finish its op (buffers back to the pool, receive buffer back to
    /// its owner) and keep its completion for [`NetOps::take_completions`].
    pub(crate) fn complete(&mut self, pool: &mut BufferPool, user_data: u64, res: i32) {
        if user_data & CANCEL_USER_DATA == CANCEL_USER_DATA {
            return;
        }
        let index = usize::try_from(user_data & !NET_USER_DATA).unwrap_or(usize::MAX);
        let Some(slot) = self.slots.get_mut(index).filter(|s| s.in_use) else {
            tracing::error!(user_data, "socket completion for no op in flight");
            return;
        };
        slot.in_use = false;
        for &b in &slot.buffers {
            pool.finish_io(b);
        }
        slot.buffers.clear();
        self.in_flight -= 1;
        self.free.push(index);
        let result = u32::try_from(res).map_err(|_| io::Error::from_raw_os_error(res.saturating_neg()));
        self.done.push(NetCompletion { tag: slot.tag, kind: slot.kind, result, buffer: slot.recv.take() });
    }

    /// Move the finished ops into `into`.
    pub(crate) fn take_completions(&mut self, into: &mut Vec<NetCompletion>) {
        into.append(&mut self.done);
    }

    /// Ask the kernel to cancel every op in flight (at drop: their CQEs still come, and are waited for).
    pub(crate) fn cancel_all(&mut self, ring: &mut Ring) {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.in_use {
                let entry = opcode::AsyncCancel::new(NET_USER_DATA | i as u64).build().user_data(CANCEL_USER_DATA);
                // SAFETY: a cancellation names no memory, only the user data of the op to cancel.
                if unsafe { ring.push_entry(&entry) }.is_err() {
                    let _ = ring.submit();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
