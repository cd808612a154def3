//! The ublk_drv user ABI (`include/uapi/linux/ublk_cmd.h`) and the only `unsafe` of the ublk export: control
//! commands on `/dev/ublk-control`, the per-queue I/O descriptor mapping of `/dev/ublkcN`, and the
//! FETCH_REQ / COMMIT_AND_FETCH_REQ commands whose buffers the kernel writes into asynchronously.
//!
//! Every `#[repr(C)]` struct handed to the kernel is checked at compile time against the header's layout (size and
//! field offsets); the two command structs (`ublksrv_ctrl_cmd`, `ublksrv_io_cmd`) are serialised byte by byte
//! into the SQE's command area instead (`ctrl_cmd`, `io_cmd`).
//!
//! Threads: a [`Control`] belongs to the thread that adds, starts, stops and deletes the device (START_DEV
//! blocks it until every queue has fetched); a [`QueueRing`] belongs to its queue's thread, which the driver
//! records as the queue's daemon (every command of a queue must come from that thread).

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Where the driver's control device lives.
pub const CONTROL_PATH: &str = "/dev/ublk-control";

/// `_IOWR('u', nr, size)`: the ioctl-style command encoding (`UBLK_F_CMD_IOCTL_ENCODE`).
const fn iowr(nr: u32, size: u32) -> u32 {
    (3 << 30) | (size << 16) | ((b'u' as u32) << 8) | nr
}

const CTRL_CMD_SIZE: u32 = 32;
const IO_CMD_SIZE: u32 = 16;
const CMD_ADD_DEV: u32 = iowr(0x04, CTRL_CMD_SIZE);
const CMD_DEL_DEV: u32 = iowr(0x05, CTRL_CMD_SIZE);
const CMD_START_DEV: u32 = iowr(0x06, CTRL_CMD_SIZE);
const CMD_STOP_DEV: u32 = iowr(0x07, CTRL_CMD_SIZE);
const CMD_SET_PARAMS: u32 = iowr(0x08, CTRL_CMD_SIZE);
const IO_FETCH_REQ: u32 = iowr(0x20, IO_CMD_SIZE);
const IO_COMMIT_AND_FETCH_REQ: u32 = iowr(0x21, IO_CMD_SIZE);

/// `UBLK_F_CMD_IOCTL_ENCODE`.
const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;
/// `UBLK_MAX_QUEUE_DEPTH`: the per-queue descriptor area is sized for it.
pub const MAX_QUEUE_DEPTH: u16 = 4096;

/// A fetched request is ready (`UBLK_IO_RES_OK`).
pub const IO_RES_OK: i32 = 0;
/// The queue is going away: no request for this tag (`UBLK_IO_RES_ABORT`).
pub const IO_RES_ABORT: i32 = -libc::ENODEV;

/// `UBLK_IO_OP_*` (low 8 bits of [`IoDesc::op_flags`]).
pub mod op {
    /// Read.
    pub const READ: u8 = 0;
    /// Write.
    pub const WRITE: u8 = 1;
    /// Flush the volatile cache.
    pub const FLUSH: u8 = 2;
    /// Discard.
    pub const DISCARD: u8 = 3;
    /// Write zeroes.
    pub const WRITE_ZEROES: u8 = 5;
}

/// `UBLK_IO_F_*` (bits of [`IoDesc::op_flags`]).
pub mod io_flag {
    /// Forced unit access.
    pub const FUA: u32 = 1 << 13;
    /// Write zeroes must not deallocate.
    pub const NOUNMAP: u32 = 1 << 15;
}

/// `UBLK_PARAM_TYPE_*`.
pub mod param_type {
    /// [`super::ParamBasic`] is valid.
    pub const BASIC: u32 = 1 << 0;
    /// [`super::ParamDiscard`] is valid.
    pub const DISCARD: u32 = 1 << 1;
}

/// `UBLK_ATTR_*` of [`super::ParamBasic::attrs`].
pub mod attr {
    /// The device has a volatile write cache (the block layer sends flushes).
    pub const VOLATILE_CACHE: u32 = 1 << 2;
    /// The device honours FUA writes.
    pub const FUA: u32 = 1 << 3;
}

/// `struct ublksrv_ctrl_dev_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    pub state: u16,
    pub pad0: u16,
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    pub ublksrv_pid: i32,
    pub pad1: u32,
    pub flags: u64,
    pub ublksrv_flags: u64,
    pub owner_uid: u32,
    pub owner_gid: u32,
    pub reserved1: u64,
    pub reserved2: u64,
}

const _: () = assert!(size_of::<DevInfo>() == 64);
const _: () = {
    assert!(offset_of!(DevInfo, nr_hw_queues) == 0);
    assert!(offset_of!(DevInfo, queue_depth) == 2);
    assert!(offset_of!(DevInfo, state) == 4);
    assert!(offset_of!(DevInfo, pad0) == 6);
    assert!(offset_of!(DevInfo, max_io_buf_bytes) == 8);
    assert!(offset_of!(DevInfo, dev_id) == 12);
    assert!(offset_of!(DevInfo, ublksrv_pid) == 16);
    assert!(offset_of!(DevInfo, pad1) == 20);
    assert!(offset_of!(DevInfo, flags) == 24);
    assert!(offset_of!(DevInfo, ublksrv_flags) == 32);
    assert!(offset_of!(DevInfo, owner_uid) == 40);
    assert!(offset_of!(DevInfo, owner_gid) == 44);
    assert!(offset_of!(DevInfo, reserved1) == 48);
    assert!(offset_of!(DevInfo, reserved2) == 56);
};

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamBasic {
    pub attrs: u32,
    pub logical_bs_shift: u8,
    pub physical_bs_shift: u8,
    pub io_opt_shift: u8,
    pub io_min_shift: u8,
    pub max_sectors: u32,
    pub chunk_sectors: u32,
    pub dev_sectors: u64,
    pub virt_boundary_mask: u64,
}

const _: () = assert!(size_of::<ParamBasic>() == 32);
const _: () = {
    assert!(offset_of!(ParamBasic, attrs) == 0);
    assert!(offset_of!(ParamBasic, logical_bs_shift) == 4);
    assert!(offset_of!(ParamBasic, physical_bs_shift) == 5);
    assert!(offset_of!(ParamBasic, io_opt_shift) == 6);
    assert!(offset_of!(ParamBasic, io_min_shift) == 7);
    assert!(offset_of!(ParamBasic, max_sectors) == 8);
    assert!(offset_of!(ParamBasic, chunk_sectors) == 12);
    assert!(offset_of!(ParamBasic, dev_sectors) == 16);
    assert!(offset_of!(ParamBasic, virt_boundary_mask) == 24);
};

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamDiscard {
    pub discard_alignment: u32,
    pub discard_granularity: u32,
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    pub max_discard_segments: u16,
    pub reserved0: u16,
}

const _: () = assert!(size_of::<ParamDiscard>() == 20);
const _: () = {
    assert!(offset_of!(ParamDiscard, discard_alignment) == 0);
    assert!(offset_of!(ParamDiscard, discard_granularity) == 4);
    assert!(offset_of!(ParamDiscard, max_discard_sectors) == 8);
    assert!(offset_of!(ParamDiscard, max_write_zeroes_sectors) == 12);
    assert!(offset_of!(ParamDiscard, max_discard_segments) == 16);
    assert!(offset_of!(ParamDiscard, reserved0) == 18);
};

/// The head of `struct ublk_params` up to the discard parameters (the driver copies `len` bytes and leaves
/// the rest zero).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Params {
    pub len: u32,
    pub types: u32,
    pub basic: ParamBasic,
    pub discard: ParamDiscard,
    /// Explicit so no byte the driver copies is uninitialised padding (it lands in the zero devt fields).
    pub pad: u32,
}

const _: () = assert!(size_of::<Params>() == 64);
const _: () = {
    assert!(offset_of!(Params, len) == 0);
    assert!(offset_of!(Params, types) == 4);
    assert!(offset_of!(Params, basic) == 8);
    assert!(offset_of!(Params, discard) == 40);
    assert!(offset_of!(Params, pad) == 60);
};

/// `struct ublksrv_io_desc`: one request as the driver describes it to the queue's daemon.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoDesc {
    /// Operation (low 8 bits) and `UBLK_IO_F_*` flags.
    pub op_flags: u32,
    /// Length in 512-byte sectors.
    pub nr_sectors: u32,
    /// Start in 512-byte sectors.
    pub start_sector: u64,
    /// The buffer the data is in (what the fetch gave).
    pub addr: u64,
}

const _: () = assert!(size_of::<IoDesc>() == 24);
const _: () = {
    assert!(offset_of!(IoDesc, op_flags) == 0);
    assert!(offset_of!(IoDesc, nr_sectors) == 4);
    assert!(offset_of!(IoDesc, start_sector) == 8);
    assert!(offset_of!(IoDesc, addr) == 16);
};

impl IoDesc {
    /// The `UBLK_IO_OP_*`.
    pub fn op(&self) -> u8 {
        self.op_flags.to_le_bytes()[0]
    }
}

/// `struct ublksrv_ctrl_cmd`, serialised into the SQE's command area.
fn ctrl_cmd(dev_id: u32, len: u16, addr: u64, data: u64) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[0..4].copy_from_slice(&dev_id.to_ne_bytes());
    c[4..6].copy_from_slice(&u16::MAX.to_ne_bytes()); // queue_id: none
    c[6..8].copy_from_slice(&len.to_ne_bytes());
    c[8..16].copy_from_slice(&addr.to_ne_bytes());
    c[16..24].copy_from_slice(&data.to_ne_bytes());
    c
}

/// `struct ublksrv_io_cmd`, serialised into the SQE's command area.
fn io_cmd(q_id: u16, tag: u16, result: i32, addr: u64) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0..2].copy_from_slice(&q_id.to_ne_bytes());
    c[2..4].copy_from_slice(&tag.to_ne_bytes());
    c[4..8].copy_from_slice(&result.to_ne_bytes());
    c[8..16].copy_from_slice(&addr.to_ne_bytes());
    c
}

fn size_u16<T>() -> u16 {
    u16::try_from(size_of::<T>()).unwrap_or(u16::MAX)
}

/// `/dev/ublk-control` with the SQE128 ring its 32-byte commands need.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("file", &self.file).finish_non_exhaustive()
    }
}

impl Control {
    /// Open the control device (`NotFound` when ublk_drv is not loaded).
    pub fn open(path: &Path) -> io::Result<Control> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4)?;
        Ok(Control { file, ring })
    }

    /// Run one control command; its non-negative result or the errno.
    ///
    /// # Safety
    /// `addr`, when not 0, must point to `len` bytes valid for the kernel to read and write until this returns.
    unsafe fn command(&mut self, op: u32, dev_id: u32, len: u16, addr: u64, data: u64) -> io::Result<i32> {
        let sqe = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), op)
            .cmd(ctrl_cmd(dev_id, len, addr, data))
            .build()
            .user_data(u64::from(op));
        // SAFETY: the command's only buffer is `addr`, which the caller keeps valid until the completion below.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("control ring full"))?;
        // The wait can end with no completion yet (woken for task work, e.g. while STOP_DEV drains the
        // queues): wait again until the command's completion is there.
        let cqe = loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if let Some(cqe) = self.ring.completion().next() {
                break cqe;
            }
        };
        if cqe.result() < 0 {
            return Err(io::Error::from_raw_os_error(-cqe.result()));
        }
        Ok(cqe.result())
    }

    /// ADD_DEV: the driver picks the device id and may adjust the queues, depth and buffer size in `info`.
    pub fn add_dev(&mut self, info: &mut DevInfo) -> io::Result<()> {
        info.dev_id = u32::MAX;
        info.flags |= F_CMD_IOCTL_ENCODE;
        let addr = std::ptr::from_mut(info) as u64;
        // SAFETY: `info` is borrowed mutably for the whole call.
        unsafe { self.command(CMD_ADD_DEV, u32::MAX, size_u16::<DevInfo>(), addr, 0) }.map(|_| ())
    }

    /// SET_PARAMS.
    pub fn set_params(&mut self, dev_id: u32, params: &Params) -> io::Result<()> {
        let mut p = *params;
        p.len = u32::from(size_u16::<Params>());
        let addr = std::ptr::from_mut(&mut p) as u64;
        // SAFETY: `p` lives on this stack frame for the whole call.
        unsafe { self.command(CMD_SET_PARAMS, dev_id, size_u16::<Params>(), addr, 0) }.map(|_| ())
    }

    /// START_DEV: blocks until every tag of every queue has fetched, then adds `/dev/ublkbN`.
    pub fn start_dev(&mut self, dev_id: u32) -> io::Result<()> {
        let pid = u64::from(std::process::id());
        // SAFETY: no buffer.
        unsafe { self.command(CMD_START_DEV, dev_id, 0, 0, pid) }.map(|_| ())
    }

    /// STOP_DEV: removes `/dev/ublkbN` (the queues keep serving until it is gone).
    pub fn stop_dev(&mut self, dev_id: u32) -> io::Result<()> {
        // SAFETY: no buffer.
        unsafe { self.command(CMD_STOP_DEV, dev_id, 0, 0, 0) }.map(|_| ())
    }

    /// DEL_DEV: waits for `/dev/ublkcN` to be closed, then frees the device id.
    pub fn del_dev(&mut self, dev_id: u32) -> io::Result<()> {
        // SAFETY: no buffer.
        unsafe { self.command(CMD_DEL_DEV, dev_id, 0, 0, 0) }.map(|_| ())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// A queue's I/O descriptors, mapped read-only from `/dev/ublkcN`.
#[derive(Debug)]
pub struct IoDescs {
    base: NonNull<IoDesc>,
    depth: u16,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; reads are volatile copies.
unsafe impl Send for IoDescs {}

impl IoDescs {
    /// Map queue `q_id`'s `depth` descriptors.
    pub fn map(cdev: &File, q_id: u16, depth: u16) -> io::Result<IoDescs> {
        let desc = size_of::<IoDesc>();
        let page = page_size();
        let len = round_up(usize::from(depth) * desc, page);
        let stride = round_up(usize::from(MAX_QUEUE_DEPTH) * desc, page);
        let offset = libc::off_t::try_from(usize::from(q_id) * stride).map_err(io::Error::other)?;
        // SAFETY: a fresh shared read-only mapping of the driver's descriptor area; no Rust reference aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                cdev.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<IoDesc>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(IoDescs { base, depth, len })
    }

    /// Tag `tag`'s descriptor (valid once its fetch completed with [`IO_RES_OK`]).
    pub fn get(&self, tag: u16) -> IoDesc {
        assert!(tag < self.depth, "tag {tag} beyond the queue depth {}", self.depth);
        // SAFETY: `tag < depth`, so the element lies inside the mapping, which lives as long as `self`; the
        // driver writes it before posting the fetch's completion, and volatile keeps the copy a real read.
        unsafe { self.base.as_ptr().add(usize::from(tag)).read_volatile() }
    }
}

impl Drop for IoDescs {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; nothing borrows it past `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// An eventfd: completion threads wake a queue's ring through it.
pub fn eventfd() -> io::Result<File> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Add one to an eventfd.
pub fn signal(efd: &File) -> io::Result<()> {
    (&*efd).write_all(&1u64.to_ne_bytes())
}

/// `user_data` of the eventfd read (tags are below [`MAX_QUEUE_DEPTH`]).
pub const EVENT: u64 = u64::MAX;
/// `user_data` bit of a descriptor poll ([`QueueRing::poll`]; the low bits are the caller's identity).
pub const POLL: u64 = 1 << 62;
/// `user_data` of a poll's removal.
pub const POLL_REMOVED: u64 = u64::MAX - 1;

/// A queue's io_uring and its per-tag data buffers. The driver copies write data into a tag's buffer before
/// completing its fetch and copies read data out of it while processing the commit, so a buffer stays here
/// (never moved, resized or freed) from the fetch until its request arrives.
pub struct QueueRing {
    ring: IoUring,
    cdev: i32,
    q_id: u16,
    buf_bytes: usize,
    buffers: Vec<Option<Vec<u8>>>,
    event: Box<u64>,
    efd: i32,
    /// STOP_DEV has returned: the driver will not dispatch into the buffers any more, so they may be freed.
    pub device_stopped: bool,
}

impl std::fmt::Debug for QueueRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueRing").field("q_id", &self.q_id).field("tags", &self.buffers.len()).finish_non_exhaustive()
    }
}

impl QueueRing {
    /// A ring for queue `q_id` of `cdev` with `depth` tags of `buf_bytes` buffers, woken through `efd`.
    pub fn new(cdev: &File, q_id: u16, depth: u16, buf_bytes: usize, efd: &File) -> io::Result<QueueRing> {
        // A slot per tag, the eventfd read, and polls of the links the queue thread hosts (a submission
        // queue that fills up is submitted, so this only saves syscalls).
        let ring = IoUring::new(u32::from(depth) + 1 + 8)?;
        Ok(QueueRing {
            ring,
            cdev: cdev.as_raw_fd(),
            q_id,
            buf_bytes,
            buffers: (0..depth).map(|_| None).collect(),
            event: Box::new(0),
            efd: efd.as_raw_fd(),
            device_stopped: false,
        })
    }

    fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an SQE of this ring names (tag buffers, `event`) is owned by `self` and
            // stays put until its completion (see the type's docs and `Drop`).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// A buffer of at least `buf_bytes` capacity holding `keep`'s bytes (the same one when it is big enough).
    fn sized(&self, keep: Vec<u8>) -> Vec<u8> {
        if keep.capacity() >= self.buf_bytes {
            return keep;
        }
        let mut b = Vec::with_capacity(self.buf_bytes);
        b.extend_from_slice(&keep);
        b
    }

    fn io(&mut self, op: u32, tag: u16, result: i32, buf: Option<Vec<u8>>) -> io::Result<()> {
        let slot = usize::from(tag);
        let buf = match buf.or_else(|| self.buffers[slot].take()) {
            Some(b) => self.sized(b),
            None => Vec::with_capacity(self.buf_bytes),
        };
        let addr = buf.as_ptr() as u64;
        self.buffers[slot] = Some(buf);
        let sqe = opcode::UringCmd16::new(types::Fd(self.cdev), op)
            .cmd(io_cmd(self.q_id, tag, result, addr))
            .build()
            .user_data(u64::from(tag));
        self.push(&sqe)
    }

    /// FETCH_REQ for `tag`.
    pub fn fetch(&mut self, tag: u16) -> io::Result<()> {
        self.io(IO_FETCH_REQ, tag, 0, None)
    }

    /// COMMIT_AND_FETCH_REQ: complete `tag`'s request with `result` (bytes or -errno); a read's data is
    /// `buf`'s bytes (`None`: the tag keeps its buffer).
    pub fn commit(&mut self, tag: u16, result: i32, buf: Option<Vec<u8>>) -> io::Result<()> {
        self.io(IO_COMMIT_AND_FETCH_REQ, tag, result, buf)
    }

    /// Take `tag`'s buffer for a request's data: for a write, holding the `len` bytes the driver copied in;
    /// otherwise as the tag's last command left it (its bytes are stale: a read resizes it, so only the part
    /// beyond the last request's length is zeroed — not the whole buffer on every read).
    pub fn take_buffer(&mut self, tag: u16, write_len: Option<usize>) -> Vec<u8> {
        let mut b = self.buffers[usize::from(tag)].take().unwrap_or_default();
        match write_len {
            Some(len) if len <= b.capacity() => {
                // SAFETY: the fetch of this tag completed with IO_RES_OK for a write of `len` bytes, so the
                // driver has copied exactly that many bytes of data into this buffer (within its capacity).
                unsafe { b.set_len(len) };
            }
            Some(_) => b.clear(),
            None => {}
        }
        b
    }

    /// Read the eventfd (completes with [`EVENT`]).
    pub fn arm_event(&mut self) -> io::Result<()> {
        let ptr = std::ptr::from_mut(&mut *self.event).cast::<u8>();
        let sqe = opcode::Read::new(types::Fd(self.efd), ptr, 8).build().user_data(EVENT);
        self.push(&sqe)
    }

    /// Wait for `fd` to turn readable, once (completes with [`POLL`]` | id`).
    pub fn poll(&mut self, fd: RawFd, id: u64) -> io::Result<()> {
        let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build().user_data(POLL | id);
        self.push(&sqe)
    }

    /// Cancel the poll [`QueueRing::poll`] armed with `id` (it completes with `-ECANCELED`; the removal with
    /// [`POLL_REMOVED`]).
    pub fn cancel_poll(&mut self, id: u64) -> io::Result<()> {
        let sqe = opcode::PollRemove::new(POLL | id).build().user_data(POLL_REMOVED);
        self.push(&sqe)
    }

    /// Submit what is queued.
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }

    /// Submit what is queued and wait for at least one completion, at most `timeout` if given.
    pub fn submit_and_wait(&mut self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        let waited = match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t);
                self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
            }
            None => self.ring.submit_and_wait(1),
        };
        match waited {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ETIME)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Move the completions (user_data, result) into `out`.
    pub fn completions(&mut self, out: &mut Vec<(u64, i32)>) {
        out.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
    }
}

impl Drop for QueueRing {
    fn drop(&mut self) {
        if !self.device_stopped {
            // The driver may still dispatch a request into a fetched buffer (or the eventfd read may still
            // land) after the ring is gone: leak them rather than free memory the kernel can write.
            for b in self.buffers.drain(..).flatten() {
                std::mem::forget(b);
            }
        }
        // The eventfd read is still queued when the ring goes (its cancellation is asynchronous): its 8-byte
        // target must outlive it.
        std::mem::forget(std::mem::take(&mut self.event));
    }
}
