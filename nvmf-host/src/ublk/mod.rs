//! [`UblkExport`]: one namespace of a connected [`Controller`] as a Linux block device, `/dev/ublkbN`, through the
//! kernel's ublk_drv (io_uring `URING_CMD`s on `/dev/ublk-control` and `/dev/ublkcN`; `sys`, the only `unsafe`
//! here): one ublk queue per NVMe-oF I/O queue, each block request one NVMe command (a [`BlockOp`] made into its
//! command by [`crate::block`]) sent through the export's [`NamespaceHead`], by one pinned queue thread that owns
//! the ublk queue's io_uring and hosts its paths' I/O queues ([`LinkHost`]), completing in
//! [`CompletionSink`] order. Its shape, threads, why the NVMe queue is lent rather than owned, and the device's
//! lifecycle ([`UblkExport::start`], [`UblkExport::stop`]): `docs/architecture.md`, "The ublk export".

mod sys;

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::block::{nvm_command, BlockOp, MAX_NLB_BLOCKS};
use crate::controller::Controller;
use crate::error::HostError;
use crate::multipath::{caller_tag, IoPolicy, NamespaceHead, PathCursor, PathError};
use crate::queue::handle::{Completed, CompletionSink, LinkHost};
use crate::queue::{DataDirection, Request};
use sys::{io_flag, op, IoDesc, QueueRing};

/// ONCS bit: Dataset Management.
const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit: Write Zeroes.
const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// Largest request when the controller reports no MDTS (and the cap on what it reports).
const MAX_IO_BYTES: u32 = 512 << 10;
/// How long `/dev/ublkcN` may take to appear after ADD_DEV (udev or devtmpfs).
const CDEV_WAIT: Duration = Duration::from_secs(10);

/// Why an export could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum UblkError {
    /// `/dev/ublk-control` is missing.
    #[error("ublk_drv is not loaded (modprobe ublk_drv); use the NBD export (`--nbd`) instead")]
    DriverNotLoaded,
    /// The namespace is not active on the controller.
    #[error("namespace {0} is not active on this controller")]
    UnknownNamespace(u32),
    /// The block size is not one a Linux block device can have (a power of two from 512 to the page size).
    #[error("namespace {nsid}: {block_size}-byte blocks cannot be a ublk device")]
    BlockSize {
        /// The namespace.
        nsid: u32,
        /// Its logical block size.
        block_size: u32,
    },
    /// The association has no I/O queues.
    #[error("the controller has no I/O queues to serve a ublk device with")]
    NoIoQueues,
    /// A ublk_drv command or device operation failed.
    #[error("ublk {what}{}: {source}", dev_id.map(|d| format!(" (device {d})")).unwrap_or_default())]
    Driver {
        /// What was being done.
        what: &'static str,
        /// The device, once added.
        dev_id: Option<u32>,
        /// The error.
        source: io::Error,
    },
    /// The controller failed.
    #[error(transparent)]
    Host(#[from] HostError),
}

/// How to export.
#[derive(Debug, Clone)]
pub struct UblkOptions {
    /// Tags per ublk queue: the NVMe I/O queue size (clamped to 1..=4096).
    pub queue_depth: u16,
}

impl Default for UblkOptions {
    fn default() -> Self {
        UblkOptions { queue_depth: 128 }
    }
}

/// The namespace as the queues see it.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    nsid: u32,
    block_shift: u32,
    blocks: u64,
    max_io_bytes: u32,
}

/// A running ublk device; [`UblkExport::stop`] (or drop) removes it.
#[derive(Debug)]
pub struct UblkExport {
    dev_id: u32,
    control: sys::Control,
    queues: Vec<QueueThread>,
    cdev: Option<Arc<File>>,
    stop: Arc<Stop>,
    removed: bool,
}

/// What the owner tells the queue threads when removing the device.
#[derive(Debug, Default)]
struct Stop {
    /// Leave the ring loop at the next eventfd wake-up.
    requested: AtomicBool,
    /// STOP_DEV succeeded: the driver dispatches nothing more, so tag buffers may be freed.
    device_stopped: AtomicBool,
}

#[derive(Debug)]
struct QueueThread {
    efd: Arc<File>,
    thread: Option<JoinHandle<()>>,
}

fn driver(what: &'static str, dev_id: Option<u32>) -> impl FnOnce(io::Error) -> UblkError {
    move |source| UblkError::Driver { what, dev_id, source }
}

/// Open the control device at `path`, telling a missing driver apart.
fn open_control(path: &Path) -> Result<sys::Control, UblkError> {
    sys::Control::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => UblkError::DriverNotLoaded,
        _ => UblkError::Driver { what: "opening /dev/ublk-control", dev_id: None, source: e },
    })
}

impl UblkExport {
    /// Add `/dev/ublkbN` for namespace `nsid` of `ctrl` (its only path) and serve it until [`UblkExport::stop`].
    pub fn start(ctrl: Arc<Controller>, nsid: u32, options: UblkOptions) -> Result<UblkExport, UblkError> {
        let name = ctrl.addr().to_string();
        let head = NamespaceHead::new(ctrl, &name, nsid, IoPolicy::default()).map_err(|e| match e {
            PathError::UnknownNamespace(n) => UblkError::UnknownNamespace(n),
            e => UblkError::Host(HostError::InvalidRequest(e.to_string())),
        })?;
        Self::start_head(Arc::new(head), options)
    }

    /// Add `/dev/ublkbN` for the namespace of `head` (over its paths) and serve it until [`UblkExport::stop`].
    pub fn start_head(head: Arc<NamespaceHead>, options: UblkOptions) -> Result<UblkExport, UblkError> {
        let nsid = head.nsid();
        let ctrl = head.first_controller().ok_or(UblkError::NoIoQueues)?;
        let (block_size, blocks) = head.geometry();
        let page = 4096;
        if !block_size.is_power_of_two() || !(512..=page).contains(&block_size) {
            return Err(UblkError::BlockSize { nsid, block_size });
        }
        let queues = u16::try_from(ctrl.io_queues().len()).unwrap_or(u16::MAX);
        if queues == 0 {
            return Err(UblkError::NoIoQueues);
        }
        let mut control = open_control(Path::new(sys::CONTROL_PATH))?;
        let info = ctrl.info();
        let block_shift = block_size.trailing_zeros();
        let by_nlb = u32::try_from(MAX_NLB_BLOCKS << block_shift).unwrap_or(u32::MAX);
        let max_io = info.max_transfer.unwrap_or(MAX_IO_BYTES).min(MAX_IO_BYTES).min(by_nlb);
        // Whole pages (the driver rounds down to them), at least one.
        let max_io = (max_io / page * page).max(page);
        let mut dev = sys::DevInfo {
            nr_hw_queues: queues,
            queue_depth: options.queue_depth.clamp(1, sys::MAX_QUEUE_DEPTH),
            max_io_buf_bytes: max_io,
            ..sys::DevInfo::default()
        };
        control.add_dev(&mut dev).map_err(driver("ADD_DEV", None))?;
        let dev_id = dev.dev_id;
        tracing::info!(dev_id, queues = dev.nr_hw_queues, depth = dev.queue_depth, max_io, "ublk device added");
        let mut export = UblkExport {
            dev_id,
            control,
            queues: Vec::new(),
            cdev: None,
            stop: Arc::new(Stop::default()),
            removed: false,
        };
        // From here on dropping `export` deletes the device.
        let geometry = Geometry { nsid, block_shift, blocks, max_io_bytes: dev.max_io_buf_bytes.min(max_io) };
        export
            .control
            .set_params(dev_id, &params(&geometry, info.vwc, info.oncs))
            .map_err(driver("SET_PARAMS", Some(dev_id)))?;
        let cdev = Arc::new(open_cdev(dev_id)?);
        export.cdev = Some(Arc::clone(&cdev));
        let (ready_tx, ready_rx) = sync_channel(usize::from(dev.nr_hw_queues));
        for q_id in 0..dev.nr_hw_queues {
            let efd = Arc::new(sys::eventfd().map_err(driver("creating an eventfd", Some(dev_id)))?);
            let queue = Queue {
                q_id,
                depth: dev.queue_depth,
                geometry,
                // max(requested, granted): a buffer is never smaller than a request the driver can send.
                buf_bytes: usize::try_from(dev.max_io_buf_bytes.max(max_io)).unwrap_or(usize::MAX),
                head: Arc::clone(&head),
                cdev: Arc::clone(&cdev),
                efd: Arc::clone(&efd),
                stop: Arc::clone(&export.stop),
                cpu: ctrl.options().queue_cpu(q_id + 1),
            };
            let ready = ready_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("ublk{dev_id}q{q_id}"))
                .spawn(move || queue.run(&ready))
                .map_err(driver("spawning a queue thread", Some(dev_id)))?;
            export.queues.push(QueueThread { efd, thread: Some(thread) });
        }
        drop(ready_tx);
        for _ in 0..dev.nr_hw_queues {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(driver("starting a queue", Some(dev_id))(e)),
                Err(_) => {
                    return Err(driver("starting a queue", Some(dev_id))(io::Error::other("queue thread exited")))
                }
            }
        }
        export.control.start_dev(dev_id).map_err(driver("START_DEV", Some(dev_id)))?;
        tracing::info!(dev_id, nsid, path = %export.path().display(), "ublk device started");
        Ok(export)
    }

    /// The block device, `/dev/ublkbN`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/ublkb{}", self.dev_id))
    }

    /// The ublk device id (`N`).
    pub fn dev_id(&self) -> u32 {
        self.dev_id
    }

    /// Remove the device: STOP_DEV (outstanding I/O completes first), stop the queues, DEL_DEV.
    pub fn stop(mut self) -> Result<(), UblkError> {
        self.remove()
    }

    fn remove(&mut self) -> Result<(), UblkError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let dev_id = self.dev_id;
        // Only a started device can be stopped; STOP_DEV of one that never started fails harmlessly.
        let stopped = self.control.stop_dev(dev_id);
        self.stop.device_stopped.store(stopped.is_ok(), Ordering::Release);
        self.stop.requested.store(true, Ordering::Release);
        for q in &self.queues {
            let _ = sys::signal(&q.efd);
        }
        for q in &mut self.queues {
            if let Some(t) = q.thread.take() {
                let _ = t.join();
            }
        }
        self.cdev = None;
        let deleted = self.control.del_dev(dev_id).map_err(driver("DEL_DEV", Some(dev_id)));
        tracing::info!(dev_id, "ublk device deleted");
        stopped.map_err(driver("STOP_DEV", Some(dev_id)))?;
        deleted
    }
}

impl Drop for UblkExport {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::warn!(error = %e, "removing the ublk device");
        }
    }
}

/// The device parameters for a namespace.
fn params(g: &Geometry, vwc: bool, oncs: u16) -> sys::Params {
    let shift = u8::try_from(g.block_shift).unwrap_or(9);
    let sectors_per_block = 1u32 << (g.block_shift - 9);
    let attrs = if vwc { sys::attr::VOLATILE_CACHE | sys::attr::FUA } else { 0 };
    let dsm = oncs & ONCS_DSM != 0;
    let wz = oncs & ONCS_WRITE_ZEROES != 0;
    sys::Params {
        types: sys::param_type::BASIC | sys::param_type::DISCARD,
        basic: sys::ParamBasic {
            attrs,
            logical_bs_shift: shift,
            physical_bs_shift: shift,
            io_opt_shift: shift,
            io_min_shift: shift,
            max_sectors: g.max_io_bytes >> 9,
            dev_sectors: g.blocks << (g.block_shift - 9),
            ..sys::ParamBasic::default()
        },
        discard: sys::ParamDiscard {
            discard_granularity: 1 << g.block_shift,
            // One Dataset Management range: at most u32::MAX blocks, in whole blocks.
            max_discard_sectors: if dsm { u32::MAX / sectors_per_block * sectors_per_block } else { 0 },
            max_write_zeroes_sectors: if wz {
                u32::try_from(MAX_NLB_BLOCKS).unwrap_or(u32::MAX) * sectors_per_block
            } else {
                0
            },
            max_discard_segments: 1,
            ..sys::ParamDiscard::default()
        },
        ..sys::Params::default()
    }
}

/// Wait (bounded) for `/dev/ublkcN` and open it.
fn open_cdev(dev_id: u32) -> Result<File, UblkError> {
    let path = format!("/dev/ublkc{dev_id}");
    let deadline = Instant::now() + CDEV_WAIT;
    loop {
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(driver("opening the char device", Some(dev_id))(e)),
        }
    }
}

/// Decode a request into what it asks of the namespace, or the negative errno to complete it with.
fn decode(d: &IoDesc, g: &Geometry) -> Result<BlockOp, i32> {
    let opcode = d.op();
    if opcode == op::FLUSH {
        return Ok(BlockOp::Flush);
    }
    let sector_shift = g.block_shift - 9;
    let unaligned = |s: u64| s & ((1 << sector_shift) - 1) != 0;
    let (start, count) = (d.start_sector, u64::from(d.nr_sectors));
    if unaligned(start) || unaligned(count) || count == 0 {
        return Err(-libc::EINVAL);
    }
    let (slba, blocks) = (start >> sector_shift, count >> sector_shift);
    if slba.checked_add(blocks).is_none_or(|end| end > g.blocks) {
        return Err(-libc::EIO);
    }
    let fua = d.op_flags & io_flag::FUA != 0;
    let bytes = count << 9;
    match opcode {
        op::READ | op::WRITE if bytes > u64::from(g.max_io_bytes) || blocks > MAX_NLB_BLOCKS => Err(-libc::EINVAL),
        op::READ => Ok(BlockOp::Read { slba, blocks }),
        op::WRITE => Ok(BlockOp::Write { slba, blocks, fua }),
        op::DISCARD if blocks <= u64::from(u32::MAX) => Ok(BlockOp::Deallocate { slba, blocks, fua }),
        op::WRITE_ZEROES if blocks <= MAX_NLB_BLOCKS => {
            Ok(BlockOp::WriteZeroes { slba, blocks, fua, deallocate: d.op_flags & io_flag::NOUNMAP == 0 })
        }
        op::DISCARD | op::WRITE_ZEROES => Err(-libc::EINVAL),
        _ => Err(-libc::EOPNOTSUPP),
    }
}

/// One ublk queue's state, moved into its thread.
struct Queue {
    q_id: u16,
    depth: u16,
    geometry: Geometry,
    buf_bytes: usize,
    head: Arc<NamespaceHead>,
    cdev: Arc<File>,
    efd: Arc<File>,
    stop: Arc<Stop>,
    /// Where I/O queue `q_id + 1`'s thread runs: this thread joins it, so a command's hop between the two stays
    /// on one CPU.
    cpu: Option<usize>,
}

/// A queue's [`CompletionSink`]: finished commands wait in a channel, and the eventfd the ring reads wakes
/// the queue thread.
#[derive(Debug)]
struct Sink {
    finished: Sender<Completed>,
    efd: Arc<File>,
    /// The queue thread.
    owner: std::thread::ThreadId,
}

impl CompletionSink for Sink {
    fn push(&self, completed: Completed) {
        // The queue thread has stopped serving: the device is going away and nothing waits for the tag.
        let _ = self.finished.send(completed);
    }

    fn wake(&self) {
        // The queue thread itself (driving a link it hosts) takes what it pushed before it waits.
        if std::thread::current().id() != self.owner {
            let _ = sys::signal(&self.efd);
        }
    }
}

/// What the queue thread remembers of a tag's request while its command is out.
#[derive(Debug, Clone, Copy, Default)]
struct TagState {
    /// Bytes to report on success (reads and writes), 0 otherwise.
    bytes: i32,
    /// A read: the data goes back to the driver in the buffer.
    read: bool,
}

impl Queue {
    fn run(self, ready: &std::sync::mpsc::SyncSender<io::Result<()>>) {
        nvmf_service::cpus::place_current_thread(self.cpu);
        let setup = || -> io::Result<(sys::IoDescs, QueueRing)> {
            let descs = sys::IoDescs::map(&self.cdev, self.q_id, self.depth)?;
            let mut ring = QueueRing::new(&self.cdev, self.q_id, self.depth, self.buf_bytes, &self.efd)?;
            for tag in 0..self.depth {
                ring.fetch(tag)?;
            }
            ring.arm_event()?;
            // The fetches must reach the driver before START_DEV waits for them.
            ring.submit()?;
            Ok((descs, ring))
        };
        let (descs, mut ring) = match setup() {
            Ok(r) => r,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let (finished, finished_rx) = channel();
        let sink: Arc<dyn CompletionSink> =
            Arc::new(Sink { finished, efd: Arc::clone(&self.efd), owner: std::thread::current().id() });
        if let Err(e) = self.serve(&descs, &mut ring, &sink, &finished_rx) {
            tracing::error!(q_id = self.q_id, error = %e, "ublk queue failed");
        }
        ring.device_stopped = self.stop.device_stopped.load(Ordering::Acquire);
    }

    /// The ring loop: until the device is stopped or every tag was aborted.
    fn serve(
        &self,
        descs: &sys::IoDescs,
        ring: &mut QueueRing,
        sink: &Arc<dyn CompletionSink>,
        finished: &Receiver<Completed>,
    ) -> io::Result<()> {
        let q = usize::from(self.q_id);
        let mut cqes = Vec::with_capacity(usize::from(self.depth) + 1);
        let mut tags = vec![TagState::default(); usize::from(self.depth)];
        let mut paths = PathCursor::new(q);
        let host = LinkHost::new(Arc::clone(sink));
        // Hosted links whose poller descriptor the ring polls, and those hosted now.
        let (mut polled, mut hosted) = (Vec::new(), Vec::new());
        let mut aborted = 0;
        // A hosted link had work when asked to get ready for the wait: the ring is only looked at.
        let mut busy = false;
        loop {
            self.head.host_queues(q, &mut paths, &host);
            ring.submit_and_wait(if busy { Some(Duration::ZERO) } else { host.wait_bound() })?;
            ring.completions(&mut cqes);
            for (user_data, result) in cqes.drain(..) {
                match user_data {
                    sys::EVENT => {
                        while let Ok(c) = finished.try_recv() {
                            self.finish(c, &tags, ring, &mut paths)?;
                        }
                        if self.stop.requested.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        ring.arm_event()?;
                        continue;
                    }
                    sys::POLL_REMOVED => continue,
                    d if d & sys::POLL != 0 => {
                        polled.retain(|&id| id != d & !sys::POLL);
                        continue;
                    }
                    _ => {}
                }
                let tag = u16::try_from(user_data).unwrap_or(u16::MAX);
                match result {
                    sys::IO_RES_OK => self.handle(tag, descs.get(tag), ring, sink, &mut tags, &mut paths)?,
                    sys::IO_RES_ABORT => {
                        aborted += 1;
                        if aborted == self.depth {
                            return Ok(());
                        }
                    }
                    e => tracing::warn!(q_id = self.q_id, tag, result = e, "ublk fetch/commit failed"),
                }
            }
            // Send what was queued (hosted links take it in their turn), commit what finished, and again while
            // committing sent commands again (after a reconnect or a path's failure).
            loop {
                paths.wake(q);
                host.turn();
                while let Ok(c) = finished.try_recv() {
                    self.finish(c, &tags, ring, &mut paths)?;
                }
                if !paths.noted() {
                    break;
                }
            }
            busy = !host.prepare_wait();
            hosted.clear();
            let mut armed = Ok(());
            host.for_each_wait(|id, fd| {
                hosted.push(id);
                if armed.is_ok() && !polled.contains(&id) {
                    armed = ring.poll(fd, id);
                    polled.push(id);
                }
            });
            armed?;
            for &id in polled.iter().filter(|id| !hosted.contains(id)) {
                ring.cancel_poll(id)?;
            }
            polled.retain(|id| hosted.contains(id));
        }
    }

    /// Queue one request's NVMe command on a path (noted in `paths`, which the caller wakes), or complete it
    /// now with an error.
    fn handle(
        &self,
        tag: u16,
        d: IoDesc,
        ring: &mut QueueRing,
        sink: &Arc<dyn CompletionSink>,
        tags: &mut [TagState],
        paths: &mut PathCursor,
    ) -> io::Result<()> {
        let g = &self.geometry;
        let op = match decode(&d, g) {
            Ok(op) => op,
            Err(errno) => {
                tracing::warn!(q_id = self.q_id, tag, ?d, errno, "ublk request refused");
                return ring.commit(tag, errno, None);
            }
        };
        let (sqe, direction, range) = nvm_command(g.nsid, &op);
        let bytes = usize::try_from(u64::from(d.nr_sectors) << 9).unwrap_or(0);
        let (data, read) = match (&op, range) {
            (BlockOp::Write { .. }, _) => (ring.take_buffer(tag, Some(bytes)), false),
            (BlockOp::Read { .. }, _) => {
                let mut b = ring.take_buffer(tag, None);
                b.resize(bytes, 0);
                (b, true)
            }
            (_, Some(r)) => {
                let mut b = ring.take_buffer(tag, None);
                b.clear();
                b.extend_from_slice(&r.to_bytes());
                (b, false)
            }
            _ => (Vec::new(), false),
        };
        let bytes = if direction == DataDirection::None || range.is_some() { 0 } else { bytes };
        tags[usize::from(tag)] = TagState { bytes: i32::try_from(bytes).unwrap_or(i32::MAX), read };
        let request = Request { sqe, data, direction, context: () };
        match self.head.queue_to_sink(usize::from(self.q_id), request, sink, u64::from(tag), paths) {
            Ok(()) => Ok(()),
            Err((e, data)) => {
                tracing::warn!(q_id = self.q_id, tag, error = %e, "ublk request: submission failed");
                ring.commit(tag, -libc::EIO, (data.capacity() > 0).then_some(data))
            }
        }
    }

    /// Commit a finished command's request (unless it went again to a path: after a reconnect, or to another
    /// path after a failure on its own).
    fn finish(&self, c: Completed, tags: &[TagState], ring: &mut QueueRing, paths: &mut PathCursor) -> io::Result<()> {
        let Some(tag) = u16::try_from(caller_tag(c.tag())).ok().filter(|&t| t < self.depth) else {
            tracing::error!(q_id = self.q_id, tag = c.tag(), "ublk: a completion for no tag");
            return Ok(());
        };
        let Some(reply) = self.head.settle(usize::from(self.q_id), c, paths) else { return Ok(()) };
        let state = tags[usize::from(tag)];
        let result = match &reply.result {
            Ok(cqe) if cqe.status.is_success() => state.bytes,
            Ok(cqe) => {
                tracing::warn!(q_id = self.q_id, tag, status = %cqe.status, "ublk request: NVMe error");
                -libc::EIO
            }
            Err(e) => {
                tracing::warn!(q_id = self.q_id, tag, error = %e, "ublk request: queue failed");
                -libc::EIO
            }
        };
        // Reads give the data back to the driver in this buffer; otherwise it returns to the tag.
        ring.commit(tag, result, (state.read || reply.data.capacity() > 0).then_some(reply.data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry { nsid: 1, block_shift: 12, blocks: 1024, max_io_bytes: 128 << 10 };

    fn desc(op: u8, flags: u32, start_sector: u64, nr_sectors: u32) -> IoDesc {
        IoDesc { op_flags: u32::from(op) | flags, nr_sectors, start_sector, addr: 0 }
    }

    #[test]
    fn decodes_each_operation_in_blocks() {
        assert_eq!(decode(&desc(op::READ, 0, 8, 16), &G), Ok(BlockOp::Read { slba: 1, blocks: 2 }));
        assert_eq!(
            decode(&desc(op::WRITE, io_flag::FUA, 0, 8), &G),
            Ok(BlockOp::Write { slba: 0, blocks: 1, fua: true })
        );
        assert_eq!(decode(&desc(op::FLUSH, 0, 0, 0), &G), Ok(BlockOp::Flush));
        assert_eq!(
            decode(&desc(op::DISCARD, 0, 8 * 1000, 8 * 24), &G),
            Ok(BlockOp::Deallocate { slba: 1000, blocks: 24, fua: false })
        );
        assert_eq!(
            decode(&desc(op::WRITE_ZEROES, io_flag::NOUNMAP, 0, 8 * 4), &G),
            Ok(BlockOp::WriteZeroes { slba: 0, blocks: 4, fua: false, deallocate: false })
        );
    }

    #[test]
    fn refuses_what_the_namespace_cannot_take() {
        // Not whole 4 KiB blocks.
        assert_eq!(decode(&desc(op::READ, 0, 1, 8), &G), Err(-libc::EINVAL));
        assert_eq!(decode(&desc(op::WRITE, 0, 0, 4), &G), Err(-libc::EINVAL));
        assert_eq!(decode(&desc(op::READ, 0, 0, 0), &G), Err(-libc::EINVAL));
        // Past the end, and wrapping around.
        assert_eq!(decode(&desc(op::READ, 0, 8 * 1023, 16), &G), Err(-libc::EIO));
        assert_eq!(decode(&desc(op::WRITE, 0, !7, 8), &G), Err(-libc::EIO));
        // Larger than the advertised maximum.
        assert_eq!(decode(&desc(op::READ, 0, 0, (256 << 10) >> 9), &G), Err(-libc::EINVAL));
        // Operations not offered.
        assert_eq!(decode(&desc(4, 0, 0, 8), &G), Err(-libc::EOPNOTSUPP));
        assert_eq!(decode(&desc(34, 0, 0, 8), &G), Err(-libc::EOPNOTSUPP));
    }

    #[test]
    fn params_describe_the_namespace() {
        let p = params(&G, true, ONCS_DSM);
        assert_eq!(p.basic.logical_bs_shift, 12);
        assert_eq!(p.basic.dev_sectors, 1024 * 8);
        assert_eq!(p.basic.max_sectors, 256);
        assert_eq!(p.basic.attrs, sys::attr::VOLATILE_CACHE | sys::attr::FUA);
        assert_eq!(p.discard.discard_granularity, 4096);
        assert_eq!(p.discard.max_discard_sectors % 8, 0);
        assert_eq!(p.discard.max_write_zeroes_sectors, 0);
        assert_eq!(params(&G, false, ONCS_WRITE_ZEROES).discard.max_write_zeroes_sectors, 65536 * 8);
        assert_eq!(params(&G, false, 0).basic.attrs, 0);
    }

    #[test]
    fn a_missing_control_device_says_the_driver_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let err = open_control(&dir.path().join("ublk-control")).unwrap_err();
        assert!(matches!(err, UblkError::DriverNotLoaded));
        assert_eq!(err.to_string(), "ublk_drv is not loaded (modprobe ublk_drv); use the NBD export (`--nbd`) instead");
    }
}
