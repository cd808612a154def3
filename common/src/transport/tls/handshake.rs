//! The two ends of an NVMe/TCP TLS handshake: before the ICReq, on the connection's own socket (blocking, its
//! timeouts bounding every wait), then the records moved into the kernel.

use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::openssl::{handshake, Outcome, Role, Session};
use super::{ktls, CipherSuite, HandshakePsk, TlsError};

/// A secured connection.
#[derive(Debug)]
pub struct Secured {
    /// The PSK identity the handshake used (what binds the connection to a host and a subsystem).
    pub identity: Vec<u8>,
    /// The negotiated suite.
    pub suite: CipherSuite,
    /// Where its records are encrypted.
    pub records: RecordLayer,
}

/// Where a secured connection's records are encrypted and decrypted.
#[derive(Debug)]
pub enum RecordLayer {
    /// In the kernel (kTLS): the connection's own socket now reads and writes plaintext.
    Kernel,
    /// In user space, because this kernel has no kTLS: a relay thread owns the TLS socket and exchanges plaintext
    /// with this loopback connection, which the caller uses instead of its socket (a thread hop per transfer: the
    /// slow path; `modprobe tls` gives the kernel's).
    UserSpace(std::net::TcpStream),
}

/// The host's side: offer `psk` and, once the handshake completes, move the records into the kernel.
pub fn client_handshake(socket: &impl AsFd, psk: &HandshakePsk) -> Result<Secured, TlsError> {
    check_length(psk)?;
    let outcome = handshake(socket.as_fd().as_raw_fd(), Role::Client(psk))?;
    secure(socket.as_fd(), outcome, true)
}

/// The controller's side: `lookup` gives the PSK of the identity the host offers (`None`: unknown, the handshake
/// fails); once it completes, the records move into the kernel.
pub fn server_handshake(
    socket: &impl AsFd,
    lookup: &mut dyn FnMut(&[u8]) -> Option<HandshakePsk>,
) -> Result<Secured, TlsError> {
    let outcome = handshake(socket.as_fd().as_raw_fd(), Role::Server(lookup))?;
    secure(socket.as_fd(), outcome, false)
}

fn check_length(psk: &HandshakePsk) -> Result<(), TlsError> {
    match psk.key.len() {
        32 | 48 => Ok(()),
        other => Err(TlsError::KeyLength(other)),
    }
}

fn secure(socket: BorrowedFd<'_>, outcome: Outcome, client: bool) -> Result<Secured, TlsError> {
    let (tx, rx) = if client {
        (&outcome.client_secret, &outcome.server_secret)
    } else {
        (&outcome.server_secret, &outcome.client_secret)
    };
    let records = match ktls::install(socket.as_raw_fd(), outcome.suite, tx, rx) {
        Ok(()) => RecordLayer::Kernel,
        Err(TlsError::NoKtls) => RecordLayer::UserSpace(relay(socket, outcome.session)?),
        Err(e) => return Err(e),
    };
    Ok(Secured { identity: outcome.identity, suite: outcome.suite, records })
}

/// Start a relay thread carrying `session`'s records between `socket` (a duplicate of it, which the thread owns)
/// and one end of a new loopback connection; the other end, for the caller.
fn relay(socket: BorrowedFd<'_>, session: Session) -> Result<TcpStream, TlsError> {
    let failed = |e: std::io::Error| TlsError::Handshake(format!("user-space records: {e}"));
    let tls = TcpStream::from(socket.try_clone_to_owned().map_err(failed)?);
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).map_err(failed)?;
    let caller = TcpStream::connect(listener.local_addr().map_err(failed)?).map_err(failed)?;
    let (relay_end, _) = listener.accept().map_err(failed)?;
    let _ = caller.set_nodelay(true);
    let _ = relay_end.set_nodelay(true);
    std::thread::Builder::new()
        .name("nvmf-tls-relay".into())
        .spawn(move || session.relay(&tls, &relay_end))
        .map_err(failed)?;
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use zeroize::Zeroizing;

    use super::*;

    fn psk(identity: &str, byte: u8, suite: CipherSuite) -> HandshakePsk {
        HandshakePsk {
            identity: identity.as_bytes().to_vec(),
            key: Zeroizing::new(vec![byte; suite.hash_len()]),
            suite,
        }
    }

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        (client, server)
    }

    /// Both ends of one handshake without kTLS (which this test's machine may lack): the outcomes.
    fn run(offer: HandshakePsk, held: Vec<HandshakePsk>) -> (Result<Outcome, TlsError>, Result<Outcome, TlsError>) {
        let (client, server) = pair();
        let server_side = std::thread::spawn(move || {
            let mut lookup = |id: &[u8]| held.iter().find(|p| p.identity == id).map(psk_copy);
            let outcome = handshake(server.as_raw_fd(), Role::Server(&mut lookup));
            drop(server);
            outcome
        });
        let client_outcome = handshake(client.as_raw_fd(), Role::Client(&offer));
        drop(client);
        (client_outcome, server_side.join().unwrap())
    }

    fn psk_copy(p: &HandshakePsk) -> HandshakePsk {
        HandshakePsk { identity: p.identity.clone(), key: p.key.clone(), suite: p.suite }
    }

    #[test]
    fn both_ends_agree_on_the_secrets_for_either_suite() {
        for suite in [CipherSuite::Aes128GcmSha256, CipherSuite::Aes256GcmSha384] {
            let identity = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:h nqn.2014-08.org.example:s";
            let others = psk("NVMe0R01 someone else", 9, suite);
            let (client, server) = run(psk(identity, 7, suite), vec![others, psk(identity, 7, suite)]);
            let (client, server) = (client.unwrap(), server.unwrap());
            assert_eq!((client.suite, server.suite), (suite, suite));
            assert_eq!(server.identity, identity.as_bytes());
            assert_eq!(client.client_secret, server.client_secret);
            assert_eq!(client.server_secret, server.server_secret);
            assert_ne!(client.client_secret, client.server_secret);
            assert_eq!(client.client_secret.len(), suite.hash_len());
        }
    }

    #[test]
    fn a_sha384_key_with_sha256_binders_is_taken_as_linux_sends_it() {
        // The host offers a 48-byte key as GnuTLS does (SHA-256 binder and suites); the server's lookup names the
        // NVMe/TCP suite of a SHA-384 key, and follows the binder.
        let identity = "NVMe1R02 h s digest";
        let mut offered = psk(identity, 5, CipherSuite::Aes128GcmSha256);
        offered.key = Zeroizing::new(vec![5; 48]);
        let mut held = psk(identity, 5, CipherSuite::Aes256GcmSha384);
        held.key = Zeroizing::new(vec![5; 48]);
        let (client, server) = run(offered, vec![held]);
        let (client, server) = (client.unwrap(), server.unwrap());
        assert_eq!((client.suite.hash_len(), server.suite.hash_len()), (32, 32));
        assert_eq!(client.client_secret, server.client_secret);
    }

    #[test]
    fn an_unknown_identity_is_refused_by_name() {
        let suite = CipherSuite::Aes128GcmSha256;
        let (client, server) = run(psk("NVMe0R01 stranger", 7, suite), vec![psk("NVMe0R01 friend", 7, suite)]);
        assert!(client.is_err());
        match server {
            Err(TlsError::UnknownIdentity(Some(offered))) => assert_eq!(offered, "NVMe0R01 stranger"),
            other => panic!("{:?}", other.map(|o| o.identity)),
        }
    }

    #[test]
    fn a_wrong_key_fails_the_handshake_on_both_ends() {
        let suite = CipherSuite::Aes256GcmSha384;
        let (client, server) = run(psk("NVMe0R02 h s", 1, suite), vec![psk("NVMe0R02 h s", 2, suite)]);
        assert!(client.is_err(), "client completed with a wrong key");
        assert!(server.is_err(), "server completed with a wrong key");
    }

    #[test]
    fn a_silent_peer_times_out() {
        let (client, server) = pair();
        server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut lookup = |_: &[u8]| None;
        let outcome = handshake(server.as_raw_fd(), Role::Server(&mut lookup));
        assert!(matches!(outcome, Err(TlsError::TimedOut)), "{:?}", outcome.err());
        drop(client);
    }

    /// The plaintext stream of a secured connection: its own socket (kTLS) or the relay's loopback end.
    fn plaintext(socket: TcpStream, secured: Secured) -> TcpStream {
        match secured.records {
            RecordLayer::Kernel => socket,
            RecordLayer::UserSpace(plain) => plain,
        }
    }

    #[test]
    fn records_carry_bytes_both_ways_and_a_close() {
        use std::io::{Read, Write};
        for suite in [CipherSuite::Aes128GcmSha256, CipherSuite::Aes256GcmSha384] {
            let (client, server) = pair();
            let held = psk("NVMe1R01 h s digest", 3, suite);
            let server_side = std::thread::spawn(move || {
                let mut lookup = |id: &[u8]| (id == held.identity.as_slice()).then(|| psk_copy(&held));
                let secured = server_handshake(&server, &mut lookup).unwrap();
                assert_eq!(secured.suite, suite);
                let mut plain = plaintext(server, secured);
                // Echo everything back, then close.
                let mut buf = vec![0u8; 1 << 20];
                plain.read_exact(&mut buf).unwrap();
                plain.write_all(&buf).unwrap();
            });
            let secured = client_handshake(&client, &psk("NVMe1R01 h s digest", 3, suite)).unwrap();
            let mut plain = plaintext(client, secured);
            let sent: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096).to_le_bytes()[0]).collect();
            let writer = {
                let mut w = plain.try_clone().unwrap();
                let sent = sent.clone();
                std::thread::spawn(move || w.write_all(&sent).unwrap())
            };
            let mut back = vec![0u8; sent.len()];
            plain.read_exact(&mut back).unwrap();
            writer.join().unwrap();
            assert!(back == sent, "the echo differs");
            server_side.join().unwrap();
            let mut rest = Vec::new();
            plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(plain.read_to_end(&mut rest).unwrap(), 0, "the server's close reaches the client");
        }
    }

    #[test]
    fn a_key_of_the_wrong_length_is_refused_before_any_byte() {
        let (client, _server) = pair();
        let mut short = psk("NVMe0R01 h s", 1, CipherSuite::Aes256GcmSha384);
        short.key.truncate(16);
        let err = client_handshake(&client, &short).unwrap_err();
        assert_eq!(err.to_string(), "a TLS PSK must be 32 or 48 bytes, not 16");
    }
}
