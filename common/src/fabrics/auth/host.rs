//! The host's side of one DH-HMAC-CHAP transaction on one queue (NVMe Base 2.0 §8.13.5.3), as a state machine
//! without I/O: the caller sends each message this returns (Authentication Send) and hands back each message the
//! controller returns (Authentication Receive).
//!
//! ```text
//! negotiate()  → AUTH_Negotiate          (send)
//! reply(..)    ← DH-HMAC-CHAP_Challenge  (receive), → DH-HMAC-CHAP_Reply (send)
//! success(..)  ← DH-HMAC-CHAP_Success1   (receive), → DH-HMAC-CHAP_Success2 (send) when bidirectional
//! failure2(..) → AUTH_Failure2           (send) after an error this side found ([`AuthError::failure_reason`])
//! ```
//!
//! The host offers every hash function and group it implements (SHA-256/384/512, NULL and ffdhe2048..8192, as
//! Linux does) and takes the controller's choice. With a controller secret it sends a challenge C2 and checks the
//! controller's response (bidirectional); a Success1 without one then fails. Secrets, the DH private exponent and
//! the session key are wiped when the transaction is dropped.

use zeroize::Zeroizing;

use super::dh::{DhGroup, DhKeyPair, ALL_GROUPS};
use super::hash::{HashFunction, ALL_HASHES};
use super::message::{
    Challenge, Failure, FailureKind, Header, Negotiate, ProtocolDescriptor, Reply, Success1, Success2,
};
use super::response::{augmented_challenge, Responder, Transcript};
use super::secret::DhchapSecret;
use super::{AuthError, FailureReason, RandomSource, SequenceNumbers};
use crate::fabrics::tls::derive::generated_psk;
use crate::fabrics::tls::PskHash;
use crate::wire::WireError;

/// What the host authenticates with.
#[derive(Debug, Clone, Copy)]
pub struct HostCredentials<'a> {
    /// The host's secret (the target's `dhchap_key` for this host).
    pub secret: &'a DhchapSecret,
    /// The controller's secret (the target's `dhchap_ctrl_key`): given, the host authenticates the controller too.
    pub controller_secret: Option<&'a DhchapSecret>,
    /// This host's NQN (the one in its Connect).
    pub hostnqn: &'a str,
    /// The subsystem's NQN (the one in its Connect).
    pub subnqn: &'a str,
}

/// What a transaction settled on (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The controller's hash function.
    pub hash: HashFunction,
    /// The controller's DH group.
    pub group: DhGroup,
    /// Whether the controller was authenticated too.
    pub bidirectional: bool,
}

/// Where the transaction stands.
enum State {
    Start,
    AwaitChallenge,
    AwaitSuccess1 {
        negotiated: Negotiated,
        /// The controller's challenge to answer: C2 (augmented for a DH group) and S2.
        controller_challenge: Option<(Zeroizing<Vec<u8>>, u32)>,
    },
    Done(Negotiated),
    Failed,
}

/// One DH-HMAC-CHAP transaction of the host (see the module docs).
pub struct HostTransaction<'a> {
    credentials: HostCredentials<'a>,
    t_id: u16,
    state: State,
    /// AUTH_Negotiate's SC_C ([`secure_channel`](super::secure_channel)): not 0 asks for a generated PSK.
    sc_c: u8,
    /// The generated PSK of secure channel concatenation, once the Reply is sent (handed out once done).
    generated: Option<Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for HostTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Start => "start",
            State::AwaitChallenge => "awaiting the challenge",
            State::AwaitSuccess1 { .. } => "awaiting success1",
            State::Done(_) => "done",
            State::Failed => "failed",
        };
        write!(f, "HostTransaction {{ t_id: {}, state: {state} }}", self.t_id)
    }
}

impl<'a> HostTransaction<'a> {
    /// A transaction with identifier `t_id`.
    pub fn new(credentials: HostCredentials<'a>, t_id: u16) -> Self {
        HostTransaction { credentials, t_id, state: State::Start, sc_c: 0, generated: None }
    }

    /// Ask for secure channel concatenation with `sc_c` ([`secure_channel::NEW_TLS_PSK`] on a plaintext admin
    /// queue, [`secure_channel::REPLACE_TLS_PSK`] on one secured with a generated PSK), as Linux's `--concat`
    /// does: the host sends a challenge C2 with sequence number 0, which asks for no controller response (the
    /// controller is not authenticated, even with a controller secret, as with Linux), the group must not be
    /// NULL, and once done [`HostTransaction::generated_psk`] gives HMAC(KS, C1 || C2).
    ///
    /// [`secure_channel::NEW_TLS_PSK`]: super::secure_channel::NEW_TLS_PSK
    /// [`secure_channel::REPLACE_TLS_PSK`]: super::secure_channel::REPLACE_TLS_PSK
    pub fn with_secure_channel(mut self, sc_c: u8) -> Self {
        self.sc_c = sc_c;
        self
    }

    /// The generated PSK and its hash, once a transaction that asked for secure channel concatenation succeeded.
    pub fn generated_psk(&self) -> Option<(HashFunction, &[u8])> {
        match (&self.state, &self.generated) {
            (State::Done(n), Some(psk)) => Some((n.hash, psk.as_slice())),
            _ => None,
        }
    }

    /// The transaction identifier.
    pub fn t_id(&self) -> u16 {
        self.t_id
    }

    /// AUTH_Negotiate: every hash function and group this host implements, no secure channel.
    pub fn negotiate(&mut self) -> Vec<u8> {
        self.state = State::AwaitChallenge;
        Negotiate {
            t_id: self.t_id,
            sc_c: self.sc_c,
            dhchap: ProtocolDescriptor { hashes: ALL_HASHES.to_vec(), dh_groups: ALL_GROUPS.to_vec() },
        }
        .to_bytes()
    }

    /// Take the controller's DH-HMAC-CHAP_Challenge (or its AUTH_Failure1) and answer with DH-HMAC-CHAP_Reply.
    pub fn reply(
        &mut self,
        received: &[u8],
        sequence: &SequenceNumbers,
        rng: &mut dyn RandomSource,
    ) -> Result<Vec<u8>, AuthError> {
        let result = self.try_reply(received, sequence, rng);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn try_reply(
        &mut self,
        received: &[u8],
        sequence: &SequenceNumbers,
        rng: &mut dyn RandomSource,
    ) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, State::AwaitChallenge) {
            return Err(self.out_of_order("DH-HMAC-CHAP_Challenge"));
        }
        self.check_header(received, "DH-HMAC-CHAP_Challenge", AuthError::Refused)?;
        let c = Challenge::parse(received)?;
        let hash = HashFunction::from_id(c.hashid).ok_or(AuthError::HashUnusable(c.hashid))?;
        if c.cval.len() != hash.digest_len() {
            return Err(
                WireError::invalid("DH-HMAC-CHAP_Challenge", "hl", c.cval.len() as u64, "the hash's length").into()
            );
        }
        let group = DhGroup::from_id(c.dhgid)
            .ok_or(AuthError::DhGroupUnusable { group: c.dhgid, reason: "not a group this host implements" })?;
        let (pair, session) = match group {
            DhGroup::Null if c.dhv.is_empty() => (None, None),
            DhGroup::Null => {
                return Err(WireError::invalid(
                    "DH-HMAC-CHAP_Challenge",
                    "dhvlen",
                    c.dhv.len() as u64,
                    "0 for the NULL group",
                )
                .into())
            }
            _ => {
                let pair = DhKeyPair::generate(group, rng)?;
                let session = pair.shared_secret(c.dhv)?;
                (Some(pair), Some(session))
            }
        };
        let creds = self.credentials;
        let challenge = match &session {
            Some(s) => augmented_challenge(hash, s, c.cval),
            None => Zeroizing::new(c.cval.to_vec()),
        };
        let transcript = Transcript {
            hash,
            challenge: &challenge,
            seqnum: c.seqnum,
            t_id: self.t_id,
            hostnqn: creds.hostnqn,
            subnqn: creds.subnqn,
            sc_c: self.sc_c,
        };
        let response = transcript.response(Responder::Host, &creds.secret.transform(creds.hostnqn));
        if self.sc_c != 0 {
            // The generated PSK needs a session key, and is a TLS PSK's input: SHA-256 or SHA-384 only.
            if session.is_none() {
                return Err(AuthError::ConcatenationUnsupported(self.sc_c));
            }
            if hash == HashFunction::Sha512 {
                return Err(AuthError::HashUnusable(hash.id()));
            }
        }
        let (c2, seqnum) = match creds.controller_secret {
            _ if self.sc_c != 0 => {
                let mut c2 = Zeroizing::new(vec![0u8; hash.digest_len()]);
                rng.fill(&mut c2)?;
                if let (Some(s), Some(psk_hash)) = (&session, PskHash::from_id(hash.id())) {
                    self.generated = Some(generated_psk(psk_hash, s, c.cval, &c2));
                }
                (Some(c2), 0)
            }
            Some(_) => {
                let mut c2 = Zeroizing::new(vec![0u8; hash.digest_len()]);
                rng.fill(&mut c2)?;
                (Some(c2), sequence.next(rng)?)
            }
            None => (None, 0),
        };
        let public = pair.as_ref().map_or(&[][..], DhKeyPair::public);
        let reply =
            Reply { t_id: self.t_id, rval: &response, cval: c2.as_deref().map(Vec::as_slice), seqnum, dhv: public }
                .to_bytes()?;
        let controller_challenge = c2.filter(|_| seqnum != 0).map(|c2| {
            let augmented = match &session {
                Some(s) => augmented_challenge(hash, s, &c2),
                None => c2,
            };
            (augmented, seqnum)
        });
        let negotiated = Negotiated { hash, group, bidirectional: controller_challenge.is_some() };
        self.state = State::AwaitSuccess1 { negotiated, controller_challenge };
        Ok(reply)
    }

    /// Take the controller's DH-HMAC-CHAP_Success1 (or its AUTH_Failure1); for bidirectional authentication check
    /// its response and return the DH-HMAC-CHAP_Success2 to send.
    pub fn success(&mut self, received: &[u8]) -> Result<Option<Vec<u8>>, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let State::AwaitSuccess1 { negotiated, controller_challenge } = state else {
            return Err(self.out_of_order("DH-HMAC-CHAP_Success1"));
        };
        // A Failure1 here with reason 01h is the controller's verdict on the host's response.
        self.check_header(received, "DH-HMAC-CHAP_Success1", |r| match r {
            FailureReason::Failed => AuthError::HostNotAccepted,
            other => AuthError::Refused(other),
        })?;
        let s = Success1::parse(received)?;
        if usize::from(s.hl) != negotiated.hash.digest_len() {
            return Err(AuthError::HashUnusable(negotiated.hash.id()));
        }
        let Some((challenge, seqnum)) = controller_challenge else {
            self.state = State::Done(negotiated);
            return Ok(None);
        };
        let creds = self.credentials;
        let (Some(secret), Some(rval)) = (creds.controller_secret, s.rval) else {
            return Err(AuthError::ControllerNotAuthenticated);
        };
        let transcript = Transcript {
            hash: negotiated.hash,
            challenge: &challenge,
            seqnum,
            t_id: self.t_id,
            hostnqn: creds.hostnqn,
            subnqn: creds.subnqn,
            sc_c: self.sc_c,
        };
        if !transcript.verify(Responder::Controller, &secret.transform(creds.subnqn), rval) {
            return Err(AuthError::ControllerNotAuthenticated);
        }
        self.state = State::Done(negotiated);
        Ok(Some(Success2 { t_id: self.t_id }.to_bytes()))
    }

    /// AUTH_Failure2 with `reason`, to send after this side found an error.
    pub fn failure2(&self, reason: FailureReason) -> Vec<u8> {
        Failure { kind: FailureKind::Failure2, t_id: self.t_id, reason }.to_bytes()
    }

    /// What the transaction settled on, once it succeeded.
    pub fn outcome(&self) -> Option<Negotiated> {
        match self.state {
            State::Done(n) => Some(n),
            _ => None,
        }
    }

    /// A Failure1 becomes the error `refused` makes of its reason; any other message must be `expected` of this
    /// transaction.
    fn check_header(
        &self,
        received: &[u8],
        expected: &'static str,
        refused: impl FnOnce(FailureReason) -> AuthError,
    ) -> Result<(), AuthError> {
        let h = Header::parse(received)?;
        if h.is_failure1() {
            return Err(refused(Failure::parse(received, FailureKind::Failure1)?.reason));
        }
        if h.name() != expected {
            return Err(AuthError::UnexpectedMessage { expected, received: h.name() });
        }
        if h.t_id != self.t_id {
            return Err(AuthError::TransactionId { expected: self.t_id, received: h.t_id });
        }
        Ok(())
    }

    fn out_of_order(&self, expected: &'static str) -> AuthError {
        AuthError::UnexpectedMessage { expected, received: format!("{expected} (out of order: {self:?})") }
    }
}

#[cfg(test)]
mod tests;
