//! [`DeviceContext`]: what one reactor keeps per RDMA device, created at the first connection on that device: the
//! protection domain (one per device per process, shared by the reactors), one completion queue with its
//! completion channel (the channel's fd is in the reactor's poll) and the reactor's engine pool registered as one
//! memory region. Runs on its reactor thread; creation happens at connect time, never on the data path.

use std::sync::Mutex;

use nvmf_common::transport::rdma::verbs::{
    CompletionChannel, CompletionQueue, Device, DeviceAttributes, MemoryRegion, ProtectionDomain, RdmaError,
};

use super::memory::{register_pool, PoolRegion};
use crate::backend::IoEngine;

/// Completion queue entries each reactor asks of a device (bounded by the device's `max_cqe`).
const CQ_ENTRIES: u32 = 16384;

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

/// One reactor's resources on one RDMA device.
#[derive(Debug)]
pub(crate) struct DeviceContext {
    pub(crate) device: Device,
    pub(crate) attrs: DeviceAttributes,
    pub(crate) pd: ProtectionDomain,
    pub(crate) channel: CompletionChannel,
    pub(crate) cq: CompletionQueue,
    /// The engine pool's region (lkey for RDMA READ/WRITE scatter/gather entries).
    pub(crate) pool: MemoryRegion<PoolRegion>,
    /// Completion queue entries the connections on this device may use at once (their queue sizes' sum).
    pub(crate) cq_reserved: u32,
}

impl DeviceContext {
    /// Open `device` for a reactor whose engine is `engine`: PD, armed CQ with its channel, pool region.
    pub(crate) fn open(device: Device, engine: &IoEngine) -> Result<Self, RdmaError> {
        let attrs = device.query()?;
        let pd = domain_for(&device)?;
        let channel = device.create_comp_channel()?;
        let cq = device.create_cq(CQ_ENTRIES.min(attrs.max_cqe), Some(&channel), 0)?;
        cq.req_notify(false)?;
        let pool = register_pool(&pd, engine.pool())?;
        tracing::info!(device = %device.name(), pool_bytes = pool.len(), cqe = cq.capacity(),
            send_with_invalidate = attrs.device_cap_flags.send_with_invalidate(), "RDMA device opened");
        Ok(DeviceContext { device, attrs, pd, channel, cq, pool, cq_reserved: 0 })
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

    /// Give back what [`DeviceContext::reserve_cq`] reserved.
    pub(crate) fn unreserve_cq(&mut self, entries: u32) {
        self.cq_reserved = self.cq_reserved.saturating_sub(entries);
    }
}
