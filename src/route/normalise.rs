//! Path normalisation: the one spelling of a request path that routes are
//! matched against and that is forwarded upstream (SPEC §3).
//!
//! The rules, applied in this order within each segment:
//!
//! 1. Percent-encodings of unreserved characters (`ALPHA DIGIT - . _ ~`) are
//!    decoded; every other percent-encoding is kept with its hex uppercased
//!    (`%2f` -> `%2F`). `%2F` and `%5C` therefore stay encoded: an encoded
//!    slash is data, never a separator.
//! 2. Printable ASCII that RFC 3986 forbids in a path but the `http` crate
//!    lets through (`" < > [ \ ] ^ ` { | }`) is percent-encoded, so what goes
//!    upstream is always a valid path. This matters most for `\`: servers
//!    built on the WHATWG URL parser treat a raw `\` as `/`, which would let
//!    `/public\..\admin` reach `/admin` behind a `/public` route's limits.
//! 3. Only then are `.` and `..` segments resolved (RFC 3986 §5.2.4), so
//!    `/%2e%2e/` is a dot segment too, and empty segments are dropped
//!    (`//a///b` -> `/a/b`). A trailing slash is kept.
//!
//! A `..` that would climb above the root, a `%` without two hex digits, and
//! bytes that cannot be in a path at all (controls, space, DEL, `#`, `?`,
//! anything non-ASCII) are errors, answered with a 400.
//!
//! Most request paths are already canonical, so [`normalise_path`] first
//! scans without allocating and only builds a new string when it must.

use std::borrow::Cow;

/// Why a request path was rejected; every variant is answered with a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NormaliseError {
    /// A `..` segment would go above the root (`/a/../../b`).
    #[error("path climbs above the root with '..'")]
    DotDotAboveRoot,
    /// A `%` not followed by two hex digits.
    #[error("invalid percent-encoding in path")]
    BadPercentEncoding,
    /// A byte that cannot appear in a path (control, space, DEL, `#`, `?`,
    /// non-ASCII), or a path that does not start with `/`.
    #[error("invalid character in path")]
    InvalidCharacter,
}

/// What a byte of the input path is, for the scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Kept as is: unreserved, sub-delims, `:`, `@`.
    Keep,
    /// Tolerated on input but percent-encoded on output.
    Encode,
    /// Not allowed anywhere in a path.
    Reject,
}

const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

const fn class(b: u8) -> Class {
    if is_unreserved(b) {
        return Class::Keep;
    }
    match b {
        // sub-delims, ':' and '@' (RFC 3986 pchar)
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':'
        | b'@' => Class::Keep,
        b'"' | b'<' | b'>' | b'[' | b'\\' | b']' | b'^' | b'`' | b'{' | b'|' | b'}' => {
            Class::Encode
        }
        _ => Class::Reject,
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Normalise the path part of an origin-form request target (no query).
///
/// The input should start with `/`; the result always does. Returns the
/// input unchanged (borrowed) when it is already canonical, which is the
/// common case. See the module docs for the rules.
pub fn normalise_path(path: &str) -> Result<Cow<'_, str>, NormaliseError> {
    if is_canonical(path.as_bytes()) {
        Ok(Cow::Borrowed(path))
    } else {
        normalise_slow(path.as_bytes()).map(Cow::Owned)
    }
}

/// Whether `normalise_slow` would return `path` unchanged. Conservative:
/// anything unusual goes to the slow path, which also finds the errors.
fn is_canonical(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return false;
    }
    let mut seg_start = 1;
    let mut i = 1;
    while i < path.len() {
        match path[i] {
            b'/' => {
                // An empty segment (`//`) or a dot segment before this slash.
                if i == seg_start || is_dot_segment(&path[seg_start..i]) {
                    return false;
                }
                seg_start = i + 1;
            }
            b'%' => {
                let (Some(&h), Some(&l)) = (path.get(i + 1), path.get(i + 2)) else {
                    return false;
                };
                // Lowercase hex is not canonical, so only 0-9A-F pass here.
                let (Some(hv), Some(lv)) = (upper_hex_val(h), upper_hex_val(l)) else {
                    return false;
                };
                if is_unreserved(hv << 4 | lv) {
                    return false;
                }
                i += 2;
            }
            b => {
                if class(b) != Class::Keep {
                    return false;
                }
            }
        }
        i += 1;
    }
    // The last segment; empty means a trailing slash, which is kept.
    !is_dot_segment(&path[seg_start..])
}

fn upper_hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_dot_segment(seg: &[u8]) -> bool {
    seg == b"." || seg == b".."
}

/// The general case: decode and re-encode each segment into a new string,
/// then resolve it as a dot segment if it decoded to one.
fn normalise_slow(path: &[u8]) -> Result<String, NormaliseError> {
    let Some((&b'/', mut rest)) = path.split_first() else {
        return Err(NormaliseError::InvalidCharacter);
    };
    let mut out = String::with_capacity(path.len());
    out.push('/');
    // Invariant: between segments `out` is "/" or ends with "<segment>/".
    // Whether the last segment was a real one (no trailing slash to keep).
    let mut ends_in_segment;
    loop {
        let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let (seg, tail) = rest.split_at(end);
        let start = out.len();
        decode_segment(seg, &mut out)?;
        // Dot segments are recognised on the decoded text, so `%2e%2E` is `..`.
        ends_in_segment = match &out[start..] {
            // An empty segment: a repeated or trailing slash.
            "" => false,
            "." => {
                out.truncate(start);
                false
            }
            ".." => {
                out.truncate(start);
                if start == 1 {
                    return Err(NormaliseError::DotDotAboveRoot);
                }
                // Drop the previous segment: `out` is "…/prev/"; keep "…/".
                let prev = out[..start - 1].rfind('/').map_or(0, |p| p + 1);
                out.truncate(prev);
                false
            }
            _ => {
                out.push('/');
                true
            }
        };
        match tail.split_first() {
            Some((_, next)) => rest = next,
            None => break,
        }
    }
    if ends_in_segment {
        out.pop();
    }
    Ok(out)
}

/// Append the canonical spelling of one segment (no `/` in it) to `out`.
fn decode_segment(seg: &[u8], out: &mut String) -> Result<(), NormaliseError> {
    let mut i = 0;
    while i < seg.len() {
        let b = seg[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (
                seg.get(i + 1).copied().and_then(hex_val),
                seg.get(i + 2).copied().and_then(hex_val),
            ) else {
                return Err(NormaliseError::BadPercentEncoding);
            };
            let v = h << 4 | l;
            if is_unreserved(v) {
                out.push(char::from(v));
            } else {
                push_escape(out, v);
            }
            i += 3;
            continue;
        }
        match class(b) {
            Class::Keep => out.push(char::from(b)),
            Class::Encode => push_escape(out, b),
            Class::Reject => return Err(NormaliseError::InvalidCharacter),
        }
        i += 1;
    }
    Ok(())
}

fn push_escape(out: &mut String, v: u8) {
    out.push('%');
    out.push(char::from(HEX_UPPER[usize::from(v >> 4)]));
    out.push(char::from(HEX_UPPER[usize::from(v & 0xF)]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PathMatch;
    use crate::route::matcher::path_matches;
    use proptest::prelude::*;

    fn norm(p: &str) -> Result<String, NormaliseError> {
        normalise_path(p).map(Cow::into_owned)
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        for p in [
            "/",
            "/users",
            "/users/",
            "/users/7",
            "/a%2Fb",
            "/a%5Cb",
            "/%25",
            "/a:b@c!$&'()*+,;=",
            "/.a/..b/...",
        ] {
            assert!(
                matches!(normalise_path(p), Ok(Cow::Borrowed(s)) if s == p),
                "{p}"
            );
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded() {
        assert_eq!(norm("/%7Euser").unwrap(), "/~user");
        assert_eq!(norm("/%41%62%2d%5f%30").unwrap(), "/Ab-_0");
        assert_eq!(norm("/us%65rs/7").unwrap(), "/users/7");
    }

    #[test]
    fn other_escapes_are_uppercased_and_kept() {
        assert_eq!(norm("/a%2fb").unwrap(), "/a%2Fb");
        assert_eq!(norm("/a%5cb").unwrap(), "/a%5Cb");
        assert_eq!(norm("/a%2Fb").unwrap(), "/a%2Fb");
        assert_eq!(norm("/%c3%a9").unwrap(), "/%C3%A9");
        assert_eq!(norm("/%00").unwrap(), "/%00");
        // Decoding is done once: `%252e` is an encoded '%' then "2e".
        assert_eq!(norm("/%252e").unwrap(), "/%252e");
    }

    #[test]
    fn encoded_slash_is_not_a_separator() {
        assert_eq!(norm("/a/..%2F..%2Fb").unwrap(), "/a/..%2F..%2Fb");
        assert_eq!(norm("/a/..%2f").unwrap(), "/a/..%2F");
    }

    #[test]
    fn dot_segments_are_resolved() {
        assert_eq!(norm("/a/./b").unwrap(), "/a/b");
        assert_eq!(norm("/a/b/../c").unwrap(), "/a/c");
        assert_eq!(norm("/a/.").unwrap(), "/a/");
        assert_eq!(norm("/a/..").unwrap(), "/");
        assert_eq!(norm("/a/b/..").unwrap(), "/a/");
        assert_eq!(norm("/.").unwrap(), "/");
        assert_eq!(norm("/./").unwrap(), "/");
        assert_eq!(norm("/a/./").unwrap(), "/a/");
        assert_eq!(norm("/a/b/c/../../d").unwrap(), "/a/d");
    }

    #[test]
    fn encoded_dot_segments_are_resolved_after_decoding() {
        assert_eq!(norm("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(norm("/a/.%2E/b").unwrap(), "/b");
        assert_eq!(norm("/a/%2E/b").unwrap(), "/a/b");
        assert_eq!(norm("/public/%2e%2e/admin").unwrap(), "/admin");
        assert_eq!(norm("/%2e%2e/etc"), Err(NormaliseError::DotDotAboveRoot));
    }

    #[test]
    fn slashes_are_merged_and_trailing_kept() {
        assert_eq!(norm("//a///b").unwrap(), "/a/b");
        assert_eq!(norm("//").unwrap(), "/");
        assert_eq!(norm("/a//").unwrap(), "/a/");
        assert_eq!(norm("/a/b/").unwrap(), "/a/b/");
        assert_eq!(
            norm("//./..//").err(),
            Some(NormaliseError::DotDotAboveRoot)
        );
    }

    #[test]
    fn dotdot_above_root_is_an_error() {
        for p in ["/..", "/../a", "/a/../..", "/a/../../b", "/./..", "/%2E%2E"] {
            assert_eq!(norm(p), Err(NormaliseError::DotDotAboveRoot), "{p}");
        }
    }

    #[test]
    fn bad_percent_encoding_is_an_error() {
        for p in ["/%", "/a%2", "/a%zz", "/%g1", "/a/%/b", "/%%41"] {
            assert_eq!(norm(p), Err(NormaliseError::BadPercentEncoding), "{p}");
        }
    }

    #[test]
    fn invalid_characters_are_errors() {
        for p in [
            "/a b",
            "/a\tb",
            "/a\0",
            "/a#b",
            "/a?b",
            "/caf\u{e9}",
            "/\u{7f}",
            "a/b",
            "",
        ] {
            assert_eq!(norm(p), Err(NormaliseError::InvalidCharacter), "{p:?}");
        }
    }

    #[test]
    fn tolerated_ascii_is_encoded() {
        assert_eq!(norm("/a\\..\\admin").unwrap(), "/a%5C..%5Cadmin");
        assert_eq!(
            norm("/{\"k\"}|^`<>[]").unwrap(),
            "/%7B%22k%22%7D%7C%5E%60%3C%3E%5B%5D"
        );
    }

    // ---- property tests ----

    /// Arbitrary paths, weighted towards the interesting bytes.
    fn any_path() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            3 => "[a-zA-Z0-9~_-]{1,3}",
            2 => Just("/".to_string()),
            2 => Just(".".to_string()),
            1 => Just("..".to_string()),
            2 => "%[0-9a-fA-F]{2}",
            1 => prop::sample::select(vec!["%2e", "%2E", "%2f", "%5C", "%", "%4", "\\", "!", ":", "@", "{"])
                .prop_map(str::to_string),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|v| format!("/{}", v.concat()))
    }

    /// Check the output invariants of a normalised path.
    fn assert_canonical(out: &str) {
        assert!(out.starts_with('/'), "{out}");
        assert!(!out.contains("//"), "{out}");
        for seg in out.split('/') {
            assert!(seg != "." && seg != "..", "{out}");
        }
        let b = out.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            if c == b'%' {
                let h = upper_hex_val(b[i + 1]).expect("uppercase hex");
                let l = upper_hex_val(b[i + 2]).expect("uppercase hex");
                assert!(!is_unreserved(h << 4 | l), "{out}");
            } else {
                assert!(c == b'/' || class(c) == Class::Keep, "{out}");
            }
        }
    }

    proptest! {
        #[test]
        fn normalise_is_idempotent_and_canonical(p in any_path()) {
            if let Ok(once) = normalise_path(&p) {
                assert_canonical(&once);
                let twice = normalise_path(&once).expect("a normalised path normalises");
                // The canonical form takes the allocation-free path.
                prop_assert!(matches!(twice, Cow::Borrowed(_)));
                prop_assert_eq!(&*twice, &*once);
            }
        }

        #[test]
        fn fast_path_agrees_with_slow_path(p in any_path()) {
            if is_canonical(p.as_bytes()) {
                prop_assert_eq!(normalise_slow(p.as_bytes()), Ok(p.clone()));
            }
        }

        #[test]
        fn spellings_of_a_path_normalise_alike(
            prefix in prop::sample::select(vec!["", "/api", "/users", "/a/b"]),
            segs in prop::collection::vec("[a-zA-Z0-9._~-]{1,6}|%2F|%5C|%C3%A9", 0..6),
            trailing in any::<bool>(),
            seed in any::<u64>(),
        ) {
            // A canonical path: no dot segments among the generated ones.
            let segs: Vec<&str> = segs.iter().map(String::as_str).filter(|s| *s != "." && *s != "..").collect();
            let mut canonical = prefix.to_string();
            for s in &segs {
                canonical.push('/');
                canonical.push_str(s);
            }
            if canonical.is_empty() || trailing {
                canonical.push('/');
            }
            prop_assume!(normalise_path(&canonical).is_ok_and(|c| c == canonical));

            let variant = respell(&canonical, seed);
            let normalised = normalise_path(&variant).expect("a respelling stays valid");
            prop_assert_eq!(&*normalised, &*canonical, "variant {}", variant);
            for m in ["/", "/api", "/api/", "/users", "/a", "/a/b", "/a/b/c"] {
                let m = PathMatch::Prefix(m.to_string());
                prop_assert_eq!(path_matches(&m, &normalised), path_matches(&m, &canonical));
            }
        }
    }

    /// Respell a canonical path without changing what it normalises to:
    /// insert `./` and `x/../`, double slashes, and percent-encode unreserved
    /// characters (also inside the inserted dot segments) in random case.
    fn respell(canonical: &str, seed: u64) -> String {
        let mut rng = fastrand::Rng::with_seed(seed);
        let trailing = canonical.ends_with('/');
        let segs: Vec<&str> = canonical.split('/').filter(|s| !s.is_empty()).collect();
        let mut tokens: Vec<String> = Vec::new();
        for s in &segs {
            for _ in 0..rng.usize(0..3) {
                match rng.u8(0..3) {
                    0 => tokens.push(".".into()),
                    1 => {
                        tokens.push("x".into());
                        tokens.push("..".into());
                    }
                    _ => tokens.push(String::new()),
                }
            }
            tokens.push((*s).to_string());
        }
        let mut out = String::new();
        for t in &tokens {
            out.push('/');
            if rng.bool() {
                out.push('/');
            }
            let b = t.as_bytes();
            let mut i = 0;
            while i < b.len() {
                // Existing escapes keep their meaning; only their case changes.
                if b[i] == b'%' {
                    let esc = &t[i..i + 3];
                    out.push_str(&if rng.bool() {
                        esc.to_ascii_lowercase()
                    } else {
                        esc.to_string()
                    });
                    i += 3;
                } else if rng.u8(0..3) == 0 {
                    let hex = format!("%{:02X}", b[i]);
                    out.push_str(&if rng.bool() {
                        hex.to_ascii_lowercase()
                    } else {
                        hex
                    });
                    i += 1;
                } else {
                    out.push(char::from(b[i]));
                    i += 1;
                }
            }
        }
        if trailing || out.is_empty() {
            out.push('/');
            if rng.bool() {
                out.push_str("./");
            }
        }
        out
    }
}
