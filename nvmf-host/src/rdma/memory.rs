//! [`QueueMemory`]: the registered memory of one host NVMe/RDMA queue pair, and the only place in the host
//! that posts work requests (the `unsafe` side of `nvmf_common`'s verbs contract lives here and nowhere else).
//!
//! What it owns, per queue (one pool per queue rather than per device: the queue's thread is its only user,
//! so nothing is locked, and a queue's teardown frees exactly its memory):
//! - the queue pair (first field: destroyed before any memory its work requests name) and its completion
//!   queue and channel;
//! - one region of SQE capsule buffers (64 bytes per command slot; in-capsule data goes as a second
//!   scatter/gather entry straight from the slot's data buffer, so it is copied once);
//! - one region of receive buffers for the 16-byte responses, all posted at connect and reposted in batches;
//! - per command slot a data buffer, registered on first use and re-registered only when a larger transfer
//!   comes (a fixed workload registers once). With memory windows the buffer is registered with local access
//!   only and a type 2 window bound per command gives the controller remote write (reads) or remote read
//!   (writes) over exactly the transfer, until the controller's send with invalidate or our local invalidate
//!   takes it away. Without them, each slot has one region per direction registered with just that remote
//!   access, valid for the queue's life.
//!
//! Soundness does not depend on the caller: this module records which slots have a SEND in flight (capsule
//! and in-capsule data), a window bound (remote access open) or a receive posted, updates that from the
//! completions it polls, and refuses to hand out, rewrite or re-register memory that the device or the
//! controller may still touch.
//!
//! Runs on the queue's thread; never blocks (posting and polling verbs do not).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};

use nvmf_common::nvme::cqe::CQE_SIZE;
use nvmf_common::nvme::sqe::SQE_SIZE;
use nvmf_common::transport::rdma::verbs::{
    inc_rkey, AccessFlags, CmId, CompletionChannel, CompletionQueue, Device, MemoryRegion, MemoryWindow,
    ProtectionDomain, QpCapabilities, QpInitAttr, QueuePair, RdmaError, RecvWr, SendOpcode, SendWr, WorkCompletion,
};

use crate::error::HostError;

/// Kinds of work request, in the upper half of a `wr_id` (the slot index is the lower half).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WrKind {
    /// The capsule SEND of a command.
    Send = 1,
    /// A receive for a response.
    Recv = 2,
    /// A memory window bind (unsignaled: seen only when it fails).
    Bind = 3,
    /// A local invalidate of a command's window.
    Invalidate = 4,
}

fn wr_id(kind: WrKind, index: usize) -> u64 {
    ((kind as u64) << 32) | index as u64
}

/// The kind and slot (or receive buffer) index of a work completion.
pub(super) fn decode_wr_id(id: u64) -> Option<(WrKind, usize)> {
    let kind = match id >> 32 {
        1 => WrKind::Send,
        2 => WrKind::Recv,
        3 => WrKind::Bind,
        4 => WrKind::Invalidate,
        _ => return None,
    };
    Some((kind, usize::try_from(id & 0xFFFF_FFFF).ok()?))
}

/// Which way a command's data moves over RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transfer {
    /// The controller RDMA READs it (writes).
    ToController,
    /// The controller RDMA WRITEs it (reads).
    FromController,
}

impl Transfer {
    fn region_index(self, windows: bool) -> usize {
        // With windows one local-only region serves both directions.
        match (windows, self) {
            (true, _) | (false, Transfer::ToController) => 0,
            (false, Transfer::FromController) => 1,
        }
    }

    fn remote_access(self) -> AccessFlags {
        match self {
            Transfer::ToController => AccessFlags::REMOTE_READ,
            Transfer::FromController => AccessFlags::REMOTE_WRITE,
        }
    }
}

/// One capsule to post: the slot, how many in-capsule data bytes follow the SQE, and the window to bind first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Capsule {
    /// The command slot.
    pub index: usize,
    /// In-capsule data bytes (from the slot's data buffer), 0 for none.
    pub in_capsule: u32,
    /// A keyed transfer of this many bytes in this direction: bind the slot's window over it.
    pub keyed: Option<(Transfer, u32)>,
}

/// Capsules posted per `post_send` call (two work requests each at most).
const POST_CHUNK: usize = 16;
/// Smallest data buffer registered (transfers are rounded up to a power of two from here).
const MIN_DATA_BUFFER: usize = 4096;

/// See the module docs.
pub(super) struct QueueMemory {
    qp: QueuePair,
    cq: CompletionQueue,
    channel: CompletionChannel,
    capsules: MemoryRegion,
    responses: MemoryRegion,
    /// Per slot, with memory windows; empty without. Before `data`: a window still bound when the queue
    /// failed (the controller never invalidated it) keeps its region from being deregistered (EINVAL, and the
    /// protection domain then leaks); deallocating the windows first unbinds them.
    windows: Vec<MemoryWindow>,
    /// Per slot: one region (windows) or one per [`Transfer`] direction.
    data: Vec<[Option<MemoryRegion>; 2]>,
    /// Window rkey without its 8-bit tag → slot.
    window_of: HashMap<u32, usize>,
    pd: ProtectionDomain,
    qid: u16,
    /// Per slot: a SEND naming its capsule (and in-capsule data) has not completed.
    sending: Vec<bool>,
    /// Per slot: its window is bound (the controller may access the data buffer).
    bound: Vec<bool>,
    /// Per receive buffer: a receive is posted on it.
    receiving: Vec<bool>,
}

impl std::fmt::Debug for QueueMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMemory")
            .field("qid", &self.qid)
            .field("qp", &self.qp)
            .field("slots", &self.data.len())
            .field("windows", &!self.windows.is_empty())
            .finish_non_exhaustive()
    }
}

/// A closure turning a verbs error into [`HostError::Rdma`] for queue `qid`.
pub(super) fn rdma(qid: u16, what: &'static str) -> impl Fn(RdmaError) -> HostError {
    move |e| HostError::Rdma { qid, what, message: e.to_string() }
}

impl QueueMemory {
    /// Create the completion channel and queue, the RC queue pair on `id` and the registered memory for
    /// `slots` commands and `receives` responses; `windows`: bind a type 2 memory window per command.
    pub(super) fn new(
        qid: u16,
        id: CmId,
        device: &Device,
        slots: usize,
        receives: usize,
        windows: bool,
    ) -> Result<Self, HostError> {
        let err = |what| rdma(qid, what);
        let pd = device.alloc_pd().map_err(err("allocating a protection domain"))?;
        let channel = device.create_comp_channel().map_err(err("creating a completion channel"))?;
        // Per slot: a bind, a SEND and a local invalidate at most.
        let send_wr = u32::try_from(3 * slots + 1).unwrap_or(u32::MAX);
        let recv_wr = u32::try_from(receives).unwrap_or(u32::MAX);
        let cq = device
            .create_cq(send_wr.saturating_add(recv_wr), Some(&channel), 0)
            .map_err(err("creating a completion queue"))?;
        let caps = QpCapabilities {
            max_send_wr: send_wr,
            max_recv_wr: recv_wr,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr { send_cq: &cq, recv_cq: &cq, srq: None, caps, sq_sig_all: false };
        let qp = QueuePair::create(id, &pd, &init).map_err(|(_, e)| err("creating the queue pair")(e))?;
        let capsules = pd
            .register(vec![0u8; SQE_SIZE * slots].into_boxed_slice(), AccessFlags::NONE)
            .map_err(err("registering capsule buffers"))?;
        let responses = pd
            .register(vec![0u8; CQE_SIZE * receives].into_boxed_slice(), AccessFlags::LOCAL_WRITE)
            .map_err(err("registering response buffers"))?;
        let mut window_list = Vec::new();
        let mut window_of = HashMap::new();
        if windows {
            for index in 0..slots {
                let mw = pd.alloc_mw().map_err(err("allocating a memory window"))?;
                window_of.insert(mw.rkey() >> 8, index);
                window_list.push(mw);
            }
        }
        Ok(QueueMemory {
            qp,
            cq,
            channel,
            capsules,
            responses,
            data: (0..slots).map(|_| [None, None]).collect(),
            windows: window_list,
            window_of,
            pd,
            qid,
            sending: vec![false; slots],
            bound: vec![false; slots],
            receiving: vec![false; receives],
        })
    }

    /// The RDMA CM id the queue pair is on.
    pub(super) fn cm_id_mut(&mut self) -> &mut CmId {
        self.qp.cm_id_mut()
    }

    /// Whether commands get a memory window each.
    pub(super) fn has_windows(&self) -> bool {
        !self.windows.is_empty()
    }

    /// The completion channel's fd (readable when an armed completion queue got a completion).
    pub(super) fn completion_fd(&self) -> RawFd {
        self.channel.as_raw_fd()
    }

    fn err(&self, what: &'static str) -> impl Fn(RdmaError) -> HostError {
        rdma(self.qid, what)
    }

    fn misuse(&self, message: String) -> HostError {
        HostError::Rdma { qid: self.qid, what: "queue memory", message }
    }

    /// Make slot `index`'s data buffer for `transfer` hold at least `len` bytes and, when `src` is given,
    /// copy it there (one memcpy). Refused while a SEND or window still covers the slot.
    pub(super) fn stage(
        &mut self,
        index: usize,
        transfer: Transfer,
        len: usize,
        src: Option<&[u8]>,
    ) -> Result<(), HostError> {
        if self.sending[index] || self.bound[index] {
            return Err(self.misuse(format!("slot {index} staged while the device may still access it")));
        }
        let windows = self.has_windows();
        let r = transfer.region_index(windows);
        let need = len.max(MIN_DATA_BUFFER).next_power_of_two();
        if self.data[index][r].as_ref().is_none_or(|mr| mr.len() < need) {
            let access = if windows {
                AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND
            } else if transfer == Transfer::FromController {
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
            } else {
                AccessFlags::REMOTE_READ
            };
            // Drop the old region first: the slot's memory is not in use (checked above).
            self.data[index][r] = None;
            let mr = self
                .pd
                .register(vec![0u8; need].into_boxed_slice(), access)
                .map_err(self.err("registering a data buffer"))?;
            self.data[index][r] = Some(mr);
        }
        if let Some(src) = src {
            let Some(mr) = self.data[index][r].as_mut() else { return Ok(()) };
            if windows {
                // SAFETY: no SEND names this region (`sending` is false) and its window is not bound, so
                // neither the device nor the controller can access it; the region is the slot's alone.
                unsafe { mr.as_mut_slice()[..src.len()].copy_from_slice(src) };
            } else {
                // The region's rkey stays valid for the queue's life: a misbehaving controller could write
                // it at any time, so only volatile copies touch it.
                mr.write_at(0, src).map_err(rdma(self.qid, "copying write data"))?;
            }
        }
        Ok(())
    }

    /// Copy the first `dst.len()` bytes of slot `index`'s data buffer out (after a read completed).
    pub(super) fn copy_out(&self, index: usize, transfer: Transfer, dst: &mut [u8]) -> Result<(), HostError> {
        if self.sending[index] || self.bound[index] {
            return Err(self.misuse(format!("slot {index} read while the controller may still write it")));
        }
        let windows = self.has_windows();
        let Some(mr) = self.data[index][transfer.region_index(windows)].as_ref() else {
            return Err(self.misuse(format!("slot {index} has no data buffer")));
        };
        if mr.len() < dst.len() {
            return Err(self.misuse(format!("slot {index}'s buffer is shorter than {} bytes", dst.len())));
        }
        if windows {
            // SAFETY: the window was invalidated (`bound` is false) and no SEND names the region, so nothing
            // writes it while the slice lives.
            dst.copy_from_slice(unsafe { &mr.as_slice()[..dst.len()] });
            Ok(())
        } else {
            mr.read_at(0, dst).map_err(rdma(self.qid, "copying read data"))
        }
    }

    /// The keyed SGL address and key for `len` bytes of slot `index`'s staged buffer: with windows, the key
    /// the next bind ([`post_capsules`](Self::post_capsules)) gives the slot's window.
    pub(super) fn keyed(&self, index: usize, transfer: Transfer, len: usize) -> Result<(u64, u32), HostError> {
        let Some(mr) = self.data[index][transfer.region_index(self.has_windows())].as_ref() else {
            return Err(self.misuse(format!("slot {index} has no data buffer")));
        };
        let (addr, rkey) = mr.remote(0, len).map_err(self.err("keyed SGL"))?;
        match self.windows.get(index) {
            Some(mw) => Ok((addr, inc_rkey(mw.rkey()))),
            None => Ok((addr, rkey)),
        }
    }

    /// Write slot `index`'s SQE into its capsule buffer.
    pub(super) fn write_capsule(&mut self, index: usize, sqe: &[u8; SQE_SIZE]) -> Result<(), HostError> {
        if self.sending[index] {
            return Err(self.misuse(format!("capsule {index} rewritten while its SEND is in flight")));
        }
        self.capsules.write_at(index * SQE_SIZE, sqe).map_err(self.err("writing a capsule"))
    }

    /// The response in receive buffer `index` (after its receive completed).
    pub(super) fn response(&self, index: usize) -> Result<[u8; CQE_SIZE], HostError> {
        if self.receiving.get(index).is_none_or(|&r| r) {
            return Err(self.misuse(format!("response buffer {index} read while a receive is posted on it")));
        }
        let mut b = [0u8; CQE_SIZE];
        self.responses.read_at(index * CQE_SIZE, &mut b).map_err(self.err("reading a response"))?;
        Ok(b)
    }

    /// Post receives on the response buffers `indices` (one `post_recv`).
    pub(super) fn post_receives(&mut self, indices: &[usize]) -> Result<(), HostError> {
        let len = u32::try_from(CQE_SIZE).unwrap_or(16);
        for chunk in indices.chunks(POST_CHUNK * 2) {
            let filler = self.responses.sge(0, len).map_err(self.err("receive SGE"))?;
            let mut sges = [[filler]; POST_CHUNK * 2];
            for (sge, &i) in sges.iter_mut().zip(chunk) {
                if self.receiving.get(i).is_none_or(|&r| r) {
                    return Err(self.misuse(format!("receive buffer {i} posted twice")));
                }
                sge[0] = self.responses.sge(i * CQE_SIZE, len).map_err(self.err("receive SGE"))?;
            }
            let mut wrs = [RecvWr { wr_id: 0, sges: &[] }; POST_CHUNK * 2];
            for ((wr, sge), &i) in wrs.iter_mut().zip(&sges).zip(chunk) {
                *wr = RecvWr { wr_id: wr_id(WrKind::Recv, i), sges: sge };
            }
            // SAFETY: the response region is a field of `self` and outlives the queue pair (declared after
            // it); each buffer is read only after its receive completed (`receiving` guards `response`).
            unsafe { self.qp.post_recv(&wrs[..chunk.len()]) }.map_err(self.err("posting receives"))?;
            for &i in chunk {
                self.receiving[i] = true;
            }
        }
        Ok(())
    }

    /// Post the capsules (each after its window bind), [`POST_CHUNK`] per `post_send`.
    pub(super) fn post_capsules(&mut self, capsules: &[Capsule]) -> Result<(), HostError> {
        let windows = self.has_windows();
        for chunk in capsules.chunks(POST_CHUNK) {
            let filler = self.capsules.sge(0, 64).map_err(self.err("capsule SGE"))?;
            let mut sges = [[filler; 2]; POST_CHUNK];
            let mut counts = [1usize; POST_CHUNK];
            for (k, c) in chunk.iter().enumerate() {
                if self.sending[c.index] || self.bound[c.index] {
                    return Err(self.misuse(format!("slot {} posted while still in use", c.index)));
                }
                let sqe_len = u32::try_from(SQE_SIZE).unwrap_or(64);
                sges[k][0] = self.capsules.sge(c.index * SQE_SIZE, sqe_len).map_err(self.err("capsule SGE"))?;
                if c.in_capsule > 0 {
                    let r = Transfer::ToController.region_index(windows);
                    let Some(mr) = self.data[c.index][r].as_ref() else {
                        return Err(self.misuse(format!("slot {} has no in-capsule data staged", c.index)));
                    };
                    sges[k][1] = mr.sge(0, c.in_capsule).map_err(self.err("in-capsule data SGE"))?;
                    counts[k] = 2;
                }
            }
            let mut binds = [0usize; POST_CHUNK];
            let mut bound = 0;
            let mut wrs = [SendWr::new(0, SendOpcode::Send, &[]); POST_CHUNK * 2];
            let mut n = 0;
            for (k, c) in chunk.iter().enumerate() {
                if let (Some((transfer, len)), Some(mw)) = (c.keyed, self.windows.get(c.index)) {
                    let r = transfer.region_index(true);
                    let Some(mr) = self.data[c.index][r].as_ref() else {
                        return Err(self.misuse(format!("slot {} has no data buffer to bind", c.index)));
                    };
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    let bind = mw.bind(mr, 0, len, transfer.remote_access()).map_err(self.err("binding a window"))?;
                    binds[bound] = c.index;
                    bound += 1;
                    wrs[n] = SendWr {
                        signaled: false,
                        ..SendWr::new(wr_id(WrKind::Bind, c.index), SendOpcode::BindMw(bind), &[])
                    };
                    n += 1;
                }
                wrs[n] = SendWr::new(wr_id(WrKind::Send, c.index), SendOpcode::Send, &sges[k][..counts[k]]);
                n += 1;
            }
            // SAFETY: every SGE and bind names a region owned by `self`, which outlives the queue pair
            // (declared after it). `sending`/`bound` (set below, cleared only by the completions `poll` reads)
            // keep them from being rewritten, re-registered or read until the SEND completed and the window
            // was invalidated; the windows live as long as `self`.
            unsafe { self.qp.post_send(&wrs[..n]) }.map_err(self.err("posting capsules"))?;
            for c in chunk {
                self.sending[c.index] = true;
            }
            for &i in &binds[..bound] {
                self.bound[i] = true;
            }
        }
        Ok(())
    }

    /// Post local invalidates of the windows of slots `indices` (one `post_send`).
    pub(super) fn post_invalidates(&mut self, indices: &[usize]) -> Result<(), HostError> {
        for chunk in indices.chunks(POST_CHUNK * 2) {
            let mut wrs = [SendWr::new(0, SendOpcode::Send, &[]); POST_CHUNK * 2];
            for (wr, &i) in wrs.iter_mut().zip(chunk) {
                let Some(mw) = self.windows.get(i) else {
                    return Err(self.misuse(format!("slot {i} has no window to invalidate")));
                };
                *wr = SendWr::new(wr_id(WrKind::Invalidate, i), SendOpcode::LocalInvalidate(mw.rkey()), &[]);
            }
            // SAFETY: a local invalidate names no memory, only a window `self` owns.
            unsafe { self.qp.post_send(&wrs[..chunk.len()]) }.map_err(self.err("posting local invalidates"))?;
        }
        Ok(())
    }

    /// Poll the completion queue into `out`; records what each completion releases.
    pub(super) fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, HostError> {
        let n = self.cq.poll(out).map_err(self.err("polling the completion queue"))?;
        for wc in &out[..n] {
            match decode_wr_id(wc.wr_id) {
                Some((WrKind::Send, i)) if i < self.sending.len() => self.sending[i] = false,
                Some((WrKind::Recv, i)) if i < self.receiving.len() => {
                    self.receiving[i] = false;
                    if let Some(rkey) = wc.invalidated_rkey.filter(|_| wc.is_success()) {
                        if let Some(&slot) = self.window_of.get(&(rkey >> 8)) {
                            if self.windows[slot].rkey() == rkey {
                                self.bound[slot] = false;
                            }
                        }
                    }
                }
                // A failed bind leaves the window unbound.
                Some((WrKind::Bind, i)) if i < self.bound.len() => self.bound[i] = false,
                Some((WrKind::Invalidate, i)) if i < self.bound.len() && wc.is_success() => self.bound[i] = false,
                _ => {}
            }
        }
        Ok(n)
    }

    /// Ask for a completion event on the next completion (poll again afterwards before sleeping).
    pub(super) fn arm(&self) -> Result<(), HostError> {
        self.cq.req_notify(false).map_err(self.err("arming the completion queue"))
    }

    /// Take (and acknowledge) every pending completion event.
    pub(super) fn drain_events(&self) -> Result<(), HostError> {
        while self.channel.get_event().map_err(self.err("reading completion events"))?.is_some() {}
        Ok(())
    }

    /// Whether slot `index`'s window is bound (the controller may still access its data buffer).
    pub(super) fn is_bound(&self, index: usize) -> bool {
        self.bound[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip() {
        for kind in [WrKind::Send, WrKind::Recv, WrKind::Bind, WrKind::Invalidate] {
            assert_eq!(decode_wr_id(wr_id(kind, 4095)), Some((kind, 4095)));
        }
        assert_eq!(decode_wr_id(7), None);
        assert_eq!(decode_wr_id(9 << 32), None);
    }

    #[test]
    fn regions_by_direction() {
        assert_eq!(Transfer::FromController.region_index(true), 0);
        assert_eq!(Transfer::FromController.region_index(false), 1);
        assert_eq!(Transfer::ToController.region_index(false), 0);
        assert_eq!(Transfer::FromController.remote_access(), AccessFlags::REMOTE_WRITE);
        assert_eq!(Transfer::ToController.remote_access(), AccessFlags::REMOTE_READ);
    }
}
