//! One NBD client's handshake (fixed newstyle, blocking reads bounded by [`HANDSHAKE_TIMEOUT`]); the
//! transmission phase that follows runs in [`super::transmission`].

use std::io::{self, Read, Write};
use std::net::Shutdown;

use super::proto::{self, info, opt, rep};
use super::{transmission, Export, LimitCounters, Stream, HANDSHAKE_TIMEOUT};

/// Option data longer than this is refused (`NBD_OPT_GO` with a 4096-byte name is about 4 KiB).
const MAX_OPTION_LEN: u32 = 16 << 10;
/// Oversized option data up to this much is read and dropped; beyond, the client is disconnected.
const MAX_OPTION_DISCARD: u32 = 1 << 20;
/// Options one client may send before entering transmission; more is treated as a denial of service.
const MAX_OPTIONS: usize = 64;

/// Serve one client until it disconnects, breaks the protocol or the export stops.
pub(super) fn run(mut stream: Stream, x: &Export) {
    let go = handshake(&mut stream, x).unwrap_or_else(|e| {
        if let HandshakeError::Io(io) = &e {
            // A blocking read past its timeout fails with `WouldBlock` (or `TimedOut`).
            if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                tracing::warn!("NBD client cut off: a handshake step took over {HANDSHAKE_TIMEOUT:?}");
                LimitCounters::bump(&x.limits.handshake_timeout);
                return false;
            }
        }
        tracing::debug!(error = %e, "NBD handshake ended");
        false
    });
    if go {
        if let Err(e) = transmission::run(stream, x) {
            tracing::warn!(error = %e, "NBD session could not start transmission");
        }
    } else {
        // The acceptor holds a clone of the socket: close it for the client now.
        let _ = stream.shutdown(Shutdown::Both);
    }
}

#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Proto(#[from] proto::ProtoError),
    #[error("option {option} with {length} bytes of data")]
    TooBig { option: u32, length: u32 },
    #[error("more than {MAX_OPTIONS} options")]
    TooMany,
}

/// The fixed newstyle handshake; `Ok(true)` when the client enters transmission.
fn handshake(s: &mut Stream, x: &Export) -> Result<bool, HandshakeError> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.write_all(&proto::greeting())?;
    let mut flags = [0; 4];
    s.read_exact(&mut flags)?;
    let no_zeroes = proto::parse_client_flags(flags)?;
    let g = &x.geometry;
    for _ in 0..MAX_OPTIONS {
        let mut h = [0; proto::OPTION_HEADER_LEN];
        s.read_exact(&mut h)?;
        let h = proto::parse_option_header(&h)?;
        let reply = |s: &mut Stream, r: u32, data: &[u8]| s.write_all(&proto::option_reply(h.option, r, data));
        if h.length > MAX_OPTION_LEN {
            if h.option == opt::EXPORT_NAME || h.length > MAX_OPTION_DISCARD {
                return Err(HandshakeError::TooBig { option: h.option, length: h.length });
            }
            io::copy(&mut s.take(u64::from(h.length)), &mut io::sink())?;
            reply(s, rep::ERR_TOO_BIG, b"option data too long")?;
            continue;
        }
        let mut data = vec![0; usize::try_from(h.length).unwrap_or(0)];
        s.read_exact(&mut data)?;
        let known = |name: &[u8]| name.is_empty() || name == x.name.as_bytes();
        match h.option {
            opt::EXPORT_NAME => {
                if !known(&data) {
                    // No way to report an error to NBD_OPT_EXPORT_NAME: the spec says close.
                    return Ok(false);
                }
                let mut r = Vec::with_capacity(134);
                r.extend_from_slice(&g.size().to_be_bytes());
                r.extend_from_slice(&g.transmission_flags().to_be_bytes());
                if !no_zeroes {
                    r.resize(r.len() + 124, 0);
                }
                s.write_all(&r)?;
                return Ok(true);
            }
            opt::ABORT => {
                // The client may already have gone: nothing to do about a failed ACK.
                let _ = reply(s, rep::ACK, &[]);
                return Ok(false);
            }
            opt::LIST if !data.is_empty() => reply(s, rep::ERR_INVALID, b"NBD_OPT_LIST takes no data")?,
            opt::LIST => {
                reply(s, rep::SERVER, &proto::rep_server(&x.name))?;
                reply(s, rep::ACK, &[])?;
            }
            opt::INFO | opt::GO => {
                let Some(request) = proto::parse_info_request(&data) else {
                    reply(s, rep::ERR_INVALID, b"malformed information request")?;
                    continue;
                };
                if !known(request.name) {
                    reply(s, rep::ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                reply(s, rep::INFO, &proto::info_export(g.size(), g.transmission_flags()))?;
                // Sent whether asked or not: the minimum is the LBA size, which clients must honour.
                let preferred = g.block_size.max(4096);
                reply(s, rep::INFO, &proto::info_block_size(g.block_size, preferred, g.max_payload))?;
                if request.requests.contains(&info::NAME) {
                    let mut name = info::NAME.to_be_bytes().to_vec();
                    name.extend_from_slice(x.name.as_bytes());
                    reply(s, rep::INFO, &name)?;
                }
                reply(s, rep::ACK, &[])?;
                if h.option == opt::GO {
                    return Ok(true);
                }
            }
            // Structured replies, metadata contexts, TLS, extended headers: not offered (simple replies only).
            _ => reply(s, rep::ERR_UNSUP, b"option not supported")?,
        }
    }
    Err(HandshakeError::TooMany)
}
