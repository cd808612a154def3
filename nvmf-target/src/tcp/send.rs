//! The send side of one connection: PDUs queued as segments and written with vectored writes.
//!
//! Header bytes (common and PDU-specific header, header digest, padding), data digests and TermReq data
//! are encoded into one byte arena owned by the queue; PDU data is *referenced* from the buffer that holds
//! it (an I/O engine pool buffer) and handed to `writev` in place, so a read's data is never copied in user
//! space. One flush writes as many segments as fit in one `writev` (many PDUs per syscall) and resumes
//! after a partial write. A `Done` marker after a command's last byte tells the connection when the
//! command's buffer may be released: only once every byte that references it has left for the kernel.
//!
//! Runs on the connection's reactor thread; never blocks (a full socket ends the flush with
//! [`Flush::Blocked`]).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use nvmf_common::transport::tcp::pdu::MAX_ENCODED_HEADER_LEN;
use nvmf_common::transport::tcp::{Framing, Pdu, PduLayout};
use nvmf_common::wire::WireError;

/// Most segments handed to one `writev`.
const MAX_IOVECS: usize = 64;
/// Compact the byte arena once this many of its leading bytes are written.
const COMPACT_AT: usize = 64 * 1024;

/// A piece of the outgoing byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment<B, S> {
    /// `len` bytes of the arena at `start`.
    Bytes { start: usize, len: usize },
    /// `len` bytes of data buffer `buffer` at `start`.
    Data { buffer: B, start: usize, len: usize },
    /// Everything before this was written: the command `S` is done with its buffer.
    Done(S),
}

/// A piece of what [`SendQueue::pieces`] hands out for one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a, B> {
    /// Bytes of the arena.
    Bytes(&'a [u8]),
    /// `len` bytes of data buffer `buffer` at `start`.
    Data { buffer: B, start: usize, len: usize },
}

/// The outcome of [`SendQueue::flush`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Everything queued was written.
    Drained,
    /// The socket is full: wait for it to become writable.
    Blocked,
}

/// Outgoing PDUs of one connection (see the module docs). `B` names a data buffer, `S` a command.
#[derive(Debug)]
pub(crate) struct SendQueue<B, S> {
    arena: Vec<u8>,
    segments: VecDeque<Segment<B, S>>,
    /// Bytes of the front segment already written.
    front_written: usize,
    /// Bytes queued and not yet written.
    pending: usize,
    /// Bytes written so far, in all (progress: a peer that reads moves it).
    written: u64,
}

impl<B: Copy, S: Copy> SendQueue<B, S> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        SendQueue {
            arena: Vec::with_capacity(16 * 1024),
            segments: VecDeque::new(),
            front_written: 0,
            pending: 0,
            written: 0,
        }
    }

    /// Bytes waiting to be written.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// Bytes written so far, in all.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Whether anything (bytes or a `Done` marker) is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Encode `pdu`'s header for `data_len` bytes of data with `framing` and queue it.
    pub(crate) fn push_header(
        &mut self,
        pdu: &Pdu,
        data_len: usize,
        framing: &Framing,
    ) -> Result<PduLayout, WireError> {
        let at = self.arena.len();
        self.arena.resize(at + MAX_ENCODED_HEADER_LEN, 0);
        match pdu.encode_header(data_len, framing, &mut self.arena[at..]) {
            Ok(layout) => {
                self.arena.truncate(at + layout.prefix_len());
                self.push_arena_segment(at, layout.prefix_len());
                Ok(layout)
            }
            Err(e) => {
                self.arena.truncate(at);
                Err(e)
            }
        }
    }

    /// Queue a copy of `bytes` (a data digest, TermReq data).
    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        let at = self.arena.len();
        self.arena.extend_from_slice(bytes);
        self.push_arena_segment(at, bytes.len());
    }

    /// Queue `len` bytes of `buffer` at `start`, sent from the buffer itself.
    pub(crate) fn push_data(&mut self, buffer: B, start: usize, len: usize) {
        if len > 0 {
            self.segments.push_back(Segment::Data { buffer, start, len });
            self.pending += len;
        }
    }

    /// Mark the end of command `slot`'s bytes: [`SendQueue::flush`] reports it once they are written.
    pub(crate) fn push_done(&mut self, slot: S) {
        self.segments.push_back(Segment::Done(slot));
    }

    fn push_arena_segment(&mut self, start: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.pending += len;
        // Merge with the previous arena segment when contiguous: one iovec for a run of headers.
        if let Some(Segment::Bytes { start: s, len: l }) = self.segments.back_mut() {
            if *s + *l == start {
                *l += len;
                return;
            }
        }
        self.segments.push_back(Segment::Bytes { start, len });
    }

    /// Write as much as the socket takes. `data` resolves a buffer to its bytes; the commands whose bytes
    /// were all written are appended to `done`, in order.
    pub(crate) fn flush<'a, W: Write>(
        &mut self,
        w: &mut W,
        data: impl Fn(B) -> &'a [u8],
        done: &mut Vec<S>,
    ) -> io::Result<Flush> {
        loop {
            if self.report_done_in_front(done) {
                return Ok(Flush::Drained);
            }
            let written = {
                let mut iov = [IoSlice::new(&[]); MAX_IOVECS];
                let mut n = 0;
                let mut skip = self.front_written;
                for seg in &self.segments {
                    if n == MAX_IOVECS {
                        break;
                    }
                    let bytes = match *seg {
                        Segment::Bytes { start, len } => self.arena.get(start..start + len),
                        Segment::Data { buffer, start, len } => data(buffer).get(start..start + len),
                        Segment::Done(_) => continue,
                    };
                    // A buffer shorter than what was queued is a caller bug; send nothing rather than panic.
                    let bytes = bytes.ok_or_else(|| io::Error::other("queued segment lies outside its buffer"))?;
                    iov[n] = IoSlice::new(&bytes[skip..]);
                    skip = 0;
                    n += 1;
                }
                match w.write_vectored(&iov[..n]) {
                    Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket accepted no bytes")),
                    Ok(written) => written,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            self.advance(written, done);
        }
    }

    /// The queued bytes from the first unwritten one, at most `max` pieces, for a send the caller makes itself
    /// (then [`SendQueue::sent`]). Reports the `Done` markers in front into `done` first.
    pub(crate) fn pieces(&mut self, max: usize, done: &mut Vec<S>) -> impl Iterator<Item = Piece<'_, B>> {
        self.report_done_in_front(done);
        let mut skip = self.front_written;
        let arena = &self.arena;
        self.segments
            .iter()
            .filter_map(move |seg| {
                let piece = match *seg {
                    Segment::Bytes { start, len } => Piece::Bytes(arena.get(start + skip..start + len).unwrap_or(&[])),
                    Segment::Data { buffer, start, len } => {
                        Piece::Data { buffer, start: start + skip, len: len.saturating_sub(skip) }
                    }
                    Segment::Done(_) => return None,
                };
                skip = 0;
                Some(piece)
            })
            .take(max)
    }

    /// `written` bytes of what [`SendQueue::pieces`] handed out left for the kernel: consume them, reporting the
    /// commands whose bytes are now all written (and the markers right after them) into `done`.
    pub(crate) fn sent(&mut self, written: usize, done: &mut Vec<S>) {
        self.advance(written, done);
        self.report_done_in_front(done);
    }

    /// Report the `Done` markers in front into `done`; whether nothing is left queued (the arena is then reset).
    fn report_done_in_front(&mut self, done: &mut Vec<S>) -> bool {
        while let Some(Segment::Done(s)) = self.segments.front() {
            done.push(*s);
            self.segments.pop_front();
        }
        if !self.segments.is_empty() {
            return false;
        }
        self.arena.clear();
        self.front_written = 0;
        true
    }

    /// Consume `written` bytes from the front.
    fn advance(&mut self, mut written: usize, done: &mut Vec<S>) {
        self.pending -= written.min(self.pending);
        self.written += u64::try_from(written).unwrap_or(u64::MAX);
        while let Some(seg) = self.segments.front() {
            let len = match *seg {
                Segment::Bytes { len, .. } | Segment::Data { len, .. } => len,
                Segment::Done(s) => {
                    done.push(s);
                    self.segments.pop_front();
                    continue;
                }
            };
            let left = len - self.front_written;
            if written < left {
                self.front_written += written;
                break;
            }
            written -= left;
            self.front_written = 0;
            self.segments.pop_front();
            if written == 0 {
                // Trailing Done markers are reported by the next loop turn of `flush`.
                break;
            }
        }
        self.compact();
    }

    /// Drop written bytes from the arena when many have piled up in front of the unwritten ones (a host
    /// that reads slowly but steadily would otherwise never let the arena drain).
    fn compact(&mut self) {
        let first = self.segments.iter().find_map(|s| match *s {
            Segment::Bytes { start, .. } => Some(start),
            _ => None,
        });
        let Some(first) = first else {
            self.arena.clear();
            return;
        };
        if first < COMPACT_AT || first < self.arena.len() / 2 {
            return;
        }
        self.arena.drain(..first);
        for s in &mut self.segments {
            if let Segment::Bytes { start, .. } = s {
                *start -= first;
            }
        }
    }

    /// Forget everything queued (the connection is gone) and return the commands whose markers were
    /// still queued, so their buffers can be released.
    pub(crate) fn clear(&mut self, done: &mut Vec<S>) {
        for seg in self.segments.drain(..) {
            if let Segment::Done(s) = seg {
                done.push(s);
            }
        }
        self.arena.clear();
        self.front_written = 0;
        self.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::nvme::cqe::CompletionQueueEntry;
    use nvmf_common::nvme::status::Status;
    use nvmf_common::transport::tcp::{C2hData, CapsuleResponse};

    /// A writer that takes at most `chunk` bytes per call and refuses (WouldBlock) every `block_every`th.
    struct Throttled {
        out: Vec<u8>,
        chunk: usize,
        calls: usize,
        block_every: usize,
        iovecs: Vec<usize>,
    }

    impl Write for Throttled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.block_every > 0 && self.calls.is_multiple_of(self.block_every) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.iovecs.push(bufs.len());
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.chunk - n);
                self.out.extend_from_slice(&b[..take]);
                n += take;
                if n == self.chunk {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn buffers() -> Vec<Vec<u8>> {
        vec![(0..=255u8).cycle().take(5000).collect(), vec![0xAB; 300]]
    }

    /// Queue two reads' worth of PDUs; return the expected byte stream.
    fn fill(q: &mut SendQueue<usize, u16>, bufs: &[Vec<u8>]) -> Vec<u8> {
        let framing = Framing::default();
        let mut expect = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            let cid = u16::try_from(i).unwrap();
            let len = u32::try_from(b.len()).unwrap();
            let p = Pdu::C2hData(C2hData { cccid: cid, datao: 0, datal: len, last_pdu: true, success: false });
            q.push_header(&p, b.len(), &framing).unwrap();
            q.push_data(i, 0, b.len());
            expect.extend(p.to_bytes(b, &framing).unwrap());
            let r = Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) });
            q.push_header(&r, 0, &framing).unwrap();
            q.push_done(cid);
            expect.extend(r.to_bytes(&[], &framing).unwrap());
        }
        expect
    }

    #[test]
    fn one_writev_carries_many_pdus() {
        let bufs = buffers();
        let mut q = SendQueue::new();
        let expect = fill(&mut q, &bufs);
        assert_eq!(q.pending_bytes(), expect.len());
        let mut w = Throttled { out: vec![], chunk: usize::MAX, calls: 0, block_every: 0, iovecs: vec![] };
        let mut done = vec![];
        assert_eq!(q.flush(&mut w, |b| &bufs[b][..], &mut done).unwrap(), Flush::Drained);
        assert_eq!(w.out, expect);
        assert_eq!(done, vec![0, 1]);
        // One writev: C2H header, data, resp, C2H header, data, resp.
        assert_eq!(w.iovecs, vec![6]);
        assert_eq!(q.pending_bytes(), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn partial_writes_resume_and_report_done_in_order() {
        let bufs = buffers();
        for chunk in [1, 7, 24, 100, 4096] {
            let mut q = SendQueue::new();
            let expect = fill(&mut q, &bufs);
            let mut w = Throttled { out: vec![], chunk, calls: 0, block_every: 3, iovecs: vec![] };
            let mut done = vec![];
            let mut turns = 0;
            while q.flush(&mut w, |b| &bufs[b][..], &mut done).unwrap() == Flush::Blocked {
                // A command is reported only once all its bytes are out.
                let first_done_at = 24 + 5000 + 24;
                if w.out.len() < first_done_at {
                    assert!(done.is_empty(), "chunk {chunk}: released early at {}", w.out.len());
                }
                turns += 1;
                assert!(turns < 100_000);
            }
            assert_eq!(w.out, expect, "chunk {chunk}");
            assert_eq!(done, vec![0, 1]);
        }
    }

    /// The io_uring path: `pieces` hands out what a send carries, `sent` consumes what the kernel took; partial
    /// sends resume mid-piece and a command is done only once its last byte went.
    #[test]
    fn pieces_and_sent_resume_partial_sends_and_report_done_in_order() {
        let bufs = buffers();
        for chunk in [1, 7, 24, 100, 4096, 1 << 20] {
            let mut q = SendQueue::new();
            let expect = fill(&mut q, &bufs);
            let (mut out, mut done) = (Vec::new(), Vec::new());
            let mut sends = 0;
            while !q.is_empty() {
                let mut bytes = Vec::new();
                for piece in q.pieces(MAX_IOVECS, &mut done) {
                    match piece {
                        Piece::Bytes(b) => bytes.extend_from_slice(b),
                        Piece::Data { buffer, start, len } => {
                            bytes.extend_from_slice(&bufs[buffer][start..start + len])
                        }
                    }
                }
                // The kernel takes `chunk` bytes of the send.
                let taken = bytes.len().min(chunk);
                out.extend_from_slice(&bytes[..taken]);
                q.sent(taken, &mut done);
                if out.len() < 24 + 5000 + 24 {
                    assert!(done.is_empty(), "chunk {chunk}: released early at {}", out.len());
                }
                sends += 1;
                assert!(sends < 100_000);
            }
            assert_eq!(out, expect, "chunk {chunk}");
            assert_eq!(done, vec![0, 1]);
            assert_eq!(q.pending_bytes(), 0);
        }
    }

    #[test]
    fn arena_is_compacted_under_steady_backlog() {
        let framing = Framing::default();
        let mut q: SendQueue<usize, u16> = SendQueue::new();
        let mut w = Throttled { out: vec![], chunk: 24 * 100, calls: 0, block_every: 2, iovecs: vec![] };
        let mut done = vec![];
        for i in 0..20_000u32 {
            let cid = u16::try_from(i % 1000).unwrap();
            let r = Pdu::CapsuleResponse(CapsuleResponse { cqe: CompletionQueueEntry::new(cid, Status::SUCCESS) });
            q.push_header(&r, 0, &framing).unwrap();
            q.push_done(cid);
            let _ = q.flush(&mut w, |_| &[][..], &mut done).unwrap();
            assert!(q.arena.len() <= 2 * COMPACT_AT + 24 * 200, "arena {}", q.arena.len());
        }
        while q.flush(&mut w, |_| &[][..], &mut done).unwrap() == Flush::Blocked {}
        assert_eq!(w.out.len(), 20_000 * 24);
        assert_eq!(done.len(), 20_000);
        for (i, chunk) in w.out.chunks(24).enumerate() {
            assert_eq!(u16::from_le_bytes([chunk[20], chunk[21]]), u16::try_from(i % 1000).unwrap());
        }
    }

    #[test]
    fn clear_returns_queued_commands() {
        let bufs = buffers();
        let mut q = SendQueue::new();
        fill(&mut q, &bufs);
        let mut done = vec![];
        q.clear(&mut done);
        assert_eq!(done, vec![0, 1]);
        assert!(q.is_empty());
        assert_eq!(q.pending_bytes(), 0);
    }

    #[test]
    fn segment_outside_buffer_is_an_error_not_a_panic() {
        let mut q: SendQueue<usize, u16> = SendQueue::new();
        q.push_data(0, 10, 100);
        let mut w = Throttled { out: vec![], chunk: usize::MAX, calls: 0, block_every: 0, iovecs: vec![] };
        assert!(q.flush(&mut w, |_| &[0u8; 50][..], &mut vec![]).is_err());
    }
}
