//! What an NVMe/TCP port offers its hosts: digests, data limits, PDU sizes and send backlog.
//!
//! Plain data, copied into each [`super::TcpConnection`] when it is created; the reactor thread reads it,
//! nothing mutates it afterwards.

use nvmf_common::nvme::sqe::SQE_SIZE;
use nvmf_common::transport::tcp::pdu::MIN_MAXH2CDATA;

/// Settings of the NVMe/TCP transport, shared by every connection of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpTransportConfig {
    /// Largest in-capsule data a CapsuleCmd may carry, in bytes (IOCCSZ is this plus the 64-byte SQE, in
    /// 16-byte units; see [`TcpTransportConfig::ioccsz`]). More is a fatal Data Transfer Limit Exceeded.
    /// Linux nvmet uses 4 pages (16 KiB); the Linux host sends up to 8 KiB on the admin queue.
    pub in_capsule_data_size: u32,
    /// MAXH2CDATA advertised in ICResp: the most data one H2CData PDU may carry (at least 4096, a multiple
    /// of 4).
    pub maxh2cdata: u32,
    /// Largest R2TL of one R2T. A command's host data is solicited in R2Ts of at most this length, as many
    /// outstanding at once as the host's MAXR2T (and [`TcpTransportConfig::max_r2t_per_command`]) allow.
    /// `u32::MAX` solicits the whole transfer with one R2T, as Linux nvmet does (the host then splits it
    /// into H2CData PDUs of at most MAXH2CDATA).
    pub max_r2t_len: u32,
    /// Upper bound on outstanding R2Ts per command whatever the host's MAXR2T says (at least 1).
    pub max_r2t_per_command: u32,
    /// Largest data of one C2HData PDU: a read's data is split into PDUs of this size.
    pub max_c2h_data: u32,
    /// Grant header digests when a host asks for them.
    pub header_digest: bool,
    /// Grant data digests when a host asks for them.
    pub data_digest: bool,
    /// Use the C2HData SUCCESS flag (and omit the CapsuleResp) for successful reads on queues whose host
    /// disabled SQ flow control at Connect (the only case the spec allows it: without SQHD in a CQE the
    /// host could not track the SQ head).
    pub c2h_success: bool,
    /// Size of the per-connection receive buffer (one `read` fills at most this much).
    pub receive_buffer_size: usize,
    /// Stop reading new PDUs while this many bytes wait in the send queue (`[target] tcp_send_backlog`:
    /// backpressure against a host that sends commands faster than it reads responses).
    pub max_send_backlog: usize,
    /// TCP keepalive: probe a peer silent this long (ms), close after three unanswered probes a tenth of it
    /// apart; 0: no probes.
    pub keepalive_ms: u32,
    /// TLS 1.3 on the listener's connections: none, allowed or required.
    pub tls: nvmf_config::target::TlsMode,
}

impl Default for TcpTransportConfig {
    fn default() -> Self {
        TcpTransportConfig {
            in_capsule_data_size: 16 * 1024,
            maxh2cdata: 128 * 1024,
            max_r2t_len: u32::MAX,
            max_r2t_per_command: 4,
            max_c2h_data: 128 * 1024,
            header_digest: true,
            data_digest: true,
            c2h_success: true,
            receive_buffer_size: 256 * 1024,
            max_send_backlog: 8 * 1024 * 1024,
            keepalive_ms: 60_000,
            tls: nvmf_config::target::TlsMode::None,
        }
    }
}

impl TcpTransportConfig {
    /// IOCCSZ for Identify Controller: SQE plus in-capsule data, in 16-byte units.
    pub fn ioccsz(&self) -> u32 {
        let sqe = u32::try_from(SQE_SIZE).unwrap_or(u32::MAX);
        self.in_capsule_data_size.saturating_add(sqe).div_ceil(16)
    }

    /// The configuration with every value forced into the range the protocol allows: MAXH2CDATA at least
    /// 4096 and a multiple of 4, PDU sizes and the R2T count at least 1.
    pub fn normalized(&self) -> Self {
        let mut c = self.clone();
        c.maxh2cdata = c.maxh2cdata.max(MIN_MAXH2CDATA) & !3;
        c.max_r2t_len = c.max_r2t_len.max(1);
        c.max_r2t_per_command = c.max_r2t_per_command.max(1);
        c.max_c2h_data = c.max_c2h_data.max(1);
        c.receive_buffer_size = c.receive_buffer_size.max(4096);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioccsz_counts_sqe_in_16_byte_units() {
        let c = TcpTransportConfig { in_capsule_data_size: 8192, ..Default::default() };
        assert_eq!(c.ioccsz(), (8192 + 64) / 16);
        let c = TcpTransportConfig { in_capsule_data_size: 0, ..Default::default() };
        assert_eq!(c.ioccsz(), 4);
    }

    #[test]
    fn normalized_respects_protocol_minimums() {
        let c = TcpTransportConfig { maxh2cdata: 1000, max_r2t_per_command: 0, max_c2h_data: 0, ..Default::default() }
            .normalized();
        assert_eq!((c.maxh2cdata, c.max_r2t_per_command, c.max_c2h_data), (4096, 1, 1));
        let c = TcpTransportConfig { maxh2cdata: 8191, ..Default::default() }.normalized();
        assert_eq!(c.maxh2cdata, 8188);
    }
}
