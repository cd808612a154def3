//! [`Device`]: an RDMA device's verbs context as librdmacm opened it, kept open while any handle to it (or
//! anything created on it) lives, and its [`DeviceAttributes`].

use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi;

use super::error::RdmaError;

/// The verbs context of one RDMA device (`struct ibv_context`), shared by everything created on it.
///
/// RDMA CM picks the device when an address is bound or resolved ([`super::CmId::device`]); queue pairs
/// created through RDMA CM must use that same context, so protection domains, completion channels and
/// completion queues are created from a `Device` obtained from a `CmId`. Cloning is cheap (an `Arc`).
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct DeviceInner {
    /// The device list from `rdma_get_devices`: holding it takes a reference on every listed device, so
    /// librdmacm never closes `context` (it closes a device only when it is removed and unreferenced).
    list: NonNull<*mut ffi::ibv_context>,
    pub(crate) context: NonNull<ffi::ibv_context>,
}

// SAFETY: libibverbs and librdmacm are thread-safe; the context and the device list are only read or
// passed to thread-safe verbs, and the list is freed once, in Drop.
unsafe impl Send for DeviceInner {}
// SAFETY: as above; no method mutates Rust-visible state through `&self`.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: `list` came from `rdma_get_devices` and is freed exactly once; everything created on the
        // context holds an `Arc<DeviceInner>`, so nothing uses the context after this.
        unsafe { ffi::rdma_free_devices(self.list.as_ptr()) };
    }
}

impl Device {
    /// The `Device` whose verbs context is `context` (an RDMA CM id's `verbs`), pinned open.
    pub(crate) fn from_context(context: NonNull<ffi::ibv_context>) -> Result<Device, RdmaError> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the result is either null or a null-terminated array.
        let list = unsafe { ffi::rdma_get_devices(&mut n) };
        let list = NonNull::new(list).ok_or_else(|| RdmaError::last("rdma_get_devices", ""))?;
        let count = usize::try_from(n).unwrap_or(0);
        // SAFETY: `rdma_get_devices` returned `n` entries followed by a null terminator.
        let entries = unsafe { std::slice::from_raw_parts(list.as_ptr(), count) };
        if entries.contains(&context.as_ptr()) {
            Ok(Device { inner: Arc::new(DeviceInner { list, context }) })
        } else {
            // SAFETY: freeing the list we got above, once.
            unsafe { ffi::rdma_free_devices(list.as_ptr()) };
            Err(RdmaError::invalid("Device", "the RDMA CM id's verbs context is not in rdma_get_devices"))
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.inner.context.as_ptr()
    }

    /// The device's name (`rxe0`, `mlx5_0`).
    pub fn name(&self) -> String {
        // SAFETY: the context is open (we hold the list); `device` is set by ibv_open_device.
        let dev = unsafe { (*self.as_ptr()).device };
        // SAFETY: `dev` is the context's device; the returned name lives as long as the device list.
        let name = unsafe { ffi::ibv_get_device_name(dev) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: a non-null result is a NUL-terminated string owned by libibverbs.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }

    /// Whether the device speaks iWARP (`IBV_TRANSPORT_IWARP`: Chelsio T5+/cxgb4, Intel E810/irdma in iWARP
    /// mode, Soft-iWARP `siw`) rather than InfiniBand or RoCE. iWARP differs where it matters to a target: the
    /// RDMA READ response writes into the requester's sink buffer as a tagged (remote) write.
    pub fn is_iwarp(&self) -> bool {
        // SAFETY: the context is open (we hold the list); `device` is set by ibv_open_device and points at the
        // device list's entry, which lives as long as the list; `transport_type` is set when the list is made and
        // never changes.
        let transport = unsafe { (*(*self.as_ptr()).device).transport_type };
        transport == ffi::ibv_transport_type::IBV_TRANSPORT_IWARP
    }

    /// Completion vectors the device offers (for [`Device::create_cq`]'s `comp_vector`).
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: the context is open; the field is set at open time and never changes.
        let n = unsafe { (*self.as_ptr()).num_comp_vectors };
        u32::try_from(n).unwrap_or(0)
    }

    /// The device's limits and capabilities (`ibv_query_device`).
    pub fn query(&self) -> Result<DeviceAttributes, RdmaError> {
        let mut attr = std::mem::MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: the context is open; `attr` is a writable ibv_device_attr.
        let rc = unsafe { ffi::ibv_query_device(self.as_ptr(), attr.as_mut_ptr()) };
        if rc != 0 {
            return Err(RdmaError::verb("ibv_query_device", rc, self.name()));
        }
        // SAFETY: zero-initialised plain data, filled in by a successful ibv_query_device.
        let a = unsafe { attr.assume_init() };
        let nonneg = |v: i32| u32::try_from(v).unwrap_or(0);
        // SAFETY: fw_ver is a NUL-terminated string inside the 64-byte array (zeroed beforehand).
        let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }.to_string_lossy().into_owned();
        Ok(DeviceAttributes {
            fw_ver: fw,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            max_mr_size: a.max_mr_size,
            max_qp: nonneg(a.max_qp),
            max_qp_wr: nonneg(a.max_qp_wr),
            max_sge: nonneg(a.max_sge),
            max_sge_rd: nonneg(a.max_sge_rd),
            max_cq: nonneg(a.max_cq),
            max_cqe: nonneg(a.max_cqe),
            max_mr: nonneg(a.max_mr),
            max_pd: nonneg(a.max_pd),
            max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
            max_qp_init_rd_atom: nonneg(a.max_qp_init_rd_atom),
            max_mw: nonneg(a.max_mw),
            max_srq: nonneg(a.max_srq),
            max_srq_wr: nonneg(a.max_srq_wr),
            max_srq_sge: nonneg(a.max_srq_sge),
            phys_port_cnt: a.phys_port_cnt,
            device_cap_flags: DeviceCapabilities(a.device_cap_flags),
        })
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("name", &self.name()).finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.inner.context == other.inner.context
    }
}

impl Eq for Device {}

/// A device's limits and capabilities (the parts of `struct ibv_device_attr` an NVMe-oF transport sizes
/// its queues and chooses its features by).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttributes {
    /// Firmware version text.
    pub fw_ver: String,
    /// IEEE vendor ID (SPDK recognises rxe by it).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Largest memory region, bytes.
    pub max_mr_size: u64,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per send or receive work request.
    pub max_sge: u32,
    /// Scatter/gather entries per RDMA READ work request.
    pub max_sge_rd: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// RDMA READs a queue pair can serve at once as responder (the `responder_resources` ceiling).
    pub max_qp_rd_atom: u32,
    /// RDMA READs a queue pair can have outstanding as initiator (the `initiator_depth` ceiling).
    pub max_qp_init_rd_atom: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Shared receive queues (0: none).
    pub max_srq: u32,
    /// Work requests per shared receive queue.
    pub max_srq_wr: u32,
    /// Scatter/gather entries per shared receive queue work request.
    pub max_srq_sge: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Capability flags (`IBV_DEVICE_*`).
    pub device_cap_flags: DeviceCapabilities,
}

/// `ibv_device_cap_flags`: the bits an NVMe-oF transport decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceCapabilities(pub u32);

impl DeviceCapabilities {
    /// `IBV_DEVICE_MEM_WINDOW`: memory windows.
    pub const MEM_WINDOW: u32 = ffi::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW.0;
    /// `IBV_DEVICE_MEM_MGT_EXTENSIONS`: fast registration, local invalidate and send with invalidate (the
    /// bit the Linux and SPDK NVMe/RDMA transports test before using send with invalidate).
    pub const MEM_MGT_EXTENSIONS: u32 = ffi::ibv_device_cap_flags::IBV_DEVICE_MEM_MGT_EXTENSIONS.0;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2A`.
    pub const MEM_WINDOW_TYPE_2A: u32 = ffi::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A.0;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
    pub const MEM_WINDOW_TYPE_2B: u32 = ffi::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0;
    /// `IBV_DEVICE_SRQ_RESIZE`.
    pub const SRQ_RESIZE: u32 = ffi::ibv_device_cap_flags::IBV_DEVICE_SRQ_RESIZE.0;

    /// Whether every bit of `flags` is set.
    pub fn contains(self, flags: u32) -> bool {
        self.0 & flags == flags
    }

    /// Memory windows (type 1, or type 2A/2B).
    pub fn memory_windows(self) -> bool {
        self.0 & (Self::MEM_WINDOW | Self::MEM_WINDOW_TYPE_2A | Self::MEM_WINDOW_TYPE_2B) != 0
    }

    /// Type 2 memory windows (bound by a work request, invalidatable by a peer's send with invalidate).
    pub fn memory_windows_type_2(self) -> bool {
        self.0 & (Self::MEM_WINDOW_TYPE_2A | Self::MEM_WINDOW_TYPE_2B) != 0
    }

    /// Send with invalidate may be used (memory management extensions).
    pub fn send_with_invalidate(self) -> bool {
        self.contains(Self::MEM_MGT_EXTENSIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits_match_verbs_h() {
        assert_eq!(DeviceCapabilities::MEM_WINDOW, 1 << 17);
        assert_eq!(DeviceCapabilities::MEM_MGT_EXTENSIONS, 1 << 21);
        assert_eq!(DeviceCapabilities::MEM_WINDOW_TYPE_2A, 1 << 23);
        assert_eq!(DeviceCapabilities::MEM_WINDOW_TYPE_2B, 1 << 24);
        let none = DeviceCapabilities(0);
        assert!(!none.memory_windows() && !none.send_with_invalidate() && !none.memory_windows_type_2());
        let rxe_like = DeviceCapabilities((1 << 17) | (1 << 21) | (1 << 24));
        assert!(rxe_like.memory_windows() && rxe_like.memory_windows_type_2() && rxe_like.send_with_invalidate());
        assert!(rxe_like.contains(DeviceCapabilities::MEM_WINDOW | DeviceCapabilities::MEM_MGT_EXTENSIONS));
        assert!(!rxe_like.contains(DeviceCapabilities::MEM_WINDOW_TYPE_2A));
    }
}
