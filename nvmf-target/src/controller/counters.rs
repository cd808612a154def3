//! [`QueueCounters`]: the SMART and metrics counters of one queue, and their sum ([`CounterSnapshot`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// SMART and metrics counters of one queue. Written only by the reactor owning the queue (load + store, so no
/// locked instruction per I/O), read by anyone.
#[derive(Debug, Default)]
pub struct QueueCounters {
    read_commands: AtomicU64,
    write_commands: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    media_errors: AtomicU64,
    errors: AtomicU64,
    /// Commands the queue holds now: arrived, their response not yet released by the transport.
    outstanding: AtomicU32,
}

/// A copy of counters, summed over queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Read and Compare commands completed successfully.
    pub read_commands: u64,
    /// Write and Write Zeroes commands completed successfully.
    pub write_commands: u64,
    /// Bytes returned by Read.
    pub bytes_read: u64,
    /// Bytes stored by Write.
    pub bytes_written: u64,
    /// Commands failed by a storage error.
    pub media_errors: u64,
    /// Commands completed with any error status.
    pub errors: u64,
}

impl std::ops::AddAssign for CounterSnapshot {
    fn add_assign(&mut self, o: Self) {
        self.read_commands = self.read_commands.wrapping_add(o.read_commands);
        self.write_commands = self.write_commands.wrapping_add(o.write_commands);
        self.bytes_read = self.bytes_read.wrapping_add(o.bytes_read);
        self.bytes_written = self.bytes_written.wrapping_add(o.bytes_written);
        self.media_errors = self.media_errors.wrapping_add(o.media_errors);
        self.errors = self.errors.wrapping_add(o.errors);
    }
}

/// Single-writer increment: the owning reactor is the only writer, so load + store cannot lose updates.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl QueueCounters {
    pub(crate) fn read(&self, bytes: u64) {
        bump(&self.read_commands, 1);
        bump(&self.bytes_read, bytes);
    }

    pub(crate) fn compare(&self) {
        bump(&self.read_commands, 1);
    }

    pub(crate) fn write(&self, bytes: u64) {
        bump(&self.write_commands, 1);
        bump(&self.bytes_written, bytes);
    }

    pub(crate) fn error(&self, media: bool) {
        bump(&self.errors, 1);
        if media {
            bump(&self.media_errors, 1);
        }
    }

    pub(crate) fn set_outstanding(&self, commands: usize) {
        self.outstanding.store(u32::try_from(commands).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// Commands the queue holds now (arrived, response not yet released).
    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// The current values.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            read_commands: self.read_commands.load(Ordering::Relaxed),
            write_commands: self.write_commands.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            media_errors: self.media_errors.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}
