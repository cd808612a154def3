//! How a completion finds its connection: [`ConnectionKey`] (a slot of the poll group's [`ConnectionTable`] and
//! that slot's generation), the `wr_id` layout that carries it, and the table itself.
//!
//! A slot is reused once its connection was dropped, but a completion can outlive the connection it was for: a
//! device's completion queue is shared by the reactor's queue pairs and keeps the entries of one destroyed after a
//! flush timeout, and a provider may report flushes late. So every key names the slot's generation, bumped each
//! time the slot is vacated, and a lookup with another generation finds nothing: the stale completion is counted
//! and dropped, never delivered to the slot's next owner. Storage completions come back by the same key (it is the
//! controller queue's key), and the shared receive queue's map from queue pair number holds keys too.
//!
//! Runs on the reactor thread; a lookup is an index and a compare.

/// What a work request was, encoded in its `wr_id` beside the connection and the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrKind {
    /// A receive buffer (index: the buffer).
    Recv,
    /// A buffer of the reactor's shared receive queue on the device (no connection: the completion's queue pair
    /// number names it; index: the buffer).
    SharedRecv,
    /// An RDMA READ of a command's data (index: the slot).
    Read,
    /// A response SEND (index: the slot), possibly after an RDMA WRITE.
    Send,
    /// An RDMA WRITE signalled on Soft-iWARP (index: the slot): nothing to do, the SEND after it completes the
    /// slot (see `DeviceContext::soft_iwarp`).
    Write,
}

/// Bits of a [`ConnectionKey`] that number the slot; the 8 above are its generation.
const SLOT_BITS: u32 = 24;

/// Connections one reactor serves at most (slots a key can name).
pub(crate) const MAX_CONNECTIONS: usize = 1 << SLOT_BITS;

/// A connection of a poll group: its slot (bits 23-0) and the slot's generation when it was filled (bits 31-24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionKey(u32);

impl ConnectionKey {
    fn new(slot: usize, generation: u8) -> Self {
        debug_assert!(slot < MAX_CONNECTIONS);
        let slot = u32::try_from(slot).unwrap_or(u32::MAX) & ((1 << SLOT_BITS) - 1);
        ConnectionKey((u32::from(generation) << SLOT_BITS) | slot)
    }

    /// The key as a `wr_id` or queue key carries it.
    pub(crate) fn from_raw(raw: u32) -> Self {
        ConnectionKey(raw)
    }

    /// See [`ConnectionKey::from_raw`].
    pub(crate) fn to_raw(self) -> u32 {
        self.0
    }

    /// The slot in the table.
    pub(crate) fn slot(self) -> usize {
        usize::try_from(self.0 & ((1 << SLOT_BITS) - 1)).unwrap_or(usize::MAX)
    }

    fn generation(self) -> u8 {
        self.0.to_be_bytes()[0]
    }
}

/// `wr_id` of a work request: connection key (bits 63-32), kind (bits 31-24), index (bits 15-0). Shared receives
/// name no connection (key 0).
pub(crate) fn wr_id(connection: ConnectionKey, kind: WrKind, index: u16) -> u64 {
    let kind = match kind {
        WrKind::Recv => 1u64,
        WrKind::Read => 2,
        WrKind::Send => 3,
        WrKind::SharedRecv => 4,
        WrKind::Write => 5,
    };
    (u64::from(connection.0) << 32) | (kind << 24) | u64::from(index)
}

/// The connection key, kind and index of a `wr_id`, or `None` for one we never made.
pub(crate) fn split_wr_id(wr_id: u64) -> Option<(ConnectionKey, WrKind, u16)> {
    let [index_lo, index_hi, _, kind, c0, c1, c2, c3] = wr_id.to_le_bytes();
    let kind = match kind {
        1 => WrKind::Recv,
        2 => WrKind::Read,
        3 => WrKind::Send,
        4 => WrKind::SharedRecv,
        5 => WrKind::Write,
        _ => return None,
    };
    Some((ConnectionKey(u32::from_le_bytes([c0, c1, c2, c3])), kind, u16::from_le_bytes([index_lo, index_hi])))
}

#[derive(Debug)]
struct Entry<T> {
    generation: u8,
    value: Option<T>,
}

/// A poll group's connections by slot (see the module docs). A slot is reserved (its key names the new
/// connection's work requests and queue before the connection exists), then filled, then released; releasing
/// bumps its generation, so every key handed out for it before no longer finds anything.
#[derive(Debug)]
pub(crate) struct ConnectionTable<T> {
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
}

impl<T> Default for ConnectionTable<T> {
    fn default() -> Self {
        ConnectionTable { entries: Vec::new(), free: Vec::new() }
    }
}

impl<T> ConnectionTable<T> {
    /// A free slot's key, for a connection to [`ConnectionTable::fill`] or [`ConnectionTable::release`]; `None`
    /// when [`MAX_CONNECTIONS`] slots are taken.
    pub(crate) fn reserve(&mut self) -> Option<ConnectionKey> {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.entries.len() < MAX_CONNECTIONS => {
                self.entries.push(Entry { generation: 0, value: None });
                self.entries.len() - 1
            }
            None => return None,
        };
        Some(ConnectionKey::new(slot, self.entries[slot].generation))
    }

    /// Put `value` in the slot reserved as `key`.
    pub(crate) fn fill(&mut self, key: ConnectionKey, value: T) {
        if let Some(entry) = self.entries.get_mut(key.slot()).filter(|e| e.generation == key.generation()) {
            entry.value = Some(value);
        }
    }

    /// Vacate `key`'s slot (filled or only reserved) and return what it held; nothing if `key` is stale.
    pub(crate) fn release(&mut self, key: ConnectionKey) -> Option<T> {
        let entry = self.entries.get_mut(key.slot()).filter(|e| e.generation == key.generation())?;
        entry.generation = entry.generation.wrapping_add(1);
        let value = entry.value.take();
        self.free.push(key.slot());
        value
    }

    /// The connection `key` names, if it is still the slot's.
    pub(crate) fn get_mut(&mut self, key: ConnectionKey) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.slot())?;
        if entry.generation != key.generation() {
            return None;
        }
        entry.value.as_mut()
    }

    /// Slots ever used (for [`ConnectionTable::at_mut`]).
    pub(crate) fn slots(&self) -> usize {
        self.entries.len()
    }

    /// The connection in `slot`, with its key.
    pub(crate) fn at_mut(&mut self, slot: usize) -> Option<(ConnectionKey, &mut T)> {
        let entry = self.entries.get_mut(slot)?;
        let key = ConnectionKey::new(slot, entry.generation);
        entry.value.as_mut().map(|v| (key, v))
    }

    /// Every connection.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + Clone {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    /// Every connection, mutably.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().filter_map(|e| e.value.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip_and_foreign_ones_are_refused() {
        for (slot, generation, kind, index) in [
            (0, 0, WrKind::Recv, 0),
            (7, 1, WrKind::Read, 255),
            (MAX_CONNECTIONS - 1, u8::MAX, WrKind::Send, u16::MAX),
            (1 << 20, 9, WrKind::Recv, 9),
            (0, 0, WrKind::SharedRecv, 4095),
            (3, 2, WrKind::Write, 17),
        ] {
            let key = ConnectionKey::new(slot, generation);
            assert_eq!((key.slot(), key.generation()), (slot, generation));
            assert_eq!(ConnectionKey::from_raw(key.to_raw()), key);
            assert_eq!(split_wr_id(wr_id(key, kind, index)), Some((key, kind, index)));
        }
        assert_eq!(split_wr_id(0), None);
        assert_eq!(split_wr_id(6 << 24), None);
    }

    /// A completion of the slot's previous connection (its CQE still in the shared CQ, or its storage op) must
    /// not reach the connection that took the slot over.
    #[test]
    fn a_completion_for_a_vacated_slot_never_reaches_its_next_owner() {
        let mut table = ConnectionTable::default();
        let old = table.reserve().expect("a slot");
        table.fill(old, "old");
        let stale = wr_id(old, WrKind::Send, 3);
        assert_eq!(table.release(old), Some("old"));
        let new = table.reserve().expect("a slot");
        assert_eq!(new.slot(), old.slot(), "the slot is reused");
        table.fill(new, "new");
        let (key, kind, index) = split_wr_id(stale).expect("ours");
        assert_eq!((kind, index), (WrKind::Send, 3));
        assert_eq!(table.get_mut(key), None, "the old connection's completion is stale");
        assert_eq!(table.get_mut(new), Some(&mut "new"));
        assert_eq!(table.release(old), None, "a stale key vacates nothing");
        assert_eq!(table.get_mut(new), Some(&mut "new"));
        // A reservation given back (an accept that failed after posting receives) is vacated as well.
        let failed = table.reserve().expect("a slot");
        assert_eq!(table.release(failed), None);
        let next = table.reserve().expect("a slot");
        assert_eq!(next.slot(), failed.slot());
        table.fill(failed, "too late");
        assert_eq!(table.get_mut(next), None, "a stale fill does not land");
        assert_eq!(table.get_mut(failed), None);
    }

    /// The shared receive queue's map keeps a key per queue pair number: an entry left behind by a connection that
    /// is gone names nothing, even when a new connection took its slot.
    #[test]
    fn a_stale_shared_receive_entry_routes_to_no_one() {
        let mut table = ConnectionTable::default();
        let mut by_qp_num = std::collections::HashMap::new();
        let a = table.reserve().expect("a slot");
        table.fill(a, 'a');
        by_qp_num.insert(17u32, a);
        table.release(a);
        let b = table.reserve().expect("a slot");
        table.fill(b, 'b');
        by_qp_num.insert(18, b);
        assert_eq!(by_qp_num.get(&17).and_then(|&k| table.get_mut(k)), None);
        assert_eq!(by_qp_num.get(&18).and_then(|&k| table.get_mut(k)), Some(&mut 'b'));
        // A new queue pair that got number 17 again replaces the entry.
        by_qp_num.insert(17, b);
        assert_eq!(by_qp_num.get(&17).and_then(|&k| table.get_mut(k)), Some(&mut 'b'));
    }

    #[test]
    fn generations_wrap_and_iteration_sees_filled_slots_only() {
        let mut table = ConnectionTable::default();
        let first = table.reserve().expect("a slot");
        let mut key = first;
        for _ in 0..256 {
            table.fill(key, 1);
            table.release(key);
            key = table.reserve().expect("a slot");
        }
        assert_eq!(key, first, "the generation is 8 bits");
        table.fill(key, 1);
        let other = table.reserve().expect("a slot");
        assert_eq!(table.slots(), 2);
        assert_eq!(table.iter().count(), 1, "a reserved slot holds nothing yet");
        table.fill(other, 2);
        assert_eq!(table.at_mut(other.slot()).map(|(k, v)| (k, *v)), Some((other, 2)));
        assert_eq!(table.iter_mut().map(|v| *v).sum::<i32>(), 3);
    }
}
