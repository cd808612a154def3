//! [`BlockOp`]: what a block device request asks of a namespace, in logical blocks — the vocabulary both block
//! exports (NBD, ublk) decode their requests into. It uses nothing else of the crate: the NBD fuzz target
//! compiles it in beside `nbd/proto.rs`.

/// A block request as whole logical blocks of the namespace, already checked against it by the export that
/// decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOp {
    /// Read `blocks` from `slba`.
    Read {
        /// First block.
        slba: u64,
        /// Block count (≥ 1).
        blocks: u64,
    },
    /// Write `blocks` at `slba`.
    Write {
        /// First block.
        slba: u64,
        /// Block count (≥ 1).
        blocks: u64,
        /// Force Unit Access.
        fua: bool,
    },
    /// Flush the volatile write cache.
    Flush,
    /// Deallocate (Dataset Management, AD): NBD's trim, ublk's discard.
    Deallocate {
        /// First block.
        slba: u64,
        /// Block count (≥ 1).
        blocks: u64,
        /// Persist before completing (Dataset Management has no FUA bit: the export flushes after it).
        fua: bool,
    },
    /// Write Zeroes.
    WriteZeroes {
        /// First block.
        slba: u64,
        /// Block count (≥ 1).
        blocks: u64,
        /// Force Unit Access.
        fua: bool,
        /// DEAC: the controller may deallocate the blocks (false for NBD's `NO_HOLE`, ublk's `NOUNMAP`).
        deallocate: bool,
    },
}
