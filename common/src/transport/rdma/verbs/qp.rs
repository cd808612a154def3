//! [`QueuePair`] (reliable connected, created through RDMA CM on a [`CmId`] it then owns) and
//! [`SharedReceiveQueue`], with batched posting of [`SendWr`]s and [`RecvWr`]s: one batch is one chained
//! `ibv_post_send`/`ibv_post_recv` call. The work request arrays are built in scratch vectors the queue
//! keeps, so posting allocates only when a batch is larger than every batch before it.

use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi;

use super::cm::CmId;
use super::cq::{CompletionQueue, CqInner};
use super::error::RdmaError;
use super::mr::{PdInner, ProtectionDomain, Sge};
use super::mw::MwBind;

/// Queue sizes of a queue pair (`struct ibv_qp_cap`). After creation, [`QueuePair::caps`] holds what the
/// device granted (at least what was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCapabilities {
    /// Outstanding send queue work requests.
    pub max_send_wr: u32,
    /// Outstanding receive queue work requests (ignored with a shared receive queue).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Bytes a SEND may carry inline ([`SendWr::inline`]).
    pub max_inline_data: u32,
}

impl QpCapabilities {
    fn to_ffi(self) -> ffi::ibv_qp_cap {
        ffi::ibv_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
        }
    }

    fn from_ffi(c: &ffi::ibv_qp_cap) -> Self {
        QpCapabilities {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

/// What a queue pair is created with.
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// Where send work requests complete.
    pub send_cq: &'a CompletionQueue,
    /// Where receive work requests complete.
    pub recv_cq: &'a CompletionQueue,
    /// Receive from this shared receive queue instead of an own receive queue.
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Queue sizes.
    pub caps: QpCapabilities,
    /// Every send work request completes with a completion (otherwise only [`SendWr::signaled`] ones).
    pub sq_sig_all: bool,
}

/// A reliable connected queue pair (`struct ibv_qp`), created with `rdma_create_qp` on a [`CmId`] that it
/// owns from then on (connect, accept and disconnect go through [`QueuePair::cm_id_mut`]).
///
/// Dropping it destroys the queue pair (`rdma_destroy_qp`) and then the id. After the queue pair is
/// destroyed the device no longer touches memory named by its outstanding work requests; receive work
/// requests posted to a shared receive queue stay outstanding until that queue is destroyed.
pub struct QueuePair {
    // Dropped (destroyed) after the QP, which Drop destroys first.
    id: CmId,
    qp: NonNull<ffi::ibv_qp>,
    caps: QpCapabilities,
    scratch: Scratch,
    _pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Arc<SrqInner>>,
}

// SAFETY: libibverbs is thread-safe; the scratch vectors (raw pointers inside) are private and only used
// within one `&mut self` call.
unsafe impl Send for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the QP was created by rdma_create_qp on this id and is destroyed once, before the id.
        unsafe { ffi::rdma_destroy_qp(self.id.as_ptr()) };
    }
}

impl QueuePair {
    /// Create a reliable connected queue pair on `id` (`rdma_create_qp`) in `pd`. The id must have a
    /// device (a connect request's id, or one whose route is resolved) equal to the domain's. On failure
    /// the id comes back, e.g. to reject the connect request with.
    pub fn create(id: CmId, pd: &ProtectionDomain, attr: &QpInitAttr<'_>) -> Result<QueuePair, (CmId, RdmaError)> {
        // SAFETY: all-zero is a valid ibv_qp_init_attr (null pointers, zero sizes).
        let mut init: ffi::ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        init.send_cq = attr.send_cq.inner.cq.as_ptr();
        init.recv_cq = attr.recv_cq.inner.cq.as_ptr();
        init.srq = attr.srq.map_or(std::ptr::null_mut(), |s| s.inner.srq.as_ptr());
        init.cap = attr.caps.to_ffi();
        init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = i32::from(attr.sq_sig_all);
        // SAFETY: the id, PD, CQs and SRQ are live (the QP keeps Arcs of all but the id, which it owns);
        // librdmacm checks that the PD belongs to the id's device.
        let rc = unsafe { ffi::rdma_create_qp(id.as_ptr(), pd.inner.pd.as_ptr(), &mut init) };
        if rc != 0 {
            return Err((id, RdmaError::last("rdma_create_qp", format!("{:?}", attr.caps))));
        }
        // SAFETY: on success rdma_create_qp stored the new QP in the id.
        let qp = unsafe { (*id.as_ptr()).qp };
        let Some(qp) = NonNull::new(qp) else {
            return Err((id, RdmaError::verb("rdma_create_qp", libc::EINVAL, "no QP on the id")));
        };
        Ok(QueuePair {
            id,
            qp,
            caps: QpCapabilities::from_ffi(&init.cap),
            scratch: Scratch::default(),
            _pd: pd.inner.clone(),
            _send_cq: attr.send_cq.inner.clone(),
            _recv_cq: attr.recv_cq.inner.clone(),
            _srq: attr.srq.map(|s| s.inner.clone()),
        })
    }

    /// The RDMA CM id the queue pair lives on.
    pub fn cm_id(&self) -> &CmId {
        &self.id
    }

    /// The RDMA CM id, to connect, accept or disconnect.
    pub fn cm_id_mut(&mut self) -> &mut CmId {
        &mut self.id
    }

    /// The queue pair number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live; qp_num is fixed at creation.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The sizes the device granted.
    pub fn caps(&self) -> QpCapabilities {
        self.caps
    }

    /// Post `wrs` to the send queue in one chained `ibv_post_send`.
    ///
    /// On error, [`RdmaError::Post`] says how many work requests (the first `posted`) were posted; those
    /// will complete, the rest were not posted.
    ///
    /// # Safety
    ///
    /// For every posted work request, until its completion is polled (or the queue pair is destroyed,
    /// which ends them all):
    /// - the memory regions its scatter/gather entries were cut from stay registered and alive (not
    ///   dropped), unless the request is [`SendWr::inline`] (the data is copied at post time);
    /// - the memory window and region of a [`SendOpcode::BindMw`] stay alive;
    /// - the local memory it writes (the destination of an [`SendOpcode::RdmaRead`]) is not accessed
    ///   through any Rust reference, and the memory it reads (SEND and RDMA WRITE sources) is not written.
    ///
    /// An unsignaled work request completes when a later signaled one on the same queue completes.
    /// Remote addresses and rkeys need no such promise: a wrong one fails the request at the peer.
    pub unsafe fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), RdmaError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let base = self.scratch.build_send(wrs)?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: `base` heads a chain of `wrs.len()` valid work requests in our scratch vectors (alive for
        // this call); the caller upholds the memory contract above for the regions they name.
        let rc = unsafe { ffi::nvmf_ibv_post_send(self.qp.as_ptr(), base, &mut bad) };
        let result = self.scratch.result("ibv_post_send", rc, base.cast_const(), bad.cast_const(), wrs.len());
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err(RdmaError::Post { posted, .. }) => *posted,
            Err(_) => 0,
        };
        for wr in &wrs[..posted.min(wrs.len())] {
            if let SendOpcode::BindMw(b) = wr.opcode {
                // Providers name a type 2 window in the next bind by the rkey in its `struct ibv_mw` (rxe
                // refuses the bind when that is not the kernel's current key), so a posted bind moves it to
                // the new key, as `ibv_bind_mw` does for type 1 windows.
                // SAFETY: the window is alive (the bind borrows it) and `MemoryWindow` is not Sync, so no other
                // thread reads or writes its struct; rkey is a plain u32 field.
                unsafe { (*b.mw.as_ptr()).rkey = b.rkey };
            }
        }
        result
    }

    /// Post `wrs` to the receive queue in one chained `ibv_post_recv` (errors as in
    /// [`post_send`](Self::post_send)).
    ///
    /// # Safety
    ///
    /// Until each posted request's completion is polled (or the queue pair is destroyed), the regions its
    /// scatter/gather entries were cut from stay registered and alive and that memory is not accessed
    /// through any Rust reference (the device writes received data into it).
    pub unsafe fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), RdmaError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let base = self.scratch.build_recv(wrs)?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in post_send, for a chain of receive work requests.
        let rc = unsafe { ffi::nvmf_ibv_post_recv(self.qp.as_ptr(), base, &mut bad) };
        self.scratch.result("ibv_post_recv", rc, base.cast_const(), bad.cast_const(), wrs.len())
    }
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num())
            .field("caps", &self.caps)
            .field("id", &self.id)
            .finish()
    }
}

/// A shared receive queue (`struct ibv_srq`): receive buffers many queue pairs of one domain draw from.
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
    scratch: Scratch,
}

pub(crate) struct SrqInner {
    pub(crate) srq: NonNull<ffi::ibv_srq>,
    _pd: Arc<PdInner>,
}

// SAFETY: libibverbs is thread-safe; destroyed once in Drop.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

// SAFETY: the scratch vectors are private and used only within one `&mut self` call.
unsafe impl Send for SharedReceiveQueue {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq; every QP using it holds an Arc<SrqInner>, so none remains.
        let rc = unsafe { ffi::ibv_destroy_srq(self.srq.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno(rc), "ibv_destroy_srq failed");
        }
    }
}

impl ProtectionDomain {
    /// Create a shared receive queue (`ibv_create_srq`) of `max_wr` work requests with up to `max_sge`
    /// entries each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue, RdmaError> {
        // SAFETY: all-zero is a valid ibv_srq_init_attr.
        let mut init: ffi::ibv_srq_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        // SAFETY: the PD is live (the SRQ keeps an Arc).
        let srq = unsafe { ffi::ibv_create_srq(self.inner.pd.as_ptr(), &mut init) };
        let srq = NonNull::new(srq)
            .ok_or_else(|| RdmaError::last("ibv_create_srq", format!("max_wr {max_wr} max_sge {max_sge}")))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner { srq, _pd: self.inner.clone() }),
            scratch: Scratch::default(),
        })
    }
}

impl SharedReceiveQueue {
    /// Post receive work requests in one chained `ibv_post_srq_recv` (errors as in
    /// [`QueuePair::post_send`]).
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_recv`], except that the requests end when their completions are polled or
    /// when this shared receive queue is destroyed (not when a queue pair is).
    pub unsafe fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), RdmaError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let base = self.scratch.build_recv(wrs)?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in QueuePair::post_recv.
        let rc = unsafe { ffi::nvmf_ibv_post_srq_recv(self.inner.srq.as_ptr(), base, &mut bad) };
        self.scratch.result("ibv_post_srq_recv", rc, base.cast_const(), bad.cast_const(), wrs.len())
    }
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue").finish_non_exhaustive()
    }
}

/// The operation of a send queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOpcode<'a> {
    /// SEND: the peer receives the data into a posted receive.
    Send,
    /// SEND with invalidate: as SEND, and the peer invalidates `rkey` (a memory window or fast-registered
    /// region of its own) before completing the receive.
    SendWithInvalidate(u32),
    /// RDMA WRITE the local data to the peer's `remote_addr` (registered with remote write under `rkey`).
    RdmaWrite {
        /// The peer's address.
        remote_addr: u64,
        /// The peer's key.
        rkey: u32,
    },
    /// RDMA READ the peer's `remote_addr` (registered with remote read under `rkey`) into the local
    /// scatter/gather list.
    RdmaRead {
        /// The peer's address.
        remote_addr: u64,
        /// The peer's key.
        rkey: u32,
    },
    /// Bind a type 2 memory window over part of a region (no scatter/gather list); see
    /// [`super::MemoryWindow::bind`].
    BindMw(MwBind<'a>),
    /// Invalidate one of our own rkeys (a memory window's) locally.
    LocalInvalidate(u32),
}

/// A send queue work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: SendOpcode<'a>,
    /// Local memory: the data sent or written, or the destination of a read.
    pub sges: &'a [Sge],
    /// Produce a completion (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
    /// Copy the data into the work request at post time (`IBV_SEND_INLINE`; SEND and RDMA WRITE only, at
    /// most [`QpCapabilities::max_inline_data`] bytes).
    pub inline: bool,
    /// Solicit an event at the peer (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

impl<'a> SendWr<'a> {
    /// A signaled work request with no other flags.
    pub fn new(wr_id: u64, opcode: SendOpcode<'a>, sges: &'a [Sge]) -> Self {
        SendWr { wr_id, opcode, sges, signaled: true, inline: false, solicited: false }
    }

    fn flags(&self) -> u32 {
        let mut f = 0;
        if self.signaled {
            f |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if self.inline {
            f |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        if self.solicited {
            f |= ffi::ibv_send_flags::IBV_SEND_SOLICITED.0;
        }
        f
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sges: &'a [Sge],
}

/// Work request arrays handed to the post verbs, reused between calls.
#[derive(Default)]
struct Scratch {
    send: Vec<ffi::ibv_send_wr>,
    recv: Vec<ffi::ibv_recv_wr>,
    sge: Vec<ffi::ibv_sge>,
}

fn num_sge(n: usize) -> Result<i32, RdmaError> {
    i32::try_from(n).map_err(|_| RdmaError::invalid("work request", format!("{n} scatter/gather entries")))
}

impl Scratch {
    fn fill_sges<'a>(&mut self, lists: impl Iterator<Item = &'a [Sge]> + Clone) {
        self.sge.clear();
        self.sge.reserve(lists.clone().map(<[Sge]>::len).sum());
        for list in lists {
            self.sge.extend(list.iter().map(|s| s.to_ffi()));
        }
    }

    /// Fill the send chain; returns its head. Valid until the next build.
    fn build_send(&mut self, wrs: &[SendWr<'_>]) -> Result<*mut ffi::ibv_send_wr, RdmaError> {
        self.fill_sges(wrs.iter().map(|w| w.sges));
        self.send.clear();
        self.send.reserve(wrs.len());
        let sge_base = self.sge.as_mut_ptr();
        // Capacity is reserved: the elements will sit at base + i, so each can point at its successor.
        let base = self.send.as_mut_ptr();
        let mut at = 0;
        for (i, wr) in wrs.iter().enumerate() {
            // SAFETY: all-zero is a valid ibv_send_wr (integers, null pointers, plain unions).
            let mut w: ffi::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
            w.wr_id = wr.wr_id;
            w.next = if i + 1 < wrs.len() { base.wrapping_add(i + 1) } else { std::ptr::null_mut() };
            // `at` <= self.sge.len(): the sges were laid out in this order above.
            w.sg_list = if wr.sges.is_empty() { std::ptr::null_mut() } else { sge_base.wrapping_add(at) };
            w.num_sge = num_sge(wr.sges.len())?;
            at += wr.sges.len();
            w.send_flags = wr.flags();
            match wr.opcode {
                SendOpcode::Send => w.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND,
                SendOpcode::SendWithInvalidate(rkey) => {
                    w.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                    w.__bindgen_anon_1.invalidate_rkey = rkey;
                    // Soft-iWARP's provider (libsiw) takes the key to invalidate from `wr.rdma.rkey`, not from
                    // `invalidate_rkey`; the other providers ignore `wr.rdma` for a SEND.
                    w.wr.rdma.rkey = rkey;
                }
                SendOpcode::RdmaWrite { remote_addr, rkey } => {
                    w.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
                SendOpcode::RdmaRead { remote_addr, rkey } => {
                    w.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_READ;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
                SendOpcode::BindMw(b) => {
                    w.opcode = ffi::ibv_wr_opcode::IBV_WR_BIND_MW;
                    // The anonymous union of `bind_mw` and `tso` (ffi.rs lists verbs.h's anonymous members).
                    w.__bindgen_anon_2.bind_mw.mw = b.mw.as_ptr();
                    w.__bindgen_anon_2.bind_mw.rkey = b.rkey;
                    w.__bindgen_anon_2.bind_mw.bind_info = ffi::ibv_mw_bind_info {
                        mr: b.mr.as_ptr(),
                        addr: b.addr,
                        length: b.length,
                        mw_access_flags: b.access,
                    };
                }
                SendOpcode::LocalInvalidate(rkey) => {
                    w.opcode = ffi::ibv_wr_opcode::IBV_WR_LOCAL_INV;
                    w.__bindgen_anon_1.invalidate_rkey = rkey;
                }
            }
            self.send.push(w);
        }
        Ok(self.send.as_mut_ptr())
    }

    /// Fill the receive chain; returns its head. Valid until the next build.
    fn build_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<*mut ffi::ibv_recv_wr, RdmaError> {
        self.fill_sges(wrs.iter().map(|w| w.sges));
        self.recv.clear();
        self.recv.reserve(wrs.len());
        let sge_base = self.sge.as_mut_ptr();
        let base = self.recv.as_mut_ptr();
        let mut at = 0;
        for (i, wr) in wrs.iter().enumerate() {
            let sg_list = if wr.sges.is_empty() { std::ptr::null_mut() } else { sge_base.wrapping_add(at) };
            at += wr.sges.len();
            self.recv.push(ffi::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: if i + 1 < wrs.len() { base.wrapping_add(i + 1) } else { std::ptr::null_mut() },
                sg_list,
                num_sge: num_sge(wr.sges.len())?,
            });
        }
        Ok(self.recv.as_mut_ptr())
    }

    /// Turn a post verb's return code and `bad_wr` into a result naming how many were posted.
    fn result<T>(
        &self,
        verb: &'static str,
        rc: i32,
        base: *const T,
        bad: *const T,
        total: usize,
    ) -> Result<(), RdmaError> {
        if rc == 0 {
            return Ok(());
        }
        // `bad` points into our array (or is null if the provider did not set it: assume none posted).
        let posted = if bad.is_null() {
            0
        } else {
            (bad as usize).saturating_sub(base as usize) / std::mem::size_of::<T>().max(1)
        };
        Err(RdmaError::Post { verb, errno: super::Errno(rc), posted: posted.min(total), total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::rdma::verbs::AccessFlags;

    fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    #[test]
    fn ffi_send_wr_layout_matches_verbs_h() {
        // struct ibv_send_wr is 128 bytes on LP64, and the providers are built against that; the bindings are
        // whatever bindgen made of this machine's headers, so check.
        assert_eq!(std::mem::size_of::<ffi::ibv_send_wr>(), 128);
        assert_eq!(std::mem::offset_of!(ffi::ibv_send_wr, opcode), 28);
        assert_eq!(std::mem::offset_of!(ffi::ibv_send_wr, __bindgen_anon_1), 36);
        assert_eq!(std::mem::offset_of!(ffi::ibv_send_wr, wr), 40);
        assert_eq!(std::mem::size_of::<ffi::ibv_recv_wr>(), 32);
    }

    #[test]
    fn a_send_batch_is_one_chain_with_its_sges_in_order() {
        let a = [sge(0x1000, 64, 1), sge(0x2000, 4096, 2)];
        let b = [sge(0x3000, 512, 3)];
        let wrs = [
            SendWr::new(10, SendOpcode::RdmaWrite { remote_addr: 0xdead_0000, rkey: 0x77 }, &a),
            SendWr { inline: true, ..SendWr::new(11, SendOpcode::Send, &b) },
            SendWr { signaled: false, solicited: true, ..SendWr::new(12, SendOpcode::SendWithInvalidate(0x99), &[]) },
            SendWr::new(13, SendOpcode::RdmaRead { remote_addr: 0xbeef_0000, rkey: 0x88 }, &b),
        ];
        let mut s = Scratch::default();
        let head = s.build_send(&wrs).unwrap();
        assert_eq!(head, s.send.as_mut_ptr());
        assert_eq!(s.sge.len(), 4);

        // Walk the chain as the provider would.
        let mut seen = Vec::new();
        let mut p = head.cast_const();
        while !p.is_null() {
            // SAFETY: the chain points into `s.send`, alive and unchanged.
            let w = unsafe { &*p };
            let sges: Vec<(u64, u32, u32)> = if w.sg_list.is_null() {
                Vec::new()
            } else {
                let n = usize::try_from(w.num_sge).unwrap();
                // SAFETY: a non-null sg_list points at num_sge entries of `s.sge`.
                unsafe { std::slice::from_raw_parts(w.sg_list, n) }.iter().map(|g| (g.addr, g.length, g.lkey)).collect()
            };
            // SAFETY: plain unions of integers.
            let (rdma, inv) = unsafe { ((w.wr.rdma.remote_addr, w.wr.rdma.rkey), w.__bindgen_anon_1.invalidate_rkey) };
            seen.push((w.wr_id, w.opcode, w.send_flags, sges, rdma, inv));
            p = w.next;
        }
        let signaled = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let inline = ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        let solicited = ffi::ibv_send_flags::IBV_SEND_SOLICITED.0;
        use ffi::ibv_wr_opcode::*;
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0].0, 10);
        assert_eq!(seen[0].1, IBV_WR_RDMA_WRITE);
        assert_eq!(seen[0].2, signaled);
        assert_eq!(seen[0].3, vec![(0x1000, 64, 1), (0x2000, 4096, 2)]);
        assert_eq!(seen[0].4, (0xdead_0000, 0x77));
        assert_eq!((seen[1].0, seen[1].1, seen[1].2), (11, IBV_WR_SEND, signaled | inline));
        assert_eq!(seen[1].3, vec![(0x3000, 512, 3)]);
        assert_eq!((seen[2].0, seen[2].1, seen[2].2, seen[2].5), (12, IBV_WR_SEND_WITH_INV, solicited, 0x99));
        assert_eq!(seen[2].4 .1, 0x99, "the key where libsiw reads it too");
        assert!(seen[2].3.is_empty());
        assert_eq!((seen[3].0, seen[3].1, seen[3].4), (13, IBV_WR_RDMA_READ, (0xbeef_0000, 0x88)));
        assert_eq!(seen[3].3, vec![(0x3000, 512, 3)]);

        // A later, smaller batch reuses the vectors and ends its chain where it should.
        let head = s.build_send(&wrs[1..2]).unwrap();
        // SAFETY: as above.
        assert!(unsafe { (*head).next }.is_null());
    }

    #[test]
    fn memory_window_binds_and_local_invalidates_fill_their_unions() {
        let bind = MwBind::for_test(0x4000, 8192, 0x1234_5601, AccessFlags::REMOTE_WRITE.0);
        let wrs =
            [SendWr::new(1, SendOpcode::BindMw(bind), &[]), SendWr::new(2, SendOpcode::LocalInvalidate(0x42), &[])];
        let mut s = Scratch::default();
        let head = s.build_send(&wrs).unwrap();
        // SAFETY: the chain points into `s.send`; the unions hold plain data.
        let (w0, w1) = unsafe { (&*head, &*(*head).next) };
        assert_eq!((w0.opcode, w0.num_sge, w0.sg_list), (ffi::ibv_wr_opcode::IBV_WR_BIND_MW, 0, std::ptr::null_mut()));
        // SAFETY: the bind_mw member was written for this opcode.
        let b = unsafe { w0.__bindgen_anon_2.bind_mw };
        assert_eq!(
            (b.rkey, b.bind_info.addr, b.bind_info.length, b.bind_info.mw_access_flags),
            (0x1234_5601, 0x4000, 8192, 2)
        );
        assert_eq!(w1.opcode, ffi::ibv_wr_opcode::IBV_WR_LOCAL_INV);
        // SAFETY: plain integer union.
        assert_eq!(unsafe { w1.__bindgen_anon_1.invalidate_rkey }, 0x42);
        assert!(w1.next.is_null());
    }

    #[test]
    fn a_recv_batch_is_one_chain() {
        let bufs: Vec<[Sge; 1]> = (0..5u32).map(|i| [sge(0x10_000 + u64::from(i) * 0x1000, 4096, 5)]).collect();
        let wrs: Vec<RecvWr<'_>> = bufs.iter().enumerate().map(|(i, s)| RecvWr { wr_id: i as u64, sges: s }).collect();
        let mut s = Scratch::default();
        let mut p = s.build_recv(&wrs).unwrap().cast_const();
        let mut n = 0u64;
        while !p.is_null() {
            // SAFETY: the chain points into `s.recv`; sg_list at one entry of `s.sge`.
            let (w, g) = unsafe { (&*p, &*(*p).sg_list) };
            assert_eq!((w.wr_id, w.num_sge, g.addr, g.length, g.lkey), (n, 1, 0x10_000 + n * 0x1000, 4096, 5));
            n += 1;
            p = w.next;
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn a_refused_work_request_reports_how_many_were_posted() {
        let s = Scratch::default();
        let arr = [0u64; 8];
        let base = arr.as_ptr();
        let e = s.result("ibv_post_send", libc::ENOMEM, base, base.wrapping_add(3), 8).unwrap_err();
        assert!(matches!(e, RdmaError::Post { posted: 3, total: 8, .. }), "{e:?}");
        assert_eq!(e.to_string(), "ibv_post_send failed at work request 3 of 8: ENOMEM (Cannot allocate memory)");
        let e = s.result("ibv_post_recv", libc::EINVAL, base, std::ptr::null(), 8).unwrap_err();
        assert!(matches!(e, RdmaError::Post { posted: 0, .. }));
        assert!(s.result("ibv_post_recv", 0, base, std::ptr::null(), 8).is_ok());
    }

    #[test]
    fn caps_convert_field_for_field() {
        let c = QpCapabilities { max_send_wr: 1, max_recv_wr: 2, max_send_sge: 3, max_recv_sge: 4, max_inline_data: 5 };
        assert_eq!(QpCapabilities::from_ffi(&c.to_ffi()), c);
    }
}
