//! `config`: see `tollgate::fuzzing::config` for the input format and invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate::fuzzing::config(data));
