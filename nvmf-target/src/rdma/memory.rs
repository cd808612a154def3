//! Registered memory and work-request posting of the NVMe/RDMA target: the transport's only `unsafe`.
//!
//! Three kinds of memory reach the device:
//! - the reactor's engine buffer pool, registered once per device as one region ([`register_pool`]): RDMA READ
//!   writes host data into a buffer, RDMA WRITE sends a buffer's data. A buffer is handed to the device with
//!   `IoEngine::start_transfer` before its work request is posted and taken back with `end_transfer` after its
//!   completion (or after the queue pair is destroyed), so no Rust slice of it exists meanwhile and a release of it
//!   is deferred;
//! - each connection's receive region (SQE + in-capsule data per buffer), or with `srq` the one receive region of a
//!   reactor's shared receive queue on a device, written by the device; a buffer is read only after its receive
//!   completed and before it is reposted;
//! - each connection's response region (one 16-byte CQE per queue slot), read by the device for a SEND that is not
//!   inline; a slot's CQE is only rewritten after that slot's SEND completed.
//!
//! Who drops what: a connection drops its queue pair before its regions, and the reactor drops every connection
//! before the device contexts (which hold the pool's region) and those before the engine (which owns the pool).
//! Runs on the reactor thread; posting never blocks.

use std::ptr::NonNull;

use nvmf_common::transport::rdma::verbs::{
    AccessFlags, Errno, MemoryRegion, ProtectionDomain, QueuePair, RdmaError, RecvWr, RegionBuffer, SendOpcode, SendWr,
    Sge, SharedReceiveQueue,
};

use crate::backend::BufferPool;

/// The engine pool's mapping as a region to register (it borrows the mapping, which the pool owns and unmaps).
#[derive(Debug)]
pub(crate) struct PoolRegion {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is a plain address range; the pool that owns the mapping lives on the same reactor thread
// and is dropped after the region (see the module docs).
unsafe impl Send for PoolRegion {}

// SAFETY: `region` returns the same range every time (base and length are fixed at creation); the pool's mapping
// does not move or shrink while the pool lives, and the reactor drops the region (deregistering it) before the
// pool. The slice made here is only handed to `ibv_reg_mr` and not kept; the pool's own slices of buffers never
// overlap a buffer the device uses (the engine hands those out only between `start_transfer` and `end_transfer`).
unsafe impl RegionBuffer for PoolRegion {
    fn region(&mut self) -> &mut [u8] {
        // SAFETY: base..base+len is the pool's live mapping (see above).
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }
}

/// Register `pool`'s whole region in `pd`. Local write access: the target reads and writes the hosts' memory, hosts
/// never address the pool. On an iWARP device (`iwarp`) remote write too: there an RDMA READ's response is a tagged
/// write into the requester's sink buffer, which iWARP NICs check for remote write access (as the kernel's
/// rdma_rw and SPDK register iWARP read sinks; Soft-iWARP checks local write only). The hosts never learn the
/// region's key, so no peer can name it.
pub(crate) fn register_pool(
    pd: &ProtectionDomain,
    pool: &BufferPool,
    iwarp: bool,
) -> Result<MemoryRegion<PoolRegion>, RdmaError> {
    let base = NonNull::new(pool.region_ptr())
        .ok_or_else(|| RdmaError::InvalidArgument { what: "buffer pool", detail: "no region".into() })?;
    let access = if iwarp { AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE } else { AccessFlags::LOCAL_WRITE };
    pd.register(PoolRegion { base, len: pool.region_len() }, access)
}

/// The `len` bytes at `offset` of `region`, a connection's receive region, read in place once the receive of that
/// buffer completed (`None` if the range is outside the region).
///
/// The caller must not repost the buffer while the slice lives (a connection reposts it in the next flush, after
/// the command was handed to its queue).
pub(crate) fn received(region: &MemoryRegion<Box<[u8]>>, offset: usize, len: usize) -> Option<&[u8]> {
    let end = offset.checked_add(len)?;
    if end > region.len() {
        return None;
    }
    let base = std::ptr::with_exposed_provenance::<u8>(usize::try_from(region.addr()).ok()?);
    // SAFETY: `offset..end` lies inside the region's memory, which the region owns (a boxed slice whose address it
    // exposed) and keeps alive while borrowed; the device wrote this buffer before its receive completed and writes
    // it again only after a repost, which the caller does not do while the slice lives; no other reference into
    // the region exists (the connection only reads completed buffers).
    Some(unsafe { std::slice::from_raw_parts(base.add(offset), len) })
}

/// One send queue work request a connection wants posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// RDMA READ `len` host bytes at (`remote_addr`, `rkey`) into the pool at `local` (signalled).
    Read {
        /// Completion tag.
        wr_id: u64,
        /// Offset of the destination in the pool region.
        local: usize,
        /// Bytes.
        len: u32,
        /// The host's address.
        remote_addr: u64,
        /// The host's key.
        rkey: u32,
    },
    /// RDMA WRITE `len` pool bytes at `local` to (`remote_addr`, `rkey`) (unsignalled: the SEND after it completes
    /// it; signalled with this completion tag when given, which Soft-iWARP needs to copy the data when it sends it).
    Write {
        /// Completion tag of a signalled WRITE.
        signal: Option<u64>,
        /// Offset of the source in the pool region.
        local: usize,
        /// Bytes.
        len: u32,
        /// The host's address.
        remote_addr: u64,
        /// The host's key.
        rkey: u32,
    },
    /// SEND the 16-byte CQE at `response` of the response region (signalled), invalidating the host's `rkey` when
    /// asked, inline when the queue pair allows it.
    Send {
        /// Completion tag.
        wr_id: u64,
        /// Offset of the CQE in the response region.
        response: usize,
        /// Invalidate this host key (SEND with invalidate).
        invalidate: Option<u32>,
        /// Copy the CQE into the work request.
        inline: bool,
    },
}

/// Work requests per post call: a batch is posted in chains of at most this many (one doorbell each), built in a
/// stack array (no allocation).
const CHAIN: usize = 32;

/// Scatter/gather entries reused by every post of one connection (grown to the largest batch once).
#[derive(Debug, Default)]
pub(crate) struct PostScratch {
    sges: Vec<Sge>,
}

/// Post `works` on `qp`, chained in `ibv_post_send` calls of up to [`CHAIN`]. On error the first `posted` of them
/// were posted (see [`RdmaError::Post`]).
pub(crate) fn post_sends(
    qp: &mut QueuePair,
    pool: &MemoryRegion<PoolRegion>,
    responses: &MemoryRegion<Box<[u8]>>,
    works: &[Work],
    scratch: &mut PostScratch,
) -> Result<(), RdmaError> {
    scratch.sges.clear();
    for w in works {
        scratch.sges.push(match *w {
            Work::Read { local, len, .. } | Work::Write { local, len, .. } => pool.sge(local, len)?,
            Work::Send { response, .. } => responses.sge(response, 16)?,
        });
    }
    let mut done = 0;
    for (chunk, sges) in works.chunks(CHAIN).zip(scratch.sges.chunks(CHAIN)) {
        let mut wrs = [SendWr::new(0, SendOpcode::Send, &[]); CHAIN];
        for ((wr, w), sge) in wrs.iter_mut().zip(chunk).zip(sges.chunks(1)) {
            *wr = match *w {
                Work::Read { wr_id, remote_addr, rkey, .. } => {
                    SendWr::new(wr_id, SendOpcode::RdmaRead { remote_addr, rkey }, sge)
                }
                Work::Write { signal, remote_addr, rkey, .. } => SendWr {
                    signaled: signal.is_some(),
                    ..SendWr::new(signal.unwrap_or(0), SendOpcode::RdmaWrite { remote_addr, rkey }, sge)
                },
                Work::Send { wr_id, invalidate, inline, .. } => {
                    let opcode = invalidate.map_or(SendOpcode::Send, SendOpcode::SendWithInvalidate);
                    SendWr { inline, ..SendWr::new(wr_id, opcode, sge) }
                }
            };
        }
        // SAFETY: the regions the scatter/gather entries were cut from outlive the work requests: the queue pair
        // is dropped before its connection's response region and before the reactor's pool region (module docs).
        // Pool buffers named here were handed to the device with `start_transfer` (no Rust slice of them exists
        // until `end_transfer` after the completion); a response slot is not rewritten until its SEND completed.
        let result = unsafe { qp.post_send(&wrs[..chunk.len()]) };
        match result {
            Ok(()) => done += chunk.len(),
            Err(RdmaError::Post { verb, errno, posted, .. }) => {
                return Err(RdmaError::Post { verb, errno, posted: done + posted, total: works.len() })
            }
            Err(e) => {
                return Err(RdmaError::Post {
                    verb: "ibv_post_send",
                    errno: e.errno().unwrap_or(Errno(libc::EINVAL)),
                    posted: done,
                    total: works.len(),
                })
            }
        }
    }
    Ok(())
}

/// Where receive buffers are posted: a queue pair's own receive queue or a shared receive queue.
#[derive(Debug)]
pub(crate) enum ReceiveQueue<'a> {
    /// `ibv_post_recv` on a queue pair.
    Pair(&'a mut QueuePair),
    /// `ibv_post_srq_recv` on a reactor's shared receive queue.
    Shared(&'a mut SharedReceiveQueue),
}

/// Post the receive buffers `indices` (each `size` bytes at `index * size` of `region`) on `queue`, chained in
/// post calls of up to [`CHAIN`]; `wr_id(index)` tags each. Errors as in [`post_sends`].
pub(crate) fn post_recvs(
    queue: &mut ReceiveQueue<'_>,
    region: &MemoryRegion<Box<[u8]>>,
    size: usize,
    indices: &[u16],
    wr_id: impl Fn(u16) -> u64,
    scratch: &mut PostScratch,
) -> Result<(), RdmaError> {
    let len = u32::try_from(size)
        .map_err(|_| RdmaError::InvalidArgument { what: "receive buffer", detail: "larger than 4 GiB".into() })?;
    scratch.sges.clear();
    for &i in indices {
        scratch.sges.push(region.sge(usize::from(i) * size, len)?);
    }
    let mut done = 0;
    for (chunk, sges) in indices.chunks(CHAIN).zip(scratch.sges.chunks(CHAIN)) {
        let mut wrs = [RecvWr { wr_id: 0, sges: &[] }; CHAIN];
        for ((wr, &i), sge) in wrs.iter_mut().zip(chunk).zip(sges.chunks(1)) {
            *wr = RecvWr { wr_id: wr_id(i), sges: sge };
        }
        // SAFETY: the receive region outlives the work requests (a connection drops its queue pair before its
        // region; a device context drops its shared receive queue before the shared region, and the connections,
        // whose queue pairs keep that queue alive, before both); a posted buffer is not read until its completion
        // (only completed, not yet reposted buffers are read).
        let result = unsafe {
            match queue {
                ReceiveQueue::Pair(qp) => qp.post_recv(&wrs[..chunk.len()]),
                ReceiveQueue::Shared(srq) => srq.post_recv(&wrs[..chunk.len()]),
            }
        };
        match result {
            Ok(()) => done += chunk.len(),
            Err(RdmaError::Post { verb, errno, posted, .. }) => {
                return Err(RdmaError::Post { verb, errno, posted: done + posted, total: indices.len() })
            }
            Err(e) => {
                return Err(RdmaError::Post {
                    verb: "ibv_post_recv",
                    errno: e.errno().unwrap_or(Errno(libc::EINVAL)),
                    posted: done,
                    total: indices.len(),
                })
            }
        }
    }
    Ok(())
}
