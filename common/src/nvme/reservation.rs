//! Reservations on the wire (NVMe Base 2.0 §8.19 "Reservations" and its I/O commands in §7): the Reservation
//! Register (0Dh), Report (0Eh), Acquire (11h) and Release (15h) commands, their data structures, the
//! Reservation Status data structure in both formats (regular, 8-byte host IDs; extended, 128-bit host IDs) and
//! the Reservation Notification log page (LID 80h).
//!
//! | command | cdw10 | data |
//! |---|---|---|
//! | Register | RREGA 2:0, IEKEY 3, CPTPL 31:30 | CRKEY 7:0, NRKEY 15:8 (host to controller) |
//! | Acquire | RACQA 2:0, IEKEY 3, RTYPE 15:8 | CRKEY 7:0, PRKEY 15:8 (host to controller) |
//! | Release | RRELA 2:0, IEKEY 3, RTYPE 15:8 | CRKEY 7:0 (host to controller) |
//! | Report | NUMD (0's based dwords) 31:0; cdw11 EDS bit 0 | Reservation Status (controller to host) |
//!
//! Parsing takes any bytes (hostile) and never panics; encoding writes into caller buffers.

use super::opcode::io as op;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{fixed, le16, le32, le64, put16, put32, put64, WireError};

/// Register, Acquire and Release data: the current reservation key, then (Register, Acquire) the second key.
pub const REGISTER_DATA_SIZE: usize = 16;
/// Acquire data size.
pub const ACQUIRE_DATA_SIZE: usize = 16;
/// Release data size.
pub const RELEASE_DATA_SIZE: usize = 8;
/// The Reservation Status header (regular format).
pub const STATUS_HEADER_SIZE: usize = 24;
/// The Reservation Status header (extended format).
pub const STATUS_EXT_HEADER_SIZE: usize = 64;
/// A Registered Controller data structure (regular format).
pub const REGISTERED_CONTROLLER_SIZE: usize = 24;
/// A Registered Controller Extended data structure.
pub const REGISTERED_CONTROLLER_EXT_SIZE: usize = 64;
/// The Reservation Notification log page.
pub const NOTIFICATION_LOG_SIZE: usize = 64;
/// The controller ID reported for registrants of a dynamic controller model subsystem (as Linux nvmet: FFFFh).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// IEKEY, bit 3 of cdw10 in Register, Acquire and Release.
const IEKEY: u32 = 1 << 3;

/// True for the four reservation opcodes.
pub fn is_reservation_opcode(opcode: u8) -> bool {
    matches!(
        opcode,
        op::RESERVATION_REGISTER | op::RESERVATION_REPORT | op::RESERVATION_ACQUIRE | op::RESERVATION_RELEASE
    )
}

/// Reservation Type (RTYPE; Base 2.0 Figure "Reservation Type Encoding").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReservationType {
    /// 1h: Write Exclusive.
    WriteExclusive = 1,
    /// 2h: Exclusive Access.
    ExclusiveAccess = 2,
    /// 3h: Write Exclusive - Registrants Only.
    WriteExclusiveRegistrantsOnly = 3,
    /// 4h: Exclusive Access - Registrants Only.
    ExclusiveAccessRegistrantsOnly = 4,
    /// 5h: Write Exclusive - All Registrants.
    WriteExclusiveAllRegistrants = 5,
    /// 6h: Exclusive Access - All Registrants.
    ExclusiveAccessAllRegistrants = 6,
}

impl ReservationType {
    /// Every type, in encoding order.
    pub const ALL: [ReservationType; 6] = [
        ReservationType::WriteExclusive,
        ReservationType::ExclusiveAccess,
        ReservationType::WriteExclusiveRegistrantsOnly,
        ReservationType::ExclusiveAccessRegistrantsOnly,
        ReservationType::WriteExclusiveAllRegistrants,
        ReservationType::ExclusiveAccessAllRegistrants,
    ];

    /// The type encoded `value`, or `None` for 0 and reserved values.
    pub fn from_u8(value: u8) -> Option<Self> {
        Self::ALL.get(usize::from(value).checked_sub(1)?).copied()
    }

    /// The encoding.
    pub fn to_u8(self) -> u8 {
        self as u8
    }

    /// Every registrant is a reservation holder (the All Registrants types).
    pub fn all_registrants(self) -> bool {
        matches!(self, Self::WriteExclusiveAllRegistrants | Self::ExclusiveAccessAllRegistrants)
    }

    /// Registrants (not only the holder) have access (Registrants Only and All Registrants types).
    pub fn registrants_have_access(self) -> bool {
        !matches!(self, Self::WriteExclusive | Self::ExclusiveAccess)
    }

    /// Hosts without access may not read either (the Exclusive Access types).
    pub fn exclusive_access(self) -> bool {
        matches!(
            self,
            Self::ExclusiveAccess | Self::ExclusiveAccessRegistrantsOnly | Self::ExclusiveAccessAllRegistrants
        )
    }
}

fn rtype_of(cdw10: u32, structure: &'static str) -> Result<ReservationType, WireError> {
    let value = crate::wire::low_byte(cdw10 >> 8);
    ReservationType::from_u8(value).ok_or_else(|| WireError::invalid(structure, "rtype", value, "1..=6"))
}

/// Reservation Register Action (RREGA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterAction {
    /// 000b: register a reservation key.
    Register,
    /// 001b: unregister.
    Unregister,
    /// 010b: replace the reservation key.
    Replace,
}

/// Change Persist Through Power Loss State (CPTPL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cptpl {
    /// 00b: no change.
    NoChange,
    /// 10b: reservations are released and registrants cleared on a power loss (PTPL off).
    Clear,
    /// 11b: reservations and registrants persist across a power loss (PTPL on).
    Persist,
}

/// Reservation Register (opcode 0Dh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationRegister {
    /// Namespace.
    pub nsid: u32,
    /// What to do.
    pub action: RegisterAction,
    /// Ignore Existing Key.
    pub iekey: bool,
    /// Change Persist Through Power Loss State.
    pub cptpl: Cptpl,
}

impl ReservationRegister {
    /// The view of a Reservation Register SQE. Reserved actions and CPTPL 01b are Invalid Field.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        const S: &str = "ReservationRegister";
        sqe.expect_opcode(op::RESERVATION_REGISTER, S, "0x0D (Reservation Register)")?;
        let action = match sqe.cdw10 & 0b111 {
            0 => RegisterAction::Register,
            1 => RegisterAction::Unregister,
            2 => RegisterAction::Replace,
            other => return Err(WireError::invalid(S, "rrega", other, "0..=2")),
        };
        let cptpl = match sqe.cdw10 >> 30 {
            0 => Cptpl::NoChange,
            2 => Cptpl::Clear,
            3 => Cptpl::Persist,
            other => return Err(WireError::invalid(S, "cptpl", other, "0, 2 or 3")),
        };
        Ok(ReservationRegister { nsid: sqe.nsid, action, iekey: sqe.cdw10 & IEKEY != 0, cptpl })
    }

    /// The SQE (CID and data pointer left to the caller).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(op::RESERVATION_REGISTER);
        sqe.nsid = self.nsid;
        let action = match self.action {
            RegisterAction::Register => 0,
            RegisterAction::Unregister => 1,
            RegisterAction::Replace => 2,
        };
        let cptpl = match self.cptpl {
            Cptpl::NoChange => 0,
            Cptpl::Clear => 2u32,
            Cptpl::Persist => 3,
        };
        sqe.cdw10 = action | if self.iekey { IEKEY } else { 0 } | cptpl << 30;
        sqe
    }
}

/// Two reservation keys: Register's CRKEY and NRKEY, Acquire's CRKEY and PRKEY, Release's CRKEY (second 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationKeys {
    /// Current Reservation Key (bytes 7:0).
    pub crkey: u64,
    /// New (Register) or Preempt (Acquire) Reservation Key (bytes 15:8); none in Release.
    pub second: u64,
}

impl ReservationKeys {
    /// Parse Register or Acquire data (16 bytes).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<16>(buf, "ReservationKeys")?;
        Ok(ReservationKeys { crkey: le64(b, 0), second: le64(b, 8) })
    }

    /// Parse Release data (8 bytes).
    pub fn parse_release(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<8>(buf, "ReservationReleaseData")?;
        Ok(ReservationKeys { crkey: le64(b, 0), second: 0 })
    }

    /// The 16-byte Register or Acquire data.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        put64(&mut b, 0, self.crkey);
        put64(&mut b, 8, self.second);
        b
    }
}

/// Reservation Acquire Action (RACQA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireAction {
    /// 000b: acquire.
    Acquire,
    /// 001b: preempt.
    Preempt,
    /// 010b: preempt and abort.
    PreemptAndAbort,
}

/// Reservation Acquire (opcode 11h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationAcquire {
    /// Namespace.
    pub nsid: u32,
    /// What to do.
    pub action: AcquireAction,
    /// Ignore Existing Key.
    pub iekey: bool,
    /// The reservation type to acquire.
    pub rtype: ReservationType,
}

impl ReservationAcquire {
    /// The view of a Reservation Acquire SQE. Reserved actions and types are Invalid Field.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        const S: &str = "ReservationAcquire";
        sqe.expect_opcode(op::RESERVATION_ACQUIRE, S, "0x11 (Reservation Acquire)")?;
        let action = match sqe.cdw10 & 0b111 {
            0 => AcquireAction::Acquire,
            1 => AcquireAction::Preempt,
            2 => AcquireAction::PreemptAndAbort,
            other => return Err(WireError::invalid(S, "racqa", other, "0..=2")),
        };
        Ok(ReservationAcquire { nsid: sqe.nsid, action, iekey: sqe.cdw10 & IEKEY != 0, rtype: rtype_of(sqe.cdw10, S)? })
    }

    /// The SQE (CID and data pointer left to the caller).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(op::RESERVATION_ACQUIRE);
        sqe.nsid = self.nsid;
        let action = match self.action {
            AcquireAction::Acquire => 0,
            AcquireAction::Preempt => 1,
            AcquireAction::PreemptAndAbort => 2,
        };
        sqe.cdw10 = action | if self.iekey { IEKEY } else { 0 } | u32::from(self.rtype.to_u8()) << 8;
        sqe
    }
}

/// Reservation Release Action (RRELA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseAction {
    /// 000b: release the reservation.
    Release,
    /// 001b: clear the reservation and every registration.
    Clear,
}

/// Reservation Release (opcode 15h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationRelease {
    /// Namespace.
    pub nsid: u32,
    /// What to do.
    pub action: ReleaseAction,
    /// Ignore Existing Key.
    pub iekey: bool,
    /// The type of the reservation released, as encoded (checked against the reservation held, not here:
    /// Clear ignores it).
    pub rtype: u8,
}

impl ReservationRelease {
    /// The view of a Reservation Release SQE. Reserved actions are Invalid Field.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(op::RESERVATION_RELEASE, "ReservationRelease", "0x15 (Reservation Release)")?;
        let action = match sqe.cdw10 & 0b111 {
            0 => ReleaseAction::Release,
            1 => ReleaseAction::Clear,
            other => return Err(WireError::invalid("ReservationRelease", "rrela", other, "0..=1")),
        };
        Ok(ReservationRelease {
            nsid: sqe.nsid,
            action,
            iekey: sqe.cdw10 & IEKEY != 0,
            rtype: crate::wire::low_byte(sqe.cdw10 >> 8),
        })
    }

    /// The SQE (CID and data pointer left to the caller).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(op::RESERVATION_RELEASE);
        sqe.nsid = self.nsid;
        let action = match self.action {
            ReleaseAction::Release => 0,
            ReleaseAction::Clear => 1,
        };
        sqe.cdw10 = action | if self.iekey { IEKEY } else { 0 } | u32::from(self.rtype) << 8;
        sqe
    }
}

/// Reservation Report (opcode 0Eh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationReport {
    /// Namespace.
    pub nsid: u32,
    /// Number of Dwords, 0's based.
    pub numd: u32,
    /// Extended Data Structure (128-bit host identifiers).
    pub eds: bool,
}

impl ReservationReport {
    /// The view of a Reservation Report SQE.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(op::RESERVATION_REPORT, "ReservationReport", "0x0E (Reservation Report)")?;
        Ok(ReservationReport { nsid: sqe.nsid, numd: sqe.cdw10, eds: sqe.cdw11 & 1 != 0 })
    }

    /// Bytes the host asks for: (NUMD + 1) × 4, without overflow.
    pub fn length_bytes(&self) -> u64 {
        (u64::from(self.numd) + 1) * 4
    }

    /// The SQE (CID and data pointer left to the caller).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(op::RESERVATION_REPORT);
        sqe.nsid = self.nsid;
        sqe.cdw10 = self.numd;
        sqe.cdw11 = u32::from(self.eds);
        sqe
    }
}

/// One registrant as Reservation Report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisteredController {
    /// Controller ID (FFFFh: dynamic controller model).
    pub cntlid: u16,
    /// Reservation Status bit 0: this registrant holds the reservation.
    pub holds: bool,
    /// Host Identifier (the regular format carries only the first 8 bytes).
    pub hostid: [u8; 16],
    /// Reservation key.
    pub rkey: u64,
}

/// The Reservation Status data structure (Reservation Report's data).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReservationStatus {
    /// Generation: bumped by register, unregister, replace, preempt and clear.
    pub generation: u32,
    /// The reservation type held (0: none).
    pub rtype: u8,
    /// Persist Through Power Loss State.
    pub ptpls: bool,
    /// The registrants.
    pub registrants: Vec<RegisteredController>,
}

impl ReservationStatus {
    /// Encode into `out` in the extended (`eds`) or regular format, as far as `out` reaches: the header says how
    /// many registrants there are even when `out` holds fewer. Returns the full length of the structure.
    pub fn encode(&self, eds: bool, out: &mut [u8]) -> usize {
        let (header, entry) = if eds {
            (STATUS_EXT_HEADER_SIZE, REGISTERED_CONTROLLER_EXT_SIZE)
        } else {
            (STATUS_HEADER_SIZE, REGISTERED_CONTROLLER_SIZE)
        };
        let full = header + entry * self.registrants.len();
        let mut page = vec![0u8; full];
        put32(&mut page, 0, self.generation);
        page[4] = self.rtype;
        put16(&mut page, 5, u16::try_from(self.registrants.len()).unwrap_or(u16::MAX));
        page[9] = u8::from(self.ptpls);
        for (i, r) in self.registrants.iter().enumerate() {
            let b = &mut page[header + i * entry..header + (i + 1) * entry];
            put16(b, 0, r.cntlid);
            b[2] = u8::from(r.holds);
            if eds {
                put64(b, 8, r.rkey);
                b[16..32].copy_from_slice(&r.hostid);
            } else {
                b[8..16].copy_from_slice(&r.hostid[..8]);
                put64(b, 16, r.rkey);
            }
        }
        let n = out.len().min(full);
        out[..n].copy_from_slice(&page[..n]);
        out[n..].fill(0);
        full
    }

    /// Parse a Reservation Status in the extended (`eds`) or regular format; registrants past the end of
    /// `buf` are left out (the host asked for fewer bytes).
    pub fn parse(buf: &[u8], eds: bool) -> Result<Self, WireError> {
        let (header, entry) = if eds {
            (STATUS_EXT_HEADER_SIZE, REGISTERED_CONTROLLER_EXT_SIZE)
        } else {
            (STATUS_HEADER_SIZE, REGISTERED_CONTROLLER_SIZE)
        };
        if buf.len() < header {
            return Err(WireError::Short { structure: "ReservationStatus", need: header, got: buf.len() });
        }
        let count = usize::from(le16(buf, 5));
        let registrants = buf[header..]
            .chunks_exact(entry)
            .take(count)
            .map(|b| {
                let mut hostid = [0u8; 16];
                let rkey = if eds {
                    hostid.copy_from_slice(&b[16..32]);
                    le64(b, 8)
                } else {
                    hostid[..8].copy_from_slice(&b[8..16]);
                    le64(b, 16)
                };
                RegisteredController { cntlid: le16(b, 0), holds: b[2] & 1 != 0, hostid, rkey }
            })
            .collect();
        Ok(ReservationStatus { generation: le32(buf, 0), rtype: buf[4], ptpls: buf[9] & 1 != 0, registrants })
    }

    /// The number of registrants the header announces (which may exceed those parsed).
    pub fn announced_registrants(buf: &[u8]) -> Option<u16> {
        (buf.len() >= 7).then(|| le16(buf, 5))
    }
}

/// Reservation Notification log page type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationType {
    /// 0h: empty log page.
    Empty = 0,
    /// 1h: Registration Preempted.
    RegistrationPreempted = 1,
    /// 2h: Reservation Released.
    ReservationReleased = 2,
    /// 3h: Reservation Preempted.
    ReservationPreempted = 3,
}

impl NotificationType {
    /// Its bit in the Reservation Notification Mask feature (82h): REGPRE 1, RESREL 2, RESPRE 3.
    pub fn mask_bit(self) -> u32 {
        match self {
            NotificationType::Empty => 0,
            other => 1 << (other as u32),
        }
    }
}

/// Every maskable notification bit of feature 82h.
pub const NOTIFICATION_MASK_ALL: u32 = 0b1110;

/// The Reservation Notification log page (LID 80h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotificationLog {
    /// Log Page Count: a 64-bit count of notifications (0: never; it wraps to 1).
    pub count: u64,
    /// What happened.
    pub kind: NotificationType,
    /// Number of Available Log Pages after this one (at most 255).
    pub available: u8,
    /// The namespace.
    pub nsid: u32,
}

impl NotificationLog {
    /// The empty log page.
    pub const EMPTY: NotificationLog =
        NotificationLog { count: 0, kind: NotificationType::Empty, available: 0, nsid: 0 };

    /// The 64 bytes.
    pub fn to_bytes(&self) -> [u8; NOTIFICATION_LOG_SIZE] {
        let mut b = [0u8; NOTIFICATION_LOG_SIZE];
        put64(&mut b, 0, self.count);
        b[8] = self.kind as u8;
        b[9] = self.available;
        put32(&mut b, 12, self.nsid);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_round_trip_and_reserved_values() {
        let r = ReservationRegister { nsid: 1, action: RegisterAction::Replace, iekey: true, cptpl: Cptpl::Persist };
        let sqe = r.to_sqe();
        assert_eq!(sqe.cdw10, 0b1010 | 3 << 30);
        assert_eq!(ReservationRegister::from_sqe(&sqe), Ok(r));
        let mut bad = sqe;
        bad.cdw10 = 3;
        assert!(ReservationRegister::from_sqe(&bad).is_err());
        bad.cdw10 = 1 << 30;
        assert!(ReservationRegister::from_sqe(&bad).is_err());
    }

    #[test]
    fn acquire_and_release() {
        let a = ReservationAcquire {
            nsid: 2,
            action: AcquireAction::Preempt,
            iekey: false,
            rtype: ReservationType::ExclusiveAccessAllRegistrants,
        };
        assert_eq!(ReservationAcquire::from_sqe(&a.to_sqe()), Ok(a));
        let mut sqe = a.to_sqe();
        sqe.cdw10 = 7 << 8;
        assert!(ReservationAcquire::from_sqe(&sqe).is_err());
        sqe.cdw10 = 1 << 8 | 3;
        assert!(ReservationAcquire::from_sqe(&sqe).is_err());
        let r = ReservationRelease { nsid: 1, action: ReleaseAction::Clear, iekey: false, rtype: 0 };
        assert_eq!(ReservationRelease::from_sqe(&r.to_sqe()), Ok(r));
        assert_eq!(ReservationType::from_u8(0), None);
        assert_eq!(ReservationType::from_u8(6), Some(ReservationType::ExclusiveAccessAllRegistrants));
        assert_eq!(ReservationType::from_u8(7), None);
    }

    #[test]
    fn keys() {
        let k = ReservationKeys { crkey: 1, second: u64::MAX };
        assert_eq!(ReservationKeys::parse(&k.to_bytes()), Ok(k));
        assert!(ReservationKeys::parse(&[0; 15]).is_err());
        assert_eq!(ReservationKeys::parse_release(&k.to_bytes()).unwrap().crkey, 1);
    }

    #[test]
    fn report_numd() {
        let r = ReservationReport { nsid: 1, numd: u32::MAX, eds: true };
        assert_eq!(r.length_bytes(), 1 << 34);
        assert_eq!(ReservationReport::from_sqe(&r.to_sqe()), Ok(r));
    }

    #[test]
    fn status_layouts() {
        let status = ReservationStatus {
            generation: 7,
            rtype: 1,
            ptpls: true,
            registrants: vec![
                RegisteredController { cntlid: CNTLID_DYNAMIC, holds: true, hostid: [0xaa; 16], rkey: 1 },
                RegisteredController { cntlid: CNTLID_DYNAMIC, holds: false, hostid: [0xbb; 16], rkey: 2 },
            ],
        };
        let mut ext = [0u8; 256];
        assert_eq!(status.encode(true, &mut ext), 64 + 128);
        assert_eq!(&ext[0..4], &7u32.to_le_bytes());
        assert_eq!(ext[4], 1);
        assert_eq!(&ext[5..7], &2u16.to_le_bytes());
        assert_eq!(ext[9], 1);
        assert_eq!(&ext[64..66], &[0xff, 0xff]);
        assert_eq!(ext[66], 1);
        assert_eq!(&ext[72..80], &1u64.to_le_bytes());
        assert_eq!(&ext[80..96], &[0xaa; 16]);
        assert_eq!(ReservationStatus::parse(&ext, true).unwrap(), status);
        let mut regular = [0u8; 72];
        assert_eq!(status.encode(false, &mut regular), 24 + 48);
        assert_eq!(&regular[32..40], &[0xaa; 8]);
        assert_eq!(&regular[40..48], &1u64.to_le_bytes());
        // A short buffer: the header still counts both registrants.
        let mut short = [0u8; 100];
        status.encode(true, &mut short);
        assert_eq!(ReservationStatus::announced_registrants(&short), Some(2));
        assert_eq!(ReservationStatus::parse(&short, true).unwrap().registrants.len(), 0);
        assert!(ReservationStatus::parse(&short[..10], true).is_err());
    }

    #[test]
    fn notification_log() {
        let log = NotificationLog { count: 5, kind: NotificationType::ReservationPreempted, available: 2, nsid: 9 };
        let b = log.to_bytes();
        assert_eq!(&b[0..8], &5u64.to_le_bytes());
        assert_eq!((b[8], b[9]), (3, 2));
        assert_eq!(&b[12..16], &9u32.to_le_bytes());
        assert_eq!(NotificationType::RegistrationPreempted.mask_bit(), 2);
        assert_eq!(NotificationType::ReservationPreempted.mask_bit(), 8);
    }
}
