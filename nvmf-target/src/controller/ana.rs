//! Asymmetric Namespace Access (NVMe Base 2.0 §8.1): each namespace belongs to an ANA group (1..=[`ANAGRPMAX`]),
//! and each listener (port) has a state per group. A host reaching a namespace through a port whose state for
//! the namespace's group is neither optimized nor non-optimized gets Asymmetric Access Inaccessible, Persistent
//! Loss or Transition for its I/O, as Linux nvmet answers (`nvmet_check_ana_state`), and moves its I/O to
//! another path.
//!
//! The target holds one immutable [`AnaTable`] snapshot behind an `RwLock<Arc<_>>` plus a generation
//! (`AtomicU64`), like a subsystem's namespace table: a queue caches its port's [`PortStates`] and compares the
//! generation per I/O command (one atomic load), taking the read lock only when it moved. A change (control
//! request, reload) builds a new table, bumps the change counts of the groups it changed and of the log, and
//! raises an ANA Change event on the controllers connected through that port.

use std::sync::Arc;

use nvmf_common::nvme::log_page::AnaState;
use nvmf_common::nvme::Status;

/// ANA Group Identifier Maximum and Number of ANA Group Identifiers (Identify ANAGRPMAX, NANAGRPID), as Linux
/// nvmet (`NVMET_MAX_ANAGRPS`).
pub const ANAGRPMAX: u32 = 128;

/// The ANA group of a namespace configured without one (nvmet's `NVMET_DEFAULT_ANA_GRPID`).
pub const DEFAULT_ANA_GROUP: u32 = 1;

/// ANA Transition Time in seconds (Identify ANATT): how long a host waits for a group in change state; nvmet
/// reports 10.
pub const ANATT_SECONDS: u8 = 10;

/// Identify ANACAP: reports optimized (bit 0), non-optimized (1), inaccessible (2), persistent loss (3) and
/// change (4) states, as nvmet; ANAGRPID does not change while a namespace is attached (bit 6 clear) and is
/// never 0 (bit 7 clear).
pub const ANACAP: u8 = 0x1F;

const GROUPS: usize = ANAGRPMAX as usize;

/// Whether `group` is a valid ANA group ID.
pub fn valid_group(group: u32) -> bool {
    (1..=ANAGRPMAX).contains(&group)
}

/// One port's state for every ANA group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStates {
    states: [AnaState; GROUPS],
}

impl PortStates {
    /// Every group in `state`.
    pub fn all(state: AnaState) -> Self {
        PortStates { states: [state; GROUPS] }
    }

    /// The state of `group` (an invalid group reads as inaccessible).
    pub fn get(&self, group: u32) -> AnaState {
        group.checked_sub(1).and_then(|i| self.states.get(i as usize)).copied().unwrap_or(AnaState::Inaccessible)
    }

    /// The status an I/O command to a namespace of `group` completes with on this port, if it may not proceed
    /// (nvmet's `nvmet_check_ana_state`; without DNR: another path may serve it).
    #[inline]
    pub fn check(&self, group: u32) -> Result<(), Status> {
        match self.get(group) {
            AnaState::Optimized | AnaState::NonOptimized => Ok(()),
            AnaState::Inaccessible => Err(Status::ANA_INACCESSIBLE),
            AnaState::PersistentLoss => Err(Status::ANA_PERSISTENT_LOSS),
            AnaState::Change => Err(Status::ANA_TRANSITION),
        }
    }

    /// The states of groups `1..=n`, in order (for listings).
    pub fn groups(&self) -> impl Iterator<Item = (u32, AnaState)> + '_ {
        (1..=ANAGRPMAX).zip(self.states.iter().copied())
    }
}

impl Default for PortStates {
    fn default() -> Self {
        PortStates::all(AnaState::Optimized)
    }
}

/// An immutable snapshot of every port's ANA states and the change counts.
#[derive(Debug, Clone)]
pub struct AnaTable {
    /// Ports with states set, sorted by port ID; a port not listed has every group optimized.
    ports: Vec<(u16, Arc<PortStates>)>,
    default: Arc<PortStates>,
    /// Each group's change count (index: group ID − 1).
    group_chgcnt: Box<[u64; GROUPS]>,
    /// The log's change count.
    chgcnt: u64,
}

impl Default for AnaTable {
    fn default() -> Self {
        AnaTable {
            ports: Vec::new(),
            default: Arc::new(PortStates::default()),
            group_chgcnt: Box::new([0; GROUPS]),
            chgcnt: 0,
        }
    }
}

/// Which groups a change applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnaGroups {
    /// Every group.
    All,
    /// One group (1..=[`ANAGRPMAX`]).
    One(u32),
}

impl AnaTable {
    /// The states of port `port_id`.
    pub fn port(&self, port_id: u16) -> &Arc<PortStates> {
        match self.ports.binary_search_by_key(&port_id, |(p, _)| *p) {
            Ok(i) => &self.ports[i].1,
            Err(_) => &self.default,
        }
    }

    /// The log's change count (ANA log header CHGCNT).
    pub fn chgcnt(&self) -> u64 {
        self.chgcnt
    }

    /// The change count of `group` (its descriptor's CHGCNT).
    pub fn group_chgcnt(&self, group: u32) -> u64 {
        group.checked_sub(1).and_then(|i| self.group_chgcnt.get(i as usize)).copied().unwrap_or(0)
    }

    /// A table with `groups` of port `port_id` in `state`, or `None` when nothing changes. The change counts of
    /// the groups whose state changed, and the log's, are incremented.
    pub fn with_state(&self, port_id: u16, groups: AnaGroups, state: AnaState) -> Option<AnaTable> {
        self.with_states(port_id, &[(groups, state)])
    }

    /// A table with each of `changes` made to port `port_id` in order (a state for every group, then some groups'
    /// own, say), as one change: `None` when no group ends in another state. The change counts of the groups that
    /// did, and the log's, are incremented once. Invalid groups are skipped.
    pub fn with_states(&self, port_id: u16, changes: &[(AnaGroups, AnaState)]) -> Option<AnaTable> {
        let old = self.port(port_id);
        let mut new = PortStates::clone(old);
        for &(groups, state) in changes {
            let range = match groups {
                AnaGroups::All => 0..GROUPS,
                AnaGroups::One(g) if valid_group(g) => (g as usize - 1)..(g as usize),
                AnaGroups::One(_) => continue,
            };
            new.states[range].fill(state);
        }
        let mut table = self.clone();
        let mut changed = false;
        for (i, (before, after)) in old.states.iter().zip(&new.states).enumerate() {
            if before != after {
                table.group_chgcnt[i] = table.group_chgcnt[i].wrapping_add(1);
                changed = true;
            }
        }
        if !changed {
            return None;
        }
        table.chgcnt = table.chgcnt.wrapping_add(1);
        let new = Arc::new(new);
        match table.ports.binary_search_by_key(&port_id, |(p, _)| *p) {
            Ok(i) => table.ports[i].1 = new,
            Err(i) => table.ports.insert(i, (port_id, new)),
        }
        Some(table)
    }
}

impl AnaTable {
    /// A table whose change counts say `groups` changed (a namespace moved between them): each group's count
    /// and the log's are incremented.
    pub fn with_groups_changed(&self, groups: &[u32]) -> AnaTable {
        let mut table = self.clone();
        for &g in groups.iter().filter(|&&g| valid_group(g)) {
            let i = g as usize - 1;
            table.group_chgcnt[i] = table.group_chgcnt[i].wrapping_add(1);
        }
        table.chgcnt = table.chgcnt.wrapping_add(1);
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_default_to_optimized_and_changes_count() {
        let t = AnaTable::default();
        assert_eq!(t.port(7).get(1), AnaState::Optimized);
        assert_eq!(t.port(7).check(128), Ok(()));
        assert_eq!(t.chgcnt(), 0);

        let t = t.with_state(2, AnaGroups::One(3), AnaState::Inaccessible).unwrap();
        assert_eq!(t.port(2).check(3), Err(Status::ANA_INACCESSIBLE));
        assert_eq!(t.port(2).check(1), Ok(()));
        assert_eq!(t.port(1).check(3), Ok(()), "other ports keep their states");
        assert_eq!((t.chgcnt(), t.group_chgcnt(3), t.group_chgcnt(1)), (1, 1, 0));
        assert!(t.with_state(2, AnaGroups::One(3), AnaState::Inaccessible).is_none(), "no change, no count");
        assert!(t.with_state(2, AnaGroups::One(0), AnaState::Change).is_none());
        assert!(t.with_state(2, AnaGroups::One(129), AnaState::Change).is_none());

        let t = t.with_state(2, AnaGroups::All, AnaState::PersistentLoss).unwrap();
        assert_eq!(t.port(2).check(128), Err(Status::ANA_PERSISTENT_LOSS));
        assert_eq!((t.chgcnt(), t.group_chgcnt(3), t.group_chgcnt(1)), (2, 2, 1));
        let t = t.with_state(2, AnaGroups::One(1), AnaState::Change).unwrap();
        assert_eq!(t.port(2).check(1), Err(Status::ANA_TRANSITION));
        let t = t.with_state(2, AnaGroups::One(1), AnaState::NonOptimized).unwrap();
        assert_eq!(t.port(2).check(1), Ok(()));
        assert_eq!(t.port(2).get(0), AnaState::Inaccessible, "no group 0");
    }

    #[test]
    fn several_changes_are_one() {
        use AnaState::*;
        // A port's start: every group non-optimized, then group 2 optimized.
        let t = AnaTable::default();
        let t = t.with_states(1, &[(AnaGroups::All, NonOptimized), (AnaGroups::One(2), Optimized)]).unwrap();
        assert_eq!((t.port(1).get(1), t.port(1).get(2), t.port(1).get(128)), (NonOptimized, Optimized, NonOptimized));
        assert_eq!(t.port(2).get(1), Optimized, "other ports keep their states");
        // Group 2 ended where it was: its count did not move; the log's moved once.
        assert_eq!((t.chgcnt(), t.group_chgcnt(1), t.group_chgcnt(2), t.group_chgcnt(128)), (1, 1, 0, 1));
        // Changes that end where they started change nothing.
        let same = [(AnaGroups::One(3), Inaccessible), (AnaGroups::One(3), NonOptimized), (AnaGroups::One(0), Change)];
        assert!(t.with_states(1, &same).is_none());
        assert!(t.with_states(1, &[]).is_none());
        let t = t.with_states(1, &[(AnaGroups::One(2), NonOptimized), (AnaGroups::One(3), Change)]).unwrap();
        assert_eq!((t.chgcnt(), t.group_chgcnt(1), t.group_chgcnt(2), t.group_chgcnt(3)), (2, 1, 1, 2));
    }
}
