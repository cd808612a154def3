//! [`PduError`]: what a receiver found wrong with a PDU, with the Fatal Error Status and Information its
//! TermReq carries, or the status of the command a data digest error fails.

use std::fmt;

use super::super::digest::DigestMismatch;
use super::{Direction, Pdu, PduType, TermReq};
use crate::nvme::status::Status;
use crate::wire::WireError;

/// Fatal Error Status of a TermReq (FES; Linux `enum nvme_tcp_fatal_error_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FatalErrorStatus {
    /// 0x01: Invalid PDU Header Field; FEI is the byte offset of the field.
    InvalidPduHeaderField,
    /// 0x02: PDU Sequence Error (a PDU the protocol state does not allow).
    PduSequenceError,
    /// 0x03: Header Digest Error.
    HeaderDigestError,
    /// 0x04: Data Transfer Out of Range (data beyond the command's transfer length).
    DataTransferOutOfRange,
    /// 0x05: Data Transfer Limit Exceeded (more data than MAXH2CDATA or the in-capsule limit, or more R2Ts
    /// than MAXR2T; Linux names this value both `NVME_TCP_FES_DATA_LIMIT_EXCEEDED` and
    /// `NVME_TCP_FES_R2T_LIMIT_EXCEEDED`).
    DataTransferLimitExceeded,
    /// 0x06: Unsupported Parameter; FEI is the byte offset of the field.
    UnsupportedParameter,
}

impl FatalErrorStatus {
    /// The FES for its 16-bit value, if it names one.
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0x01 => FatalErrorStatus::InvalidPduHeaderField,
            0x02 => FatalErrorStatus::PduSequenceError,
            0x03 => FatalErrorStatus::HeaderDigestError,
            0x04 => FatalErrorStatus::DataTransferOutOfRange,
            0x05 => FatalErrorStatus::DataTransferLimitExceeded,
            0x06 => FatalErrorStatus::UnsupportedParameter,
            _ => return None,
        })
    }

    /// The 16-bit FES value.
    pub fn to_u16(self) -> u16 {
        match self {
            FatalErrorStatus::InvalidPduHeaderField => 0x01,
            FatalErrorStatus::PduSequenceError => 0x02,
            FatalErrorStatus::HeaderDigestError => 0x03,
            FatalErrorStatus::DataTransferOutOfRange => 0x04,
            FatalErrorStatus::DataTransferLimitExceeded => 0x05,
            FatalErrorStatus::UnsupportedParameter => 0x06,
        }
    }
}

impl fmt::Display for FatalErrorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FatalErrorStatus::InvalidPduHeaderField => "Invalid PDU Header Field",
            FatalErrorStatus::PduSequenceError => "PDU Sequence Error",
            FatalErrorStatus::HeaderDigestError => "Header Digest Error",
            FatalErrorStatus::DataTransferOutOfRange => "Data Transfer Out of Range",
            FatalErrorStatus::DataTransferLimitExceeded => "Data Transfer Limit Exceeded",
            FatalErrorStatus::UnsupportedParameter => "Unsupported Parameter",
        })
    }
}

/// A PDU that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    /// A fatal transport error: the receiver sends a TermReq with `fes` and `fei` (see
    /// [`PduError::term_req`]) and closes the connection.
    #[error("fatal NVMe/TCP error ({fes}, FEI {fei:#x}): {source}")]
    Fatal {
        /// Fatal Error Status for the TermReq.
        fes: FatalErrorStatus,
        /// Fatal Error Information for the TermReq: the byte offset of the offending header field for
        /// Invalid PDU Header Field and Unsupported Parameter, otherwise 0.
        fei: u32,
        /// What was wrong, naming the PDU and field.
        #[source]
        source: WireError,
    },
    /// The header digest does not match the header: fatal, FES Header Digest Error.
    #[error("{pdu_type:?} PDU: header {mismatch}")]
    HeaderDigest {
        /// Type of the PDU whose header digest failed (as its header claims).
        pdu_type: PduType,
        /// Received and computed digests.
        #[source]
        mismatch: DigestMismatch,
    },
    /// The data digest does not match the data. Not fatal: the command the PDU belongs to completes with
    /// Transient Transport Error ([`PduError::status`]), and the receiver continues with the next PDU,
    /// `consumed` bytes on.
    #[error("{:?} PDU: data {mismatch}", pdu.pdu_type())]
    DataDigest {
        /// The PDU whose data failed its digest (its header was intact).
        pdu: Pdu,
        /// The PDU's length on the wire (PLEN): where the next PDU starts.
        consumed: usize,
        /// Received and computed digests.
        #[source]
        mismatch: DigestMismatch,
    },
}

impl PduError {
    pub(super) fn fatal(fes: FatalErrorStatus, fei: u32, source: WireError) -> Self {
        PduError::Fatal { fes, fei, source }
    }

    pub(super) fn header_field(
        fei: u32,
        pdu: &'static str,
        field: &'static str,
        value: impl Into<u64>,
        allowed: &'static str,
    ) -> Self {
        PduError::fatal(FatalErrorStatus::InvalidPduHeaderField, fei, WireError::invalid(pdu, field, value, allowed))
    }

    /// Whether the connection must be terminated.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, PduError::DataDigest { .. })
    }

    /// The Fatal Error Status to send in a TermReq, for fatal errors.
    pub fn fes(&self) -> Option<FatalErrorStatus> {
        match self {
            PduError::Fatal { fes, .. } => Some(*fes),
            PduError::HeaderDigest { .. } => Some(FatalErrorStatus::HeaderDigestError),
            PduError::DataDigest { .. } => None,
        }
    }

    /// The Fatal Error Information to send in a TermReq (0 where the FES defines none).
    pub fn fei(&self) -> u32 {
        match self {
            PduError::Fatal { fei, .. } => *fei,
            _ => 0,
        }
    }

    /// The TermReq a receiver travelling in `receiving` direction sends back (a controller, receiving
    /// host-to-controller PDUs, answers with a C2HTermReq), or `None` for a non-fatal error. Send the first
    /// [`TERM_REQ_MAX_DATA_LEN`](super::TERM_REQ_MAX_DATA_LEN) bytes of the offending PDU header as its data
    /// ([`TermReq::error_data`]).
    pub fn term_req(&self, receiving: Direction) -> Option<TermReq> {
        let direction = match receiving {
            Direction::HostToController => Direction::ControllerToHost,
            Direction::ControllerToHost => Direction::HostToController,
        };
        self.fes().map(|fes| TermReq { direction, fes, fei: self.fei() })
    }

    /// The NVMe status to complete the affected command with, for a non-fatal error (a data digest error
    /// completes the command with Transient Transport Error).
    pub fn status(&self) -> Option<Status> {
        match self {
            PduError::DataDigest { .. } => Some(Status::TRANSIENT_TRANSPORT_ERROR),
            _ => None,
        }
    }
}
