//! RDMA CM: [`EventChannel`] (where connection events arrive), [`CmId`] (an endpoint: listener, or one
//! side of a connection) and [`CmEvent`] (an event with everything copied out of librdmacm's buffer).
//!
//! Events are acknowledged (`rdma_ack_cm_event`) inside [`EventChannel::get_event`], after copying, and
//! never held: librdmacm's `rdma_destroy_id` and `rdma_migrate_id` wait until every event reported for
//! the id is acknowledged, so an event kept by a caller while its id is dropped would hang the thread.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use super::ffi;

use super::device::Device;
use super::error::RdmaError;
use crate::transport::rdma::private_data::{RdmaCmAccept, RdmaCmReject, RdmaCmRequest};
use crate::WireError;

/// An RDMA CM event channel (`struct rdma_event_channel`): the file descriptor RDMA CM reports
/// connection events of its ids on. Created non-blocking, for mio/epoll. Cloning is cheap (an `Arc`);
/// the channel is destroyed when the last clone and the last id on it are gone.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<EventChannelInner>,
}

struct EventChannelInner {
    ch: NonNull<ffi::rdma_event_channel>,
}

// SAFETY: librdmacm is thread-safe; the channel is passed to RDMA CM calls only and destroyed once.
unsafe impl Send for EventChannelInner {}
// SAFETY: as above.
unsafe impl Sync for EventChannelInner {}

impl Drop for EventChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every CmId on it holds an Arc, so none remains.
        unsafe { ffi::rdma_destroy_event_channel(self.ch.as_ptr()) };
    }
}

impl EventChannel {
    /// Create a channel (`rdma_create_event_channel`) with a non-blocking fd.
    pub fn new() -> Result<EventChannel, RdmaError> {
        // SAFETY: no arguments; null on failure.
        let ch = unsafe { ffi::rdma_create_event_channel() };
        let ch = NonNull::new(ch).ok_or_else(|| RdmaError::last("rdma_create_event_channel", ""))?;
        let channel = EventChannel { inner: Arc::new(EventChannelInner { ch }) };
        super::set_nonblocking(channel.as_raw_fd(), true)
            .map_err(|e| RdmaError::verb("fcntl", e, "RDMA CM event channel"))?;
        Ok(channel)
    }

    fn as_ptr(&self) -> *mut ffi::rdma_event_channel {
        self.inner.ch.as_ptr()
    }

    /// Take the next event (`rdma_get_cm_event`), copied out and acknowledged; `None` when none is pending.
    pub fn get_event(&self) -> Result<Option<CmEvent>, RdmaError> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: the channel is live; `ev` is a valid out-pointer.
        let rc = unsafe { ffi::rdma_get_cm_event(self.as_ptr(), &mut ev) };
        if rc != 0 {
            let errno = super::Errno::last();
            if errno.0 == libc::EAGAIN {
                return Ok(None);
            }
            return Err(RdmaError::Verb { verb: "rdma_get_cm_event", errno, context: String::new() });
        }
        // SAFETY: a successful rdma_get_cm_event returns a valid event, owned by us until acknowledged.
        let event = unsafe { CmEvent::copy_from(&*ev, self) };
        // SAFETY: acknowledged exactly once, after everything we need was copied out of it.
        let rc = unsafe { ffi::rdma_ack_cm_event(ev) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno::last(), "rdma_ack_cm_event failed");
        }
        Ok(Some(event))
    }

    /// Wait up to `timeout` for the fd to become readable, then [`get_event`](Self::get_event).
    pub fn wait(&self, timeout: Duration) -> Result<Option<CmEvent>, RdmaError> {
        super::poll_readable(self.as_raw_fd(), timeout).map_err(|e| RdmaError::verb("poll", e, "RDMA CM channel"))?;
        self.get_event()
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is live; `fd` is set at creation and never changes.
        unsafe { (*self.as_ptr()).fd }
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open until the channel, kept alive by `self`, is destroyed.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.as_raw_fd()).finish()
    }
}

/// Identifies a [`CmId`] in [`CmEvent`]s (an opaque, comparable token; valid while the id lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmIdKey(usize);

/// An RDMA CM identifier (`struct rdma_cm_id`) in the TCP port space (reliable connected queue pairs).
/// Destroyed (`rdma_destroy_id`) on drop; a queue pair created on it owns it ([`super::QueuePair`]) so the
/// queue pair is destroyed first.
pub struct CmId {
    id: NonNull<ffi::rdma_cm_id>,
    channel: EventChannel,
}

// SAFETY: librdmacm allows an id to be used from any thread; all mutating calls take `&mut self`.
unsafe impl Send for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is live, has no QP (QueuePair destroys its QP before dropping the id), and all its
        // events were acknowledged by get_event, so rdma_destroy_id does not block.
        let rc = unsafe { ffi::rdma_destroy_id(self.id.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno::last(), "rdma_destroy_id failed");
        }
    }
}

/// Connection parameters of [`CmId::connect`] and [`CmId::accept`] (`struct rdma_conn_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnParam<'a> {
    /// Private data for the peer (at most 56 bytes in a connect request on RoCE/IB, 196 in an accept).
    pub private_data: &'a [u8],
    /// RDMA READs we serve at once as responder (≤ the device's `max_qp_rd_atom`).
    pub responder_resources: u8,
    /// RDMA READs we keep outstanding as initiator (≤ the device's `max_qp_init_rd_atom`).
    pub initiator_depth: u8,
    /// Transport retries (0-7).
    pub retry_count: u8,
    /// Receiver-not-ready retries (0-7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Hardware flow control.
    pub flow_control: bool,
}

impl Default for ConnParam<'_> {
    fn default() -> Self {
        ConnParam {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            flow_control: true,
        }
    }
}

impl ConnParam<'_> {
    fn to_ffi(self) -> Result<ffi::rdma_conn_param, RdmaError> {
        let len = u8::try_from(self.private_data.len()).map_err(|_| {
            RdmaError::invalid("ConnParam", format!("{} bytes of private data; at most 255", self.private_data.len()))
        })?;
        if self.retry_count > 7 || self.rnr_retry_count > 7 {
            return Err(RdmaError::invalid("ConnParam", "retry_count and rnr_retry_count are 0-7"));
        }
        Ok(ffi::rdma_conn_param {
            private_data: if len == 0 { std::ptr::null() } else { self.private_data.as_ptr().cast() },
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: u8::from(self.flow_control),
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            // librdmacm fills srq and qp_num from the id's queue pair.
            srq: 0,
            qp_num: 0,
        })
    }
}

fn check(verb: &'static str, rc: i32, context: impl FnOnce() -> String) -> Result<(), RdmaError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(RdmaError::last(verb, context()))
    }
}

fn timeout_ms(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)
}

impl CmId {
    /// Create an id on `channel` (`rdma_create_id`, `RDMA_PS_TCP`: reliable connected).
    pub fn new(channel: &EventChannel) -> Result<CmId, RdmaError> {
        let mut id = std::ptr::null_mut();
        // SAFETY: the channel is live (the id keeps a clone); `id` is a valid out-pointer.
        let rc = unsafe {
            ffi::rdma_create_id(channel.as_ptr(), &mut id, std::ptr::null_mut(), ffi::rdma_port_space::RDMA_PS_TCP)
        };
        check("rdma_create_id", rc, String::new)?;
        let id = NonNull::new(id).ok_or_else(|| RdmaError::verb("rdma_create_id", libc::ENOMEM, "null id"))?;
        Ok(CmId { id, channel: channel.clone() })
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rdma_cm_id {
        self.id.as_ptr()
    }

    /// The key events for this id carry.
    pub fn key(&self) -> CmIdKey {
        CmIdKey(self.id.as_ptr() as usize)
    }

    /// The channel its events arrive on.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// Bind to a local address (`rdma_bind_addr`); port 0 picks one.
    pub fn bind_addr(&mut self, addr: SocketAddr) -> Result<(), RdmaError> {
        let mut sa = SockAddr::from(addr);
        // SAFETY: the id is live; `sa` is a valid sockaddr of its family's length.
        let rc = unsafe { ffi::rdma_bind_addr(self.as_ptr(), sa.as_mut_ptr()) };
        check("rdma_bind_addr", rc, || addr.to_string())
    }

    /// Listen for connect requests (`rdma_listen`); they arrive as [`CmEventKind::ConnectRequest`].
    pub fn listen(&mut self, backlog: u32) -> Result<(), RdmaError> {
        let backlog = i32::try_from(backlog).unwrap_or(i32::MAX);
        // SAFETY: the id is live and bound.
        let rc = unsafe { ffi::rdma_listen(self.as_ptr(), backlog) };
        check("rdma_listen", rc, || format!("backlog {backlog}"))
    }

    /// Resolve `dst` (and pick the local device) (`rdma_resolve_addr`); completes with
    /// [`CmEventKind::AddrResolved`] or [`CmEventKind::AddrError`].
    pub fn resolve_addr(
        &mut self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), RdmaError> {
        let mut src_sa = src.map(SockAddr::from);
        let mut dst_sa = SockAddr::from(dst);
        let src_ptr = src_sa.as_mut().map_or(std::ptr::null_mut(), SockAddr::as_mut_ptr);
        // SAFETY: the id is live; the addresses are valid sockaddrs (or null for src), copied by the call.
        let rc = unsafe { ffi::rdma_resolve_addr(self.as_ptr(), src_ptr, dst_sa.as_mut_ptr(), timeout_ms(timeout)) };
        check("rdma_resolve_addr", rc, || dst.to_string())
    }

    /// Resolve the route to the resolved address (`rdma_resolve_route`); completes with
    /// [`CmEventKind::RouteResolved`] or [`CmEventKind::RouteError`].
    pub fn resolve_route(&mut self, timeout: Duration) -> Result<(), RdmaError> {
        // SAFETY: the id is live.
        let rc = unsafe { ffi::rdma_resolve_route(self.as_ptr(), timeout_ms(timeout)) };
        check("rdma_resolve_route", rc, || format!("{:?}", self.peer_addr()))
    }

    /// Connect (`rdma_connect`); completes with [`CmEventKind::Established`] (or rejected/unreachable).
    pub fn connect(&mut self, param: &ConnParam<'_>) -> Result<(), RdmaError> {
        let mut p = param.to_ffi()?;
        // SAFETY: the id is live; `p` and its private data outlive the call, which copies them.
        let rc = unsafe { ffi::rdma_connect(self.as_ptr(), &mut p) };
        check("rdma_connect", rc, || format!("{:?}", self.peer_addr()))
    }

    /// Connect with NVMe/RDMA connect request private data.
    pub fn connect_nvme(&mut self, request: &RdmaCmRequest, param: ConnParam<'_>) -> Result<(), RdmaError> {
        let data = request.to_bytes();
        self.connect(&ConnParam { private_data: &data, ..param })
    }

    /// Accept a connect request (`rdma_accept`) on the id a [`CmEventKind::ConnectRequest`] brought.
    pub fn accept(&mut self, param: &ConnParam<'_>) -> Result<(), RdmaError> {
        let mut p = param.to_ffi()?;
        // SAFETY: the id is live; `p` and its private data outlive the call, which copies them.
        let rc = unsafe { ffi::rdma_accept(self.as_ptr(), &mut p) };
        check("rdma_accept", rc, || format!("{:?}", self.peer_addr()))
    }

    /// Accept with NVMe/RDMA accept private data.
    pub fn accept_nvme(&mut self, accept: &RdmaCmAccept, param: ConnParam<'_>) -> Result<(), RdmaError> {
        let data = accept.to_bytes();
        self.accept(&ConnParam { private_data: &data, ..param })
    }

    /// Reject a connect request (`rdma_reject`) with private data.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), RdmaError> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| RdmaError::invalid("CmId::reject", "private data longer than 255 bytes"))?;
        let ptr = if len == 0 { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the id is live; the private data outlives the call, which copies it.
        let rc = unsafe { ffi::rdma_reject(self.as_ptr(), ptr, len) };
        check("rdma_reject", rc, || format!("{:?}", self.peer_addr()))
    }

    /// Reject with NVMe/RDMA reject private data.
    pub fn reject_nvme(&mut self, reject: &RdmaCmReject) -> Result<(), RdmaError> {
        self.reject(&reject.to_bytes())
    }

    /// Disconnect (`rdma_disconnect`): the queue pair goes to the error state (outstanding work requests
    /// complete as flushed) and the peer gets [`CmEventKind::Disconnected`].
    pub fn disconnect(&mut self) -> Result<(), RdmaError> {
        // SAFETY: the id is live.
        let rc = unsafe { ffi::rdma_disconnect(self.as_ptr()) };
        check("rdma_disconnect", rc, || format!("{:?}", self.peer_addr()))
    }

    /// Move the id's events to `channel` (`rdma_migrate_id`), e.g. from the listener's channel to the
    /// channel of the reactor that will own the connection.
    pub fn migrate(&mut self, channel: &EventChannel) -> Result<(), RdmaError> {
        // SAFETY: both are live; our events are all acknowledged (get_event acks at once), so this does not
        // block. The new channel is kept alive by the clone stored below.
        let rc = unsafe { ffi::rdma_migrate_id(self.as_ptr(), channel.as_ptr()) };
        check("rdma_migrate_id", rc, String::new)?;
        self.channel = channel.clone();
        Ok(())
    }

    /// The local address (bound or chosen by resolution), if any.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; `route.addr`'s first union (src_addr, src_sin, src_sin6, src_storage) is a
        // sockaddr_storage RDMA CM keeps up to date; it is read, not kept.
        unsafe { sockaddr_to_std(std::ptr::addr_of!((*self.as_ptr()).route.addr.__bindgen_anon_1.src_storage)) }
    }

    /// The peer's address, if connected or resolved.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as in local_addr, for the destination address (the second union, dst_storage).
        unsafe { sockaddr_to_std(std::ptr::addr_of!((*self.as_ptr()).route.addr.__bindgen_anon_2.dst_storage)) }
    }

    /// The RDMA device RDMA CM chose for this id (set once an address is bound to a device or resolved).
    pub fn device(&self) -> Result<Device, RdmaError> {
        // SAFETY: the id is live; `verbs` is set by RDMA CM and read here.
        let verbs = unsafe { (*self.as_ptr()).verbs };
        let ctx = NonNull::new(verbs)
            .ok_or_else(|| RdmaError::invalid("CmId::device", "no device yet: bind to a device address or resolve"))?;
        Device::from_context(ctx)
    }

    /// The device port the id uses.
    pub fn port_num(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { (*self.as_ptr()).port_num }
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("key", &self.key())
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

// AF_INET (2) and AF_INET6 (10) fit sa_family_t (u16).
#[expect(clippy::cast_possible_truncation, reason = "AF_INET (2) and AF_INET6 (10) fit sa_family_t (u16)")]
const AF_INET: libc::sa_family_t = libc::AF_INET as libc::sa_family_t;
#[expect(clippy::cast_possible_truncation, reason = "AF_INET (2) and AF_INET6 (10) fit sa_family_t (u16)")]
const AF_INET6: libc::sa_family_t = libc::AF_INET6 as libc::sa_family_t;

/// A socket address in C form.
struct SockAddr {
    storage: libc::sockaddr_storage,
}

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: AF_INET,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(storage).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: AF_INET6,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(storage).cast(), sin6) };
            }
        }
        SockAddr { storage }
    }
}

impl SockAddr {
    fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        std::ptr::addr_of_mut!(self.storage).cast()
    }
}

/// Read a sockaddr RDMA CM filled in.
///
/// # Safety
///
/// `sa` must point to at least `size_of::<sockaddr_storage>()` readable bytes.
unsafe fn sockaddr_to_std(sa: *const libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the caller guarantees a readable sockaddr_storage.
    let storage = unsafe { std::ptr::read_unaligned(sa) };
    sockaddr_storage_to_std(&storage)
}

fn sockaddr_storage_to_std(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; storage is large and aligned enough.
            let sin = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

/// The kind of an RDMA CM event (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmEventKind {
    /// `resolve_addr` finished.
    AddrResolved,
    /// `resolve_addr` failed.
    AddrError,
    /// `resolve_route` finished.
    RouteResolved,
    /// `resolve_route` failed.
    RouteError,
    /// A peer wants to connect; the event carries the new id ([`CmEvent::take_id`]).
    ConnectRequest,
    /// Connection response (only without a QP on the id; ours get `Established`).
    ConnectResponse,
    /// Connection setup failed.
    ConnectError,
    /// The peer is unreachable.
    Unreachable,
    /// The peer rejected the connect request (status 28 and private data: a consumer reject).
    Rejected,
    /// The connection is up.
    Established,
    /// The connection is down (either side disconnected).
    Disconnected,
    /// The RDMA device was removed.
    DeviceRemoval,
    /// Multicast join finished.
    MulticastJoin,
    /// Multicast error.
    MulticastError,
    /// The id's local address changed.
    AddrChange,
    /// The queue pair left the time-wait state and may be reused.
    TimewaitExit,
    /// An event type this module does not know.
    Other(u32),
}

impl CmEventKind {
    /// Decode `rdma_cm_event_type`.
    pub fn from_raw(v: u32) -> Self {
        use ffi::rdma_cm_event_type as t;
        match v {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            t::RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            t::RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            t::RDMA_CM_EVENT_CONNECT_REQUEST => Self::ConnectRequest,
            t::RDMA_CM_EVENT_CONNECT_RESPONSE => Self::ConnectResponse,
            t::RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            t::RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            t::RDMA_CM_EVENT_REJECTED => Self::Rejected,
            t::RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            t::RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            t::RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            t::RDMA_CM_EVENT_MULTICAST_JOIN => Self::MulticastJoin,
            t::RDMA_CM_EVENT_MULTICAST_ERROR => Self::MulticastError,
            t::RDMA_CM_EVENT_ADDR_CHANGE => Self::AddrChange,
            t::RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            v => Self::Other(v),
        }
    }

    /// Whether the event carries connection parameters and private data.
    fn has_conn_param(self) -> bool {
        matches!(
            self,
            Self::ConnectRequest
                | Self::ConnectResponse
                | Self::ConnectError
                | Self::Unreachable
                | Self::Rejected
                | Self::Established
        )
    }
}

/// Private data received with an event (at most 255 bytes; RoCE/IB pad it to the CM message's size).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    buf: [u8; 255],
    len: u8,
}

impl PrivateData {
    /// No private data.
    pub const EMPTY: PrivateData = PrivateData { buf: [0; 255], len: 0 };

    /// Copy up to 255 bytes of `data`.
    pub fn new(data: &[u8]) -> Self {
        let mut p = PrivateData::EMPTY;
        let n = data.len().min(255);
        p.buf[..n].copy_from_slice(&data[..n]);
        // n <= 255.
        p.len = u8::try_from(n).unwrap_or(u8::MAX);
        p
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData({} bytes)", self.len)
    }
}

/// Connection parameters the peer sent (in a connect request or reply). The RDMA CM hands the two depths over
/// already turned to our side (the peer's responder resources arrive as our `initiator_depth`, and the other way
/// round), so they can be used as they are in our own accept or connect parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerConnParam {
    /// RDMA READs the peer will issue to us as initiator (its ORD): what we need as responder.
    pub responder_resources: u8,
    /// RDMA READs we may have outstanding towards the peer as initiator (its IRD): our ceiling.
    pub initiator_depth: u8,
    /// Hardware flow control.
    pub flow_control: bool,
    /// Transport retries.
    pub retry_count: u8,
    /// Receiver-not-ready retries.
    pub rnr_retry_count: u8,
    /// Whether the peer uses a shared receive queue.
    pub srq: bool,
    /// The peer's queue pair number.
    pub qp_num: u32,
}

/// An RDMA CM event, copied out of librdmacm's buffer and already acknowledged.
#[derive(Debug)]
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The id it happened to (for a connect request: the new id's key).
    pub id: CmIdKey,
    /// For a connect request: the listening id's key.
    pub listen_id: Option<CmIdKey>,
    /// Status: 0, a negative errno, or for [`CmEventKind::Rejected`] the CM reject reason (28 when the
    /// peer's application rejected).
    pub status: i32,
    /// Private data (connection events only).
    pub private_data: PrivateData,
    /// The peer's connection parameters (connection events only).
    pub peer: Option<PeerConnParam>,
    /// The new id of a connect request, until taken.
    new_id: Option<CmId>,
}

/// The CM reject reason RDMA CM reports when the peer's application rejected (IB `REJ` reason 28).
pub const REJECT_CONSUMER_DEFINED: i32 = 28;

impl CmEvent {
    /// Copy an event out of librdmacm's buffer.
    ///
    /// # Safety
    ///
    /// `ev` must be a live, unacknowledged event read from `channel`.
    unsafe fn copy_from(ev: &ffi::rdma_cm_event, channel: &EventChannel) -> CmEvent {
        let kind = CmEventKind::from_raw(ev.event);
        let (peer, private_data) = if kind.has_conn_param() {
            // SAFETY: connection events of the TCP port space carry `param.conn`.
            let conn = unsafe { &ev.param.conn };
            let data = if conn.private_data.is_null() {
                PrivateData::EMPTY
            } else {
                // SAFETY: librdmacm points private_data at private_data_len bytes inside the event.
                PrivateData::new(unsafe {
                    std::slice::from_raw_parts(conn.private_data.cast::<u8>(), usize::from(conn.private_data_len))
                })
            };
            let peer = PeerConnParam {
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                flow_control: conn.flow_control != 0,
                retry_count: conn.retry_count,
                rnr_retry_count: conn.rnr_retry_count,
                srq: conn.srq != 0,
                qp_num: conn.qp_num,
            };
            (Some(peer), data)
        } else {
            (None, PrivateData::EMPTY)
        };
        let new_id = match (kind, NonNull::new(ev.id)) {
            // The new id is ours to destroy; it reports on the listener's channel (this one).
            (CmEventKind::ConnectRequest, Some(id)) => Some(CmId { id, channel: channel.clone() }),
            _ => None,
        };
        CmEvent {
            kind,
            id: CmIdKey(ev.id as usize),
            listen_id: NonNull::new(ev.listen_id).map(|l| CmIdKey(l.as_ptr() as usize)),
            status: ev.status,
            private_data,
            peer,
            new_id,
        }
    }

    /// Take the new id a [`CmEventKind::ConnectRequest`] brought; accept or reject on it. If it is not
    /// taken, dropping the event destroys it, which rejects the request.
    pub fn take_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }

    /// Parse the private data as an NVMe/RDMA connect request.
    pub fn nvme_request(&self) -> Result<RdmaCmRequest, WireError> {
        RdmaCmRequest::parse(self.private_data.as_bytes())
    }

    /// Parse the private data as an NVMe/RDMA accept.
    pub fn nvme_accept(&self) -> Result<RdmaCmAccept, WireError> {
        RdmaCmAccept::parse(self.private_data.as_bytes())
    }

    /// Parse the private data as an NVMe/RDMA reject.
    pub fn nvme_reject(&self) -> Result<RdmaCmReject, WireError> {
        RdmaCmReject::parse(self.private_data.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::rdma::private_data::RdmaCmRejectStatus;

    #[test]
    fn socket_addresses_round_trip_through_sockaddr() {
        for addr in ["10.77.0.1:4420", "[fe80::1%3]:4420", "[::ffff:10.77.0.1]:1", "0.0.0.0:0"] {
            let a: SocketAddr = addr.parse().unwrap();
            let sa = SockAddr::from(a);
            assert_eq!(sockaddr_storage_to_std(&sa.storage), Some(a), "{addr}");
        }
        // Network byte order on the wire.
        let sa = SockAddr::from("10.77.0.1:4420".parse::<SocketAddr>().unwrap());
        // SAFETY: the storage holds a sockaddr_in (written by From).
        let sin = unsafe { &*std::ptr::from_ref(&sa.storage).cast::<libc::sockaddr_in>() };
        assert_eq!(sin.sin_port.to_ne_bytes(), 4420u16.to_be_bytes());
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 77, 0, 1]);
        // SAFETY: zeroed sockaddr_storage is valid (AF_UNSPEC).
        let unspec: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(sockaddr_storage_to_std(&unspec), None);
    }

    #[test]
    fn conn_param_converts_and_bounds_private_data() {
        let req = RdmaCmRequest { qid: 1, hrqsize: 32, hsqsize: 31, cntlid: 7 }.to_bytes();
        let p = ConnParam { private_data: &req, responder_resources: 4, initiator_depth: 2, ..ConnParam::default() };
        let f = p.to_ffi().unwrap();
        assert_eq!(f.private_data_len, 32);
        assert_eq!(f.private_data, req.as_ptr().cast());
        assert_eq!((f.responder_resources, f.initiator_depth, f.retry_count, f.rnr_retry_count), (4, 2, 7, 7));
        assert_eq!(f.flow_control, 1);

        let empty = ConnParam::default().to_ffi().unwrap();
        assert!(empty.private_data.is_null());
        assert_eq!(empty.private_data_len, 0);

        let big = [0u8; 256];
        let Err(e) = ConnParam { private_data: &big, ..ConnParam::default() }.to_ffi() else {
            panic!("accepted 256 bytes")
        };
        assert_eq!(e.to_string(), "ConnParam: 256 bytes of private data; at most 255");
        assert!(ConnParam { retry_count: 8, ..ConnParam::default() }.to_ffi().is_err());
    }

    #[test]
    fn event_kinds_decode_as_rdma_cma_h_numbers_them() {
        assert_eq!(CmEventKind::from_raw(0), CmEventKind::AddrResolved);
        assert_eq!(CmEventKind::from_raw(4), CmEventKind::ConnectRequest);
        assert_eq!(CmEventKind::from_raw(8), CmEventKind::Rejected);
        assert_eq!(CmEventKind::from_raw(9), CmEventKind::Established);
        assert_eq!(CmEventKind::from_raw(10), CmEventKind::Disconnected);
        assert_eq!(CmEventKind::from_raw(15), CmEventKind::TimewaitExit);
        assert_eq!(CmEventKind::from_raw(16), CmEventKind::Other(16));
        assert!(CmEventKind::ConnectRequest.has_conn_param() && !CmEventKind::Disconnected.has_conn_param());
    }

    #[test]
    fn received_private_data_parses_as_nvme_rdma() {
        // RoCE pads a connect request's private data to 56 bytes.
        let req = RdmaCmRequest { qid: 3, hrqsize: 128, hsqsize: 127, cntlid: 1 };
        let mut padded = [0u8; 56];
        padded[..32].copy_from_slice(&req.to_bytes());
        let mut ev = CmEvent {
            kind: CmEventKind::ConnectRequest,
            id: CmIdKey(1),
            listen_id: Some(CmIdKey(2)),
            status: 0,
            private_data: PrivateData::new(&padded),
            peer: Some(PeerConnParam::default()),
            new_id: None,
        };
        assert_eq!(ev.private_data.as_bytes().len(), 56);
        assert_eq!(ev.nvme_request(), Ok(req));
        assert!(ev.take_id().is_none());

        ev.kind = CmEventKind::Rejected;
        ev.status = REJECT_CONSUMER_DEFINED;
        ev.private_data = PrivateData::new(&RdmaCmReject { sts: RdmaCmRejectStatus::InvalidQid }.to_bytes());
        assert_eq!(ev.nvme_reject().unwrap().sts, RdmaCmRejectStatus::InvalidQid);
        ev.private_data = PrivateData::new(&RdmaCmAccept { crqsize: 32 }.to_bytes());
        assert_eq!(ev.nvme_accept().unwrap().crqsize, 32);
        ev.private_data = PrivateData::EMPTY;
        assert!(ev.nvme_accept().is_err());
        assert_eq!(format!("{:?}", PrivateData::new(&[1; 300])), "PrivateData(255 bytes)");
    }
}
