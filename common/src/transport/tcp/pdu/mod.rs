//! NVMe/TCP PDUs: the common header and every PDU type.
//!
//! NVMe/TCP Transport Specification 1.0, "PDU Definitions"; byte layouts as in Linux
//! `include/linux/nvme-tcp.h` (`struct nvme_tcp_hdr`, `nvme_tcp_icreq_pdu`, `nvme_tcp_icresp_pdu`,
//! `nvme_tcp_term_pdu`, `nvme_tcp_cmd_pdu`, `nvme_tcp_rsp_pdu`, `nvme_tcp_r2t_pdu`, `nvme_tcp_data_pdu`).
//!
//! A PDU on the wire is
//!
//! ```text
//! | CH (8 B) | PSH (HLEN - 8) | HDGST (4 B)? | PAD (to PDO)? | DATA? | DDGST (4 B)? |
//! 0                          HLEN                           PDO                  PLEN
//! ```
//!
//! Parsing is split so that a receiver can reject a PDU as early as possible:
//! 1. [`CommonHeader::parse`] needs 8 bytes and checks the PDU type and that HLEN is the type's;
//! 2. [`PduLayout::validate`] checks flags, PLEN and PDO against the negotiated [`Framing`] and the
//!    receiver's maximum data length, and says where header digest, data and data digest lie — all before
//!    a single byte past the common header is buffered;
//! 3. [`Pdu::from_header`] parses the PDU-specific header (HLEN bytes) into a typed [`Pdu`].
//!
//! [`Pdu::parse`] runs all three. Digests are verified by the decoder ([`super::decoder`]).
//!
//! Encoding ([`Pdu::encode_header`]) writes the header, header digest and padding into a caller's buffer and
//! returns the [`PduLayout`], so the data can be sent from its own buffer (vectored send: header bytes,
//! data, data digest) without being copied. [`Pdu::encode`] also computes the data digest.
//!
//! Errors are [`PduError`]s: fatal ones carry the Fatal Error Status and Fatal Error Information the
//! receiver puts in its H2CTermReq / C2HTermReq ([`PduError::term_req`]).
//!
//! PDU data alignment: HPDA (sent by the host in ICReq) is the alignment the host wants for data in PDUs it
//! *receives* (controller-to-host: C2HData); CPDA (sent by the controller in ICResp) is the alignment the
//! controller wants for PDUs it receives (host-to-controller: CapsuleCmd with in-capsule data, H2CData).
//! [`Framing::alignment`] picks the one that applies to a direction.
//!
//! This module holds the sizes, flag bits and [`Direction`]; the children hold one idea each, re-exported
//! here: `pdu_type` ([`PduType`] and its rules), `error` ([`PduError`], [`FatalErrorStatus`]), `layout`
//! ([`Framing`], [`CommonHeader`], [`PduLayout`]), `headers` (the PDU-specific headers and [`Pdu`]) and
//! `codec` (parsing and encoding a [`Pdu`]).

use crate::nvme::cqe::CQE_SIZE;
use crate::nvme::sqe::SQE_SIZE;

mod codec;
mod error;
mod headers;
mod layout;
mod pdu_type;
#[cfg(test)]
pub(crate) mod strategies;
#[cfg(test)]
mod tests;

pub use error::{FatalErrorStatus, PduError};
pub use headers::{
    C2hData, CapsuleCommand, CapsuleResponse, DigestTypes, EncodedPdu, H2cData, IcReq, IcResp, Pdu, R2t, TermReq,
};
pub use layout::{CommonHeader, Framing, PduLayout};
use pdu_type::DataRule;
pub use pdu_type::PduType;

/// Length of the common header (`struct nvme_tcp_hdr`).
pub const COMMON_HEADER_LEN: usize = 8;
/// HLEN (and PLEN) of ICReq and ICResp (`struct nvme_tcp_icreq_pdu`, `nvme_tcp_icresp_pdu`).
pub const IC_PDU_LEN: usize = 128;
/// HLEN of H2CTermReq and C2HTermReq (`struct nvme_tcp_term_pdu`).
pub const TERM_REQ_HEADER_LEN: usize = 24;
/// Most bytes of the offending PDU header a TermReq carries as data (PLEN at most 152; Linux
/// `NVME_TCP_MAX_C2HTERM_PLEN`, SPDK `SPDK_NVME_TCP_TERM_REQ_ERROR_DATA_MAX_SIZE`).
pub const TERM_REQ_MAX_DATA_LEN: usize = 128;
/// HLEN of CapsuleCmd: common header and the 64-byte SQE (`struct nvme_tcp_cmd_pdu`).
pub const CAPSULE_COMMAND_HEADER_LEN: usize = COMMON_HEADER_LEN + SQE_SIZE;
/// HLEN of CapsuleResp: common header and the 16-byte CQE (`struct nvme_tcp_rsp_pdu`).
pub const CAPSULE_RESPONSE_HEADER_LEN: usize = COMMON_HEADER_LEN + CQE_SIZE;
/// HLEN of H2CData and C2HData (`struct nvme_tcp_data_pdu`).
pub const DATA_HEADER_LEN: usize = 24;
/// HLEN of R2T (`struct nvme_tcp_r2t_pdu`).
pub const R2T_HEADER_LEN: usize = 24;
/// Largest HPDA / CPDA (0's based dwords: 128-byte alignment).
pub const MAX_PDA: u8 = 31;
/// Smallest MAXH2CDATA a controller may offer in ICResp (Linux `NVME_TCP_MIN_MAXH2CDATA`).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// PDU Format Version 1.0 (PFV, Linux `NVME_TCP_PFV_1_0`).
pub const PFV_1_0: u16 = 0;
/// Most bytes [`Pdu::encode_header`] writes (header, header digest and padding up to PDO): a CapsuleCmd
/// with header digest (76 bytes) padded to a 72-byte alignment (CPDA 17) starts its data at 144.
pub const MAX_ENCODED_HEADER_LEN: usize = 144;

// An ICReq/ICResp (128 bytes, no padding) fits too.
const _: () = assert!(MAX_ENCODED_HEADER_LEN >= IC_PDU_LEN);

/// Common header FLAGS bit: a header digest follows the header (HDGSTF, Linux `NVME_TCP_F_HDGST`).
pub const FLAG_HDGSTF: u8 = 0x01;
/// Common header FLAGS bit: a data digest follows the data (DDGSTF, Linux `NVME_TCP_F_DDGST`).
pub const FLAG_DDGSTF: u8 = 0x02;
/// H2CData / C2HData FLAGS bit: last data PDU of the transfer (LAST_PDU, Linux `NVME_TCP_F_DATA_LAST`).
pub const FLAG_LAST_PDU: u8 = 0x04;
/// C2HData FLAGS bit: the command completed successfully and no CapsuleResp follows (SUCCESS, Linux
/// `NVME_TCP_F_DATA_SUCCESS`); only together with LAST_PDU.
pub const FLAG_SUCCESS: u8 = 0x08;

/// ICReq / ICResp DGST bit: header digests enabled (Linux `NVME_TCP_HDR_DIGEST_ENABLE`).
pub const DGST_HDGST_ENABLE: u8 = 0x01;
/// ICReq / ICResp DGST bit: data digests enabled (Linux `NVME_TCP_DATA_DIGEST_ENABLE`).
pub const DGST_DDGST_ENABLE: u8 = 0x02;

// Byte offsets of common header fields: the FEI of an Invalid PDU Header Field error.
const OFF_PDU_TYPE: u32 = 0;
const OFF_FLAGS: u32 = 1;
const OFF_HLEN: u32 = 2;
const OFF_PDO: u32 = 3;
const OFF_PLEN: u32 = 4;

const DIGEST_LEN_U32: u32 = 4;

/// The direction a PDU travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host to controller (ICReq, H2CTermReq, CapsuleCmd, H2CData).
    HostToController,
    /// Controller to host (ICResp, C2HTermReq, CapsuleResp, C2HData, R2T).
    ControllerToHost,
}
