//! In-band authentication of queues: ATR at Connect, Authentication Required for anything else until the
//! DH-HMAC-CHAP transaction succeeds (driven by the host's transaction from `nvmf-common`), failures that end the
//! association, the connect deadline, re-authentication under I/O and the bounds on the messages.

use std::collections::BTreeMap;

use nvmf_common::fabrics::auth::command::AuthenticationCommand;
use nvmf_common::fabrics::auth::dh::DhGroup;
use nvmf_common::fabrics::auth::hash::HashFunction;
use nvmf_common::fabrics::auth::host::{HostCredentials, HostTransaction};
use nvmf_common::fabrics::auth::message::auth_id;
use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::auth::{AuthError, OsRandom, SequenceNumbers};

use super::*;
use crate::controller::authentication::{HostKeys, SubsystemAuth};

fn secret(byte: u8) -> DhchapSecret {
    DhchapSecret::new(Some(HashFunction::Sha256), &[byte; 32]).unwrap()
}

fn keys(host: u8, ctrl: Option<u8>) -> Arc<HostKeys> {
    Arc::new(HostKeys {
        host_key: secret(host),
        controller_key: ctrl.map(secret),
        hashes: Vec::new(),
        dh_groups: vec![DhGroup::Ffdhe2048, DhGroup::Null],
        hostid: None,
    })
}

fn auth(required: bool, host_keys: Option<Arc<HostKeys>>) -> SubsystemAuth {
    SubsystemAuth {
        required,
        hosts: host_keys.into_iter().map(|k| (HOSTNQN.to_owned(), k)).collect::<BTreeMap<_, _>>(),
    }
}

fn target_with(params: TargetParams, auth: SubsystemAuth) -> Arc<Target> {
    Target::new(params, vec![SubsystemParams { auth, ..subsystem_params() }]).unwrap()
}

/// How the host sends its messages: in the capsule, or fetched by the transport (TCP R2T, RDMA READ).
#[derive(Clone, Copy)]
enum Carry {
    InCapsule,
    Fetched,
}

impl Host {
    fn auth_send(&mut self, engine: &mut IoEngine, message: &[u8], carry: Carry) -> Done {
        let len = u32::try_from(message.len()).unwrap();
        let sqe = AuthenticationCommand::send(len).to_sqe();
        match carry {
            Carry::InCapsule => self.submit(engine, with_sgl(sqe, in_capsule(len)), message, &[]).unwrap(),
            Carry::Fetched => self.submit(engine, with_sgl(sqe, transport_data(len)), &[], message).unwrap(),
        }
    }

    fn auth_receive(&mut self, engine: &mut IoEngine, al: u32) -> Done {
        self.run(engine, with_sgl(AuthenticationCommand::receive(al).to_sqe(), transport_data(al)))
    }

    /// One whole transaction as the Linux host runs it (Receive with 4 KiB).
    fn authenticate(
        &mut self,
        engine: &mut IoEngine,
        host: &DhchapSecret,
        ctrl: Option<&DhchapSecret>,
        carry: Carry,
    ) -> Result<(), AuthError> {
        let creds = HostCredentials { secret: host, controller_secret: ctrl, hostnqn: HOSTNQN, subnqn: SUBNQN };
        let mut t = HostTransaction::new(creds, 9);
        let seq = SequenceNumbers::new();
        self.auth_send(engine, &t.negotiate(), carry).ok();
        let challenge = self.auth_receive(engine, 4096).ok().data;
        assert_eq!(challenge.len(), 4096, "the whole allocation length, as nvmet");
        let reply = t.reply(&challenge, &seq, &mut OsRandom)?;
        self.auth_send(engine, &reply, carry).ok();
        let success1 = self.auth_receive(engine, 4096).ok().data;
        match t.success(&success1) {
            Ok(Some(success2)) => {
                self.auth_send(engine, &success2, carry).ok();
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                if let Some(reason) = e.failure_reason() {
                    self.auth_send(engine, &t.failure2(reason), carry).ok();
                }
                Err(e)
            }
        }
    }

    /// An admin queue connected, authenticated with host key 1 and enabled; its CNTLID.
    fn authenticated_admin(target: &Arc<Target>, engine: &mut IoEngine) -> (Self, u16) {
        let mut admin = Host::new(target);
        let r = admin.connect_admin(engine);
        admin.authenticate(engine, &secret(1), None, Carry::InCapsule).unwrap();
        admin.enable(engine);
        (admin, r.cntlid)
    }

    fn connect_admin(&mut self, engine: &mut IoEngine) -> ConnectResponse {
        let done = self.connect(engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
        ConnectResponse::from_dw0(done.cqe.dw0)
    }
}

const AUTH_REQUIRED: Status = Status::AUTHENTICATION_REQUIRED.with_dnr();

#[test]
fn a_host_with_a_key_must_authenticate_every_queue_then_io_works() {
    let target = target_with(target_params(), auth(false, Some(keys(1, Some(2)))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    let r = admin.connect_admin(&mut engine);
    assert!(r.atr && !r.ascr, "ATR on the admin queue");
    assert_eq!(admin.property_get(&mut engine, 0x1c, PropertySize::Four).status(), AUTH_REQUIRED);
    assert_eq!(admin.run(&mut engine, KeepAlive.to_sqe()).status(), AUTH_REQUIRED);
    admin.authenticate(&mut engine, &secret(1), Some(&secret(2)), Carry::InCapsule).unwrap();
    admin.enable(&mut engine);
    assert!(admin.run(&mut engine, KeepAlive.to_sqe()).status().is_success());

    let mut io = Host::new(&target);
    let done = io.connect(&mut engine, 1, 127, r.cntlid, SUBNQN, HOSTNQN).ok();
    assert!(ConnectResponse::from_dw0(done.cqe.dw0).atr, "ATR on every I/O queue");
    assert_eq!(io.read(&mut engine, 1, 0, 1).status(), AUTH_REQUIRED);
    io.authenticate(&mut engine, &secret(1), None, Carry::Fetched).unwrap();
    let data = pattern(4096, 3);
    io.write(&mut engine, 1, 8, &data).ok();
    assert_eq!(io.read(&mut engine, 1, 8, 8).ok().data, data);
    let counts = target.auth_counters().snapshot();
    assert_eq!(counts, vec![(true, Some(HashFunction::Sha256), Some(DhGroup::Ffdhe2048), 2)]);
}

#[test]
fn a_host_without_a_key_connects_without_authentication_unless_required() {
    let target = target_with(target_params(), auth(false, None));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    assert!(!admin.connect_admin(&mut engine).atr);
    assert!(admin.property_get(&mut engine, 0x1c, PropertySize::Four).status().is_success());
    // Authentication commands on such a queue: nothing to authenticate with.
    let done = admin.auth_receive(&mut engine, 4096);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());

    let target = target_with(target_params(), auth(true, None));
    let mut admin = Host::new(&target);
    let done = admin.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr());
}

#[test]
fn a_wrong_key_gets_failure1_and_the_association_ends() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let e = admin.authenticate(&mut engine, &secret(7), None, Carry::InCapsule).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted);
    let mut out = Vec::new();
    assert_eq!(
        admin.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AuthenticationFailed { qid: 0 })
    );
    assert!(admin.queue.is_closed());
    assert_eq!(
        target.auth_counters().snapshot(),
        vec![(false, Some(HashFunction::Sha256), Some(DhGroup::Ffdhe2048), 1)]
    );
}

#[test]
fn a_failed_io_queue_ends_alone_and_frees_its_qid() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let (mut admin, cntlid) = Host::authenticated_admin(&target, &mut engine);
    let mut io = Host::new(&target);
    io.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    // The host's controller check fails on its side: it sends AUTH_Failure2 after Success1.
    let e = io.authenticate(&mut engine, &secret(1), Some(&secret(5)), Carry::Fetched).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted, "no controller key here: Failure1");
    let mut out = Vec::new();
    assert_eq!(io.queue.poll(&mut engine, Instant::now(), &mut out), Err(QueueError::AuthenticationFailed { qid: 1 }));
    // The association lives on (nvmet would end it), and QID 1 connects again.
    assert_eq!(admin.queue.poll(&mut engine, Instant::now(), &mut out), Ok(()));
    assert!(admin.run(&mut engine, KeepAlive.to_sqe()).status().is_success());
    let mut again = Host::new(&target);
    again.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    again.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    again.write(&mut engine, 1, 0, &pattern(512, 4)).ok();
}

/// A peer that knows the host NQN, host ID and CNTLID (sequential; the host ID is often in the NQN) but not the
/// key: its I/O queue Connect holds no QID, its failure ends only its own queue, and the real host's queue of the
/// same QID connects and authenticates meanwhile.
#[test]
fn an_impostor_io_queue_neither_holds_a_qid_nor_ends_the_association() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let (mut admin, cntlid) = Host::authenticated_admin(&target, &mut engine);
    let mut impostor = Host::new(&target);
    assert!(ConnectResponse::from_dw0(impostor.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok().cqe.dw0).atr);
    assert!(impostor.queue.is_anonymous(), "charged to the anonymous share until authenticated");

    let mut real = Host::new(&target);
    real.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
    real.authenticate(&mut engine, &secret(1), None, Carry::Fetched).unwrap();
    assert!(!real.queue.is_anonymous());
    let data = pattern(4096, 6);
    real.write(&mut engine, 1, 16, &data).ok();

    // The impostor fails (a Receive before any Negotiate: Failure1), then its queue goes.
    let failure1 = impostor.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!(failure1[1], auth_id::FAILURE1);
    let mut out = Vec::new();
    assert_eq!(
        impostor.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AuthenticationFailed { qid: 1 })
    );
    assert_eq!(admin.queue.poll(&mut engine, Instant::now(), &mut out), Ok(()));
    assert_eq!(real.queue.poll(&mut engine, Instant::now(), &mut out), Ok(()));
    assert_eq!(real.read(&mut engine, 1, 16, 8).ok().data, data, "the real queue serves on");
    assert_eq!(target.subsystem(SUBNQN).unwrap().controller(cntlid).unwrap().io_queue_count(), 1);
}

/// Of two queues of one QID waiting to authenticate, the first to succeed takes it; the other ends after its
/// last message.
#[test]
fn the_first_queue_of_a_qid_to_authenticate_takes_it() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let (_admin, cntlid) = Host::authenticated_admin(&target, &mut engine);
    let mut first = Host::new(&target);
    let mut second = Host::new(&target);
    first.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN).ok();
    second.connect(&mut engine, 2, 127, cntlid, SUBNQN, HOSTNQN).ok();
    first.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    second.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    let mut out = Vec::new();
    assert_eq!(second.queue.poll(&mut engine, Instant::now(), &mut out), Err(QueueError::Disconnected { qid: 2 }));
    assert_eq!(first.queue.poll(&mut engine, Instant::now(), &mut out), Ok(()));
    first.write(&mut engine, 1, 0, &pattern(512, 1)).ok();
}

#[test]
fn a_failure2_from_the_host_ends_the_queue_after_its_answer() {
    let target = target_with(target_params(), auth(false, Some(keys(1, Some(2)))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let e = admin.authenticate(&mut engine, &secret(1), Some(&secret(3)), Carry::Fetched).unwrap_err();
    assert_eq!(e, AuthError::ControllerNotAuthenticated);
    assert!(admin.queue.wants_poll());
    let mut out = Vec::new();
    assert_eq!(
        admin.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AuthenticationFailed { qid: 0 })
    );
}

#[test]
fn a_queue_not_authenticated_in_time_ends_at_the_connect_deadline() {
    let params = TargetParams { connect_timeout_ms: 500, ..target_params() };
    let target = target_with(params, auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let deadline = admin.queue.next_deadline().expect("the connect deadline applies until authenticated");
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, deadline - Duration::from_millis(1), &mut out).unwrap();
    assert_eq!(admin.queue.poll(&mut engine, deadline, &mut out), Err(QueueError::ConnectTimeout { timeout_ms: 500 }));

    // Authenticated, the deadline is the keep-alive's.
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let connect_deadline = admin.queue.next_deadline().unwrap();
    admin.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    assert!(admin.queue.next_deadline().unwrap() > connect_deadline);
}

#[test]
fn a_stalled_reauthentication_expires_and_the_queue_keeps_its_authentication() {
    let params = TargetParams { connect_timeout_ms: 500, ..target_params() };
    let target = target_with(params, auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let (mut admin, _) = Host::authenticated_admin(&target, &mut engine);
    // A re-authentication that stops after its Negotiate: the queue's next deadline is its expiry.
    let creds = HostCredentials { secret: &secret(1), controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 11);
    let sent = Instant::now();
    admin.auth_send(&mut engine, &t.negotiate(), Carry::InCapsule).ok();
    let expiry = admin.queue.next_deadline().unwrap();
    assert!(expiry <= sent + Duration::from_millis(600) && expiry >= sent, "{:?}", expiry - sent);
    let failures =
        |target: &Target| target.auth_counters().snapshot().iter().filter(|c| !c.0).map(|c| c.3).sum::<u64>();
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, expiry - Duration::from_millis(1), &mut out).unwrap();
    assert_eq!(failures(&target), 0);
    admin.queue.poll(&mut engine, expiry, &mut out).unwrap();
    assert_eq!(failures(&target), 1, "the expired transaction counts as a failure");
    assert!(admin.queue.next_deadline().is_none_or(|d| d > expiry), "no expiry left");
    // Still authenticated: admin commands work.
    assert_eq!(admin.identify(&mut engine, 1, 0).status(), Status::SUCCESS);
    // The stalled transaction's next message fails it.
    let failure1 = admin.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!(failure1[1], auth_id::FAILURE1, "{:?}", &failure1[..16]);
}

#[test]
fn reauthentication_runs_while_io_flows_and_uses_reloaded_keys() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut a = {
        let mut engine = engine();
        let (admin, cntlid) = Host::authenticated_admin(&target, &mut engine);
        let mut io = Host::new(&target);
        io.connect(&mut engine, 1, 127, cntlid, SUBNQN, HOSTNQN).ok();
        io.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
        Association { target: Arc::clone(&target), engine, admin, io, cntlid }
    };
    // The key is rotated (a reload); the host re-authenticates with the new one, I/O between its messages.
    target.subsystem(SUBNQN).unwrap().set_auth(auth(false, Some(keys(4, None))));
    let creds = HostCredentials { secret: &secret(4), controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 10);
    a.io.auth_send(&mut a.engine, &t.negotiate(), Carry::InCapsule).ok();
    a.io.read(&mut a.engine, 1, 0, 1).ok();
    let challenge = a.io.auth_receive(&mut a.engine, 4096).ok().data;
    a.io.read(&mut a.engine, 1, 0, 1).ok();
    let reply = t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom).unwrap();
    a.io.auth_send(&mut a.engine, &reply, Carry::Fetched).ok();
    let success1 = a.io.auth_receive(&mut a.engine, 4096).ok().data;
    assert_eq!(t.success(&success1), Ok(None));
    a.io.read(&mut a.engine, 1, 0, 1).ok();
    // The old key no longer does.
    let e = a.io.authenticate(&mut a.engine, &secret(1), None, Carry::InCapsule).unwrap_err();
    assert_eq!(e, AuthError::HostNotAccepted);
    assert_eq!(a.io.read(&mut a.engine, 1, 0, 1).status(), AUTH_REQUIRED, "a failed queue does no I/O");
}

#[test]
fn hostile_authentication_commands_are_refused() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let invalid = Status::INVALID_FIELD.with_dnr();
    // Oversized messages and allocation lengths; zero lengths.
    let big = vec![0u8; 2048];
    assert_eq!(admin.auth_send(&mut engine, &big, Carry::Fetched).status(), invalid);
    assert_eq!(admin.auth_send(&mut engine, &[], Carry::InCapsule).status(), invalid);
    assert_eq!(admin.auth_receive(&mut engine, 8192).status(), invalid);
    assert_eq!(admin.auth_receive(&mut engine, 0).status(), invalid);
    // Another security protocol.
    let mut cmd = AuthenticationCommand::send(72);
    cmd.secp = 0xEA;
    let done = admin.submit(&mut engine, with_sgl(cmd.to_sqe(), in_capsule(72)), &[0; 72], &[]).unwrap();
    assert_eq!(done.status(), invalid);
    // TL and the SGL disagree.
    let sqe = with_sgl(AuthenticationCommand::send(72).to_sqe(), in_capsule(64));
    let done = admin.submit(&mut engine, sqe, &[0; 64], &[]).unwrap();
    assert_eq!(done.status(), Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    // An allocation length too small for the challenge: refused, and the transaction goes on.
    let creds = HostCredentials { secret: &secret(1), controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 1);
    admin.auth_send(&mut engine, &t.negotiate(), Carry::InCapsule).ok();
    assert_eq!(admin.auth_receive(&mut engine, 64).status(), invalid);
    let challenge = admin.auth_receive(&mut engine, 1024).ok().data;
    assert!(t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom).is_ok());
    // Garbage instead of the reply: Failure1 (incorrect payload), then the queue ends.
    admin.auth_send(&mut engine, &[1, 2, 0, 0, 1, 0, 200], Carry::InCapsule).ok();
    let f = admin.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!(&f[..8], &[0, 0xF1, 0, 0, 1, 0, 1, 0x06]);
    assert_eq!(admin.run(&mut engine, KeepAlive.to_sqe()).status(), AUTH_REQUIRED);
}

#[test]
fn the_discovery_controller_may_require_authentication() {
    let target = target_with(target_params(), auth(false, None));
    target.discovery_subsystem().set_auth(auth(true, Some(keys(1, None))));
    let mut engine = engine();
    let mut other = Host::new(&target);
    let done = other.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, OTHER_HOST);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr(), "no key: refused");
    let mut host = Host::new(&target);
    let done = host.connect(&mut engine, 0, 31, CNTLID_DYNAMIC, DISCOVERY_NQN, HOSTNQN).ok();
    assert!(ConnectResponse::from_dw0(done.cqe.dw0).atr);
    let glp = GetLogPage::new(lid::DISCOVERY, 0, 1024).unwrap();
    assert_eq!(host.log_page(&mut engine, glp).status(), AUTH_REQUIRED);
    let creds =
        HostCredentials { secret: &secret(1), controller_secret: None, hostnqn: HOSTNQN, subnqn: DISCOVERY_NQN };
    let mut t = HostTransaction::new(creds, 2);
    host.auth_send(&mut engine, &t.negotiate(), Carry::InCapsule).ok();
    let challenge = host.auth_receive(&mut engine, 4096).ok().data;
    let reply = t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom).unwrap();
    host.auth_send(&mut engine, &reply, Carry::InCapsule).ok();
    assert_eq!(t.success(&host.auth_receive(&mut engine, 4096).ok().data), Ok(None));
    assert!(host.log_page(&mut engine, glp).status().is_success());
}

#[test]
fn endless_restarts_end_the_queue() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let creds = HostCredentials { secret: &secret(1), controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let negotiate = HostTransaction::new(creds, 1).negotiate();
    for _ in 0..4 {
        admin.auth_send(&mut engine, &negotiate, Carry::InCapsule).ok();
        admin.auth_receive(&mut engine, 4096).ok();
    }
    let done = admin.auth_send(&mut engine, &negotiate, Carry::InCapsule);
    assert_eq!(done.status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    let mut out = Vec::new();
    assert_eq!(
        admin.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AuthenticationFailed { qid: 0 })
    );
    // A success in between resets the count: re-authentication may go on for ever.
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    for _ in 0..6 {
        admin.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    }
}

/// Reservations know hosts by host ID: an authenticated host's ID is its own. Another host NQN may not connect
/// with it (it could act as the host's registrant), nor the host NQN with another.
#[test]
fn the_host_id_of_the_first_authentication_is_bound_to_the_host_nqn() {
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let invalid_host = |done: &Done| {
        let ipo = InvalidParameter::in_data(nvmf_common::fabrics::connect::data_offset::HOSTID).to_dw0();
        assert_eq!((done.status(), done.cqe.dw0), (Status::CONNECT_INVALID_HOST.with_dnr(), ipo));
    };
    let other_id = [0x42; 16];
    // Before any authentication nothing is bound.
    let mut early = Host::new(&target);
    early.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, HOSTID, 0).ok();
    let (_admin, _) = Host::authenticated_admin(&target, &mut engine);
    invalid_host(&Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, other_id, 0));
    invalid_host(&Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, HOSTID, 0));
    assert_eq!(target.connect_limit_refusals(ConnectLimit::HostId), 2);
    Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, other_id, 0).ok();
    Host::new(&target).connect(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN).ok();
    // The other host's association that used the host ID before the binding ended with it.
    let mut out = Vec::new();
    assert!(matches!(
        early.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AssociationEnded { .. })
    ));
    // A reload that takes the host's keys away ends the binding.
    target.subsystem(SUBNQN).unwrap().set_auth(auth(false, None));
    Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, other_id, 0).ok();
}

/// A learned binding lasts while the host has a live controller or its host ID is a registrant: a machine that
/// changed its host NQN but kept its host ID connects once neither holds.
#[test]
fn a_learned_host_id_binding_lasts_while_the_host_is_connected_or_registered() {
    use nvmf_common::nvme::reservation::{Cptpl, RegisterAction, ReservationKeys};
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let (mut admin, _) = Host::authenticated_admin(&target, &mut engine);
    let ns = Arc::clone(target.subsystem(SUBNQN).unwrap().namespaces().get(1).unwrap());
    let keys = ReservationKeys { crkey: 0, second: 7 };
    ns.reservations().register(&HOSTID, RegisterAction::Register, false, Cptpl::NoChange, keys).unwrap();
    admin.queue.disconnect(&mut engine);
    let done = Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, HOSTID, 0);
    assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr(), "a registrant's host ID stays bound");
    let keys = ReservationKeys { crkey: 7, second: 0 };
    ns.reservations().register(&HOSTID, RegisterAction::Unregister, false, Cptpl::NoChange, keys).unwrap();
    Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, HOSTID, 0).ok();
}

#[test]
fn a_configured_host_id_is_the_only_one_the_host_may_use() {
    let configured = [0x17; 16];
    let mut host_keys = keys(1, None);
    Arc::get_mut(&mut host_keys).unwrap().hostid = Some(configured);
    let target = target_with(target_params(), auth(false, Some(host_keys)));
    let mut engine = engine();
    let refused = |done: Done| assert_eq!(done.status(), Status::CONNECT_INVALID_HOST.with_dnr());
    refused(Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, HOSTID, 0));
    refused(Host::new(&target).connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, OTHER_HOST, configured, 0));
    let mut admin = Host::new(&target);
    admin.connect_with(&mut engine, 0, 31, CNTLID_DYNAMIC, SUBNQN, HOSTNQN, configured, 0).ok();
}

/// A Negotiate submitted by hand: the step the queue answers its command with.
fn negotiate_step(host: &mut Host, engine: &mut IoEngine, negotiate: &[u8]) -> Step {
    let len = u32::try_from(negotiate.len()).unwrap();
    let sqe = with_sgl(AuthenticationCommand::send(len).to_sqe(), in_capsule(len));
    engine.clock_mut().start_turn(Instant::now());
    host.queue.command(engine, &sqe, negotiate).unwrap()
}

fn linux_negotiate(t_id: u16) -> Vec<u8> {
    let creds = HostCredentials { secret: &secret(1), controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    HostTransaction::new(creds, t_id).negotiate()
}

/// DH work (ffdhe2048 here) runs on the target's pool: the Send's command waits like a storage op and completes
/// through the engine's completions; steps without DH (the NULL group, Success2) stay on the calling thread.
#[test]
fn dh_steps_run_on_the_target_pool_and_complete_through_the_engine() {
    let target = target_with(target_params(), auth(false, Some(keys(1, Some(2)))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    assert_eq!(negotiate_step(&mut admin, &mut engine, &linux_negotiate(1)), Step::Pending, "at the pool");
    assert_eq!((admin.queue.in_flight(), engine.in_flight()), (1, 1));
    // Another authentication command meanwhile finds no transaction to work on.
    assert_eq!(admin.auth_receive(&mut engine, 4096).status(), Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    let done = admin.drive(&mut engine, Step::Pending, &[]).unwrap().ok();
    assert!(done.data.is_empty());
    let challenge = admin.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!((challenge[1], challenge[9]), (auth_id::CHALLENGE, DhGroup::Ffdhe2048.id()), "{:?}", &challenge[..16]);
    assert_eq!(target.auth_pool().counters().ran(), 1, "the key pair");
    // A whole transaction, both ways: the key pair and the shared secret at the pool, nothing else.
    admin.authenticate(&mut engine, &secret(1), Some(&secret(2)), Carry::Fetched).unwrap();
    assert_eq!(target.auth_pool().counters().ran(), 3);
    assert_eq!(
        target.auth_counters().snapshot(),
        vec![(true, Some(HashFunction::Sha256), Some(DhGroup::Ffdhe2048), 1)]
    );
    // The NULL group has no DH: its steps never leave the queue's thread.
    let null_only = Arc::new(HostKeys { dh_groups: vec![DhGroup::Null], ..(*keys(1, None)).clone() });
    let target = target_with(target_params(), auth(false, Some(null_only)));
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    assert!(matches!(negotiate_step(&mut admin, &mut engine, &linux_negotiate(2)), Step::Respond { .. }));
    admin.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    assert_eq!(target.auth_pool().counters().ran(), 0);
}

/// Holds a pool thread until the test says.
struct Gate(std::sync::mpsc::Receiver<()>);

fn wait_at_gate(payload: &mut (dyn std::any::Any + Send)) {
    if let Some(Gate(gate)) = payload.downcast_mut::<Gate>() {
        let _ = gate.recv();
    }
}

/// A full pool queue parks the Send as a full ring would: retried at the queue's poll, counted.
#[test]
fn a_full_auth_pool_parks_the_step_until_there_is_room() {
    let params = TargetParams { auth_threads: 1, auth_queue_depth: 1, ..target_params() };
    let target = target_with(params, auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    // The thread held, then its queue filled (once the thread took the first op).
    let (open, gate) = std::sync::mpsc::channel();
    let pool = target.auth_pool();
    engine.offload(pool, u64::MAX, Box::new(Gate(gate)), wait_at_gate).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.offload(pool, u64::MAX - 1, Box::new(()), wait_at_gate).is_err() {
        assert!(Instant::now() < deadline, "the pool thread never took its first op");
    }
    let full = pool.counters().queue_full();
    assert_eq!(negotiate_step(&mut admin, &mut engine, &linux_negotiate(1)), Step::Pending, "parked");
    assert_eq!(pool.counters().queue_full(), full + 1);
    assert_eq!(admin.queue.in_flight(), 0, "nothing at the pool");
    assert!(admin.queue.wants_poll());
    let mut out = Vec::new();
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert!(out.is_empty(), "still full");
    open.send(()).unwrap();
    let mut ours = 0;
    while ours < 2 {
        engine.reap(|c| ours += usize::from(c.tag >= u64::MAX - 1));
        assert!(Instant::now() < deadline, "the pool never finished");
    }
    admin.queue.poll(&mut engine, Instant::now(), &mut out).unwrap();
    assert_eq!((out.len(), admin.queue.in_flight()), (0, 1), "at the pool now");
    admin.drive(&mut engine, Step::Pending, &[]).unwrap().ok();
    let challenge = admin.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!(challenge[1], auth_id::CHALLENGE);
}

/// AUTH_Negotiates beyond `auth_attempts_per_second` from one address prefix fail their transaction with
/// AUTH_Failure1 (counted), without DH work; another prefix has its own rate.
#[test]
fn authentication_attempts_over_the_rate_of_an_address_fail() {
    let params = TargetParams { auth_attempts_per_second: 2, ..target_params() };
    let target = target_with(params, auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let from = |target: &Arc<Target>, address: &str| {
        let key = u64::try_from(NEXT_KEY.fetch_add(1, Ordering::Relaxed)).unwrap();
        let peer = Some(std::net::SocketAddr::new(address.parse().unwrap(), 40000));
        let mut host = Host::on(target, TransportInfo { peer_address: peer, ..TransportInfo::tcp(1, IN_CAPSULE, key) });
        // One instant for the whole test: no refill.
        host.real_clock = false;
        host
    };
    engine.clock_mut().start_turn(Instant::now());
    let mut first = from(&target, "192.0.2.1");
    first.connect_admin(&mut engine);
    first.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    first.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
    let ran = target.auth_pool().counters().ran();
    let mut second = from(&target, "192.0.2.1");
    second.connect_admin(&mut engine);
    let refused = Err(AuthError::Refused(nvmf_common::fabrics::auth::FailureReason::Failed));
    assert_eq!(second.authenticate(&mut engine, &secret(1), None, Carry::InCapsule), refused, "AUTH_Failure1");
    assert_eq!(target.auth_attempts().refused(), 1);
    assert_eq!(target.auth_pool().counters().ran(), ran, "no DH work for a refused attempt");
    let mut out = Vec::new();
    assert_eq!(
        second.queue.poll(&mut engine, Instant::now(), &mut out),
        Err(QueueError::AuthenticationFailed { qid: 0 })
    );
    let failures: u64 = target.auth_counters().snapshot().iter().filter(|c| !c.0).map(|c| c.3).sum();
    assert_eq!(failures, 1);
    let mut other = from(&target, "198.51.100.7");
    other.connect_admin(&mut engine);
    other.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
}

/// A host whose keys name no DH group gets the target's (`[target] dhchap_dhgroups`), by default without ffdhe6144
/// and ffdhe8192; its own list, when it has one, wins.
#[test]
fn dh_groups_default_to_the_targets() {
    use nvmf_common::fabrics::auth::message::{Negotiate, ProtocolDescriptor};
    let no_groups = || Arc::new(HostKeys { dh_groups: Vec::new(), ..(*keys(1, None)).clone() });
    let mut engine = engine();
    let target = target_with(target_params(), auth(false, Some(no_groups())));
    let mut admin = Host::new(&target);
    admin.connect_admin(&mut engine);
    let big = ProtocolDescriptor {
        hashes: vec![HashFunction::Sha256],
        dh_groups: vec![DhGroup::Ffdhe6144, DhGroup::Ffdhe8192],
    };
    let negotiate = Negotiate { t_id: 4, sc_c: 0, dhchap: big }.to_bytes();
    admin.auth_send(&mut engine, &negotiate, Carry::InCapsule).ok();
    let failure1 = admin.auth_receive(&mut engine, 4096).ok().data;
    assert_eq!((failure1[1], failure1[7]), (auth_id::FAILURE1, 0x05), "DH group unusable");
    for (own, expected) in [(None, DhGroup::Ffdhe3072), (Some(vec![DhGroup::Ffdhe2048]), DhGroup::Ffdhe2048)] {
        let params = TargetParams { dhchap_dhgroups: vec![DhGroup::Ffdhe3072], ..target_params() };
        let keys = Arc::new(HostKeys { dh_groups: own.unwrap_or_default(), ..(*keys(1, None)).clone() });
        let target = target_with(params, auth(false, Some(keys)));
        let mut admin = Host::new(&target);
        admin.connect_admin(&mut engine);
        admin.authenticate(&mut engine, &secret(1), None, Carry::InCapsule).unwrap();
        assert_eq!(target.auth_counters().snapshot(), vec![(true, Some(HashFunction::Sha256), Some(expected), 1)]);
    }
}

/// One transaction asking for secure channel concatenation `sc_c`; the host's generated PSK, or its error.
fn concatenate(admin: &mut Host, engine: &mut IoEngine, sc_c: u8) -> Result<Vec<u8>, AuthError> {
    let host = secret(1);
    let creds = HostCredentials { secret: &host, controller_secret: None, hostnqn: HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 9).with_secure_channel(sc_c);
    let seq = SequenceNumbers::new();
    admin.auth_send(engine, &t.negotiate(), Carry::InCapsule).ok();
    let reply = t.reply(&admin.auth_receive(engine, 4096).ok().data, &seq, &mut OsRandom)?;
    admin.auth_send(engine, &reply, Carry::InCapsule).ok();
    assert_eq!(t.success(&admin.auth_receive(engine, 4096).ok().data)?, None);
    Ok(t.generated_psk().unwrap().1.to_vec())
}

#[test]
fn secure_channel_concatenation_keeps_the_generated_psk_for_the_tls_gate() {
    use nvmf_common::fabrics::auth::secure_channel::NEW_TLS_PSK;
    use nvmf_common::fabrics::discovery::{TcpSecurityType, Tsas};
    use nvmf_common::fabrics::tls::{derive_generated_tls_psk, PskHash};
    // The host's listener (port 1) offers TLS: a plaintext admin queue may ask for a PSK.
    let tls = ListenerParams { tsas: Tsas::Tcp { sectype: TcpSecurityType::Tls13 }, ..listener() };
    let target =
        target_with(TargetParams { listeners: vec![tls], ..target_params() }, auth(false, Some(keys(1, None))));
    let mut engine = engine();
    let mut admin = Host::new(&target);
    assert!(admin.connect_admin(&mut engine).atr);
    let psk = concatenate(&mut admin, &mut engine, NEW_TLS_PSK).unwrap();
    // The plaintext association stays usable, as nvmet's (the Linux host enables it before starting over).
    admin.enable(&mut engine);
    let derived = derive_generated_tls_psk(PskHash::Sha256, &psk, HOSTNQN, SUBNQN).unwrap();
    let now = std::time::Instant::now();
    let found = target.generated_psks().lookup(derived.identity.as_bytes(), now).expect("kept for the TLS gate");
    assert_eq!(found.key, derived.key);
    assert_eq!(target.generated_psks().counts(), (1, 1));

    // An admin queue on a listener without TLS may not ask (reason 03h; the association ends).
    let target = target_with(target_params(), auth(false, Some(keys(1, None))));
    let mut admin = Host::new(&target);
    assert!(admin.connect_admin(&mut engine).atr);
    let refused = concatenate(&mut admin, &mut engine, NEW_TLS_PSK).unwrap_err();
    assert_eq!(refused, AuthError::Refused(nvmf_common::fabrics::auth::FailureReason::ConcatenationMismatch));
    assert!(target.generated_psks().is_empty());
}

#[test]
fn a_connection_secured_with_a_generated_psk_is_not_asked_to_authenticate() {
    let target = target_with(target_params(), auth(true, Some(keys(1, None))));
    let mut engine = engine();
    let channel = |generated| {
        let mut info = TransportInfo::tcp(1, IN_CAPSULE, 4242);
        info.secure_channel = Some(Arc::new(crate::controller::SecureChannel {
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
            suite: "TLS_AES_128_GCM_SHA256",
            generated,
        }));
        info
    };
    let mut generated = Host::on(&target, channel(true));
    let r = generated.connect_admin(&mut engine);
    assert!(!r.atr, "the host authenticated to make the PSK");
    generated.enable(&mut engine);
    // A configured PSK does not stand for DH-HMAC-CHAP.
    let mut configured = Host::on(&target, channel(false));
    assert!(configured.connect_admin(&mut engine).atr);
}
