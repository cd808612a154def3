//! Compare and Write on the storage kinds that can do it atomically (see
//! [`Storage::compare_and_write_limit`]): memory and null at once, RBD images through librbd.

use std::io;
use std::sync::Arc;

use super::super::storage::Kind;
use super::super::{BufferId, Storage};
use super::{check_range, refused, unsupported, IoEngine};

/// The engine has no room for the op now (ring, in-flight table or librbd slots full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineFull;

impl IoEngine {
    /// Queues a Compare and Write of `len` bytes at `offset` of `storage` under `tag`: if the storage holds the first
    /// `len` bytes of `compare` there, they are replaced by those of `write`, with no other op of any reactor in
    /// between. It ends with `Ok(len)`, `EILSEQ` for a miscompare (nothing written), `Unsupported` where the storage
    /// cannot, `InvalidInput` for a range outside the storage or beyond its limit. [`EngineFull`]: submit, reap, and
    /// retry.
    pub fn push_compare_and_write(
        &mut self,
        tag: u64,
        storage: &Arc<Storage>,
        (offset, len): (u64, u32),
        compare: BufferId,
        write: BufferId,
    ) -> Result<(), EngineFull> {
        let Some(limit) = storage.compare_and_write_limit() else {
            self.complete_now(tag, Err(unsupported("compare and write not supported")));
            return Ok(());
        };
        if len > limit {
            self.complete_now(tag, Err(refused("compare and write beyond the storage's atomic unit")));
            return Ok(());
        }
        if let Err(e) = check_range(storage, offset, u64::from(len)) {
            self.complete_now(tag, Err(e));
            return Ok(());
        }
        let n = len as usize;
        let result = match storage.kind() {
            Kind::Null => match self.pool.get(compare).get(..n) {
                Some(expected) if expected.iter().all(|&b| b == 0) => Ok(len),
                Some(_) => Err(io::Error::from_raw_os_error(libc::EILSEQ)),
                None => Err(refused("compare and write longer than its buffer")),
            },
            Kind::Memory(store) => match (self.pool.get(compare).get(..n), self.pool.get(write).get(..n)) {
                (Some(expected), Some(data)) if store.compare_and_write(offset, expected, data) => Ok(len),
                (Some(_), Some(_)) => Err(io::Error::from_raw_os_error(libc::EILSEQ)),
                _ => Err(refused("compare and write longer than its buffers")),
            },
            #[cfg(feature = "rbd")]
            Kind::Rbd(image) => {
                return self.push_rbd_compare_and_write(tag, storage, image, (offset, len), compare, write)
            }
            Kind::File(_) | Kind::BlockDevice(_) | Kind::Nvme(_) => Err(unsupported("compare and write not supported")),
        };
        self.complete_now(tag, result);
        Ok(())
    }
}
