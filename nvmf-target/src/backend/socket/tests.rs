//! Socket ops on a real ring over a Unix socket pair: bytes received land in the buffer that comes back, a send
//! gathers copied bytes and pool data in order and holds the pool buffer until its completion, bad pieces are
//! refused without leaving a buffer in flight, and an engine dropped with a receive waiting does not hang.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::backend::{EngineConfig, IoEngine, NetCompletion, NetKind, SendPiece};

/// An engine, or `None` (the test is skipped, saying so) where the kernel's io_uring lacks the socket ops.
fn engine() -> Option<IoEngine> {
    let engine = IoEngine::new(&EngineConfig {
        ring_entries: 16,
        buffer_size: 64 << 10,
        buffer_count: 2,
        small_buffer_size: 4096,
        small_buffer_count: 2,
        max_files: 1,
        ..EngineConfig::default()
    })
    .expect("engine");
    if engine.socket_ops() != crate::backend::SocketOps::Supported {
        eprintln!("skipped: this kernel's io_uring lacks the socket ops");
        return None;
    }
    Some(engine)
}

/// Submit, then reap until one socket op completed (bounded).
fn next_completion(engine: &mut IoEngine) -> NetCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    loop {
        engine.submit().expect("submit");
        engine.reap(|c| panic!("unexpected storage completion {}", c.tag));
        engine.take_net_completions(&mut done);
        if let Some(c) = done.pop() {
            assert!(done.is_empty(), "one completion at a time");
            return c;
        }
        assert!(Instant::now() < deadline, "no socket completion within 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_receive_brings_its_buffer_back_with_the_bytes() {
    let Some(mut engine) = engine() else { return };
    let (ours, mut peer) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    engine.recv(7, ours.as_raw_fd(), vec![0; 64], 4).expect("queued");
    engine.submit().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    peer.write_all(b"hello").unwrap();
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.kind, c.result.unwrap()), (7, NetKind::Recv, 5));
    let buffer = c.buffer.expect("the buffer comes back");
    assert_eq!(buffer.len(), 64);
    assert_eq!(&buffer[4..9], b"hello", "received at the offset asked for");

    // The peer closes: a receive completes with 0 bytes.
    engine.recv(8, ours.as_raw_fd(), buffer, 0).expect("queued");
    drop(peer);
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.result.unwrap()), (8, 0));
}

#[test]
fn a_send_gathers_bytes_and_pool_data_and_holds_the_buffer_until_done() {
    let Some(mut engine) = engine() else { return };
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let id = engine.alloc(4096).unwrap();
    engine.buffer_mut(id)[..8].copy_from_slice(b"abcdefgh");
    let pieces = [
        SendPiece::Bytes(b"hdr:"),
        SendPiece::Data { buffer: id, start: 2, len: 3 },
        SendPiece::Bytes(b"|"),
        SendPiece::Data { buffer: id, start: 0, len: 2 },
    ];
    engine.send(9, ours.as_raw_fd(), pieces).expect("queued");
    assert!(engine.buffer(id).is_empty(), "the buffer is in flight until the send completes");
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.kind, c.result.unwrap()), (9, NetKind::Send, 10));
    assert_eq!(engine.buffer(id).len(), 4096, "owned again after the completion");
    let mut got = [0u8; 10];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hdr:cde|ab");

    // A piece past its buffer's end, or of a buffer not allocated, is refused and leaves nothing in flight.
    let past = [SendPiece::Bytes(b"x"), SendPiece::Data { buffer: id, start: 4090, len: 7 }];
    assert!(engine.send(10, ours.as_raw_fd(), past).is_err());
    assert_eq!(engine.buffer(id).len(), 4096);
    engine.release(id);
    let freed = [SendPiece::Data { buffer: id, start: 0, len: 1 }];
    assert!(engine.send(11, ours.as_raw_fd(), freed).is_err());
}

#[test]
fn an_engine_dropped_with_a_receive_waiting_cancels_it() {
    let Some(mut engine) = engine() else { return };
    let (ours, _peer) = UnixStream::pair().unwrap();
    engine.recv(1, ours.as_raw_fd(), vec![0; 64], 0).expect("queued");
    engine.submit().unwrap();
    // The peer stays silent: only the cancellation at drop ends the receive (a hang here fails the test run).
    drop(engine);
}
