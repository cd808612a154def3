//! Ops on RBD images: started in librbd from `push`, ended through the engine's completion slots
//! (`rbd::Completions`) in `reap`.
//!
//! The engine keeps, per slot, what the op's end must report and release: its tag, its buffer (in flight in the
//! pool until then, as for the kernel's ops) and the storage (so the image stays open). Slots are as many as the
//! ring's completion queue; when all are taken `push` hands the op back like a full ring.
//!
//! A fenced client may never end some of its ops (those librbd queued behind the exclusive lock it can no longer
//! take), and one cut off from the cluster answers its ops only at the OSD timeout. Once an op ends with
//! `ESHUTDOWN` or `ETIMEDOUT`, or starts while its image's client is being replaced, every `reap` looks for ops on a
//! handle since replaced and delivers them as failed (`ESHUTDOWN`: a path error, retried elsewhere), so neither the
//! command nor a reactor's shutdown waits for them; the slot and the buffer stay reserved (librbd may still write a
//! read's data) until librbd calls back, or forever. The look stops when no image is recovering and no such op is
//! left.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::pool::BufferPool;
use super::super::rbd::{Aio, Completions, Image};
use super::super::storage::Kind;
use super::super::{BufferId, Storage};
use super::compare_and_write::EngineFull;
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
    /// The image handle's generation the op ran on.
    generation: u64,
    /// The op's buffers (a Compare and Write has two), in flight in the pool until it ends.
    buffers: [Option<BufferId>; 2],
    expect: Expect,
    storage: Arc<Storage>,
    /// Delivered as failed while still in librbd (see the module doc).
    abandoned: bool,
}

/// An engine's RBD ops in flight.
#[derive(Debug)]
pub(super) struct RbdOps {
    completions: Completions,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// Entries delivered as failed but still in librbd.
    abandoned: usize,
    /// An op ended with `ESHUTDOWN` or `ETIMEDOUT` (its image's client is being replaced): look for ops on replaced
    /// handles at each drain.
    fenced: bool,
}

impl RbdOps {
    pub(super) fn new(completions: Completions) -> RbdOps {
        let count = completions.capacity();
        RbdOps {
            completions,
            entries: (0..count).map(|_| None).collect(),
            free: (0..count).rev().collect(),
            abandoned: 0,
            fenced: false,
        }
    }

    /// Ops started and not yet delivered.
    pub(super) fn in_flight(&self) -> usize {
        self.entries.len() - self.free.len() - self.abandoned
    }

    /// Whether `drain` looks for ops on replaced handles (an image's client was fenced).
    pub(super) fn watches_fence(&self) -> bool {
        self.fenced
    }

    /// Ops in librbd, delivered or not (slots taken).
    fn in_librbd(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Deliver every finished op to `f`, its buffer back in the caller's hands first.
    pub(super) fn drain(&mut self, pool: &mut BufferPool, f: &mut impl FnMut(IoCompletion)) {
        let (entries, free, abandoned, fenced) =
            (&mut self.entries, &mut self.free, &mut self.abandoned, &mut self.fenced);
        self.completions.drain(|index, rc| {
            let Some(entry) = entries.get_mut(index as usize).and_then(Option::take) else {
                tracing::error!(index, "RBD completion for no op in flight");
                return;
            };
            free.push(index);
            for id in entry.buffers.into_iter().flatten() {
                pool.finish_io(id);
            }
            if let Kind::Rbd(image) = entry.storage.kind() {
                image.count_end(entry.generation, rc);
            }
            *fenced |= rc == -i64::from(libc::ESHUTDOWN) || rc == -i64::from(libc::ETIMEDOUT);
            if entry.abandoned {
                *abandoned -= 1;
                return;
            }
            f(IoCompletion { tag: entry.tag, result: aio_result(rc, entry.expect) });
        });
        if self.fenced {
            self.abandon_replaced(f);
        }
    }

    /// Deliver the ops on replaced handles as failed (see the module doc); stop looking once no image is
    /// recovering and none is left.
    fn abandon_replaced(&mut self, f: &mut impl FnMut(IoCompletion)) {
        let mut recovering = false;
        for entry in self.entries.iter_mut().flatten().filter(|e| !e.abandoned) {
            let Kind::Rbd(image) = entry.storage.kind() else { continue };
            if image.generation() != entry.generation {
                entry.abandoned = true;
                self.abandoned += 1;
                let fenced = io::Error::from_raw_os_error(libc::ESHUTDOWN);
                f(IoCompletion { tag: entry.tag, result: Err(fenced) });
            } else {
                recovering |= image.is_recovering();
            }
        }
        self.fenced = recovering;
    }

    /// Ops that ran on an image handle since replaced (its client fenced): librbd may never end them.
    fn on_replaced_handles(&self) -> usize {
        let replaced = |e: &Entry| match e.storage.kind() {
            Kind::Rbd(image) => e.abandoned || image.generation() != e.generation,
            _ => false,
        };
        self.entries.iter().flatten().filter(|e| replaced(e)).count()
    }

    /// Wait (at most `limit`) for the ops in librbd to end: their buffers are the pool's. Ops on a handle the
    /// cluster fenced are not waited for. The ops' results are dropped. `false` when some are still in librbd.
    pub(super) fn wait_all(&mut self, pool: &mut BufferPool, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        if self.in_librbd() > 0 {
            tracing::info!(in_librbd = self.in_librbd(), "waiting for the RBD ops in librbd");
        }
        while self.in_librbd() > self.on_replaced_handles() {
            self.drain(pool, &mut drop);
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.drain(pool, &mut drop);
        self.in_librbd() == 0
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
        if let Err(e) = self.start_rbd_ops() {
            self.complete_now(tag, Err(e));
            return Ok(());
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
        let entry = Entry {
            tag,
            generation: 0,
            buffers: [buffer, None],
            expect,
            storage: Arc::clone(storage),
            abandoned: false,
        };
        self.start_rbd(image, index, entry, aio);
        Ok(())
    }

    /// Start a Compare and Write of `len` bytes at `offset` on RBD image `image`: `write`'s bytes if the image
    /// holds `compare`'s (else it ends with `EILSEQ`). The range and the length are checked.
    /// [`EngineFull`] when every slot is taken.
    pub(super) fn push_rbd_compare_and_write(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        image: &Image,
        (offset, len): (u64, u32),
        compare: BufferId,
        write: BufferId,
    ) -> Result<(), EngineFull> {
        if let Err(e) = self.start_rbd_ops() {
            self.complete_now(tag, Err(e));
            return Ok(());
        }
        let Some(rbd) = self.rbd.as_mut() else { return Err(EngineFull) };
        let Some(index) = rbd.free.pop() else { return Err(EngineFull) };
        let pool = &mut self.pool;
        let cmp = match pool.start_io(compare, len) {
            Ok(b) => b.ptr(),
            Err(e) => {
                rbd.free.push(index);
                self.complete_now(tag, Err(buffer_error(e)));
                return Ok(());
            }
        };
        let buf = match pool.start_io(write, len) {
            Ok(b) => b.ptr(),
            Err(e) => {
                pool.finish_io(compare);
                rbd.free.push(index);
                self.complete_now(tag, Err(buffer_error(e)));
                return Ok(());
            }
        };
        let mismatch = rbd.completions.mismatch_offset(index);
        let aio = Aio::CompareAndWrite { offset, len, cmp, buf, mismatch };
        let buffers = [Some(compare), Some(write)];
        let entry = Entry {
            tag,
            generation: 0,
            buffers,
            expect: Expect::Write(len),
            storage: Arc::clone(storage),
            abandoned: false,
        };
        self.start_rbd(image, index, entry, aio);
        Ok(())
    }

    /// Set up the engine's RBD ops at the first.
    fn start_rbd_ops(&mut self) -> io::Result<()> {
        if self.rbd.is_none() {
            let wake = self.ring.event_fd_handle()?;
            self.rbd = Some(RbdOps::new(Completions::new(self.ring.cq_entries(), wake)));
        }
        Ok(())
    }

    /// Hand `aio` to librbd as slot `index`'s op, described by `entry`; an op librbd refuses completes at once.
    fn start_rbd(&mut self, image: &Image, index: u32, entry: Entry, aio: Aio) {
        let Some(rbd) = self.rbd.as_mut() else { return };
        let tag = entry.tag;
        // An op started while its image's client is being replaced may run on the old one, which may never answer
        // (fenced, or cut off): watch for the replacement, to deliver it as failed then.
        rbd.fenced |= image.is_recovering();
        let (callback, arg) = rbd.completions.callback(index);
        rbd.entries[index as usize] = Some(entry);
        // SAFETY: the buffers are in flight in the pool (nobody else reads or writes them, and the engine's drop
        // waits for them or leaks the pool) until the slot's completion is drained; the slot (and its mismatch
        // offset) lives as long as the completions (kept or leaked by the engine).
        let started = unsafe { image.start(aio, callback, arg) };
        if let (Ok(generation), Some(entry)) = (&started, rbd.entries[index as usize].as_mut()) {
            entry.generation = *generation;
        }
        if let Err(e) = started {
            if let Some(entry) = rbd.entries[index as usize].take() {
                for id in entry.buffers.into_iter().flatten() {
                    self.pool.finish_io(id);
                }
            }
            rbd.free.push(index);
            self.complete_now(tag, Err(e));
        }
    }
}
