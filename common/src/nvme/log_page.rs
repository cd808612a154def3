//! Get Log Page (admin opcode 0x02): the command view and the log pages the target serves: Error Information, SMART / Health Information, Changed Namespace List and Commands Supported and Effects.
//!
//! NVMe Base 2.0 §5.16 (Get Log Page command, Figures 197–202) and §5.16.1 (log pages). Offsets were
//! checked against Linux `include/linux/nvme.h` (`struct nvme_get_log_page_command`,
//! `nvme_smart_log`, `nvme_effects_log`, `NVME_LOG_*`, `NVME_CMD_EFFECTS_*`) and libnvme `types.h`
//! (`struct nvme_error_log_page`).
//!
//! A host reads a log page at an offset and length; the target encodes the whole page and hands the
//! requested window to [`copy_log_page_range`] (or [`GetLogPage::copy_page`]), which zero-fills past the
//! end of the page and never panics, whatever the offset.

use super::identify::{check_list_nsid, put_nsid_list, NamespaceIdList, NsidSet, NSID_BROADCAST};
use super::opcode;
use super::sqe::SubmissionQueueEntry;
use super::status::Status;
use crate::wire::{
    fixed, fixed_mut, high_half, le128, le16, le32, le64, low_byte, low_half, put128, put16, put32, put64, top_byte,
    WireError,
};

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

// ---------------------------------------------------------------------------------------------------
// Error Information (LID 01h)
// ---------------------------------------------------------------------------------------------------

const ERROR_ENTRY: &str = "ErrorInformationEntry";

/// Size of one Error Information log entry.
pub const ERROR_INFORMATION_ENTRY_SIZE: usize = 64;

/// One Error Information log entry (Base 2.0 Figure 205, libnvme `struct nvme_error_log_page`),
/// 64 bytes. The log is an array of these, newest first, `ELPE + 1` entries long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorInformationEntry {
    /// Error Count (bytes 7:0): unique, incrementing; 0 marks an invalid entry.
    pub error_count: u64,
    /// Submission Queue ID (bytes 9:8); 0xFFFF if not tied to a command.
    pub sqid: u16,
    /// Command ID (bytes 11:10); 0xFFFF if not tied to a command.
    pub cid: u16,
    /// Phase Tag (bit 0 of bytes 13:12).
    pub phase: bool,
    /// Status Field (bits 15:1 of bytes 13:12) of the command that failed.
    pub status: Status,
    /// Parameter Error Location (bytes 15:14): byte in bits 7:0, bit in bits 10:8; 0xFFFF if none.
    pub parameter_error_location: u16,
    /// LBA (bytes 23:16): first LBA that saw the error, if applicable.
    pub lba: u64,
    /// Namespace (bytes 27:24), if applicable.
    pub nsid: u32,
    /// Vendor Specific Information Available (byte 28): a vendor log page ID (0x80..=0xFF) or 0.
    pub vs: u8,
    /// Transport Type (byte 29), as in the discovery log; 0 if not transport related.
    pub trtype: u8,
    /// Command Set Indicator (byte 30) of the failed command.
    pub csi: u8,
    /// Opcode (byte 31) of the failed command (NVMe 2.1; reserved before).
    pub opcode: u8,
    /// Command Specific Information (bytes 39:32).
    pub command_specific: u64,
    /// Transport Type Specific Information (bytes 41:40).
    pub transport_specific: u16,
}

impl ErrorInformationEntry {
    /// A Parameter Error Location pointing at `bit` (0..=7) of `byte` (0..=63) of the command.
    pub fn parameter_location(byte: u8, bit: u8) -> u16 {
        u16::from(byte) | (u16::from(bit & 0x7) << 8)
    }

    /// Byte of the command the Parameter Error Location points at (bits 7:0).
    pub fn parameter_error_byte(&self) -> u8 {
        self.parameter_error_location.to_le_bytes()[0]
    }

    /// Bit of that byte (bits 10:8).
    pub fn parameter_error_bit(&self) -> u8 {
        self.parameter_error_location.to_le_bytes()[1] & 0x7
    }

    /// Encode into the first 64 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<ERROR_INFORMATION_ENTRY_SIZE>(buf, ERROR_ENTRY)?;
        b.fill(0);
        put64(b, 0, self.error_count);
        put16(b, 8, self.sqid);
        put16(b, 10, self.cid);
        put16(b, 12, (self.status.field() << 1) | u16::from(self.phase));
        put16(b, 14, self.parameter_error_location);
        put64(b, 16, self.lba);
        put32(b, 24, self.nsid);
        b[28] = self.vs;
        b[29] = self.trtype;
        b[30] = self.csi;
        b[31] = self.opcode;
        put64(b, 32, self.command_specific);
        put16(b, 40, self.transport_specific);
        Ok(())
    }

    /// The entry as 64 bytes.
    pub fn to_bytes(&self) -> [u8; ERROR_INFORMATION_ENTRY_SIZE] {
        let mut b = [0u8; ERROR_INFORMATION_ENTRY_SIZE];
        // A 64-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 64 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<ERROR_INFORMATION_ENTRY_SIZE>(buf, ERROR_ENTRY)?;
        let sf = le16(b, 12);
        Ok(ErrorInformationEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cid: le16(b, 10),
            phase: sf & 1 != 0,
            status: Status::from_field(sf >> 1),
            parameter_error_location: le16(b, 14),
            lba: le64(b, 16),
            nsid: le32(b, 24),
            vs: b[28],
            trtype: b[29],
            csi: b[30],
            opcode: b[31],
            command_specific: le64(b, 32),
            transport_specific: le16(b, 40),
        })
    }

    /// Encode `entries` back to back as the Error Information log into `buf`. Returns the bytes
    /// written (64 per entry).
    pub fn encode_log(entries: &[ErrorInformationEntry], buf: &mut [u8]) -> Result<usize, WireError> {
        let need = entries.len().saturating_mul(ERROR_INFORMATION_ENTRY_SIZE);
        let got = buf.len();
        let out = buf.get_mut(..need).ok_or(WireError::OutputTooSmall { structure: ERROR_ENTRY, need, got })?;
        for (chunk, e) in out.chunks_exact_mut(ERROR_INFORMATION_ENTRY_SIZE).zip(entries) {
            e.encode(chunk)?;
        }
        Ok(need)
    }

    /// The entries of an Error Information log in `buf` (a trailing partial entry is ignored).
    pub fn parse_log(buf: &[u8]) -> impl Iterator<Item = ErrorInformationEntry> + '_ {
        buf.chunks_exact(ERROR_INFORMATION_ENTRY_SIZE).filter_map(|c| Self::parse(c).ok())
    }
}

// ---------------------------------------------------------------------------------------------------
// SMART / Health Information (LID 02h)
// ---------------------------------------------------------------------------------------------------

const SMART: &str = "SmartLog";

/// Size of the SMART / Health Information log.
pub const SMART_LOG_SIZE: usize = 512;

/// SMART / Health Information log (Base 2.0 Figure 207, Linux `struct nvme_smart_log`), 512 bytes.
/// Temperatures are in Kelvin; the 16-byte counters are little-endian `u128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    /// Critical Warning (byte 0), see `CRITICAL_WARNING_*`.
    pub critical_warning: u8,
    /// Composite Temperature in Kelvin (bytes 2:1).
    pub composite_temperature: u16,
    /// Available Spare, percent (byte 3).
    pub available_spare: u8,
    /// Available Spare Threshold, percent (byte 4).
    pub available_spare_threshold: u8,
    /// Percentage Used (byte 5).
    pub percentage_used: u8,
    /// Endurance Group Critical Warning Summary (byte 6).
    pub endurance_group_critical_warning_summary: u8,
    /// Data Units Read, in thousands of 512-byte units (bytes 47:32).
    pub data_units_read: u128,
    /// Data Units Written, in thousands of 512-byte units (bytes 63:48).
    pub data_units_written: u128,
    /// Host Read Commands (bytes 79:64).
    pub host_read_commands: u128,
    /// Host Write Commands (bytes 95:80).
    pub host_write_commands: u128,
    /// Controller Busy Time in minutes (bytes 111:96).
    pub controller_busy_time: u128,
    /// Power Cycles (bytes 127:112).
    pub power_cycles: u128,
    /// Power On Hours (bytes 143:128).
    pub power_on_hours: u128,
    /// Unsafe Shutdowns (bytes 159:144).
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors (bytes 175:160).
    pub media_errors: u128,
    /// Number of Error Information Log Entries (bytes 191:176).
    pub number_of_error_log_entries: u128,
    /// Warning Composite Temperature Time in minutes (bytes 195:192).
    pub warning_temperature_time: u32,
    /// Critical Composite Temperature Time in minutes (bytes 199:196).
    pub critical_temperature_time: u32,
    /// Temperature Sensors 1–8 in Kelvin (bytes 215:200); 0 = not implemented.
    pub temperature_sensors: [u16; 8],
    /// Thermal Management Temperature 1 Transition Count (bytes 219:216).
    pub thermal_management_1_transitions: u32,
    /// Thermal Management Temperature 2 Transition Count (bytes 223:220).
    pub thermal_management_2_transitions: u32,
    /// Total Time For Thermal Management Temperature 1 in seconds (bytes 227:224).
    pub thermal_management_1_time: u32,
    /// Total Time For Thermal Management Temperature 2 in seconds (bytes 231:228).
    pub thermal_management_2_time: u32,
}

impl SmartLog {
    /// Critical Warning bit 0: available spare below threshold.
    pub const CRITICAL_WARNING_SPARE: u8 = 1 << 0;
    /// Critical Warning bit 1: temperature beyond a threshold.
    pub const CRITICAL_WARNING_TEMPERATURE: u8 = 1 << 1;
    /// Critical Warning bit 2: NVM subsystem reliability degraded.
    pub const CRITICAL_WARNING_RELIABILITY: u8 = 1 << 2;
    /// Critical Warning bit 3: media placed in read-only mode.
    pub const CRITICAL_WARNING_READ_ONLY: u8 = 1 << 3;
    /// Critical Warning bit 4: volatile memory backup device failed.
    pub const CRITICAL_WARNING_VOLATILE_MEMORY_BACKUP: u8 = 1 << 4;
    /// Critical Warning bit 5: Persistent Memory Region read-only or unreliable.
    pub const CRITICAL_WARNING_PMR_READ_ONLY: u8 = 1 << 5;

    /// Encode into the first 512 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<SMART_LOG_SIZE>(buf, SMART)?;
        b.fill(0);
        b[0] = self.critical_warning;
        put16(b, 1, self.composite_temperature);
        b[3] = self.available_spare;
        b[4] = self.available_spare_threshold;
        b[5] = self.percentage_used;
        b[6] = self.endurance_group_critical_warning_summary;
        for (i, v) in self.counters().into_iter().enumerate() {
            put128(b, 32 + 16 * i, v);
        }
        put32(b, 192, self.warning_temperature_time);
        put32(b, 196, self.critical_temperature_time);
        for (i, t) in self.temperature_sensors.iter().enumerate() {
            put16(b, 200 + 2 * i, *t);
        }
        put32(b, 216, self.thermal_management_1_transitions);
        put32(b, 220, self.thermal_management_2_transitions);
        put32(b, 224, self.thermal_management_1_time);
        put32(b, 228, self.thermal_management_2_time);
        Ok(())
    }

    /// The log as 512 bytes.
    pub fn to_bytes(&self) -> [u8; SMART_LOG_SIZE] {
        let mut b = [0u8; SMART_LOG_SIZE];
        // A 512-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 512 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<SMART_LOG_SIZE>(buf, SMART)?;
        let counter = |i: usize| le128(b, 32 + 16 * i);
        let mut temperature_sensors = [0u16; 8];
        for (i, t) in temperature_sensors.iter_mut().enumerate() {
            *t = le16(b, 200 + 2 * i);
        }
        Ok(SmartLog {
            critical_warning: b[0],
            composite_temperature: le16(b, 1),
            available_spare: b[3],
            available_spare_threshold: b[4],
            percentage_used: b[5],
            endurance_group_critical_warning_summary: b[6],
            data_units_read: counter(0),
            data_units_written: counter(1),
            host_read_commands: counter(2),
            host_write_commands: counter(3),
            controller_busy_time: counter(4),
            power_cycles: counter(5),
            power_on_hours: counter(6),
            unsafe_shutdowns: counter(7),
            media_errors: counter(8),
            number_of_error_log_entries: counter(9),
            warning_temperature_time: le32(b, 192),
            critical_temperature_time: le32(b, 196),
            temperature_sensors,
            thermal_management_1_transitions: le32(b, 216),
            thermal_management_2_transitions: le32(b, 220),
            thermal_management_1_time: le32(b, 224),
            thermal_management_2_time: le32(b, 228),
        })
    }

    /// The ten 16-byte counters in wire order (bytes 32..192).
    fn counters(&self) -> [u128; 10] {
        [
            self.data_units_read,
            self.data_units_written,
            self.host_read_commands,
            self.host_write_commands,
            self.controller_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.number_of_error_log_entries,
        ]
    }
}

// ---------------------------------------------------------------------------------------------------
// Changed Namespace List (LID 04h)
// ---------------------------------------------------------------------------------------------------

const CHANGED_LIST: &str = "ChangedNamespaceList";

/// Size of the Changed Namespace List log.
pub const CHANGED_NAMESPACE_LIST_SIZE: usize = 4096;

/// What a Changed Namespace List log reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangedNamespaces<'a> {
    /// Up to 1024 changed NSIDs.
    List(NamespaceIdList<'a>),
    /// More than 1024 namespaces changed (first entry 0xFFFFFFFF): the host rescans them all.
    MoreThan1024,
}

/// Changed Namespace List log (Base 2.0 §5.16.1.5, Linux `NVME_MAX_CHANGED_NAMESPACES`), 4096
/// bytes: up to 1024 NSIDs whose attributes changed since the log was last read, zero-terminated;
/// a first entry of 0xFFFFFFFF means more than 1024 changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangedNamespaceList;

impl ChangedNamespaceList {
    /// Encode the log into the first 4096 bytes of `buf` from the changed NSIDs, in any order
    /// (duplicates are merged, the list is written in increasing order). Returns true when more than
    /// 1024 distinct NSIDs changed and the log holds the 0xFFFFFFFF marker instead. Errors on an NSID
    /// of 0 or 0xFFFFFFFF.
    pub fn encode(changed: impl IntoIterator<Item = u32>, buf: &mut [u8]) -> Result<bool, WireError> {
        let b = fixed_mut::<CHANGED_NAMESPACE_LIST_SIZE>(buf, CHANGED_LIST)?;
        let mut set = NsidSet::new();
        for nsid in changed {
            set.insert(check_list_nsid(nsid, CHANGED_LIST)?);
        }
        if set.overflowed() {
            put_nsid_list(b, &[NSID_BROADCAST]);
        } else {
            put_nsid_list(b, set.as_slice());
        }
        Ok(set.overflowed())
    }

    /// Parse the first 4096 bytes of `buf`. Entries need not be sorted; 0xFFFFFFFF is only valid as the
    /// first entry.
    pub fn parse(buf: &[u8]) -> Result<ChangedNamespaces<'_>, WireError> {
        let b = fixed::<CHANGED_NAMESPACE_LIST_SIZE>(buf, CHANGED_LIST)?;
        if le32(b, 0) == NSID_BROADCAST {
            return Ok(ChangedNamespaces::MoreThan1024);
        }
        Ok(ChangedNamespaces::List(NamespaceIdList::parse(b, CHANGED_LIST, false)?))
    }
}

// ---------------------------------------------------------------------------------------------------
// Commands Supported and Effects (LID 05h)
// ---------------------------------------------------------------------------------------------------

const EFFECTS: &str = "CommandsSupportedAndEffects";

/// Size of the Commands Supported and Effects log.
pub const COMMANDS_SUPPORTED_AND_EFFECTS_SIZE: usize = 4096;

/// Commands Supported and Effects log (Base 2.0 Figures 210–211, Linux `struct nvme_effects_log`),
/// 4096 bytes: one Commands Supported and Effects dword per admin opcode (ACS, bytes 1023:0), then one
/// per I/O opcode (IOCS, bytes 2047:1024); the rest is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandsSupportedAndEffects {
    /// Admin Command Supported entries, indexed by opcode.
    pub acs: [u32; 256],
    /// I/O Command Supported entries, indexed by opcode.
    pub iocs: [u32; 256],
}

impl Default for CommandsSupportedAndEffects {
    fn default() -> Self {
        CommandsSupportedAndEffects { acs: [0; 256], iocs: [0; 256] }
    }
}

impl CommandsSupportedAndEffects {
    /// Bit 0: Command Supported (CSUPP).
    pub const CSUPP: u32 = 1 << 0;
    /// Bit 1: Logical Block Content Change (LBCC).
    pub const LBCC: u32 = 1 << 1;
    /// Bit 2: Namespace Capability Change (NCC).
    pub const NCC: u32 = 1 << 2;
    /// Bit 3: Namespace Inventory Change (NIC).
    pub const NIC: u32 = 1 << 3;
    /// Bit 4: Controller Capability Change (CCC).
    pub const CCC: u32 = 1 << 4;
    /// Bits 18:16: Command Submission and Execution (CSE).
    pub const CSE_MASK: u32 = 0x7 << 16;
    /// Shift of the CSE field.
    pub const CSE_SHIFT: u32 = 16;
    /// CSE 0: no restriction.
    pub const CSE_NO_RESTRICTION: u8 = 0;
    /// CSE 1: no other command to the same namespace while this one is outstanding.
    pub const CSE_SAME_NAMESPACE: u8 = 1;
    /// CSE 2: no other command to any namespace while this one is outstanding.
    pub const CSE_ANY_NAMESPACE: u8 = 2;
    /// Bit 19: UUID Selection Supported (USS).
    pub const USS: u32 = 1 << 19;

    /// The CSE field (bits 18:16) of an effects dword.
    pub fn cse(effects: u32) -> u8 {
        // Masked to 3 bits.
        ((effects & Self::CSE_MASK) >> Self::CSE_SHIFT).to_le_bytes()[0]
    }

    /// `flags` with the CSE field set to `cse` (only its low 3 bits are used).
    pub fn with_cse(flags: u32, cse: u8) -> u32 {
        (flags & !Self::CSE_MASK) | ((u32::from(cse) << Self::CSE_SHIFT) & Self::CSE_MASK)
    }

    /// The effects dword of admin `opcode`.
    pub fn admin(&self, opcode: u8) -> u32 {
        self.acs[usize::from(opcode)]
    }

    /// Set the effects dword of admin `opcode`.
    pub fn set_admin(&mut self, opcode: u8, effects: u32) {
        self.acs[usize::from(opcode)] = effects;
    }

    /// The effects dword of I/O `opcode`.
    pub fn io(&self, opcode: u8) -> u32 {
        self.iocs[usize::from(opcode)]
    }

    /// Set the effects dword of I/O `opcode`.
    pub fn set_io(&mut self, opcode: u8, effects: u32) {
        self.iocs[usize::from(opcode)] = effects;
    }

    /// Encode into the first 4096 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<COMMANDS_SUPPORTED_AND_EFFECTS_SIZE>(buf, EFFECTS)?;
        b.fill(0);
        for (chunk, v) in b.chunks_exact_mut(4).zip(self.acs.iter().chain(self.iocs.iter())) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// The log as 4096 bytes.
    pub fn to_bytes(&self) -> [u8; COMMANDS_SUPPORTED_AND_EFFECTS_SIZE] {
        let mut b = [0u8; COMMANDS_SUPPORTED_AND_EFFECTS_SIZE];
        // A 4096-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 4096 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<COMMANDS_SUPPORTED_AND_EFFECTS_SIZE>(buf, EFFECTS)?;
        let mut log = Self::default();
        for (i, v) in log.acs.iter_mut().chain(log.iocs.iter_mut()).enumerate() {
            *v = le32(b, 4 * i);
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::status::StatusCodeType;
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

    #[test]
    fn error_information_entry_layout() {
        // libnvme struct nvme_error_log_page: vs @28, trtype @29, csi @30, opcode @31, cs @32, trtype_spec_info @40.
        let e = ErrorInformationEntry {
            error_count: 0x0807_0605_0403_0201,
            sqid: 0x0a09,
            cid: 0x0c0b,
            phase: true,
            status: Status::INVALID_FIELD.with_dnr(),
            parameter_error_location: ErrorInformationEntry::parameter_location(44, 3),
            lba: 0x1817_1615_1413_1211,
            nsid: 0x1c1b_1a19,
            vs: 0x1d,
            trtype: 0x1e,
            csi: 0x1f,
            opcode: 0x20,
            command_specific: 0x2827_2625_2423_2221,
            transport_specific: 0x2a29,
        };
        let b = e.to_bytes();
        assert_eq!(&b[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(le16(&b, 12), 0x8005);
        assert_eq!(&b[14..16], &[44, 3]);
        assert_eq!(&b[16..42], &(0x11..=0x2a).collect::<Vec<u8>>()[..]);
        assert!(b[42..].iter().all(|&c| c == 0));
        let back = ErrorInformationEntry::parse(&b).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.status.sct(), StatusCodeType::Generic);
        assert_eq!((back.parameter_error_byte(), back.parameter_error_bit()), (44, 3));
        assert!(ErrorInformationEntry::parse(&b[..63]).is_err());

        let mut log = [0u8; 200];
        assert_eq!(
            ErrorInformationEntry::encode_log(&[e, ErrorInformationEntry::default(), e], &mut log).unwrap(),
            192
        );
        let entries: Vec<_> = ErrorInformationEntry::parse_log(&log).collect();
        assert_eq!(entries, [e, ErrorInformationEntry::default(), e]);
        assert!(ErrorInformationEntry::encode_log(&[e; 4], &mut log).is_err());
    }

    #[test]
    fn smart_log_layout() {
        // Linux struct nvme_smart_log: counters from byte 32, warning_temp_time @192, temp_sensor @200.
        let mut s = SmartLog {
            critical_warning: SmartLog::CRITICAL_WARNING_TEMPERATURE,
            composite_temperature: 0x0201,
            available_spare: 3,
            available_spare_threshold: 4,
            percentage_used: 5,
            endurance_group_critical_warning_summary: 6,
            warning_temperature_time: 0xc3c2_c1c0,
            critical_temperature_time: 0xc7c6_c5c4,
            thermal_management_1_transitions: 0xdbda_d9d8,
            thermal_management_2_transitions: 0xdfde_dddc,
            thermal_management_1_time: 0xe3e2_e1e0,
            thermal_management_2_time: 0xe7e6_e5e4,
            ..Default::default()
        };
        for (i, t) in s.temperature_sensors.iter_mut().enumerate() {
            *t = 0xc9c8 + 0x0202 * u16::try_from(i).unwrap();
        }
        let counter = |first: u8| u128::from_le_bytes(std::array::from_fn(|k| first + u8::try_from(k).unwrap()));
        s.data_units_read = counter(0x20);
        s.data_units_written = counter(0x30);
        s.host_read_commands = counter(0x40);
        s.host_write_commands = counter(0x50);
        s.controller_busy_time = counter(0x60);
        s.power_cycles = counter(0x70);
        s.power_on_hours = counter(0x80);
        s.unsafe_shutdowns = counter(0x90);
        s.media_errors = counter(0xa0);
        s.number_of_error_log_entries = counter(0xb0);
        let b = s.to_bytes();
        assert_eq!(&b[..7], &[2, 1, 2, 3, 4, 5, 6]);
        assert!(b[7..32].iter().all(|&c| c == 0));
        // Each byte of 32..232 equals its own offset (the values above were chosen that way).
        for (off, &byte) in b.iter().enumerate().take(232).skip(32) {
            assert_eq!(usize::from(byte), off, "byte {off}");
        }
        assert!(b[232..].iter().all(|&c| c == 0));
        assert_eq!(SmartLog::parse(&b).unwrap(), s);
        assert!(SmartLog::parse(&b[..511]).is_err());
        assert!(s.encode(&mut [0u8; 511]).is_err());
    }

    #[test]
    fn changed_namespace_list() {
        let mut b = [0xffu8; CHANGED_NAMESPACE_LIST_SIZE];
        assert!(!ChangedNamespaceList::encode([9, 3, 9, 4], &mut b).unwrap());
        assert_eq!(&b[..16], &[3, 0, 0, 0, 4, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[12..].iter().all(|&c| c == 0));
        match ChangedNamespaceList::parse(&b).unwrap() {
            ChangedNamespaces::List(list) => assert!(list.iter().eq([3, 4, 9])),
            other => panic!("{other:?}"),
        }
        assert!(!ChangedNamespaceList::encode(1..=1024, &mut b).unwrap());
        assert!(matches!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::List(l) if l.len() == 1024));
        assert!(ChangedNamespaceList::encode(1..=1025, &mut b).unwrap());
        assert_eq!(&b[..8], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::MoreThan1024);
        assert!(ChangedNamespaceList::encode([0], &mut b).is_err());
        assert!(ChangedNamespaceList::encode([NSID_BROADCAST], &mut b).is_err());
        // Unsorted entries parse; 0xFFFFFFFF after the first entry does not.
        b.fill(0);
        put32(&mut b, 0, 7);
        put32(&mut b, 4, 2);
        assert!(matches!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::List(l) if l.iter().eq([7, 2])));
        put32(&mut b, 8, NSID_BROADCAST);
        assert!(ChangedNamespaceList::parse(&b).is_err());
        assert!(ChangedNamespaceList::parse(&b[..4095]).is_err());
    }

    #[test]
    fn commands_supported_and_effects_layout() {
        // Linux struct nvme_effects_log: acs[256] then iocs[256]; NVME_CMD_EFFECTS_CSE_MASK GENMASK(18, 16).
        let mut log = CommandsSupportedAndEffects::default();
        log.set_admin(opcode::admin::IDENTIFY, CommandsSupportedAndEffects::CSUPP);
        log.set_admin(0xff, 0xa1b2_c3d4);
        log.set_io(
            opcode::io::WRITE,
            CommandsSupportedAndEffects::with_cse(
                CommandsSupportedAndEffects::CSUPP | CommandsSupportedAndEffects::LBCC,
                CommandsSupportedAndEffects::CSE_SAME_NAMESPACE,
            ),
        );
        let b = log.to_bytes();
        assert_eq!(le32(&b, 4 * 0x06), 1);
        assert_eq!(le32(&b, 1020), 0xa1b2_c3d4);
        assert_eq!(le32(&b, 1024 + 4), 0x0001_0003);
        assert!(b[2048..].iter().all(|&c| c == 0));
        let back = CommandsSupportedAndEffects::parse(&b).unwrap();
        assert_eq!(back, log);
        assert_eq!(CommandsSupportedAndEffects::cse(back.io(opcode::io::WRITE)), 1);
        assert_eq!(back.admin(opcode::admin::IDENTIFY), CommandsSupportedAndEffects::CSUPP);
        assert_eq!(back.io(opcode::io::READ), 0);
        assert_eq!(
            [
                CommandsSupportedAndEffects::LBCC,
                CommandsSupportedAndEffects::NCC,
                CommandsSupportedAndEffects::NIC,
                CommandsSupportedAndEffects::CCC
            ],
            [2, 4, 8, 16]
        );
        assert!(CommandsSupportedAndEffects::parse(&b[..4095]).is_err());
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

        #[test]
        fn error_entry_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(e) = ErrorInformationEntry::parse(&bytes) {
                prop_assert_eq!(ErrorInformationEntry::parse(&e.to_bytes()).unwrap(), e);
                prop_assert_eq!(&e.to_bytes()[..42], &bytes[..42]);
            }
        }

        #[test]
        fn smart_round_trip(bytes in proptest::collection::vec(any::<u8>(), 500..520)) {
            if let Ok(s) = SmartLog::parse(&bytes) {
                prop_assert_eq!(SmartLog::parse(&s.to_bytes()).unwrap(), s);
                prop_assert_eq!(&s.to_bytes()[32..232], &bytes[32..232]);
            }
        }

        #[test]
        fn changed_list_round_trip(ids in proptest::collection::vec(1u32..0xffff_fffe, 0..1100)) {
            let mut b = [0u8; CHANGED_NAMESPACE_LIST_SIZE];
            let overflow = ChangedNamespaceList::encode(ids.iter().copied(), &mut b).unwrap();
            let mut want = ids.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(overflow, want.len() > 1024);
            match ChangedNamespaceList::parse(&b).unwrap() {
                ChangedNamespaces::MoreThan1024 => prop_assert!(overflow),
                ChangedNamespaces::List(list) => prop_assert!(list.iter().eq(want)),
            }
        }

        #[test]
        fn changed_list_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 4090..4100)) {
            if let Ok(ChangedNamespaces::List(list)) = ChangedNamespaceList::parse(&bytes) {
                prop_assert!(list.len() <= 1024);
            }
        }

        #[test]
        fn effects_round_trip(bytes in proptest::collection::vec(any::<u8>(), 4096)) {
            let log = CommandsSupportedAndEffects::parse(&bytes).unwrap();
            prop_assert_eq!(&log.to_bytes()[..2048], &bytes[..2048]);
            prop_assert_eq!(CommandsSupportedAndEffects::parse(&log.to_bytes()).unwrap(), log);
        }
    }
}
