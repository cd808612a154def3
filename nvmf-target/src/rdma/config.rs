//! What an NVMe/RDMA port offers its hosts: in-capsule data size and queue depth.
//!
//! Plain data shared (behind an `Arc`) by the CM thread, which validates connect requests against it, and the
//! reactors, which size each connection's queue pair and buffers from it. Nothing mutates it after start.

/// Settings of the NVMe/RDMA transport, shared by every connection of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaTransportConfig {
    /// Largest in-capsule data of a command capsule in bytes (IOCCSZ = (64 + this) / 16); each receive buffer is
    /// 64 + this bytes. Default 8 KiB.
    pub in_capsule_data_size: u32,
    /// Most entries of one queue (hsqsize + 1 of a connect request may not exceed it). Default 128.
    pub max_queue_depth: u16,
    /// Answer commands whose keyed SGL asks for remote invalidation (subtype Fh) with SEND with invalidate
    /// where the device supports it (otherwise the host invalidates locally). Default true.
    pub send_with_invalidate: bool,
    /// Receive through the reactor's shared receive queue on the connection's device (one region of buffers for
    /// all its queue pairs there) instead of `depth` receive buffers per queue pair. Default false.
    pub srq: bool,
}

impl Default for RdmaTransportConfig {
    fn default() -> Self {
        RdmaTransportConfig { in_capsule_data_size: 8192, max_queue_depth: 128, send_with_invalidate: true, srq: false }
    }
}

impl RdmaTransportConfig {
    /// Bytes of one receive buffer: the 64-byte SQE and the in-capsule data.
    pub fn receive_buffer_size(&self) -> usize {
        64 + usize::try_from(self.in_capsule_data_size).unwrap_or(usize::MAX - 64)
    }
}
