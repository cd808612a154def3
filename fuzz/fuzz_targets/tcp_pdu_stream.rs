//! Fuzz target: see `nvmf_common::fuzzing::tcp_pdu_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::tcp_pdu_stream(data));
