//! The NVMe/RDMA families, summed over the reactors: work requests posted and completions by opcode, error
//! completions by status, stale completions, live queue pairs.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counters_by, gauge, single_counter};
use crate::rdma::RdmaCounters;

/// Every `nvmf_target_rdma_*` family over `reactors`' counters.
pub(super) fn encode(encoder: &mut DescriptorEncoder<'_>, reactors: &[Arc<RdmaCounters>]) -> fmt::Result {
    fn sum(into: &mut Vec<(&'static str, u64)>, items: impl IntoIterator<Item = (&'static str, u64)>) {
        for (name, n) in items {
            match into.iter_mut().find(|(k, _)| *k == name) {
                Some((_, total)) => *total += n,
                None => into.push((name, n)),
            }
        }
    }
    let (mut posted, mut completed, mut errors, mut stale, mut qps) = (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    for r in reactors {
        sum(&mut posted, r.work_requests());
        sum(&mut completed, r.completions());
        sum(&mut errors, r.completion_errors());
        stale += r.stale_completions();
        qps += r.queue_pairs();
    }
    let families = [
        ("nvmf_target_rdma_work_requests", "RDMA work requests posted, by opcode.", "opcode", &posted),
        ("nvmf_target_rdma_completions", "Successful RDMA work completions, by opcode.", "opcode", &completed),
        ("nvmf_target_rdma_completion_errors", "RDMA work completions with an error, by status.", "status", &errors),
    ];
    for (name, help, label, values) in families {
        counters_by(encoder, name, help, label, values.iter().copied())?;
    }
    single_counter(
        encoder,
        "nvmf_target_rdma_stale_completions",
        "RDMA work completions for a queue pair already destroyed (dropped, never delivered).",
        stale,
    )?;
    let mut m = encoder.encode_descriptor(
        "nvmf_target_rdma_queue_pairs",
        "NVMe/RDMA queue pairs alive now (connected or draining).",
        None,
        MetricType::Gauge,
    )?;
    gauge(&mut m, &[], qps)
}
