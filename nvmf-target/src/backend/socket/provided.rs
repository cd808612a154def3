//! [`ReceiveBuffers`]: the provided-buffer ring multishot receives fill (`IORING_REGISTER_PBUF_RING`, one buffer
//! group per engine). The kernel takes a free buffer for each chunk it receives on any of the engine's sockets and
//! names it in the CQE; the connection copies the bytes out and the buffer goes straight back to the ring, so the
//! buffers serve every connection of the reactor and none is held between turns.
//!
//! `unsafe` here: the memory shared with the kernel (the ring of buffer descriptors, page-aligned, and the buffers)
//! and the ring's tail, published with a release store as the kernel expects.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::types::BufRingEntry;

use super::super::ring::Ring;

/// The buffer group the engine's receives select from.
pub(crate) const RECEIVE_GROUP: u16 = 0;

const PAGE: usize = 4096;

const _: () = assert!(std::mem::size_of::<BufRingEntry>() == 16, "struct io_uring_buf is 16 bytes");

/// The memory shared with the kernel: the descriptors (page-aligned) and the buffers. Freed when the last of the
/// [`ReceiveBuffers`] and the [`ReceivedChunk`]s pointing into it goes (the ring, which could still write it, is
/// dropped before the buffers: field order of the engine).
struct Region {
    entries: NonNull<BufRingEntry>,
    entries_layout: Layout,
    data: NonNull<u8>,
    data_layout: Layout,
}

// SAFETY: the region is plain memory; what the kernel may write (a buffer it was given) no thread reads, and a
// chunk's bytes are only read, after the kernel wrote them and before the buffer goes back.
unsafe impl Send for Region {}
// SAFETY: as above: shared access only reads bytes the kernel no longer writes.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `ReceiveBuffers::new` with these layouts; nothing points into it any more.
        unsafe {
            dealloc(self.entries.as_ptr().cast(), self.entries_layout);
            dealloc(self.data.as_ptr(), self.data_layout);
        }
    }
}

/// The bytes a receive brought, in a buffer lent by the kernel until
/// [`IoEngine::recycle_received`](crate::backend::IoEngine::recycle_received) takes the chunk back (dropping it
/// instead only loses the buffer for the engine's life).
pub struct ReceivedChunk {
    region: Arc<Region>,
    bid: u16,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the chunk reads memory kept alive by its `Arc`, which the kernel does not write until the chunk is
// recycled (consuming it).
unsafe impl Send for ReceivedChunk {}

impl std::fmt::Debug for ReceivedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedChunk").field("bid", &self.bid).field("len", &self.len).finish()
    }
}

impl Deref for ReceivedChunk {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes at `ptr` lie inside buffer `bid` of the region the `Arc` keeps alive; the kernel wrote
        // them before the CQE and writes the buffer again only after `recycle` consumed this chunk.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// The registered buffers and the ring that lends them to the kernel (see the module docs).
pub(crate) struct ReceiveBuffers {
    region: Arc<Region>,
    count: u16,
    size: usize,
    /// `size`, as the descriptors carry it.
    size_u32: u32,
    /// Our copy of the ring's tail: buffers handed to the kernel so far.
    tail: u16,
}

impl std::fmt::Debug for ReceiveBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveBuffers").field("count", &self.count).field("size", &self.size).finish()
    }
}

impl ReceiveBuffers {
    /// `count` buffers (a power of two) of `size` bytes, every one given to the kernel, registered with `ring` as
    /// [`RECEIVE_GROUP`].
    pub(crate) fn new(ring: &Ring, count: u16, size: usize) -> io::Result<Self> {
        let Some(size_u32) = u32::try_from(size).ok().filter(|&s| s > 0 && count.is_power_of_two()) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "receive buffers: bad count or size"));
        };
        let entries_layout = Layout::array::<BufRingEntry>(usize::from(count))
            .and_then(|l| l.align_to(PAGE))
            .map_err(io::Error::other)?;
        let data_layout = Layout::from_size_align(size * usize::from(count), PAGE).map_err(io::Error::other)?;
        // SAFETY: both layouts have a non-zero size (count ≥ 1, size ≥ 1).
        let (entries, data) = unsafe { (alloc_zeroed(entries_layout), alloc_zeroed(data_layout)) };
        let (Some(entries), Some(data)) = (NonNull::new(entries.cast::<BufRingEntry>()), NonNull::new(data)) else {
            // SAFETY: whichever allocation succeeded was made with its layout just above.
            unsafe {
                if !entries.is_null() {
                    dealloc(entries, entries_layout);
                }
                if !data.is_null() {
                    dealloc(data, data_layout);
                }
            }
            return Err(io::ErrorKind::OutOfMemory.into());
        };
        let region = Arc::new(Region { entries, entries_layout, data, data_layout });
        let mut buffers = ReceiveBuffers { region, count, size, size_u32, tail: 0 };
        for bid in 0..count {
            buffers.put(bid);
        }
        buffers.publish();
        // SAFETY: the descriptors are page-aligned and, with the buffers they name, live as long as the region,
        // which this value holds until the engine drops it after the ring (field order).
        unsafe { ring.register_buf_ring(entries.as_ptr() as u64, count, RECEIVE_GROUP) }?;
        Ok(buffers)
    }

    /// The first `len` bytes of buffer `bid`, which a receive's CQE named (`None` for an id or length out of range,
    /// which the kernel never reports).
    pub(crate) fn take(&self, bid: u16, len: usize) -> Option<ReceivedChunk> {
        if bid >= self.count || len > self.size {
            return None;
        }
        // Inside the data allocation: bid < count, so the offset is below count * size.
        let ptr = self.region.data.as_ptr().wrapping_add(usize::from(bid) * self.size);
        Some(ReceivedChunk { region: Arc::clone(&self.region), bid, ptr: NonNull::new(ptr)?, len })
    }

    /// Give a chunk's buffer back to the kernel.
    pub(crate) fn recycle(&mut self, chunk: ReceivedChunk) {
        if Arc::ptr_eq(&chunk.region, &self.region) {
            self.put(chunk.bid);
            self.publish();
        }
    }

    /// Write buffer `bid`'s descriptor at the tail (not yet visible to the kernel).
    fn put(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: `index` < count, inside the descriptor array; the kernel reads only descriptors below the
        // published tail, and this one is at or past it. The setters leave the field that holds the tail alone.
        let entry = unsafe { &mut *self.region.entries.as_ptr().add(index) };
        entry.set_addr(self.region.data.as_ptr() as u64 + (usize::from(bid) * self.size) as u64);
        entry.set_len(self.size_u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make the descriptors written so far visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is the 16-bit field at the end of the first descriptor, 2-byte aligned, inside the
        // array; the kernel reads it with an acquire load.
        let tail = unsafe { &*BufRingEntry::tail(self.region.entries.as_ptr()).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}
