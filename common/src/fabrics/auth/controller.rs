//! The controller's side of one DH-HMAC-CHAP transaction on one queue (NVMe Base 2.0 §8.13.5.3), as a state
//! machine without I/O: the mirror of [`super::host`]. The caller hands over each message the host sent with
//! Authentication Send ([`ControllerTransaction::send`]) and answers each Authentication Receive with
//! [`ControllerTransaction::receive`].
//!
//! ```text
//! send(AUTH_Negotiate)          pick a hash and a group; C1, S1 and the DH value made
//! receive()                     → DH-HMAC-CHAP_Challenge
//! send(DH-HMAC-CHAP_Reply)      the host's response checked; the controller's computed when the host sent C2
//! receive()                     → DH-HMAC-CHAP_Success1    (authenticated, unless bidirectional:)
//! send(DH-HMAC-CHAP_Success2)   authenticated              (or AUTH_Failure2: failed)
//! ```
//!
//! Every error the controller finds in a host's message (it does not parse, is out of order, names another
//! transaction, offers nothing usable, its response does not verify) makes the next `receive` an AUTH_Failure1
//! with the reason nvmet gives ([`AuthError::failure_reason`]); the transaction has then failed. An
//! AUTH_Negotiate starts the transaction again from any step (nvmet's "restart negotiation", also the host's
//! re-authentication). Nothing here panics on any input; every length comes from the message and is checked
//! against the negotiated hash and group.
//!
//! Choice of hash and group: the first of the configured preference list (as nvmet: SHA-256, then the others;
//! the NULL group, then the FFDHE groups from the smallest) that the host offers. Secrets, C1, the DH private
//! exponent and the session key are wiped when dropped.
//!
//! The DH work (a key pair at AUTH_Negotiate, the shared secret at the Reply) is modular exponentiation: about
//! 0.7 ms each for ffdhe2048, 4 ms for ffdhe4096, 21 ms for ffdhe8192 on a 2020s server core. A caller that must
//! not block that long asks [`ControllerTransaction::needs_dh`] first and runs such a `send` elsewhere.

use zeroize::Zeroizing;

use super::dh::{DhGroup, DhKeyPair};
use super::hash::{HashFunction, ALL_HASHES};
use super::host::Negotiated;
use super::message::{
    auth_id, Challenge, Failure, FailureKind, Header, Negotiate, Reply, Success1, Success2, AUTH_TYPE_COMMON,
    AUTH_TYPE_DHCHAP,
};
use super::response::{augmented_challenge, Responder, Transcript};
use super::secret::DhchapSecret;
use super::secure_channel;
use super::{AuthError, FailureReason, RandomSource, SequenceNumbers};
use crate::fabrics::tls::derive::generated_psk;
use crate::fabrics::tls::PskHash;
use crate::wire::WireError;

/// The hash functions a controller allows by default, in its order of preference (nvmet's default is
/// `hmac(sha256)`, falling back to what the host offers).
pub const DEFAULT_HASHES: [HashFunction; 3] = ALL_HASHES;

/// The DH groups a controller allows by default, in its order of preference (nvmet's default is `null`): not
/// ffdhe6144 and ffdhe8192, whose key pair and shared secret cost 10 and 20 ms each, several times a connection
/// (a host offers every group and takes the controller's choice, so a narrower list still interoperates).
pub const DEFAULT_DH_GROUPS: [DhGroup; 4] = [DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe3072, DhGroup::Ffdhe4096];

/// The largest message a host sends in a transaction: a DH-HMAC-CHAP_Reply with SHA-512 (HL 64: R1 and C2) and
/// an ffdhe8192 value (1024 bytes). A target refuses an Authentication Send longer than this.
pub const MAX_HOST_MESSAGE_LEN: usize = 16 + 2 * 64 + 1024;

/// What the controller authenticates a host with: the keys configured for this host and subsystem.
#[derive(Debug, Clone)]
pub struct ControllerCredentials {
    /// The host's secret (`dhchap_key`): the host must prove it holds it.
    pub host_secret: DhchapSecret,
    /// The controller's secret (`dhchap_ctrl_key`): the controller proves it holds it when the host asks.
    pub controller_secret: Option<DhchapSecret>,
    /// The host's NQN (from its Connect).
    pub hostnqn: String,
    /// The subsystem's NQN (from the Connect).
    pub subnqn: String,
    /// Hash functions allowed, in order of preference; empty: [`DEFAULT_HASHES`].
    pub hashes: Vec<HashFunction>,
    /// DH groups allowed, in order of preference; empty: [`DEFAULT_DH_GROUPS`].
    pub dh_groups: Vec<DhGroup>,
}

/// Which secure channel concatenation (AUTH_Negotiate's SC_C) a controller takes on this queue, as nvmet: only on
/// an admin queue, of a listener that offers TLS; a new PSK on a plaintext connection, a replacement on one
/// secured with TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecureChannelPolicy {
    /// None (an I/O queue, a listener without TLS): an SC_C other than 0 fails with reason 03h.
    #[default]
    Refused,
    /// A plaintext admin queue on a listener that allows TLS: [`secure_channel::NEW_TLS_PSK`].
    Plaintext,
    /// An admin queue secured with TLS: [`secure_channel::REPLACE_TLS_PSK`].
    Tls,
}

/// Where the transaction stands, as its caller needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Messages still to come.
    InProgress,
    /// The host was authenticated (and the controller, when the host asked).
    Authenticated(Negotiated),
    /// The transaction failed, with the reason the AUTH_Failure1 or AUTH_Failure2 carried.
    Failed(FailureReason),
}

/// What one transaction keeps between the Challenge and the Reply.
struct Exchange {
    hash: HashFunction,
    group: DhGroup,
    c1: Zeroizing<Vec<u8>>,
    s1: u32,
    pair: Option<DhKeyPair>,
    /// AUTH_Negotiate's SC_C (not 0: the host asked for secure channel concatenation).
    sc_c: u8,
}

enum State {
    /// No AUTH_Negotiate yet.
    AwaitNegotiate,
    /// The Challenge is built; the host fetches it with the next Receive.
    ChallengeReady {
        exchange: Exchange,
        message: Vec<u8>,
    },
    AwaitReply(Exchange),
    /// Success1 is built; `bidirectional`: the host answers it with Success2 or Failure2.
    Success1Ready {
        negotiated: Negotiated,
        message: Vec<u8>,
    },
    AwaitSuccess2(Negotiated),
    /// An error was found; the host fetches the AUTH_Failure1 with the next Receive.
    Failure1Ready(FailureReason),
    Done(Negotiated),
    Failed(FailureReason),
}

/// One DH-HMAC-CHAP transaction of a controller on one queue (see the module docs).
pub struct ControllerTransaction {
    credentials: ControllerCredentials,
    t_id: u16,
    state: State,
    /// The hash and group chosen, kept after the transaction ends (for metrics).
    chosen: Option<(HashFunction, DhGroup)>,
    /// The secure channel concatenation this queue takes.
    secure_channel: SecureChannelPolicy,
    /// The generated PSK, once the Reply of a concatenating transaction verified (handed out once done).
    generated: Option<Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for ControllerTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::AwaitNegotiate => "awaiting AUTH_Negotiate",
            State::ChallengeReady { .. } => "challenge ready",
            State::AwaitReply(_) => "awaiting the reply",
            State::Success1Ready { .. } => "success1 ready",
            State::AwaitSuccess2(_) => "awaiting success2",
            State::Failure1Ready(_) => "failure1 ready",
            State::Done(_) => "done",
            State::Failed(_) => "failed",
        };
        write!(f, "ControllerTransaction {{ t_id: {}, state: {state} }}", self.t_id)
    }
}

impl ControllerTransaction {
    /// A transaction waiting for the host's AUTH_Negotiate.
    pub fn new(credentials: ControllerCredentials) -> Self {
        ControllerTransaction {
            credentials,
            t_id: 0,
            state: State::AwaitNegotiate,
            chosen: None,
            secure_channel: SecureChannelPolicy::Refused,
            generated: None,
        }
    }

    /// Take secure channel concatenation as `policy` says (by default none).
    pub fn set_secure_channel(&mut self, policy: SecureChannelPolicy) {
        self.secure_channel = policy;
    }

    /// The generated PSK and its hash, once a transaction that asked for secure channel concatenation succeeded:
    /// HMAC(KS, C1 || C2), what [`derive_generated_tls_psk`](crate::fabrics::tls::derive_generated_tls_psk) takes.
    pub fn generated_psk(&self) -> Option<(HashFunction, &[u8])> {
        match (&self.state, &self.generated) {
            (State::Done(n), Some(psk)) => Some((n.hash, psk.as_slice())),
            _ => None,
        }
    }

    /// The transaction identifier (the host's, from its AUTH_Negotiate).
    pub fn t_id(&self) -> u16 {
        self.t_id
    }

    /// The hash function and DH group chosen, once an AUTH_Negotiate was accepted.
    pub fn chosen(&self) -> Option<(HashFunction, DhGroup)> {
        self.chosen
    }

    /// Where the transaction stands.
    pub fn progress(&self) -> Progress {
        match &self.state {
            State::Done(n) => Progress::Authenticated(*n),
            State::Failed(reason) => Progress::Failed(*reason),
            _ => Progress::InProgress,
        }
    }

    /// Whether the host's next Authentication Receive ends the transaction with AUTH_Failure1.
    pub fn failure_pending(&self) -> bool {
        matches!(self.state, State::Failure1Ready(_))
    }

    /// Whether [`ControllerTransaction::send`] of `message` does DH work: an AUTH_Negotiate that this
    /// transaction would answer with an FFDHE group (a key pair), or the Reply to a Challenge with one (the shared
    /// secret). Cheap: it parses the message, no more.
    pub fn needs_dh(&self, message: &[u8]) -> bool {
        let Ok(h) = Header::parse(message) else { return false };
        match (h.auth_type, h.auth_id, &self.state) {
            (AUTH_TYPE_COMMON, auth_id::NEGOTIATE, _) => Negotiate::parse(message)
                .ok()
                .and_then(|n| self.choose(&n).ok())
                .is_some_and(|(_, group)| group != DhGroup::Null),
            (AUTH_TYPE_DHCHAP, auth_id::REPLY, State::AwaitReply(exchange)) => exchange.pair.is_some(),
            _ => false,
        }
    }

    /// Fail the transaction `message` (an AUTH_Negotiate) would start, without its work: the next
    /// [`ControllerTransaction::receive`] returns the AUTH_Failure1 with `reason` (a target over its rate of
    /// authentication attempts).
    pub fn refuse(&mut self, message: &[u8], reason: FailureReason) {
        if let Ok(h) = Header::parse(message) {
            self.t_id = h.t_id;
        }
        self.chosen = None;
        self.state = State::Failure1Ready(reason);
    }

    /// Take a message the host sent (Authentication Send). An error is the reason the transaction failed; unless
    /// the host itself ended it (AUTH_Failure2), the next [`ControllerTransaction::receive`] returns the
    /// AUTH_Failure1 that says so.
    pub fn send(
        &mut self,
        message: &[u8],
        sequence: &SequenceNumbers,
        rng: &mut dyn RandomSource,
    ) -> Result<(), AuthError> {
        let result = self.try_send(message, sequence, rng);
        if let Err(e) = &result {
            self.state = match e.failure_reason() {
                Some(reason) => State::Failure1Ready(reason),
                None => State::Failed(match e {
                    AuthError::Refused(reason) => *reason,
                    _ => FailureReason::Failed,
                }),
            };
        }
        result
    }

    /// The length of the message the next [`ControllerTransaction::receive`] returns (a target checks the
    /// host's allocation length against it first).
    pub fn response_len(&self) -> usize {
        match &self.state {
            State::ChallengeReady { message, .. } | State::Success1Ready { message, .. } => message.len(),
            _ => FAILURE_LEN,
        }
    }

    /// The message for the host's Authentication Receive: the Challenge, Success1, or AUTH_Failure1 after an
    /// error (a Receive at a step where the controller has nothing to say is one too, reason 01h as nvmet).
    pub fn receive(&mut self) -> Vec<u8> {
        match std::mem::replace(&mut self.state, State::Failed(FailureReason::Failed)) {
            State::ChallengeReady { exchange, message } => {
                self.state = State::AwaitReply(exchange);
                message
            }
            State::Success1Ready { negotiated, message } => {
                self.state = match negotiated.bidirectional {
                    true => State::AwaitSuccess2(negotiated),
                    false => State::Done(negotiated),
                };
                message
            }
            State::Failure1Ready(reason) => self.failure1(reason),
            _ => self.failure1(FailureReason::Failed),
        }
    }

    fn failure1(&mut self, reason: FailureReason) -> Vec<u8> {
        self.state = State::Failed(reason);
        Failure { kind: FailureKind::Failure1, t_id: self.t_id, reason }.to_bytes()
    }

    fn try_send(
        &mut self,
        message: &[u8],
        sequence: &SequenceNumbers,
        rng: &mut dyn RandomSource,
    ) -> Result<(), AuthError> {
        let h = Header::parse(message)?;
        match (h.auth_type, h.auth_id) {
            // From any step: a new transaction (restart, or re-authentication of an authenticated queue).
            (AUTH_TYPE_COMMON, auth_id::NEGOTIATE) => return self.negotiate(message, sequence, rng),
            (AUTH_TYPE_COMMON, auth_id::FAILURE2) => {
                let f = Failure::parse(message, FailureKind::Failure2)?;
                self.check_t_id(f.t_id)?;
                return Err(AuthError::Refused(f.reason));
            }
            _ => {}
        }
        let expected = match &self.state {
            State::AwaitReply(_) => "DH-HMAC-CHAP_Reply",
            State::AwaitSuccess2(_) => "DH-HMAC-CHAP_Success2",
            State::AwaitNegotiate | State::Done(_) | State::Failed(_) => "AUTH_Negotiate",
            // The host did not fetch what the controller has to say.
            State::ChallengeReady { .. } | State::Success1Ready { .. } | State::Failure1Ready(_) => {
                "Authentication Receive"
            }
        };
        let step = match (h.auth_type, h.auth_id, &self.state) {
            (AUTH_TYPE_DHCHAP, auth_id::REPLY, State::AwaitReply(_)) => auth_id::REPLY,
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS2, State::AwaitSuccess2(_)) => auth_id::SUCCESS2,
            _ => return Err(AuthError::UnexpectedMessage { expected, received: h.name() }),
        };
        // nvmet: a message of another transaction has an incorrect payload.
        if h.t_id != self.t_id {
            return Err(AuthError::Message(WireError::invalid(
                "AuthMessage",
                "t_id",
                h.t_id,
                "the transaction's identifier",
            )));
        }
        match step {
            auth_id::REPLY => self.reply(message),
            _ => {
                Success2::parse(message)?;
                let State::AwaitSuccess2(negotiated) = self.state else {
                    return Err(AuthError::UnexpectedMessage { expected, received: h.name() });
                };
                self.state = State::Done(negotiated);
                Ok(())
            }
        }
    }

    fn check_t_id(&self, t_id: u16) -> Result<(), AuthError> {
        match t_id == self.t_id {
            true => Ok(()),
            false => Err(AuthError::TransactionId { expected: self.t_id, received: t_id }),
        }
    }

    /// AUTH_Negotiate: choose, then build the Challenge.
    fn negotiate(
        &mut self,
        message: &[u8],
        sequence: &SequenceNumbers,
        rng: &mut dyn RandomSource,
    ) -> Result<(), AuthError> {
        self.state = State::AwaitNegotiate;
        self.chosen = None;
        self.generated = None;
        // The t_id first: a Failure1 for a Negotiate that does not parse names the host's transaction.
        if let Ok(h) = Header::parse(message) {
            self.t_id = h.t_id;
        }
        let n = Negotiate::parse(message)?;
        let concat = match (n.sc_c, self.secure_channel) {
            (secure_channel::NONE, _) => false,
            (secure_channel::NEW_TLS_PSK, SecureChannelPolicy::Plaintext)
            | (secure_channel::REPLACE_TLS_PSK, SecureChannelPolicy::Tls) => true,
            (other, _) => return Err(AuthError::ConcatenationUnsupported(other)),
        };
        let (hash, group) = self.choose(&n)?;
        if concat && (group == DhGroup::Null || hash == HashFunction::Sha512) {
            // nvmet: the NULL group gives no session key to generate the PSK from; and a TLS PSK's hash is
            // SHA-256 or SHA-384.
            return Err(AuthError::ConcatenationUnsupported(n.sc_c));
        }
        self.chosen = Some((hash, group));
        let mut c1 = Zeroizing::new(vec![0u8; hash.digest_len()]);
        rng.fill(&mut c1)?;
        let s1 = sequence.next(rng)?;
        let pair = match group {
            DhGroup::Null => None,
            _ => Some(DhKeyPair::generate(group, rng)?),
        };
        let dhv = pair.as_ref().map_or(&[][..], DhKeyPair::public);
        let message = Challenge { t_id: self.t_id, hashid: hash.id(), dhgid: group.id(), seqnum: s1, cval: &c1, dhv }
            .to_bytes()?;
        self.state = State::ChallengeReady { exchange: Exchange { hash, group, c1, s1, pair, sc_c: n.sc_c }, message };
        Ok(())
    }

    /// The hash and group this controller picks from what `n` offers.
    fn choose(&self, n: &Negotiate) -> Result<(HashFunction, DhGroup), AuthError> {
        let creds = &self.credentials;
        let hashes: &[HashFunction] = if creds.hashes.is_empty() { &DEFAULT_HASHES } else { &creds.hashes };
        let groups: &[DhGroup] = if creds.dh_groups.is_empty() { &DEFAULT_DH_GROUPS } else { &creds.dh_groups };
        // Secure channel concatenation needs a session key and a TLS hash: pass over the NULL group and SHA-512.
        let concat = n.sc_c != secure_channel::NONE;
        let hashes: Vec<HashFunction> =
            hashes.iter().copied().filter(|h| !concat || *h != HashFunction::Sha512).collect();
        let groups: Vec<DhGroup> = groups.iter().copied().filter(|g| !concat || *g != DhGroup::Null).collect();
        let names = |v: Vec<&'static str>| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
        let hash = hashes.iter().copied().find(|h| n.dhchap.hashes.contains(h)).ok_or_else(|| {
            AuthError::NoCommonHash { offered: names(n.dhchap.hashes.iter().map(|h| h.name()).collect()) }
        })?;
        let group = groups.iter().copied().find(|g| n.dhchap.dh_groups.contains(g)).ok_or_else(|| {
            AuthError::NoCommonDhGroup { offered: names(n.dhchap.dh_groups.iter().map(|g| g.name()).collect()) }
        })?;
        Ok((hash, group))
    }

    /// DH-HMAC-CHAP_Reply: check the host's response; build Success1 (with the controller's response when the
    /// host sent a challenge).
    fn reply(&mut self, message: &[u8]) -> Result<(), AuthError> {
        let State::AwaitReply(exchange) = std::mem::replace(&mut self.state, State::Failed(FailureReason::Failed))
        else {
            return Err(AuthError::UnexpectedMessage { expected: "DH-HMAC-CHAP_Reply", received: "?".into() });
        };
        let r = Reply::parse(message)?;
        let hash = exchange.hash;
        if r.rval.len() != hash.digest_len() {
            return Err(WireError::invalid("DH-HMAC-CHAP_Reply", "hl", r.rval.len() as u64, "the hash's length").into());
        }
        let session = match &exchange.pair {
            None if r.dhv.is_empty() => None,
            None => {
                return Err(WireError::invalid(
                    "DH-HMAC-CHAP_Reply",
                    "dhvlen",
                    r.dhv.len() as u64,
                    "0 for the NULL group",
                )
                .into())
            }
            Some(pair) => Some(pair.shared_secret(r.dhv)?),
        };
        let augment = |c: &[u8]| match &session {
            Some(s) => augmented_challenge(hash, s, c),
            None => Zeroizing::new(c.to_vec()),
        };
        let creds = &self.credentials;
        let c1 = augment(&exchange.c1);
        let transcript = Transcript {
            hash,
            challenge: &c1,
            seqnum: exchange.s1,
            t_id: self.t_id,
            hostnqn: &creds.hostnqn,
            subnqn: &creds.subnqn,
            sc_c: exchange.sc_c,
        };
        if !transcript.verify(Responder::Host, &creds.host_secret.transform(&creds.hostnqn), r.rval) {
            return Err(AuthError::HostNotAuthenticated);
        }
        let hl = u8::try_from(hash.digest_len()).unwrap_or(u8::MAX);
        if exchange.sc_c != secure_channel::NONE {
            // nvmet: a concatenating host must send C2; the PSK is HMAC(KS, C1 || C2) of the challenges as sent.
            let (Some(c2), Some(s), Some(psk_hash)) = (r.cval, &session, PskHash::from_id(hash.id())) else {
                return Err(AuthError::NoConcatenationChallenge);
            };
            self.generated = Some(generated_psk(psk_hash, s, &exchange.c1, c2));
        }
        // A C2 with sequence number 0 is not a request to authenticate the controller: it seeds the secure
        // channel's PSK (nvmet ignores it likewise without concatenation).
        let c2 = r.cval.filter(|_| r.seqnum != 0);
        let (message, bidirectional) = match c2 {
            None => (Success1 { t_id: self.t_id, hl, rval: None }.to_bytes(), false),
            Some(c2) => {
                let secret = creds.controller_secret.as_ref().ok_or(AuthError::NoControllerSecret)?;
                let c2 = augment(c2);
                let transcript = Transcript { challenge: &c2, seqnum: r.seqnum, ..transcript };
                let rval = transcript.response(Responder::Controller, &secret.transform(&creds.subnqn));
                (Success1 { t_id: self.t_id, hl, rval: Some(&rval) }.to_bytes(), true)
            }
        };
        let negotiated = Negotiated { hash, group: exchange.group, bidirectional };
        self.state = State::Success1Ready { negotiated, message };
        Ok(())
    }
}

/// Length of an AUTH_Failure1.
const FAILURE_LEN: usize = 8;

#[cfg(test)]
mod tests;
