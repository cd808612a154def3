//! RAM-backed storage: lazily allocated chunks, zeros until written.
//!
//! Shared by every reactor (inside an `Arc<Storage>`). Each 64 KiB chunk sits behind its own `RwLock`, so
//! reactors contend only when they touch the same chunk at the same time; a chunk is allocated on its first write
//! and freed again when a discard covers it whole. Never blocks on anything but those short chunk locks.

use std::sync::{PoisonError, RwLock};

const CHUNK: usize = 64 * 1024;

type Chunk = RwLock<Option<Box<[u8]>>>;

/// The bytes of a memory namespace.
pub(crate) struct MemoryStore {
    chunks: Box<[Chunk]>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("chunks", &self.chunks.len()).finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// A store of `size` bytes, all zero. `None` when `size` does not fit this address space.
    pub(crate) fn new(size: u64) -> Option<Self> {
        let size = usize::try_from(size).ok()?;
        let count = size.div_ceil(CHUNK);
        let chunks = (0..count).map(|_| RwLock::new(None)).collect();
        Some(MemoryStore { chunks })
    }

    /// Calls `f(chunk index, offset in chunk, range in the caller's buffer)` for each chunk `[offset, offset+len)`
    /// touches. The caller has bounds-checked the range against the capacity.
    fn for_each_chunk(offset: u64, len: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let Ok(mut pos) = usize::try_from(offset) else { return };
        let mut done = 0;
        while done < len {
            let index = pos / CHUNK;
            let within = pos % CHUNK;
            let n = (CHUNK - within).min(len - done);
            f(index, within, done..done + n);
            done += n;
            pos += n;
        }
    }

    /// Copies `[offset, offset + out.len())` into `out`; never-written bytes read as zero.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) {
        Self::for_each_chunk(offset, out.len(), |index, within, range| {
            let Some(lock) = self.chunks.get(index) else { return };
            let chunk = lock.read().unwrap_or_else(PoisonError::into_inner);
            let dst = &mut out[range];
            match chunk.as_deref() {
                Some(data) => dst.copy_from_slice(&data[within..within + dst.len()]),
                None => dst.fill(0),
            }
        });
    }

    /// Copies `data` to `[offset, offset + data.len())`.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        Self::for_each_chunk(offset, data.len(), |index, within, range| {
            let Some(lock) = self.chunks.get(index) else { return };
            let mut chunk = lock.write().unwrap_or_else(PoisonError::into_inner);
            let src = &data[range];
            let bytes = chunk.get_or_insert_with(|| vec![0u8; CHUNK].into_boxed_slice());
            bytes[within..within + src.len()].copy_from_slice(src);
        });
    }

    /// Zeroes `[offset, offset + len)`, freeing chunks the range covers whole.
    pub(crate) fn zero(&self, offset: u64, len: u64) {
        let Ok(len) = usize::try_from(len) else { return };
        Self::for_each_chunk(offset, len, |index, within, range| {
            let Some(lock) = self.chunks.get(index) else { return };
            let mut chunk = lock.write().unwrap_or_else(PoisonError::into_inner);
            if range.len() == CHUNK {
                *chunk = None;
            } else if let Some(bytes) = chunk.as_deref_mut() {
                bytes[within..within + range.len()].fill(0);
            }
        });
    }

    /// If `[offset, offset + compare.len())` holds `compare`, replaces it with `data` (as long) and returns true;
    /// false, with nothing written, otherwise. Atomic with respect to every read and write of the store: it holds the
    /// write locks of all the chunks it touches (taken in ascending order, the only order anything takes two in).
    pub(crate) fn compare_and_write(&self, offset: u64, compare: &[u8], data: &[u8]) -> bool {
        let (Ok(start), true) = (usize::try_from(offset), compare.len() == data.len()) else { return false };
        let first = start / CHUNK;
        let end = start.saturating_add(data.len()).div_ceil(CHUNK).min(self.chunks.len());
        // Held for the whole operation; a Compare and Write is one or a few blocks (the host's atomic unit).
        let mut chunks: Vec<_> = self.chunks[first.min(end)..end]
            .iter()
            .map(|c| c.write().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let mut same = true;
        Self::for_each_chunk(offset, compare.len(), |index, within, range| {
            let expected = &compare[range];
            same &= match chunks.get(index - first).and_then(|c| c.as_deref()) {
                Some(bytes) => bytes[within..within + expected.len()] == *expected,
                None => expected.iter().all(|&b| b == 0),
            };
        });
        if !same {
            return false;
        }
        Self::for_each_chunk(offset, data.len(), |index, within, range| {
            let Some(chunk) = chunks.get_mut(index - first) else { return };
            let src = &data[range];
            let bytes = chunk.get_or_insert_with(|| vec![0u8; CHUNK].into_boxed_slice());
            bytes[within..within + src.len()].copy_from_slice(src);
        });
        true
    }

    /// Number of chunks currently allocated (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn allocated_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| c.read().unwrap_or_else(PoisonError::into_inner).is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_reads_zero_and_writes_read_back_across_chunks() {
        let store = MemoryStore::new(4 * CHUNK as u64).unwrap();
        let mut out = vec![0xffu8; 3 * CHUNK];
        store.read(512, &mut out);
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(store.allocated_chunks(), 0);

        let data: Vec<u8> = (0..CHUNK + 1024).map(|i| u8::try_from(i % 251).unwrap()).collect();
        let offset = u64::try_from(CHUNK - 512).unwrap();
        store.write(offset, &data);
        assert_eq!(store.allocated_chunks(), 3);
        let mut back = vec![0u8; data.len()];
        store.read(offset, &mut back);
        assert_eq!(back, data);
    }

    #[test]
    fn compare_and_write_writes_only_on_a_match_across_chunks() {
        let store = MemoryStore::new(4 * CHUNK as u64).unwrap();
        let offset = u64::try_from(CHUNK - 512).unwrap();
        let zeros = vec![0u8; 1024];
        let ones = vec![1u8; 1024];
        // Never written: compares equal to zeros.
        assert!(!store.compare_and_write(offset, &ones, &ones));
        assert_eq!(store.allocated_chunks(), 0);
        assert!(store.compare_and_write(offset, &zeros, &ones));
        let mut back = vec![0u8; 1024];
        store.read(offset, &mut back);
        assert_eq!(back, ones);
        // The old contents no longer match: nothing is written.
        assert!(!store.compare_and_write(offset, &zeros, &vec![2u8; 1024]));
        store.read(offset, &mut back);
        assert_eq!(back, ones);
    }

    #[test]
    fn zero_frees_whole_chunks_and_clears_partial_ones() {
        let store = MemoryStore::new(4 * CHUNK as u64).unwrap();
        store.write(0, &vec![7u8; 4 * CHUNK]);
        store.zero(4096, 2 * CHUNK as u64);
        assert_eq!(store.allocated_chunks(), 3); // chunk 1 freed, chunks 0 and 2 partially zeroed
        let mut out = vec![0u8; 4 * CHUNK];
        store.read(0, &mut out);
        assert!(out[..4096].iter().all(|&b| b == 7));
        assert!(out[4096..4096 + 2 * CHUNK].iter().all(|&b| b == 0));
        assert!(out[4096 + 2 * CHUNK..].iter().all(|&b| b == 7));
    }
}
