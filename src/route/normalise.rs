//! Path normalisation: the one spelling of a request path that routes are
//! matched against, that limits see, and that is forwarded upstream
//! (docs/protocols.md).
//!
//! First, in every mode, these are errors (each answered with a 400):
//!
//! - a byte that cannot be in a path at all: controls, space, DEL, `#`, `?`,
//!   anything non-ASCII, and a raw `\` (servers built on the WHATWG URL
//!   parser, and many frameworks, read `\` as `/`, so `/public\..\admin`
//!   would reach `/admin` behind a `/public` route's limits);
//! - a `%` without two hex digits;
//! - an encoded control byte (`%00` to `%1F`, `%7F`);
//! - encoded bytes above `%7F` that do not form valid UTF-8: overlong forms
//!   (`%C0%AF` and `%E0%80%AF` are `/` to a lax decoder), surrogates, a
//!   sequence cut short. So no encoded byte ever decodes to `/` or `\`
//!   except `%2F` and `%5C` themselves.
//!
//! Then `%2F` and `%5C` (either case) are handled by the mode,
//! [`EscapedSlashes`] (`server.escaped_slashes`):
//!
//! - `Reject` (the default): a 400.
//! - `Decode`: each becomes `/` (a `\` is a `/` to a lax upstream), before
//!   anything else, so `/api%2Fadmin` is routed, limited and forwarded as
//!   `/api/admin`, and `/x/..%2Fadmin` as `/admin`.
//! - `Keep`: kept encoded (hex uppercased), as data inside a segment.
//!
//! With `Reject` and `Decode`, a double-encoded octet is a 400 too: `%25`
//! followed by two hex digits, either written (`%252F`) or themselves
//! encoded unreserved characters (`%25%32%46`). Decoding is done once, so
//! the gateway would read `%252F` as the text `%2F` in a segment and
//! forward it so; an upstream that decodes twice would read a `/` there
//! (or any other character: `%2561` is `a`), a path the gateway never
//! routed. `Keep` trusts the upstream to decode once, and forwards `%25` as
//! it came.
//!
//! Then, within each segment:
//!
//! 1. Percent-encodings of unreserved characters (`ALPHA DIGIT - . _ ~`) are
//!    decoded; every other percent-encoding is kept with its hex uppercased
//!    (`%c3%a9` -> `%C3%A9`).
//! 2. Printable ASCII that RFC 3986 forbids in a path but the `http` crate
//!    lets through (`" < > [ ] ^ ` { | }`) is percent-encoded, so what goes
//!    upstream is always a valid path.
//! 3. Only then are `.` and `..` segments resolved (RFC 3986 §5.2.4), so
//!    `/%2e%2e/` is a dot segment too, and empty segments are dropped
//!    (`//a///b` -> `/a/b`). A trailing slash is kept. A `..` that would
//!    climb above the root is a 400.
//!
//! `;` is a sub-delimiter like any other: `/api;x/admin` is the segments
//! `api;x` and `admin`, as RFC 3986 reads it.
//!
//! Most request paths are already canonical, so [`normalise_path`] first
//! checks them in one pass without allocating and only builds a new string
//! when it must.

use std::borrow::Cow;

pub use crate::config::EscapedSlashes;

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
    /// A raw `\`, in every mode.
    #[error("backslash in path")]
    Backslash,
    /// `%00` to `%1F` or `%7F`, in every mode.
    #[error("encoded control character in path")]
    EncodedControl,
    /// Encoded bytes above `%7F` that are not valid UTF-8 (`%C0%AF`).
    #[error("encoded bytes in path are not valid UTF-8")]
    InvalidUtf8,
    /// `%2F` or `%5C` with `escaped_slashes: reject`.
    #[error("encoded slash or backslash in path")]
    EscapedSlash,
    /// `%25` followed by two hex digits, with `escaped_slashes: reject` or
    /// `decode`.
    #[error("double percent-encoding in path")]
    DoubleEncoding,
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
        b'"' | b'<' | b'>' | b'[' | b']' | b'^' | b'`' | b'{' | b'|' | b'}' => Class::Encode,
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

/// The octet of the escape at `path[i]` (a `%`), if two hex digits follow.
fn escape_at(path: &[u8], i: usize) -> Option<u8> {
    let h = path.get(i + 1).copied().and_then(hex_val)?;
    let l = path.get(i + 2).copied().and_then(hex_val)?;
    Some(h << 4 | l)
}

/// Normalise the path part of an origin-form request target (no query)
/// under `mode`.
///
/// The input should start with `/`; the result always does. Returns the
/// input unchanged (borrowed) when it is already canonical, which is the
/// common case. See the module docs for the rules.
pub fn normalise_path(path: &str, mode: EscapedSlashes) -> Result<Cow<'_, str>, NormaliseError> {
    if check(path.as_bytes(), mode)? {
        return Ok(Cow::Borrowed(path));
    }
    let path = match mode {
        EscapedSlashes::Decode => decode_slashes(path),
        EscapedSlashes::Reject | EscapedSlashes::Keep => Cow::Borrowed(path),
    };
    normalise_slow(path.as_bytes()).map(Cow::Owned)
}

/// One pass over the input: every error of the module docs but a `..`
/// above the root (that needs the segments resolved), and whether
/// `normalise_slow` would return `path` unchanged. Conservative about the
/// latter: anything unusual goes to the slow path.
fn check(path: &[u8], mode: EscapedSlashes) -> Result<bool, NormaliseError> {
    if path.first() != Some(&b'/') {
        return Err(NormaliseError::InvalidCharacter);
    }
    let mut canonical = true;
    let mut utf8 = Utf8::default();
    let mut seg_start = 1;
    let mut i = 1;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let v = escape_at(path, i).ok_or(NormaliseError::BadPercentEncoding)?;
            utf8.byte(v)?;
            // Lowercase hex and encoded unreserved characters are respelled.
            canonical &=
                !path[i + 1..i + 3].iter().any(u8::is_ascii_lowercase) && !is_unreserved(v);
            match v {
                0x00..=0x1F | 0x7F => return Err(NormaliseError::EncodedControl),
                b'/' | b'\\' => match mode {
                    EscapedSlashes::Reject => return Err(NormaliseError::EscapedSlash),
                    EscapedSlashes::Decode => canonical = false,
                    EscapedSlashes::Keep => {}
                },
                b'%' if mode != EscapedSlashes::Keep && hex_pair_follows(path, i + 3) => {
                    return Err(NormaliseError::DoubleEncoding)
                }
                _ => {}
            }
            i += 3;
            continue;
        }
        match class(b) {
            Class::Keep => {}
            Class::Encode => canonical = false,
            Class::Reject if b == b'/' => {
                // An empty segment (`//`) or a dot segment before this slash.
                if i == seg_start || is_dot_segment(&path[seg_start..i]) {
                    canonical = false;
                }
                seg_start = i + 1;
            }
            Class::Reject if b == b'\\' => return Err(NormaliseError::Backslash),
            Class::Reject => return Err(NormaliseError::InvalidCharacter),
        }
        utf8.byte(b)?;
        i += 1;
    }
    utf8.end()?;
    // The last segment; empty means a trailing slash, which is kept.
    Ok(canonical && !is_dot_segment(&path[seg_start..]))
}

/// Whether the two characters at `path[j..]` are hex digits once encoded
/// unreserved characters are decoded (`2F`, `%32%46`): after a `%25`, an
/// upstream that decodes twice would read an escape there.
fn hex_pair_follows(path: &[u8], mut j: usize) -> bool {
    for _ in 0..2 {
        let (c, len) = match path.get(j) {
            Some(b'%') => match escape_at(path, j) {
                Some(v) => (v, 3),
                None => return false,
            },
            Some(&c) => (c, 1),
            None => return false,
        };
        if !c.is_ascii_hexdigit() {
            return false;
        }
        j += len;
    }
    true
}

/// A UTF-8 validator fed one byte at a time (RFC 3629 §4, as
/// `str::from_utf8` checks): rejects overlong forms, surrogates, code
/// points above U+10FFFF and sequences cut short.
#[derive(Debug, Default)]
struct Utf8 {
    /// Continuation bytes still expected.
    need: u8,
    /// The range the next continuation byte must be in.
    lo: u8,
    hi: u8,
}

impl Utf8 {
    fn byte(&mut self, b: u8) -> Result<(), NormaliseError> {
        if self.need > 0 {
            if !(self.lo..=self.hi).contains(&b) {
                return Err(NormaliseError::InvalidUtf8);
            }
            self.need -= 1;
            (self.lo, self.hi) = (0x80, 0xBF);
            return Ok(());
        }
        (self.need, self.lo, self.hi) = match b {
            0x00..=0x7F => return Ok(()),
            0xC2..=0xDF => (1, 0x80, 0xBF),
            0xE0 => (2, 0xA0, 0xBF),
            0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
            0xED => (2, 0x80, 0x9F),
            0xF0 => (3, 0x90, 0xBF),
            0xF1..=0xF3 => (3, 0x80, 0xBF),
            0xF4 => (3, 0x80, 0x8F),
            // Continuation bytes without a lead, C0/C1 (always overlong), F5-FF.
            _ => return Err(NormaliseError::InvalidUtf8),
        };
        Ok(())
    }

    fn end(&self) -> Result<(), NormaliseError> {
        if self.need > 0 {
            return Err(NormaliseError::InvalidUtf8);
        }
        Ok(())
    }
}

/// `decode`: every `%2F` and `%5C`, either case, becomes `/`. `path` has
/// passed [`check`], so every `%` has two hex digits.
fn decode_slashes(path: &str) -> Cow<'_, str> {
    let b = path.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        if matches!(escape_at(b, i), Some(b'/' | b'\\')) {
            out.push_str(&path[copied..i]);
            out.push('/');
            copied = i + 3;
        }
        i += 3;
    }
    if copied == 0 {
        return Cow::Borrowed(path);
    }
    out.push_str(&path[copied..]);
    Cow::Owned(out)
}

fn is_dot_segment(seg: &[u8]) -> bool {
    seg == b"." || seg == b".."
}

/// The general case, on a path that passed [`check`] (and in `decode`,
/// [`decode_slashes`]): decode and re-encode each segment into a new
/// string, then resolve it as a dot segment if it decoded to one.
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
    use EscapedSlashes::{Decode, Keep, Reject};

    const MODES: [EscapedSlashes; 3] = [Reject, Decode, Keep];

    fn norm_in(mode: EscapedSlashes, p: &str) -> Result<String, NormaliseError> {
        normalise_path(p, mode).map(Cow::into_owned)
    }

    /// The same answer in every mode.
    fn norm_all(p: &str) -> Result<String, NormaliseError> {
        let first = norm_in(Reject, p);
        for mode in MODES {
            assert_eq!(norm_in(mode, p), first, "{p} in {mode:?}");
        }
        first
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        for p in [
            "/",
            "/users",
            "/users/",
            "/users/7",
            "/%25",
            "/100%25off",
            "/%C3%A9",
            "/a:b@c!$&'()*+,;=",
            "/.a/..b/...",
        ] {
            for mode in MODES {
                assert!(
                    matches!(normalise_path(p, mode), Ok(Cow::Borrowed(s)) if s == p),
                    "{p} {mode:?}"
                );
            }
        }
        for p in ["/a%2Fb", "/a%5Cb", "/%252F", "/%2541"] {
            assert!(
                matches!(normalise_path(p, Keep), Ok(Cow::Borrowed(s)) if s == p),
                "{p}"
            );
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded() {
        assert_eq!(norm_all("/%7Euser").unwrap(), "/~user");
        assert_eq!(norm_all("/%41%62%2d%5f%30").unwrap(), "/Ab-_0");
        assert_eq!(norm_all("/us%65rs/7").unwrap(), "/users/7");
    }

    #[test]
    fn other_escapes_are_uppercased_and_kept() {
        assert_eq!(norm_all("/%c3%a9").unwrap(), "/%C3%A9");
        assert_eq!(norm_all("/a%20b%3fc%23").unwrap(), "/a%20b%3Fc%23");
        assert_eq!(norm_all("/%25").unwrap(), "/%25");
        // `%25` not followed by two hex digits is a plain percent sign.
        assert_eq!(norm_all("/50%25off").unwrap(), "/50%25off");
        assert_eq!(norm_all("/%25%2e").unwrap(), "/%25.");
        assert_eq!(norm_all("/%25/2F").unwrap(), "/%25/2F");
    }

    #[test]
    fn reject_refuses_escaped_slashes() {
        for p in [
            "/a%2Fb",
            "/a%2fb",
            "/a%5Cb",
            "/a%5cb",
            "/%2F",
            "/a/..%2F..%2Fb",
            "/api%2Fadmin",
        ] {
            assert_eq!(norm_in(Reject, p), Err(NormaliseError::EscapedSlash), "{p}");
        }
    }

    #[test]
    fn decode_reads_escaped_slashes_as_separators() {
        for (p, want) in [
            ("/api%2Fadmin", "/api/admin"),
            ("/api%2fadmin", "/api/admin"),
            ("/api%5Cadmin", "/api/admin"),
            ("/api%5cadmin", "/api/admin"),
            ("/api%2F%2Fadmin%2F", "/api/admin/"),
            ("/x/..%2Fapi%2Fadmin", "/api/admin"),
            ("/api/x%2F..%2Fadmin", "/api/admin"),
            ("/api/x%5C%2e%2e%5Cadmin", "/api/admin"),
            ("/api%2F.%2Fadmin", "/api/admin"),
            ("%2F", "/"),
            ("/a%2Fb%3F", "/a/b%3F"),
        ] {
            // A path must start with a raw `/`.
            let want = if p.starts_with('/') {
                Ok(want.to_string())
            } else {
                Err(NormaliseError::InvalidCharacter)
            };
            assert_eq!(norm_in(Decode, p), want, "{p}");
        }
        assert_eq!(
            norm_in(Decode, "/a%2F..%2F..%2Fb"),
            Err(NormaliseError::DotDotAboveRoot)
        );
    }

    #[test]
    fn keep_leaves_escaped_slashes_as_data() {
        assert_eq!(norm_in(Keep, "/a%2fb").unwrap(), "/a%2Fb");
        assert_eq!(norm_in(Keep, "/a%5cb").unwrap(), "/a%5Cb");
        assert_eq!(norm_in(Keep, "/api%2Fadmin").unwrap(), "/api%2Fadmin");
        // An encoded slash is data, never a separator.
        assert_eq!(norm_in(Keep, "/a/..%2F..%2Fb").unwrap(), "/a/..%2F..%2Fb");
        assert_eq!(norm_in(Keep, "/a/..%2f").unwrap(), "/a/..%2F");
        // Decoding is done once: `%252e` is an encoded '%' then "2e".
        assert_eq!(norm_in(Keep, "/%252e").unwrap(), "/%252e");
        assert_eq!(norm_in(Keep, "/api%252fadmin").unwrap(), "/api%252fadmin");
    }

    #[test]
    fn double_encoding_is_refused_unless_keep() {
        for p in [
            "/api%252Fadmin",
            "/api%252fadmin",
            "/api%255Cadmin",
            "/%2561pi",
            "/%252e%252e/x",
            "/%25252F",
            "/%25%32%46",
            "/%25%32f",
            "/%252%66",
            "/%2500",
            "/%25C0%25AF",
            "/%25ff",
        ] {
            for mode in [Reject, Decode] {
                assert_eq!(
                    norm_in(mode, p),
                    Err(NormaliseError::DoubleEncoding),
                    "{p} {mode:?}"
                );
            }
            assert!(norm_in(Keep, p).is_ok(), "{p}");
        }
        // The decoded `%25%32%46` is `%252F`: kept as the text, never decoded again.
        assert_eq!(norm_in(Keep, "/%25%32%46").unwrap(), "/%252F");
    }

    #[test]
    fn controls_nul_and_backslash_are_refused_in_every_mode() {
        for (p, e) in [
            ("/a%00", NormaliseError::EncodedControl),
            ("/api%00/admin", NormaliseError::EncodedControl),
            ("/a%0A", NormaliseError::EncodedControl),
            ("/a%0d%0a", NormaliseError::EncodedControl),
            ("/a%1F", NormaliseError::EncodedControl),
            ("/a%7f", NormaliseError::EncodedControl),
            ("/a\\b", NormaliseError::Backslash),
            ("\\api", NormaliseError::InvalidCharacter),
            ("/api\\..\\admin", NormaliseError::Backslash),
            ("/a\0", NormaliseError::InvalidCharacter),
            ("/a\tb", NormaliseError::InvalidCharacter),
            ("/a\rb", NormaliseError::InvalidCharacter),
            ("/\u{7f}", NormaliseError::InvalidCharacter),
        ] {
            assert_eq!(norm_all(p), Err(e), "{p:?}");
        }
    }

    #[test]
    fn escaped_bytes_must_be_utf8() {
        for p in [
            // Overlong `/`, `\` and `.`: a lax decoder reads them as ASCII.
            "/api%C0%AFadmin",
            "/api%c0%afadmin",
            "/api%E0%80%AFadmin",
            "/api%F0%80%80%AFadmin",
            "/api%C1%9Cadmin",
            "/%C0%AE%C0%AE/x",
            // A lone continuation byte, a cut sequence, Latin-1, a surrogate,
            // above U+10FFFF, bytes that never appear.
            "/%80",
            "/%C3",
            "/%C3/%A9",
            "/%C3a",
            "/caf%E9",
            "/%ED%A0%80",
            "/%F4%90%80%80",
            "/%FF",
        ] {
            assert_eq!(norm_all(p), Err(NormaliseError::InvalidUtf8), "{p}");
        }
        assert_eq!(norm_all("/%F0%9F%A6%80").unwrap(), "/%F0%9F%A6%80");
        assert_eq!(norm_all("/%ef%bc%8f").unwrap(), "/%EF%BC%8F");
    }

    #[test]
    fn dot_segments_are_resolved() {
        assert_eq!(norm_all("/a/./b").unwrap(), "/a/b");
        assert_eq!(norm_all("/a/b/../c").unwrap(), "/a/c");
        assert_eq!(norm_all("/a/.").unwrap(), "/a/");
        assert_eq!(norm_all("/a/..").unwrap(), "/");
        assert_eq!(norm_all("/a/b/..").unwrap(), "/a/");
        assert_eq!(norm_all("/.").unwrap(), "/");
        assert_eq!(norm_all("/./").unwrap(), "/");
        assert_eq!(norm_all("/a/./").unwrap(), "/a/");
        assert_eq!(norm_all("/a/b/c/../../d").unwrap(), "/a/d");
        // `..;` is not a dot segment (RFC 3986); `;` is data.
        assert_eq!(norm_all("/x/..;/a").unwrap(), "/x/..;/a");
    }

    #[test]
    fn encoded_dot_segments_are_resolved_after_decoding() {
        assert_eq!(norm_all("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(norm_all("/a/.%2E/b").unwrap(), "/b");
        assert_eq!(norm_all("/a/%2E/b").unwrap(), "/a/b");
        assert_eq!(norm_all("/public/%2e%2e/admin").unwrap(), "/admin");
        assert_eq!(
            norm_all("/%2e%2e/etc"),
            Err(NormaliseError::DotDotAboveRoot)
        );
    }

    #[test]
    fn slashes_are_merged_and_trailing_kept() {
        assert_eq!(norm_all("//a///b").unwrap(), "/a/b");
        assert_eq!(norm_all("//").unwrap(), "/");
        assert_eq!(norm_all("/a//").unwrap(), "/a/");
        assert_eq!(norm_all("/a/b/").unwrap(), "/a/b/");
        assert_eq!(
            norm_all("//./..//").err(),
            Some(NormaliseError::DotDotAboveRoot)
        );
    }

    #[test]
    fn dotdot_above_root_is_an_error() {
        for p in ["/..", "/../a", "/a/../..", "/a/../../b", "/./..", "/%2E%2E"] {
            assert_eq!(norm_all(p), Err(NormaliseError::DotDotAboveRoot), "{p}");
        }
    }

    #[test]
    fn bad_percent_encoding_is_an_error() {
        for p in ["/%", "/a%2", "/a%zz", "/%g1", "/a/%/b", "/%%41", "/%u002F"] {
            assert_eq!(norm_all(p), Err(NormaliseError::BadPercentEncoding), "{p}");
        }
    }

    #[test]
    fn invalid_characters_are_errors() {
        for p in ["/a b", "/a#b", "/a?b", "/caf\u{e9}", "a/b", ""] {
            assert_eq!(norm_all(p), Err(NormaliseError::InvalidCharacter), "{p:?}");
        }
    }

    #[test]
    fn tolerated_ascii_is_encoded() {
        assert_eq!(
            norm_all("/{\"k\"}|^`<>[]").unwrap(),
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
            2 => prop::sample::select(vec![
                "%2e", "%2E", "%2f", "%2F", "%5C", "%5c", "%", "%4", "\\", "!", ":", "@", "{", ";",
                "%25", "%00", "%0a", "%C0%AF", "%c3%a9", "%E0%80%AF", "%F0%9F%A6%80",
            ])
            .prop_map(str::to_string),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|v| format!("/{}", v.concat()))
    }

    fn any_mode() -> impl Strategy<Value = EscapedSlashes> {
        prop::sample::select(MODES.to_vec())
    }

    fn upper_hex_val(b: u8) -> Option<u8> {
        hex_val(b).filter(|_| !b.is_ascii_lowercase())
    }

    /// Check the output invariants of a path normalised under `mode`.
    fn assert_canonical(out: &str, mode: EscapedSlashes) {
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
                let v = h << 4 | l;
                assert!(!is_unreserved(v), "{out}");
                assert!(!v.is_ascii_control(), "{out}");
                if mode != Keep {
                    assert!(v != b'/' && v != b'\\', "{out}");
                }
            } else {
                assert!(c == b'/' || class(c) == Class::Keep, "{out}");
            }
        }
        // What an upstream that percent-decodes reads: valid UTF-8, and no
        // separator the gateway did not see.
        let once = percent_encoding::percent_decode_str(out)
            .decode_utf8()
            .expect("escapes decode to UTF-8");
        assert!(!once.contains('\0'), "{out}");
        if mode != Keep {
            assert!(!once.contains('\\'), "{out}");
            assert_eq!(once.matches('/').count(), out.matches('/').count(), "{out}");
            // A second decoding changes nothing.
            assert_eq!(
                percent_encoding::percent_decode_str(&once)
                    .decode_utf8()
                    .ok(),
                Some(once.clone()),
                "{out}"
            );
        }
    }

    proptest! {
        #[test]
        fn normalise_is_idempotent_and_canonical(p in any_path(), mode in any_mode()) {
            if let Ok(once) = normalise_path(&p, mode) {
                assert_canonical(&once, mode);
                let twice = normalise_path(&once, mode).expect("a normalised path normalises");
                // The canonical form takes the allocation-free path.
                prop_assert!(matches!(twice, Cow::Borrowed(_)));
                prop_assert_eq!(&*twice, &*once);
            }
        }

        #[test]
        fn fast_path_agrees_with_slow_path(p in any_path(), mode in any_mode()) {
            if check(p.as_bytes(), mode) == Ok(true) {
                prop_assert_eq!(normalise_slow(p.as_bytes()), Ok(p.clone()));
            }
        }

        #[test]
        fn modes_differ_only_on_escaped_slashes_and_double_encoding(p in any_path()) {
            let upper = p.to_ascii_uppercase();
            let keep = normalise_path(&p, Keep);
            if !upper.contains("%2F") && !upper.contains("%5C") {
                prop_assert_eq!(normalise_path(&p, Decode), normalise_path(&p, Reject));
                if !upper.contains("%25") {
                    prop_assert_eq!(normalise_path(&p, Reject), keep);
                }
            } else if keep.is_ok() {
                let reject = normalise_path(&p, Reject);
                prop_assert!(
                    matches!(reject, Err(NormaliseError::EscapedSlash | NormaliseError::DoubleEncoding)),
                    "{:?}", reject
                );
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
            prop_assume!(normalise_path(&canonical, Keep).is_ok_and(|c| c == canonical));

            let variant = respell(&canonical, seed);
            let normalised = normalise_path(&variant, Keep).expect("a respelling stays valid");
            prop_assert_eq!(&*normalised, &*canonical, "variant {}", variant);
            for m in ["/", "/api", "/api/", "/users", "/a", "/a/b", "/a/b/c"] {
                let m = PathMatch::Prefix(m.to_string());
                prop_assert_eq!(path_matches(&m, &normalised), path_matches(&m, &canonical));
            }
            // Without escaped slashes, the other modes agree; with `decode`,
            // any separator may be spelled `%2F` or `%5C`.
            if !canonical.contains("%2F") && !canonical.contains("%5C") {
                prop_assert_eq!(normalise_path(&variant, Reject), Ok(Cow::Borrowed(&*canonical)));
                let slashed = escape_separators(&variant, seed);
                let decoded = normalise_path(&slashed, Decode);
                prop_assert_eq!(decoded.as_deref(), Ok(&*canonical), "variant {}", slashed);
            }
        }
    }

    /// `path` with each `/` but the first spelled `%2F`, `%2f`, `%5C` or
    /// `%5c` at random.
    fn escape_separators(path: &str, seed: u64) -> String {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
        let mut out = String::from("/");
        for c in path[1..].chars() {
            match (c, rng.u8(0..5)) {
                ('/', 0) => out.push_str("%2F"),
                ('/', 1) => out.push_str("%2f"),
                ('/', 2) => out.push_str("%5C"),
                ('/', 3) => out.push_str("%5c"),
                (c, _) => out.push(c),
            }
        }
        out
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
