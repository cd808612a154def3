//! Command identifiers as both transports make them: the slot index in the low 12 bits and a 4-bit generation
//! above it, bumped each time the slot is reused, so a response for a command that already completed is caught
//! as an unknown CID instead of completing a later command in the same slot.

use crate::error::HostError;

/// Bits of a CID that index the slot table; the rest is the slot's generation.
const INDEX_BITS: u32 = 12;
const INDEX_MASK: u16 = (1 << INDEX_BITS) - 1;
/// The deepest queue this host builds (the CID's index bits).
pub const MAX_QUEUE_DEPTH: u16 = 1 << INDEX_BITS;

/// Refuse a queue `depth` outside 1..=[`MAX_QUEUE_DEPTH`].
pub(crate) fn check_depth(depth: u16) -> Result<(), HostError> {
    if depth == 0 || depth > MAX_QUEUE_DEPTH {
        return Err(HostError::InvalidRequest(format!("queue depth {depth} (allowed 1..={MAX_QUEUE_DEPTH})")));
    }
    Ok(())
}

/// The CID of the command in slot `index` (below [`MAX_QUEUE_DEPTH`]) at `generation`.
pub(crate) fn of(index: usize, generation: u16) -> u16 {
    let index = u16::try_from(index).unwrap_or(INDEX_MASK) & INDEX_MASK;
    (generation << INDEX_BITS) | index
}

/// The slot a CID names (whether it is that slot's live command is the caller's to check with [`of`]).
pub(crate) fn slot(cid: u16) -> usize {
    usize::from(cid & INDEX_MASK)
}

/// The generation a slot takes for its next command.
pub(crate) fn next_generation(generation: u16) -> u16 {
    (generation + 1) & 0xF
}
