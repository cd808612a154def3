//! The Asymmetric Namespace Access log page (LID 0Ch, NVMe Base 2.0 §5.16.1.12, Figures 218–220; Linux
//! `struct nvme_ana_rsp_hdr` and `struct nvme_ana_group_desc`): a 16-byte header (change count, number of group
//! descriptors), then per ANA group a 32-byte descriptor (group ID, number of NSIDs, change count, state) followed
//! by its NSIDs, unless the host asked for groups only (RGO, Get Log Page LSP bit 0).

use crate::wire::{le32, le64, put32, put64, WireError};

const ANA_LOG: &str = "AnaLog";

/// Bytes of the log's header.
pub const ANA_LOG_HEADER_SIZE: usize = 16;
/// Bytes of a group descriptor before its NSIDs.
pub const ANA_GROUP_DESCRIPTOR_SIZE: usize = 32;
/// Get Log Page LSP bit 0 for this log: Return Groups Only (no NSIDs).
pub const ANA_RGO: u8 = 0x01;

/// An ANA group's state as a controller reports it for the path it is reached by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnaState {
    /// Optimized: the preferred path.
    Optimized,
    /// Non-optimized: usable, slower.
    NonOptimized,
    /// Inaccessible: I/O fails with Asymmetric Access Inaccessible; may come back.
    Inaccessible,
    /// Persistent loss: I/O fails with Asymmetric Access Persistent Loss; will not come back.
    PersistentLoss,
    /// Change: a transition in progress; I/O fails with Asymmetric Access Transition (retryable).
    Change,
}

impl AnaState {
    /// Every state.
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The wire value (Linux `NVME_ANA_*`).
    pub fn to_u8(self) -> u8 {
        match self {
            AnaState::Optimized => 0x01,
            AnaState::NonOptimized => 0x02,
            AnaState::Inaccessible => 0x03,
            AnaState::PersistentLoss => 0x04,
            AnaState::Change => 0x0F,
        }
    }

    /// From the wire value.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        AnaState::ALL.into_iter().find(|s| s.to_u8() == v).ok_or_else(|| {
            WireError::invalid(
                ANA_LOG,
                "ANA state",
                v,
                "1 optimized, 2 non-optimized, 3 inaccessible, 4 persistent loss, 0Fh change",
            )
        })
    }

    /// The name nvmetcli and the kernel's sysfs use (`optimized`, `non-optimized`, `inaccessible`,
    /// `persistent-loss`, `change`).
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    /// From its name (see [`AnaState::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        AnaState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether I/O may be sent on a path in this state.
    pub fn serves_io(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }
}

/// One ANA group descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaGroupDescriptor {
    /// ANA Group ID (1..=ANAGRPMAX).
    pub grpid: u32,
    /// The group's change count.
    pub chgcnt: u64,
    /// The group's state on this controller's path.
    pub state: AnaState,
    /// The NSIDs of the group's attached namespaces (empty when the host asked for groups only).
    pub nsids: Vec<u32>,
}

/// The ANA log page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnaLog {
    /// The log's change count.
    pub chgcnt: u64,
    /// The groups, one descriptor each.
    pub groups: Vec<AnaGroupDescriptor>,
}

impl AnaLog {
    /// The encoded page; with `groups_only` (RGO) every descriptor carries no NSIDs (NNSIDS 0).
    pub fn to_bytes(&self, groups_only: bool) -> Vec<u8> {
        let nsids = if groups_only { 0 } else { self.groups.iter().map(|g| g.nsids.len()).sum() };
        let mut b = vec![0u8; ANA_LOG_HEADER_SIZE + self.groups.len() * ANA_GROUP_DESCRIPTOR_SIZE + nsids * 4];
        put64(&mut b, 0, self.chgcnt);
        b[8..10].copy_from_slice(&u16::try_from(self.groups.len()).unwrap_or(u16::MAX).to_le_bytes());
        let mut at = ANA_LOG_HEADER_SIZE;
        for g in &self.groups {
            let listed: &[u32] = if groups_only { &[] } else { &g.nsids };
            put32(&mut b, at, g.grpid);
            put32(&mut b, at + 4, u32::try_from(listed.len()).unwrap_or(u32::MAX));
            put64(&mut b, at + 8, g.chgcnt);
            b[at + 16] = g.state.to_u8();
            at += ANA_GROUP_DESCRIPTOR_SIZE;
            for &nsid in listed {
                put32(&mut b, at, nsid);
                at += 4;
            }
        }
        b
    }

    /// Parse a page, bounding every count by the bytes present.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let short = |need: usize| WireError::Short { structure: ANA_LOG, need, got: b.len() };
        if b.len() < ANA_LOG_HEADER_SIZE {
            return Err(short(ANA_LOG_HEADER_SIZE));
        }
        let ngrps = usize::from(u16::from_le_bytes([b[8], b[9]]));
        let mut at = ANA_LOG_HEADER_SIZE;
        let mut groups = Vec::with_capacity(ngrps.min(b.len() / ANA_GROUP_DESCRIPTOR_SIZE));
        for _ in 0..ngrps {
            let end = at + ANA_GROUP_DESCRIPTOR_SIZE;
            if b.len() < end {
                return Err(short(end));
            }
            let nnsids = usize::try_from(le32(b, at + 4)).unwrap_or(usize::MAX);
            let list_end = nnsids.checked_mul(4).and_then(|n| n.checked_add(end)).ok_or_else(|| short(usize::MAX))?;
            if b.len() < list_end {
                return Err(short(list_end));
            }
            groups.push(AnaGroupDescriptor {
                grpid: le32(b, at),
                chgcnt: le64(b, at + 8),
                state: AnaState::from_u8(b[at + 16] & 0x0F)?,
                nsids: (0..nnsids).map(|i| le32(b, end + i * 4)).collect(),
            });
            at = list_end;
        }
        Ok(AnaLog { chgcnt: le64(b, 0), groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> AnaLog {
        AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroupDescriptor { grpid: 1, chgcnt: 3, state: AnaState::Optimized, nsids: vec![1, 3] },
                AnaGroupDescriptor { grpid: 2, chgcnt: 4, state: AnaState::Inaccessible, nsids: vec![2] },
            ],
        }
    }

    #[test]
    fn layout_matches_the_spec_and_round_trips() {
        let b = log().to_bytes(false);
        assert_eq!(b.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!((b[0], b[8]), (7, 2), "CHGCNT, NGRPS");
        assert_eq!((b[16], b[20], b[24], b[32]), (1, 2, 3, 0x01), "ANAGRPID, NNSIDS, CHGCNT, state");
        assert_eq!((b[48], b[52]), (1, 3), "the first group's NSIDs follow its descriptor");
        assert_eq!((b[56], b[60], b[64], b[72]), (2, 1, 4, 0x03));
        assert_eq!(AnaLog::parse(&b).unwrap(), log());
        // Groups only: no NSIDs, NNSIDS 0.
        let rgo = AnaLog::parse(&log().to_bytes(true)).unwrap();
        assert!(rgo.groups.iter().all(|g| g.nsids.is_empty()) && rgo.groups.len() == 2);
    }

    #[test]
    fn counts_beyond_the_buffer_are_refused() {
        let mut b = log().to_bytes(false);
        b[20] = 200;
        assert!(matches!(AnaLog::parse(&b), Err(WireError::Short { .. })));
        let mut b = log().to_bytes(false);
        b[8] = 3;
        assert!(AnaLog::parse(&b).is_err());
        assert!(AnaLog::parse(&[0u8; 8]).is_err());
        let mut b = log().to_bytes(false);
        b[32] = 0x05;
        assert!(matches!(AnaLog::parse(&b), Err(WireError::InvalidField { .. })));
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_name(s.name()), Some(s));
            assert_eq!(AnaState::from_u8(s.to_u8()).unwrap(), s);
        }
    }
}
