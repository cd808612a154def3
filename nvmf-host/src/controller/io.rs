//! The I/O API of a [`Controller`]: blocking calls on the caller's thread (`read`, `write`, `flush`,
//! `write_zeroes`, `deallocate`, their vectored forms, and [`Controller::submit_io`] with owned buffers) and their
//! async twins for any executor. Transfers are split at MDTS, every piece submitted at once (round-robin over the
//! I/O queues) and all of them waited for, each wait bounded by the I/O timeout (awaited ones by the queue's
//! command timeout); while the controller reconnects they are held (see the parent module). Scatter-gather lists
//! are copied into and out of the queues' owned buffers, one per command.

use std::io::{IoSlice, IoSliceMut};
use std::sync::atomic::Ordering;

use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes, DSM_MAX_RANGES};

use super::association::{check, finish};
use super::Controller;
use crate::error::HostError;
use crate::queue::handle::{Pending, QueueHandle, Reply};
use crate::queue::{DataDirection, Request};

impl Controller {
    /// The next I/O queue, round-robin.
    fn io_queue(&self) -> Result<&QueueHandle, HostError> {
        let io = &self.inner.io;
        if io.is_empty() {
            return Err(HostError::InvalidRequest("the association has no I/O queues".into()));
        }
        Ok(&io[self.next_io.fetch_add(1, Ordering::Relaxed) % io.len()])
    }

    /// Submit an I/O command on the next I/O queue (owned buffer, no copy); wait on the returned [`Pending`].
    /// While the controller reconnects this blocks until the new association is up (or fails with
    /// [`HostError::FastIoFail`] / [`HostError::ControllerLost`]), and a command the lost connection had
    /// in flight is resubmitted by [`Pending::wait`] with the same buffer.
    pub fn submit_io(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.io_queue()?.submit(request)
    }

    /// [`Controller::submit_io`] for async callers: never blocks while the controller reconnects (the
    /// [`Pending`] holds the command, and `.await`ing it waits for the new association), only briefly while
    /// the queue's request channel is full. Awaiting a [`Pending`] has no timeout of its own: the queue's
    /// command timeout fails a command the controller never answers.
    pub fn submit_io_async(&self, request: Request<()>) -> Result<Pending, HostError> {
        self.io_queue()?.submit_async(request)
    }

    /// Blocks per command: MDTS and the 16-bit NLB, whichever is smaller.
    fn max_blocks(&self, block_size: u32) -> usize {
        let by_mdts =
            self.info.max_transfer.map_or(usize::MAX, |m| usize::try_from(m / block_size.max(1)).unwrap_or(1));
        by_mdts.clamp(1, 65536)
    }

    /// The bytes of one command (MDTS) on namespace `nsid` for a transfer of `len` bytes at `slba`, and the
    /// block size, once the transfer is checked to be whole blocks inside the namespace.
    fn transfer(&self, nsid: u32, slba: u64, len: usize) -> Result<(usize, usize), HostError> {
        let ns = self.namespace(nsid)?;
        let bs = usize::try_from(ns.block_size).unwrap_or(usize::MAX);
        if len == 0 || len % bs != 0 {
            return Err(HostError::InvalidRequest(format!("{len} bytes is not a whole number of {bs}-byte blocks")));
        }
        let blocks = (len / bs) as u64;
        if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return Err(HostError::InvalidRequest(format!(
                "LBAs {slba}+{blocks} beyond namespace {} ({} blocks)",
                ns.nsid, ns.blocks
            )));
        }
        Ok((self.max_blocks(ns.block_size) * bs, bs))
    }

    /// The Reads of `len` bytes from `slba`, one per `chunk` bytes, each with its own buffer.
    fn read_requests(&self, nsid: u32, slba: u64, len: usize) -> Result<Vec<Request<()>>, HostError> {
        let (chunk, bs) = self.transfer(nsid, slba, len)?;
        let requests = (0..len).step_by(chunk).map(|at| {
            let n = chunk.min(len - at);
            let nlb = u16::try_from(n / bs - 1).unwrap_or(u16::MAX);
            let sqe = Read { nsid, slba: slba + (at / bs) as u64, nlb, ..Read::default() }.to_sqe();
            Request { sqe, data: vec![0; n], direction: DataDirection::ControllerToHost, context: () }
        });
        Ok(requests.collect())
    }

    /// The Writes of the bytes of `bufs` (gathered) at `slba`, one per `chunk` bytes.
    fn write_requests(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<Vec<Request<()>>, HostError> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let (chunk, bs) = self.transfer(nsid, slba, len)?;
        let requests = gather(bufs, chunk).into_iter().scan(slba, |at, data| {
            let blocks = data.len() / bs;
            let nlb = u16::try_from(blocks - 1).unwrap_or(u16::MAX);
            let sqe = Write { nsid, slba: *at, nlb, ..Write::default() }.to_sqe();
            *at += blocks as u64;
            Some(Request { sqe, data, direction: DataDirection::HostToController, context: () })
        });
        Ok(requests.collect())
    }

    /// The Flush of namespace `nsid`.
    fn flush_requests(nsid: u32) -> Vec<Request<()>> {
        let sqe = Flush { nsid }.to_sqe();
        vec![Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () }]
    }

    /// The Write Zeroes over `blocks` blocks from `slba`, at most 65536 blocks each.
    fn write_zeroes_requests(&self, nsid: u32, slba: u64, blocks: u64) -> Result<Vec<Request<()>>, HostError> {
        let ns = self.namespace(nsid)?;
        if blocks == 0 || slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return Err(HostError::InvalidRequest(format!("Write Zeroes of LBAs {slba}+{blocks} on namespace {nsid}")));
        }
        let requests = (slba..slba + blocks).step_by(65536).map(|at| {
            let nlb = u16::try_from((slba + blocks - at).min(65536) - 1).unwrap_or(u16::MAX);
            let sqe = WriteZeroes { nsid, slba: at, nlb, ..WriteZeroes::default() }.to_sqe();
            Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () }
        });
        Ok(requests.collect())
    }

    /// The Dataset Management (AD) commands deallocating the `(slba, blocks)` ranges, 256 ranges each.
    fn deallocate_requests(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<Vec<Request<()>>, HostError> {
        self.namespace(nsid)?;
        let requests = ranges.chunks(DSM_MAX_RANGES).map(|group| {
            let nr = u8::try_from(group.len() - 1).unwrap_or(u8::MAX);
            let sqe = DatasetManagement { nsid, nr, ad: true, ..DatasetManagement::default() }.to_sqe();
            let data =
                group.iter().flat_map(|&(slba, length)| DsmRange { cattr: 0, length, slba }.to_bytes()).collect();
            Request { sqe, data, direction: DataDirection::HostToController, context: () }
        });
        Ok(requests.collect())
    }

    /// Submit every request at once (round-robin over the I/O queues) and wait for all, each wait bounded by
    /// the I/O timeout: the replies in order, or the first error.
    fn run_io(&self, command: &'static str, requests: Vec<Request<()>>) -> Result<Vec<Reply>, HostError> {
        let pending = requests.into_iter().map(|r| self.submit_io(r)).collect::<Result<Vec<_>, _>>()?;
        let t = self.inner.options.io_timeout;
        all_replies(pending.into_iter().map(|p| finish(command, p, t)))
    }

    /// [`Controller::run_io`] for async callers ([`Controller::submit_io_async`]).
    async fn run_io_async(&self, command: &'static str, requests: Vec<Request<()>>) -> Result<Vec<Reply>, HostError> {
        let pending = requests.into_iter().map(|r| self.submit_io_async(r)).collect::<Result<Vec<_>, _>>()?;
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            results.push(p.await.and_then(|reply| check(command, reply)));
        }
        all_replies(results.into_iter())
    }

    /// Read `buf.len()` bytes (whole blocks) from `slba` of namespace `nsid`.
    pub fn read(&self, nsid: u32, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.read_vectored(nsid, slba, &mut [IoSliceMut::new(buf)])
    }

    /// Read into the buffers of `bufs` in turn (scatter; their lengths add up to whole blocks) from `slba`.
    pub fn read_vectored(&self, nsid: u32, slba: u64, bufs: &mut [IoSliceMut<'_>]) -> Result<(), HostError> {
        let requests = self.read_requests(nsid, slba, bufs.iter().map(|b| b.len()).sum())?;
        scatter(self.run_io("Read", requests)?, bufs);
        Ok(())
    }

    /// [`Controller::read_vectored`], async: never blocks while the controller reconnects (see
    /// [`Controller::submit_io_async`]).
    pub async fn read_async(&self, nsid: u32, slba: u64, bufs: &mut [IoSliceMut<'_>]) -> Result<(), HostError> {
        let requests = self.read_requests(nsid, slba, bufs.iter().map(|b| b.len()).sum())?;
        scatter(self.run_io_async("Read", requests).await?, bufs);
        Ok(())
    }

    /// Write `data` (whole blocks) at `slba` of namespace `nsid`.
    pub fn write(&self, nsid: u32, slba: u64, data: &[u8]) -> Result<(), HostError> {
        self.write_vectored(nsid, slba, &[IoSlice::new(data)])
    }

    /// Write the buffers of `bufs` one after the other (gather; their lengths add up to whole blocks) at `slba`.
    pub fn write_vectored(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<(), HostError> {
        self.run_io("Write", self.write_requests(nsid, slba, bufs)?).map(|_| ())
    }

    /// [`Controller::write_vectored`], async.
    pub async fn write_async(&self, nsid: u32, slba: u64, bufs: &[IoSlice<'_>]) -> Result<(), HostError> {
        self.run_io_async("Write", self.write_requests(nsid, slba, bufs)?).await.map(|_| ())
    }

    /// Flush namespace `nsid`'s volatile write cache.
    pub fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.run_io("Flush", Self::flush_requests(nsid)).map(|_| ())
    }

    /// [`Controller::flush`], async.
    pub async fn flush_async(&self, nsid: u32) -> Result<(), HostError> {
        self.run_io_async("Flush", Self::flush_requests(nsid)).await.map(|_| ())
    }

    /// Write Zeroes over `blocks` blocks from `slba` (split into commands of at most 65536 blocks).
    pub fn write_zeroes(&self, nsid: u32, slba: u64, blocks: u64) -> Result<(), HostError> {
        self.run_io("Write Zeroes", self.write_zeroes_requests(nsid, slba, blocks)?).map(|_| ())
    }

    /// [`Controller::write_zeroes`], async.
    pub async fn write_zeroes_async(&self, nsid: u32, slba: u64, blocks: u64) -> Result<(), HostError> {
        self.run_io_async("Write Zeroes", self.write_zeroes_requests(nsid, slba, blocks)?).await.map(|_| ())
    }

    /// Deallocate (Dataset Management, AD) the `(slba, blocks)` ranges; up to 256 ranges per command.
    pub fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.run_io("Dataset Management", self.deallocate_requests(nsid, ranges)?).map(|_| ())
    }

    /// [`Controller::deallocate`], async.
    pub async fn deallocate_async(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.run_io_async("Dataset Management", self.deallocate_requests(nsid, ranges)?).await.map(|_| ())
    }
}

/// The replies of a transfer's commands in order, or the first error (every command is waited for either way).
fn all_replies(results: impl Iterator<Item = Result<Reply, HostError>>) -> Result<Vec<Reply>, HostError> {
    let mut replies = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(r) => replies.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(replies), Err)
}

/// The bytes of `bufs` one after the other, cut into buffers of `chunk` bytes (the last may be shorter).
fn gather(bufs: &[IoSlice<'_>], chunk: usize) -> Vec<Vec<u8>> {
    let len: usize = bufs.iter().map(|b| b.len()).sum();
    let mut pieces = Vec::with_capacity(len.div_ceil(chunk));
    let mut piece = Vec::with_capacity(chunk.min(len));
    for buf in bufs {
        let mut src: &[u8] = buf;
        while !src.is_empty() {
            let n = (chunk - piece.len()).min(src.len());
            piece.extend_from_slice(&src[..n]);
            src = &src[n..];
            if piece.len() == chunk {
                let rest = len - (pieces.len() + 1) * chunk;
                pieces.push(std::mem::replace(&mut piece, Vec::with_capacity(chunk.min(rest))));
            }
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// Copy the replies' data into `bufs`, one after the other.
fn scatter(replies: Vec<Reply>, bufs: &mut [IoSliceMut<'_>]) {
    let mut dst = bufs.iter_mut().map(|b| &mut **b);
    let mut to: &mut [u8] = &mut [];
    for reply in replies {
        let mut src = &reply.data[..];
        while !src.is_empty() {
            if to.is_empty() {
                let Some(next) = dst.next() else { return };
                to = next;
                continue;
            }
            let n = to.len().min(src.len());
            to[..n].copy_from_slice(&src[..n]);
            to = &mut std::mem::take(&mut to)[n..];
            src = &src[n..];
        }
    }
}
