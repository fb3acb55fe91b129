//! `client_key`: see `tollgate::fuzzing::client_key` for the input format and invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate::fuzzing::client_key(data));
