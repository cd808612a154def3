//! A streaming PDU decoder: accepts bytes in any split and yields whole PDUs, never reading past what arrived.
//!
//! Two entry points share one set of checks:
//!
//! - [`decode`] is stateless and zero-copy: given the bytes at the head of a receive buffer (a ring, an
//!   io_uring provided buffer, a `Vec`), it returns [`Decoded::Needed`]`(n)` — at least `n` more bytes are
//!   needed — or [`Decoded::Pdu`] with the parsed header, the data's byte range in that buffer and how many
//!   bytes the PDU used. The caller keeps the bytes and calls again once more have arrived. This is the
//!   hot path when the receive buffer is large enough to hold whole PDUs.
//! - [`PduDecoder`] is for callers that get bytes in arbitrary pieces and do not keep them (a 1-byte read,
//!   half a header, a PDU split across two `recv` calls). [`PduDecoder::feed`] takes a slice and returns
//!   how many bytes it used and, when one completes, a [`ReceivedPdu`]. A PDU that lies wholly in the
//!   slice is returned in place (its data borrows the slice); one that straddles calls is assembled in an
//!   internal buffer that is reused for the life of the connection (it grows to the largest straddling
//!   PDU, bounded by the configured maximum, and is never shrunk), so no PDU allocates once the buffer is
//!   warm.
//!
//! Both check, in this order, as soon as the bytes for each step are there: the common header (type,
//! direction, HLEN, FLAGS, PLEN, PDO against the negotiated [`Framing`] and the maximum data length — so
//! an absurd PLEN is refused after 8 bytes, before anything is buffered for it); then the header digest and
//! the PDU-specific header; then, once the whole PDU is there, the data digest. Fatal errors carry the FES
//! and FEI of the TermReq to send ([`PduError::term_req`]); a data digest error is not fatal
//! ([`PduError::DataDigest`]) and decoding continues with the next PDU.
//!
//! The decoder runs on the connection's reactor thread and never blocks; it knows nothing about connection
//! state (see the module docs of [`super`] for what the caller still checks). After ICReq/ICResp the caller
//! switches the decoder to the negotiated framing ([`PduDecoder::set_framing`]); since `feed` returns after
//! each PDU, bytes after the ICReq are decoded with the new framing.

use std::ops::Range;

use super::digest::{self, DigestMismatch, DIGEST_LEN};
use super::pdu::{
    CommonHeader, Direction, FatalErrorStatus, Framing, Pdu, PduError, PduLayout, COMMON_HEADER_LEN,
    TERM_REQ_MAX_DATA_LEN,
};
use crate::wire::WireError;

/// What a receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The negotiated digests and PDU data alignment ([`Framing::default`] until ICReq/ICResp).
    pub framing: Framing,
    /// The direction of the PDUs this side receives: a controller receives
    /// [`Direction::HostToController`], a host [`Direction::ControllerToHost`]. PDUs of the other
    /// direction are an Invalid PDU Header Field error (FEI 0, the PDU-Type).
    pub receive: Direction,
    /// The most data one PDU may carry: at least the largest in-capsule data and MAXH2CDATA a controller
    /// accepts, or the largest C2HData a host accepts. Longer PDUs are a Data Transfer Limit Exceeded error.
    pub max_data_len: u32,
}

impl DecoderConfig {
    /// A receiver of `receive` PDUs, before ICReq/ICResp: no digests, no alignment.
    pub fn new(receive: Direction, max_data_len: u32) -> Self {
        DecoderConfig { framing: Framing::default(), receive, max_data_len }
    }
}

/// The result of [`decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The buffer holds only part of a PDU: at least this many more bytes are needed.
    Needed(usize),
    /// A whole PDU.
    Pdu {
        /// The parsed header.
        pdu: Pdu,
        /// Where its data lies in the buffer (empty if none).
        data: Range<usize>,
        /// Its length (PLEN): where the next PDU starts.
        consumed: usize,
    },
}

/// Check the common header (`buf` holds at least 8 bytes) and compute the PDU's layout.
fn check_common(buf: &[u8], config: &DecoderConfig) -> Result<(CommonHeader, PduLayout), PduError> {
    let ch = CommonHeader::parse(buf)?;
    if ch.pdu_type.direction() != config.receive {
        return Err(PduError::Fatal {
            fes: FatalErrorStatus::InvalidPduHeaderField,
            fei: 0,
            source: WireError::invalid(
                ch.pdu_type.name(),
                "PDU-Type",
                ch.pdu_type.to_u8(),
                "a PDU type that travels towards this side",
            ),
        });
    }
    let layout = PduLayout::validate(&ch, &config.framing, config.max_data_len)?;
    Ok((ch, layout))
}

fn digest_at(buf: &[u8], at: usize) -> [u8; DIGEST_LEN] {
    let mut d = [0u8; DIGEST_LEN];
    if let Some(b) = buf.get(at..at + DIGEST_LEN) {
        d.copy_from_slice(b);
    }
    d
}

/// Verify the header digest and parse the PDU-specific header (`buf` holds at least `layout.header_end()`).
fn check_header(buf: &[u8], ch: &CommonHeader, layout: &PduLayout) -> Result<Pdu, PduError> {
    if layout.hdgst {
        let header = buf.get(..layout.hlen).unwrap_or(buf);
        digest::verify(header, digest_at(buf, layout.hlen))
            .map_err(|mismatch| PduError::HeaderDigest { pdu_type: ch.pdu_type, mismatch })?;
    }
    Pdu::from_header(ch, layout, buf)
}

/// Verify the data digest (`buf` holds the whole PDU).
fn check_data(buf: &[u8], pdu: &Pdu, layout: &PduLayout) -> Result<(), PduError> {
    if layout.ddgst {
        let range = layout.data_range();
        let data = buf.get(range.clone()).unwrap_or_default();
        digest::verify(data, digest_at(buf, range.end)).map_err(|mismatch: DigestMismatch| PduError::DataDigest {
            pdu: *pdu,
            consumed: layout.plen,
            mismatch,
        })?;
    }
    Ok(())
}

/// Decode the PDU at the start of `buf` in place, reading no byte past the PDU and none past `buf`.
///
/// Returns [`Decoded::Needed`] while the PDU is incomplete (after checking whatever part of the header
/// has arrived), [`Decoded::Pdu`] once it is whole and its digests check out, and an error as soon as
/// something is wrong. A [`PduError::DataDigest`] error says how many bytes to skip to the next PDU.
pub fn decode(buf: &[u8], config: &DecoderConfig) -> Result<Decoded, PduError> {
    if buf.len() < COMMON_HEADER_LEN {
        return Ok(Decoded::Needed(COMMON_HEADER_LEN - buf.len()));
    }
    let (ch, layout) = check_common(buf, config)?;
    if buf.len() < layout.header_end() {
        return Ok(Decoded::Needed(layout.header_end() - buf.len()));
    }
    let pdu = check_header(buf, &ch, &layout)?;
    if buf.len() < layout.plen {
        return Ok(Decoded::Needed(layout.plen - buf.len()));
    }
    check_data(buf, &pdu, &layout)?;
    Ok(Decoded::Pdu { pdu, data: layout.data_range(), consumed: layout.plen })
}

/// Decode only the header of the PDU at the start of `buf`: `Ok(Some((pdu, layout)))` once the header (and its
/// digest) has arrived and checks out, `Ok(None)` while it is incomplete, an error as soon as something is wrong
/// (the same checks as [`decode`]). For receivers that place a PDU's data themselves — straight from the socket
/// into the command's buffer — instead of waiting for the whole PDU: they must read no byte past `layout.plen`
/// and still verify the data digest when `layout.ddgst` is set.
pub fn decode_header(buf: &[u8], config: &DecoderConfig) -> Result<Option<(Pdu, PduLayout)>, PduError> {
    if buf.len() < COMMON_HEADER_LEN {
        return Ok(None);
    }
    let (ch, layout) = check_common(buf, config)?;
    if buf.len() < layout.header_end() {
        return Ok(None);
    }
    Ok(Some((check_header(buf, &ch, &layout)?, layout)))
}

/// A whole PDU from [`PduDecoder::feed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedPdu<'a> {
    /// The parsed header.
    pub pdu: Pdu,
    /// Its data (empty if none); borrows the fed slice or the decoder's buffer.
    pub data: &'a [u8],
}

/// The result of one [`PduDecoder::feed`] call.
#[derive(Debug)]
pub struct Feed<'a> {
    /// Bytes of the input used. Feed the rest (`&input[consumed..]`) in the next call.
    pub consumed: usize,
    /// `Ok(Some(pdu))` when a PDU completed, `Ok(None)` when all input was used and a PDU is still
    /// incomplete (or the input was empty), or the error. After a data digest error, decoding continues
    /// with the rest of the input; after a fatal error every later call returns the same error.
    pub result: Result<Option<ReceivedPdu<'a>>, PduError>,
}

/// Where the decoder is within the PDU it is assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Collecting the 8-byte common header.
    Common,
    /// Common header checked; collecting the rest of the header and its digest.
    Header { ch: CommonHeader, layout: PduLayout },
    /// Header checked; collecting padding, data and data digest.
    Data { pdu: Pdu, layout: PduLayout },
}

/// A streaming NVMe/TCP PDU decoder for one connection (see the module docs for the design).
///
/// ```
/// # use nvmf_common::transport::tcp::{decoder::{DecoderConfig, PduDecoder}, Direction, Framing, Pdu, R2t};
/// let r2t = Pdu::R2t(R2t { cccid: 7, ttag: 1, r2to: 0, r2tl: 4096 });
/// let bytes = r2t.to_bytes(&[], &Framing::default()).unwrap();
/// let mut decoder = PduDecoder::new(DecoderConfig::new(Direction::ControllerToHost, 1 << 20));
/// // Half the PDU arrives, then the rest.
/// let step = decoder.feed(&bytes[..10]);
/// assert_eq!((step.consumed, step.result.unwrap()), (10, None));
/// let step = decoder.feed(&bytes[10..]);
/// assert_eq!(step.result.unwrap().unwrap().pdu, r2t);
/// ```
#[derive(Debug, Clone)]
pub struct PduDecoder {
    config: DecoderConfig,
    /// Bytes of a PDU that straddles `feed` calls. Reused; cleared lazily because the last PDU's data may
    /// still borrow it.
    buf: Vec<u8>,
    stage: Stage,
    /// The last PDU returned from `buf`: clear it on the next call.
    delivered: bool,
    /// A fatal error: the connection is being terminated.
    failed: Option<PduError>,
    /// The first bytes of the PDU header that caused the fatal error (TermReq data).
    error_header: [u8; TERM_REQ_MAX_DATA_LEN],
    error_header_len: usize,
}

impl PduDecoder {
    /// A decoder with `config`.
    pub fn new(config: DecoderConfig) -> Self {
        PduDecoder {
            config,
            buf: Vec::new(),
            stage: Stage::Common,
            delivered: false,
            failed: None,
            error_header: [0; TERM_REQ_MAX_DATA_LEN],
            error_header_len: 0,
        }
    }

    /// The current configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Switch to the framing negotiated in ICReq/ICResp. Call it after the IC PDU was returned and before
    /// feeding the bytes after it.
    pub fn set_framing(&mut self, framing: Framing) {
        self.config.framing = framing;
    }

    /// Change the largest data length accepted.
    pub fn set_max_data_len(&mut self, max_data_len: u32) {
        self.config.max_data_len = max_data_len;
    }

    /// Bytes of an incomplete PDU held internally.
    pub fn buffered(&self) -> usize {
        if self.delivered {
            0
        } else {
            self.buf.len()
        }
    }

    /// The fatal error the decoder stopped on, if any.
    pub fn error(&self) -> Option<&PduError> {
        self.failed.as_ref()
    }

    /// After a fatal error: the first (at most 128) bytes of the offending PDU's header, the data of the
    /// TermReq to send ([`PduError::term_req`]).
    pub fn term_req_data(&self) -> &[u8] {
        &self.error_header[..self.error_header_len]
    }

    fn fail(&mut self, header: &[u8], error: PduError) -> PduError {
        let n = header.len().min(TERM_REQ_MAX_DATA_LEN);
        self.error_header[..n].copy_from_slice(&header[..n]);
        self.error_header_len = n;
        self.failed = Some(error.clone());
        error
    }

    /// Decode from `input`: use as many bytes as the current PDU needs and return it once whole (see
    /// [`Feed`]). Never uses bytes past the end of the current PDU, so each call returns at most one PDU;
    /// call again with the rest of the input.
    pub fn feed<'a>(&'a mut self, input: &'a [u8]) -> Feed<'a> {
        if let Some(e) = &self.failed {
            return Feed { consumed: 0, result: Err(e.clone()) };
        }
        if self.delivered {
            self.buf.clear();
            self.delivered = false;
        }
        if self.buf.is_empty() && self.stage == Stage::Common {
            // Fast path: the whole PDU may be in `input`; parse it in place.
            match decode(input, &self.config) {
                Ok(Decoded::Pdu { pdu, data, consumed }) => {
                    return Feed { consumed, result: Ok(Some(ReceivedPdu { pdu, data: &input[data] })) };
                }
                Ok(Decoded::Needed(_)) => {} // Assemble it below.
                Err(e @ PduError::DataDigest { consumed, .. }) => return Feed { consumed, result: Err(e) },
                Err(e) => {
                    let header_len = input.len().min(TERM_REQ_MAX_DATA_LEN);
                    let e = self.fail(&input[..header_len], e);
                    return Feed { consumed: 0, result: Err(e) };
                }
            }
        }
        let mut used = 0;
        loop {
            let target = match &self.stage {
                Stage::Common => COMMON_HEADER_LEN,
                Stage::Header { layout, .. } => layout.header_end(),
                Stage::Data { layout, .. } => layout.plen,
            };
            let take = target.saturating_sub(self.buf.len()).min(input.len() - used);
            self.buf.extend_from_slice(&input[used..used + take]);
            used += take;
            if self.buf.len() < target {
                return Feed { consumed: used, result: Ok(None) };
            }
            match self.stage {
                Stage::Common => match check_common(&self.buf, &self.config) {
                    Ok((ch, layout)) => {
                        // PLEN is validated: reserving it is bounded by the configured maximum.
                        self.buf.reserve(layout.plen.saturating_sub(self.buf.len()));
                        self.stage = Stage::Header { ch, layout };
                    }
                    Err(e) => {
                        let buf = std::mem::take(&mut self.buf);
                        let e = self.fail(&buf, e);
                        return Feed { consumed: used, result: Err(e) };
                    }
                },
                Stage::Header { ch, layout } => match check_header(&self.buf, &ch, &layout) {
                    Ok(pdu) => self.stage = Stage::Data { pdu, layout },
                    Err(e) => {
                        let buf = std::mem::take(&mut self.buf);
                        let e = self.fail(&buf, e);
                        return Feed { consumed: used, result: Err(e) };
                    }
                },
                Stage::Data { pdu, layout } => {
                    self.stage = Stage::Common;
                    self.delivered = true;
                    let result = check_data(&self.buf, &pdu, &layout)
                        .map(|()| Some(ReceivedPdu { pdu, data: &self.buf[layout.data_range()] }));
                    return Feed { consumed: used, result };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pdu::strategies;
    use super::super::pdu::{C2hData, CapsuleCommand, H2cData, PduType, R2t};
    use super::*;
    use crate::nvme::sqe::SubmissionQueueEntry;
    use crate::nvme::status::Status;
    use proptest::prelude::*;

    const MAX: u32 = 1 << 20;
    const H2C: Direction = Direction::HostToController;
    const C2H: Direction = Direction::ControllerToHost;

    fn config(receive: Direction, framing: Framing) -> DecoderConfig {
        DecoderConfig { framing, receive, max_data_len: MAX }
    }

    /// Feed `chunks` one after another; collect PDUs with their data, and errors.
    fn run(decoder: &mut PduDecoder, chunks: &[&[u8]]) -> Vec<Result<(Pdu, Vec<u8>), PduError>> {
        let mut out = Vec::new();
        for chunk in chunks {
            let mut input: &[u8] = chunk;
            // Each round uses bytes or returns a PDU; bound the rounds to prove it terminates.
            for _ in 0..=2 * chunk.len() + 2 {
                let step = decoder.feed(input);
                let consumed = step.consumed;
                match step.result {
                    Ok(Some(p)) => out.push(Ok((p.pdu, p.data.to_vec()))),
                    Ok(None) => {
                        assert_eq!(consumed, input.len(), "Ok(None) means all input was used");
                        input = &[];
                        break;
                    }
                    Err(e) => {
                        let fatal = e.is_fatal();
                        out.push(Err(e));
                        if fatal {
                            return out;
                        }
                    }
                }
                input = &input[consumed..];
                if input.is_empty() {
                    break;
                }
            }
            assert!(input.is_empty() || decoder.error().is_some(), "decoder stalled");
        }
        out
    }

    fn stream(pdus: &[(Pdu, Vec<u8>)], framing: &Framing) -> Vec<u8> {
        pdus.iter().flat_map(|(p, d)| p.to_bytes(d, framing).unwrap()).collect()
    }

    fn sample(direction: Direction) -> Vec<(Pdu, Vec<u8>)> {
        match direction {
            H2C => vec![
                (Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0x01) }), vec![7u8; 100]),
                (Pdu::H2cData(H2cData { cccid: 3, ttag: 9, datao: 0, datal: 5, last_pdu: true }), vec![1, 2, 3, 4, 5]),
                (Pdu::CapsuleCommand(CapsuleCommand { sqe: SubmissionQueueEntry::new(0x02) }), vec![]),
            ],
            C2H => vec![
                (Pdu::R2t(R2t { cccid: 3, ttag: 9, r2to: 0, r2tl: 4096 }), vec![]),
                (Pdu::C2hData(C2hData { cccid: 3, datao: 0, datal: 3, last_pdu: true, success: true }), vec![9, 8, 7]),
            ],
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let framing = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 7 };
        let pdus = sample(H2C);
        let bytes = stream(&pdus, &framing);
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let mut d = PduDecoder::new(config(H2C, framing));
        let got: Vec<_> = run(&mut d, &chunks).into_iter().map(Result::unwrap).collect();
        assert_eq!(got, pdus);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn whole_buffer_is_zero_copy() {
        let framing = Framing::default();
        let pdus = sample(C2H);
        let bytes = stream(&pdus, &framing);
        let mut d = PduDecoder::new(config(C2H, framing));
        let step = d.feed(&bytes);
        assert_eq!(step.consumed, 24);
        let step = d.feed(&bytes[24..]);
        let p = step.result.unwrap().unwrap();
        // The data borrows the input.
        assert_eq!(p.data.as_ptr(), bytes[24 + 24..].as_ptr());
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn stateless_decode_needed() {
        let framing = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 };
        let cfg = config(H2C, framing);
        let (p, data) = &sample(H2C)[1];
        let b = p.to_bytes(data, &framing).unwrap();
        // 24 header + 4 HDGST + 5 data + 4 DDGST.
        assert_eq!(b.len(), 37);
        assert_eq!(decode(&b[..0], &cfg).unwrap(), Decoded::Needed(8));
        assert_eq!(decode(&b[..5], &cfg).unwrap(), Decoded::Needed(3));
        assert_eq!(decode(&b[..8], &cfg).unwrap(), Decoded::Needed(20));
        assert_eq!(decode(&b[..28], &cfg).unwrap(), Decoded::Needed(9));
        assert_eq!(decode(&b[..36], &cfg).unwrap(), Decoded::Needed(1));
        let mut longer = b.clone();
        longer.extend_from_slice(&[0xEE; 10]);
        assert_eq!(decode(&longer, &cfg).unwrap(), Decoded::Pdu { pdu: *p, data: 28..33, consumed: 37 });
    }

    #[test]
    fn absurd_plen_refused_after_common_header() {
        let mut b = vec![0x06, 0x00, 24, 24];
        b.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        b.extend_from_slice(&[0u8; 64]);
        let mut d = PduDecoder::new(config(H2C, Framing::default()));
        let step = d.feed(&b[..8]);
        let e = step.result.unwrap_err();
        assert_eq!(e.fes(), Some(FatalErrorStatus::DataTransferLimitExceeded));
        assert!(d.buf.capacity() <= 64, "nothing reserved for the claimed length");
        assert_eq!(d.term_req_data(), &b[..8]);
        // Stays failed.
        let step = d.feed(&b[8..]);
        assert_eq!(step.consumed, 0);
        assert_eq!(step.result.unwrap_err(), e);
        // One byte at a time too.
        let mut d = PduDecoder::new(config(H2C, Framing::default()));
        for (i, byte) in b[..8].iter().enumerate() {
            let step = d.feed(std::slice::from_ref(byte));
            assert_eq!(step.result.is_err(), i == 7);
        }
        assert!(d.buf.capacity() <= 64);
    }

    #[test]
    fn wrong_direction_is_invalid_type() {
        let (p, data) = &sample(C2H)[0];
        let b = p.to_bytes(data, &Framing::default()).unwrap();
        let e = decode(&b, &config(H2C, Framing::default())).unwrap_err();
        assert_eq!((e.fes(), e.fei()), (Some(FatalErrorStatus::InvalidPduHeaderField), 0));
        assert_eq!(e.term_req(H2C).unwrap().direction, C2H);
    }

    #[test]
    fn header_digest_error_is_fatal() {
        let framing = Framing { hdgst: true, ddgst: false, hpda: 0, cpda: 0 };
        let (p, data) = &sample(H2C)[0];
        let mut b = p.to_bytes(data, &framing).unwrap();
        b[20] ^= 0x40; // inside the SQE
        let e = decode(&b, &config(H2C, framing)).unwrap_err();
        assert!(matches!(e, PduError::HeaderDigest { pdu_type: PduType::CapsuleCmd, .. }));
        assert_eq!(e.fes(), Some(FatalErrorStatus::HeaderDigestError));
        let mut d = PduDecoder::new(config(H2C, framing));
        let out = run(&mut d, &[&b[..50], &b[50..]]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ref().unwrap_err(), &e);
        assert_eq!(d.term_req_data(), &b[..76]);
        // The digest itself corrupted.
        let mut b = p.to_bytes(data, &framing).unwrap();
        b[73] ^= 1;
        assert!(matches!(decode(&b, &config(H2C, framing)), Err(PduError::HeaderDigest { .. })));
    }

    #[test]
    fn decode_header_needs_only_the_header() {
        let framing = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 };
        let c2h = Pdu::C2hData(C2hData { cccid: 3, datao: 0, datal: 4096, last_pdu: true, success: false });
        let data = vec![0x5a; 4096];
        let b = c2h.to_bytes(&data, &framing).unwrap();
        let cfg = config(C2H, framing);
        // 24-byte header + 4-byte header digest.
        for cut in [0, 7, 8, 27] {
            assert_eq!(decode_header(&b[..cut], &cfg).unwrap(), None, "{cut} bytes");
        }
        let (pdu, layout) = decode_header(&b[..28], &cfg).unwrap().unwrap();
        assert_eq!(pdu, c2h);
        assert_eq!((layout.data_range(), layout.plen, layout.ddgst), (28..28 + 4096, b.len(), true));
        assert_eq!(&b[layout.data_range()], &data[..]);
        // The same checks as `decode`: a corrupt header digest is refused before any data arrived.
        let mut bad = b[..28].to_vec();
        bad[10] ^= 1;
        assert!(matches!(decode_header(&bad, &cfg), Err(PduError::HeaderDigest { .. })));
        // The wrong direction is refused after the common header.
        assert!(decode_header(&b[..8], &config(H2C, framing)).is_err());
    }

    #[test]
    fn data_digest_error_is_not_fatal() {
        let framing = Framing { hdgst: false, ddgst: true, hpda: 0, cpda: 0 };
        let pdus = sample(H2C);
        let mut bytes = stream(&pdus, &framing);
        bytes[72 + 50] ^= 0xFF; // in the first capsule's data
        let e = decode(&bytes, &config(H2C, framing)).unwrap_err();
        assert!(!e.is_fatal());
        assert_eq!(e.status(), Some(Status::TRANSIENT_TRANSPORT_ERROR));
        assert_eq!(e.term_req(H2C), None);
        match &e {
            PduError::DataDigest { pdu, consumed, .. } => {
                assert_eq!(pdu, &pdus[0].0);
                assert_eq!(*consumed, 72 + 100 + 4);
            }
            other => panic!("{other:?}"),
        }
        // Streaming, whole and split: the error, then the remaining PDUs.
        for split in [bytes.len(), 1, 100, 175, 176, 177] {
            let mut d = PduDecoder::new(config(H2C, framing));
            let out = run(&mut d, &[&bytes[..split], &bytes[split..]]);
            assert_eq!(out.len(), 3, "split at {split}");
            assert!(matches!(out[0], Err(PduError::DataDigest { .. })));
            assert_eq!(out[1].as_ref().unwrap(), &pdus[1]);
            assert_eq!(out[2].as_ref().unwrap(), &pdus[2]);
        }
    }

    #[test]
    fn framing_switch_after_ic() {
        use super::super::pdu::{DigestTypes, IcReq};
        let negotiated = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 };
        let icreq = Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            dgst: DigestTypes { hdgst_enable: true, ddgst_enable: true },
            maxr2t: 0,
        });
        let mut bytes = icreq.to_bytes(&[], &Framing::default()).unwrap();
        let (cmd, data) = &sample(H2C)[0];
        bytes.extend(cmd.to_bytes(data, &negotiated).unwrap());
        let mut d = PduDecoder::new(DecoderConfig::new(H2C, MAX));
        let step = d.feed(&bytes);
        assert_eq!(step.result.unwrap().unwrap().pdu, icreq);
        let used = step.consumed;
        d.set_framing(negotiated);
        let step = d.feed(&bytes[used..]);
        let p = step.result.unwrap().unwrap();
        assert_eq!((p.pdu, p.data), (*cmd, &data[..]));
    }

    fn split_points(len: usize, cuts: &[usize]) -> Vec<usize> {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
        points.push(0);
        points.push(len);
        points.sort_unstable();
        points.dedup();
        points
    }

    proptest! {
        #[test]
        fn split_stream_decodes_to_same_pdus(
            h2c in proptest::collection::vec(strategies::pdu(H2C), 1..6),
            c2h in proptest::collection::vec(strategies::pdu(C2H), 1..6),
            framing in strategies::framing(),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            for (direction, pdus) in [(H2C, h2c), (C2H, c2h)] {
                let bytes = stream(&pdus, &framing);
                let points = split_points(bytes.len(), &cuts);
                let chunks: Vec<&[u8]> = points.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
                let mut d = PduDecoder::new(config(direction, framing));
                let got: Vec<_> = run(&mut d, &chunks).into_iter().collect::<Result<_, _>>().unwrap();
                prop_assert_eq!(&got, &pdus);
                prop_assert_eq!(d.buffered(), 0);
                // The stateless in-place decoder agrees.
                let mut at = 0;
                let mut n = 0;
                while at < bytes.len() {
                    match decode(&bytes[at..], &config(direction, framing)).unwrap() {
                        Decoded::Pdu { pdu, data, consumed } => {
                            prop_assert_eq!(&pdu, &pdus[n].0);
                            prop_assert_eq!(&bytes[at..][data], &pdus[n].1[..]);
                            at += consumed;
                            n += 1;
                        }
                        Decoded::Needed(k) => prop_assert!(false, "needed {} more at {}", k, at),
                    }
                }
                prop_assert_eq!(n, pdus.len());
            }
        }

        #[test]
        fn random_bytes_never_panic_or_stall(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            framing in strategies::framing(),
            receive in prop_oneof![Just(H2C), Just(C2H)],
            max in 0u32..4096,
        ) {
            let points = split_points(bytes.len(), &cuts);
            let chunks: Vec<&[u8]> = points.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
            let mut d = PduDecoder::new(DecoderConfig { framing, receive, max_data_len: max });
            let _ = run(&mut d, &chunks);
            prop_assert!(d.buffered() <= bytes.len());
            let _ = decode(&bytes, &DecoderConfig { framing, receive, max_data_len: max });
        }

        #[test]
        fn valid_prefix_then_garbage(
            pdus in proptest::collection::vec(strategies::pdu(C2H), 1..4),
            garbage in proptest::collection::vec(any::<u8>(), 1..200),
            framing in strategies::framing(),
        ) {
            // The valid PDUs come out; whatever follows yields an error, a PDU or a wait — never a panic.
            let mut bytes = stream(&pdus, &framing);
            bytes.extend_from_slice(&garbage);
            let mut d = PduDecoder::new(config(C2H, framing));
            let out = run(&mut d, &[&bytes]);
            for (i, p) in pdus.iter().enumerate() {
                prop_assert_eq!(out[i].as_ref().unwrap(), p);
            }
        }
    }
}
