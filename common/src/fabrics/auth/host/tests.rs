//! A whole transaction against a controller made of the same parts a target will use (messages, transcript,
//! DH): what nvmet does, step by step.

use super::*;
use crate::fabrics::auth::OsRandom;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f5e2c4a-1111-2222-3333-444455556666";
const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:auth";

fn secret(byte: u8, hmac: Option<HashFunction>) -> DhchapSecret {
    DhchapSecret::new(hmac, &[byte; 32]).unwrap()
}

/// The controller's side, as nvmet runs it.
struct Controller {
    hash: HashFunction,
    group: DhGroup,
    host_secret: DhchapSecret,
    controller_secret: Option<DhchapSecret>,
    t_id: u16,
    c1: Vec<u8>,
    s1: u32,
    pair: Option<DhKeyPair>,
    session: Option<Zeroizing<Vec<u8>>>,
    c2: Option<(Vec<u8>, u32)>,
}

impl Controller {
    fn new(hash: HashFunction, group: DhGroup, host_secret: DhchapSecret, ctrl: Option<DhchapSecret>) -> Self {
        let c1 = vec![0x5C; hash.digest_len()];
        Controller {
            hash,
            group,
            host_secret,
            controller_secret: ctrl,
            t_id: 0,
            c1,
            s1: 0x00C0_FFEE,
            pair: None,
            session: None,
            c2: None,
        }
    }

    fn challenge(&mut self, negotiate: &[u8]) -> Vec<u8> {
        let n = Negotiate::parse(negotiate).unwrap();
        assert!(n.dhchap.hashes.contains(&self.hash) && n.dhchap.dh_groups.contains(&self.group));
        self.t_id = n.t_id;
        if self.group != DhGroup::Null {
            self.pair = Some(DhKeyPair::generate(self.group, &mut OsRandom).unwrap());
        }
        let dhv = self.pair.as_ref().map_or(&[][..], DhKeyPair::public).to_vec();
        Challenge {
            t_id: self.t_id,
            hashid: self.hash.id(),
            dhgid: self.group.id(),
            seqnum: self.s1,
            cval: &self.c1,
            dhv: &dhv,
        }
        .to_bytes()
        .unwrap()
    }

    fn augmented(&self, c: &[u8]) -> Vec<u8> {
        match &self.session {
            Some(s) => augmented_challenge(self.hash, s, c).to_vec(),
            None => c.to_vec(),
        }
    }

    /// Success1 when the host's response verifies, else Failure1 (reason 01h).
    fn success1(&mut self, reply: &[u8]) -> Vec<u8> {
        let r = Reply::parse(reply).unwrap();
        if let Some(pair) = &self.pair {
            self.session = Some(pair.shared_secret(r.dhv).unwrap());
        }
        let c1 = self.augmented(&self.c1);
        let t = Transcript {
            hash: self.hash,
            challenge: &c1,
            seqnum: self.s1,
            t_id: self.t_id,
            hostnqn: HOSTNQN,
            subnqn: SUBNQN,
            sc_c: 0,
        };
        if !t.verify(Responder::Host, &self.host_secret.transform(HOSTNQN), r.rval) {
            return Failure { kind: FailureKind::Failure1, t_id: self.t_id, reason: FailureReason::Failed }.to_bytes();
        }
        let hl = u8::try_from(self.hash.digest_len()).unwrap();
        let Some(c2) = r.cval else { return Success1 { t_id: self.t_id, hl, rval: None }.to_bytes() };
        self.c2 = Some((c2.to_vec(), r.seqnum));
        let c2 = self.augmented(c2);
        let t = Transcript { challenge: &c2, seqnum: r.seqnum, ..t };
        let key = self.controller_secret.as_ref().unwrap().transform(SUBNQN);
        let rval = t.response(Responder::Controller, &key);
        Success1 { t_id: self.t_id, hl, rval: Some(&rval) }.to_bytes()
    }
}

fn run(
    hash: HashFunction,
    group: DhGroup,
    host: &DhchapSecret,
    ctrl: Option<&DhchapSecret>,
    controller: &mut Controller,
) -> Result<(Option<Vec<u8>>, Option<Negotiated>), AuthError> {
    let creds = HostCredentials { secret: host, controller_secret: ctrl, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 7);
    let negotiate = t.negotiate();
    let challenge = controller.challenge(&negotiate);
    let reply = t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom)?;
    let success1 = controller.success1(&reply);
    let success2 = t.success(&success1)?;
    assert_eq!(t.outcome().map(|n| (n.hash, n.group)), Some((hash, group)));
    Ok((success2, t.outcome()))
}

#[test]
fn null_group_sha256_unidirectional() {
    let host = secret(1, Some(HashFunction::Sha256));
    let mut c = Controller::new(HashFunction::Sha256, DhGroup::Null, host.clone(), None);
    let (success2, outcome) = run(HashFunction::Sha256, DhGroup::Null, &host, None, &mut c).unwrap();
    assert_eq!(success2, None);
    assert!(!outcome.unwrap().bidirectional);
}

#[test]
fn ffdhe2048_sha384_bidirectional() {
    let host = secret(1, Some(HashFunction::Sha384));
    let ctrl = secret(2, None);
    let mut c = Controller::new(HashFunction::Sha384, DhGroup::Ffdhe2048, host.clone(), Some(ctrl.clone()));
    let (success2, outcome) = run(HashFunction::Sha384, DhGroup::Ffdhe2048, &host, Some(&ctrl), &mut c).unwrap();
    assert_eq!(Success2::parse(&success2.unwrap()).unwrap(), Success2 { t_id: 7 });
    assert!(outcome.unwrap().bidirectional);
    let (_, s2) = c.c2.unwrap();
    assert_ne!(s2, 0, "a bidirectional reply carries a sequence number");
}

#[test]
fn a_wrong_host_secret_is_refused_by_the_controller() {
    let mut c = Controller::new(HashFunction::Sha512, DhGroup::Ffdhe3072, secret(1, None), None);
    let e = run(HashFunction::Sha512, DhGroup::Ffdhe3072, &secret(9, None), None, &mut c).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted);
    assert_eq!(e.failure_reason(), None, "the controller ended the transaction: no Failure2");
}

#[test]
fn a_controller_without_the_controller_secret_is_not_authenticated() {
    let host = secret(1, None);
    let mut c = Controller::new(HashFunction::Sha256, DhGroup::Null, host.clone(), Some(secret(3, None)));
    let e = run(HashFunction::Sha256, DhGroup::Null, &host, Some(&secret(4, None)), &mut c).unwrap_err();
    assert_eq!(e, AuthError::ControllerNotAuthenticated);
    assert_eq!(e.failure_reason(), Some(FailureReason::Failed));
}

#[test]
fn a_success1_without_the_asked_for_response_fails() {
    let host = secret(1, None);
    let ctrl = secret(2, None);
    let creds = HostCredentials { secret: &host, controller_secret: Some(&ctrl), hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 1);
    let mut c = Controller::new(HashFunction::Sha256, DhGroup::Null, host.clone(), None);
    let challenge = c.challenge(&t.negotiate());
    t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom).unwrap();
    let bare = Success1 { t_id: 1, hl: 32, rval: None }.to_bytes();
    assert_eq!(t.success(&bare), Err(AuthError::ControllerNotAuthenticated));
}

#[test]
fn out_of_order_foreign_and_unusable_messages() {
    let host = secret(1, None);
    let creds = HostCredentials { secret: &host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 5);
    let negotiate = t.negotiate();
    let challenge = |hashid: u8, dhgid: u8, t_id: u16, dhv: &[u8]| {
        Challenge { t_id, hashid, dhgid, seqnum: 1, cval: &[1; 32], dhv }.to_bytes().unwrap()
    };
    let seq = SequenceNumbers::new();
    let again = |bytes: &[u8]| {
        let mut t = HostTransaction::new(creds, 5);
        t.negotiate();
        t.reply(bytes, &seq, &mut OsRandom).unwrap_err()
    };
    assert_eq!(again(&challenge(1, 0, 6, &[])), AuthError::TransactionId { expected: 5, received: 6 });
    assert_eq!(again(&challenge(9, 0, 5, &[])), AuthError::HashUnusable(9));
    assert!(matches!(again(&challenge(1, 7, 5, &[])), AuthError::DhGroupUnusable { group: 7, .. }));
    assert!(matches!(
        again(&challenge(1, 0, 5, &[1, 2])),
        AuthError::Message(WireError::InvalidField { field: "dhvlen", .. })
    ));
    assert!(matches!(again(&challenge(1, 1, 5, &[2; 255])), AuthError::DhGroupUnusable { group: 1, .. }));
    assert!(matches!(again(&challenge(2, 0, 5, &[])), AuthError::Message(WireError::InvalidField { field: "hl", .. })));
    let e = again(&negotiate);
    assert_eq!(
        e,
        AuthError::UnexpectedMessage { expected: "DH-HMAC-CHAP_Challenge", received: "AUTH_Negotiate".into() }
    );
    assert_eq!(e.failure_reason(), Some(FailureReason::IncorrectMessage));
    let refused = Failure { kind: FailureKind::Failure1, t_id: 5, reason: FailureReason::HashUnusable }.to_bytes();
    assert_eq!(again(&refused), AuthError::Refused(FailureReason::HashUnusable));
    // Success1 before any challenge, and a failure2 on the wire.
    assert!(matches!(
        t.success(&[1, 3, 0, 0, 5, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Err(AuthError::UnexpectedMessage { .. })
    ));
    assert_eq!(t.failure2(FailureReason::Failed), [0, 0xF0, 0, 0, 5, 0, 1, 1]);
}
