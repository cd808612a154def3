//! How an RBD op's end reaches the reactor that started it, without a lock, an allocation or a channel per op.
//!
//! Each engine has one [`Completions`]: a fixed array of slots (one per op it may have in flight) shared with
//! librbd's callback. The callback (on a librbd thread) stores the op's return value in its slot, pushes the slot
//! onto a lock-free stack, and writes the engine's eventfd, unless a write since the reactor last drained the
//! stack will already wake it. The reactor takes the whole stack with one swap in `reap`. The slot's address is the
//! callback's argument, so the shared array lives as long as any op may still call back: the engine waits for its
//! ops when dropped, and leaks the array if librbd never answers (see `IoEngine`'s drop).

use std::ffi::c_void;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::ffi;

/// The end of a stack (no slot).
const NONE: u32 = u32::MAX;

struct Slot {
    /// The array this slot belongs to (set at creation, never changed).
    owner: *const Shared,
    index: u32,
    /// The next slot on the stack.
    next: AtomicU32,
    /// librbd's return value: bytes or 0, or a negative errno.
    result: AtomicI64,
    /// Where a Compare and Write's first mismatching offset goes (written by librbd, never read: NVMe does not
    /// report it).
    mismatch: AtomicU64,
}

struct Shared {
    slots: Box<[Slot]>,
    /// Top of the stack of completed slots.
    head: AtomicU32,
    /// The eventfd was written since the reactor last took the stack.
    signalled: AtomicBool,
    /// The engine's eventfd (a duplicate).
    wake: File,
}

// SAFETY: `owner` points at the `Shared` holding the slot (immutable after construction); the rest is atomics
// and a file, which any thread may use.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// An engine's completion slots.
pub(crate) struct Completions {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions").field("slots", &self.shared.slots.len()).finish()
    }
}

impl Completions {
    /// `count` slots, waking the reactor through `wake` (the engine's eventfd).
    pub(crate) fn new(count: u32, wake: File) -> Completions {
        let count = count.min(NONE - 1);
        let shared = Arc::new_cyclic(|owner: &Weak<Shared>| Shared {
            slots: (0..count)
                .map(|index| Slot {
                    owner: owner.as_ptr(),
                    index,
                    next: AtomicU32::new(NONE),
                    result: AtomicI64::new(0),
                    mismatch: AtomicU64::new(0),
                })
                .collect(),
            head: AtomicU32::new(NONE),
            signalled: AtomicBool::new(false),
            wake,
        });
        Completions { shared }
    }

    /// How many ops may be in flight at once.
    pub(crate) fn capacity(&self) -> u32 {
        // The count was bounded by u32 at creation.
        u32::try_from(self.shared.slots.len()).unwrap_or(NONE - 1)
    }

    /// The callback and argument that complete slot `index` (not in flight).
    pub(crate) fn callback(
        &self,
        index: u32,
    ) -> (unsafe extern "C" fn(ffi::rbd_completion_t, *mut c_void), *mut c_void) {
        let slot = &self.shared.slots[index as usize];
        (on_complete, std::ptr::from_ref(slot).cast_mut().cast())
    }

    /// Where slot `index`'s Compare and Write may store its mismatch offset (valid as long as the slot).
    pub(crate) fn mismatch_offset(&self, index: u32) -> *mut u64 {
        self.shared.slots[index as usize].mismatch.as_ptr()
    }

    /// Hands every completed slot's `(index, result)` to `f`.
    pub(crate) fn drain(&self, mut f: impl FnMut(u32, i64)) {
        let shared = &*self.shared;
        // Cleared before the take: a callback pushing after the take sees it cleared and writes the eventfd.
        shared.signalled.store(false, Ordering::SeqCst);
        let mut index = shared.head.swap(NONE, Ordering::SeqCst);
        while index != NONE {
            let slot = &shared.slots[index as usize];
            let next = slot.next.load(Ordering::Relaxed);
            f(index, slot.result.load(Ordering::Relaxed));
            index = next;
        }
    }

    /// Keep the slots alive for good: ops still in librbd will call back into them after the engine is gone.
    pub(crate) fn leak(self) {
        std::mem::forget(self.shared);
    }
}

/// librbd's completion callback: record, push, wake.
unsafe extern "C" fn on_complete(completion: ffi::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is a slot of a live `Shared` (Completions::callback; the engine outlives its ops or leaks the
    // slots), and `completion` is the one librbd calls back with.
    let (slot, result) = unsafe {
        let slot = &*arg.cast::<Slot>();
        let result = ffi::rbd_aio_get_return_value(completion);
        ffi::rbd_aio_release(completion);
        (slot, result as i64)
    };
    slot.result.store(result, Ordering::Relaxed);
    // SAFETY: `owner` is the `Shared` holding `slot`, alive as `slot` is.
    let shared = unsafe { &*slot.owner };
    let mut head = shared.head.load(Ordering::Relaxed);
    loop {
        slot.next.store(head, Ordering::Relaxed);
        match shared.head.compare_exchange_weak(head, slot.index, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => break,
            Err(current) => head = current,
        }
    }
    if !shared.signalled.swap(true, Ordering::SeqCst) {
        if let Err(e) = (&shared.wake).write_all(&1u64.to_ne_bytes()) {
            tracing::warn!(error = %e, "RBD completion: eventfd write failed");
        }
    }
}
