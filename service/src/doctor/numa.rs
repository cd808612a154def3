//! NUMA: the RDMA NIC's node (`/sys/class/infiniband/<dev>/device/numa_node`) against the nodes of the CPUs the
//! data path runs on (`/sys/devices/system/cpu/cpu<N>/node<K>`): a reactor on another node reaches the NIC's
//! DMA across the interconnect.

use std::path::Path;

use super::report::Finding;
use crate::rdma_sysfs::RdmaSysfs;

/// The NUMA node of CPU `cpu` (`None`: no NUMA information).
fn cpu_node(root: &Path, cpu: usize) -> Option<u32> {
    let dir = std::fs::read_dir(root.join(format!("sys/devices/system/cpu/cpu{cpu}"))).ok()?;
    dir.filter_map(Result::ok).find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

/// The machine's NUMA nodes.
fn nodes(root: &Path) -> usize {
    std::fs::read_dir(root.join("sys/devices/system/node"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("node"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}

/// The data path's CPUs as configured (empty: not pinned) and the setting that holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpus {
    /// The CPUs.
    pub cpus: Vec<usize>,
    /// Where they are configured (`[reactors] cpus`).
    pub key: &'static str,
}

/// `device`'s node against `cpus` (`None`: the daemon's threads are not configurable; the node is information).
pub fn numa(sysfs: &RdmaSysfs, device: &str, cpus: Option<&Cpus>) -> Finding {
    let check = format!("numa {device}");
    let root = sysfs.root();
    let Some(node) = sysfs.numa_node(device) else {
        return Finding::info(check, "the NIC reports no NUMA node (-1, or a software device)");
    };
    if nodes(root) <= 1 {
        return Finding::ok(check, format!("node {node}, the only node"));
    }
    let Some(Cpus { cpus, key: cpus_key }) = cpus else {
        return Finding::info(check, format!("the NIC is on node {node} of {}", nodes(root)));
    };
    if cpus.is_empty() {
        return Finding::warn(
            check,
            format!("the NIC is on node {node} and the data-path threads are not pinned"),
            format!("pin them to node {node}'s CPUs ({cpus_key}; lscpu shows each node's CPUs)"),
        );
    }
    let away: Vec<String> =
        cpus.iter().filter(|&&c| cpu_node(root, c).is_some_and(|n| n != node)).map(ToString::to_string).collect();
    if away.is_empty() {
        Finding::ok(check, format!("node {node}, as the configured CPUs"))
    } else {
        Finding::warn(
            check,
            format!("the NIC is on node {node}, CPUs {} are not", away.join(",")),
            format!("use node {node}'s CPUs in {cpus_key}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Level;
    use crate::rdma_sysfs::tests::{rxe, tree};

    #[test]
    fn nic_node_against_the_cpus() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        rxe(root, 9000);
        let s = RdmaSysfs::new(root);
        let on = |cpus: &[usize]| Cpus { cpus: cpus.to_vec(), key: "[reactors] cpus" };
        assert_eq!(numa(&s, "rxe0", Some(&on(&[0]))).level, Level::Info, "rxe has no device/numa_node");
        tree(
            root,
            &[("sys/class/infiniband/rxe0/device/numa_node", "1\n"), ("sys/devices/system/node/node0/cpulist", "0")],
        );
        assert_eq!(numa(&s, "rxe0", Some(&on(&[0]))).level, Level::Ok, "one node");
        tree(
            root,
            &[
                ("sys/devices/system/node/node1/cpulist", "1"),
                ("sys/devices/system/cpu/cpu0/node0/x", ""),
                ("sys/devices/system/cpu/cpu1/node1/x", ""),
            ],
        );
        assert_eq!(numa(&s, "rxe0", Some(&on(&[1]))).level, Level::Ok);
        let f = numa(&s, "rxe0", Some(&on(&[0, 1])));
        assert_eq!(f.level, Level::Warn);
        assert_eq!(f.finding, "the NIC is on node 1, CPUs 0 are not");
        assert_eq!(numa(&s, "rxe0", Some(&on(&[]))).level, Level::Warn);
        assert_eq!(numa(&s, "rxe0", None).finding, "the NIC is on node 1 of 2");
        tree(root, &[("sys/class/infiniband/rxe0/device/numa_node", "-1\n")]);
        assert_eq!(numa(&s, "rxe0", Some(&on(&[0]))).level, Level::Info);
    }
}
