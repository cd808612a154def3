//! Fuzz target: see `nvmf_common::fuzzing::sqe_views`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::sqe_views(data));
