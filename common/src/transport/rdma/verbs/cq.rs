//! [`CompletionChannel`] and [`CompletionQueue`]: where work requests complete, polled into
//! [`WorkCompletion`]s, with a file descriptor a reactor sleeps on when there is nothing to poll.

use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use super::ffi;

use super::device::Device;
use super::error::RdmaError;

/// A completion channel (`struct ibv_comp_channel`): a file descriptor that becomes readable when a
/// completion queue armed with [`CompletionQueue::req_notify`] gets a completion. Non-blocking: register
/// it with mio/epoll, then call [`CompletionChannel::get_event`] until it returns `None`.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    pub(crate) channel: NonNull<ffi::ibv_comp_channel>,
    _device: Device,
}

// SAFETY: libibverbs is thread-safe; the channel is only passed to verbs and destroyed once in Drop.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; every CQ using it holds an Arc<ChannelInner>, so none
        // remains.
        let rc = unsafe { ffi::ibv_destroy_comp_channel(self.channel.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno(rc), "ibv_destroy_comp_channel failed");
        }
    }
}

impl Device {
    /// Create a completion channel (`ibv_create_comp_channel`), its fd set non-blocking.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, RdmaError> {
        // SAFETY: the context is open while `self` lives.
        let ch = unsafe { ffi::ibv_create_comp_channel(self.as_ptr()) };
        let channel = NonNull::new(ch).ok_or_else(|| RdmaError::last("ibv_create_comp_channel", self.name()))?;
        let cc = CompletionChannel { inner: Arc::new(ChannelInner { channel, _device: self.clone() }) };
        super::set_nonblocking(cc.as_raw_fd(), true).map_err(|e| RdmaError::verb("fcntl", e, "completion channel"))?;
        Ok(cc)
    }

    /// Create a completion queue of at least `cqe` entries (`ibv_create_cq`), reporting to `channel` when
    /// armed, interrupts steered to `comp_vector` (< [`Device::num_comp_vectors`]).
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
        comp_vector: u32,
    ) -> Result<CompletionQueue, RdmaError> {
        let n = i32::try_from(cqe).map_err(|_| RdmaError::invalid("CompletionQueue", format!("{cqe} entries")))?;
        let vector =
            i32::try_from(comp_vector).map_err(|_| RdmaError::invalid("CompletionQueue", "comp_vector too large"))?;
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.inner.channel.as_ptr());
        // SAFETY: the context is open; `ch` is null or a live channel of this context (kept alive by the
        // Arc the CQ stores).
        let cq = unsafe { ffi::ibv_create_cq(self.as_ptr(), n, std::ptr::null_mut(), ch, vector) };
        let cq = NonNull::new(cq).ok_or_else(|| {
            RdmaError::last("ibv_create_cq", format!("{} cqe {cqe} vector {comp_vector}", self.name()))
        })?;
        // Soft-RoCE's provider copies the kernel's `ib_wc` flags verbatim (IB_WC_WITH_INVALIDATE is 1 << 2,
        // where libibverbs has IBV_WC_IP_CSUM_OK; its IBV_WC_WITH_INV is 1 << 3): translate for rxe.
        let kernel_wc_flags = self.query().is_ok_and(|a| a.vendor_id == RXE_VENDOR_ID);
        Ok(CompletionQueue {
            inner: Arc::new(CqInner { cq, _channel: channel.map(|c| c.inner.clone()), _device: self.clone() }),
            kernel_wc_flags,
        })
    }
}

impl CompletionChannel {
    /// Take one completion event: `Some(key)` of the completion queue that fired (compare with
    /// [`CompletionQueue::key`]), already acknowledged, or `None` when no event is pending. The queue is
    /// disarmed: call [`CompletionQueue::req_notify`] and then poll it before sleeping again.
    pub fn get_event(&self) -> Result<Option<CqKey>, RdmaError> {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the channel is live; out-pointers are valid. Non-blocking fd: EAGAIN when empty.
        let rc = unsafe { ffi::ibv_get_cq_event(self.inner.channel.as_ptr(), &mut cq, &mut ctx) };
        if rc != 0 {
            let errno = super::Errno::last();
            if errno.0 == libc::EAGAIN {
                return Ok(None);
            }
            return Err(RdmaError::Verb { verb: "ibv_get_cq_event", errno, context: String::new() });
        }
        // SAFETY: the event names a CQ of this channel; ibv_destroy_cq of that CQ waits for this
        // acknowledgement, so the CQ is still live here. Acknowledging at once means no CQ can be left with
        // unacknowledged events (which would make its destruction block forever).
        unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        Ok(Some(CqKey(cq as usize)))
    }

    /// Wait up to `timeout` for the fd to become readable, then [`get_event`](Self::get_event).
    pub fn wait(&self, timeout: Duration) -> Result<Option<CqKey>, RdmaError> {
        super::poll_readable(self.as_raw_fd(), timeout)
            .map_err(|e| RdmaError::verb("poll", e, "completion channel"))?;
        self.get_event()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is live; `fd` is set at creation and never changes.
        unsafe { (*self.inner.channel.as_ptr()).fd }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open until the channel (which `self` keeps alive) is destroyed.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel").field("fd", &self.as_raw_fd()).finish()
    }
}

/// Identifies a completion queue in a [`CompletionChannel`] event (an opaque, comparable token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqKey(usize);

/// A completion queue (`struct ibv_cq`). Queue pairs and shared receive queues using it keep it alive.
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
    /// The provider reports the kernel's `IB_WC_*` flag values (rxe).
    kernel_wc_flags: bool,
}

pub(crate) struct CqInner {
    pub(crate) cq: NonNull<ffi::ibv_cq>,
    _channel: Option<Arc<ChannelInner>>,
    _device: Device,
}

// SAFETY: libibverbs is thread-safe (providers lock their CQs); the pointer is destroyed once in Drop.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq; every QP using it holds an Arc<CqInner>, so none remains, and
        // channel events were acknowledged as they were read.
        let rc = unsafe { ffi::ibv_destroy_cq(self.cq.as_ptr()) };
        if rc != 0 {
            tracing::warn!(errno = %super::Errno(rc), "ibv_destroy_cq failed");
        }
    }
}

/// Completions read from the device per `ibv_poll_cq` call (a stack array, no allocation).
const POLL_CHUNK: usize = 32;

impl CompletionQueue {
    /// The key [`CompletionChannel::get_event`] reports for this queue.
    pub fn key(&self) -> CqKey {
        CqKey(self.inner.cq.as_ptr() as usize)
    }

    /// Entries the queue holds (at least what was asked for).
    pub fn capacity(&self) -> u32 {
        // SAFETY: the CQ is live; `cqe` is set at creation (and by resize, which we do not offer).
        u32::try_from(unsafe { (*self.inner.cq.as_ptr()).cqe }).unwrap_or(0)
    }

    /// Poll up to `out.len()` completions into `out` (`ibv_poll_cq`); returns how many were written.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, RdmaError> {
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_CHUNK);
            let mut wc: [MaybeUninit<ffi::ibv_wc>; POLL_CHUNK] = [const { MaybeUninit::uninit() }; POLL_CHUNK];
            // `want` <= POLL_CHUNK, which fits an i32.
            let want_i32 = i32::try_from(want).unwrap_or(0);
            // SAFETY: the CQ is live; `wc` has room for `want` entries, of which the provider writes the
            // first `n`.
            let n = unsafe { ffi::nvmf_ibv_poll_cq(self.inner.cq.as_ptr(), want_i32, wc.as_mut_ptr().cast()) };
            let n = usize::try_from(n).map_err(|_| RdmaError::verb("ibv_poll_cq", -n, ""))?;
            for (slot, raw) in out[done..].iter_mut().zip(&wc[..n]) {
                // SAFETY: the first `n` entries were written by ibv_poll_cq.
                *slot = WorkCompletion::from_ffi(unsafe { raw.assume_init_ref() }, self.kernel_wc_flags);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Arm the queue (`ibv_req_notify_cq`): the next completion (or next solicited one) produces an event
    /// on its channel. Poll once more after arming: completions that arrived before it raise no event.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), RdmaError> {
        // SAFETY: the CQ is live.
        let rc = unsafe { ffi::nvmf_ibv_req_notify_cq(self.inner.cq.as_ptr(), i32::from(solicited_only)) };
        if rc != 0 {
            return Err(RdmaError::verb("ibv_req_notify_cq", rc, ""));
        }
        Ok(())
    }
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue").field("capacity", &self.capacity()).finish()
    }
}

/// One completed work request (`struct ibv_wc`, the fields an RC transport uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. Only meaningful when `status` is [`WcStatus::Success`] (flushed work requests
    /// carry no valid opcode).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (RDMA READ).
    pub byte_len: u32,
    /// Immediate data (host byte order) of a SEND/RDMA WRITE with immediate.
    pub imm_data: Option<u32>,
    /// The rkey a peer's send with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The local queue pair the work request belonged to.
    pub qp_num: u32,
    /// `ibv_wc_flags` (`IBV_WC_GRH`, `IBV_WC_WITH_IMM`, `IBV_WC_WITH_INV`, ...), translated from the kernel's
    /// values for providers that report those (rxe).
    pub wc_flags: u32,
    /// Vendor-specific error syndrome (with an error status).
    pub vendor_err: u32,
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: 0,
            wc_flags: 0,
            vendor_err: 0,
        }
    }
}

const WC_WITH_IMM: u32 = ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0;
const WC_WITH_INV: u32 = ffi::ibv_wc_flags::IBV_WC_WITH_INV.0;

/// Soft-RoCE's vendor ID (`RXE_VENDOR_ID` in the kernel's rxe driver).
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// The kernel's `enum ib_wc_flags` bits that differ from libibverbs' (`include/rdma/ib_verbs.h`).
const IB_WC_WITH_INVALIDATE: u32 = 1 << 2;
const IB_WC_IP_CSUM_OK: u32 = 1 << 3;

/// Kernel `ib_wc_flags` to libibverbs `ibv_wc_flags`: GRH and WITH_IMM are the same bits, WITH_INVALIDATE and
/// IP_CSUM_OK trade places; the rest (SMAC, VLAN, network header type) has no userspace meaning here.
fn user_wc_flags(kernel: u32) -> u32 {
    let mut f = kernel & (ffi::ibv_wc_flags::IBV_WC_GRH.0 | WC_WITH_IMM);
    if kernel & IB_WC_WITH_INVALIDATE != 0 {
        f |= WC_WITH_INV;
    }
    if kernel & IB_WC_IP_CSUM_OK != 0 {
        f |= ffi::ibv_wc_flags::IBV_WC_IP_CSUM_OK.0;
    }
    f
}

impl WorkCompletion {
    fn from_ffi(wc: &ffi::ibv_wc, kernel_wc_flags: bool) -> Self {
        // SAFETY: both union members are u32; reading either is defined (the flags say which is meant).
        let raw = unsafe { wc.__bindgen_anon_1.invalidated_rkey };
        let flags = if kernel_wc_flags { user_wc_flags(wc.wc_flags) } else { wc.wc_flags };
        WorkCompletion::from_parts(wc.wr_id, wc.status, wc.opcode, wc.byte_len, raw, flags, wc.qp_num, wc.vendor_err)
    }

    #[expect(clippy::too_many_arguments, reason = "one argument per ibv_wc field")]
    fn from_parts(
        wr_id: u64,
        status: u32,
        opcode: u32,
        byte_len: u32,
        imm_or_rkey: u32,
        wc_flags: u32,
        qp_num: u32,
        vendor_err: u32,
    ) -> Self {
        WorkCompletion {
            wr_id,
            status: WcStatus::from_raw(status),
            opcode: WcOpcode::from_raw(opcode),
            byte_len,
            // Immediate data travels in network byte order; the invalidated rkey in host order.
            imm_data: (wc_flags & WC_WITH_IMM != 0).then(|| u32::from_be(imm_or_rkey)),
            invalidated_rkey: (wc_flags & WC_WITH_INV != 0).then_some(imm_or_rkey),
            qp_num,
            wc_flags,
            vendor_err,
        }
    }

    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success
    }
}

macro_rules! wc_status {
    ($($variant:ident = $konst:ident, $text:literal;)*) => {
        /// A work completion's status (`enum ibv_wc_status`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum WcStatus {
            $(#[doc = $text] $variant,)*
            /// A status this module does not know.
            Other(u32),
        }

        impl WcStatus {
            /// Decode `ibv_wc_status`.
            pub fn from_raw(v: u32) -> Self {
                match v {
                    $(ffi::ibv_wc_status::$konst => WcStatus::$variant,)*
                    v => WcStatus::Other(v),
                }
            }

            /// The `ibv_wc_status` value.
            pub fn to_raw(self) -> u32 {
                match self {
                    $(WcStatus::$variant => ffi::ibv_wc_status::$konst,)*
                    WcStatus::Other(v) => v,
                }
            }

            /// The verbs name (`IBV_WC_WR_FLUSH_ERR`).
            pub fn name(self) -> &'static str {
                match self {
                    $(WcStatus::$variant => stringify!($konst),)*
                    WcStatus::Other(_) => "IBV_WC_?",
                }
            }
        }
    };
}

wc_status! {
    Success = IBV_WC_SUCCESS, "Success.";
    LocLenErr = IBV_WC_LOC_LEN_ERR, "Local length error (a receive buffer too small, or a too long SEND).";
    LocQpOpErr = IBV_WC_LOC_QP_OP_ERR, "Local QP operation error.";
    LocEecOpErr = IBV_WC_LOC_EEC_OP_ERR, "Local EE context operation error.";
    LocProtErr = IBV_WC_LOC_PROT_ERR, "Local protection error (an SGE outside its region or a wrong lkey).";
    WrFlushErr = IBV_WC_WR_FLUSH_ERR, "Flushed: the QP went to the error state before the request executed.";
    MwBindErr = IBV_WC_MW_BIND_ERR, "Memory window bind error.";
    BadRespErr = IBV_WC_BAD_RESP_ERR, "Bad response.";
    LocAccessErr = IBV_WC_LOC_ACCESS_ERR, "Local access error.";
    RemInvReqErr = IBV_WC_REM_INV_REQ_ERR, "Remote invalid request.";
    RemAccessErr = IBV_WC_REM_ACCESS_ERR, "Remote access error (a wrong rkey, range or right).";
    RemOpErr = IBV_WC_REM_OP_ERR, "Remote operation error.";
    RetryExcErr = IBV_WC_RETRY_EXC_ERR, "Transport retry counter exceeded (peer gone).";
    RnrRetryExcErr = IBV_WC_RNR_RETRY_EXC_ERR, "Receiver-not-ready retry counter exceeded (no receive posted).";
    LocRddViolErr = IBV_WC_LOC_RDD_VIOL_ERR, "Local RDD violation.";
    RemInvRdReqErr = IBV_WC_REM_INV_RD_REQ_ERR, "Remote invalid RD request.";
    RemAbortErr = IBV_WC_REM_ABORT_ERR, "Remote aborted.";
    InvEecnErr = IBV_WC_INV_EECN_ERR, "Invalid EE context number.";
    InvEecStateErr = IBV_WC_INV_EEC_STATE_ERR, "Invalid EE context state.";
    FatalErr = IBV_WC_FATAL_ERR, "Fatal error.";
    RespTimeoutErr = IBV_WC_RESP_TIMEOUT_ERR, "Response timeout.";
    GeneralErr = IBV_WC_GENERAL_ERR, "General error.";
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WcStatus::Other(v) => write!(f, "IBV_WC status {v}"),
            s => f.write_str(s.name()),
        }
    }
}

/// What a work completion completed (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any variant) of ours.
    Send,
    /// An RDMA WRITE of ours.
    RdmaWrite,
    /// An RDMA READ of ours.
    RdmaRead,
    /// A memory window bind.
    BindMw,
    /// A local invalidate.
    LocalInv,
    /// A receive (a peer's SEND).
    Recv,
    /// A peer's RDMA WRITE with immediate consumed a receive.
    RecvRdmaWithImm,
    /// An opcode this module does not name.
    Other(u32),
}

impl WcOpcode {
    /// Decode `ibv_wc_opcode`.
    pub fn from_raw(v: u32) -> Self {
        use ffi::ibv_wc_opcode as o;
        match v {
            o::IBV_WC_SEND => WcOpcode::Send,
            o::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            o::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            o::IBV_WC_BIND_MW => WcOpcode::BindMw,
            o::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
            o::IBV_WC_RECV => WcOpcode::Recv,
            o::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            v => WcOpcode::Other(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_opcodes_decode_as_verbs_h_numbers_them() {
        assert_eq!(WcStatus::from_raw(0), WcStatus::Success);
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_raw(10), WcStatus::RemAccessErr);
        assert_eq!(WcStatus::from_raw(13), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::from_raw(99), WcStatus::Other(99));
        for v in 0..=25 {
            assert_eq!(WcStatus::from_raw(v).to_raw(), v);
        }
        assert_eq!(WcStatus::WrFlushErr.to_string(), "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(WcStatus::Other(77).to_string(), "IBV_WC status 77");

        assert_eq!(WcOpcode::from_raw(0), WcOpcode::Send);
        assert_eq!(WcOpcode::from_raw(1), WcOpcode::RdmaWrite);
        assert_eq!(WcOpcode::from_raw(2), WcOpcode::RdmaRead);
        assert_eq!(WcOpcode::from_raw(128), WcOpcode::Recv);
        assert_eq!(WcOpcode::from_raw(129), WcOpcode::RecvRdmaWithImm);
        assert_eq!(WcOpcode::from_raw(3), WcOpcode::Other(3));
    }

    #[test]
    fn immediate_data_and_invalidated_rkeys_follow_the_flags() {
        let wc = WorkCompletion::from_parts(7, 0, 128, 64, 0x1234_5678, WC_WITH_INV, 0x11, 0);
        assert_eq!(wc.invalidated_rkey, Some(0x1234_5678));
        assert_eq!(wc.imm_data, None);
        assert!(wc.is_success());
        assert_eq!((wc.wr_id, wc.opcode, wc.byte_len, wc.qp_num), (7, WcOpcode::Recv, 64, 0x11));

        let wc = WorkCompletion::from_parts(8, 0, 129, 0, 0x0100_0000u32.to_be(), WC_WITH_IMM, 1, 0);
        assert_eq!(wc.imm_data, Some(0x0100_0000));
        assert_eq!(wc.invalidated_rkey, None);

        let wc = WorkCompletion::from_parts(9, 5, 0xdead, 0, 0, 0, 1, 0x42);
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert!(!wc.is_success());
        assert_eq!(wc.vendor_err, 0x42);
        assert_eq!((wc.imm_data, wc.invalidated_rkey), (None, None));
    }

    #[test]
    fn kernel_wc_flags_translate_to_libibverbs_ones() {
        // What rxe reported for a send with invalidate in the test VM: GRH | IB_WC_WITH_INVALIDATE.
        assert_eq!(user_wc_flags(5), 1 | WC_WITH_INV);
        assert_eq!(WC_WITH_INV, 8);
        assert_eq!(user_wc_flags(2), WC_WITH_IMM);
        assert_eq!(user_wc_flags(8), ffi::ibv_wc_flags::IBV_WC_IP_CSUM_OK.0);
        assert_eq!(user_wc_flags(0x70), 0);
    }

    #[test]
    fn ffi_work_completion_layout_matches_verbs_h() {
        // struct ibv_wc is 48 bytes on LP64, and the providers are built against that; the bindings are whatever
        // bindgen made of this machine's headers, so check.
        assert_eq!(std::mem::size_of::<ffi::ibv_wc>(), 48);
        assert_eq!(std::mem::offset_of!(ffi::ibv_wc, byte_len), 20);
        assert_eq!(std::mem::offset_of!(ffi::ibv_wc, qp_num), 28);
        assert_eq!(std::mem::offset_of!(ffi::ibv_wc, wc_flags), 36);
    }
}
