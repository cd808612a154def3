//! DH-HMAC-CHAP against hostile peers over NVMe/TCP on 127.0.0.1: a peer that knows a keyed host's NQN, host ID
//! and CNTLID (CNTLIDs are sequential; the host ID is often the UUID in the NQN) but not its key. Its I/O queue
//! Connect holds no QID, its failed authentication ends only its own connection, and it is charged to the
//! anonymous buffer share meanwhile; the real host's association and I/O carry on. On epoll and on io_uring sockets.

mod target_support;

use std::net::SocketAddr;
use std::time::Duration;

use nvmf_common::fabrics::auth::host::{HostCredentials, HostTransaction};
use nvmf_common::fabrics::auth::message::auth_id;
use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::auth::{AuthError, OsRandom, SequenceNumbers};
use nvmf_common::fabrics::connect::ConnectResponse;
use nvmf_common::nvme::admin::KeepAlive;
use nvmf_common::nvme::Status;
use nvmf_tests::nvme_tcp_client::{TcpTestClient, TEST_HOSTNQN};

use target_support::{
    assert_status, connect_admin, enable, expect_closed, memory_config, ok, options, pattern, read, write,
    SocketIoMode, Target, SUBNQN,
};

target_support::on_each_socket_path!(an_impostor_io_queue_holds_no_qid_and_ends_only_itself);

const HOST_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
/// Another valid key (48 bytes, SHA-384): not the host's.
const WRONG_KEY: &str = "DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";

fn target(io: SocketIoMode) -> Target {
    let host = format!("[[subsystem.host]]\nnqn = \"{TEST_HOSTNQN}\"\ndhchap_key = \"{HOST_KEY}\"");
    Target::start_on(&memory_config(&host), io)
}

fn auth_send(q: &mut TcpTestClient, message: &[u8]) {
    ok(q.authentication_send(message));
}

fn auth_receive(q: &mut TcpTestClient) -> Vec<u8> {
    ok(q.authentication_receive()).data
}

/// One DH-HMAC-CHAP transaction as the Linux host runs it, with `key`.
fn authenticate(q: &mut TcpTestClient, key: &DhchapSecret) -> Result<(), AuthError> {
    let creds = HostCredentials { secret: key, controller_secret: None, hostnqn: TEST_HOSTNQN, subnqn: SUBNQN };
    let mut t = HostTransaction::new(creds, 1);
    auth_send(q, &t.negotiate());
    let challenge = auth_receive(q);
    let reply = t.reply(&challenge, &SequenceNumbers::new(), &mut OsRandom)?;
    auth_send(q, &reply);
    t.success(&auth_receive(q)).map(|_| ())
}

/// Connect I/O queue `qid` of `cntlid` (answered with ATR), not yet authenticated.
fn connect_io(addr: SocketAddr, cntlid: u16, qid: u16) -> TcpTestClient {
    let mut q = TcpTestClient::connect(addr, options()).expect("TCP + ICReq");
    let c = ok(q.fabrics_connect(SUBNQN, qid, 31, cntlid, 0));
    assert!(ConnectResponse::from_dw0(c.cqe.dw0).atr, "ATR: the queue must authenticate");
    q
}

fn an_impostor_io_queue_holds_no_qid_and_ends_only_itself(io: SocketIoMode) {
    let t = target(io);
    let addr = t.addr;
    let key: DhchapSecret = HOST_KEY.parse().unwrap();
    let (mut admin, cntlid) = connect_admin(addr, SUBNQN, options(), 0);
    authenticate(&mut admin, &key).expect("the host authenticates its admin queue");
    enable(&mut admin);

    // The impostor takes QID 1 first and stalls; the real host's QID 1 connects and authenticates all the same.
    let mut impostor = connect_io(addr, cntlid, 1);
    let mut io = connect_io(addr, cntlid, 1);
    authenticate(&mut io, &key).expect("the host authenticates its I/O queue");
    let data = pattern(4096, 9);
    assert_status(&write(&mut io, 1, 512, 64, &data, false), Status::SUCCESS);

    // The impostor's failure (a Receive before any AUTH_Negotiate: AUTH_Failure1) ends its own connection only.
    let failure1 = auth_receive(&mut impostor);
    assert_eq!(failure1[1], auth_id::FAILURE1);
    expect_closed(&mut impostor, Duration::from_secs(5));
    assert_eq!(read(&mut io, 1, 512, 64, data.len()).data, data, "the host's I/O queue serves on");
    ok(admin.command(KeepAlive.to_sqe(), None, 0));

    // A wrong key on a free QID: the same, and the QID is free again for the host.
    let mut wrong = connect_io(addr, cntlid, 2);
    let e = authenticate(&mut wrong, &WRONG_KEY.parse().unwrap());
    assert!(e.is_err(), "a wrong key is refused");
    expect_closed(&mut wrong, Duration::from_secs(5));
    let mut second = connect_io(addr, cntlid, 2);
    authenticate(&mut second, &key).expect("QID 2 connects after the failed queue");
    assert_status(&write(&mut second, 1, 512, 72, &data, false), Status::SUCCESS);
    assert_status(&read(&mut io, 1, 512, 72, data.len()), Status::SUCCESS);
    ok(admin.command(KeepAlive.to_sqe(), None, 0));
    t.shutdown();
}
