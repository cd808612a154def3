//! The reactor driven through a fake poll group: no socket, no verbs. Each fake queue pair is a pipe; a byte
//! written to it is a "command" that the group turns into a storage read of a memory namespace under its queue's
//! key, with the byte as the slot. The group reports what the reactor made it do on a channel.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::unix::pipe;
use mio::Interest;

use super::{ReactorConfig, ReactorHandle};
use crate::backend::{BufferId, EngineConfig, IoOp, Storage, StorageSpec};
use crate::controller::{storage_tag, SlotId, Target, TargetParams, TransportInfo};
use crate::transport::{GroupContext, PollGroup};

/// How long a test waits for the reactor to do what it must (a bound against hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(10);

/// A fake queue pair: its number and the pipe its "commands" arrive on.
#[derive(Debug)]
struct FakeQueuePair {
    id: u32,
    commands: pipe::Receiver,
}

/// What the reactor made the fake group do.
#[derive(Debug, PartialEq)]
enum Seen {
    Accepted { id: u32, queue_key: u64 },
    Ready { id: u32 },
    Completed { id: u64, slot: u16, bytes: u32 },
    Ended { id: u32 },
    PolledAll,
    Shutdown,
}

#[derive(Debug)]
struct FakeGroup {
    seen: Sender<Seen>,
    storage: Arc<Storage>,
    /// Queue pairs by id, with their queue key.
    pairs: HashMap<u32, (pipe::Receiver, u64)>,
    /// Buffers of reads in flight, by (queue key, slot).
    reads: HashMap<(u64, u16), BufferId>,
    /// The timer the group asks for once it has a queue pair.
    timer_after: Option<Duration>,
    timer: Option<Instant>,
    /// Queue pairs accepted in this turn, and the most in any turn so far (read by the test).
    accepts_this_turn: usize,
    most_accepts_in_a_turn: Arc<AtomicUsize>,
}

impl FakeGroup {
    fn new(seen: Sender<Seen>, timer_after: Option<Duration>) -> Self {
        let storage = Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).expect("memory storage");
        FakeGroup {
            seen,
            storage: Arc::new(storage),
            pairs: HashMap::new(),
            reads: HashMap::new(),
            timer_after,
            timer: None,
            accepts_this_turn: 0,
            most_accepts_in_a_turn: Arc::default(),
        }
    }
}

impl PollGroup for FakeGroup {
    type QueuePair = FakeQueuePair;

    fn accept(&mut self, mut qp: FakeQueuePair, cx: &mut GroupContext<'_>) {
        cx.registry.register(&mut qp.commands, cx.token(qp.id), Interest::READABLE).expect("register the pipe");
        let queue = cx.new_queue(TransportInfo::tcp(1, 0, 0), qp.id);
        let queue_key = queue.transport().queue_key;
        self.pairs.insert(qp.id, (qp.commands, queue_key));
        self.timer = self.timer_after.map(|after| cx.now + after);
        self.accepts_this_turn += 1;
        self.most_accepts_in_a_turn.fetch_max(self.accepts_this_turn, Ordering::Relaxed);
        let _ = self.seen.send(Seen::Accepted { id: qp.id, queue_key });
    }

    /// Reads the pipe: each byte is a read of slot `byte` under the queue pair's key; the end of the pipe ends
    /// the queue pair.
    fn ready(&mut self, token: u64, _event: &Event, cx: &mut GroupContext<'_>) {
        let id = u32::try_from(token).expect("a token of ours");
        let (commands, queue_key) = self.pairs.get_mut(&id).expect("readiness for a queue pair of ours");
        let queue_key = *queue_key;
        let _ = self.seen.send(Seen::Ready { id });
        let mut bytes = [0u8; 16];
        loop {
            match commands.read(&mut bytes) {
                Ok(0) => {
                    let (mut commands, _) = self.pairs.remove(&id).expect("a queue pair of ours");
                    cx.registry.deregister(&mut commands).expect("deregister the pipe");
                    let _ = self.seen.send(Seen::Ended { id });
                    return;
                }
                Ok(n) => {
                    for &slot in &bytes[..n] {
                        let buf = cx.engine.alloc(512).expect("a buffer");
                        let tag = storage_tag(queue_key, SlotId::new(u16::from(slot)));
                        let read = IoOp::Read { offset: 0, len: 512 };
                        cx.engine.push(tag, &self.storage, read, Some(buf)).expect("ring room");
                        self.reads.insert((queue_key, u16::from(slot)), buf);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("reading the pipe: {e}"),
            }
        }
    }

    fn storage_completed(
        &mut self,
        queue_key: u64,
        slot: SlotId,
        result: Result<u32, std::io::Error>,
        cx: &mut GroupContext<'_>,
    ) {
        let buf = self.reads.remove(&(queue_key, slot.index())).expect("a read of ours");
        cx.engine.release(buf);
        let bytes = result.expect("the read succeeds");
        let _ = self.seen.send(Seen::Completed { id: queue_key, slot: slot.index(), bytes });
    }

    fn poll(&mut self, cx: &mut GroupContext<'_>, notified: bool) -> bool {
        if notified || self.timer.is_some_and(|t| t <= cx.now) {
            self.timer = None;
            let _ = self.seen.send(Seen::PolledAll);
        }
        false
    }

    fn end_turn(&mut self, _cx: &mut GroupContext<'_>) -> bool {
        self.accepts_this_turn = 0;
        false
    }

    fn next_timer(&self, now: Instant) -> Option<Instant> {
        self.timer.filter(|&t| t > now)
    }

    /// Queue pairs stay until their pipe ends.
    fn shutdown(&mut self, _cx: &mut GroupContext<'_>) {
        let _ = self.seen.send(Seen::Shutdown);
    }

    fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

fn reactor(timer_after: Option<Duration>) -> (ReactorHandle<FakeQueuePair>, Receiver<Seen>) {
    let (reactor, events, _) = counting_reactor(timer_after);
    (reactor, events)
}

/// [`reactor`], and the most queue pairs its group accepted in one turn.
fn counting_reactor(timer_after: Option<Duration>) -> (ReactorHandle<FakeQueuePair>, Receiver<Seen>, Arc<AtomicUsize>) {
    let (seen, events) = mpsc::channel();
    let group = FakeGroup::new(seen, timer_after);
    let most = Arc::clone(&group.most_accepts_in_a_turn);
    let target = Target::new(TargetParams::default(), Vec::new()).expect("target");
    let engine = EngineConfig {
        ring_entries: 64,
        buffer_size: 64 << 10,
        buffer_count: 4,
        small_buffer_size: 4096,
        small_buffer_count: 64,
        max_files: 4,
        ..EngineConfig::default()
    };
    let config = ReactorConfig {
        index: 0,
        cpu: None,
        engine,
        poll: nvmf_config::PollMode::Adaptive,
        poll_window: std::time::Duration::from_micros(200),
        waits: Arc::default(),
    };
    let handle = ReactorHandle::spawn(config, target, group).expect("reactor starts");
    (handle, events, most)
}

fn queue_pair(id: u32) -> (FakeQueuePair, pipe::Sender) {
    let (sender, commands) = pipe::new().expect("pipe");
    (FakeQueuePair { id, commands }, sender)
}

fn next(events: &Receiver<Seen>) -> Seen {
    events.recv_timeout(PATIENCE).expect("the reactor drives the group")
}

/// The next event other than a poll of every queue (which a notifier may cause at any turn).
fn next_not_polled(events: &Receiver<Seen>) -> Seen {
    loop {
        match next(events) {
            Seen::PolledAll => {}
            seen => return seen,
        }
    }
}

#[test]
fn readiness_and_storage_completions_reach_the_queue_pair_by_token_and_key() {
    let (reactor, events) = reactor(None);
    let (three, mut to_three) = queue_pair(3);
    let (seven, mut to_seven) = queue_pair(7);
    reactor.accept(three);
    reactor.accept(seven);
    assert_eq!(next_not_polled(&events), Seen::Accepted { id: 3, queue_key: 3 });
    assert_eq!(next_not_polled(&events), Seen::Accepted { id: 7, queue_key: 7 });

    to_seven.write_all(&[5]).unwrap();
    assert_eq!(next_not_polled(&events), Seen::Ready { id: 7 });
    assert_eq!(next_not_polled(&events), Seen::Completed { id: 7, slot: 5, bytes: 512 });

    to_three.write_all(&[1, 2]).unwrap();
    assert_eq!(next_not_polled(&events), Seen::Ready { id: 3 });
    let mut completed = [next_not_polled(&events), next_not_polled(&events)];
    completed.sort_by_key(|s| match s {
        Seen::Completed { slot, .. } => *slot,
        _ => u16::MAX,
    });
    assert_eq!(
        completed,
        [Seen::Completed { id: 3, slot: 1, bytes: 512 }, Seen::Completed { id: 3, slot: 2, bytes: 512 }]
    );
    drop((to_three, to_seven));
    let mut ended =
        [next_not_polled(&events), next_not_polled(&events), next_not_polled(&events), next_not_polled(&events)];
    ended.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(ended, [Seen::Ended { id: 3 }, Seen::Ended { id: 7 }, Seen::Ready { id: 3 }, Seen::Ready { id: 7 }]);
    shut_down(reactor, &events);
}

#[test]
fn a_queue_timer_wakes_the_reactor_to_poll_every_queue() {
    let (reactor, events) = reactor(Some(Duration::from_millis(50)));
    let (qp, commands) = queue_pair(1);
    reactor.accept(qp);
    assert_eq!(next_not_polled(&events), Seen::Accepted { id: 1, queue_key: 1 });
    // Nothing but the timer can wake the reactor now.
    assert_eq!(next(&events), Seen::PolledAll);
    drop(commands);
    assert_eq!(next_not_polled(&events), Seen::Ready { id: 1 });
    assert_eq!(next_not_polled(&events), Seen::Ended { id: 1 });
    shut_down(reactor, &events);
}

#[test]
fn shutdown_ends_once_the_group_is_empty() {
    let (reactor, events) = reactor(None);
    let (qp, commands) = queue_pair(1);
    reactor.accept(qp);
    assert_eq!(next_not_polled(&events), Seen::Accepted { id: 1, queue_key: 1 });
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        reactor.shutdown();
        let _ = done.send(());
    });
    assert_eq!(next_not_polled(&events), Seen::Shutdown);
    // The queue pair still lives: the reactor keeps turning for it.
    assert!(finished.recv_timeout(Duration::from_millis(200)).is_err(), "the reactor ended with a queue pair left");
    drop(commands);
    assert_eq!(next_not_polled(&events), Seen::Ready { id: 1 });
    assert_eq!(next_not_polled(&events), Seen::Ended { id: 1 });
    finished.recv_timeout(PATIENCE).expect("the reactor ends once its group is empty");
}

#[test]
fn a_burst_of_new_queue_pairs_is_taken_one_per_turn() {
    let (reactor, events, most) = counting_reactor(None);
    let pairs: Vec<_> = (1..=32).map(queue_pair).collect();
    let mut senders = Vec::new();
    for (qp, sender) in pairs {
        reactor.accept(qp);
        senders.push(sender);
    }
    for id in 1..=32 {
        assert!(matches!(next_not_polled(&events), Seen::Accepted { id: i, .. } if i == id));
    }
    assert_eq!(most.load(Ordering::Relaxed), 1, "queue pairs taken in one turn");
    drop(senders);
    let mut ended = 0;
    while ended < 32 {
        if let Seen::Ended { .. } = next_not_polled(&events) {
            ended += 1;
        }
    }
    shut_down(reactor, &events);
}

/// Shut down a reactor whose queue pairs have ended: the group is told, and the thread ends.
fn shut_down(reactor: ReactorHandle<FakeQueuePair>, events: &Receiver<Seen>) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        reactor.shutdown();
        let _ = done.send(());
    });
    assert_eq!(next_not_polled(events), Seen::Shutdown);
    finished.recv_timeout(PATIENCE).expect("the reactor ends once its group is empty");
}
