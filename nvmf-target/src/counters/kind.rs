//! What a command is ([`CommandKind`], the `opcode` label) and the latency histogram's buckets.

use nvmf_common::nvme::opcode::{admin as admin_op, fctype, io as io_op, FABRICS};
use nvmf_common::nvme::SubmissionQueueEntry;

/// Upper bounds of the latency histogram's buckets in nanoseconds (10 µs .. 10 s, 1-2.5-5 per decade); a last
/// bucket (+Inf) takes the rest.
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets of the latency histogram, +Inf included.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// What a command is, for the `opcode` label. The first [`IO_KINDS`] are the kinds a namespace's counters
/// keep (the NVM command set, plus `Other` for opcodes we do not serve).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum CommandKind {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Flush.
    Flush,
    /// Write Zeroes.
    WriteZeroes,
    /// Dataset Management.
    DatasetManagement,
    /// Compare.
    Compare,
    /// Any opcode not named here.
    Other,
    /// Identify.
    Identify,
    /// Get Log Page.
    GetLogPage,
    /// Get Features.
    GetFeatures,
    /// Set Features.
    SetFeatures,
    /// Keep Alive.
    KeepAlive,
    /// Asynchronous Event Request (held until an event: not in the latency histogram).
    AsyncEventRequest,
    /// Abort.
    Abort,
    /// Fabrics Connect.
    Connect,
    /// Fabrics Property Get.
    PropertyGet,
    /// Fabrics Property Set.
    PropertySet,
    /// Fabrics Disconnect.
    Disconnect,
}

/// Number of [`CommandKind`]s.
pub const ALL_KINDS: usize = 18;

/// Kinds a namespace's counters keep: `Read` ..= `Other`.
pub const IO_KINDS: usize = 7;

impl CommandKind {
    /// Every kind, in index order.
    pub const ALL: [CommandKind; ALL_KINDS] = [
        CommandKind::Read,
        CommandKind::Write,
        CommandKind::Flush,
        CommandKind::WriteZeroes,
        CommandKind::DatasetManagement,
        CommandKind::Compare,
        CommandKind::Other,
        CommandKind::Identify,
        CommandKind::GetLogPage,
        CommandKind::GetFeatures,
        CommandKind::SetFeatures,
        CommandKind::KeepAlive,
        CommandKind::AsyncEventRequest,
        CommandKind::Abort,
        CommandKind::Connect,
        CommandKind::PropertyGet,
        CommandKind::PropertySet,
        CommandKind::Disconnect,
    ];

    /// The kind of `sqe` on an I/O queue (`io`) or on an admin queue.
    pub fn of(sqe: &SubmissionQueueEntry, io: bool) -> Self {
        if sqe.opcode == FABRICS {
            return match sqe.fctype() {
                fctype::CONNECT => CommandKind::Connect,
                fctype::PROPERTY_GET => CommandKind::PropertyGet,
                fctype::PROPERTY_SET => CommandKind::PropertySet,
                fctype::DISCONNECT => CommandKind::Disconnect,
                _ => CommandKind::Other,
            };
        }
        if io {
            match sqe.opcode {
                io_op::READ => CommandKind::Read,
                io_op::WRITE => CommandKind::Write,
                io_op::FLUSH => CommandKind::Flush,
                io_op::WRITE_ZEROES => CommandKind::WriteZeroes,
                io_op::DATASET_MANAGEMENT => CommandKind::DatasetManagement,
                io_op::COMPARE => CommandKind::Compare,
                _ => CommandKind::Other,
            }
        } else {
            match sqe.opcode {
                admin_op::IDENTIFY => CommandKind::Identify,
                admin_op::GET_LOG_PAGE => CommandKind::GetLogPage,
                admin_op::GET_FEATURES => CommandKind::GetFeatures,
                admin_op::SET_FEATURES => CommandKind::SetFeatures,
                admin_op::KEEP_ALIVE => CommandKind::KeepAlive,
                admin_op::ASYNC_EVENT_REQUEST => CommandKind::AsyncEventRequest,
                admin_op::ABORT => CommandKind::Abort,
                _ => CommandKind::Other,
            }
        }
    }

    /// The `opcode` label value.
    pub fn label(self) -> &'static str {
        match self {
            CommandKind::Read => "read",
            CommandKind::Write => "write",
            CommandKind::Flush => "flush",
            CommandKind::WriteZeroes => "write_zeroes",
            CommandKind::DatasetManagement => "dataset_management",
            CommandKind::Compare => "compare",
            CommandKind::Other => "other",
            CommandKind::Identify => "identify",
            CommandKind::GetLogPage => "get_log_page",
            CommandKind::GetFeatures => "get_features",
            CommandKind::SetFeatures => "set_features",
            CommandKind::KeepAlive => "keep_alive",
            CommandKind::AsyncEventRequest => "async_event_request",
            CommandKind::Abort => "abort",
            CommandKind::Connect => "connect",
            CommandKind::PropertyGet => "property_get",
            CommandKind::PropertySet => "property_set",
            CommandKind::Disconnect => "disconnect",
        }
    }

    /// Index into the counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for the kinds a namespace's counters keep.
    pub fn is_io(self) -> bool {
        self.index() < IO_KINDS
    }

    /// False for commands whose completion waits for an event rather than for work (AER).
    pub fn has_latency(self) -> bool {
        self != CommandKind::AsyncEventRequest
    }
}

/// The histogram bucket of a latency.
pub fn latency_bucket(ns: u64) -> usize {
    LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_upper_bounds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(10_000), 0, "le is inclusive");
        assert_eq!(latency_bucket(10_001), 1);
        assert_eq!(latency_bucket(1_000_000), 6);
        assert_eq!(latency_bucket(10_000_000_000), LATENCY_BUCKETS - 2);
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn kinds_are_indexed_in_order() {
        for (i, k) in CommandKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(k.is_io(), i < IO_KINDS);
        }
        let labels: std::collections::BTreeSet<_> = CommandKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), ALL_KINDS);
    }

    #[test]
    fn opcode_numbers_are_read_by_queue_type() {
        let sqe = SubmissionQueueEntry { opcode: 0x02, ..Default::default() };
        assert_eq!(CommandKind::of(&sqe, true), CommandKind::Read);
        assert_eq!(CommandKind::of(&sqe, false), CommandKind::GetLogPage);
        let sqe = SubmissionQueueEntry { opcode: 0x42, ..Default::default() };
        assert_eq!(CommandKind::of(&sqe, true), CommandKind::Other);
    }
}
