//! RDMA CM private data for NVMe/RDMA: the connect request, accept and reject formats.
//!
//! NVMe over Fabrics RDMA Transport Specification (NVMe/RDMA 1.0) §3.3 / NVMe-oF 1.1 §7.3.2; Linux
//! `struct nvme_rdma_cm_req`, `nvme_rdma_cm_rep`, `nvme_rdma_cm_rej` and `enum nvme_rdma_cm_status` in
//! `include/linux/nvme-rdma.h`.
//!
//! | message | bytes | layout |
//! |---|---|---|
//! | request (host → target) | 32 | recfmt u16 @0 (0), qid u16 @2, hrqsize u16 @4, hsqsize u16 @6, cntlid u16 @8, reserved |
//! | accept (target → host) | 32 | recfmt u16 @0 (0), crqsize u16 @2, reserved |
//! | reject (target → host) | 4 | recfmt u16 @0 (0), sts u16 @2 ([`RdmaCmRejectStatus`]) |
//!
//! `hsqsize` is 0's based (Linux sends `sqsize`, e.g. 31 for a 32-entry admin queue) while `hrqsize`
//! and `crqsize` count entries (Linux sends the queue size itself). `cntlid` was reserved in older
//! headers: SPDK's host fills it on I/O queues, Linux's older hosts leave it 0.
//!
//! The transport may deliver more private data than the format defines (InfiniBand CM pads it), so
//! parsing accepts longer buffers and rejects shorter ones. A target that cannot parse a request picks
//! its reject status with [`RdmaCmRejectStatus::for_request_error`].
#![forbid(unsafe_code)]

use crate::wire::{fixed, fixed_mut, le16, put16, WireError};

/// The only private data record format defined (Linux `NVME_RDMA_CM_FMT_1_0`).
pub const RDMA_CM_RECFMT: u16 = 0;

/// Size of the connect request private data.
pub const REQUEST_SIZE: usize = 32;

/// Size of the accept private data.
pub const ACCEPT_SIZE: usize = 32;

/// Size of the reject private data.
pub const REJECT_SIZE: usize = 4;

fn check_recfmt(structure: &'static str, recfmt: u16) -> Result<(), WireError> {
    if recfmt == RDMA_CM_RECFMT {
        Ok(())
    } else {
        Err(WireError::invalid(structure, "recfmt", recfmt, "0"))
    }
}

/// The host's RDMA CM connect request private data (Linux `struct nvme_rdma_cm_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaCmRequest {
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Host Receive Queue Size: entries the host's receive queue holds.
    pub hrqsize: u16,
    /// Host Send Queue Size, 0's based: the submission queue size the host will request in Connect.
    pub hsqsize: u16,
    /// Controller ID the I/O queue belongs to (0 where the host leaves it reserved).
    pub cntlid: u16,
}

impl RdmaCmRequest {
    /// Parse `buf`, which must hold at least 32 bytes (more is accepted) with recfmt 0. A short buffer
    /// is [`WireError::Short`], a bad format an error naming `recfmt`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<REQUEST_SIZE>(buf, "RdmaCmRequest")?;
        check_recfmt("RdmaCmRequest", le16(b, 0))?;
        Ok(RdmaCmRequest { qid: le16(b, 2), hrqsize: le16(b, 4), hsqsize: le16(b, 6), cntlid: le16(b, 8) })
    }

    /// Encode into the first 32 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<REQUEST_SIZE>(buf, "RdmaCmRequest")?;
        b.fill(0);
        put16(b, 0, RDMA_CM_RECFMT);
        put16(b, 2, self.qid);
        put16(b, 4, self.hrqsize);
        put16(b, 6, self.hsqsize);
        put16(b, 8, self.cntlid);
        Ok(())
    }

    /// The request as 32 bytes.
    pub fn to_bytes(&self) -> [u8; REQUEST_SIZE] {
        let mut b = [0u8; REQUEST_SIZE];
        // A 32-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Entries of the host's send queue (hsqsize + 1).
    pub fn send_queue_entries(&self) -> u32 {
        u32::from(self.hsqsize) + 1
    }
}

/// The target's RDMA CM accept private data (Linux `struct nvme_rdma_cm_rep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaCmAccept {
    /// Controller Receive Queue Size: entries the controller's receive queue holds.
    pub crqsize: u16,
}

impl RdmaCmAccept {
    /// Parse `buf`, which must hold at least 32 bytes (more is accepted) with recfmt 0.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<ACCEPT_SIZE>(buf, "RdmaCmAccept")?;
        check_recfmt("RdmaCmAccept", le16(b, 0))?;
        Ok(RdmaCmAccept { crqsize: le16(b, 2) })
    }

    /// Encode into the first 32 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<ACCEPT_SIZE>(buf, "RdmaCmAccept")?;
        b.fill(0);
        put16(b, 0, RDMA_CM_RECFMT);
        put16(b, 2, self.crqsize);
        Ok(())
    }

    /// The accept as 32 bytes.
    pub fn to_bytes(&self) -> [u8; ACCEPT_SIZE] {
        let mut b = [0u8; ACCEPT_SIZE];
        // A 32-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }
}

/// Why a target rejected an RDMA CM connect request (Linux `enum nvme_rdma_cm_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaCmRejectStatus {
    /// Invalid private data length (1).
    InvalidPrivateDataLength,
    /// Invalid RECFMT (2).
    InvalidRecfmt,
    /// Invalid QID (3).
    InvalidQid,
    /// Invalid HSQSIZE (4).
    InvalidHsqsize,
    /// Invalid HRQSIZE (5).
    InvalidHrqsize,
    /// No or insufficient resources (6).
    NoResources,
    /// Invalid IRD (7).
    InvalidIrd,
    /// Invalid ORD (8).
    InvalidOrd,
    /// Invalid controller ID (9).
    InvalidCntlid,
}

impl RdmaCmRejectStatus {
    /// Decode, or an error naming `sts`.
    pub fn from_u16(v: u16) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::InvalidPrivateDataLength,
            2 => Self::InvalidRecfmt,
            3 => Self::InvalidQid,
            4 => Self::InvalidHsqsize,
            5 => Self::InvalidHrqsize,
            6 => Self::NoResources,
            7 => Self::InvalidIrd,
            8 => Self::InvalidOrd,
            9 => Self::InvalidCntlid,
            _ => return Err(WireError::invalid("RdmaCmReject", "sts", v, "1..=9")),
        })
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            Self::InvalidPrivateDataLength => 1,
            Self::InvalidRecfmt => 2,
            Self::InvalidQid => 3,
            Self::InvalidHsqsize => 4,
            Self::InvalidHrqsize => 5,
            Self::NoResources => 6,
            Self::InvalidIrd => 7,
            Self::InvalidOrd => 8,
            Self::InvalidCntlid => 9,
        }
    }

    /// The reject status for an error from [`RdmaCmRequest::parse`]: short data → invalid private data
    /// length, a bad `recfmt` → invalid RECFMT.
    pub fn for_request_error(err: &WireError) -> Self {
        match err {
            WireError::InvalidField { field: "recfmt", .. } => Self::InvalidRecfmt,
            _ => Self::InvalidPrivateDataLength,
        }
    }
}

/// The target's RDMA CM reject private data (Linux `struct nvme_rdma_cm_rej`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaCmReject {
    /// Status.
    pub sts: RdmaCmRejectStatus,
}

impl RdmaCmReject {
    /// Parse `buf`, which must hold at least 4 bytes (more is accepted) with recfmt 0 and a defined
    /// status.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<REJECT_SIZE>(buf, "RdmaCmReject")?;
        check_recfmt("RdmaCmReject", le16(b, 0))?;
        Ok(RdmaCmReject { sts: RdmaCmRejectStatus::from_u16(le16(b, 2))? })
    }

    /// Encode into the first 4 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<REJECT_SIZE>(buf, "RdmaCmReject")?;
        put16(b, 0, RDMA_CM_RECFMT);
        put16(b, 2, self.sts.to_u16());
        Ok(())
    }

    /// The reject as 4 bytes.
    pub fn to_bytes(&self) -> [u8; REJECT_SIZE] {
        let mut b = [0u8; REJECT_SIZE];
        // A 4-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layouts_match_nvme_rdma_h() {
        // struct nvme_rdma_cm_req: recfmt @0, qid @2, hrqsize @4, hsqsize @6, cntlid @8, rsvd[22] → 32.
        let r = RdmaCmRequest { qid: 0x0102, hrqsize: 0x0304, hsqsize: 0x0506, cntlid: 0x0708 };
        let b = r.to_bytes();
        assert_eq!(b.len(), 32);
        assert_eq!(&b[..10], &[0, 0, 0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 0x08, 0x07]);
        assert!(b[10..].iter().all(|&x| x == 0));
        assert_eq!(RdmaCmRequest::parse(&b), Ok(r));
        assert_eq!(r.send_queue_entries(), 0x0507);

        // struct nvme_rdma_cm_rep: recfmt @0, crqsize @2, rsvd[28] → 32.
        let a = RdmaCmAccept { crqsize: 0x1234 };
        let b = a.to_bytes();
        assert_eq!(b.len(), 32);
        assert_eq!(&b[..4], &[0, 0, 0x34, 0x12]);
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(RdmaCmAccept::parse(&b), Ok(a));

        // struct nvme_rdma_cm_rej: recfmt @0, sts @2 → 4.
        let j = RdmaCmReject { sts: RdmaCmRejectStatus::InvalidHsqsize };
        assert_eq!(j.to_bytes(), [0, 0, 4, 0]);
        assert_eq!(RdmaCmReject::parse(&j.to_bytes()), Ok(j));
    }

    #[test]
    fn reject_status_values_match_nvme_rdma_cm_status() {
        use RdmaCmRejectStatus::*;
        let all = [
            InvalidPrivateDataLength,
            InvalidRecfmt,
            InvalidQid,
            InvalidHsqsize,
            InvalidHrqsize,
            NoResources,
            InvalidIrd,
            InvalidOrd,
            InvalidCntlid,
        ];
        for (i, s) in all.into_iter().enumerate() {
            assert_eq!(usize::from(s.to_u16()), i + 1);
            assert_eq!(RdmaCmRejectStatus::from_u16(s.to_u16()), Ok(s));
        }
        for bad in [0u16, 10, 0xffff] {
            assert!(matches!(RdmaCmRejectStatus::from_u16(bad), Err(WireError::InvalidField { field: "sts", .. })));
        }
    }

    #[test]
    fn request_rejections_choose_the_reject_status() {
        let good = RdmaCmRequest { qid: 1, hrqsize: 128, hsqsize: 127, cntlid: 1 }.to_bytes();

        let e = RdmaCmRequest::parse(&good[..31]).unwrap_err();
        assert_eq!(e, WireError::Short { structure: "RdmaCmRequest", need: 32, got: 31 });
        assert_eq!(RdmaCmRejectStatus::for_request_error(&e), RdmaCmRejectStatus::InvalidPrivateDataLength);
        assert!(RdmaCmRequest::parse(&[]).is_err());

        let mut b = good;
        b[0] = 1;
        let e = RdmaCmRequest::parse(&b).unwrap_err();
        assert!(matches!(e, WireError::InvalidField { field: "recfmt", value: 1, .. }));
        assert_eq!(RdmaCmRejectStatus::for_request_error(&e), RdmaCmRejectStatus::InvalidRecfmt);

        // Longer private data (CM padding) is accepted.
        let mut long = [0u8; 56];
        long[..32].copy_from_slice(&good);
        long[40] = 0xff;
        assert_eq!(RdmaCmRequest::parse(&long).unwrap().hrqsize, 128);

        assert!(RdmaCmAccept::parse(&[0u8; 31]).is_err());
        assert!(matches!(
            RdmaCmAccept::parse(&[0, 1, 0, 0].repeat(8)),
            Err(WireError::InvalidField { field: "recfmt", .. })
        ));
        assert!(RdmaCmReject::parse(&[0, 0, 1]).is_err());
        assert!(matches!(RdmaCmReject::parse(&[0, 0, 0, 0]), Err(WireError::InvalidField { field: "sts", .. })));
        assert!(matches!(RdmaCmReject::parse(&[2, 0, 1, 0]), Err(WireError::InvalidField { field: "recfmt", .. })));
        assert!(RdmaCmRequest::default().encode(&mut [0u8; 31]).is_err());
        assert!(RdmaCmAccept::default().encode(&mut [0u8; 31]).is_err());
        assert!(RdmaCmReject { sts: RdmaCmRejectStatus::NoResources }.encode(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn request_round_trip(
            qid in any::<u16>(), hrqsize in any::<u16>(), hsqsize in any::<u16>(), cntlid in any::<u16>(),
        ) {
            let r = RdmaCmRequest { qid, hrqsize, hsqsize, cntlid };
            prop_assert_eq!(RdmaCmRequest::parse(&r.to_bytes()), Ok(r));
            let a = RdmaCmAccept { crqsize: hrqsize };
            prop_assert_eq!(RdmaCmAccept::parse(&a.to_bytes()), Ok(a));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match RdmaCmRequest::parse(&bytes) {
                Ok(r) => prop_assert_eq!(RdmaCmRequest::parse(&r.to_bytes()), Ok(r)),
                Err(e) => {
                    let sts = RdmaCmRejectStatus::for_request_error(&e);
                    if bytes.len() < 32 {
                        prop_assert_eq!(sts, RdmaCmRejectStatus::InvalidPrivateDataLength);
                    } else {
                        prop_assert_eq!(sts, RdmaCmRejectStatus::InvalidRecfmt);
                    }
                }
            }
            if let Ok(a) = RdmaCmAccept::parse(&bytes) {
                prop_assert_eq!(RdmaCmAccept::parse(&a.to_bytes()), Ok(a));
            }
            if let Ok(j) = RdmaCmReject::parse(&bytes) {
                prop_assert_eq!(RdmaCmReject::parse(&j.to_bytes()), Ok(j));
            }
        }
    }
}
