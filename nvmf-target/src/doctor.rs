//! `nvmf-target doctor`: what a target configuration needs of this machine, for the checks of
//! `nvmf_service::doctor`: RDMA for its RDMA listeners' addresses, locked memory and huge pages for its reactors'
//! buffer pools (sized as the daemon sizes them, [`crate::daemon::engine_config`]), the NIC's NUMA node against
//! `[reactors] cpus`, io_uring for storage I/O, and each RBD image reachable through its cluster. Runs once on
//! the operator's command line; reads the configuration, sysfs and procfs, creates (and drops) one io_uring, and
//! opens (and closes) each RBD image.

use std::path::Path;

use nvmf_config::target::{ListenerTransport, NamespaceBackend, TlsMode};
use nvmf_config::TargetConfig;
use nvmf_service::doctor::memory::size;
use nvmf_service::doctor::modules::ModuleNeed;
use nvmf_service::doctor::report::{Finding, Level};
use nvmf_service::doctor::{self, Cpus, HugePagesWanted, Needs, Pinned, RdmaUse, Report};

use crate::backend::{Storage, StorageSpec};

use crate::metrics::rnic::rdma_listener_addrs;

/// What `config` needs of the machine.
pub fn needs(config: &TargetConfig) -> Needs {
    let pool =
        crate::daemon::engine_config(config).pool_bytes().map_or(u64::MAX, |b| u64::try_from(b).unwrap_or(u64::MAX));
    let reactors = u64::try_from(config.reactors.threads).unwrap_or(u64::MAX);
    let addrs = rdma_listener_addrs(config);
    Needs {
        program: "nvmf-target",
        rdma: if addrs.is_empty() { RdmaUse::None } else { RdmaUse::Listeners(addrs) },
        cpus: Some(Cpus { cpus: config.reactors.cpus.clone(), key: "[reactors] cpus" }),
        // Each reactor registers its whole pool with io_uring and with every RDMA device it serves.
        pinned: Some(Pinned {
            bytes: reactors.saturating_mul(pool),
            what: format!("{reactors} reactor(s) × {} buffer pool", size(pool)),
        }),
        hugepages: Some(HugePagesWanted { regions: reactors, bytes: pool }),
        io_uring: (true, "storage I/O"),
        modules: tls_listeners(config)
            .then_some(ModuleNeed {
                name: "tls",
                what: "kTLS for listeners with tls (without it their records are relayed in user space, slower)",
                missing: Level::Warn,
            })
            .into_iter()
            .collect(),
    }
}

/// Whether a listener secures connections with TLS.
fn tls_listeners(config: &TargetConfig) -> bool {
    config.listeners.iter().any(|l| matches!(l.transport, ListenerTransport::Tcp(t) if t.tls != TlsMode::None))
}

/// Check the machine under `root` (`/`) for `config`.
pub fn diagnose(config: &TargetConfig, root: &Path) -> Report {
    let mut report = doctor::diagnose(root, &needs(config), &doctor::io_uring::probe());
    for finding in rbd_images(config) {
        report.ok &= finding.level != Level::Fail;
        report.findings.push(finding);
    }
    report
}

/// Each RBD namespace's image: opened through its cluster as the daemon will (its size), or why not.
fn rbd_images(config: &TargetConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    for s in &config.subsystems {
        for ns in &s.namespaces {
            let NamespaceBackend::Rbd(image) = &ns.backend else { continue };
            let check = format!("rbd {} (subsystem {}, nsid {})", image, s.nqn, ns.nsid);
            let spec = crate::daemon::rbd_spec(image, &config.limits);
            let opened = Storage::open(&StorageSpec::Rbd { spec, block_size: ns.block_size });
            findings.push(match opened {
                Ok(storage) => {
                    Finding::ok(check, format!("reachable as client.{}: {}", image.ceph_id, size(storage.capacity())))
                }
                Err(e) => {
                    let mut why = e.to_string();
                    let mut source = std::error::Error::source(&e);
                    while let Some(cause) = source {
                        why.push_str(": ");
                        why.push_str(&cause.to_string());
                        source = cause.source();
                    }
                    Finding::fail(
                        check,
                        why,
                        format!(
                            "check the monitors and keyring {} names, and the image: rbd -c {} --id {} info {}",
                            image.ceph_conf.display(),
                            image.ceph_conf.display(),
                            image.ceph_id,
                            image
                        ),
                    )
                }
            });
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_follow_the_configuration() {
        let config = TargetConfig::from_str(
            "[reactors]\nthreads = 2\ncpus = [0, 1]\n[target]\nmdts = \"2MiB\"\n\
             [[listener]]\naddress = \"10.77.0.1\"\ntransport = \"rdma\"\n[[listener]]\naddress = \"127.0.0.1\"\n",
            "t.toml",
        )
        .unwrap();
        let n = needs(&config);
        assert_eq!(n.rdma, RdmaUse::Listeners(vec!["10.77.0.1".parse().unwrap()]));
        assert_eq!(n.cpus.unwrap().cpus, [0, 1]);
        // 32 large buffers of the MDTS and 512 small ones of 64 KiB, per reactor.
        let pool = 32 * (2 << 20) + 512 * (64 << 10);
        assert_eq!(n.pinned.unwrap(), Pinned { bytes: 2 * pool, what: "2 reactor(s) × 96 MiB buffer pool".into() });
        assert_eq!(n.hugepages, Some(HugePagesWanted { regions: 2, bytes: pool }));

        let tcp = TargetConfig::from_str("[[listener]]\naddress = \"127.0.0.1\"\n", "t.toml").unwrap();
        assert_eq!(needs(&tcp).rdma, RdmaUse::None);
        assert!(needs(&tcp).modules.is_empty(), "no TLS listener: no tls module");
        let tls =
            TargetConfig::from_str("[[listener]]\naddress = \"127.0.0.1\"\ntls = \"allowed\"\n", "t.toml").unwrap();
        let modules = needs(&tls).modules;
        assert_eq!(modules.iter().map(|m| (m.name, m.missing)).collect::<Vec<_>>(), [("tls", Level::Warn)]);
    }
}
