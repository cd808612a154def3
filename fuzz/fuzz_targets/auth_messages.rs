//! Fuzz target: see `nvmf_common::fuzzing::auth_messages`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::auth_messages(data));
