//! What every family's encoding shares: one sample of a counter or a gauge, the counter families of one label or
//! none, seconds from nanoseconds.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// One counter sample with `labels`.
pub(super) fn counter(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value, None)
}

/// One gauge sample with `labels`.
pub(super) fn gauge(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], value: u64) -> fmt::Result {
    m.encode_family(&labels)?.encode_gauge(&value)
}

/// A count as a gauge value (saturating: a `usize` beyond `u64` cannot occur on our targets).
pub(super) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Nanoseconds as seconds.
#[expect(clippy::cast_precision_loss, reason = "beyond 2^53 ns, about 104 days of summed latency, is acceptable")]
pub(super) fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A counter family of one label: a sample per `(label value, count)`.
pub(super) fn counters_by<'a>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in values {
        counter(&mut m, &[(label, value)], n)?;
    }
    Ok(())
}

/// A counter family of one sample, without labels.
pub(super) fn single_counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, n: u64) -> fmt::Result {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    counter(&mut m, &[], n)
}
