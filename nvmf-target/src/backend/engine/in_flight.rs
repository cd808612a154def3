//! The bookkeeping of ops in the kernel: the in-flight table keyed by CQE user data (which owns the tag and the
//! buffer of every op until its CQE is reaped), the groups of NVMe commands that complete one op together, and
//! what a successful CQE must report.

use std::io;
use std::sync::Arc;

use super::super::nvme;
use super::super::{BufferId, Storage};

/// What a successful CQE must report.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect {
    Read(u32),
    Write(u32),
    Done,
    /// An async block discard; on EOPNOTSUPP (kernel without the command) it is redone with the ioctl.
    BlockDiscard {
        offset: u64,
        len: u64,
    },
    /// An NVMe command carrying a whole op: status 0 means this many bytes done.
    Nvme(u32),
    /// One of several NVMe commands of an op: the group (index into `Groups`) completes the op.
    NvmePart(u32),
}

/// An op sent to the drive as several NVMe commands.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) tag: u64,
    /// Commands not completed yet.
    pub(super) remaining: usize,
    /// The op's buffer, in flight until the last command completes.
    pub(super) buffer: Option<BufferId>,
    /// Bytes the op moves (its result when every command succeeds).
    pub(super) bytes: u32,
    /// The first failure.
    pub(super) error: Option<io::Error>,
    /// Keeps a plain descriptor open until the last command completes.
    pub(super) _storage: Option<Arc<Storage>>,
}

/// Fixed-capacity slab of [`Group`]s.
#[derive(Debug)]
pub(super) struct Groups {
    entries: Vec<Option<Group>>,
    free: Vec<u32>,
    /// Sum of `remaining` over the groups: in-flight entries that are parts.
    pub(super) parts: usize,
}

impl Groups {
    pub(super) fn new(capacity: u32) -> Self {
        Groups { entries: (0..capacity).map(|_| None).collect(), free: (0..capacity).rev().collect(), parts: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    pub(super) fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    pub(super) fn insert(&mut self, group: Group) -> Option<u32> {
        let index = self.free.pop()?;
        self.parts += group.remaining;
        self.entries[index as usize] = Some(group);
        Some(index)
    }

    /// `n` commands of group `index` will never complete (they could not be pushed): drop them, and the group if
    /// none is left. Returns the group when it is finished.
    pub(super) fn forget(&mut self, index: u32, n: usize, error: io::Error) -> Option<Group> {
        let group = self.entries.get_mut(index as usize)?.as_mut()?;
        let n = n.min(group.remaining);
        group.remaining -= n;
        self.parts -= n;
        group.error.get_or_insert(error);
        if group.remaining == 0 {
            self.free.push(index);
            return self.entries[index as usize].take();
        }
        None
    }

    /// One command of group `index` completed with `result`; returns the group when it was the last one.
    pub(super) fn part_done(&mut self, index: u32, result: Result<u32, io::Error>) -> Option<Group> {
        let group = self.entries.get_mut(index as usize)?.as_mut()?;
        group.remaining = group.remaining.saturating_sub(1);
        self.parts = self.parts.saturating_sub(1);
        if let Err(e) = result {
            group.error.get_or_insert(e);
        }
        if group.remaining == 0 {
            self.free.push(index);
            return self.entries[index as usize].take();
        }
        None
    }
}

/// One op in the kernel.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) tag: u64,
    pub(super) buffer: Option<BufferId>,
    pub(super) expect: Expect,
    /// Keeps a plain descriptor open until completion (when no fixed-file slot was available, and for block
    /// discards, which may be redone synchronously).
    pub(super) storage: Option<Arc<Storage>>,
}

/// Fixed-capacity slab keyed by the CQE user data.
#[derive(Debug)]
pub(super) struct InFlightTable {
    entries: Vec<Option<InFlight>>,
    free: Vec<u32>,
}

impl InFlightTable {
    pub(super) fn new(capacity: u32) -> Self {
        InFlightTable { entries: (0..capacity).map(|_| None).collect(), free: (0..capacity).rev().collect() }
    }

    pub(super) fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn free_len(&self) -> usize {
        self.free.len()
    }

    pub(super) fn insert(&mut self, entry: InFlight) -> Option<u32> {
        let key = self.free.pop()?;
        self.entries[key as usize] = Some(entry);
        Some(key)
    }

    pub(super) fn remove(&mut self, key: u64) -> Option<InFlight> {
        let index = u32::try_from(key).ok()?;
        let entry = self.entries.get_mut(index as usize)?.take()?;
        self.free.push(index);
        Some(entry)
    }
}

pub(super) fn cqe_result(res: i32, expect: Expect) -> Result<u32, io::Error> {
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    let done = res.unsigned_abs();
    match expect {
        Expect::Read(len) | Expect::Write(len) if done == len => Ok(done),
        Expect::Read(len) => {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read: {done} of {len} bytes")))
        }
        Expect::Write(len) => {
            Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write: {done} of {len} bytes")))
        }
        Expect::Done | Expect::BlockDiscard { .. } => Ok(0),
        Expect::Nvme(_) | Expect::NvmePart(_) => nvme::cqe_result(res, 0, 0),
    }
}
