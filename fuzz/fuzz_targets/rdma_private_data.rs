//! Fuzz target: see `nvmf_common::fuzzing::rdma_private_data`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_common::fuzzing::rdma_private_data(data));
