//! Socket ops on a real ring over a Unix socket pair: a multishot receive brings each chunk in a receive buffer
//! until the peer closes, the buffers run out or it is cancelled, a send
//! gathers copied bytes and pool data in order and holds the pool buffer until its completion, bad pieces are
//! refused without leaving a buffer in flight, and an engine dropped with a receive waiting does not hang.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::backend::{EngineConfig, IoEngine, NetCompletion, NetKind, SendPiece};

/// An engine, or `None` (the test is skipped, saying so) where the kernel's io_uring lacks the socket ops.
fn engine() -> Option<IoEngine> {
    let mut engine = IoEngine::new(&EngineConfig {
        ring_entries: 16,
        buffer_size: 64 << 10,
        buffer_count: 2,
        small_buffer_size: 4096,
        small_buffer_count: 2,
        max_files: 1,
        defer_task_work: true,
        ..EngineConfig::default()
    })
    .expect("engine");
    if engine.start_socket_io() != crate::backend::SocketOps::Supported {
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
fn a_multishot_receive_brings_each_chunk_in_a_receive_buffer_until_the_peer_closes() {
    let Some(mut engine) = engine() else { return };
    let (ours, mut peer) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    engine.recv_multishot(7, ours.as_raw_fd()).expect("armed");
    engine.submit().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for chunk in [&b"hello"[..], b"world!"] {
        peer.write_all(chunk).unwrap();
        let c = next_completion(&mut engine);
        assert_eq!((c.tag, c.kind, c.more), (7, NetKind::Recv, true), "the receive stays armed");
        let received = c.received.expect("the bytes are in a receive buffer");
        assert_eq!((c.result.unwrap() as usize, &*received), (chunk.len(), chunk));
        engine.recycle_received(received);
    }
    // The peer closes: the receive ends with 0 bytes.
    drop(peer);
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.result.unwrap(), c.more, c.received.is_none()), (7, 0, false, true));
}

#[test]
fn a_receive_whose_buffers_ran_out_ends_and_a_cancelled_one_ends_too() {
    let Some(mut engine) = engine() else { return };
    let (ours, mut peer) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    engine.recv_multishot(3, ours.as_raw_fd()).expect("armed");
    // Keep every buffer: once all are taken the receive ends with ENOBUFS, the byte left in the socket.
    let mut taken = Vec::new();
    let ended = loop {
        peer.write_all(b"x").unwrap();
        let c = next_completion(&mut engine);
        if !c.more {
            break c;
        }
        taken.push(c.received.expect("a buffer"));
        assert!(taken.len() <= 4096, "the receive never ran out of buffers");
    };
    assert_eq!(ended.result.unwrap_err().raw_os_error(), Some(libc::ENOBUFS));
    assert!(!taken.is_empty());
    for bid in taken {
        engine.recycle_received(bid);
    }
    // Armed again, it takes the byte that waited; cancelled, it ends.
    let id = engine.recv_multishot(4, ours.as_raw_fd()).expect("armed");
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.result.unwrap(), c.more), (4, 1, true));
    engine.recycle_received(c.received.unwrap());
    engine.cancel_net_op(id).unwrap();
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.more), (4, false));
    assert_eq!(c.result.unwrap_err().raw_os_error(), Some(libc::ECANCELED));
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
    engine.recv_multishot(1, ours.as_raw_fd()).expect("armed");
    engine.submit().unwrap();
    // The peer stays silent: only the cancellation at drop ends the receive (a hang here fails the test run).
    drop(engine);
}
