//! In-band authentication of a queue (NVMe Base 2.0 §8.13; TP 8006): Authentication Send and Receive, and what a
//! queue may do before it is authenticated.
//!
//! A Connect from a host that has DH-HMAC-CHAP keys in the subsystem is answered with ATR (authentication
//! required), on the admin queue and on every I/O queue, as nvmet does. Until the queue's transaction succeeds it
//! takes Authentication Send and Receive only; anything else completes with Authentication Required (SCT 1h,
//! SC 91h) and DNR. A queue that is not authenticated within the connect timeout ends like one that never
//! connected. An authenticated queue that receives a new AUTH_Negotiate (the host re-authenticates, e.g. after
//! its key was changed) runs a new transaction while its I/O continues. A failed transaction ends its queue once
//! its last message (the AUTH_Failure1, or the answer to the host's AUTH_Failure2) is sent, and the association only
//! if that is the admin queue (nvmet ends the association, `nvmet_ctrl_fatal_error`, so a peer that knows a host's
//! NQN, host ID and CNTLID could end it by failing on purpose); from the failure on, the queue takes no other command.
//! Until its first transaction succeeds a queue is charged to the anonymous buffer share, and an I/O queue holds no
//! QID (it takes it when authenticated), so such a peer cannot keep the real host's queue out either. A
//! re-authentication that does not finish within the connect timeout is dropped with its key material and counted
//! as a failure (nvmet expires its transactions likewise): the queue keeps its earlier authentication, and a later
//! message of the stalled transaction fails it.
//!
//! Secure channel concatenation (SC_C, as nvmet): an admin queue takes SC_C 02h on a plaintext connection to a
//! listener that offers TLS (`tls = "allowed"`; a `required` one takes no plaintext connection), 03h on one secured
//! with TLS; anything else fails with reason 03h. Once such a transaction succeeds, the generated PSK's TLS PSK is
//! kept in [`Target::generated_psks`] under its `NVMe1G..` identity for the TLS gate, and a connection secured
//! with it is not asked to authenticate (see `connect`). The plaintext association stays usable, as nvmet's.
//!
//! The transactions are [`ControllerTransaction`]s, with the host's keys read from the subsystem when each
//! starts (a reload's new keys apply to the next; a host whose keys name no DH group gets the target's,
//! `[target] dhchap_dhgroups`). Messages are bounded: an Authentication Send carries at most
//! [`MAX_HOST_MESSAGE_LEN`] bytes, an Authentication Receive asks for at most [`MAX_RECEIVE_LEN`].
//!
//! DH work never runs on the reactor: an Authentication Send whose message makes a key pair (an AUTH_Negotiate
//! answered with an FFDHE group) or a shared secret (the Reply) hands the transaction and the message to the
//! target's pool (`[target] auth_threads`, [`IoEngine::offload`]) and its slot waits like a storage op; the
//! completion, routed by its storage tag, gives the transaction back and the command completes. Meanwhile the queue
//! answers any other Authentication Send or Receive with Command Sequence Error. A full pool queue
//! (`auth_queue_depth`) parks the command as a full ring does. What that work costs is bounded three ways: the
//! groups allowed by default leave out ffdhe6144 and ffdhe8192; AUTH_Negotiates from one peer address prefix are
//! limited to `[target] auth_attempts_per_second` (one more fails its transaction with AUTH_Failure1, counted in
//! `nvmf_target_auth_rate_limited_total`); and more than [`MAX_NEGOTIATIONS`] without a transaction succeeding end
//! the queue.

use std::any::Any;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::auth::command::{AuthenticationCommand, Direction as AuthDirection};
use nvmf_common::fabrics::auth::controller::{
    ControllerTransaction, Progress, SecureChannelPolicy, MAX_HOST_MESSAGE_LEN,
};
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::message::{auth_id, Header, AUTH_TYPE_COMMON};
use nvmf_common::fabrics::auth::{AuthError, FailureReason, OsRandom, SequenceNumbers};
use nvmf_common::fabrics::discovery::{TcpSecurityType, Tsas};
use nvmf_common::fabrics::tls::{derive_generated_tls_psk, PskHash};
use nvmf_common::nvme::opcode::{fctype, FABRICS};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{storage_tag, Plan, Queue, QueueKind, QueueState, SlotId, Step};
use crate::backend::IoEngine;
use crate::controller::io::{self, DataSource, Direction};
use crate::controller::Target;

/// The largest allocation length an Authentication Receive may ask for: the Linux host's (its `CHAP_BUF_SIZE`,
/// 4 KiB; nvmet answers with the whole allocation length, zero padded, and so does this target).
pub const MAX_RECEIVE_LEN: u32 = 4096;

/// AUTH_Negotiates a queue may send without a transaction succeeding in between (each costs a DH key pair at the
/// target's pool): a peer that restarts more often ends the queue.
pub const MAX_NEGOTIATIONS: u8 = 4;

/// The S1 of this target's challenges: one counter for the process, as nvmet keeps one.
static SEQUENCE: SequenceNumbers = SequenceNumbers::new();

/// A queue's authentication state.
#[derive(Debug, Default)]
pub(super) struct QueueAuth {
    /// The host has keys here: the queue must authenticate.
    required: bool,
    /// The last transaction succeeded (and no failure since).
    authenticated: bool,
    /// The current or last transaction.
    transaction: Option<Box<ControllerTransaction>>,
    /// The current transaction's failure was counted and logged.
    failure_counted: bool,
    /// AUTH_Negotiates since the last transaction that succeeded (at most [`MAX_NEGOTIATIONS`]).
    negotiations: u8,
    /// The slot whose response is a failed transaction's last message: once released, the queue ends.
    failed_slot: Option<u16>,
    /// A failed transaction's last message was sent: the queue ends at its next poll.
    ended: bool,
    /// When the re-authentication under way expires (the first transaction has the connect deadline instead).
    expires: Option<Instant>,
    /// The slot whose DH step is at the pool or parked for room there: the transaction is with the step.
    step_slot: Option<u16>,
    /// The transaction of the step under way expired meanwhile: drop it when it comes back.
    step_expired: bool,
}

/// A transaction's step off the reactor: the message to send it, and the outcome.
#[derive(Debug)]
pub(super) struct DhStep {
    transaction: Box<ControllerTransaction>,
    message: Vec<u8>,
    result: Result<(), AuthError>,
}

/// The work of a [`DhStep`], on a pool thread.
fn run_step(payload: &mut (dyn Any + Send)) {
    if let Some(step) = payload.downcast_mut::<DhStep>() {
        step.result = step.transaction.send(&step.message, &SEQUENCE, &mut OsRandom);
    }
}

impl QueueAuth {
    /// Whether the queue takes only authentication commands now.
    pub(super) fn blocks_commands(&self) -> bool {
        self.required && !self.authenticated
    }

    /// Whether the queue waits for its first transaction to succeed (the connect deadline applies).
    pub(super) fn pending(&self) -> bool {
        self.required && !self.authenticated && self.failed_slot.is_none() && !self.ended
    }

    /// Whether a failed transaction has ended the queue (it must go at the next poll).
    pub(super) fn ended(&self) -> bool {
        self.ended
    }

    /// When the re-authentication under way expires, if one is.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.expires
    }

    /// The transport released `slot`: true if that was the failed transaction's last message.
    pub(super) fn released(&mut self, slot: u16) -> bool {
        if self.failed_slot == Some(slot) {
            self.failed_slot = None;
            self.ended = true;
        }
        self.ended
    }
}

/// Whether `sqe` is Authentication Send or Receive.
pub(super) fn is_authentication_command(sqe: &SubmissionQueueEntry) -> bool {
    sqe.opcode == FABRICS && matches!(sqe.fctype(), fctype::AUTHENTICATION_SEND | fctype::AUTHENTICATION_RECEIVE)
}

impl Queue {
    /// After a successful Connect: whether the host must authenticate this queue.
    pub(super) fn require_authentication(&mut self, required: bool) {
        self.auth = QueueAuth { required, ..QueueAuth::default() };
    }

    /// Authentication Send or Receive on a connected queue.
    pub(super) fn authentication_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        let invalid = Status::INVALID_FIELD.with_dnr();
        if let Err(status) = io::check_flags(sqe) {
            return self.respond_err(engine, id, status, 0);
        }
        let command = match AuthenticationCommand::from_sqe(sqe) {
            Ok(c) if c.is_dhchap() => c,
            _ => return self.respond_err(engine, id, invalid, 0),
        };
        if !self.auth.required || self.auth.step_slot.is_some() {
            // No keys for this host: nothing to authenticate with; or the host did not wait for its last Send.
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        let trtype = self.transport.trtype;
        match command.direction {
            AuthDirection::Send => {
                let tl = command.length;
                if tl == 0 || usize::try_from(tl).map_or(true, |n| n > MAX_HOST_MESSAGE_LEN) {
                    return self.respond_err(engine, id, invalid, 0);
                }
                match io::data_source(sqe, trtype, Direction::ToController, in_capsule.len()) {
                    Err(status) => self.respond_err(engine, id, status, 0),
                    Ok((_, len)) if len != tl => {
                        self.respond_err(engine, id, Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0)
                    }
                    Ok((DataSource::InCapsule { offset }, len)) => {
                        let message = in_capsule.get(offset..offset + len as usize).unwrap_or_default().to_vec();
                        self.authentication_message(engine, id, message)
                    }
                    Ok((DataSource::Transport, len)) => {
                        self.slot(id).plan = Plan::AuthenticationSend { len };
                        self.fetch_data(engine, id, len)
                    }
                }
            }
            AuthDirection::Receive => {
                let al = command.length;
                if al == 0 || al > MAX_RECEIVE_LEN {
                    return self.respond_err(engine, id, invalid, 0);
                }
                match io::data_source(sqe, trtype, Direction::ToHost, in_capsule.len()) {
                    Err(status) => return self.respond_err(engine, id, status, 0),
                    Ok((_, len)) if len != al => {
                        return self.respond_err(engine, id, Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0)
                    }
                    Ok(_) => {}
                }
                let needed = self.auth.transaction.as_ref().map_or(8, |t| t.response_len());
                if (al as usize) < needed {
                    // The message does not fit: the host may ask again with room (nvmet answers an error too).
                    return self.respond_err(engine, id, invalid, 0);
                }
                self.slot(id).plan = Plan::AuthenticationReceive { len: al };
                self.authentication_output(engine, id)
            }
        }
    }

    /// The host's message of an Authentication Send, all here.
    pub(super) fn authentication_message(&mut self, engine: &mut IoEngine, id: SlotId, message: Vec<u8>) -> Step {
        let now = engine.clock().turn();
        let negotiate =
            Header::parse(&message).is_ok_and(|h| h.auth_type == AUTH_TYPE_COMMON && h.auth_id == auth_id::NEGOTIATE);
        if negotiate {
            self.auth.negotiations = self.auth.negotiations.saturating_add(1);
            if self.auth.negotiations > MAX_NEGOTIATIONS {
                self.auth.authenticated = false;
                self.authentication_failed(now, "too many AUTH_Negotiates without a transaction succeeding");
                self.auth.failed_slot = Some(id.0);
                return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
            }
        }
        if negotiate || self.auth.transaction.is_none() {
            // A new transaction, with the keys configured now.
            let Some(controller) = self.controller().cloned() else {
                return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
            };
            let subsystem = controller.subsystem();
            let Some(keys) = subsystem.host_keys(controller.hostnqn()) else {
                tracing::info!(
                    hostnqn = controller.hostnqn(),
                    subnqn = subsystem.nqn(),
                    "authentication asked for, but the host has no key any more (reloaded)"
                );
                return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
            };
            let mut credentials = keys.credentials(controller.hostnqn(), subsystem.nqn());
            if credentials.dh_groups.is_empty() {
                credentials.dh_groups.clone_from(&self.target.params().dhchap_dhgroups);
            }
            let mut transaction = ControllerTransaction::new(credentials);
            transaction.set_secure_channel(self.secure_channel_policy());
            self.auth.transaction = Some(Box::new(transaction));
            self.auth.failure_counted = false;
            let timeout = Duration::from_millis(u64::from(self.target.params().connect_timeout_ms));
            self.auth.expires = self.auth.authenticated.then(|| now + timeout);
        }
        let Some(mut transaction) = self.auth.transaction.take() else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        let peer = self.transport.peer_address.map(|a| a.ip());
        if negotiate && !self.target.auth_attempts().admit(peer, now) {
            transaction.refuse(&message, FailureReason::Failed);
            self.auth.transaction = Some(transaction);
            self.auth.authenticated = false;
            self.authentication_failed(now, "over auth_attempts_per_second from the host's address");
            return self.respond_ok(engine, id, 0, 0, None);
        }
        let needs_dh = transaction.needs_dh(&message);
        let mut step = DhStep { transaction, message, result: Ok(()) };
        if !needs_dh {
            // No exponentiation: a few hashes at most, done here.
            run_step(&mut step);
            return self.authentication_sent(engine, id, step);
        }
        self.slot(id).plan = Plan::AuthenticationStep;
        self.auth.step_slot = Some(id.0);
        self.offload_step(engine, id, Box::new(step))
    }

    /// Hand `step` to the target's pool; parked when its queue is full.
    fn offload_step(&mut self, engine: &mut IoEngine, id: SlotId, step: Box<DhStep>) -> Step {
        self.offload(engine, id, Target::auth_pool, step, run_step)
    }

    /// A parked step's retry (the queue's poll).
    pub(super) fn resubmit_authentication_step(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Some(step) = self.take_parked::<DhStep>(id) else {
            return self.authentication_step_lost(engine, id);
        };
        if std::mem::take(&mut self.auth.step_expired) {
            // Its transaction expired while it waited: the next message fails it (see the module docs).
            self.auth.step_slot = None;
            return self.respond_ok(engine, id, 0, 0, None);
        }
        self.offload_step(engine, id, step)
    }

    /// The pool finished `id`'s step (its storage tag's completion): the transaction comes back.
    pub(super) fn authentication_step_done(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let tag = storage_tag(self.transport.queue_key, id);
        let Some(step) = engine.take_offloaded(tag).and_then(|p| p.downcast::<DhStep>().ok()) else {
            return self.authentication_step_lost(engine, id);
        };
        self.auth.step_slot = None;
        if std::mem::take(&mut self.auth.step_expired) {
            return self.respond_ok(engine, id, 0, 0, None);
        }
        self.authentication_sent(engine, id, *step)
    }

    /// The step's work failed on its thread (or never started): the transaction is gone, and so is the queue.
    fn authentication_step_lost(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        self.auth.step_slot = None;
        self.auth.authenticated = false;
        self.authentication_failed(engine.clock().turn(), "the DH step failed on its worker thread");
        self.auth.failed_slot = Some(id.0);
        self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0)
    }

    /// `step` was sent to its transaction: the transaction is the queue's again; answer the Send.
    fn authentication_sent(&mut self, engine: &mut IoEngine, id: SlotId, step: DhStep) -> Step {
        let DhStep { transaction, result, .. } = step;
        let progress = transaction.progress();
        self.auth.transaction = Some(transaction);
        if let Err(e) = result {
            // From the failure on the queue does nothing but finish the transaction.
            self.auth.authenticated = false;
            self.authentication_failed(engine.clock().turn(), &e.to_string());
        }
        match progress {
            Progress::Authenticated(_) => self.authentication_succeeded(id),
            // The host ended the transaction (AUTH_Failure2): nothing more to send; the queue ends.
            Progress::Failed(_) => self.auth.failed_slot = Some(id.0),
            Progress::InProgress => {}
        }
        self.respond_ok(engine, id, 0, 0, None)
    }

    /// Answer an Authentication Receive with the transaction's next message, once a buffer is available.
    pub(super) fn authentication_output(&mut self, engine: &mut IoEngine, id: SlotId) -> Step {
        let Plan::AuthenticationReceive { len } = self.slot(id).plan else {
            return self.respond_err(engine, id, Status::INTERNAL_ERROR.with_dnr(), 0);
        };
        if self.auth.step_slot.is_some() {
            // It waited for a buffer while a Send's DH step started: the transaction is not here.
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        let buffer = match self.alloc(engine, id, len) {
            Ok(b) => b,
            Err(step) => return step,
        };
        self.slot(id).buffer = Some(buffer);
        if self.auth.transaction.is_none() {
            // A Receive before any AUTH_Negotiate: the transaction fails at once (nvmet: Failure1, reason 01h).
            if let Some(controller) = self.controller().cloned() {
                if let Some(keys) = controller.subsystem().host_keys(controller.hostnqn()) {
                    let credentials = keys.credentials(controller.hostnqn(), controller.subsystem().nqn());
                    self.auth.transaction = Some(Box::new(ControllerTransaction::new(credentials)));
                }
            }
        }
        let Some(transaction) = self.auth.transaction.as_mut() else {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        };
        let message = transaction.receive();
        let progress = transaction.progress();
        let out = &mut engine.buffer_mut(buffer)[..len as usize];
        out.fill(0);
        let n = message.len().min(out.len());
        out[..n].copy_from_slice(&message[..n]);
        match progress {
            Progress::Authenticated(_) => self.authentication_succeeded(id),
            Progress::Failed(_) => {
                self.auth.authenticated = false;
                self.authentication_failed(engine.clock().turn(), "a Receive with no message due");
                self.auth.failed_slot = Some(id.0);
            }
            Progress::InProgress => {}
        }
        self.respond_ok(engine, id, 0, 0, Some((buffer, len)))
    }

    /// The transaction succeeded with the message of `id`.
    fn authentication_succeeded(&mut self, id: SlotId) {
        let Some(transaction) = self.auth.transaction.as_ref() else { return };
        let Progress::Authenticated(n) = transaction.progress() else { return };
        let again = self.auth.authenticated;
        self.auth.authenticated = true;
        if let Some(controller) = self.controller() {
            controller.subsystem().bind_host_id(controller.hostnqn(), controller.hostid());
        }
        self.auth.expires = None;
        self.auth.negotiations = 0;
        self.target.auth_counters().record(true, transaction.chosen());
        let hostnqn = self.controller().map(|c| c.hostnqn().to_owned()).unwrap_or_default();
        if let Some((hash, psk)) = transaction.generated_psk() {
            self.keep_generated_psk(hash, psk);
        }
        tracing::debug!(hostnqn, qid = ?self.qid(), hash = n.hash.name(), dhgroup = n.group.name(),
            bidirectional = n.bidirectional, reauthentication = again, "queue authenticated");
        if let Err(refusal) = self.authenticated() {
            // Another queue took the QID after this one's Connect, or the controller was reset: this queue ends
            // once the message is sent, as after a Disconnect, and takes no command meanwhile.
            tracing::debug!(hostnqn, qid = ?self.qid(), ?refusal, "authenticated I/O queue refused: queue ends");
            self.auth.authenticated = false;
            self.disconnect_slot = Some(id.0);
        }
    }

    /// Which secure channel concatenation this queue takes (see the module docs).
    fn secure_channel_policy(&self) -> SecureChannelPolicy {
        let QueueState::Connected(a) = &self.state else { return SecureChannelPolicy::Refused };
        if a.kind != QueueKind::Admin || a.controller.is_discovery() {
            return SecureChannelPolicy::Refused;
        }
        if self.transport.secure_channel.is_some() {
            return SecureChannelPolicy::Tls;
        }
        let port = self.transport.port_id;
        let tls = Tsas::Tcp { sectype: TcpSecurityType::Tls13 };
        match self.target.listeners().iter().any(|l| l.port_id == port && l.tsas == tls) {
            true => SecureChannelPolicy::Plaintext,
            false => SecureChannelPolicy::Refused,
        }
    }

    /// Keep the TLS PSK of the `generated` PSK of a transaction that asked for secure channel concatenation,
    /// where the TLS gate finds the identity the host offers next.
    fn keep_generated_psk(&self, hash: HashFunction, generated: &[u8]) {
        let Some(controller) = self.controller() else { return };
        let (hostnqn, subnqn) = (controller.hostnqn(), controller.subsystem().nqn());
        let derived = PskHash::from_id(hash.id())
            .ok_or_else(|| format!("{} is not a TLS hash", hash.name()))
            .and_then(|h| derive_generated_tls_psk(h, generated, hostnqn, subnqn).map_err(|e| e.to_string()));
        match derived {
            Ok(psk) => {
                tracing::info!(
                    hostnqn,
                    subnqn,
                    hash = hash.name(),
                    cntlid = controller.cntlid(),
                    "secure channel concatenation: generated PSK kept for the host's TLS connections"
                );
                self.target.generated_psks().insert(hostnqn, subnqn, psk, Instant::now());
            }
            Err(reason) => {
                tracing::warn!(hostnqn, subnqn, reason, "secure channel concatenation: no TLS PSK generated");
            }
        }
    }

    /// Drop a re-authentication that did not finish in time (see the module docs).
    pub(super) fn check_reauthentication_deadline(&mut self, now: Instant) {
        if self.auth.expires.is_some_and(|deadline| now >= deadline) {
            self.authentication_failed(now, "the re-authentication did not finish within connect_timeout_ms");
            self.auth.transaction = None;
            self.auth.step_expired = self.auth.step_slot.is_some();
        }
    }

    /// Count and log (at most once per host and interval, at turn time `now`) the current transaction's failure, once.
    fn authentication_failed(&mut self, now: Instant, reason: &str) {
        self.auth.expires = None;
        if self.auth.failure_counted {
            return;
        }
        self.auth.failure_counted = true;
        let chosen = self.auth.transaction.as_ref().and_then(|t| t.chosen());
        self.target.auth_counters().record(false, chosen);
        let QueueState::Connected(a) = &self.state else { return };
        let hostnqn = a.controller.hostnqn();
        if let Some(suppressed) = self.target.auth_failures().admit(hostnqn, now) {
            tracing::info!(hostnqn, subnqn = a.controller.subsystem().nqn(), cntlid = a.controller.cntlid(),
                qid = ?self.qid(), reason, suppressed, "authentication failed");
        }
    }
}
