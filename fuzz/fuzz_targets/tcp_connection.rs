//! Fuzz target: see `nvmf_target::fuzzing::tcp_connection`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_target::fuzzing::tcp_connection(data));
