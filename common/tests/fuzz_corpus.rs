//! Replays every fuzz corpus in `fuzz/corpus/<target>/` through the same entry point the fuzz target uses
//! (`nvmf_common::fuzzing`), so what the fuzzer found keeps being checked by `cargo test`.

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            panic!("{target}: input {} fails: {panic:?}", path.display());
        }
        count += 1;
    }
    assert!(count > 0, "corpus {} is empty", dir.display());
    eprintln!("{target}: replayed {count} inputs");
}

#[test]
fn tcp_pdu_stream() {
    replay("tcp_pdu_stream", nvmf_common::fuzzing::tcp_pdu_stream);
}

#[test]
fn sqe_views() {
    replay("sqe_views", nvmf_common::fuzzing::sqe_views);
}

#[test]
fn connect_data() {
    replay("connect_data", nvmf_common::fuzzing::connect_data);
}

#[test]
fn discovery_log() {
    replay("discovery_log", nvmf_common::fuzzing::discovery_log);
}

#[test]
fn rdma_private_data() {
    replay("rdma_private_data", nvmf_common::fuzzing::rdma_private_data);
}

#[test]
fn admin_data() {
    replay("admin_data", nvmf_common::fuzzing::admin_data);
}

#[test]
fn auth_messages() {
    replay("auth_messages", nvmf_common::fuzzing::auth_messages);
}

#[test]
fn psk_identity() {
    replay("psk_identity", nvmf_common::fuzzing::psk_identity);
}
