//! The two ends of an NVMe/TCP TLS handshake: before the ICReq, on the connection's own socket (blocking, its
//! timeouts bounding every wait), then the records moved into the kernel.

use std::os::fd::{AsFd, AsRawFd};

use super::openssl::{handshake, Outcome, Role};
use super::{ktls, CipherSuite, HandshakePsk, TlsError};

/// A connection whose records the kernel now encrypts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secured {
    /// The PSK identity the handshake used (what binds the connection to a host and a subsystem).
    pub identity: Vec<u8>,
    /// The negotiated suite.
    pub suite: CipherSuite,
}

/// The host's side: offer `psk` and, once the handshake completes, move the records into the kernel.
pub fn client_handshake(socket: &impl AsFd, psk: &HandshakePsk) -> Result<Secured, TlsError> {
    check_length(psk)?;
    let fd = socket.as_fd().as_raw_fd();
    let outcome = handshake(fd, Role::Client(psk))?;
    secure(fd, outcome, true)
}

/// The controller's side: `lookup` gives the PSK of the identity the host offers (`None`: unknown, the handshake
/// fails); once it completes, the records move into the kernel.
pub fn server_handshake(
    socket: &impl AsFd,
    lookup: &mut dyn FnMut(&[u8]) -> Option<HandshakePsk>,
) -> Result<Secured, TlsError> {
    let fd = socket.as_fd().as_raw_fd();
    let outcome = handshake(fd, Role::Server(lookup))?;
    secure(fd, outcome, false)
}

fn check_length(psk: &HandshakePsk) -> Result<(), TlsError> {
    if psk.key.len() == psk.suite.hash_len() {
        Ok(())
    } else {
        Err(TlsError::KeyLength { suite: psk.suite.name(), expected: psk.suite.hash_len(), got: psk.key.len() })
    }
}

fn secure(fd: std::os::fd::RawFd, outcome: Outcome, client: bool) -> Result<Secured, TlsError> {
    let (tx, rx) = if client {
        (&outcome.client_secret, &outcome.server_secret)
    } else {
        (&outcome.server_secret, &outcome.client_secret)
    };
    ktls::install(fd, outcome.suite, tx, rx)?;
    Ok(Secured { identity: outcome.identity, suite: outcome.suite })
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

    #[test]
    fn a_key_of_the_wrong_length_is_refused_before_any_byte() {
        let (client, _server) = pair();
        let mut short = psk("NVMe0R01 h s", 1, CipherSuite::Aes256GcmSha384);
        short.key.truncate(32);
        let err = client_handshake(&client, &short).unwrap_err();
        assert_eq!(err.to_string(), "a TLS_AES_256_GCM_SHA384 PSK must be 48 bytes, not 32");
    }
}
