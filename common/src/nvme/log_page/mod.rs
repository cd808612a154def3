//! Get Log Page (admin opcode 0x02): the command view and the log pages the target serves: Error Information, SMART /
//! Health Information, Changed Namespace List and Commands Supported and Effects.
//!
//! NVMe Base 2.0 §5.16 (Get Log Page command, Figures 197–202) and §5.16.1 (log pages). Offsets were
//! checked against Linux `include/linux/nvme.h` (`struct nvme_get_log_page_command`,
//! `nvme_smart_log`, `nvme_effects_log`, `NVME_LOG_*`, `NVME_CMD_EFFECTS_*`) and libnvme `types.h`
//! (`struct nvme_error_log_page`).
//!
//! A host reads a log page at an offset and length; the target encodes the whole page and hands the
//! requested window to [`copy_log_page_range`] (or [`GetLogPage::copy_page`]), which zero-fills past the
//! end of the page and never panics, whatever the offset.
//!
//! This module holds the Get Log Page command view, the Log Page Identifiers and the window copy; each log
//! page has its own child module (`error_information`, `smart`, `changed_namespaces`, `commands_effects`, `ana`),
//! its items re-exported here.

use super::opcode;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{high_half, low_byte, low_half, top_byte, WireError};

mod ana;
mod changed_namespaces;
mod commands_effects;
mod error_information;
mod smart;

pub use ana::{AnaGroupDescriptor, AnaLog, AnaState, ANA_GROUP_DESCRIPTOR_SIZE, ANA_LOG_HEADER_SIZE, ANA_RGO};
pub use changed_namespaces::{ChangedNamespaceList, ChangedNamespaces, CHANGED_NAMESPACE_LIST_SIZE};
pub use commands_effects::{CommandsSupportedAndEffects, COMMANDS_SUPPORTED_AND_EFFECTS_SIZE};
pub use error_information::{ErrorInformationEntry, ERROR_INFORMATION_ENTRY_SIZE};
pub use smart::{SmartLog, SMART_LOG_SIZE};

/// Log Page Identifiers (Base 2.0 Figure 202, Linux `NVME_LOG_*`).
pub mod lid {
    /// Supported Log Pages.
    pub const SUPPORTED_LOG_PAGES: u8 = 0x00;
    /// Error Information.
    pub const ERROR_INFORMATION: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART_HEALTH_INFORMATION: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE_SLOT_INFORMATION: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NAMESPACE_LIST: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const COMMANDS_SUPPORTED_AND_EFFECTS: u8 = 0x05;
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    /// Telemetry Host-Initiated.
    pub const TELEMETRY_HOST_INITIATED: u8 = 0x07;
    /// Telemetry Controller-Initiated.
    pub const TELEMETRY_CONTROLLER_INITIATED: u8 = 0x08;
    /// Endurance Group Information.
    pub const ENDURANCE_GROUP_INFORMATION: u8 = 0x09;
    /// Asymmetric Namespace Access.
    pub const ASYMMETRIC_NAMESPACE_ACCESS: u8 = 0x0C;
    /// Discovery (NVMe-oF discovery controllers only).
    pub const DISCOVERY: u8 = 0x70;
    /// Reservation Notification.
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
}

const GET_LOG_PAGE: &str = "GetLogPage";

/// Largest value of the 7-bit LSP field.
pub const LSP_MAX: u8 = 0x7f;

/// The Get Log Page command (Base 2.0 §5.16, Figures 197–201, Linux `struct
/// nvme_get_log_page_command`): CDW10 LID 7:0, LSP 14:8, RAE 15, NUMDL 31:16; CDW11 NUMDU 15:0,
/// LSI 31:16; CDW12 LPOL; CDW13 LPOU; CDW14 UUID index 6:0, OT 23, CSI 31:24.
///
/// LSP is 7 bits wide in NVMe 2.0 (bits 11:8 in 1.4, with 14:12 reserved); this view keeps all 7.
/// `lsp` and `uuid_index` above 0x7F are masked to their 7 bits by [`to_sqe`](Self::to_sqe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GetLogPage {
    /// Namespace Identifier (0xFFFFFFFF for controller-wide logs).
    pub nsid: u32,
    /// Log Page Identifier (see [`lid`]).
    pub lid: u8,
    /// Log Specific Parameter (CDW10 bits 14:8).
    pub lsp: u8,
    /// Retain Asynchronous Event (CDW10 bit 15): keep the event that this read would clear.
    pub rae: bool,
    /// Number of Dwords, 0's based (NUMDU:NUMDL).
    pub numd: u32,
    /// Log Specific Identifier (CDW11 bits 31:16).
    pub lsi: u16,
    /// Log Page Offset (LPOU:LPOL): a byte offset, or an index when `ot` is set.
    pub lpo: u64,
    /// UUID Index (CDW14 bits 6:0).
    pub uuid_index: u8,
    /// Offset Type (CDW14 bit 23): `lpo` is an index rather than a byte offset.
    pub ot: bool,
    /// Command Set Identifier (CDW14 bits 31:24).
    pub csi: u8,
}

impl GetLogPage {
    /// Read `length_bytes` of log `lid` from offset 0. Errors unless the length is a non-zero multiple
    /// of 4 no greater than 16 GiB (the largest NUMD can express).
    pub fn new(lid: u8, nsid: u32, length_bytes: u64) -> Result<Self, WireError> {
        if length_bytes == 0 || length_bytes % 4 != 0 {
            return Err(WireError::invalid(GET_LOG_PAGE, "numd", length_bytes, "a non-zero multiple of 4 bytes"));
        }
        let numd = u32::try_from(length_bytes / 4 - 1)
            .map_err(|_| WireError::invalid(GET_LOG_PAGE, "numd", length_bytes, "at most 16 GiB"))?;
        Ok(GetLogPage { nsid, lid, numd, ..Default::default() })
    }

    /// The view of a Get Log Page SQE. Errors if the opcode is not Get Log Page.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::GET_LOG_PAGE, GET_LOG_PAGE, "0x02 (Get Log Page)")?;
        let lsp_rae = sqe.cdw10.to_le_bytes()[1];
        Ok(GetLogPage {
            nsid: sqe.nsid,
            lid: low_byte(sqe.cdw10),
            lsp: lsp_rae & LSP_MAX,
            rae: lsp_rae & 0x80 != 0,
            numd: u32::from(high_half(sqe.cdw10)) | (u32::from(low_half(sqe.cdw11)) << 16),
            lsi: high_half(sqe.cdw11),
            lpo: u64::from(sqe.cdw12) | (u64::from(sqe.cdw13) << 32),
            uuid_index: low_byte(sqe.cdw14) & 0x7f,
            ot: sqe.cdw14 & (1 << 23) != 0,
            csi: top_byte(sqe.cdw14),
        })
    }

    /// The SQE for this command (CID and SGL1 left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::GET_LOG_PAGE);
        let [numdl_lo, numdl_hi, numdu_lo, numdu_hi] = self.numd.to_le_bytes();
        let [lpol @ .., _, _, _, _] = self.lpo.to_le_bytes();
        let [_, _, _, _, lpou @ ..] = self.lpo.to_le_bytes();
        sqe.nsid = self.nsid;
        sqe.cdw10 =
            u32::from_le_bytes([self.lid, (self.lsp & LSP_MAX) | (u8::from(self.rae) << 7), numdl_lo, numdl_hi]);
        sqe.cdw11 = u32::from_le_bytes([numdu_lo, numdu_hi, 0, 0]) | (u32::from(self.lsi) << 16);
        sqe.cdw12 = u32::from_le_bytes(lpol);
        sqe.cdw13 = u32::from_le_bytes(lpou);
        sqe.cdw14 = u32::from(self.uuid_index & 0x7f) | (u32::from(self.ot) << 23) | (u32::from(self.csi) << 24);
        sqe
    }

    /// Bytes requested: (NUMD + 1) × 4, computed in 64 bits so it cannot overflow (at most 16 GiB).
    pub fn length_bytes(&self) -> u64 {
        (u64::from(self.numd) + 1) * 4
    }

    /// The byte offset to read from. Errors if the offset is not dword aligned (LPOL bits 1:0) or is an
    /// index (`ot`), which the log pages here do not support.
    pub fn offset(&self) -> Result<u64, WireError> {
        if self.ot {
            return Err(WireError::invalid(GET_LOG_PAGE, "ot", 1u8, "0 (byte offset)"));
        }
        if self.lpo % 4 != 0 {
            return Err(WireError::invalid(GET_LOG_PAGE, "lpol", self.lpo, "a multiple of 4 (dword aligned)"));
        }
        Ok(self.lpo)
    }

    /// Copy the window this command asks for out of an encoded log `page` into `out` (at most
    /// [`length_bytes`](Self::length_bytes) of it), zero-filling beyond the page. Returns the bytes
    /// taken from `page`. Errors as [`offset`](Self::offset) does.
    pub fn copy_page(&self, page: &[u8], out: &mut [u8]) -> Result<usize, WireError> {
        let offset = self.offset()?;
        let len = usize::try_from(self.length_bytes()).unwrap_or(usize::MAX).min(out.len());
        Ok(copy_log_page_range(page, offset, &mut out[..len]))
    }
}

/// Copy bytes `[offset, offset + out.len())` of an encoded log `page` into `out`, zero-filling whatever
/// lies beyond the end of the page. Any offset is safe (one past `page` just yields zeros). Returns the
/// number of bytes taken from `page`.
pub fn copy_log_page_range(page: &[u8], offset: u64, out: &mut [u8]) -> usize {
    let available = usize::try_from(offset).ok().and_then(|start| page.get(start..)).unwrap_or(&[]);
    let n = available.len().min(out.len());
    out[..n].copy_from_slice(&available[..n]);
    out[n..].fill(0);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::identify::NSID_BROADCAST;

    use proptest::prelude::*;

    #[test]
    fn get_log_page_layout() {
        // Linux struct nvme_get_log_page_command: lid @40, lsp @41, numdl @42, numdu @44, lsi @46,
        // lpol @48, lpou @52, csi @59 (cdw14 byte 3).
        let cmd = GetLogPage {
            nsid: 0xffff_ffff,
            lid: lid::COMMANDS_SUPPORTED_AND_EFFECTS,
            lsp: 0x55,
            rae: true,
            numd: 0x1234_5678,
            lsi: 0x9abc,
            lpo: 0x0102_0304_0506_0708,
            uuid_index: 0x11,
            ot: true,
            csi: 0x02,
        };
        let b = cmd.to_sqe().to_bytes();
        assert_eq!(b[0], 0x02);
        assert_eq!(b[40], 0x05);
        assert_eq!(b[41], 0x55 | 0x80);
        assert_eq!(&b[42..44], &[0x78, 0x56]);
        assert_eq!(&b[44..46], &[0x34, 0x12]);
        assert_eq!(&b[46..48], &[0xbc, 0x9a]);
        assert_eq!(&b[48..52], &[0x08, 0x07, 0x06, 0x05]);
        assert_eq!(&b[52..56], &[0x04, 0x03, 0x02, 0x01]);
        assert_eq!(&b[56..60], &[0x11, 0x00, 0x80, 0x02]);
        let back = GetLogPage::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap();
        assert_eq!(back, cmd);
        assert_eq!(back.length_bytes(), (0x1234_5678u64 + 1) * 4);
    }

    #[test]
    fn get_log_page_length_and_offset() {
        let max = GetLogPage { numd: u32::MAX, ..Default::default() };
        assert_eq!(max.length_bytes(), 1 << 34);
        let cmd = GetLogPage::new(lid::SMART_HEALTH_INFORMATION, NSID_BROADCAST, 512).unwrap();
        assert_eq!(cmd.numd, 127);
        assert_eq!(cmd.length_bytes(), 512);
        assert_eq!(cmd.offset().unwrap(), 0);
        assert_eq!(GetLogPage::new(1, 0, 1 << 34).unwrap().numd, u32::MAX);
        assert!(GetLogPage::new(1, 0, (1 << 34) + 4).is_err());
        assert!(GetLogPage::new(1, 0, 0).is_err());
        assert!(matches!(GetLogPage::new(1, 0, 6), Err(WireError::InvalidField { field: "numd", .. })));
        let odd = GetLogPage { lpo: 6, ..cmd };
        assert!(matches!(odd.offset(), Err(WireError::InvalidField { field: "lpol", value: 6, .. })));
        let index = GetLogPage { ot: true, ..cmd };
        assert!(matches!(index.offset(), Err(WireError::InvalidField { field: "ot", .. })));
        let huge = GetLogPage { lpo: u64::MAX - 3, ..cmd };
        assert_eq!(huge.offset().unwrap(), u64::MAX - 3);
        assert!(GetLogPage::from_sqe(&SubmissionQueueEntry::new(opcode::admin::IDENTIFY)).is_err());
    }

    #[test]
    fn log_page_window_copy() {
        let page: Vec<u8> = (1..=16).collect();
        let mut out = [0xffu8; 8];
        assert_eq!(copy_log_page_range(&page, 4, &mut out), 8);
        assert_eq!(out, [5, 6, 7, 8, 9, 10, 11, 12]);
        let mut out = [0xffu8; 8];
        assert_eq!(copy_log_page_range(&page, 12, &mut out), 4);
        assert_eq!(out, [13, 14, 15, 16, 0, 0, 0, 0]);
        let mut out = [0xffu8; 8];
        assert_eq!(copy_log_page_range(&page, 16, &mut out), 0);
        assert_eq!(out, [0; 8]);
        let mut out = [0xffu8; 8];
        assert_eq!(copy_log_page_range(&page, u64::MAX, &mut out), 0);
        assert_eq!(out, [0; 8]);

        let cmd = GetLogPage { lpo: 8, numd: 1, ..Default::default() };
        let mut out = [0xffu8; 16];
        assert_eq!(cmd.copy_page(&page, &mut out).unwrap(), 8);
        assert_eq!(&out[..8], &[9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(&out[8..], &[0xff; 8], "bytes past the requested length are left alone");
        assert!(GetLogPage { lpo: 2, ..cmd }.copy_page(&page, &mut out).is_err());
    }

    proptest! {
        #[test]
        fn get_log_page_round_trip(
            nsid in any::<u32>(), lid in any::<u8>(), lsp in 0u8..=LSP_MAX, rae in any::<bool>(), numd in any::<u32>(),
            lsi in any::<u16>(), lpo in any::<u64>(), uuid_index in 0u8..0x80, ot in any::<bool>(), csi in any::<u8>(),
        ) {
            let cmd = GetLogPage { nsid, lid, lsp, rae, numd, lsi, lpo, uuid_index, ot, csi };
            prop_assert_eq!(GetLogPage::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
        }

        #[test]
        fn get_log_page_from_any_sqe(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let mut sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            sqe.opcode = opcode::admin::GET_LOG_PAGE;
            let cmd = GetLogPage::from_sqe(&sqe).unwrap();
            prop_assert_eq!(GetLogPage::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
            let _ = cmd.offset();
            prop_assert!(cmd.length_bytes() >= 4);
        }

        #[test]
        fn window_copy_never_panics(page_len in 0usize..600, offset in any::<u64>(), out_len in 0usize..700) {
            let page = vec![0x5au8; page_len];
            let mut out = vec![0xffu8; out_len];
            let n = copy_log_page_range(&page, offset, &mut out);
            prop_assert!(n <= out_len && out[..n].iter().all(|&c| c == 0x5a) && out[n..].iter().all(|&c| c == 0));
        }
    }
}
