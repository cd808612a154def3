//! [`TurnClock`]: a reactor's clock readings, which the controller's queues go by.
//!
//! The reactor reads the clock once per turn, when its poll returns: the time its timers go by and the arrival
//! time of every command read in the turn. A command's completion time is read once per batch of work that may
//! complete commands (an event's, the storage completions reaped at once, the group's poll), at the batch's first
//! completion, and the others of the batch share it. A clock read per command would cost two `clock_gettime` per
//! I/O, a system call where the vDSO cannot read the clock source (HPET, as in TCG guests).
//!
//! The clock lives in the reactor's [`IoEngine`](super::IoEngine) because every `Queue` call already takes the
//! engine: no argument more on the data path, nothing to allocate, and no thread-local that would silently read
//! the system clock off a reactor thread. Whoever drives queues sets it: the reactor, and tests and the fuzz
//! harness as theirs do.

use std::time::Instant;

/// The current turn's clock reading and its current batch's completion time (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct TurnClock {
    turn: Instant,
    /// The current batch's first completion read the clock (`None`: not read yet).
    completion: Option<Instant>,
}

impl TurnClock {
    /// A clock whose turn is `now`.
    pub fn new(now: Instant) -> Self {
        TurnClock { turn: now, completion: None }
    }

    /// A new turn at `now` (the reactor's poll returned), and with it a new completion batch.
    pub fn start_turn(&mut self, now: Instant) {
        *self = TurnClock::new(now);
    }

    /// A new batch of work that may complete commands: its first completion reads the clock again. A command's
    /// latency thus runs from its turn's start to its batch's first completion: one clock read per batch, never 0
    /// for a command that completes in the turn it arrived.
    pub fn new_batch(&mut self) {
        self.completion = None;
    }

    /// The current turn's time: the arrival of the commands read in it.
    pub fn turn(&self) -> Instant {
        self.turn
    }

    /// When the current batch's commands complete: the clock read at its first completion.
    pub fn completion(&mut self) -> Instant {
        *self.completion.get_or_insert_with(Instant::now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_batch_reads_the_clock_once_and_a_turn_starts_a_batch() {
        let t0 = Instant::now() - Duration::from_secs(60);
        let mut clock = TurnClock::new(t0);
        assert_eq!(clock.turn(), t0);
        let first = clock.completion();
        assert!(first > t0);
        assert_eq!(clock.completion(), first, "the batch shares its first reading");
        clock.new_batch();
        let second = clock.completion();
        assert!(second >= first);
        assert_eq!(clock.turn(), t0, "a batch keeps its turn");
        let t1 = t0 + Duration::from_secs(1);
        clock.start_turn(t1);
        assert_eq!(clock.turn(), t1);
        assert!(clock.completion() >= second, "a new turn reads the clock again");
    }
}
