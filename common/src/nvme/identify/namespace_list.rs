//! Namespace ID lists: the Active Namespace ID list (CNS 02h) and the 1024-entry NSID list layout it shares
//! with the Changed Namespace List log page.

use super::{IDENTIFY_DATA_SIZE, NSID_BROADCAST, NSID_LIST_ENTRIES};
use crate::wire::{fixed, fixed_mut, le32, WireError};

/// A sorted, de-duplicated set of at most 1024 NSIDs built without allocating; it remembers whether
/// more distinct NSIDs were offered than it could keep (it keeps the smallest).
#[derive(Debug, Clone)]
pub(crate) struct NsidSet {
    ids: [u32; NSID_LIST_ENTRIES],
    len: usize,
    overflow: bool,
}

impl NsidSet {
    pub(crate) fn new() -> Self {
        NsidSet { ids: [0; NSID_LIST_ENTRIES], len: 0, overflow: false }
    }

    pub(crate) fn insert(&mut self, nsid: u32) {
        let Err(pos) = self.ids[..self.len].binary_search(&nsid) else { return };
        if self.len < NSID_LIST_ENTRIES {
            self.ids.copy_within(pos..self.len, pos + 1);
            self.ids[pos] = nsid;
            self.len += 1;
        } else {
            self.overflow = true;
            if pos < NSID_LIST_ENTRIES {
                self.ids.copy_within(pos..NSID_LIST_ENTRIES - 1, pos + 1);
                self.ids[pos] = nsid;
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len]
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.overflow
    }
}

/// Check an NSID offered to a list encoder: 0 and the broadcast value are never namespaces.
pub(crate) fn check_list_nsid(nsid: u32, structure: &'static str) -> Result<u32, WireError> {
    if nsid == 0 || nsid == NSID_BROADCAST {
        Err(WireError::invalid(structure, "nsid", nsid, "1..=0xFFFFFFFE"))
    } else {
        Ok(nsid)
    }
}

/// Write `ids` as little-endian dwords into the 4096 bytes of `b`, zero-filling the rest.
pub(crate) fn put_nsid_list(b: &mut [u8; IDENTIFY_DATA_SIZE], ids: &[u32]) {
    b.fill(0);
    for (chunk, id) in b.chunks_exact_mut(4).zip(ids) {
        chunk.copy_from_slice(&id.to_le_bytes());
    }
}

/// A parsed namespace ID list (Identify CNS 02h, Changed Namespace List): the non-zero entries before
/// the first zero, borrowed from the input. Iterate with [`iter`](Self::iter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIdList<'a> {
    /// The entries' bytes, a multiple of 4 long, ending before the zero terminator.
    entries: &'a [u8],
}

impl<'a> NamespaceIdList<'a> {
    /// Parse the first 4096 bytes of `buf`: entries up to the first zero. With `ascending`, entries must
    /// be strictly increasing. An entry of 0xFFFFFFFF is rejected.
    pub(crate) fn parse(buf: &'a [u8], structure: &'static str, ascending: bool) -> Result<Self, WireError> {
        let b = fixed::<IDENTIFY_DATA_SIZE>(buf, structure)?;
        let mut count = 0;
        let mut previous = 0u32;
        for chunk in b.chunks_exact(4) {
            let nsid = le32(chunk, 0);
            if nsid == 0 {
                break;
            }
            if nsid == NSID_BROADCAST {
                return Err(WireError::invalid(structure, "nsid", nsid, "1..=0xFFFFFFFE"));
            }
            if ascending && nsid <= previous {
                return Err(WireError::invalid(structure, "nsid", nsid, "NSIDs in strictly increasing order"));
            }
            previous = nsid;
            count += 1;
        }
        Ok(NamespaceIdList { entries: &b[..4 * count] })
    }

    /// The empty list.
    pub fn empty() -> Self {
        NamespaceIdList { entries: &[] }
    }

    /// Number of NSIDs.
    pub fn len(&self) -> usize {
        self.entries.len() / 4
    }

    /// True when the list holds no NSID.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The NSIDs in list order.
    pub fn iter(&self) -> NamespaceIdIter<'a> {
        NamespaceIdIter { chunks: self.entries.chunks_exact(4) }
    }
}

impl<'a> IntoIterator for NamespaceIdList<'a> {
    type Item = u32;
    type IntoIter = NamespaceIdIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the NSIDs of a [`NamespaceIdList`].
#[derive(Debug, Clone)]
pub struct NamespaceIdIter<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for NamespaceIdIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.chunks.next().map(|c| le32(c, 0))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for NamespaceIdIter<'_> {}

const ACTIVE_LIST: &str = "ActiveNamespaceIdList";

/// Active Namespace ID list (CNS 02h; Base 2.0 §5.17.2.2), 4096 bytes: up to 1024 active NSIDs
/// greater than the NSID in the command, in increasing order, zero-terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveNamespaceIdList;

impl ActiveNamespaceIdList {
    /// Encode the list answering an Identify whose NSID is `requested_nsid` into the first 4096 bytes
    /// of `buf`: the NSIDs of `active` greater than `requested_nsid`, sorted, de-duplicated and
    /// truncated to the smallest 1024 (the host continues from the last one). `active` may come in any
    /// order. Returns the number of entries written. Errors on an NSID of 0 or 0xFFFFFFFF in `active`.
    ///
    /// The target answers a request for NSID 0xFFFFFFFE or 0xFFFFFFFF with Invalid Namespace or Format
    /// before calling this.
    pub fn encode(
        requested_nsid: u32,
        active: impl IntoIterator<Item = u32>,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let b = fixed_mut::<IDENTIFY_DATA_SIZE>(buf, ACTIVE_LIST)?;
        let mut set = NsidSet::new();
        for nsid in active {
            if check_list_nsid(nsid, ACTIVE_LIST)? > requested_nsid {
                set.insert(nsid);
            }
        }
        put_nsid_list(b, set.as_slice());
        Ok(set.as_slice().len())
    }

    /// Parse the first 4096 bytes of `buf`. Errors if the entries before the terminator are not strictly
    /// increasing or hold 0xFFFFFFFF.
    pub fn parse(buf: &[u8]) -> Result<NamespaceIdList<'_>, WireError> {
        NamespaceIdList::parse(buf, ACTIVE_LIST, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::put32;
    use proptest::prelude::*;

    #[test]
    fn active_namespace_list_is_greater_sorted_and_deduplicated() {
        let mut b = [0xffu8; IDENTIFY_DATA_SIZE];
        let n = ActiveNamespaceIdList::encode(2, [7, 1, 3, 2, 5, 3], &mut b).unwrap();
        assert_eq!(n, 3);
        assert_eq!(&b[..16], &[3, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[12..].iter().all(|&c| c == 0));
        let list = ActiveNamespaceIdList::parse(&b).unwrap();
        assert_eq!(list.len(), 3);
        assert!(list.iter().eq([3, 5, 7]));
        // More than 1024: the smallest 1024 are kept, whatever the order offered.
        let n = ActiveNamespaceIdList::encode(0, (1..=2000).rev(), &mut b).unwrap();
        assert_eq!(n, 1024);
        let list = ActiveNamespaceIdList::parse(&b).unwrap();
        assert!(list.iter().eq(1..=1024));
        assert_eq!(ActiveNamespaceIdList::encode(10, [1, 2], &mut b).unwrap(), 0);
        assert!(ActiveNamespaceIdList::parse(&b).unwrap().is_empty());
    }

    #[test]
    fn active_namespace_list_rejections() {
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        assert!(matches!(
            ActiveNamespaceIdList::encode(0, [1, 0], &mut b),
            Err(WireError::InvalidField { field: "nsid", value: 0, .. })
        ));
        assert!(ActiveNamespaceIdList::encode(0, [NSID_BROADCAST], &mut b).is_err());
        assert!(ActiveNamespaceIdList::encode(0, [1], &mut [0u8; 4095]).is_err());
        put32(&mut b, 0, 5);
        put32(&mut b, 4, 4);
        assert!(matches!(ActiveNamespaceIdList::parse(&b), Err(WireError::InvalidField { value: 4, .. })));
        put32(&mut b, 4, 5);
        assert!(ActiveNamespaceIdList::parse(&b).is_err());
        put32(&mut b, 4, NSID_BROADCAST);
        assert!(ActiveNamespaceIdList::parse(&b).is_err());
        assert!(ActiveNamespaceIdList::parse(&b[..4095]).is_err());
    }

    proptest! {
        #[test]
        fn active_list_round_trip(requested in any::<u32>(), ids in proptest::collection::vec(1u32..0xffff_fffe, 0..1500)) {
            let mut b = [0u8; IDENTIFY_DATA_SIZE];
            let n = ActiveNamespaceIdList::encode(requested, ids.iter().copied(), &mut b).unwrap();
            let mut want: Vec<u32> = ids.iter().copied().filter(|&i| i > requested).collect();
            want.sort_unstable();
            want.dedup();
            want.truncate(NSID_LIST_ENTRIES);
            prop_assert_eq!(n, want.len());
            let got: Vec<u32> = ActiveNamespaceIdList::parse(&b).unwrap().iter().collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn active_list_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            if let Ok(list) = ActiveNamespaceIdList::parse(&bytes) {
                let mut b = [0u8; IDENTIFY_DATA_SIZE];
                ActiveNamespaceIdList::encode(0, list.iter(), &mut b).unwrap();
                let again = ActiveNamespaceIdList::parse(&b).unwrap();
                prop_assert!(again.iter().eq(list.iter()));
            }
        }
    }
}
