//! The RDMA NICs' own counters in the target's `/metrics` (`nvmf_target_rnic_*`, read from sysfs at scrape time by
//! `nvmf_service::rnic_metrics`): for the devices behind the RDMA listeners, found once at start by the listener
//! addresses in their GID tables (a wildcard listener, or an address no GID carries, exports every device).

use std::net::IpAddr;

use nvmf_config::target::ListenerTransport;
use nvmf_config::TargetConfig;
use nvmf_service::rdma_sysfs::RdmaSysfs;
use nvmf_service::rnic_metrics::{Devices, RnicCollector, RnicFamilies};

/// The target's names of the RNIC families.
pub const RNIC_FAMILIES: RnicFamilies = RnicFamilies {
    counter: "nvmf_target_rnic_counters",
    hw_counter: "nvmf_target_rnic_hw_counters",
    port_state: "nvmf_target_rnic_port_state_id",
    active_mtu: "nvmf_target_rnic_port_active_mtu_bytes",
};

/// The addresses of `config`'s RDMA listeners.
pub fn rdma_listener_addrs(config: &TargetConfig) -> Vec<IpAddr> {
    config
        .listeners
        .iter()
        .filter(|l| matches!(l.transport, ListenerTransport::Rdma(_)))
        .map(|l| l.address.ip())
        .collect()
}

/// The RNIC collector of `config`'s RDMA listeners under `sysfs`; `None` without RDMA listeners.
pub fn rnic_collector_in(sysfs: RdmaSysfs, config: &TargetConfig) -> Option<RnicCollector> {
    let addrs = rdma_listener_addrs(config);
    if addrs.is_empty() {
        return None;
    }
    let devices = Devices::serving(&sysfs, &addrs);
    tracing::debug!(?devices, "RNIC counters exported");
    Some(RnicCollector::new(sysfs, RNIC_FAMILIES, devices))
}

/// [`rnic_collector_in`] on this machine's sysfs.
pub fn rnic_collector(config: &TargetConfig) -> Option<RnicCollector> {
    rnic_collector_in(RdmaSysfs::system(), config)
}
