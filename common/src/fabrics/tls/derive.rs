//! The PSK derivations of NVMe TCP Transport §3.6.1 (§3.6.1.3 for the digest and the TLS PSK), as libnvme
//! computes them (`derive_retained_key`, `derive_psk_digest`, `derive_tls_key` and their `_compat` variants) and
//! the kernel for generated PSKs (`nvme_auth_generate_digest`, `nvme_auth_derive_tls_psk`):
//!
//! 1. retained PSK = HKDF-Expand-Label(HKDF-Extract(0, configured PSK), "HostNQN", NQNh, L), with the configured
//!    PSK's hash (its hash field), or the configured PSK itself for hash field `00`;
//! 2. PSK digest (version 1 identities) = Base64(HMAC(retained PSK, NQNh || " " || NQNc || " " ||
//!    "NVMe-over-Fabrics")), with the cipher suite's hash;
//! 3. TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, retained PSK), "nvme-tls-psk", context, L), with the cipher
//!    suite's hash, where the context is the whole identity for version 0 and `"<hash> <PSK digest>"` for
//!    version 1.
//!
//! L is the PSK's length, which is the hash's. HKDF-Extract and HKDF-Expand are RustCrypto's `hkdf` (a salt of
//! zeros, RFC 5869 §2.2, when none is given); only the HkdfLabel encoding of HKDF-Expand-Label is done here.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use super::identity::check_nqn;
use super::{ConfiguredPsk, PskDerivation, PskError, PskHash, PskIdentity};

/// The label of the retained PSK's derivation.
const RETAINED_LABEL: &str = "HostNQN";

/// The label of the TLS PSK's derivation.
const TLS_PSK_LABEL: &str = "nvme-tls-psk";

/// What the PSK digest's HMAC covers after the subsystem NQN.
const DIGEST_SEED: &[u8] = b" NVMe-over-Fabrics";

/// The longest context of an RFC 8446 HkdfLabel (`opaque context<0..255>`).
const RFC8446_MAX_CONTEXT: usize = 255;

/// The longest context libnvme's compat derivation writes (its 256-character buffer).
const COMPAT_MAX_CONTEXT: usize = 256;

/// The retained PSK of `configured` for host `hostnqn`, HKDF-Expand-Label as RFC 8446 defines it (libnvme's
/// `derive_retained_key`). The configured PSK itself for hash field `00`.
pub fn retained_psk(configured: &ConfiguredPsk, hostnqn: &str) -> Result<Zeroizing<Vec<u8>>, PskError> {
    retained(configured, hostnqn, PskDerivation::Rfc8446)
}

/// The retained PSK as libnvme's `--compat` derives it (`derive_retained_key_compat`, libnvme's only derivation
/// before 1.16): the HKDF info is the length (little-endian), then `tls13 HostNQN` and the host NQN without length
/// bytes.
pub fn retained_psk_compat(configured: &ConfiguredPsk, hostnqn: &str) -> Result<Zeroizing<Vec<u8>>, PskError> {
    retained(configured, hostnqn, PskDerivation::Compat)
}

fn retained(
    configured: &ConfiguredPsk,
    hostnqn: &str,
    derivation: PskDerivation,
) -> Result<Zeroizing<Vec<u8>>, PskError> {
    check_nqn("host NQN", hostnqn)?;
    let Some(hash) = configured.hmac() else {
        return Ok(Zeroizing::new(configured.key().to_vec()));
    };
    let info = expand_label_info(derivation, configured.len(), RETAINED_LABEL, hostnqn.as_bytes())
        .expect("an NQN (at most 223 bytes) fits either derivation's context");
    Ok(hkdf(hash, configured.key(), &info, configured.len()))
}

/// The PSK digest of a version 1 identity: Base64(HMAC(retained PSK, NQNh || " " || NQNc || " " ||
/// "NVMe-over-Fabrics")) with `hash`, 44 characters for SHA-256 and 64 for SHA-384.
pub fn psk_digest(hash: PskHash, retained: &[u8], hostnqn: &str, subnqn: &str) -> String {
    let mac = hash.function().hmac(retained, &[hostnqn.as_bytes(), b" ", subnqn.as_bytes(), DIGEST_SEED]);
    STANDARD.encode(&*mac)
}

/// The generated PSK of secure channel concatenation (NVMe Base 2.1 §8.3.5.5.9, the kernel's
/// `nvme_auth_generate_psk`): HMAC(KS, C1 || C2) with the transaction's hash, where KS is the DH-HMAC-CHAP
/// session key as Linux keys it (the shared secret g^xy mod p, big-endian as long as the group's prime, not
/// hashed) and C1, C2 the two challenges as sent (not augmented).
pub fn generated_psk(hash: PskHash, session_key: &[u8], c1: &[u8], c2: &[u8]) -> Zeroizing<Vec<u8>> {
    hash.function().hmac(session_key, &[c1, c2])
}

/// The TLS PSK for `identity` from its `retained` PSK, HKDF-Expand-Label as RFC 8446 defines it (libnvme's
/// `derive_tls_key`, the kernel's `nvme_auth_derive_tls_psk`).
pub fn tls_psk(retained: &[u8], identity: &PskIdentity) -> Result<Zeroizing<Vec<u8>>, PskError> {
    tls(retained, identity, PskDerivation::Rfc8446)
}

/// The TLS PSK as libnvme's `--compat` derives it (`derive_tls_key_compat`): the HKDF info is the length
/// (little-endian), then `tls13 nvme-tls-psk` and the context without length bytes.
pub fn tls_psk_compat(retained: &[u8], identity: &PskIdentity) -> Result<Zeroizing<Vec<u8>>, PskError> {
    tls(retained, identity, PskDerivation::Compat)
}

fn tls(retained: &[u8], identity: &PskIdentity, derivation: PskDerivation) -> Result<Zeroizing<Vec<u8>>, PskError> {
    let hash = identity.hash();
    if retained.len() != hash.digest_len() {
        return Err(PskError::RetainedLength { hash, len: retained.len() });
    }
    let context = identity.derivation_context();
    let info = expand_label_info(derivation, retained.len(), TLS_PSK_LABEL, context.as_bytes()).ok_or(
        PskError::ContextTooLong {
            len: context.len(),
            max: match derivation {
                PskDerivation::Rfc8446 => RFC8446_MAX_CONTEXT,
                PskDerivation::Compat => COMPAT_MAX_CONTEXT,
            },
        },
    )?;
    Ok(hkdf(hash, retained, &info, retained.len()))
}

/// The `info` of HKDF-Expand-Label(secret, `label`, `context`, `len`): RFC 8446 §7.1's HkdfLabel, or libnvme's
/// compat encoding of it. `None` when the context is longer than the encoding takes.
pub(crate) fn expand_label_info(derivation: PskDerivation, len: usize, label: &str, context: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(len).ok()?;
    let mut info = Vec::with_capacity(2 + 1 + 6 + label.len() + 1 + context.len());
    match derivation {
        PskDerivation::Rfc8446 => {
            // struct { uint16 length; opaque label<7..255> = "tls13 " + label; opaque context<0..255>; }
            let context_len = u8::try_from(context.len()).ok()?;
            info.extend_from_slice(&len.to_be_bytes());
            info.push(u8::try_from(b"tls13 ".len() + label.len()).ok()?);
            info.extend_from_slice(b"tls13 ");
            info.extend_from_slice(label.as_bytes());
            info.push(context_len);
        }
        PskDerivation::Compat => {
            if context.len() > COMPAT_MAX_CONTEXT {
                return None;
            }
            info.extend_from_slice(&len.to_le_bytes());
            info.extend_from_slice(b"tls13 ");
            info.extend_from_slice(label.as_bytes());
        }
    }
    info.extend_from_slice(context);
    Some(info)
}

/// HKDF-Expand(HKDF-Extract(0, `ikm`), `info`, `len`) with `hash`.
fn hkdf(hash: PskHash, ikm: &[u8], info: &[u8], len: usize) -> Zeroizing<Vec<u8>> {
    let mut okm = Zeroizing::new(vec![0u8; len]);
    let expanded = match hash {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm).expand(info, &mut okm),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand(info, &mut okm),
    };
    // HKDF-Expand refuses only more than 255 hash lengths; a PSK is one.
    expanded.expect("HKDF-Expand of one hash length");
    okm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::tls::{derive_tls_psk, IdentityVersion, PskType};

    const HOST: &str = "nqn.psk-test-host";
    const SUB: &str = "nqn.psk-test-subsys";
    // libnvme test/psk.c's configured PSK (its 48-byte one repeats the last 16 bytes), in the interchange format.
    const K00: &str = "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const K02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
    const K00_48: &str = "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn psk(text: &str) -> ConfiguredPsk {
        ConfiguredPsk::parse(text).unwrap()
    }

    #[test]
    fn libnvme_version_1_identities() {
        // libnvme test/psk.c (test_data_identity and test_data_identity_compat): nvme_generate_tls_key_identity and
        // its _compat variant. The digest goes through the retained PSK, so this checks both derivations' first step.
        let cases = [
            (K01, PskDerivation::Rfc8446, "NVMe1R01", "iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU="),
            (
                K02,
                PskDerivation::Rfc8446,
                "NVMe1R02",
                "QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
            ),
            (K01, PskDerivation::Compat, "NVMe1R01", "66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM="),
            (
                K02,
                PskDerivation::Compat,
                "NVMe1R02",
                "RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz",
            ),
        ];
        for (key, derivation, prefix, digest) in cases {
            let tls = derive_tls_psk(&psk(key), HOST, SUB, IdentityVersion::V1, derivation).unwrap();
            assert_eq!(tls.identity, format!("{prefix} {HOST} {SUB} {digest}"), "{key} {derivation:?}");
            let retained = retained(&psk(key), HOST, derivation).unwrap();
            assert_eq!(psk_digest(psk(key).hash(), &retained, HOST, SUB), digest);
        }
    }

    #[test]
    fn retained_and_tls_psks_match_the_reference() {
        // No published vectors exist for the keys themselves: these come from a Python reimplementation written
        // from the spec's text and libnvme's encoding (HKDF from the `cryptography` package, OpenSSL's; the HKDF
        // steps also checked with `openssl kdf ... HKDF`), which reproduces every libnvme test/psk.c vector above.
        let cases: &[(&str, PskDerivation, &str)] = &[
            (K00, PskDerivation::Rfc8446, "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03"),
            (K01, PskDerivation::Rfc8446, "073311dec37e219ff3acd43f130130c5bdd443c066e1cc3424e49030234ff7d5"),
            (K01, PskDerivation::Compat, "ad4cdadfcbaf4e353fcbd09aac891c4d75c5300fe5ee7bb04ae87726a312eddc"),
            (
                K02,
                PskDerivation::Rfc8446,
                "73973a1b51a9acdde29a0610ac6a3ef852cf45936cca6830a661d18f68502f1a4c7a8ecb37524e0b1f7087cb4d680ad9",
            ),
            (
                K02,
                PskDerivation::Compat,
                "12d2452bc4783f50286bf940ad1caa05a304065e379024d9278ca7c9d8a42400c47029f198bfcdf5f14c07cb04eb7306",
            ),
        ];
        for &(key, derivation, expected) in cases {
            assert_eq!(hex(&retained(&psk(key), HOST, derivation).unwrap()), expected, "{key} {derivation:?}");
        }
        assert_eq!(
            *retained_psk(&psk(K01), HOST).unwrap(),
            *retained(&psk(K01), HOST, PskDerivation::Rfc8446).unwrap()
        );
        assert_eq!(
            *retained_psk_compat(&psk(K01), HOST).unwrap(),
            *retained(&psk(K01), HOST, PskDerivation::Compat).unwrap()
        );

        use IdentityVersion::{V0, V1};
        use PskDerivation::{Compat, Rfc8446};
        let tls: &[(&str, IdentityVersion, PskDerivation, &str)] = &[
            (K00, V0, Rfc8446, "ec85300ba827726bd3bc4fc07f3a34aec5fe7c8ccac05fefc2f021c74e0df9ef"),
            (K00, V0, Compat, "e2b16189378b34adba9fec995ab479040cedec0bc7c6b47728ee4d8de6ff52ba"),
            (K00, V1, Rfc8446, "a45d08ee4639c7570729bb3e57e905e466a49a15ece5401af906830c4d3bdb0b"),
            (K00, V1, Compat, "d50f6d3dd79345b6e8217744524df5ac0dc66964ff70cc5fd18e1b9d57ce7fcf"),
            (K01, V0, Rfc8446, "05c6503551ad136e6ee32e6eeb3f6d500b69701d84ec71e328f65c7f51566f68"),
            (K01, V0, Compat, "09fb1983ac6d6d0353e7cae4f23daddd651c367fa347c59d9cf6936f5a83eafb"),
            (K01, V1, Rfc8446, "8fc3c0badfd4c0c66fa3ca33aadd0314f85536cc9bc47338b60f3e6e563786ca"),
            (K01, V1, Compat, "b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2"),
            (
                K02,
                V0,
                Rfc8446,
                "f42ba63824cdfe421914c582921f85b5b5b7e2d4df084caeedc9be20b212e8bb0fe8a23e9d59a1c8fc6449da4970a78d",
            ),
            (
                K02,
                V0,
                Compat,
                "2ee4754186a625b28a3936ef4a40d839c3ad958b2e017562ee07e2501f172ce999dc9c29033ea7ee33f814f192c13f47",
            ),
            (
                K02,
                V1,
                Rfc8446,
                "a2b2f943f479fc682555cec89857c80ed004ce92f32a973d5764155bb7e36b17a85368a0666d250afac9282dda2e62ca",
            ),
            (
                K02,
                V1,
                Compat,
                "fcefe2e2a2e682b1447dcabf1ec268f78f08c63cd075753abcc8bda2c5c34d48d3014aa8d76ad80107e4f5c9f27e2149",
            ),
            (
                K00_48,
                V0,
                Rfc8446,
                "b5dd464067a9378ba2226d71f005d7ac90ed8696e4b2142084384365597201d33ba26f8aeeb529574d4267bd294a828e",
            ),
            (
                K00_48,
                V1,
                Compat,
                "f6259eaeaab509d2e42bc494098bd1ccc4334b2528a1a34ea95fbe27e3fa75e3422d260a299110afa42170521b02d689",
            ),
        ];
        for &(key, version, derivation, expected) in tls {
            let derived = derive_tls_psk(&psk(key), HOST, SUB, version, derivation).unwrap();
            assert_eq!(hex(&derived.key), expected, "{key} {version:?} {derivation:?}");
            assert_eq!(derived.hash, psk(key).hash());
        }
        // Version 0 identities name the hash by the key's length when the hash field is 00.
        let v0 = derive_tls_psk(&psk(K00_48), HOST, SUB, V0, Rfc8446).unwrap();
        assert_eq!(v0.identity, format!("NVMe0R02 {HOST} {SUB}"));
        let v1 = derive_tls_psk(&psk(K00), HOST, SUB, V1, Rfc8446).unwrap();
        assert_eq!(v1.identity, format!("NVMe1R01 {HOST} {SUB} quJVUJjp/BImWR0UQay/MjSfEgyAr6TyBOWybS/B404="));
    }

    #[test]
    fn the_hkdf_label_encodings() {
        let rfc = expand_label_info(PskDerivation::Rfc8446, 32, "HostNQN", b"nqn.h").unwrap();
        assert_eq!(rfc, b"\x00\x20\x0dtls13 HostNQN\x05nqn.h");
        let compat = expand_label_info(PskDerivation::Compat, 48, "nvme-tls-psk", b"02 x").unwrap();
        assert_eq!(compat, b"\x30\x00tls13 nvme-tls-psk02 x");
        assert!(expand_label_info(PskDerivation::Rfc8446, 32, "l", &[b'a'; 255]).is_some());
        assert!(expand_label_info(PskDerivation::Rfc8446, 32, "l", &[b'a'; 256]).is_none());
        assert!(expand_label_info(PskDerivation::Compat, 32, "l", &[b'a'; 256]).is_some());
        assert!(expand_label_info(PskDerivation::Compat, 32, "l", &[b'a'; 257]).is_none());
    }

    #[test]
    fn refusals() {
        // A version 0 identity is the context: two long NQNs make it too long for either derivation (libnvme too).
        let long = format!("nqn.{}", "a".repeat(200));
        for (derivation, max) in [(PskDerivation::Rfc8446, 255), (PskDerivation::Compat, 256)] {
            let e = derive_tls_psk(&psk(K01), &long, &long, IdentityVersion::V0, derivation).unwrap_err();
            assert_eq!(e, PskError::ContextTooLong { len: 9 + 204 + 1 + 204, max });
            assert!(derive_tls_psk(&psk(K01), &long, &long, IdentityVersion::V1, derivation).is_ok());
        }
        let e = derive_tls_psk(&psk(K01), "", SUB, IdentityVersion::V0, PskDerivation::Rfc8446).unwrap_err();
        assert_eq!(e.to_string(), "the PSK identity's host NQN: NQN is empty");
        let e = derive_tls_psk(&psk(K01), HOST, "a b", IdentityVersion::V1, PskDerivation::Rfc8446).unwrap_err();
        assert!(e.to_string().contains("a single space"), "{e}");
        let e = retained_psk(&psk(K01), "nqn.a\nb").unwrap_err();
        assert_eq!(e.to_string(), "the PSK identity's host NQN: NQN contains a control character");
        let id = PskIdentity::new(IdentityVersion::V0, PskType::Retained, PskHash::Sha384, HOST, SUB, None).unwrap();
        assert_eq!(tls_psk(&[0; 32], &id), Err(PskError::RetainedLength { hash: PskHash::Sha384, len: 32 }));
        assert_eq!(
            tls_psk_compat(&[0; 32], &id).unwrap_err().to_string(),
            "a retained PSK of 32 bytes for SHA-384: it has 48 bytes"
        );
    }

    #[test]
    fn a_target_derives_what_the_host_offers() {
        // The host derives; the target parses the identity, derives with its version and compares.
        for derivation in [PskDerivation::Rfc8446, PskDerivation::Compat] {
            for version in [IdentityVersion::V0, IdentityVersion::V1] {
                let host = derive_tls_psk(&psk(K02), HOST, SUB, version, derivation).unwrap();
                let offered = PskIdentity::parse(host.identity.as_bytes()).unwrap();
                assert_eq!((offered.version(), offered.hash()), (version, PskHash::Sha384));
                let target =
                    derive_tls_psk(&psk(K02), offered.hostnqn(), offered.subnqn(), offered.version(), derivation)
                        .unwrap();
                assert_eq!(target, host);
                let retained = retained(&psk(K02), HOST, derivation).unwrap();
                let key = match derivation {
                    PskDerivation::Rfc8446 => tls_psk(&retained, &offered).unwrap(),
                    PskDerivation::Compat => tls_psk_compat(&retained, &offered).unwrap(),
                };
                assert_eq!(key, host.key);
            }
        }
        // Version 1 tells the derivations apart by the digest.
        let rfc = derive_tls_psk(&psk(K01), HOST, SUB, IdentityVersion::V1, PskDerivation::Rfc8446).unwrap();
        let compat = derive_tls_psk(&psk(K01), HOST, SUB, IdentityVersion::V1, PskDerivation::Compat).unwrap();
        assert_ne!(rfc.identity, compat.identity);
        assert_eq!(format!("{rfc:?}").matches("bytes").count(), 1);
        assert!(format!("{rfc:?}").ends_with("key: <32 bytes> }"), "{rfc:?}");
    }

    #[test]
    fn secure_channel_concatenation_matches_the_reference() {
        // No published vectors exist (blktests nvme/061 checks only that the connection is encrypted): these come
        // from a scratch Python reimplementation of NVMe Base 2.1 §8.3.5.5.9 and TCP Transport §3.6.1.3 (hmac,
        // hashlib, HKDF by RFC 5869's text), the same that reproduces libnvme's vectors above.
        use crate::fabrics::tls::derive_generated_tls_psk;
        let host = "nqn.2014-08.org.nvmexpress:uuid:concat-host";
        let sub = "nqn.2026-12.io.nvmf-rs:concat";
        let cases = [
            (
                PskHash::Sha256,
                "3db4c53d211147292c2cbbafe1b7d15a4908942ccc58270d6852bbdf49d8212f",
                "Fr1fygRMZ059hhtyNEwjlxZOfIQknFji9tUotkXbLYY=",
                "45e5a88c58fdcb67553fbe8ba1df08b50221dcf251f12d3252fe0d8d365edbb8",
            ),
            (
                PskHash::Sha384,
                "3a593daf6307de389523ebd3a296db53a2105a99e57f6b5253702381a51dbff3d1d08c79a4648acf63e17520ca46df33",
                "VAJ/+7v3WzyXsYyJ7tox7AXmUOrSpKksAa80MPnz2wuXIq74tKbrp6t1nlUKquQ/",
                "a0ccf89fde2c74b291dd9d60b9de24e640756bff1c3f21979e5db44ef31876a2ed1236a7f372279bb1ba0407bbcbd73d",
            ),
        ];
        for (hash, generated, digest, tls) in cases {
            // A session key as long as ffdhe2048's (SHA-256) or ffdhe3072's (SHA-384) prime, as blktests pairs them.
            let len = if hash == PskHash::Sha256 { 256 } else { 384 };
            let session: Vec<u8> = (0..len).map(|i: usize| u8::try_from(i % 251).unwrap()).collect();
            let (c1, c2) = (vec![0x11; hash.digest_len()], vec![0x22; hash.digest_len()]);
            let psk = generated_psk(hash, &session, &c1, &c2);
            assert_eq!(hex(&psk), generated, "{hash:?}");
            let derived = derive_generated_tls_psk(hash, &psk, host, sub).unwrap();
            assert_eq!(derived.identity, format!("NVMe1G{:02} {host} {sub} {digest}", hash.id()));
            assert_eq!(hex(&derived.key), tls, "{hash:?}");
            let parsed = PskIdentity::parse(derived.identity.as_bytes()).unwrap();
            assert_eq!((parsed.psk_type(), parsed.hash()), (PskType::Generated, hash));
        }
        assert!(derive_generated_tls_psk(PskHash::Sha256, &[0; 32], "a b", sub).is_err());
        assert!(derive_generated_tls_psk(PskHash::Sha384, &[0; 32], host, sub).is_err());
    }
}

/// What nvme-cli 2.13 (libnvme 1.13, Debian 13) put in the kernel's keyring for these keys, printed by
/// `tests/tests/vm_tls.rs` (`keyctl` of the inserted key): its only derivation is [`PskDerivation::Compat`].
#[cfg(test)]
mod nvme_cli_2_13 {
    use super::super::{derive_tls_psk, ConfiguredPsk, IdentityVersion, PskDerivation};

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5f8e3a52-6c1d-4b7e-9a20-3d4c5b6a7e81";
    const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:vm-tls";
    const KEY_SHA256: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const KEY_SHA384: &str =
        "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_keyring_holds_what_compat_derives() {
        let cases = [
            (
                KEY_SHA256,
                IdentityVersion::V0,
                "NVMe0R01",
                "be2ff922d98c0f8d4cf5bc55ddfe6b982452e98b461710eb789a91b6f3a5d37e",
            ),
            (
                KEY_SHA384,
                IdentityVersion::V0,
                "NVMe0R02",
                "3a3b62dcd643875e98702da9caebbfbc7915d5edf98e8086e0bcf2e55918c5b3d3100a5d5e2210d7b5f8169befcc1695",
            ),
            (
                KEY_SHA256,
                IdentityVersion::V1,
                "NVMe1R01 MJ7/dQWBBwgiFQcA6pMtknmOZO2QLkv3sQwkTJ3eyu4=",
                "27f3310c8db5e13abadc6083f9036db28612ae71a85bf33692002f0dfb93165f",
            ),
            (
                KEY_SHA384,
                IdentityVersion::V1,
                "NVMe1R02 AbYtPwbd59SJPiBa8Ckgpyych+rGXjtGfE5QP7gwB8K7hzyMIImXNjuD4JS6dQ3Z",
                "3b7c1c3a78f0383c10d469a9c32bd425eb715f366b073e309edb6b208b4df9d4f5c2bebce4acdadd177b9ce419e90a29",
            ),
        ];
        for (key, version, short, psk) in cases {
            let configured: ConfiguredPsk = key.parse().unwrap();
            let derived = derive_tls_psk(&configured, HOSTNQN, SUBNQN, version, PskDerivation::Compat).unwrap();
            let identity = match short.split_once(' ') {
                Some((prefix, digest)) => format!("{prefix} {HOSTNQN} {SUBNQN} {digest}"),
                None => format!("{short} {HOSTNQN} {SUBNQN}"),
            };
            assert_eq!(derived.identity, identity);
            assert_eq!(hex(&derived.key), psk, "{short}");
        }
    }
}
