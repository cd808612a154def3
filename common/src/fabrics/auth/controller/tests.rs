//! The controller's transaction against the host's ([`HostTransaction`]): every hash with the NULL group and
//! ffdhe2048, one way and both ways, and what a hostile or confused host can send.

use super::*;
use crate::fabrics::auth::host::{HostCredentials, HostTransaction};
use crate::fabrics::auth::OsRandom;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f5e2c4a-1111-2222-3333-444455556666";
const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:auth";

fn secret(byte: u8, hmac: Option<HashFunction>) -> DhchapSecret {
    DhchapSecret::new(hmac, &[byte; 32]).unwrap()
}

fn credentials(host: &DhchapSecret, ctrl: Option<&DhchapSecret>) -> ControllerCredentials {
    ControllerCredentials {
        host_secret: host.clone(),
        controller_secret: ctrl.cloned(),
        hostnqn: HOSTNQN.into(),
        subnqn: SUBNQN.into(),
        hashes: Vec::new(),
        dh_groups: Vec::new(),
    }
}

/// The whole exchange; the host's error, if any, and both sides' ends.
fn run(
    controller: &mut ControllerTransaction,
    host_secret: &DhchapSecret,
    host_ctrl: Option<&DhchapSecret>,
) -> Result<Option<Negotiated>, AuthError> {
    let creds = HostCredentials { secret: host_secret, controller_secret: host_ctrl, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut host = HostTransaction::new(creds, 0x1234);
    let seq = SequenceNumbers::new();
    controller.send(&host.negotiate(), &seq, &mut OsRandom).unwrap();
    let challenge = controller.receive();
    let reply = host.reply(&challenge, &seq, &mut OsRandom)?;
    let _ = controller.send(&reply, &seq, &mut OsRandom);
    let success1 = controller.receive();
    match host.success(&success1) {
        Ok(Some(success2)) => controller.send(&success2, &seq, &mut OsRandom).unwrap(),
        Ok(None) => {}
        Err(e) => {
            if let Some(reason) = e.failure_reason() {
                let _ = controller.send(&host.failure2(reason), &seq, &mut OsRandom);
            }
            return Err(e);
        }
    }
    Ok(host.outcome())
}

#[test]
fn every_hash_with_null_and_ffdhe2048_one_way_and_both_ways() {
    for hash in ALL_HASHES {
        for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
            for bidirectional in [false, true] {
                let host = secret(1, Some(hash));
                let ctrl = secret(2, None);
                let ctrl = bidirectional.then_some(&ctrl);
                let mut c = ControllerTransaction::new(ControllerCredentials {
                    hashes: vec![hash],
                    dh_groups: vec![group],
                    ..credentials(&host, ctrl)
                });
                let outcome = run(&mut c, &host, ctrl).unwrap().unwrap();
                let expected = Negotiated { hash, group, bidirectional };
                assert_eq!(outcome, expected);
                assert_eq!(c.progress(), Progress::Authenticated(expected), "{hash:?} {group:?} {bidirectional}");
                assert_eq!(c.chosen(), Some((hash, group)));
                assert_eq!(c.t_id(), 0x1234);
            }
        }
    }
}

#[test]
fn defaults_pick_sha256_and_null_as_nvmet_and_preferences_apply() {
    let host = secret(1, None);
    let mut c = ControllerTransaction::new(credentials(&host, None));
    run(&mut c, &host, None).unwrap();
    assert_eq!(c.chosen(), Some((HashFunction::Sha256, DhGroup::Null)));
    let mut c = ControllerTransaction::new(ControllerCredentials {
        hashes: vec![HashFunction::Sha512, HashFunction::Sha256],
        dh_groups: vec![DhGroup::Ffdhe3072, DhGroup::Null],
        ..credentials(&host, None)
    });
    run(&mut c, &host, None).unwrap();
    assert_eq!(c.chosen(), Some((HashFunction::Sha512, DhGroup::Ffdhe3072)));
}

#[test]
fn a_wrong_host_secret_gets_failure1_failed() {
    let mut c = ControllerTransaction::new(credentials(&secret(1, None), None));
    let e = run(&mut c, &secret(9, None), None).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted);
    assert_eq!(c.progress(), Progress::Failed(FailureReason::Failed));
}

#[test]
fn a_wrong_controller_secret_fails_at_the_host_which_sends_failure2() {
    let host = secret(1, None);
    let mut c = ControllerTransaction::new(credentials(&host, Some(&secret(3, None))));
    let e = run(&mut c, &host, Some(&secret(4, None))).unwrap_err();
    assert_eq!(e, AuthError::ControllerNotAuthenticated);
    assert_eq!(c.progress(), Progress::Failed(FailureReason::Failed));
}

#[test]
fn bidirectional_without_a_controller_secret_gets_failure1() {
    let host = secret(1, None);
    let mut c = ControllerTransaction::new(credentials(&host, None));
    let e = run(&mut c, &host, Some(&secret(4, None))).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted, "Failure1 with reason 01h, as nvmet sends it");
    assert_eq!(c.progress(), Progress::Failed(FailureReason::Failed));
}

#[test]
fn nothing_in_common_gets_hash_or_group_unusable() {
    let host = secret(1, None);
    let seq = SequenceNumbers::new();
    let offer = |hashes: Vec<HashFunction>, dh_groups: Vec<DhGroup>| {
        Negotiate { t_id: 3, sc_c: 0, dhchap: super::super::message::ProtocolDescriptor { hashes, dh_groups } }
            .to_bytes()
    };
    let mut c = ControllerTransaction::new(ControllerCredentials {
        hashes: vec![HashFunction::Sha512],
        ..credentials(&host, None)
    });
    let e = c.send(&offer(vec![HashFunction::Sha256], vec![DhGroup::Null]), &seq, &mut OsRandom).unwrap_err();
    assert!(matches!(e, AuthError::NoCommonHash { .. }), "{e}");
    assert!(c.failure_pending());
    assert_eq!(c.receive(), [0, 0xF1, 0, 0, 3, 0, 1, 0x04]);
    assert_eq!(c.progress(), Progress::Failed(FailureReason::HashUnusable));
    let mut c = ControllerTransaction::new(ControllerCredentials {
        dh_groups: vec![DhGroup::Ffdhe8192],
        ..credentials(&host, None)
    });
    let e = c.send(&offer(vec![HashFunction::Sha256], vec![]), &seq, &mut OsRandom).unwrap_err();
    assert_eq!(e.to_string(), "the host offers no DH group this controller allows (offered: none)");
    assert_eq!(c.response_len(), 8);
    assert_eq!(c.receive(), [0, 0xF1, 0, 0, 3, 0, 1, 0x05]);
    // Secure channel concatenation is not supported.
    let mut c = ControllerTransaction::new(credentials(&host, None));
    let mut n = offer(vec![HashFunction::Sha256], vec![DhGroup::Null]);
    n[6] = 1;
    assert_eq!(c.send(&n, &seq, &mut OsRandom), Err(AuthError::ConcatenationUnsupported(1)));
    assert_eq!(c.receive()[7], 0x03);
}

/// A controller that sent its Challenge to a host's negotiate (t_id 5), and that challenge.
fn challenged(host: &DhchapSecret, group: DhGroup) -> (ControllerTransaction, Vec<u8>) {
    let mut c = ControllerTransaction::new(ControllerCredentials { dh_groups: vec![group], ..credentials(host, None) });
    let creds = HostCredentials { secret: host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut h = HostTransaction::new(creds, 5);
    c.send(&h.negotiate(), &SequenceNumbers::new(), &mut OsRandom).unwrap();
    let challenge = c.receive();
    (c, challenge)
}

fn failure1_reason(c: &mut ControllerTransaction) -> u8 {
    let f = c.receive();
    assert_eq!(&f[..2], &[0, 0xF1], "{f:?}");
    f[7]
}

#[test]
fn malformed_and_out_of_order_messages_get_failure1() {
    let host = secret(1, None);
    let seq = SequenceNumbers::new();
    let mut rng = OsRandom;
    // Truncated and empty messages, before anything.
    for bad in [&[][..], &[0, 0, 0][..], &[0, 0, 0, 0, 5, 0, 0, 1][..]] {
        let mut c = ControllerTransaction::new(credentials(&host, None));
        assert!(matches!(c.send(bad, &seq, &mut rng), Err(AuthError::Message(_))), "{bad:?}");
        assert_eq!(failure1_reason(&mut c), 0x06);
    }
    // A Reply before any Negotiate; a Success2 where a Reply is due; a Challenge from the host.
    let mut c = ControllerTransaction::new(credentials(&host, None));
    let reply = Reply { t_id: 0, rval: &[0; 32], cval: None, seqnum: 0, dhv: &[] }.to_bytes().unwrap();
    assert!(matches!(c.send(&reply, &seq, &mut rng), Err(AuthError::UnexpectedMessage { .. })));
    assert_eq!(failure1_reason(&mut c), 0x07);
    let (mut c, challenge) = challenged(&host, DhGroup::Null);
    assert!(c.send(&Success2 { t_id: 5 }.to_bytes(), &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x07);
    let (mut c, _) = challenged(&host, DhGroup::Null);
    assert!(c.send(&challenge, &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x07);
    // A Receive with nothing to say.
    let mut c = ControllerTransaction::new(credentials(&host, None));
    assert_eq!(failure1_reason(&mut c), 0x01);
    // A Send when the host should have fetched the challenge.
    let mut c = ControllerTransaction::new(credentials(&host, None));
    let creds = HostCredentials { secret: &host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let negotiate = HostTransaction::new(creds, 5).negotiate();
    c.send(&negotiate, &seq, &mut rng).unwrap();
    assert!(c.send(&reply, &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x07);
}

#[test]
fn wrong_t_id_truncated_reply_and_bad_dh_values() {
    let host = secret(1, None);
    let seq = SequenceNumbers::new();
    let mut rng = OsRandom;
    let reply =
        |t_id: u16, rval: &[u8], dhv: &[u8]| Reply { t_id, rval, cval: None, seqnum: 0, dhv }.to_bytes().unwrap();
    let (mut c, _) = challenged(&host, DhGroup::Null);
    assert!(c.send(&reply(6, &[0; 32], &[]), &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x06, "another transaction's message: incorrect payload, as nvmet");
    // HL not the hash's.
    let (mut c, _) = challenged(&host, DhGroup::Null);
    assert!(c.send(&reply(5, &[0; 48], &[]), &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x06);
    // Truncated: the header claims more than was sent.
    let (mut c, _) = challenged(&host, DhGroup::Null);
    let r = reply(5, &[0; 32], &[]);
    assert!(c.send(&r[..40], &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x06);
    // A DH value with the NULL group.
    let (mut c, _) = challenged(&host, DhGroup::Null);
    assert!(c.send(&reply(5, &[0; 32], &[2; 256]), &seq, &mut rng).is_err());
    assert_eq!(failure1_reason(&mut c), 0x06);
    // ffdhe2048: a value of the wrong size (too long: an ffdhe8192 one), none, and a degenerate one.
    for dhv in [vec![2u8; 1024], vec![], vec![0u8; 256]] {
        let (mut c, _) = challenged(&host, DhGroup::Ffdhe2048);
        assert!(c.send(&reply(5, &[0; 32], &dhv), &seq, &mut rng).is_err());
        let reason = failure1_reason(&mut c);
        assert!(reason == 0x05 || reason == 0x06, "{reason}");
    }
    // A wrong response.
    let (mut c, _) = challenged(&host, DhGroup::Null);
    assert_eq!(c.send(&reply(5, &[0; 32], &[]), &seq, &mut rng), Err(AuthError::HostNotAuthenticated));
    assert_eq!(failure1_reason(&mut c), 0x01);
    assert_eq!(c.progress(), Progress::Failed(FailureReason::Failed));
}

#[test]
fn a_failure2_ends_the_transaction_without_failure1() {
    let host = secret(1, None);
    let (mut c, _) = challenged(&host, DhGroup::Null);
    let f2 = Failure { kind: FailureKind::Failure2, t_id: 5, reason: FailureReason::HashUnusable }.to_bytes();
    assert_eq!(
        c.send(&f2, &SequenceNumbers::new(), &mut OsRandom),
        Err(AuthError::Refused(FailureReason::HashUnusable))
    );
    assert!(!c.failure_pending());
    assert_eq!(c.progress(), Progress::Failed(FailureReason::HashUnusable));
}

#[test]
fn a_negotiate_restarts_from_any_step_and_reauthenticates() {
    let host = secret(1, Some(HashFunction::Sha256));
    let mut c = ControllerTransaction::new(credentials(&host, None));
    run(&mut c, &host, None).unwrap();
    assert!(matches!(c.progress(), Progress::Authenticated(_)));
    // Re-authentication of an authenticated queue, then a restart in the middle of it.
    run(&mut c, &host, None).unwrap();
    let (mut c, _) = challenged(&host, DhGroup::Ffdhe2048);
    assert_eq!(run(&mut c, &host, None).unwrap().unwrap().group, DhGroup::Ffdhe2048);
}

#[test]
fn arbitrary_bytes_at_every_step_never_panic() {
    use proptest::prelude::*;
    let host = secret(1, None);
    proptest!(|(steps in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..6),
                start in 0usize..3)| {
        let seq = SequenceNumbers::new();
        let (mut c, _) = challenged(&host, DhGroup::Null);
        if start == 0 {
            c = ControllerTransaction::new(credentials(&host, None));
        }
        for s in &steps {
            let _ = c.send(s, &seq, &mut OsRandom);
            let out = c.receive();
            prop_assert!(out.len() <= MAX_HOST_MESSAGE_LEN);
        }
    });
}

#[test]
fn debug_prints_no_key() {
    let host = secret(0xAB, None);
    let c = ControllerTransaction::new(credentials(&host, Some(&secret(0xCD, None))));
    let d = format!("{c:?}");
    assert!(!d.contains("171") && !d.contains("205"), "{d}");
}

#[test]
fn the_default_groups_leave_out_ffdhe6144_and_ffdhe8192() {
    // A host that offers only the two largest groups finds none in common by default, but may be allowed them.
    let host = secret(1, None);
    let seq = SequenceNumbers::new();
    let big = vec![DhGroup::Ffdhe6144, DhGroup::Ffdhe8192];
    let negotiate = Negotiate {
        t_id: 3,
        sc_c: 0,
        dhchap: super::super::message::ProtocolDescriptor { hashes: vec![HashFunction::Sha256], dh_groups: big },
    }
    .to_bytes();
    let mut c = ControllerTransaction::new(credentials(&host, None));
    assert!(matches!(c.send(&negotiate, &seq, &mut OsRandom), Err(AuthError::NoCommonDhGroup { .. })));
    let mut c = ControllerTransaction::new(ControllerCredentials {
        dh_groups: vec![DhGroup::Ffdhe6144],
        ..credentials(&host, None)
    });
    assert!(c.needs_dh(&negotiate));
    c.send(&negotiate, &seq, &mut OsRandom).unwrap();
    assert_eq!(c.chosen(), Some((HashFunction::Sha256, DhGroup::Ffdhe6144)));
    // A host offering every group (Linux's) gets the first of the default list that it offers.
    let mut c = ControllerTransaction::new(ControllerCredentials {
        dh_groups: DEFAULT_DH_GROUPS[1..].to_vec(),
        ..credentials(&host, None)
    });
    run(&mut c, &host, None).unwrap();
    assert_eq!(c.chosen(), Some((HashFunction::Sha256, DhGroup::Ffdhe2048)));
}

#[test]
fn needs_dh_says_which_sends_do_modular_exponentiation() {
    let host = secret(1, None);
    let seq = SequenceNumbers::new();
    let creds = HostCredentials { secret: &host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    for (group, dh) in [(DhGroup::Null, false), (DhGroup::Ffdhe2048, true)] {
        let mut c =
            ControllerTransaction::new(ControllerCredentials { dh_groups: vec![group], ..credentials(&host, None) });
        let mut h = HostTransaction::new(creds, 5);
        let negotiate = h.negotiate();
        assert_eq!(c.needs_dh(&negotiate), dh, "{group:?}");
        c.send(&negotiate, &seq, &mut OsRandom).unwrap();
        let reply = h.reply(&c.receive(), &seq, &mut OsRandom).unwrap();
        assert_eq!(c.needs_dh(&reply), dh, "{group:?}");
        c.send(&reply, &seq, &mut OsRandom).unwrap();
        assert!(!c.needs_dh(&reply), "no Reply is due any more");
    }
    let c = ControllerTransaction::new(credentials(&host, None));
    assert!(!c.needs_dh(&[]) && !c.needs_dh(&[0, 0, 0, 0, 5, 0, 0, 1]));
}

#[test]
fn a_refused_negotiate_gets_failure1_without_a_choice() {
    let host = secret(1, None);
    let creds = HostCredentials { secret: &host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut c = ControllerTransaction::new(credentials(&host, None));
    c.refuse(&HostTransaction::new(creds, 0x77).negotiate(), FailureReason::Failed);
    assert!(c.failure_pending());
    assert_eq!(c.chosen(), None);
    assert_eq!(c.receive(), [0, 0xF1, 0, 0, 0x77, 0, 1, 0x01]);
    assert_eq!(c.progress(), Progress::Failed(FailureReason::Failed));
}

/// A concatenating exchange: the host asks with `sc_c`; both sides' generated PSKs, or the host's error.
fn run_concat(
    controller: &mut ControllerTransaction,
    sc_c: u8,
    host_ctrl: Option<&DhchapSecret>,
) -> Result<(Vec<u8>, Vec<u8>), AuthError> {
    let host_secret = secret(1, None);
    let creds =
        HostCredentials { secret: &host_secret, controller_secret: host_ctrl, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut host = HostTransaction::new(creds, 7).with_secure_channel(sc_c);
    let seq = SequenceNumbers::new();
    let _ = controller.send(&host.negotiate(), &seq, &mut OsRandom);
    let reply = host.reply(&controller.receive(), &seq, &mut OsRandom)?;
    let _ = controller.send(&reply, &seq, &mut OsRandom);
    assert_eq!(host.success(&controller.receive())?, None, "no Success2: the controller is not authenticated");
    let (hash, ours) = host.generated_psk().expect("the host's generated PSK");
    let (theirs_hash, theirs) = controller.generated_psk().expect("the controller's generated PSK");
    assert_eq!(hash, theirs_hash);
    assert_eq!(ours.len(), hash.digest_len());
    Ok((ours.to_vec(), theirs.to_vec()))
}

#[test]
fn secure_channel_concatenation_generates_the_same_psk_on_both_sides() {
    use crate::fabrics::auth::secure_channel::{NEW_TLS_PSK, REPLACE_TLS_PSK};
    for (policy, sc_c) in [(SecureChannelPolicy::Plaintext, NEW_TLS_PSK), (SecureChannelPolicy::Tls, REPLACE_TLS_PSK)] {
        for ctrl in [None, Some(secret(2, None))] {
            // Defaults prefer the NULL group: concatenation passes over it (and over SHA-512).
            let mut c = ControllerTransaction::new(credentials(&secret(1, None), ctrl.as_ref()));
            c.set_secure_channel(policy);
            let (host, controller) = run_concat(&mut c, sc_c, ctrl.as_ref()).unwrap();
            assert_eq!(host, controller);
            assert_eq!(c.chosen(), Some((HashFunction::Sha256, DhGroup::Ffdhe2048)));
            assert!(matches!(c.progress(), Progress::Authenticated(n) if !n.bidirectional));
            // Each transaction its own key.
            let mut again = ControllerTransaction::new(credentials(&secret(1, None), None));
            again.set_secure_channel(policy);
            assert_ne!(run_concat(&mut again, sc_c, None).unwrap().0, host);
        }
    }
}

#[test]
fn secure_channel_concatenation_refusals_are_failure1_concat_mismatch() {
    use crate::fabrics::auth::secure_channel::{NEW_TLS_PSK, REPLACE_TLS_PSK};
    let mismatch = AuthError::Refused(FailureReason::ConcatenationMismatch);
    let cases = [
        // No TLS here (an I/O queue, a listener without TLS), a replacement asked on plaintext, a new PSK on TLS.
        (SecureChannelPolicy::Refused, NEW_TLS_PSK, Vec::new()),
        (SecureChannelPolicy::Plaintext, REPLACE_TLS_PSK, Vec::new()),
        (SecureChannelPolicy::Tls, NEW_TLS_PSK, Vec::new()),
        (SecureChannelPolicy::Plaintext, 0x01, Vec::new()),
        // Only the NULL group allowed: no session key.
        (SecureChannelPolicy::Plaintext, NEW_TLS_PSK, vec![DhGroup::Null]),
    ];
    for (policy, sc_c, dh_groups) in cases {
        let mut c = ControllerTransaction::new(ControllerCredentials {
            dh_groups: dh_groups.clone(),
            ..credentials(&secret(1, None), None)
        });
        c.set_secure_channel(policy);
        let e = run_concat(&mut c, sc_c, None).unwrap_err();
        let expected =
            if dh_groups.is_empty() { mismatch.clone() } else { AuthError::Refused(FailureReason::DhGroupUnusable) };
        assert_eq!(e, expected, "{policy:?} {sc_c}");
        assert_eq!(c.generated_psk(), None);
    }
    // SHA-512 only: no TLS hash.
    let mut c = ControllerTransaction::new(ControllerCredentials {
        hashes: vec![HashFunction::Sha512],
        ..credentials(&secret(1, None), None)
    });
    c.set_secure_channel(SecureChannelPolicy::Plaintext);
    assert_eq!(run_concat(&mut c, NEW_TLS_PSK, None).unwrap_err(), AuthError::Refused(FailureReason::HashUnusable));
    // Without concatenation nothing is generated.
    let host = secret(1, None);
    let mut c = ControllerTransaction::new(ControllerCredentials {
        dh_groups: vec![DhGroup::Ffdhe2048],
        ..credentials(&host, None)
    });
    c.set_secure_channel(SecureChannelPolicy::Plaintext);
    run(&mut c, &host, None).unwrap();
    assert_eq!(c.generated_psk(), None);
}

#[test]
fn a_concatenating_reply_without_c2_fails() {
    use crate::fabrics::auth::secure_channel::NEW_TLS_PSK;
    let host_secret = secret(1, None);
    let creds = HostCredentials { secret: &host_secret, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut c = ControllerTransaction::new(credentials(&host_secret, None));
    c.set_secure_channel(SecureChannelPolicy::Plaintext);
    let seq = SequenceNumbers::new();
    let mut host = HostTransaction::new(creds, 7).with_secure_channel(NEW_TLS_PSK);
    c.send(&host.negotiate(), &seq, &mut OsRandom).unwrap();
    let reply = host.reply(&c.receive(), &seq, &mut OsRandom).unwrap();
    // The same Reply (its response covers SC_C 02h) without C2.
    let r = Reply::parse(&reply).unwrap();
    let stripped = Reply { cval: None, ..r }.to_bytes().unwrap();
    assert_eq!(c.send(&stripped, &seq, &mut OsRandom), Err(AuthError::NoConcatenationChallenge));
    assert_eq!(host.success(&c.receive()), Err(AuthError::HostNotAccepted));
    // A response computed with SC_C 00h does not verify in a transaction that asked for concatenation.
    let mut c = ControllerTransaction::new(credentials(&host_secret, None));
    c.set_secure_channel(SecureChannelPolicy::Plaintext);
    let mut concat = HostTransaction::new(creds, 8).with_secure_channel(NEW_TLS_PSK);
    c.send(&concat.negotiate(), &seq, &mut OsRandom).unwrap();
    let challenge = c.receive();
    let mut plain = HostTransaction::new(creds, 8);
    plain.negotiate();
    let reply = plain.reply(&challenge, &seq, &mut OsRandom).unwrap();
    assert_eq!(c.send(&reply, &seq, &mut OsRandom), Err(AuthError::HostNotAuthenticated));
}
