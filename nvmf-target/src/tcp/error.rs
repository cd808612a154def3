//! Why an NVMe/TCP connection ended.

use nvmf_common::transport::tcp::{FatalErrorStatus, PduError};
use nvmf_common::wire::WireError;

use super::transfer::ProtocolViolation;
use crate::controller::QueueError;

/// A connection ended abnormally. Whatever the cause, the connection has already told its queue
/// (`Queue::disconnect`); the reactor drops it once no storage I/O of its queue is in flight.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// Reading or writing the socket failed (reset by the peer, broken pipe, …).
    #[error("socket I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The host sent a malformed PDU; a C2HTermReq with its FES/FEI was sent.
    #[error("malformed PDU from the host (C2HTermReq sent): {0}")]
    Pdu(#[source] PduError),
    /// The host sent a well-formed PDU the protocol state does not allow; a C2HTermReq was sent.
    #[error("NVMe/TCP protocol violation by the host (C2HTermReq sent): {0}")]
    Protocol(#[from] ProtocolViolation),
    /// The host ended the connection with an H2CTermReq.
    #[error("host terminated the connection: H2CTermReq {fes} (FEI {fei:#x})")]
    HostTerminated {
        /// The host's Fatal Error Status.
        fes: FatalErrorStatus,
        /// The host's Fatal Error Information.
        fei: u32,
    },
    /// The controller ended the queue (keep-alive expiry, association teardown, a fatal command error).
    #[error("queue ended the connection: {0}")]
    Queue(#[source] QueueError),
    /// The host made no progress for the target's transfer timeout while the connection waited on it: it read
    /// none of the data queued for it, or sent none of the data an R2T asked for.
    #[error("the host stalled: no progress for {timeout_ms} ms with data to read or to send")]
    Stalled {
        /// The transfer timeout.
        timeout_ms: u32,
    },
    /// A PDU could not be encoded (a bug: an internal length or field out of range).
    #[error("could not encode a PDU: {0}")]
    Encode(#[from] WireError),
}
