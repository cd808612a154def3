//! NVMe/TCP (NVMe/TCP Transport Specification 1.0): PDUs, digests and a streaming PDU decoder.
#![forbid(unsafe_code)]

pub mod decoder;
pub mod digest;
pub mod pdu;
