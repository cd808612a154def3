//! Get Features / Set Features (admin opcodes 0x0A / 0x09): command views and the feature values we support.
//!
//! NVMe Base 2.0 §5.15 (Get Features, Figures 190–193), §5.27 (Set Features, Figures 315–317) and
//! §5.27.1 (feature values). Bit positions were checked against Linux `include/linux/nvme.h`
//! (`struct nvme_features`, `NVME_FEAT_*`, `NVME_AEN_BIT_*`) and libnvme `types.h`.
//!
//! A feature value travels in CDW11 of Set Features and comes back in dword 0 of the Get Features
//! completion, with the same layout; the [`Feature`] trait converts both ways. The Host Identifier is
//! the exception: its value travels as data (8 or 16 bytes), see [`HostIdentifier`].

use super::opcode;
use super::sqe::SubmissionQueueEntry;
use crate::wire::{fixed, fixed_mut, high_half, low_byte, low_half, WireError};

/// Feature Identifiers (Base 2.0 Figure 317, Linux `NVME_FEAT_*`).
pub mod fid {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Interrupt Vector Configuration.
    pub const INTERRUPT_VECTOR_CONFIGURATION: u8 = 0x09;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY_NORMAL: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNCHRONOUS_EVENT_CONFIGURATION: u8 = 0x0B;
    /// Autonomous Power State Transition.
    pub const AUTONOMOUS_POWER_STATE_TRANSITION: u8 = 0x0C;
    /// Host Memory Buffer.
    pub const HOST_MEMORY_BUFFER: u8 = 0x0D;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x0E;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Host Behavior Support.
    pub const HOST_BEHAVIOR_SUPPORT: u8 = 0x16;
    /// Host Identifier.
    pub const HOST_IDENTIFIER: u8 = 0x81;
    /// Reservation Notification Mask.
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    /// Reservation Persistence.
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
    /// Namespace Write Protection Config.
    pub const NAMESPACE_WRITE_PROTECTION_CONFIG: u8 = 0x84;
}

/// Select (SEL, Get Features CDW10 bits 10:8; Base 2.0 Figure 191): which value to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Select {
    /// 000b: the current value.
    #[default]
    Current = 0,
    /// 001b: the default value.
    Default = 1,
    /// 010b: the saved value.
    Saved = 2,
    /// 011b: the supported capabilities ([`SupportedCapabilities`] in dword 0).
    SupportedCapabilities = 3,
}

impl Select {
    fn from_bits(v: u32) -> Result<Self, WireError> {
        match v {
            0 => Ok(Select::Current),
            1 => Ok(Select::Default),
            2 => Ok(Select::Saved),
            3 => Ok(Select::SupportedCapabilities),
            _ => Err(WireError::invalid(GET_FEATURES, "sel", v, "0..=3 (current, default, saved, capabilities)")),
        }
    }
}

const GET_FEATURES: &str = "GetFeatures";
const SET_FEATURES: &str = "SetFeatures";

/// The Get Features command (Base 2.0 §5.15, Linux `struct nvme_features`): FID in CDW10 bits 7:0,
/// SEL in CDW10 bits 10:8, feature-specific input in CDW11. The value comes back in completion dword
/// 0 (or as data for features with a data structure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GetFeatures {
    /// Namespace Identifier, for namespace-specific features.
    pub nsid: u32,
    /// Feature Identifier (see [`fid`]).
    pub fid: u8,
    /// Select (SEL).
    pub sel: Select,
    /// Command Dword 11: feature-specific (0 for most features).
    pub cdw11: u32,
}

impl GetFeatures {
    /// Get the current value of feature `fid`.
    pub fn new(fid: u8) -> Self {
        GetFeatures { fid, ..Default::default() }
    }

    /// The view of a Get Features SQE. Errors if the opcode is not Get Features or SEL is reserved
    /// (4..=7).
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::GET_FEATURES, GET_FEATURES, "0x0A (Get Features)")?;
        Ok(GetFeatures {
            nsid: sqe.nsid,
            fid: low_byte(sqe.cdw10),
            sel: Select::from_bits((sqe.cdw10 >> 8) & 0x7)?,
            cdw11: sqe.cdw11,
        })
    }

    /// The SQE for this command (CID and SGL1 left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::GET_FEATURES);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.fid) | ((self.sel as u32) << 8);
        sqe.cdw11 = self.cdw11;
        sqe
    }
}

/// The Set Features command (Base 2.0 §5.27, Linux `struct nvme_features`): FID in CDW10 bits 7:0,
/// Save (SV) in CDW10 bit 31, the value in CDW11 (and CDW12 for some features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetFeatures {
    /// Namespace Identifier, for namespace-specific features.
    pub nsid: u32,
    /// Feature Identifier (see [`fid`]).
    pub fid: u8,
    /// Save (SV): keep the value across power cycles and resets.
    pub sv: bool,
    /// Command Dword 11: the feature value.
    pub cdw11: u32,
    /// Command Dword 12: feature-specific (0 for the features in this module).
    pub cdw12: u32,
}

impl SetFeatures {
    /// Set a dword-valued feature to `value`, not saved.
    pub fn new<F: Feature>(value: &F) -> Self {
        SetFeatures { fid: F::FID, cdw11: value.to_dword(), ..Default::default() }
    }

    /// The view of a Set Features SQE. Errors if the opcode is not Set Features.
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_opcode(opcode::admin::SET_FEATURES, SET_FEATURES, "0x09 (Set Features)")?;
        Ok(SetFeatures {
            nsid: sqe.nsid,
            fid: low_byte(sqe.cdw10),
            sv: sqe.cdw10 & (1 << 31) != 0,
            cdw11: sqe.cdw11,
            cdw12: sqe.cdw12,
        })
    }

    /// The SQE for this command (CID and SGL1 left for the caller to fill).
    pub fn to_sqe(&self) -> SubmissionQueueEntry {
        let mut sqe = SubmissionQueueEntry::new(opcode::admin::SET_FEATURES);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.fid) | (u32::from(self.sv) << 31);
        sqe.cdw11 = self.cdw11;
        sqe.cdw12 = self.cdw12;
        sqe
    }

    /// The typed value this command sets. Errors if `fid` is not `F::FID` or the value is invalid.
    pub fn value<F: Feature>(&self) -> Result<F, WireError> {
        if self.fid != F::FID {
            return Err(WireError::invalid(
                SET_FEATURES,
                "fid",
                self.fid,
                "the feature identifier of the value asked for",
            ));
        }
        F::from_dword(self.cdw11)
    }
}

/// Supported capabilities of a feature: completion dword 0 of Get Features with SEL = 011b
/// (Base 2.0 Figure 193).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SupportedCapabilities {
    /// Bit 0: the feature is saveable.
    pub saveable: bool,
    /// Bit 1: the feature is namespace specific.
    pub namespace_specific: bool,
    /// Bit 2: the feature is changeable.
    pub changeable: bool,
}

impl SupportedCapabilities {
    /// From completion dword 0 (bits 31:3 are reserved and ignored).
    pub fn from_dw0(dw0: u32) -> Self {
        SupportedCapabilities { saveable: dw0 & 1 != 0, namespace_specific: dw0 & 2 != 0, changeable: dw0 & 4 != 0 }
    }

    /// Completion dword 0.
    pub fn to_dw0(&self) -> u32 {
        u32::from(self.saveable) | (u32::from(self.namespace_specific) << 1) | (u32::from(self.changeable) << 2)
    }
}

/// A feature whose value is one dword: Set Features CDW11 and Get Features completion dword 0.
pub trait Feature: Sized {
    /// The Feature Identifier.
    const FID: u8;
    /// The value from Set Features CDW11 (or Get Features dword 0). Errors on values the spec forbids.
    fn from_dword(dword: u32) -> Result<Self, WireError>;
    /// The value as a dword.
    fn to_dword(&self) -> u32;
}

/// Volatile Write Cache (FID 06h; Base 2.0 Figure 323): Volatile Write Cache Enable (WCE) in bit 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VolatileWriteCache {
    /// Volatile Write Cache Enable.
    pub wce: bool,
}

impl Feature for VolatileWriteCache {
    const FID: u8 = fid::VOLATILE_WRITE_CACHE;

    /// Bits 31:1 are reserved and ignored.
    fn from_dword(dword: u32) -> Result<Self, WireError> {
        Ok(VolatileWriteCache { wce: dword & 1 != 0 })
    }

    fn to_dword(&self) -> u32 {
        u32::from(self.wce)
    }
}

const NUMBER_OF_QUEUES: &str = "NumberOfQueues";

/// Number of Queues (FID 07h; Base 2.0 Figures 324–325): Number of I/O Submission Queues Requested
/// (NSQR) in bits 15:0 and Number of I/O Completion Queues Requested (NCQR) in bits 31:16, both 0's
/// based. The completion's dword 0 returns NSQA / NCQA (allocated) in the same layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumberOfQueues {
    /// I/O submission queues, 0's based.
    pub nsqr: u16,
    /// I/O completion queues, 0's based.
    pub ncqr: u16,
}

impl NumberOfQueues {
    /// Ask for `submission` and `completion` I/O queues (1's based counts, 1..=65535). Errors on 0 or
    /// more than 65535.
    pub fn with_counts(submission: u32, completion: u32) -> Result<Self, WireError> {
        let zeros_based = |count: u32, field| {
            count
                .checked_sub(1)
                .and_then(|v| u16::try_from(v).ok())
                .filter(|&v| v != u16::MAX)
                .ok_or(WireError::invalid(NUMBER_OF_QUEUES, field, count, "1..=65535 queues"))
        };
        Ok(NumberOfQueues { nsqr: zeros_based(submission, "nsqr")?, ncqr: zeros_based(completion, "ncqr")? })
    }

    /// Number of I/O submission queues (1's based).
    pub fn submission_queues(&self) -> u32 {
        u32::from(self.nsqr) + 1
    }

    /// Number of I/O completion queues (1's based).
    pub fn completion_queues(&self) -> u32 {
        u32::from(self.ncqr) + 1
    }

    /// The allocated counts (NSQA, NCQA) from completion dword 0. Every value is accepted.
    pub fn from_dw0(dw0: u32) -> Self {
        NumberOfQueues { nsqr: low_half(dw0), ncqr: high_half(dw0) }
    }

    /// Completion dword 0 reporting these counts as allocated (NSQA, NCQA).
    pub fn to_dw0(&self) -> u32 {
        u32::from(self.nsqr) | (u32::from(self.ncqr) << 16)
    }
}

impl Feature for NumberOfQueues {
    const FID: u8 = fid::NUMBER_OF_QUEUES;

    /// The requested counts from Set Features CDW11. Errors if NSQR or NCQR is 0xFFFF (65536 queues,
    /// which the spec forbids asking for).
    fn from_dword(dword: u32) -> Result<Self, WireError> {
        let q = Self::from_dw0(dword);
        if q.nsqr == u16::MAX {
            return Err(WireError::invalid(NUMBER_OF_QUEUES, "nsqr", q.nsqr, "0..=0xFFFE"));
        }
        if q.ncqr == u16::MAX {
            return Err(WireError::invalid(NUMBER_OF_QUEUES, "ncqr", q.ncqr, "0..=0xFFFE"));
        }
        Ok(q)
    }

    fn to_dword(&self) -> u32 {
        self.to_dw0()
    }
}

/// Asynchronous Event Configuration (FID 0Bh; Base 2.0 Figure 329, Linux `NVME_AEN_CFG_*`): which
/// events the controller reports through Asynchronous Event Requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AsyncEventConfiguration {
    /// SMART / Health Critical Warnings (bits 7:0), one bit per Critical Warning bit of the SMART log.
    pub smart_critical_warnings: u8,
    /// Namespace Attribute Notices (bit 8).
    pub namespace_attribute_notices: bool,
    /// Firmware Activation Notices (bit 9).
    pub firmware_activation_notices: bool,
    /// Telemetry Log Notices (bit 10).
    pub telemetry_log_notices: bool,
    /// Asymmetric Namespace Access Change Notices (bit 11).
    pub ana_change_notices: bool,
    /// Predictable Latency Event Aggregate Log Change Notices (bit 12).
    pub predictable_latency_event_aggregate_log_change_notices: bool,
    /// LBA Status Information Notices (bit 13).
    pub lba_status_information_notices: bool,
    /// Endurance Group Event Aggregate Log Change Notices (bit 14).
    pub endurance_group_event_aggregate_log_change_notices: bool,
    /// Discovery Log Page Change Notification (bit 31; discovery controllers).
    pub discovery_log_page_change_notices: bool,
    /// Bits 30:15, which this crate does not name, kept as given (bits outside 30:15 are ignored on
    /// encode).
    pub other: u32,
}

impl AsyncEventConfiguration {
    /// The bits [`other`](Self::other) may hold: 30:15.
    pub const OTHER_MASK: u32 = 0x7fff_8000;
}

impl Feature for AsyncEventConfiguration {
    const FID: u8 = fid::ASYNCHRONOUS_EVENT_CONFIGURATION;

    fn from_dword(dword: u32) -> Result<Self, WireError> {
        let bit = |n: u32| dword & (1 << n) != 0;
        Ok(AsyncEventConfiguration {
            smart_critical_warnings: low_byte(dword),
            namespace_attribute_notices: bit(8),
            firmware_activation_notices: bit(9),
            telemetry_log_notices: bit(10),
            ana_change_notices: bit(11),
            predictable_latency_event_aggregate_log_change_notices: bit(12),
            lba_status_information_notices: bit(13),
            endurance_group_event_aggregate_log_change_notices: bit(14),
            discovery_log_page_change_notices: bit(31),
            other: dword & Self::OTHER_MASK,
        })
    }

    fn to_dword(&self) -> u32 {
        u32::from(self.smart_critical_warnings)
            | (u32::from(self.namespace_attribute_notices) << 8)
            | (u32::from(self.firmware_activation_notices) << 9)
            | (u32::from(self.telemetry_log_notices) << 10)
            | (u32::from(self.ana_change_notices) << 11)
            | (u32::from(self.predictable_latency_event_aggregate_log_change_notices) << 12)
            | (u32::from(self.lba_status_information_notices) << 13)
            | (u32::from(self.endurance_group_event_aggregate_log_change_notices) << 14)
            | (self.other & Self::OTHER_MASK)
            | (u32::from(self.discovery_log_page_change_notices) << 31)
    }
}

/// Keep Alive Timer (FID 0Fh; Base 2.0 Figure 336): Keep Alive Timeout (KATO) in milliseconds; 0
/// disables keep alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeepAliveTimer {
    /// Keep Alive Timeout in milliseconds.
    pub kato_ms: u32,
}

impl Feature for KeepAliveTimer {
    const FID: u8 = fid::KEEP_ALIVE_TIMER;

    fn from_dword(dword: u32) -> Result<Self, WireError> {
        Ok(KeepAliveTimer { kato_ms: dword })
    }

    fn to_dword(&self) -> u32 {
        self.kato_ms
    }
}

const HOST_IDENTIFIER: &str = "HostIdentifier";

/// Host Identifier (FID 81h; Base 2.0 Figures 352–353): Set/Get Features CDW11 bit 0 is Enable
/// Extended Host Identifier (EXHID); the identifier travels as data, 16 bytes with EXHID set and 8
/// without. NVMe over Fabrics uses the 128-bit form, which the host also sends in the Connect data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostIdentifier {
    /// 64-bit Host Identifier (EXHID clear).
    Standard([u8; 8]),
    /// 128-bit Host Identifier (EXHID set).
    Extended([u8; 16]),
}

impl HostIdentifier {
    /// CDW11 bit 0: Enable Extended Host Identifier.
    pub const EXHID: u32 = 1 << 0;

    /// Data bytes the identifier takes for a command whose CDW11 is `cdw11`.
    pub fn data_len(cdw11: u32) -> usize {
        if cdw11 & Self::EXHID != 0 {
            16
        } else {
            8
        }
    }

    /// EXHID for this identifier.
    pub fn exhid(&self) -> bool {
        matches!(self, HostIdentifier::Extended(_))
    }

    /// CDW11 announcing this identifier's size.
    pub fn cdw11(&self) -> u32 {
        u32::from(self.exhid())
    }

    /// The identifier bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            HostIdentifier::Standard(id) => id,
            HostIdentifier::Extended(id) => id,
        }
    }

    /// Parse the identifier from the command's `data` given its CDW11 (EXHID in bit 0). Errors if the
    /// data is shorter than 8 or 16 bytes accordingly.
    pub fn parse(cdw11: u32, data: &[u8]) -> Result<Self, WireError> {
        if cdw11 & Self::EXHID != 0 {
            Ok(HostIdentifier::Extended(*fixed::<16>(data, HOST_IDENTIFIER)?))
        } else {
            Ok(HostIdentifier::Standard(*fixed::<8>(data, HOST_IDENTIFIER)?))
        }
    }

    /// Write the identifier to the start of `data`. Returns the bytes written (8 or 16).
    pub fn encode(&self, data: &mut [u8]) -> Result<usize, WireError> {
        match self {
            HostIdentifier::Standard(id) => *fixed_mut::<8>(data, HOST_IDENTIFIER)? = *id,
            HostIdentifier::Extended(id) => *fixed_mut::<16>(data, HOST_IDENTIFIER)? = *id,
        }
        Ok(self.as_bytes().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn get_features_layout() {
        // Linux struct nvme_features: fid (dword at byte 40), dword11 at byte 44; SEL is CDW10 bits 10:8.
        let cmd = GetFeatures { nsid: 0x0102_0304, fid: fid::NUMBER_OF_QUEUES, sel: Select::Saved, cdw11: 0xa0b0_c0d0 };
        let sqe = cmd.to_sqe();
        assert_eq!(sqe.opcode, 0x0a);
        let b = sqe.to_bytes();
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(&b[40..44], &[0x07, 0x02, 0, 0]);
        assert_eq!(&b[44..48], &[0xd0, 0xc0, 0xb0, 0xa0]);
        assert_eq!(GetFeatures::from_sqe(&sqe).unwrap(), cmd);
        let caps = GetFeatures { sel: Select::SupportedCapabilities, ..cmd }.to_sqe();
        assert_eq!(caps.cdw10, 0x0307);
    }

    #[test]
    fn get_features_rejections() {
        let mut sqe = GetFeatures::new(fid::KEEP_ALIVE_TIMER).to_sqe();
        sqe.cdw10 |= 4 << 8;
        assert!(matches!(GetFeatures::from_sqe(&sqe), Err(WireError::InvalidField { field: "sel", value: 4, .. })));
        sqe.cdw10 = u32::from(fid::KEEP_ALIVE_TIMER) | (7 << 8);
        assert!(GetFeatures::from_sqe(&sqe).is_err());
        sqe.cdw10 = u32::from(fid::KEEP_ALIVE_TIMER);
        assert!(GetFeatures::from_sqe(&sqe).is_ok());
        sqe.opcode = opcode::admin::SET_FEATURES;
        assert!(matches!(GetFeatures::from_sqe(&sqe), Err(WireError::InvalidField { field: "opcode", .. })));
        assert!(SetFeatures::from_sqe(&GetFeatures::new(1).to_sqe()).is_err());
    }

    #[test]
    fn set_features_layout() {
        let cmd = SetFeatures { nsid: 0, fid: fid::HOST_IDENTIFIER, sv: true, cdw11: 1, cdw12: 0x1234_5678 };
        let sqe = cmd.to_sqe();
        assert_eq!(sqe.opcode, 0x09);
        let b = sqe.to_bytes();
        assert_eq!(&b[40..44], &[0x81, 0, 0, 0x80]);
        assert_eq!(&b[44..48], &[1, 0, 0, 0]);
        assert_eq!(&b[48..52], &[0x78, 0x56, 0x34, 0x12]);
        assert_eq!(SetFeatures::from_sqe(&sqe).unwrap(), cmd);
        let set = SetFeatures::new(&KeepAliveTimer { kato_ms: 5000 });
        assert_eq!((set.fid, set.cdw11, set.sv), (0x0f, 5000, false));
        assert_eq!(set.value::<KeepAliveTimer>().unwrap().kato_ms, 5000);
        assert!(matches!(set.value::<VolatileWriteCache>(), Err(WireError::InvalidField { field: "fid", .. })));
    }

    #[test]
    fn feature_identifiers_match_linux() {
        assert_eq!(
            [
                VolatileWriteCache::FID,
                NumberOfQueues::FID,
                AsyncEventConfiguration::FID,
                KeepAliveTimer::FID,
                fid::HOST_IDENTIFIER
            ],
            [0x06, 0x07, 0x0b, 0x0f, 0x81]
        );
    }

    #[test]
    fn supported_capabilities_bits() {
        let caps = SupportedCapabilities { saveable: true, namespace_specific: false, changeable: true };
        assert_eq!(caps.to_dw0(), 0b101);
        assert_eq!(
            SupportedCapabilities::from_dw0(0xffff_fffa),
            SupportedCapabilities { saveable: false, namespace_specific: true, changeable: false }
        );
    }

    #[test]
    fn volatile_write_cache_and_keep_alive() {
        assert_eq!(VolatileWriteCache { wce: true }.to_dword(), 1);
        assert!(VolatileWriteCache::from_dword(0xffff_ffff).unwrap().wce);
        assert!(!VolatileWriteCache::from_dword(0xffff_fffe).unwrap().wce);
        assert_eq!(KeepAliveTimer::from_dword(120_000).unwrap(), KeepAliveTimer { kato_ms: 120_000 });
    }

    #[test]
    fn number_of_queues_layout_and_limits() {
        let q = NumberOfQueues { nsqr: 0x0201, ncqr: 0x0403 };
        assert_eq!(q.to_dword().to_le_bytes(), [0x01, 0x02, 0x03, 0x04]);
        assert_eq!(NumberOfQueues::from_dword(0x0403_0201).unwrap(), q);
        assert_eq!(q.submission_queues(), 0x0202);
        assert!(matches!(
            NumberOfQueues::from_dword(0x0000_ffff),
            Err(WireError::InvalidField { field: "nsqr", value: 0xffff, .. })
        ));
        assert!(matches!(NumberOfQueues::from_dword(0xffff_0000), Err(WireError::InvalidField { field: "ncqr", .. })));
        // The completion may report any value.
        assert_eq!(NumberOfQueues::from_dw0(0xffff_ffff).completion_queues(), 0x1_0000);
        assert_eq!(NumberOfQueues::with_counts(8, 1).unwrap(), NumberOfQueues { nsqr: 7, ncqr: 0 });
        assert_eq!(NumberOfQueues::with_counts(65535, 65535).unwrap().to_dw0(), 0xfffe_fffe);
        assert!(NumberOfQueues::with_counts(0, 1).is_err());
        assert!(NumberOfQueues::with_counts(1, 65536).is_err());
    }

    #[test]
    fn async_event_configuration_bits() {
        // Linux NVME_AEN_CFG_NS_ATTR 1 << 8, FW_ACT 1 << 9, ANA_CHANGE 1 << 11, DISC_CHANGE 1 << 31.
        let one = |f: fn(&mut AsyncEventConfiguration)| {
            let mut c = AsyncEventConfiguration::default();
            f(&mut c);
            c.to_dword()
        };
        assert_eq!(one(|c| c.smart_critical_warnings = 0x1f), 0x1f);
        assert_eq!(one(|c| c.namespace_attribute_notices = true), 1 << 8);
        assert_eq!(one(|c| c.firmware_activation_notices = true), 1 << 9);
        assert_eq!(one(|c| c.telemetry_log_notices = true), 1 << 10);
        assert_eq!(one(|c| c.ana_change_notices = true), 1 << 11);
        assert_eq!(one(|c| c.predictable_latency_event_aggregate_log_change_notices = true), 1 << 12);
        assert_eq!(one(|c| c.lba_status_information_notices = true), 1 << 13);
        assert_eq!(one(|c| c.endurance_group_event_aggregate_log_change_notices = true), 1 << 14);
        assert_eq!(one(|c| c.discovery_log_page_change_notices = true), 1 << 31);
        assert_eq!(one(|c| c.other = u32::MAX), AsyncEventConfiguration::OTHER_MASK);
        let all = AsyncEventConfiguration::from_dword(u32::MAX).unwrap();
        assert!(all.discovery_log_page_change_notices && all.namespace_attribute_notices);
        assert_eq!(all.to_dword(), u32::MAX);
    }

    #[test]
    fn host_identifier_sizes() {
        let data: Vec<u8> = (1..=16).collect();
        let ext = HostIdentifier::parse(HostIdentifier::EXHID, &data).unwrap();
        assert_eq!(ext, HostIdentifier::Extended(data[..].try_into().unwrap()));
        assert_eq!((ext.cdw11(), HostIdentifier::data_len(ext.cdw11())), (1, 16));
        let std = HostIdentifier::parse(0, &data).unwrap();
        assert_eq!(std.as_bytes(), &data[..8]);
        assert_eq!((std.cdw11(), HostIdentifier::data_len(0)), (0, 8));
        assert!(matches!(HostIdentifier::parse(1, &data[..15]), Err(WireError::Short { need: 16, got: 15, .. })));
        assert!(HostIdentifier::parse(0, &data[..7]).is_err());
        let mut out = [0u8; 16];
        assert_eq!(ext.encode(&mut out).unwrap(), 16);
        assert_eq!(&out[..], &data[..]);
        assert!(ext.encode(&mut out[..15]).is_err());
        assert_eq!(std.encode(&mut out[..8]).unwrap(), 8);
    }

    proptest! {
        #[test]
        fn get_features_round_trip(nsid in any::<u32>(), fid in any::<u8>(), sel in 0u32..4, cdw11 in any::<u32>()) {
            let cmd = GetFeatures { nsid, fid, sel: Select::from_bits(sel).unwrap(), cdw11 };
            prop_assert_eq!(GetFeatures::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
        }

        #[test]
        fn features_from_any_sqe(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let mut sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            sqe.opcode = opcode::admin::GET_FEATURES;
            if let Ok(cmd) = GetFeatures::from_sqe(&sqe) {
                prop_assert_eq!(GetFeatures::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
            }
            sqe.opcode = opcode::admin::SET_FEATURES;
            let cmd = SetFeatures::from_sqe(&sqe).unwrap();
            prop_assert_eq!(SetFeatures::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
        }

        #[test]
        fn set_features_round_trip(nsid in any::<u32>(), fid in any::<u8>(), sv in any::<bool>(), cdw11 in any::<u32>(), cdw12 in any::<u32>()) {
            let cmd = SetFeatures { nsid, fid, sv, cdw11, cdw12 };
            prop_assert_eq!(SetFeatures::from_sqe(&cmd.to_sqe()).unwrap(), cmd);
        }

        #[test]
        fn dword_values_round_trip(dword in any::<u32>()) {
            fn check<F: Feature + PartialEq + std::fmt::Debug>(dword: u32) -> Result<(), TestCaseError> {
                if let Ok(v) = F::from_dword(dword) {
                    prop_assert_eq!(F::from_dword(v.to_dword()).unwrap(), v);
                }
                Ok(())
            }
            check::<VolatileWriteCache>(dword)?;
            check::<NumberOfQueues>(dword)?;
            check::<AsyncEventConfiguration>(dword)?;
            check::<KeepAliveTimer>(dword)?;
            prop_assert_eq!(AsyncEventConfiguration::from_dword(dword).unwrap().to_dword(), dword);
            prop_assert_eq!(NumberOfQueues::from_dw0(dword).to_dw0(), dword);
        }

        #[test]
        fn number_of_queues_round_trip(nsqr in 0u16..u16::MAX, ncqr in 0u16..u16::MAX) {
            let q = NumberOfQueues { nsqr, ncqr };
            prop_assert_eq!(NumberOfQueues::from_dword(q.to_dword()).unwrap(), q);
        }

        #[test]
        fn host_identifier_round_trip(cdw11 in any::<u32>(), data in proptest::collection::vec(any::<u8>(), 0..20)) {
            if let Ok(id) = HostIdentifier::parse(cdw11, &data) {
                prop_assert_eq!(id.exhid(), cdw11 & 1 != 0);
                let mut out = [0u8; 16];
                let n = id.encode(&mut out).unwrap();
                prop_assert_eq!(HostIdentifier::parse(id.cdw11(), &out[..n]).unwrap(), id);
            }
        }
    }
}
