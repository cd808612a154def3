//! [`DeviceContext`]: what one reactor keeps per RDMA device, created at the first connection on that device: the
//! protection domain (one per device per process, shared by the reactors), one completion queue with its
//! completion channel (the channel's fd is in the reactor's poll) and the reactor's engine pool registered as one
//! memory region; with `srq` listeners also one [`SharedReceive`] (shared receive queue and its receive region)
//! whose buffers every queue pair of the reactor on that device receives into. Runs on its reactor thread;
//! creation happens at connect time, never on the data path.

use std::collections::HashMap;
use std::sync::Mutex;

use nvmf_common::transport::rdma::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Device, DeviceAttributes, MemoryRegion, ProtectionDomain,
    RdmaError, SharedReceiveQueue,
};

use super::counters::RdmaCounters;
use super::memory::{post_recvs, register_pool, PoolRegion, PostScratch, ReceiveQueue};
use super::routing::{wr_id, ConnectionKey, WrKind};
use crate::backend::IoEngine;

/// Completion queue entries each reactor asks of a device (bounded by the device's `max_cqe`).
const CQ_ENTRIES: u32 = 16384;

/// Receive buffers of a shared receive queue (bounded by the device's `max_srq_wr`): 32 queues of depth 128.
const SRQ_BUFFERS: u32 = 4096;

/// Buffers of a shared receive queue on a device allowing `max_srq_wr` receives per SRQ (0: no SRQ possible).
pub(crate) fn shared_receive_buffers(max_srq_wr: u32) -> u16 {
    u16::try_from(SRQ_BUFFERS.min(max_srq_wr)).unwrap_or(u16::MAX)
}

/// A reactor's shared receive queue on one device: one registered region of buffers (SQE + in-capsule data each)
/// all its queue pairs there receive into, and which connection each queue pair number belongs to.
#[derive(Debug)]
pub(crate) struct SharedReceive {
    // Dropped before the region: destroying the queue ends the receives naming it (connections, whose queue pairs
    // keep it alive too, are dropped before the device contexts).
    srq: SharedReceiveQueue,
    pub(crate) region: MemoryRegion<Box<[u8]>>,
    /// Bytes of one buffer (the in-capsule size of the first `srq` connection: later ones with a larger one
    /// receive on their own queue pair).
    pub(crate) buffer_size: usize,
    /// Queue pair number → connection key, filled at accept and emptied when the connection is dropped.
    pub(crate) connections: HashMap<u32, ConnectionKey>,
    /// Buffers to post back at the end of this turn (all of them at creation).
    pub(crate) reposts: Vec<u16>,
    scratch: PostScratch,
}

impl SharedReceive {
    /// The shared receive queue (for a new queue pair's attributes).
    pub(crate) fn queue(&self) -> &SharedReceiveQueue {
        &self.srq
    }

    /// Post this turn's reposts in chained `ibv_post_srq_recv` calls; those refused stay for the next turn.
    pub(crate) fn flush(&mut self, counters: &RdmaCounters) {
        if self.reposts.is_empty() {
            return;
        }
        let result = post_recvs(
            &mut ReceiveQueue::Shared(&mut self.srq),
            &self.region,
            self.buffer_size,
            &self.reposts,
            |i| wr_id(ConnectionKey::from_raw(0), WrKind::SharedRecv, i),
            &mut self.scratch,
        );
        let posted = match &result {
            Ok(()) => self.reposts.len(),
            Err(RdmaError::Post { posted, .. }) => *posted,
            Err(_) => 0,
        };
        counters.posted_receives(posted);
        self.reposts.drain(..posted);
        if let Err(e) = result {
            tracing::warn!(error = %e, waiting = self.reposts.len(), "posting to the shared receive queue failed");
        }
    }
}

/// Protection domains of this process, one per device (a PD is freed when its last user goes).
static DOMAINS: Mutex<Vec<ProtectionDomain>> = Mutex::new(Vec::new());

fn domain_for(device: &Device) -> Result<ProtectionDomain, RdmaError> {
    let mut domains = DOMAINS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(pd) = domains.iter().find(|pd| pd.device() == device) {
        return Ok(pd.clone());
    }
    let pd = device.alloc_pd()?;
    domains.push(pd.clone());
    Ok(pd)
}

/// Soft-iWARP's vendor ID (`SIW_VENDOR_ID`, ASCII "bmt").
const SIW_VENDOR_ID: u32 = 0x0062_6d74;

/// One reactor's resources on one RDMA device.
#[derive(Debug)]
pub(crate) struct DeviceContext {
    pub(crate) device: Device,
    pub(crate) attrs: DeviceAttributes,
    /// An iWARP device ([`Device::is_iwarp`]): the pool takes remote writes (RDMA READ responses), and a SEND with
    /// invalidate is never inline (Soft-iWARP refuses inline data on anything but SEND and RDMA WRITE).
    pub(crate) iwarp: bool,
    /// Soft-iWARP (`siw`, vendor ID [`SIW_VENDOR_ID`]): it sends an unsignalled RDMA WRITE of a page or more
    /// straight from our pages (zero copy into TCP), which TCP may still read after the SEND behind it completed
    /// and its buffer went to another command; a signalled WRITE is copied when sent. So WRITEs are signalled.
    pub(crate) soft_iwarp: bool,
    pub(crate) pd: ProtectionDomain,
    pub(crate) channel: CompletionChannel,
    pub(crate) cq: CompletionQueue,
    /// The CQ is armed and its event not read yet (an arm raises at most one event: see the reactor's module docs).
    pub(crate) armed: bool,
    /// The engine pool's region (lkey for RDMA READ/WRITE scatter/gather entries).
    pub(crate) pool: MemoryRegion<PoolRegion>,
    /// Completion queue entries the connections on this device may use at once (their queue sizes' sum).
    pub(crate) cq_reserved: u32,
    /// The shared receive queue, made at the first `srq` connection.
    pub(crate) shared: Option<SharedReceive>,
    /// A queue pair on this device was destroyed since the CQ was last polled empty: its completions may still be
    /// in the CQ. Shared receives are routed by queue pair number, which a new queue pair may get again, so no
    /// queue pair is created on the device before the CQ was drained.
    pub(crate) unreaped: bool,
}

impl DeviceContext {
    /// Open `device` for a reactor whose engine is `engine`: PD, armed CQ with its channel, pool region.
    pub(crate) fn open(device: Device, engine: &IoEngine) -> Result<Self, RdmaError> {
        let attrs = device.query()?;
        let pd = domain_for(&device)?;
        let channel = device.create_comp_channel()?;
        let cq = device.create_cq(CQ_ENTRIES.min(attrs.max_cqe), Some(&channel), 0)?;
        cq.req_notify(false)?;
        let iwarp = device.is_iwarp();
        let soft_iwarp = iwarp && attrs.vendor_id == SIW_VENDOR_ID;
        let pool = register_pool(&pd, engine.pool(), iwarp)?;
        tracing::info!(device = %device.name(), iwarp, soft_iwarp, pool_bytes = pool.len(), cqe = cq.capacity(),
            send_with_invalidate = attrs.device_cap_flags.send_with_invalidate(), "RDMA device opened");
        Ok(DeviceContext {
            device,
            attrs,
            iwarp,
            soft_iwarp,
            pd,
            channel,
            cq,
            armed: true,
            pool,
            cq_reserved: 0,
            shared: None,
            unreaped: false,
        })
    }

    /// Reserve `entries` completion queue entries for a new connection; false if the CQ cannot hold them.
    pub(crate) fn reserve_cq(&mut self, entries: u32) -> bool {
        match self.cq_reserved.checked_add(entries) {
            Some(total) if total <= self.cq.capacity() => {
                self.cq_reserved = total;
                true
            }
            _ => false,
        }
    }

    /// Whether a connection with receive buffers of `size` bytes can receive through the shared receive queue,
    /// creating it (buffers of `size` bytes, all to be posted at the end of the turn) at the first call. False,
    /// with a warning, if the device has no SRQ or its buffers are smaller than `size`.
    pub(crate) fn shared_receive(&mut self, size: usize) -> bool {
        if let Some(shared) = &self.shared {
            return size <= shared.buffer_size;
        }
        let n = shared_receive_buffers(self.attrs.max_srq_wr);
        if n == 0 || !self.reserve_cq(u32::from(n)) {
            tracing::warn!(device = %self.device.name(), max_srq_wr = self.attrs.max_srq_wr,
                "no shared receive queue possible; receiving per queue pair");
            return false;
        }
        let created = self.pd.create_srq(u32::from(n), 1).and_then(|srq| {
            let region =
                self.pd.register(vec![0u8; usize::from(n) * size].into_boxed_slice(), AccessFlags::LOCAL_WRITE)?;
            Ok(SharedReceive {
                srq,
                region,
                buffer_size: size,
                connections: HashMap::with_capacity(64),
                reposts: (0..n).collect(),
                scratch: PostScratch::default(),
            })
        });
        match created {
            Ok(shared) => {
                tracing::info!(device = %self.device.name(), buffers = n, buffer_size = size, "shared receive queue created");
                self.shared = Some(shared);
                true
            }
            Err(e) => {
                self.unreserve_cq(u32::from(n));
                tracing::warn!(device = %self.device.name(), error = %e, "cannot create a shared receive queue; receiving per queue pair");
                false
            }
        }
    }

    /// Give back what [`DeviceContext::reserve_cq`] reserved.
    pub(crate) fn unreserve_cq(&mut self, entries: u32) {
        self.cq_reserved = self.cq_reserved.saturating_sub(entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_receive_buffers_follow_the_device_limit() {
        assert_eq!(shared_receive_buffers(0), 0, "no SRQ on the device");
        assert_eq!(shared_receive_buffers(255), 255);
        assert_eq!(shared_receive_buffers(1 << 20), 4096);
    }
}
