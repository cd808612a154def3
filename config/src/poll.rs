//! [`PollMode`]: how a data-path thread (a target reactor, a host queue's worker) waits for work, the `poll` key of
//! both daemons' configurations and perf's `--poll`.

use std::fmt;

/// How a data-path thread waits when it has nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// After work, keep polling without sleeping for a window that follows the gaps seen between bursts of work
    /// (bounded by the configured window), then sleep until woken. Arrivals that come faster than a wake-up pay no
    /// wake-up; an idle thread sleeps.
    #[default]
    Adaptive,
    /// Always sleep until woken (an event, a completion, a timer).
    Sleep,
    /// Never sleep: poll continuously, one CPU per thread even when idle (SPDK's reactors).
    Busy,
}

impl PollMode {
    /// Every mode.
    pub const ALL: [PollMode; 3] = [PollMode::Adaptive, PollMode::Sleep, PollMode::Busy];

    /// The mode's name: `adaptive`, `sleep`, `busy`.
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Adaptive => "adaptive",
            PollMode::Sleep => "sleep",
            PollMode::Busy => "busy",
        }
    }

    /// From its name (see [`PollMode::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        PollMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl fmt::Display for PollMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PollMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PollMode::from_name(s).ok_or_else(|| format!("unknown poll mode {s:?}: adaptive, sleep or busy"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for mode in PollMode::ALL {
            assert_eq!(mode.name().parse::<PollMode>(), Ok(mode));
        }
        assert!("spin".parse::<PollMode>().unwrap_err().contains("adaptive, sleep or busy"));
    }
}
