//! The PDU-specific headers, one struct per PDU type (ICReq, ICResp, TermReq, CapsuleCmd, CapsuleResp,
//! H2CData, C2HData, R2T), and [`Pdu`], any of them typed.

use super::super::digest::DIGEST_LEN;
use super::{
    Direction, FatalErrorStatus, PduError, PduLayout, DGST_DDGST_ENABLE, DGST_HDGST_ENABLE, TERM_REQ_MAX_DATA_LEN,
};
use crate::nvme::cqe::CompletionQueueEntry;
use crate::nvme::sqe::SubmissionQueueEntry;

/// DGST field of ICReq / ICResp: the digests a side asks for (ICReq) or grants (ICResp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DigestTypes {
    /// HDGST_ENABLE (bit 0).
    pub hdgst_enable: bool,
    /// DDGST_ENABLE (bit 1).
    pub ddgst_enable: bool,
}

impl DigestTypes {
    pub(super) fn parse(value: u8, pdu: &'static str) -> Result<Self, PduError> {
        if value & !(DGST_HDGST_ENABLE | DGST_DDGST_ENABLE) != 0 {
            return Err(PduError::header_field(
                11,
                pdu,
                "DGST",
                value,
                "bits 0 (HDGST_ENABLE) and 1 (DDGST_ENABLE) only",
            ));
        }
        Ok(DigestTypes { hdgst_enable: value & DGST_HDGST_ENABLE != 0, ddgst_enable: value & DGST_DDGST_ENABLE != 0 })
    }

    /// The DGST byte.
    pub fn to_u8(self) -> u8 {
        (if self.hdgst_enable { DGST_HDGST_ENABLE } else { 0 })
            | (if self.ddgst_enable { DGST_DDGST_ENABLE } else { 0 })
    }
}

/// ICReq: Initialize Connection Request (NVMe/TCP 1.0 "ICReq"; Linux `struct nvme_tcp_icreq_pdu`), 128 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU Format Version (PFV, bytes 8-9): [`PFV_1_0`](super::PFV_1_0).
    pub pfv: u16,
    /// Host PDU Data Alignment (HPDA, byte 10): alignment for controller-to-host data, 0's based dwords,
    /// 0..=31.
    pub hpda: u8,
    /// Digests the host asks for (DGST, byte 11).
    pub dgst: DigestTypes,
    /// Maximum outstanding R2Ts per command (MAXR2T, bytes 12-15), 0's based.
    pub maxr2t: u32,
}

/// ICResp: Initialize Connection Response (NVMe/TCP 1.0 "ICResp"; Linux `struct nvme_tcp_icresp_pdu`), 128
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU Format Version (PFV, bytes 8-9): [`PFV_1_0`](super::PFV_1_0).
    pub pfv: u16,
    /// Controller PDU Data Alignment (CPDA, byte 10): alignment for host-to-controller data, 0's based
    /// dwords, 0..=31.
    pub cpda: u8,
    /// Digests enabled (DGST, byte 11).
    pub dgst: DigestTypes,
    /// Maximum data in one H2CData PDU (MAXH2CDATA, bytes 12-15): at least 4096, a multiple of 4.
    pub maxh2cdata: u32,
}

/// H2CTermReq / C2HTermReq: Terminate Connection Request (NVMe/TCP 1.0 "H2CTermReq", "C2HTermReq"; Linux
/// `struct nvme_tcp_term_pdu`): a 24-byte header followed, as data, by up to 128 bytes of the offending PDU
/// header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermReq {
    /// H2CTermReq (host to controller) or C2HTermReq (controller to host).
    pub direction: Direction,
    /// Fatal Error Status (FES, bytes 8-9).
    pub fes: FatalErrorStatus,
    /// Fatal Error Information (FEI, bytes 10-13): the offending field's byte offset for Invalid PDU
    /// Header Field and Unsupported Parameter.
    pub fei: u32,
}

impl TermReq {
    /// The data to send with this TermReq: the first [`TERM_REQ_MAX_DATA_LEN`] bytes of the offending PDU
    /// header.
    pub fn error_data(offending_header: &[u8]) -> &[u8] {
        &offending_header[..offending_header.len().min(TERM_REQ_MAX_DATA_LEN)]
    }
}

/// CapsuleCmd: a command capsule (NVMe/TCP 1.0 "CapsuleCmd"; Linux `struct nvme_tcp_cmd_pdu`): the 64-byte SQE
/// after the common header (HLEN 72), then optional in-capsule data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsuleCommand {
    /// The submission queue entry (bytes 8-71).
    pub sqe: SubmissionQueueEntry,
}

/// CapsuleResp: a response capsule (NVMe/TCP 1.0 "CapsuleResp"; Linux `struct nvme_tcp_rsp_pdu`): the 16-byte
/// CQE after the common header (HLEN 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsuleResponse {
    /// The completion queue entry (bytes 8-23).
    pub cqe: CompletionQueueEntry,
}

/// H2CData: host-to-controller data answering an R2T (NVMe/TCP 1.0 "H2CData"; Linux `struct
/// nvme_tcp_data_pdu`), HLEN 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2cData {
    /// Command Capsule CID (CCCID, bytes 8-9).
    pub cccid: u16,
    /// Transfer Tag from the R2T (TTAG, bytes 10-11).
    pub ttag: u16,
    /// Data Offset within the command's data (DATAO, bytes 12-15).
    pub datao: u32,
    /// Data Length (DATAL, bytes 16-19): PLEN - PDO - DDGST, at least 1.
    pub datal: u32,
    /// LAST_PDU flag: the last H2CData PDU for this R2T.
    pub last_pdu: bool,
}

/// C2HData: controller-to-host data (NVMe/TCP 1.0 "C2HData"; Linux `struct nvme_tcp_data_pdu`), HLEN 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct C2hData {
    /// Command Capsule CID (CCCID, bytes 8-9). Bytes 10-11 are reserved.
    pub cccid: u16,
    /// Data Offset within the command's data (DATAO, bytes 12-15).
    pub datao: u32,
    /// Data Length (DATAL, bytes 16-19): PLEN - PDO - DDGST, at least 1.
    pub datal: u32,
    /// LAST_PDU flag: the last C2HData PDU for this command.
    pub last_pdu: bool,
    /// SUCCESS flag (only with LAST_PDU): the command succeeded and no CapsuleResp follows.
    pub success: bool,
}

/// R2T: Ready to Transfer (NVMe/TCP 1.0 "R2T"; Linux `struct nvme_tcp_r2t_pdu`), HLEN 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// Command Capsule CID (CCCID, bytes 8-9).
    pub cccid: u16,
    /// Transfer Tag (TTAG, bytes 10-11), echoed in the H2CData PDUs.
    pub ttag: u16,
    /// R2T Offset within the command's data (R2TO, bytes 12-15).
    pub r2to: u32,
    /// R2T Length (R2TL, bytes 16-19): at least 1.
    pub r2tl: u32,
}

/// Any PDU's header, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pdu {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq or C2HTermReq.
    TermReq(TermReq),
    /// CapsuleCmd.
    CapsuleCommand(CapsuleCommand),
    /// CapsuleResp.
    CapsuleResponse(CapsuleResponse),
    /// H2CData.
    H2cData(H2cData),
    /// C2HData.
    C2hData(C2hData),
    /// R2T.
    R2t(R2t),
}

/// The result of [`Pdu::encode`]: send `header[..header_len]`, then the data, then `data_digest` if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedPdu {
    /// The layout; `layout.prefix_len()` bytes of header, header digest and padding were written.
    pub layout: PduLayout,
    /// DDGST to send after the data, when data digests apply.
    pub data_digest: Option<[u8; DIGEST_LEN]>,
}
