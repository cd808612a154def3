//! Socket ops on a real ring over a Unix socket pair: a multishot receive brings each chunk in a receive buffer
//! until the peer closes, the buffers run out or it is cancelled, a send
//! gathers copied bytes and pool data in order and holds the pool buffer until its completion (a zero-copy send's,
//! over TCP, until its notification; the rest of a partly sent buffer may go meanwhile), bad pieces are refused
//! without leaving a buffer in flight, and an engine dropped with a receive waiting does not hang.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
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
    engine.send(9, ours.as_raw_fd(), pieces, false).expect("queued");
    assert!(engine.buffer(id).is_empty(), "the buffer is in flight until the send completes");
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.kind, c.result.unwrap()), (9, NetKind::Send, 10));
    assert_eq!(engine.buffer(id).len(), 4096, "owned again after the completion");
    let mut got = [0u8; 10];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hdr:cde|ab");

    // A piece past its buffer's end, or of a buffer not allocated, is refused and leaves nothing in flight.
    let past = [SendPiece::Bytes(b"x"), SendPiece::Data { buffer: id, start: 4090, len: 7 }];
    assert!(engine.send(10, ours.as_raw_fd(), past, false).is_err());
    assert_eq!(engine.buffer(id).len(), 4096);
    // So is a second piece of a buffer the send already took, past its end.
    let second_past =
        [SendPiece::Data { buffer: id, start: 0, len: 8 }, SendPiece::Data { buffer: id, start: 4090, len: 7 }];
    assert!(engine.send(12, ours.as_raw_fd(), second_past, false).is_err());
    assert_eq!(engine.buffer(id).len(), 4096);
    engine.release(id);
    let freed = [SendPiece::Data { buffer: id, start: 0, len: 1 }];
    assert!(engine.send(11, ours.as_raw_fd(), freed, false).is_err());
}

#[test]
fn a_large_send_goes_zero_copy_and_holds_its_buffer_until_the_notification() {
    let Some(mut engine) = engine() else { return };
    if !engine.zero_copy_supported() {
        eprintln!("skipped: this kernel's io_uring has no IORING_OP_SENDMSG_ZC");
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let id = engine.alloc(64 << 10).unwrap();
    engine.buffer_mut(id).copy_from_slice(&pattern(0, 64 << 10));
    let expected: Vec<u8> = b"hdr".iter().copied().chain(pattern(0, 40_000)).collect();
    // 40,000 bytes of data, over the 32 KiB default: zero copy. Then the buffer's next bytes go in a second send
    // (as the rest of a partly sent buffer would) while the first may still await its notification.
    let pieces = [SendPiece::Bytes(b"hdr"), SendPiece::Data { buffer: id, start: 0, len: 40_000 }];
    engine.send(1, ours.as_raw_fd(), pieces, true).expect("queued");
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.kind, c.result.unwrap(), c.more), (1, NetKind::Send, 40_003, false));
    assert_eq!(engine.net_ops().zero_copy_sends(), 1);
    let small = [SendPiece::Data { buffer: id, start: 40_000, len: 100 }];
    engine.send(2, ours.as_raw_fd(), small, true).expect("a buffer being sent can be sent again");
    let c = next_completion(&mut engine);
    assert_eq!((c.tag, c.result.unwrap()), (2, 100));
    assert_eq!(engine.net_ops().zero_copy_sends(), 1, "100 bytes go as a copy");
    let mut got = vec![0u8; expected.len() + 100];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got[..expected.len()], &expected[..]);
    assert_eq!(&got[expected.len()..], &pattern(40_000, 100)[..]);
    // The notification comes once the kernel has let go of the pages: then the buffer is its owner's again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.buffer(id).is_empty() {
        assert!(Instant::now() < deadline, "no zero-copy notification within 10 s");
        engine.submit().unwrap();
        engine.reap(|c| panic!("unexpected storage completion {}", c.tag));
        let mut done = Vec::new();
        engine.take_net_completions(&mut done);
        assert!(done.is_empty(), "a notification is not a completion for the caller: {done:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((engine.net_ops().in_flight(), engine.net_ops().awaiting_notification()), (0, 0));
    // Not allowed by the caller (a host on loopback), a large send is a copy.
    let pieces = [SendPiece::Data { buffer: id, start: 0, len: 40_000 }];
    engine.send(3, ours.as_raw_fd(), pieces, false).expect("queued");
    assert_eq!(next_completion(&mut engine).result.unwrap(), 40_000);
    assert_eq!(engine.net_ops().zero_copy_sends(), 1);
}

/// The test pattern's bytes `start..start+len`.
fn pattern(start: usize, len: usize) -> Vec<u8> {
    (start..start + len).map(|i| u8::try_from(i % 251).expect("below 251")).collect()
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
