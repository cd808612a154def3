//! The subsystems' families, from their counters ([`crate::counters`]): live controllers, commands, bytes and
//! latencies by namespace and opcode, errors by status, keep-alive expiries.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::encode::{count, counter, gauge, seconds};
use crate::controller::Target;
use crate::counters::{code_status, CommandKind, CommandSnapshot, Totals, LATENCY_BOUNDS_NS, OVERFLOW_CODE};

/// One subsystem as a scrape sees it.
#[derive(Debug)]
pub(super) struct SubsystemView {
    nqn: String,
    controllers: usize,
    keep_alive_expiries: u64,
    active: Vec<u32>,
    totals: Totals,
}

/// The `namespace` label value of commands that named no namespace.
const NO_NAMESPACE: &str = "0";

/// One `(namespace label, counts, namespace is active)` series of a subsystem.
type Series<'a> = (String, &'a CommandSnapshot, bool);

/// `target`'s subsystems, and the discovery subsystem when enabled.
pub(super) fn views(target: &Target) -> Vec<SubsystemView> {
    let mut subsystems = target.subsystems();
    if target.params().discovery_enabled {
        subsystems.push(Arc::clone(target.discovery_subsystem()));
    }
    subsystems
        .iter()
        .map(|s| SubsystemView {
            nqn: s.nqn().to_owned(),
            controllers: s.controllers().len(),
            keep_alive_expiries: s.metrics().keep_alive_expiries(),
            active: s.namespaces().iter().map(|ns| ns.nsid()).collect(),
            totals: s.metrics().totals(),
        })
        .collect()
}

/// Every family of `subsystems`.
pub(super) fn encode(encoder: &mut DescriptorEncoder<'_>, subsystems: &[SubsystemView]) -> fmt::Result {
    // Active namespaces with no counts yet still get their zero series.
    let zero = CommandSnapshot::default();
    let series: Vec<Vec<Series<'_>>> = subsystems.iter().map(|v| command_series(v, &zero)).collect();
    controllers(encoder, subsystems)?;
    commands(encoder, subsystems, &series)?;
    bytes(encoder, subsystems, &series)?;
    latency(encoder, subsystems, &series)?;
    errors(encoder, subsystems)?;
    keep_alive_expiries(encoder, subsystems)
}

/// The series of one subsystem's command counters: namespace 0, those with counts, then the active namespaces
/// without any (`zero`).
fn command_series<'a>(view: &'a SubsystemView, zero: &'a CommandSnapshot) -> Vec<Series<'a>> {
    let mut series = vec![(NO_NAMESPACE.to_owned(), &view.totals.unattributed, false)];
    for (nsid, snapshot) in &view.totals.namespaces {
        series.push((nsid.to_string(), snapshot, view.active.contains(nsid)));
    }
    for nsid in &view.active {
        if !view.totals.namespaces.contains_key(nsid) {
            series.push((nsid.to_string(), zero, true));
        }
    }
    series
}

/// Whether to export the `(namespace, kind)` series: it has counts, or it is an NVM command of an active
/// namespace (exported at 0 so that rates work from the first scrape).
fn exported(snapshot: &CommandSnapshot, kind: CommandKind, active: bool) -> bool {
    snapshot.kind(kind).commands > 0 || (active && kind.is_io() && kind != CommandKind::Other)
}

fn controllers(encoder: &mut DescriptorEncoder<'_>, subsystems: &[SubsystemView]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_controllers",
        "Live controllers (associations) of each subsystem.",
        None,
        MetricType::Gauge,
    )?;
    for v in subsystems {
        gauge(&mut m, &[("subsystem", &v.nqn)], count(v.controllers))?;
    }
    Ok(())
}

fn commands(
    encoder: &mut DescriptorEncoder<'_>,
    subsystems: &[SubsystemView],
    series: &[Vec<Series<'_>>],
) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_commands",
        "Commands completed, by subsystem, namespace (0: none named) and opcode.",
        None,
        MetricType::Counter,
    )?;
    for (v, series) in subsystems.iter().zip(series) {
        for (ns, snapshot, active) in series {
            for kind in CommandKind::ALL {
                if exported(snapshot, kind, *active) {
                    let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("opcode", kind.label())];
                    counter(&mut m, &labels, snapshot.kind(kind).commands)?;
                }
            }
        }
    }
    Ok(())
}

fn bytes(encoder: &mut DescriptorEncoder<'_>, subsystems: &[SubsystemView], series: &[Vec<Series<'_>>]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_bytes",
        "Bytes transferred by successful Reads (direction=read) and Writes (direction=write).",
        None,
        MetricType::Counter,
    )?;
    for (v, series) in subsystems.iter().zip(series) {
        for (ns, snapshot, active) in series {
            if !active && snapshot.bytes_read == 0 && snapshot.bytes_written == 0 {
                continue;
            }
            for (direction, value) in [("read", snapshot.bytes_read), ("write", snapshot.bytes_written)] {
                let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("direction", direction)];
                counter(&mut m, &labels, value)?;
            }
        }
    }
    Ok(())
}

fn latency(
    encoder: &mut DescriptorEncoder<'_>,
    subsystems: &[SubsystemView],
    series: &[Vec<Series<'_>>],
) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_command_latency_seconds",
        "Time from a command capsule's arrival to its response being queued (AERs excluded).",
        None,
        MetricType::Histogram,
    )?;
    let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(LATENCY_BOUNDS_NS.len() + 1);
    for (v, series) in subsystems.iter().zip(series) {
        for (ns, snapshot, active) in series {
            for kind in CommandKind::ALL {
                if !kind.has_latency() || !exported(snapshot, kind, *active) {
                    continue;
                }
                let k = snapshot.kind(kind);
                buckets.clear();
                buckets.extend(LATENCY_BOUNDS_NS.iter().map(|&b| seconds(b)).chain([f64::INFINITY]).zip(k.buckets));
                let labels = [("subsystem", v.nqn.as_str()), ("namespace", ns), ("opcode", kind.label())];
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    seconds(k.latency_sum_ns),
                    k.latency_count(),
                    &buckets,
                    None,
                )?;
            }
        }
    }
    Ok(())
}

fn errors(encoder: &mut DescriptorEncoder<'_>, subsystems: &[SubsystemView]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_errors",
        "Commands completed with an error status, by subsystem and status name.",
        None,
        MetricType::Counter,
    )?;
    for v in subsystems {
        for (&code, &n) in &v.totals.errors {
            let name = status_label(code);
            counter(&mut m, &[("subsystem", v.nqn.as_str()), ("status", &name)], n)?;
        }
    }
    Ok(())
}

fn keep_alive_expiries(encoder: &mut DescriptorEncoder<'_>, subsystems: &[SubsystemView]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_keep_alive_expiries",
        "Associations ended because the host sent no command within the Keep Alive Timeout.",
        None,
        MetricType::Counter,
    )?;
    for v in subsystems {
        counter(&mut m, &[("subsystem", &v.nqn)], v.keep_alive_expiries)?;
    }
    Ok(())
}

/// The `status` label of an error code: the spec's name (`Status::name`), else `SCT_x_SC_yy`.
fn status_label(code: u16) -> String {
    if code == OVERFLOW_CODE {
        return "OTHER".to_owned();
    }
    let status = code_status(code);
    match status.name() {
        Some(name) => name.to_owned(),
        None => format!("SCT_{:X}_SC_{:02X}", status.sct() as u8, status.sc()),
    }
}
