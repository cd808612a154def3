//! The Changed Namespace List log page (LID 04h): the NSIDs whose attributes changed, or
//! the overflow marker past 1024 of them.

use super::super::identify::{check_list_nsid, put_nsid_list, NamespaceIdList, NsidSet, NSID_BROADCAST};
use crate::wire::{fixed, fixed_mut, le32, WireError};

const CHANGED_LIST: &str = "ChangedNamespaceList";

/// Size of the Changed Namespace List log.
pub const CHANGED_NAMESPACE_LIST_SIZE: usize = 4096;

/// What a Changed Namespace List log reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangedNamespaces<'a> {
    /// Up to 1024 changed NSIDs.
    List(NamespaceIdList<'a>),
    /// More than 1024 namespaces changed (first entry 0xFFFFFFFF): the host rescans them all.
    MoreThan1024,
}

/// Changed Namespace List log (Base 2.0 §5.16.1.5, Linux `NVME_MAX_CHANGED_NAMESPACES`), 4096
/// bytes: up to 1024 NSIDs whose attributes changed since the log was last read, zero-terminated;
/// a first entry of 0xFFFFFFFF means more than 1024 changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangedNamespaceList;

impl ChangedNamespaceList {
    /// Encode the log into the first 4096 bytes of `buf` from the changed NSIDs, in any order
    /// (duplicates are merged, the list is written in increasing order). Returns true when more than
    /// 1024 distinct NSIDs changed and the log holds the 0xFFFFFFFF marker instead. Errors on an NSID
    /// of 0 or 0xFFFFFFFF.
    pub fn encode(changed: impl IntoIterator<Item = u32>, buf: &mut [u8]) -> Result<bool, WireError> {
        let b = fixed_mut::<CHANGED_NAMESPACE_LIST_SIZE>(buf, CHANGED_LIST)?;
        let mut set = NsidSet::new();
        for nsid in changed {
            set.insert(check_list_nsid(nsid, CHANGED_LIST)?);
        }
        if set.overflowed() {
            put_nsid_list(b, &[NSID_BROADCAST]);
        } else {
            put_nsid_list(b, set.as_slice());
        }
        Ok(set.overflowed())
    }

    /// Parse the first 4096 bytes of `buf`. Entries need not be sorted; 0xFFFFFFFF is only valid as the
    /// first entry.
    pub fn parse(buf: &[u8]) -> Result<ChangedNamespaces<'_>, WireError> {
        let b = fixed::<CHANGED_NAMESPACE_LIST_SIZE>(buf, CHANGED_LIST)?;
        if le32(b, 0) == NSID_BROADCAST {
            return Ok(ChangedNamespaces::MoreThan1024);
        }
        Ok(ChangedNamespaces::List(NamespaceIdList::parse(b, CHANGED_LIST, false)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::put32;

    use proptest::prelude::*;

    #[test]
    fn changed_namespace_list() {
        let mut b = [0xffu8; CHANGED_NAMESPACE_LIST_SIZE];
        assert!(!ChangedNamespaceList::encode([9, 3, 9, 4], &mut b).unwrap());
        assert_eq!(&b[..16], &[3, 0, 0, 0, 4, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[12..].iter().all(|&c| c == 0));
        match ChangedNamespaceList::parse(&b).unwrap() {
            ChangedNamespaces::List(list) => assert!(list.iter().eq([3, 4, 9])),
            other => panic!("{other:?}"),
        }
        assert!(!ChangedNamespaceList::encode(1..=1024, &mut b).unwrap());
        assert!(matches!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::List(l) if l.len() == 1024));
        assert!(ChangedNamespaceList::encode(1..=1025, &mut b).unwrap());
        assert_eq!(&b[..8], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::MoreThan1024);
        assert!(ChangedNamespaceList::encode([0], &mut b).is_err());
        assert!(ChangedNamespaceList::encode([NSID_BROADCAST], &mut b).is_err());
        // Unsorted entries parse; 0xFFFFFFFF after the first entry does not.
        b.fill(0);
        put32(&mut b, 0, 7);
        put32(&mut b, 4, 2);
        assert!(matches!(ChangedNamespaceList::parse(&b).unwrap(), ChangedNamespaces::List(l) if l.iter().eq([7, 2])));
        put32(&mut b, 8, NSID_BROADCAST);
        assert!(ChangedNamespaceList::parse(&b).is_err());
        assert!(ChangedNamespaceList::parse(&b[..4095]).is_err());
    }

    proptest! {
        #[test]
        fn changed_list_round_trip(ids in proptest::collection::vec(1u32..0xffff_fffe, 0..1100)) {
            let mut b = [0u8; CHANGED_NAMESPACE_LIST_SIZE];
            let overflow = ChangedNamespaceList::encode(ids.iter().copied(), &mut b).unwrap();
            let mut want = ids.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(overflow, want.len() > 1024);
            match ChangedNamespaceList::parse(&b).unwrap() {
                ChangedNamespaces::MoreThan1024 => prop_assert!(overflow),
                ChangedNamespaces::List(list) => prop_assert!(list.iter().eq(want)),
            }
        }

        #[test]
        fn changed_list_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 4090..4100)) {
            if let Ok(ChangedNamespaces::List(list)) = ChangedNamespaceList::parse(&bytes) {
                prop_assert!(list.len() <= 1024);
            }
        }
    }
}
