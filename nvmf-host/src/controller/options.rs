//! [`ConnectOptions`]: how a [`super::Controller`] connects and recovers (nvme-cli's options), and the
//! [`Transport`] every queue of the association uses.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::fabrics::auth::secret::DhchapSecret;
use nvmf_common::fabrics::tls::{derive_tls_psk, ConfiguredPsk, IdentityVersion, PskDerivation};
use nvmf_common::transport::tls::HandshakePsk;
/// How a multipath export spreads commands over its best paths (the configuration's type: Linux's names).
pub use nvmf_config::host::IoPolicy;
pub use nvmf_config::PollMode;
use nvmf_service::poll::{Poller, DEFAULT_WINDOW};

use crate::error::HostError;
use crate::identity::HostIdentity;

/// The NVMe-oF transport (nvme-cli's `-t/--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Transport {
    /// NVMe/TCP.
    #[default]
    Tcp,
    /// NVMe/RDMA (RDMA CM and verbs; needs the `rdma` feature and an RDMA device).
    Rdma,
}

impl Transport {
    /// The name nvme-cli and the discovery log use (`tcp`, `rdma`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }
}

/// How a queue's thread waits for completions: the `[host]` section's `poll` and `poll_window_us`, perf's `--poll`
/// and `--poll-window-us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollOptions {
    /// Adaptive, sleep or busy.
    pub mode: PollMode,
    /// The longest an adaptive thread keeps polling after work before it sleeps.
    pub window: Duration,
}

impl Default for PollOptions {
    /// Adaptive with the default window: no wake-up per completion under load, no CPU when idle.
    fn default() -> Self {
        PollOptions { mode: PollMode::Adaptive, window: DEFAULT_WINDOW }
    }
}

impl PollOptions {
    /// A fresh [`Poller`] for one thread.
    pub fn poller(self) -> Poller {
        Poller::new(self.mode, self.window)
    }
}

/// How to connect (nvme-cli's option names in the field docs).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Transport (`-t`): every queue of the association uses it.
    pub transport: Transport,
    /// Host NQN (`--hostnqn`).
    pub hostnqn: String,
    /// Host Identifier (`--hostid`).
    pub hostid: [u8; 16],
    /// I/O queues to ask for (`--nr-io-queues`); the controller may grant fewer. 0: admin only.
    pub nr_io_queues: u16,
    /// Entries per I/O queue (`--queue-size`): SQSIZE + 1 in Connect.
    pub queue_size: u16,
    /// Keep Alive Timeout (`--keep-alive-tmo`); zero disables keep-alive.
    pub keep_alive_tmo: Duration,
    /// Header digests (`--hdr-digest`; NVMe/TCP only).
    pub hdr_digest: bool,
    /// Data digests (`--data-digest`; NVMe/TCP only).
    pub data_digest: bool,
    /// Ask the controller to disable SQ flow control (`--disable-sqflow`; Connect CATTR bit 2, on every queue): it
    /// then reports no SQ head, and over NVMe/TCP may end a successful read with its last C2HData PDU instead of
    /// a response capsule. The host never relies on SQ head reports (it keeps no more commands outstanding than
    /// the queue has entries), so this only saves PDUs. nvme-cli's `connect-all` sets it for a discovery log entry
    /// that allows it (TREQ bit 2), as `nvmf-host connect-all` does.
    pub disable_sqflow: bool,
    /// Bound on connecting each queue (TCP and ICReq/ICResp; RDMA address and route resolution and the CM
    /// connect).
    pub connect_timeout: Duration,
    /// A command outstanding longer than this fails its queue.
    pub io_timeout: Duration,
    /// Wait between reconnect attempts after the association is lost (`--reconnect-delay`, default 10 s).
    pub reconnect_delay: Duration,
    /// Give up reconnecting this long after the association was lost (`--ctrl-loss-tmo`, default 600 s):
    /// held and new I/O then fail and the controller stays [`super::ControllerState::Failed`]. `None` (nvme-cli's
    /// -1) retries forever.
    pub ctrl_loss_tmo: Option<Duration>,
    /// Fail held and new I/O this long after the association was lost while reconnect attempts go on
    /// (`--fast-io-fail-tmo`); `None` (the default, nvme-cli's -1) holds I/O until reconnected or
    /// `ctrl_loss_tmo`.
    pub fast_io_fail_tmo: Option<Duration>,
    /// The network interface every queue's connection leaves through (`--host-iface`; NVMe/TCP only, as in the
    /// kernel).
    pub host_iface: Option<String>,
    /// The host's DH-HMAC-CHAP secret (`--dhchap-secret`): what the host answers a controller's challenge with, on
    /// every queue, when the controller asks for authentication.
    pub dhchap_secret: Option<DhchapSecret>,
    /// The controller's DH-HMAC-CHAP secret (`--dhchap-ctrl-secret`): given, the host also authenticates the
    /// controller (bidirectional), whether or not it asked; needs `dhchap_secret`.
    pub dhchap_ctrl_secret: Option<DhchapSecret>,
    /// NVMe/TCP over TLS 1.3 with this pre-shared key (`--tls --tls-key`): every queue's connection is secured
    /// before its ICReq.
    pub tls: Option<TlsKeyOptions>,
    /// Secure channel concatenation (`--concat`, NVMe/TCP): each association authenticates its admin queue on a
    /// plaintext connection asking for a generated PSK (SC_C 02h), closes it, and connects every queue again over
    /// TLS with the generated PSK's identity (`NVMe1G..`), as the Linux host does; needs `dhchap_secret`, and no
    /// `tls` (the key is generated). A reconnect authenticates again and so generates a new key.
    pub concat: bool,
    /// How a multipath namespace this controller is the first path of spreads commands over its paths.
    pub iopolicy: IoPolicy,
    /// How many times a multipath namespace this controller is the first path of sends a command again after it
    /// failed on a path ([`NamespaceHead`](crate::multipath::NamespaceHead)), at most 15.
    pub path_retries: u8,
    /// How every queue's I/O thread waits for completions (the daemon's `[host]` `poll` and `poll_window_us`).
    pub poll: PollOptions,
    /// CPUs the I/O queues' threads are pinned to, I/O queue `q` (and its export's queue thread) on
    /// `cpus[(q - 1) % len]`, as the kernel's host keeps a queue's work on its `io_cpu` and perf pins its workers
    /// (the `[host]` `cpus`, `--cpus`). `None`: not pinned. The admin queue is never pinned.
    pub queue_cpus: Option<Vec<usize>>,
}

impl ConnectOptions {
    /// The CPU I/O queue `qid`'s threads are pinned to (see [`ConnectOptions::queue_cpus`]); `None` for the admin
    /// queue or when not pinned.
    pub fn queue_cpu(&self, qid: u16) -> Option<usize> {
        let cpus = self.queue_cpus.as_deref().filter(|c| !c.is_empty())?;
        let index = usize::from(qid.checked_sub(1)?);
        Some(cpus[index % cpus.len()])
    }

    /// `host_iface` binds NVMe/TCP connections only; over RDMA it is an error, as the kernel makes it.
    pub fn check_host_iface(&self) -> Result<(), HostError> {
        match (&self.host_iface, self.transport) {
            (Some(iface), Transport::Rdma) => Err(HostError::HostInterface {
                iface: iface.clone(),
                message: "applies to NVMe/TCP only (for RDMA the address's route picks the device)".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl ConnectOptions {
    /// A controller secret authenticates the controller in a transaction the host secret opens: alone it is an
    /// error, as the kernel makes it.
    pub fn check_dhchap(&self) -> Result<(), HostError> {
        if self.dhchap_ctrl_secret.is_some() && self.dhchap_secret.is_none() {
            return Err(HostError::InvalidRequest(
                "a DH-HMAC-CHAP controller secret (--dhchap-ctrl-secret) needs the host secret too (--dhchap-secret)"
                    .into(),
            ));
        }
        if self.concat {
            // As the kernel refuses them (nvmf_parse_options).
            let refusal = if self.dhchap_secret.is_none() {
                Some("secure channel concatenation (--concat) needs DH-HMAC-CHAP (--dhchap-secret)")
            } else if self.tls.is_some() {
                Some("--concat generates its TLS key: no --tls or --tls-key with it")
            } else if self.transport != Transport::Tcp {
                Some("--concat is NVMe/TCP's")
            } else {
                None
            };
            if let Some(refusal) = refusal {
                return Err(HostError::InvalidRequest(refusal.into()));
            }
        }
        Ok(())
    }
}

/// The host's TLS pre-shared key and how the TLS PSK is derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsKeyOptions {
    /// The configured PSK (`--tls-key`, interchange format).
    pub key: ConfiguredPsk,
    /// The PSK identity's version: 0 (`NVMe0R0x`) or 1 (`NVMe1R0x`, with the PSK digest).
    pub identity_version: IdentityVersion,
    /// libnvme's derivation, or its older one (`--compat`).
    pub derivation: PskDerivation,
}

impl TlsKeyOptions {
    /// The identity and TLS PSK of this key between `hostnqn` and `subnqn`.
    pub fn handshake_psk(&self, hostnqn: &str, subnqn: &str) -> Result<Arc<HandshakePsk>, HostError> {
        let derived = derive_tls_psk(&self.key, hostnqn, subnqn, self.identity_version, self.derivation)
            .map_err(|e| HostError::InvalidRequest(format!("--tls-key: {e}")))?;
        Ok(Arc::new(HandshakePsk::from(derived)))
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let id = HostIdentity::from_system();
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        ConnectOptions {
            transport: Transport::Tcp,
            hostnqn: id.hostnqn,
            hostid: id.hostid,
            nr_io_queues: u16::try_from(cores).unwrap_or(u16::MAX),
            queue_size: 128,
            keep_alive_tmo: Duration::from_secs(5),
            hdr_digest: false,
            data_digest: false,
            disable_sqflow: false,
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            reconnect_delay: Duration::from_secs(10),
            ctrl_loss_tmo: Some(Duration::from_secs(600)),
            fast_io_fail_tmo: None,
            host_iface: None,
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            tls: None,
            concat: false,
            iopolicy: IoPolicy::default(),
            path_retries: nvmf_config::host::DEFAULT_PATH_RETRIES,
            poll: PollOptions::default(),
            queue_cpus: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_polls_as_the_configuration_defaults() {
        let window_us = u128::from(nvmf_config::host::DEFAULT_POLL_WINDOW_US);
        assert_eq!(PollOptions::default(), PollOptions { mode: PollMode::default(), window: DEFAULT_WINDOW });
        assert_eq!(DEFAULT_WINDOW.as_micros(), window_us, "one default window, whoever fills it in");
    }

    #[test]
    fn io_queues_take_the_listed_cpus_in_turn_and_the_admin_queue_none() {
        let mut o = ConnectOptions { queue_cpus: Some(vec![3, 5]), ..ConnectOptions::default() };
        let placed: Vec<_> = (0..=4).map(|q| o.queue_cpu(q)).collect();
        assert_eq!(placed, [None, Some(3), Some(5), Some(3), Some(5)]);
        o.queue_cpus = Some(vec![]);
        assert_eq!(o.queue_cpu(1), None);
        o.queue_cpus = None;
        assert_eq!(o.queue_cpu(1), None);
    }
}
