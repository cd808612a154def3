//! The response values of DH-HMAC-CHAP (NVMe Base 2.0 §8.13.5.4-5), computed as the Linux host
//! (`nvme_auth_dhchap_setup_host_response`, `…_ctrl_response`) and nvmet (`nvmet_auth_host_hash`,
//! `nvmet_auth_ctrl_hash`) compute them, for either side to send or check:
//!
//! - the host's: HMAC(Kh, C1' || S1 || TID || SC_C || "HostHost" || NQNh || 00h || NQNc), SC_C the transaction's
//!   AUTH_Negotiate asked for (00h unless secure channel concatenation: Linux's host and nvmet since their fix
//!   "nvme-auth: update sc_c in host response"; before it, Linux wrote 00h there whatever SC_C was);
//! - the controller's: HMAC(Kc, C2' || S2 || TID || 00h || "Controller" || NQNc || 00h || NQNh);
//!
//! with the negotiated hash, Kh/Kc the host/controller secret transformed with NQNh/NQNc
//! ([`super::secret::DhchapSecret::transform`]), S and TID little-endian (4 and 2 bytes), and C' the challenge
//! itself for the NULL group, else the augmented challenge HMAC(H(session key), C).

use zeroize::Zeroizing;

use super::hash::HashFunction;

/// Whose response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Responder {
    /// The host's response to C1 (keyed with the host secret).
    Host,
    /// The controller's response to C2 (keyed with the controller secret).
    Controller,
}

/// What a response covers besides the key: the transaction's hash function, the challenge (augmented when a DH
/// group is used), its sequence number, the transaction identifier and both NQNs.
#[derive(Debug, Clone, Copy)]
pub struct Transcript<'a> {
    /// The hash function the controller chose.
    pub hash: HashFunction,
    /// C1 (host's response) or C2 (controller's), already augmented for a DH group ([`augmented_challenge`]).
    pub challenge: &'a [u8],
    /// S1 or S2.
    pub seqnum: u32,
    /// The transaction identifier.
    pub t_id: u16,
    /// NQNh.
    pub hostnqn: &'a str,
    /// NQNc.
    pub subnqn: &'a str,
    /// AUTH_Negotiate's SC_C, in the host's response (the controller's has 00h there, as Linux computes it).
    pub sc_c: u8,
}

impl Transcript<'_> {
    /// The response of `who`, keyed with that side's transformed secret.
    pub fn response(&self, who: Responder, key: &[u8]) -> Zeroizing<Vec<u8>> {
        let (s, t) = (self.seqnum.to_le_bytes(), self.t_id.to_le_bytes());
        self.hash.hmac(key, &self.parts(who, &s, &t))
    }

    /// Whether `received` is the response of `who` (compared in constant time).
    pub fn verify(&self, who: Responder, key: &[u8], received: &[u8]) -> bool {
        let (s, t) = (self.seqnum.to_le_bytes(), self.t_id.to_le_bytes());
        self.hash.verify_hmac(key, &self.parts(who, &s, &t), received)
    }

    fn parts<'p>(&'p self, who: Responder, seqnum: &'p [u8; 4], t_id: &'p [u8; 2]) -> [&'p [u8]; 8] {
        let (label, first, second, sc_c): (&[u8], &str, &str, &[u8]) = match who {
            Responder::Host => (b"HostHost", self.hostnqn, self.subnqn, std::slice::from_ref(&self.sc_c)),
            Responder::Controller => (b"Controller", self.subnqn, self.hostnqn, &[0]),
        };
        [self.challenge, seqnum, t_id, sc_c, label, first.as_bytes(), &[0], second.as_bytes()]
    }
}

/// The augmented challenge of a DH exchange: HMAC(H(session key), challenge), the hash function's length.
pub fn augmented_challenge(hash: HashFunction, session_key: &[u8], challenge: &[u8]) -> Zeroizing<Vec<u8>> {
    let hashed = hash.hash(session_key);
    hash.hmac(&hashed, &[challenge])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:host";
    const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:auth";

    // Independently, in Python (hmac, hashlib), with key bytes 0..32, challenge bytes 0x40..0x60, seqnum
    // 0x01020304, t_id 0x0506:
    //   m = c + seq.to_bytes(4,'little') + tid.to_bytes(2,'little') + b'\0'
    //   hmac.new(key, m + b'HostHost' + h + b'\0' + s, 'sha256').hexdigest()
    //   hmac.new(key, m + b'Controller' + s + b'\0' + h, 'sha256').hexdigest()
    //   hmac.new(hashlib.sha256(bytes(range(200))).digest(), c, 'sha256').hexdigest()
    const HOST_SHA256: &str = "08152aee01e097ebfc13ea81ca66be2df59e8ded269419607306b9f400fc6218";
    const CTRL_SHA256: &str = "1a268560057a15dcc25a4b1c20b5259bf178110b492efd7bdd847bfc6d9a5bfc";
    const AUGMENTED_SHA256: &str = "d0479dc5e9be98d7e770c66ddd0c505e638db6c9cad7795461bf7257a99f400e";

    #[test]
    fn responses_match_an_independent_computation() {
        let key: Vec<u8> = (0..32).collect();
        let challenge: Vec<u8> = (0x40..0x60).collect();
        let t = Transcript {
            hash: HashFunction::Sha256,
            challenge: &challenge,
            seqnum: 0x0102_0304,
            t_id: 0x0506,
            hostnqn: HOSTNQN,
            subnqn: SUBNQN,
            sc_c: 0,
        };
        let host = t.response(Responder::Host, &key);
        assert_eq!(hex(&host), HOST_SHA256);
        assert!(t.verify(Responder::Host, &key, &host));
        assert!(!t.verify(Responder::Controller, &key, &host), "the two responses differ");
        assert_eq!(hex(&t.response(Responder::Controller, &key)), CTRL_SHA256);
        let session: Vec<u8> = (0..200).collect();
        assert_eq!(hex(&augmented_challenge(HashFunction::Sha256, &session, &challenge)), AUGMENTED_SHA256);
    }

    #[test]
    fn every_input_matters() {
        let key = [7u8; 48];
        let c = [9u8; 48];
        let base = Transcript {
            hash: HashFunction::Sha384,
            challenge: &c,
            seqnum: 1,
            t_id: 1,
            hostnqn: "h",
            subnqn: "s",
            sc_c: 0,
        };
        let r = base.response(Responder::Host, &key);
        assert_eq!(r.len(), 48);
        let c2 = [8u8; 48];
        for other in [
            Transcript { seqnum: 2, ..base },
            Transcript { t_id: 2, ..base },
            Transcript { hostnqn: "h2", ..base },
            Transcript { subnqn: "s2", ..base },
            Transcript { challenge: &c2, ..base },
            // Secure channel concatenation's SC_C is in the host's response (not in the controller's).
            Transcript { sc_c: 2, ..base },
        ] {
            assert!(!other.verify(Responder::Host, &key, &r));
        }
        let controller = base.response(Responder::Controller, &key);
        assert!(Transcript { sc_c: 3, ..base }.verify(Responder::Controller, &key, &controller));
        assert!(!base.verify(Responder::Host, &[6u8; 48], &r));
    }
}
