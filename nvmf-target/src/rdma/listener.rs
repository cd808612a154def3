//! The RDMA CM thread (`nvmf-rdma-cm`): binds and listens on every NVMe/RDMA listener with one RDMA CM event channel,
//! validates each connect request's private data and hands the request's new id over (to the reactors, round robin: the
//! daemon decides). It sleeps in `epoll_wait` on the event channel and a waker, and blocks nowhere else. Events of an
//! id after the hand-over arrive at the reactor (which migrates the id to its own event channel before accepting).

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nvmf_common::fabrics::discovery::{RdmaCms, RdmaProviderType, RdmaQpType, TransportType, Tsas};
use nvmf_common::transport::rdma::private_data::{RdmaCmReject, RdmaCmRejectStatus, RdmaCmRequest};
use nvmf_common::transport::rdma::verbs::{CmEvent, CmEventKind, CmId, EventChannel, PeerConnParam, RdmaError};
use nvmf_common::wire::WireError;

use nvmf_config::target::{ListenerConfig, ListenerTransport};

use super::config::RdmaTransportConfig;
use crate::controller::ListenerParams;
use crate::transport::{Admission, Admitted};

const CHANNEL: Token = Token(0);
const WAKER: Token = Token(1);

/// Listen backlog of each RDMA listener.
const BACKLOG: u32 = 128;

/// Entries of the admin queue a host may ask for at most (Linux nvmet's NVME_AQ_DEPTH).
pub const MAX_ADMIN_QUEUE_DEPTH: u32 = 32;

/// An NVMe/RDMA listener to open.
#[derive(Debug, Clone)]
pub struct RdmaListenerSpec {
    /// Address to bind (an address of an RDMA device's netdev; a wildcard binds every device).
    pub address: SocketAddr,
    /// Discovery log port ID.
    pub port_id: u16,
    /// Highest I/O queue ID a host may connect (the target's max I/O queues).
    pub max_qid: u16,
    /// The listener's NVMe/RDMA settings.
    pub rdma: Arc<RdmaTransportConfig>,
    /// The most queue pairs it holds at once.
    pub max_connections: u32,
}

impl RdmaListenerSpec {
    /// The spec of RDMA listener `l` with discovery port ID `port_id` and a target serving `max_io_queues` I/O
    /// queues per controller (`None` for another transport).
    pub fn from_config(l: &ListenerConfig, port_id: u16, max_io_queues: u16) -> Option<Self> {
        let ListenerTransport::Rdma(options) = l.transport else { return None };
        let rdma = RdmaTransportConfig {
            in_capsule_data_size: l.in_capsule_data_size,
            max_queue_depth: u16::try_from(l.max_queue_size).unwrap_or(u16::MAX),
            send_with_invalidate: options.send_with_invalidate,
            srq: options.srq,
        };
        let max_connections = l.max_connections;
        Some(RdmaListenerSpec {
            address: l.address,
            port_id,
            max_qid: max_io_queues,
            rdma: Arc::new(rdma),
            max_connections,
        })
    }

    /// The discovery log's entry for this listener, bound at `local`: as Linux nvmet reports RDMA ports, reliable
    /// connected, provider not specified, RDMA CM.
    pub fn discovery_entry(&self, local: SocketAddr) -> ListenerParams {
        let tsas = Tsas::Rdma {
            qptype: RdmaQpType::Connected,
            prtype: RdmaProviderType::NotSpecified,
            cms: RdmaCms::RdmaCm,
            pkey: 0,
        };
        ListenerParams::ip(self.port_id, TransportType::Rdma, local, tsas)
    }
}

/// Errors opening RDMA listeners.
#[derive(Debug, thiserror::Error)]
pub enum RdmaListenerError {
    /// The event channel, bind or listen failed (no rdma_cm on this machine, no RDMA device on the address…).
    #[error("cannot listen on rdma://{address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The verb that failed, with its errno.
        #[source]
        source: RdmaError,
    },
    /// epoll or thread creation failed.
    #[error("RDMA CM thread: {0}")]
    Os(#[source] io::Error),
}

/// A connect request accepted by the CM thread's checks, handed to a reactor.
#[derive(Debug)]
pub struct RdmaAccepted {
    /// The request's id (still on the listener's event channel: the reactor migrates it).
    pub id: CmId,
    /// The host's NVMe/RDMA private data.
    pub request: RdmaCmRequest,
    /// The host's connection parameters (its RDMA READ depths).
    pub peer: PeerConnParam,
    /// The queue's depth, from the request and the listener's limit.
    pub depth: u16,
    /// The listener's port ID (discovery log).
    pub port_id: u16,
    /// The listener's NVMe/RDMA settings.
    pub rdma: Arc<RdmaTransportConfig>,
    /// Its place among the listener's and the peer address's queue pairs.
    pub admitted: Admitted,
}

/// Check a connect request's private data against a listener's limits: the queue depth to serve, or the reject
/// status to answer with (NVMe/RDMA transport spec §3.3; the admin queue's limit is Linux nvmet's).
pub fn validate_request(
    request: Result<RdmaCmRequest, WireError>,
    peer: Option<&PeerConnParam>,
    spec: &RdmaListenerSpec,
) -> Result<(RdmaCmRequest, u16), RdmaCmRejectStatus> {
    let request = request.map_err(|e| RdmaCmRejectStatus::for_request_error(&e))?;
    if request.qid > spec.max_qid {
        return Err(RdmaCmRejectStatus::InvalidQid);
    }
    let entries = request.send_queue_entries();
    let max = if request.qid == 0 { MAX_ADMIN_QUEUE_DEPTH } else { u32::from(spec.rdma.max_queue_depth) };
    // hsqsize is 0's based: a one-entry queue cannot hold a command beside the one completing.
    if request.hsqsize == 0 || entries > max {
        return Err(RdmaCmRejectStatus::InvalidHsqsize);
    }
    if request.hrqsize == 0 {
        return Err(RdmaCmRejectStatus::InvalidHrqsize);
    }
    // The target fetches write data with RDMA READs the host serves: a host serving none cannot write. A connect
    // request event reports depths from our side (RDMA CM swaps them): its initiator_depth is the READs the host
    // lets us have outstanding (its IRD).
    if peer.is_some_and(|p| p.initiator_depth == 0) {
        return Err(RdmaCmRejectStatus::InvalidIrd);
    }
    let depth = u16::try_from(entries).map_err(|_| RdmaCmRejectStatus::InvalidHsqsize)?;
    Ok((request, depth))
}

/// RDMA listeners bound and listening, not yet served: binding first lets the discovery log report the ports
/// they really got.
#[derive(Debug)]
pub struct BoundRdmaListeners {
    channel: EventChannel,
    listeners: Vec<(CmId, RdmaListenerSpec)>,
    local: Vec<SocketAddr>,
}

impl BoundRdmaListeners {
    /// Bind and listen on every spec, failing with the address and the verb's errno if any cannot.
    pub fn bind(specs: &[RdmaListenerSpec]) -> Result<Self, RdmaListenerError> {
        let first = specs.first().map_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)), |s| s.address);
        let channel = EventChannel::new().map_err(|source| RdmaListenerError::Listen { address: first, source })?;
        let mut listeners = Vec::with_capacity(specs.len());
        let mut local = Vec::with_capacity(specs.len());
        for spec in specs {
            let listen = |source| RdmaListenerError::Listen { address: spec.address, source };
            let mut id = CmId::new(&channel).map_err(listen)?;
            id.bind_addr(spec.address).map_err(listen)?;
            id.listen(BACKLOG).map_err(listen)?;
            let bound = id.local_addr().unwrap_or(spec.address);
            tracing::info!(address = %bound, "listening for NVMe/RDMA");
            local.push(bound);
            listeners.push((id, spec.clone()));
        }
        Ok(BoundRdmaListeners { channel, listeners, local })
    }

    /// The bound addresses, in the order of the specs.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }
}

/// The running CM thread.
#[derive(Debug)]
pub struct RdmaCmThread {
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    local: Vec<SocketAddr>,
}

impl RdmaCmThread {
    /// Serve connect requests on `bound`, handing every valid one to `hand_over` (which gives it back when nobody
    /// can take it: the request is then rejected).
    pub fn start(
        bound: BoundRdmaListeners,
        admission: Arc<Admission>,
        hand_over: impl FnMut(RdmaAccepted) -> Result<(), RdmaAccepted> + Send + 'static,
    ) -> Result<Self, RdmaListenerError> {
        let poll = Poll::new().map_err(RdmaListenerError::Os)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(RdmaListenerError::Os)?);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&bound.channel);
        poll.registry().register(&mut SourceFd(&fd), CHANNEL, Interest::READABLE).map_err(RdmaListenerError::Os)?;
        let local = bound.local.clone();
        let thread = std::thread::Builder::new()
            .name("nvmf-rdma-cm".into())
            .spawn(move || cm_loop(poll, &bound, &admission, hand_over))
            .map_err(RdmaListenerError::Os)?;
        Ok(RdmaCmThread { waker, thread: Some(thread), local })
    }

    /// The bound addresses, in the order of the specs.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// Stop: close the listening ids (connections already handed over live on in their reactors).
    pub fn stop(mut self) {
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn cm_loop(
    mut poll: Poll,
    bound: &BoundRdmaListeners,
    admission: &Arc<Admission>,
    mut hand_over: impl FnMut(RdmaAccepted) -> Result<(), RdmaAccepted>,
) {
    let mut events = Events::with_capacity(16);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "RDMA CM thread: epoll failed");
            return;
        }
        for event in events.iter() {
            if event.token() == WAKER {
                return;
            }
        }
        loop {
            match bound.channel.get_event() {
                Ok(Some(event)) => handle_event(event, bound, admission, &mut hand_over),
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "RDMA CM thread: reading an event failed");
                    break;
                }
            }
        }
    }
}

fn handle_event(
    mut event: CmEvent,
    bound: &BoundRdmaListeners,
    admission: &Arc<Admission>,
    hand_over: &mut impl FnMut(RdmaAccepted) -> Result<(), RdmaAccepted>,
) {
    if event.kind != CmEventKind::ConnectRequest {
        tracing::debug!(kind = ?event.kind, status = event.status, "RDMA CM event on the listener channel");
        return;
    }
    let Some(mut id) = event.take_id() else { return };
    let peer_addr = id.peer_addr();
    let Some((_, spec)) = bound.listeners.iter().find(|(l, _)| Some(l.key()) == event.listen_id) else {
        tracing::warn!(traddr = ?peer_addr, "connect request for no listener; rejecting");
        reject(&mut id, RdmaCmRejectStatus::NoResources);
        return;
    };
    match validate_request(event.nvme_request(), event.peer.as_ref(), spec) {
        Err(sts) => {
            tracing::warn!(traddr = ?peer_addr, listener = %spec.address, status = ?sts, private_data = ?event.private_data,
                "NVMe/RDMA connect request rejected");
            reject(&mut id, sts);
        }
        Ok((request, depth)) => {
            let peer_ip = peer_addr.map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |a| a.ip());
            let Ok(admitted) = admission.admit(spec.port_id, spec.max_connections, peer_ip) else {
                reject(&mut id, RdmaCmRejectStatus::NoResources);
                return;
            };
            tracing::debug!(traddr = ?peer_addr, qid = request.qid, depth, "NVMe/RDMA connect request");
            let accepted = RdmaAccepted {
                id,
                request,
                peer: event.peer.unwrap_or_default(),
                depth,
                port_id: spec.port_id,
                rdma: Arc::clone(&spec.rdma),
                admitted,
            };
            if let Err(mut refused) = hand_over(accepted) {
                reject(&mut refused.id, RdmaCmRejectStatus::NoResources);
            }
        }
    }
}

/// Reject a connect request with NVMe/RDMA reject private data (logged if even that fails).
pub(crate) fn reject(id: &mut CmId, sts: RdmaCmRejectStatus) {
    if let Err(e) = id.reject_nvme(&RdmaCmReject { sts }) {
        tracing::warn!(error = %e, "rdma_reject failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RdmaListenerSpec {
        RdmaListenerSpec {
            address: "10.77.0.1:4420".parse().unwrap(),
            port_id: 1,
            max_qid: 8,
            rdma: Arc::new(RdmaTransportConfig::default()),
            max_connections: 16,
        }
    }

    fn request(qid: u16, hrqsize: u16, hsqsize: u16) -> Result<RdmaCmRequest, WireError> {
        Ok(RdmaCmRequest { qid, hrqsize, hsqsize, cntlid: 0 })
    }

    /// A connect request's parameters as RDMA CM reports them to the passive side (Linux hosts: the host's
    /// responder resources as our initiator depth, and no READs of their own).
    fn peer(initiator_depth: u8) -> PeerConnParam {
        PeerConnParam { responder_resources: 0, initiator_depth, ..PeerConnParam::default() }
    }

    #[test]
    fn linux_and_spdk_requests_are_accepted_with_their_depths() {
        let s = spec();
        // Linux: admin queue of 32 (hsqsize 31), I/O queues of 128; cntlid left 0.
        assert_eq!(validate_request(request(0, 32, 31), Some(&peer(16)), &s).map(|(_, d)| d), Ok(32));
        assert_eq!(validate_request(request(1, 128, 127), Some(&peer(16)), &s).map(|(_, d)| d), Ok(128));
        // SPDK fills cntlid on I/O queues.
        let spdk = Ok(RdmaCmRequest { qid: 8, hrqsize: 64, hsqsize: 63, cntlid: 1 });
        assert_eq!(validate_request(spdk, None, &s).map(|(_, d)| d), Ok(64));
    }

    #[test]
    fn bad_requests_get_the_reject_code_the_spec_names() {
        let s = spec();
        let p = Some(peer(16));
        let check = |req: Result<RdmaCmRequest, WireError>, sts| {
            let what = format!("{req:?}");
            assert_eq!(validate_request(req, p.as_ref(), &s), Err(sts), "{what}");
        };
        check(RdmaCmRequest::parse(&[0; 8]), RdmaCmRejectStatus::InvalidPrivateDataLength);
        let mut bad_fmt = RdmaCmRequest::default().to_bytes();
        bad_fmt[0] = 1;
        check(RdmaCmRequest::parse(&bad_fmt), RdmaCmRejectStatus::InvalidRecfmt);
        check(request(9, 128, 127), RdmaCmRejectStatus::InvalidQid);
        check(request(0, 32, 32), RdmaCmRejectStatus::InvalidHsqsize); // admin queue of 33
        check(request(1, 128, 128), RdmaCmRejectStatus::InvalidHsqsize); // 129 > max depth 128
        check(request(1, 128, 0), RdmaCmRejectStatus::InvalidHsqsize);
        check(request(1, 0, 127), RdmaCmRejectStatus::InvalidHrqsize);
        assert_eq!(validate_request(request(1, 128, 127), Some(&peer(0)), &s), Err(RdmaCmRejectStatus::InvalidIrd));
    }
}
