//! The PDU-Type byte and what each type allows: its direction, header length, FLAGS bits, digests and data.

use super::{
    Direction, CAPSULE_COMMAND_HEADER_LEN, CAPSULE_RESPONSE_HEADER_LEN, DATA_HEADER_LEN, FLAG_DDGSTF, FLAG_HDGSTF,
    FLAG_LAST_PDU, FLAG_SUCCESS, IC_PDU_LEN, R2T_HEADER_LEN, TERM_REQ_HEADER_LEN,
};

/// PDU-Type, byte 0 of the common header (Linux `enum nvme_tcp_pdu_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PduType {
    /// ICReq (0x00): Initialize Connection Request.
    IcReq,
    /// ICResp (0x01): Initialize Connection Response.
    IcResp,
    /// H2CTermReq (0x02): host-to-controller Terminate Connection Request.
    H2cTermReq,
    /// C2HTermReq (0x03): controller-to-host Terminate Connection Request.
    C2hTermReq,
    /// CapsuleCmd (0x04): command capsule.
    CapsuleCmd,
    /// CapsuleResp (0x05): response capsule.
    CapsuleResp,
    /// H2CData (0x06): host-to-controller data.
    H2cData,
    /// C2HData (0x07): controller-to-host data.
    C2hData,
    /// R2T (0x09): Ready to Transfer.
    R2t,
}

/// Whether a PDU type carries data after its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DataRule {
    Never,
    Optional,
    Required,
}

impl PduType {
    /// The type for the PDU-Type byte, if it names one.
    pub fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2cTermReq,
            0x03 => PduType::C2hTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2cData,
            0x07 => PduType::C2hData,
            0x09 => PduType::R2t,
            _ => return None,
        })
    }

    /// The PDU-Type byte.
    pub fn to_u8(self) -> u8 {
        match self {
            PduType::IcReq => 0x00,
            PduType::IcResp => 0x01,
            PduType::H2cTermReq => 0x02,
            PduType::C2hTermReq => 0x03,
            PduType::CapsuleCmd => 0x04,
            PduType::CapsuleResp => 0x05,
            PduType::H2cData => 0x06,
            PduType::C2hData => 0x07,
            PduType::R2t => 0x09,
        }
    }

    /// The spec's name of the PDU.
    pub fn name(self) -> &'static str {
        match self {
            PduType::IcReq => "ICReq",
            PduType::IcResp => "ICResp",
            PduType::H2cTermReq => "H2CTermReq",
            PduType::C2hTermReq => "C2HTermReq",
            PduType::CapsuleCmd => "CapsuleCmd",
            PduType::CapsuleResp => "CapsuleResp",
            PduType::H2cData => "H2CData",
            PduType::C2hData => "C2HData",
            PduType::R2t => "R2T",
        }
    }

    /// The fixed header length (HLEN) of this type.
    pub fn header_len(self) -> usize {
        match self {
            PduType::IcReq | PduType::IcResp => IC_PDU_LEN,
            PduType::H2cTermReq | PduType::C2hTermReq => TERM_REQ_HEADER_LEN,
            PduType::CapsuleCmd => CAPSULE_COMMAND_HEADER_LEN,
            PduType::CapsuleResp => CAPSULE_RESPONSE_HEADER_LEN,
            PduType::H2cData | PduType::C2hData => DATA_HEADER_LEN,
            PduType::R2t => R2T_HEADER_LEN,
        }
    }

    /// Which way this PDU type travels.
    pub fn direction(self) -> Direction {
        match self {
            PduType::IcReq | PduType::H2cTermReq | PduType::CapsuleCmd | PduType::H2cData => {
                Direction::HostToController
            }
            PduType::IcResp | PduType::C2hTermReq | PduType::CapsuleResp | PduType::C2hData | PduType::R2t => {
                Direction::ControllerToHost
            }
        }
    }

    /// Whether negotiated header and data digests apply to this type. They never apply to ICReq/ICResp
    /// (sent before they are negotiated) nor to the TermReqs (which may report a digest error).
    pub fn uses_digests(self) -> bool {
        !matches!(self, PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq)
    }

    /// FLAGS bits this type may carry.
    pub(super) fn allowed_flags(self) -> u8 {
        match self {
            PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq => 0,
            PduType::CapsuleCmd => FLAG_HDGSTF | FLAG_DDGSTF,
            PduType::CapsuleResp | PduType::R2t => FLAG_HDGSTF,
            PduType::H2cData => FLAG_HDGSTF | FLAG_DDGSTF | FLAG_LAST_PDU,
            PduType::C2hData => FLAG_HDGSTF | FLAG_DDGSTF | FLAG_LAST_PDU | FLAG_SUCCESS,
        }
    }

    pub(super) fn data_rule(self) -> DataRule {
        match self {
            PduType::IcReq | PduType::IcResp | PduType::CapsuleResp | PduType::R2t => DataRule::Never,
            PduType::H2cTermReq | PduType::C2hTermReq | PduType::CapsuleCmd => DataRule::Optional,
            PduType::H2cData | PduType::C2hData => DataRule::Required,
        }
    }

    pub(super) fn is_term_req(self) -> bool {
        matches!(self, PduType::H2cTermReq | PduType::C2hTermReq)
    }
}
