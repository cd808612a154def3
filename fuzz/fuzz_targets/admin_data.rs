//! Fuzz target: see `nvmf_common::fuzzing::admin_data`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::admin_data(data));
