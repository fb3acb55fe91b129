//! `h1_framing`: see `tollgate::fuzzing::h1_framing` for the input format and invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate::fuzzing::h1_framing(data));
