//! [`RnicCollector`]: the RDMA NICs' own counters as Prometheus metrics, read from sysfs at scrape time, for
//! both daemons (each names the families with its prefix: [`RnicFamilies`]).
//!
//! Families, each labelled `device`, `port` (and `counter`):
//! - `<prefix>_rnic_counters_total{counter}` — the port's `counters/*` (IB PMA counters, as the kernel reports
//!   them: `port_xmit_data`/`port_rcv_data` count 4-byte words);
//! - `<prefix>_rnic_hw_counters_total{counter}` — the driver's `hw_counters/*` (rxe: `sent_pkts`,
//!   `rcvd_rnr_err`, `retry_exceeded_err`, …; mlx5: `np_cnp_sent`, `out_of_sequence`, …);
//! - `<prefix>_rnic_port_state_id` — the IB port state number (4: ACTIVE);
//! - `<prefix>_rnic_port_active_mtu_bytes` — the RoCE path MTU of an Ethernet port as the kernel derives it
//!   from its netdev's MTU (sysfs has no active MTU; InfiniBand ports have no sample).
//!
//! The counter families are plural (`…_counters_total`): `promtool check metrics` rejects a counter whose name
//! holds `_counter_`. Counter names are exported as the driver spells them, so a new driver's counters need no
//! code. A scrape reads at most [`MAX_FILES`] files (a NIC with hundreds of counters costs a bounded time; mlx5
//! asks its firmware per read); a file that cannot be read is left out, never an error. The families are not
//! exported at all while no device port is found. Runs on the metrics thread only.

use std::fmt;
use std::net::IpAddr;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::rdma_sysfs::{CounterFolder, RdmaSysfs, ReadBudget};

/// Files one scrape reads at most.
pub const MAX_FILES: usize = 2048;

/// GID entries read to find the devices of the listeners' addresses (once, when the collector is built).
const MAX_GID_FILES: usize = 16384;

/// The names of the four families, with the daemon's prefix (`nvmf_target_rnic_counters`, …).
#[derive(Debug, Clone, Copy)]
pub struct RnicFamilies {
    /// Port counters (`counters/*`).
    pub counter: &'static str,
    /// Driver counters (`hw_counters/*`).
    pub hw_counter: &'static str,
    /// Port state number.
    pub port_state: &'static str,
    /// Derived RoCE path MTU.
    pub active_mtu: &'static str,
}

/// Which devices a collector exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Every device present at the scrape.
    All,
    /// These devices.
    Named(Vec<String>),
}

impl Devices {
    /// The devices that serve `addrs`: those whose GID tables carry one of them. A wildcard address, or one no
    /// GID carries (IPoIB and iWARP addresses are not GIDs), means every device.
    pub fn serving(sysfs: &RdmaSysfs, addrs: &[IpAddr]) -> Devices {
        let mut budget = ReadBudget::new(MAX_GID_FILES);
        let mut named = Vec::new();
        for &addr in addrs {
            if addr.is_unspecified() {
                return Devices::All;
            }
            let found = sysfs.devices_with_addr(addr, &mut budget);
            if found.is_empty() {
                return Devices::All;
            }
            named.extend(found);
        }
        named.sort();
        named.dedup();
        Devices::Named(named)
    }
}

/// One port as a scrape read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSample {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u32,
    /// IB port state number.
    pub state: Option<u64>,
    /// Derived RoCE path MTU.
    pub active_mtu: Option<u32>,
    /// `counters/*`.
    pub counters: Vec<(String, u64)>,
    /// `hw_counters/*`.
    pub hw_counters: Vec<(String, u64)>,
}

/// Reads the RNIC counters at each scrape.
#[derive(Debug)]
pub struct RnicCollector {
    sysfs: RdmaSysfs,
    families: RnicFamilies,
    devices: Devices,
    max_files: usize,
}

impl RnicCollector {
    /// A collector of `devices` under `sysfs`.
    pub fn new(sysfs: RdmaSysfs, families: RnicFamilies, devices: Devices) -> Self {
        RnicCollector { sysfs, families, devices, max_files: MAX_FILES }
    }

    /// Read at most `files` files per scrape (tests).
    pub fn with_max_files(mut self, files: usize) -> Self {
        self.max_files = files;
        self
    }

    /// Read every port of the selected devices.
    pub fn sample(&self) -> Vec<PortSample> {
        let mut budget = ReadBudget::new(self.max_files);
        let devices = match &self.devices {
            Devices::All => self.sysfs.devices(),
            Devices::Named(names) => names.clone(),
        };
        let mut out = Vec::new();
        'devices: for device in devices {
            for port in self.sysfs.ports(&device) {
                // State, link layer, netdev, its MTU: four reads.
                if (0..4).any(|_| !budget.take()) {
                    break 'devices;
                }
                let state = self.sysfs.port_state(&device, port).map(|s| s.id);
                let active_mtu = self.sysfs.active_mtu(&device, port);
                let counters = self.sysfs.counters(&device, port, CounterFolder::Port, &mut budget);
                let hw_counters = self.sysfs.counters(&device, port, CounterFolder::Hardware, &mut budget);
                out.push(PortSample { device: device.clone(), port, state, active_mtu, counters, hw_counters });
            }
        }
        if budget.exhausted() {
            tracing::debug!(
                max_files = self.max_files,
                "RNIC counters: file cap reached; the rest of this scrape skipped"
            );
        }
        out
    }
}

impl Collector for RnicCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let ports = self.sample();
        if ports.is_empty() {
            return Ok(());
        }
        type Counters = fn(&PortSample) -> &[(String, u64)];
        let counter_families: [(&str, &str, Counters); 2] = [
            (self.families.counter, "RDMA port counters (sysfs ports/*/counters), as the kernel reports them.", |p| {
                &p.counters
            }),
            (self.families.hw_counter, "RDMA driver counters (sysfs ports/*/hw_counters).", |p| &p.hw_counters),
        ];
        for (name, help, field) in counter_families {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &ports {
                let port = p.port.to_string();
                for (counter, value) in field(p) {
                    let labels = [("device", p.device.as_str()), ("port", &port), ("counter", counter)];
                    m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(value, None)?;
                }
            }
        }
        type Gauge = fn(&PortSample) -> Option<u64>;
        let gauges: [(&str, &str, Gauge); 2] = [
            (self.families.port_state, "RDMA port state number (4: ACTIVE).", |p| p.state),
            (
                self.families.active_mtu,
                "RoCE path MTU of an Ethernet RDMA port, derived from its netdev's MTU as the kernel does.",
                |p| p.active_mtu.map(u64::from),
            ),
        ];
        for (name, help, field) in gauges {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for p in &ports {
                if let Some(v) = field(p) {
                    let port = p.port.to_string();
                    m.encode_family(&[("device", p.device.as_str()), ("port", &port)])?.encode_gauge(&v)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_http::{render, Format};
    use crate::rdma_sysfs::tests::{rxe, tree};
    use prometheus_client::registry::Registry;

    const FAMILIES: RnicFamilies = RnicFamilies {
        counter: "t_rnic_counters",
        hw_counter: "t_rnic_hw_counters",
        port_state: "t_rnic_port_state_id",
        active_mtu: "t_rnic_port_active_mtu_bytes",
    };

    fn scrape(collector: RnicCollector) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector));
        render(&registry, Format::Prometheus).unwrap()
    }

    #[test]
    fn counters_are_labelled_by_device_port_and_name() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        tree(
            dir.path(),
            &[
                ("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n"),
                ("sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n"),
                ("sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "2\n"),
                ("sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence", "17\n"),
            ],
        );
        let text = scrape(RnicCollector::new(RdmaSysfs::new(dir.path()), FAMILIES, Devices::All));
        for line in [
            "# TYPE t_rnic_hw_counters_total counter",
            "t_rnic_hw_counters_total{device=\"rxe0\",port=\"1\",counter=\"rcvd_rnr_err\"} 3",
            "t_rnic_hw_counters_total{device=\"rxe0\",port=\"1\",counter=\"sent_pkts\"} 120",
            "t_rnic_hw_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"out_of_sequence\"} 17",
            "t_rnic_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"link_downed\"} 2",
            "t_rnic_port_state_id{device=\"rxe0\",port=\"1\"} 4",
            "t_rnic_port_state_id{device=\"mlx5_0\",port=\"1\"} 1",
            "t_rnic_port_active_mtu_bytes{device=\"rxe0\",port=\"1\"} 4096",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("lifespan"), "{text}");
        assert!(!text.contains("t_rnic_port_active_mtu_bytes{device=\"mlx5_0\""), "InfiniBand has no RoCE MTU");

        // Only the named device; a missing one is no error.
        let named = Devices::Named(vec!["mlx5_0".into(), "gone0".into()]);
        let text = scrape(RnicCollector::new(RdmaSysfs::new(dir.path()), FAMILIES, named));
        assert!(text.contains("mlx5_0") && !text.contains("rxe0"), "{text}");
    }

    #[test]
    fn no_device_no_family_and_the_file_cap_holds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(scrape(RnicCollector::new(RdmaSysfs::new(dir.path()), FAMILIES, Devices::All)), "");
        rxe(dir.path(), 9000);
        let c = RnicCollector::new(RdmaSysfs::new(dir.path()), FAMILIES, Devices::All).with_max_files(5);
        let ports = c.sample();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].hw_counters.len(), 1, "4 port reads, then one counter file: {ports:?}");
        assert!(c.with_max_files(3).sample().is_empty());
    }

    #[test]
    fn devices_serving_addresses_are_found_by_gid() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        tree(dir.path(), &[("sys/class/infiniband/mlx5_0/ports/1/gids/0", "fe80::1\n")]);
        let s = RdmaSysfs::new(dir.path());
        let addr = |a: &str| a.parse::<IpAddr>().unwrap();
        assert_eq!(Devices::serving(&s, &[addr("10.77.0.1")]), Devices::Named(vec!["rxe0".into()]));
        assert_eq!(Devices::serving(&s, &[addr("10.77.0.1"), addr("0.0.0.0")]), Devices::All);
        assert_eq!(Devices::serving(&s, &[addr("192.168.1.1")]), Devices::All, "an IPoIB address: every device");
    }
}
