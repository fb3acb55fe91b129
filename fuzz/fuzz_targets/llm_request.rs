//! `llm_request`: see `tollgate::fuzzing::llm_request` for the input format and invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate::fuzzing::llm_request(data));
