//! Socket I/O on the engine's io_uring: the memory a receive or a send lends the kernel, held until its CQE.
//!
//! A transport that drives its sockets through the reactor's ring (NVMe/TCP, when the kernel has what it takes:
//! [`NetOps::start`]) arms one *multishot* receive per socket, which the kernel completes again for every chunk
//! that arrives, each into a buffer it takes from the engine's [`ReceiveBuffers`] (so an idle connection holds no
//! receive memory, and a receive costs no SQE once armed); and it queues sends of a gather list whose header bytes
//! the engine copies (a few dozen bytes a PDU) and whose data pieces point into pool buffers the engine marks in
//! flight until the send completes. So nothing the kernel may still read or write can be freed, resized or reused
//! by safe code. A send with enough pool data, when its caller allows it, goes zero copy (`IORING_OP_SENDMSG_ZC`):
//! the NIC reads the pool's pages in place, so its buffers stay in flight past the send's completion, until the
//! kernel's notification CQE; the rest of a partly sent buffer may meanwhile go in the next send (the pool counts
//! the sends reading a buffer).
//!
//! Each op is a slot of a slab (boxed, so the `msghdr` a send points the kernel at never moves); the CQE's user
//! data is [`NET_USER_DATA`] with the slot's index, and the slot's tag, kind and buffers make its
//! [`NetCompletion`]. Slots are reused: no allocation per op once the slab and its vectors have grown.
//!
//! `unsafe` here: building the SQEs (pointers into memory the slot owns or the pool reserves) and the `msghdr`.

mod provided;

pub use provided::ReceivedChunk;

use std::io;
use std::os::fd::RawFd;

use io_uring::{cqueue, opcode, types, Probe};

use super::pool::{BufferId, BufferPool};
use super::ring::Ring;
use provided::{ReceiveBuffers, RECEIVE_GROUP};

/// User data bit of socket ops (storage ops use small in-flight table indices).
pub(crate) const NET_USER_DATA: u64 = 1 << 63;
/// User data of the cancellations pushed at drop (their own CQEs are ignored).
const CANCEL_USER_DATA: u64 = NET_USER_DATA | (1 << 62);
/// Most pieces one send gathers (`sendmsg`'s iovecs).
pub const MAX_SEND_PIECES: usize = 64;
/// Receive buffers per engine, and their size: what the kernel can fill between two reaps of a busy reactor
/// before a receive runs out (ENOBUFS ends it; the connection arms it again).
const RECEIVE_BUFFERS: u16 = 64;
const RECEIVE_BUFFER_SIZE: usize = 32 << 10;
/// The first kernel with multishot receive (`IORING_RECV_MULTISHOT`), which the probe cannot see.
const MULTISHOT_RECV_KERNEL: (u32, u32) = (6, 0);

/// What a socket op was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// A receive ([`crate::backend::IoEngine::recv_multishot`]).
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
    /// Bytes received (0: the peer closed) or sent, or the error (a receive's ENOBUFS: the receive buffers ran out).
    pub result: io::Result<u32>,
    /// The bytes received, in a receive buffer the receiver gives back with
    /// [`crate::backend::IoEngine::recycle_received`].
    pub received: Option<ReceivedChunk>,
    /// A multishot receive goes on (more completions follow); otherwise the op has ended.
    pub more: bool,
}

/// A socket op in flight, to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetOpId(usize);

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
    /// Multishot receive with provided buffers, sendmsg, poll and cancel are supported.
    Supported,
    /// This op is not (or the probe itself failed).
    Missing(&'static str),
}

impl SocketOps {
    /// Whether the ops the ring's `probe` found are enough, and the kernel's release for what it cannot tell.
    fn of(probe: Option<&Probe>) -> Self {
        let Some(probe) = probe else { return SocketOps::Missing("io_uring probe") };
        for (code, name) in [
            (opcode::Recv::CODE, "IORING_OP_RECV"),
            (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
            (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD"),
        ] {
            if !probe.is_supported(code) {
                return SocketOps::Missing(name);
            }
        }
        match kernel_release() {
            Some(release) if release >= MULTISHOT_RECV_KERNEL => SocketOps::Supported,
            _ => SocketOps::Missing("multishot receive (Linux 6.0)"),
        }
    }
}

/// The running kernel's major and minor version.
fn kernel_release() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A socket op's slot.
struct NetSlot {
    in_use: bool,
    tag: u64,
    kind: NetKind,
    /// A send's copied bytes, its iovecs and the `msghdr` naming them.
    stage: Vec<u8>,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
    /// Pool buffers a send's pieces point into, in flight until its CQE (a zero-copy send's: its notification).
    buffers: Vec<BufferId>,
    /// A zero-copy send whose result came and whose notification has not.
    awaiting_notification: bool,
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
    /// The receives' buffers, once [`NetOps::start`] set them up.
    receive: Option<ReceiveBuffers>,
    /// Sends with at least this many data bytes go zero copy where allowed (0: never); the kernel's support.
    zero_copy_bytes: usize,
    zero_copy_supported: bool,
    /// Sends that went zero copy, since the start (for metrics).
    zero_copy_sends: u64,
}

impl std::fmt::Debug for NetOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetOps").field("slots", &self.slots.len()).field("in_flight", &self.in_flight).finish()
    }
}

impl NetOps {
    /// Socket ops whose sends of `zero_copy_bytes` data bytes or more may go zero copy (0: never).
    pub(crate) fn new(zero_copy_bytes: u32) -> Self {
        NetOps { zero_copy_bytes: usize::try_from(zero_copy_bytes).unwrap_or(usize::MAX), ..NetOps::default() }
    }

    /// Whether the kernel has zero-copy sends (known once [`NetOps::start`] succeeded).
    pub(crate) fn zero_copy_supported(&self) -> bool {
        self.zero_copy_supported
    }

    /// Sends that went zero copy, since the start.
    pub(crate) fn zero_copy_sends(&self) -> u64 {
        self.zero_copy_sends
    }

    /// Ops queued whose CQE has not been reaped.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Of those, zero-copy sends that wait only for their notification: the kernel holds references to the pages
    /// it still sends from and no longer reads the op's `msghdr`, so the engine need not wait for them at drop (the
    /// notification comes when the socket's data is freed, which a peer that stopped reading can put off).
    pub(crate) fn awaiting_notification(&self) -> usize {
        self.slots.iter().filter(|s| s.awaiting_notification).count()
    }

    fn take_slot(&mut self) -> usize {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.slots.push(Box::new(NetSlot {
            in_use: false,
            tag: 0,
            kind: NetKind::Recv,
            stage: Vec::new(),
            iov: Vec::with_capacity(MAX_SEND_PIECES),
            // SAFETY: `msghdr` is plain data; all-zero is its empty value.
            msg: unsafe { std::mem::zeroed() },
            buffers: Vec::new(),
            awaiting_notification: false,
        }));
        self.slots.len() - 1
    }

    /// Set up socket I/O on `ring`: check the kernel has the ops, and register the receive buffers.
    pub(crate) fn start(&mut self, ring: &Ring) -> SocketOps {
        if self.receive.is_some() {
            return SocketOps::Supported;
        }
        let mut probe = Probe::new();
        let probe = ring.register_probe(&mut probe).is_ok().then_some(&probe);
        if let SocketOps::Missing(what) = SocketOps::of(probe) {
            return SocketOps::Missing(what);
        }
        match ReceiveBuffers::new(ring, RECEIVE_BUFFERS, RECEIVE_BUFFER_SIZE) {
            Ok(buffers) => {
                self.receive = Some(buffers);
                self.zero_copy_supported = probe.is_some_and(|p| p.is_supported(opcode::SendMsgZc::CODE));
                SocketOps::Supported
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot register io_uring receive buffers");
                SocketOps::Missing("IORING_REGISTER_PBUF_RING")
            }
        }
    }

    /// Whether [`NetOps::start`] succeeded.
    pub(crate) fn is_started(&self) -> bool {
        self.receive.is_some()
    }

    /// Arm a multishot receive on `fd`: every chunk that arrives completes it once more, in a receive buffer,
    /// until it ends (an error, the peer closing, the buffers running out, a cancel). `Err` of kind `WouldBlock`
    /// when the SQ is full, `Unsupported` unless [`NetOps::start`] succeeded.
    pub(crate) fn recv_multishot(&mut self, ring: &mut Ring, tag: u64, fd: RawFd) -> io::Result<NetOpId> {
        if self.receive.is_none() {
            return Err(io::ErrorKind::Unsupported.into());
        }
        if ring.sq_full() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let i = self.take_slot();
        let entry = opcode::RecvMulti::new(types::Fd(fd), RECEIVE_GROUP).build().user_data(NET_USER_DATA | i as u64);
        // SAFETY: the SQE names no memory of ours: the kernel writes only into the registered receive buffers,
        // which live until the ring is gone. `fd` is the caller's open socket; a closed one fails the op.
        match unsafe { ring.push_entry(&entry) } {
            Ok(()) => {
                self.started(i, tag, NetKind::Recv);
                Ok(NetOpId(i))
            }
            Err(()) => {
                self.free.push(i);
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }

    /// Ask the kernel to end op `id` (a multishot receive): its last completion comes without `more`. `Err` of
    /// kind `WouldBlock` when the SQ is full.
    pub(crate) fn cancel(&mut self, ring: &mut Ring, id: NetOpId) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(NET_USER_DATA | id.0 as u64).build().user_data(CANCEL_USER_DATA);
        // SAFETY: a cancellation names no memory, only the user data of the op to cancel.
        unsafe { ring.push_entry(&entry) }.map_err(|()| io::ErrorKind::WouldBlock.into())
    }

    /// Give a received chunk's buffer back to the kernel.
    pub(crate) fn recycle(&mut self, chunk: ReceivedChunk) {
        if let Some(r) = &mut self.receive {
            r.recycle(chunk);
        }
    }

    /// Queue one `sendmsg` of `pieces` (at most [`MAX_SEND_PIECES`]) on `fd`, zero copy when `zero_copy` allows it
    /// and the data is large enough. Data pieces must lie inside their pool buffers, which must be owned or being
    /// sent (not in flight for a storage op); `Err` names the problem, or says the SQ is full (`WouldBlock`).
    pub(crate) fn send<'a>(
        &mut self,
        ring: &mut Ring,
        pool: &mut BufferPool,
        tag: u64,
        fd: RawFd,
        pieces: impl IntoIterator<Item = SendPiece<'a>>,
        zero_copy: bool,
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
        let mut data_bytes = 0;
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
                    // Every piece, also a second one of a buffer this send reserved already (which the pool
                    // still reports sendable).
                    let fits = start
                        .checked_add(len)
                        .is_some_and(|end| pool.sendable_len(buffer).is_some_and(|allocated| end <= allocated));
                    if !fits {
                        failed = Some(io::Error::other("send piece outside its buffer (or the buffer is busy)"));
                        break;
                    }
                    if !slot.buffers.contains(&buffer) {
                        if pool.start_send(buffer).is_err() {
                            failed = Some(io::Error::other("send piece's buffer is busy"));
                            break;
                        }
                        slot.buffers.push(buffer);
                    }
                    layout[n] = (start, len, Some(buffer));
                    data_bytes += len;
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
        let zero_copy =
            zero_copy && self.zero_copy_supported && self.zero_copy_bytes > 0 && data_bytes >= self.zero_copy_bytes;
        let entry = if zero_copy {
            opcode::SendMsgZc::new(types::Fd(fd), &raw const slot.msg).flags(libc::MSG_NOSIGNAL as u32).build()
        } else {
            opcode::SendMsg::new(types::Fd(fd), &raw const slot.msg).flags(libc::MSG_NOSIGNAL as u32).build()
        }
        .user_data(NET_USER_DATA | i as u64);
        // SAFETY: the SQE names this slot's boxed `msghdr`, whose iovecs point into the slot's `stage` and `iov`
        // (not touched again until `complete`) and into pool buffers reserved for sending above (`start..start+len`
        // checked inside each); all stay valid until the op's last CQE (a zero-copy send's notification) is
        // reaped, and the engine waits for or cancels every socket op before dropping the slab or unmapping the
        // pool.
        match unsafe { ring.push_entry(&entry) } {
            Ok(()) => {
                self.started(i, tag, NetKind::Send);
                self.zero_copy_sends += u64::from(zero_copy);
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
            pool.finish_send(b);
        }
        slot.buffers.clear();
        self.free.push(i);
    }

    /// A CQE whose user data has [`NET_USER_DATA`]: keep its completion for [`NetOps::take_completions`] and, unless
    /// a multishot receive goes on, finish its op (buffers back to the pool).
    pub(crate) fn complete(&mut self, pool: &mut BufferPool, user_data: u64, res: i32, flags: u32) {
        if user_data & CANCEL_USER_DATA == CANCEL_USER_DATA {
            return;
        }
        let index = usize::try_from(user_data & !NET_USER_DATA).unwrap_or(usize::MAX);
        let Some(slot) = self.slots.get_mut(index).filter(|s| s.in_use) else {
            tracing::error!(user_data, "socket completion for no op in flight");
            return;
        };
        if slot.awaiting_notification {
            // A zero-copy send's notification (IORING_CQE_F_NOTIF): the kernel no longer reads its buffers.
            slot.awaiting_notification = false;
            self.finish(pool, index);
            return;
        }
        let result = u32::try_from(res).map_err(|_| io::Error::from_raw_os_error(res.saturating_neg()));
        let more = cqueue::more(flags);
        if slot.kind == NetKind::Send {
            // A zero-copy send's result with `more` has its notification to come: the send is done for its
            // connection, its buffers are not.
            slot.awaiting_notification = more;
            self.done.push(NetCompletion { tag: slot.tag, kind: NetKind::Send, result, received: None, more: false });
            if !more {
                self.finish(pool, index);
            }
            return;
        }
        let received = match (slot.kind, cqueue::buffer_select(flags), &self.receive) {
            (NetKind::Recv, Some(bid), Some(buffers)) => buffers.take(bid, result.as_ref().map_or(0, |&n| n as usize)),
            _ => None,
        };
        self.done.push(NetCompletion { tag: slot.tag, kind: slot.kind, result, received, more });
        if !more {
            self.finish(pool, index);
        }
    }

    /// Slot `index`'s op has ended: its buffers go back to the pool, the slot to the free list.
    fn finish(&mut self, pool: &mut BufferPool, index: usize) {
        let slot = &mut self.slots[index];
        slot.in_use = false;
        for &b in &slot.buffers {
            pool.finish_send(b);
        }
        slot.buffers.clear();
        self.in_flight -= 1;
        self.free.push(index);
    }

    /// Move the finished ops into `into`. A receive buffer a completion names that nobody recycles is lost to the
    /// kernel until the engine is dropped.
    pub(crate) fn take_completions(&mut self, into: &mut Vec<NetCompletion>) {
        into.append(&mut self.done);
    }

    /// Ask the kernel to cancel every op in flight (at drop: their CQEs still come, and are waited for).
    pub(crate) fn cancel_all(&mut self, ring: &mut Ring) {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.in_use && !slot.awaiting_notification {
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
