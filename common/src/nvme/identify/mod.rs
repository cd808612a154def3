//! Identify (admin opcode 0x06): the command view and the data structures it returns: Identify Controller, Identify
//! Namespace, Active Namespace ID list and the Namespace Identification Descriptor list.
//!
//! NVMe Base 2.0 §5.17 (Identify command, Figures 273–275), Figure 275 (Identify Controller data
//! structure), NVM Command Set 1.0 Figure 97 (Identify Namespace), Base 2.0 Figure 278 (Namespace
//! Identification Descriptor). Byte offsets were checked against Linux `include/linux/nvme.h`
//! (`struct nvme_identify`, `nvme_id_ctrl`, `nvme_id_ns`, `nvme_ns_id_desc`) and libnvme `types.h`.
//!
//! Every Identify data structure is 4096 bytes ([`IDENTIFY_DATA_SIZE`]). Parsers borrow from the input
//! and never allocate; encoders write the full 4096 bytes, zeroing everything they do not own.
//!
//! This module holds the Identify command view, the CNS and CSI values and the shared sizes; each data structure has
//! its own child module (`controller` with `power_state`, `namespace`, `namespace_list`, `descriptors`), its items
//! re-exported here.

use super::opcode;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{high_half, low_byte, low_half, top_byte, WireError};

mod controller;
mod descriptors;
mod namespace;
mod namespace_list;
mod power_state;

pub use controller::{IdentifyController, NQN_MAX_LEN};
pub use descriptors::{
    nidt, NamespaceIdentificationDescriptor, NamespaceIdentificationDescriptorIter,
    NamespaceIdentificationDescriptorList,
};
pub use namespace::{IdentifyNamespace, LbaFormat, LBA_FORMATS};
pub(crate) use namespace_list::{check_list_nsid, put_nsid_list, NsidSet};
pub use namespace_list::{ActiveNamespaceIdList, NamespaceIdIter, NamespaceIdList};
pub use power_state::{PowerStateDescriptor, POWER_STATE_DESCRIPTORS, POWER_STATE_DESCRIPTOR_SIZE};

/// Size of every Identify data structure (Linux `NVME_IDENTIFY_DATA_SIZE`).
pub const IDENTIFY_DATA_SIZE: usize = 4096;

/// Number of NSIDs a 4096-byte namespace list holds (Identify CNS 02h, Changed Namespace List log).
pub const NSID_LIST_ENTRIES: usize = 1024;

/// The broadcast NSID (all namespaces); never a valid entry in a namespace list.
pub const NSID_BROADCAST: u32 = 0xFFFF_FFFF;

/// Controller or Namespace Structure (CNS) values (Base 2.0 Figure 274) this crate serves.
pub mod cns {
    /// Identify Namespace data structure for the NSID.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller data structure.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list: active NSIDs greater than the NSID in the command.
    pub const ACTIVE_NAMESPACE_ID_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list for the NSID.
    pub const NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Controller data structure for the CSI in the command (for the NVM
    /// command set: VSL, WZSL, WUSL, DMRL, DMRSL, DMSL; NVM Command Set 1.0 Figure 97).
    pub const IO_COMMAND_SET_CONTROLLER: u8 = 0x06;
}

/// Command Set Identifier values (Base 2.0 Figure 286) used in Identify and Get Log Page.
pub mod csi {
    /// NVM Command Set.
    pub const NVM: u8 = 0x00;
    /// Key Value Command Set.
    pub const KEY_VALUE: u8 = 0x01;
    /// Zoned Namespace Command Set.
    pub const ZONED: u8 = 0x02;
}

const IDENTIFY: &str = "Identify";

/// The Identify command (Base 2.0 §5.17, Figures 273–275): CNS in CDW10 bits 7:0, CNTID in CDW10
/// bits 31:16, CNS Specific Identifier in CDW11 bits 15:0 and CSI in CDW11 bits 31:24. The data
/// (always 4096 bytes) travels controller to host through SGL1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identify {
    /// Namespace Identifier; its meaning depends on `cns`.
    pub nsid: u32,
    /// Controller or Namespace Structure (see [`cns`]).
    pub cns: u8,
    /// Controller Identifier (CNTID), used by controller-list CNS values.
    pub cntid: u16,
    /// CNS Specific Identifier (CNSSID, CDW11 bits 15:0).
    pub cnssid: u16,
    /// Command Set Identifier (CSI, CDW11 bits 31:24), see [`csi`].
    pub csi: u8,
}

impl Identify {
    /// An Identify of structure `cns` for `nsid`, all else zero.
    pub fn new(cns: u8, nsid: u32) -> Self {
        Identify { nsid, cns, ..Default::default() }
    }

    /// The view of an Identify SQE. Errors if the opcode is not Identify.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::IDENTIFY, IDENTIFY, "0x06 (Identify)")?;
        Ok(Identify {
            nsid: sqe.nsid,
            cns: low_byte(sqe.cdw10),
            cntid: high_half(sqe.cdw10),
            cnssid: low_half(sqe.cdw11),
            csi: top_byte(sqe.cdw11),
        })
    }

    /// The SQE for this command (CID and SGL1 left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::IDENTIFY);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.cns) | (u32::from(self.cntid) << 16);
        sqe.cdw11 = u32::from(self.cnssid) | (u32::from(self.csi) << 24);
        sqe
    }
}

/// Copy `N` bytes at `off` into an array. The caller guarantees the range is in bounds.
fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_command_fields() {
        let id = Identify { nsid: 0x0102_0304, cns: 0x03, cntid: 0xa1b2, cnssid: 0xc3d4, csi: 0x02 };
        let sqe = id.to_sqe();
        assert_eq!(sqe.opcode, 0x06);
        // Linux struct nvme_identify: cns byte 40, ctrlid bytes 42-43, cnssid 44-45, csi byte 47.
        let b = sqe.to_bytes();
        assert_eq!(b[40], 0x03);
        assert_eq!(b[41], 0);
        assert_eq!(&b[42..44], &[0xb2, 0xa1]);
        assert_eq!(&b[44..46], &[0xd4, 0xc3]);
        assert_eq!(b[46], 0);
        assert_eq!(b[47], 0x02);
        assert_eq!(Identify::from_sqe(&sqe).unwrap(), id);
        assert_eq!(cns::NAMESPACE, 0x00);
        assert_eq!(cns::CONTROLLER, 0x01);
        assert_eq!(cns::ACTIVE_NAMESPACE_ID_LIST, 0x02);
        assert_eq!(cns::NAMESPACE_IDENTIFICATION_DESCRIPTOR_LIST, 0x03);
    }

    #[test]
    fn identify_rejects_other_opcodes() {
        let sqe = SubmissionQueueEntry::new(opcode::admin::GET_LOG_PAGE);
        assert!(matches!(
            Identify::from_sqe(&sqe),
            Err(WireError::InvalidField { structure: "Identify", field: "opcode", value: 0x02, .. })
        ));
    }
}
