//! NVMe/TCP (NVMe/TCP Transport Specification 1.0): PDUs, digests and a streaming PDU decoder.
//!
//! This module is the wire layer of the TCP transport: it owns byte layouts and framing rules and nothing
//! else — no sockets, no queue state, no command semantics. It never blocks and never allocates on the
//! parse path (the streaming decoder reuses one buffer per connection).
//!
//! - [`pdu`]: the common header, every PDU type ([`IcReq`], [`IcResp`], [`TermReq`], [`CapsuleCommand`],
//!   [`CapsuleResponse`], [`H2cData`], [`C2hData`], [`R2t`]), the negotiated [`Framing`] (digests, PDU data
//!   alignment) and the [`PduError`]s whose Fatal Error Status and Information go into a TermReq. Encoding
//!   writes only the header (with digest and padding) so the data is sent from its own buffer.
//! - [`digest`]: CRC32C header and data digests, including a streaming [`DataDigest`].
//! - [`decoder`]: [`decode`] parses one PDU in place from a receive buffer; [`PduDecoder`] accepts bytes
//!   split anywhere and yields whole PDUs, zero-copy when a PDU arrives in one piece.
//!
//! What the layer does *not* check, because it needs connection state: that ICReq/ICResp come first and
//! once (PDU Sequence Error), that CCCID/TTAG name a live command and R2T, that DATAO/DATAL stay inside the
//! command's transfer (Data Transfer Out of Range), and MAXR2T / MAXH2CDATA limits per command.
#![forbid(unsafe_code)]

pub mod decoder;
pub mod digest;
pub mod pdu;

pub use decoder::{decode, Decoded, DecoderConfig, Feed, PduDecoder, ReceivedPdu};
pub use digest::{DataDigest, DigestMismatch, DIGEST_LEN};
pub use pdu::{
    C2hData, CapsuleCommand, CapsuleResponse, CommonHeader, DigestTypes, Direction, EncodedPdu, FatalErrorStatus,
    Framing, H2cData, IcReq, IcResp, Pdu, PduError, PduLayout, PduType, R2t, TermReq,
};
