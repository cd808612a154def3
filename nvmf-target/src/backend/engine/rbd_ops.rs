//! Ops on RBD images: started in librbd from `push`, ended through the engine's completion slots
//! (`rbd::Completions`) in `reap`.
//!
//! The engine keeps, per slot, what the op's end must report and release: its tag, its buffer (in flight in the
//! pool until then, as for the kernel's ops) and the storage (so the image stays open). Slots are as many as the
//! ring's completion queue; when all are taken `push` hands the op back like a full ring.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::pool::BufferPool;
use super::super::rbd::{Aio, Completions, Image};
use super::super::storage::Kind;
use super::super::{BufferId, Storage};
use super::{buffer_error, IoCompletion, IoEngine, IoOp};

/// What a slot's op must report.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A read of this many bytes: librbd returns the bytes read.
    Read(u32),
    /// A write of this many bytes: librbd returns 0 once all are written.
    Write(u32),
    Done,
}

#[derive(Debug)]
struct Entry {
    tag: u64,
    buffer: Option<BufferId>,
    expect: Expect,
    storage: Arc<Storage>,
}

/// An engine's RBD ops in flight.
#[derive(Debug)]
pub(super) struct RbdOps {
    completions: Completions,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
}

impl RbdOps {
    pub(super) fn new(completions: Completions) -> RbdOps {
        let count = completions.capacity();
        RbdOps { completions, entries: (0..count).map(|_| None).collect(), free: (0..count).rev().collect() }
    }

    /// Ops started and not yet delivered.
    pub(super) fn in_flight(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Deliver every finished op to `f`, its buffer back in the caller's hands first.
    pub(super) fn drain(&mut self, pool: &mut BufferPool, f: &mut impl FnMut(IoCompletion)) {
        let (entries, free) = (&mut self.entries, &mut self.free);
        self.completions.drain(|index, rc| {
            let Some(entry) = entries.get_mut(index as usize).and_then(Option::take) else {
                tracing::error!(index, "RBD completion for no op in flight");
                return;
            };
            free.push(index);
            if let Some(id) = entry.buffer {
                pool.finish_io(id);
            }
            if let Kind::Rbd(image) = entry.storage.kind() {
                image.count_end(rc);
            }
            f(IoCompletion { tag: entry.tag, result: aio_result(rc, entry.expect) });
        });
    }

    /// Wait (at most `limit`) for every op in librbd to end: their buffers are the pool's. The ops' results are
    /// dropped. `false` when some are still in librbd.
    pub(super) fn wait_all(&mut self, pool: &mut BufferPool, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.in_flight() > 0 {
            self.drain(pool, &mut drop);
            if Instant::now() >= deadline {
                return self.in_flight() == 0;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Keep the slots alive for ops librbd never ended (the engine is going away without them).
    pub(super) fn leak(self) {
        self.completions.leak();
    }
}

/// librbd's return value as the op's result.
fn aio_result(rc: i64, expect: Expect) -> io::Result<u32> {
    if rc < 0 {
        let errno = i32::try_from(-rc).unwrap_or(libc::EIO);
        return Err(io::Error::from_raw_os_error(errno));
    }
    match expect {
        Expect::Read(len) if rc == i64::from(len) => Ok(len),
        Expect::Read(_) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short RBD read")),
        Expect::Write(len) if rc == 0 || rc == i64::from(len) => Ok(len),
        Expect::Write(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "short RBD write")),
        Expect::Done => Ok(0),
    }
}

impl IoEngine {
    /// Start `op` on RBD image `image` (the range is checked). `Err(op)` when every slot is taken.
    pub(super) fn push_rbd(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        image: &Image,
        op: IoOp,
        buf: Option<BufferId>,
    ) -> Result<(), IoOp> {
        if let Some(result) = super::completes_without_kernel(op, buf, storage, true) {
            self.complete_now(tag, result);
            return Ok(());
        }
        if self.rbd.is_none() {
            match self.ring.event_fd_handle() {
                Ok(wake) => self.rbd = Some(RbdOps::new(Completions::new(self.ring.cq_entries(), wake))),
                Err(e) => {
                    self.complete_now(tag, Err(e));
                    return Ok(());
                }
            }
        }
        let Some(rbd) = self.rbd.as_mut() else { return Err(op) };
        let Some(index) = rbd.free.pop() else { return Err(op) };
        let pool = &mut self.pool;
        let (aio, buffer, expect) = match (op, buf) {
            (IoOp::Read { offset, len }, Some(id)) => match pool.start_io(id, len) {
                Ok(b) => (Aio::Read { offset, len, buf: b.ptr() }, Some(id), Expect::Read(len)),
                Err(e) => {
                    rbd.free.push(index);
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Write { offset, len, .. }, Some(id)) => match pool.start_io(id, len) {
                // A write is on the OSDs when it completes (no librbd cache): FUA needs nothing more.
                Ok(b) => (Aio::Write { offset, len, buf: b.ptr() }, Some(id), Expect::Write(len)),
                Err(e) => {
                    rbd.free.push(index);
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Flush, _) => (Aio::Flush, None, Expect::Done),
            (IoOp::Discard { offset, len }, _) => (Aio::Discard { offset, len }, None, Expect::Done),
            (IoOp::WriteZeroes { offset, len }, _) => (Aio::WriteZeroes { offset, len }, None, Expect::Done),
            // completes_without_kernel answered reads and writes without a buffer.
            (IoOp::Read { .. } | IoOp::Write { .. }, None) => unreachable!("refused above"),
        };
        let (callback, arg) = rbd.completions.callback(index);
        rbd.entries[index as usize] = Some(Entry { tag, buffer, expect, storage: Arc::clone(storage) });
        // SAFETY: the buffer is in flight in the pool (nobody else reads or writes it, and the engine's drop waits
        // for it or leaks the pool) until the slot's completion is drained; the slot lives as long as the
        // completions (kept or leaked by the engine).
        let started = unsafe { image.start(aio, callback, arg) };
        if let Err(e) = started {
            if let Some(entry) = rbd.entries[index as usize].take() {
                if let Some(id) = entry.buffer {
                    pool.finish_io(id);
                }
            }
            rbd.free.push(index);
            self.complete_now(tag, Err(e));
        }
        Ok(())
    }
}
