//! The remaining admin commands: Keep Alive, Asynchronous Event Request (with the completion dword 0 encoding of an
//! asynchronous event) and Abort.
//!
//! NVMe Base 2.0 §5.25 (Keep Alive), §5.2 (Asynchronous Event Request, Figures 145–151) and §5.1
//! (Abort, Figures 141–143). Values were checked against Linux `include/linux/nvme.h`
//! (`NVME_AER_*`, `NVME_AER_NOTICE_*`, `struct nvme_abort_cmd`).

use super::log_page::lid;
use super::opcode;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{high_half, low_half, WireError};

const KEEP_ALIVE: &str = "KeepAlive";
const ASYNC_EVENT_REQUEST: &str = "AsyncEventRequest";
const ASYNC_EVENT: &str = "AsyncEvent";
const ABORT: &str = "Abort";

/// The Keep Alive command (Base 2.0 §5.25): no command specific fields. Any command resets the
/// keep-alive timer over fabrics with Traffic Based Keep Alive; this one exists only for that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeepAlive;

impl KeepAlive {
    /// The view of a Keep Alive SQE. Errors if the opcode is not Keep Alive.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::KEEP_ALIVE, KEEP_ALIVE, "0x18 (Keep Alive)")?;
        Ok(KeepAlive)
    }

    /// The SQE for this command (CID left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        SubmissionQueueEntry::new(opcode::admin::KEEP_ALIVE)
    }
}

/// The Asynchronous Event Request command (Base 2.0 §5.2): no command specific fields. The
/// controller holds it until an event occurs and completes it with an [`AsyncEvent`] in dword 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AsyncEventRequest;

impl AsyncEventRequest {
    /// The view of an Asynchronous Event Request SQE. Errors if the opcode is not 0x0C.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(
            opcode::admin::ASYNC_EVENT_REQUEST,
            ASYNC_EVENT_REQUEST,
            "0x0C (Asynchronous Event Request)",
        )?;
        Ok(AsyncEventRequest)
    }

    /// The SQE for this command (CID left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        SubmissionQueueEntry::new(opcode::admin::ASYNC_EVENT_REQUEST)
    }
}

/// Asynchronous Event Type (completion dword 0 bits 2:0; Base 2.0 Figure 146, Linux `NVME_AER_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEventType {
    /// 000b: Error status.
    Error = 0,
    /// 001b: SMART / Health status.
    SmartHealth = 1,
    /// 010b: Notice.
    Notice = 2,
    /// 110b: I/O Command Set specific status.
    IoCommandSetSpecific = 6,
    /// 111b: Vendor specific.
    VendorSpecific = 7,
}

/// An asynchronous event as carried in dword 0 of the Asynchronous Event Request completion
/// (Base 2.0 Figure 145): event type in bits 2:0, event information in bits 15:8, and the log page
/// the host reads (clearing the event) in bits 23:16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Asynchronous Event Type.
    pub event_type: AsyncEventType,
    /// Asynchronous Event Information (meaning depends on the type, Figures 147–151).
    pub event_info: u8,
    /// Log Page Identifier the host reads to clear the event.
    pub log_page: u8,
}

impl AsyncEvent {
    /// Notice: Namespace Attribute Changed (information 00h, Changed Namespace List log 04h).
    pub const NAMESPACE_ATTRIBUTE_CHANGED: AsyncEvent =
        AsyncEvent { event_type: AsyncEventType::Notice, event_info: 0x00, log_page: lid::CHANGED_NAMESPACE_LIST };
    /// Notice: Firmware Activation Starting (information 01h, Firmware Slot Information log 03h).
    pub const FIRMWARE_ACTIVATION_STARTING: AsyncEvent =
        AsyncEvent { event_type: AsyncEventType::Notice, event_info: 0x01, log_page: lid::FIRMWARE_SLOT_INFORMATION };
    /// Notice: Asymmetric Namespace Access Change (information 03h, ANA log 0Ch).
    pub const ANA_CHANGE: AsyncEvent =
        AsyncEvent { event_type: AsyncEventType::Notice, event_info: 0x03, log_page: lid::ASYMMETRIC_NAMESPACE_ACCESS };
    /// I/O Command Set specific: Reservation Log Page Available (information 00h, Reservation Notification log
    /// 80h).
    pub const RESERVATION_LOG_PAGE_AVAILABLE: AsyncEvent = AsyncEvent {
        event_type: AsyncEventType::IoCommandSetSpecific,
        event_info: 0x00,
        log_page: lid::RESERVATION_NOTIFICATION,
    };
    /// Notice: Discovery Log Page Change (information F0h, Discovery log 70h).
    pub const DISCOVERY_LOG_PAGE_CHANGE: AsyncEvent =
        AsyncEvent { event_type: AsyncEventType::Notice, event_info: 0xF0, log_page: lid::DISCOVERY };

    /// Completion dword 0 for this event.
    pub fn to_dw0(&self) -> u32 {
        (self.event_type as u32) | (u32::from(self.event_info) << 8) | (u32::from(self.log_page) << 16)
    }

    /// The event in completion dword 0. Errors on a reserved event type (3..=5); reserved bits 7:3 and
    /// 31:24 are ignored.
    pub fn from_dw0(dw0: u32) -> Result<Self, WireError> {
        let [type_byte, event_info, log_page, _] = dw0.to_le_bytes();
        let event_type = match type_byte & 0x7 {
            0 => AsyncEventType::Error,
            1 => AsyncEventType::SmartHealth,
            2 => AsyncEventType::Notice,
            6 => AsyncEventType::IoCommandSetSpecific,
            7 => AsyncEventType::VendorSpecific,
            other => {
                return Err(WireError::invalid(ASYNC_EVENT, "event_type", other, "0, 1, 2, 6 or 7"));
            }
        };
        Ok(AsyncEvent { event_type, event_info, log_page })
    }
}

/// The Abort command (Base 2.0 §5.1, Figure 141, Linux `struct nvme_abort_cmd`): Submission Queue
/// Identifier in CDW10 bits 15:0 and the Command Identifier to abort in CDW10 bits 31:16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Abort {
    /// Submission Queue Identifier of the command to abort.
    pub sqid: u16,
    /// Command Identifier of the command to abort.
    pub cid: u16,
}

impl Abort {
    /// The view of an Abort SQE. Errors if the opcode is not Abort.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::ABORT, ABORT, "0x08 (Abort)")?;
        Ok(Abort { sqid: low_half(sqe.cdw10), cid: high_half(sqe.cdw10) })
    }

    /// The SQE for this command (its own CID left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::ABORT);
        sqe.cdw10 = u32::from(self.sqid) | (u32::from(self.cid) << 16);
        sqe
    }
}

/// Dword 0 of a successful Abort completion (Base 2.0 Figure 143): bit 0 set means the command was
/// *not* aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AbortResult {
    /// The command was not aborted (IANP, bit 0).
    pub not_aborted: bool,
}

impl AbortResult {
    /// From completion dword 0 (bits 31:1 are reserved and ignored).
    pub fn from_dw0(dw0: u32) -> Self {
        AbortResult { not_aborted: dw0 & 1 != 0 }
    }

    /// Completion dword 0.
    pub fn to_dw0(&self) -> u32 {
        u32::from(self.not_aborted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keep_alive_and_aer_views() {
        assert_eq!(KeepAlive.to_sqe().opcode, 0x18);
        assert_eq!(KeepAlive::from_sqe(&KeepAlive.to_sqe()).unwrap(), KeepAlive);
        assert_eq!(AsyncEventRequest.to_sqe().opcode, 0x0c);
        assert_eq!(AsyncEventRequest::from_sqe(&AsyncEventRequest.to_sqe()).unwrap(), AsyncEventRequest);
        assert!(matches!(
            KeepAlive::from_sqe(&AsyncEventRequest.to_sqe()),
            Err(WireError::InvalidField { structure: "KeepAlive", field: "opcode", value: 0x0c, .. })
        ));
        assert!(AsyncEventRequest::from_sqe(&KeepAlive.to_sqe()).is_err());
    }

    #[test]
    fn async_event_dword_layout() {
        // Linux: NVME_AER_NOTICE 2, NVME_AER_NOTICE_NS_CHANGED 0x00 with NVME_LOG_CHANGED_NS 0x04,
        // NVME_AER_NOTICE_DISC_CHANGED 0xf0 with NVME_LOG_DISC 0x70.
        assert_eq!(AsyncEvent::NAMESPACE_ATTRIBUTE_CHANGED.to_dw0(), 0x0004_0002);
        assert_eq!(AsyncEvent::DISCOVERY_LOG_PAGE_CHANGE.to_dw0(), 0x0070_f002);
        assert_eq!(AsyncEvent::ANA_CHANGE.to_dw0(), 0x000c_0302);
        let e = AsyncEvent { event_type: AsyncEventType::VendorSpecific, event_info: 0xab, log_page: 0xcd };
        assert_eq!(e.to_dw0().to_le_bytes(), [0x07, 0xab, 0xcd, 0x00]);
        assert_eq!(AsyncEvent::from_dw0(0xff00_0000 | e.to_dw0() | 0xf8).unwrap(), e);
        for (bits, t) in [
            (0, AsyncEventType::Error),
            (1, AsyncEventType::SmartHealth),
            (2, AsyncEventType::Notice),
            (6, AsyncEventType::IoCommandSetSpecific),
            (7, AsyncEventType::VendorSpecific),
        ] {
            assert_eq!(AsyncEvent::from_dw0(bits).unwrap().event_type, t);
        }
        for reserved in 3..=5u32 {
            assert!(matches!(AsyncEvent::from_dw0(reserved), Err(WireError::InvalidField { field: "event_type", .. })));
        }
    }

    #[test]
    fn abort_layout() {
        // Linux struct nvme_abort_cmd: sqid at byte 40, cid at byte 42.
        let a = Abort { sqid: 0x0201, cid: 0x0403 };
        let b = a.to_sqe().to_bytes();
        assert_eq!(b[0], 0x08);
        assert_eq!(&b[40..44], &[1, 2, 3, 4]);
        assert_eq!(Abort::from_sqe(&a.to_sqe()).unwrap(), a);
        assert!(Abort::from_sqe(&KeepAlive.to_sqe()).is_err());
        assert_eq!(AbortResult { not_aborted: true }.to_dw0(), 1);
        assert!(AbortResult::from_dw0(0xffff_ffff).not_aborted);
        assert!(!AbortResult::from_dw0(0xffff_fffe).not_aborted);
    }

    proptest! {
        #[test]
        fn async_event_round_trip(dw0 in any::<u32>()) {
            if let Ok(e) = AsyncEvent::from_dw0(dw0) {
                prop_assert_eq!(e.to_dw0(), dw0 & 0x00ff_ff07);
                prop_assert_eq!(AsyncEvent::from_dw0(e.to_dw0()).unwrap(), e);
            } else {
                prop_assert!((3..=5).contains(&(dw0 & 7)));
            }
        }

        #[test]
        fn abort_round_trip(sqid in any::<u16>(), cid in any::<u16>(), bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let a = Abort { sqid, cid };
            prop_assert_eq!(Abort::from_sqe(&a.to_sqe()).unwrap(), a);
            let mut sqe = crate::nvme::SubmissionQueueEntry::parse(&bytes).unwrap();
            sqe.opcode = opcode::admin::ABORT;
            let parsed = Abort::from_sqe(&sqe).unwrap();
            prop_assert_eq!(parsed.to_sqe().cdw10, sqe.cdw10);
        }
    }
}
