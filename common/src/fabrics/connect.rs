//! Fabrics Connect: the command view and the 1024-byte Connect data.
//!
//! NVMe over Fabrics 1.1 §3.3 (Figures 19-21) / NVMe Base 2.0 §6.3; Linux `struct nvmf_connect_command`
//! and `struct nvmf_connect_data` in `include/linux/nvme.h`, SPDK `struct spdk_nvmf_fabric_connect_cmd`.
//!
//! | SQE byte | field |
//! |---|---|
//! | 0 | opcode 0x7F |
//! | 4 | fctype 0x01 |
//! | 24..40 | SGL1, describing the 1024-byte Connect data |
//! | 40 | recfmt (u16, must be 0) |
//! | 42 | qid (u16, 0 = admin queue) |
//! | 44 | sqsize (u16, 0's based, 0 is invalid) |
//! | 46 | cattr (u8; bit 2 = disable SQ flow control) |
//! | 48 | kato (u32, milliseconds) |
//!
//! Connect data: `hostid[16]` @0, cntlid u16 @16 (0xFFFF asks for a dynamic controller), `subnqn[256]` @256,
//! `hostnqn[256]` @512, the rest reserved.
//!
//! The completion's dword 0 is command specific: on success it holds the controller ID and the
//! authentication requirements ([`ConnectResponse`]); with status Connect Invalid Parameters it says
//! which field was at fault ([`InvalidParameter`]). [`connect_error_response`] turns a parse error of
//! this module into the status and dword 0 to send.

use super::nqn::{Nqn, NQN_FIELD_LEN};
use crate::nvme::opcode::{fctype, FABRICS};
use crate::nvme::{SglDescriptor, Status, SubmissionQueueEntry};
use crate::wire::{fixed, fixed_mut, le16, put16, WireError};

const STRUCTURE: &str = "Connect";
const DATA_STRUCTURE: &str = "ConnectData";

/// Size of the Connect data (NVMe-oF 1.1 Figure 20).
pub const CONNECT_DATA_SIZE: usize = 1024;

/// The only Connect record format defined (`recfmt` 0).
pub const CONNECT_RECFMT: u16 = 0;

/// Controller ID a host puts in admin-queue Connect data to ask for any controller (dynamic model;
/// Linux `NVME_CNTLID_DYNAMIC`).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// `cattr` bit 2: disable SQ flow control (Linux `NVME_CONNECT_DISABLE_SQFLOW`).
pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;

/// Byte offsets of the Connect SQE fields, as reported in [`InvalidParameter::ipo`] (Linux
/// `IPO_IATTR_CONNECT_SQE`).
pub mod sqe_offset {
    /// `recfmt`.
    pub const RECFMT: u16 = 40;
    /// `qid`.
    pub const QID: u16 = 42;
    /// `sqsize`.
    pub const SQSIZE: u16 = 44;
    /// `cattr`.
    pub const CATTR: u16 = 46;
    /// `kato`.
    pub const KATO: u16 = 48;
}

/// Byte offsets of the Connect data fields, as reported in [`InvalidParameter::ipo`] (Linux
/// `IPO_IATTR_CONNECT_DATA`).
pub mod data_offset {
    /// `hostid`.
    pub const HOSTID: u16 = 0;
    /// `cntlid`.
    pub const CNTLID: u16 = 16;
    /// `subnqn`.
    pub const SUBNQN: u16 = 256;
    /// `hostnqn`.
    pub const HOSTNQN: u16 = 512;
}

/// The Connect command (NVMe-oF 1.1 Figure 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// Queue Identifier: 0 for the admin queue, else the I/O queue to create.
    pub qid: u16,
    /// Submission Queue Size, 0's based (never 0).
    pub sqsize: u16,
    /// Connect Attributes (bit 2: [`CATTR_DISABLE_SQ_FLOW_CONTROL`]).
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (admin queue only; 0 disables the timer).
    pub kato: u32,
    /// SGL Descriptor 1, describing the Connect data; its length is 1024.
    pub sgl1: SglDescriptor,
}

impl Connect {
    /// Parse a Connect SQE. Errors name the offending field: `opcode`, `fctype`, `recfmt` (the target
    /// answers Connect Incompatible Format), `sqsize` (0 is invalid), `sgl1.length` (must be 1024), or
    /// an [`SglDescriptor`] field. See [`connect_error_response`].
    pub fn from_sqe(sqe: &SubmissionQueueEntry) -> Result<Self, WireError> {
        sqe.expect_fabrics(fctype::CONNECT, STRUCTURE, "0x01 (Connect)")?;
        #[expect(clippy::cast_possible_truncation, reason = "splitting dwords into their 16- and 8-bit fields")]
        let (recfmt, qid, sqsize, cattr) =
            (sqe.cdw10 as u16, (sqe.cdw10 >> 16) as u16, sqe.cdw11 as u16, (sqe.cdw11 >> 16) as u8);
        if recfmt != CONNECT_RECFMT {
            return Err(WireError::invalid(STRUCTURE, "recfmt", recfmt, "0"));
        }
        if sqsize == 0 {
            return Err(WireError::invalid(STRUCTURE, "sqsize", sqsize, "1..=65535 (0's based)"));
        }
        let sgl1 = sqe.sgl1()?;
        if sgl1.length() != 1024 {
            return Err(WireError::invalid(STRUCTURE, "sgl1.length", sgl1.length(), "1024"));
        }
        Ok(Connect { qid, sqsize, cattr, kato: sqe.cdw12, sgl1 })
    }

    /// Encode into an SQE (command identifier 0).
    pub fn to_sqe(&self) -> Result<SubmissionQueueEntry, WireError> {
        let mut sqe = SubmissionQueueEntry::new(FABRICS);
        sqe.nsid = u32::from(fctype::CONNECT);
        sqe.set_sgl1(&self.sgl1)?;
        sqe.cdw10 = u32::from(CONNECT_RECFMT) | (u32::from(self.qid) << 16);
        sqe.cdw11 = u32::from(self.sqsize) | (u32::from(self.cattr) << 16);
        sqe.cdw12 = self.kato;
        Ok(sqe)
    }

    /// Number of submission queue entries (sqsize + 1).
    pub fn queue_entries(&self) -> u32 {
        u32::from(self.sqsize) + 1
    }

    /// True for the admin queue (qid 0).
    pub fn is_admin(&self) -> bool {
        self.qid == 0
    }

    /// True if the host asks to disable SQ flow control (cattr bit 2).
    pub fn disable_sq_flow_control(&self) -> bool {
        self.cattr & CATTR_DISABLE_SQ_FLOW_CONTROL != 0
    }
}

/// The 1024-byte Connect data (NVMe-oF 1.1 Figure 20), NQNs borrowed from the received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectData<'a> {
    /// Host Identifier (128-bit).
    pub hostid: [u8; 16],
    /// Controller ID: [`CNTLID_DYNAMIC`] on the admin queue (dynamic model), the controller's ID on I/O
    /// queues.
    pub cntlid: u16,
    /// NVM Subsystem NQN.
    pub subnqn: Nqn<'a>,
    /// Host NQN.
    pub hostnqn: Nqn<'a>,
}

impl<'a> ConnectData<'a> {
    /// Parse the first 1024 bytes of `buf`; both NQNs must be NUL-terminated and valid.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let b = fixed::<CONNECT_DATA_SIZE>(buf, DATA_STRUCTURE)?;
        let nqn =
            |off: usize, field: &'static str| -> Result<Nqn<'a>, WireError> {
                let f: &'a [u8; NQN_FIELD_LEN] = b[off..off + NQN_FIELD_LEN].try_into().map_err(|_| {
                    WireError::Short { structure: DATA_STRUCTURE, need: CONNECT_DATA_SIZE, got: buf.len() }
                })?;
                Nqn::from_field(f).map_err(|e| WireError::InvalidText {
                    structure: DATA_STRUCTURE,
                    field,
                    reason: e.reason(),
                })
            };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        Ok(ConnectData {
            hostid,
            cntlid: le16(b, 16),
            subnqn: nqn(usize::from(data_offset::SUBNQN), "subnqn")?,
            hostnqn: nqn(usize::from(data_offset::HOSTNQN), "hostnqn")?,
        })
    }

    /// Encode into the first 1024 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<CONNECT_DATA_SIZE>(buf, DATA_STRUCTURE)?;
        b.fill(0);
        b[0..16].copy_from_slice(&self.hostid);
        put16(b, 16, self.cntlid);
        for (off, nqn) in [(data_offset::SUBNQN, self.subnqn), (data_offset::HOSTNQN, self.hostnqn)] {
            let off = usize::from(off);
            let field: &mut [u8; NQN_FIELD_LEN] = (&mut b[off..off + NQN_FIELD_LEN]).try_into().map_err(|_| {
                WireError::OutputTooSmall { structure: DATA_STRUCTURE, need: CONNECT_DATA_SIZE, got: 0 }
            })?;
            nqn.write_field(field);
        }
        Ok(())
    }

    /// The Connect data as 1024 bytes.
    pub fn to_bytes(&self) -> [u8; CONNECT_DATA_SIZE] {
        let mut b = [0u8; CONNECT_DATA_SIZE];
        // A 1024-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }
}

const ATR: u32 = 1 << 17;
const ASCR: u32 = 1 << 18;

/// Dword 0 of a successful Connect completion (NVMe-oF 1.1 Figure 21; Linux
/// `NVME_CONNECT_AUTHREQ_ATR`/`_ASCR`, SPDK `spdk_nvmf_fabric_connect_rsp.success`): controller ID in
/// bits 15:0, AUTHREQ in bits 31:16 with ATR at bit 17 and ASCR at bit 18.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    /// The controller ID allocated (admin queue) or joined (I/O queue).
    pub cntlid: u16,
    /// Authentication Transaction Required.
    pub atr: bool,
    /// Authentication and Secure Channel Required.
    pub ascr: bool,
}

impl ConnectResponse {
    /// Read from completion dword 0 (other AUTHREQ bits are reserved and ignored).
    pub fn from_dw0(dw0: u32) -> Self {
        #[expect(clippy::cast_possible_truncation, reason = "CNTLID is bits 15:0")]
        ConnectResponse { cntlid: dw0 as u16, atr: dw0 & ATR != 0, ascr: dw0 & ASCR != 0 }
    }

    /// Completion dword 0.
    pub fn to_dw0(&self) -> u32 {
        u32::from(self.cntlid) | if self.atr { ATR } else { 0 } | if self.ascr { ASCR } else { 0 }
    }
}

/// Where the parameter a Connect Invalid Parameters status points at lives (IATTR bit 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParameterLocation {
    /// In the Connect SQE (IATTR bit 0 clear).
    Command,
    /// In the Connect data (IATTR bit 0 set).
    Data,
}

/// Dword 0 of a Connect completion with status Connect Invalid Parameters (NVMe-oF 1.1 Figure 21; SPDK
/// `spdk_nvmf_fabric_connect_rsp.invalid`, Linux `IPO_IATTR_CONNECT_DATA/SQE`): Invalid Parameter Offset
/// (IPO) in bits 15:0, Invalid Attributes (IATTR) in bits 23:16 whose bit 0 says SQE or data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidParameter {
    /// IATTR bit 0: SQE or Connect data.
    pub iattr: ParameterLocation,
    /// IPO: byte offset of the field within the SQE or the Connect data.
    pub ipo: u16,
}

const IATTR_DATA: u32 = 1 << 16;

impl InvalidParameter {
    /// A field of the Connect SQE (`ipo` from [`sqe_offset`]).
    pub fn in_command(ipo: u16) -> Self {
        InvalidParameter { iattr: ParameterLocation::Command, ipo }
    }

    /// A field of the Connect data (`ipo` from [`data_offset`]).
    pub fn in_data(ipo: u16) -> Self {
        InvalidParameter { iattr: ParameterLocation::Data, ipo }
    }

    /// Read from completion dword 0.
    pub fn from_dw0(dw0: u32) -> Self {
        let iattr = if dw0 & IATTR_DATA != 0 { ParameterLocation::Data } else { ParameterLocation::Command };
        #[expect(clippy::cast_possible_truncation, reason = "IPO is bits 15:0")]
        InvalidParameter { iattr, ipo: dw0 as u16 }
    }

    /// The field named, as the spec spells it (`subnqn`, `sqsize`, …); `None` for an offset no field starts at.
    pub fn field(&self) -> Option<&'static str> {
        Some(match (self.iattr, self.ipo) {
            (ParameterLocation::Data, data_offset::HOSTID) => "hostid",
            (ParameterLocation::Data, data_offset::CNTLID) => "cntlid",
            (ParameterLocation::Data, data_offset::SUBNQN) => "subnqn",
            (ParameterLocation::Data, data_offset::HOSTNQN) => "hostnqn",
            (ParameterLocation::Command, sqe_offset::RECFMT) => "recfmt",
            (ParameterLocation::Command, sqe_offset::QID) => "qid",
            (ParameterLocation::Command, sqe_offset::SQSIZE) => "sqsize",
            (ParameterLocation::Command, sqe_offset::CATTR) => "cattr",
            (ParameterLocation::Command, sqe_offset::KATO) => "kato",
            _ => return None,
        })
    }

    /// Completion dword 0.
    pub fn to_dw0(&self) -> u32 {
        u32::from(self.ipo) | if self.iattr == ParameterLocation::Data { IATTR_DATA } else { 0 }
    }
}

/// The status and completion dword 0 a target sends for an error from [`Connect::from_sqe`] or
/// [`ConnectData::parse`]. All carry DNR: resending the same Connect cannot succeed.
///
/// - `recfmt` → Connect Incompatible Format;
/// - `qid`, `sqsize`, `cattr`, `kato` of the SQE, or `hostid`, `cntlid`, `subnqn`, `hostnqn` of the
///   data → Connect Invalid Parameters with IATTR/IPO pointing at the field;
/// - `sgl1.length` or a short Connect data buffer → Data SGL Length Invalid;
/// - a bad SGL descriptor → SGL Descriptor Type Invalid;
/// - anything else → Invalid Field in Command.
pub fn connect_error_response(err: &WireError) -> (Status, u32) {
    let (structure, field) = match err {
        WireError::InvalidField { structure, field, .. } | WireError::InvalidText { structure, field, .. } => {
            (*structure, *field)
        }
        WireError::Short { structure, .. } if *structure == DATA_STRUCTURE => {
            return (Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0)
        }
        _ => return (Status::INVALID_FIELD.with_dnr(), 0),
    };
    let invalid = |p: InvalidParameter| (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), p.to_dw0());
    match (structure, field) {
        (STRUCTURE, "recfmt") => (Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr(), 0),
        (STRUCTURE, "qid") => invalid(InvalidParameter::in_command(sqe_offset::QID)),
        (STRUCTURE, "sqsize") => invalid(InvalidParameter::in_command(sqe_offset::SQSIZE)),
        (STRUCTURE, "cattr") => invalid(InvalidParameter::in_command(sqe_offset::CATTR)),
        (STRUCTURE, "kato") => invalid(InvalidParameter::in_command(sqe_offset::KATO)),
        (STRUCTURE, "sgl1.length") => (Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0),
        ("SglDescriptor", _) => (Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr(), 0),
        (DATA_STRUCTURE, "hostid") => invalid(InvalidParameter::in_data(data_offset::HOSTID)),
        (DATA_STRUCTURE, "cntlid") => invalid(InvalidParameter::in_data(data_offset::CNTLID)),
        (DATA_STRUCTURE, "subnqn") => invalid(InvalidParameter::in_data(data_offset::SUBNQN)),
        (DATA_STRUCTURE, "hostnqn") => invalid(InvalidParameter::in_data(data_offset::HOSTNQN)),
        _ => (Status::INVALID_FIELD.with_dnr(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::nqn::DISCOVERY_NQN;
    use crate::nvme::SglSubtype;
    use proptest::prelude::*;

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";

    fn inline_sgl() -> SglDescriptor {
        SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset }
    }

    #[test]
    fn sqe_layout_matches_nvmf_connect_command() {
        // struct nvmf_connect_command: fctype @4, dptr @24, recfmt @40, qid @42, sqsize @44, cattr @46,
        // kato @48.
        let c = Connect { qid: 0x0102, sqsize: 0x0304, cattr: 0x04, kato: 0x0506_0708, sgl1: inline_sgl() };
        let b = c.to_sqe().unwrap().to_bytes();
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[24..40], &inline_sgl().to_bytes().unwrap());
        assert_eq!(&b[40..42], &[0, 0]);
        assert_eq!(&b[42..44], &[0x02, 0x01]);
        assert_eq!(&b[44..46], &[0x04, 0x03]);
        assert_eq!(b[46], 0x04);
        assert_eq!(b[47], 0);
        assert_eq!(&b[48..52], &[0x08, 0x07, 0x06, 0x05]);
        let back = Connect::from_sqe(&SubmissionQueueEntry::parse(&b).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(back.disable_sq_flow_control());
        assert_eq!(back.queue_entries(), 0x0305);
        assert!(!back.is_admin());
    }

    #[test]
    fn data_layout_matches_nvmf_connect_data() {
        // struct nvmf_connect_data: hostid @0, cntlid @16, subsysnqn @256, hostnqn @512, 1024 bytes.
        let d = ConnectData {
            hostid: *b"0123456789abcdef",
            cntlid: 0xfffe,
            subnqn: Nqn::new(DISCOVERY_NQN).unwrap(),
            hostnqn: Nqn::new(HOSTNQN).unwrap(),
        };
        let b = d.to_bytes();
        assert_eq!(b.len(), 1024);
        assert_eq!(&b[0..16], b"0123456789abcdef");
        assert_eq!(&b[16..18], &[0xfe, 0xff]);
        assert!(b[18..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..256 + DISCOVERY_NQN.len()], DISCOVERY_NQN.as_bytes());
        assert_eq!(b[256 + DISCOVERY_NQN.len()], 0);
        assert_eq!(&b[512..512 + HOSTNQN.len()], HOSTNQN.as_bytes());
        assert!(b[768..].iter().all(|&x| x == 0));
        assert_eq!(ConnectData::parse(&b).unwrap(), d);
    }

    #[test]
    fn response_dword0() {
        let r = ConnectResponse { cntlid: 0x1234, atr: true, ascr: false };
        assert_eq!(r.to_dw0(), 0x0002_1234);
        assert_eq!(ConnectResponse { cntlid: 1, atr: false, ascr: true }.to_dw0(), 0x0004_0001);
        assert_eq!(ConnectResponse::from_dw0(0x0006_0001), ConnectResponse { cntlid: 1, atr: true, ascr: true });
        // Linux IPO_IATTR_CONNECT_DATA(subsysnqn) = (1 << 16) | 256; IPO_IATTR_CONNECT_SQE(qid) = 42.
        assert_eq!(InvalidParameter::in_data(data_offset::SUBNQN).to_dw0(), 0x0001_0100);
        assert_eq!(InvalidParameter::in_command(sqe_offset::QID).to_dw0(), 42);
        assert_eq!(InvalidParameter::from_dw0(0x0001_0200), InvalidParameter::in_data(512));
    }

    #[test]
    fn sqe_rejections_and_their_statuses() {
        let good = Connect { qid: 0, sqsize: 31, cattr: 0, kato: 5000, sgl1: inline_sgl() }.to_sqe().unwrap();

        let mut sqe = good;
        sqe.cdw10 |= 1;
        let e = Connect::from_sqe(&sqe).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { field: "recfmt", value: 1, .. }));
        assert_eq!(connect_error_response(&e), (Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr(), 0));

        let mut sqe = good;
        sqe.cdw11 &= !0xffff;
        let e = Connect::from_sqe(&sqe).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { field: "sqsize", .. }));
        assert_eq!(connect_error_response(&e), (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), 44));

        let mut sqe = good;
        sqe.set_sgl1(&SglDescriptor::DataBlock { address: 0, length: 512, subtype: SglSubtype::Offset }).unwrap();
        let e = Connect::from_sqe(&sqe).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { field: "sgl1.length", value: 512, .. }));
        assert_eq!(connect_error_response(&e).0, Status::DATA_SGL_LENGTH_INVALID.with_dnr());

        let mut sqe = good;
        sqe.dptr[15] = 0x07; // data block with reserved subtype 7
        let e = Connect::from_sqe(&sqe).unwrap_err();
        assert_eq!(connect_error_response(&e).0, Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr());

        let mut sqe = good;
        sqe.nsid = u32::from(fctype::PROPERTY_GET);
        assert!(matches!(Connect::from_sqe(&sqe), Err(WireError::InvalidField { field: "fctype", .. })));
        let mut sqe = good;
        sqe.opcode = 0x06;
        let e = Connect::from_sqe(&sqe).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { field: "opcode", .. }));
        assert_eq!(connect_error_response(&e), (Status::INVALID_FIELD.with_dnr(), 0));
    }

    #[test]
    fn data_rejections_and_their_statuses() {
        let d = ConnectData {
            hostid: [1; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: Nqn::new("nqn.2016-06.io.spdk:cnode1").unwrap(),
            hostnqn: Nqn::new(HOSTNQN).unwrap(),
        };
        let good = d.to_bytes();

        let e = ConnectData::parse(&good[..1023]).unwrap_err();
        assert_eq!(e, WireError::Short { structure: "ConnectData", need: 1024, got: 1023 });
        assert_eq!(connect_error_response(&e).0, Status::DATA_SGL_LENGTH_INVALID.with_dnr());

        let mut b = good;
        b[256..512].fill(b'a'); // no NUL within the field
        let e = ConnectData::parse(&b).unwrap_err();
        assert!(matches!(e, WireError::InvalidText { field: "subnqn", .. }));
        assert_eq!(connect_error_response(&e), (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), 0x0001_0100));

        let mut b = good;
        b[512..516].copy_from_slice(b"ab\nc"); // a control character
        let e = ConnectData::parse(&b).unwrap_err();
        assert!(matches!(e, WireError::InvalidText { field: "hostnqn", .. }));
        assert_eq!(connect_error_response(&e), (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), 0x0001_0200));

        // A name Linux nvmet accepts that is not in the NQN format.
        let mut b = good;
        b[256..512].fill(0);
        b[256..263].copy_from_slice(b"testnqn");
        assert_eq!(ConnectData::parse(&b).unwrap().subnqn.as_str(), "testnqn");

        assert!(d.encode(&mut [0u8; 1000]).is_err());
    }

    proptest! {
        #[test]
        fn sqe_round_trip(qid in any::<u16>(), sqsize in 1u16.., cattr in any::<u8>(), kato in any::<u32>(),
                          keyed in any::<bool>(), addr in any::<u64>(), key in any::<u32>()) {
            let sgl1 = if keyed {
                SglDescriptor::KeyedDataBlock { address: addr, length: 1024, key, subtype: SglSubtype::Invalidate }
            } else {
                SglDescriptor::DataBlock { address: addr, length: 1024, subtype: SglSubtype::Offset }
            };
            let c = Connect { qid, sqsize, cattr, kato, sgl1 };
            let bytes = c.to_sqe().unwrap().to_bytes();
            prop_assert_eq!(Connect::from_sqe(&SubmissionQueueEntry::parse(&bytes).unwrap()).unwrap(), c);
        }

        #[test]
        fn arbitrary_sqe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let sqe = SubmissionQueueEntry::parse(&bytes).unwrap();
            match Connect::from_sqe(&sqe) {
                Ok(c) => prop_assert_eq!(Connect::from_sqe(&c.to_sqe().unwrap()).unwrap(), c),
                Err(e) => { let _ = connect_error_response(&e); }
            }
        }

        #[test]
        fn arbitrary_data_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            match ConnectData::parse(&bytes) {
                Ok(d) => {
                    let again = d.to_bytes();
                    prop_assert_eq!(ConnectData::parse(&again).unwrap(), d);
                }
                Err(e) => { let _ = connect_error_response(&e); }
            }
        }

        #[test]
        fn data_round_trip(hostid in proptest::array::uniform16(any::<u8>()), cntlid in any::<u16>(),
                           sub in "[a-z0-9]{1,20}", host in "[ -~]{0,150}") {
            let sub = format!("nqn.2014-08.com.example:{sub}");
            let host = format!("nqn.2020-01.org.host:{host}");
            let d = ConnectData { hostid, cntlid, subnqn: Nqn::new(&sub).unwrap(), hostnqn: Nqn::new(&host).unwrap() };
            let b = d.to_bytes();
            prop_assert_eq!(ConnectData::parse(&b).unwrap(), d);
        }
    }
}
