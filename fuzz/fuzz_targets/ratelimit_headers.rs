//! `ratelimit_headers`: see `tollgate::fuzzing::ratelimit_headers` for the
//! input format and invariants; the fields it writes must also parse with
//! the `sfv` crate, an RFC 9651 parser written by others.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for field in tollgate::fuzzing::ratelimit_headers(data) {
        let parsed = sfv::Parser::new(field.as_bytes()).parse::<sfv::List>();
        assert!(parsed.is_ok(), "{field:?}: {parsed:?}");
    }
});
