//! The annotated example configuration loads, covers every key, and prints back as itself.

use std::path::Path;

use nvmf_config::target::{ListenerTransport, NamespaceBackend, RbdImage, RdmaOptions};
use nvmf_config::TargetConfig;

fn example_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/target.toml")
}

#[test]
fn example_config_loads() {
    let config = TargetConfig::from_file(example_path()).unwrap();
    assert_eq!(config.listeners.len(), 2);
    assert_eq!(config.listeners[0].to_string(), "tcp://0.0.0.0:4420");
    assert_eq!(config.listeners[1].to_string(), "rdma://[::]:8009");
    assert_eq!(
        config.listeners[1].transport,
        ListenerTransport::Rdma(RdmaOptions { send_with_invalidate: true, srq: false })
    );
    assert_eq!(config.reactors.threads, 2);
    assert_eq!(config.subsystems.len(), 2);
    let example = &config.subsystems[0];
    assert!(!example.allow_any_host);
    let nsids: Vec<u32> = example.namespaces.iter().map(|ns| ns.nsid).collect();
    assert_eq!(nsids, [1, 2, 10, 11]);
    assert_eq!(example.namespaces[1].backend, NamespaceBackend::Memory { size: 1 << 30 });
    assert_eq!(
        example.namespaces[3].backend,
        NamespaceBackend::Rbd(RbdImage {
            pool: "rbd".into(),
            rados_namespace: "nvmf".into(),
            image: "disk1".into(),
            ceph_conf: "/etc/ceph/ceph.conf".into(),
            ceph_id: "nvmf".into(),
        })
    );
    let scratch = &config.subsystems[1];
    assert!(scratch.allow_any_host);
    // Relative paths are taken relative to the configuration file.
    assert_eq!(
        scratch.namespaces[0].backend,
        NamespaceBackend::Path(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scratch.img"))
    );
    let printed = config.to_string();
    assert_eq!(TargetConfig::from_str(&printed, "printed").unwrap(), config);
}

/// Every key the printed (complete) configuration has appears, uncommented, in the example: the example documents
/// the whole schema.
#[test]
fn example_covers_every_key() {
    let example = std::fs::read_to_string(example_path()).unwrap();
    let config = TargetConfig::from_file(example_path()).unwrap();
    let printed = config.to_string();
    let example_keys: std::collections::HashSet<&str> = example
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| line.split_once(" = ").map(|(key, _)| key.trim()))
        .collect();
    for line in printed.lines() {
        if let Some((key, _)) = line.split_once(" = ") {
            assert!(example_keys.contains(key.trim()), "the example lacks key {key:?}");
        } else if line.starts_with('[') {
            assert!(example.contains(line), "the example lacks table {line}");
        }
    }
}
