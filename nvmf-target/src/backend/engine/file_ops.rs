//! Ops on regular files and block devices: reads and writes on fixed buffers, fsync, fallocate for Write Zeroes
//! and Discard, and block discard through io_uring (or, on kernels without it, the discard worker's ioctl).

use std::sync::Arc;

use super::super::ring::RingOp;
use super::super::storage::{FileBacking, ZeroMode};
use super::super::{BufferId, Storage};
use super::in_flight::{Expect, InFlight};
use super::{buffer_error, completes_without_kernel, IoEngine, IoOp};

impl IoEngine {
    pub(super) fn push_ring(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        backing: &FileBacking,
        block_device: bool,
        op: IoOp,
        buf: Option<BufferId>,
    ) -> Result<(), IoOp> {
        // Ops that need no kernel round trip.
        if let Some(result) = completes_without_kernel(op, buf, storage, backing.zero_mode != ZeroMode::Unsupported) {
            self.complete_now(tag, result);
            return Ok(());
        }
        if let IoOp::Discard { offset, len } = op {
            if block_device && !self.async_block_discard {
                return self.push_discard_to_worker(tag, storage, offset, len).map_err(|()| op);
            }
        }
        if self.ring.sq_full() || self.in_flight.is_full() {
            return Err(op);
        }
        let (file, mut keep) = match self.file_ref(storage) {
            Ok(f) => f,
            Err(e) => {
                self.complete_now(tag, Err(e));
                return Ok(());
            }
        };
        let keep_size = libc::FALLOC_FL_KEEP_SIZE;
        let (ring_op, buffer, expect) = match (op, buf) {
            (IoOp::Read { offset, len }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (RingOp::Read { buf: io_buf, offset }, Some(id), Expect::Read(len)),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Write { offset, len, fua }, Some(id)) => match self.pool.start_io(id, len) {
                Ok(io_buf) => (RingOp::Write { buf: io_buf, offset, fua }, Some(id), Expect::Write(len)),
                Err(e) => {
                    self.complete_now(tag, Err(buffer_error(e)));
                    return Ok(());
                }
            },
            (IoOp::Flush, _) => (RingOp::Fsync, None, Expect::Done),
            (IoOp::WriteZeroes { offset, len }, _) => {
                let mode = if backing.zero_mode == ZeroMode::PunchHole {
                    libc::FALLOC_FL_PUNCH_HOLE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE
                };
                (RingOp::Fallocate { mode: mode | keep_size, offset, len }, None, Expect::Done)
            }
            (IoOp::Discard { offset, len }, _) if block_device => {
                // The fallback at completion (the worker's ioctl) needs the storage.
                keep = Some(Arc::clone(storage));
                (RingOp::BlockDiscard { offset, len }, None, Expect::BlockDiscard { offset, len })
            }
            (IoOp::Discard { offset, len }, _) => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | keep_size;
                (RingOp::Fallocate { mode, offset, len }, None, Expect::Done)
            }
            (IoOp::Read { .. } | IoOp::Write { .. }, None) => unreachable!("handled as immediate above"),
        };
        let entry = InFlight { tag, buffer, expect, storage: keep };
        let Some(key) = self.in_flight.insert(entry) else {
            // Checked above; undo and hand the op back rather than lose it.
            if let Some(id) = buffer {
                self.pool.finish_io(id);
            }
            return Err(op);
        };
        if self.ring.push(u64::from(key), file, ring_op).is_err() {
            self.in_flight.remove(u64::from(key));
            if let Some(id) = buffer {
                self.pool.finish_io(id);
            }
            return Err(op);
        }
        Ok(())
    }
}
