//! Ops on NVMe passthrough storages (`/dev/ngXnY`): each op becomes one or more NVMe commands
//! (`NVME_URING_CMD_IO`) on the ring; an op sent as several completes once, when its last command has.

use std::io;
use std::sync::Arc;

use nvmf_common::nvme::SubmissionQueueEntry;

use super::super::nvme::{self, NvmeBacking};
use super::super::ring::{NvmeUringCmd, RingOp};
use super::super::storage::Kind;
use super::super::{BufferId, Storage};
use super::in_flight::{Expect, Group, InFlight};
use super::{buffer_error, completes_without_kernel, refused, IoEngine, IoOp};

impl IoEngine {
    /// An op on an NVMe passthrough storage: one or more NVMe commands (see the module docs).
    pub(super) fn push_nvme(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        backing: &NvmeBacking,
        op: IoOp,
        buf: Option<BufferId>,
    ) -> Result<(), IoOp> {
        let immediate = completes_without_kernel(op, buf, storage, backing.write_zeroes);
        if let Some(result) = immediate {
            self.complete_now(tag, result);
            return Ok(());
        }
        let plan = nvme::Plan::new(backing, op);
        let most = self.ring.sq_capacity().min(self.in_flight.capacity());
        let Some(count) = usize::try_from(plan.count()).ok().filter(|&n| n <= most) else {
            self.complete_now(tag, Err(refused("storage op needs more NVMe commands than the ring holds")));
            return Ok(());
        };
        let grouped = count > 1;
        if self.ring.sq_space() < count || self.in_flight.free_len() < count || (grouped && self.groups.is_full()) {
            return Err(op);
        }
        let (file, keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let (io_buf, bytes) = match (op, buf) {
            (IoOp::Read { len, .. } | IoOp::Write { len, .. }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (Some((id, io_buf)), len),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            _ => (None, 0),
        };
        let group = if grouped {
            let group = Group {
                tag,
                remaining: count,
                buffer: io_buf.map(|(id, _)| id),
                bytes,
                error: None,
                _storage: keep.clone(),
            };
            self.groups.insert(group)
        } else {
            None
        };
        for index in 0..count {
            let chunk = plan.chunk(index as u64);
            let part_buf = match (chunk.data, io_buf) {
                (Some((offset, len)), Some((_, io_buf))) => io_buf.slice(offset, len),
                _ => None,
            };
            let entry = match group {
                Some(g) => InFlight { tag, buffer: None, expect: Expect::NvmePart(g), storage: None },
                None => InFlight {
                    tag,
                    buffer: io_buf.map(|(id, _)| id),
                    expect: Expect::Nvme(bytes),
                    storage: keep.clone(),
                },
            };
            let pushed = if chunk.data.is_some() && part_buf.is_none() {
                None // the plan cut past the buffer: never send a data command without its data
            } else {
                self.in_flight.insert(entry).and_then(|key| {
                    let op = RingOp::Nvme { cmd: chunk.cmd, buf: part_buf, range: chunk.range };
                    if self.ring.push(u64::from(key), file, op).is_ok() {
                        Some(())
                    } else {
                        self.in_flight.remove(u64::from(key));
                        None
                    }
                })
            };
            if pushed.is_some() {
                continue;
            }
            // Checked above, so not expected. Before anything was pushed, undo and hand the op back; after, the
            // commands in the SQ complete the op with an error.
            match group {
                Some(g) if index > 0 => {
                    let error = io::Error::from_raw_os_error(libc::EAGAIN);
                    if let Some(done) = self.groups.forget(g, count - index, error) {
                        debug_assert!(false, "a group with commands pushed cannot finish here: {done:?}");
                    }
                    return Ok(());
                }
                Some(g) => {
                    self.groups.forget(g, count, io::Error::from_raw_os_error(libc::EAGAIN));
                }
                None => {}
            }
            if let Some((id, _)) = io_buf {
                self.pool.finish_io(id);
            }
            return Err(op);
        }
        Ok(())
    }

    /// Sends `sqe` as is (but for the NSID, which is the namespace's) to an NVMe passthrough storage, moving
    /// `data` (a buffer and a length) if given; no range check. Completes like an op: the byte count or the
    /// drive's status. For tests (status pass-through of what the engine would refuse).
    #[cfg_attr(not(test), expect(dead_code, reason = "only tests send raw NVMe commands"))]
    pub(crate) fn push_nvme_command(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        sqe: &SubmissionQueueEntry,
        data: Option<(BufferId, u32)>,
    ) -> Result<(), ()> {
        let Kind::Nvme(backing) = storage.kind() else {
            self.complete_now(tag, Err(refused("not an NVMe passthrough storage")));
            return Ok(());
        };
        if self.ring.sq_full() || self.in_flight.is_full() {
            return Err(());
        }
        let (file, keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let (buf, len) = match data {
            Some((id, len)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (Some((id, io_buf)), len),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            None => (None, 0),
        };
        let cmd = NvmeUringCmd { nsid: backing.nsid, ..NvmeUringCmd::from_sqe(sqe) };
        let entry = InFlight { tag, buffer: buf.map(|(id, _)| id), expect: Expect::Nvme(len), storage: keep };
        let key = self.in_flight.insert(entry).ok_or(())?;
        let op = RingOp::Nvme { cmd, buf: buf.map(|(_, b)| b), range: None };
        if self.ring.push(u64::from(key), file, op).is_err() {
            self.in_flight.remove(u64::from(key));
            if let Some((id, _)) = buf {
                self.pool.finish_io(id);
            }
            return Err(());
        }
        Ok(())
    }
}
