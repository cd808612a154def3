//! CPU-bound work off the reactor: a small pool of threads ([`WorkPool`], one per target, shared by its
//! reactors' engines) fed from one bounded queue, for steps too slow for a reactor turn (a DH-HMAC-CHAP modular
//! exponentiation costs up to 21 ms: one such step on the reactor stalls every queue it serves).
//!
//! An op is a boxed payload and the function to run on it ([`IoEngine::offload`]). Its completion comes back as
//! the discard worker's do: into the engine's channel, drained in `reap` as an [`IoCompletion`] with the op's tag
//! (`Ok(0)`; an error if the work panicked), after a write to the engine's eventfd wakes the reactor; the caller
//! then takes the payload back with [`IoEngine::take_offloaded`]. The engine pays one compare per `reap` until
//! its first op. When the queue holds [`WorkPool::new`]'s `depth` ops, `offload` hands the payload back like a
//! full ring (the command parks and retries) and [`WorkCounters`] counts it. The threads start at the first op.

use std::any::Any;
use std::fs::File;
use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use super::{IoCompletion, IoEngine};

/// The nice value of a pool's worker threads: below the reactors (nice 0) but not idle.
const WORKER_NICE: i32 = 10;

/// What an offloaded op works on; it comes back with the completion.
pub type Payload = Box<dyn Any + Send>;

/// The work of an op: runs on a pool thread, on the op's payload.
pub type Work = fn(&mut (dyn Any + Send));

/// Counts of a [`WorkPool`], read at scrape. `queue_full` counts refused ops: a command retrying counts at each try.
#[derive(Debug, Default)]
pub struct WorkCounters {
    ran: AtomicU64,
    queue_full: AtomicU64,
}

impl WorkCounters {
    /// Ops the pool's threads ran.
    pub fn ran(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }

    /// Ops handed back because the pool's queue was full.
    pub fn queue_full(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
    }
}

struct Job {
    tag: u64,
    payload: Payload,
    work: Work,
    done: Sender<Done>,
    /// The submitting engine's eventfd (a duplicate).
    wake: Arc<File>,
}

#[derive(Debug)]
struct Done {
    tag: u64,
    /// `None`: the work panicked (the payload went with it).
    payload: Option<Payload>,
}

/// The threads and their queue, once started.
struct Running {
    queue: SyncSender<Job>,
    threads: Vec<JoinHandle<()>>,
}

/// A pool of `threads` threads running offloaded ops from a queue of at most `depth` (see the module docs).
pub struct WorkPool {
    name: &'static str,
    threads: usize,
    depth: usize,
    /// `None` inside: the threads could not be started (every op then fails).
    running: OnceLock<Option<Mutex<Running>>>,
    /// The queue's sender, cloned out of `running` so that `offload` takes no lock.
    queue: OnceLock<Option<SyncSender<Job>>>,
    counters: Arc<WorkCounters>,
}

impl std::fmt::Debug for WorkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkPool").field("name", &self.name).field("threads", &self.threads).finish_non_exhaustive()
    }
}

impl WorkPool {
    /// A pool of `threads` threads named `name` (at least one) with a queue of `depth` ops (at least one).
    pub fn new(name: &'static str, threads: usize, depth: usize) -> Self {
        WorkPool {
            name,
            threads: threads.max(1),
            depth: depth.max(1),
            running: OnceLock::new(),
            queue: OnceLock::new(),
            counters: Arc::default(),
        }
    }

    /// The pool's counts.
    pub fn counters(&self) -> &WorkCounters {
        &self.counters
    }

    /// The queue, the threads started at the first call.
    fn queue(&self) -> Option<&SyncSender<Job>> {
        self.queue
            .get_or_init(|| {
                let running = self.running.get_or_init(|| self.start().map(Mutex::new));
                running.as_ref().map(|r| r.lock().unwrap_or_else(|e| e.into_inner()).queue.clone())
            })
            .as_ref()
    }

    fn start(&self) -> Option<Running> {
        let (queue, jobs) = mpsc::sync_channel::<Job>(self.depth);
        let jobs = Arc::new(Mutex::new(jobs));
        let mut threads = Vec::with_capacity(self.threads);
        for _ in 0..self.threads {
            let (jobs, counters) = (Arc::clone(&jobs), Arc::clone(&self.counters));
            let name = self.name;
            let worker = move || {
                // CPU-bound work a peer can ask for (DH steps) yields to the reactors when both want a CPU.
                if let Err(e) = nvmf_service::cpus::lower_current_thread_priority(WORKER_NICE) {
                    tracing::debug!(pool = name, error = %e, "worker thread keeps its priority");
                }
                run(&jobs, &counters);
            };
            match std::thread::Builder::new().name(self.name.into()).spawn(worker) {
                Ok(t) => threads.push(t),
                Err(e) => tracing::error!(pool = self.name, error = %e, "cannot start a worker thread"),
            }
        }
        (!threads.is_empty()).then_some(Running { queue, threads })
    }
}

impl Drop for WorkPool {
    /// Close the queue and wait for the threads: they finish the ops already queued.
    fn drop(&mut self) {
        self.queue.take();
        let Some(Some(running)) = self.running.take() else { return };
        let Running { queue, threads } = running.into_inner().unwrap_or_else(|e| e.into_inner());
        drop(queue);
        for t in threads {
            let _ = t.join();
        }
    }
}

fn run(jobs: &Mutex<Receiver<Job>>, counters: &WorkCounters) {
    loop {
        // The lock is held while waiting: one idle thread waits on the queue, the others on the lock.
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let Job { tag, mut payload, work, done, wake } = job;
        let payload = catch_unwind(AssertUnwindSafe(|| work(&mut *payload))).is_ok().then_some(payload);
        counters.ran.fetch_add(1, Ordering::Relaxed);
        if done.send(Done { tag, payload }).is_err() {
            continue; // The engine is gone.
        }
        if let Err(e) = (&*wake).write_all(&1u64.to_ne_bytes()) {
            tracing::warn!(error = %e, "offload worker: eventfd write failed");
        }
    }
}

/// An engine's side of the pool: where its ops' completions arrive.
#[derive(Debug)]
pub(super) struct Offloads {
    done_tx: Sender<Done>,
    done: Receiver<Done>,
    wake: Arc<File>,
    /// Ops sent and not yet drained.
    outstanding: usize,
    /// Payloads of drained ops, until their owners take them.
    finished: Vec<(u64, Payload)>,
}

impl Offloads {
    /// Ops sent and not yet drained.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Deliver every finished op to `f`, without blocking.
    pub(super) fn drain(&mut self, mut f: impl FnMut(IoCompletion)) {
        while self.outstanding > 0 {
            let Ok(Done { tag, payload }) = self.done.try_recv() else { return };
            self.outstanding -= 1;
            let result = match payload {
                Some(payload) => {
                    self.finished.push((tag, payload));
                    Ok(0)
                }
                None => Err(io::Error::other("offloaded work panicked")),
            };
            f(IoCompletion { tag, result });
        }
    }
}

impl IoEngine {
    /// Run `work` on `payload` on one of `pool`'s threads; its completion (tag `tag`) comes from `reap`, and the
    /// payload back from [`IoEngine::take_offloaded`]. `Err(payload)` when the pool's queue is full (counted).
    /// Tags are the caller's, as `push`'s: an op whose payload is not taken keeps it until the engine is dropped.
    pub fn offload(&mut self, pool: &WorkPool, tag: u64, payload: Payload, work: Work) -> Result<(), Payload> {
        let Some(queue) = pool.queue() else {
            self.complete_now(tag, Err(io::Error::other("no offload worker thread")));
            return Ok(());
        };
        let offloads = match self.offloads() {
            Ok(o) => o,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let job = Job { tag, payload, work, done: offloads.done_tx.clone(), wake: Arc::clone(&offloads.wake) };
        match queue.try_send(job) {
            Ok(()) => {
                offloads.outstanding += 1;
                Ok(())
            }
            Err(TrySendError::Full(job)) => {
                pool.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                Err(job.payload)
            }
            Err(TrySendError::Disconnected(_)) => {
                self.complete_now(tag, Err(io::Error::other("offload workers stopped")));
                Ok(())
            }
        }
    }

    /// The payload of the offloaded op `tag` that `reap` delivered (the first, if several share the tag).
    pub fn take_offloaded(&mut self, tag: u64) -> Option<Payload> {
        let finished = &mut self.offloads.as_mut()?.finished;
        let i = finished.iter().position(|(t, _)| *t == tag)?;
        Some(finished.swap_remove(i).1)
    }

    fn offloads(&mut self) -> io::Result<&mut Offloads> {
        let offloads = match self.offloads.take() {
            Some(o) => o,
            None => {
                let (done_tx, done) = mpsc::channel();
                let wake = Arc::new(self.ring.event_fd_handle()?);
                Offloads { done_tx, done, wake, outstanding: 0, finished: Vec::new() }
            }
        };
        Ok(self.offloads.insert(offloads))
    }
}
