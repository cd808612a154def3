//! RDMA checks over sysfs and `/dev`: devices and their device nodes, each port's state and RoCE MTU against its
//! netdev's MTU, a RoCEv2 GID for each configured address, and ECN where the driver shows it (mlx5).

use std::net::IpAddr;
use std::path::Path;

use super::report::Finding;
use crate::rdma_sysfs::{read_attribute, roce_mtu, PortState, RdmaSysfs, ReadBudget, NETDEV_MTU_FOR_4096};

/// GID entries one check reads at most (rxe has 1024 per port).
const MAX_GID_FILES: usize = 16384;

/// The RDMA devices and the device nodes userspace verbs and RDMA CM open.
pub fn devices(sysfs: &RdmaSysfs) -> Finding {
    let check = "rdma devices";
    let names = sysfs.devices();
    if names.is_empty() {
        return Finding::fail(
            check,
            "no RDMA device in /sys/class/infiniband",
            "load your NIC's RDMA driver, or add Soft-RoCE: rdma link add rxe0 type rxe netdev IF",
        );
    }
    let dev = sysfs.root().join("dev/infiniband");
    let uverbs = std::fs::read_dir(&dev)
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("uverbs")).count())
        .unwrap_or(0);
    let rdma_cm = dev.join("rdma_cm").exists();
    match (uverbs, rdma_cm) {
        (0, _) => Finding::fail(
            check,
            format!("{} present, but no /dev/infiniband/uverbs*", names.join(", ")),
            "modprobe ib_uverbs (and check udev made the nodes: ls -l /dev/infiniband)",
        ),
        (_, false) => Finding::fail(
            check,
            format!("{} present, but no /dev/infiniband/rdma_cm", names.join(", ")),
            "modprobe rdma_ucm",
        ),
        (n, true) => Finding::ok(check, format!("{} ({n} uverbs node(s), rdma_cm)", names.join(", "))),
    }
}

/// Each port of `devices`: ACTIVE, and for Ethernet ports the RoCE MTU its netdev's MTU allows.
pub fn ports(sysfs: &RdmaSysfs, devices: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    for device in devices {
        for port in sysfs.ports(device) {
            out.push(port_finding(sysfs, device, port));
        }
    }
    out
}

fn port_finding(sysfs: &RdmaSysfs, device: &str, port: u32) -> Finding {
    let check = format!("port {device}/{port}");
    let phys = sysfs.phys_state(device, port).unwrap_or_else(|| "physical state unknown".into());
    match sysfs.port_state(device, port) {
        Some(PortState { id: PortState::ACTIVE, .. }) => {}
        state => {
            let state = state.map_or_else(|| "state unreadable".to_owned(), |s| s.name);
            return Finding::fail(
                check,
                format!("{state} ({phys}): it carries no traffic"),
                "bring the link up (ip link set IF up; check the cable/switch port), then see ibv_devinfo",
            );
        }
    }
    let layer = sysfs.link_layer(device, port).unwrap_or_default();
    if layer != "Ethernet" {
        return Finding::ok(check, format!("ACTIVE ({phys}), link layer {layer}"));
    }
    let Some(netdev) = sysfs.netdev(device, port) else {
        return Finding::info(check, format!("ACTIVE ({phys}); its netdev is not readable, so its MTU is unchecked"));
    };
    let Some(mtu) = sysfs.netdev_mtu(&netdev) else {
        return Finding::info(check, format!("ACTIVE ({phys}) on {netdev}, whose MTU is not readable"));
    };
    match roce_mtu(mtu) {
        Some(4096) => Finding::ok(check, format!("ACTIVE ({phys}), RoCE MTU 4096 ({netdev} MTU {mtu})")),
        Some(roce) => Finding::warn(
            check,
            format!("ACTIVE, but RoCE MTU {roce} only: {netdev}'s MTU is {mtu}"),
            format!(
                "ip link set dev {netdev} mtu 9000 ({NETDEV_MTU_FOR_4096} or more gives RoCE MTU 4096; the switch \
                 ports must carry it too)"
            ),
        ),
        None => Finding::fail(
            check,
            format!("{netdev}'s MTU {mtu} leaves no room for a 256-byte RoCE MTU"),
            format!("ip link set dev {netdev} mtu 9000"),
        ),
    }
}

/// For each configured address: a RoCEv2 GID that carries it (what RDMA CM binds to). A wildcard address needs
/// one on some device.
pub fn listener_gids(sysfs: &RdmaSysfs, addrs: &[IpAddr]) -> Vec<Finding> {
    let mut budget = ReadBudget::new(MAX_GID_FILES);
    addrs.iter().map(|&addr| address_gid(sysfs, addr, &mut budget)).collect()
}

fn address_gid(sysfs: &RdmaSysfs, addr: IpAddr, budget: &mut ReadBudget) -> Finding {
    let check = format!("gid {addr}");
    let mut v1 = None;
    let mut infiniband = false;
    for device in sysfs.devices() {
        for port in sysfs.ports(&device) {
            infiniband |= sysfs.link_layer(&device, port).as_deref() == Some("InfiniBand");
            for gid in sysfs.gids(&device, port, budget) {
                let fits = match addr {
                    IpAddr::V4(a) if a.is_unspecified() => gid.gid.to_ipv4_mapped().is_some(),
                    IpAddr::V6(a) if a.is_unspecified() => true,
                    _ => gid.carries(addr),
                };
                if !fits {
                    continue;
                }
                if gid.is_roce_v2() {
                    // A wildcard listener is served by any of them: name the one found.
                    let which = if addr.is_unspecified() { format!(" ({})", gid.gid) } else { String::new() };
                    return Finding::ok(check, format!("RoCEv2 GID {}{which} of {device} port {port}", gid.index));
                }
                v1.get_or_insert(format!("{device} port {port} GID {} is {}", gid.index, gid.kind.unwrap_or_default()));
            }
        }
    }
    if let Some(v1) = v1 {
        return Finding::warn(
            check,
            format!("no RoCEv2 GID, only {v1}"),
            "use RoCEv2 (UDP, routable): load the NIC's RoCEv2 support, or set the RDMA CM default (cma_roce_mode)",
        );
    }
    if infiniband {
        return Finding::info(check, "no GID carries it: on InfiniBand the address is IPoIB's, resolved by RDMA CM");
    }
    let fix = if addr.is_unspecified() {
        "put an IP address on the RDMA NIC's netdev (ip addr add ADDR dev IF)".to_owned()
    } else {
        format!(
            "put {addr} on the RDMA NIC's netdev (ip addr add {addr}/24 dev IF), or for Soft-RoCE: rdma link add rxe0 \
             type rxe netdev IF"
        )
    };
    Finding::fail(check, "no RDMA device has a GID for it: binding it fails with ENODEV", fix)
}

/// For a host (no local address configured): some device has a RoCEv2 GID, or an InfiniBand port.
pub fn any_gid(sysfs: &RdmaSysfs) -> Finding {
    let unspecified = IpAddr::from([0, 0, 0, 0]);
    let mut f = address_gid(sysfs, unspecified, &mut ReadBudget::new(MAX_GID_FILES));
    f.check = "gid".to_owned();
    f
}

/// ECN (and where to look for PFC) of the netdevs under `devices`' Ethernet ports. mlx5 shows its RoCE ECN
/// switches in `/sys/class/net/<if>/ecn/roce_{np,rp}/enable/<priority>`; PFC is not in sysfs (`dcb pfc show`).
pub fn ecn(sysfs: &RdmaSysfs, devices: &[String]) -> Vec<Finding> {
    let mut netdevs: Vec<String> = devices
        .iter()
        .flat_map(|d| sysfs.ports(d).into_iter().map(move |p| (d, p)))
        .filter(|(d, p)| sysfs.link_layer(d, *p).as_deref() == Some("Ethernet"))
        .filter_map(|(d, p)| sysfs.netdev(d, p))
        .collect();
    netdevs.sort();
    netdevs.dedup();
    netdevs.iter().map(|n| netdev_ecn(sysfs.root(), n)).collect()
}

fn netdev_ecn(root: &Path, netdev: &str) -> Finding {
    let check = format!("ecn {netdev}");
    let dir = root.join("sys/class/net").join(netdev).join("ecn");
    let enabled = |role: &str| -> Option<Vec<u32>> {
        let read = std::fs::read_dir(dir.join(role).join("enable")).ok()?;
        let mut on: Vec<u32> = read
            .filter_map(Result::ok)
            .filter(|e| read_attribute(&e.path()).as_deref() == Some("1"))
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        on.sort_unstable();
        Some(on)
    };
    match (enabled("roce_np"), enabled("roce_rp")) {
        (Some(np), Some(rp)) if !np.is_empty() && !rp.is_empty() => Finding::ok(
            check,
            format!("RoCE ECN on: notification point on priorities {np:?}, reaction point on {rp:?}"),
        ),
        (Some(_), Some(_)) => Finding::warn(
            check,
            "RoCE ECN (DCQCN) is off for some role: congestion is then handled by PFC pauses alone",
            format!("echo 1 > /sys/class/net/{netdev}/ecn/roce_np/enable/PRIO and …/roce_rp/enable/PRIO for the RoCE priority"),
        ),
        _ => Finding::info(
            check,
            format!("PFC/ECN not readable for {netdev} (sysfs shows ECN only for mlx5); PFC: dcb pfc show dev {netdev}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Level;
    use crate::rdma_sysfs::tests::{rxe, tree};

    #[test]
    fn devices_need_their_device_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let s = RdmaSysfs::new(dir.path());
        assert_eq!(devices(&s).level, Level::Fail);
        rxe(dir.path(), 9000);
        assert!(devices(&s).finding.contains("no /dev/infiniband/uverbs"));
        tree(dir.path(), &[("dev/infiniband/uverbs0", "")]);
        assert!(devices(&s).finding.contains("no /dev/infiniband/rdma_cm"));
        tree(dir.path(), &[("dev/infiniband/rdma_cm", "")]);
        let f = devices(&s);
        assert_eq!((f.level, f.finding.as_str()), (Level::Ok, "rxe0 (1 uverbs node(s), rdma_cm)"));
    }

    #[test]
    fn ports_are_active_and_their_mtu_fits_4096() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        let s = RdmaSysfs::new(dir.path());
        let dev = ["rxe0".to_owned()];
        let f = &ports(&s, &dev)[0];
        assert_eq!((f.level, f.check.as_str()), (Level::Ok, "port rxe0/1"));
        assert!(f.finding.contains("RoCE MTU 4096 (dummy0 MTU 9000)"), "{f:?}");
        tree(dir.path(), &[("sys/class/net/dummy0/mtu", "1500\n")]);
        let f = &ports(&s, &dev)[0];
        assert_eq!(f.level, Level::Warn);
        assert!(f.finding.contains("RoCE MTU 1024") && f.fix.as_ref().unwrap().contains("mtu 9000"), "{f:?}");
        tree(dir.path(), &[("sys/class/infiniband/rxe0/ports/1/state", "1: DOWN\n")]);
        let f = &ports(&s, &dev)[0];
        assert_eq!(f.level, Level::Fail);
        assert!(f.finding.starts_with("DOWN (5: LinkUp)"), "{f:?}");
    }

    #[test]
    fn a_listener_address_needs_a_roce_v2_gid() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        let s = RdmaSysfs::new(dir.path());
        let addr = |a: &str| a.parse::<IpAddr>().unwrap();
        let f = listener_gids(&s, &[addr("10.77.0.1"), addr("10.77.0.9"), addr("0.0.0.0")]);
        assert_eq!((f[0].level, f[0].finding.as_str()), (Level::Ok, "RoCEv2 GID 1 of rxe0 port 1"));
        assert_eq!(f[1].level, Level::Fail);
        assert!(f[1].finding.contains("ENODEV") && f[1].fix.as_ref().unwrap().contains("10.77.0.9"));
        assert_eq!(f[2].level, Level::Ok, "a wildcard is served by any IPv4 GID: {:?}", f[2]);
        assert_eq!(any_gid(&s).level, Level::Ok);
        tree(dir.path(), &[("sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1", "IB/RoCE v1\n")]);
        let f = &listener_gids(&s, &[addr("10.77.0.1")])[0];
        assert_eq!(f.level, Level::Warn);
        assert!(f.finding.contains("IB/RoCE v1"), "{f:?}");
    }

    #[test]
    fn ecn_where_mlx5_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        rxe(dir.path(), 9000);
        let s = RdmaSysfs::new(dir.path());
        let dev = ["rxe0".to_owned()];
        let f = &ecn(&s, &dev)[0];
        assert_eq!((f.level, f.check.as_str()), (Level::Info, "ecn dummy0"));
        assert!(f.finding.contains("not readable"));
        let e = "sys/class/net/dummy0/ecn";
        tree(dir.path(), &[(&format!("{e}/roce_np/enable/3"), "0\n"), (&format!("{e}/roce_rp/enable/3"), "1\n")]);
        assert_eq!(ecn(&s, &dev)[0].level, Level::Warn);
        tree(dir.path(), &[(&format!("{e}/roce_np/enable/3"), "1\n")]);
        let f = &ecn(&s, &dev)[0];
        assert_eq!(f.level, Level::Ok);
        assert!(f.finding.contains("priorities [3]"), "{f:?}");
    }
}
