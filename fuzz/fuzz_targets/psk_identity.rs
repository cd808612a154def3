//! Fuzz target: see `nvmf_common::fuzzing::psk_identity`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::psk_identity(data));
