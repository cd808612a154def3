//! [`ProtectionDomain`] and [`MemoryRegion`]: memory registered with a device, with the access rights a
//! peer or the local device gets, and [`Sge`]s (scatter/gather entries) cut from it.
//!
//! A `MemoryRegion` owns (or exclusively borrows, with the borrow's lifetime in its type) the memory it
//! registers, through a [`RegionBuffer`], and deregisters before it gives that memory up: the device can
//! never be left holding a registration of freed memory. Its contents are reached by copies
//! ([`MemoryRegion::read_at`], [`MemoryRegion::write_at`]) or, under a contract, by slices.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::BitOr;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi;

use super::device::Device;
use super::error::RdmaError;

/// A protection domain (`struct ibv_pd`): memory regions, queue pairs and shared receive queues of one
/// domain may be used together. Cloning is cheap (an `Arc`); the domain is deallocated when the last
/// clone and the last object created in it are gone.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) pd: NonNull<ffi::ibv_pd>,
    pub(crate) device: Device,
}

// SAFETY: libibverbs is thread-safe; the PD pointer is only passed to verbs and freed once in Drop.
unsafe impl Send for PdInner {}
// SAFETY: as above; nothing is mutated through `&self`.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; every MR, QP and SRQ in it holds an Arc<PdInner>, so none
        // remains. The device context outlives this (we hold `device`).
        let rc = unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno(rc), "ibv_dealloc_pd failed; the protection domain leaks");
        }
    }
}

impl Device {
    /// Allocate a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, RdmaError> {
        // SAFETY: the context is open for as long as `self` lives.
        let pd = unsafe { ffi::ibv_alloc_pd(self.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| RdmaError::last("ibv_alloc_pd", self.name()))?;
        Ok(ProtectionDomain { inner: Arc::new(PdInner { pd, device: self.clone() }) })
    }
}

impl ProtectionDomain {
    /// The device the domain belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// Register `buf` with `access` (`ibv_reg_mr`). The region owns `buf` (or the borrow) until it is
    /// dropped, and deregisters before giving it up. Fails with `InvalidArgument` on an empty buffer or
    /// on remote write without local write (verbs requires it).
    pub fn register<B: RegionBuffer>(&self, mut buf: B, access: AccessFlags) -> Result<MemoryRegion<B>, RdmaError> {
        access.validate()?;
        let region = buf.region();
        let (addr, len) = (region.as_mut_ptr(), region.len());
        if len == 0 {
            return Err(RdmaError::invalid("MemoryRegion", "cannot register an empty buffer"));
        }
        let access_bits =
            i32::try_from(access.0).map_err(|_| RdmaError::invalid("AccessFlags", "bits out of range"))?;
        // SAFETY: `addr..addr+len` is memory `buf` owns or exclusively borrows, and RegionBuffer promises it
        // stays at this address while `buf` lives; the MR keeps `buf` until after deregistration.
        let mr = unsafe { ffi::ibv_reg_mr(self.inner.pd.as_ptr(), addr.cast(), len, access_bits) };
        let mr =
            NonNull::new(mr).ok_or_else(|| RdmaError::last("ibv_reg_mr", format!("{len} bytes, access {access:?}")))?;
        // SAFETY: a successful ibv_reg_mr returns a valid ibv_mr, constant until ibv_dereg_mr.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        // `addr` is non-null: it came from a non-empty slice.
        let addr = NonNull::new(addr).unwrap_or(NonNull::dangling());
        Ok(MemoryRegion { mr, buf: ManuallyDrop::new(buf), addr, len, lkey, rkey, access, _pd: self.inner.clone() })
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain").field("device", &self.inner.device).finish()
    }
}

/// Memory that can back a [`MemoryRegion`].
///
/// # Safety
///
/// [`RegionBuffer::region`] must return the same memory (address and length) every time it is called for
/// as long as the value lives, even after the value is moved, and that memory must not be freed, reused or
/// accessed other than through this value while it lives. `Vec<u8>`, `Box<[u8]>` and `&mut [u8]` qualify
/// (their bytes live on the heap or behind the borrow); an inline array does not (moving it moves its
/// bytes). Implement it for your own mmap'd or hugepage buffer type when it meets this.
pub unsafe trait RegionBuffer: Send {
    /// The memory to register.
    fn region(&mut self) -> &mut [u8];
}

// SAFETY: a Vec's heap buffer does not move while the Vec is not resized, and only the MR holds it.
unsafe impl RegionBuffer for Vec<u8> {
    fn region(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

// SAFETY: a boxed slice's heap buffer never moves.
unsafe impl RegionBuffer for Box<[u8]> {
    fn region(&mut self) -> &mut [u8] {
        self
    }
}

// SAFETY: the borrowed memory stays where it is for 'a, and the exclusive borrow keeps everyone else out.
unsafe impl RegionBuffer for &mut [u8] {
    fn region(&mut self) -> &mut [u8] {
        self
    }
}

/// Access rights of a memory region (`IBV_ACCESS_*`). Local read is always granted.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// No access beyond local read (a source of SENDs and RDMA WRITEs).
    pub const NONE: AccessFlags = AccessFlags(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: receives and RDMA READ responses may be written into it.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// `IBV_ACCESS_REMOTE_WRITE`: a peer may RDMA WRITE into it (needs `LOCAL_WRITE`).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// `IBV_ACCESS_REMOTE_READ`: a peer may RDMA READ from it.
    pub const REMOTE_READ: AccessFlags = AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to it.
    pub const MW_BIND: AccessFlags = AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_MW_BIND.0);

    const KNOWN: u32 = Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::MW_BIND.0;

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Reject combinations verbs refuses (remote write without local write) and bits this module does not
    /// know (atomics, on-demand paging: unused by NVMe-oF).
    pub fn validate(self) -> Result<(), RdmaError> {
        if self.0 & !Self::KNOWN != 0 {
            return Err(RdmaError::invalid("AccessFlags", format!("unsupported bits {:#x}", self.0 & !Self::KNOWN)));
        }
        if self.contains(Self::REMOTE_WRITE) && !self.contains(Self::LOCAL_WRITE) {
            return Err(RdmaError::invalid("AccessFlags", "REMOTE_WRITE requires LOCAL_WRITE"));
        }
        Ok(())
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::MW_BIND, "MW_BIND"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                f.write_str(if first { "" } else { "|" })?;
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("NONE")?;
        }
        if self.0 & !Self::KNOWN != 0 {
            write!(f, "|{:#x}", self.0 & !Self::KNOWN)?;
        }
        Ok(())
    }
}

/// A registered memory region (`struct ibv_mr`) and the memory it owns.
///
/// The device (and, with remote access, the peer) may write the memory whenever a work request or a
/// remote access permits it; Rust code therefore reaches it through copies that never form a reference
/// into it ([`read_at`](Self::read_at), [`write_at`](Self::write_at)) or through the `unsafe` slice
/// accessors whose callers know no such write is in flight.
pub struct MemoryRegion<B: RegionBuffer = Box<[u8]>> {
    mr: NonNull<ffi::ibv_mr>,
    /// Dropped only after a successful deregistration (leaked otherwise, so the device cannot write freed
    /// memory).
    buf: ManuallyDrop<B>,
    addr: NonNull<u8>,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    _pd: Arc<PdInner>,
}

// SAFETY: the MR handle is used only with thread-safe verbs; the memory is owned (B: Send) and Rust-side
// writes need `&mut self`.
unsafe impl<B: RegionBuffer> Send for MemoryRegion<B> {}
// SAFETY: `&self` methods only read the memory (by volatile copies) or the immutable keys.
unsafe impl<B: RegionBuffer + Sync> Sync for MemoryRegion<B> {}

impl<B: RegionBuffer> MemoryRegion<B> {
    /// The region's start address as the device sees it (the `addr` of a keyed SGL naming it).
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn raw(&self) -> NonNull<ffi::ibv_mr> {
        self.mr
    }

    /// Whether the region is empty (never: registration refuses empty buffers).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key: names the region in local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key: a peer names the region with it in RDMA READ/WRITE (when access allows).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    fn check(&self, what: &'static str, offset: usize, len: usize) -> Result<(), RdmaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RdmaError::invalid(
                what,
                format!("offset {offset} + length {len} exceeds the region's {} bytes", self.len),
            )),
        }
    }

    /// A scatter/gather entry for `len` bytes at `offset`, bounds-checked against the region.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge, RdmaError> {
        let n = usize::try_from(len).map_err(|_| RdmaError::invalid("Sge", "length exceeds usize"))?;
        self.check("Sge", offset, n)?;
        let offset = u64::try_from(offset).map_err(|_| RdmaError::invalid("Sge", "offset exceeds u64"))?;
        Ok(Sge { addr: self.addr() + offset, length: len, lkey: self.lkey })
    }

    /// The remote address and rkey of `len` bytes at `offset` (what a keyed SGL sent to a peer carries).
    pub fn remote(&self, offset: usize, len: usize) -> Result<(u64, u32), RdmaError> {
        self.check("MemoryRegion::remote", offset, len)?;
        let offset = u64::try_from(offset).map_err(|_| RdmaError::invalid("MemoryRegion::remote", "offset"))?;
        Ok((self.addr() + offset, self.rkey))
    }

    /// Copy `dst.len()` bytes at `offset` out of the region. Volatile byte reads: if the device or a peer
    /// writes the range meanwhile, `dst` gets some mix of old and new bytes, never undefined behaviour.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), RdmaError> {
        self.check("MemoryRegion::read_at", offset, dst.len())?;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: offset + i < len (checked), inside the registered memory the region owns; no Rust
            // reference into it exists (writes need `&mut self`, the slice accessors are `unsafe`).
            *d = unsafe { self.addr.as_ptr().add(offset + i).read_volatile() };
        }
        Ok(())
    }

    /// Copy `src` into the region at `offset` (volatile byte writes; see [`read_at`](Self::read_at)).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<(), RdmaError> {
        self.check("MemoryRegion::write_at", offset, src.len())?;
        for (i, s) in src.iter().enumerate() {
            // SAFETY: in bounds (checked); `&mut self` excludes every other Rust access.
            unsafe { self.addr.as_ptr().add(offset + i).write_volatile(*s) };
        }
        Ok(())
    }

    /// The region's bytes as a slice.
    ///
    /// # Safety
    ///
    /// While the slice lives, nothing may write the region: no receive or RDMA READ work request whose
    /// scatter/gather list covers it may be outstanding, and no peer may RDMA WRITE into it (its rkey not
    /// handed out, or the protocol rules it out).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the memory is valid for `len` bytes while `self` lives; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.len) }
    }

    /// The region's bytes as a mutable slice.
    ///
    /// # Safety
    ///
    /// While the slice lives, neither the device nor a peer may access the region: no work request whose
    /// scatter/gather list covers it may be outstanding, and no peer may RDMA READ or WRITE it.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: valid for `len` bytes; `&mut self` excludes Rust aliases, the caller the device's.
        unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.len) }
    }
}

impl<B: RegionBuffer> Drop for MemoryRegion<B> {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr and deregistered exactly once, here.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        if rc == 0 {
            // SAFETY: `buf` is dropped once, after the device lost access to it.
            unsafe { ManuallyDrop::drop(&mut self.buf) };
        } else {
            // The registration may still be live: leaking the memory is the only safe choice.
            tracing::error!(errno = %super::Errno(rc), len = self.len, "ibv_dereg_mr failed; leaking the region's memory");
        }
    }
}

impl<B: RegionBuffer> fmt::Debug for MemoryRegion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

/// A scatter/gather entry (`struct ibv_sge`): `length` bytes at `addr` of the region named by `lkey`.
/// Only [`MemoryRegion::sge`] makes one, so it always lies inside a region that was registered when it
/// was made; keeping that region alive until the work request completes is the poster's contract
/// ([`super::QueuePair::post_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

impl Sge {
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u32 {
        self.length
    }

    /// The region's local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(crate) fn to_ffi(self) -> ffi::ibv_sge {
        ffi::ibv_sge { addr: self.addr, length: self.length, lkey: self.lkey }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_match_verbs_h_and_refuse_what_verbs_refuses() {
        assert_eq!(AccessFlags::LOCAL_WRITE.0, 1);
        assert_eq!(AccessFlags::REMOTE_WRITE.0, 2);
        assert_eq!(AccessFlags::REMOTE_READ.0, 4);
        assert_eq!(AccessFlags::MW_BIND.0, 16);
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        assert!(rw.validate().is_ok());
        assert!(rw.contains(AccessFlags::REMOTE_WRITE) && !rw.contains(AccessFlags::REMOTE_READ));
        assert_eq!(format!("{rw:?}"), "LOCAL_WRITE|REMOTE_WRITE");
        assert_eq!(format!("{:?}", AccessFlags::NONE), "NONE");
        assert!(AccessFlags::NONE.validate().is_ok() && AccessFlags::REMOTE_READ.validate().is_ok());

        let e = AccessFlags::REMOTE_WRITE.validate().unwrap_err();
        assert_eq!(e.to_string(), "AccessFlags: REMOTE_WRITE requires LOCAL_WRITE");
        let e = AccessFlags(8).validate().unwrap_err(); // IBV_ACCESS_REMOTE_ATOMIC
        assert_eq!(e.to_string(), "AccessFlags: unsupported bits 0x8");
        assert_eq!(format!("{:?}", AccessFlags(1 | 64)), "LOCAL_WRITE|0x40");
    }

    #[test]
    fn sge_converts_field_for_field() {
        let s = Sge { addr: 0x1000, length: 512, lkey: 0xabcd };
        let f = s.to_ffi();
        assert_eq!((f.addr, f.length, f.lkey), (0x1000, 512, 0xabcd));
        assert_eq!((s.addr(), s.length(), s.lkey()), (0x1000, 512, 0xabcd));
    }
}
