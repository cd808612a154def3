//! [`Poller`]: when a data-path thread that found nothing to do polls again at once and when it sleeps, per its
//! [`PollMode`]. Pure state (the caller passes the clock): the target's reactors and the host's queue workers run
//! the same policy around their own wait.
//!
//! The adaptive policy follows SPDK's poll/interrupt switching and the kernel's hybrid polling: it keeps an average
//! of the gaps between bursts of work (from the end of one to the start of the next), and after a burst keeps
//! polling for twice that average, bounded by the window, before it sleeps. Work that arrives faster than the
//! window is found without a wake-up; gaps longer than the window (a quiet peer, an idle daemon) drive the average
//! above it and the thread sleeps at once, so an idle thread costs no CPU.

use std::time::{Duration, Instant};

use nvmf_config::PollMode;

/// The default bound on an adaptive spin (`poll_window_us`).
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(200);

/// Weight of a new gap in the average: 1/8, as TCP's smoothed RTT.
const GAP_WEIGHT_SHIFT: u32 = 3;

/// What the thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Poll again without blocking.
    Poll,
    /// Block until woken (or the thread's own timer).
    Sleep,
}

/// One thread's polling state (see the module docs).
#[derive(Debug, Clone)]
pub struct Poller {
    mode: PollMode,
    window: Duration,
    /// Smoothed gap between bursts, in nanoseconds.
    gap_ns: u64,
    /// When the thread last found nothing to do after work (the start of the current gap).
    idle_since: Option<Instant>,
    /// Turns that polled without blocking and found nothing, and times the thread slept.
    empty_polls: u64,
    sleeps: u64,
}

impl Poller {
    /// A poller in `mode`, spinning at most `window` after work when adaptive.
    pub fn new(mode: PollMode, window: Duration) -> Self {
        // Start as if gaps were at the window's edge: the first bursts spin, and the average learns from there.
        let gap_ns = u64::try_from(window.as_nanos() / 2).unwrap_or(u64::MAX);
        Poller { mode, window, gap_ns, idle_since: None, empty_polls: 0, sleeps: 0 }
    }

    /// The mode.
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// After a turn at `now` that did (`worked`) or did not find work: whether the next wait polls or sleeps.
    ///
    /// After work, a thread that would sleep after one empty look (sleep mode; adaptive with gaps beyond the
    /// window) sleeps at once: the wait returns at once anyway when an event is there, so the look would only
    /// cost a poll and a clock read per burst, at queue depth 1 per command.
    pub fn after_turn(&mut self, worked: bool, now: Instant) -> Wait {
        if worked {
            if let Some(since) = self.idle_since.take() {
                let gap = u64::try_from(now.saturating_duration_since(since).as_nanos()).unwrap_or(u64::MAX);
                self.gap_ns = self.gap_ns - (self.gap_ns >> GAP_WEIGHT_SHIFT) + (gap >> GAP_WEIGHT_SHIFT);
            }
            let sleeps_at_once = match self.mode {
                PollMode::Busy => false,
                PollMode::Sleep => true,
                PollMode::Adaptive => self.spin().is_zero(),
            };
            if !sleeps_at_once {
                return Wait::Poll;
            }
        }
        let since = *self.idle_since.get_or_insert(now);
        let wait = match self.mode {
            PollMode::Busy => Wait::Poll,
            PollMode::Sleep => Wait::Sleep,
            PollMode::Adaptive if now.saturating_duration_since(since) < self.spin() => Wait::Poll,
            PollMode::Adaptive => Wait::Sleep,
        };
        match wait {
            Wait::Poll => self.empty_polls += 1,
            Wait::Sleep => self.sleeps += 1,
        }
        wait
    }

    /// Before polling again without blocking after a turn that found nothing, in adaptive mode: give the CPU to any
    /// other runnable thread on it (`sched_yield`). What the thread polls for is often produced on its own CPU (a
    /// loopback peer's thread, the softirq that receives), and a spin that does not yield keeps it off the CPU until
    /// the spin ends (at QD1 over loopback, a host's p99 then sits at the poll window). Busy mode never yields (a
    /// dedicated CPU, as SPDK's).
    pub fn yield_if_idle(&self, worked: bool) {
        if !worked && self.mode == PollMode::Adaptive {
            std::thread::yield_now();
        }
    }

    /// How long an adaptive thread spins after work: twice the average gap, or nothing once that passes the window.
    pub fn spin(&self) -> Duration {
        let spin = Duration::from_nanos(self.gap_ns.saturating_mul(2));
        if spin > self.window {
            Duration::ZERO
        } else {
            spin
        }
    }

    /// Polls that found nothing, and sleeps, since the start (for metrics).
    pub fn counts(&self) -> (u64, u64) {
        (self.empty_polls, self.sleeps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_micros(100);

    /// Bursts of work separated by `gap`, as many as `bursts`; the poller's waits after the last one.
    fn run(poller: &mut Poller, gap: Duration, bursts: usize) -> Instant {
        let mut now = Instant::now();
        for _ in 0..bursts {
            poller.after_turn(true, now);
            poller.after_turn(false, now);
            now += gap;
        }
        now
    }

    #[test]
    fn sleep_mode_never_polls_and_busy_mode_never_sleeps() {
        let now = Instant::now();
        let mut sleep = Poller::new(PollMode::Sleep, WINDOW);
        let mut busy = Poller::new(PollMode::Busy, WINDOW);
        assert_eq!(busy.after_turn(true, now), Wait::Poll);
        assert_eq!(sleep.after_turn(true, now), Wait::Sleep, "a wait returns at once when work is there");
        for t in [0, 1, 1_000_000] {
            assert_eq!(sleep.after_turn(false, now + Duration::from_micros(t)), Wait::Sleep);
            assert_eq!(busy.after_turn(false, now + Duration::from_micros(t)), Wait::Poll);
        }
    }

    #[test]
    fn short_gaps_are_polled_for_and_the_spin_ends() {
        let mut p = Poller::new(PollMode::Adaptive, WINDOW);
        let now = run(&mut p, Duration::from_micros(20), 64);
        assert!(p.spin() >= Duration::from_micros(30) && p.spin() <= WINDOW, "spin {:?}", p.spin());
        p.after_turn(true, now);
        assert_eq!(p.after_turn(false, now + Duration::from_micros(1)), Wait::Poll);
        assert_eq!(p.after_turn(false, now + Duration::from_micros(39)), Wait::Poll);
        // The spin counts from the first turn that found nothing.
        let spin = p.spin();
        assert_eq!(p.after_turn(false, now + Duration::from_micros(1) + spin), Wait::Sleep, "the spin is bounded");
    }

    #[test]
    fn gaps_longer_than_the_window_sleep_at_once() {
        let mut p = Poller::new(PollMode::Adaptive, WINDOW);
        let now = run(&mut p, Duration::from_millis(5), 64);
        assert_eq!(p.spin(), Duration::ZERO);
        assert_eq!(p.after_turn(true, now), Wait::Sleep, "no look before the sleep");
        // When arrivals speed up again, the average comes back under the window and the spin returns.
        let now = run(&mut p, Duration::from_micros(10), 64);
        assert!(p.spin() > Duration::ZERO);
        p.after_turn(true, now);
        assert_eq!(p.after_turn(false, now), Wait::Poll);
    }

    #[test]
    fn an_idle_thread_sleeps_after_one_bounded_spin() {
        let mut p = Poller::new(PollMode::Adaptive, WINDOW);
        let start = Instant::now();
        p.after_turn(true, start);
        let mut now = start;
        while p.after_turn(false, now) == Wait::Poll {
            now += Duration::from_micros(1);
            assert!(now - start <= WINDOW, "spun past the window");
        }
        let (polls, sleeps) = p.counts();
        assert!(polls > 0 && sleeps == 1);
    }
}
