//! [`LatencyHistogram`]: perf's fixed-size log-linear histogram of command latencies, and the
//! [`LatencySummary`] it reports. Recording is a few arithmetic operations and allocates nothing, so a worker's
//! measuring loop can record every command.

use std::time::Duration;

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencySummary {
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Linear sub-buckets per power of two (2^5 = 32: under 3.2 % error).
const SUB_BITS: u32 = 5;

const SUB: usize = 1 << SUB_BITS;

/// Buckets for every `u64` nanosecond value.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A fixed-size log-linear histogram of nanosecond latencies: values below 32 ns are exact, above that each
/// power of two is split in 32 equal buckets. Recording is a few arithmetic operations, no allocation.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("total", &self.total)
            .field("min_ns", &self.min_ns)
            .field("max_ns", &self.max_ns)
            .finish_non_exhaustive()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { counts: Box::new([0; BUCKETS]), total: 0, sum_ns: 0, min_ns: u64::MAX, max_ns: 0 }
    }
}

impl LatencyHistogram {
    fn bucket(ns: u64) -> usize {
        if ns < SUB as u64 {
            // ns < 32.
            return usize::try_from(ns).unwrap_or(0);
        }
        let e = 63 - ns.leading_zeros(); // >= SUB_BITS
        let sub = usize::try_from((ns >> (e - SUB_BITS)) & (SUB as u64 - 1)).unwrap_or(0);
        (e - SUB_BITS + 1) as usize * SUB + sub
    }

    /// Lowest value and width of bucket `b`.
    fn bucket_range(b: usize) -> (u64, u64) {
        if b < SUB {
            return (b as u64, 1);
        }
        let shift = u32::try_from(b / SUB - 1).unwrap_or(0);
        let sub = (b % SUB) as u64;
        ((SUB as u64 + sub) << shift, 1u64 << shift)
    }

    /// Record one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1) in nanoseconds: the middle of its bucket, clamped to the
    /// recorded minimum and maximum. 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "q in 0..=1 times a count: a non-negative rank no larger than the count"
        )]
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = Self::bucket_range(b);
                return (low + width / 2).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// Mean, min, max and percentiles in microseconds (for display: a float's precision is plenty).
    pub fn summary(&self) -> LatencySummary {
        if self.total == 0 {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            mean: self.sum_ns as f64 / self.total as f64 / 1000.0,
            min: us(self.min_ns),
            max: us(self.max_ns),
            p50: us(self.quantile_ns(0.50)),
            p99: us(self.quantile_ns(0.99)),
            p999: us(self.quantile_ns(0.999)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = LatencyHistogram::bucket(ns);
            assert!(b >= last || ns > 100_000 - 1, "bucket of {ns} went down");
            last = b;
            let (low, width) = LatencyHistogram::bucket_range(b);
            assert!(low <= ns && ns - low < width, "{ns} not in bucket {b} = [{low}, +{width})");
            assert!(b < BUCKETS);
        }
    }

    #[test]
    fn percentiles_are_close_and_ordered() {
        let mut h = LatencyHistogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary();
        assert!((s.mean - 500.5).abs() < 0.01, "{s:?}");
        assert!((s.p50 - 500.0).abs() / 500.0 < 0.04, "{s:?}");
        assert!((s.p99 - 990.0).abs() / 990.0 < 0.04, "{s:?}");
        assert!(s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max, "{s:?}");
        let mut other = LatencyHistogram::default();
        other.record(Duration::from_secs(1));
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert!((h.summary().max - 1e6).abs() < 1.0);
    }
}
