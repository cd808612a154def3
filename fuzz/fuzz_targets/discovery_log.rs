//! Fuzz target: see `nvmf_common::fuzzing::discovery_log`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::discovery_log(data));
