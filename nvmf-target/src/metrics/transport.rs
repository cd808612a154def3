//! The transports' families: connections served, refused at accept and ended for a stalled peer; how the
//! NVMe/TCP sockets are driven, moved and paused.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{count, counters_by, gauge, single_counter};
use crate::controller::{Stalled, Target};
use crate::tcp::placement::IncomingCpuPlacement;
use crate::tcp::{TcpSocketPath, TlsCounters};
use crate::transport::{Admission, Refusal};

/// `nvmf_target_connections{transport}`: `by_transport` as the collector sums it.
pub(super) fn connections(encoder: &mut DescriptorEncoder<'_>, by_transport: &[(&'static str, usize)]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_connections",
        "Transport connections served now (one per queue, before and after Connect).",
        None,
        MetricType::Gauge,
    )?;
    for &(transport, n) in by_transport {
        gauge(&mut m, &[("transport", transport)], count(n))?;
    }
    Ok(())
}

/// `nvmf_target_timeouts{state}`.
pub(super) fn timeouts(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    counters_by(
        encoder,
        "nvmf_target_timeouts",
        "Transport connections (queue pairs) ended because a peer stalled, by the state it stalled in.",
        "state",
        Stalled::ALL.map(|state| (state.label(), target.timeouts(state))),
    )
}

/// `nvmf_target_rejected_connections{reason}` (0 before the listeners serve).
pub(super) fn rejected_connections(encoder: &mut DescriptorEncoder<'_>, admission: Option<&Admission>) -> fmt::Result {
    counters_by(
        encoder,
        "nvmf_target_rejected_connections",
        "Transport connections (queue pairs) refused at accept, by the cap that refused them.",
        "reason",
        Refusal::ALL.map(|reason| (reason.label(), admission.map_or(0, |a| a.rejected(reason)))),
    )
}

/// `nvmf_target_tls_connections{result}` (0 before the listeners serve).
pub(super) fn tls_connections(encoder: &mut DescriptorEncoder<'_>, tls: Option<&TlsCounters>) -> fmt::Result {
    let by_result = tls.map_or_else(|| TlsCounters::default().by_result(), TlsCounters::by_result);
    counters_by(
        encoder,
        "nvmf_target_tls_connections",
        "Connections to listeners with tls = allowed or required, by what the TLS gate did: secured, plaintext \
         (allowed), plaintext_refused, failed (unknown identity, wrong key), timed_out, queue_full; \
         secured_user_space: secured, its records relayed through user space for want of kTLS.",
        "result",
        by_result,
    )
}

/// `nvmf_target_tcp_socket_io{reactor,path}`: `paths` by reactor index (a reactor not started yet has none).
pub(super) fn tcp_socket_io(encoder: &mut DescriptorEncoder<'_>, paths: &[Arc<TcpSocketPath>]) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_tcp_socket_io",
        "How each reactor reads and writes its NVMe/TCP sockets: 1 for the path it runs ([reactors] socket_io, \
         and whether the kernel's io_uring has the ops).",
        None,
        MetricType::Gauge,
    )?;
    for (reactor, path) in paths.iter().enumerate() {
        if let Some(name) = path.name() {
            gauge(&mut m, &[("reactor", &reactor.to_string()), ("path", name)], 1)?;
        }
    }
    Ok(())
}

/// `nvmf_target_tcp_zero_copy_sends_total{reactor}`: each reactor's sends that went zero copy.
pub(super) fn tcp_zero_copy_sends(encoder: &mut DescriptorEncoder<'_>, paths: &[Arc<TcpSocketPath>]) -> fmt::Result {
    let started: Vec<(String, u64)> = paths
        .iter()
        .enumerate()
        .filter(|(_, path)| path.name().is_some())
        .map(|(reactor, path)| (reactor.to_string(), path.zero_copy_sends()))
        .collect();
    counters_by(
        encoder,
        "nvmf_target_tcp_zero_copy_sends",
        "NVMe/TCP sends that went zero copy (socket_io = \"io_uring\", at least [reactors] send_zero_copy_bytes of \
         data, a host off loopback, no TLS): the NIC read the data from the reactor's buffer in place.",
        "reactor",
        started.iter().map(|(reactor, n)| (reactor.as_str(), *n)),
    )
}

/// `nvmf_target_tcp_connections_moved`, only with `[reactors] placement = "incoming_cpu"`.
pub(super) fn tcp_connections_moved(
    encoder: &mut DescriptorEncoder<'_>,
    placement: Option<&IncomingCpuPlacement>,
) -> fmt::Result {
    let Some(placement) = placement else { return Ok(()) };
    single_counter(
        encoder,
        "nvmf_target_tcp_connections_moved",
        "NVMe/TCP connections handed, at their queue's Connect, to the reactor pinned to the CPU their packets \
         arrive on.",
        placement.moved(),
    )
}

/// `nvmf_target_tcp_send_backlog_pauses`.
pub(super) fn tcp_send_backlog_pauses(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    single_counter(
        encoder,
        "nvmf_target_tcp_send_backlog_pauses",
        "NVMe/TCP connections that stopped reading new PDUs because more than [target] tcp_send_backlog \
         waited for their host to read (once per pause; reading resumes as the host catches up).",
        target.send_backlog_pauses(),
    )
}
