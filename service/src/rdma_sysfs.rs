//! [`RdmaSysfs`]: what the kernel says about RDMA devices in sysfs (`/sys/class/infiniband`), read as plain files
//! under a root folder so that tests give it a fake tree in a temporary folder. The RNIC metrics
//! ([`crate::rnic_metrics`]) and `doctor` ([`crate::doctor`]) both read through it.
//!
//! Layout read (relative to the root):
//! - `sys/class/infiniband/<dev>/ports/<port>/{state,phys_state,link_layer}`;
//! - `…/ports/<port>/counters/*` (the port's PMA counters) and `…/ports/<port>/hw_counters/*` (the driver's);
//! - `…/ports/<port>/gids/<i>` and `…/gid_attrs/{types,ndevs}/<i>` (an empty GID entry reads as zeros; its
//!   attributes fail with EINVAL);
//! - `…/<dev>/parent` (Soft-RoCE's netdev) and `…/<dev>/device/numa_node`;
//! - `sys/class/net/<netdev>/mtu`.
//!
//! Every read is bounded (a sysfs attribute is one page at most) and a file that cannot be read is `None`, never
//! an error: a device can vanish between listing and reading, and some attributes fail by design.

use std::fs::File;
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// The sysfs folder of RDMA devices, relative to the root.
pub const CLASS_DIR: &str = "sys/class/infiniband";

/// The largest attribute read (sysfs attributes are at most one page).
const MAX_ATTRIBUTE: u64 = 4096;

/// The IB MTUs a port can run, smallest first.
const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// RoCEv2 headers inside the netdev's MTU: GRH 40 + UDP 8 + BTH 12 + extended headers 32 + ICRC 4 (ib_core's
/// `iboe_get_mtu`).
const ROCE_HEADERS: u32 = 96;

/// A sysfs tree rooted at `root` (`/` on a live system).
#[derive(Debug, Clone)]
pub struct RdmaSysfs {
    root: PathBuf,
}

/// A port's state as `ports/<p>/state` reads: `4: ACTIVE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// The IB port state number (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).
    pub id: u64,
    /// Its name.
    pub name: String,
}

impl PortState {
    /// The state of a port that carries traffic.
    pub const ACTIVE: u64 = 4;

    fn parse(text: &str) -> Option<PortState> {
        let (id, name) = text.split_once(':')?;
        Some(PortState { id: id.trim().parse().ok()?, name: name.trim().to_owned() })
    }
}

/// One non-empty GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    /// Its index in the port's table.
    pub index: u32,
    /// The GID as an IPv6 address (an IPv4 address is IPv4-mapped).
    pub gid: Ipv6Addr,
    /// `RoCE v2`, `IB/RoCE v1`, or `None` when the driver has no GID types (InfiniBand, iWARP).
    pub kind: Option<String>,
}

impl Gid {
    /// Whether the entry is a RoCEv2 GID.
    pub fn is_roce_v2(&self) -> bool {
        self.kind.as_deref().is_some_and(|k| k.eq_ignore_ascii_case("RoCE v2"))
    }

    /// Whether the GID carries `addr` (IPv4 as IPv4-mapped).
    pub fn carries(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(v4) => self.gid.to_ipv4_mapped() == Some(v4),
            IpAddr::V6(v6) => self.gid == v6,
        }
    }
}

/// Files a scrape or a check may still read; reads past it are skipped.
#[derive(Debug)]
pub struct ReadBudget {
    left: usize,
    exhausted: bool,
}

impl ReadBudget {
    /// At most `files` reads.
    pub fn new(files: usize) -> Self {
        ReadBudget { left: files, exhausted: false }
    }

    /// Take one read; false (and remembered) when none is left.
    pub fn take(&mut self) -> bool {
        if self.left == 0 {
            self.exhausted = true;
            return false;
        }
        self.left -= 1;
        true
    }

    /// Whether a read was refused.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }
}

/// The RoCE path MTU the kernel derives from a netdev MTU: the largest IB MTU that fits with the RoCEv2 headers
/// (`None`: not even 256 bytes fit).
pub fn roce_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(ROCE_HEADERS)?;
    IB_MTUS.into_iter().rev().find(|&m| m <= room)
}

/// The netdev MTU that gives a RoCE path MTU of 4096.
pub const NETDEV_MTU_FOR_4096: u32 = 4096 + ROCE_HEADERS;

impl RdmaSysfs {
    /// The tree under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RdmaSysfs { root: root.into() }
    }

    /// The live system's tree.
    pub fn system() -> Self {
        RdmaSysfs::new("/")
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn class(&self) -> PathBuf {
        self.root.join(CLASS_DIR)
    }

    fn port_dir(&self, device: &str, port: u32) -> PathBuf {
        self.class().join(device).join("ports").join(port.to_string())
    }

    /// Whether the RDMA device class exists (an RDMA-capable kernel with `ib_core` loaded).
    pub fn has_class(&self) -> bool {
        self.class().is_dir()
    }

    /// The RDMA devices, by name.
    pub fn devices(&self) -> Vec<String> {
        let mut names = entries(&self.class());
        names.sort();
        names
    }

    /// A device's ports, in order.
    pub fn ports(&self, device: &str) -> Vec<u32> {
        let mut ports: Vec<u32> =
            entries(&self.class().join(device).join("ports")).iter().filter_map(|p| p.parse().ok()).collect();
        ports.sort_unstable();
        ports
    }

    /// A port's state.
    pub fn port_state(&self, device: &str, port: u32) -> Option<PortState> {
        read_attribute(&self.port_dir(device, port).join("state")).as_deref().and_then(PortState::parse)
    }

    /// A port's physical state (`5: LinkUp`), as the kernel words it.
    pub fn phys_state(&self, device: &str, port: u32) -> Option<String> {
        read_attribute(&self.port_dir(device, port).join("phys_state"))
    }

    /// A port's link layer: `Ethernet` (RoCE, iWARP) or `InfiniBand`.
    pub fn link_layer(&self, device: &str, port: u32) -> Option<String> {
        read_attribute(&self.port_dir(device, port).join("link_layer"))
    }

    /// The netdev under a port: the one its first GID entry names, else the device's `parent` (Soft-RoCE).
    pub fn netdev(&self, device: &str, port: u32) -> Option<String> {
        read_attribute(&self.port_dir(device, port).join("gid_attrs/ndevs/0"))
            .or_else(|| read_attribute(&self.class().join(device).join("parent")))
            .filter(|n| !n.is_empty())
    }

    /// A netdev's MTU.
    pub fn netdev_mtu(&self, netdev: &str) -> Option<u32> {
        read_attribute(&self.root.join("sys/class/net").join(netdev).join("mtu"))?.parse().ok()
    }

    /// The RoCE path MTU of an Ethernet port, derived from its netdev's MTU (sysfs has no active MTU; this is
    /// the kernel's rule, and a NIC may cap it lower). `None` for InfiniBand ports or an unknown netdev.
    pub fn active_mtu(&self, device: &str, port: u32) -> Option<u32> {
        if self.link_layer(device, port).as_deref() != Some("Ethernet") {
            return None;
        }
        roce_mtu(self.netdev_mtu(&self.netdev(device, port)?)?)
    }

    /// The device's NUMA node (`None`: unknown or -1, no NUMA affinity).
    pub fn numa_node(&self, device: &str) -> Option<u32> {
        read_attribute(&self.class().join(device).join("device/numa_node"))?.parse().ok()
    }

    /// A port's non-empty GID entries, at most `budget` files read.
    pub fn gids(&self, device: &str, port: u32, budget: &mut ReadBudget) -> Vec<Gid> {
        let dir = self.port_dir(device, port);
        let mut indices: Vec<u32> = entries(&dir.join("gids")).iter().filter_map(|i| i.parse().ok()).collect();
        indices.sort_unstable();
        let mut gids = Vec::new();
        for index in indices {
            if !budget.take() {
                break;
            }
            let Some(gid) = read_attribute(&dir.join("gids").join(index.to_string())) else { continue };
            let Ok(gid) = gid.parse::<Ipv6Addr>() else { continue };
            if gid.is_unspecified() {
                continue;
            }
            let kind = read_attribute(&dir.join("gid_attrs/types").join(index.to_string()));
            gids.push(Gid { index, gid, kind });
        }
        gids
    }

    /// The numeric files of a port's counter folder (`counters` or `hw_counters`), by name, at most `budget` read.
    /// `lifespan` (a setting of the hw_counters cache, not a count) is left out.
    pub fn counters(
        &self,
        device: &str,
        port: u32,
        folder: CounterFolder,
        budget: &mut ReadBudget,
    ) -> Vec<(String, u64)> {
        let dir = self.port_dir(device, port).join(folder.name());
        let mut names = entries(&dir);
        names.retain(|n| n != "lifespan");
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if !budget.take() {
                break;
            }
            if let Some(v) = read_attribute(&dir.join(&name)).and_then(|v| v.parse::<u64>().ok()) {
                out.push((name, v));
            }
        }
        out
    }

    /// The devices whose ports carry `addr` in their GID table (a wildcard address: every device).
    pub fn devices_with_addr(&self, addr: IpAddr, budget: &mut ReadBudget) -> Vec<String> {
        let devices = self.devices();
        if addr.is_unspecified() {
            return devices;
        }
        devices
            .into_iter()
            .filter(|d| self.ports(d).into_iter().any(|p| self.gids(d, p, budget).iter().any(|g| g.carries(addr))))
            .collect()
    }
}

/// A port's counter folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterFolder {
    /// `counters/`: the IB port counters (PMA), where the driver has them.
    Port,
    /// `hw_counters/`: the driver's own counters (rxe, mlx5, …).
    Hardware,
}

impl CounterFolder {
    fn name(self) -> &'static str {
        match self {
            CounterFolder::Port => "counters",
            CounterFolder::Hardware => "hw_counters",
        }
    }
}

/// The names in a folder (empty when it cannot be read).
fn entries(dir: &Path) -> Vec<String> {
    let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
    read.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
}

/// A sysfs attribute, trimmed; `None` when it cannot be read or is not text.
pub fn read_attribute(path: &Path) -> Option<String> {
    let mut text = String::new();
    File::open(path).ok()?.take(MAX_ATTRIBUTE).read_to_string(&mut text).ok()?;
    Some(text.trim().to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Write `files` (path relative to `root`, contents) into a fake tree.
    pub(crate) fn tree(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// A Soft-RoCE device `rxe0` on `dummy0` (MTU `mtu`) with 10.77.0.1 as RoCEv2 GID 1.
    pub(crate) fn rxe(root: &Path, mtu: u32) {
        let p = "sys/class/infiniband/rxe0/ports/1";
        tree(
            root,
            &[
                (&format!("{p}/state"), "4: ACTIVE\n"),
                (&format!("{p}/phys_state"), "5: LinkUp\n"),
                (&format!("{p}/link_layer"), "Ethernet\n"),
                (&format!("{p}/gids/0"), "fe80:0000:0000:0000:0000:00ff:fe00:0001\n"),
                (&format!("{p}/gids/1"), "0000:0000:0000:0000:0000:ffff:0a4d:0001\n"),
                (&format!("{p}/gids/2"), "0000:0000:0000:0000:0000:0000:0000:0000\n"),
                (&format!("{p}/gid_attrs/types/0"), "RoCE v2\n"),
                (&format!("{p}/gid_attrs/types/1"), "RoCE v2\n"),
                (&format!("{p}/gid_attrs/ndevs/0"), "dummy0\n"),
                (&format!("{p}/hw_counters/sent_pkts"), "120\n"),
                (&format!("{p}/hw_counters/rcvd_pkts"), "98\n"),
                (&format!("{p}/hw_counters/rcvd_rnr_err"), "3\n"),
                (&format!("{p}/hw_counters/lifespan"), "10\n"),
                ("sys/class/infiniband/rxe0/parent", "dummy0\n"),
                ("sys/class/net/dummy0/mtu", &format!("{mtu}\n")),
            ],
        );
    }

    #[test]
    fn ports_gids_and_mtu_read_from_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 1500);
        let s = RdmaSysfs::new(dir.path());
        assert!(s.has_class());
        assert_eq!(s.devices(), ["rxe0"]);
        assert_eq!(s.ports("rxe0"), [1]);
        assert_eq!(s.port_state("rxe0", 1), Some(PortState { id: 4, name: "ACTIVE".into() }));
        assert_eq!(s.netdev("rxe0", 1).as_deref(), Some("dummy0"));
        assert_eq!(s.active_mtu("rxe0", 1), Some(1024), "1500 - 96 fits 1024");
        let gids = s.gids("rxe0", 1, &mut ReadBudget::new(100));
        assert_eq!(gids.len(), 2, "the zero entry is empty: {gids:?}");
        assert!(gids[1].carries("10.77.0.1".parse().unwrap()) && gids[1].is_roce_v2());
        assert_eq!(s.devices_with_addr("10.77.0.1".parse().unwrap(), &mut ReadBudget::new(100)), ["rxe0"]);
        assert!(s.devices_with_addr("10.77.0.2".parse().unwrap(), &mut ReadBudget::new(100)).is_empty());
        assert_eq!(s.devices_with_addr("0.0.0.0".parse().unwrap(), &mut ReadBudget::new(0)), ["rxe0"]);
        assert_eq!(s.numa_node("rxe0"), None);
    }

    #[test]
    fn counters_skip_lifespan_unreadable_files_and_stop_at_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        tree(dir.path(), &[("sys/class/infiniband/rxe0/ports/1/hw_counters/broken", "n/a\n")]);
        let s = RdmaSysfs::new(dir.path());
        let mut budget = ReadBudget::new(100);
        let hw = s.counters("rxe0", 1, CounterFolder::Hardware, &mut budget);
        assert_eq!(hw, [("rcvd_pkts".into(), 98), ("rcvd_rnr_err".into(), 3), ("sent_pkts".into(), 120)]);
        assert!(s.counters("rxe0", 1, CounterFolder::Port, &mut budget).is_empty(), "rxe has no PMA counters");
        let mut budget = ReadBudget::new(2);
        assert_eq!(s.counters("rxe0", 1, CounterFolder::Hardware, &mut budget).len(), 1, "broken, rcvd_pkts");
        assert!(budget.exhausted());
        assert_eq!(s.active_mtu("rxe0", 1), Some(4096));
    }

    #[test]
    fn roce_mtu_follows_the_kernel_rule() {
        assert_eq!(roce_mtu(9000), Some(4096));
        assert_eq!(roce_mtu(NETDEV_MTU_FOR_4096), Some(4096));
        assert_eq!(roce_mtu(NETDEV_MTU_FOR_4096 - 1), Some(2048));
        assert_eq!(roce_mtu(1500), Some(1024));
        assert_eq!(roce_mtu(300), None);
    }
}
