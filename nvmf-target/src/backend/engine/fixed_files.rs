//! Fixed-file slots: how the ring names a storage's file. A storage gets a registered slot on first use (while
//! slots last) and loses it once nobody holds the storage; otherwise ops use its plain descriptor and keep the
//! storage open until they complete.

use std::hash::Hasher;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};

use super::super::ring::FileRef;
use super::super::Storage;
use super::{refused, IoEngine};

/// Hashes a `u64` storage id to itself.
#[derive(Debug, Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
pub(super) struct FileSlot {
    slot: u32,
    storage: Weak<Storage>,
}

impl IoEngine {
    /// How this ring names `storage`'s file: a fixed slot (registered on first use), or the plain descriptor plus
    /// an `Arc` that keeps it open while the op is in flight.
    pub(super) fn file_ref(&mut self, storage: &Arc<Storage>) -> Result<(FileRef, Option<Arc<Storage>>), io::Error> {
        let fd: RawFd = storage.raw_fd().ok_or_else(|| refused("storage has no file"))?;
        if let Some(slot) = self.files.get(&storage.id()) {
            return Ok((FileRef::Fixed(slot.slot), None));
        }
        if self.ring.file_slots() > 0 {
            self.reclaim_file_slots();
            if let Some(slot) = self.free_file_slots.pop() {
                match self.ring.register_file(slot, fd) {
                    Ok(()) => {
                        self.files.insert(storage.id(), FileSlot { slot, storage: Arc::downgrade(storage) });
                        return Ok((FileRef::Fixed(slot), None));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, storage = %storage.describe(), "fixed file registration failed");
                        self.free_file_slots.push(slot);
                    }
                }
            }
        }
        Ok((FileRef::Raw(fd), Some(Arc::clone(storage))))
    }

    /// Frees the fixed slots of storages nobody holds any more (their files then close once in-flight ops end).
    fn reclaim_file_slots(&mut self) {
        let dead: Vec<u64> =
            self.files.iter().filter(|(_, f)| f.storage.strong_count() == 0).map(|(&k, _)| k).collect();
        for id in dead {
            if let Some(f) = self.files.remove(&id) {
                if let Err(e) = self.ring.unregister_file(f.slot) {
                    tracing::warn!(error = %e, slot = f.slot, "fixed file unregistration failed");
                } else {
                    self.free_file_slots.push(f.slot);
                }
            }
        }
    }
}
