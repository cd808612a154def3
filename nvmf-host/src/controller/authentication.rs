//! In-band authentication of a queue (DH-HMAC-CHAP) right after its Fabrics Connect, before anything else is sent on
//! it: the admin queue and every I/O queue, on every association (so again after a reconnect), as the Linux host does.
//!
//! When: the Connect response's AUTHREQ asks for it (ATR), or the options hold a controller secret (the host then
//! authenticates the controller whether or not it asked: a controller that cannot prove it holds the secret is not
//! used). A controller that asks for a secure channel (ASCR) or for authentication without a host secret given is an
//! error naming what is missing. The transaction itself is [`HostTransaction`] (nvmf-common), driven here over
//! Authentication Send and Receive commands by the caller's `exchange` (the queue's I/O thread, or a bare queue
//! polled on the caller's thread); on an error this side found, it sends AUTH_Failure2 before giving up.
//!
//! Secure channel concatenation (`--concat`, [`authenticate_concatenated`]): the admin queue of a plaintext connection
//! authenticates asking for a generated PSK (SC_C 02h); the caller then connects again over TLS with it, and those
//! queues authenticate only if the controller asks (nvmet does not).
//!
//! Blocks the connecting thread for the four or five commands, each bounded by the caller's timeout. The host secret,
//! the controller secret and what is derived from them are never logged.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use nvmf_common::fabrics::auth::command::AuthenticationCommand;
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::host::{HostCredentials, HostTransaction};
use nvmf_common::fabrics::auth::{secure_channel, AuthError, OsRandom, SequenceNumbers};
use nvmf_common::fabrics::connect::ConnectResponse;
use nvmf_common::fabrics::tls::{derive_generated_tls_psk, PskHash};
use nvmf_common::nvme::SubmissionQueueEntry;
use nvmf_common::transport::tls::HandshakePsk;
use zeroize::Zeroizing;

use super::options::ConnectOptions;
use crate::error::HostError;
use crate::queue::DataDirection;

/// S2 of this host's challenges: one counter for the process, as Linux keeps one.
static SEQUENCE: SequenceNumbers = SequenceNumbers::new();

/// Transaction identifiers: unique per transaction in flight, which a process-wide counter gives.
static TRANSACTION: AtomicU16 = AtomicU16::new(0);

/// Allocation length of each Authentication Receive: Linux's (its CHAP_BUF_SIZE), enough for a ffdhe8192 challenge
/// (16 + 64 + 1024 bytes); nvmet answers with exactly this many bytes.
const RECEIVE_LEN: u32 = 4096;

/// One command of a transaction: `(name, sqe, direction, data)` in, the data received (Receive) out; a non-success
/// status is an error.
pub(super) type Exchange<'a> =
    dyn FnMut(&'static str, SubmissionQueueEntry, DataDirection, Vec<u8>) -> Result<Vec<u8>, HostError> + 'a;

/// Authenticate queue `qid` if the Connect `response` or the options call for it (see the module docs).
pub(super) fn authenticate(
    qid: u16,
    response: &ConnectResponse,
    options: &ConnectOptions,
    subnqn: &str,
    exchange: &mut Exchange<'_>,
) -> Result<(), HostError> {
    if response.ascr {
        return Err(HostError::AuthenticationRequired { qid, secure_channel: true });
    }
    // Concatenation: the connection is secured with the PSK the admin queue's authentication generated; nothing
    // more to prove unless the controller asks (nvmet does not).
    if !response.atr && (options.dhchap_ctrl_secret.is_none() || options.concat) {
        if options.dhchap_secret.is_some() {
            tracing::debug!(subnqn, qid, "DH-HMAC-CHAP: queue not asked to authenticate (AUTHREQ clear)");
        }
        return Ok(());
    }
    transaction(qid, options, subnqn, exchange, secure_channel::NONE).map(|_| ())
}

/// Secure channel concatenation on a plaintext admin queue (`--concat`): authenticate asking for a new PSK
/// (SC_C 02h, as Linux), and return the identity and TLS PSK to connect again with.
pub(super) fn authenticate_concatenated(
    response: &ConnectResponse,
    options: &ConnectOptions,
    subnqn: &str,
    exchange: &mut Exchange<'_>,
) -> Result<Arc<HandshakePsk>, HostError> {
    if !response.atr {
        return Err(HostError::Controller(
            "--concat: the controller did not ask the admin queue to authenticate (AUTHREQ ATR clear), so no PSK can \
             be generated: has the host a DH-HMAC-CHAP key there?"
                .into(),
        ));
    }
    let generated = transaction(0, options, subnqn, exchange, secure_channel::NEW_TLS_PSK)?;
    let concat = |reason: String| HostError::Controller(format!("--concat: {reason}"));
    let (hash, psk) = generated.ok_or_else(|| concat("the transaction generated no PSK".into()))?;
    let psk_hash = PskHash::from_id(hash.id()).ok_or_else(|| concat(format!("{} is not a TLS hash", hash.name())))?;
    let derived =
        derive_generated_tls_psk(psk_hash, &psk, &options.hostnqn, subnqn).map_err(|e| concat(e.to_string()))?;
    tracing::info!(subnqn, hash = hash.name(), "secure channel concatenation: TLS PSK generated; connecting over TLS");
    Ok(Arc::new(HandshakePsk::from(derived)))
}

/// A generated PSK and the hash of the transaction that generated it.
type GeneratedPsk = (HashFunction, Zeroizing<Vec<u8>>);

/// One transaction on queue `qid` asking for secure channel concatenation `sc_c`; the generated PSK when it did.
fn transaction(
    qid: u16,
    options: &ConnectOptions,
    subnqn: &str,
    exchange: &mut Exchange<'_>,
    sc_c: u8,
) -> Result<Option<GeneratedPsk>, HostError> {
    let Some(secret) = &options.dhchap_secret else {
        return Err(HostError::AuthenticationRequired { qid, secure_channel: false });
    };
    let credentials = HostCredentials {
        secret,
        controller_secret: options.dhchap_ctrl_secret.as_ref(),
        hostnqn: &options.hostnqn,
        subnqn,
    };
    let mut t =
        HostTransaction::new(credentials, TRANSACTION.fetch_add(1, Ordering::Relaxed)).with_secure_channel(sc_c);
    send(exchange, t.negotiate())?;
    let challenge = receive(exchange)?;
    let reply = t.reply(&challenge, &SEQUENCE, &mut OsRandom);
    let reply = refuse(&t, qid, exchange, reply)?;
    send(exchange, reply)?;
    // nvmet answers a response it rejects by ending the association: the Failure1 may never arrive.
    let success1 = receive(exchange).map_err(|e| match e {
        HostError::Closed { .. } => HostError::AuthenticationClosed { qid },
        e => e,
    })?;
    let success2 = t.success(&success1);
    if let Some(success2) = refuse(&t, qid, exchange, success2)? {
        send(exchange, success2)?;
    }
    if let Some(n) = t.outcome() {
        let who = if n.bidirectional { "host and controller" } else { "host" };
        if qid == 0 {
            tracing::info!(subnqn, "DH-HMAC-CHAP: {who} authenticated with {} and {}", n.hash.name(), n.group.name());
        } else {
            tracing::debug!(subnqn, qid, "DH-HMAC-CHAP: queue authenticated");
        }
    }
    Ok(t.generated_psk().map(|(hash, psk)| (hash, Zeroizing::new(psk.to_vec()))))
}

/// `result`, or its error after sending the AUTH_Failure2 it calls for (best effort: the error is what counts).
fn refuse<T>(
    t: &HostTransaction<'_>,
    qid: u16,
    exchange: &mut Exchange<'_>,
    result: Result<T, AuthError>,
) -> Result<T, HostError> {
    result.map_err(|error| {
        if let Some(reason) = error.failure_reason() {
            let _ = send(exchange, t.failure2(reason));
        }
        HostError::Authentication { qid, error }
    })
}

fn send(exchange: &mut Exchange<'_>, message: Vec<u8>) -> Result<(), HostError> {
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let sqe = AuthenticationCommand::send(length).to_sqe();
    exchange("Authentication Send", sqe, DataDirection::HostToController, message).map(|_| ())
}

fn receive(exchange: &mut Exchange<'_>) -> Result<Vec<u8>, HostError> {
    let sqe = AuthenticationCommand::receive(RECEIVE_LEN).to_sqe();
    exchange("Authentication Receive", sqe, DataDirection::ControllerToHost, vec![0; RECEIVE_LEN as usize])
}

#[cfg(test)]
mod tests {
    use nvmf_common::fabrics::auth::command::{AuthenticationCommand, Direction};
    use nvmf_common::fabrics::auth::message::{Challenge, Failure, FailureKind, Header, Negotiate};
    use nvmf_common::fabrics::auth::secret::DhchapSecret;
    use nvmf_common::fabrics::auth::FailureReason;

    use super::*;

    /// Every command the host sent: (Send or Receive, the message sent).
    type Log = Vec<(Direction, Vec<u8>)>;

    /// A controller that answers each Receive with the next of `answers`, in the transaction the Negotiate opened.
    fn run(response: ConnectResponse, options: &ConnectOptions, answers: Vec<Vec<u8>>) -> (Result<(), HostError>, Log) {
        let mut log = Log::new();
        let mut answers = answers.into_iter();
        let mut exchange = |_: &'static str, sqe: SubmissionQueueEntry, _: DataDirection, data: Vec<u8>| {
            let c = AuthenticationCommand::from_sqe(&sqe).unwrap();
            assert!(c.is_dhchap());
            log.push((c.direction, data));
            if c.direction == Direction::Send {
                return Ok(Vec::new());
            }
            // Past its answers the controller closes the connection.
            let mut answer = answers.next().ok_or(HostError::Closed { qid: 3 })?;
            if answer.len() >= 6 {
                answer[4..6].copy_from_slice(&log[0].1[4..6]);
            }
            Ok(answer)
        };
        let result = authenticate(3, &response, options, "nqn.2024-01.io.nvmf-rs:auth", &mut exchange);
        (result, log)
    }

    fn options(host: bool, ctrl: bool) -> ConnectOptions {
        let s = DhchapSecret::new(None, &[1; 32]).unwrap();
        ConnectOptions {
            dhchap_secret: host.then(|| s.clone()),
            dhchap_ctrl_secret: ctrl.then_some(s),
            ..ConnectOptions::default()
        }
    }

    const ATR: ConnectResponse = ConnectResponse { cntlid: 1, atr: true, ascr: false };
    const NONE: ConnectResponse = ConnectResponse { cntlid: 1, atr: false, ascr: false };

    #[test]
    fn nothing_is_sent_unless_asked_or_a_controller_secret_is_given() {
        let (r, log) = run(NONE, &options(true, false), vec![]);
        assert!(r.is_ok() && log.is_empty());
        // With a controller secret the host opens a transaction of its own.
        let (_, log) = run(NONE, &options(true, true), vec![]);
        assert_eq!(log[0].0, Direction::Send);
        assert!(Negotiate::parse(&log[0].1).is_ok());
    }

    #[test]
    fn what_cannot_be_given_is_named() {
        let (r, log) = run(ATR, &options(false, false), vec![]);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("queue 3: the controller requires DH-HMAC-CHAP authentication and no host secret"), "{e}");
        assert!(log.is_empty());
        let ascr = ConnectResponse { ascr: true, ..ATR };
        let e = run(ascr, &options(true, false), vec![]).0.unwrap_err().to_string();
        assert!(e.contains("requires a secure channel after authentication"), "{e}");
    }

    #[test]
    fn an_unusable_challenge_is_answered_with_failure2() {
        let challenge = Challenge { t_id: 0, hashid: 0x09, dhgid: 0, seqnum: 1, cval: &[0; 32], dhv: &[] };
        let (r, log) = run(ATR, &options(true, false), vec![challenge.to_bytes().unwrap()]);
        let e = r.unwrap_err();
        assert!(matches!(e, HostError::Authentication { qid: 3, error: AuthError::HashUnusable(9) }), "{e}");
        let (direction, last) = log.last().unwrap();
        assert_eq!(*direction, Direction::Send);
        let f = Failure::parse(last, FailureKind::Failure2).unwrap();
        assert_eq!((f.t_id, f.reason), (Header::parse(&log[0].1).unwrap().t_id, FailureReason::HashUnusable));
    }

    #[test]
    fn a_close_after_the_reply_says_the_response_was_not_accepted() {
        let challenge = Challenge { t_id: 0, hashid: 0x01, dhgid: 0, seqnum: 1, cval: &[0; 32], dhv: &[] };
        let (r, log) = run(ATR, &options(true, false), vec![challenge.to_bytes().unwrap()]);
        assert!(matches!(r, Err(HostError::AuthenticationClosed { qid: 3 })), "{r:?}");
        assert_eq!(log.len(), 4, "negotiate, receive, reply, receive: {log:?}");
    }

    #[test]
    fn the_controllers_failure1_ends_it_without_failure2() {
        let refusal = Failure { kind: FailureKind::Failure1, t_id: 0, reason: FailureReason::DhGroupUnusable };
        let (r, log) = run(ATR, &options(true, false), vec![refusal.to_bytes()]);
        let e = r.unwrap_err().to_string();
        assert_eq!(e, "queue 3: DH-HMAC-CHAP authentication failed: the peer refused: no usable DH group");
        assert_eq!(log.len(), 2, "negotiate and one receive: {log:?}");
    }

    #[test]
    fn concatenation_generates_the_psk_the_controller_keeps() {
        use nvmf_common::fabrics::auth::controller::{
            ControllerCredentials, ControllerTransaction, SecureChannelPolicy,
        };
        use nvmf_common::fabrics::tls::{derive_generated_tls_psk, PskHash};
        let subnqn = "nqn.2024-01.io.nvmf-rs:auth";
        let mut o = options(true, false);
        o.concat = true;
        let mut controller = ControllerTransaction::new(ControllerCredentials {
            host_secret: o.dhchap_secret.clone().unwrap(),
            controller_secret: None,
            hostnqn: o.hostnqn.clone(),
            subnqn: subnqn.into(),
            hashes: Vec::new(),
            dh_groups: Vec::new(),
        });
        controller.set_secure_channel(SecureChannelPolicy::Plaintext);
        let seq = SequenceNumbers::new();
        let mut exchange = |_: &'static str, sqe: SubmissionQueueEntry, _: DataDirection, data: Vec<u8>| {
            match AuthenticationCommand::from_sqe(&sqe).unwrap().direction {
                Direction::Send => controller.send(&data, &seq, &mut OsRandom).map(|()| Vec::new()).or(Ok(Vec::new())),
                Direction::Receive => Ok(controller.receive()),
            }
        };
        let psk = authenticate_concatenated(&ATR, &o, subnqn, &mut exchange).unwrap();
        let (hash, generated) = controller.generated_psk().expect("the controller's generated PSK");
        let expected = derive_generated_tls_psk(PskHash::from_id(hash.id()).unwrap(), generated, &o.hostnqn, subnqn);
        let expected = expected.unwrap();
        assert_eq!(psk.identity, expected.identity.as_bytes());
        assert!(expected.identity.starts_with("NVMe1G01 "), "{}", expected.identity);
        assert_eq!(psk.key, expected.key);
        // A controller that does not ask to authenticate generates nothing.
        let e = authenticate_concatenated(&NONE, &o, subnqn, &mut |_, _, _, _| Ok(Vec::new())).unwrap_err();
        assert!(e.to_string().contains("AUTHREQ ATR clear"), "{e}");
        // Over a connection so secured, queues authenticate only when asked, controller secret or not.
        let mut both = options(true, true);
        both.concat = true;
        let (r, log) = run(NONE, &both, Vec::new());
        assert!(r.is_ok() && log.is_empty(), "{r:?} {log:?}");
    }

    #[test]
    fn concat_options_are_checked_as_the_kernel_checks_them() {
        let mut o = options(false, false);
        o.concat = true;
        assert!(o.check_dhchap().unwrap_err().to_string().contains("needs DH-HMAC-CHAP"));
        let mut o = options(true, false);
        o.concat = true;
        assert!(o.check_dhchap().is_ok());
        o.tls = Some(crate::controller::options::TlsKeyOptions {
            key: "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:".parse().unwrap(),
            identity_version: nvmf_common::fabrics::tls::IdentityVersion::V1,
            derivation: nvmf_common::fabrics::tls::PskDerivation::Rfc8446,
        });
        assert!(o.check_dhchap().unwrap_err().to_string().contains("no --tls"));
    }
}
