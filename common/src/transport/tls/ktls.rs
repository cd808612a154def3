//! The record layer in the kernel (kTLS): after the handshake each direction's key and IV are derived from its
//! application traffic secret (RFC 8446 §7.3) and given to the socket (`TCP_ULP` "tls", then `SOL_TLS`
//! `TLS_TX`/`TLS_RX`), with record sequence numbers at 0 (no record has used these keys yet: no tickets, no early
//! data). From then on the descriptor reads and writes plaintext and the kernel encrypts.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;

use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::{Zeroize, Zeroizing};

use super::{CipherSuite, TlsError};
use crate::fabrics::tls::derive::expand_label_info;
use crate::fabrics::tls::PskDerivation;

/// `TLS_1_3_VERSION` of `linux/tls.h`.
const TLS_1_3_VERSION: u16 = 0x0304;
/// `TLS_CIPHER_AES_GCM_128`.
const TLS_CIPHER_AES_GCM_128: u16 = 51;
/// `TLS_CIPHER_AES_GCM_256`.
const TLS_CIPHER_AES_GCM_256: u16 = 52;
/// `TLS_CIPHER_CHACHA20_POLY1305`.
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;
/// `SOL_TLS`.
const SOL_TLS: c_int = 282;
/// `TLS_TX` / `TLS_RX`.
const TLS_TX: c_int = 1;
const TLS_RX: c_int = 2;

/// `struct tls12_crypto_info_aes_gcm_{128,256}` (the kernel uses the TLS 1.2 names for TLS 1.3 too): the 4-byte
/// salt and 8-byte IV together are the 12-byte TLS 1.3 IV.
#[repr(C)]
struct CryptoInfo<const KEY: usize> {
    version: u16,
    cipher_type: u16,
    iv: [u8; 8],
    key: [u8; KEY],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<CryptoInfo<16>>() == 40);
const _: () = assert!(std::mem::size_of::<CryptoInfo<32>>() == 56);

impl<const KEY: usize> Drop for CryptoInfo<KEY> {
    fn drop(&mut self) {
        self.key.zeroize();
        self.iv.zeroize();
        self.salt.zeroize();
    }
}

/// Whether this kernel offers the TLS upper-layer protocol now (the `tls` module loaded; root may still load it
/// on first use).
pub fn ktls_available() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|ulps| ulps.split_whitespace().any(|u| u == "tls"))
}

/// HKDF-Expand-Label(secret, label, "", len) of TLS 1.3.
fn expand_label(suite: CipherSuite, secret: &[u8], label: &str, out: &mut [u8]) -> Result<(), TlsError> {
    let info = expand_label_info(PskDerivation::Rfc8446, out.len(), label, &[])
        .ok_or_else(|| TlsError::Ktls("key derivation".into()))?;
    let bad = |_| TlsError::Ktls("a traffic secret of the wrong length".into());
    match suite.hash_len() {
        32 => Hkdf::<Sha256>::from_prk(secret).map_err(bad)?.expand(&info, out),
        _ => Hkdf::<Sha384>::from_prk(secret).map_err(bad)?.expand(&info, out),
    }
    .map_err(|_| TlsError::Ktls("key derivation".into()))
}

/// The crypto info of one direction, from its traffic secret.
fn crypto_info<const KEY: usize>(suite: CipherSuite, secret: &[u8]) -> Result<CryptoInfo<KEY>, TlsError> {
    let mut info = CryptoInfo::<KEY> {
        version: TLS_1_3_VERSION,
        cipher_type: if KEY == 16 { TLS_CIPHER_AES_GCM_128 } else { TLS_CIPHER_AES_GCM_256 },
        iv: [0; 8],
        key: [0; KEY],
        salt: [0; 4],
        rec_seq: [0; 8],
    };
    expand_label(suite, secret, "key", &mut info.key)?;
    let mut iv = Zeroizing::new([0u8; 12]);
    expand_label(suite, secret, "iv", iv.as_mut_slice())?;
    info.salt.copy_from_slice(&iv[..4]);
    info.iv.copy_from_slice(&iv[4..]);
    Ok(info)
}

/// `struct tls12_crypto_info_chacha20_poly1305`: the whole 12-byte IV, no salt.
#[repr(C)]
struct ChachaInfo {
    version: u16,
    cipher_type: u16,
    iv: [u8; 12],
    key: [u8; 32],
    rec_seq: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<ChachaInfo>() == 56);

impl Drop for ChachaInfo {
    fn drop(&mut self) {
        self.key.zeroize();
        self.iv.zeroize();
    }
}

/// The ChaCha20-Poly1305 crypto info of one direction, from its traffic secret.
fn chacha20_info(secret: &[u8]) -> Result<ChachaInfo, TlsError> {
    let mut info = ChachaInfo {
        version: TLS_1_3_VERSION,
        cipher_type: TLS_CIPHER_CHACHA20_POLY1305,
        iv: [0; 12],
        key: [0; 32],
        rec_seq: [0; 8],
    };
    expand_label(CipherSuite::Chacha20Poly1305Sha256, secret, "key", &mut info.key)?;
    expand_label(CipherSuite::Chacha20Poly1305Sha256, secret, "iv", &mut info.iv)?;
    Ok(info)
}

fn set_option<T>(fd: RawFd, level: c_int, name: c_int, value: &T, what: &str) -> Result<(), TlsError> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>()).map_err(|_| TlsError::Ktls(what.into()))?;
    // SAFETY: `value` points to `len` initialized bytes (a repr(C) struct of the kernel's layout, or a byte
    // string), read by the kernel during the call only.
    let rc = unsafe { libc::setsockopt(fd, level, name, std::ptr::from_ref(value).cast::<c_void>(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(TlsError::Ktls(format!("{what}: {}", std::io::Error::last_os_error())))
    }
}

/// Give `fd`'s records to the kernel: `tx` encrypts what we send, `rx` decrypts what we receive.
pub(super) fn install(fd: RawFd, suite: CipherSuite, tx: &[u8], rx: &[u8]) -> Result<(), TlsError> {
    // Without the `tls` module the ULP is unknown (ENOENT) and nothing has changed on the socket.
    set_option(fd, libc::SOL_TCP, libc::TCP_ULP, b"tls", "TCP_ULP").map_err(|_| TlsError::NoKtls)?;
    for (direction, secret, what) in [(TLS_TX, tx, "TLS_TX"), (TLS_RX, rx, "TLS_RX")] {
        match suite {
            CipherSuite::Aes128GcmSha256 => {
                set_option(fd, SOL_TLS, direction, &crypto_info::<16>(suite, secret)?, what)?;
            }
            CipherSuite::Aes256GcmSha384 => {
                set_option(fd, SOL_TLS, direction, &crypto_info::<32>(suite, secret)?, what)?;
            }
            CipherSuite::Chacha20Poly1305Sha256 => {
                set_option(fd, SOL_TLS, direction, &chacha20_info(secret)?, what)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8448 §3 (a simple 1-RTT handshake): the server's application traffic secret and the key and IV derived
    /// from it.
    #[test]
    fn keys_are_derived_as_rfc_8448_shows() {
        let secret = hex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
        let info = crypto_info::<16>(CipherSuite::Aes128GcmSha256, &secret).unwrap();
        assert_eq!(info.key.to_vec(), hex("9f02283b6c9c07efc26bb9f2ac92e356"));
        let mut iv = info.salt.to_vec();
        iv.extend_from_slice(&info.iv);
        assert_eq!(iv, hex("cf782b88dd83549aadf1e984"));
        assert_eq!(info.rec_seq, [0; 8]);
        assert_eq!((info.version, info.cipher_type), (0x0304, 51));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
