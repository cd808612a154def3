//! The I/O thread driven through [`BareQueue`] alone, against a queue without a wire ([`Loopback`]): what
//! both transports rely on — batches beyond the depth wait in the backlog, completions reach their
//! waiters, the metrics count bytes, errors and latency, a failed queue fails later requests, an idle
//! thread sleeps in `poll` (never a zero timeout, unless busy polling) and a waker ends that sleep.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::{CompletionQueueEntry, Status};

use nvmf_config::PollMode;
use nvmf_service::poll::{Poller, Wait};

use super::io_thread::{poll_timeout, TIMEOUT_CHECK};
use super::metrics::latency_bucket;
use super::release_all;
use super::*;
use crate::queue::{DataDirection, QueueStats, Rejected};

const NSID_ERROR: u32 = 7;
const NSID_FAIL_QUEUE: u32 = 9;

/// What the test sees of a [`Loopback`] while the I/O thread owns it.
#[derive(Debug, Default)]
struct Probe {
    /// Timeouts of the `poll` calls made with nothing outstanding.
    idle_timeouts: Mutex<Vec<Option<Duration>>>,
    /// Set once a `poll` returned because of the waker.
    woken: AtomicBool,
}

/// Completes every outstanding command at the next `poll` (read data filled with 0xA5); a command for
/// namespace [`NSID_ERROR`] gets Invalid Field, one for [`NSID_FAIL_QUEUE`] fails the whole queue.
struct Loopback {
    poll: Poll,
    events: Events,
    waker: Option<Arc<Waker>>,
    depth: usize,
    outstanding: Vec<Request<InFlight>>,
    completed: VecDeque<Completion<InFlight>>,
    stats: QueueStats,
    failed: Option<HostError>,
    probe: Arc<Probe>,
    /// Run at the start of every `poll` (what another thread does meanwhile).
    during_poll: Option<Box<dyn FnMut() + Send>>,
}

impl Loopback {
    fn new(depth: usize) -> (Self, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        let q = Loopback {
            poll: Poll::new().unwrap(),
            events: Events::with_capacity(2),
            waker: None,
            depth,
            outstanding: Vec::new(),
            completed: VecDeque::new(),
            stats: QueueStats::default(),
            failed: None,
            probe: Arc::clone(&probe),
            during_poll: None,
        };
        (q, probe)
    }

    fn complete(&mut self, request: Request<InFlight>, result: Result<CompletionQueueEntry, HostError>) {
        let Request { sqe, mut data, direction, context } = request;
        if direction == DataDirection::ControllerToHost && result.is_ok() {
            data.fill(0xA5);
        }
        let result = result.map(|mut c| {
            c.cid = sqe.cid;
            c
        });
        self.stats.completed += 1;
        self.completed.push_back(Completion { context, result, data, r2ts: 0, in_capsule: false });
    }
}

impl BareQueue<InFlight> for Loopback {
    fn qid(&self) -> u16 {
        1
    }
    fn submit(&mut self, request: Request<InFlight>) -> Result<u16, Box<Rejected<InFlight>>> {
        if let Some(e) = &self.failed {
            return Err(Box::new(Rejected { error: e.clone(), request }));
        }
        assert!(self.outstanding.len() < self.depth, "the I/O thread submitted beyond the free slots");
        self.stats.submitted += 1;
        self.outstanding.push(request);
        let n = u16::try_from(self.outstanding.len()).unwrap();
        self.stats.max_outstanding = self.stats.max_outstanding.max(n);
        Ok(n)
    }
    fn poll(&mut self, timeout: Option<Duration>) -> Result<(), HostError> {
        if let Some(f) = &mut self.during_poll {
            f();
        }
        if self.outstanding.is_empty() {
            self.probe.idle_timeouts.lock().unwrap().push(timeout);
            self.poll.poll(&mut self.events, timeout).unwrap();
            if !self.events.is_empty() {
                self.probe.woken.store(true, Ordering::SeqCst);
            }
            return Ok(());
        }
        for r in std::mem::take(&mut self.outstanding) {
            match r.sqe.nsid {
                NSID_ERROR => self.complete(r, Ok(CompletionQueueEntry::new(0, Status::INVALID_FIELD))),
                NSID_FAIL_QUEUE => {
                    let e = HostError::Closed { qid: 1 };
                    self.failed = Some(e.clone());
                    self.complete(r, Err(e));
                }
                _ => self.complete(r, Ok(CompletionQueueEntry::new(0, Status::SUCCESS))),
            }
        }
        Ok(())
    }
    fn next_completion(&mut self) -> Option<Completion<InFlight>> {
        self.completed.pop_front()
    }
    fn close(&mut self) {
        for r in std::mem::take(&mut self.outstanding) {
            self.complete(r, Err(HostError::ShutDown { qid: 1 }));
        }
        self.failed.get_or_insert(HostError::ShutDown { qid: 1 });
    }
    fn waker(&mut self) -> Result<Arc<Waker>, HostError> {
        let w = Arc::new(Waker::new(self.poll.registry(), Token(0)).unwrap());
        self.waker = Some(Arc::clone(&w));
        Ok(w)
    }
    fn free_slots(&self) -> usize {
        self.depth - self.outstanding.len()
    }
    fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
    fn timed_outstanding(&self) -> bool {
        !self.outstanding.is_empty()
    }
    fn failure(&self) -> Option<&HostError> {
        self.failed.as_ref()
    }
    fn stats(&self) -> QueueStats {
        self.stats
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd as _;
        Some(self.poll.as_raw_fd())
    }
}

fn read(nsid: u32, len: usize) -> Request<()> {
    let sqe = Read { nsid, slba: 0, nlb: 0, ..Read::default() }.to_sqe();
    Request { sqe, data: vec![0; len], direction: DataDirection::ControllerToHost, context: () }
}

fn write(nsid: u32, len: usize) -> Request<()> {
    let sqe = Write { nsid, slba: 0, nlb: 0, ..Write::default() }.to_sqe();
    Request { sqe, data: vec![1; len], direction: DataDirection::HostToController, context: () }
}

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_batch_beyond_the_depth_completes_and_is_metered() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let mut pending = Vec::new();
    for i in 0..16 {
        pending.push(h.submit(if i % 2 == 0 { read(1, 4096) } else { write(1, 512) }).unwrap());
    }
    for (i, p) in pending.into_iter().enumerate() {
        let reply = p.wait(WAIT).unwrap();
        assert!(reply.result.unwrap().status.is_success());
        if i % 2 == 0 {
            assert!(reply.data.len() == 4096 && reply.data.iter().all(|&b| b == 0xA5), "read data came back");
        } else {
            assert_eq!(reply.data, vec![1; 512], "the write buffer came back");
        }
    }
    h.close_and_check(|m| {
        assert_eq!((m.submitted, m.completed), (16, 16));
        assert!(m.max_outstanding <= 4, "{m:?}");
        assert_eq!((m.read_bytes, m.written_bytes, m.errors), (8 * 4096, 8 * 512, 0));
        assert_eq!(m.latency_count(), 16);
    });
}

#[test]
fn sink_completions_carry_their_tags_and_failures_reach_the_sink() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let (test_sink, rx) = super::tests::TestSink::new();
    let sink: Arc<dyn CompletionSink> = test_sink;
    // Half one by one, half as a batch with one wake-up.
    for tag in 0..8u64 {
        h.submit_to_sink(read(1, 4096), &sink, tag).unwrap();
    }
    for tag in 8..16u64 {
        h.queue_to_sink(read(1, 4096), &sink, tag).unwrap();
    }
    h.wake();
    let mut tags: Vec<u64> = (0..16)
        .map(|_| {
            let c = rx.recv_timeout(WAIT).unwrap();
            let tag = c.tag();
            let reply = c.settle().expect("no recovery: the reply itself");
            assert!(reply.result.unwrap().status.is_success());
            assert!(reply.data.len() == 4096 && reply.data.iter().all(|&b| b == 0xA5), "read data came back");
            tag
        })
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..16).collect::<Vec<_>>(), "every tag exactly once");
    // An error status, then a failed queue: both reach the sink under their tags.
    h.submit_to_sink(read(NSID_ERROR, 512), &sink, 100).unwrap();
    let c = rx.recv_timeout(WAIT).unwrap();
    assert_eq!((c.tag(), c.settle().unwrap().result.unwrap().status), (100, Status::INVALID_FIELD));
    h.submit_to_sink(write(NSID_FAIL_QUEUE, 512), &sink, 101).unwrap();
    let c = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(c.tag(), 101);
    assert!(matches!(c.settle().unwrap().result, Err(HostError::Closed { .. })));
    match h.submit_to_sink(write(1, 512), &sink, 102) {
        Err((e, data)) => assert!(matches!(e, HostError::Closed { .. }) && data == vec![1; 512], "{e:?}"),
        Ok(()) => {
            let c = rx.recv_timeout(WAIT).unwrap();
            let reply = c.settle().unwrap();
            assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
            assert_eq!(reply.data, vec![1; 512], "the buffer comes back with the failure");
        }
    }
    h.close_and_check(|m| assert_eq!((m.read_bytes, m.errors), (16 * 4096, 3), "{m:?}"));
}

#[test]
fn error_statuses_and_a_failed_queue_count_as_errors() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let reply = h.submit(read(NSID_ERROR, 512)).unwrap().wait(WAIT).unwrap();
    assert_eq!(reply.result.unwrap().status, Status::INVALID_FIELD);
    let reply = h.submit(write(NSID_FAIL_QUEUE, 512)).unwrap().wait(WAIT).unwrap();
    assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
    // Later requests fail with the queue's failure (rejected by the queue, or answered by the thread).
    let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
    assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
    assert!(matches!(h.failure(), Some(HostError::Closed { .. })));
    h.close_and_check(|m| {
        assert_eq!((m.errors, m.read_bytes, m.written_bytes), (3, 0, 0), "{m:?}");
    });
}

#[test]
fn an_idle_thread_sleeps_in_poll_and_a_submission_wakes_it() {
    let (q, probe) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    // Wait until the thread has gone to sleep at least once, then submit: the waker must end the sleep.
    while probe.idle_timeouts.lock().unwrap().is_empty() {
        std::thread::yield_now();
    }
    let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
    assert!(reply.result.unwrap().status.is_success());
    assert!(probe.woken.load(Ordering::SeqCst), "the submission woke the sleeping poll");
    let sleeps = h.stats().sleeps;
    h.close();
    let idle = probe.idle_timeouts.lock().unwrap();
    assert!(idle.iter().all(Option::is_none), "idle, it sleeps until woken (no timer, no busy polling): {idle:?}");
    assert!(sleeps >= 1, "the sleeps are counted");
}

#[test]
fn a_busy_thread_never_sleeps_even_idle_and_still_completes() {
    let (q, probe) = Loopback::new(4);
    let h = QueueHandle::spawn_with(q, Poller::new(PollMode::Busy, nvmf_service::poll::DEFAULT_WINDOW), None).unwrap();
    while probe.idle_timeouts.lock().unwrap().len() < 100 {
        std::thread::yield_now();
    }
    let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
    assert!(reply.result.unwrap().status.is_success());
    h.close_and_check(|m| assert_eq!((m.completed, m.sleeps), (1, 0), "{m:?}"));
    let idle = probe.idle_timeouts.lock().unwrap();
    assert!(idle.iter().all(|t| *t == Some(Duration::ZERO)), "busy: every idle poll returns at once");
}

#[test]
fn a_poll_blocks_unless_the_poller_says_poll_and_a_command_may_complete() {
    let ms100 = Some(TIMEOUT_CHECK);
    for mode in PollMode::ALL {
        // Told to sleep: block, bounded while commands that can time out are outstanding.
        assert_eq!(poll_timeout(Wait::Sleep, mode, true), ms100);
        assert_eq!(poll_timeout(Wait::Sleep, mode, false), None);
        // Told to poll: at once while a command may complete.
        assert_eq!(poll_timeout(Wait::Poll, mode, true), Some(Duration::ZERO));
    }
    // Nothing that will complete (none outstanding, or an Asynchronous Event Request): sleep unless busy.
    assert_eq!(poll_timeout(Wait::Poll, PollMode::Adaptive, false), None);
    assert_eq!(poll_timeout(Wait::Poll, PollMode::Sleep, false), None);
    assert_eq!(poll_timeout(Wait::Poll, PollMode::Busy, false), Some(Duration::ZERO));
}

#[test]
fn latency_buckets_are_log2_microseconds() {
    for (ns, bucket) in
        [(0, 0), (1000, 0), (1001, 1), (2000, 1), (2001, 2), (8000, 3), (4_194_304_000, 22), (u64::MAX, 23)]
    {
        assert_eq!(latency_bucket(ns), bucket, "{ns} ns");
    }
    assert!((latency_bucket_bound(0) - 1e-6).abs() < 1e-12);
    assert!((latency_bucket_bound(3) - 8e-6).abs() < 1e-12);
    assert!(latency_bucket_bound(LATENCY_BUCKETS - 1).is_infinite());
}

/// Ask for `h`'s link and turn until it arrives (the I/O thread lends it at its next turn).
fn host_link(h: &QueueHandle, host: &LinkHost) {
    h.host_here(host);
    let deadline = Instant::now() + WAIT;
    while host.turn() == 0 {
        assert!(Instant::now() < deadline, "the link was never lent");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The hosted links' poller descriptors, registered in a poller of the test's own (as a host waits on them).
fn wait_on_hosted(host: &LinkHost) -> Poll {
    let poll = Poll::new().unwrap();
    let mut fds = Vec::new();
    host.for_each_wait(|_, fd| fds.push(fd));
    assert_eq!(fds.len(), 1, "one link hosted");
    poll.registry().register(&mut mio::unix::SourceFd(&fds[0]), Token(1), mio::Interest::READABLE).unwrap();
    poll
}

#[test]
fn a_hosting_thread_drives_the_link_between_its_own_work() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let (test_sink, rx) = super::tests::TestSink::new();
    let sink: Arc<dyn CompletionSink> = test_sink.clone();
    let host = LinkHost::new(Arc::clone(&sink));
    host_link(&h, &host);
    // The I/O thread waits for its loop to come back: only this thread's turns move the queue, without waking
    // anybody.
    for tag in 0..4u64 {
        h.queue_to_sink(read(1, 4096), &sink, tag).unwrap();
    }
    h.wake();
    let wakes = test_sink.wakes.load(Ordering::SeqCst);
    assert_eq!(host.turn(), 1);
    let done: Vec<_> = rx.try_iter().collect();
    assert_eq!(done.iter().map(Completed::tag).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(test_sink.wakes.load(Ordering::SeqCst), wakes + 1, "one wake-up for the batch");
    let reply = done.into_iter().next().unwrap().settle().unwrap();
    assert!(reply.data.len() == 4096 && reply.data.iter().all(|&b| b == 0xA5), "read data came back");
    // More than the request channel holds (the depth): the host gives the link back rather than wait for
    // itself, and the I/O thread serves them all.
    for tag in 10..15u64 {
        h.queue_to_sink(read(1, 512), &sink, tag).unwrap();
    }
    assert_eq!(host.turn(), 0, "the link went back when the channel filled up");
    h.wake();
    let mut tags: Vec<u64> = (0..5).map(|_| rx.recv_timeout(WAIT).unwrap().tag()).collect();
    tags.sort_unstable();
    assert_eq!(tags, [10, 11, 12, 13, 14]);
    host_link(&h, &host);
    // Another thread's command: its wake makes the poller descriptor readable, and the host's turn serves it.
    let mut poll = wait_on_hosted(&host);
    let mut events = Events::with_capacity(4);
    std::thread::scope(|s| {
        let other = s.spawn(|| h.submit(write(1, 512)).unwrap().wait(WAIT));
        poll.poll(&mut events, Some(WAIT)).unwrap();
        assert!(!events.is_empty(), "the submission made the hosted link's poller readable");
        let deadline = Instant::now() + WAIT;
        while !other.is_finished() {
            assert!(Instant::now() < deadline, "the other thread's command never completed");
            host.turn();
            std::thread::sleep(Duration::from_millis(1));
        }
        let reply = other.join().unwrap().unwrap();
        assert!(reply.result.unwrap().status.is_success());
        assert_eq!(reply.data, vec![1; 512]);
    });
    // A failed link goes back to its I/O thread, which answers later requests with the failure.
    h.queue_to_sink(write(NSID_FAIL_QUEUE, 512), &sink, 200).unwrap();
    assert_eq!(host.turn(), 0, "the failed link went back");
    let c = rx.try_recv().unwrap();
    assert_eq!(c.tag(), 200);
    assert!(matches!(c.settle().unwrap().result, Err(HostError::Closed { .. })));
    assert!(matches!(h.failure(), Some(HostError::Closed { .. })));
    let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
    assert!(matches!(reply.result, Err(HostError::Closed { .. })), "{:?}", reply.result);
    h.close_and_check(|m| assert_eq!((m.submitted, m.completed, m.read_bytes), (11, 11, 4 * 4096 + 5 * 512), "{m:?}"));
}

#[test]
fn a_hosted_link_goes_back_to_be_stopped_and_before_its_host_blocks() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let (test_sink, rx) = super::tests::TestSink::new();
    let sink: Arc<dyn CompletionSink> = test_sink;
    let host = LinkHost::new(Arc::clone(&sink));
    host_link(&h, &host);
    // Given back before blocking (as in a recovery's hold): the I/O thread serves again, and a new ask hosts it.
    release_all();
    assert_eq!(host.turn(), 0);
    let reply = h.submit(read(1, 512)).unwrap().wait(WAIT).unwrap();
    assert!(reply.result.unwrap().status.is_success(), "the I/O thread serves the link again");
    host_link(&h, &host);
    // Stopped from another thread: the stop wakes the host, whose turn gives the link back to be joined. A
    // command queued before the stop completes first.
    h.queue_to_sink(read(1, 512), &sink, 7).unwrap();
    let mut poll = wait_on_hosted(&host);
    let mut events = Events::with_capacity(4);
    std::thread::scope(|s| {
        let stopper = s.spawn(|| h.shutdown());
        let deadline = Instant::now() + WAIT;
        while !stopper.is_finished() {
            assert!(Instant::now() < deadline, "the stop never completed");
            poll.poll(&mut events, Some(Duration::from_millis(100))).unwrap();
            host.turn();
        }
    });
    assert_eq!(host.turn(), 0, "the stopped link went back");
    let c = rx.try_recv().expect("the queued command completed before the link stopped");
    assert_eq!(c.tag(), 7);
    assert!(c.settle().unwrap().result.unwrap().status.is_success());
    // Stopped by its own host: given back first, not waited for forever.
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    host_link(&h, &host);
    h.close_and_check(|m| assert_eq!(m.errors, 0));
}

#[test]
fn a_link_lent_and_not_yet_taken_in_goes_back_before_its_host_blocks() {
    let (q, _) = Loopback::new(4);
    let h = QueueHandle::spawn(q).unwrap();
    let (test_sink, rx) = super::tests::TestSink::new();
    let (done_tx, done) = std::sync::mpsc::channel();
    let sink: Arc<dyn CompletionSink> = test_sink.clone();
    // Not scoped: were the host stuck, the test fails instead of waiting for it.
    let host_thread = std::thread::spawn(move || {
        let host = LinkHost::new(Arc::clone(&sink));
        h.host_here(&host);
        // The lender wakes the host once the loop is in its inbox; the host has not turned since.
        let deadline = Instant::now() + WAIT;
        while test_sink.wakes.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the link was never lent");
            std::thread::sleep(Duration::from_millis(1));
        }
        // More than the request channel holds: the fifth waits for the I/O thread, which waits for its loop;
        // the host gives it back from the inbox rather than wait for itself.
        for tag in 0..6u64 {
            h.queue_to_sink(read(1, 512), &sink, tag).unwrap();
        }
        h.wake();
        let _ = done_tx.send(());
        h
    });
    done.recv_timeout(WAIT).expect("the host blocked on a full channel with the link in its inbox");
    let h = host_thread.join().unwrap();
    let mut tags: Vec<u64> = (0..6).map(|_| rx.recv_timeout(WAIT).unwrap().tag()).collect();
    tags.sort_unstable();
    assert_eq!(tags, [0, 1, 2, 3, 4, 5]);
    h.close_and_check(|m| assert_eq!(m.submitted, 6));
}

#[test]
fn a_host_takes_what_arrived_while_it_turned_before_it_sleeps() {
    let (mut q, _) = Loopback::new(4);
    // Another thread submits while the host's turn polls the queue: the zero poll takes its wake-up.
    let submitter: Arc<Mutex<Option<Submitter>>> = Arc::default();
    let late: Arc<Mutex<Option<Pending>>> = Arc::default();
    let (from, into) = (Arc::clone(&submitter), Arc::clone(&late));
    q.during_poll = Some(Box::new(move || {
        if let Some(s) = from.lock().unwrap().take() {
            *into.lock().unwrap() = Some(s.submit(read(1, 512)).unwrap());
        }
    }));
    let h = QueueHandle::spawn(q).unwrap();
    let (test_sink, _rx) = super::tests::TestSink::new();
    let host = LinkHost::new(test_sink);
    host_link(&h, &host);
    let mut poll = wait_on_hosted(&host);
    let mut events = Events::with_capacity(4);
    assert!(host.prepare_wait(), "nothing to do");
    *submitter.lock().unwrap() = Some(h.submitter());
    assert_eq!(host.turn(), 1);
    let pending = late.lock().unwrap().take().expect("the other thread submitted during the turn");
    poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(events.is_empty(), "the turn's poll took the wake-up: the descriptor would not wake a sleeping host");
    assert!(!host.prepare_wait(), "the request waiting in the channel keeps the host from sleeping");
    host.turn();
    let reply = pending.wait(WAIT).unwrap();
    assert!(reply.result.unwrap().status.is_success());
    assert!(host.prepare_wait(), "nothing left to do");
    h.close_and_check(|m| assert_eq!((m.submitted, m.completed), (1, 1), "{m:?}"));
}

impl QueueHandle {
    /// Close, then check the metrics the closed handle reports.
    fn close_and_check(self, check: impl FnOnce(&QueueMetrics)) {
        self.shutdown();
        check(&self.stats());
    }
}
