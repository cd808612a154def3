//! The storage's families: block discards run by the reactors' discard workers, and RBD images.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counter, gauge, single_counter};
use crate::controller::Target;

/// `nvmf_target_blkdiscard` and `nvmf_target_blkdiscard_queue_full`.
pub(super) fn blkdiscard(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    let discards = target.discard_counters();
    let families = [
        (
            "nvmf_target_blkdiscard",
            "Block discards run as a BLKDISCARD ioctl on a reactor's discard worker thread (kernels without \
             io_uring block discard).",
            discards.ran(),
        ),
        (
            "nvmf_target_blkdiscard_queue_full",
            "Times a block discard was handed back (the command waits and retries) because its reactor's \
             discard worker had [reactors] discard_queue_depth queued.",
            discards.queue_full(),
        ),
    ];
    families.into_iter().try_for_each(|(name, help, n)| single_counter(encoder, name, help, n))
}

/// `nvmf_target_rbd_ops_in_flight`, `nvmf_target_rbd_errors` and `nvmf_target_rbd_reopened`, by subsystem, namespace
/// and image; none without an RBD namespace.
pub(super) fn rbd(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    let mut images = Vec::new();
    for s in target.subsystems() {
        for ns in s.namespaces().iter() {
            if let Some(stats) = ns.storage().rbd_stats() {
                images.push((s.nqn().to_owned(), ns.nsid().to_string(), stats));
            }
        }
    }
    if images.is_empty() {
        return Ok(());
    }
    let mut m = encoder.encode_descriptor(
        "nvmf_target_rbd_ops_in_flight",
        "Operations in librbd now, by subsystem, namespace and RBD image (pool/image).",
        None,
        MetricType::Gauge,
    )?;
    for (nqn, ns, st) in &images {
        gauge(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.in_flight)?;
    }
    let mut m = encoder.encode_descriptor(
        "nvmf_target_rbd_errors",
        "Operations librbd failed (a negative return: timeout, blocklisted, I/O error) or refused, by \
         subsystem, namespace and RBD image, since the image was opened.",
        None,
        MetricType::Counter,
    )?;
    for (nqn, ns, st) in &images {
        counter(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.errors)?;
    }
    let mut m = encoder.encode_descriptor(
        "nvmf_target_rbd_reopened",
        "Times an RBD image was reopened through a new Ceph client after the cluster fenced (blocklisted) \
         the old one or an op on it timed out, by subsystem, namespace and image.",
        None,
        MetricType::Counter,
    )?;
    for (nqn, ns, st) in &images {
        counter(&mut m, &[("subsystem", nqn), ("namespace", ns), ("image", &st.image)], st.reopened)?;
    }
    Ok(())
}
