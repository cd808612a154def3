//! The reactors' families: each one's buffer pool and waits, and the commands a buffer budget held back.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{count, counter, counters_by, gauge};
use crate::backend::BudgetLimit;
use crate::controller::Target;
use crate::reactor::WaitCounters;
use crate::transport::BufferGauge;

/// `nvmf_target_data_buffers{reactor,state}`: `buffers` by reactor index.
pub(super) fn data_buffers(encoder: &mut DescriptorEncoder<'_>, buffers: &[Arc<BufferGauge>]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_data_buffers",
        "Data buffers of each reactor's pool, free and in all, at the end of the reactor's last turn.",
        None,
        MetricType::Gauge,
    )?;
    for (reactor, gauge_of) in buffers.iter().enumerate() {
        let reactor = reactor.to_string();
        for (state, n) in [("free", &gauge_of.free), ("total", &gauge_of.total)] {
            gauge(&mut m, &[("reactor", &reactor), ("state", state)], count(n.load(Ordering::Relaxed)))?;
        }
    }
    Ok(())
}

/// `nvmf_target_reactor_waits{reactor,wait}`: `waits` by reactor index.
pub(super) fn waits(encoder: &mut DescriptorEncoder<'_>, waits: &[Arc<WaitCounters>]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_reactor_waits",
        "How each reactor waited after a turn: polled again at once having found nothing (adaptive or busy \
         [reactors] poll), or slept until an event.",
        None,
        MetricType::Counter,
    )?;
    for (reactor, waits) in waits.iter().enumerate() {
        let reactor = reactor.to_string();
        for (wait, n) in [("poll", &waits.empty_polls), ("sleep", &waits.sleeps)] {
            counter(&mut m, &[("reactor", &reactor), ("wait", wait)], n.load(Ordering::Relaxed))?;
        }
    }
    Ok(())
}

/// `nvmf_target_buffer_budget_waits{budget}`.
pub(super) fn buffer_budget_waits(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    counters_by(
        encoder,
        "nvmf_target_buffer_budget_waits",
        "Commands that waited for a data buffer the pool had because a budget refused it: the queue's own \
         share, or the share of peers not admitted to an NVM subsystem.",
        "budget",
        BudgetLimit::ALL.map(|limit| (limit.label(), target.budget_waits(limit))),
    )
}
