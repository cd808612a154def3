//! Protocol-state fuzzing of the NVMe/TCP target: the entry point shared by the `tcp_connection` fuzz target
//! (`fuzz/`) and the corpus replay test (`nvmf-target/tests/fuzz_corpus.rs`), so a corpus exercises exactly the
//! same code under `cargo test` as under the fuzzer. Not part of the target's API.
//!
//! [`tcp_connection`] plays a script of host actions against real [`TcpConnection`]s: the real PDU decoder, the
//! real controller [`Queue`]s of a fresh [`Target`] (one subsystem, [`SUBNQN`], open to any host, with a memory
//! namespace 1 and a null namespace 2, volatile reservations; CNTLIDs from 1; host [`KEYED_HOSTNQN`] has a
//! DH-HMAC-CHAP key, so its queues must authenticate: NULL and ffdhe2048 groups, which a fuzzer's transaction can
//! only fail, but every message and state of one is reachable), and a real [`IoEngine`] (created once per thread and
//! reused, so its buffer pool must come back whole after every input). Each connection's socket is one end of a
//! Unix socket pair standing in for TCP; the harness holds the other end (`host`) and drives the connections as a
//! reactor does: readiness, storage completions, queue polls, end of turn, on a clock the script advances.
//!
//! Script: byte 0 picks the port's settings (bit 0 header digests, bit 1 data digests, bit 2 C2HData SUCCESS,
//! bit 3 R2Ts of at most 4 KiB, bit 4 4 KiB in-capsule data (else 8 KiB), bit 5 a 4 KiB receive buffer (else
//! 64 KiB), bit 6 a 16 KiB send backlog (else 1 MiB), bit 7 MAXH2CDATA 4 KiB (else 16 KiB)). Then records until
//! the input ends, each followed by one reactor turn. A record's first byte names the connection (bits 0-1: up
//! to four at a time; a new one is accepted when a record names a connection that has ended or never existed)
//! and the action (the rest):
//! - 1: the host shuts its sending side (the target reads end of stream);
//! - 2: the host stops reading, or starts again (the target's output backs up);
//! - 3: the clock moves on by (the next byte + 1) × 250 ms (Connect, keep-alive and transfer timeouts);
//! - 4: the target ends the connection (its shutdown path);
//! - 5: a new connection (if the record names none) that holds its queue's Connect for placement, as with
//!   `[reactors] placement = "incoming_cpu"`: at the end of the turn it is served where it is (an odd queue key)
//!   or moved to a new connection, with a new queue, on its socket (an even one), as a reactor hands it to another;
//! - anything else: the host sends the next n bytes, n a little-endian u16 (fewer if the input ends first).
//!
//! Checked: nothing panics; every PDU the target sends decodes; once the input ends and the host closes every
//! connection, each ends within a few turns; then no storage op is in flight, every engine buffer is free (and
//! none counted against the anonymous peers' budget), no controller is left in the subsystem and nothing holds the
//! target any more.
#![forbid(unsafe_code)]

mod host;

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::nvme::cqe::CompletionQueueEntry;

use self::host::Host;
use nvmf_common::fabrics::auth::dh::DhGroup;
use nvmf_common::fabrics::auth::secret::DhchapSecret;

use crate::backend::{EngineConfig, IoEngine, Storage, StorageSpec};
use crate::controller::authentication::{HostKeys, SubsystemAuth};
use crate::controller::{split_storage_tag, NamespaceParams, Queue, SubsystemParams, Target, TargetParams};
use crate::controller::{SlotId, TransportInfo};
use crate::tcp::{SocketIo, TcpConnection, TcpTransportConfig};

/// The fuzzed subsystem's NQN: the kernel captures' (`common/tests/fixtures/kernel-tcp/`), so they replay as seeds.
pub const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:fixture";

/// A host with a DH-HMAC-CHAP key in the fuzzed subsystem.
pub const KEYED_HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5e1f7c3a-0b2d-4c6e-8f91-a2b3c4d5e6f7";

/// How long a turn waits for work the engine handed to other threads (DH steps) to come back.
const OFFLOAD_PATIENCE: Duration = Duration::from_secs(5);

/// Connections alive at once.
const LINKS: usize = 4;

/// Turns after the end of the input for every connection to end once its host closed it.
const CLOSING_TURNS: usize = 16;

/// MDTS, and the size of the engine's large buffers.
const MDTS: u32 = 16 << 10;

thread_local! {
    /// One engine per thread, as on a reactor: inputs run one after another on it.
    static ENGINE: RefCell<Option<IoEngine>> = const { RefCell::new(None) };
}

/// Play `data` as a script (see the module docs) and check what it promises; panics on a failure.
pub fn tcp_connection(data: &[u8]) {
    let _ = run(data);
}

/// What the hosts of a script saw: every response, by connection (in the order the connections were accepted).
#[doc(hidden)]
pub fn run(data: &[u8]) -> Vec<Vec<CompletionQueueEntry>> {
    ENGINE.with(|cell| {
        let mut cell = cell.borrow_mut();
        // An input that panicked (under a replay test that goes on) may have left the engine in use: start afresh.
        if cell.as_ref().is_some_and(|e| {
            e.in_flight() > 0 || e.pool().available() < e.pool().capacity() || e.pool().anonymous_held() > 0
        }) {
            *cell = None;
        }
        let engine = cell.get_or_insert_with(new_engine);
        let mut rig = Rig::new(engine, data.first().copied().unwrap_or(0));
        rig.play(data.get(1..).unwrap_or_default());
        rig.finish()
    })
}

fn new_engine() -> IoEngine {
    IoEngine::new(&EngineConfig {
        ring_entries: 8,
        buffer_size: MDTS as usize,
        buffer_count: 4,
        small_buffer_size: 4096,
        small_buffer_count: 8,
        max_files: 1,
        discard_queue_depth: 1,
        defer_task_work: false,
        send_zero_copy_bytes: 0,
    })
    .expect("an io_uring engine (io_uring must be available)")
}

/// The port's settings from the script's first byte.
fn transport_config(bits: u8) -> TcpTransportConfig {
    let bit = |n: u8| bits & (1 << n) != 0;
    TcpTransportConfig {
        in_capsule_data_size: if bit(4) { 4096 } else { 8192 },
        maxh2cdata: if bit(7) { 4096 } else { 16 << 10 },
        max_r2t_len: if bit(3) { 4096 } else { u32::MAX },
        max_r2t_per_command: 2,
        max_c2h_data: 8192,
        header_digest: bit(0),
        data_digest: bit(1),
        c2h_success: bit(2),
        receive_buffer_size: if bit(5) { 4096 } else { 64 << 10 },
        max_send_backlog: if bit(6) { 16 << 10 } else { 1 << 20 },
        // Set on the socket by the acceptor thread, which the harness stands in for.
        keepalive_ms: 0,
        tls: nvmf_config::target::TlsMode::None,
    }
}

/// One connection: the target's side and the host's.
#[derive(Debug)]
struct Link {
    tcp: TcpConnection,
    host: Host,
    key: u64,
    /// Index of this connection's responses in the transcript.
    transcript: usize,
    /// It holds its Connect for placement (action 5).
    placed: bool,
}

/// A target, its engine and up to [`LINKS`] connections, driven as a reactor would.
#[derive(Debug)]
struct Rig<'e> {
    engine: &'e mut IoEngine,
    target: Arc<Target>,
    config: TcpTransportConfig,
    links: [Option<Link>; LINKS],
    next_key: u64,
    now: Instant,
    transcript: Vec<Vec<CompletionQueueEntry>>,
}

impl<'e> Rig<'e> {
    fn new(engine: &'e mut IoEngine, settings: u8) -> Self {
        let memory = Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).expect("memory storage");
        let null = Storage::open(&StorageSpec::Null { size: 1 << 20, block_size: 4096 }).expect("null storage");
        let mut subsystem = SubsystemParams::new(SUBNQN);
        subsystem.namespaces.push(NamespaceParams::new(1, Arc::new(memory)));
        subsystem.namespaces.push(NamespaceParams::new(2, Arc::new(null)));
        let keys = HostKeys {
            host_key: DhchapSecret::new(None, &[0x5a; 32]).expect("a 32-byte key"),
            controller_key: None,
            hashes: Vec::new(),
            dh_groups: vec![DhGroup::Null, DhGroup::Ffdhe2048],
            hostid: None,
        };
        subsystem.auth = SubsystemAuth { required: false, hosts: [(KEYED_HOSTNQN.to_owned(), Arc::new(keys))].into() };
        let params = TargetParams { mdts: MDTS, max_io_queues: 4, ..TargetParams::default() };
        let target = Target::new(params, vec![subsystem]).expect("target");
        Rig {
            engine,
            target,
            config: transport_config(settings),
            links: Default::default(),
            next_key: 1,
            now: Instant::now(),
            transcript: Vec::new(),
        }
    }

    /// Run every record of the script, a reactor turn after each.
    fn play(&mut self, mut script: &[u8]) {
        while let Some((&op, rest)) = script.split_first() {
            script = rest;
            let index = usize::from(op) % LINKS;
            match op >> 2 {
                1 => self.link(index).host.close_write(),
                2 => {
                    let host = &mut self.link(index).host;
                    host.reading = !host.reading;
                }
                3 => {
                    let (&n, rest) = script.split_first().unwrap_or((&0, &[]));
                    script = rest;
                    self.now += Duration::from_millis(250) * (u32::from(n) + 1);
                }
                4 => {
                    self.link(index);
                    if let Some(link) = self.links[index].as_mut() {
                        link.tcp.shutdown(self.engine);
                    }
                }
                5 if self.links[index].is_none() => {
                    let link = self.link(index);
                    link.placed = true;
                    link.tcp.place_at_connect();
                }
                5 => {}
                _ => {
                    let len = match script {
                        [a, b, rest @ ..] => {
                            script = rest;
                            usize::from(u16::from_le_bytes([*a, *b]))
                        }
                        _ => std::mem::take(&mut script).len(),
                    };
                    let (bytes, rest) = script.split_at(len.min(script.len()));
                    script = rest;
                    self.link(index).host.send(bytes);
                }
            }
            self.turn();
        }
    }

    /// Connection `index`, accepted now if it has none.
    fn link(&mut self, index: usize) -> &mut Link {
        if self.links[index].is_none() {
            let (target_end, host_end) = UnixStream::pair().expect("socket pair");
            target_end.set_nonblocking(true).expect("non-blocking socket");
            host_end.set_nonblocking(true).expect("non-blocking socket");
            // The connection reads and writes its socket as any stream socket; a Unix one does as well here.
            let stream = mio::net::TcpStream::from_std(std::net::TcpStream::from(OwnedFd::from(target_end)));
            let key = self.next_key;
            self.next_key += 1;
            let info = TransportInfo::tcp(1, self.config.in_capsule_data_size, key);
            self.engine.clock_mut().start_turn(self.now);
            let queue = Queue::new(Arc::clone(&self.target), info, self.now);
            self.transcript.push(Vec::new());
            self.links[index] = Some(Link {
                tcp: TcpConnection::new(stream, queue, &self.config, SocketIo::Epoll),
                host: Host::new(host_end),
                key,
                transcript: self.transcript.len() - 1,
                placed: false,
            });
        }
        self.links[index].as_mut().expect("a link")
    }

    /// Connection `index` held its Connect for placement: serve it here, or move it to a new connection (and queue)
    /// on its socket, as the reactor on the CPU its packets arrive on would take it up.
    fn place(&mut self, index: usize) {
        let Some(link) = self.links[index].as_mut() else { return };
        if !(link.placed && link.tcp.awaits_placement()) {
            return;
        }
        if link.key % 2 == 1 || !link.tcp.can_leave() {
            let _ = link.tcp.place_here(self.engine);
            return;
        }
        let Some(Link { tcp, host, transcript, .. }) = self.links[index].take() else { return };
        let Some((stream, initialized)) = tcp.into_initialized(self.engine) else { return };
        let key = self.next_key;
        self.next_key += 1;
        let info = TransportInfo::tcp(1, self.config.in_capsule_data_size, key);
        let queue = Queue::new(Arc::clone(&self.target), info, self.now);
        let mut tcp = TcpConnection::new(stream, queue, &self.config, SocketIo::Epoll);
        let _ = tcp.resume(self.engine, initialized);
        self.links[index] = Some(Link { tcp, host, key, transcript, placed: false });
    }

    /// One reactor turn: the hosts' bytes arrive, every connection reads and writes, storage completes, every
    /// queue is polled, output is flushed, ended connections with nothing in flight leave; the hosts read.
    fn turn(&mut self) {
        self.engine.clock_mut().start_turn(self.now);
        for link in self.links.iter_mut().flatten() {
            link.host.flush();
            let _ = link.tcp.on_readable(self.engine);
            let _ = link.tcp.on_writable(self.engine);
        }
        self.complete_storage();
        for link in self.links.iter_mut().flatten() {
            let _ = link.tcp.poll(self.engine, self.now);
        }
        self.complete_storage();
        for index in 0..LINKS {
            self.place(index);
        }
        self.complete_storage();
        for slot in &mut self.links {
            let Some(link) = slot else { continue };
            if link.tcp.wants_write() {
                let _ = link.tcp.on_writable(self.engine);
            }
            link.tcp.note_turn(self.now);
            link.host.receive();
            let host = &mut link.host;
            self.transcript[link.transcript].append(&mut host.responses);
            if link.tcp.is_closed() && link.tcp.in_flight() == 0 {
                *slot = None;
            }
        }
    }

    /// Submit the storage ops queued and route completions to their connections until none arrive.
    fn complete_storage(&mut self) {
        let mut completions = Vec::new();
        let mut waited = Duration::ZERO;
        loop {
            self.engine.submit().expect("io_uring submit");
            self.engine.reap(|c| completions.push(c));
            if completions.is_empty() {
                // DH-HMAC-CHAP steps run on the authentication pool's threads: wait for them here, so that a script
                // plays the same every time (a bounded wait: one that never comes is caught by `finish`).
                if self.engine.in_flight() == 0 || waited >= OFFLOAD_PATIENCE {
                    return;
                }
                let step = Duration::from_millis(10);
                self.engine.wait(Some(step)).expect("engine wait");
                waited += step;
                continue;
            }
            for c in completions.drain(..) {
                let (key, slot): (u64, SlotId) = split_storage_tag(c.tag);
                let link = self.links.iter_mut().flatten().find(|l| l.key == key);
                let link = link.unwrap_or_else(|| panic!("storage completion for queue key {key}, which is gone"));
                link.tcp.io_completed(self.engine, slot, c.result);
            }
        }
    }

    /// The hosts close every connection and read what is left; check that everything ends and is returned.
    fn finish(mut self) -> Vec<Vec<CompletionQueueEntry>> {
        for link in self.links.iter_mut().flatten() {
            link.host.reading = true;
            link.host.close_write();
        }
        for _ in 0..CLOSING_TURNS {
            if self.links.iter().all(Option::is_none) {
                break;
            }
            self.turn();
        }
        if let Some(link) = self.links.iter().flatten().next() {
            panic!("a connection did not end after its host closed it: {:?}", link.tcp);
        }
        assert_eq!(self.engine.in_flight(), 0, "storage ops left in flight");
        let pool = self.engine.pool();
        assert_eq!(pool.available(), pool.capacity(), "engine buffers leaked");
        assert_eq!(pool.anonymous_held(), 0, "the anonymous buffer share was not given back");
        for subsystem in self.target.subsystems() {
            assert!(subsystem.controllers().is_empty(), "a controller outlived its connections");
        }
        assert_eq!(Arc::strong_count(&self.target), 1, "something still holds the target");
        self.transcript
    }
}
