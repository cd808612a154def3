//! The data buffer pool: one anonymous mapping carved into fixed-size, 4096-aligned buffers.
//!
//! Owned by one [`IoEngine`](super::IoEngine) (one reactor thread). No allocation per I/O: buffers come from per
//! size-class free lists. The whole region is registered with the engine's io_uring as fixed buffers; the RDMA
//! transport registers the same region with the NIC (see [`BufferPool::region_len`] and
//! [`BufferPool::buffer_offset`]; the base address is crate-internal).
//!
//! A buffer is in one of four states: free, owned by the caller (readable/writable through
//! [`BufferPool::get`]/[`BufferPool::get_mut`]), in flight (the kernel may be reading or writing it: the accessors
//! return an empty slice, and a release is deferred until the I/O finishes), or being sent (the kernel only reads
//! it, for one or more socket sends at once: a zero-copy send holds its pages until the kernel's notification, and
//! the rest of a partly sent buffer may go in another send before that; as in flight otherwise).

use std::io;
use std::ptr::NonNull;

use super::budget::{share, AllocRefusal, BudgetLimit, BufferBudget, MAX_CLASSES};
use super::BackendError;

/// Alignment of every buffer (and of the region): enough for O_DIRECT on any logical block size we accept.
pub(crate) const BUFFER_ALIGN: usize = 4096;
/// Huge page size tried first for the region.
const HUGE_PAGE: usize = 2 << 20;
/// Largest iovec io_uring accepts as one fixed buffer.
const MAX_FIXED_BUFFER: usize = 1 << 30;

/// A data buffer of an [`IoEngine`](super::IoEngine)'s pool. Only meaningful to the engine that allocated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId(u32);

impl BufferId {
    /// An arbitrary id, for tests that hand the engine ids it never allocated.
    #[cfg(test)]
    pub(crate) fn from_raw(index: u32) -> Self {
        BufferId(index)
    }

    fn index(self) -> usize {
        // u32 -> usize never truncates on the 64-bit targets io_uring runs on.
        self.0 as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Owned,
    InFlight {
        released: bool,
    },
    /// Read by `sends` socket sends in flight (see the module docs).
    Sending {
        released: bool,
        sends: u16,
    },
}

#[derive(Debug)]
struct Slot {
    offset: usize,
    capacity: usize,
    len: usize,
    fixed_index: u16,
    state: State,
}

#[derive(Debug)]
struct SizeClass {
    size: usize,
    free: Vec<u32>,
    count: usize,
}

/// A buffer handed to the kernel: where, how long, and which registered fixed buffer contains it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IoBuffer {
    // Private: only `BufferPool::start_io` makes one, so an `IoBuffer` always names pool memory reserved for an op.
    ptr: *mut u8,
    len: u32,
    fixed_index: u16,
}

impl IoBuffer {
    /// First byte, inside the pool's mapping.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length of the op (at most the buffer's allocated length).
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// The registered fixed buffer containing it.
    pub(crate) fn fixed_index(&self) -> u16 {
        self.fixed_index
    }

    /// `len` bytes from `offset` of this buffer (one command of an op split in several), or `None` if that
    /// reaches past its end.
    pub(crate) fn slice(&self, offset: u32, len: u32) -> Option<IoBuffer> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset + len <= self.len`, so the result stays inside this buffer, inside the mapping.
        let ptr = unsafe { self.ptr.add(offset as usize) };
        Some(IoBuffer { ptr, len, fixed_index: self.fixed_index })
    }
}

/// Why a buffer cannot be handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartIoError {
    /// The id is not an allocated buffer.
    NotAllocated,
    /// The buffer is already used by an op in flight.
    Busy,
    /// The op is longer than the allocated length.
    TooShort,
}

/// Fixed-size data buffers carved from one mapping (see the module docs).
#[derive(Debug)]
pub struct BufferPool {
    base: NonNull<u8>,
    map_len: usize,
    huge: bool,
    classes: Vec<SizeClass>,
    slots: Vec<Slot>,
    /// (offset, len) of each unit registered as one io_uring fixed buffer.
    fixed: Vec<(usize, usize)>,
    /// Buffers of each class held by anonymous holders ([`BufferBudget`]).
    anonymous_held: [usize; MAX_CLASSES],
}

// SAFETY: the pool exclusively owns its mapping; nothing in it is tied to the creating thread, and all access goes
// through `&self`/`&mut self`, so moving it to another thread is sound. (It is deliberately not `Sync`.)
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// Maps a region for `classes` (buffer size, count) pairs. Sizes are rounded up to 4096; classes with a zero
    /// count are skipped. Tries huge pages first and silently falls back to normal pages.
    pub(crate) fn new(classes: &[(usize, usize)]) -> Result<Self, BackendError> {
        let sorted = layout(classes);
        if sorted.is_empty() {
            return Err(BackendError::InvalidEngineConfig("the buffer pool has no buffers"));
        }
        if sorted.len() > MAX_CLASSES {
            return Err(BackendError::InvalidEngineConfig("the buffer pool has more than four size classes"));
        }
        if sorted.iter().any(|&(size, _)| size > MAX_FIXED_BUFFER) {
            return Err(BackendError::InvalidEngineConfig("a buffer size exceeds 1 GiB"));
        }
        let total_count: usize = sorted.iter().map(|&(_, c)| c).sum();
        if u32::try_from(total_count).is_err() {
            return Err(BackendError::InvalidEngineConfig("too many buffers"));
        }
        let total = region_bytes(&sorted).ok_or(BackendError::InvalidEngineConfig("the buffer pool is too large"))?;

        let (base, map_len, huge) = map_region(total)?;

        let mut slots = Vec::with_capacity(total_count);
        let mut size_classes = Vec::with_capacity(sorted.len());
        let mut fixed: Vec<(usize, usize)> = Vec::new();
        let mut offset = 0usize;
        for &(size, count) in &sorted {
            let mut free = Vec::with_capacity(count);
            for _ in 0..count {
                // Start a new fixed-buffer unit when this buffer would not fit in the current one.
                match fixed.last_mut() {
                    Some((_, len)) if *len + size <= MAX_FIXED_BUFFER => *len += size,
                    _ => fixed.push((offset, size)),
                }
                let fixed_index = u16::try_from(fixed.len() - 1)
                    .map_err(|_| BackendError::InvalidEngineConfig("the buffer pool needs too many fixed buffers"))?;
                // total_count fits in u32 (checked above).
                #[expect(clippy::cast_possible_truncation, reason = "slots.len() < total_count <= u32::MAX")]
                free.push(slots.len() as u32);
                slots.push(Slot { offset, capacity: size, len: 0, fixed_index, state: State::Free });
                offset += size;
            }
            // Pop from the end: hand out low addresses first (nicer to read in traces).
            free.reverse();
            size_classes.push(SizeClass { size, free, count });
        }
        Ok(BufferPool { base, map_len, huge, classes: size_classes, slots, fixed, anonymous_held: [0; MAX_CLASSES] })
    }

    /// Allocates a buffer of `len` bytes from the smallest size class that fits and has a free buffer. `None` when
    /// every class that fits is exhausted, or when `len` exceeds [`BufferPool::buffer_size`] (callers bound
    /// transfers by MDTS first).
    pub fn alloc(&mut self, len: usize) -> Option<BufferId> {
        let class = self.classes.iter_mut().filter(|c| c.size >= len).find(|c| !c.free.is_empty())?;
        let index = class.free.pop()?;
        let slot = &mut self.slots[index as usize];
        debug_assert_eq!(slot.state, State::Free);
        slot.state = State::Owned;
        slot.len = len;
        Some(BufferId(index))
    }

    /// Allocates a buffer of `len` bytes for the holder of `budget`, from the smallest size class that fits, has a
    /// free buffer and is within the holder's shares (see [`BufferBudget`]); the budget records it. Release it
    /// with [`BufferPool::release_within`].
    pub fn alloc_within(&mut self, len: usize, budget: &mut BufferBudget) -> Result<BufferId, AllocRefusal> {
        if len > self.buffer_size() {
            return Err(AllocRefusal::TooLarge);
        }
        if budget.held() >= budget.max_total {
            return Err(AllocRefusal::Budget(BudgetLimit::Queue));
        }
        let mut refusal = AllocRefusal::Exhausted;
        for (c, class) in self.classes.iter_mut().enumerate() {
            if class.size < len || class.free.is_empty() {
                continue;
            }
            if usize::from(budget.held[c]) >= share(class.count, budget.queue_percent) {
                refusal = AllocRefusal::Budget(BudgetLimit::Queue);
                continue;
            }
            if budget.anonymous_percent.is_some_and(|p| self.anonymous_held[c] >= share(class.count, p)) {
                refusal = AllocRefusal::Budget(BudgetLimit::Anonymous);
                continue;
            }
            let Some(index) = class.free.pop() else { continue };
            let slot = &mut self.slots[index as usize];
            debug_assert_eq!(slot.state, State::Free);
            slot.state = State::Owned;
            slot.len = len;
            budget.held[c] += 1;
            if budget.anonymous_percent.is_some() {
                budget.anonymous_held[c] += 1;
                self.anonymous_held[c] += 1;
            }
            return Ok(BufferId(index));
        }
        Err(refusal)
    }

    /// Releases `id` (as [`BufferPool::release`]) and takes it off `budget`, which allocated it.
    pub fn release_within(&mut self, id: BufferId, budget: &mut BufferBudget) {
        let Some(capacity) = self.slots.get(id.index()).map(|s| s.capacity) else {
            tracing::warn!(?id, "release of an unknown buffer ignored");
            return;
        };
        if let Some(c) = self.classes.iter().position(|c| c.size == capacity) {
            budget.held[c] = budget.held[c].saturating_sub(1);
            // A holder admitted while it held anonymous buffers gives those back to the anonymous share first.
            if budget.anonymous_held[c] > 0 {
                budget.anonymous_held[c] -= 1;
                self.anonymous_held[c] = self.anonymous_held[c].saturating_sub(1);
            }
        }
        self.release(id);
    }

    /// The allocated bytes of `id`: exactly the length asked of [`BufferPool::alloc`]. Empty when `id` is not
    /// allocated or is in flight (the kernel may be writing it).
    pub fn get(&self, id: BufferId) -> &[u8] {
        match self.slots.get(id.index()) {
            Some(slot) if slot.state == State::Owned => {
                // SAFETY: offset+len lies inside the mapping (len <= capacity, slots are laid out inside
                // `map_len`); the slot is owned by the caller, so the kernel is not touching it; the borrow of
                // `self` prevents a `get_mut` of the same slot while this slice lives, and slots never overlap.
                unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(slot.offset), slot.len) }
            }
            _ => &[],
        }
    }

    /// The allocated bytes of `id`, writable. Empty when `id` is not allocated or is in flight.
    pub fn get_mut(&mut self, id: BufferId) -> &mut [u8] {
        match self.slots.get(id.index()) {
            Some(slot) if slot.state == State::Owned => {
                // SAFETY: as in `get`; `&mut self` makes this the only live slice into the pool.
                unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(slot.offset), slot.len) }
            }
            _ => &mut [],
        }
    }

    /// Returns `id` to its free list; deferred until completion while an op using it is in flight. Releasing a
    /// buffer that is not allocated is ignored (logged).
    pub fn release(&mut self, id: BufferId) {
        let Some(slot) = self.slots.get_mut(id.index()) else {
            tracing::warn!(?id, "release of an unknown buffer ignored");
            return;
        };
        match slot.state {
            State::Owned => self.free(id),
            State::InFlight { released: false } => slot.state = State::InFlight { released: true },
            State::Sending { released: false, sends } => slot.state = State::Sending { released: true, sends },
            State::InFlight { released: true } | State::Sending { released: true, .. } | State::Free => {
                tracing::warn!(?id, "double release of a buffer ignored");
            }
        }
    }

    fn free(&mut self, id: BufferId) {
        let slot = &mut self.slots[id.index()];
        slot.state = State::Free;
        slot.len = 0;
        let capacity = slot.capacity;
        if let Some(class) = self.classes.iter_mut().find(|c| c.size == capacity) {
            class.free.push(id.0);
        }
    }

    /// Marks `id` in flight for an op of `len` bytes and returns what the kernel needs.
    pub(crate) fn start_io(&mut self, id: BufferId, len: u32) -> Result<IoBuffer, StartIoError> {
        let slot = self.slots.get_mut(id.index()).ok_or(StartIoError::NotAllocated)?;
        match slot.state {
            State::Owned => {}
            State::InFlight { .. } | State::Sending { .. } => return Err(StartIoError::Busy),
            State::Free => return Err(StartIoError::NotAllocated),
        }
        if len as usize > slot.len {
            return Err(StartIoError::TooShort);
        }
        slot.state = State::InFlight { released: false };
        // SAFETY: slot.offset < map_len, so the result stays inside the mapping.
        let ptr = unsafe { self.base.as_ptr().add(slot.offset) };
        Ok(IoBuffer { ptr, len, fixed_index: slot.fixed_index })
    }

    /// The kernel is done with `id`: back to the caller, or to the free list if it was released meanwhile.
    pub(crate) fn finish_io(&mut self, id: BufferId) {
        match self.slots.get(id.index()).map(|s| s.state) {
            Some(State::InFlight { released: true }) => self.free(id),
            Some(State::InFlight { released: false }) => self.slots[id.index()].state = State::Owned,
            _ => debug_assert!(false, "finish_io of a buffer not in flight"),
        }
    }

    /// Marks `id` read by one more socket send: an owned buffer, or one other sends are reading already (never one a
    /// storage op has in flight).
    pub(crate) fn start_send(&mut self, id: BufferId) -> Result<(), StartIoError> {
        let slot = self.slots.get_mut(id.index()).ok_or(StartIoError::NotAllocated)?;
        slot.state = match slot.state {
            State::Owned => State::Sending { released: false, sends: 1 },
            State::Sending { released: false, sends } if sends < u16::MAX => {
                State::Sending { released: false, sends: sends + 1 }
            }
            State::Sending { .. } | State::InFlight { .. } => return Err(StartIoError::Busy),
            State::Free => return Err(StartIoError::NotAllocated),
        };
        Ok(())
    }

    /// The allocated length of `id` when a send may read it (owned, or being sent already).
    pub(crate) fn sendable_len(&self, id: BufferId) -> Option<usize> {
        let slot = self.slots.get(id.index())?;
        matches!(slot.state, State::Owned | State::Sending { released: false, .. }).then_some(slot.len)
    }

    /// One send reading `id` is done with it: when it was the last, back to the caller, or to the free list if it
    /// was released meanwhile.
    pub(crate) fn finish_send(&mut self, id: BufferId) {
        match self.slots.get(id.index()).map(|s| s.state) {
            Some(State::Sending { released, sends }) if sends > 1 => {
                self.slots[id.index()].state = State::Sending { released, sends: sends - 1 };
            }
            Some(State::Sending { released: true, .. }) => self.free(id),
            Some(State::Sending { released: false, .. }) => self.slots[id.index()].state = State::Owned,
            _ => debug_assert!(false, "finish_send of a buffer not being sent"),
        }
    }

    /// The largest length [`BufferPool::alloc`] accepts (the largest size class).
    pub fn buffer_size(&self) -> usize {
        self.classes.last().map_or(0, |c| c.size)
    }

    /// Total number of buffers.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Number of free buffers (all classes).
    pub fn available(&self) -> usize {
        self.classes.iter().map(|c| c.free.len()).sum()
    }

    /// Buffers held by anonymous holders now, all classes together ([`BufferBudget`]): 0 once every one of them
    /// released its buffers.
    pub fn anonymous_held(&self) -> usize {
        self.anonymous_held.iter().sum()
    }

    /// Size classes as (buffer size, count), smallest first.
    pub fn classes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.classes.iter().map(|c| (c.size, c.count))
    }

    /// Whether the region is backed by huge pages.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// Length in bytes of the whole region (what a NIC registers as one memory region).
    pub fn region_len(&self) -> usize {
        self.map_len
    }

    /// Offset of `id`'s first byte from the region's start (for RDMA: local address = region base + offset).
    /// `None` for an unknown id.
    pub fn buffer_offset(&self, id: BufferId) -> Option<usize> {
        self.slots.get(id.index()).map(|s| s.offset)
    }

    /// Base address of the region, for registering it with an RDMA NIC or addressing a buffer in an io_uring send;
    /// the caller must only let the kernel or hardware touch buffers that are in flight.
    pub(crate) fn region_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The region as io_uring fixed buffers (index = `IoBuffer::fixed_index`), each at most 1 GiB.
    pub(crate) fn fixed_iovecs(&self) -> Vec<libc::iovec> {
        self.fixed
            .iter()
            .map(|&(offset, len)| libc::iovec {
                // SAFETY: every unit lies inside the mapping.
                iov_base: unsafe { self.base.as_ptr().add(offset) }.cast(),
                iov_len: len,
            })
            .collect()
    }
}

impl BufferPool {
    /// Never unmap the region: a device outside the engine's control (librbd, at exit) may still write to it.
    #[cfg(feature = "rbd")]
    pub(crate) fn leak(&mut self) {
        // Drop unmaps `map_len` bytes; none is nothing.
        self.map_len = 0;
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        if self.map_len == 0 {
            return;
        }
        // SAFETY: `base`/`map_len` are exactly what mmap returned; the owning engine drops its ring (which
        // unregisters the buffers and waits for nothing of ours: no op can be in flight once the ring is gone)
        // before the pool, see the field order of `IoEngine`.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
        if rc != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "munmap of the buffer pool failed");
        }
    }
}

/// The size classes as a pool lays them out: empty classes dropped, sizes rounded up to `BUFFER_ALIGN`, smallest
/// first.
fn layout(classes: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut sorted: Vec<(usize, usize)> = classes
        .iter()
        .filter(|&&(_, count)| count > 0)
        .map(|&(size, count)| (size.max(1).next_multiple_of(BUFFER_ALIGN), count))
        .collect();
    sorted.sort_unstable();
    sorted
}

/// The bytes of buffers a pool of `classes` (buffer size, count) holds: what it maps (before rounding up to the
/// page size) and registers. `None`: too large.
pub fn region_bytes(classes: &[(usize, usize)]) -> Option<usize> {
    layout(classes)
        .iter()
        .try_fold(0usize, |acc, &(size, count)| size.checked_mul(count).and_then(|b| acc.checked_add(b)))
        .filter(|&t| t <= isize::MAX as usize / 2)
}

/// Maps `len` bytes of anonymous memory, huge pages first. Returns (base, mapped length, huge).
fn map_region(len: usize) -> Result<(NonNull<u8>, usize, bool), BackendError> {
    let huge_len = len.next_multiple_of(HUGE_PAGE);
    if let Some(base) = mmap_anonymous(huge_len, libc::MAP_HUGETLB) {
        return Ok((base, huge_len, true));
    }
    let len = len.next_multiple_of(BUFFER_ALIGN);
    let base = mmap_anonymous(len, 0).ok_or_else(|| BackendError::PoolMap(len, io::Error::last_os_error()))?;
    // Transparent huge pages are a hint only; failure is harmless.
    // SAFETY: advising a range we just mapped.
    let _ = unsafe { libc::madvise(base.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    Ok((base, len, false))
}

fn mmap_anonymous(len: usize, extra_flags: libc::c_int) -> Option<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping at an address of the kernel's choice aliases nothing.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(ptr.cast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_until_exhausted_then_release() {
        let mut pool = BufferPool::new(&[(8192, 3)]).unwrap();
        assert_eq!(pool.capacity(), 3);
        let ids: Vec<_> = (0..3).map(|_| pool.alloc(8192).unwrap()).collect();
        assert_eq!(pool.alloc(1), None);
        assert_eq!(pool.alloc(8193), None);
        pool.release(ids[1]);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.alloc(100), Some(ids[1]));
        assert_eq!(pool.get(ids[1]).len(), 100);
    }

    #[test]
    fn buffers_are_aligned_disjoint_and_hold_data() {
        let mut pool = BufferPool::new(&[(4096, 2), (65536, 2)]).unwrap();
        let a = pool.alloc(4096).unwrap();
        let b = pool.alloc(4096).unwrap();
        let c = pool.alloc(4096).unwrap(); // small class exhausted: falls back to the large class
        assert_eq!(pool.get(c).len(), 4096);
        for (i, id) in [a, b, c].into_iter().enumerate() {
            assert_eq!(pool.buffer_offset(id).unwrap() % BUFFER_ALIGN, 0);
            pool.get_mut(id).fill(u8::try_from(i).unwrap() + 1);
        }
        for (i, id) in [a, b, c].into_iter().enumerate() {
            assert!(pool.get(id).iter().all(|&x| x == u8::try_from(i).unwrap() + 1));
        }
        assert_eq!(pool.region_ptr() as usize % BUFFER_ALIGN, 0);
        assert_eq!(pool.buffer_size(), 65536);
    }

    #[test]
    fn release_while_in_flight_is_deferred() {
        let mut pool = BufferPool::new(&[(4096, 1)]).unwrap();
        let id = pool.alloc(4096).unwrap();
        pool.start_io(id, 4096).unwrap();
        assert!(pool.get(id).is_empty());
        assert_eq!(pool.start_io(id, 4096).unwrap_err(), StartIoError::Busy);
        pool.release(id);
        assert_eq!(pool.alloc(4096), None);
        pool.finish_io(id);
        assert_eq!(pool.alloc(4096), Some(id));
    }

    #[test]
    fn sends_share_a_buffer_and_the_last_one_releases_it() {
        let mut pool = BufferPool::new(&[(4096, 1)]).unwrap();
        let id = pool.alloc(4096).unwrap();
        pool.start_send(id).unwrap();
        pool.start_send(id).unwrap(); // the rest of a partly sent buffer, before the first send's notification
        assert!(pool.get(id).is_empty(), "no writes while the kernel reads it");
        assert_eq!(pool.start_io(id, 4096).unwrap_err(), StartIoError::Busy, "no storage op into a buffer being sent");
        pool.release(id);
        pool.finish_send(id);
        assert_eq!(pool.alloc(4096), None, "one send still reads it");
        pool.finish_send(id);
        assert_eq!(pool.alloc(4096), Some(id));
        // Unreleased, it goes back to its owner, and a storage op in flight keeps sends out.
        pool.start_send(id).unwrap();
        pool.finish_send(id);
        assert_eq!(pool.get(id).len(), 4096);
        pool.start_io(id, 4096).unwrap();
        assert_eq!(pool.start_send(id).unwrap_err(), StartIoError::Busy);
    }

    #[test]
    fn bad_ids_are_harmless() {
        let mut pool = BufferPool::new(&[(4096, 1)]).unwrap();
        let bogus = BufferId(7);
        assert!(pool.get(bogus).is_empty());
        assert!(pool.get_mut(bogus).is_empty());
        pool.release(bogus);
        let id = pool.alloc(10).unwrap();
        assert_eq!(pool.start_io(id, 11).unwrap_err(), StartIoError::TooShort);
        pool.release(id);
        pool.release(id); // double release ignored
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.start_io(id, 1).unwrap_err(), StartIoError::NotAllocated);
    }

    #[test]
    fn empty_pool_is_rejected() {
        assert!(BufferPool::new(&[]).is_err());
        assert!(BufferPool::new(&[(4096, 0)]).is_err());
    }
}
