//! Randomness for challenges and DH private exponents ([`RandomSource`], the OS's in [`OsRandom`]), and the
//! sequence numbers of challenges ([`SequenceNumbers`]).

use std::sync::atomic::{AtomicU32, Ordering};

use super::AuthError;

/// Where random bytes come from: [`OsRandom`] in production, a fixed stream in tests.
pub trait RandomSource {
    /// Fill `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), AuthError>;
}

/// The operating system's random number generator (`getrandom(2)`).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), AuthError> {
        getrandom::fill(buf).map_err(|e| AuthError::Random(e.to_string()))
    }
}

/// Sequence numbers for challenges (S1 of a controller, S2 of a host): a random start, then one more each time,
/// never 0 (0 in a Reply means "no bidirectional authentication"). One per process, as the Linux host and nvmet
/// keep one, so two transactions never use the same.
#[derive(Debug, Default)]
pub struct SequenceNumbers(AtomicU32);

impl SequenceNumbers {
    /// A counter that picks its random start on first use.
    pub const fn new() -> Self {
        SequenceNumbers(AtomicU32::new(0))
    }

    /// The next sequence number.
    pub fn next(&self, rng: &mut dyn RandomSource) -> Result<u32, AuthError> {
        let mut seed = [0u8; 4];
        rng.fill(&mut seed)?;
        let start = u32::from_le_bytes(seed).max(1);
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let next = match current {
                0 => start,
                u32::MAX => 1,
                n => n + 1,
            };
            match self.0.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(next),
                Err(seen) => current = seen,
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A deterministic source: the bytes `seed, seed+1, …` (wrapping).
    #[derive(Debug)]
    pub(crate) struct Counting(pub u8);

    impl RandomSource for Counting {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), AuthError> {
            for b in buf {
                *b = self.0;
                self.0 = self.0.wrapping_add(1);
            }
            Ok(())
        }
    }

    #[test]
    fn sequence_numbers_start_random_then_count_and_skip_zero() {
        let s = SequenceNumbers::new();
        let first = s.next(&mut Counting(1)).unwrap();
        assert_eq!(first, u32::from_le_bytes([1, 2, 3, 4]));
        assert_eq!(s.next(&mut Counting(9)).unwrap(), first + 1);
        let wrap = SequenceNumbers(AtomicU32::new(u32::MAX));
        assert_eq!(wrap.next(&mut OsRandom).unwrap(), 1);
    }

    #[test]
    fn the_os_source_fills() {
        let mut a = [0u8; 32];
        OsRandom.fill(&mut a).unwrap();
        assert_ne!(a, [0u8; 32]);
    }
}
