//! Parsing a PDU-specific header into a [`Pdu`] and encoding one: header, header digest and padding into the
//! caller's buffer, the data digest computed beside it.

use super::super::digest::{self, DIGEST_LEN};
use super::{
    C2hData, CapsuleCommand, CapsuleResponse, CommonHeader, DataRule, DigestTypes, Direction, EncodedPdu,
    FatalErrorStatus, Framing, H2cData, IcReq, IcResp, Pdu, PduError, PduLayout, PduType, R2t, TermReq,
    CAPSULE_COMMAND_HEADER_LEN, CAPSULE_RESPONSE_HEADER_LEN, COMMON_HEADER_LEN, DATA_HEADER_LEN, DIGEST_LEN_U32,
    FLAG_DDGSTF, FLAG_HDGSTF, FLAG_LAST_PDU, FLAG_SUCCESS, IC_PDU_LEN, MAX_ENCODED_HEADER_LEN, MAX_PDA, MIN_MAXH2CDATA,
    OFF_HLEN, PFV_1_0, R2T_HEADER_LEN, TERM_REQ_HEADER_LEN, TERM_REQ_MAX_DATA_LEN,
};
use crate::nvme::cqe::CompletionQueueEntry;
use crate::nvme::sqe::SubmissionQueueEntry;
use crate::wire::{fixed, le16, le32, put16, put32, WireError};

fn range_check(
    structure: &'static str,
    field: &'static str,
    offset: u32,
    length: u32,
    fei: u32,
) -> Result<(), PduError> {
    if offset.checked_add(length).is_none() {
        return Err(PduError::header_field(fei, structure, field, offset, "offset plus length within 32 bits"));
    }
    Ok(())
}

impl Pdu {
    /// The PDU's type.
    pub fn pdu_type(&self) -> PduType {
        match self {
            Pdu::IcReq(_) => PduType::IcReq,
            Pdu::IcResp(_) => PduType::IcResp,
            Pdu::TermReq(t) => match t.direction {
                Direction::HostToController => PduType::H2cTermReq,
                Direction::ControllerToHost => PduType::C2hTermReq,
            },
            Pdu::CapsuleCommand(_) => PduType::CapsuleCmd,
            Pdu::CapsuleResponse(_) => PduType::CapsuleResp,
            Pdu::H2cData(_) => PduType::H2cData,
            Pdu::C2hData(_) => PduType::C2hData,
            Pdu::R2t(_) => PduType::R2t,
        }
    }

    /// Parse a PDU header from the start of `buf` (which holds at least HLEN bytes): common header,
    /// layout checks against `framing` and `max_data_len`, and the PDU-specific header. Digests are not
    /// checked here (the decoder does that).
    pub fn parse(buf: &[u8], framing: &Framing, max_data_len: u32) -> Result<(Pdu, PduLayout), PduError> {
        let ch = CommonHeader::parse(buf)?;
        let layout = PduLayout::validate(&ch, framing, max_data_len)?;
        let pdu = Pdu::from_header(&ch, &layout, buf)?;
        Ok((pdu, layout))
    }

    /// Parse the PDU-specific header. `ch` and `layout` come from [`CommonHeader::parse`] and
    /// [`PduLayout::validate`] of the same bytes; `header` starts at the common header and holds at least
    /// HLEN bytes.
    pub fn from_header(ch: &CommonHeader, layout: &PduLayout, header: &[u8]) -> Result<Pdu, PduError> {
        let t = ch.pdu_type;
        let name = t.name();
        let short = |e| PduError::fatal(FatalErrorStatus::InvalidPduHeaderField, OFF_HLEN, e);
        match t {
            PduType::IcReq | PduType::IcResp => {
                let b = fixed::<IC_PDU_LEN>(header, name).map_err(short)?;
                let pfv = le16(b, 8);
                if pfv != PFV_1_0 {
                    return Err(PduError::header_field(8, name, "PFV", pfv, "0 (PDU format version 1.0)"));
                }
                let pda = b[10];
                if pda > MAX_PDA {
                    let field = if t == PduType::IcReq { "HPDA" } else { "CPDA" };
                    return Err(PduError::header_field(10, name, field, pda, "0..=31"));
                }
                let dgst = DigestTypes::parse(b[11], name)?;
                let value = le32(b, 12);
                if t == PduType::IcReq {
                    Ok(Pdu::IcReq(IcReq { pfv, hpda: pda, dgst, maxr2t: value }))
                } else {
                    if value < MIN_MAXH2CDATA || value % 4 != 0 {
                        return Err(PduError::header_field(
                            12,
                            name,
                            "MAXH2CDATA",
                            value,
                            "at least 4096 and a multiple of 4",
                        ));
                    }
                    Ok(Pdu::IcResp(IcResp { pfv, cpda: pda, dgst, maxh2cdata: value }))
                }
            }
            PduType::H2cTermReq | PduType::C2hTermReq => {
                let b = fixed::<TERM_REQ_HEADER_LEN>(header, name).map_err(short)?;
                let value = le16(b, 8);
                let fes = FatalErrorStatus::from_u16(value)
                    .ok_or_else(|| PduError::header_field(8, name, "FES", value, "0x01..=0x06"))?;
                Ok(Pdu::TermReq(TermReq { direction: t.direction(), fes, fei: le32(b, 10) }))
            }
            PduType::CapsuleCmd => {
                let b = fixed::<CAPSULE_COMMAND_HEADER_LEN>(header, name).map_err(short)?;
                let sqe = SubmissionQueueEntry::parse(&b[COMMON_HEADER_LEN..]).map_err(short)?;
                Ok(Pdu::CapsuleCommand(CapsuleCommand { sqe }))
            }
            PduType::CapsuleResp => {
                let b = fixed::<CAPSULE_RESPONSE_HEADER_LEN>(header, name).map_err(short)?;
                let cqe = CompletionQueueEntry::parse(&b[COMMON_HEADER_LEN..]).map_err(short)?;
                Ok(Pdu::CapsuleResponse(CapsuleResponse { cqe }))
            }
            PduType::H2cData | PduType::C2hData => {
                let b = fixed::<DATA_HEADER_LEN>(header, name).map_err(short)?;
                let (cccid, ttag, datao, datal) = (le16(b, 8), le16(b, 10), le32(b, 12), le32(b, 16));
                if usize::try_from(datal).ok() != Some(layout.data_len) {
                    return Err(PduError::header_field(16, name, "DATAL", datal, "PLEN - PDO - DDGST length"));
                }
                range_check(name, "DATAO", datao, datal, 12)?;
                let last_pdu = ch.flags & FLAG_LAST_PDU != 0;
                if t == PduType::H2cData {
                    Ok(Pdu::H2cData(H2cData { cccid, ttag, datao, datal, last_pdu }))
                } else {
                    let success = ch.flags & FLAG_SUCCESS != 0;
                    Ok(Pdu::C2hData(C2hData { cccid, datao, datal, last_pdu, success }))
                }
            }
            PduType::R2t => {
                let b = fixed::<R2T_HEADER_LEN>(header, name).map_err(short)?;
                let (cccid, ttag, r2to, r2tl) = (le16(b, 8), le16(b, 10), le32(b, 12), le32(b, 16));
                if r2tl == 0 {
                    return Err(PduError::header_field(16, name, "R2TL", r2tl, "at least 1"));
                }
                range_check(name, "R2TO", r2to, r2tl, 12)?;
                Ok(Pdu::R2t(R2t { cccid, ttag, r2to, r2tl }))
            }
        }
    }

    /// Type-specific FLAGS bits (LAST_PDU, SUCCESS).
    fn type_flags(&self) -> u8 {
        match self {
            Pdu::H2cData(d) if d.last_pdu => FLAG_LAST_PDU,
            Pdu::C2hData(d) => {
                (if d.last_pdu { FLAG_LAST_PDU } else { 0 }) | (if d.success { FLAG_SUCCESS } else { 0 })
            }
            _ => 0,
        }
    }

    /// Check the value is one [`Pdu::from_header`] would accept with `data_len` bytes of data.
    fn check_encodable(&self, data_len: usize) -> Result<(), WireError> {
        let name = self.pdu_type().name();
        let rule = self.pdu_type().data_rule();
        if rule == DataRule::Never && data_len != 0 {
            return Err(WireError::invalid(name, "data", u64::try_from(data_len).unwrap_or(u64::MAX), "none"));
        }
        match self {
            Pdu::IcReq(p) => {
                check_ic(name, p.pfv, p.hpda, "HPDA")?;
            }
            Pdu::IcResp(p) => {
                check_ic(name, p.pfv, p.cpda, "CPDA")?;
                if p.maxh2cdata < MIN_MAXH2CDATA || p.maxh2cdata % 4 != 0 {
                    return Err(WireError::invalid(
                        name,
                        "MAXH2CDATA",
                        p.maxh2cdata,
                        "at least 4096 and a multiple of 4",
                    ));
                }
            }
            Pdu::TermReq(_) if data_len > TERM_REQ_MAX_DATA_LEN => {
                return Err(WireError::invalid(
                    name,
                    "data",
                    u64::try_from(data_len).unwrap_or(u64::MAX),
                    "at most 128 bytes",
                ));
            }
            Pdu::H2cData(H2cData { datao, datal, .. }) | Pdu::C2hData(C2hData { datao, datal, .. }) => {
                if *datal == 0 || usize::try_from(*datal).ok() != Some(data_len) {
                    return Err(WireError::invalid(name, "DATAL", *datal, "the data length, at least 1"));
                }
                if datao.checked_add(*datal).is_none() {
                    return Err(WireError::invalid(name, "DATAO", *datao, "offset plus length within 32 bits"));
                }
            }
            Pdu::R2t(r) if r.r2tl == 0 || r.r2to.checked_add(r.r2tl).is_none() => {
                return Err(WireError::invalid(name, "R2TL", r.r2tl, "at least 1, with R2TO + R2TL within 32 bits"));
            }
            _ => {}
        }
        if let Pdu::C2hData(d) = self {
            if d.success && !d.last_pdu {
                return Err(WireError::invalid(name, "FLAGS", FLAG_SUCCESS, "SUCCESS only together with LAST_PDU"));
            }
        }
        Ok(())
    }

    /// Encode the header, header digest and padding for a PDU carrying `data_len` bytes of data into `out`
    /// (at most [`MAX_ENCODED_HEADER_LEN`] bytes are written; `out` needs `layout.prefix_len()`). The
    /// caller then sends `out[..layout.prefix_len()]`, the data from wherever it lives, and — if
    /// `layout.ddgst` — the data's [`digest::DataDigest`].
    ///
    /// Flags follow `framing` (HDGSTF when header digests apply, DDGSTF when data digests apply and there
    /// is data); PDO is the end of the header digest rounded up to the direction's PDA alignment (0 without
    /// data; TermReqs carry their data right after the header with PDO 0, as SPDK sends them).
    pub fn encode_header(&self, data_len: usize, framing: &Framing, out: &mut [u8]) -> Result<PduLayout, WireError> {
        self.check_encodable(data_len)?;
        let t = self.pdu_type();
        let name = t.name();
        let hlen = t.header_len();
        let hdgst = t.uses_digests() && framing.hdgst;
        let ddgst = t.uses_digests() && framing.ddgst && data_len > 0;
        let header_end = hlen + if hdgst { DIGEST_LEN } else { 0 };
        let (data_offset, pdo) = if t.is_term_req() || data_len == 0 {
            (header_end, 0)
        } else {
            let align = framing.alignment(t.direction());
            let pdo = header_end.div_ceil(align) * align;
            (pdo, pdo)
        };
        let plen = data_offset as u64 + data_len as u64 + if ddgst { u64::from(DIGEST_LEN_U32) } else { 0 };
        let plen = u32::try_from(plen).map_err(|_| WireError::invalid(name, "PLEN", plen, "at most u32::MAX"))?;
        let got = out.len();
        let out =
            out.get_mut(..data_offset).ok_or(WireError::OutputTooSmall { structure: name, need: data_offset, got })?;
        out.fill(0);
        let flags = self.type_flags() | if hdgst { FLAG_HDGSTF } else { 0 } | if ddgst { FLAG_DDGSTF } else { 0 };
        // HLEN and PDO are at most 128: they fit in a byte.
        let hlen_u8 = u8::try_from(hlen).map_err(|_| WireError::invalid(name, "HLEN", 0u8, "at most 255"))?;
        let pdo_u8 = u8::try_from(pdo).map_err(|_| WireError::invalid(name, "PDO", 0u8, "at most 255"))?;
        CommonHeader { pdu_type: t, flags, hlen: hlen_u8, pdo: pdo_u8, plen }.encode(out)?;
        let b = &mut out[..hlen];
        match self {
            Pdu::IcReq(p) => {
                put16(b, 8, p.pfv);
                b[10] = p.hpda;
                b[11] = p.dgst.to_u8();
                put32(b, 12, p.maxr2t);
            }
            Pdu::IcResp(p) => {
                put16(b, 8, p.pfv);
                b[10] = p.cpda;
                b[11] = p.dgst.to_u8();
                put32(b, 12, p.maxh2cdata);
            }
            Pdu::TermReq(p) => {
                put16(b, 8, p.fes.to_u16());
                put32(b, 10, p.fei);
            }
            Pdu::CapsuleCommand(p) => p.sqe.encode(&mut b[COMMON_HEADER_LEN..])?,
            Pdu::CapsuleResponse(p) => p.cqe.encode(&mut b[COMMON_HEADER_LEN..])?,
            Pdu::H2cData(p) => {
                put16(b, 8, p.cccid);
                put16(b, 10, p.ttag);
                put32(b, 12, p.datao);
                put32(b, 16, p.datal);
            }
            Pdu::C2hData(p) => {
                put16(b, 8, p.cccid);
                put32(b, 12, p.datao);
                put32(b, 16, p.datal);
            }
            Pdu::R2t(p) => {
                put16(b, 8, p.cccid);
                put16(b, 10, p.ttag);
                put32(b, 12, p.r2to);
                put32(b, 16, p.r2tl);
            }
        }
        if hdgst {
            let d = digest::digest_to_bytes(digest::header_digest(&out[..hlen]));
            out[hlen..hlen + DIGEST_LEN].copy_from_slice(&d);
        }
        let plen = usize::try_from(plen).unwrap_or(usize::MAX);
        Ok(PduLayout { pdu_type: t, hlen, hdgst, data_offset, data_len, ddgst, plen })
    }

    /// Encode the header like [`Pdu::encode_header`] and compute the data digest over `data`.
    pub fn encode(&self, data: &[u8], framing: &Framing, out: &mut [u8]) -> Result<EncodedPdu, WireError> {
        let layout = self.encode_header(data.len(), framing, out)?;
        let data_digest = layout.ddgst.then(|| digest::digest_to_bytes(digest::crc32c(data)));
        Ok(EncodedPdu { layout, data_digest })
    }

    /// The whole PDU — header, digests, padding and `data` — as one buffer (allocates; for tests, tools and
    /// the rare control PDU).
    pub fn to_bytes(&self, data: &[u8], framing: &Framing) -> Result<Vec<u8>, WireError> {
        let mut header = [0u8; MAX_ENCODED_HEADER_LEN];
        let enc = self.encode(data, framing, &mut header)?;
        let mut v = Vec::with_capacity(enc.layout.plen);
        v.extend_from_slice(&header[..enc.layout.prefix_len()]);
        v.extend_from_slice(data);
        if let Some(d) = enc.data_digest {
            v.extend_from_slice(&d);
        }
        Ok(v)
    }
}

fn check_ic(name: &'static str, pfv: u16, pda: u8, pda_field: &'static str) -> Result<(), WireError> {
    if pfv != PFV_1_0 {
        return Err(WireError::invalid(name, "PFV", pfv, "0 (PDU format version 1.0)"));
    }
    if pda > MAX_PDA {
        return Err(WireError::invalid(name, pda_field, pda, "0..=31"));
    }
    Ok(())
}
