//! Block requests as NVMe commands: [`BlockOp`], what the NBD and ublk exports decode a request into, and
//! `nvm_command`, the NVM command set command for an operation that fits one. Pure functions, no I/O.

mod op;

use nvmf_common::nvme::io::{DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes};
use nvmf_common::nvme::SubmissionQueueEntry;

use crate::queue::DataDirection;
pub use op::BlockOp;

/// Blocks one NVMe command can carry (16-bit NLB).
pub(crate) const MAX_NLB_BLOCKS: u64 = 65536;

/// The one NVMe command for `op` on namespace `nsid` (its `blocks` at most [`MAX_NLB_BLOCKS`], a deallocation
/// at most `u32::MAX` blocks), its data direction and, for a deallocation, the Dataset Management range to send
/// as its data.
pub(crate) fn nvm_command(nsid: u32, op: &BlockOp) -> (SubmissionQueueEntry, DataDirection, Option<DsmRange>) {
    let nlb = |blocks: u64| u16::try_from(blocks.saturating_sub(1)).unwrap_or(u16::MAX);
    match *op {
        BlockOp::Read { slba, blocks } => {
            let sqe = Read { nsid, slba, nlb: nlb(blocks), ..Read::default() }.to_sqe();
            (sqe, DataDirection::ControllerToHost, None)
        }
        BlockOp::Write { slba, blocks, fua } => {
            let sqe = Write { nsid, slba, nlb: nlb(blocks), fua, ..Write::default() }.to_sqe();
            (sqe, DataDirection::HostToController, None)
        }
        BlockOp::Flush => (Flush { nsid }.to_sqe(), DataDirection::None, None),
        BlockOp::Deallocate { slba, blocks, .. } => {
            let length = u32::try_from(blocks).unwrap_or(u32::MAX);
            let sqe = DatasetManagement { nsid, nr: 0, ad: true, ..DatasetManagement::default() }.to_sqe();
            (sqe, DataDirection::HostToController, Some(DsmRange { cattr: 0, length, slba }))
        }
        BlockOp::WriteZeroes { slba, blocks, fua, deallocate } => {
            let sqe = WriteZeroes { nsid, slba, nlb: nlb(blocks), deac: deallocate, fua, ..WriteZeroes::default() };
            (sqe.to_sqe(), DataDirection::None, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use nvmf_common::nvme::opcode::io as nvm;

    use super::*;

    #[test]
    fn one_nvme_command_per_operation() {
        let (sqe, dir, range) = nvm_command(1, &BlockOp::Read { slba: 5, blocks: 65536 });
        assert_eq!((sqe.opcode, sqe.nsid, dir, range), (nvm::READ, 1, DataDirection::ControllerToHost, None));
        assert_eq!(Read::from_sqe(&sqe).unwrap().nlb, 65535);
        let (sqe, dir, _) = nvm_command(1, &BlockOp::Write { slba: 5, blocks: 1, fua: true });
        let w = Write::from_sqe(&sqe).unwrap();
        assert_eq!((w.slba, w.nlb, w.fua, dir), (5, 0, true, DataDirection::HostToController));
        let (sqe, dir, range) = nvm_command(1, &BlockOp::Deallocate { slba: 7, blocks: 9, fua: false });
        assert!(DatasetManagement::from_sqe(&sqe).unwrap().ad);
        assert_eq!((dir, range), (DataDirection::HostToController, Some(DsmRange { cattr: 0, length: 9, slba: 7 })));
        let wz = BlockOp::WriteZeroes { slba: 1, blocks: 2, fua: false, deallocate: true };
        let (sqe, dir, _) = nvm_command(1, &wz);
        let z = WriteZeroes::from_sqe(&sqe).unwrap();
        assert_eq!((z.slba, z.nlb, z.deac, dir), (1, 1, true, DataDirection::None));
        assert_eq!(nvm_command(1, &BlockOp::Flush).0.opcode, nvm::FLUSH);
    }
}
