//! Tests of the engine on every storage kind it drives: null, memory, files (O_DIRECT, buffered, tmpfs), block
//! devices and NVMe passthrough (the last two only where the machine has one).

use super::*;
use crate::backend::ring;
use crate::backend::StorageSpec;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

fn small_engine(ring_entries: u32, large: usize, small: usize) -> IoEngine {
    IoEngine::new(&EngineConfig {
        ring_entries,
        buffer_size: 128 << 10,
        buffer_count: large,
        small_buffer_size: 4096,
        small_buffer_count: small,
        max_files: 4,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| u8::try_from((i * 31 + seed * 7) % 251).unwrap()).collect()
}

/// Waits (on the eventfd, as a reactor would) until `want` completions arrived; returns them in arrival order.
fn wait_for(engine: &mut IoEngine, want: usize) -> Vec<IoCompletion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        engine.reap(|c| got.push(c));
        if got.len() >= want {
            return got;
        }
        assert!(Instant::now() < deadline, "timed out with {} of {want} completions", got.len());
        ring::poll_readable(engine.event_fd(), 100);
        engine.clear_event_fd();
    }
}

/// Pushes one op, submits, waits for its completion.
fn run(engine: &mut IoEngine, storage: &Arc<Storage>, op: IoOp, buf: Option<BufferId>) -> Result<u32, io::Error> {
    engine.push(7, storage, op, buf).unwrap();
    engine.submit().unwrap();
    let mut done = wait_for(engine, 1);
    assert_eq!(done.len(), 1);
    let c = done.pop().unwrap();
    assert_eq!(c.tag, 7);
    c.result
}

fn write_at(engine: &mut IoEngine, storage: &Arc<Storage>, offset: u64, data: &[u8], fua: bool) {
    let id = engine.alloc(data.len()).unwrap();
    engine.buffer_mut(id).copy_from_slice(data);
    let len = u32::try_from(data.len()).unwrap();
    assert_eq!(run(engine, storage, IoOp::Write { offset, len, fua }, Some(id)).unwrap(), len);
    engine.release(id);
}

fn read_at(engine: &mut IoEngine, storage: &Arc<Storage>, offset: u64, len: usize) -> Vec<u8> {
    let id = engine.alloc(len).unwrap();
    engine.buffer_mut(id).fill(0xee);
    let n = u32::try_from(len).unwrap();
    assert_eq!(run(engine, storage, IoOp::Read { offset, len: n }, Some(id)).unwrap(), n);
    let out = engine.buffer(id).to_vec();
    engine.release(id);
    out
}

fn file_storage(dir: &Path, size: usize, block_size: u32) -> (Arc<Storage>, std::path::PathBuf) {
    let path = dir.join("ns.img");
    std::fs::write(&path, vec![0u8; size]).unwrap();
    let storage = Storage::open(&StorageSpec::Path { path: path.clone(), block_size }).unwrap();
    (Arc::new(storage), path)
}

/// The full op set against one storage; `on_disk` reads the backing file behind the engine's back.
fn exercise(storage: &Arc<Storage>, on_disk: Option<&Path>) {
    let mut engine = small_engine(32, 4, 16);
    let bs = u64::from(storage.block_size());
    assert_eq!(read_at(&mut engine, storage, 0, 8192), vec![0u8; 8192]);
    // Non-overlapping: 4 KiB at 0, 8 KiB at a block boundary that is not 4 KiB-aligned when bs = 512, 128 KiB, the
    // last 4 KiB.
    let writes = [(0u64, 4096usize), (16384 + bs, 8192), (bs * 64, 128 << 10), (storage.capacity() - 4096, 4096)];
    for (i, &(offset, len)) in writes.iter().enumerate() {
        write_at(&mut engine, storage, offset, &pattern(i as u64, len), i % 2 == 1);
    }
    for (i, &(offset, len)) in writes.iter().enumerate() {
        assert!(read_at(&mut engine, storage, offset, len) == pattern(i as u64, len), "write {i} read back");
    }
    assert_eq!(run(&mut engine, storage, IoOp::Flush, None).unwrap(), 0);
    if let Some(path) = on_disk {
        let file = std::fs::read(path).unwrap();
        let (offset, len) = writes[2];
        let offset = usize::try_from(offset).unwrap();
        assert!(file[offset..offset + len] == pattern(2, len)[..], "the data reached the file");
    }
    // Write Zeroes inside the 128 KiB pattern, Discard another part of it.
    let base = bs * 64;
    assert_eq!(run(&mut engine, storage, IoOp::WriteZeroes { offset: base + 4096, len: 8192 }, None).unwrap(), 0);
    assert!(storage.supports_discard());
    assert_eq!(run(&mut engine, storage, IoOp::Discard { offset: base + 65536, len: 65536 }, None).unwrap(), 0);
    let mut expected = pattern(2, 128 << 10);
    expected[4096..4096 + 8192].fill(0);
    expected[65536..].fill(0);
    assert!(read_at(&mut engine, storage, base, 128 << 10) == expected, "zeroed/discarded ranges read zeros");
    assert_eq!(engine.in_flight(), 0);
    assert_eq!(engine.pool().available(), engine.pool().capacity());
}

#[test]
fn memory_storage_round_trips() {
    let storage = Arc::new(Storage::open(&StorageSpec::Memory { size: 4 << 20, block_size: 512 }).unwrap());
    exercise(&storage, None);
}

#[test]
fn file_storage_with_o_direct_round_trips() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, path) = file_storage(dir.path(), 4 << 20, 512);
    assert!(storage.is_direct(), "ext4 under /var/tmp takes O_DIRECT");
    assert!(storage.volatile_write_cache());
    exercise(&storage, Some(&path));
}

#[test]
fn file_storage_4k_blocks_round_trips() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, path) = file_storage(dir.path(), 4 << 20, 4096);
    assert_eq!(storage.num_blocks(), 1024);
    exercise(&storage, Some(&path));
}

#[test]
fn file_storage_buffered_round_trips() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("ns.img");
    std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
    let spec = StorageSpec::Path { path: path.clone(), block_size: 512 };
    let storage = Arc::new(Storage::open_buffered(&spec).unwrap());
    assert!(!storage.is_direct());
    exercise(&storage, Some(&path));
}

#[test]
fn reactors_share_one_storage() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (file, _path) = file_storage(dir.path(), 1 << 20, 512);
    let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
    for storage in [file, memory] {
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let storage = Arc::clone(&storage);
                std::thread::spawn(move || {
                    let mut engine = small_engine(16, 1, 8);
                    for i in 0..32u64 {
                        let offset = (i * 2 + t) * 8192;
                        write_at(&mut engine, &storage, offset, &pattern(offset, 8192), false);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut engine = small_engine(16, 1, 8);
        for block in 0..64u64 {
            let offset = block * 8192;
            assert!(read_at(&mut engine, &storage, offset, 8192) == pattern(offset, 8192), "block {block}");
        }
    }
}

#[test]
fn engine_moves_to_its_reactor_thread() {
    fn send<T: Send>() {}
    send::<IoEngine>();
    let engine = small_engine(8, 1, 1);
    std::thread::spawn(move || drop(engine)).join().unwrap();
}

#[test]
fn file_storage_on_tmpfs_round_trips() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (storage, path) = file_storage(dir.path(), 4 << 20, 512);
    // tmpfs may or may not take O_DIRECT depending on the kernel; data must round-trip either way.
    exercise(&storage, Some(&path));
}

#[test]
fn null_storage_reads_zeros_and_discards_writes() {
    let storage = Arc::new(Storage::open(&StorageSpec::Null { size: 1 << 30, block_size: 512 }).unwrap());
    assert!(!storage.volatile_write_cache());
    let mut engine = small_engine(8, 1, 2);
    write_at(&mut engine, &storage, 4096, &[0xab; 4096], false);
    assert_eq!(read_at(&mut engine, &storage, 4096, 4096), vec![0u8; 4096]);
    assert_eq!(run(&mut engine, &storage, IoOp::Flush, None).unwrap(), 0);
    assert_eq!(run(&mut engine, &storage, IoOp::WriteZeroes { offset: 0, len: 1 << 20 }, None).unwrap(), 0);
    assert_eq!(run(&mut engine, &storage, IoOp::Discard { offset: 0, len: 1 << 20 }, None).unwrap(), 0);
}

#[test]
fn many_ops_batched_in_one_submit() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
    let mut engine = small_engine(64, 1, 64);
    let ids: Vec<BufferId> = (0..64).map(|_| engine.alloc(4096).unwrap()).collect();
    for (i, &id) in ids.iter().enumerate() {
        engine.buffer_mut(id).copy_from_slice(&pattern(i as u64, 4096));
        let op = IoOp::Write { offset: i as u64 * 4096, len: 4096, fua: false };
        engine.push(i as u64, &storage, op, Some(id)).unwrap();
    }
    assert_eq!(engine.in_flight(), 64);
    assert_eq!(engine.submit().unwrap(), 64);
    let done = wait_for(&mut engine, 64);
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..64).collect::<Vec<_>>());
    assert!(done.iter().all(|c| matches!(c.result, Ok(4096))));
    // Read everything back in another single batch.
    for (i, &id) in ids.iter().enumerate() {
        engine.buffer_mut(id).fill(0);
        engine.push(i as u64, &storage, IoOp::Read { offset: i as u64 * 4096, len: 4096 }, Some(id)).unwrap();
    }
    assert_eq!(engine.submit().unwrap(), 64);
    assert_eq!(wait_for(&mut engine, 64).len(), 64);
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(engine.buffer(id), &pattern(i as u64, 4096)[..], "block {i}");
    }
}

#[test]
fn full_ring_hands_the_op_back() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
    let mut engine = small_engine(4, 1, 8);
    let ids: Vec<BufferId> = (0..5).map(|_| engine.alloc(4096).unwrap()).collect();
    for (i, &id) in ids.iter().take(4).enumerate() {
        engine.push(i as u64, &storage, IoOp::Read { offset: 0, len: 4096 }, Some(id)).unwrap();
    }
    let op = IoOp::Read { offset: 4096, len: 4096 };
    assert_eq!(engine.push(4, &storage, op, Some(ids[4])), Err(op));
    // The refused op left its buffer usable.
    assert_eq!(engine.buffer(ids[4]).len(), 4096);
    assert_eq!(engine.submit().unwrap(), 4);
    engine.push(4, &storage, op, Some(ids[4])).unwrap();
    engine.submit().unwrap();
    assert_eq!(wait_for(&mut engine, 5).len(), 5);
}

#[test]
fn release_while_in_flight_is_deferred_until_completion() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
    let mut engine = small_engine(8, 1, 0);
    let id = engine.alloc(65536).unwrap();
    assert_eq!(engine.alloc(4096), None, "pool of one buffer is exhausted");
    engine.push(1, &storage, IoOp::Read { offset: 0, len: 65536 }, Some(id)).unwrap();
    assert!(engine.buffer(id).is_empty(), "no access while the kernel owns it");
    assert!(engine.buffer_mut(id).is_empty());
    engine.release(id);
    assert_eq!(engine.alloc(4096), None, "still in flight");
    engine.submit().unwrap();
    let done = wait_for(&mut engine, 1);
    assert!(matches!(done[0].result, Ok(65536)));
    assert_eq!(engine.in_flight(), 0);
    assert_eq!(engine.alloc(4096), Some(id), "freed once the completion was reaped");
}

#[test]
fn invalid_ops_complete_with_errors_and_touch_nothing() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (file, _path) = file_storage(dir.path(), 1 << 20, 512);
    let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
    let mut engine = small_engine(8, 1, 4);
    let id = engine.alloc(4096).unwrap();
    for storage in [&file, &memory] {
        let cap = storage.capacity();
        let bad = [
            (IoOp::Read { offset: cap, len: 512 }, Some(id)),
            (IoOp::Write { offset: cap - 512, len: 1024, fua: false }, Some(id)),
            (IoOp::Read { offset: u64::MAX - 511, len: 1024 }, Some(id)),
            (IoOp::WriteZeroes { offset: 0, len: cap + 512 }, None),
            (IoOp::Discard { offset: u64::MAX - 511, len: 1024 }, None),
            (IoOp::Read { offset: 100, len: 512 }, Some(id)),
            (IoOp::Write { offset: 0, len: 100, fua: false }, Some(id)),
            (IoOp::Read { offset: 0, len: 8192 }, Some(id)),
            (IoOp::Read { offset: 0, len: 512 }, None),
            (IoOp::Write { offset: 0, len: 512, fua: false }, Some(BufferId::from_raw(999))),
        ];
        for (op, buf) in bad {
            let err = run(&mut engine, storage, op, buf).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{op:?} on {}", storage.describe());
        }
    }
    assert_eq!(engine.in_flight(), 0);
    assert_eq!(engine.buffer(id).len(), 4096, "buffer still owned by the caller");
}

#[test]
fn second_op_on_a_busy_buffer_is_refused() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, _path) = file_storage(dir.path(), 1 << 20, 512);
    let mut engine = small_engine(8, 1, 4);
    let id = engine.alloc(4096).unwrap();
    engine.push(1, &storage, IoOp::Read { offset: 0, len: 4096 }, Some(id)).unwrap();
    engine.push(2, &storage, IoOp::Read { offset: 4096, len: 4096 }, Some(id)).unwrap();
    engine.submit().unwrap();
    let done = wait_for(&mut engine, 2);
    let second = done.iter().find(|c| c.tag == 2).unwrap();
    assert_eq!(second.result.as_ref().unwrap_err().raw_os_error(), Some(libc::EBUSY));
    assert!(matches!(done.iter().find(|c| c.tag == 1).unwrap().result, Ok(4096)));
}

#[test]
fn memory_completions_wake_the_event_fd() {
    let storage = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
    let mut engine = small_engine(8, 1, 4);
    engine.push(3, &storage, IoOp::Flush, None).unwrap();
    assert_eq!(engine.submit().unwrap(), 0, "nothing for the kernel");
    assert!(ring::poll_readable(engine.event_fd(), 1000));
    let mut tags = Vec::new();
    engine.reap(|c| tags.push(c.tag));
    assert_eq!(tags, [3]);
}

/// The reactor never reads the eventfd (mio is edge-triggered): each later completion, from the engine itself
/// (memory) or from the kernel's CQ (file), must still wake the poll although the counter stayed non-zero.
#[test]
fn unread_event_fd_wakes_an_edge_triggered_poll_for_every_completion() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("ns");
    std::fs::write(&path, vec![0u8; 65536]).unwrap();
    let file = Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap());
    let memory = Arc::new(Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 512 }).unwrap());
    let mut engine = small_engine(8, 1, 4);
    let mut poll = mio::Poll::new().unwrap();
    let fd = engine.event_fd();
    poll.registry().register(&mut mio::unix::SourceFd(&fd), mio::Token(1), mio::Interest::READABLE).unwrap();
    let mut events = mio::Events::with_capacity(4);
    for (tag, storage) in [(1, &memory), (2, &file), (3, &memory), (4, &file)] {
        let id = engine.alloc(4096).unwrap();
        engine.push(tag, storage, IoOp::Write { offset: 0, len: 4096, fua: false }, Some(id)).unwrap();
        engine.submit().unwrap();
        let mut done = Vec::new();
        // Generous bound: a hang, not a duration, is what fails here.
        let deadline = Instant::now() + Duration::from_secs(10);
        while done.is_empty() {
            assert!(Instant::now() < deadline, "completion {tag} never woke the poll");
            // Task work posting a CQE interrupts epoll_wait, as in the reactor.
            match poll.poll(&mut events, Some(Duration::from_secs(1))) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => other.unwrap(),
            }
            if events.iter().any(|e| e.token() == mio::Token(1)) {
                engine.reap(|c| done.push(c.tag));
            }
        }
        assert_eq!(done, [tag]);
        engine.release(id);
    }
}

/// Waiting in the ring: when a reap between the reactor's look at epoll and its next wait took the epoll poll's
/// completion, that wait must not sleep (no further completion announces the events epoll holds).
#[test]
fn a_wait_in_the_ring_does_not_sleep_on_an_epoll_event_already_reaped() {
    let mut engine = small_engine(8, 1, 4);
    let poll = mio::Poll::new().unwrap();
    let waker = mio::Waker::new(poll.registry(), mio::Token(9)).unwrap();
    engine.wait_in_ring(poll.as_raw_fd()).unwrap();
    // Arm the poll and take the initial "look at epoll".
    engine.wait(Some(Duration::ZERO)).unwrap();
    assert!(engine.take_epoll_ready());
    waker.wake().unwrap();
    // The poll's completion is reaped as the reactor's storage reaping would, without looking at epoll.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !engine.epoll.ready {
        assert!(Instant::now() < deadline, "the epoll poll never completed");
        engine.wait(Some(Duration::from_millis(100))).unwrap();
        engine.reap(|_| {});
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = engine.wait(None).map(|()| engine.take_epoll_ready());
        let _ = tx.send(result.unwrap());
    });
    let looked = rx.recv_timeout(Duration::from_secs(10)).expect("the wait slept on an event already announced");
    assert!(looked, "the wait returned without saying epoll has events");
}

#[test]
fn many_storages_share_fixed_slots_and_fall_back_to_plain_fds() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut engine = small_engine(8, 1, 4); // 4 fixed-file slots
    let open = |i: usize| {
        let path = dir.path().join(format!("ns{i}"));
        std::fs::write(&path, vec![0u8; 65536]).unwrap();
        Arc::new(Storage::open(&StorageSpec::Path { path, block_size: 512 }).unwrap())
    };
    // Six live storages: four get slots, two use plain descriptors.
    let live: Vec<_> = (0..6).map(open).collect();
    for (i, s) in live.iter().enumerate() {
        write_at(&mut engine, s, 0, &pattern(i as u64, 4096), false);
    }
    for (i, s) in live.iter().enumerate() {
        assert_eq!(read_at(&mut engine, s, 0, 4096), pattern(i as u64, 4096));
    }
    // Dropping storages frees their slots for new ones.
    drop(live);
    for i in 6..12 {
        let s = open(i);
        write_at(&mut engine, &s, 512, &pattern(i as u64, 4096), true);
        assert_eq!(read_at(&mut engine, &s, 512, 4096), pattern(i as u64, 4096));
    }
    assert!(engine.free_file_slots.len() >= 3);
}

#[test]
fn dropping_an_engine_with_ops_in_flight_waits_for_them() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (storage, _path) = file_storage(dir.path(), 4 << 20, 512);
    let mut engine = small_engine(32, 4, 0);
    for i in 0..4u64 {
        let id = engine.alloc(128 << 10).unwrap();
        engine.push(i, &storage, IoOp::Write { offset: i << 17, len: 128 << 10, fua: true }, Some(id)).unwrap();
        engine.release(id);
    }
    engine.submit().unwrap();
    drop(engine);
}

#[test]
fn engine_config_is_validated() {
    let bad = [
        EngineConfig { ring_entries: 0, ..EngineConfig::default() },
        EngineConfig { buffer_count: 0, ..EngineConfig::default() },
        EngineConfig { buffer_size: 0, ..EngineConfig::default() },
        EngineConfig { small_buffer_size: 0, ..EngineConfig::default() },
        EngineConfig { buffer_size: 2 << 30, ..EngineConfig::default() },
        EngineConfig { discard_queue_depth: 0, ..EngineConfig::default() },
    ];
    for config in bad {
        assert!(IoEngine::new(&config).is_err(), "{config:?}");
    }
    let engine = IoEngine::new(&EngineConfig::default()).unwrap();
    assert_eq!(engine.buffer_size(), 1 << 20);
    assert_eq!(engine.pool().capacity(), 32 + 512);
}

/// Runs `f` on an 8 MiB loop device, detached afterwards. Without `/dev/loop-control` to open (root, a loop
/// driver) the test prints `SKIPPED` and passes, unless `NVMF_REQUIRE_TOOLS=1` (`.ci/run`).
fn with_loop_device(f: impl FnOnce(&Arc<Storage>) + std::panic::UnwindSafe) {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/loop-control") {
        let required = std::env::var("NVMF_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
        assert!(!required, "/dev/loop-control: {e}, and NVMF_REQUIRE_TOOLS=1 requires a loop device");
        eprintln!("SKIPPED: no loop device to attach (/dev/loop-control: {e})");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let image = dir.path().join("loop.img");
    std::fs::write(&image, vec![0u8; 8 << 20]).unwrap();
    let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(&image).output().unwrap();
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let path = std::path::PathBuf::from(&dev);
    let result = std::panic::catch_unwind(move || {
        let spec = StorageSpec::Path { path, block_size: 512 };
        let storage = Arc::new(Storage::open(&spec).unwrap());
        assert_eq!(storage.capacity(), 8 << 20);
        f(&storage);
    });
    let _ = std::process::Command::new("losetup").args(["-d", &dev]).status();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn block_device_round_trips() {
    with_loop_device(|storage| {
        assert!(storage.is_direct());
        exercise(storage, None);
        // Discard went through io_uring (this kernel is 6.12+), not the ioctl fallback.
        let mut engine = small_engine(8, 1, 2);
        write_at(&mut engine, storage, 0, &[0x5a; 4096], false);
        assert_eq!(run(&mut engine, storage, IoOp::Discard { offset: 0, len: 4096 }, None).unwrap(), 0);
        assert!(engine.async_block_discard);
        assert!(engine.discard.is_none(), "no worker thread without a fallback");
        assert_eq!(read_at(&mut engine, storage, 0, 4096), vec![0u8; 4096]);
    });
}

/// The `BLKDISCARD` fallback (kernels before 6.12) runs on the discard worker, never on the engine's thread; a
/// discard beyond `discard_queue_depth` is handed back like one on a full ring, and counted.
#[test]
fn block_device_discard_fallback_runs_off_the_reactor_thread() {
    with_loop_device(|storage| {
        let counters = Arc::new(DiscardCounters::default());
        let config = EngineConfig { discard_queue_depth: 2, ..EngineConfig::default() };
        let mut engine = IoEngine::with_discard_counters(&config, Arc::clone(&counters)).unwrap();
        engine.async_block_discard = false;
        for (i, offset) in [0u64, 65536, 131_072].into_iter().enumerate() {
            write_at(&mut engine, storage, offset, &pattern(i as u64, 65536), false);
        }
        assert!(engine.discard.is_none(), "the worker starts at the first fallback");

        let discard = |offset| IoOp::Discard { offset, len: 65536 };
        engine.push(1, storage, discard(0), None).unwrap();
        engine.push(2, storage, discard(65536), None).unwrap();
        assert_eq!(engine.push(3, storage, discard(131_072), None), Err(discard(131_072)), "queue full: handed back");
        assert_eq!((counters.queue_full(), engine.in_flight()), (1, 2));
        engine.submit().unwrap();
        // Completions arrive through the eventfd and reap, as the kernel's do.
        let mut done: Vec<(u64, u32)> =
            wait_for(&mut engine, 2).into_iter().map(|c| (c.tag, c.result.unwrap())).collect();
        done.sort_unstable();
        assert_eq!(done, [(1, 0), (2, 0)]);
        // Drained: room again.
        assert_eq!(run(&mut engine, storage, discard(131_072), None).unwrap(), 0);
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(counters.ran(), 3);
        let ran_on = discard::RAN_ON.lock().unwrap().clone();
        assert_eq!(ran_on, ["nvmf-discard"; 3], "every ioctl ran on the worker thread");
        assert_ne!(std::thread::current().name(), Some("nvmf-discard"));
        for offset in [0u64, 65536, 131_072] {
            assert_eq!(read_at(&mut engine, storage, offset, 65536), vec![0u8; 65536], "discarded at {offset}");
        }
        drop(engine);
        assert!(
            !std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
                std::fs::read_to_string(t.unwrap().path().join("comm")).is_ok_and(|c| c.trim() == "nvmf-discard")
            }),
            "the worker ends with its engine"
        );
    });
}

/// Needs root and an NVMe drive whose namespace is blank and expendable (the test VM's emulated one):
/// `VM_NVME=1G vm-run '<test binary> --ignored passthrough --nocapture'`. `NVMF_PASSTHROUGH_DEV` names the
/// generic node (default `/dev/ng0n1`).
#[test]
#[ignore = "needs root and an expendable NVMe namespace"]
fn passthrough_nvme_round_trips() {
    use nvmf_common::nvme::io::Read as ReadCommand;
    use nvmf_common::nvme::Status;

    let dev = std::env::var("NVMF_PASSTHROUGH_DEV").unwrap_or_else(|_| "/dev/ng0n1".to_owned());
    let storage = Arc::new(Storage::open(&StorageSpec::Path { path: dev.clone().into(), block_size: 512 }).unwrap());
    let Kind::Nvme(backing) = storage.kind() else { panic!("{dev} was not recognised as an NVMe generic node") };
    println!(
        "opened {}: block size {}, {} blocks, max transfer {} bytes, discard {}, write zeroes {}, VWC {}",
        storage.describe(),
        storage.block_size(),
        storage.num_blocks(),
        backing.max_transfer,
        storage.supports_discard(),
        storage.supports_write_zeroes(),
        storage.volatile_write_cache(),
    );
    assert!(storage.is_nvme_passthrough() && storage.is_direct());
    let max_transfer = backing.max_transfer;
    let nsid = backing.nsid;

    // The common op set (patterns read back, FUA, Flush, Write Zeroes, Discard) through 128 KiB buffers.
    let mut engine = small_engine(32, 4, 16);
    let bs = u64::from(storage.block_size());
    let writes = [(0u64, 4096usize), (16384 + bs, 8192), (bs * 64, 128 << 10), (storage.capacity() - 4096, 4096)];
    for (i, &(offset, len)) in writes.iter().enumerate() {
        write_at(&mut engine, &storage, offset, &pattern(i as u64 + 100, len), i % 2 == 1);
    }
    for (i, &(offset, len)) in writes.iter().enumerate() {
        assert!(read_at(&mut engine, &storage, offset, len) == pattern(i as u64 + 100, len), "write {i} read back");
    }
    assert_eq!(run(&mut engine, &storage, IoOp::Flush, None).unwrap(), 0);
    println!("patterns written at 4 places and read back; flush ok");
    let base = bs * 64;
    assert_eq!(run(&mut engine, &storage, IoOp::WriteZeroes { offset: base + 4096, len: 8192 }, None).unwrap(), 0);
    let mut expected = pattern(102, 128 << 10);
    expected[4096..4096 + 8192].fill(0);
    assert!(read_at(&mut engine, &storage, base, 128 << 10) == expected, "write zeroes");
    println!("write zeroes: 8 KiB inside the 128 KiB pattern read back as zeros, the rest intact");
    if storage.supports_discard() {
        assert_eq!(run(&mut engine, &storage, IoOp::Discard { offset: base + 65536, len: 65536 }, None).unwrap(), 0);
        println!("dataset management (deallocate) of 64 KiB: ok");
    }

    // 1 MiB at 8 MiB: more than one command's worth (split), read back through the engine and the block device.
    let mut big = IoEngine::new(&EngineConfig {
        ring_entries: 32,
        buffer_size: 1 << 20,
        buffer_count: 2,
        small_buffer_size: 4096,
        small_buffer_count: 0,
        max_files: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    let offset = 8 << 20;
    let data = pattern(7, 1 << 20);
    write_at(&mut big, &storage, offset, &data, false);
    assert!(read_at(&mut big, &storage, offset, 1 << 20) == data, "1 MiB read back");
    assert_eq!(big.in_flight(), 0);
    println!("ring: {:?}", big.ring);
    println!("1 MiB write + read in {} commands each: ok", (1u32 << 20).div_ceil(max_transfer));
    let block_dev = dev.replacen("/dev/ng", "/dev/nvme", 1);
    let from_block_dev = std::fs::File::open(&block_dev).and_then(|f| {
        let mut bytes = vec![0u8; 1 << 20];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut bytes, offset).map(|()| bytes)
    });
    if let Ok(bytes) = from_block_dev {
        assert!(bytes == data, "{block_dev} holds what passthrough wrote");
        println!("{block_dev} at 8 MiB holds the 1 MiB pattern");
    }

    // The engine refuses what lies beyond the capacity; the drive answers LBA Out of Range itself.
    let past = IoOp::Read { offset: storage.capacity(), len: 4096 };
    let id = engine.alloc(4096).unwrap();
    assert_eq!(run(&mut engine, &storage, past, Some(id)).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    let read = ReadCommand { nsid, slba: storage.num_blocks(), nlb: 7, ..Default::default() };
    engine.push_nvme_command(9, &storage, &read.to_sqe(), Some((id, 4096))).unwrap();
    engine.submit().unwrap();
    let done = wait_for(&mut engine, 1);
    let err = done[0].result.as_ref().unwrap_err();
    let status = crate::backend::drive_status(err).expect("a drive status");
    println!("read at LBA {} (NSZE): drive status {status} ({err})", storage.num_blocks());
    assert!(status.same_code(Status::LBA_OUT_OF_RANGE), "{status}");
    engine.release(id);

    storage.flush_blocking().unwrap();
    println!("synchronous flush (shutdown path): ok");
}

/// What the offload tests' work does: wait for the test's word (if any), then say which thread ran it.
struct Probe {
    gate: Option<std::sync::mpsc::Receiver<()>>,
    ran_on: String,
}

fn probe(payload: &mut (dyn std::any::Any + Send)) {
    let Some(p) = payload.downcast_mut::<Probe>() else { return };
    if let Some(gate) = &p.gate {
        let _ = gate.recv();
    }
    p.ran_on = std::thread::current().name().unwrap_or("").into();
}

fn panics(_: &mut (dyn std::any::Any + Send)) {
    panic!("offloaded work that panics");
}

/// Offloaded work runs on the pool's threads and completes through `reap` with its payload; beyond the pool's queue
/// it is handed back (counted); a panic in the work completes the op with an error.
#[test]
fn offloaded_work_runs_on_the_pool_and_completes_through_reap() {
    let pool = WorkPool::new("nvmf-offload-t", 1, 1);
    let mut engine = small_engine(8, 1, 0);
    let (open, gate) = std::sync::mpsc::channel();
    // The first op holds the only thread; the second fills the queue; the third is handed back.
    engine.offload(&pool, 1, Box::new(Probe { gate: Some(gate), ran_on: String::new() }), probe).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut queued = false;
    while !queued {
        // The thread takes the first op off the queue at its own pace: until then the second is refused too.
        match engine.offload(&pool, 2, Box::new(Probe { gate: None, ran_on: String::new() }), probe) {
            Ok(()) => queued = true,
            Err(_) => assert!(Instant::now() < deadline, "the thread never took the first op"),
        }
    }
    let refused = engine.offload(&pool, 3, Box::new(Probe { gate: None, ran_on: String::new() }), probe);
    assert!(refused.is_err_and(|p| p.is::<Probe>()), "queue full: the payload comes back");
    assert!(pool.counters().queue_full() >= 1);
    assert_eq!(engine.in_flight(), 2);
    open.send(()).unwrap();
    let mut done: Vec<u64> = wait_for(&mut engine, 2).into_iter().map(|c| c.result.map(|_| c.tag).unwrap()).collect();
    done.sort_unstable();
    assert_eq!(done, [1, 2]);
    assert_eq!(engine.in_flight(), 0);
    for tag in [1, 2] {
        let p = engine.take_offloaded(tag).unwrap().downcast::<Probe>().unwrap();
        assert_eq!(p.ran_on, "nvmf-offload-t", "not the engine's thread");
    }
    assert!(engine.take_offloaded(1).is_none(), "taken once");
    engine.offload(&pool, 4, Box::new(()), panics).unwrap();
    let c = wait_for(&mut engine, 1).pop().unwrap();
    assert!(c.tag == 4 && c.result.is_err());
    assert!(engine.take_offloaded(4).is_none());
    assert_eq!(pool.counters().ran(), 3);
}
