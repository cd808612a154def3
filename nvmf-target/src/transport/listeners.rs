//! Every transport's listeners, as the daemon starts and stops them: bound first ([`BoundTransportListeners`], so
//! the discovery log reports the ports the sockets really got), then served by each transport's listener thread
//! ([`TransportListeners`]: the NVMe/TCP acceptor, the NVMe/RDMA CM thread), which hand new queue pairs to the
//! reactors round robin. Runs on the control thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvmf_config::TargetConfig;

use super::admission::Admission;
use super::set::{round_robin, NewQueuePair};
use crate::controller::{GeneratedPsks, ListenerParams};
#[cfg(feature = "rdma")]
use crate::rdma::{BoundRdmaListeners, RdmaCmThread, RdmaListenerError, RdmaListenerSpec};
use crate::reactor::ReactorHandle;
use crate::tcp::{Acceptor, BoundListeners, ListenerError, TcpListenerSpec, TlsCounters, TlsGateParams, TlsKeyring};

/// Why listeners could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// A TCP listener could not be opened.
    #[error(transparent)]
    Tcp(#[from] ListenerError),
    /// An RDMA listener could not be opened (no rdma_cm, no RDMA device on the address…).
    #[cfg(feature = "rdma")]
    #[error(transparent)]
    Rdma(#[from] RdmaListenerError),
    /// A transport this build does not serve.
    #[error("listener {0}: this build has no RDMA transport (cargo feature `rdma`); use tcp://")]
    UnsupportedTransport(String),
}

/// Every configured listener, bound and listening, not yet served.
#[derive(Debug)]
pub struct BoundTransportListeners {
    tcp_specs: Vec<TcpListenerSpec>,
    tcp: BoundListeners,
    #[cfg(feature = "rdma")]
    rdma: Option<(Vec<RdmaListenerSpec>, BoundRdmaListeners)>,
    admission: Arc<Admission>,
    tls: TlsGateParams,
}

impl BoundTransportListeners {
    /// Bind every listener of `config` (discovery port IDs in configuration order, from 1).
    pub fn bind(config: &TargetConfig) -> Result<Self, ListenError> {
        let mut tcp_specs = Vec::with_capacity(config.listeners.len());
        #[cfg(feature = "rdma")]
        let mut rdma_specs = Vec::new();
        for (i, l) in config.listeners.iter().enumerate() {
            let port_id = u16::try_from(i + 1).unwrap_or(u16::MAX);
            #[cfg(feature = "rdma")]
            if let Some(spec) = RdmaListenerSpec::from_config(l, port_id, config.limits.max_io_queues) {
                rdma_specs.push(spec);
                continue;
            }
            let spec = TcpListenerSpec::from_config(l, port_id, &config.limits)
                .ok_or_else(|| ListenError::UnsupportedTransport(l.to_string()))?;
            tcp_specs.push(spec);
        }
        let tcp = BoundListeners::bind(&tcp_specs)?;
        #[cfg(feature = "rdma")]
        let rdma = match rdma_specs.is_empty() {
            true => None,
            false => {
                let bound = BoundRdmaListeners::bind(&rdma_specs)?;
                Some((rdma_specs, bound))
            }
        };
        Ok(BoundTransportListeners {
            tcp_specs,
            tcp,
            #[cfg(feature = "rdma")]
            rdma,
            admission: Admission::new(
                config.limits.max_connections_per_address,
                config.limits.address_prefix_v4,
                config.limits.address_prefix_v6,
            ),
            tls: TlsGateParams {
                keyring: TlsKeyring::from_config(&config.subsystems),
                timeout: Duration::from_millis(u64::from(config.limits.connect_timeout_ms.max(1))),
                threads: usize::from(config.limits.tls_threads.max(1)),
                queue_depth: usize::try_from(config.limits.tls_queue_depth.max(1)).unwrap_or(usize::MAX),
                counters: Arc::new(TlsCounters::default()),
                generated: Arc::default(),
            },
        })
    }

    /// The TLS gate looks generated PSK identities up in `store` (the target's: [`Target::generated_psks`]).
    ///
    /// [`Target::generated_psks`]: crate::controller::Target::generated_psks
    pub fn share_generated_psks(&mut self, store: Arc<GeneratedPsks>) {
        self.tls.generated = store;
    }

    /// The discovery log's entries for these listeners, by port ID.
    pub fn discovery_entries(&self) -> Vec<ListenerParams> {
        let tcp = self.tcp_specs.iter().zip(self.tcp.local_addrs());
        #[cfg_attr(not(feature = "rdma"), expect(unused_mut, reason = "only RDMA entries are added to TCP's"))]
        let mut entries: Vec<ListenerParams> = tcp.map(|(spec, local)| spec.discovery_entry(*local)).collect();
        #[cfg(feature = "rdma")]
        if let Some((specs, bound)) = &self.rdma {
            entries.extend(specs.iter().zip(bound.local_addrs()).map(|(spec, local)| spec.discovery_entry(*local)));
            entries.sort_by_key(|p| p.port_id);
        }
        entries
    }

    /// Serve the listeners: every new queue pair the caps admit goes to the next of `reactors`.
    pub fn start(self, reactors: &Arc<Vec<ReactorHandle<NewQueuePair>>>) -> Result<TransportListeners, ListenError> {
        let admission = self.admission;
        let tls_counters = Arc::clone(&self.tls.counters);
        let tcp = Acceptor::start(self.tcp, Arc::clone(&admission), self.tls, round_robin(reactors))?;
        #[cfg(feature = "rdma")]
        let rdma =
            self.rdma.map(|(_, bound)| RdmaCmThread::start(bound, Arc::clone(&admission), round_robin(reactors)));
        #[cfg(feature = "rdma")]
        let rdma = match rdma.transpose() {
            Ok(cm) => cm,
            Err(e) => {
                tcp.stop();
                return Err(e.into());
            }
        };
        Ok(TransportListeners {
            tcp,
            #[cfg(feature = "rdma")]
            rdma,
            admission,
            tls_counters,
        })
    }
}

/// Every transport's listener thread, running.
#[derive(Debug)]
pub struct TransportListeners {
    tcp: Acceptor,
    #[cfg(feature = "rdma")]
    rdma: Option<RdmaCmThread>,
    admission: Arc<Admission>,
    tls_counters: Arc<TlsCounters>,
}

impl TransportListeners {
    /// The NVMe/TCP acceptor: the TCP listeners it serves.
    pub fn tcp(&self) -> &Acceptor {
        &self.tcp
    }

    /// The connection caps every listener thread applies.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// What the TLS gate did to the connections of `tls` listeners.
    pub fn tls_counters(&self) -> &Arc<TlsCounters> {
        &self.tls_counters
    }

    /// The NVMe/TCP acceptor, to change its listeners (reload).
    pub fn tcp_mut(&mut self) -> &mut Acceptor {
        &mut self.tcp
    }

    /// The addresses the RDMA listeners are bound to, in configuration order.
    pub fn rdma_local_addrs(&self) -> &[SocketAddr] {
        #[cfg(feature = "rdma")]
        if let Some(cm) = &self.rdma {
            return cm.local_addrs();
        }
        &[]
    }

    /// Whether NVMe/RDMA is served (RDMA listeners are configured).
    #[cfg(feature = "rdma")]
    pub fn serves_rdma(&self) -> bool {
        self.rdma.is_some()
    }

    /// Stop accepting: close every listener (queue pairs already handed over live on in their reactors).
    pub fn stop(self) {
        #[cfg(feature = "rdma")]
        if let Some(cm) = self.rdma {
            cm.stop();
        }
        self.tcp.stop();
    }
}
