//! [`MemoryWindow`]: a type 2 memory window, bound by a work request over part of a memory region to give a
//! peer remote access to just that range under a fresh rkey, and invalidated by the peer's send with
//! invalidate (or a local invalidate). The NVMe/RDMA host uses it so that a target holds access to a
//! command's buffer only for the command's life.

use std::cell::Cell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi;

use super::error::RdmaError;
use super::mr::{AccessFlags, MemoryRegion, PdInner, ProtectionDomain, RegionBuffer};

/// A type 2 memory window (`struct ibv_mw`).
pub struct MemoryWindow {
    mw: NonNull<ffi::ibv_mw>,
    /// The rkey of the latest bind request (type 2 windows take their key from the bind work request).
    rkey: Cell<u32>,
    _pd: Arc<PdInner>,
}

// SAFETY: libibverbs is thread-safe; the window is deallocated once in Drop. Not Sync (the rkey Cell).
unsafe impl Send for MemoryWindow {}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_mw and deallocated once; the PD outlives it (we hold an Arc).
        let rc = unsafe { ffi::nvmf_ibv_dealloc_mw(self.mw.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno(rc), "ibv_dealloc_mw failed");
        }
    }
}

impl ProtectionDomain {
    /// Allocate a type 2 memory window (`ibv_alloc_mw`); needs
    /// [`super::DeviceCapabilities::memory_windows_type_2`].
    pub fn alloc_mw(&self) -> Result<MemoryWindow, RdmaError> {
        // SAFETY: the PD is live (the window keeps an Arc); verbs.h's inline ibv_alloc_mw, which the shim calls,
        // checks the provider op (EOPNOTSUPP without one).
        let mw = unsafe { ffi::nvmf_ibv_alloc_mw(self.inner.pd.as_ptr(), ffi::ibv_mw_type::IBV_MW_TYPE_2) };
        let mw = NonNull::new(mw).ok_or_else(|| RdmaError::last("ibv_alloc_mw", "type 2"))?;
        // SAFETY: a freshly allocated window; its rkey is the initial key.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        Ok(MemoryWindow { mw, rkey: Cell::new(rkey), _pd: self.inner.clone() })
    }
}

/// The next key of a memory window: the same index, the 8-bit tag incremented (`ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

impl MemoryWindow {
    /// The rkey of the latest bind request (valid at the peer once that bind completed, until invalidated).
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }

    /// A bind work request ([`super::SendOpcode::BindMw`]) giving `access` (remote read and/or write) to
    /// `len` bytes at `offset` of `mr` (registered with [`AccessFlags::MW_BIND`]) under a new rkey, which
    /// this call assigns and [`rkey`](Self::rkey) then returns.
    pub fn bind<'a, B: RegionBuffer>(
        &'a self,
        mr: &'a MemoryRegion<B>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<MwBind<'a>, RdmaError> {
        if !mr.access().contains(AccessFlags::MW_BIND) {
            return Err(RdmaError::invalid("MemoryWindow::bind", "the region was not registered with MW_BIND"));
        }
        if !AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0).contains(access) {
            return Err(RdmaError::invalid("MemoryWindow::bind", format!("window access {access:?}")));
        }
        let (addr, _) = mr.remote(offset, len)?;
        let length = u64::try_from(len).map_err(|_| RdmaError::invalid("MemoryWindow::bind", "length"))?;
        let rkey = inc_rkey(self.rkey.get());
        self.rkey.set(rkey);
        Ok(MwBind {
            mw: self.mw,
            mr: mr.raw(),
            addr,
            length,
            rkey,
            access: access.0,
            _borrow: std::marker::PhantomData,
        })
    }
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow").field("rkey", &format_args!("{:#x}", self.rkey.get())).finish()
    }
}

/// A prepared memory window bind: the window, the region range and the new rkey. Borrows both, so neither
/// can be dropped while the bind is being posted.
#[derive(Clone, Copy)]
pub struct MwBind<'a> {
    pub(crate) mw: NonNull<ffi::ibv_mw>,
    pub(crate) mr: NonNull<ffi::ibv_mr>,
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) rkey: u32,
    pub(crate) access: u32,
    _borrow: std::marker::PhantomData<&'a MemoryWindow>,
}

impl MwBind<'_> {
    /// A bind naming dangling handles, for work request building tests.
    #[cfg(test)]
    pub(crate) fn for_test(addr: u64, length: u64, rkey: u32, access: u32) -> MwBind<'static> {
        MwBind {
            mw: NonNull::dangling(),
            mr: NonNull::dangling(),
            addr,
            length,
            rkey,
            access,
            _borrow: std::marker::PhantomData,
        }
    }

    /// The rkey the window gets.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The window's start address at the peer.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes the window spans.
    pub fn length(&self) -> u64 {
        self.length
    }
}

impl PartialEq for MwBind<'_> {
    fn eq(&self, o: &Self) -> bool {
        (self.mw, self.mr, self.addr, self.length, self.rkey, self.access)
            == (o.mw, o.mr, o.addr, o.length, o.rkey, o.access)
    }
}

impl Eq for MwBind<'_> {}

impl fmt::Debug for MwBind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MwBind")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("length", &self.length)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &AccessFlags(self.access))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_bumps_the_tag_and_keeps_the_index() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(u32::MAX), 0xffff_ff00);
    }
}
