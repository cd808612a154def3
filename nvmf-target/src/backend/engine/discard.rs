//! The `BLKDISCARD` fallback, off the reactor thread. Kernels without io_uring block discard (before 6.12) have
//! only the synchronous ioctl, which holds its caller while the device works: on the reactor, any connected host
//! could stall every queue of that reactor with Dataset Management deallocates.
//!
//! One worker thread (`nvmf-discard`) per engine, started at the engine's first fallback, runs the ioctls in
//! order from a bounded queue. Each completion goes back the way the kernel's do: into a channel the engine
//! drains in `reap` (only while discards are outstanding: the normal path pays one compare), then a write to the
//! engine's eventfd wakes a sleeping reactor. When [`EngineConfig::discard_queue_depth`] discards are
//! outstanding, `push` hands the op back like a full ring (the command parks and is retried) and
//! [`DiscardCounters`] counts it. The queue has room for that many plus the ring's completion queue: the
//! io_uring discards that were in flight when the kernel first answered `EOPNOTSUPP` move to the worker from
//! `reap`, which cannot hand them back.
//!
//! [`EngineConfig::discard_queue_depth`]: super::EngineConfig::discard_queue_depth

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::super::ring;
use super::super::Storage;
use super::{IoCompletion, IoEngine};

/// Counts of the discard workers of every engine that shares them (the daemon: all reactors), read at scrape.
/// `queue_full` counts refused pushes: a command retrying its discard counts at each try.
#[derive(Debug, Default)]
pub struct DiscardCounters {
    ran: AtomicU64,
    queue_full: AtomicU64,
}

impl DiscardCounters {
    /// `BLKDISCARD` ioctls a worker ran.
    pub fn ran(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }

    /// Discards handed back because the worker's queue was full.
    pub fn queue_full(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
    }
}

/// One discard for the worker.
struct Discard {
    tag: u64,
    /// Keeps the descriptor open until the ioctl returns.
    storage: Arc<Storage>,
    offset: u64,
    len: u64,
}

/// An engine's discard worker: its queue, its completions, and how many are outstanding.
#[derive(Debug)]
pub(super) struct DiscardWorker {
    /// `None` once dropping: closing the queue ends the thread.
    requests: Option<SyncSender<Discard>>,
    done: Receiver<IoCompletion>,
    /// Sent and not yet drained.
    outstanding: usize,
    /// What `push` may have outstanding.
    depth: usize,
    counters: Arc<DiscardCounters>,
    thread: Option<JoinHandle<()>>,
}

impl DiscardWorker {
    /// Start the thread: `depth` discards from `push`, plus `headroom` moved over from the ring by `reap`.
    /// `wake` is the engine's eventfd (a duplicate the thread owns).
    pub(super) fn start(depth: usize, headroom: usize, wake: File, counters: Arc<DiscardCounters>) -> io::Result<Self> {
        let (requests, queue) = mpsc::sync_channel(depth + headroom);
        let (done_tx, done) = mpsc::channel();
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("nvmf-discard".into())
            .spawn(move || run(&queue, &done_tx, wake, &thread_counters))?;
        Ok(DiscardWorker { requests: Some(requests), done, outstanding: 0, depth, counters, thread: Some(thread) })
    }

    /// Whether `push` must hand a discard back; counted when it must (the limit fired).
    pub(super) fn refuses_more(&self) -> bool {
        let full = self.outstanding >= self.depth;
        if full {
            self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
        }
        full
    }

    /// Queue a discard; its completion arrives through [`DiscardWorker::drain`]. An error (the thread is gone,
    /// or the headroom was wrong) is the op's result.
    pub(super) fn send(&mut self, tag: u64, storage: Arc<Storage>, offset: u64, len: u64) -> io::Result<()> {
        let requests = self.requests.as_ref().ok_or_else(|| io::Error::other("discard worker stopped"))?;
        match requests.try_send(Discard { tag, storage, offset, len }) {
            Ok(()) => {
                self.outstanding += 1;
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(io::Error::from_raw_os_error(libc::EBUSY)),
            Err(TrySendError::Disconnected(_)) => Err(io::Error::other("discard worker stopped")),
        }
    }

    /// Discards sent and not yet drained.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Deliver every finished discard to `f`, without blocking.
    pub(super) fn drain(&mut self, mut f: impl FnMut(IoCompletion)) {
        while self.outstanding > 0 {
            let Ok(completion) = self.done.try_recv() else { return };
            self.outstanding -= 1;
            f(completion);
        }
    }
}

impl Drop for DiscardWorker {
    /// Close the queue and wait for the thread: it finishes the discards already queued.
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl IoEngine {
    /// Hand a block discard to the worker (started on first use); `Err(())` when it has as many outstanding as
    /// it may take from `push`.
    pub(super) fn push_discard_to_worker(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        offset: u64,
        len: u64,
    ) -> Result<(), ()> {
        let sent = match self.discard_worker() {
            Ok(worker) if worker.refuses_more() => return Err(()),
            Ok(worker) => worker.send(tag, Arc::clone(storage), offset, len),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            self.complete_now(tag, Err(e));
        }
        Ok(())
    }

    /// Move discards the kernel refused from the ring (`EOPNOTSUPP`) to the worker; one that cannot go there
    /// completes with the reason, to `f` (this runs inside `reap`).
    pub(super) fn move_discards_to_worker(
        &mut self,
        moved: Vec<(u64, Arc<Storage>, u64, u64)>,
        f: &mut impl FnMut(IoCompletion),
    ) {
        for (tag, storage, offset, len) in moved {
            if let Err(e) = self.discard_worker().and_then(|w| w.send(tag, storage, offset, len)) {
                f(IoCompletion { tag, result: Err(e) });
            }
        }
    }

    fn discard_worker(&mut self) -> io::Result<&mut DiscardWorker> {
        let worker = match self.discard.take() {
            Some(worker) => worker,
            None => {
                let headroom = self.ring.cq_entries() as usize;
                let wake = self.ring.event_fd_handle()?;
                let counters = Arc::clone(&self.discard_counters);
                DiscardWorker::start(self.discard_queue_depth, headroom, wake, counters)?
            }
        };
        Ok(self.discard.insert(worker))
    }
}

/// Test-only witness of which threads ran the ioctl.
#[cfg(test)]
pub(super) static RAN_ON: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn run(queue: &Receiver<Discard>, done: &Sender<IoCompletion>, mut wake: File, counters: &DiscardCounters) {
    for d in queue {
        let result = ring::block_device_discard(d.storage.raw_fd().unwrap_or(-1), d.offset, d.len).map(|()| 0);
        counters.ran.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        RAN_ON.lock().unwrap_or_else(|e| e.into_inner()).push(std::thread::current().name().unwrap_or("").into());
        if done.send(IoCompletion { tag: d.tag, result }).is_err() {
            return;
        }
        if let Err(e) = wake.write_all(&1u64.to_ne_bytes()) {
            tracing::warn!(error = %e, "discard worker: eventfd write failed");
        }
    }
}
