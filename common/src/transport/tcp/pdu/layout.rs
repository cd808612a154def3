//! The negotiated [`Framing`], the [`CommonHeader`] of every PDU, and the [`PduLayout`] a receiver checks it
//! against: where header digest, padding, data and data digest lie, known from the common header alone.

use std::ops::Range;

use super::super::digest::DIGEST_LEN;
use super::{
    DataRule, Direction, FatalErrorStatus, PduError, PduType, COMMON_HEADER_LEN, FLAG_DDGSTF, FLAG_HDGSTF,
    FLAG_LAST_PDU, FLAG_SUCCESS, MAX_PDA, OFF_FLAGS, OFF_HLEN, OFF_PDO, OFF_PDU_TYPE, OFF_PLEN, TERM_REQ_MAX_DATA_LEN,
};
use crate::wire::{fixed, fixed_mut, le32, put32, WireError};

/// What a connection negotiated in ICReq / ICResp and that shapes every later PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Framing {
    /// Header digests enabled (both sides asked for HDGST_ENABLE).
    pub hdgst: bool,
    /// Data digests enabled.
    pub ddgst: bool,
    /// Host PDU Data Alignment from ICReq: applies to controller-to-host PDUs (0's based dwords, 0..=31).
    pub hpda: u8,
    /// Controller PDU Data Alignment from ICResp: applies to host-to-controller PDUs.
    pub cpda: u8,
}

impl Framing {
    /// The alignment in bytes, `(PDA + 1) * 4`, that PDO must have for data PDUs travelling `direction`.
    /// PDA values above [`MAX_PDA`] (rejected in ICReq/ICResp) are treated as [`MAX_PDA`].
    pub fn alignment(&self, direction: Direction) -> usize {
        let pda = match direction {
            Direction::ControllerToHost => self.hpda,
            Direction::HostToController => self.cpda,
        };
        (usize::from(pda.min(MAX_PDA)) + 1) * 4
    }
}

/// Common header of every PDU (CH, 8 bytes; Linux `struct nvme_tcp_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU-Type (byte 0).
    pub pdu_type: PduType,
    /// FLAGS (byte 1): [`FLAG_HDGSTF`], [`FLAG_DDGSTF`], [`FLAG_LAST_PDU`], [`FLAG_SUCCESS`].
    pub flags: u8,
    /// Header Length (HLEN, byte 2): always the type's [`PduType::header_len`].
    pub hlen: u8,
    /// PDU Data Offset (PDO, byte 3): where data starts, 0 if none.
    pub pdo: u8,
    /// PDU Length (PLEN, bytes 4-7): the whole PDU, header to data digest.
    pub plen: u32,
}

impl CommonHeader {
    /// Parse the first 8 bytes of `buf`, checking that the PDU type is known and that HLEN is its header
    /// length. Returns a fatal error (Invalid PDU Header Field, FEI 0 or 2) otherwise.
    pub fn parse(buf: &[u8]) -> Result<Self, PduError> {
        let b = fixed::<COMMON_HEADER_LEN>(buf, "NVMe/TCP common header")
            .map_err(|e| PduError::fatal(FatalErrorStatus::InvalidPduHeaderField, 0, e))?;
        let pdu_type = PduType::from_u8(b[0]).ok_or_else(|| {
            PduError::header_field(OFF_PDU_TYPE, "NVMe/TCP common header", "PDU-Type", b[0], "0x00..=0x07 or 0x09")
        })?;
        let hlen = b[2];
        if usize::from(hlen) != pdu_type.header_len() {
            return Err(PduError::header_field(
                OFF_HLEN,
                pdu_type.name(),
                "HLEN",
                hlen,
                "the PDU type's header length",
            ));
        }
        Ok(CommonHeader { pdu_type, flags: b[1], hlen, pdo: b[3], plen: le32(b, 4) })
    }

    /// Encode into the first 8 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<COMMON_HEADER_LEN>(buf, "NVMe/TCP common header")?;
        b[0] = self.pdu_type.to_u8();
        b[1] = self.flags;
        b[2] = self.hlen;
        b[3] = self.pdo;
        put32(b, 4, self.plen);
        Ok(())
    }

    /// HDGSTF: a header digest follows the header.
    pub fn hdgstf(&self) -> bool {
        self.flags & FLAG_HDGSTF != 0
    }

    /// DDGSTF: a data digest follows the data.
    pub fn ddgstf(&self) -> bool {
        self.flags & FLAG_DDGSTF != 0
    }
}

/// Where the parts of one PDU lie, as offsets from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduLayout {
    /// The PDU type.
    pub pdu_type: PduType,
    /// Header length (HLEN).
    pub hlen: usize,
    /// Whether a header digest follows the header (at `hlen`).
    pub hdgst: bool,
    /// Where data starts (PDO, or the end of the header for TermReqs); equal to [`PduLayout::header_end`]
    /// when there is no data.
    pub data_offset: usize,
    /// Data length (0 if none).
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub ddgst: bool,
    /// The whole PDU's length (PLEN).
    pub plen: usize,
}

impl PduLayout {
    /// End of the header and its digest: the bytes needed to parse and check the header.
    pub fn header_end(&self) -> usize {
        self.hlen + if self.hdgst { DIGEST_LEN } else { 0 }
    }

    /// The data's byte range within the PDU.
    pub fn data_range(&self) -> Range<usize> {
        self.data_offset..self.data_offset + self.data_len
    }

    /// Bytes before the data: header, header digest and padding (what [`Pdu::encode_header`](super::Pdu::encode_header)
    /// writes).
    pub fn prefix_len(&self) -> usize {
        self.data_offset
    }

    /// Check a received common header against the negotiated `framing` and the receiver's largest
    /// acceptable data length, and compute the layout. Needs only the common header, so an absurd PLEN is
    /// rejected before anything else is buffered.
    ///
    /// Rules (NVMe/TCP 1.0, "Common Header" and each PDU's figure): FLAGS only holds the bits the type
    /// allows, SUCCESS only with LAST_PDU; HDGSTF is set exactly when header digests were negotiated and the
    /// type uses digests; DDGSTF exactly when data digests were negotiated and the PDU has data; PLEN is
    /// HLEN (+ HDGST) for types without data and covers the data for the others; with data, PDO is at or
    /// after the header digest and a multiple of the direction's PDA alignment, without data PDO is 0;
    /// H2CData/C2HData carry at least one byte; TermReqs carry at most 128 bytes and PDO 0 or HLEN. Data
    /// longer than `max_data_len` is a Data Transfer Limit Exceeded error.
    pub fn validate(ch: &CommonHeader, framing: &Framing, max_data_len: u32) -> Result<Self, PduError> {
        let t = ch.pdu_type;
        let name = t.name();
        let hlen = usize::from(ch.hlen);
        if ch.flags & !t.allowed_flags() != 0 {
            return Err(PduError::header_field(
                OFF_FLAGS,
                name,
                "FLAGS",
                ch.flags,
                "only the bits this PDU type defines",
            ));
        }
        if ch.flags & FLAG_SUCCESS != 0 && ch.flags & FLAG_LAST_PDU == 0 {
            return Err(PduError::header_field(
                OFF_FLAGS,
                name,
                "FLAGS",
                ch.flags,
                "SUCCESS only together with LAST_PDU",
            ));
        }
        let hdgst = t.uses_digests() && framing.hdgst;
        if ch.hdgstf() != hdgst {
            return Err(PduError::header_field(
                OFF_FLAGS,
                name,
                "FLAGS",
                ch.flags,
                "HDGSTF set exactly when header digests were negotiated",
            ));
        }
        let header_end = hlen + if hdgst { DIGEST_LEN } else { 0 };
        // PLEN fits in usize on every platform this crate supports; saturate rather than assume.
        let plen = usize::try_from(ch.plen).unwrap_or(usize::MAX);
        let max_data = usize::try_from(max_data_len).unwrap_or(usize::MAX);
        if plen < header_end {
            return Err(PduError::header_field(
                OFF_PLEN,
                name,
                "PLEN",
                ch.plen,
                "at least HLEN plus the header digest",
            ));
        }
        let has_data = plen > header_end;
        match t.data_rule() {
            DataRule::Never if has_data => {
                return Err(PduError::header_field(
                    OFF_PLEN,
                    name,
                    "PLEN",
                    ch.plen,
                    "HLEN plus the header digest (this PDU carries no data)",
                ));
            }
            DataRule::Required if !has_data => {
                return Err(PduError::header_field(
                    OFF_PLEN,
                    name,
                    "PLEN",
                    ch.plen,
                    "room for at least one byte of data",
                ));
            }
            _ => {}
        }

        if t.is_term_req() {
            let data_len = plen - hlen;
            if data_len > TERM_REQ_MAX_DATA_LEN {
                return Err(PduError::header_field(OFF_PLEN, name, "PLEN", ch.plen, "at most 152"));
            }
            if ch.pdo != 0 && !(has_data && usize::from(ch.pdo) == hlen) {
                return Err(PduError::header_field(OFF_PDO, name, "PDO", ch.pdo, "0, or HLEN when error data follows"));
            }
            return Ok(PduLayout { pdu_type: t, hlen, hdgst, data_offset: hlen, data_len, ddgst: false, plen });
        }

        if !has_data {
            if ch.pdo != 0 {
                return Err(PduError::header_field(OFF_PDO, name, "PDO", ch.pdo, "0 when the PDU carries no data"));
            }
            if ch.ddgstf() {
                return Err(PduError::header_field(
                    OFF_FLAGS,
                    name,
                    "FLAGS",
                    ch.flags,
                    "DDGSTF only on PDUs with data",
                ));
            }
            return Ok(PduLayout {
                pdu_type: t,
                hlen,
                hdgst,
                data_offset: header_end,
                data_len: 0,
                ddgst: false,
                plen,
            });
        }

        let ddgst = framing.ddgst;
        if ch.ddgstf() != ddgst {
            return Err(PduError::header_field(
                OFF_FLAGS,
                name,
                "FLAGS",
                ch.flags,
                "DDGSTF set exactly when data digests were negotiated and the PDU has data",
            ));
        }
        let pdo = usize::from(ch.pdo);
        if pdo < header_end {
            return Err(PduError::header_field(OFF_PDO, name, "PDO", ch.pdo, "at least HLEN plus the header digest"));
        }
        if pdo % framing.alignment(t.direction()) != 0 {
            return Err(PduError::header_field(
                OFF_PDO,
                name,
                "PDO",
                ch.pdo,
                "a multiple of the negotiated PDA alignment",
            ));
        }
        let tail = if ddgst { DIGEST_LEN } else { 0 };
        if plen <= pdo + tail {
            return Err(PduError::header_field(
                OFF_PLEN,
                name,
                "PLEN",
                ch.plen,
                "greater than PDO plus the data digest (data follows PDO)",
            ));
        }
        let data_len = plen - pdo - tail;
        if data_len > max_data {
            return Err(PduError::fatal(
                FatalErrorStatus::DataTransferLimitExceeded,
                0,
                WireError::invalid(name, "PLEN", ch.plen, "data no longer than the receiver's limit"),
            ));
        }
        Ok(PduLayout { pdu_type: t, hlen, hdgst, data_offset: pdo, data_len, ddgst, plen })
    }
}
