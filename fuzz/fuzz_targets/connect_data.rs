//! Fuzz target: see `nvmf_common::fuzzing::connect_data`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::connect_data(data));
