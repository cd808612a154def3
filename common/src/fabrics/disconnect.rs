//! Fabrics Disconnect.
//!
//! NVMe Base 2.0 §6.4 (introduced by NVMe-oF 1.1): the host deletes the I/O queue the command is
//! submitted on. SQE: opcode 0x7F, `fctype` 0x08 at byte 4, `recfmt` (u16, must be 0) at byte 40, no
//! data. A controller advertises support in Identify Controller OFCS bit 0 (libnvme
//! `NVME_CTRL_OFCS_DISCONNECT`); the value 0x08 is libnvme's and the kernel UAPI's
//! `nvme_fabrics_type_disconnect`. Linux's nvmet does not implement the command (it answers Invalid
//! Opcode) and its host never sends it, so treat it as optional on both sides.

use crate::nvme::opcode::{fctype, FABRICS};
use crate::nvme::SubmissionQueueEntry;
use crate::wire::WireError;

const STRUCTURE: &str = "Disconnect";

/// The only Disconnect record format defined (`recfmt` 0).
pub const DISCONNECT_RECFMT: u16 = 0;

/// The Disconnect command. It has no parameters besides the record format, which must be 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Disconnect;

impl Disconnect {
    /// Parse a Disconnect SQE: opcode 0x7F, fctype 0x08, recfmt 0 (an error naming `recfmt` is answered
    /// with Connect Incompatible Format, as for Connect).
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_fabrics(fctype::DISCONNECT, STRUCTURE, "0x08 (Disconnect)")?;
        let recfmt = sqe.cdw10 & 0xffff;
        if recfmt != u32::from(DISCONNECT_RECFMT) {
            return Err(WireError::invalid(STRUCTURE, "recfmt", recfmt, "0"));
        }
        Ok(Disconnect)
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(FABRICS);
        sqe.nsid = u32::from(fctype::DISCONNECT);
        sqe.cdw10 = u32::from(DISCONNECT_RECFMT);
        sqe
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        // opcode @0, fctype @4 (struct nvmf_common_command), recfmt @40.
        let b = Disconnect.to_sqe().to_bytes();
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], 0x08);
        assert_eq!(&b[40..42], &[0, 0]);
        assert_eq!(Disconnect::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()), Ok(Disconnect));
    }

    #[test]
    fn rejections() {
        let mut sqe = Disconnect.to_sqe();
        sqe.cdw10 = 0x0001;
        assert!(matches!(Disconnect::from_sqe(&sqe), Err(WireError::InvalidField { field: "recfmt", value: 1, .. })));
        // Bytes 42..44 are reserved, not part of recfmt.
        sqe.cdw10 = 0x0001_0000;
        assert_eq!(Disconnect::from_sqe(&sqe), Ok(Disconnect));
        let mut sqe = Disconnect.to_sqe();
        sqe.nsid = 0x01;
        assert!(matches!(Disconnect::from_sqe(&sqe), Err(WireError::InvalidField { field: "fctype", .. })));
        let mut sqe = Disconnect.to_sqe();
        sqe.opcode = 0x08;
        assert!(matches!(Disconnect::from_sqe(&sqe), Err(WireError::InvalidField { field: "opcode", .. })));
    }

    proptest! {
        #[test]
        fn arbitrary_sqe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            if let Ok(d) = Disconnect::from_sqe(&sqe) {
                prop_assert_eq!(Disconnect::from_sqe(&d.to_sqe()), Ok(d));
                prop_assert_eq!((bytes[0], bytes[4], bytes[40], bytes[41]), (0x7f, 0x08, 0, 0));
            }
        }
    }
}
