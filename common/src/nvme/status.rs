//! Completion status (NVMe Base 2.0 §4.6.1, Figure 94 "Status Field"): status code type (SCT), status
//! code (SC), command retry delay (CRD), more (M) and do not retry (DNR), with names for every status the
//! target and host use.

use std::fmt;

/// Status Code Type (SCT), bits 11:9 of the status field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum StatusCodeType {
    /// Generic Command Status.
    Generic = 0,
    /// Command Specific Status (this is also where fabrics statuses live).
    CommandSpecific = 1,
    /// Media and Data Integrity Errors.
    MediaError = 2,
    /// Path Related Status.
    Path = 3,
    /// Reserved values 4..=6.
    Reserved4 = 4,
    /// Reserved.
    Reserved5 = 5,
    /// Reserved.
    Reserved6 = 6,
    /// Vendor Specific.
    VendorSpecific = 7,
}

impl StatusCodeType {
    fn from_bits(v: u16) -> Self {
        match v & 0x7 {
            0 => Self::Generic,
            1 => Self::CommandSpecific,
            2 => Self::MediaError,
            3 => Self::Path,
            4 => Self::Reserved4,
            5 => Self::Reserved5,
            6 => Self::Reserved6,
            _ => Self::VendorSpecific,
        }
    }
}

/// The 15-bit Status Field of a completion queue entry (bits 31:17 of dword 3), without the phase tag.
///
/// Layout of the value held: SC bits 7:0, SCT bits 10:8, CRD bits 12:11, M bit 13, DNR bit 14.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(u16);

macro_rules! statuses {
    ($( $(#[$doc:meta])* $name:ident = ($sct:ident, $sc:expr) ),* $(,)?) => {
        impl Status {
            $( $(#[$doc])* pub const $name: Status = Status::new(StatusCodeType::$sct, $sc); )*
        }
        /// The spec's name for a status, for logs; `None` for codes this crate does not name.
        fn status_name(s: Status) -> Option<&'static str> {
            $( if s.sct() == StatusCodeType::$sct && s.sc() == $sc { return Some(stringify!($name)); } )*
            None
        }
    };
}

statuses! {
    /// Successful Completion.
    SUCCESS = (Generic, 0x00),
    /// Invalid Command Opcode.
    INVALID_OPCODE = (Generic, 0x01),
    /// Invalid Field in Command.
    INVALID_FIELD = (Generic, 0x02),
    /// Command ID Conflict.
    COMMAND_ID_CONFLICT = (Generic, 0x03),
    /// Data Transfer Error.
    DATA_TRANSFER_ERROR = (Generic, 0x04),
    /// Commands Aborted due to Power Loss Notification.
    ABORTED_POWER_LOSS = (Generic, 0x05),
    /// Internal Error.
    INTERNAL_ERROR = (Generic, 0x06),
    /// Command Abort Requested.
    ABORT_REQUESTED = (Generic, 0x07),
    /// Command Aborted due to SQ Deletion.
    ABORTED_SQ_DELETION = (Generic, 0x08),
    /// Command Aborted due to Failed Fused Command (the other command of a fused operation failed).
    ABORTED_FAILED_FUSED = (Generic, 0x09),
    /// Command Aborted due to Missing Fused Command (a fused operation's other command is not next to it).
    ABORTED_MISSING_FUSED = (Generic, 0x0A),
    /// Invalid Namespace or Format.
    INVALID_NAMESPACE = (Generic, 0x0B),
    /// Command Sequence Error.
    COMMAND_SEQUENCE_ERROR = (Generic, 0x0C),
    /// Invalid SGL Segment Descriptor.
    INVALID_SGL_SEGMENT_DESCRIPTOR = (Generic, 0x0D),
    /// Invalid Number of SGL Descriptors.
    INVALID_NUMBER_OF_SGL_DESCRIPTORS = (Generic, 0x0E),
    /// Data SGL Length Invalid.
    DATA_SGL_LENGTH_INVALID = (Generic, 0x0F),
    /// Metadata SGL Length Invalid.
    METADATA_SGL_LENGTH_INVALID = (Generic, 0x10),
    /// SGL Descriptor Type Invalid.
    SGL_DESCRIPTOR_TYPE_INVALID = (Generic, 0x11),
    /// Atomic Write Unit Exceeded (a Compare and Write longer than the namespace does atomically).
    ATOMIC_WRITE_UNIT_EXCEEDED = (Generic, 0x14),
    /// SGL Offset Invalid.
    SGL_OFFSET_INVALID = (Generic, 0x16),
    /// Host Identifier Inconsistent Format.
    HOST_IDENTIFIER_INCONSISTENT_FORMAT = (Generic, 0x18),
    /// Keep Alive Timer Expired.
    KEEP_ALIVE_TIMER_EXPIRED = (Generic, 0x19),
    /// Keep Alive Timeout Invalid.
    KEEP_ALIVE_TIMEOUT_INVALID = (Generic, 0x1A),
    /// Namespace is Write Protected.
    NAMESPACE_WRITE_PROTECTED = (Generic, 0x20),
    /// Command Interrupted.
    COMMAND_INTERRUPTED = (Generic, 0x21),
    /// Transient Transport Error.
    TRANSIENT_TRANSPORT_ERROR = (Generic, 0x22),
    /// LBA Out of Range (NVM command set).
    LBA_OUT_OF_RANGE = (Generic, 0x80),
    /// Capacity Exceeded.
    CAPACITY_EXCEEDED = (Generic, 0x81),
    /// Namespace Not Ready.
    NAMESPACE_NOT_READY = (Generic, 0x82),
    /// Reservation Conflict.
    RESERVATION_CONFLICT = (Generic, 0x83),

    /// Invalid Queue Identifier.
    INVALID_QUEUE_IDENTIFIER = (CommandSpecific, 0x01),
    /// Invalid Queue Size.
    INVALID_QUEUE_SIZE = (CommandSpecific, 0x02),
    /// Abort Command Limit Exceeded.
    ABORT_COMMAND_LIMIT_EXCEEDED = (CommandSpecific, 0x03),
    /// Asynchronous Event Request Limit Exceeded.
    ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED = (CommandSpecific, 0x05),
    /// Invalid Log Page.
    INVALID_LOG_PAGE = (CommandSpecific, 0x09),
    /// Feature Identifier Not Saveable.
    FEATURE_NOT_SAVEABLE = (CommandSpecific, 0x0D),
    /// Feature Not Changeable.
    FEATURE_NOT_CHANGEABLE = (CommandSpecific, 0x0E),
    /// Feature Not Namespace Specific.
    FEATURE_NOT_NAMESPACE_SPECIFIC = (CommandSpecific, 0x0F),
    /// Insufficient Capacity (a reservation registrant the namespace has no room for, among others).
    INSUFFICIENT_CAPACITY = (CommandSpecific, 0x26),
    /// Fabrics Connect: Incompatible Format (also NVM "Conflicting Attributes" for I/O commands).
    CONNECT_INCOMPATIBLE_FORMAT = (CommandSpecific, 0x80),
    /// Fabrics Connect: Controller Busy.
    CONNECT_CONTROLLER_BUSY = (CommandSpecific, 0x81),
    /// Fabrics Connect: Connect Invalid Parameters.
    CONNECT_INVALID_PARAMETERS = (CommandSpecific, 0x82),
    /// Fabrics Connect: Connect Restart Discovery.
    CONNECT_RESTART_DISCOVERY = (CommandSpecific, 0x83),
    /// Fabrics Connect: Connect Invalid Host.
    CONNECT_INVALID_HOST = (CommandSpecific, 0x84),
    /// Fabrics: Invalid Queue Type.
    INVALID_QUEUE_TYPE = (CommandSpecific, 0x85),
    /// Fabrics: Discover Restart (log page changed while being read).
    DISCOVER_RESTART = (CommandSpecific, 0x90),
    /// Fabrics: Authentication Required.
    AUTHENTICATION_REQUIRED = (CommandSpecific, 0x91),

    /// Write Fault.
    WRITE_FAULT = (MediaError, 0x80),
    /// Unrecovered Read Error.
    UNRECOVERED_READ_ERROR = (MediaError, 0x81),
    /// Compare Failure.
    COMPARE_FAILURE = (MediaError, 0x85),
    /// Access Denied.
    ACCESS_DENIED = (MediaError, 0x86),
    /// Deallocated or Unwritten Logical Block.
    DEALLOCATED_OR_UNWRITTEN_BLOCK = (MediaError, 0x87),

    /// Internal Path Error.
    INTERNAL_PATH_ERROR = (Path, 0x00),
    /// Asymmetric Access Persistent Loss.
    ANA_PERSISTENT_LOSS = (Path, 0x01),
    /// Asymmetric Access Inaccessible.
    ANA_INACCESSIBLE = (Path, 0x02),
    /// Asymmetric Access Transition.
    ANA_TRANSITION = (Path, 0x03),
    /// Host Pathing Error.
    HOST_PATHING_ERROR = (Path, 0x70),
    /// Command Aborted By Host.
    ABORTED_BY_HOST = (Path, 0x71),
}

impl Status {
    const DNR: u16 = 1 << 14;
    const MORE: u16 = 1 << 13;

    /// A status with the given type and code; CRD, M and DNR clear.
    pub const fn new(sct: StatusCodeType, sc: u8) -> Self {
        Status(((sct as u16) << 8) | sc as u16)
    }

    /// From the 15-bit status field (CQE dword 3 bits 31:17, already shifted down by 17).
    pub const fn from_field(field: u16) -> Self {
        Status(field & 0x7fff)
    }

    /// The 15-bit status field value.
    pub const fn field(self) -> u16 {
        self.0
    }

    /// Status Code Type.
    pub fn sct(self) -> StatusCodeType {
        StatusCodeType::from_bits(self.0 >> 8)
    }

    /// Status Code.
    pub const fn sc(self) -> u8 {
        (self.0 & 0xff) as u8
    }

    /// Command Retry Delay index (0..=3).
    pub const fn crd(self) -> u8 {
        ((self.0 >> 11) & 0x3) as u8
    }

    /// More: further information is in the Error Information log page.
    pub const fn more(self) -> bool {
        self.0 & Self::MORE != 0
    }

    /// Do Not Retry.
    pub const fn dnr(self) -> bool {
        self.0 & Self::DNR != 0
    }

    /// The same status with Do Not Retry set.
    pub const fn with_dnr(self) -> Self {
        Status(self.0 | Self::DNR)
    }

    /// The same status with More set.
    pub const fn with_more(self) -> Self {
        Status(self.0 | Self::MORE)
    }

    /// True for Successful Completion (whatever CRD/M/DNR say).
    pub const fn is_success(self) -> bool {
        self.0 & 0x7ff == 0
    }

    /// Compare type and code only, ignoring CRD, M and DNR.
    pub const fn same_code(self, other: Status) -> bool {
        self.0 & 0x7ff == other.0 & 0x7ff
    }

    /// The spec's name of this status (e.g. `LBA_OUT_OF_RANGE`), if this crate names it.
    pub fn name(self) -> Option<&'static str> {
        status_name(Status(self.0 & 0x7ff))
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}")?,
            None => write!(f, "sct {:#x} sc {:#04x}", self.sct() as u8, self.sc())?,
        }
        if self.dnr() {
            f.write_str(" (DNR)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_layout_matches_spec() {
        // Kernel: NVME_SC_LBA_RANGE 0x80, NVME_SCT_CMD_SPECIFIC 0x100, NVME_SC_DNR 0x4000 (status >> 1).
        assert_eq!(Status::LBA_OUT_OF_RANGE.field(), 0x080);
        assert_eq!(Status::CONNECT_INVALID_HOST.field(), 0x184);
        assert_eq!(Status::COMPARE_FAILURE.field(), 0x285);
        assert_eq!(Status::INVALID_FIELD.with_dnr().field(), 0x4002);
        assert_eq!(Status::HOST_PATHING_ERROR.field(), 0x370);
        let s = Status::from_field(0x7fff);
        assert_eq!(s.sct(), StatusCodeType::VendorSpecific);
        assert_eq!(s.sc(), 0xff);
        assert_eq!(s.crd(), 3);
        assert!(s.more() && s.dnr());
    }

    #[test]
    fn names_and_display() {
        assert_eq!(Status::INVALID_NAMESPACE.with_dnr().to_string(), "INVALID_NAMESPACE (DNR)");
        assert_eq!(Status::new(StatusCodeType::VendorSpecific, 0xc1).to_string(), "sct 0x7 sc 0xc1");
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::INVALID_OPCODE.is_success());
        assert!(Status::INVALID_OPCODE.with_dnr().same_code(Status::INVALID_OPCODE));
    }
}
