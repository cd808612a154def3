//! Replays the `tcp_connection` fuzz corpus (`fuzz/corpus/tcp_connection/`) through the same entry point the fuzz
//! target uses (`nvmf_target::fuzzing`), so what the fuzzer found keeps being checked by `cargo test`.

use std::path::PathBuf;

#[test]
fn tcp_connection() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tcp_connection");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(panic) = std::panic::catch_unwind(|| nvmf_target::fuzzing::tcp_connection(&data)) {
            panic!("tcp_connection: input {} fails: {panic:?}", path.display());
        }
        count += 1;
    }
    assert!(count > 0, "corpus {} is empty", dir.display());
    eprintln!("tcp_connection: replayed {count} inputs");
}

/// The seeds written by `fuzz/seed-corpus.py` get where they are meant to: an I/O queue whose commands (writes in
/// capsule and through R2T, reads, flush, write zeroes, deallocate, compare) succeed, with and without digests and
/// with 4 KiB R2Ts; the kernel's own association (its commands longer than our MDTS aside).
#[test]
fn seeds_reach_io() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tcp_connection");
    for (seed, io_successes) in [
        ("seed-io", 11),
        ("seed-io-digests", 11),
        ("seed-io-small", 11),
        ("seed-io-placed", 11),
        ("seed-kernel-nodigest-association", 6),
        ("seed-kernel-digest-association", 6),
    ] {
        let data = std::fs::read(dir.join(seed)).unwrap_or_else(|e| panic!("{seed}: {e}"));
        let responses = nvmf_target::fuzzing::run(&data);
        let io = responses.get(1).unwrap_or_else(|| panic!("{seed}: no I/O connection"));
        let ok = io.iter().filter(|c| c.status.is_success()).count();
        assert_eq!(ok, io_successes, "{seed}: I/O queue responses {io:?}");
    }
}

/// The authentication and reservation seeds reach their paths: the keyed host's admin queue runs a transaction to
/// its Failure1 (Connect, the Negotiate, the Challenge, the Reply and the Failure1 answered; then the queue takes
/// nothing more) and a Receive before any Negotiate gets a Failure1 at once; the reservation commands on the I/O
/// queue and the features on the admin queue succeed.
#[test]
fn seeds_reach_authentication_and_reservations() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tcp_connection");
    let responses = nvmf_target::fuzzing::run(&std::fs::read(dir.join("seed-auth")).expect("seed-auth"));
    let ok = |c: &[nvmf_common::nvme::CompletionQueueEntry]| c.iter().filter(|c| c.status.is_success()).count();
    assert_eq!(ok(&responses[0]), 5, "the keyed host's transaction: {:?}", responses[0]);
    assert_eq!(ok(&responses[1]), 2, "Connect, then the Receive that fails the transaction: {:?}", responses[1]);
    // The ffdhe2048 Negotiate's key pair, made on the authentication pool, and the Challenge that carries it.
    let challenge = responses.get(3).map(|c| ok(c));
    assert_eq!(challenge, Some(3), "Connect, Negotiate and the Challenge of ffdhe2048: {:?}", responses.get(3));
    let responses = nvmf_target::fuzzing::run(&std::fs::read(dir.join("seed-reservations")).expect("seed"));
    assert_eq!(ok(&responses[1]), 8, "Connect and the reservation commands: {:?}", responses[1]);
    assert_eq!(ok(&responses[0]), 7, "the association and the features and log: {:?}", responses[0]);
}
