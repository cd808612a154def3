//! [`HostError`]: what went wrong on the host side of an association, and where.
//!
//! One enum for the library: every variant names the queue (QID) or the step that failed, so a log line
//! or a CLI message says what happened without a backtrace. It is `Clone` because a failed queue hands the
//! same error to every command that was outstanding on it and to every later submission.

use std::net::SocketAddr;
use std::time::Duration;

use nvmf_common::nvme::Status;
use nvmf_common::transport::tcp::{FatalErrorStatus, PduError};
use nvmf_common::WireError;

/// An error of the NVMe-oF host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The TCP connection could not be opened.
    #[error("connecting to {addr}: {kind:?}: {message}")]
    ConnectFailed {
        /// Where we tried to connect.
        addr: SocketAddr,
        /// The socket error kind.
        kind: std::io::ErrorKind,
        /// The socket error text.
        message: String,
    },
    /// A socket operation failed on an established queue.
    #[error("queue {qid}: {what}: {kind:?}: {message}")]
    Io {
        /// The queue.
        qid: u16,
        /// What the host was doing.
        what: &'static str,
        /// The socket error kind.
        kind: std::io::ErrorKind,
        /// The socket error text.
        message: String,
    },
    /// ICReq/ICResp did not produce a usable connection (digest not granted, bad ICResp …).
    #[error("queue {qid}: NVMe/TCP connection initialization: {reason}")]
    Negotiation {
        /// The queue.
        qid: u16,
        /// What was wrong.
        reason: String,
    },
    /// The controller sent bytes that are not a valid PDU (bad header field, header digest, PLEN beyond
    /// what this host accepts …). Fatal for the queue.
    #[error("queue {qid}: invalid PDU from the controller: {error}")]
    Pdu {
        /// The queue.
        qid: u16,
        /// The decoder's error (carries the Fatal Error Status the host reports).
        error: PduError,
    },
    /// A well-formed PDU that breaks the protocol in this queue's state (unknown CCCID, data outside the
    /// command's buffer, R2T for a read …). Fatal for the queue.
    #[error("queue {qid}: protocol violation by the controller: {reason}; PDU {pdu}")]
    Protocol {
        /// The queue.
        qid: u16,
        /// The offending PDU (its header, as parsed).
        pdu: String,
        /// What is wrong with it.
        reason: String,
        /// The Fatal Error Status the host reports in its H2CTermReq.
        fes: FatalErrorStatus,
    },
    /// NVMe/TCP: the controller reported success for a read (CapsuleResp, or C2HData with SUCCESS) before all
    /// its data arrived: the rest of the buffer holds no data of this read, so the command fails. The PDU
    /// stream is intact, so the queue goes on.
    #[error(
        "queue {qid}: controller reported success for command {cid:#x} after sending {received} of its {expected} \
         data bytes"
    )]
    IncompleteData {
        /// The queue.
        qid: u16,
        /// The command identifier.
        cid: u16,
        /// Data bytes received.
        received: u32,
        /// Data bytes the command reads.
        expected: u32,
    },
    /// The controller ended the connection with a C2HTermReq.
    #[error("queue {qid}: controller sent C2HTermReq: {fes} (FEI {fei:#x})")]
    TermReq {
        /// The queue.
        qid: u16,
        /// Fatal Error Status.
        fes: FatalErrorStatus,
        /// Fatal Error Information.
        fei: u32,
    },
    /// The controller closed the connection.
    #[error("queue {qid}: connection closed by the controller")]
    Closed {
        /// The queue.
        qid: u16,
    },
    /// Something did not happen in time.
    #[error("timeout after {after:?}: {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the host waited.
        after: Duration,
    },
    /// The controller's Connect response asks for what this host cannot give: DH-HMAC-CHAP without a host secret
    /// configured (AUTHREQ ATR), or a secure channel after it (ASCR: TLS concatenation, not implemented).
    #[error(
        "queue {qid}: {}",
        if *secure_channel {
            "the controller requires a secure channel after authentication (AUTHREQ ASCR, TLS concatenation), which \
             this host does not support"
        } else {
            "the controller requires DH-HMAC-CHAP authentication and no host secret is configured (--dhchap-secret, \
             or dhchap_secret in the [[controller]] table)"
        }
    )]
    AuthenticationRequired {
        /// The queue.
        qid: u16,
        /// ASCR: a secure channel (TLS) is to be set up after authentication too.
        secure_channel: bool,
    },
    /// The DH-HMAC-CHAP transaction on a queue failed (a secret mismatch, the controller refused, a bad message).
    #[error("queue {qid}: DH-HMAC-CHAP authentication failed: {error}")]
    Authentication {
        /// The queue.
        qid: u16,
        /// What failed.
        error: nvmf_common::fabrics::auth::AuthError,
    },
    /// The controller ended the connection instead of answering the host's DH-HMAC-CHAP response: Linux nvmet does so
    /// when it rejects the response, its AUTH_Failure1 racing the connection's teardown.
    #[error(
        "queue {qid}: DH-HMAC-CHAP authentication failed: the controller closed the connection after the host's \
         response (it did not accept it: the secret is not the one it has for this host)"
    )]
    AuthenticationClosed {
        /// The queue.
        qid: u16,
    },
    /// The TLS handshake of a queue failed (the target refused the PSK, no kTLS, a timeout).
    #[error("queue {qid}: {error}")]
    Tls {
        /// The queue.
        qid: u16,
        /// What failed.
        error: nvmf_common::transport::tls::TlsError,
    },
    /// The connection cannot leave through the interface asked for (`--host-iface`).
    #[error("host interface {iface}: {message}")]
    HostInterface {
        /// The interface named.
        iface: String,
        /// The operating system's error (ENODEV: no such interface).
        message: String,
    },
    /// The controller refused a Fabrics Connect; the message says why in words.
    #[error("Connect of queue {qid} refused: {} ({status})", connect_refusal(*status, *dw0))]
    ConnectRejected {
        /// The queue.
        qid: u16,
        /// The completion status.
        status: Status,
        /// Completion dword 0 (IATTR/IPO for Connect Invalid Parameters).
        dw0: u32,
    },
    /// A command completed with an error status.
    #[error("{command} failed: {status}")]
    Status {
        /// The command.
        command: &'static str,
        /// The completion status.
        status: Status,
    },
    /// The controller is not usable (CSTS.CFS, RDY did not follow EN, bad Identify data …).
    #[error("controller: {0}")]
    Controller(String),
    /// A structure could not be encoded or the controller's data did not parse.
    #[error("{context}: {error}")]
    Wire {
        /// What the host was doing.
        context: &'static str,
        /// The wire layer's error.
        error: WireError,
    },
    /// The caller asked for something the host cannot do (unknown namespace, misaligned buffer …).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The queue has no free command identifier (a poll-API caller submitted more than the queue size).
    #[error("queue {qid}: all {depth} command identifiers are in use")]
    QueueFull {
        /// The queue.
        qid: u16,
        /// The queue depth.
        depth: u16,
    },
    /// The association was lost and [`crate::ConnectOptions::fast_io_fail_tmo`] has passed: I/O fails
    /// while the controller goes on reconnecting.
    #[error("I/O failed fast: the association was lost {after:?} ago and is still reconnecting (fast_io_fail_tmo)")]
    FastIoFail {
        /// How long ago the association was lost.
        after: Duration,
    },
    /// The controller could not be reconnected within [`crate::ConnectOptions::ctrl_loss_tmo`]; it no
    /// longer tries and all its I/O fails.
    #[error("controller lost: no association for {after:?} (ctrl_loss_tmo), reconnecting stopped")]
    ControllerLost {
        /// How long ago the association was lost.
        after: Duration,
    },
    /// An RDMA verbs or RDMA CM operation of an NVMe/RDMA queue failed, or the controller broke the
    /// NVMe/RDMA protocol (a response for no outstanding command, a failed work completion …). Fatal for the
    /// queue.
    #[error("queue {qid}: NVMe/RDMA: {what}: {message}")]
    Rdma {
        /// The queue.
        qid: u16,
        /// What the host was doing.
        what: &'static str,
        /// The verbs error, or what was wrong.
        message: String,
    },
    /// The controller rejected the RDMA CM connect request of an NVMe/RDMA queue.
    #[error("queue {qid}: RDMA connect to {addr} rejected: {reason}")]
    RdmaRejected {
        /// The queue.
        qid: u16,
        /// Where we tried to connect.
        addr: SocketAddr,
        /// The NVMe/RDMA reject status (decoded), or the RDMA CM status when the reject carried none.
        reason: String,
    },
    /// A multipath namespace has no path that can carry I/O, and none that can come back.
    #[error("namespace {nsid}: no usable path: {reason}")]
    NoPath {
        /// The namespace.
        nsid: u32,
        /// Why none of its paths can serve it.
        reason: String,
    },
    /// The queue or controller was shut down by this host.
    #[error("queue {qid} is shut down")]
    ShutDown {
        /// The queue.
        qid: u16,
    },
}

/// Why a controller refused a Connect, from its status and, for Connect Invalid Parameters, the field dword 0
/// names (NVMe-oF 1.1 §3.3, Figure 21).
pub fn connect_refusal(status: Status, dw0: u32) -> String {
    use nvmf_common::fabrics::connect::InvalidParameter;
    let same = |s: Status| status.same_code(s);
    if same(Status::CONNECT_INVALID_HOST) {
        return "this host NQN is not allowed to connect to the subsystem (the target's allowed hosts do not name it)"
            .into();
    }
    if same(Status::CONNECT_CONTROLLER_BUSY) {
        return "the controller is busy (no controller ID left, or this I/O queue is already connected)".into();
    }
    if same(Status::CONNECT_RESTART_DISCOVERY) {
        return "the subsystem is no longer at this address: run discovery again".into();
    }
    if same(Status::CONNECT_INCOMPATIBLE_FORMAT) {
        return "the controller does not support this Connect record format".into();
    }
    if !same(Status::CONNECT_INVALID_PARAMETERS) {
        return format!("{status}");
    }
    let parameter = InvalidParameter::from_dw0(dw0);
    match parameter.field() {
        Some("subnqn") => "the target has no subsystem with this NQN".into(),
        Some("hostnqn") => "the target does not accept this host NQN".into(),
        Some("hostid") => "the target does not accept this host ID".into(),
        Some("cntlid") => "the subsystem has no controller with this ID for this host (the association ended)".into(),
        Some("qid") => "the controller does not accept this queue ID (more I/O queues than it granted?)".into(),
        Some("sqsize") => "the queue size is above what the controller supports (CAP.MQES)".into(),
        Some("kato") => "the controller does not accept this keep-alive timeout".into(),
        Some(field) => format!("the controller does not accept the Connect's {field}"),
        None => format!("invalid parameter at offset {} of the Connect {:?}", parameter.ipo, parameter.iattr),
    }
}

impl HostError {
    /// An [`HostError::Io`] from a socket error.
    pub(crate) fn io(qid: u16, what: &'static str, e: &std::io::Error) -> Self {
        HostError::Io { qid, what, kind: e.kind(), message: e.to_string() }
    }

    /// A [`HostError::Wire`].
    pub(crate) fn wire(context: &'static str, error: WireError) -> Self {
        HostError::Wire { context, error }
    }

    /// The Fatal Error Status the host reports in an H2CTermReq for this error, if it is one the host
    /// terminates the connection for.
    pub fn fes(&self) -> Option<FatalErrorStatus> {
        match self {
            HostError::Pdu { error, .. } => error.fes(),
            HostError::Protocol { fes, .. } => Some(*fes),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use nvmf_common::fabrics::connect::{data_offset, sqe_offset, InvalidParameter};

    use super::*;

    #[test]
    fn a_refused_connect_says_why_in_words() {
        let refused = |status, dw0| HostError::ConnectRejected { qid: 0, status, dw0 }.to_string();
        let unknown = refused(
            Status::CONNECT_INVALID_PARAMETERS.with_dnr(),
            InvalidParameter::in_data(data_offset::SUBNQN).to_dw0(),
        );
        assert!(
            unknown.starts_with("Connect of queue 0 refused: the target has no subsystem with this NQN ("),
            "{unknown}"
        );
        let host =
            refused(Status::CONNECT_INVALID_HOST.with_dnr(), InvalidParameter::in_data(data_offset::HOSTNQN).to_dw0());
        assert!(host.contains("this host NQN is not allowed to connect to the subsystem"), "{host}");
        let sqsize =
            refused(Status::CONNECT_INVALID_PARAMETERS, InvalidParameter::in_command(sqe_offset::SQSIZE).to_dw0());
        assert!(sqsize.contains("the queue size is above what the controller supports"), "{sqsize}");
        let odd = refused(Status::CONNECT_INVALID_PARAMETERS, InvalidParameter::in_command(7).to_dw0());
        assert!(odd.contains("invalid parameter at offset 7 of the Connect Command"), "{odd}");
        assert!(refused(Status::INTERNAL_ERROR, 0).contains("refused: "), "other statuses keep their name");
    }
}
