//! Safe wrappers of RDMA verbs (libibverbs) and the RDMA connection manager (librdmacm): the only module
//! of the workspace that touches `rdma_sys`. The target's and the host's NVMe/RDMA transports build on it.
//!
//! Behind the `rdma` cargo feature (on by default); without it the crate builds with no rdma-core.
//!
//! # What it owns
//!
//! | type | verbs object | destroyed by |
//! |---|---|---|
//! | [`EventChannel`] | `rdma_event_channel` (non-blocking fd) | last clone and last [`CmId`] on it |
//! | [`CmId`] | `rdma_cm_id` (RDMA_PS_TCP) | `Drop`, or the [`QueuePair`] that owns it |
//! | [`CmEvent`] | `rdma_cm_event`, copied out and acknowledged at once | — |
//! | [`Device`] | `ibv_context` as librdmacm opened it (pinned by `rdma_get_devices`) | last user |
//! | [`ProtectionDomain`] | `ibv_pd` | last clone and last MR/QP/SRQ in it |
//! | [`MemoryRegion`] | `ibv_mr` + the memory it owns or borrows | `Drop` (dereg, then the memory) |
//! | [`CompletionChannel`] | `ibv_comp_channel` (non-blocking fd) | last clone and last CQ on it |
//! | [`CompletionQueue`] | `ibv_cq` | last of it and the QPs using it |
//! | [`QueuePair`] | `ibv_qp` (RC) on its `rdma_cm_id` | `Drop` (QP, then the id) |
//! | [`SharedReceiveQueue`] | `ibv_srq` | last of it and the QPs using it |
//! | [`MemoryWindow`] | `ibv_mw` (type 2, bound by a work request) | `Drop` |
//!
//! Every handle keeps what it was created from alive through an `Arc` (a QP holds its PD, CQs and SRQ; a
//! CQ its channel and device; a CM id its event channel), so verbs' destruction order holds whatever
//! order Rust drops things in. Handles are `Send` (libibverbs and librdmacm are thread-safe); those that
//! are shared between queue pairs are also `Sync`.
//!
//! # Memory posted to the device: the contract
//!
//! Posting is where safe Rust cannot see what the device will do, so [`QueuePair::post_send`],
//! [`QueuePair::post_recv`] and [`SharedReceiveQueue::post_recv`] are `unsafe fn`. Their contract: the
//! memory regions a posted work request's [`Sge`]s were cut from stay registered and alive, and the memory
//! the device will write is not accessed through Rust references, until the work request's completion is
//! polled or its queue (QP, or SRQ for shared receives) is destroyed. Everything else is checked: an `Sge`
//! can only be cut from a [`MemoryRegion`] within its bounds; a `MemoryRegion` owns (or exclusively borrows
//! for its whole life) the memory it registers and deregisters before releasing it (if deregistration
//! fails the memory is leaked, never freed under the device); its contents are read and written by
//! volatile copies, or by `unsafe` slice accessors whose callers know no device write is in flight.
//!
//! The intended caller of the `unsafe` posts is one small buffer module per transport: it owns the
//! registered pool, keeps each buffer in an in-flight table keyed by `wr_id` from post to completion, and
//! drops queue pairs before the pool.
//!
//! # Threads and blocking
//!
//! Nothing here spawns threads. [`EventChannel`] and [`CompletionChannel`] fds are non-blocking: register
//! them with mio/epoll and drain with `get_event` until `None` (`wait` polls one fd with a timeout, for
//! control paths and tests). Verbs posting and polling never block; `rdma_destroy_id` and
//! `ibv_destroy_cq` would block on unacknowledged events, which is why events are acknowledged as they
//! are read.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cm;
mod cq;
mod device;
mod error;
mod mr;
mod mw;
mod qp;

use std::os::fd::RawFd;
use std::time::Duration;

pub use cm::{
    CmEvent, CmEventKind, CmId, CmIdKey, ConnParam, EventChannel, PeerConnParam, PrivateData, REJECT_CONSUMER_DEFINED,
};
pub use cq::{CompletionChannel, CompletionQueue, CqKey, WcOpcode, WcStatus, WorkCompletion};
pub use device::{Device, DeviceAttributes, DeviceCapabilities};
pub use error::{Errno, RdmaError};
pub use mr::{AccessFlags, MemoryRegion, ProtectionDomain, RegionBuffer, Sge};
pub use mw::{inc_rkey, MemoryWindow, MwBind};
pub use qp::{QpCapabilities, QpInitAttr, QueuePair, RecvWr, SendOpcode, SendWr, SharedReceiveQueue};

/// Set or clear `O_NONBLOCK` on `fd`; the error is an errno.
fn set_nonblocking(fd: RawFd, on: bool) -> Result<(), i32> {
    // SAFETY: fcntl on an fd the caller owns; F_GETFL takes no pointer.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Errno::last().0);
    }
    let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
    // SAFETY: as above; F_SETFL takes an int.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(Errno::last().0);
    }
    Ok(())
}

/// Wait until `fd` is readable or `timeout` passes (`poll(2)`); `Ok(false)` on timeout.
fn poll_readable(fd: RawFd, timeout: Duration) -> Result<bool, i32> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = Errno::last().0;
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_helpers_work_on_a_pipe() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two fds.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        set_nonblocking(fds[0], true).unwrap();
        // SAFETY: F_GETFL on an open fd.
        assert_ne!(unsafe { libc::fcntl(fds[0], libc::F_GETFL) } & libc::O_NONBLOCK, 0);
        assert_eq!(poll_readable(fds[0], Duration::from_millis(10)), Ok(false));
        // SAFETY: writing one byte from a valid buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) }, 1);
        assert_eq!(poll_readable(fds[0], Duration::from_secs(1)), Ok(true));
        set_nonblocking(fds[0], false).unwrap();
        // SAFETY: closing the fds we opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(set_nonblocking(fds[0], true), Err(libc::EBADF));
    }
}
