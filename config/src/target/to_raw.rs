//! From [`TargetConfig`] back to the file schema, every value written out: the configuration's `Display` (the
//! inverse of `validate`), and what `nvmf-target --check` prints, the same with inline keys redacted.

use super::*;
use crate::size::format_size;

/// What a key written inline in the file becomes in [`TargetConfig::to_string_redacted`].
pub const REDACTED: &str = "<redacted>";

/// The file schema of `config` with every value written out; keys written inline as [`REDACTED`] when `redact`.
pub(crate) fn to_raw(config: &TargetConfig, redact: bool) -> RawTargetConfig {
    let limits = &config.limits;
    RawTargetConfig {
        target: Some(RawLimits {
            mdts: Some(RawSize::Text(format_size(u64::from(limits.mdts)))),
            max_queue_size: Some(i64::from(limits.max_queue_size)),
            max_io_queues: Some(i64::from(limits.max_io_queues)),
            keep_alive_granularity_ms: Some(i64::from(limits.keep_alive_granularity_ms)),
            keep_alive_max_ms: Some(i64::from(limits.keep_alive_max_ms)),
            keep_alive_min_ms: Some(i64::from(limits.keep_alive_min_ms)),
            connect_timeout_ms: Some(i64::from(limits.connect_timeout_ms)),
            transfer_timeout_ms: Some(i64::from(limits.transfer_timeout_ms)),
            queue_buffer_percent: Some(i64::from(limits.queue_buffer_percent)),
            anonymous_buffer_percent: Some(i64::from(limits.anonymous_buffer_percent)),
            max_connections_per_address: Some(i64::from(limits.max_connections_per_address)),
            address_prefix_v4: Some(i64::from(limits.address_prefix_v4)),
            address_prefix_v6: Some(i64::from(limits.address_prefix_v6)),
            max_controllers_per_host: Some(i64::from(limits.max_controllers_per_host)),
            max_registrants: Some(i64::from(limits.max_registrants)),
            dhchap_dhgroups: Some(limits.dhchap_dhgroups.iter().map(|g| g.name().to_owned()).collect()),
            auth_threads: Some(i64::from(limits.auth_threads)),
            auth_queue_depth: Some(i64::from(limits.auth_queue_depth)),
            tls_threads: Some(i64::from(limits.tls_threads)),
            tls_queue_depth: Some(i64::from(limits.tls_queue_depth)),
            auth_attempts_per_second: Some(i64::from(limits.auth_attempts_per_second)),
            tcp_keepalive_ms: Some(i64::from(limits.tcp_keepalive_ms)),
            tcp_send_backlog: Some(RawSize::Text(format_size(u64::from(limits.tcp_send_backlog)))),
            ceph_mon_timeout_ms: Some(i64::from(limits.ceph_mon_timeout_ms)),
            ceph_osd_timeout_ms: Some(i64::from(limits.ceph_osd_timeout_ms)),
            state_dir: Some(limits.state_dir.to_string_lossy().into_owned()),
        }),
        discovery: Some(RawDiscovery {
            enabled: Some(config.discovery.enabled),
            auth_required: Some(config.discovery.auth_required),
            keep_alive_max_ms: Some(i64::from(config.discovery.keep_alive_max_ms)),
        }),
        reactors: Some(RawReactors {
            threads: i64::try_from(config.reactors.threads).ok(),
            cpus: (!config.reactors.cpus.is_empty())
                .then(|| config.reactors.cpus.iter().filter_map(|&cpu| i64::try_from(cpu).ok()).collect()),
            discard_queue_depth: i64::try_from(config.reactors.discard_queue_depth).ok(),
            poll: Some(config.reactors.poll.name().to_string()),
            poll_window_us: Some(i64::from(config.reactors.poll_window_us)),
            socket_io: Some(config.reactors.socket_io.name().to_string()),
            send_zero_copy_bytes: Some(i64::from(config.reactors.send_zero_copy_bytes)),
            placement: Some(config.reactors.placement.name().to_string()),
        }),
        metrics: config.metrics.listen.map(|listen| RawMetrics { listen: Some(listen.to_string()) }),
        logging: Some(RawLogging { level: Some(config.logging.level.clone()), format: Some(config.logging.format) }),
        listeners: config
            .listeners
            .iter()
            .map(|listener| RawListener {
                transport: Some(listener.transport_type()),
                address: listener.address.ip().to_string(),
                port: Some(i64::from(listener.address.port())),
                max_queue_size: Some(i64::from(listener.max_queue_size)),
                in_capsule_data_size: Some(RawSize::Text(format_size(u64::from(listener.in_capsule_data_size)))),
                max_connections: Some(i64::from(listener.max_connections)),
                ana_state: Some(listener.ana_state.name().to_owned()),
                // Only where set: most listeners have every group in `ana_state`.
                ana_group_states: (!listener.ana_group_states.is_empty()).then(|| {
                    RawGroupStates(
                        listener
                            .ana_group_states
                            .iter()
                            .map(|(group, state)| (group.to_string(), state.name().to_owned()))
                            .collect(),
                    )
                }),
                tls: match listener.transport {
                    ListenerTransport::Tcp(TcpOptions { tls: TlsMode::None, .. }) | ListenerTransport::Rdma(_) => None,
                    ListenerTransport::Tcp(tcp) => Some(tcp.tls.name().to_owned()),
                },
                tcp: match listener.transport {
                    ListenerTransport::Tcp(tcp) => {
                        Some(RawTcp { header_digest: Some(tcp.header_digest), data_digest: Some(tcp.data_digest) })
                    }
                    ListenerTransport::Rdma(_) => None,
                },
                rdma: match listener.transport {
                    ListenerTransport::Rdma(rdma) => {
                        Some(RawRdma { send_with_invalidate: Some(rdma.send_with_invalidate), srq: Some(rdma.srq) })
                    }
                    ListenerTransport::Tcp(_) => None,
                },
            })
            .collect(),
        subsystems: config
            .subsystems
            .iter()
            .map(|subsystem| RawSubsystem {
                nqn: subsystem.nqn.clone(),
                serial: Some(subsystem.serial.clone()),
                model: Some(subsystem.model.clone()),
                allow_any_host: Some(subsystem.allow_any_host),
                hosts: subsystem.hosts.clone(),
                cntlid_min: Some(i64::from(subsystem.cntlid_min)),
                cntlid_max: Some(i64::from(subsystem.cntlid_max)),
                max_namespaces: Some(i64::from(subsystem.max_namespaces)),
                auth_required: Some(subsystem.auth_required),
                host_keys: subsystem.host_keys.iter().map(|h| host_keys_to_raw(h, redact)).collect(),
                namespaces: subsystem.namespaces.iter().map(namespace_to_raw).collect(),
            })
            .collect(),
    }
}

fn namespace_to_raw(namespace: &NamespaceConfig) -> RawNamespace {
    RawNamespace {
        nsid: Some(i64::from(namespace.nsid)),
        block_size: Some(i64::from(namespace.block_size)),
        // Only where it may be true: a memory, null or rbd namespace with `buffered_io = false` would read oddly.
        buffered_io: matches!(namespace.backend, NamespaceBackend::Path(_)).then_some(namespace.buffered_io),
        uuid: Some(namespace.uuid.hyphenated().to_string()),
        nguid: Some(namespace.nguid.to_string()),
        eui64: Some(namespace.eui64.to_string()),
        ana_group: Some(i64::from(namespace.ana_group)),
        ..backend_to_raw(&namespace.backend)
    }
}

/// The backend keys of a namespace (`path`, `memory`, `null`, or `rbd` with `ceph_conf` and `ceph_id` written
/// out); every other key absent.
pub(crate) fn backend_to_raw(backend: &NamespaceBackend) -> RawNamespace {
    match backend {
        NamespaceBackend::Path(path) => {
            RawNamespace { path: Some(path.to_string_lossy().into_owned()), ..RawNamespace::default() }
        }
        NamespaceBackend::Memory { size } => {
            RawNamespace { memory: Some(RawSize::Text(format_size(*size))), ..RawNamespace::default() }
        }
        NamespaceBackend::Null { size } => {
            RawNamespace { null: Some(RawSize::Text(format_size(*size))), ..RawNamespace::default() }
        }
        NamespaceBackend::Rbd(image) => RawNamespace {
            rbd: Some(image.to_string()),
            ceph_conf: Some(image.ceph_conf.to_string_lossy().into_owned()),
            ceph_id: Some(image.ceph_id.clone()),
            ..RawNamespace::default()
        },
    }
}

fn secret_to_raw(secret: &SecretConfig, redact: bool) -> (Option<crate::secret::RawSecret>, Option<String>) {
    match &secret.file {
        Some(path) => (None, Some(path.to_string_lossy().into_owned())),
        None if redact => (Some(crate::secret::RawSecret(REDACTED.to_owned())), None),
        None => (Some(crate::secret::RawSecret(secret.secret.representation().to_string())), None),
    }
}

fn host_keys_to_raw(h: &HostKeysConfig, redact: bool) -> RawHostKeys {
    let (dhchap_key, dhchap_key_file) = h.dhchap_key.as_ref().map(|k| secret_to_raw(k, redact)).unwrap_or_default();
    let (tls_key, tls_key_file) = match &h.tls_key {
        None => (None, None),
        Some(TlsKeyConfig { file: Some(path), .. }) => (None, Some(path.to_string_lossy().into_owned())),
        Some(_) if redact => (Some(crate::secret::RawSecret(REDACTED.to_owned())), None),
        Some(TlsKeyConfig { key, .. }) => (Some(crate::secret::RawSecret(key.interchange().to_string())), None),
    };
    let (dhchap_ctrl_key, dhchap_ctrl_key_file) =
        h.dhchap_ctrl_key.as_ref().map(|k| secret_to_raw(k, redact)).unwrap_or_default();
    RawHostKeys {
        nqn: h.nqn.clone(),
        dhchap_key,
        dhchap_key_file,
        dhchap_ctrl_key,
        dhchap_ctrl_key_file,
        dhchap_hashes: (!h.dhchap_hashes.is_empty())
            .then(|| h.dhchap_hashes.iter().map(|x| x.name().to_owned()).collect()),
        dhchap_dhgroups: (!h.dhchap_dhgroups.is_empty())
            .then(|| h.dhchap_dhgroups.iter().map(|x| x.name().to_owned()).collect()),
        hostid: h.hostid.map(|id| id.hyphenated().to_string()),
        tls_key,
        tls_key_file,
        tls_key_compat: h.tls_key_compat.then_some(true),
    }
}
